"""Trajectory logs: JSONL, one line per step, one file per environment instance (so per worker
process), flushed after every line and rotated by size. ``read_log`` reads a file or a directory
of them back, naming the file and line of anything malformed."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

_instances = itertools.count()


class LogFileError(ValueError):
    """A trajectory log that cannot be read: names the file and the line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line = path, line
        super().__init__(f"{path}{f':{line}' if line else ''}: {message}")


class TrajectoryLogger:
    """Appends step records to ``<log_dir>/steps-<pid>-<n>[.<part>].jsonl``.

    ``every``: log every N-th episode (1 = all). ``max_bytes``: start a new part past this size.
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, every: int = 1, max_bytes: int = 64 << 20) -> None:
        if every < 1:
            raise ValueError(f"log_every: expected >= 1, got {every}")
        if max_bytes < 1024:
            raise ValueError(f"max_bytes: expected >= 1024, got {max_bytes}")
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.every, self.max_bytes = every, max_bytes
        self.stem = f"steps-{os.getpid()}-{next(_instances)}"
        self.part = 0
        self._fh: TextIO | None = None

    @property
    def path(self) -> Path:
        return self.dir / (f"{self.stem}.jsonl" if self.part == 0 else f"{self.stem}.{self.part}.jsonl")

    def wants(self, episode: int) -> bool:
        return episode % self.every == 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        if self._fh is not None and self._fh.tell() + len(line) > self.max_bytes and self._fh.tell() > 0:
            self._fh.close()
            self._fh = None
            self.part += 1
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(line)
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def log_files(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.jsonl"))
        if not files:
            raise LogFileError(str(p), None, "no *.jsonl trajectory logs in this directory")
        return files
    if not p.exists():
        raise LogFileError(str(p), None, "no such file or directory")
    return [p]


def read_log(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every step record of a log file, or of every ``*.jsonl`` file in a directory."""
    for f in log_files(path):
        for _, rec in numbered_records(f):
            yield rec


def numbered_records(f: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The step records of one log file, each with its line number."""
    with open(f, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LogFileError(str(f), lineno, f"invalid JSON: {exc.msg}") from None
            if not isinstance(rec, dict) or "trace_id" not in rec or "action" not in rec:
                raise LogFileError(str(f), lineno, "not a step record (expected trace_id and action)")
            yield lineno, rec
