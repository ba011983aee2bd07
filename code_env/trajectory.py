"""Trajectory logs: JSONL, one line per step, one file per environment instance (so per worker
process), flushed after every line, rotated by size, the whole directory under a total cap.
``read_log`` reads a file or a directory of them back, naming the file and line of anything
malformed.

**Bounded records.** Whatever a program prints, a record stays small: every long text field
that comes from a run (each ``executions[*]`` ``stdout``/``stderr``; each ``public_cases[*]`` and
``hidden_cases[*]`` ``input``/``expected``/``got``/``error``/``traceback``) longer than
``text_bytes`` (UTF-8) is replaced by a ``Clipped`` object::

    {"clipped": true, "bytes": 9437184, "sha256": "<of the whole text, UTF-8>",
     "head": "<the first text_bytes/2 bytes>", "tail": "<the last text_bytes/2 bytes>"}

(cut at character boundaries, so head and tail may be a few bytes shorter). ``bytes`` and
``sha256`` are of the text the sandbox returned (``ExecutionResult.stdout``/``stderr``, which
the sandbox itself cuts at ``Limits.max_output_bytes``: then ``stdout_truncated`` says so). A
shorter field stays a plain string. ``text_of`` renders either form for people; ``text_digest``
gives (bytes, sha256) of either, the only way to compare a clipped field with another text.
The program (``action``), the prompt and the model's reply are never clipped: replay needs the
program whole, and the others are bounded by the task and the generation budget.

**A total cap.** The ``*.jsonl`` files of a log directory (every logger writing into it) stay
under ``max_total_bytes``: each file rotates into parts of at most ``max_total_bytes / 16``
(and ``max_bytes``), and when a logger starts a part it deletes the *oldest closed parts* of
the directory (by modification time; a part is closed once its stream has a later part) until
the total has room for a full new part. The newest samples are kept, as a rotating log does;
each deletion is one line of ``deleted-parts.txt`` in the directory (file, size, records), and
``code-env stats`` counts them. The cap holds while at most 15 loggers write into one directory
at once (each open part is at most a sixteenth of the cap).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict

_instances = itertools.count()

TEXT_BYTES = 4096  # default: bytes kept of a long text field (half head, half tail)
MAX_TOTAL_BYTES = 1 << 30  # default: the cap of a log directory's *.jsonl files
PARTS_PER_CAP = 16  # a part is at most max_total_bytes / PARTS_PER_CAP
DELETED_PARTS = "deleted-parts.txt"
_RUN_FIELDS = ("stdout", "stderr")  # of each execution
_CASE_FIELDS = ("input", "expected", "got", "error", "traceback")  # of each public/hidden case


class Clipped(BaseModel):
    """A text field too long for a log line: its first and last bytes, the whole's size and hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clipped: bool = True
    bytes: int
    sha256: str
    head: str
    tail: str

    @classmethod
    def of(cls, text: str, keep_bytes: int) -> Clipped:
        data = text.encode("utf-8", "surrogatepass")
        half = keep_bytes // 2
        return cls(bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                   head=data[:half].decode("utf-8", "ignore"), tail=data[len(data) - half :].decode("utf-8", "ignore"))  # fmt: skip


def clip_text(text: str, keep_bytes: int = TEXT_BYTES) -> str | dict[str, Any]:
    """``text`` itself when its UTF-8 form has at most ``keep_bytes`` bytes, else a ``Clipped`` as a dict."""
    if len(text) * 4 <= keep_bytes or len(text.encode("utf-8", "surrogatepass")) <= keep_bytes:
        return text
    return Clipped.of(text, keep_bytes).model_dump()


def clipped(value: Any) -> Clipped | None:
    """The ``Clipped`` a logged field holds, or None for a plain value."""
    if isinstance(value, dict) and value.get("clipped") is True:
        return Clipped.model_validate(value)
    return None


def text_of(value: Any) -> str:
    """A logged text field as text for people: a clipped one as a note with the size and hash of
    the whole, then its head, ``…``, its tail."""
    c = clipped(value)
    if c is None:
        return "" if value is None else str(value)
    return f"[clipped in the log: {c.bytes} bytes, sha256 {c.sha256[:16]}…; its head and tail]\n{c.head}\n…\n{c.tail}"


def text_digest(value: Any) -> tuple[int, str]:
    """(UTF-8 size, SHA-256) of a logged text field, clipped or whole."""
    c = clipped(value)
    if c is not None:
        return c.bytes, c.sha256
    data = ("" if value is None else str(value)).encode("utf-8", "surrogatepass")
    return len(data), hashlib.sha256(data).hexdigest()


def bound_record(record: dict[str, Any], keep_bytes: int = TEXT_BYTES) -> dict[str, Any]:
    """The record with every run's streams and every case's texts clipped (a shallow copy: the
    caller's lists and dicts are not changed)."""
    out = dict(record)
    for key, fields in (("executions", _RUN_FIELDS), ("public_cases", _CASE_FIELDS), ("hidden_cases", _CASE_FIELDS)):
        items = out.get(key)
        if isinstance(items, list):
            out[key] = [_clip_fields(item, fields, keep_bytes) if isinstance(item, dict) else item for item in items]
    return out


def _clip_fields(item: dict[str, Any], fields: tuple[str, ...], keep_bytes: int) -> dict[str, Any]:
    return {k: clip_text(v, keep_bytes) if k in fields and isinstance(v, str) else v for k, v in item.items()}


class LogFileError(ValueError):
    """A trajectory log that cannot be read: names the file and the line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line = path, line
        super().__init__(f"{path}{f':{line}' if line else ''}: {message}")


class TrajectoryLogger:
    """Appends step records to ``<log_dir>/steps-<pid>-<n>[.<part>].jsonl``, each bounded
    (``bound_record``), the directory under a total cap (see the module's docstring).

    ``every``: log every N-th episode (1 = all). ``max_bytes``: start a new part past this size
    (at most ``max_total_bytes / 16``). ``max_total_bytes``: the cap of the directory's logs; the
    oldest closed parts are deleted to stay under it. ``text_bytes``: bytes kept of each long
    text field (its first and last half).
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, every: int = 1, max_bytes: int = 64 << 20,
                 max_total_bytes: int = MAX_TOTAL_BYTES, text_bytes: int = TEXT_BYTES) -> None:  # fmt: skip
        if every < 1:
            raise ValueError(f"log_every: expected >= 1, got {every}")
        if max_bytes < 1024:
            raise ValueError(f"max_bytes: expected >= 1024, got {max_bytes}")
        if max_total_bytes < PARTS_PER_CAP * 1024:
            raise ValueError(f"max_total_bytes: expected >= {PARTS_PER_CAP * 1024} ({PARTS_PER_CAP} parts of 1 KiB), "
                             f"got {max_total_bytes}")  # fmt: skip
        if text_bytes < 64:
            raise ValueError(f"text_bytes: expected >= 64, got {text_bytes}")
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.every, self.text_bytes, self.max_total_bytes = every, text_bytes, max_total_bytes
        self.max_bytes = min(max_bytes, max_total_bytes // PARTS_PER_CAP)
        self.stem = f"steps-{os.getpid()}-{next(_instances)}"
        self.part = 0
        self.records = 0  # in the current part
        self.deleted_parts = 0  # by this logger, to keep the directory under its cap
        self._fh: TextIO | None = None

    @property
    def path(self) -> Path:
        return self.dir / (f"{self.stem}.jsonl" if self.part == 0 else f"{self.stem}.{self.part}.jsonl")

    def wants(self, episode: int) -> bool:
        return episode % self.every == 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(bound_record(record, self.text_bytes), separators=(",", ":"), default=str) + "\n"
        if self._fh is not None and self._fh.tell() + len(line) > self.max_bytes and self._fh.tell() > 0:
            self._fh.close()
            self._fh = None
            self.part += 1
        if self._fh is None:
            self._make_room()
            self._fh = open(self.path, "a", encoding="utf-8")
            self.records = 0
        self._fh.write(line)
        self._fh.flush()
        self.records += 1

    def _make_room(self) -> None:
        """Delete the directory's oldest closed parts until a full new part fits under the cap."""
        files = []
        for f in self.dir.glob("*.jsonl"):
            try:
                st = f.stat()
            except FileNotFoundError:  # another logger of the directory just deleted it
                continue
            files.append((st.st_mtime_ns, f.name, st.st_size, f))
        latest: dict[str, int] = {}
        for _, name, _, _ in files:
            stem, part = stem_part(name)
            latest[stem] = max(latest.get(stem, 0), part)
        total = sum(size for _, _, size, _ in files)
        closed = sorted(entry for entry in files if stem_part(entry[1])[1] < latest[stem_part(entry[1])[0]])
        for _, name, size, f in closed:
            if total + self.max_bytes <= self.max_total_bytes:
                break
            with open(f, "rb") as fh:
                records = sum(1 for _ in fh)
            f.unlink(missing_ok=True)
            total -= size
            self.deleted_parts += 1
            with open(self.dir / DELETED_PARTS, "a", encoding="utf-8") as note:
                note.write(f"{name}\t{size} bytes\t{records} records\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def stem_part(name: str) -> tuple[str, int]:
    """A log file's stream and part: ``steps-1-0.3.jsonl`` -> (``steps-1-0``, 3); ``steps-1-0.jsonl`` -> (``steps-1-0``, 0)."""
    base = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    stem, dot, part = base.rpartition(".")
    return (stem, int(part)) if dot and part.isdigit() else (base, 0)


def deleted_parts(path: str | os.PathLike[str]) -> int:
    """How many parts were deleted from a log directory to keep it under its cap."""
    note = Path(path) / DELETED_PARTS
    if not note.is_file():
        return 0
    with open(note, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


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
