"""Watching one running program from outside: feed stdin, read stdout/stderr while it runs (capped
per stream, the rest discarded or the run killed), enforce the wall clock and the CPU budget by
killing it, and collect exit status and resource usage.

Standard library only: it runs inside the process backend's worker (zygote) and in the host for
the nsjail backend. Everything here is driven by ``poll`` on a pidfd and the pipes; no signal
handlers, no threads, so it works from any caller.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import math
import os
import select
import signal
import struct
import time

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
NCPU = max(os.cpu_count() or 1, 1)  # read at import: a worker later loses sight of /sys
TAIL_BYTES = 4096
READ_CHUNK = 1 << 16
# How often the resident memory of a run is read where no cgroup limits it: a program touching
# memory at ~10 GB/s overshoots its limit by at most some tens of MB before it is killed.
MEMORY_POLL_S = 0.003
# The wall clock charges a program the time it ran, slept or was blocked, not the time it spent
# runnable but waiting for a CPU (schedstat's run-queue delay): on a busy machine its deadline moves
# by that wait, up to this many times its limit (the caller's worst case; the CPU budget still
# decides "too slow", and a sleeping program never waits on a run queue).
MAX_WALL_FACTOR = 4.0


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
    seconds used so far (default: from /proc/<pid>/stat); ``reap(pid)``: collects the exited
    process, ``(wait status, CPU seconds, max RSS KiB)`` (default ``os.wait4``: ``pid`` is our
    child); ``init_report``: the watched process is the init of the run's PID namespace, which
    reports the program's own wait status on the status channel ("X" + 4 bytes) before it exits."""

    def __init__(self, *, pid: int, stdout_fd: int, stderr_fd: int, stdin_fd: int | None,
                 stdin_data: bytes, timeout_s: float, cpu_time_s: float, max_output_bytes: int,
                 kill_on_overflow: bool, status_fd: int | None = None, kill: Any = None,
                 cpu_probe: Any = None, delay_probe: Any = None, on_start: Any = None, reap: Any = None,
                 init_report: bool = False, memory_probe: Any = None, memory_limit_bytes: int = 0,
                 max_wall_s: float | None = None, listener: int | None = None, take_listener: Any = None,
                 sysinfo: bytes = b"", proc_fd: int | None = None) -> None:  # fmt: skip
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
        self.reap = reap or _wait4
        self.init_report = init_report
        # where no cgroup limits memory: the run's resident memory, polled; over the limit, killed
        self.memory_probe = memory_probe
        self.memory_limit_bytes = memory_limit_bytes
        # the wall clock's hard stop (see MAX_WALL_FACTOR); None: ``timeout_s``, never moved
        self.max_wall_s = max_wall_s
        # the seccomp listener whose ``sysinfo`` notifications the monitor answers with ``sysinfo``
        # (``sysinfo_reply``): held by the caller (``listener``, left open), or taken once the run is
        # set up (``take_listener()``: an fd the monitor closes, None when the run is already gone)
        self.listener = listener
        self.take_listener = take_listener
        self.sysinfo = sysinfo
        self.proc_fd = proc_fd  # the /proc to write the answer through (see answer_sysinfo)


def _wait4(pid: int) -> tuple[int, float, int]:
    _, status, ru = os.wait4(pid, 0)
    return status, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


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
        self.program_status: int | None = None  # reported by a run's init (see Watch.init_report)
        self.files: bytes | None = None  # a compile's artefacts, sent by its init (_template._init)
        self.peak_rss_bytes = 0  # the largest resident memory the memory probe saw
        self.cpu_seen_s = 0.0  # the most CPU the probe saw (processes killed with a PID namespace
        # are never reaped by anyone who reports their usage)
        self.stdout_last_s: float | None = None  # when the last stdout bytes were read, after the start
        self.stdout = Stream(cap)
        self.stderr = Stream(cap)

    def set_status(self, status: int) -> None:
        """Exit code or signal from a raw wait status."""
        self.exit_code = self.signal = None
        if os.WIFSIGNALED(status):
            self.signal = os.WTERMSIG(status)
        elif os.WIFEXITED(status):
            self.exit_code = os.WEXITSTATUS(status)


def _read_proc(path: str) -> bytes:
    with open("/proc/" + path, "rb") as fh:
        return fh.read()


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


def tree_cpu_s(pid: int) -> float:
    """CPU time of ``pid``, of its reaped children, and of all its live descendants: a run's whole
    tree under its init."""
    return sum(proc_cpu_s(p) for p in tree_pids(pid))


def tree_run_delay_s(pid: int) -> float:
    """Run-queue delay of the busiest process of ``pid``'s tree (the init itself sleeps)."""
    return max((proc_run_delay_s(p) for p in tree_pids(pid)), default=0.0)


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its live descendants (children of any of their threads). Every one counts
    (the run's memory and CPU are their sum); the run's RLIMIT_NPROC bounds how many there are, and
    each is listed once (a pid reused while the tree is read cannot make the walk go round)."""
    out: list[int] = []
    seen: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                todo.extend(int(x) for x in _read_proc(f"{p}/task/{t}/children").split())
            except (OSError, ValueError):
                continue
    return out


def proc_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (its threads share it), from /proc/<pid>/statm."""
    try:
        return int(_read_proc(f"{pid}/statm").split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def pss_bytes(pid: int) -> int | None:
    """``pid``'s proportional set size: its resident pages, each shared one divided by the number of
    processes that map it (so that a tree's sum counts every page once). None when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# What the kernel holds for a run outside its processes' resident memory, where no cgroup counts it
# (measured on this kernel, x86_64, by the drop of MemAvailable per object, rounded up): a pipe
# filled to its 16 pages (F_SETPIPE_SZ is refused, so no pipe grows past them) and an AF_UNIX
# socket whose send buffer is full of the smallest messages (SO_SNDBUF and SO_RCVBUF cannot be
# raised: the filter refuses them), and the inode and dentry of a file on the run's tmpfs.
PIPE_BYTES = 128 * 1024
SOCKET_BYTES = 512 * 1024
TMPFS_INODE_BYTES = 1024


def private_tmpfs_mounts(pid: int) -> list[str]:
    """The writable tmpfs mount points of ``pid``'s mount namespace (the run's own work dir and
    /tmp), from its mountinfo; empty when unreadable."""
    try:
        text = _read_proc(f"{pid}/mountinfo").decode("utf-8", "surrogateescape")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 6 and tail and tail[0] == "tmpfs" and "rw" in fields[5].split(","):
            out.append(fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
                       .replace("\\134", "\\"))
    return out


def tmpfs_used_bytes(pid: int, mounts: list[str]) -> int:
    """What the files on ``mounts`` (seen through ``pid``'s root) hold: their pages and, per file,
    its inode and dentry."""
    used = 0
    for m in mounts:
        try:
            st = os.statvfs(f"/proc/{pid}/root{m}")
        except OSError:
            continue
        used += (st.f_blocks - st.f_bfree) * st.f_frsize + max(0, st.f_files - st.f_ffree) * TMPFS_INODE_BYTES
    return used


def page_table_bytes(pid: int) -> int:
    """The page tables of ``pid``'s address space (``VmPTE``): a program touching one byte per 2 MiB
    of a huge sparse mapping holds as much in page tables as in resident pages."""
    try:
        for line in _read_proc(f"{pid}/status").splitlines():
            if line.startswith(b"VmPTE:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def pipe_count(pids: list[int]) -> int:
    """The distinct pipes open in ``pids`` (a pipe shared by a fork counts once)."""
    pipes: set[str] = set()
    for p in pids:
        d = f"/proc/{p}/fd"
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            try:
                link = os.readlink(f"{d}/{n}")
            except OSError:
                continue
            if link.startswith("pipe:"):
                pipes.add(link)
    return len(pipes)


def unix_socket_inodes(pid: int | str) -> set[int]:
    """The inodes of every AF_UNIX socket of ``pid``'s network namespace, the ones in flight (passed
    in a message, in no process's table) included."""
    try:
        lines = _read_proc(f"{pid}/net/unix").splitlines()[1:]
    except OSError:
        return set()
    out = set()
    for line in lines:
        parts = line.split()
        if len(parts) >= 7:
            try:
                out.add(int(parts[6]))
            except ValueError:
                continue
    return out


class TreeMemory:
    """The memory probe of a run without a cgroup (``Watch.memory_probe``): what the run holds, as a
    memory cgroup would count it. ``pids()`` lists the run's processes.

    The resident sizes (``statm``, cheap) count a page that several processes share (the
    copy-on-write pages of a fork, the interpreter the program shares with its init) once per
    process: harmless far from the limit, wrong near it, where a fork bomb of small processes would
    pass for one big program (``oom`` here, a timeout with a cgroup). So from 90 % of the limit on,
    the resident sum is corrected by what it counts twice, measured with PSS (``smaps_rollup``: the
    kernel walks the page tables, ~1 ms per 256 MB) at most every ``PSS_EVERY_S``; in between, the
    resident sum minus the last such excess (new growth shows at once).

    Memory that is in no process's resident set is added from the run's first ``EXTRA_EVERY_S`` on
    (a run shorter than that cannot fill much): the page tables at every reading, and at most every
    ``EXTRA_EVERY_S``: the files on the run's own tmpfs mounts (``private_mounts``: the mount
    namespace is the run's, read once the monitor has set ``ready``: before, the jail may still show
    the host's mounts), the run's AF_UNIX sockets at their full buffers (``unix_baseline``: the sockets of its
    network namespace that are not the run's; None: the namespace is not the run's, the filter
    refuses sockets there) and, when they could matter, its pipes at their full buffers
    (``max_open_files`` bounds how many a process holds). The seccomp filter refuses the rest
    (``memfd_create``, ``vmsplice``, huge pages, System V shared memory, growing a pipe or a socket
    buffer)."""

    PSS_EVERY_S = 0.02
    EXTRA_EVERY_S = 0.01

    def __init__(self, pids: Any, limit_bytes: int, *, max_open_files: int = 64, private_mounts: bool = True,
                 unix_baseline: set[int] | frozenset[int] | None = frozenset()) -> None:
        self.pids = pids
        self.threshold = 0.9 * limit_bytes
        self.excess = 0  # what the resident sum counted more than once, at the last PSS reading
        self.measured_at = -math.inf
        self.max_open_files = max_open_files
        self.private_mounts = private_mounts
        self.unix_baseline = unix_baseline
        self.mounts: list[str] | None = None  # read once set up: the program cannot mount
        self.ready = False  # set by the monitor once the run is set up (its mounts are the run's)
        self.extra = 0  # the memory outside resident sets but page tables, at the last reading
        self.started = self.extra_at = time.monotonic()  # the first reading is one period in

    def __call__(self) -> int:
        pids = self.pids()
        rss = sum(proc_rss_bytes(p) for p in pids)
        now = time.monotonic()
        if pids and now - self.started >= self.EXTRA_EVERY_S:
            rss += sum(page_table_bytes(p) for p in pids)  # at every reading: they grow as fast as pages
            if now - self.extra_at >= self.EXTRA_EVERY_S:
                self.extra, self.extra_at = self._outside(pids, rss), now
        if rss + self.extra < self.threshold or len(pids) < 2:
            return rss + self.extra
        if now - self.measured_at >= self.PSS_EVERY_S:
            excess = 0
            for p in pids:
                pss = pss_bytes(p)
                if pss is not None:  # else gone since: it holds nothing
                    excess += max(0, proc_rss_bytes(p) - pss)
            self.excess, self.measured_at = excess, now
        return max(0, rss - self.excess) + self.extra

    def _outside(self, pids: list[int], rss: int) -> int:
        """The run's memory in no resident set but its page tables (see the class docstring)."""
        extra = 0
        if self.private_mounts and self.ready:
            if self.mounts is None:
                for p in pids:
                    self.mounts = private_tmpfs_mounts(p)
                    if self.mounts:
                        break
            extra += tmpfs_used_bytes(pids[0], self.mounts or [])
        if self.unix_baseline is not None and self.ready:
            sockets = unix_socket_inodes(pids[0]) - self.unix_baseline
            extra += len(sockets) * SOCKET_BYTES
            if sockets:  # pipes passed in a message are in no table: at most max_open_files of them
                extra += self.max_open_files * PIPE_BYTES
        if rss + extra + len(pids) * self.max_open_files * PIPE_BYTES >= self.threshold:
            extra += pipe_count(pids) * PIPE_BYTES  # listed only where they could reach the limit
        return extra


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
        _set_nonblocking(w.status_fd)
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
    listener = w.listener
    taken: int | None = None  # a listener the monitor took, and closes
    if listener is not None:
        poller.register(listener, select.POLLIN)
    if w.on_start is not None:
        w.on_start()
    delay_before = w.delay_probe() if w.max_wall_s is not None else 0.0  # the set-up's, not the run's
    exited = False
    status = 0
    rusage = None
    status_open = w.status_fd is not None

    def take_output(fd: int) -> bool:
        """Read what ``fd`` has; returns True when this chunk first overflowed its stream's cap."""
        chunk = _read(fd)
        if chunk is None:
            return False
        if not chunk:
            poller.unregister(fd)
            del fds[fd]
            return False
        if fds[fd] == "stdout":
            out.stdout_last_s = time.monotonic() - start
            return out.stdout.feed(chunk)
        return out.stderr.feed(chunk)

    def take_status(fd: int) -> None:
        nonlocal status_buf, setup_done, listener, taken, status_open
        chunk = _read(fd)
        if chunk:
            status_buf += chunk
            was_done = setup_done
            setup_done = setup_done or status_buf[:1] == b"R"
            if setup_done and w.memory_probe is not None and hasattr(w.memory_probe, "ready"):
                w.memory_probe.ready = True  # the run's own mounts are in place
            if setup_done and not was_done and w.take_listener is not None and listener is None:
                try:
                    listener = taken = w.take_listener()
                except OSError as exc:  # the run's sysinfo calls would wait for ever: not the program's fault
                    out.setup_error = f"the run's seccomp listener could not be taken: {exc}"
                    out.killed_for = "sandbox"
                    kill(signal.SIGKILL)
                if listener is not None:
                    poller.register(listener, select.POLLIN)
        elif chunk is not None:
            poller.unregister(fd)
            status_open = False

    def take_notification(ev: int) -> None:
        nonlocal listener
        assert listener is not None
        if ev & select.POLLIN:
            answer_sysinfo(listener, w.sysinfo, w.proc_fd)
        elif ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):  # no process left under the filter
            poller.unregister(listener)
            listener = -1

    try:
        ncpu = NCPU
        next_cpu_check = start + min(0.02, w.cpu_time_s / ncpu)
        next_mem_check = start + MEMORY_POLL_S if w.memory_probe is not None else math.inf
        while not exited:
            now = time.monotonic()
            if out.killed_for is None:
                if now >= wall_deadline:
                    out.run_delay_s = max(0.0, w.delay_probe() - delay_before)
                    moved = wall_deadline_s(w.timeout_s, out.run_delay_s, w.max_wall_s)
                    if start + moved > now + 0.001:  # it waited for a CPU: not its time
                        wall_deadline = start + moved
                    else:
                        out.cpu_at_kill_s = w.cpu_probe()
                        out.killed_for = "wall"
                        kill(signal.SIGKILL)
                elif now >= next_mem_check:
                    used = w.memory_probe()
                    out.peak_rss_bytes = max(out.peak_rss_bytes, used)
                    if used > w.memory_limit_bytes:
                        out.killed_for = "memory"
                        kill(signal.SIGKILL)
                    next_mem_check = now + MEMORY_POLL_S
                if out.killed_for is None and now >= next_cpu_check:
                    cpu = w.cpu_probe()
                    out.cpu_seen_s = max(out.cpu_seen_s, cpu)
                    if cpu >= w.cpu_time_s:
                        out.cpu_at_kill_s = cpu
                        out.killed_for = "cpu"
                        kill(signal.SIGKILL)
                    else:
                        # the CPU clock runs at most `ncpu` times faster than the wall clock
                        next_cpu_check = now + max((w.cpu_time_s - cpu) / ncpu, 0.002)
            if out.killed_for is None:
                wait_s = min(wall_deadline, next_cpu_check, next_mem_check) - now
                wait_ms = max(1, math.ceil(wait_s * 1000))
            else:
                wait_ms = 50  # killed: wait for the exit
            for fd, ev in poller.poll(wait_ms):
                if fd == pidfd:
                    rusage = w.reap(w.pid)
                    status = rusage[0]
                    exited = True
                elif fd == w.status_fd:
                    take_status(fd)
                elif fd == listener:
                    take_notification(ev)
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
            for fd, ev in poller.poll(50):
                if fd in fds:
                    take_output(fd)
                elif fd == w.status_fd:
                    take_status(fd)
                elif fd == listener:  # what still runs of it (nothing, with a PID namespace) is answered
                    take_notification(ev)
        if w.init_report and w.status_fd is not None:
            # what the init wrote before it exited (a compile's files: more than a pipe holds) is
            # all in the pipe now; nobody else holds its other end
            while status_open and _read_pending(w.status_fd):
                take_status(w.status_fd)
    finally:
        os.close(pidfd)
        if taken is not None:
            os.close(taken)
        if stdin_fd is not None:
            os.close(stdin_fd)
    out.set_status(status)
    if rusage is not None:
        out.cpu_s = max(rusage[1], out.cpu_seen_s, out.cpu_at_kill_s)
        out.maxrss_kb = rusage[2]
    if w.init_report and len(status_buf) >= 5 and status_buf[-5:-4] == b"X":
        # the init's report, the last 5 bytes: it alone holds the status pipe by then
        (out.program_status,) = struct.unpack("<i", bytes(status_buf[-4:]))
        del status_buf[-5:]
        if status_buf[:2] == b"RA" and len(status_buf) >= 6:  # the files the init sent before it
            n = int.from_bytes(status_buf[2:6], "little")
            if len(status_buf) == 6 + n:
                out.files = bytes(status_buf[6:])
                del status_buf[1:]
    if not setup_done:
        msg = bytes(status_buf[1:]).decode("utf-8", "replace") if status_buf[:1] == b"E" else ""
        if msg or out.killed_for is None:
            out.setup_error = msg or f"the sandboxed child died before its setup finished (status {status:#x})"
        # else we killed it, for a limit the caller chose (a wall clock or CPU budget shorter than
        # the set-up): that limit's verdict, never a failure of the sandbox
    return out


# ----------------------------------------------------------------------------- sysinfo


class Sysinfo(ctypes.Structure):
    """``struct sysinfo`` of this ABI (112 bytes where ``long`` has 64 bits)."""

    _fields_ = [
        ("uptime", ctypes.c_long),
        ("loads", ctypes.c_ulong * 3),
        ("totalram", ctypes.c_ulong),
        ("freeram", ctypes.c_ulong),
        ("sharedram", ctypes.c_ulong),
        ("bufferram", ctypes.c_ulong),
        ("totalswap", ctypes.c_ulong),
        ("freeswap", ctypes.c_ulong),
        ("procs", ctypes.c_ushort),
        ("pad", ctypes.c_ushort),
        ("totalhigh", ctypes.c_ulong),
        ("freehigh", ctypes.c_ulong),
        ("mem_unit", ctypes.c_uint),
        ("_f", ctypes.c_char * (20 - 2 * ctypes.sizeof(ctypes.c_long) - ctypes.sizeof(ctypes.c_int))),
    ]


_SYSINFO_REPLIES: dict[int, bytes] = {}


def sysinfo_reply(memory_bytes: int) -> bytes:
    """What a run's ``sysinfo`` call answers: its memory limit as total and free RAM, one process,
    no load, no swap, no uptime; from the limit alone, so it carries nothing between runs."""
    reply = _SYSINFO_REPLIES.get(memory_bytes)
    if reply is None:
        unit = 1
        while memory_bytes // unit >= 1 << (8 * ctypes.sizeof(ctypes.c_ulong)):  # a 32-bit long
            unit *= 2
        ram = memory_bytes // unit
        reply = _SYSINFO_REPLIES[memory_bytes] = bytes(Sysinfo(totalram=ram, freeram=ram, procs=1, mem_unit=unit))
    return reply


def _ioc(direction: int, nr: int, size: int) -> int:  # the generic ioctl layout (see _child._SYS_SECCOMP)
    return direction << 30 | size << 16 | 0x21 << 8 | nr


NOTIF_SIZE = 80  # struct seccomp_notif: id, pid, flags, struct seccomp_data (nr, arch, ip, args[6])
NOTIF_RESP = struct.Struct("=QqiI")  # struct seccomp_notif_resp: id, val, error, flags
SECCOMP_IOCTL_NOTIF_RECV = _ioc(3, 0, NOTIF_SIZE)
SECCOMP_IOCTL_NOTIF_SEND = _ioc(3, 1, NOTIF_RESP.size)
# _IOR, as Linux < 5.17 spelled it (later kernels take that and the corrected _IOW alike)
SECCOMP_IOCTL_NOTIF_ID_VALID = _ioc(2, 2, 8)


def answer_sysinfo(listener: int, reply: bytes, proc: int | None = None) -> None:
    """Answer one notification of ``listener``: write ``reply`` where the caller's ``sysinfo``
    points, into the notified process only. The pid in a notification may have died and been
    reused by then: ``/proc/<pid>/mem`` (in ``proc``, a directory fd of a /proc we may write
    through, else /proc) is opened first, then the kernel confirms that the
    notification is still pending (``ID_VALID``: its process is still that pid's), so the open file
    is that process's memory. A notification whose process died is dropped without a word."""
    buf = bytearray(NOTIF_SIZE)  # zeroed: the kernel insists
    try:
        fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, buf, True)
    except OSError:  # ENOENT: its process died before we got to it
        return
    notif_id, pid = struct.unpack_from("=QI", buf)
    (address,) = struct.unpack_from("=Q", buf, 32)  # args[0]
    try:
        mem = os.open(f"{pid}/mem" if proc is not None else f"/proc/{pid}/mem", os.O_RDWR | os.O_CLOEXEC,
                      dir_fd=proc)
    except OSError:
        mem = -1
    error = -errno.EFAULT
    try:
        fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, struct.pack("=Q", notif_id))
        if mem >= 0 and os.pwrite(mem, reply, address) == len(reply):
            error = 0
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return  # no longer pending: the process is gone (its pid may be another's now)
    except (OverflowError, ValueError):  # an address no file offset can hold
        pass
    finally:
        if mem >= 0:
            os.close(mem)
    try:
        fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, NOTIF_RESP.pack(notif_id, 0, error, 0))
    except OSError:  # it died meanwhile
        pass


_SYS_PIDFD_GETFD = 438  # the same on every architecture but alpha


def take_fd(pid: int, fd: int) -> int | None:
    """A copy of ``pid``'s ``fd`` (``pidfd_getfd``, close-on-exec); None when ``pid`` has exited."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    try:
        deadline = time.monotonic() + TAKE_FD_PATIENCE_S
        while True:
            got = _libc.syscall(ctypes.c_long(_SYS_PIDFD_GETFD), pidfd, fd, 0)
            if got >= 0:
                return int(got)
            err = ctypes.get_errno()
            # it exited: its files are gone (EBADF), it is gone (ESRCH; its pidfd may not say so yet)
            if err in (errno.ESRCH, errno.EBADF) or select.select([pidfd], [], [], 0)[0]:
                return None
            if err != errno.EPERM or time.monotonic() > deadline:
                raise OSError(err, f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
            time.sleep(0.0002)
    finally:
        os.close(pidfd)


# As a normal user, pidfd_getfd of the nsjail init (not dumpable, in a user namespace we own) now
# and then answers EPERM for a few milliseconds right after the init forked the program (seen on
# Linux 6.18 on a loaded machine: 4 of 80 runs, each allowed again within ~8 ms): try again for
# this long before the run is a sandbox error
TAKE_FD_PATIENCE_S = 1.0


_libc = ctypes.CDLL(None, use_errno=True)


def listener_available() -> str | None:
    """None when this kernel lets the host-side monitor answer a run's ``sysinfo`` (seccomp user
    notification, Linux 5.0; ``pidfd_getfd``, 5.6, to take a listener from another process), else
    why not."""
    if os.uname().machine not in ("x86_64", "aarch64", "riscv64", "loongarch64", "s390x"):
        return f"no seccomp listener on {os.uname().machine}"
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as fh:
            if "user_notif" not in fh.read().split():
                return "the kernel has no seccomp user notification (Linux < 5.0)"
    except OSError:
        return "the kernel has no seccomp user notification"
    pidfd = os.pidfd_open(os.getpid())
    try:
        got = _libc.syscall(ctypes.c_long(_SYS_PIDFD_GETFD), pidfd, pidfd, 0)
        if got < 0:
            return f"the kernel has no pidfd_getfd (Linux < 5.6): {os.strerror(ctypes.get_errno())}"
        os.close(got)
    finally:
        os.close(pidfd)
    return None


def wall_deadline_s(timeout_s: float, run_delay_s: float, max_wall_s: float | None) -> float:
    """When (seconds after its start) the wall clock stops a program that has waited
    ``run_delay_s`` on a run queue so far: its limit plus that wait, at most ``max_wall_s`` (None:
    the limit, whatever the wait)."""
    if max_wall_s is None:
        return timeout_s
    return max(timeout_s, min(timeout_s + max(run_delay_s, 0.0), max_wall_s))


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


def _read_pending(fd: int) -> bool:
    """Has ``fd`` anything to read, or reached its end (never blocks)?"""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


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


def memory_at_limit(peak_bytes: int | None, maxrss_kb: int, limit_bytes: int) -> bool:
    """Evidence from outside the program that it reached its memory limit: the cgroup's peak, or
    the kernel's count of its largest resident set, at 90 % of the limit or more."""
    peak = max(peak_bytes or 0, maxrss_kb * 1024)
    return peak >= 0.9 * limit_bytes


def result_dict(o: Outcome, limits: dict[str, Any], *, peak_bytes: int | None, memory_evidence: bool,
                cpu_budget: float) -> dict[str, Any]:  # fmt: skip
    """Turn a monitor outcome into the fields of ``ExecutionResult`` (shared with nsjail).

    ``memory_evidence``: the backend saw, from outside the program, that the run hit its memory
    limit (the cgroup's OOM kill counter, or peak memory at the limit). Only then is a run that did
    not end cleanly ``oom``: what the program writes (a "MemoryError" on stderr) never decides."""
    killed_for = o.killed_for
    timeout_kind = None
    if killed_for == "wall":
        # the wall clock fired first: a program that was computing most of that time was too
        # slow ("cpu"); one that slept or was blocked was not ("wall")
        busy = o.cpu_at_kill_s >= 0.5 * min(cpu_budget, float(limits["timeout_s"]))
        timeout_kind = "cpu" if busy else "wall"
    elif killed_for == "cpu" or o.signal in (signal.SIGXCPU,) or (
        o.signal == signal.SIGKILL and killed_for is None and o.cpu_s >= cpu_budget
    ):
        timeout_kind = "cpu"
    clean = o.exit_code == 0 and killed_for is None
    oom = killed_for == "memory" or bool(memory_evidence and not clean and not o.setup_error)
    if killed_for == "memory":
        timeout_kind = None
    res: dict[str, Any] = {
        "exit_code": o.exit_code,
        "signal": o.signal,
        "stdout": o.stdout.text(),
        "stderr": o.stderr.text(),
        "stdout_truncated": o.stdout.truncated,
        "stderr_truncated": o.stderr.truncated,
        "execution_time_ms": round(o.wall_s * 1000, 3),
        "cpu_time_ms": round(o.cpu_s * 1000, 3),
        "stdout_last_ms": None if o.stdout_last_s is None else round(o.stdout_last_s * 1000, 3),
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
