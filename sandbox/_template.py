"""The process backend's template and run children (see ``_zygote`` for the whole design).

The **template** is forked by the worker before its first request and only ever forks run
children on the worker's command; it never holds code, stdin, output or a result. A **run child**
is set up for its limits ahead of time (its own mount and IPC namespaces, a fresh tmpfs work dir
and ``/dev/shm``, the cgroup the previous run did not use, rlimits), stays root until its program
arrives, then switches to the slot's uid, loads the seccomp filter and runs the program. A run
that may fork, or shares its uid with the worker, gets a PID namespace whose **init** reaps
everything and reports the program's exit status. Standard library only, imported as a plain
module by the worker.
"""

from __future__ import annotations

import _signal
import _socket
import ctypes
import marshal
import os
import resource
import struct
import sys

import _child
import _linux
import _paths

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from typing import Any

WORK_PARENT = "/sandbox"
WORKDIR = "/sandbox/run"
SHMDIR = "/sandbox/shm"
SETUP_FAILED = 125
PR_SET_DUMPABLE = 4
_libc = ctypes.CDLL(None, use_errno=True)


class Cgroup:
    """One memory cgroup (v1 or v2), reached through file descriptors opened before the worker
    leaves the host's filesystem."""

    def __init__(self, path: str, version: int) -> None:
        self.version = version

        def op(name: str, flags: int = os.O_RDWR) -> int | None:
            try:
                return os.open(os.path.join(path, name), flags | os.O_CLOEXEC)
            except OSError:
                return None

        self.procs = op("cgroup.procs", os.O_WRONLY)
        if version == 1:
            self.limit = op("memory.limit_in_bytes")
            self.memsw = op("memory.memsw.limit_in_bytes")
            self.peak = op("memory.max_usage_in_bytes")
            self.events = op("memory.oom_control", os.O_RDONLY)
        else:
            self.limit = op("memory.max")
            self.memsw = op("memory.swap.max")
            self.peak = op("memory.peak")
            self.events = op("memory.events", os.O_RDONLY)
        if self.procs is None or self.limit is None:
            raise OSError(f"cgroup {path} lacks cgroup.procs or a memory limit file")
        self._current: int | None = None

    def set_limit(self, limit: int) -> None:
        if limit == self._current:
            return
        assert self.limit is not None
        if self.version == 1:
            # memory.memsw.limit_in_bytes must stay >= memory.limit_in_bytes: order the writes
            try:
                _pwrite(self.limit, str(limit))
                if self.memsw is not None:
                    _pwrite(self.memsw, str(limit))
            except OSError:
                if self.memsw is None:
                    raise
                _pwrite(self.memsw, str(limit))
                _pwrite(self.limit, str(limit))
        else:
            _pwrite(self.limit, str(limit))
            if self.memsw is not None:
                _pwrite(self.memsw, "0")
        self._current = limit

    def reset_peak(self) -> None:
        if self.peak is not None:
            try:
                _pwrite(self.peak, "0" if self.version == 1 else "reset")
            except OSError:
                pass

    def _read_int(self, fd: int | None) -> int | None:
        if fd is None:
            return None
        try:
            return int(os.pread(fd, 64, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def peak_bytes(self) -> int | None:
        return self._read_int(self.peak)

    def oom_kills(self) -> int:
        if self.events is None:
            return 0
        try:
            text = os.pread(self.events, 4096, 0).decode()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, val = line.partition(" ")
            if key == "oom_kill":
                return int(val)
        return 0


def _pwrite(fd: int, text: str) -> None:
    os.pwrite(fd, text.encode(), 0)


# ----------------------------------------------------------------------------- the template


class Template:
    """Forks run children on the monitor's command, and nothing else.

    Commands arrive on a SOCK_SEQPACKET socket: ``F`` + JSON (the limits to set up, the cgroup)
    with the child's five pipe ends attached (SCM_RIGHTS) answers ``P`` + the child's pid; ``W`` +
    pid reaps that child and answers its wait status and resource usage, from buffers that are
    zeroed right after, so no later child finds them."""

    def __init__(self, cfg: dict[str, Any], sock: _socket.socket, cgroups: list[Cgroup | None],
                 filters: dict[tuple[bool, bool], _child.SeccompProgram], own_pidns: int | None) -> None:  # fmt: skip
        self.sock = sock
        self.uid: int = cfg["uid"]
        self.gid: int = cfg["gid"]
        self.uid_switch: bool = cfg["uid_switch"]
        self.cgroups = cgroups
        self.filters = filters
        self.own_pidns = own_pidns
        self.weak: bool = cfg.get("isolation") == "weak"
        self.weak_parent: str = cfg["root_dir"]
        self.proc_options: str = cfg["proc_options"]  # a forking run's own /proc (_private_setup)
        self.status = ctypes.c_int(0)
        self.rusage = ctypes.create_string_buffer(256)
        for name in ("code-env-run", "code-env-init"):  # made here, not in every child
            _child.name_buffer(name)
        # What every child needs and the template can work out once (a child pays for its Python
        # work twice: in CPU and in copy-on-write faults of what it touches)
        self.max_fd = _max_fd()
        self.nproc = "private" if self.uid_switch else "none" if self.weak else "namespace"
        self._rlimits: dict[tuple[Any, ...], list[tuple[int, tuple[int, int]]]] = {}
        self.specs: dict[bytes, dict[str, Any]] = {}  # F commands seen, parsed (read-only after)
        # the jail's /tmp: a link to the work dir, or (a venv under /tmp) a directory of the host's
        self.tmp_is_host_dir = not os.path.islink("/tmp") and os.path.isdir("/tmp")
        # sleepers (init_kind): the machine has them, and the stack of each one alive
        self.sleeper: bool = cfg.get("sleeper", False)
        self.stacks: dict[int, ctypes.Array[ctypes.c_char]] = {}
        if self.sleeper:
            # a sleeper gets a copy of our signal dispositions: no handler may be among them (Python
            # installs one for SIGINT; the run's child puts it back for the program, _run_child)
            _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        if not self.uid_switch and not self.weak:
            # uid 0 of a user namespace: the capability bounding set (what an exec could gain) is
            # emptied here, once, for every child (a child empties the rest of its sets itself);
            # the template keeps the capabilities it holds, and never execs
            _linux.drop_bounding_set()

    def bury(self, sleeper: int) -> None:
        """Kill and reap a run's sleeper (``init_kind``), and free its stack."""
        try:
            os.kill(sleeper, _signal.SIGKILL)
            os.waitpid(sleeper, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.stacks.pop(sleeper, None)

    def rlimits(self, spec: dict[str, Any]) -> list[tuple[int, tuple[int, int]]]:
        key = (spec["cpu_time_s"], spec["timeout_s"], spec["max_open_files"], spec["max_processes"], spec["max_threads"])
        pairs = self._rlimits.get(key)
        if pairs is None:
            pairs = self._rlimits[key] = rlimit_pairs(spec, nproc=self.nproc)
        return pairs

    def offer_listener(self, bpf: bytes | None) -> None:
        """Load the sysinfo layer (``_seccomp``) into this process, whose every run child inherits
        it, and hand its listener to the monitor (``L`` with the fd attached; ``N`` + why not, and
        the runs' ``sysinfo`` stays the host's). The template keeps no copy."""
        if bpf is None:
            self.sock.send(b"Nno sysinfo layer")
            return
        try:
            listener = _child.install_listener(bpf)
        except OSError as exc:
            self.sock.send(b"N" + str(exc).encode())
            return
        try:
            self.sock.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("i", listener))])
        finally:
            os.close(listener)

    def serve(self) -> None:
        fd_size = struct.calcsize("i")
        while True:
            try:
                msg, anc, _flags, _addr = self.sock.recvmsg(4096, _socket.CMSG_SPACE(8 * fd_size))
            except InterruptedError:
                continue
            if not msg:
                os._exit(0)  # the monitor is gone
            op = msg[:1]
            if op == b"F":
                fds: list[int] = []
                for level, kind, data in anc:
                    if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                        n = len(data) // fd_size
                        fds += struct.unpack(f"{n}i", data[: n * fd_size])
                spec = self.specs.get(msg)
                if spec is None:  # (a batch's runs share a few: parsed once each, never in a child)
                    spec = marshal.loads(msg[1:])  # (from the monitor, never from a run)
                    size = f"size={spec['max_disk_mb']}m,nr_inodes={_paths.RUN_TMPFS_INODES}"
                    spec["tmpfs"], spec["tmpfs_tmp"] = size + ",mode=0755", size + ",mode=1777"
                    if len(self.specs) < 64:
                        self.specs[msg] = spec
                try:
                    pid, sleeper = self.fork_child(spec, fds)
                    self.sock.send(b"P%d %d" % (pid, sleeper))
                except OSError as exc:
                    self.sock.send(b"E" + f"{type(exc).__name__}: {exc}".encode())
                finally:
                    for fd in fds:
                        os.close(fd)
            elif op == b"W":  # W<pid>[ <sleeper>]: reap pid (then kill and reap its run's sleeper)
                first, _, second = msg[1:].partition(b" ")
                pid = int(first)
                ret = _libc.wait4(pid, ctypes.byref(self.status), 0, self.rusage)
                if ret != pid:
                    self.sock.send(b"E" + f"wait4({pid}): {os.strerror(ctypes.get_errno())}".encode())
                else:
                    self.stacks.pop(pid, None)  # a sleeper's stack, free once it is gone
                    self.sock.sendmsg([b"S", memoryview(self.status).cast("B"), memoryview(self.rusage)[:144]])
                ctypes.memset(ctypes.byref(self.status), 0, ctypes.sizeof(self.status))
                ctypes.memset(self.rusage, 0, ctypes.sizeof(self.rusage))
                if second:  # the run is over: its PID namespace goes (after the answer: off the monitor's path)
                    self.bury(int(second))
            elif op == b"X":
                os._exit(0)

    def fork_child(self, spec: dict[str, Any], fds: list[int]) -> tuple[int, int]:
        """Fork the run's child (and its sleeper, ``init_kind``): their pids (the sleeper's, -1)."""
        kind = init_kind(spec, uid_switch=self.uid_switch, weak=self.weak, sleeper=self.sleeper)
        own_ns = kind != "none"
        if own_ns:
            # the next child made is the PID 1 of a PID namespace of its own: the run's child (which
            # forks the program, becoming its init) or a sleeper (and the run's child is its PID 2)
            _linux.unshare(_linux.CLONE_NEWPID)
        rlimits = self.rlimits(spec)  # (here: the child would make them again each time)
        pid = sleeper = -1
        try:
            if kind == "sleeper":
                stack = ctypes.create_string_buffer(SLEEPER_STACK_BYTES)
                sleeper = _linux.clone_sleeper(stack)
                self.stacks[sleeper] = stack  # until it is reaped
            pid = os.fork()
        finally:
            if own_ns and pid != 0 and self.own_pidns is not None:
                _linux.setns(self.own_pidns, _linux.CLONE_NEWPID)
        if pid == 0:
            self.sock.close()
            _run_child(self, spec, fds, rlimits)  # never returns
        return pid, sleeper


def _run_child(t: Template, spec: dict[str, Any], fds: list[int], rlimits: list[tuple[int, tuple[int, int]]]) -> None:
    """The forked child: set up completely for ``spec``, then wait for the program."""
    stdin_r, out_w, err_w, st_w, go_r = fds
    status_fd = st_w
    forking = spec["max_processes"] > 1
    kind = init_kind(spec, uid_switch=t.uid_switch, weak=t.weak, sleeper=t.sleeper)
    wrapped = kind == "init"
    workdir = weak_workdir(t.weak_parent, os.getpid()) if t.weak else WORKDIR
    try:
        _child.set_process_name("code-env-run")
        os.setsid()
        cg = t.cgroups[spec["cgroup"]] if spec.get("cgroup") is not None else None
        if cg is not None and cg.procs is not None:
            os.write(cg.procs, b"0")  # "0": the writer itself, in any pid namespace
        if t.weak:
            _weak_setup(t, workdir)
        else:
            _private_setup(t, spec, own_pid_ns=kind != "none")
        for i, fd in enumerate((stdin_r, out_w, err_w, st_w, go_r)):
            if fd != i:
                os.dup2(fd, i)
        status_fd = 3
        os.closerange(5, t.max_fd)
        if wrapped:
            # forked before the run's rlimits: as a normal user RLIMIT_NPROC counts the processes of
            # our uid in the worker's user namespace, the run in progress (which we are forked
            # beside) among them: a fork bomb there would make this fork fail, a setup failure
            pid = os.fork()
            if pid != 0:
                _init(pid, private=t.uid_switch, collect=spec.get("collect"), workdir=workdir)  # never returns
        _apply_rlimits(rlimits)
    except BaseException as exc:
        _fail(status_fd, f"child setup failed: {type(exc).__name__}: {exc}")
    try:
        # wait for the program (the monitor may keep us waiting for a long time): its seed and
        # length, then its source as UTF-8 (binary: json would cost a fresh child tens of page faults)
        seed, n, m = PROGRAM_HEADER.unpack(_read_exact(4, PROGRAM_HEADER.size))
        source = _read_exact(4, n)
        command = _read_exact(4, m).split(b"\0") if m else None
        os.close(4)
        if command is not None and b"" in command:  # the jail's directories this run must not see
            cut = command.index(b"")
            command, hidden = command[:cut], command[cut + 1 :]
            for d in hidden if not t.weak else ():  # (weak mode has no mount namespace: no jail to trim)
                _linux.mount("tmpfs", d.decode(), "tmpfs", HIDE_FLAGS, "size=4k,nr_inodes=2,mode=0555")
        owner = (t.uid, t.gid) if t.uid_switch else None
        if command and command[0] == FILES:  # a compiled program: its files (``_child.pack_files``), the input files after them
            _child.write_files(source, workdir, owner)
        else:
            source, extra = _child.split_source(source)
            _child.write_source(source, workdir, command[0].decode() if command else _child.SOLUTION_FILENAME)
            if extra:  # the run's input files (``Sandbox.run(files=...)``), the run's to change
                _child.write_files(extra, workdir, owner)
                # (a finder of the work dir made before they were there would not see them: a
                # directory's mtime may not move within a tick)
                sys.path_importer_cache.pop(workdir, None)
            del extra
        collect = spec.get("collect")
        if collect and not collect[0].startswith(_child.FETCH_MARK):  # a compile: the directory its artefacts go to (``_init`` sends them)
            out = workdir + "/" + spec["collect"][0]
            os.mkdir(out, 0o755)
            if t.uid_switch:
                os.chown(out, t.uid, t.gid)
        code = "" if command else source.decode("utf-8", "surrogatepass")
        del source
        _child.limit_program(spec["max_file_bytes"], fixed=False)  # after our own write of the source
        if t.uid_switch:
            for fd in (0, 1, 2):  # our pipes: /dev/stdin, /proc/self/fd/1 ... must open for the run
                os.fchown(fd, t.uid, t.gid)
            os.setgroups([])
            os.setresgid(t.gid, t.gid, t.gid)
            os.setresuid(t.uid, t.uid, t.uid)
        if not t.uid_switch and not t.weak:  # uid 0 of our user namespace: keep no capability
            _linux.drop_capabilities(bounding=False)  # (the template emptied the bounding set)
        _child.prctl(_child.PR_SET_PDEATHSIG, _signal.SIGKILL)  # after the uid change, which clears it
        if t.sleeper:  # the template has no handler (for its sleepers): the program gets Python's back
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # (the C module: signal's enums cost a child ~40 faults)
        t.filters[forking, command is not None].install()  # the environment is already the run's
        os.write(3, b"R")
        os.close(3)
    except BaseException as exc:
        _fail(3, f"child setup failed: {type(exc).__name__}: {exc}")
    status = 1
    try:
        if command is not None:  # another language: its interpreter or its compiled program, here
            try:  # the signals Python ignores go back to their defaults, as subprocess does
                for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
                    _signal.signal(sig, _signal.SIG_DFL)
                # (a compiled program's path is relative to the work dir)
                os.execve(command[1] if command[1][:1] == b"/" else workdir.encode() + b"/" + command[1],
                          command[1:], os.environ)  # fmt: skip
            except OSError as exc:  # (the host checked it is there: a failure of ours, not the program's)
                os.write(2, b"code-env: cannot start " + command[1] + b": " + str(exc).encode() + b"\n")
                status = SETUP_FAILED
        else:
            status = _child.run_program(code, seed)
    finally:
        os._exit(status)


def _private_setup(t: Template, spec: dict[str, Any], *, own_pid_ns: bool) -> None:
    """A mount, an IPC and a cgroup namespace of the run's own, its own disk (a tmpfs the kernel
    frees with the mount namespace) and, with an init, its own /proc. The cgroup namespace is made
    once the child is in the run's cgroup, its root: ``/proc/self/cgroup`` says ``/``, not the
    host's cgroup path (which names the machine's service and the slot's uid)."""
    _linux.unshare(_linux.CLONE_NEWNS | _linux.CLONE_NEWIPC | _linux.CLONE_NEWCGROUP)
    _linux.mount("tmpfs", WORK_PARENT, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, spec["tmpfs"])
    for d in (WORKDIR, SHMDIR):
        os.mkdir(d, 0o700)
        if t.uid_switch:
            os.chown(d, t.uid, t.gid)
    if own_pid_ns:
        # in a PID namespace of the run's own: its /proc shows the run and nothing else (its pid
        # directories, as the slot's: _zygote.setup_root)
        _linux.mount_proc("/proc", _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC | _linux.MS_RDONLY,
                          t.proc_options)  # fmt: skip
    if t.tmp_is_host_dir:
        _private_tmp(spec)
    os.chdir(WORKDIR)


def _private_tmp(spec: dict[str, Any]) -> None:
    """The interpreter lives under /tmp (a venv in a temporary checkout), so the jail's /tmp holds
    its directories and cannot be the link to the work dir: give the run a fresh, writable /tmp of
    its own (a tmpfs, gone with the run) with those directories bound back in."""
    keep = WORK_PARENT + "/.host-tmp"
    os.mkdir(keep, 0o700)
    _linux.mount("/tmp", keep, None, _linux.MS_BIND | _linux.MS_REC)
    _linux.mount("tmpfs", "/tmp", "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV,
                 spec["tmpfs_tmp"])  # fmt: skip
    for name in os.listdir(keep):
        os.mkdir("/tmp/" + name, 0o755)
        _linux.mount(f"{keep}/{name}", "/tmp/" + name, None, _linux.MS_BIND | _linux.MS_REC)
    _linux.umount2(keep, _linux.MNT_DETACH)
    os.rmdir(keep)


def weak_workdir(parent: str, pid: int) -> str:
    return os.path.join(parent, f"run-{pid}")


def _weak_setup(t: Template, workdir: str) -> None:
    """Weak isolation, asked for by name: a private directory on the host's filesystem, nothing
    more (the monitor removes it after the run)."""
    os.mkdir(workdir, 0o700)
    if t.uid_switch:
        os.chown(workdir, t.uid, t.gid)
    os.chdir(workdir)
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    if sys.path:
        sys.path[0] = workdir


def _fail(fd: int, message: str) -> None:
    try:
        os.write(fd, ("E" + message).encode("utf-8", "replace"))
    finally:
        os._exit(SETUP_FAILED)


def init_kind(limits: dict[str, Any], *, uid_switch: bool, weak: bool, sleeper: bool) -> str:
    """What stands above the program as the PID 1 of a PID namespace of the run's own:

    * ``"init"``: a run that may fork gets a Python init (``_init``: forked from the run's child
      once it is set up) that reaps its descendants and reports the program's status (they die
      with the namespace);
    * ``"sleeper"``: a run that may not fork but shares its uid with the worker (in a user
      namespace: a PID namespace of its own is what keeps it from seeing or signalling the
      worker, the template and the next run's child) gets a sleeper (``_linux.clone_sleeper``:
      no Python, no copy of the interpreter's memory) as PID 1 when the machine has one, the
      program then being PID 2, a child of the template; else an ``"init"``;
    * ``"none"``: no PID namespace (as root, a run that may not fork has a uid of its own; weak
      mode has no namespaces).

    A run whose files are sent back (a compile's, a caller's ``fetch_files``) has an init: it
    sends them once the program and all it started are gone."""
    if weak:
        return "none"
    if limits["max_processes"] > 1 or limits.get("collect"):
        return "init"
    if not uid_switch:
        return "sleeper" if sleeper else "init"
    return "none"


def has_init(limits: dict[str, Any], *, uid_switch: bool, weak: bool, sleeper: bool) -> bool:
    """Does a Python init stand above the program (``init_kind``)?"""
    return init_kind(limits, uid_switch=uid_switch, weak=weak, sleeper=sleeper) == "init"


def _init(program: int, *, private: bool, collect: tuple[str, int] | None = None, workdir: str = WORKDIR) -> None:
    """PID 1 of a run's own PID namespace: reap everything; when the program ends, report its raw
    wait status ("X" + 4 bytes) on the status pipe and leave (the kernel kills the rest).

    ``collect`` (a compile: a directory of the work dir, and a byte budget): once the program has
    ended, kill and reap what is left of the run, then send the directory's files (``"A"``, their
    length in 4 bytes, ``_child.pack_files``) before the report; none, or too many, sends nothing."""
    try:
        # Default dispositions: the kernel then drops every signal the run sends its init (Python
        # had a handler for SIGINT).
        for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGPIPE):
            _signal.signal(sig, _signal.SIG_DFL)
        if private:
            # root, the program another uid: non-dumpable on top. (In a user namespace the program,
            # same uid, is kept out by the capabilities we hold and it has not; non-dumpable there
            # would hide us from the monitor too, whose capabilities stop at our namespace.)
            _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        _child.set_process_name("code-env-init")
        for fd in (0, 1, 2, 4):
            os.close(fd)
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)
            except InterruptedError:
                continue
            if pid == program:
                if collect is not None:
                    _child.send_files(3, workdir, collect[0], collect[1])
                os.write(3, b"X" + struct.pack("<i", status))
                os._exit(0)
    finally:
        os._exit(0)


SLOT_PROCESSES = 8
# what the monitor sends a waiting child: seed, length of the source, length of the command that
# runs it (0: the source is Python, run in-process; else NUL-separated: the source file's name,
# then the argv whose first word is an absolute path: ``sandbox.languages``)
PROGRAM_HEADER = struct.Struct("<III")
FILES = b"*"  # the command's first word when the source is a compiled program's files
# an empty, read-only directory over a toolchain's tree that the run must not see (sandbox.languages.hidden_paths)
HIDE_FLAGS = _linux.MS_RDONLY | _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC
SLEEPER_STACK_BYTES = 4096  # pause(2) through libc's syscall(): a few words


def _apply_rlimits(pairs: list[tuple[int, tuple[int, int]]]) -> None:
    for res, val in pairs:
        resource.setrlimit(res, val)


def rlimit_pairs(limits: dict[str, Any], *, nproc: str) -> list[tuple[int, tuple[int, int]]]:
    """The rlimits of a run's child, as ``(resource, (soft, hard))`` pairs (the template computes
    them, the child only applies them). No RLIMIT_AS: memory is limited by the cgroup or, without one, by the monitor, which reads
    the run's resident memory every few milliseconds and kills it over the limit. Either way an
    allocation is refused only when the machine itself refuses it, and running out of memory is
    the same verdict (``oom``, on evidence from outside) whoever runs the sandbox."""
    cpu_budget = limits["cpu_time_s"] if limits.get("cpu_time_s") is not None else limits["timeout_s"]
    cpu = int(-(-cpu_budget // 1)) + 1  # its ceiling (no math module in the template)
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        *_child.fixed_rlimits(),  # (the program's process sets them once more, with its file limit)
    ]
    # Counted per uid and user namespace: the slot's own uid as root ("private"); in a user
    # namespace, the worker's processes share it (waiter, worker, template, two run children, an
    # init); in weak mode it would count every process of the user, so none is set.
    if nproc != "none":
        n = limits["max_processes"] + limits["max_threads"] + (0 if nproc == "private" else SLOT_PROCESSES)
        pairs.append((resource.RLIMIT_NPROC, (n, n)))
    return pairs


def _max_fd() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft < 1 << 20 else 1 << 20


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)
