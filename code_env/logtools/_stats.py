"""``code-env stats``: a log in numbers (pass rates, outcomes, returns, timing per step), as a
table (``Stats.table``) and as two histograms (``write_png``). A ``CodeAgent-v0`` episode counts
as an episode whose steps are its tool calls; its calls are counted by tool (``Stats.tools``)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._visible import visible
from ..trajectory import deleted_parts
from ._read import episodes, is_agent, outcome, streams, tool_name, turns_exhausted


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Stats:
    """A log in numbers; ``table()`` prints them."""

    files: int = 0
    episodes: int = 0  # finished (the last step terminated or truncated)
    unfinished: int = 0  # the log ends mid-episode, or the episode starts mid-way
    steps: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # the last step's outcome per finished episode
    turns_exhausted: int = 0  # finished episodes whose turns ran out (their outcome is the last program's tier)
    returns: list[float] = field(default_factory=list)  # per scored episode
    execution_ms: list[float] = field(default_factory=list)  # per step
    wall_ms: list[float] = field(default_factory=list)  # per step, from queued to judged
    turns: list[int] = field(default_factory=list)  # per finished episode
    per_task: dict[str, list[int]] = field(default_factory=dict)  # problem_id -> [solved, scored episodes]
    deleted_parts: int = 0  # parts the directory's cap deleted (code_env.trajectory): those episodes are not here
    tools: Counter[str] = field(default_factory=Counter)  # CodeAgent-v0 steps by the tool called ("unreadable call")
    tool_errors: int = 0  # CodeAgent-v0 calls answered with an error (a bad call, a refused path...)
    agent_episodes: int = 0  # of the finished episodes, CodeAgent-v0's

    @property
    def sandbox_errors(self) -> int:
        return self.outcomes["sandbox_error"]

    @property
    def judge_errors(self) -> int:
        return self.outcomes["judge_error"]

    @property
    def scored(self) -> int:
        """Finished episodes, less those the sandbox or the LLM judge's endpoint failed (drop, not
        score, those)."""
        return self.episodes - self.sandbox_errors - self.judge_errors

    @property
    def pass_rate(self) -> float:
        """Episodes that passed every public and hidden test."""
        return self.outcomes["all_tests"] / self.scored if self.scored else 0.0

    @property
    def public_rate(self) -> float:
        """Episodes that passed every public test (all_public or all_tests)."""
        return (self.outcomes["all_tests"] + self.outcomes["all_public"]) / self.scored if self.scored else 0.0

    def table(self, max_tasks: int = 20) -> str:
        s = self.scored
        lines = [f"log: {self.files} files, {self.episodes} finished episodes ({self.steps} steps), "
                 f"{self.unfinished} unfinished, {self.sandbox_errors} with a sandbox error (not scored)"
                 + (f", {self.judge_errors} with a judge error (not scored)" if self.judge_errors else "")]  # fmt: skip
        if self.deleted_parts:
            lines.append(f"rotated: the {self.deleted_parts} oldest parts were deleted to keep the log under its cap "
                         "(see deleted-parts.txt)")  # fmt: skip
        if not s:
            return "\n".join(lines)
        lines.append(f"pass rate: {self.pass_rate:.1%} all tests ({self.outcomes['all_tests']}/{s}), "
                     f"{self.public_rate:.1%} all public tests or better "
                     f"({self.outcomes['all_tests'] + self.outcomes['all_public']}/{s})")  # fmt: skip
        lines.append(f"mean return {sum(self.returns) / len(self.returns):.4g}, mean turns {sum(self.turns) / len(self.turns):.3g}")
        lines.append("outcomes (the last step of each episode):")
        for tier, n in self.outcomes.most_common():
            lines.append(f"  {visible(tier, keep_newlines=False):18} {n:6}  {n / self.episodes:6.1%}")
        if self.turns_exhausted:
            what = "turns" if not self.agent_episodes else "tool calls" if self.agent_episodes == self.episodes else "turns or tool calls"
            lines.append(f"  (the {what} ran out in {self.turns_exhausted} of them: each scored its last program's tier, "
                         "counted above)")  # fmt: skip
        lines.append("returns:")
        for label, n in _histogram(self.returns):
            lines.append(f"  {label:>17} {n:6}  {'#' * max(1, round(40 * n / len(self.returns))) if n else ''}")
        if self.tools:
            calls = sum(self.tools.values())
            lines.append(f"tool calls of CodeAgent-v0 episodes ({self.agent_episodes} finished): {calls}, "
                         f"{self.tool_errors} answered with an error")  # fmt: skip
            lines.append("  " + ", ".join(f"{visible(name, keep_newlines=False)} {n}" for name, n in self.tools.most_common()))
        lines.append(f"timing per step (ms)   {'p50':>10} {'p95':>10} {'max':>10}")
        for name, values in (("execution", self.execution_ms), ("wall, queued→judged", self.wall_ms)):
            if values:
                lines.append(f"  {name:20} {percentile(values, 50):10.1f} {percentile(values, 95):10.1f} {max(values):10.1f}")
        tasks = sorted(self.per_task.items(), key=lambda kv: (kv[1][0] / kv[1][1], kv[0]))
        lines.append(f"per task (solved/episodes{f', the {max_tasks} lowest' if len(tasks) > max_tasks else ''}):")
        for pid, (solved, n) in tasks[:max_tasks]:
            lines.append(f"  {visible(pid, keep_newlines=False):45} {solved:4}/{n:<4} {solved / n:6.1%}")
        if len(tasks) > max_tasks:
            lines.append(f"  ... {len(tasks) - max_tasks} more")
        return "\n".join(lines)


def _histogram(values: list[float], max_distinct: int = 12, bins: int = 10) -> list[tuple[str, int]]:
    """Counts per distinct value (highest first), or per equal-width bin when there are many."""
    counts = Counter(values)
    if len(counts) <= max_distinct:
        return [(f"{v:g}", n) for v, n in sorted(counts.items(), reverse=True)]
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins
    out = [0] * bins
    for v in values:
        out[min(bins - 1, int((v - lo) / width))] += 1
    return [(f"[{lo + i * width:.3g}, {lo + (i + 1) * width:.3g}{']' if i == bins - 1 else ')'}", out[i])
            for i in reversed(range(bins))]  # fmt: skip


def _wall_ms(rec: dict[str, Any]) -> float | None:
    """Milliseconds from "queued" to "judged" (or to the last state, when a budget cut the step)."""
    marks = [t for t in rec.get("transitions") or [] if isinstance(t, list) and len(t) == 2 and isinstance(t[1], (int, float))]
    queued = next((t for s, t in marks if s == "queued"), None)
    judged = next((t for s, t in marks if s == "judged"), marks[-1][1] if marks else None)
    if queued is None or judged is None:
        return None
    return max(0.0, (judged - queued) * 1000)


def stats(log: str | Path) -> Stats:
    """Pass rates, outcomes, returns and timing of a log."""
    st = Stats(files=sum(len(files) for files in streams(log)), deleted_parts=deleted_parts(log) if Path(log).is_dir() else 0)
    for ep in episodes(log, slim=True):
        st.steps += len(ep.steps)
        for step in ep.steps:
            if is_agent(step.rec):
                st.tools[tool_name(step.rec) or "unreadable call"] += 1
                st.tool_errors += bool(step.rec.get("tool_error"))
            ms = step.rec.get("execution_time_ms")
            if isinstance(ms, (int, float)) and not isinstance(ms, bool):
                st.execution_ms.append(float(ms))
            wall = _wall_ms(step.rec)
            if wall is not None:
                st.wall_ms.append(wall)
        if not (ep.complete and ep.last.ended):
            st.unfinished += 1
            continue
        st.episodes += 1
        st.agent_episodes += is_agent(ep.last.rec)
        result = outcome(ep.last.rec)
        st.outcomes[result] += 1
        st.turns_exhausted += turns_exhausted(ep.last.rec)
        if result in ("sandbox_error", "judge_error"):
            continue
        st.returns.append(ep.ret)
        st.turns.append(len(ep.steps))
        task = st.per_task.setdefault(str(ep.last.rec.get("problem_id", "?")), [0, 0])
        task[0] += result == "all_tests"
        task[1] += 1
    return st


def write_png(st: Stats, path: str | Path) -> None:
    """A reward histogram and a timing histogram. A bare ``Figure`` renders with the Agg canvas
    and needs no display; unlike ``matplotlib.use("Agg")`` it leaves pyplot's backend alone.
    Its titles and labels are counts and fixed words: no text of the log (ids, tiers, programs)
    is drawn, so none needs ``visible`` (``table`` escapes those it prints)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_r, ax_t = fig.subplots(1, 2)
    counts = Counter(st.returns)
    if 0 < len(counts) <= 20:  # the usual case: a few reward levels, one bar each
        span = (max(counts) - min(counts)) or 1.0
        ax_r.bar(list(counts), list(counts.values()), width=span / 40, color="tab:blue")
    elif counts:
        ax_r.hist(st.returns, bins=40, color="tab:blue")
    ax_r.set_title(f"returns of {st.scored} episodes (pass rate {st.pass_rate:.1%})")
    ax_r.set_xlabel("episode return")
    ax_r.set_ylabel("episodes")
    timings = [("execution", st.execution_ms, "tab:orange"), ("wall, queued→judged", st.wall_ms, "tab:green")]
    every = st.execution_ms + st.wall_ms
    if every:
        lo, hi = min(every), max(every)
        edges = [lo + (hi - lo or 1.0) * i / 30 for i in range(31)]  # shared bins: the bars line up
        for label, values, color in timings:
            if values:
                ax_t.hist(values, bins=edges, alpha=0.6, label=label, color=color)
        ax_t.legend()
    ax_t.set_title(f"time per step ({st.steps} steps)")
    ax_t.set_xlabel("ms")
    ax_t.set_ylabel("steps")
    for ax in (ax_r, ax_t):
        ax.yaxis.get_major_locator().set_params(integer=True)
    fig.savefig(path, format="png", dpi=100)
