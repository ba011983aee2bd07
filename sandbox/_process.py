"""The ``process`` backend, host side: a pool of warm workers (``_zygote``), one per slot, each
with its own uid, two memory cgroups (a run never shares one with the run before it) and a private
root. Requests go to whichever worker is idle; a worker that dies or hangs is replaced and the
request retried once, then answered with ``sandbox_error``."""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import json
import logging
import marshal
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Any

from . import _child, _host, _monitor, _paths, _seccomp
from ._programs import program_imports
from .errors import IsolationUnavailableError, SandboxClosedError
from .languages import toolchain_paths
from .models import CANCELLED, QUEUE_TIMEOUT, Cancel, ExecutionResult, Limits

log = logging.getLogger("sandbox.process")

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_zygote.py")
WATCHDOG_GRACE_S = 5.0
# Requests a worker holds at once: the one it runs, and the next, waiting in its pipe, so that it
# begins it as soon as it has answered (without one, a worker idles while this process reads its
# answer and writes the next request: more workers than cores ran 1.4-1.8x faster)
DEPTH = 2
MAX_UNSTARTED = 8  # a call sent back unbegun this often (its workers kept failing) counts as a failure
# Imported once by every worker, so that programs importing them pay nothing. Not `random`: its
# at-fork hook would reseed it in every child (the program's random is seeded on import).
DEFAULT_PRELOAD = ("typing", "collections", "math", "re", "itertools", "functools", "heapq", "bisect", "string")
START_TIMEOUT_S = 60.0


ISOLATION_MODES = ("full", "weak")
WEAK_WARNING = (
    "the process sandbox runs with weak isolation, as asked (isolation='weak'): programs run as your "
    "own user, with seccomp (no network, no exec, no AF_UNIX sockets) and rlimits, in a private "
    "directory; but they can read every file your user can read (your home, API keys in files, "
    "task data), see your processes and their environments in /proc, signal them, write where your "
    "user may write, and a program allowed to fork can leave processes behind. /proc is the host's, "
    "unmasked: the machine's memory (/proc/meminfo), CPU counters, boot time, forks and "
    "context switches (/proc/stat), load, uptime, kernel command line, boot id, pressure, disk and VM "
    "statistics, which other runs move"
)


class WorkerFailure(Exception):
    """The worker process died or stopped answering."""


def worker_environment() -> dict[str, str]:
    """The worker starts with this and nothing else: no secret of ours can reach a run."""
    env = _child.child_environment("/")
    env.pop("HOME")
    env.pop("TMPDIR")
    return env


def seccomp_filters() -> dict[str, str]:
    """Every filter variant and the sysinfo layer (``_seccomp``), hex-encoded for the worker
    (compiled once per process)."""
    filters = {
        _seccomp.variant(allow_fork=fork, allow_unix_sockets=unix, allow_exec=ex): _seccomp.compiled(
            allow_fork=fork, allow_unix_sockets=unix, allow_exec=ex
        ).hex()
        for unix in (True, False)
        for fork in (True, False)
        for ex in (False, True)
    }
    return filters | {_seccomp.LISTENER_VARIANT: _seccomp.compiled_listener().hex()}


class _Slot:
    def __init__(self, index: int, default_limits: Limits, preload: tuple[str, ...],
                 allowed_packages: tuple[str, ...], isolation: str) -> None:  # fmt: skip
        self.index = index
        self.isolation = isolation
        self.preload = preload
        self.allowed_packages = allowed_packages
        self.mounts: list[list[str]] | None = None  # the jail's mount list (computed once: it walks every installed distribution)
        self.programs: list[str] = []  # compiled once by the worker (sandbox.register_program)
        self.default_limits = default_limits
        self.lease = _host.lease_uid()
        self.uid = self.lease.uid
        self.cgroups: list[_host.CgroupInfo] = []
        self.cgroup_note: str | None = None  # why there are none
        try:
            for half in ("a", "b"):
                cg, self.cgroup_note = _host.make_cgroup(f"code-env-{self.uid}-{half}")
                if cg is None:
                    break
                self.cgroups.append(cg)
        except BaseException:  # an unusable $CODE_ENV_CGROUP: nothing of the slot is left
            for cg in self.cgroups:
                _host.remove_cgroup(cg)
            self.lease.release()
            raise
        if len(self.cgroups) < 2:
            for cg in self.cgroups:
                _host.remove_cgroup(cg)
            self.cgroups = []
        self.root_dir = tempfile.mkdtemp(prefix="code-env-root-")
        if self.isolation == "weak":
            # the runs' directories are made in it: a run (the slot's uid, as root) must reach its
            # own by its path (HOME, TMPDIR, sys.path[0]) without listing the others
            os.chmod(self.root_dir, 0o711)
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self.log_path = os.path.join(self.root_dir + ".log")

    # -- lifecycle
    def start(self) -> None:
        cfg = {
            "index": self.index,
            "uid": self.uid,
            "gid": self.uid,
            "root_dir": self.root_dir,
            "cgroup_dirs": [cg.path for cg in self.cgroups],
            "cgroup_version": self.cgroups[0].version if self.cgroups else None,
            "seccomp": seccomp_filters(),
            "default_limits": self.default_limits.model_dump(),
            "preload": list(self.preload),
            "isolation": self.isolation,
            "mounts": self.mounts if self.mounts is not None else [list(m) for m in _paths.jail_mounts(self.allowed_packages,
                                                                                                      toolchain_paths())],
            "proc_options": _paths.PROC_OPTIONS,
            "programs": self.programs,
        }
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                # -S: the site module runs later, in the jail (_zygote.serve), where the host's
                # .pth files (an editable install's import hook...) are not: nothing of them is
                # loaded into the interpreter every run is forked from
                [sys.executable, "-S", "-s", "-B", ZYGOTE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logf,
                env=worker_environment(),
                close_fds=True,
                start_new_session=True,
                cwd="/",
            )
        # the configuration goes through the pipe, not the command line (which `ps` shows); in
        # marshal's format: the worker reads it before it may import json (_zygote)
        self._send_raw(self.proc, marshal.dumps(cfg))
        hello = self._recv(time.monotonic() + START_TIMEOUT_S)
        if hello.get("isolation_unavailable"):
            self.stop()
            if hello.get("proc_refused"):
                raise IsolationUnavailableError(
                    "process", _paths.proc_subset_refused(os.uname().release, _paths.PROC_OPTIONS), kernel=hello["isolation_unavailable"]
                )
            raise IsolationUnavailableError("process", hello["isolation_unavailable"])
        if not hello.get("ready"):
            self.stop()
            raise RuntimeError(f"sandbox worker failed to start: {hello.get('error')}\n{hello.get('trace', '')}")
        self.info = hello["info"]
        opened = self.cgroups and "cgroup_error" not in self.info
        reason = self.cgroup_note or f"the worker cannot open the slot's cgroups ({self.info.get('cgroup_error')})"
        self.info["memory"] = _host.memory_mode(self.cgroups if opened else [], reason)

    def stop(self, *, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if not kill and proc.poll() is None:
            with contextlib.suppress(OSError):
                self._send_on(proc, {"op": "exit"})
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                kill = True
        if kill or proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        _host.kill_uid(self.uid)

    def restart(self) -> None:
        self.stop(kill=True)
        self.start()

    def close(self) -> None:
        self.stop()
        for cg in self.cgroups:
            _host.remove_cgroup(cg)
        shutil.rmtree(self.root_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)
        self.lease.release()

    # -- protocol
    @staticmethod
    def _send_on(proc: subprocess.Popen[bytes], obj: dict[str, Any]) -> None:
        _Slot._send_raw(proc, json.dumps(obj, ensure_ascii=True).encode())

    @staticmethod
    def _send_raw(proc: subprocess.Popen[bytes], data: bytes) -> None:
        assert proc.stdin is not None
        fd = proc.stdin.fileno()
        view = memoryview(struct.pack("<I", len(data)) + data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def _recv(self, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> dict[str, Any]:
        proc = proc or self.proc
        if proc is None or proc.stdout is None:
            raise WorkerFailure("worker is not running")
        fd = proc.stdout.fileno()

        def read_exact(n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                ready, _, _ = select.select([fd], [], [], left)
                if not ready:
                    raise TimeoutError
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    raise WorkerFailure(f"worker {proc.pid} exited ({self._tail_log()})")
                buf += chunk
            return bytes(buf)

        (n,) = struct.unpack("<I", read_exact(4))
        return json.loads(read_exact(n))

    def _tail_log(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self.log_path) - 400))
                return fh.read().decode("utf-8", "replace").strip() or "no log output"
        except OSError:
            return "no log"

    def kill_now(self) -> None:
        """SIGKILL the worker's process group, nothing more (its pipes stay open: a thread writing
        to it gets EPIPE, never a reused descriptor); ``stop`` or ``restart`` cleans up."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


@functools.lru_cache(maxsize=256)
def _wire_limits(limits: Limits) -> dict[str, Any]:
    """``limits`` as the worker reads them (a batch's requests share a few frozen ``Limits``: dumped
    once each, not once per request). The dict is shared: never changed after."""
    return limits.model_dump()


def watchdog_s(limits: Limits) -> float:
    """How long a worker may take to answer a request it has begun: the longest a run may take (a
    starved one's wall clock moves, up to MAX_WALL_FACTOR times its limit) plus grace. Past this
    the worker is hung."""
    return _monitor.MAX_WALL_FACTOR * limits.timeout_s + 2.0 + WATCHDOG_GRACE_S


class _Withdrawn(Exception):
    """A caller's cancel came while it waited for a place (``_pick``)."""


class _Call:
    """One request on its way through a worker: sent, then answered by the slot's reader thread
    (``reply``), or failed with the worker (``failure``; ``began``: the worker had begun it, else it
    was still waiting in the worker's pipe behind the request the worker failed on)."""

    __slots__ = ("began", "cancelled", "done", "failure", "limits", "reply", "request")

    def __init__(self, request: dict[str, Any], limits: Limits) -> None:
        self.request, self.limits = request, limits
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.failure: str | None = None
        self.began = False
        self.cancelled = False  # its caller went away: never sent again; its worker is killed once it runs it


class ProcessBackend:
    """Warm forking workers; see the module docstring."""

    name = "process"

    def __init__(self, workers: int | None = None, *, default_limits: Limits | None = None,
                 preload: tuple[str, ...] = DEFAULT_PRELOAD,
                 allowed_packages: tuple[str, ...] | None = None, isolation: str = "full",
                 programs: tuple[str, ...] = ()) -> None:  # fmt: skip
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1 or n > 1024:
            raise ValueError(f"workers: expected an int in 1..1024, got {workers!r}")
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation: expected one of {', '.join(map(repr, ISOLATION_MODES))}, got {isolation!r}")
        self.size = n
        # what the host's registered programs import is preloaded with the rest (sandbox._programs)
        preload = tuple(dict.fromkeys((*preload, *program_imports(programs))))
        packages = tuple(allowed_packages) if allowed_packages is not None else _paths.DEFAULT_ALLOWED_PACKAGES
        # an unknown package is a ValueError here, not in a worker; computed once for every start
        # and restart of every slot (it reads the metadata of every installed distribution)
        mounts = [list(m) for m in _paths.jail_mounts(packages, toolchain_paths())]
        self._slots: list[_Slot] = []
        # per slot: the calls it was sent and has not answered, in order (at most DEPTH), when its
        # first became the one the worker runs, the lock its senders hold (one request at a time on
        # its pipe), and whether its worker is being replaced; all under this condition
        self._cv = threading.Condition()
        self._calls: dict[int, collections.deque[_Call]] = {}
        self._reserved: dict[int, int] = {}  # places _pick promised, not yet taken by _send
        self._line: collections.deque[object] = collections.deque()  # callers waiting for a place, in arrival order
        self._head_since: dict[int, float] = {}
        self._send_locks: dict[int, threading.Lock] = {}
        self._replacing: set[int] = set()
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        try:
            for i in range(n):
                self._slots.append(_Slot(i, default_limits or Limits(), tuple(preload), packages, isolation))
                self._slots[-1].mounts = mounts
                self._slots[-1].programs = list(programs)
            errors: list[BaseException] = []

            def start(slot: _Slot) -> None:
                try:
                    slot.start()
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=start, args=(s,)) for s in self._slots]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        except BaseException:
            self.close()
            raise
        for slot in self._slots:
            self._calls[slot.index] = collections.deque()
            self._reserved[slot.index] = 0
            self._head_since[slot.index] = 0.0
            self._send_locks[slot.index] = threading.Lock()
            reader = threading.Thread(target=self._read_replies, args=(slot,), daemon=True,
                                      name=f"sandbox-reader-{slot.index}")  # fmt: skip
            reader.start()
            self._readers.append(reader)
        if isolation == "weak":
            warnings.warn(WEAK_WARNING, RuntimeWarning, stacklevel=3)

    @property
    def isolation(self) -> dict[str, Any]:
        return dict(self._slots[0].info) if self._slots else {}

    @property
    def version(self) -> str:
        return f"process/{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"

    @property
    def uids(self) -> list[int]:
        """The private uids of the slots (every process of a run has one of them)."""
        return [s.uid for s in self._slots]

    def waiting_pids(self) -> list[int]:
        """Children kept set up for the next run stay root-owned until their program arrives, so
        no process of the sandbox's uids is ever waiting: always empty."""
        return []

    def worker_pids(self) -> list[int]:
        """The workers' host pids (each started as a waiter whose only child, the PID 1 of the slot's
        PID namespace, does the work; either one's death ends both)."""
        pids = []
        for s in self._slots:
            proc = s.proc  # once: a slot being replaced sets it to None at any moment
            if proc is not None:
                try:
                    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
                        pids += [int(x) for x in fh.read().split()] or [proc.pid]
                except (OSError, ValueError):
                    pids.append(proc.pid)
        return pids

    @property
    def concurrency(self) -> int:
        """How many calls of ``run`` keep every worker busy: ``DEPTH`` per worker."""
        return self.size * DEPTH

    def run(self, code: str, stdin: str, limits: Limits, trace_id: str | None, *, submitted: float | None = None,
            queue_deadline: float | None = None, command: tuple[str, ...] | None = None, files: bytes | None = None,
            extra: bytes | None = None, collect: tuple[str, int] | None = None, hide: tuple[str, ...] = (),
            cancel: Cancel | None = None) -> ExecutionResult:  # fmt: skip
        """Run one program on the least loaded worker. Each worker holds up to ``DEPTH`` requests:
        the one it runs and the next, waiting in its pipe, so that it starts the next run as soon
        as it has answered, without waiting for this process. A worker that dies or hangs
        (watchdog) fails the request it had begun (run once more, on any worker; a second failure
        is a ``sandbox_error``) and sends back the ones it had not begun, which are simply sent
        again. ``command``: another language's (``sandbox.languages.run_command``), which the run's
        process executes in place of Python. ``files``: a compiled program's (``_child.pack_files``),
        in place of ``code``. ``extra``: the run's input files (``_child.pack_files``), written to its
        work dir beside the program. ``collect``: a compile's (a directory of the work dir and a byte
        budget), or the files a caller fetches (``_child.fetch_spec``): they come back as the
        result's ``_artefacts``. ``hide``: directories of the jail the run
        must not see (``sandbox.languages.hidden_paths``), after an empty word of the command.
        ``cancel``: the caller's; on cancel (or when this thread is interrupted, an exception in
        its wait) a request still waiting for a place is dropped, one in a worker's pipe is never
        run, and a run in flight is killed with its worker, which is replaced (the run is not
        retried): the answer is a ``sandbox_error`` ``CANCELLED``, which no one scores."""
        wire = _wire_limits(limits) if collect is None else {**_wire_limits(limits), "collect": list(collect)}
        request: dict[str, Any] = {"op": "run", "code": code, "stdin": stdin, "limits": wire, "trace_id": trace_id,
                                   "not_after": queue_deadline,
                                   **({"command": [*command, *(["", *hide] if hide else [])]} if command else {})}  # fmt: skip
        if files is not None:
            request["files"] = base64.b64encode(files).decode("ascii")
        if extra:
            request["extra"] = base64.b64encode(extra).decode("ascii")
        submitted = time.monotonic() if submitted is None else submitted
        failures: list[str] = []
        unstarted = 0
        while True:
            call = _Call(request, limits)
            woken = 0 if cancel is None else cancel.on_cancel(self._wake)  # (a caller waiting in line leaves it)
            try:
                slot = self._pick(cancel)
            except _Withdrawn:
                return ExecutionResult.infrastructure_failure(CANCELLED, trace_id=trace_id, backend=self.name)
            finally:
                if cancel is not None:
                    cancel.forget(woken)
            self._send(slot, call)
            key = 0 if cancel is None else cancel.on_cancel(lambda slot=slot, call=call: self._cancel(slot, call))  # type: ignore[misc]
            try:
                call.done.wait()
            except BaseException:  # this thread was interrupted: its run must not keep the worker
                self._cancel(slot, call)
                raise
            finally:
                if cancel is not None:
                    cancel.forget(key)
            if call.cancelled:
                return ExecutionResult.infrastructure_failure(CANCELLED, trace_id=trace_id, backend=self.name)
            if call.reply is not None:
                break
            if call.began or unstarted >= MAX_UNSTARTED:
                failures.append(call.failure or "the worker failed")
                if len(failures) == 2:
                    return ExecutionResult.infrastructure_failure(
                        "sandbox worker failed twice: " + " | ".join(failures), trace_id=trace_id, backend=self.name
                    )
            else:
                unstarted += 1
        reply = call.reply
        reply.pop("worker_ms", None)
        # waited: until the worker began it (the clock is the machine's: CLOCK_MONOTONIC, the same
        # in every process and namespace of ours)
        queued_ms = round(max(0.0, reply.pop("began", submitted) - submitted) * 1000, 3)
        if reply.pop("queue_expired", False):
            return ExecutionResult.infrastructure_failure(
                f"{QUEUE_TIMEOUT} ({(queue_deadline or submitted) - submitted:g} s): it waited {queued_ms / 1000:.3f} s for a worker",
                trace_id=trace_id, backend=self.name,
            ).model_copy(update={"queued_ms": queued_ms})
        trace = reply.pop("trace", None)
        if trace:
            log.error("sandbox worker error on %s:\n%s", trace_id, trace)
        artefacts = reply.pop("files", None)
        result = ExecutionResult.from_wire({**reply, "trace_id": trace_id, "backend": self.name, "queued_ms": queued_ms})
        if artefacts is not None and collect is not None:
            result._artefacts = base64.b64decode(artefacts)
        if failures:
            result.reruns += 1
            result.rerun_reason = "; ".join(filter(None, [result.rerun_reason, f"the worker failed first: {failures[0]}"]))
        return result

    def _cancel(self, slot: _Slot, call: _Call) -> None:
        """Withdraw ``call``: answered at once if its worker has not begun it (the worker will skip
        past it: killed when it comes to it), its worker killed now if it has (``_fail`` replaces
        it and answers the calls behind, which are sent again)."""
        with self._cv:
            if call.done.is_set() or call.cancelled:
                return
            call.cancelled = True
            calls = self._calls[slot.index]
            head = bool(calls) and calls[0] is call
            if not head:  # (still in the deque: the reader kills the worker if it comes to it)
                call.done.set()
        if head:
            slot.kill_now()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _pick(self, cancel: Cancel | None = None) -> _Slot:
        """The slot with the fewest calls in hand, once one has fewer than ``DEPTH``. Callers are
        served in arrival order: each waits in line (``_line``) and only the first may take a
        place, so that no caller waits many rounds while later ones are served."""
        ticket = object()
        with self._cv:
            self._line.append(ticket)
            try:
                while True:
                    if self._closed:
                        raise SandboxClosedError("this Sandbox is closed; create a new one")
                    if cancel is not None and cancel.cancelled:
                        raise _Withdrawn
                    if self._line[0] is ticket:
                        open_ = [s for s in self._slots if s.index not in self._replacing]
                        best = min(open_, key=self._load, default=None)
                        if best is not None and self._load(best) < DEPTH:
                            self._line.popleft()
                            self._reserved[best.index] += 1
                            if self._line:
                                self._cv.notify_all()  # the next in line may find a place too
                            return best
                    self._cv.wait()
            except BaseException:
                if ticket in self._line:
                    self._line.remove(ticket)
                    self._cv.notify_all()
                raise

    def _load(self, slot: _Slot) -> int:
        return len(self._calls[slot.index]) + self._reserved[slot.index]

    def _send(self, slot: _Slot, call: _Call) -> None:
        """Queue ``call`` on ``slot`` (whose place ``_pick`` reserved) and write it to the worker."""
        i = slot.index
        with self._send_locks[i]:
            if slot.proc is None:  # its worker could not be restarted: try once more here
                try:
                    slot.start()
                except Exception as exc:
                    with self._cv:
                        self._reserved[i] -= 1
                        self._cv.notify_all()
                    call.failure, call.began = f"the worker could not be started: {exc}", True
                    call.done.set()
                    return
            with self._cv:
                self._reserved[i] -= 1
                calls = self._calls[i]
                if i in self._replacing or self._closed:  # replaced meanwhile: not begun, sent again
                    call.failure = "the worker was being replaced"
                    call.done.set()
                    self._cv.notify_all()
                    return
                calls.append(call)
                if len(calls) == 1:
                    self._head_since[i] = time.monotonic()
                proc = slot.proc
                self._cv.notify_all()  # the reader waits for a call
            try:
                assert proc is not None
                slot._send_on(proc, call.request)
            except OSError:
                pass  # the worker died: its reader finds out, and fails what it holds
            except BaseException:
                # interrupted mid-write: the worker's pipe is out of step, so it is replaced
                slot.kill_now()
                raise

    def _read_replies(self, slot: _Slot) -> None:
        """The slot's reader thread: answers its calls in order, or fails them with the worker (it
        died, or the watchdog found it hung)."""
        i = slot.index
        while True:
            with self._cv:
                while not self._closed and (not self._calls[i] or i in self._replacing):
                    self._cv.wait()
                if self._closed:
                    return
                head = self._calls[i][0]
                deadline = self._head_since[i] + watchdog_s(head.limits)
                proc = slot.proc
            try:
                reply = slot._recv(deadline, proc)
            except TimeoutError:
                self._fail(slot, f"watchdog: no answer from the worker within {watchdog_s(head.limits):.1f}s")
                continue
            except (WorkerFailure, OSError, ValueError) as exc:
                self._fail(slot, str(exc))
                continue
            with self._cv:
                calls = self._calls[i]
                if calls and calls[0] is head:
                    calls.popleft()
                    self._head_since[i] = time.monotonic()
                withdrawn = bool(calls) and calls[0].cancelled  # the worker has begun a run no one waits for
                self._cv.notify_all()
            head.reply = reply
            head.done.set()
            if withdrawn:
                slot.kill_now()

    def _fail(self, slot: _Slot, why: str) -> None:
        """The worker of ``slot`` failed: fail every call it holds (the first had begun), replace it."""
        i = slot.index
        slot.kill_now()  # first: a sender blocked on its full pipe gets EPIPE and lets go
        with self._cv:
            failed = list(self._calls[i])
            self._calls[i].clear()
            self._cv.notify_all()
            if self._closed:
                for c in failed:
                    c.failure, c.began = "the sandbox was closed", True
                    c.done.set()
                return
            self._replacing.add(i)
        # the text, not an exception: a handler that keeps records (pytest's, a memory handler)
        # would keep its traceback, every frame of it and what they hold
        if failed and failed[0].cancelled:  # killed on purpose: its run's caller went away
            log.info("sandbox worker %d killed with a cancelled run; replacing it", slot.index)
        else:
            log.warning("sandbox worker %d failed: %s; replacing it", slot.index, why)
        for k, c in enumerate(failed):
            c.failure, c.began = why, k == 0
            c.done.set()
        try:
            with self._send_locks[i]:
                try:
                    slot.restart()
                except Exception as exc:  # no worker until the next call starts one (_send)
                    log.warning("sandbox worker %d could not be restarted: %s", slot.index, str(exc))
                    slot.stop(kill=True)
        finally:
            with self._cv:
                self._replacing.discard(i)
                self._head_since[i] = time.monotonic()
                self._cv.notify_all()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            with self._cv:
                self._closed = True
                self._cv.notify_all()
        for s in self._slots:
            s.close()
        for reader in self._readers:
            reader.join(timeout=10)
        with self._cv:  # a call still in hand (a run() of another thread): answered, never lost
            for calls in self._calls.values():
                for c in calls:
                    c.failure, c.began = "the sandbox was closed", True
                    c.done.set()
                calls.clear()
