"""The seccomp filter of a sandboxed run, compiled once per worker into a classic-BPF program; the
child only hands the bytes to the kernel (``_child``). The compiler is our own (``build_bpf``):
the kernel converts and JIT-compiles a filter at every load, once per run, and libseccomp (through
``pyseccomp``) writes ~1,500 instructions for these rules where ``build_bpf`` writes ~140.
libseccomp still names each architecture's system calls, builds the reference filter the tests
hold ours to (``build_filter``), and builds the sysinfo layer.

Deny by default. The filter is an allowlist of what CPython (3.10-3.13), its standard library and
numpy need, and is generous with what is harmless (the kernel's own permission checks, the run's
uid, namespaces and rlimits still apply):

* every system call not named here answers ``ENOSYS``, as if the kernel did not have it: system
  calls newer than this list (e.g. ``open_tree_attr``) never reach the kernel, and glibc and CPython
  fall back as they do on an older kernel. ``clone3`` answers ``ENOSYS`` on purpose, so that glibc
  falls back to ``clone``, whose flags a filter can read (``clone3`` passes them in memory);
* ``EPERM`` for the dangerous ones the kernel has (``DENIED_SYSCALLS``): other programs
  (``execve``/``execveat``: no shell, no compiler, no ``subprocess``); other processes' memory and
  state (``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ``kcmp``, ``process_madvise``,
  ``migrate_pages``...); namespaces and mounts (``unshare``, ``setns``, the mount family,
  ``chroot``, ``pivot_root``, file handles); kernel attack surface (BPF, perf, ``io_uring``, which
  would bypass this filter, ``userfaultfd``, fanotify, keyrings, ``modify_ldt``, ``vm86``); what
  the kernel shares between all openers of one inode, a channel between concurrent runs through
  the read-only host files every jail shows (``flock``, inotify; fcntl's lock commands below); the
  machine (modules, kexec, reboot, swap, accounting, quotas, the kernel log, clocks, host and domain
  names, I/O ports); identity changes (``set*uid``, ``set*gid``, ``setgroups``, ``capset``);
  System V and POSIX message-queue IPC, whose objects would outlive the run; and what holds memory
  in no process's resident set, which only a memory cgroup would count (``memfd_create``,
  ``vmsplice``, setting extended attributes; ``F_SETPIPE_SZ``, huge pages and larger socket buffers
  below);
* allowed: memory (``mmap`` but with ``MAP_HUGETLB``, ``mprotect``, ``madvise``, ``mremap``, ``membarrier``, ``mbind``...),
  file I/O and the file system calls on what the mounts let the run see (the ``stat``/``open``/
  ``read`` families, ``getdents64``, ``rename``, ``unlink``, ``chmod``, reading xattrs...), ``fcntl``
  (but its lock commands, see below), pipes,
  ``eventfd``, ``timerfd``, ``signalfd``, ``select``/``poll``/``epoll``, threads
  and their synchronisation (``futex``, ``rseq``, ``set_robust_list``), signals (``kill`` and
  ``tgkill``: the kernel refuses cross-uid signals), time and sleeping, ``getrandom``, the
  ``sched_*`` calls, ``getrlimit``/``setrlimit`` (lowering is harmless; raising above the hard limit
  fails in the kernel), ``wait4``/``waitid``, ``pidfd_open``/``pidfd_send_signal``, sessions and
  process groups, ``seccomp`` (it can only add filters), Landlock (it can only restrict);
* with arguments: ``socket`` only for ``AF_UNIX``, and only where the filesystem is private
  (``allow_unix_sockets``), ``socketpair`` only for ``AF_UNIX`` and there too, any other family ``EPERM``
  (where the network namespace is the run's own, the monitor counts each socket at its full
  buffers); ``setsockopt`` but ``SO_SNDBUF``/``SO_RCVBUF`` (and their ``FORCE`` forms), which would
  grow a socket's buffers to MiBs; the other socket calls are allowed (they only work on sockets the
  process could make or inherit).
  ``clone`` with ``CLONE_THREAD`` (threads); without it, a new process, only when the run's
  ``max_processes`` allows (``allow_fork``, as ``fork``/``vfork``); never with a namespace flag
  (``CLONE_NEWUSER``, ``CLONE_NEWNS``, ``CLONE_NEWNET``, ``CLONE_NEWPID``, ``CLONE_NEWIPC``,
  ``CLONE_NEWUTS``, ``CLONE_NEWCGROUP``, ``CLONE_NEWTIME``) nor ``CLONE_PARENT`` (a sibling would be
  the sandbox's own child): ``EPERM``. ``prctl`` except ``PR_SET_DUMPABLE``, ``PR_SET_PTRACER`` and
  ``PR_SET_MM`` (``EPERM``); ``fcntl``/``fcntl64`` except the commands that lock or watch a file
  (``LOCK_COMMANDS``: POSIX and open-file-description record locks, leases, dnotify: ``EPERM``) and
  ``F_SETPIPE_SZ`` (a pipe stays at its 16 pages);
  ``personality`` only to query it (``0xffffffff``); ``ioctl`` except
  ``TIOCSTI`` and ``TIOCLINUX`` (typing into, or driving, a terminal); ``mknod``/``mknodat``
  except for device nodes; ``kill`` except ``kill(-1, ...)`` (every process the uid may signal); ``prlimit64`` on the
  process itself (pid 0) only. Integer arguments are compared on their low 32 bits, as the kernel
  reads an ``int``, so that high bits cannot dodge a rule.

Architectures: the filter is for the native ABI only. Any other ABI (i386 through ``int 0x80``,
which the x86_64 kernel also accepts, or x32, whose system call numbers carry bit 30 on the x86_64
architecture) kills the process (``SECCOMP_RET_KILL_PROCESS``). Names a libseccomp architecture
lacks are skipped, so the same lists compile wherever libseccomp runs; where ``socket`` and the IPC
calls go through the ``socketcall``/``ipc`` multiplexers (i386, ppc64, s390x), whose arguments a
filter cannot read, both multiplexers are refused and no socket can be made.

``sysinfo``: the run's own view, not the host's. The call returns the machine's total, free,
shared and buffer RAM, swap, load, uptime and process count: a view of the host, and a channel
between concurrent runs (one allocates or forks, another sees free RAM or the process count move).
It cannot be refused: glibc's ``sysconf(_SC_PHYS_PAGES)``/``_SC_AVPHYS_PAGES`` (``os.sysconf``)
ignore its error and return whatever the stack held. So a second, small filter below this one, the
**sysinfo layer** (``build_listener_filter``), answers it ``SECCOMP_RET_USER_NOTIF``, and the
sandbox's monitor, outside the run, answers each notification (``_monitor.answer_sysinfo``): it
writes into the caller's memory a ``struct sysinfo`` made of the run's limits alone (total and free
RAM its ``memory_mb``, one process, no load, swap or uptime), the same for every run with those
limits, so it carries nothing between runs. The layer is loaded with a listener
(``SECCOMP_FILTER_FLAG_NEW_LISTENER``) the program never holds:

* process backend: the slot's template loads it once, at start-up, before it forks any run child
  (each inherits it), and hands the listener to the monitor over their socket; the template keeps
  no copy. Nothing per run (the monitor polls one more fd), in every mode, weak included.
* nsjail: the jail's init loads it before it forks the program, and holds the listener until it
  exits; the host's monitor takes a copy (``pidfd_getfd``) once the program has said it is set up.

Where the kernel cannot (no ``user_notif`` in ``/proc/sys/kernel/seccomp/actions_avail``: Linux <
5.0; for nsjail also no ``pidfd_getfd``: < 5.6; a machine whose ioctl numbers are not the generic
layout) the layer is not loaded and ``sysinfo`` stays the host's, as the backend's ``isolation``
says (``"sysinfo"``): a view of the host, not an escape, so no mode refuses to run for it. No run
can wait for an answer that never comes: where the layer is loaded, the listener is the monitor's
for the whole run (a listener closed early would make the call ``ENOSYS``, never hang).

The layer also refuses (``EPERM``) every ioctl of the listener's type (``SECCOMP_IOCTL_NOTIF_*``:
RECV, SEND, ID_VALID, ADDFD, SET_FLAGS): even a listener fd a program got hold of could not answer
a call with ``SECCOMP_USER_NOTIF_FLAG_CONTINUE`` (which would run the real one). It is in the layer,
not this filter, because it matters exactly where a listener exists, and a filter the program adds
can only make it stricter. A program cannot make a listener of its own (the kernel allows one per
filter tree: ``EBUSY``), and its own filters cannot turn the notification into ``ALLOW`` (the kernel
takes the strictest action of all filters).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
import termios
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeAlias

# A run of another language's interpreter or compiled program (``allow_exec``, ``sandbox.languages``)
# starts it with execve: allowed in that run's filter alone, never in a Python run's.
EXEC_SYSCALLS: tuple[str, ...] = ("execve", "execveat")

# Always EPERM, whatever the limits (but EXEC_SYSCALLS with allow_exec). Names an architecture lacks are skipped.
DENIED_SYSCALLS: tuple[str, ...] = (
    # other programs
    "execve", "execveat", "uselib",
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
    "process_mrelease", "get_robust_list", "migrate_pages", "move_pages",
    # namespaces, mounts, file handles
    "mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at",
    # kernel attack surface; io_uring would run system calls this filter never sees
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "fanotify_mark",
    "keyctl", "add_key", "request_key", "modify_ldt", "vm86", "vm86old",
    # the machine
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "_sysctl",
    "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime",
    "clock_adjtime64", "adjtimex", "sethostname", "setdomainname", "vhangup", "lookup_dcookie",
    "iopl", "ioperm",
    # identity (the kernel refuses real changes to an unprivileged uid anyway)
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
    "setgroups", "setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32",
    "setresgid32", "setfsuid32", "setfsgid32", "setgroups32", "capset",
    # what the kernel keeps per inode and shares with every opener of the same (read-only,
    # host) file, so a channel between concurrent runs: locks and watches (the lock commands of
    # fcntl are refused by argument, see LOCK_COMMANDS)
    "flock", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    # memory in no process's resident set, which only a memory cgroup would count (the monitor
    # counts the rest, see _monitor.TreeMemory): a memfd written and unmapped, pages pinned in a
    # pipe, extended attributes kept in the kernel
    "memfd_create", "vmsplice", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
    "fremovexattr",
    # System V and POSIX message-queue IPC: their objects outlive the run
    "ipc", "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
    "semtimedop_time64", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "mq_timedsend_time64", "mq_timedreceive_time64",
)  # fmt: skip

# Always allowed, whatever their arguments. Names an architecture lacks are skipped (the 32-bit,
# time64 and generic spellings are here for the architectures that have them).
ALLOWED_SYSCALLS: tuple[str, ...] = (
    # processes, threads, their identity
    "exit", "exit_group", "wait4", "waitid", "waitpid", "getpid", "gettid", "getppid",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
    "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32", "getgroups32",
    "getpgid", "getpgrp", "setpgid", "getsid", "setsid", "capget",
    "set_tid_address", "set_robust_list", "rseq", "futex", "futex_time64", "futex_waitv",
    "futex_wake", "futex_wait", "futex_requeue", "arch_prctl", "set_thread_area",
    "get_thread_area", "set_tls", "get_tls", "map_shadow_stack", "membarrier",
    "pidfd_open", "pidfd_send_signal", "seccomp",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # scheduling and limits
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
    "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
    "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "getpriority", "setpriority",
    "nice", "ioprio_get", "ioprio_set", "getrlimit", "ugetrlimit", "setrlimit", "getrusage",
    "times", "getcpu",
    # signals
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "sigaction", "sigprocmask", "sigreturn", "sigsuspend", "sigpending", "signal",
    "sigaltstack", "tgkill", "tkill", "pause", "alarm", "getitimer", "setitimer",
    "restart_syscall",
    # time
    "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64",
    "clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "gettimeofday", "time",
    "timer_create", "timer_settime", "timer_settime64", "timer_gettime", "timer_gettime64",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime",
    "timerfd_settime64", "timerfd_gettime", "timerfd_gettime64",
    # memory
    "brk", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore",
    "mlock", "mlock2", "munlock", "mlockall", "munlockall", "mbind", "get_mempolicy",
    "set_mempolicy", "set_mempolicy_home_node", "pkey_alloc", "pkey_free", "pkey_mprotect",
    "cacheflush", "riscv_flush_icache",
    # file descriptors and I/O
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "lseek", "_llseek", "close", "close_range", "dup", "dup2", "dup3", "pipe",
    "pipe2", "fsync", "fdatasync", "sync", "syncfs",
    "sync_file_range", "sync_file_range2", "arm_sync_file_range", "fadvise64", "fadvise64_64",
    "arm_fadvise64_64", "readahead", "fallocate", "sendfile", "sendfile64", "copy_file_range",
    "splice", "tee", "eventfd", "eventfd2", "signalfd", "signalfd4",
    "select", "_newselect", "pselect6", "pselect6_time64", "poll", "ppoll", "ppoll_time64",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
    # files and directories (what the mounts and permissions let the run see)
    "open", "openat", "openat2", "creat", "stat", "lstat", "fstat", "newfstatat", "statx",
    "stat64", "lstat64", "fstat64", "fstatat64", "statfs", "fstatfs", "statfs64", "fstatfs64",
    "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
    "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename",
    "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "truncate", "ftruncate",
    "truncate64", "ftruncate64", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown",
    "lchown", "fchownat", "chown32", "fchown32", "lchown32", "umask", "utime", "utimes",
    "futimesat", "utimensat", "utimensat_time64",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    # sockets: only those the process could make (see ``socket`` below) or inherit
    "connect", "bind", "listen", "accept", "accept4", "getsockname", "getpeername", "sendto",
    "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "recvmmsg_time64", "shutdown",
    "getsockopt", "send", "recv",
    # the system
    "uname", "sysinfo", "getrandom",
)  # fmt: skip

# fcntl's commands that lock or watch a file (the asm-generic values; ``fcntl``'s own where they
# differ): POSIX record locks (F_GETLK, F_SETLK, F_SETLKW and their 64-bit forms), open file
# description locks (F_OFD_*), leases (F_SETLEASE, F_GETLEASE) and dnotify (F_NOTIFY). A lock on,
# or a watch of, a file every jail shows (the interpreter, the standard library, /dev/null) is seen
# by every other run: each is a channel between runs. Every other command (F_GETFL, F_SETFD,
# F_DUPFD, F_SETPIPE_SZ, F_ADD_SEALS...) is allowed.
LOCK_COMMANDS: tuple[int, ...] = tuple(sorted({
    5, 6, 7, 12, 13, 14, 36, 37, 38, 1024, 1025, 1026,
    *(getattr(fcntl, name) for name in ("F_GETLK", "F_SETLK", "F_SETLKW", "F_GETLK64", "F_SETLK64", "F_SETLKW64",
                                        "F_OFD_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW", "F_SETLEASE", "F_GETLEASE",
                                        "F_NOTIFY") if hasattr(fcntl, name)),
}))  # fmt: skip

# fcntl's command that grows a pipe's buffer past its 16 pages (to pipe-max-size, 1 MiB each):
# memory in no process's resident set
F_SETPIPE_SZ = 1031
# mmap's flag for huge pages (x86, arm, riscv, ppc, s390): they are in no resident set
MAP_HUGETLB = 0x40000
# setsockopt's options (at SOL_SOCKET) that grow a socket's buffers (to wmem_max/rmem_max, often
# MiBs each): memory in no process's resident set, refused (the defaults stay)
SOCKET_BUFFER_OPTIONS = (socket.SO_SNDBUF, socket.SO_RCVBUF, 32, 33)  # 32, 33: SO_SNDBUFFORCE, SO_RCVBUFFORCE

CLONE_THREAD = 0x00010000
CLONE_PARENT = 0x00008000
CLONE_NEWTIME = 0x00000080  # also a CSIGNAL bit for clone(): no valid exit signal has it
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACES = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWTIME
)
CLONE_FORBIDDEN = CLONE_NAMESPACES | CLONE_PARENT

PR_SET_DUMPABLE = 4
PR_SET_MM = 35
PR_SET_PTRACER = 0x59616D61
PERSONALITY_QUERY = 0xFFFFFFFF
S_IFMT = 0o170000
INT32 = 0xFFFFFFFF  # the bits of an ``int`` argument


def variant(*, allow_fork: bool, allow_unix_sockets: bool, allow_exec: bool = False) -> str:
    """The name of a filter variant, e.g. ``unix-nofork`` or ``unix-nofork-exec`` (the worker,
    which must not import this module, spells the same names in ``_zygote.Worker``)."""
    return f"{'unix' if allow_unix_sockets else 'nounix'}-{'fork' if allow_fork else 'nofork'}" + ("-exec" if allow_exec else "")


@cache
def compiled(*, allow_fork: bool, allow_unix_sockets: bool, allow_exec: bool = False) -> bytes:
    """``build_bpf``, once per process and variant."""
    return build_bpf(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets, allow_exec=allow_exec)


def build_filter(*, allow_fork: bool, allow_unix_sockets: bool, arch: int | None = None, allow_exec: bool = False) -> Any:
    """The libseccomp filter (a ``pyseccomp.SyscallFilter``) for the native architecture, or for
    ``arch`` (a ``pyseccomp.Arch`` value; to check that the lists compile there). No run loads it:
    it is the reference ``build_bpf``'s program must answer like (``reference_bpf``), the rules
    written as libseccomp takes them."""
    import pyseccomp as sc  # imported here: it loads libseccomp with ctypes at import

    default = sc.ERRNO(errno.ENOSYS)
    f = sc.SyscallFilter(defaction=default)
    if arch is not None and arch != sc.system_arch():
        f.remove_arch(sc.Arch.NATIVE)  # first: libseccomp mixes no byte orders
        f.add_arch(arch)
    else:
        arch = sc.system_arch()
    try:
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    except OSError:  # a kernel without SECCOMP_RET_KILL_PROCESS (< 4.14): kill the thread
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL)
    try:
        f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree of syscall numbers (libseccomp >= 2.5)
    except OSError:
        pass
    rules = _Rules(sc, f, arch, default)
    eperm, allow = sc.ERRNO(errno.EPERM), sc.ALLOW

    for name in DENIED_SYSCALLS:
        rules.add(allow if allow_exec and name in EXEC_SYSCALLS else eperm, name)
    for name in ALLOWED_SYSCALLS:
        rules.add(allow, name)
    # clone3 is in neither list: it answers ENOSYS, the default (libseccomp refuses a rule that
    # repeats the default action)

    # new processes and threads
    flags = 1 if arch in (sc.Arch.S390, sc.Arch.S390X) else 0  # s390: clone(stack, flags, ...)
    for bit in range(32):
        if CLONE_FORBIDDEN >> bit & 1:
            rules.add(eperm, "clone", sc.Arg(flags, sc.MASKED_EQ, 1 << bit, 1 << bit))
    if allow_fork:
        rules.add(allow, "clone", sc.Arg(flags, sc.MASKED_EQ, CLONE_FORBIDDEN, 0))
        rules.add(allow, "fork")
        rules.add(allow, "vfork")
    else:
        mask = CLONE_FORBIDDEN | CLONE_THREAD
        rules.add(allow, "clone", sc.Arg(flags, sc.MASKED_EQ, mask, CLONE_THREAD))
        rules.add(eperm, "clone", sc.Arg(flags, sc.MASKED_EQ, CLONE_THREAD, 0))
        rules.add(eperm, "fork")
        rules.add(eperm, "vfork")

    # sockets
    if rules.multiplexed("socketcall"):  # the family is in memory, out of a filter's reach
        rules.add(eperm, "socketcall")
    else:
        if allow_unix_sockets:
            rules.split(allow, eperm, "socket", 0, [socket.AF_UNIX])
            rules.split(allow, eperm, "socketpair", 0, [socket.AF_UNIX])
        else:  # no network namespace of the run's own, where the monitor would count their buffers
            rules.add(eperm, "socket")
            rules.add(eperm, "socketpair")
    # a socket's buffers stay at their defaults: SO_SNDBUF and friends refused at SOL_SOCKET
    sol = sc.Arg(1, sc.MASKED_EQ, INT32, socket.SOL_SOCKET)
    for mask, value in complement_blocks(INT32, [socket.SOL_SOCKET]):
        rules.add(allow, "setsockopt", *([sc.Arg(1, sc.MASKED_EQ, mask, value)] if mask else []))
    for opt in SOCKET_BUFFER_OPTIONS:
        rules.add(eperm, "setsockopt", sol, sc.Arg(2, sc.MASKED_EQ, INT32, opt))
    for mask, value in complement_blocks(INT32, SOCKET_BUFFER_OPTIONS):
        rules.add(allow, "setsockopt", sol, *([sc.Arg(2, sc.MASKED_EQ, mask, value)] if mask else []))
    # mmap without huge pages (s390's mmap passes its arguments in memory, out of a filter's reach)
    for name in ("mmap", "mmap2"):
        if arch in (sc.Arch.S390, sc.Arch.S390X):
            rules.add(allow, name)
        else:
            rules.add(eperm, name, sc.Arg(3, sc.MASKED_EQ, MAP_HUGETLB, MAP_HUGETLB))
            rules.add(allow, name, sc.Arg(3, sc.MASKED_EQ, MAP_HUGETLB, 0))

    # calls allowed but for a few argument values
    rules.split(eperm, allow, "prctl", 0, [PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM])
    rules.split(allow, eperm, "personality", 0, [PERSONALITY_QUERY])
    for name in ("fcntl", "fcntl64"):
        rules.split(eperm, allow, name, 1, (*LOCK_COMMANDS, F_SETPIPE_SZ))
    rules.split(eperm, allow, "ioctl", 1, [termios.TIOCSTI, getattr(termios, "TIOCLINUX", 0x541C)])
    rules.split(eperm, allow, "kill", 0, [-1 & INT32])
    rules.split(allow, eperm, "prlimit64", 0, [0])
    rules.split(eperm, allow, "mknod", 1, [0o020000, 0o060000], field=S_IFMT)  # S_IFCHR, S_IFBLK
    rules.split(eperm, allow, "mknodat", 2, [0o020000, 0o060000], field=S_IFMT)
    return f


class _Rules:
    """Adds rules by name, skipping the names this libseccomp or architecture does not know."""

    def __init__(self, sc: Any, f: Any, arch: int, default: int) -> None:
        self.sc, self.f, self.arch, self.default = sc, f, arch, default

    def number(self, name: str) -> int | None:
        nr = self.sc.resolve_syscall(self.arch, name)
        # -1: a name this libseccomp does not know; <= -10000: one this architecture lacks
        # (between the two: a call multiplexed through socketcall/ipc, which libseccomp expands)
        return None if nr == -1 or nr <= -10000 else int(nr)

    def multiplexed(self, name: str) -> bool:
        nr = self.number(name)
        return nr is not None and nr >= 0

    def add(self, action: int, name: str, *args: Any) -> None:
        if action != self.default and self.number(name) is not None:
            self.f.add_rule(action, name, *args)

    def split(
        self,
        on_points: int,
        elsewhere: int,
        name: str,
        arg: int,
        points: Iterable[int],
        *,
        field: int = INT32,
    ) -> None:
        """``on_points`` where the ``field`` bits of argument ``arg`` equal one of ``points``,
        ``elsewhere`` for every other value. libseccomp has no "not in", and ORs the rules of a
        system call: "elsewhere" is the disjoint set of aligned blocks that cover the rest."""
        points = sorted({p & field for p in points})
        for p in points:
            self.add(on_points, name, self.sc.Arg(arg, self.sc.MASKED_EQ, field, p))
        for mask, value in complement_blocks(field, points):
            if mask:
                self.add(elsewhere, name, self.sc.Arg(arg, self.sc.MASKED_EQ, mask, value))
            else:
                self.add(elsewhere, name)


def complement_blocks(field: int, points: Iterable[int]) -> list[tuple[int, int]]:
    """``(mask, value)`` pairs, each the set of ``x`` with ``x & mask == value``, that together cover
    exactly the values of the ``field`` bits that are not in ``points``, and do not overlap."""
    bits = [1 << b for b in reversed(range(field.bit_length())) if field >> b & 1]
    blocks: list[tuple[int, int]] = []

    def walk(depth: int, mask: int, value: int, inside: list[int]) -> None:
        if not inside:
            blocks.append((mask, value))
        elif depth < len(bits):
            bit = bits[depth]
            walk(depth + 1, mask | bit, value, [p for p in inside if not p & bit])
            walk(depth + 1, mask | bit, value | bit, [p for p in inside if p & bit])

    walk(0, 0, 0, sorted({p & field for p in points}))
    return blocks


# ---------------------------------------------------------------------------------------------
# Our own compiler of the run filter
#
# libseccomp compiles the rules above into ~1,500 instructions (a JEQ per system call, and each
# "every other value" as dozens of masked blocks: it has no "not in"). The kernel converts and
# JIT-compiles the program at every load, once per run (bpf_convert_filter, do_jit): ~0.7 ms of
# CPU for 1,500 instructions, a tenth of a trivial run. The same semantics fit in ~140: a binary
# search over ranges of system call numbers that share a decision, and short argument checks;
# a load then costs ~0.18 ms (~0.09 ms of which any filter costs), and compiling takes
# milliseconds where libseccomp takes a few hundred.
# build_filter stays as the reference: tests/test_seccomp_bpf.py runs both programs in a BPF
# interpreter and asserts they answer alike, here and on each architecture libseccomp knows.

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
ACTION_ALLOW = SECCOMP_RET_ALLOW
ACTION_EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ACTION_ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS  # the default: as if the kernel lacked the call
U32 = 0xFFFFFFFF
X32_SYSCALL_BIT = 0x40000000
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_LE = 0x40000000  # the byte-order bit of an AUDIT_ARCH value

# classic BPF opcodes, the few a seccomp filter needs (linux/bpf_common.h)
BPF_LD_W_ABS = 0x20
BPF_ALU_AND_K = 0x54
BPF_JA = 0x05
BPF_JEQ_K = 0x15
BPF_JGT_K = 0x25
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
BPF_MAXINSNS = 4096
JUMP_MAX = 255  # a conditional jump's offsets are one byte each
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARGS = 0, 4, 16  # offsets in struct seccomp_data


@dataclass(frozen=True)
class ArgTest:
    """``then`` where the ``mask`` bits of the low 32-bit word of argument ``arg`` equal one of
    ``values``, ``otherwise`` for every other value: one node of a system call's decision. Only the
    low word counts, as the kernel reads an ``int`` (libseccomp's rules compare the high word
    under a zero mask, which every value passes)."""

    arg: int
    values: frozenset[int]
    then: Decision
    otherwise: Decision
    mask: int = INT32

    def __post_init__(self) -> None:
        if not 0 <= self.arg < 6 or self.mask & ~INT32 or not self.mask:
            raise ValueError(f"bad argument test {self}")
        if any(v & ~self.mask for v in self.values) or not self.values:
            raise ValueError(f"values outside the mask never match: {self}")


# what the filter does with one system call: an action (a SECCOMP_RET_* value) or a test
Decision: TypeAlias = int | ArgTest


def arg_test(
    arg: int, values: Iterable[int], then: Decision, otherwise: Decision, *, mask: int = INT32
) -> ArgTest:
    """``ArgTest`` from any iterable of values, each taken on the mask (as ``_Rules.split``)."""
    return ArgTest(arg, frozenset(v & mask for v in values), then, otherwise, mask)


@dataclass(frozen=True)
class Target:
    """An architecture as the filter sees it: the ``seccomp_data.arch`` value it accepts, its byte
    order (where an argument's low word lies), and the system call numbers of another ABI that
    shares that value (x32 on x86_64, and the reverse), which kill the process."""

    token: int  # libseccomp's name for it (a pyseccomp.Arch value)
    audit_arch: int
    big_endian: bool
    foreign_numbers: tuple[tuple[int, int], ...]  # inclusive ranges

    @classmethod
    def of(cls, sc: Any, arch: int) -> Target:
        if arch == sc.Arch.X86_64:  # x32 calls carry bit 30; -1 (no call) goes on to the table
            return cls(arch, AUDIT_ARCH_X86_64, False, ((X32_SYSCALL_BIT, U32 - 1),))
        if arch == sc.Arch.X32:  # libseccomp's token for x32; the kernel says x86_64
            return cls(arch, AUDIT_ARCH_X86_64, False, ((0, X32_SYSCALL_BIT - 1),))
        return cls(arch, arch, not arch & AUDIT_ARCH_LE, ())

    def arg_offset(self, arg: int) -> int:
        """The offset of argument ``arg``'s low 32-bit word in ``struct seccomp_data`` (each
        argument is a native-endian u64)."""
        return SECCOMP_DATA_ARGS + 8 * arg + (4 if self.big_endian else 0)


def build_bpf(*, allow_fork: bool, allow_unix_sockets: bool, arch: int | None = None, allow_exec: bool = False) -> bytes:
    """The run filter as a classic-BPF program (an array of ``struct sock_filter`` in the
    architecture's byte order), compiled by ``assemble`` from ``syscall_table``."""
    import pyseccomp as sc

    target = Target.of(sc, sc.system_arch() if arch is None else arch)
    table = syscall_table(
        allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets, arch=target.token, allow_exec=allow_exec
    )
    return assemble(table, target, default=ACTION_ENOSYS, badarch=_badarch_action())


def reference_bpf(*, allow_fork: bool, allow_unix_sockets: bool, arch: int | None = None, allow_exec: bool = False) -> bytes:
    """The same filter compiled by libseccomp (``build_filter``): the reference the tests hold
    ``build_bpf`` to. libseccomp writes it in the architecture's byte order, but for the return
    values, which stay in the host's."""
    return _export(
        build_filter(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets, arch=arch, allow_exec=allow_exec)
    )


@cache
def _badarch_action() -> int:
    """``SECCOMP_RET_KILL_PROCESS``, or where the kernel lacks it (< 4.14) ``SECCOMP_RET_KILL``
    (the thread): what ``build_filter`` asks libseccomp for, asked the same way."""
    import pyseccomp as sc

    try:
        sc.SyscallFilter(defaction=sc.ALLOW).set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    except OSError:
        return int(sc.KILL)
    return int(sc.KILL_PROCESS)


def syscall_table(*, allow_fork: bool, allow_unix_sockets: bool, arch: int, allow_exec: bool = False) -> dict[int, Decision]:
    """System call number (as the u32 ``seccomp_data.nr``) -> decision: ``build_filter``'s rules,
    written as decisions. A number absent answers the default (``ENOSYS``)."""
    import pyseccomp as sc

    names = _Numbers(sc, arch)
    table: dict[int, Decision] = {}

    def put(name: str, decision: Decision) -> None:
        for nr in names.of(name):
            if table.setdefault(nr, decision) != decision:
                raise ValueError(f"two rules for system call {nr} ({name}): {table[nr]} {decision}")

    for name in DENIED_SYSCALLS:
        put(name, ACTION_ALLOW if allow_exec and name in EXEC_SYSCALLS else ACTION_EPERM)
    for name in ALLOWED_SYSCALLS:
        put(name, ACTION_ALLOW)
    # clone3 is in neither list: ENOSYS, so that glibc falls back to clone

    s390 = arch in (sc.Arch.S390, sc.Arch.S390X)
    flags = 1 if s390 else 0  # s390: clone(stack, flags, ...)
    if allow_fork:  # threads and processes, without a namespace flag nor CLONE_PARENT
        put("clone", arg_test(flags, [0], ACTION_ALLOW, ACTION_EPERM, mask=CLONE_FORBIDDEN))
        put("fork", ACTION_ALLOW)
        put("vfork", ACTION_ALLOW)
    else:  # threads only
        mask = CLONE_FORBIDDEN | CLONE_THREAD
        put("clone", arg_test(flags, [CLONE_THREAD], ACTION_ALLOW, ACTION_EPERM, mask=mask))
        put("fork", ACTION_EPERM)
        put("vfork", ACTION_EPERM)

    if names.multiplexed("socketcall"):  # the family is in memory, out of a filter's reach
        put("socketcall", ACTION_EPERM)
    else:
        for name in ("socket", "socketpair"):
            if allow_unix_sockets:
                put(name, arg_test(0, [socket.AF_UNIX], ACTION_ALLOW, ACTION_EPERM))
            else:
                put(name, ACTION_EPERM)
    buffers = arg_test(2, SOCKET_BUFFER_OPTIONS, ACTION_EPERM, ACTION_ALLOW)
    put("setsockopt", arg_test(1, [socket.SOL_SOCKET], buffers, ACTION_ALLOW))
    for name in ("mmap", "mmap2"):  # s390's mmap passes its arguments in memory
        huge_pages = arg_test(3, [0], ACTION_ALLOW, ACTION_EPERM, mask=MAP_HUGETLB)
        put(name, ACTION_ALLOW if s390 else huge_pages)

    refused = [PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM]
    put("prctl", arg_test(0, refused, ACTION_EPERM, ACTION_ALLOW))
    put("personality", arg_test(0, [PERSONALITY_QUERY], ACTION_ALLOW, ACTION_EPERM))
    for name in ("fcntl", "fcntl64"):
        put(name, arg_test(1, (*LOCK_COMMANDS, F_SETPIPE_SZ), ACTION_EPERM, ACTION_ALLOW))
    tioclinux = getattr(termios, "TIOCLINUX", 0x541C)
    put("ioctl", arg_test(1, [termios.TIOCSTI, tioclinux], ACTION_EPERM, ACTION_ALLOW))
    put("kill", arg_test(0, [-1 & INT32], ACTION_EPERM, ACTION_ALLOW))
    put("prlimit64", arg_test(0, [0], ACTION_ALLOW, ACTION_EPERM))
    devices = (0o020000, 0o060000)  # S_IFCHR, S_IFBLK
    put("mknod", arg_test(1, devices, ACTION_EPERM, ACTION_ALLOW, mask=S_IFMT))
    put("mknodat", arg_test(2, devices, ACTION_EPERM, ACTION_ALLOW, mask=S_IFMT))
    return table


class _Numbers:
    """The numbers a system call name stands for on an architecture, as libseccomp filters them.
    libseccomp names a socket or System V IPC call by a negative pseudo number (``connect`` is
    -103) where ``socketcall``/``ipc`` multiplex it (i386, s390, ppc, mips o32), and also where
    the architecture lacks it (``send`` on x86_64), and filters it at its direct number where the
    architecture also has one (``connect`` is 362 on i386), else not at all (the multiplexer's
    own rule decides). The direct numbers come from libseccomp's own table (number -> name)."""

    def __init__(self, sc: Any, arch: int) -> None:
        self.sc, self.arch = sc, arch
        self._direct: dict[str, int] | None = None

    def resolve(self, name: str) -> int | None:
        nr = self.sc.resolve_syscall(self.arch, name)
        # -1: a name this libseccomp does not know; <= -10000: one this architecture lacks
        return None if nr == -1 or nr <= -10000 else int(nr)

    def multiplexed(self, name: str) -> bool:
        nr = self.resolve(name)
        return nr is not None and nr >= 0

    def of(self, name: str) -> list[int]:
        nr = self.resolve(name)
        if nr is None:
            return []
        if nr >= 0:
            return [nr]
        direct = self.direct().get(name)
        return [] if direct is None else [direct]

    def direct(self) -> dict[str, int]:
        if self._direct is None:
            self._direct = {}
            if self.multiplexed("socketcall") or self.multiplexed("ipc"):
                known = [
                    n
                    for name in (*DENIED_SYSCALLS, *ALLOWED_SYSCALLS)
                    if (n := self.resolve(name)) is not None and n >= 0
                ]
                for nr in range(min(known), max(known) + 64):
                    try:
                        name = self.sc.resolve_syscall(self.arch, nr).decode()
                    except ValueError:  # a number this architecture does not use
                        continue
                    self._direct.setdefault(name, nr)
        return self._direct


# -- the assembler


class _Label:
    """A place in the program, bound to an instruction once it is emitted."""

    __slots__ = ("insn",)

    def __init__(self) -> None:
        self.insn: _Insn | None = None


class _Insn:
    """One instruction; jumps name their targets by label until ``_Program.link`` places them (a
    conditional jump in ``jt`` and ``jf``, a JA in ``jt``)."""

    __slots__ = ("code", "jf", "jt", "k")

    def __init__(
        self, code: int, k: int = 0, jt: _Label | None = None, jf: _Label | None = None
    ) -> None:
        self.code, self.k, self.jt, self.jf = code, k, jt, jf


class _Program:
    def __init__(self) -> None:
        self.insns: list[_Insn] = []

    def emit(
        self,
        code: int,
        k: int = 0,
        jt: _Label | None = None,
        jf: _Label | None = None,
        at: _Label | None = None,
    ) -> _Insn:
        insn = _Insn(code, k, jt, jf)
        if at is not None:
            at.insn = insn
        self.insns.append(insn)
        return insn

    def link(self, big_endian: bool) -> bytes:
        """Resolve the labels into offsets and encode. A conditional jump reaches at most 255
        instructions ahead: one whose target is farther goes through a trampoline placed right
        after it (a copy of the target if that is a return, else a JA, whose offset is 32 bits),
        shared with the jumps before it that can reach it; repeat until every jump reaches."""
        trampolines: dict[int, list[_Insn]] = {}  # id(target insn) -> its trampolines
        while True:
            pos = {id(insn): i for i, insn in enumerate(self.insns)}
            far = self._far_jump(pos)
            if far is None:
                break
            i, branch = far
            insn = self.insns[i]
            label: _Label = getattr(insn, branch)
            target = label.insn
            assert target is not None
            reach = i + 1 + JUMP_MAX
            near = [t for t in trampolines.get(id(target), []) if i < pos[id(t)] <= reach]
            if near:
                hop = near[-1]
            else:
                hop = (
                    _Insn(BPF_RET_K, target.k)
                    if target.code == BPF_RET_K
                    else _Insn(BPF_JA, 0, _Label(), None)
                )
                if hop.code == BPF_JA:
                    assert hop.jt is not None
                    hop.jt.insn = target
                trampolines.setdefault(id(target), []).append(hop)
                self.insns.insert(i + 1, hop)
            via = _Label()
            via.insn = hop
            setattr(insn, branch, via)
        if len(self.insns) > BPF_MAXINSNS:
            raise ValueError(f"the filter has {len(self.insns)} instructions, over {BPF_MAXINSNS}")
        if self.insns[-1].code != BPF_RET_K:
            raise ValueError("the filter must end with a return")
        pos = {id(insn): i for i, insn in enumerate(self.insns)}
        fmt = ">HBBI" if big_endian else "<HBBI"
        out = bytearray()
        for i, insn in enumerate(self.insns):
            jt = jf = 0
            k = insn.k
            if insn.code == BPF_JA:
                assert insn.jt is not None and insn.jt.insn is not None
                k = pos[id(insn.jt.insn)] - i - 1
            elif insn.jt is not None:
                assert insn.jf is not None and insn.jt.insn is not None and insn.jf.insn is not None
                jt, jf = pos[id(insn.jt.insn)] - i - 1, pos[id(insn.jf.insn)] - i - 1
            if min(jt, jf, k if insn.code == BPF_JA else 0) < 0 or max(jt, jf) > JUMP_MAX:
                raise AssertionError(f"a jump backward or too far at {i}")  # a bug of ours
            out += struct.pack(fmt, insn.code, jt, jf, k)
        return bytes(out)

    def _far_jump(self, pos: dict[int, int]) -> tuple[int, str] | None:
        for i, insn in enumerate(self.insns):
            if insn.code == BPF_JA or insn.jt is None:
                continue
            for branch in ("jt", "jf"):
                label = getattr(insn, branch)
                if pos[id(label.insn)] - i - 1 > JUMP_MAX:
                    return i, branch
        return None


def assemble(table: dict[int, Decision], target: Target, *, default: int, badarch: int) -> bytes:
    """Compile ``table`` (number -> decision; other numbers: ``default``) for ``target``:

    * the architecture check (another one: ``badarch``), then the number is loaded once;
    * a balanced binary search (JGE) over groups of numbers (``_groups``): each group is one
      decision but for at most a few single numbers, each a JEQ at the group's leaf of the search
      (the other ABI's numbers, ``badarch``, and the gaps, ``default``, are groups too);
    * after it, each distinct argument test once (``fcntl`` and ``fcntl64`` share theirs), see
      ``_emit_test``;
    * last, one return per action.
    """
    groups = _groups(_ranges(table, target, default=default, badarch=badarch))
    prog = _Program()
    returns: dict[int, _Label] = {}
    tests: dict[ArgTest, _Label] = {}
    pending: list[ArgTest] = []

    def label_of(decision: Decision) -> _Label:
        if isinstance(decision, ArgTest):
            if decision not in tests:
                tests[decision] = _Label()
                pending.append(decision)
            return tests[decision]
        return returns.setdefault(decision, _Label())

    dispatch = _Label()
    prog.emit(BPF_LD_W_ABS, SECCOMP_DATA_ARCH)
    prog.emit(BPF_JEQ_K, target.audit_arch, dispatch, label_of(badarch))
    prog.emit(BPF_LD_W_ABS, SECCOMP_DATA_NR, at=dispatch)

    def search(part: list[_Group]) -> _Label:
        """Emit the search of ``part`` in preorder (a node, its lower half, its upper half), so
        that each node's lower half starts right after it."""
        if len(part) == 1:
            _, decision, exceptions = part[0]
            if not exceptions:
                return label_of(decision)
            here = following = _Label()
            for n, (nr, other) in enumerate(exceptions):
                last = n == len(exceptions) - 1
                at, following = following, (label_of(decision) if last else _Label())
                prog.emit(BPF_JEQ_K, nr, label_of(other), following, at=at)
            return here
        here = _Label()
        mid = len(part) // 2
        node = prog.emit(BPF_JGE_K, part[mid][0], at=here)
        node.jf = search(part[:mid])
        node.jt = search(part[mid:])
        return here

    entry = search(groups)
    if entry.insn is None:  # one range for every number: no comparison at all
        prog.emit(BPF_JA, 0, entry)
    while pending:
        _emit_test(prog, pending.pop(0), target, label_of, tests)
    for action, label in returns.items():
        prog.emit(BPF_RET_K, action, at=label)
    return prog.link(target.big_endian)


def _ranges(
    table: dict[int, Decision], target: Target, *, default: int, badarch: int
) -> list[tuple[int, Decision]]:
    """The u32 number line as maximal ranges of one decision: (first number, decision) in order,
    each range up to the next one's first number."""

    def decision_at(nr: int) -> Decision:
        if any(lo <= nr <= hi for lo, hi in target.foreign_numbers):
            return badarch  # checked before the table, as libseccomp does
        return table.get(nr, default)

    cuts = {0, *table, *(nr + 1 for nr in table)}
    for lo, hi in target.foreign_numbers:
        cuts |= {lo, hi + 1}
    ranges: list[tuple[int, Decision]] = []
    for nr in sorted(c for c in cuts if c <= U32):
        decision = decision_at(nr)
        if not ranges or ranges[-1][1] != decision:
            ranges.append((nr, decision))
    return ranges


# (first number, decision, the single numbers inside that answer otherwise: [(nr, decision)])
_Group: TypeAlias = tuple[int, Decision, list[tuple[int, Decision]]]
MAX_EXCEPTIONS = 4  # JEQs at one leaf: what a call may run through after the search


def _groups(ranges: list[tuple[int, Decision]]) -> list[_Group]:
    """Merge consecutive ranges into as few instructions as possible: a search over ``g`` groups
    costs ``g - 1`` comparisons, and a group is one decision but for up to ``MAX_EXCEPTIONS``
    single numbers, a JEQ each (an allowed call alone between two gaps would cost two
    comparisons, it costs one JEQ). Dynamic programming over where each group starts."""
    n = len(ranges)
    ends = [r[0] for r in ranges[1:]] + [U32 + 1]
    single = [ends[i] - ranges[i][0] == 1 for i in range(n)]
    best: list[float] = [0.0] + [float("inf")] * n  # best[j]: the cost of ranges[:j]
    start: list[tuple[int, Decision]] = [(0, 0)] * (n + 1)  # the last group's start, decision
    for i in range(n):
        forced: Decision | None = None  # the decision of the group's wider ranges: the group's
        counts: dict[Decision, int] = {}
        for j in range(i, n):
            decision = ranges[j][1]
            if not single[j]:
                if forced is not None and forced != decision:
                    break  # two wide ranges of two decisions: not one group
                forced = decision
            counts[decision] = counts.get(decision, 0) + 1
            main = forced if forced is not None else max(counts, key=lambda d: counts[d])
            exceptions = j - i + 1 - counts[main]
            if exceptions > MAX_EXCEPTIONS:
                break  # they only grow from here
            if best[i] + 1 + exceptions < best[j + 1]:
                best[j + 1] = best[i] + 1 + exceptions
                start[j + 1] = (i, main)
    groups: list[_Group] = []
    j = n
    while j:
        i, main = start[j]
        groups.append((ranges[i][0], main, [(nr, d) for nr, d in ranges[i:j] if d != main]))
        j = i
    return groups[::-1]


def _emit_test(
    prog: _Program,
    test: ArgTest,
    target: Target,
    label_of: Callable[[Decision], _Label],
    tests: dict[ArgTest, _Label],
) -> None:
    """Load the argument's low word; a test of mask bits against zero (or of one bit set) is a
    JSET; otherwise AND with the mask (if any), then, for the values in increasing order, a JEQ
    for a single value and a JGT/JGE pair for a run of consecutive ones (a word below a run is in
    none of the later runs either)."""
    then, otherwise = label_of(test.then), label_of(test.otherwise)
    prog.emit(BPF_LD_W_ABS, target.arg_offset(test.arg), at=tests[test])
    if test.mask != INT32:
        if test.values == {0}:  # no bit of the mask set
            prog.emit(BPF_JSET_K, test.mask, otherwise, then)
            return
        if test.values == {test.mask} and test.mask & (test.mask - 1) == 0:  # its one bit set
            prog.emit(BPF_JSET_K, test.mask, then, otherwise)
            return
        prog.emit(BPF_ALU_AND_K, test.mask)
    runs: list[list[int]] = []
    for v in sorted(test.values):
        if runs and runs[-1][1] + 1 == v:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    here: _Label | None = None  # the label of the next run's first instruction
    for n, (lo, hi) in enumerate(runs):
        following = otherwise if n == len(runs) - 1 else _Label()
        if lo == hi:
            prog.emit(BPF_JEQ_K, lo, then, following, at=here)
        elif hi == test.mask:  # the run goes up to the largest word: one comparison
            prog.emit(BPF_JGE_K, lo, then, following, at=here)
        elif lo == 0:
            prog.emit(BPF_JGT_K, hi, following, then, at=here)
        else:
            inside = _Label()
            prog.emit(BPF_JGT_K, hi, following, inside, at=here)
            prog.emit(BPF_JGE_K, lo, then, otherwise, at=inside)
        here = following

# The type byte of the seccomp listener's ioctls (``SECCOMP_IOCTL_NOTIF_*``: RECV, SEND, ID_VALID,
# ADDFD, SET_FLAGS): the kernel's ioctl registry gives it to seccomp alone
SECCOMP_IOCTL_TYPE = 0x21
LISTENER_VARIANT = "sysinfo-listener"


@cache
def compiled_listener() -> bytes:
    """``build_listener_bpf``, once per process."""
    return build_listener_bpf()


def build_listener_bpf() -> bytes:
    return _export(build_listener_filter())


def build_listener_filter(arch: int | None = None) -> Any:
    """The sysinfo layer (see the module docstring): ``sysinfo`` answers ``SECCOMP_RET_USER_NOTIF``
    (the watcher fills in the run's view), the listener's ioctls ``EPERM``, everything else is left
    to the filter above it."""
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    if arch is not None and arch != sc.system_arch():
        f.remove_arch(sc.Arch.NATIVE)
        f.add_arch(arch)
    try:
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    except OSError:
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL)
    f.add_rule(sc.NOTIFY, "sysinfo")
    f.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFF00, SECCOMP_IOCTL_TYPE << 8))
    return f


def _export(f: Any) -> bytes:
    with os.fdopen(os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC), "w+b") as fh:
        f.export_bpf(fh)
        fh.seek(0)
        bpf = fh.read()
    if not bpf or len(bpf) % 8:
        raise RuntimeError(f"libseccomp exported a malformed BPF program ({len(bpf)} bytes)")
    return bpf


def listener_file(directory: str) -> str:
    """Write the compiled sysinfo layer into ``directory`` (for nsjail's init)."""
    return _write_filter(directory, LISTENER_VARIANT, compiled_listener)


def filter_file(directory: str, *, allow_fork: bool, allow_unix_sockets: bool, allow_exec: bool = False) -> str:
    """Write the compiled filter into ``directory`` (for a child that is started by ``exec``)."""
    return _write_filter(directory, variant(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets, allow_exec=allow_exec),
                         lambda: compiled(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets, allow_exec=allow_exec))


def _write_filter(directory: str, name: str, data_of: Any) -> str:
    path = os.path.join(directory, f"seccomp-{name}.bpf")
    if not os.path.exists(path):
        data = data_of()
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path
