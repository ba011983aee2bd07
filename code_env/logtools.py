"""Tools over trajectory logs (a ``.jsonl`` file or a directory of them).

``replay`` rebuilds each logged episode's environment from the record's ``config``, steps the
logged actions again and reports every reward that differs (none, for deterministic tasks).
``audit`` samples the highest-return episodes with their code and outputs, for a human to check
that the reward was earned. ``stats`` sums up pass rates, rewards and timing; ``write_png`` draws
them.

An episode is a run of consecutive records of one environment instance (its log file, and the
file's rotated parts in order) with the same ``episode`` number. Its *return* is the sum of its
step rewards: a single-turn episode's reward, a solved multi-turn episode's tier.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from registry import RegistryError, Task
from registry.verify import Runner
from sandbox import SandboxError

from .env import CodeExecEnv, EnvConfig, task_fingerprint
from .grading import shared_sandbox
from .trajectory import LogFileError, log_files, numbered_records

TIMING_BUDGETS = frozenset({"episode_time", "turn_time"})  # budgets that depend on wall-clock time
TOLERANCE = 1e-9
_HEAVY = ("prompt", "executions", "public_cases", "hidden_cases")  # not needed to replay or count
_PART = re.compile(r"^(?P<stem>.+?)(?:\.(?P<part>\d+))?\.jsonl$")

# --------------------------------------------------------------------------------- reading


@dataclass
class Step:
    """One step record and where it is in the log."""

    file: str
    line: int
    rec: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def reward(self) -> float:
        return float(self.rec["reward"])

    @property
    def ended(self) -> bool:
        return bool(self.rec.get("terminated") or self.rec.get("truncated"))

    def error(self, message: str) -> LogFileError:
        return LogFileError(self.file, self.line, message)


@dataclass
class Episode:
    steps: list[Step]

    @property
    def first(self) -> Step:
        return self.steps[0]

    @property
    def last(self) -> Step:
        return self.steps[-1]

    @property
    def complete(self) -> bool:
        """It starts at turn 0 (a log cut by hand can start mid-episode)."""
        return self.first.rec["turn"] == 0

    @property
    def ret(self) -> float:
        return round(sum(s.reward for s in self.steps), 6)


def outcome(rec: dict[str, Any]) -> str:
    """How a step ended: its reward tier, ``budget_exhausted`` when a budget cut the episode
    (the breakdown then holds the last verification's tier), or ``sandbox_error``."""
    if rec.get("sandbox_error"):
        return "sandbox_error"
    if rec.get("budget"):
        return "budget_exhausted"
    b = rec.get("reward_breakdown")
    tier = b.get("tier") if isinstance(b, dict) else None
    return str(tier) if tier else "unknown"


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _streams(log: str | Path) -> list[list[Path]]:
    """The log's files, as one list per environment instance: ``steps-<pid>-<n>.jsonl`` then its
    rotated parts ``.1.jsonl``, ``.2.jsonl``, ... in order (a plain sort puts ``.1`` first)."""
    files = log_files(log)
    if not Path(log).is_dir():
        return [files]
    groups: dict[str, list[tuple[int, Path]]] = {}
    for f in files:
        m = _PART.match(f.name)
        stem, part = (m["stem"], int(m["part"] or 0)) if m else (f.name, 0)
        groups.setdefault(stem, []).append((part, f))
    return [[f for _, f in sorted(parts)] for _, parts in sorted(groups.items(), key=lambda kv: _natural(kv[0]))]


def _numbered(f: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of one file with their line numbers; unreadable files as ``LogFileError``."""
    try:
        yield from numbered_records(f)
    except UnicodeDecodeError:
        raise LogFileError(str(f), None, "not UTF-8 text") from None
    except OSError as exc:
        raise LogFileError(str(f), None, f"cannot read: {exc.strerror or exc}") from None


def _check(step: Step) -> None:
    rec = step.rec
    for key, kinds, what in (("trace_id", (str,), "a string"), ("action", (str,), "a string"),
                             ("episode", (int,), "an integer"), ("turn", (int,), "an integer"),
                             ("reward", (int, float), "a number")):  # fmt: skip
        if key not in rec:
            raise step.error(f"not a step record: no {key!r}")
        value = rec[key]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise step.error(f"{key!r}: expected {what}, got {value!r:.60}")
    if not math.isfinite(rec["reward"]):
        raise step.error(f"'reward': expected a finite number, got {rec['reward']!r}")


def episodes(log: str | Path, *, slim: bool = False) -> Iterator[Episode]:
    """The log's episodes, in order. ``slim`` drops what replay and stats do not need (the
    prompt, the executions and the per-test results)."""
    for files in _streams(log):
        current: list[Step] = []
        for f in files:
            for line, rec in _numbered(f):
                step = Step(str(f), line, rec)
                _check(step)
                if slim:
                    step.rec = {k: v for k, v in rec.items() if k not in _HEAVY}
                if current and (rec["episode"] != current[-1].rec["episode"] or rec["turn"] <= current[-1].rec["turn"]):
                    yield Episode(current)
                    current = []
                current.append(step)
        if current:
            yield Episode(current)


# ---------------------------------------------------------------------------------- replay


@dataclass
class Difference:
    """A step whose replayed reward is not the logged one (``new_reward`` None: the replayed
    episode had already ended)."""

    trace_id: str
    where: str
    logged_reward: float
    new_reward: float | None
    logged_tier: str | None
    new_tier: str | None
    note: str = ""

    def __str__(self) -> str:
        new = "-" if self.new_reward is None else f"{self.new_reward:g} ({self.new_tier})"
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.trace_id} ({self.where}): logged {self.logged_reward:g} ({self.logged_tier}), replayed {new}{note}"


@dataclass
class ReplayReport:
    """What a replay found. ``ok``: no reward differs (timing-dependent steps aside)."""

    episodes: int = 0
    steps: int = 0
    differences: list[Difference] = field(default_factory=list)
    timing_dependent: int = 0  # re-judged steps cut by a wall-clock budget (in the log or the replay)
    timing_differences: list[Difference] = field(default_factory=list)  # of those, the differing ones
    skipped_sandbox_errors: int = 0  # logged steps where the sandbox itself failed
    replay_sandbox_errors: list[str] = field(default_factory=list)  # where the sandbox failed in the replay
    incomplete_episodes: int = 0  # not starting at turn 0: cannot be replayed
    tasks_changed: int = 0  # episodes whose task no longer matches the logged fingerprint

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        lines = [f"replayed {self.episodes} episodes, {self.steps} steps re-judged: {len(self.differences)} differ"]
        if self.timing_dependent:
            lines.append(f"timing-dependent (a wall-clock budget): {self.timing_dependent} steps, "
                         f"{len(self.timing_differences)} of them differ (not counted)")  # fmt: skip
        if self.skipped_sandbox_errors:
            lines.append(f"skipped: {self.skipped_sandbox_errors} steps with a sandbox error in the log")
        if self.incomplete_episodes:
            lines.append(f"skipped: {self.incomplete_episodes} episodes that do not start at turn 0")
        if self.replay_sandbox_errors:
            lines.append(f"not re-judged: the sandbox failed on {len(self.replay_sandbox_errors)} steps "
                         f"({', '.join(self.replay_sandbox_errors[:3])}{', ...' if len(self.replay_sandbox_errors) > 3 else ''})")  # fmt: skip
        if self.tasks_changed:
            lines.append(f"warning: the task changed since logging in {self.tasks_changed} episodes")
        lines += [f"DIFF {d}" for d in self.differences]
        lines += [f"timing {d}" for d in self.timing_differences]
        return "\n".join(lines)


def _env_builder(executor: Runner | None) -> tuple[Callable[[Step], CodeExecEnv], dict[str, CodeExecEnv]]:
    """An env per distinct config (and inline task), built from a record, without a log."""
    envs: dict[str, CodeExecEnv] = {}

    def env_for(step: Step) -> CodeExecEnv:
        raw = step.rec.get("config")
        if not isinstance(raw, dict):
            raise step.error("cannot replay: no 'config' in the record")
        try:
            cfg = EnvConfig.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise step.error(f"config.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        key = cfg.model_dump_json()
        tasks: str | list[Task] = cfg.tasks
        if cfg.tasks == "<inline>":
            try:
                task = Task.model_validate(step.rec.get("task"))
            except ValidationError as exc:
                err = exc.errors()[0]
                raise step.error(f"task.{'.'.join(map(str, err['loc']))}: {err['msg']} (an inline task set logs each task)") from None
            tasks = [task]
            key += task.model_dump_json()
        if key not in envs:
            options = cfg.model_dump(exclude={"tasks", "reward", "log_dir"})
            try:
                runner = executor if executor is not None else shared_sandbox(cfg.backend)
                envs[key] = CodeExecEnv(tasks, executor=runner, reward=cfg.reward, log_dir=None, **options)
            except (RegistryError, SandboxError, ValueError, TypeError, OSError, ImportError) as exc:
                raise step.error(f"cannot rebuild the environment: {exc}") from None
        return envs[key]

    return env_for, envs


def _replay_episode(ep: Episode, env: CodeExecEnv, report: ReplayReport) -> None:
    first = ep.first
    problem_id = first.rec.get("problem_id")
    if not isinstance(problem_id, str):
        raise first.error("cannot replay: no 'problem_id' in the record")
    try:
        env.reset(options={"problem_id": problem_id})
    except RegistryError as exc:
        raise first.error(f"cannot replay: {exc}") from None
    assert env.task is not None
    logged_fp = first.rec.get("task_fingerprint")
    changed = logged_fp is not None and logged_fp != task_fingerprint(env.task)
    report.tasks_changed += changed
    report.episodes += 1
    ended, ended_by_timing = False, False
    for step in ep.steps:
        if step.rec.get("sandbox_error"):  # our failure when logging: nothing to compare with
            report.skipped_sandbox_errors += 1
            break
        if ended:
            d = Difference(step.rec["trace_id"], step.where, step.reward, None, outcome(step.rec), None,
                           "the replayed episode had already ended")  # fmt: skip
            (report.timing_differences if ended_by_timing else report.differences).append(d)
            continue
        _, reward, terminated, truncated, info = env.step(step.rec["action"])
        if info.get("sandbox_error"):
            report.replay_sandbox_errors.append(step.where)
            break
        report.steps += 1
        timing = step.rec.get("budget") in TIMING_BUDGETS or info.get("budget") in TIMING_BUDGETS
        report.timing_dependent += timing
        if not (reward == step.reward or abs(reward - step.reward) < TOLERANCE):
            new_tier = "budget_exhausted" if info.get("budget") else info["reward_breakdown"]["tier"]
            d = Difference(step.rec["trace_id"], step.where, step.reward, reward, outcome(step.rec), new_tier,
                           "the task changed since logging" if changed else "")  # fmt: skip
            (report.timing_differences if timing else report.differences).append(d)
        ended, ended_by_timing = terminated or truncated, timing


def replay(log: str | Path, *, executor: Runner | None = None, progress: bool = False) -> ReplayReport:
    """Re-judge every logged step: rebuild each episode's environment from its record (no log is
    written), reset to the logged task, step the logged actions and compare the rewards.

    Raises ``LogFileError`` (file and line) for a log that cannot be read or replayed."""
    from tqdm import tqdm

    eps = list(episodes(log, slim=True))  # read it all first: a malformed line fails before any run
    env_for, built = _env_builder(executor)
    report = ReplayReport()
    try:
        for ep in tqdm(eps, desc="replay", unit="episode", file=sys.stderr, disable=not progress):
            if not ep.complete:
                report.incomplete_episodes += 1
                continue
            _replay_episode(ep, env_for(ep.first), report)
    finally:
        for env in built.values():
            env.close()
    return report


# ----------------------------------------------------------------------------------- audit


@dataclass
class AuditEntry:
    """One sampled episode: its return and its last step's full record."""

    ret: float
    steps: int
    where: str
    record: dict[str, Any]

    def render(self, limit: int = 1000) -> str:
        rec = self.record
        b = rec.get("reward_breakdown")
        b = b if isinstance(b, dict) else {}
        head = f"{rec['trace_id']}  return {self.ret:g}"
        if self.steps > 1:
            head += f" over {self.steps} turns (last step {rec['reward']:g})"
        lines = [head, f"  {outcome(rec)}: {b.get('explanation', '')}  [{self.where}]"]
        lines += ["--- code ---", rec["action"].rstrip("\n")]
        runs = rec.get("executions") or []
        first = runs[0] if runs and isinstance(runs[0], dict) else {}
        for name in ("stdout", "stderr"):
            text = str(first.get(name) or "")
            if text:
                lines.append(f"--- {name} (first run{', truncated' if len(text) > limit else ''}) ---")
                lines.append(_cut(text, limit).rstrip("\n"))
        cases = [c for c in rec.get("public_cases") or [] if isinstance(c, dict)]
        passed = sum(c.get("status") == "passed" for c in cases)
        lines.append(f"--- public tests: {passed}/{len(cases)} passed ---")
        for c in cases:
            row = f"  [{c.get('index')}] {c.get('status')}  input {_cut(str(c.get('input')), 120)}"
            if c.get("status") == "passed":
                row += f"  got {_cut(str(c.get('got')), 120)}"
            else:
                row += f"  expected {_cut(str(c.get('expected')), 120)}  got {_cut(str(c.get('got')), 120)}"
                if c.get("error"):
                    row += f"  error {_cut(str(c['error']), 200)}"
            lines.append(row)
        hidden = [c for c in rec.get("hidden_cases") or [] if isinstance(c, dict)]
        if hidden:
            lines.append(f"--- hidden tests: {sum(c.get('status') == 'passed' for c in hidden)}/{len(hidden)} passed ---")
        return "\n".join(lines)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"…[{len(text) - limit} more chars]"


def audit(log: str | Path, top: int = 20, seed: int = 0) -> list[AuditEntry]:
    """A seeded random sample of ``top`` episodes among those with the highest return: all at the
    maximum when there are more than ``top`` of them, else filled from the next-highest returns.
    Episodes that did not end, or ended by a sandbox failure, are left out."""
    if top < 1:
        raise ValueError(f"top: expected >= 1, got {top}")
    by_return: dict[float, list[tuple[float, int, str, int]]] = {}
    for ep in episodes(log, slim=True):
        if ep.complete and ep.last.ended and not ep.last.rec.get("sandbox_error"):
            by_return.setdefault(ep.ret, []).append((ep.ret, len(ep.steps), ep.last.file, ep.last.line))
    rng = random.Random(seed)
    chosen: list[tuple[float, int, str, int]] = []
    for value in sorted(by_return, reverse=True):
        group = by_return[value]
        chosen += rng.sample(group, min(len(group), top - len(chosen)))
        if len(chosen) >= top:
            break
    wanted: dict[str, dict[int, int]] = {}  # file -> line -> position in chosen
    for i, (_, _, f, line) in enumerate(chosen):
        wanted.setdefault(f, {})[line] = i
    records: dict[int, dict[str, Any]] = {}
    for f, lines in wanted.items():
        for line, rec in _numbered(Path(f)):
            if line in lines:
                records[lines[line]] = rec
    return [AuditEntry(ret, n, f"{f}:{line}", records[i]) for i, (ret, n, f, line) in enumerate(chosen)]


def format_audit(entries: list[AuditEntry]) -> str:
    if not entries:
        return "no finished episodes in the log"
    blocks = [f"=== {i}/{len(entries)}  {e.render()}" for i, e in enumerate(entries, start=1)]
    return "\n\n".join(blocks)


# ----------------------------------------------------------------------------------- stats


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
    returns: list[float] = field(default_factory=list)  # per scored episode
    execution_ms: list[float] = field(default_factory=list)  # per step
    wall_ms: list[float] = field(default_factory=list)  # per step, from queued to judged
    turns: list[int] = field(default_factory=list)  # per finished episode
    per_task: dict[str, list[int]] = field(default_factory=dict)  # problem_id -> [solved, scored episodes]

    @property
    def sandbox_errors(self) -> int:
        return self.outcomes["sandbox_error"]

    @property
    def scored(self) -> int:
        """Finished episodes, less those the sandbox failed (drop, not score, those)."""
        return self.episodes - self.sandbox_errors

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
                 f"{self.unfinished} unfinished, {self.sandbox_errors} with a sandbox error (not scored)"]  # fmt: skip
        if not s:
            return "\n".join(lines)
        lines.append(f"pass rate: {self.pass_rate:.1%} all tests ({self.outcomes['all_tests']}/{s}), "
                     f"{self.public_rate:.1%} all public tests or better "
                     f"({self.outcomes['all_tests'] + self.outcomes['all_public']}/{s})")  # fmt: skip
        lines.append(f"mean return {sum(self.returns) / len(self.returns):.4g}, mean turns {sum(self.turns) / len(self.turns):.3g}")
        lines.append("outcomes (the last step of each episode):")
        for tier, n in self.outcomes.most_common():
            lines.append(f"  {tier:18} {n:6}  {n / self.episodes:6.1%}")
        lines.append("returns:")
        for label, n in _histogram(self.returns):
            lines.append(f"  {label:>17} {n:6}  {'#' * max(1, round(40 * n / len(self.returns))) if n else ''}")
        lines.append(f"timing per step (ms)   {'p50':>10} {'p95':>10} {'max':>10}")
        for name, values in (("execution", self.execution_ms), ("wall, queued→judged", self.wall_ms)):
            if values:
                lines.append(f"  {name:20} {percentile(values, 50):10.1f} {percentile(values, 95):10.1f} {max(values):10.1f}")
        tasks = sorted(self.per_task.items(), key=lambda kv: (kv[1][0] / kv[1][1], kv[0]))
        lines.append(f"per task (solved/episodes{f', the {max_tasks} lowest' if len(tasks) > max_tasks else ''}):")
        for pid, (solved, n) in tasks[:max_tasks]:
            lines.append(f"  {pid:45} {solved:4}/{n:<4} {solved / n:6.1%}")
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
    st = Stats(files=sum(len(files) for files in _streams(log)))
    for ep in episodes(log, slim=True):
        st.steps += len(ep.steps)
        for step in ep.steps:
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
        result = outcome(ep.last.rec)
        st.outcomes[result] += 1
        if result == "sandbox_error":
            continue
        st.returns.append(ep.ret)
        st.turns.append(len(ep.steps))
        task = st.per_task.setdefault(str(ep.last.rec.get("problem_id", "?")), [0, 0])
        task[0] += result == "all_tests"
        task[1] += 1
    return st


def write_png(st: Stats, path: str | Path) -> None:
    """A reward histogram and a timing histogram. A bare ``Figure`` renders with the Agg canvas
    and needs no display; unlike ``matplotlib.use("Agg")`` it leaves pyplot's backend alone."""
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
