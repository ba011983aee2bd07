"""``Sandbox``: the one entry point. Validates input, picks the backend, keeps the optional result
cache, and runs batches concurrently (order preserved, nothing lost)."""

from __future__ import annotations

import asyncio
import difflib
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Protocol

from . import _child
from ._compile import ARTEFACT_BYTES, CompileCache, Compiled, compile_key, compile_limits
from ._programs import registered_programs
from .cache import ResultCache
from .errors import LanguageUnavailableError, SandboxClosedError, UnknownBackendError
from .models import (
    QUEUE_TIMEOUT,
    Cancel,
    ExecutionResult,
    Limits,
    MiB,
    RunRequest,
    check_files,
    check_payload,
    coerce_files,
    coerce_requests,
    current_cancel,
    resolve_limits,
)

log = logging.getLogger("sandbox")
BACKENDS = ("auto", "process", "nsjail")
BackendName = Literal["auto", "process", "nsjail"]


class Backend(Protocol):
    name: str
    size: int

    @property
    def version(self) -> str: ...

    @property
    def uids(self) -> list[int]: ...

    def waiting_pids(self) -> list[int]: ...

    @property
    def isolation(self) -> dict[str, Any]: ...

    def run(self, code: str, stdin: str, limits: Limits, trace_id: str | None) -> ExecutionResult: ...

    def close(self) -> None: ...


def make_backend(name: str, *, workers: int | None = None, nsjail_path: str | None = None,
                 limits: Limits | None = None, allowed_packages: tuple[str, ...] | None = None,
                 isolation: str = "full", programs: tuple[str, ...] = ()) -> Backend:  # fmt: skip
    if name not in BACKENDS:
        close = difflib.get_close_matches(str(name), BACKENDS, n=1)
        raise UnknownBackendError(str(name), list(BACKENDS), close[0] if close else None)
    from . import _paths

    packages = _paths.DEFAULT_ALLOWED_PACKAGES if allowed_packages is None else tuple(allowed_packages)
    if name in ("auto", "process"):
        from ._process import ProcessBackend

        return ProcessBackend(workers, default_limits=limits, allowed_packages=packages, isolation=isolation,
                              programs=programs)  # fmt: skip
    if isolation != "full":
        raise ValueError(f"isolation={isolation!r}: the nsjail backend always isolates fully")
    from ._nsjail import NsjailBackend

    return NsjailBackend(workers, binary=nsjail_path, allowed_packages=packages)


class Sandbox:
    """Runs untrusted Python programs under limits.

    >>> from sandbox import Sandbox, Limits
    >>> with Sandbox() as sb:                                  # doctest: +SKIP
    ...     res = sb.run("print(input()[::-1])", stdin="abc", limits=Limits(timeout_s=2))
    >>> res.stdout                                             # doctest: +SKIP
    'cba\\n'

    ``backend``: ``"process"`` (warm forking workers, the default; ``"auto"`` means the same) or
    ``"nsjail"`` (the nsjail binary, one jail per run). ``workers``: concurrent runs (default: one
    per core). ``limits``: the default ``Limits`` of this sandbox. ``cache``: ``True`` for an
    in-memory LRU of results, or a ``ResultCache`` (optionally on disk); off by default.
    ``allowed_packages``: the third-party packages a program may import (with what they need);
    nothing else of any site-packages is visible inside (default: ``("numpy",)``).
    ``isolation``: ``"full"`` (the default: as root, or in user namespaces as a normal user; raises
    ``IsolationUnavailableError`` where the kernel allows neither) or ``"weak"``, asked for by
    name, where the kernel cannot isolate: seccomp, rlimits and a private directory only (a
    ``RuntimeWarning`` lists what it does not protect). ``queue_timeout_s``: the deadline of a
    ``run_many`` request's wait for a worker (the ``queued`` state; default: none); a request
    that waited longer is answered, unrun, with a ``sandbox_error`` that starts with
    ``sandbox.QUEUE_TIMEOUT`` (a failure of ours, which a grader asks again and never scores).
    ``programs``: programs many runs run (a verifier's driver), which the process backend's
    workers compile once instead of in every run (default: ``sandbox.registered_programs()``; see
    ``register_program``).
    """

    def __init__(
        self,
        backend: BackendName | str = "auto",
        *,
        workers: int | None = None,
        limits: Limits | None = None,
        cache: ResultCache | bool | None = None,
        nsjail_path: str | None = None,
        allowed_packages: Iterable[str] | None = None,
        isolation: Literal["full", "weak"] = "full",
        queue_timeout_s: float | None = None,
        programs: Iterable[str] | None = None,
    ) -> None:
        if queue_timeout_s is not None and (isinstance(queue_timeout_s, bool) or not isinstance(queue_timeout_s, (int, float))
                                            or not 0 < queue_timeout_s <= 86400):  # fmt: skip
            raise ValueError(f"queue_timeout_s: expected seconds in (0, 86400] or None, got {queue_timeout_s!r}")
        self.queue_timeout_s = None if queue_timeout_s is None else float(queue_timeout_s)
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits: expected sandbox.Limits, got {type(limits).__name__}")
        self.default_limits = limits or Limits()
        if isinstance(allowed_packages, str):
            raise TypeError("allowed_packages: expected a list of package names, got a str")
        if isinstance(programs, str):
            raise TypeError("programs: expected a list of programs, got a str")
        self.programs = tuple(registered_programs() if programs is None else programs)
        for code in self.programs:
            if not isinstance(code, str):
                raise TypeError(f"programs: expected str items, got {type(code).__name__}")
        self._backend: Backend | None = make_backend(
            backend, workers=workers, nsjail_path=nsjail_path, limits=self.default_limits,
            allowed_packages=None if allowed_packages is None else tuple(allowed_packages), isolation=isolation,
            programs=self.programs,
        )
        self.backend_name = self._backend.name
        if cache is not None and not isinstance(cache, (bool, ResultCache)):
            raise TypeError(f"cache: expected bool or sandbox.ResultCache, got {type(cache).__name__}")
        self.cache: ResultCache | None = ResultCache() if cache is True else cache if isinstance(cache, ResultCache) else None
        self._counter = itertools.count()
        # a compiled language's artefacts, by (toolchain, source): see sandbox._compile
        self.compiles = CompileCache()
        self._pid = os.getpid()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- info
    @property
    def workers(self) -> int:
        return self._live().size

    @property
    def isolation(self) -> dict[str, Any]:
        """What isolation the backend achieved on this machine (namespaces, memory limit, ...)."""
        return self._live().isolation

    @property
    def uids(self) -> list[int]:
        """The unprivileged uids runs execute as (for audits: no process of them may outlive a run)."""
        return self._live().uids

    def waiting_pids(self) -> list[int]:
        """Children the backend keeps forked and set up (as one of ``uids``) for the next run."""
        return self._live().waiting_pids()

    def _live(self) -> Backend:
        if self._backend is None:
            raise SandboxClosedError("this Sandbox is closed; create a new one")
        return self._backend

    # -- running
    def run(
        self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
        language: str = "python", files: Mapping[str, bytes | str] | None = None, fetch_files: Sequence[str] = (),
    ) -> ExecutionResult:
        """Run one program; blocks until it is done. Safe to call from any thread. ``language``:
        a name or alias of ``sandbox.languages`` that this sandbox runs (``LanguageUnavailableError``
        says why another cannot run). ``files``: input files (relative path -> bytes, or str as
        UTF-8) written to the run's work dir beside the program before it starts (a compiled
        language's compile sees them too), the run's to change. ``fetch_files``: paths of the work
        dir (a directory: every file under it; ``"."``: all of it) whose files come back in the
        result's ``files`` once every process of the run is gone (regular files only, no link
        followed; a path that does not exist is left out)."""
        lim = self._limits(limits)
        check_payload(code, stdin, lim)
        lang = self._language(language)
        inputs = coerce_files(files)
        if isinstance(fetch_files, str):
            raise TypeError("fetch_files: expected a list of paths, got one str")
        fetch = tuple(fetch_files)
        check_files(inputs, fetch, code, lim, lang)
        # (on the pool's thread, as run_many's: this thread only waits, so that whatever interrupts
        # it, a signal handler's exception, is told from a failure of the machinery)
        cancel = Cancel()
        future = self._executor().submit(self._run_checked, code, stdin, lim, trace_id, time.monotonic(), lang, cancel,
                                         inputs, fetch)  # fmt: skip
        return self._wait([future], cancel)[0]

    def check_language(self, name: str) -> str:
        """The canonical name of ``name`` (``sandbox.languages``) if this sandbox runs it here;
        ``LanguageUnavailableError`` saying why not (no toolchain, and the package that brings it;
        a backend that runs Python only), ``UnknownLanguageError`` for a name no language has."""
        return self._language(name)

    def _language(self, name: str) -> str:
        """The canonical name of a language this sandbox runs, its command looked up once."""
        from .languages import resolve, run_command

        lang = resolve(name).name
        if lang != "python":
            self._live()
            run_command(lang)
        return lang

    def _limits(self, limits: Limits | None) -> Limits:
        return resolve_limits(limits, self.default_limits)

    def _run_checked(self, code: str, stdin: str, lim: Limits, trace_id: str | None,
                     submitted: float | None = None, language: str = "python",
                     cancel: Cancel | None = None, files: Mapping[str, bytes] | None = None,
                     fetch: tuple[str, ...] = ()) -> ExecutionResult:  # fmt: skip
        backend = self._live()
        tid = trace_id if trace_id is not None else f"run/{next(self._counter)}"
        queued_ms = 0.0 if submitted is None else round((time.monotonic() - submitted) * 1000, 3)
        if self.queue_timeout_s is not None and queued_ms > self.queue_timeout_s * 1000:
            return ExecutionResult.infrastructure_failure(
                f"{QUEUE_TIMEOUT} ({self.queue_timeout_s:g} s): it waited {queued_ms / 1000:.3f} s for a worker",
                trace_id=tid, backend=backend.name,
            ).model_copy(update={"queued_ms": queued_ms})
        key = None
        packed = _child.pack_files([(n, False, d) for n, d in sorted(files.items())]) if files else None
        if self.cache is not None:
            key = self.cache.key(code, stdin, lim, backend.version, language, packed, fetch)
            hit = self.cache.get(key)
            if hit is not None:
                return hit.model_copy(update={"trace_id": tid, "cached": True, "queued_ms": queued_ms})
        try:
            queued: dict[str, Any] = {}
            if getattr(backend, "concurrency", None) is not None:
                # it queues requests itself (in its workers' pipes): it measures their wait, from
                # ``submitted``, and answers one past the deadline unrun (nsjail: one jail per run)
                start = time.monotonic() if submitted is None else submitted
                queued = {"submitted": start,
                          "queue_deadline": None if self.queue_timeout_s is None else start + self.queue_timeout_s}  # fmt: skip
            extra: dict[str, Any] = {} if cancel is None else {"cancel": cancel}
            if packed is not None:
                extra["extra"] = packed
            if fetch:
                extra["collect"] = (_child.fetch_spec(fetch), lim.max_disk_mb * MiB)
            compiled: tuple[Compiled, bool] | None = None
            if language != "python":
                from .languages import LANGUAGES, hidden_paths, run_command

                extra["command"], extra["hide"] = run_command(language), hidden_paths(language, "run")
                if LANGUAGES[language].compiled:
                    # (a compile is never cancelled: another caller may wait on the same one; it ends, is
                    # cached, and the cancelled caller's run is then withdrawn)
                    compiled = self._compile(code, language, lim, tid, queued, packed)
                    if compiled[0].sandbox_error is not None or compiled[0].status != "ok":
                        result = self._unrun(compiled, tid, backend.name)
                        return self._store(key, result, result.queued_ms)
                    code, extra["files"] = "", compiled[0].files
            result = backend.run(code, stdin, lim, tid, **queued, **extra)
            if queued:
                queued_ms = result.queued_ms
            if compiled is not None:
                result = result.model_copy(update=compiled[0].fields(cached=compiled[1]))
            if fetch and result.sandbox_error is None and result._artefacts is not None:
                result.files = {name: data for name, _, data in _child.unpack_files(result._artefacts)}
                result._artefacts = None
        except Exception as exc:  # a fault of ours must answer this request, never lose a batch
            log.exception("the %s backend failed on %s", backend.name, tid)
            result = ExecutionResult.infrastructure_failure(
                f"{backend.name} backend: {type(exc).__name__}: {exc}", trace_id=tid, backend=backend.name
            )
        return self._store(key, result, queued_ms)

    def _store(self, key: str | None, result: ExecutionResult, queued_ms: float) -> ExecutionResult:
        if self.cache is not None and key is not None:
            self.cache.put(key, result)
            return result.model_copy(update={"queued_ms": queued_ms}) if queued_ms else result
        result.queued_ms = queued_ms  # (a fresh result of its own: no copy)
        return result

    def _compile(self, code: str, language: str, lim: Limits, tid: str, queued: dict[str, Any],
                 files: bytes | None = None) -> tuple[Compiled, bool]:  # fmt: skip
        """The compile phase of ``code`` (``sandbox._compile``), with the run's input files
        (packed) beside it: from the compile cache, or run now."""
        from .languages import OUTPUT_DIR, compile_command, hidden_paths, toolchain_id

        def run_compiler() -> Compiled:
            clim = compile_limits(lim)
            backend = self._live()
            r = backend.run(code, "", clim, tid + "/compile", command=compile_command(language),  # type: ignore[call-arg]
                            collect=(OUTPUT_DIR, ARTEFACT_BYTES), hide=hidden_paths(language, "compile"),
                            **({"extra": files} if files else {}), **queued)  # fmt: skip
            return Compiled.from_run(r, lim)

        return self.compiles.get(compile_key(toolchain_id(language), code, files), run_compiler)

    @staticmethod
    def _unrun(compiled: tuple[Compiled, bool], tid: str, backend: str) -> ExecutionResult:
        """The result of a program whose compile failed (or whose compile the sandbox failed)."""
        c, cached = compiled
        if c.sandbox_error is not None:
            return ExecutionResult.infrastructure_failure(f"compile phase: {c.sandbox_error}", trace_id=tid, backend=backend)
        return ExecutionResult(trace_id=tid, backend=backend, **c.fields(cached=cached))

    def run_many(
        self,
        requests: Iterable[RunRequest | Mapping[str, Any] | str],
        *,
        limits: Limits | None = None,
        progress: bool = False,
    ) -> list[ExecutionResult]:
        """Run many programs concurrently on all workers; results come back in request order.

        Each request is a ``RunRequest``, a mapping with its fields, or a plain code string. All
        requests are validated before any runs, so a bad one raises without wasting the others.
        """
        cancel = Cancel()
        return self._wait(self._submit_many(requests, limits, cancel), cancel, progress=progress)

    def _wait(self, futures: list[Future[ExecutionResult]], cancel: Cancel, *, progress: bool = False) -> list[ExecutionResult]:
        """The results of ``futures``, in order. This thread only waits: an exception raised in it
        meanwhile (KeyboardInterrupt, a signal handler's deadline) withdraws the batch (nothing of it
        runs on) and goes on to the caller; so does a ``cancelling()`` block's cancel."""
        outer = current_cancel()
        link = 0 if outer is None else outer.on_cancel(cancel.cancel)
        try:
            if progress:
                from concurrent.futures import as_completed

                from tqdm import tqdm

                for _ in tqdm(as_completed(futures), total=len(futures), desc="sandbox", unit="run"):
                    pass
            return [f.result() for f in futures]
        except BaseException:
            self._withdraw(futures, cancel)
            raise
        finally:
            if outer is not None:
                outer.forget(link)

    @staticmethod
    def _withdraw(futures: list[Future[ExecutionResult]], cancel: Cancel) -> None:
        """A batch's caller went away: its runs not begun never run, those in flight are killed."""
        for f in futures:
            f.cancel()
        cancel.cancel()

    def _submit_many(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], limits: Limits | None,
                     cancel: Cancel | None = None) -> list[Future[ExecutionResult]]:  # fmt: skip
        """Validate every request (before any runs), then hand them to the pool, in order."""
        default = self._limits(limits)
        items = coerce_requests(requests, default)
        if not items:
            return []
        for i, r in enumerate(items):  # before any runs, as the rest of the validation
            if r.language != "python":
                try:
                    self._language(r.language)
                except LanguageUnavailableError as exc:
                    raise LanguageUnavailableError(f"request {i}: {exc}") from None
        pool = self._executor()
        submitted = time.monotonic()
        return [pool.submit(self._run_checked, r.code, r.stdin, r.limits or default, r.trace_id, submitted, r.language,
                            cancel, r.files, r.fetch_files) for r in items]  # fmt: skip

    # -- asyncio
    async def arun(self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
                   language: str = "python", files: Mapping[str, bytes | str] | None = None,
                   fetch_files: Sequence[str] = ()) -> ExecutionResult:  # fmt: skip
        """``run`` for an event loop: the run waits for a worker in the sandbox's own pool (no
        thread per call). Cancelling the awaiting task withdraws a run that has not begun."""
        return (await self.arun_many([RunRequest(code=code, stdin=stdin, limits=limits, trace_id=trace_id,
                                                 language=language, files=files or {},
                                                 fetch_files=tuple(fetch_files))]))[0]  # fmt: skip

    async def arun_many(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], *,
                        limits: Limits | None = None) -> list[ExecutionResult]:  # fmt: skip
        """``run_many`` for an event loop: results in request order; the requests are validated
        before any runs, as ``run_many``'s. Cancelling the awaiting task (a client that went away,
        ``asyncio.wait_for``'s deadline) withdraws every run of the batch that has not begun."""
        cancel = Cancel()
        futures = self._submit_many(requests, limits, cancel)
        if not futures:
            return []
        try:
            return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))
        except BaseException:
            self._withdraw(futures, cancel)
            raise

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                backend = self._live()  # (a backend that queues requests per worker takes more threads)
                self._pool = ThreadPoolExecutor(max_workers=getattr(backend, "concurrency", backend.size),
                                                thread_name_prefix="sandbox")  # fmt: skip
            return self._pool

    # -- lifecycle
    def close(self) -> None:
        backend, self._backend = self._backend, None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if backend is not None and os.getpid() == self._pid:
            backend.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_backend", None) is not None:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._backend is None else f"{self._backend.size} workers"
        return f"Sandbox(backend={self.backend_name!r}, {state})"
