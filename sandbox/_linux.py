"""Thin ctypes wrappers over the Linux calls Python 3.10/3.11 does not expose (mount, unshare,
setns, pivot_root), with errors that name the call. Standard library only."""

from __future__ import annotations

import ctypes
import errno
import os

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), f"setns({nstype:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    ret = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(ret, f"mount({source!r} -> {target!r}, {fstype!r})")


class ProcOptionsRefused(OSError):
    """The kernel refused to mount procfs with the options asked for (EINVAL: before Linux 5.8 it
    knows no ``subset=pid``)."""


def mount_proc(target: str, flags: int, options: str) -> None:
    """Mount procfs at ``target``; ``ProcOptionsRefused`` if the kernel refuses ``options``."""
    try:
        mount("proc", target, "proc", flags, options)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise ProcOptionsRefused(exc.errno, f"{exc.strerror} (kernel {os.uname().release}, "
                                                f"options {options!r})") from exc  # fmt: skip
        raise


def umount2(target: str, flags: int) -> None:
    _check(_libc.umount2(target.encode(), ctypes.c_int(flags)), f"umount2({target!r})")


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(0, f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(nr), new_root.encode(), put_old.encode()), "pivot_root")


CLONE_VM = 0x00000100
CLONE_FILES = 0x00000400
SIGCHLD = 17
# pause(2), which only a signal ends; architectures without it (aarch64, riscv64...) have no sleeper
_SYS_PAUSE = {"x86_64": 34}


def sleeper_available() -> bool:
    """Whether ``clone_sleeper`` works on this machine."""
    return os.uname().machine in _SYS_PAUSE


def clone_sleeper(stack: ctypes.Array[ctypes.c_char]) -> int:
    """A child process that shares this process's memory and file table (``CLONE_VM |
    CLONE_FILES``: no page table is copied, nothing is torn down when it dies) and only sleeps, in
    ``pause(2)``, until it is killed; its pid. It runs no Python: the thread function is libc's
    ``syscall`` with the number of ``pause`` for its argument, on ``stack`` (kept alive by the caller
    until the child is reaped). It gets a copy of this process's signal dispositions, so the caller
    must have no signal handler installed (a handler would run in the sleeper, on this process's
    memory): with none, a signal sent to it by anything but SIGKILL (and, as the init of a PID
    namespace, any signal from inside the namespace) is ignored by the kernel. After
    ``unshare(CLONE_NEWPID)`` it is the new namespace's PID 1, which the caller's next child joins."""
    nr = _SYS_PAUSE.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"no sleeper on {os.uname().machine}")
    top = (ctypes.addressof(stack) + len(stack) - 64) & ~0xF  # 16-byte aligned, below the end
    fn = ctypes.cast(_libc.syscall, ctypes.c_void_p)
    pid = _libc.clone(fn, ctypes.c_void_p(top), ctypes.c_int(CLONE_VM | CLONE_FILES | SIGCHLD), ctypes.c_void_p(nr))
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone (sleeper): {os.strerror(err)}")
    return int(pid)


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, ctypes.c_size_t(len(raw))), "sethostname")


PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_bounding_set() -> None:
    """Empty the capability bounding set: no exec of this process or its children can gain a
    capability (the capabilities it holds stay)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: no such capability, we are past the last one
                break
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")


def drop_capabilities(*, bounding: bool = True) -> None:
    """Give up every capability for good: the bounding (unless ``bounding`` is False: a parent
    emptied it already, ``drop_bounding_set``) and ambient sets, then the effective, permitted and
    inheritable ones (what uid 0 of a user namespace would otherwise keep)."""
    if bounding:
        drop_bounding_set()
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
