"""A trajectory log as episodes: the files of each environment instance in order, each record
checked, consecutive records of one episode together.

An episode is a run of consecutive records of one environment instance (its log file, and the
file's rotated parts in order) with the same ``episode`` number. Its *return* is the sum of its
step rewards: a single-turn episode's reward, a solved multi-turn episode's tier. A
``CodeAgent-v0`` episode (``is_agent``) is one record per tool call, ``turn`` counting the calls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent import AGENT_ENV
from ..trajectory import LogFileError, log_files, numbered_records, stem_part

# not needed to replay or count (a CodeAgent-v0 record's diff and graded program neither)
_HEAVY = ("prompt", "executions", "public_cases", "hidden_cases", "workspace_diff", "graded_program")


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
    """How a step ended, named by what it scored: its reward tier; ``budget_exhausted`` when a
    budget other than the turns (characters, turn time, episode clock) cut the episode (it then
    scores ``min(budget_exhausted, tier)``); ``sandbox_error`` or ``judge_error`` (the LLM judge's
    endpoint failed). Running out of turns is no tier: the last program keeps its own (less the
    process bonus paid), so that is the outcome, and ``turns_exhausted`` tells the fact apart.
    ``rec`` is a log record or a step's ``info``: both hold these keys."""
    if rec.get("sandbox_error"):
        return "sandbox_error"
    if rec.get("judge_error"):
        return "judge_error"
    if rec.get("budget") and not turns_exhausted(rec):
        return "budget_exhausted"
    b = rec.get("reward_breakdown")
    tier = b.get("tier") if isinstance(b, dict) else None
    return str(tier) if tier else "unknown"


def turns_exhausted(rec: dict[str, Any]) -> bool:
    """The episode ended because its turns ran out (``rec``: a log record or a step's ``info``), or
    a ``CodeAgent-v0`` episode's tool calls did (its ``main.py`` then scores its own tier too)."""
    return rec.get("budget") in ("turns", "tool_calls")


def is_agent(rec: dict[str, Any]) -> bool:
    """A record of a ``CodeAgent-v0`` step (a tool call)."""
    return rec.get("env") == AGENT_ENV


def tool_name(rec: dict[str, Any]) -> str | None:
    """The tool a ``CodeAgent-v0`` record's call named (None: the call could not be read)."""
    call = rec.get("call")
    name = call.get("name") if isinstance(call, dict) else None
    return name if isinstance(name, str) else None


def agent_label(rec: dict[str, Any]) -> str:
    """How a ``CodeAgent-v0`` step ended, for people: its ``outcome`` when it was graded or cut by a
    budget, else the call (``read_file``, ``run (error)``, ``unreadable call``)."""
    result = outcome(rec)
    if result != "unknown":
        return result
    name = tool_name(rec)
    if name is None:
        return "unreadable call"
    return f"{name} (error)" if rec.get("tool_error") else name


def _natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _no_logs_here(d: Path) -> LogFileError | None:
    """A directory of run directories (``code-env demo`` writes one per run) holds no log itself:
    say which to give instead."""
    if any(d.glob("*.jsonl")):
        return None
    latest = d / "latest"
    runs = sorted((r for r in d.iterdir() if r.is_dir() and not r.is_symlink() and any(r.glob("*.jsonl"))),
                  key=lambda r: _natural(r.name))  # fmt: skip
    if not runs:
        return None
    example = latest if latest.is_dir() else runs[-1]
    return LogFileError(str(d), None, f"no *.jsonl trajectory logs in this directory, but {len(runs)} run "
                                      f"directories with logs: give one, e.g. {example}")  # fmt: skip


def streams(log: str | Path) -> list[list[Path]]:
    """The log's files, as one list per environment instance: ``steps-<pid>-<n>.jsonl`` then its
    rotated parts ``.1.jsonl``, ``.2.jsonl``, ... in order (a plain sort puts ``.1`` first)."""
    p = Path(log)
    if p.is_dir():
        try:
            hint = _no_logs_here(p)
        except OSError as exc:
            raise LogFileError(str(p), None, f"cannot read: {exc.strerror or exc}") from None
        if hint is not None:
            raise hint
    files = log_files(log)
    if not p.is_dir():
        return [files]
    groups: dict[str, list[tuple[int, Path]]] = {}
    for f in files:
        stem, part = stem_part(f.name)
        groups.setdefault(stem, []).append((part, f))
    return [[f for _, f in sorted(parts)] for _, parts in sorted(groups.items(), key=lambda kv: _natural(kv[0]))]


def numbered(f: Path) -> Iterator[tuple[int, dict[str, Any]]]:
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
    for files in streams(log):
        current: list[Step] = []
        for f in files:
            for line, rec in numbered(f):
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
