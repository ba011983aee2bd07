"""The sandbox's boundary types: ``Limits`` (what a run may use), ``RunRequest`` (one run) and
``ExecutionResult`` (what happened). ``ExecutionResult.model_dump_json()`` is the wire format of logs,
the CLI and remote executors."""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import math
import signal as _signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)

MiB = 1024 * 1024
MAX_RUN_FILES = 256  # input files of one run, and files fetched from it (``_child.MAX_FILES``)
MAX_FILE_NAME_BYTES = 1024


def _from_base64(v: Any) -> Any:
    if isinstance(v, str):  # (from JSON: the wire format carries a file's bytes in base64)
        try:
            return base64.b64decode(v, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not base64: {exc}") from None
    return v


_to_base64 = PlainSerializer(lambda b: base64.b64encode(b).decode("ascii"), return_type=str, when_used="json")
# a file's content: bytes in Python, base64 in JSON (``model_dump_json``, and back; a str is base64)
FileBytes = Annotated[bytes, BeforeValidator(_from_base64), _to_base64]


class Limits(BaseModel):
    """Resource limits of one run. Flat, frozen, every unit in the field name.

    ``timeout_s`` is the wall clock: the call returns within it plus a small grace, on a machine
    with a CPU to spare.
    ``cpu_time_s`` (default: ``timeout_s``) decides "too slow". The wall clock does not charge the
    time a program spent waiting for a CPU on a busy machine: its deadline moves by that wait, up to
    four times ``timeout_s``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(5.0, gt=0, le=3600, description="wall-clock limit, seconds")
    cpu_time_s: float | None = Field(
        None, gt=0, le=3600, description="CPU-time limit, seconds (default: timeout_s)"
    )
    memory_mb: int = Field(512, ge=32, le=1024 * 1024, description="memory limit, MiB")
    max_output_bytes: int = Field(
        1 * MiB, ge=0, le=1024 * MiB, description="bytes kept per stream (stdout, stderr)"
    )
    on_output_overflow: Literal["discard", "kill"] = Field(
        "discard", description="past max_output_bytes: keep running and discard, or kill the run"
    )
    max_file_bytes: int = Field(16 * MiB, ge=0, le=64 * 1024 * MiB,
                                description="largest file the program may write (0: none; its own source is not counted)")
    max_disk_mb: int = Field(256, ge=1, le=64 * 1024, description="total size of the run's work dir, MiB")
    max_open_files: int = Field(64, ge=16, le=65536, description="open file descriptors")
    max_processes: int = Field(
        1, ge=1, le=4096, description="processes the run may have, its own included (1: no fork)"
    )
    max_threads: int = Field(32, ge=1, le=4096, description="threads per run, over all its processes")
    max_code_bytes: int = Field(1 * MiB, ge=1, le=64 * MiB,
                                description="largest program accepted (at most max_disk_mb: it is written to the work dir)")
    max_stdin_bytes: int = Field(16 * MiB, ge=0, le=1024 * MiB, description="largest stdin accepted")
    random_seed: int = Field(0, ge=0, lt=2**32, description="seed of the program's `random` module")
    compile_timeout_s: float = Field(20.0, gt=0, le=600, description="a compiled language's compile phase: "
                                     "wall-clock limit, seconds (its CPU limit: twice that, over its processes)")
    compile_memory_mb: int = Field(1024, ge=64, le=1024 * 1024, description="the compile phase's memory limit, MiB")

    @property
    def effective_cpu_time_s(self) -> float:
        return self.cpu_time_s if self.cpu_time_s is not None else self.timeout_s

    @field_validator("timeout_s", "cpu_time_s", "compile_timeout_s")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError(f"expected a finite number of seconds, got {v}")
        return v

    @model_validator(mode="after")
    def _program_fits_its_disk(self) -> Limits:
        if self.max_code_bytes > self.max_disk_mb * MiB:
            raise ValueError(
                f"max_code_bytes={self.max_code_bytes} does not fit in max_disk_mb={self.max_disk_mb} "
                f"({self.max_disk_mb * MiB} bytes): the program's source is written to the run's work dir; "
                "raise max_disk_mb or lower max_code_bytes"
            )
        return self


class RunRequest(BaseModel):
    """One program to run: what ``Sandbox.run_many`` takes (plain strings are accepted too)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    stdin: str = ""
    limits: Limits | None = None
    trace_id: str | None = None
    language: str = Field("python", description="a name or alias of sandbox.languages (canonical once validated)")
    files: dict[str, Annotated[bytes, _to_base64]] = Field(
        default_factory=dict, description="input files: relative path -> content (in JSON: base64; from Python: bytes, "
                                          "or str taken as UTF-8), written to the run's work dir beside the program "
                                          "before it starts, the run's to change")
    fetch_files: tuple[str, ...] = Field(
        (), description="paths relative to the work dir (a directory: every file under it; '.': the whole work "
                        "dir) whose files come back in the result's `files` once the run is over")

    @field_validator("language")
    @classmethod
    def _canonical_language(cls, v: str) -> str:
        from .languages import resolve

        return resolve(v).name

    @field_validator("files", mode="before")
    @classmethod
    def _file_contents(cls, v: Any, info: ValidationInfo) -> Any:
        if info.mode == "json" and isinstance(v, Mapping):  # (the wire: base64, as the result's files)
            v = {k: _from_base64(d) for k, d in v.items()}
        return coerce_files(v)

    @field_validator("fetch_files", mode="before")
    @classmethod
    def _fetch_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise TypeError("fetch_files: expected a list of paths, got one str")
        return v

    @field_validator("code", "stdin", mode="before")
    @classmethod
    def _strict_str(cls, v: Any) -> Any:
        if not isinstance(v, str):
            raise TypeError(f"expected str, got {type(v).__name__}")
        return v

    @model_validator(mode="after")
    def _check_sizes(self) -> RunRequest:
        check_payload(self.code, self.stdin, self.limits or Limits())
        check_files(self.files, self.fetch_files, self.code, self.limits or Limits(), self.language)
        return self


def coerce_files(files: Any) -> dict[str, bytes]:
    """``files`` as ``{path: bytes}`` (a str content is taken as UTF-8); ``TypeError`` otherwise."""
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise TypeError(f"files: expected a mapping of path -> bytes or str, got {type(files).__name__}")
    out: dict[str, bytes] = {}
    for name, data in files.items():
        if not isinstance(name, str):
            raise TypeError(f"files: a path must be a str, got {type(name).__name__}")
        if isinstance(data, str):
            try:
                data = data.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"files[{name!r}]: cannot be encoded as UTF-8 ({exc.reason}); pass bytes") from None
        elif isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)
        else:
            raise TypeError(f"files[{name!r}]: expected bytes or str, got {type(data).__name__}")
        out[name] = data
    return out


def _check_path(what: str, name: object, *, dot: bool = False) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what}: a path must be a str, got {type(name).__name__}")
    if dot and name == ".":
        return name
    shown = repr(name[:80])
    if not name or name.startswith("/") or "\x00" in name:
        raise ValueError(f"{what} {shown}: expected a relative path inside the run's work dir (no NUL, not empty)")
    if any(p in ("", ".", "..") for p in name.split("/")):
        raise ValueError(f"{what} {shown}: a path may not hold '.', '..' or an empty step")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {shown}: cannot be encoded as UTF-8") from None
    if size > MAX_FILE_NAME_BYTES:
        raise ValueError(f"{what} {shown}...: {size} bytes, over {MAX_FILE_NAME_BYTES}")
    return name


def check_files(files: Mapping[str, bytes], fetch_files: Iterable[str], code: str, limits: Limits,
                language: str = "python") -> None:  # fmt: skip
    """Reject input files and fetched paths that no run can take, with a message that names the
    problem: paths outside the work dir, the program's own file (or a compiled language's output
    directory), more than ``MAX_RUN_FILES``, more than the work dir holds (``max_disk_mb``)."""
    fetch = list(fetch_files)
    if len(files) > MAX_RUN_FILES:
        raise ValueError(f"files: {len(files)} files, over {MAX_RUN_FILES}")
    if len(fetch) > MAX_RUN_FILES:
        raise ValueError(f"fetch_files: {len(fetch)} paths, over {MAX_RUN_FILES}")
    for name in fetch:
        _check_path("fetch_files", name, dot=True)
    if not files:
        return
    from .languages import OUTPUT_DIR, resolve

    lang = resolve(language)
    total = len(code.encode("utf-8", "surrogatepass"))
    dirs: set[str] = set()
    for name, data in files.items():
        _check_path("files", name)
        if name == lang.source:
            raise ValueError(f"files {name!r}: the program's own file ({lang.title}: {lang.source}) comes from `code`")
        if lang.compiled and name.split("/")[0] == OUTPUT_DIR:
            raise ValueError(f"files {name!r}: {OUTPUT_DIR}/ holds the compiled program; choose another directory")
        parts = name.split("/")
        dirs.update("/".join(parts[:k]) for k in range(1, len(parts)))
        total += len(data)
    clash = sorted(dirs & set(files))
    if clash:
        raise ValueError(f"files {clash[0]!r}: both a file and a directory of other files")
    if total > limits.max_disk_mb * MiB:
        raise ValueError(f"files: {total} bytes with the program, over the work dir's max_disk_mb={limits.max_disk_mb}")


def checked_request(code: str, stdin: str, limits: Limits, trace_id: str | None, language: str,
                    files: Mapping[str, bytes | str] | None, fetch_files: Sequence[str]) -> RunRequest:  # fmt: skip
    """One ``run(...)`` call's arguments as a ``RunRequest``, checked as ``Sandbox.run`` checks
    them (payload, input files, fetched paths; ``limits`` already resolved): what an executor that
    sends requests elsewhere (Ray, Redis) refuses before anything leaves this process."""
    check_payload(code, stdin, limits)
    inputs = coerce_files(files)
    if isinstance(fetch_files, str):
        raise TypeError("fetch_files: expected a list of paths, got one str")
    fetch = tuple(fetch_files)
    check_files(inputs, fetch, code, limits, language)
    return RunRequest(code=code, stdin=stdin, limits=limits, trace_id=trace_id, language=language, files=inputs,
                      fetch_files=fetch)  # fmt: skip


def resolve_limits(limits: Limits | None, default: Limits) -> Limits:
    """A call's ``limits`` argument: ``default`` when None, else it must be a ``Limits``."""
    if limits is None:
        return default
    if not isinstance(limits, Limits):
        raise TypeError(f"limits: expected sandbox.Limits, got {type(limits).__name__}")
    return limits


def coerce_requests(requests: Iterable[RunRequest | Mapping[str, Any] | str], default: Limits) -> list[RunRequest]:
    """``run_many``'s input as ``RunRequest``s: each a ``RunRequest``, a mapping of its fields or a
    plain code string, checked against its own limits or ``default``. All are checked before any
    runs; the first bad one raises ``TypeError``/``ValueError`` naming its index."""
    items: list[RunRequest] = []
    for i, r in enumerate(requests):
        try:
            if isinstance(r, RunRequest):
                req = r
            elif isinstance(r, str):
                req = RunRequest(code=r)
            elif isinstance(r, Mapping):
                req = RunRequest(**r)
            else:
                raise TypeError(f"expected RunRequest, mapping or str, got {type(r).__name__}")
            check_payload(req.code, req.stdin, req.limits or default)
            check_files(req.files, req.fetch_files, req.code, req.limits or default, req.language)
        except (TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            msg = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()) if isinstance(exc, ValidationError) else str(exc)
            raise kind(f"request {i}: {msg}") from exc
        items.append(req)
    return items


def check_payload(code: object, stdin: object, limits: Limits) -> None:
    """Reject what no sandbox should be asked to run, with a message that names the problem."""
    if not isinstance(code, str):
        raise TypeError(f"code: expected str, got {type(code).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"stdin: expected str, got {type(stdin).__name__}")
    nul = code.find("\x00")
    if nul >= 0:
        raise ValueError(f"code contains a NUL byte at offset {nul}; Python source cannot hold one")
    for name, text, cap, field in (("code", code, limits.max_code_bytes, "max_code_bytes"),
                                   ("stdin", stdin, limits.max_stdin_bytes, "max_stdin_bytes")):  # fmt: skip
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{name} cannot be encoded as UTF-8: {exc.reason} {text[exc.start:exc.end]!r} at offset {exc.start} "
                "(a lone surrogate; decode your bytes with errors='replace' first)"
            ) from None
        if size > cap:
            raise ValueError(f"{name} is {size} bytes, over {field}={cap}")


QUEUE_TIMEOUT = "queued past the executor's queue timeout"  # how such a run's sandbox_error starts


class ExecutionResult(BaseModel):
    """What happened to one run.

    ``sandbox_error`` is set only when the sandbox machinery itself failed; the other verdict fields
    then say nothing about the program and must not be scored. ``node`` is the Ray node id of the
    node that ran it (``RayExecutor``; a cache hit keeps the node of the run it repeats), None for a
    local ``Sandbox``.
    """

    model_config = ConfigDict(extra="forbid")

    trace_id: str | None = None
    backend: str = ""
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    execution_time_ms: float = 0.0
    cpu_time_ms: float = 0.0
    stdout_last_ms: float | None = Field(
        None, description="when the sandbox read the last bytes of stdout, ms after the start (its own clock); "
                          "None: no stdout")
    peak_memory_mb: float | None = None
    timeout_hit: bool = False
    timeout_kind: Literal["wall", "cpu"] | None = None
    oom: bool = False
    output_limit_hit: bool = False
    sandbox_error: str | None = None
    reruns: int = 0
    rerun_reason: str | None = None
    cached: bool = False
    node: str | None = None
    queued_ms: float = 0.0
    # A compiled language's compile phase (``sandbox.languages``); None/empty for the others. A
    # compile that failed leaves the run fields empty: the program never ran.
    compile_status: Literal["ok", "error", "timeout"] | None = Field(
        None, description="ok: compiled; error: the compiler refused it (or was killed: output, memory); "
                          "timeout: the compile passed compile_timeout_s; None: no compile phase")
    compile_exit_code: int | None = None
    compile_stdout: str = ""
    compile_stderr: str = ""
    compile_time_ms: float = 0.0
    compile_timeout_hit: bool = False
    compile_cached: bool = Field(False, description="the compiled program came from the compile cache")
    files: dict[str, FileBytes] = Field(
        default_factory=dict, description="the files fetched from the work dir once the run was over "
                                          "(`fetch_files`; base64 in JSON); a path that did not exist is absent")

    # a compile's files (``_child.pack_files``), for the compile cache: never dumped nor compared
    _artefacts: bytes | None = PrivateAttr(None)

    @property
    def compile_failed(self) -> bool:
        """A compiled language's program that did not compile (its run never happened)."""
        return self.compile_status in ("error", "timeout")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return _signal.Signals(self.signal).name
        except ValueError:
            return f"SIG{self.signal}"

    @property
    def ok(self) -> bool:
        """The program ran to completion with exit code 0 (and the sandbox worked)."""
        return self.sandbox_error is None and self.exit_code == 0 and not self.timeout_hit and not self.oom

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ExecutionResult:
        data = dict(data)
        data.pop("signal_name", None)
        return cls.model_validate(data)

    @classmethod
    def infrastructure_failure(cls, reason: str, *, trace_id: str | None, backend: str) -> ExecutionResult:
        return cls(trace_id=trace_id, backend=backend, sandbox_error=reason)


CANCELLED = "cancelled by the caller"  # how a run withdrawn or killed for its caller is answered (never scored)


_scope = threading.local()


@contextlib.contextmanager
def cancelling(cancel: Cancel) -> Iterator[Cancel]:
    """In this block, every ``Sandbox.run``/``run_many`` of this thread (however deep: a grader's,
    an adapter's) is cancelled with ``cancel``: ``cancel.cancel()``, from any thread, kills their
    runs in flight and withdraws the rest (they answer ``CANCELLED`` at once)."""
    outer = getattr(_scope, "cancel", None)
    _scope.cancel = cancel
    try:
        yield cancel
    finally:
        _scope.cancel = outer


def current_cancel() -> Cancel | None:
    """The ``cancelling`` block's cancel of this thread, if any."""
    return getattr(_scope, "cancel", None)


class Cancel:
    """A batch's cancellation: ``cancel()`` withdraws its runs that have not begun and kills those
    in flight (each backend registers how, ``on_cancel``), so that their workers are free at once.
    Thread-safe; a callback registered after ``cancel()`` runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0
        self.cancelled = False

    def on_cancel(self, callback: Callable[[], None]) -> int:
        """Run ``callback`` on ``cancel()``; the key ``forget`` takes."""
        with self._lock:
            if not self.cancelled:
                self._next += 1
                self._callbacks[self._next] = callback
                return self._next
        callback()
        return 0

    def forget(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def cancel(self) -> None:
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for cb in callbacks:
            try:
                cb()
            except Exception:  # one backend's failure to kill must not keep the others alive
                logging.getLogger("sandbox").exception("a cancellation callback failed")
