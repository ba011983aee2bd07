"""Watching one running program from outside: feed stdin, read stdout/stderr while it runs (capped
per stream, the rest discarded or the run killed), enforce the wall clock and the CPU budget by
killing it, and collect exit status and resource usage.

Standard library only: it runs inside the process backend's worker (zygote) and in the host for
the nsjail backend. Everything here is driven by ``poll`` on a pidfd and the pipes; no signal
handlers, no threads, so it works from any caller.
"""

from __future__ import annotations

import errno
import math
import os
import select
import signal
import time

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = max(os.cpu_count() or 1, 1)  # read at import: a worker later loses sight of /sys
TAIL_BYTES = 4096
READ_CHUNK = 1 << 16


class Stream:
    """One captured output stream: the first ``cap`` bytes and the last ``TAIL_BYTES``."""

    __slots__ = ("cap", "head", "tail", "total")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def feed(self, data: bytes) -> bool:
        """Take a chunk; returns True the first time the cap is exceeded."""
        before = self.total
        self.total += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data)[-TAIL_BYTES:]
        return before <= self.cap < self.total

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return bytes(self.head).decode("utf-8", "replace")


class Watch:
    """What the monitor needs to know about one run. ``status_fd``: the child's "setup done"
    channel; ``kill(sig)``: kills the whole run (default ``os.kill(pid)``); ``cpu_probe()``: CPU
    seconds used so far (default: from /proc/<pid>/stat)."""

    def __init__(self, *, pid: int, stdout_fd: int, stderr_fd: int, stdin_fd: int | None,
                 stdin_data: bytes, timeout_s: float, cpu_time_s: float, max_output_bytes: int,
                 kill_on_overflow: bool, status_fd: int | None = None, kill: Any = None,
                 cpu_probe: Any = None, delay_probe: Any = None, on_start: Any = None) -> None:  # fmt: skip
        self.pid = pid
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.stdin_fd = stdin_fd
        self.stdin_data = stdin_data
        self.timeout_s = timeout_s
        self.cpu_time_s = cpu_time_s
        self.max_output_bytes = max_output_bytes
        self.kill_on_overflow = kill_on_overflow
        self.status_fd = status_fd
        self.kill = kill
        self.cpu_probe = cpu_probe or (lambda: proc_cpu_s(pid))
        self.delay_probe = delay_probe or (lambda: proc_run_delay_s(pid))
        self.on_start = on_start  # called once the clock runs (the worker forks the next child)


class Outcome:
    """What happened. ``killed_for``: "wall" | "cpu" | "output" | None; ``run_delay_s``: time the
    program spent runnable but waiting for a CPU (schedstat), read when the wall clock hit."""

    def __init__(self, cap: int) -> None:
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.maxrss_kb = 0
        self.killed_for: str | None = None
        self.run_delay_s = 0.0
        self.cpu_at_kill_s = 0.0
        self.setup_error: str | None = None
        self.stdout = Stream(cap)
        self.stderr = Stream(cap)


_PROC_FD: int | None = None


def set_proc_dir(fd: int) -> None:
    """Read process statistics through this handle on a /proc (a worker that has left the host's
    filesystem keeps one on the host's)."""
    global _PROC_FD
    _PROC_FD = fd


def _read_proc(path: str) -> bytes:
    if _PROC_FD is None:
        with open("/proc/" + path, "rb") as fh:
            return fh.read()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=_PROC_FD)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def proc_cpu_s(pid: int) -> float:
    """CPU time of ``pid`` and its reaped children, from /proc (clock-tick resolution)."""
    try:
        raw = _read_proc(f"{pid}/stat")
    except OSError:
        return 0.0
    fields = raw[raw.rfind(b")") + 2 :].split()
    # fields[0] is state (field 3); utime is field 14 -> index 11.
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / CLK_TCK


def proc_run_delay_s(pid: int) -> float:
    """Seconds ``pid`` spent runnable but not running (waiting on a run queue)."""
    try:
        parts = _read_proc(f"{pid}/schedstat").split()
        return int(parts[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _set_nonblocking(fd: int) -> None:
    os.set_blocking(fd, False)


def watch(w: Watch) -> Outcome:
    """Run the poll loop until the program is gone and its pipes are drained."""
    out = Outcome(w.max_output_bytes)
    kill = w.kill or (lambda sig: _safe_kill(w.pid, sig))
    start = time.monotonic()
    wall_deadline = start + w.timeout_s
    pidfd = os.pidfd_open(w.pid)
    poller = select.poll()
    fds: dict[int, str] = {}
    for fd, name in ((w.stdout_fd, "stdout"), (w.stderr_fd, "stderr")):
        _set_nonblocking(fd)
        fds[fd] = name
        poller.register(fd, select.POLLIN)
    status_buf = bytearray()
    setup_done = w.status_fd is None
    if w.status_fd is not None:
        poller.register(w.status_fd, select.POLLIN)
    stdin_fd = w.stdin_fd
    stdin_view = memoryview(w.stdin_data)
    if stdin_fd is not None:
        _set_nonblocking(stdin_fd)
        stdin_view = _write_some(stdin_fd, stdin_view)
        if len(stdin_view) == 0:
            os.close(stdin_fd)
            stdin_fd = None
        else:
            poller.register(stdin_fd, select.POLLOUT)
    poller.register(pidfd, select.POLLIN)
    if w.on_start is not None:
        w.on_start()
    exited = False
    status = 0
    rusage = None

    def take_output(fd: int) -> bool:
        """Read what ``fd`` has; returns True when this chunk first overflowed its stream's cap."""
        chunk = _read(fd)
        if chunk is None:
            return False
        if not chunk:
            poller.unregister(fd)
            del fds[fd]
            return False
        return (out.stdout if fds[fd] == "stdout" else out.stderr).feed(chunk)

    def take_status(fd: int) -> None:
        nonlocal status_buf, setup_done
        chunk = _read(fd)
        if chunk:
            status_buf += chunk
            setup_done = setup_done or status_buf[:1] == b"R"
        elif chunk is not None:
            poller.unregister(fd)

    try:
        ncpu = NCPU
        next_cpu_check = start + min(0.02, w.cpu_time_s / ncpu)
        while not exited:
            now = time.monotonic()
            if out.killed_for is None:
                if now >= wall_deadline:
                    out.cpu_at_kill_s = w.cpu_probe()
                    out.run_delay_s = w.delay_probe()
                    out.killed_for = "wall"
                    kill(signal.SIGKILL)
                elif now >= next_cpu_check:
                    cpu = w.cpu_probe()
                    if cpu >= w.cpu_time_s:
                        out.cpu_at_kill_s = cpu
                        out.killed_for = "cpu"
                        kill(signal.SIGKILL)
                    else:
                        # the CPU clock runs at most `ncpu` times faster than the wall clock
                        next_cpu_check = now + max((w.cpu_time_s - cpu) / ncpu, 0.002)
            if out.killed_for is None:
                wait_s = min(wall_deadline, next_cpu_check) - now
                wait_ms = max(1, math.ceil(wait_s * 1000))
            else:
                wait_ms = 50  # killed: wait for the exit
            for fd, ev in poller.poll(wait_ms):
                if fd == pidfd:
                    _, status, rusage = os.wait4(w.pid, 0)
                    exited = True
                elif fd == w.status_fd:
                    take_status(fd)
                elif fd == stdin_fd:
                    if ev & (select.POLLERR | select.POLLHUP):
                        poller.unregister(fd)
                        os.close(fd)
                        stdin_fd = None
                        continue
                    stdin_view = _write_some(fd, stdin_view)
                    if len(stdin_view) == 0:
                        poller.unregister(fd)
                        os.close(fd)
                        stdin_fd = None
                elif fd in fds:
                    if take_output(fd) and w.kill_on_overflow and out.killed_for is None:
                        out.killed_for = "output"
                        kill(signal.SIGKILL)
        out.wall_s = time.monotonic() - start
        # The program is gone; whatever still holds the pipes (nothing, when a pid namespace
        # took its descendants with it) gets a short grace before we stop reading.
        drain_deadline = time.monotonic() + 1.0
        while fds and time.monotonic() < drain_deadline:
            for fd, _ev in poller.poll(50):
                if fd in fds:
                    take_output(fd)
                elif fd == w.status_fd:
                    take_status(fd)
    finally:
        os.close(pidfd)
        if stdin_fd is not None:
            os.close(stdin_fd)
    if os.WIFSIGNALED(status):
        out.signal = os.WTERMSIG(status)
    elif os.WIFEXITED(status):
        out.exit_code = os.WEXITSTATUS(status)
    if rusage is not None:
        out.cpu_s = rusage.ru_utime + rusage.ru_stime
        out.maxrss_kb = rusage.ru_maxrss
    if not setup_done:
        msg = bytes(status_buf[1:]).decode("utf-8", "replace") if status_buf[:1] == b"E" else ""
        out.setup_error = msg or (
            f"the sandboxed child died before its setup finished (status {status:#x})"
        )
    return out


def starved(o: Outcome, *, timeout_s: float, cpu_budget_s: float) -> str | None:
    """Why a wall-clock kill looks like the machine's fault rather than the program's: it used
    under half its CPU budget while it spent over a quarter of the wall clock waiting for a CPU.
    Returns the explanation, or None when the timeout stands."""
    if o.killed_for != "wall":
        return None
    if o.cpu_at_kill_s < 0.5 * cpu_budget_s and o.run_delay_s > 0.25 * timeout_s:
        return (
            f"wall clock hit after {o.cpu_at_kill_s:.2f}s of CPU (budget {cpu_budget_s:g}s) while the "
            f"program waited {o.run_delay_s:.2f}s for a CPU: the machine was busy, so it ran again"
        )
    return None


def _read(fd: int) -> bytes | None:
    """A chunk, ``b""`` at end of file, or None when nothing can be read right now."""
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.EBADF):
            return b""
        raise


def _write_some(fd: int, view: memoryview) -> memoryview:
    try:
        n = os.write(fd, view[:READ_CHUNK])
    except BlockingIOError:
        return view
    except (BrokenPipeError, OSError):
        return view[len(view) :]  # the program closed stdin: stop feeding it
    return view[n:]


def _safe_kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def result_dict(o: Outcome, limits: dict[str, Any], *, peak_bytes: int | None, oom_killed: bool, cpu_budget: float) -> dict[str, Any]:
    """Turn a monitor outcome into the fields of ``ExecutionResult`` (shared with nsjail)."""
    killed_for = o.killed_for
    timeout_kind = None
    if killed_for == "wall":
        # the wall clock fired first, but a program that had used its CPU budget was too slow
        timeout_kind = "cpu" if o.cpu_at_kill_s >= 0.95 * cpu_budget else "wall"
    elif killed_for == "cpu" or o.signal in (signal.SIGXCPU,) or (
        o.signal == signal.SIGKILL and killed_for is None and o.cpu_s >= cpu_budget
    ):
        timeout_kind = "cpu"
    stderr_tail = o.stderr.tail.decode("utf-8", "replace")
    memory_error = o.exit_code == 1 and ("MemoryError" in stderr_tail or "Cannot allocate memory" in stderr_tail)
    oom = bool(oom_killed or memory_error)
    res: dict[str, Any] = {
        "exit_code": o.exit_code,
        "signal": o.signal,
        "stdout": o.stdout.text(),
        "stderr": o.stderr.text(),
        "stdout_truncated": o.stdout.truncated,
        "stderr_truncated": o.stderr.truncated,
        "execution_time_ms": round(o.wall_s * 1000, 3),
        "cpu_time_ms": round(o.cpu_s * 1000, 3),
        "peak_memory_mb": round(peak_bytes / 2**20, 3) if peak_bytes else round(o.maxrss_kb / 1024, 3),
        "timeout_hit": timeout_kind is not None and not oom,
        "timeout_kind": timeout_kind if not oom else None,
        "oom": oom,
        "output_limit_hit": killed_for == "output",
        "sandbox_error": o.setup_error,
        "_outcome": o,
    }
    if res["timeout_hit"] or killed_for is not None or o.setup_error:
        res["exit_code"] = None
    return res
