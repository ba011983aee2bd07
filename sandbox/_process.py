"""The ``process`` backend, host side: a pool of warm workers (``_zygote``), one per slot, each
with its own uid, two memory cgroups (a run never shares one with the run before it) and a private
root. Requests go to whichever worker is idle; a worker that dies or hangs is replaced and the
request retried once, then answered with ``sandbox_error``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
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
from .errors import IsolationUnavailableError
from .models import ExecutionResult, Limits

log = logging.getLogger("sandbox.process")

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_zygote.py")
WATCHDOG_GRACE_S = 5.0
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
        _seccomp.variant(allow_fork=fork, allow_unix_sockets=unix): _seccomp.compiled(
            allow_fork=fork, allow_unix_sockets=unix
        ).hex()
        for unix in (True, False)
        for fork in (True, False)
    }
    return filters | {_seccomp.LISTENER_VARIANT: _seccomp.compiled_listener().hex()}


class _Slot:
    def __init__(self, index: int, default_limits: Limits, preload: tuple[str, ...],
                 allowed_packages: tuple[str, ...], isolation: str) -> None:  # fmt: skip
        self.index = index
        self.isolation = isolation
        self.preload = preload
        self.allowed_packages = allowed_packages
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
            "mounts": [list(m) for m in _paths.jail_mounts(self.allowed_packages)],
            "proc_options": _paths.PROC_OPTIONS,
        }
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-B", ZYGOTE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logf,
                env=worker_environment(),
                close_fds=True,
                start_new_session=True,
                cwd="/",
            )
        # the configuration goes through the pipe, not the command line (which `ps` shows)
        self._send_on(self.proc, cfg)
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
        assert proc.stdin is not None
        data = json.dumps(obj, ensure_ascii=True).encode()
        fd = proc.stdin.fileno()
        view = memoryview(struct.pack("<I", len(data)) + data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def _recv(self, deadline: float) -> dict[str, Any]:
        proc = self.proc
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

    def call(self, request: dict[str, Any], limits: Limits) -> dict[str, Any]:
        if self.proc is None:
            self.start()  # stopped after an interruption
        if self.proc is None or self.proc.poll() is not None:
            raise WorkerFailure("worker is not running")
        try:
            self._send_on(self.proc, request)
        except OSError as exc:
            raise WorkerFailure(f"could not send to worker: {exc}") from exc
        # The longest a run may take (a starved one's wall clock moves, up to MAX_WALL_FACTOR times
        # its limit) plus grace: past this the worker is hung.
        budget = _monitor.MAX_WALL_FACTOR * limits.timeout_s + 2.0 + WATCHDOG_GRACE_S
        try:
            reply = self._recv(time.monotonic() + budget)
        except TimeoutError:
            raise WorkerFailure(f"watchdog: no answer from the worker within {budget:.1f}s") from None
        return reply


class ProcessBackend:
    """Warm forking workers; see the module docstring."""

    name = "process"

    def __init__(self, workers: int | None = None, *, default_limits: Limits | None = None,
                 preload: tuple[str, ...] = DEFAULT_PRELOAD,
                 allowed_packages: tuple[str, ...] | None = None, isolation: str = "full") -> None:  # fmt: skip
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1 or n > 1024:
            raise ValueError(f"workers: expected an int in 1..1024, got {workers!r}")
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation: expected one of {', '.join(map(repr, ISOLATION_MODES))}, got {isolation!r}")
        self.size = n
        packages = tuple(allowed_packages) if allowed_packages is not None else _paths.DEFAULT_ALLOWED_PACKAGES
        _paths.jail_mounts(packages)  # an unknown package is a ValueError here, not in a worker
        self._slots: list[_Slot] = []
        self._idle: queue.Queue[_Slot] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        try:
            for i in range(n):
                self._slots.append(_Slot(i, default_limits or Limits(), tuple(preload), packages, isolation))
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
        for s in self._slots:
            self._idle.put(s)
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

    def run(self, code: str, stdin: str, limits: Limits, trace_id: str | None) -> ExecutionResult:
        request = {"op": "run", "code": code, "stdin": stdin, "limits": limits.model_dump(), "trace_id": trace_id}
        failures: list[str] = []
        for _attempt in range(2):
            slot = self._idle.get()
            try:
                reply = slot.call(request, limits)
            except WorkerFailure as exc:
                failures.append(str(exc))
                # the text, not the exception: a handler that keeps records (pytest's, a memory
                # handler) would keep its traceback, every frame of it and what they hold
                log.warning("sandbox worker %d failed on %s: %s; replacing it", slot.index, trace_id, failures[-1])
                del exc
                try:
                    slot.restart()
                except Exception as exc2:  # the slot stays broken; the next call retries
                    failures.append(f"restart failed: {exc2}")
                continue
            except BaseException:
                # interrupted (KeyboardInterrupt, ...) with a reply possibly still in flight: the
                # pipe is out of step, so this worker is replaced before anyone else uses it
                slot.stop(kill=True)
                raise
            finally:
                self._idle.put(slot)
            reply.pop("worker_ms", None)
            trace = reply.pop("trace", None)
            if trace:
                log.error("sandbox worker error on %s:\n%s", trace_id, trace)
            result = ExecutionResult.from_wire({**reply, "trace_id": trace_id, "backend": self.name})
            if failures:
                result.reruns += 1
                result.rerun_reason = "; ".join(filter(None, [result.rerun_reason, f"the worker failed first: {failures[0]}"]))
            return result
        return ExecutionResult.infrastructure_failure(
            "sandbox worker failed twice: " + " | ".join(failures), trace_id=trace_id, backend=self.name
        )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for s in self._slots:
            s.close()
