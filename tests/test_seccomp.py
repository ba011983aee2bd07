"""The seccomp filter (``sandbox._seccomp``) on its own, without a sandbox backend.

Each test forks a child, installs a filter there with ``_child.install_seccomp`` (which sets
``no_new_privs`` first), runs a workload, reports through a pipe and ``os._exit``s; the parent
checks the report and how the child ended.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import pickle
import platform
import resource
import signal
import socket
import sys
import termios
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

from sandbox import _child, _seccomp

VARIANTS = [pytest.param(False, id="nofork"), pytest.param(True, id="fork")]
X86_64 = platform.machine() == "x86_64"
WALL = 0x40000000  # waitpid's __WALL: also children whose exit signal is not SIGCHLD


def bpf(*, allow_fork: bool, allow_unix_sockets: bool = True) -> bytes:
    return _seccomp.compiled(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets)


# ---------------------------------------------------------------------------------------------
# forked children


def start(
    work: Callable[[], Any], program: bytes | None, cwd: Path | None = None, *, quiet: bool = False
) -> tuple[int, int]:
    """Fork a child that installs ``program`` (none: run unfiltered), runs ``work`` and sends back
    ``("ok", result)`` or ``("raised", text)``. Returns the child's pid and the pipe to read."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() in a process with threads: the child only runs `work`
        warnings.filterwarnings("ignore", ".*fork.*", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a killed child dumps no core
            if cwd is not None:
                os.chdir(cwd)
            if quiet:  # what the workload prints goes to a file in its work dir
                fd = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                sys.stdin = open(0, closefd=False)
                sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # type: ignore[misc]
                sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)  # type: ignore[misc]
            if program is not None:
                _child.install_seccomp(program)
            report: tuple[str, Any] = ("ok", work())
        except BaseException as exc:
            report = ("raised", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(report)
            while data:
                data = data[os.write(w, data) :]
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def finish(pid: int, r: int) -> tuple[int, Any]:
    """Read the child's report and reap it: (wait status, report or None)."""
    try:
        with os.fdopen(r, "rb") as fh:
            data = fh.read()
    finally:
        _, status = os.waitpid(pid, 0)
    return status, pickle.loads(data) if data else None


def kill_all(pids: list[int]) -> None:
    """Kill and reap the children still running (after a failure or a timeout of the test)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def run(work: Callable[[], Any], program: bytes | None, cwd: Path | None = None) -> tuple[int, Any]:
    pid, r = start(work, program, cwd)
    try:
        return finish(pid, r)
    finally:
        kill_all([pid])


def ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def run_ok(work: Callable[[], Any], program: bytes | None, cwd: Path | None = None) -> Any:
    status, report = run(work, program, cwd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
        f"the child ended badly: {ended(status)}"
    )
    assert report is not None, "the child sent no report"
    assert report[0] == "ok", f"the workload raised {report[1]}"
    return report[1]


# ---------------------------------------------------------------------------------------------
# raw system calls, made in the child


def nr(name: str) -> int:
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    if number < 0:
        pytest.skip(f"{name} is not a system call of this architecture")
    return int(number)


Arg = int | bytes | Callable[[], Any]


def raw_syscall(number: int, *args: Arg) -> tuple[int, int]:
    """``syscall(number, *args)`` through libc: (return value, errno). An argument is an int, a
    byte string (passed as a pointer) or a function the child calls to build it (an fd, a buffer).
    Should a call make a process after all, the new process leaves at once and is reaped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    values: list[Any] = []
    for a in args:
        a = a() if callable(a) else a
        values.append(ctypes.c_long(a) if isinstance(a, int) else a)
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(number), *values)
    err = ctypes.get_errno()
    if ret == 0 and os.getpid() != own_pid[0]:
        os._exit(0)  # a new process (the filter failed): leave at once
    if ret > 0 and number in process_calls():
        try:
            os.waitpid(ret, WALL)
        except ChildProcessError:  # a sibling (CLONE_PARENT): the test process reaps it
            return ret, -1
    return ret, err


own_pid = [0]


def process_calls() -> set[int]:
    names = ("clone", "fork", "vfork", "clone3")
    return {
        n for n in (pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, x) for x in names) if n >= 0
    }


def syscall_in_child(
    program: bytes, number: int, *args: Arg, cwd: Path | None = None
) -> tuple[int, int]:
    def work() -> tuple[int, int]:
        own_pid[0] = os.getpid()
        return raw_syscall(number, *args)

    result: tuple[int, int] = run_ok(work, program, cwd)
    ret, err = result
    if ret > 0 and err == -1:  # the filter let a CLONE_PARENT through: reap the sibling here
        os.waitpid(ret, WALL)
    return result


def pipe_fd() -> int:
    return os.pipe()[0]


def open_fd() -> int:
    return os.open(sys.executable, os.O_RDONLY)  # a file every jail shows


def buffer(size: int = 64) -> Callable[[], Any]:
    return lambda: ctypes.create_string_buffer(size)


AT_FDCWD = -100
SIGCHLD = int(signal.SIGCHLD)
S_IFCHR = 0o020000
TIOCSTI = termios.TIOCSTI
FIONREAD = termios.FIONREAD
RLIMIT_NOFILE = 7
HIGH = 1 << 32  # bits the kernel drops from an ``int`` argument
NS_FLAGS = {
    "CLONE_NEWNS": _seccomp.CLONE_NEWNS,
    "CLONE_NEWCGROUP": _seccomp.CLONE_NEWCGROUP,
    "CLONE_NEWUTS": _seccomp.CLONE_NEWUTS,
    "CLONE_NEWIPC": _seccomp.CLONE_NEWIPC,
    "CLONE_NEWUSER": _seccomp.CLONE_NEWUSER,
    "CLONE_NEWPID": _seccomp.CLONE_NEWPID,
    "CLONE_NEWNET": _seccomp.CLONE_NEWNET,
    "CLONE_NEWTIME": _seccomp.CLONE_NEWTIME,
}

# (id, system call name or number, arguments, errno): refused in both variants. The arguments
# are harmless: without the filter each call fails or does nothing that matters.
# fmt: off
DENIED: list[tuple[str, str | int, tuple[Arg, ...], int]] = [
    ("execve", "execve", (b"/bin/true", 0, 0), errno.EPERM),
    ("execveat", "execveat", (AT_FDCWD, b"/bin/true", 0, 0, 0), errno.EPERM),
    ("unshare-CLONE_NEWUSER", "unshare", (_seccomp.CLONE_NEWUSER,), errno.EPERM),
    ("unshare-nothing", "unshare", (0,), errno.EPERM),
    ("setns", "setns", (-1, 0), errno.EPERM),
    ("mount", "mount", (0, 0, 0, 0, 0), errno.EPERM),
    ("umount2", "umount2", (b"/nonexistent", 0), errno.EPERM),
    ("chroot", "chroot", (b"/",), errno.EPERM),
    ("pivot_root", "pivot_root", (0, 0), errno.EPERM),
    ("open_tree", "open_tree", (-1, 0, 0), errno.EPERM),
    ("fsopen", "fsopen", (0, 0), errno.EPERM),
    ("open_by_handle_at", "open_by_handle_at", (-1, 0, 0), errno.EPERM),
    ("ptrace", "ptrace", (2, lambda: os.getppid(), 0, 0), errno.EPERM),  # PTRACE_PEEKDATA
    ("process_vm_readv", "process_vm_readv", (lambda: os.getppid(), 0, 0, 0, 0, 0), errno.EPERM),
    ("pidfd_getfd", "pidfd_getfd", (-1, 0, 0), errno.EPERM),
    ("kcmp", "kcmp", (lambda: os.getpid(), lambda: os.getppid(), 0, 0, 0), errno.EPERM),
    ("bpf", "bpf", (0xFFFF, 0, 0), errno.EPERM),
    ("perf_event_open", "perf_event_open", (0, 0, -1, -1, 0), errno.EPERM),
    ("io_uring_setup", "io_uring_setup", (1, 0), errno.EPERM),
    ("userfaultfd", "userfaultfd", (0,), errno.EPERM),
    ("fanotify_init", "fanotify_init", (0, 0), errno.EPERM),
    ("keyctl", "keyctl", (0xFFFF, 0, 0, 0, 0), errno.EPERM),
    ("add_key", "add_key", (0, 0, 0, 0, 0), errno.EPERM),
    ("init_module", "init_module", (0, 0, 0), errno.EPERM),
    ("finit_module", "finit_module", (-1, 0, 0), errno.EPERM),
    ("reboot-bad-magic", "reboot", (0, 0, 0, 0), errno.EPERM),
    ("swapoff", "swapoff", (0,), errno.EPERM),
    ("clock_settime", "clock_settime", (0, 0), errno.EPERM),
    ("settimeofday", "settimeofday", (0, 0), errno.EPERM),
    ("sethostname", "sethostname", (0, -1), errno.EPERM),
    ("modify_ldt", "modify_ldt", (0, 0, 0), errno.EPERM),
    ("iopl", "iopl", (0,), errno.EPERM),
    ("setuid", "setuid", (lambda: os.getuid(),), errno.EPERM),
    ("capset", "capset", (0, 0), errno.EPERM),
    ("shmget", "shmget", (0, 0, 0), errno.EPERM),
    ("mq_open", "mq_open", (0, 0, 0, 0), errno.EPERM),
    # what one inode shares with all its openers: a channel between runs (tests/test_crosstalk.py)
    ("flock", "flock", (open_fd, 2), errno.EPERM),  # LOCK_EX
    ("inotify_init1", "inotify_init1", (0,), errno.EPERM),
    ("inotify_add_watch", "inotify_add_watch", (-1, b"/", 0x20), errno.EPERM),
    ("fanotify_mark", "fanotify_mark", (-1, 0, 0, AT_FDCWD, b"/"), errno.EPERM),
    *[
        (f"fcntl-{name}", "fcntl", (open_fd, getattr(fcntl, name), buffer(32)), errno.EPERM)
        for name in ("F_GETLK", "F_SETLK", "F_SETLKW", "F_OFD_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW",
                     "F_SETLEASE", "F_GETLEASE", "F_NOTIFY")
        if hasattr(fcntl, name)
    ],
    ("fcntl-F_GETLK64", "fcntl", (open_fd, 12, buffer(32)), errno.EPERM),
    # memory in no process's resident set (tests/test_memory_outside_rss.py attacks each)
    ("memfd_create", "memfd_create", (b"x", 0), errno.EPERM),
    ("vmsplice", "vmsplice", (pipe_fd, 0, 0, 0), errno.EPERM),
    ("fsetxattr", "fsetxattr", (open_fd, b"user.a", b"v", 1, 0), errno.EPERM),
    ("setxattr", "setxattr", (b".", b"user.a", b"v", 1, 0), errno.EPERM),
    ("removexattr", "removexattr", (b".", b"user.a"), errno.EPERM),
    ("fcntl-F_SETPIPE_SZ", "fcntl", (pipe_fd, 1031, 1 << 20), errno.EPERM),
    ("fcntl-F_SETPIPE_SZ-high-bits", "fcntl", (pipe_fd, HIGH | 1031, 1 << 20), errno.EPERM),
    ("mmap-MAP_HUGETLB", "mmap", (0, 2 << 20, 3, 0x22 | 0x40000, -1, 0), errno.EPERM),
    *[
        (f"setsockopt-{name}", "setsockopt", (lambda: socket.socket(socket.AF_UNIX).detach(), socket.SOL_SOCKET, opt,
                                               buffer(4), 4), errno.EPERM)
        for name, opt in (("SO_SNDBUF", socket.SO_SNDBUF), ("SO_RCVBUF", socket.SO_RCVBUF), ("SO_SNDBUFFORCE", 32),
                          ("SO_RCVBUFFORCE", 33))
    ],
    ("fcntl-F_SETLK-high-bits", "fcntl", (open_fd, HIGH | 6, buffer(32)), errno.EPERM),
    ("socket-AF_INET", "socket", (socket.AF_INET, socket.SOCK_STREAM, 0), errno.EPERM),
    ("socket-AF_INET6", "socket", (socket.AF_INET6, socket.SOCK_DGRAM, 0), errno.EPERM),
    ("socket-AF_NETLINK", "socket", (socket.AF_NETLINK, socket.SOCK_RAW, 0), errno.EPERM),
    ("socket-AF_INET-high-bits", "socket", (HIGH | socket.AF_INET, socket.SOCK_STREAM, 0), errno.EPERM),
    ("socketpair-AF_INET", "socketpair", (socket.AF_INET, socket.SOCK_STREAM, 0, buffer(8)), errno.EPERM),
    ("prctl-PR_SET_DUMPABLE", "prctl", (4, 1, 0, 0, 0), errno.EPERM),
    ("prctl-PR_SET_DUMPABLE-high-bits", "prctl", (HIGH | 4, 1, 0, 0, 0), errno.EPERM),
    ("prctl-PR_SET_PTRACER", "prctl", (0x59616D61, 0, 0, 0, 0), errno.EPERM),
    ("prctl-PR_SET_MM", "prctl", (35, 0, 0, 0, 0), errno.EPERM),
    ("personality-set", "personality", (0,), errno.EPERM),
    ("personality-ADDR_NO_RANDOMIZE", "personality", (0x0040000,), errno.EPERM),
    ("ioctl-TIOCSTI", "ioctl", (pipe_fd, TIOCSTI, buffer(1)), errno.EPERM),
    ("kill-everyone", "kill", (-1, 0), errno.EPERM),
    ("prlimit64-other-process", "prlimit64", (1, RLIMIT_NOFILE, 0, buffer(16)), errno.EPERM),
    ("mknodat-device", "mknodat", (AT_FDCWD, b"device", S_IFCHR | 0o600, (1 << 8) | 3), errno.EPERM),
    ("clone-CLONE_PARENT", "clone", (_seccomp.CLONE_PARENT | SIGCHLD, 0, 0, 0, 0), errno.EPERM),
    ("clone3", "clone3", (0, 0), errno.ENOSYS),
    ("open_tree_attr", 467, (-1, 0, 0, 0, 0), errno.ENOSYS),  # Linux 6.15: newer than the list
    ("listmount", 458, (0, 0, 0, 0), errno.ENOSYS),
    ("unknown-1000", 1000, (), errno.ENOSYS),
    *[
        (f"clone-{name}", "clone", (flag | SIGCHLD, 0, 0, 0, 0), errno.EPERM)
        for name, flag in NS_FLAGS.items()
    ],
]
# fmt: on

# Refused in the nofork variant only.
DENIED_NOFORK: list[tuple[str, str | int, tuple[Arg, ...], int]] = [
    ("fork", "fork", (), errno.EPERM),
    ("clone-process", "clone", (SIGCHLD, 0, 0, 0, 0), errno.EPERM),
    ("clone-CLONE_VM-CLONE_VFORK", "clone", (0x100 | 0x4000 | SIGCHLD, 0, 0, 0, 0), errno.EPERM),
]  # fmt: skip

# Allowed (the call succeeds) in both variants: the other side of the argument rules above.
# fmt: off
ALLOWED: list[tuple[str, str, tuple[Arg, ...]]] = [
    ("getpid", "getpid", ()),
    ("prctl-PR_GET_DUMPABLE", "prctl", (3, 0, 0, 0, 0)),
    ("prctl-PR_SET_NAME", "prctl", (15, b"renamed", 0, 0, 0)),
    ("personality-query", "personality", (0xFFFFFFFF,)),
    ("ioctl-FIONREAD", "ioctl", (pipe_fd, FIONREAD, buffer(4))),
    ("kill-self-0", "kill", (lambda: os.getpid(), 0)),
    ("prlimit64-self", "prlimit64", (0, RLIMIT_NOFILE, 0, buffer(16))),
    ("socketpair-AF_UNIX", "socketpair", (socket.AF_UNIX, socket.SOCK_STREAM, 0, buffer(8))),
    ("socket-AF_UNIX", "socket", (socket.AF_UNIX, socket.SOCK_STREAM, 0)),
    ("mknodat-fifo", "mknodat", (AT_FDCWD, b"fifo", 0o010600, 0)),
    ("getrandom", "getrandom", (buffer(16), 16, 0)),
    ("mmap-anonymous", "mmap", (0, 1 << 20, 3, 0x22, -1, 0)),
    ("setsockopt-SO_PASSCRED", "setsockopt", (lambda: socket.socket(socket.AF_UNIX).detach(), socket.SOL_SOCKET,
                                              16, buffer(4), 4)),
    ("listxattr", "listxattr", (b".", buffer(64), 64)),
    ("pidfd_open-self", "pidfd_open", (lambda: os.getpid(), 0)),
    ("sched_getaffinity", "sched_getaffinity", (0, 128, buffer(128))),
    ("fcntl-F_GETFL", "fcntl", (open_fd, fcntl.F_GETFL, 0)),
    ("fcntl-F_SETFD", "fcntl", (open_fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)),
    ("fcntl-F_DUPFD_CLOEXEC", "fcntl", (open_fd, fcntl.F_DUPFD_CLOEXEC, 0)),
    ("fcntl-F_SETFL", "fcntl", (pipe_fd, fcntl.F_SETFL, os.O_NONBLOCK)),
    ("fcntl-F_GETPIPE_SZ", "fcntl", (pipe_fd, 1032, 0)),
]
# fmt: on


def _number(call: str | int) -> int:
    return call if isinstance(call, int) else nr(call)


@pytest.mark.parametrize("allow_fork", VARIANTS)
@pytest.mark.parametrize(
    ("call", "args", "expected"), [pytest.param(*c[1:], id=c[0]) for c in DENIED]
)
def test_denied(
    allow_fork: bool, call: str | int, args: tuple[Arg, ...], expected: int, tmp_path: Path
) -> None:
    # tmp_path: where a call that should have failed would leave its file
    ret, err = syscall_in_child(bpf(allow_fork=allow_fork), _number(call), *args, cwd=tmp_path)
    assert (ret, errno.errorcode.get(err, err)) == (-1, errno.errorcode[expected])


@pytest.mark.parametrize(
    ("call", "args", "expected"), [pytest.param(*c[1:], id=c[0]) for c in DENIED_NOFORK]
)
def test_denied_without_fork(call: str, args: tuple[Arg, ...], expected: int) -> None:
    ret, err = syscall_in_child(bpf(allow_fork=False), _number(call), *args)
    assert (ret, errno.errorcode.get(err, err)) == (-1, errno.errorcode[expected])


@pytest.mark.parametrize("allow_fork", VARIANTS)
@pytest.mark.parametrize(("call", "args"), [pytest.param(*c[1:], id=c[0]) for c in ALLOWED])
def test_allowed(allow_fork: bool, call: str, args: tuple[Arg, ...], tmp_path: Path) -> None:
    ret, err = syscall_in_child(bpf(allow_fork=allow_fork), _number(call), *args, cwd=tmp_path)
    assert ret >= 0, f"failed with {errno.errorcode.get(err, err)}"


def test_no_unix_sockets_where_not_allowed() -> None:
    program = bpf(allow_fork=False, allow_unix_sockets=False)
    ret, err = syscall_in_child(program, nr("socket"), socket.AF_UNIX, socket.SOCK_STREAM, 0)
    assert (ret, err) == (-1, errno.EPERM)
    ret, err = syscall_in_child(
        program, nr("socketpair"), socket.AF_UNIX, socket.SOCK_STREAM, 0, buffer(8)
    )
    assert (ret, err) == (-1, errno.EPERM)  # no network namespace of the run's own to count their buffers in


def _processes() -> dict[str, Any]:
    import subprocess

    out: dict[str, Any] = {}
    try:
        pid = os.fork()
    except OSError as exc:
        out["fork"] = exc.errno
    else:
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        subprocess.run(["/bin/true"], check=False)
        out["subprocess"] = "ran"
    except OSError as exc:
        out["subprocess"] = exc.errno
    out["system"] = os.system("/bin/true")
    return out


def test_processes_without_fork() -> None:
    out = run_ok(_processes, bpf(allow_fork=False))
    assert out["fork"] == errno.EPERM
    assert out["subprocess"] == errno.EPERM
    assert out["system"] != 0  # glibc answers 127 << 8 when it cannot start the shell


def test_processes_with_fork() -> None:
    out = run_ok(_processes, bpf(allow_fork=True))
    assert out["fork"] == 7  # the child ran and exited
    assert out["subprocess"] == errno.EPERM  # no other program: execve is refused
    assert out["system"] != 0


def _threads() -> list[int]:
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    results: queue.Queue[int] = queue.Queue()
    threads = [
        threading.Thread(target=lambda i=i: results.put(sum(range(i * 1000)))) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ThreadPoolExecutor(max_workers=4) as ex:
        squares = list(ex.map(lambda x: x * x, range(100)))
    return [*sorted(results.get() for _ in range(8)), sum(squares)]


@pytest.mark.parametrize("allow_fork", VARIANTS)
def test_threads(allow_fork: bool) -> None:
    expected = [*sorted(sum(range(i * 1000)) for i in range(8)), sum(x * x for x in range(100))]
    assert run_ok(_threads, bpf(allow_fork=allow_fork)) == expected


def _square(x: int) -> int:
    return x * x


def _pool() -> list[int]:
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(_square, range(20))


def test_multiprocessing_pool_with_fork() -> None:
    assert run_ok(_pool, bpf(allow_fork=True)) == [x * x for x in range(20)]


def test_multiprocessing_pool_without_fork() -> None:
    status, report = run(_pool, bpf(allow_fork=False))
    assert os.WIFEXITED(status), ended(status)
    assert (
        report is not None and report[0] == "raised" and report[1].startswith("PermissionError")
    ), report


def _everyday() -> dict[str, Any]:
    """What programs commonly do with the standard library, in the work dir."""
    import asyncio
    import ctypes.util
    import hashlib
    import mmap
    import selectors
    import shutil
    import sqlite3
    import ssl
    import tempfile
    import threading
    import uuid
    import zipfile
    import zoneinfo
    from datetime import datetime

    out: dict[str, Any] = {}

    async def pingpong() -> bytes:
        r, w = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=r)
        w.sendall(b"ping")
        data = await reader.read(4)
        await asyncio.sleep(0)
        writer.close()
        w.close()
        return data

    out["asyncio"] = asyncio.run(pingpong())
    # a file database takes fcntl locks, refused (a channel between runs): one run's own file
    # needs none, and says so (nolock=1); an in-memory database never locks
    try:
        sqlite3.connect("locked.sqlite").execute("create table t (x)")
        out["sqlite-locks"] = "allowed"
    except sqlite3.OperationalError as exc:
        out["sqlite-locks"] = str(exc)
    db = sqlite3.connect("file:db.sqlite?nolock=1", uri=True)
    db.execute("create table t (x)")
    db.executemany("insert into t values (?)", [(i,) for i in range(100)])
    db.commit()
    out["sqlite"] = db.execute("select sum(x) from t").fetchone()[0]
    db.close()
    with tempfile.TemporaryDirectory(dir=".") as d:
        os.makedirs(os.path.join(d, "a", "b"))
        with open(os.path.join(d, "a", "b", "f.txt"), "w") as fh:
            fh.write("x" * 10_000)
        shutil.copytree(os.path.join(d, "a"), os.path.join(d, "c"))
        shutil.copy2(os.path.join(d, "c", "b", "f.txt"), os.path.join(d, "g.txt"))
        os.chmod(os.path.join(d, "g.txt"), 0o600)
        os.utime(os.path.join(d, "g.txt"), (1e9, 1e9))
        os.symlink("g.txt", os.path.join(d, "link"))
        with zipfile.ZipFile(os.path.join(d, "z.zip"), "w", zipfile.ZIP_DEFLATED) as z:
            z.write(os.path.join(d, "link"), "link")
        out["walk"] = sorted(len(files) for _, _, files in os.walk(d))
        with open(os.path.join(d, "g.txt"), "r+b") as fb, mmap.mmap(fb.fileno(), 0) as m:
            out["mmap"] = m[:3]
        os.mkfifo(os.path.join(d, "fifo"))
        shutil.rmtree(os.path.join(d, "c"))
    got: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    signal.raise_signal(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGUSR1)
    out["signals"] = len(got)
    event = threading.Event()
    setter = threading.Thread(target=event.set)
    setter.start()
    out["event"] = event.wait(timeout=60)  # a timed futex wait, woken by the other thread
    setter.join()
    with selectors.DefaultSelector() as sel:
        r, w = os.pipe()
        sel.register(r, selectors.EVENT_READ)
        os.write(w, b"x")
        out["select"] = len(sel.select(0))
    resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
    out["rusage"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
    out["cpus"] = len(os.sched_getaffinity(0)) > 0 and (os.cpu_count() or 0) > 0
    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)  # libffi closure
    out["ctypes"] = callback(41)
    out["libm"] = ctypes.util.find_library("m") is not None  # ldconfig -p: a program, refused
    out["ssl"] = ssl.create_default_context().verify_mode == ssl.CERT_REQUIRED
    out["hash"] = hashlib.sha256(os.urandom(16)).digest_size
    out["uuid"] = uuid.uuid4().version
    try:  # the system's time zone data, where there is some
        out["tz"] = datetime(2024, 7, 1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).hour == 0
    except zoneinfo.ZoneInfoNotFoundError:
        out["tz"] = True
    out["localtime"] = datetime.now().astimezone().tzinfo is not None
    return out


@pytest.mark.parametrize("allow_fork", VARIANTS)
def test_everyday_standard_library(allow_fork: bool, tmp_path: Path) -> None:
    out = run_ok(_everyday, bpf(allow_fork=allow_fork), tmp_path)
    assert out == {
        "asyncio": b"ping", "sqlite": 4950, "sqlite-locks": out["sqlite-locks"], "walk": [0, 0, 1, 1, 3], "mmap": b"xxx", "signals": 2,
        "event": True, "select": 1, "rusage": True, "cpus": True, "ctypes": 42, "libm": out["libm"],
        "ssl": True, "hash": 32, "uuid": 4, "tz": True, "localtime": True,
    }  # fmt: skip
    assert out["sqlite-locks"] == "access permission denied"  # EPERM, as SQLite words it


def _numpy() -> dict[str, bool]:
    import numpy as np

    rng = np.random.default_rng(12345)
    a = rng.random((200, 200)) + 200 * np.eye(200)
    rhs = rng.random(200)
    x = np.linalg.solve(a, rhs)
    sym = a + a.T
    w, v = np.linalg.eigh(sym)
    u, s, vt = np.linalg.svd(a[:80, :60], full_matrices=False)
    ev = np.linalg.eigvals(a[:50, :50])
    signal_ = rng.standard_normal(4096)
    unsorted = rng.integers(0, 1 << 30, 100_000)
    big = np.ones(200 * 1024 * 1024 // 8)  # 200 MB
    big[:: 1 << 12] = 2.0
    big_sum = float(big.sum())
    del big
    return {
        "matmul": bool(np.allclose((a @ np.eye(200)), a)),
        "solve": bool(np.allclose(a @ x, rhs)),
        "eigh": bool(np.allclose(sym @ v, v * w)),
        "eigvals": bool(np.isclose(ev.sum(), np.trace(a[:50, :50]))),
        "svd": bool(np.allclose((u * s) @ vt, a[:80, :60])),
        "fft": bool(np.allclose(np.fft.irfft(np.fft.rfft(signal_), n=4096), signal_)),
        "sort": bool(np.all(np.diff(np.sort(unsorted)) >= 0)),
        "einsum": bool(np.allclose(np.einsum("ij,jk->ik", a[:30], a[:, :30]), a[:30] @ a[:, :30])),
        "random": bool(0.45 < rng.random(10_000).mean() < 0.55),
        "alloc": big_sum
        == 200 * 1024 * 1024 // 8 + (200 * 1024 * 1024 // 8 + (1 << 12) - 1) // (1 << 12),
    }


@pytest.mark.parametrize("allow_fork", VARIANTS)
def test_numpy(allow_fork: bool) -> None:
    out = run_ok(_numpy, bpf(allow_fork=allow_fork))
    assert out == dict.fromkeys(out, True)


# ---------------------------------------------------------------------------------------------
# other ABIs


@pytest.mark.skipif(not X86_64, reason="x32 is an x86_64 ABI")
@pytest.mark.parametrize("allow_fork", VARIANTS)
def test_x32_system_call_kills(allow_fork: bool) -> None:
    x32_getpid = 0x40000000 | nr("getpid")
    status, report = run(lambda: raw_syscall(x32_getpid), bpf(allow_fork=allow_fork))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS, (ended(status), report)


def _int80_getpid() -> int:
    """getpid through the i386 entry point (``int 0x80``, eax = 20), from a mapped code stub."""
    import mmap

    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20; int 0x80; ret
    mem = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    mem.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(address)())


@pytest.mark.skipif(not X86_64, reason="int 0x80 is the i386 entry point on x86_64")
def test_i386_system_call_kills() -> None:
    status, report = run(_int80_getpid, None)
    if not (os.WIFEXITED(status) and report is not None and report[0] == "ok" and report[1] > 0):
        pytest.skip(
            f"this kernel runs no i386 code (without the filter: {ended(status)}, {report})"
        )
    status, report = run(_int80_getpid, bpf(allow_fork=False))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS, (ended(status), report)


# ---------------------------------------------------------------------------------------------
# the standard library's own test suites under the filter

STDLIB_SUITES = [
    "test_re", "test_json", "test_math", "test_itertools", "test_collections", "test_heapq",
    "test_bisect", "test_functools", "test_decimal", "test_fractions", "test_datetime",
    "test_random", "test_string", "test_textwrap", "test_typing", "test_dataclasses",
    "test_threading", "test_fcntl",
]  # fmt: skip

# The tests that pass without the filter and cannot pass under it, by design (checked on CPython
# 3.10-3.13): test class -> its excused tests ("*": all of them).
#
# They start another program, a child interpreter (through subprocess, os.posix_spawn or
# test.support's script_helper): execve is refused in both variants.
NEEDS_EXEC: dict[str, tuple[str, ...]] = {
    # json.tool's command line
    "test.test_json.test_tool.TestTool": ("*",),
    # atexit, interpreter shutdown and finalization, sub-interpreters, fork in threads, the
    # exception hook's output: each checked in a fresh interpreter
    "test.test_threading.AtexitTests": ("*",),
    "test.test_threading.MiscTestCase": ("test_gh112826_missing__thread__is_main_interpreter",),
    "test.test_threading.SubinterpThreadingTests": (
        "test_daemon_threads_fatal_error", "test_daemon_threads_not_allowed",
        "test_threads_not_allowed",
    ),
    "test.test_threading.ThreadJoinOnShutdown": (
        "test_1_join_on_shutdown", "test_2_join_in_forked_process",
        "test_3_join_in_forked_from_thread", "test_4_daemon_threads", "test_thread_from_thread",
    ),
    "test.test_threading.ThreadTests": (
        "test_dummy_thread_after_fork", "test_finalization_shutdown",
        "test_finalize_running_thread", "test_finalize_with_trace", "test_fork_at_exit",
        "test_import_from_another_thread", "test_join_nondaemon_on_shutdown",
        "test_locals_at_exit", "test_main_thread_after_fork",
        "test_main_thread_after_fork_from_dummy_thread",
        "test_main_thread_after_fork_from_foreign_thread",
        "test_main_thread_after_fork_from_nonmain_thread", "test_main_thread_during_shutdown",
        "test_start_new_thread_at_exit", "test_start_new_thread_at_finalization",
    ),
    "test.test_threading.ThreadingExceptionTests": (
        "test_print_exception", "test_print_exception_gh_102056",
        "test_print_exception_stderr_is_none_1", "test_print_exception_stderr_is_none_2",
        "test_recursion_limit",
    ),
    # a crash (or its absence) in a fresh interpreter (3.13)
    "test.test_itertools.TestBasicOps": ("test_tee_dealloc_segfault",),
    "test.datetimetester.ExtensionModuleTests_Fast": ("test_gh_120161", "test_update_type_cache"),
}  # fmt: skip
# They lock a file (flock, fcntl's lock commands) or watch it (F_NOTIFY): refused in both
# variants, as a lock or a watch of a file every jail shows is a channel between runs.
NEEDS_LOCKS: dict[str, tuple[str, ...]] = {
    "test.test_fcntl.TestFcntl": (
        "test_fcntl_fileno", "test_fcntl_file_descriptor", "test_fcntl_64_bit", "test_flock",
        "test_lockf_exclusive", "test_lockf_share",
        # F_SETPIPE_SZ: a pipe grown past its 16 pages holds memory in no process's resident set
        "test_fcntl_f_pipesize",
    ),
}
# They fork (os.fork, a multiprocessing worker): refused in the nofork variant only.
NEEDS_FORK: dict[str, tuple[str, ...]] = {
    "test.test_re.ReTests": ("test_regression_gh94675",),  # a multiprocessing worker
    "test.test_random.TestModule": ("test_after_fork",),
    "test.test_threading.ThreadJoinOnShutdown": ("test_clear_threads_states_after_fork",),
    "test.test_threading.ThreadTests": ("test_is_alive_after_fork",),
}


def excused(test_id: str, allow_fork: bool) -> bool:
    cls, _, method = test_id.rpartition(".")
    lists = (NEEDS_EXEC, NEEDS_LOCKS) if allow_fork else (NEEDS_EXEC, NEEDS_LOCKS, NEEDS_FORK)
    return any(
        names == ("*",) or method in names for lst in lists if (names := lst.get(cls)) is not None
    )


def _stdlib_suite(module: str, allow_fork: bool | None = None) -> Callable[[], dict[str, str]]:
    """The module's tests run in the child; under a filter (``allow_fork`` given) the tests excused
    for it are left out: they cannot pass there by design, and some wait out a timeout of their
    own first (test_threading's fresh interpreters: minutes under load)."""

    def work() -> dict[str, str]:
        import traceback
        import unittest

        def trace(err: Any) -> str:
            return "".join(traceback.format_exception(*err))

        class Outcomes(unittest.TestResult):
            def __init__(self) -> None:
                super().__init__()
                self.outcomes: dict[str, str] = {}

            def addSuccess(self, test: unittest.TestCase) -> None:
                self.outcomes.setdefault(test.id(), "pass")

            def addFailure(self, test: unittest.TestCase, err: Any) -> None:
                self.outcomes[test.id()] = "FAIL " + trace(err)

            def addError(self, test: unittest.TestCase, err: Any) -> None:
                self.outcomes[test.id()] = "ERROR " + trace(err)

            def addSubTest(
                self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any
            ) -> None:
                if err is not None:
                    self.outcomes[test.id()] = "FAIL " + trace(err)

            def addSkip(self, test: unittest.TestCase, reason: str) -> None:
                self.outcomes[test.id()] = "skip"

        def kept(suite: unittest.TestSuite) -> unittest.TestSuite:
            out = unittest.TestSuite()
            for t in suite:
                if isinstance(t, unittest.TestSuite):
                    out.addTest(kept(t))
                elif allow_fork is None or not excused(t.id(), allow_fork):
                    out.addTest(t)
            return out

        result = Outcomes()
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # as unittest's runner does (pytest's filters: error)
            kept(unittest.defaultTestLoader.loadTestsFromName(f"test.{module}")).run(result)
        return result.outcomes

    return work


def three_ways(work: Callable[[], dict[str, str]] | dict[str, Callable[[], dict[str, str]]],
               tmp_path: Path) -> dict[str, dict[str, str]]:  # fmt: skip
    """``work``'s report without the filter and under each variant, three children at once, each
    in a fresh directory of its own: ``{"unfiltered": ..., "nofork": ..., "fork": ...}`` (``work``
    a dict: each its own, by those names)."""
    runs = {"unfiltered": None, "nofork": bpf(allow_fork=False), "fork": bpf(allow_fork=True)}
    children: dict[str, tuple[int, int]] = {}
    reports: dict[str, tuple[int, Any]] = {}
    try:
        for name, program in runs.items():
            (tmp_path / name).mkdir()
            children[name] = start(work[name] if isinstance(work, dict) else work, program, tmp_path / name, quiet=True)
        for name, (pid, r) in children.items():
            reports[name] = finish(pid, r)
    finally:
        kill_all([pid for pid, _ in children.values()])
    outcomes: dict[str, dict[str, str]] = {}
    for name, (status, report) in reports.items():
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
            f"{name}: the child ended badly: {ended(status)}"
        )
        assert report is not None and report[0] == "ok", f"{name}: {report}"
        outcomes[name] = report[1]
    return outcomes


def stdlib_suite_missing(module: str) -> str | None:
    """Why the standard library's own test module cannot run here, or None. Debian ships
    ``Lib/test`` apart, in ``libpython3.X-testsuite``, and keeps only ``test.support`` in the
    standard library: ``scripts/bootstrap.sh`` installs the package as root."""
    import importlib.util

    try:
        found = importlib.util.find_spec(f"test.{module}") is not None
    except ImportError:
        found = False
    if found:
        return None
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (
        f"test.{module} is not installed for {sys.executable} (its standard library has no test suite; "
        f"on Debian it is the package libpython{v}-testsuite, which scripts/bootstrap.sh installs when run as "
        f"root). test_shipped_programs_under_the_filter covers the filter meanwhile"
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("module", STDLIB_SUITES)
def test_stdlib_suite(module: str, tmp_path: Path) -> None:
    """The module's tests, in a fresh directory, without the filter and under each variant (three
    children at once): every test that passes without the filter passes under it, but for the
    excused ones."""
    missing = stdlib_suite_missing(module)
    if missing:
        pytest.skip(missing)
    outcomes = three_ways({"unfiltered": _stdlib_suite(module), "nofork": _stdlib_suite(module, allow_fork=False),
                           "fork": _stdlib_suite(module, allow_fork=True)}, tmp_path)  # fmt: skip
    passed = {t for t, outcome in outcomes["unfiltered"].items() if outcome == "pass"}
    assert passed, f"no test of {module} passes even without the filter"
    for name, allow_fork in (("nofork", False), ("fork", True)):
        broken = {
            t: outcomes[name].get(t, "did not run")
            for t in sorted(passed)
            if outcomes[name].get(t) != "pass" and not excused(t, allow_fork)
        }
        assert not broken, (
            f"{name}: {len(broken)} tests pass only without the filter:\n"
            + "\n".join(f"{t}: {why[-1500:]}" for t, why in broken.items())
        )


def _shipped_programs() -> Callable[[], dict[str, str]]:
    """The reference solution of every task we ship (builtin, humaneval, three synthetic
    families) on every one of its tests, in-process: each outcome is the returned value (or the
    program's output) or the exception it raised."""
    import copy
    import io
    import random

    import registry

    tasks = [*registry.load("builtin"), *registry.load("humaneval")]
    for family in ("arith", "list", "string"):
        tasks += registry.load(f"synthetic:{family}", n=20, seed=0)

    def work() -> dict[str, str]:
        outcomes: dict[str, str] = {}
        for t in tasks:
            for k, case in enumerate([*t.public_tests, *t.hidden_tests]):
                key = f"{t.problem_id}/{k}"
                random.seed(0)
                stdin, stdout = sys.stdin, sys.stdout
                try:
                    ns: dict[str, Any] = {"__name__": "__main__" if case.is_stdio else "__solution__"}
                    if case.is_stdio:
                        sys.stdin, sys.stdout = io.StringIO(case.stdin or ""), io.StringIO()
                        try:
                            exec(compile(t.reference_solution, "solution.py", "exec"), ns)
                        except SystemExit as e:
                            if e.code not in (None, 0):
                                raise
                        outcomes[key] = "out " + sys.stdout.getvalue()
                    else:
                        exec(compile(t.reference_solution, "solution.py", "exec"), ns)
                        value = ns[str(t.entry_point)](*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
                        outcomes[key] = "value " + repr(value)
                except BaseException as e:
                    outcomes[key] = f"raised {type(e).__name__}: {e}"
                finally:
                    sys.stdin, sys.stdout = stdin, stdout
        return outcomes

    return work


@pytest.mark.timeout(600)
def test_shipped_programs_under_the_filter(tmp_path: Path) -> None:
    """What the filter must never break, whether or not the standard library's own suites are
    installed (Debian ships them apart): every shipped task's reference solution on every test,
    without the filter and under each variant (three children at once), gives the same outcome,
    and, without the filter, no exception (the references pass their tests)."""
    outcomes = three_ways(_shipped_programs(), tmp_path)
    base = outcomes["unfiltered"]
    assert len(base) > 1500, len(base)
    raised = {k: v for k, v in base.items() if v.startswith("raised ")}
    assert not raised, list(raised.items())[:5]
    for name in ("nofork", "fork"):
        differ = {k: (base[k], outcomes[name].get(k)) for k in base if outcomes[name].get(k) != base[k]}
        assert not differ, f"{name}: {len(differ)} outcomes change under the filter: {list(differ.items())[:5]}"


# ---------------------------------------------------------------------------------------------
# the filter's construction


def test_complement_blocks_cover_the_rest_exactly() -> None:
    cases = [
        (0xFF, [4, 35, 0xFE]),
        (0xFF, [0]),
        (0xFF, [0xFF]),
        (0xFF, []),
        (0b1011_0110, [0b0010_0100, 0b1000_0010]),  # a field of scattered bits
        (0xFF, list(range(256))),
    ]
    for field, points in cases:
        blocks = _seccomp.complement_blocks(field, points)
        values = {x & field for x in range(256)}
        for x in values:
            covering = [b for b in blocks if x & b[0] == b[1]]
            assert len(covering) == (0 if x in points else 1), (field, points, x, covering)


def test_wide_complement_is_small() -> None:
    blocks = _seccomp.complement_blocks(0xFFFFFFFF, [4, 35, 0x59616D61])
    assert len(blocks) <= 3 * 32
    assert all(mask & 0xFFFFFFFF == mask for mask, _ in blocks)


def test_lists_are_consistent() -> None:
    denied, allowed = set(_seccomp.DENIED_SYSCALLS), set(_seccomp.ALLOWED_SYSCALLS)
    assert not denied & allowed
    argument_rules = {"clone", "clone3", "fork", "vfork", "socket", "socketpair", "prctl", "personality", "ioctl",
                      "kill", "prlimit64", "mknod", "mknodat", "fcntl", "fcntl64", "setsockopt", "mmap",
                      "mmap2"}  # fmt: skip
    assert not (denied | allowed) & argument_rules
    assert len(_seccomp.DENIED_SYSCALLS) == len(denied) and len(_seccomp.ALLOWED_SYSCALLS) == len(
        allowed
    )


def test_variants_and_filter_file(tmp_path: Path) -> None:
    names = {
        _seccomp.variant(allow_fork=f, allow_unix_sockets=u)
        for f in (False, True)
        for u in (False, True)
    }
    assert names == {"unix-nofork", "unix-fork", "nounix-nofork", "nounix-fork"}
    path = _seccomp.filter_file(str(tmp_path), allow_fork=True, allow_unix_sockets=False)
    assert Path(path).read_bytes() == bpf(allow_fork=True, allow_unix_sockets=False)
    assert (
        len({bpf(allow_fork=f, allow_unix_sockets=u) for f in (False, True) for u in (False, True)})
        == 4
    )


# fmt: off
ARCHES = [
    pytest.param(getattr(pyseccomp.Arch, name), id=name.lower())
    for name in ("X86", "X86_64", "X32", "ARM", "AARCH64", "PPC64LE", "PPC64", "S390X", "RISCV64", "MIPSEL64", "MIPSEL")
]
# fmt: on


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("allow_fork", VARIANTS)
def test_compiles_for_other_architectures(arch: int, allow_fork: bool, tmp_path: Path) -> None:
    probe = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    probe.remove_arch(pyseccomp.Arch.NATIVE)
    try:
        probe.add_arch(arch)
    except OSError as exc:
        pytest.skip(f"this libseccomp does not know the architecture ({exc})")
    f = _seccomp.build_filter(allow_fork=allow_fork, allow_unix_sockets=True, arch=arch)
    with open(tmp_path / "filter.bpf", "wb") as fh:
        f.export_bpf(fh)
    size = (tmp_path / "filter.bpf").stat().st_size
    assert size and size % 8 == 0
    assert size // 8 < 4096  # BPF_MAXINSNS
    with open(tmp_path / "filter.pfc", "w") as fh:
        f.export_pfc(fh)
    pfc = (tmp_path / "filter.pfc").read_text()
    assert '"execve"' in pfc and '"clone"' in pfc and '"openat"' in pfc
