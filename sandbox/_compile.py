"""The compile phase of a compiled language (``sandbox.languages``), and the cache of its artefacts.

A compile is a run of its own: the compiler, started in the jail by the run's process as an
interpreted language's interpreter is, on the candidate's source, under the compile phase's limits
(``compile_limits``: its own wall clock and memory, the processes and threads a compiler starts —
gcc runs cc1plus, as and ld; javac's JVM has threads — and the filter variant that lets it fork and
exec). When the compiler has ended and every process of the run is gone, the run's init (ours,
privileged) reads the files under the work dir's ``out`` and sends them back with the verdict;
nothing of them is ever executed or parsed on the host: they are carried, as bytes, into the work
dir of each run of the program.

``CompileCache`` holds those artefacts on the host, keyed by everything that decides them: the
language, its toolchain's version, the compile command and the source. An entry is written only
from a compile that finished (an artefact, or the compiler's refusal with its exit code); a
compile that timed out or was killed is never stored. Identical programs (a GRPO group, a
program's public and hidden runs) compile once: whoever asks for a key being compiled waits for
that compile.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from .models import ExecutionResult, Limits

MiB = 1024 * 1024
ARTEFACT_BYTES = 64 * MiB  # a compile's files, all together
COMPILER_OUTPUT_BYTES = 64 * 1024  # kept of a compiler's stdout and stderr; past 4x that it is killed
COMPILE_PROCESSES = 32
COMPILE_THREADS = 256


def compile_limits(limits: Limits) -> Limits:
    """The compile phase's limits for a run with ``limits``."""
    return Limits(
        timeout_s=limits.compile_timeout_s,
        cpu_time_s=min(2 * limits.compile_timeout_s, 3600),  # a compiler's threads (rustc, the JVM's)
        memory_mb=limits.compile_memory_mb,
        max_output_bytes=COMPILER_OUTPUT_BYTES,
        on_output_overflow="discard",
        max_file_bytes=ARTEFACT_BYTES,
        max_disk_mb=max(limits.max_disk_mb, 2 * ARTEFACT_BYTES // MiB),
        max_open_files=256,
        max_processes=COMPILE_PROCESSES,
        max_threads=COMPILE_THREADS,
        max_code_bytes=limits.max_code_bytes,
        compile_timeout_s=limits.compile_timeout_s,
        compile_memory_mb=limits.compile_memory_mb,
    )


@dataclass(frozen=True)
class Compiled:
    """What a compile gave: ``files`` (``_child.pack_files``) when ``status`` is "ok"."""

    status: Literal["ok", "error", "timeout"]
    exit_code: int | None
    stdout: str
    stderr: str
    time_ms: float
    files: bytes | None = None
    sandbox_error: str | None = None

    @property
    def storable(self) -> bool:
        """Decided by the source alone: an artefact, or the compiler's own refusal."""
        return self.sandbox_error is None and (
            (self.status == "ok" and self.files is not None) or (self.status == "error" and self.exit_code not in (None, 0))
        )

    def fields(self, *, cached: bool) -> dict[str, Any]:
        """The ``ExecutionResult`` fields of the compile phase."""
        return {"compile_status": self.status, "compile_exit_code": self.exit_code, "compile_stdout": self.stdout,
                "compile_stderr": self.stderr, "compile_time_ms": 0.0 if cached else self.time_ms,
                "compile_timeout_hit": self.status == "timeout", "compile_cached": cached}  # fmt: skip

    @classmethod
    def from_run(cls, r: ExecutionResult, limits: Limits) -> Compiled:
        """The compile's verdict from its run's result (``r._artefacts``: the files the init sent)."""
        if r.sandbox_error is not None:
            return cls("error", None, r.stdout, r.stderr, r.execution_time_ms, sandbox_error=r.sandbox_error)
        notes = []
        if r.timeout_hit:
            status: Literal["ok", "error", "timeout"] = "timeout"
            notes.append(f"code-env: the compile passed its time limit (compile_timeout_s={limits.compile_timeout_s:g})")
        elif r.oom:
            status = "error"
            notes.append(f"code-env: the compiler ran out of memory (compile_memory_mb={limits.compile_memory_mb})")
        elif r.exit_code == 0 and r._artefacts is not None:
            status = "ok"
        else:
            status = "error"
            if r.exit_code == 0:
                notes.append(f"code-env: the compile left no program, or more than {ARTEFACT_BYTES // MiB} MiB of files")
            elif r.signal is not None:
                notes.append(f"code-env: the compiler was killed by {r.signal_name}")
        if r.stdout_truncated or r.stderr_truncated:
            notes.append(f"code-env: the compiler's messages were cut at {COMPILER_OUTPUT_BYTES} bytes per stream")
        stderr = r.stderr
        if notes:
            stderr = (stderr.rstrip("\n") + "\n" if stderr.strip() else "") + "\n".join(notes) + "\n"
        files = r._artefacts if status == "ok" else None
        return cls(status, r.exit_code, r.stdout, stderr, r.execution_time_ms, files)


def compile_key(toolchain: str, source: str, files: bytes | None = None) -> str:
    """The cache key of ``source`` compiled by ``toolchain`` (``languages.toolchain_id``), with
    the input files beside it (``_child.pack_files``), if any."""
    h = hashlib.sha256(toolchain.encode("utf-8", "surrogatepass"))
    h.update(b"\0\0")
    h.update(source.encode("utf-8", "surrogatepass"))
    if files:
        h.update(b"\0\0" + hashlib.sha256(files).digest())
    return h.hexdigest()


class CompileCache:
    """Compiled programs in memory, least recently used first out past ``max_bytes`` of artefacts;
    one compile per key at a time (``get``)."""

    def __init__(self, max_bytes: int = 512 * MiB) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes: expected a non-negative int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._mem: OrderedDict[str, Compiled] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[str, Future[Compiled]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._mem)

    def get(self, key: str, compile_: Callable[[], Compiled]) -> tuple[Compiled, bool]:
        """The entry of ``key`` (and True), or what ``compile_()`` gives (and False), stored if
        ``storable``. Callers asking for a key being compiled wait for that compile, and get its
        result as their own (a failure of the sandbox included: not stored, the next caller
        compiles again)."""
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self._mem.move_to_end(key)
                self.hits += 1
                return hit, True
            pending = self._inflight.get(key)
            if pending is None:
                self.misses += 1
                mine: Future[Compiled] = Future()
                self._inflight[key] = mine
        if pending is not None:
            return pending.result(), True
        try:
            done = compile_()
        except BaseException as exc:
            with self._lock:
                del self._inflight[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._inflight[key]
            if done.storable:
                self._store(key, done)
        mine.set_result(done)
        return done, False

    def _store(self, key: str, entry: Compiled) -> None:
        size = len(entry.files or b"") + len(entry.stdout) + len(entry.stderr)
        if size > self.max_bytes:
            return
        self._mem[key] = entry
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, old = self._mem.popitem(last=False)
            self._bytes -= len(old.files or b"") + len(old.stdout) + len(old.stderr)
