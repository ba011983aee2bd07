"""``code-env trace RUN KEY``: every line about one sample, from every log of a run, joined on its
key (``problem_id/sample/turn``, ``code_env.tracing``): the trajectory records (and the runs in
them, retried tries included) and any other JSONL log whose lines carry a ``trace_id`` (an LLM
agent's ``llm_record.jsonl``), file by file, in each file's order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._visible import visible
from ..tracing import TraceId, trace_key
from ..trajectory import LogFileError


@dataclass
class TraceLine:
    """One line about the sample: the file and line it came from, and what it says."""

    file: str
    line: int
    trace_id: str
    what: str


def trace(where: str | Path, key: str) -> list[TraceLine]:
    """The lines of every ``*.jsonl`` under ``where`` (a file or a directory) about the sample
    ``key`` (a trace id or its key: the retry and a run's part are dropped)."""
    want = trace_key(key) or key
    if TraceId.parse(f"{want}/0") is None:
        raise LogFileError(str(key), 0, "not a trace id (expected problem_id/sample/turn[/retry])")
    root = Path(where)
    if not root.exists():
        raise LogFileError(str(root), 0, "no such file or directory")
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    needles = {want, json.dumps(want)[1:-1]}  # as is, and as an ASCII-escaped JSON line spells it (café: caf\\u00e9)
    out: list[TraceLine] = []
    for f in files:
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise LogFileError(str(f), 0, f"cannot read: {exc.strerror or exc}") from None
        for n, text in enumerate(lines, 1):
            if not any(needle in text for needle in needles):  # cheap filter before parsing
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError:
                continue  # (a line cut by a crash: the log tools report those)
            if isinstance(rec, dict):
                out.extend(_lines(str(f.relative_to(root) if root.is_dir() else f.name), n, rec, want))
    return out


def _lines(file: str, n: int, rec: dict[str, Any], want: str) -> list[TraceLine]:
    tid = rec.get("trace_id")
    if not isinstance(tid, str) or trace_key(tid) != want:
        return []
    if rec.get("type") == "call":  # an LLM agent's request
        error = (rec.get("error") or {}).get("type") if isinstance(rec.get("error"), dict) else None
        what = f"request turn {rec.get('turn')}: {'error ' + str(error) if error else 'answered'} in {rec.get('latency_s')} s"
        return [TraceLine(file, n, tid, what)]
    breakdown = rec.get("reward_breakdown")
    breakdown = breakdown if isinstance(breakdown, dict) else {}
    states = " → ".join(str(t[0]) for t in rec.get("transitions") or [] if isinstance(t, list) and t)
    out = [TraceLine(file, n, tid, f"step: reward {rec.get('reward')} ({breakdown.get('tier')}); {states}")]
    for field, label in (("retried_executions", "failed try"), ("executions", "run")):
        for r in rec.get(field) or []:
            if isinstance(r, dict) and isinstance(r.get("trace_id"), str):
                verdict = r.get("sandbox_error") or ("timeout" if r.get("timeout_hit") else f"exit {r.get('exit_code')}")
                out.append(TraceLine(file, n, r["trace_id"], f"  {label}: {str(verdict)[:100]}, queued {r.get('queued_ms', 0)} ms"))
    return out


def format_trace(lines: list[TraceLine]) -> str:
    """The lines for a person: one per ``TraceLine``, each on one line through ``visible``."""
    if not lines:
        return "no line carries that key"
    ids = [visible(x.trace_id, keep_newlines=False) for x in lines]
    width = max(len(t) for t in ids)
    return "\n".join(visible(f"{t:<{width}}  {x.file}:{x.line}  {x.what}", keep_newlines=False) for t, x in zip(ids, lines, strict=True))
