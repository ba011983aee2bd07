"""``code-env audit``: a seeded random sample of the highest-return episodes with their code, the
program's own output and the public tests, for a human to check that the reward was earned.

Everything an entry shows passes through ``visible``: an ESC sequence in a comment cannot erase
the lines above it (a hard-coded table), a bidi override cannot reorder the code, a zero-width
character cannot hide; each shows as its escape (``\\x1b``, ``\\u202e``, ``\\u200b``).

A ``CodeAgent-v0`` episode shows its calls in order (each with its arguments, reward, result and
the diff it made to the workspace), then ``main.py`` as last graded and its public tests."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.verify import shown_output

from .._visible import visible
from ..agent import MAIN
from ..trajectory import clipped, text_of
from ._read import agent_label, episodes, is_agent, numbered, outcome, tool_name, turns_exhausted

CALL_LINES = 12  # of each call's result shown by an agent episode's audit
DIFF_LINES = 40  # of each call's workspace diff
Where = tuple[str, int]  # a record's file and line


@dataclass
class AuditEntry:
    """One sampled episode: its return and its last step's full record (``calls``: a
    ``CodeAgent-v0`` episode's every record, in order)."""

    ret: float
    steps: int
    where: str
    record: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def render(self, limit: int = 1000) -> str:
        if is_agent(self.record):
            return self._render_agent(limit)
        rec = self.record
        b = rec.get("reward_breakdown")
        b = b if isinstance(b, dict) else {}
        head = f"{_line(rec['trace_id'])}  return {self.ret:g}"
        if self.steps > 1:
            head += f" over {self.steps} turns (last step {rec['reward']:g})"
        lines = [head, _line(f"  {outcome(rec)}{' (the turns ran out)' if turns_exhausted(rec) else ''}: "
                                   f"{b.get('explanation', '')}  [{self.where}]")]
        trained = [f"{k} {rec[k]:.4g}" if isinstance(rec[k], float) else f"{k} {rec[k]}"
                   for k in ("trainer", "step", "advantage", "completion_tokens", "completion_truncated", "ran_as")
                   if rec.get(k) is not None and not (k == "ran_as" and rec[k] == rec["trace_id"])]  # fmt: skip
        if trained:
            lines.append(_line("  " + ", ".join(trained) + (" (answered from a cache)" if rec.get("cached") else "")))
        if "completion" in rec and isinstance(rec.get("prompt"), str) and rec["prompt"]:  # a trainer's record
            lines += ["--- prompt ---", visible(_cut(rec["prompt"], limit).rstrip("\n"))]
        if isinstance(rec.get("completion"), str) and rec["completion"] != rec["action"]:
            lines += ["--- completion (the model's reply) ---", visible(_cut(rec["completion"], limit).rstrip("\n"))]
        lines += ["--- code ---", visible(rec["action"].rstrip("\n"))]
        for title, text, truncated in program_output(rec):
            cut = len(text) > limit
            notes = ", ".join(n for n, on in (("truncated by the sandbox", truncated), ("cut", cut)) if on)
            lines.append(f"--- {title}{f' ({notes})' if notes else ''} ---")
            lines.append(visible(_cut(text, limit).rstrip("\n")))
        lines += _cases(rec)
        hidden = [c for c in rec.get("hidden_cases") or [] if isinstance(c, dict)]
        if hidden:
            lines.append(f"--- hidden tests: {sum(c.get('status') == 'passed' for c in hidden)}/{len(hidden)} passed ---")
        return "\n".join(lines)

    def _render_agent(self, limit: int) -> str:
        """A ``CodeAgent-v0`` episode: its calls, then ``main.py`` as last graded and its tests."""
        rec = self.record
        b = rec.get("reward_breakdown")
        b = b if isinstance(b, dict) else {}
        lines = [_line(f"{rec.get('problem_id')} (CodeAgent-v0, episode {rec.get('episode')})  return {self.ret:g} "
                       f"over {self.steps} tool calls"),
                 _line(f"  {agent_label(rec)}{' (the tool calls ran out)' if turns_exhausted(rec) else ''}"
                       f"{': ' + str(b['explanation']) if b.get('explanation') else ''}  [{self.where}]")]  # fmt: skip
        if len(self.calls) < self.steps:
            lines.append(f"  ({self.steps - len(self.calls)} of its records could not be read again)")
        lines.append("--- calls ---")
        graded: dict[str, Any] | None = None
        for r in self.calls:
            lines += _call_lines(r, limit)
            if r.get("graded_program") is not None:
                graded = r
        if graded is not None:
            lines += [f"--- {MAIN} as graded (call {_line(graded.get('turn'))}) ---",
                      visible(_cut(text_of(graded["graded_program"]), limit).rstrip("\n"))]  # fmt: skip
            lines += _cases(graded)
        hidden = (b.get("hidden_passed"), b.get("hidden_total"))
        if isinstance(hidden[1], int) and hidden[1]:
            lines.append(f"--- hidden tests: {hidden[0]}/{hidden[1]} passed ---")
        return "\n".join(lines)


def _call_lines(rec: dict[str, Any], limit: int) -> list[str]:
    """One call of an agent episode: ``[k] name(arguments)  reward r``, its result, its diff."""
    name = tool_name(rec)
    call = rec.get("call")
    args = call.get("arguments") if isinstance(call, dict) else None
    if name is None:
        shown = f"(unreadable call) {_inline(rec.get('action'), 120)}"
    else:
        shown = f"{name}({', '.join(f'{k}={_arg(v)}' for k, v in (args.items() if isinstance(args, dict) else ()))})"
    head = f"[{_line(rec.get('turn'))}] {visible(shown, keep_newlines=False)}  reward {rec.get('reward')}"
    for key in ("budget", "sandbox_error", "judge_error"):
        if rec.get(key):
            head += f"  {key} {_line(rec[key])}"
    lines = [_cut(head, 400)]
    obs = rec.get("observation")
    result = text_of(obs.get("tool_result")) if isinstance(obs, dict) else ""
    if result:
        lines += _indented(result, CALL_LINES, limit)
    diff = text_of(rec.get("workspace_diff"))
    if diff:
        lines.append("    --- workspace diff ---")
        lines += _indented(diff, DIFF_LINES, limit)
    return lines


def _arg(value: Any) -> str:
    """An argument of a call on one line, cut."""
    c = clipped(value)
    text = f"[{c.bytes} bytes] {c.head}" if c is not None else value if isinstance(value, str) else json.dumps(value)
    return visible(repr(text if len(text) <= 60 else text[:60] + "..."), keep_newlines=False)


def _indented(text: str, max_lines: int, limit: int) -> list[str]:
    """``text`` as indented lines, nothing hidden: at most ``max_lines`` lines of ``limit`` characters."""
    rows = visible(_cut(text, limit).rstrip("\n")).splitlines()
    more = [f"    ... ({len(rows) - max_lines} more lines)"] if len(rows) > max_lines else []
    return [f"    {row}" for row in rows[:max_lines]] + more


def _cases(rec: dict[str, Any]) -> list[str]:
    """The public tests of a record as a table."""
    cases = [c for c in rec.get("public_cases") or [] if isinstance(c, dict)]
    passed = sum(c.get("status") == "passed" for c in cases)
    lines = [f"--- public tests: {passed}/{len(cases)} passed ---"]
    for c in cases:
        row = f"  [{_line(c.get('index'))}] {_line(c.get('status'))}  input {_inline(c.get('input'), 120)}"
        if c.get("status") == "passed":
            row += f"  got {_inline(c.get('got'), 120)}"
        else:
            row += f"  expected {_inline(c.get('expected'), 120)}  got {_inline(c.get('got'), 120)}"
            if c.get("error"):
                row += f"  error {_inline(c['error'], 200)}"
        lines.append(row)
    return lines


def program_output(rec: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """What the program itself wrote on the public tests, as ``(title, text, truncated)``; the
    verifier's own runs and lines are left out.

    The runs are told apart by their trace ids, which the grader and the verifier set (never the
    program): ``<step>/public`` and ``<step>/public/from/<k>`` (``<step>/public+hidden...`` for a
    joint run, of which only what it printed before its hidden tests is shown) run a function task's program
    under the verifier's driver, whose stdout is the verifier's result channel (nonce-tagged
    lines) while the program's prints and errors go to stderr; ``<step>/public/<k>`` runs a stdio
    task's program on test k (its stdout and stderr are the program's; shown for the first test
    that did not pass, else test 0); ``/syntax`` (a compile check) and ``/checker/...`` (a
    task's special judge) are not the program's. A stream the log clipped shows its head, the
    whole's size and hash, then its tail (``code_env.trajectory.text_of``)."""
    base = f"{rec.get('ran_as') or rec['trace_id']}/public"  # (a duplicate in its batch ran as another sample)
    function_runs: list[dict[str, Any]] = []
    stdio_runs: dict[int, dict[str, Any]] = {}
    for run in rec.get("executions") or []:
        tid = run.get("trace_id") if isinstance(run, dict) else None
        if not isinstance(tid, str):
            continue
        if tid.startswith(base + "+hidden"):  # a joint run (public tests, then hidden: shown_output)
            tid = base + tid[len(base) + len("+hidden") :]
        if not (tid == base or tid.startswith(base + "/")):
            continue
        rest = tid[len(base) + 1 :]
        if tid == base or rest.startswith("from/"):
            function_runs.append(run)
        elif rest.isdigit():
            stdio_runs[int(rest)] = run
    if function_runs:
        text = "".join(shown_output(text_of(r.get("stderr"))) for r in function_runs)
        truncated = any(r.get("stderr_truncated") for r in function_runs)
        return [("program output (prints and errors, public tests)", text, truncated)] if text or truncated else []
    if not stdio_runs:
        return []
    failed = [c.get("index") for c in rec.get("public_cases") or [] if isinstance(c, dict) and c.get("status") != "passed"]
    shown = next((i for i in failed if i in stdio_runs), min(stdio_runs))
    run = stdio_runs[shown]
    out: list[tuple[str, str, bool]] = []
    for name in ("stdout", "stderr"):
        text, truncated = text_of(run.get(name)), bool(run.get(f"{name}_truncated"))
        if text or truncated:
            out.append((f"{name} (public test {shown})", text, truncated))
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"…[{len(text) - limit} more chars]"


def _line(value: Any) -> str:
    """A field of the log on one line, nothing hidden (a line break shows as ``\\n``)."""
    return visible(str(value), keep_newlines=False)


def _inline(value: Any, limit: int) -> str:
    """A value on one line of a table, nothing hidden: text that spans lines (a stdio test's
    input or output) is shown quoted, with its line breaks as ``\\n``."""
    text = text_of(value)
    shown = visible(text, keep_newlines=False)
    return _cut(f'"{shown}"' if "\n" in text or "\r" in text else shown, limit)


def audit(log: str | Path, top: int = 20, seed: int = 0) -> list[AuditEntry]:
    """A seeded random sample of ``top`` episodes among those with the highest return: all at the
    maximum when there are more than ``top`` of them, else filled from the next-highest returns.
    Episodes that did not end, or ended by a sandbox failure, are left out. A ``CodeAgent-v0``
    episode's entry holds every record of it (``calls``)."""
    if top < 1:
        raise ValueError(f"top: expected >= 1, got {top}")
    by_return: dict[float, list[tuple[float, int, Where, tuple[Where, ...]]]] = {}
    for ep in episodes(log, slim=True):
        if ep.complete and ep.last.ended and not ep.last.rec.get("sandbox_error"):
            calls = tuple((s.file, s.line) for s in ep.steps) if is_agent(ep.last.rec) else ()
            by_return.setdefault(ep.ret, []).append((ep.ret, len(ep.steps), (ep.last.file, ep.last.line), calls))
    rng = random.Random(seed)
    chosen: list[tuple[float, int, Where, tuple[Where, ...]]] = []
    for value in sorted(by_return, reverse=True):
        group = by_return[value]
        chosen += rng.sample(group, min(len(group), top - len(chosen)))
        if len(chosen) >= top:
            break
    wanted: dict[str, set[int]] = {}  # file -> lines to read again
    for _, _, last, calls in chosen:
        for f, line in (last, *calls):
            wanted.setdefault(f, set()).add(line)
    records: dict[Where, dict[str, Any]] = {}
    for f, lines in wanted.items():
        for line, rec in numbered(Path(f)):
            if line in lines:
                records[(f, line)] = rec
    return [AuditEntry(ret, n, f"{last[0]}:{last[1]}", records[last], [records[w] for w in calls if w in records])
            for ret, n, last, calls in chosen]  # fmt: skip


def format_audit(entries: list[AuditEntry]) -> str:
    if not entries:
        return "no finished episodes in the log"
    blocks = [f"=== {i}/{len(entries)}  {e.render()}" for i, e in enumerate(entries, start=1)]
    return "\n\n".join(blocks)
