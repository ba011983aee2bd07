"""The seccomp filter of a sandboxed run, compiled with libseccomp (through ``pyseccomp``) once per
worker into a classic-BPF program; the child only hands the bytes to the kernel (``_child``).

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
import termios
from collections.abc import Iterable
from functools import cache
from typing import Any

# Always EPERM, whatever the limits. Names an architecture lacks are skipped.
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
    return _export(build_filter(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets))


def build_filter(*, allow_fork: bool, allow_unix_sockets: bool, arch: int | None = None) -> Any:
    """The libseccomp filter (a ``pyseccomp.SyscallFilter``) for the native architecture, or for
    ``arch`` (a ``pyseccomp.Arch`` value; to check that the lists compile there)."""
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
        rules.add(eperm, name)
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


def filter_file(directory: str, *, allow_fork: bool, allow_unix_sockets: bool) -> str:
    """Write the compiled filter into ``directory`` (for a child that is started by ``exec``)."""
    return _write_filter(directory, variant(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets),
                         lambda: compiled(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets))


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
