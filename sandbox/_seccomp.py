"""The seccomp filter of a sandboxed run, compiled with libseccomp (through ``pyseccomp``) once per
worker into a classic-BPF program; the child only hands the bytes to the kernel (``_child``).

Default allow, with ``EPERM`` for what a test-solving program has no business doing:

* sockets of any family but ``AF_UNIX`` (``AF_UNIX`` too where the filesystem is not private);
* ``execve``/``execveat`` (no other programs: no shell, no compiler, no ``subprocess``);
* ``ptrace`` and cross-process memory access, namespace and mount changes, ``chroot``,
  ``pivot_root``, kernel keyrings, BPF, perf, ``io_uring`` (which would bypass this filter), module
  and kexec loading, clock and swap changes;
* new processes (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``) unless the run's
  ``max_processes`` allows them. ``clone3`` answers ``ENOSYS`` so that glibc falls back to ``clone``,
  whose flags a filter can read.
"""

from __future__ import annotations

import errno
import os
import socket
from functools import cache

# Always denied, whatever the limits.
DENIED_SYSCALLS: tuple[str, ...] = (
    "execve", "execveat",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init",
    "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "vhangup", "lookup_dcookie",
)  # fmt: skip

CLONE_THREAD = 0x00010000


def variant(*, allow_fork: bool, allow_unix_sockets: bool) -> str:
    """The name of a filter variant, e.g. ``unix-nofork`` (the worker, which must not import this
    module, spells the same names in ``_zygote.Worker``)."""
    return f"{'unix' if allow_unix_sockets else 'nounix'}-{'fork' if allow_fork else 'nofork'}"


@cache
def compiled(*, allow_fork: bool, allow_unix_sockets: bool) -> bytes:
    """``build_bpf``, once per process and variant."""
    return build_bpf(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets)


def build_bpf(*, allow_fork: bool, allow_unix_sockets: bool) -> bytes:
    """Compile the filter and return the BPF program (an array of ``struct sock_filter``)."""
    import pyseccomp as sc  # imported here: it loads libseccomp with ctypes at import

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        try:
            f.add_rule(eperm, name)
        except (RuntimeError, ValueError, OSError):
            continue  # a syscall this architecture does not have
    if allow_unix_sockets:
        f.add_rule(eperm, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
        f.add_rule(eperm, "socketpair", sc.Arg(0, sc.NE, socket.AF_UNIX))
    else:
        f.add_rule(eperm, "socket")
        f.add_rule(eperm, "socketpair", sc.Arg(0, sc.NE, socket.AF_UNIX))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if not allow_fork:
        for name in ("fork", "vfork"):
            try:
                f.add_rule(eperm, name)
            except (RuntimeError, ValueError, OSError):
                continue
        f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    with os.fdopen(os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC), "w+b") as fh:
        f.export_bpf(fh)
        fh.seek(0)
        bpf = fh.read()
    if not bpf or len(bpf) % 8:
        raise RuntimeError(f"libseccomp exported a malformed BPF program ({len(bpf)} bytes)")
    return bpf


def filter_file(directory: str, *, allow_fork: bool, allow_unix_sockets: bool) -> str:
    """Write the compiled filter into ``directory`` (for a child that is started by ``exec``)."""
    name = f"seccomp-{variant(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets)}.bpf"
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        data = compiled(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets)
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path
