"""The process backend's worker. Standard library (plus the host-compiled seccomp filter) only.

One worker per slot, in three roles, so that no process that forks runs ever held a request:

* the **monitor** (``Worker``) talks to the host: it receives requests (code, stdin, limits),
  feeds stdin, reads the output, enforces the wall clock and the CPU budget from outside
  (``_monitor``) and answers. It never forks a run itself.
* the **template** (``_template.Template``) is forked by the monitor at start-up, before the first
  request, and only ever forks run children on the monitor's command. It never holds code, stdin,
  output or a result: a child forked from it finds nothing of any other run in its memory.
* the **run child** (``_template``), forked by the template ahead of time and set up while the previous run is
  still running: a mount namespace of its own with a fresh size-limited tmpfs as its work dir and
  ``/dev/shm`` (the kernel frees both, in O(1) for us, when the run's last process ends), an IPC
  namespace of its own (SysV objects die with it), its own memory cgroup of the slot's two (so
  nothing a previous run left is charged to it) as the root of a cgroup namespace of its own (its
  ``/proc/self/cgroup`` names no host cgroup), rlimits. Until its program arrives it stays
  root-owned and invisible to the run in progress (``/proc`` is mounted ``hidepid=2``); then it
  writes the program to its work dir, switches to the slot's uid, loads the seccomp filter and
  runs the program as ``__main__``. A run that may fork (or, in a user namespace, any run) gets
  a PID namespace of its own, whose init (running no untrusted code, out of the program's reach)
  reaps everything and reports the program's exit status; the program itself is never PID 1.

At start-up the worker isolates itself once: (as a normal user: a user namespace,) mount, network,
IPC, UTS and PID namespaces for the slot, a private read-only root holding only the allowlisted
host paths (``_paths.jail_mounts``), and a ``/proc`` of the slot's own PID namespace (the monitor
is its PID 1), read-only, ``hidepid=2,subset=pid`` (``_paths.PROC_OPTIONS``): its process
directories, ``self`` and ``thread-self``, no file with the machine's figures or the host's
identity. A kernel that refuses ``subset=pid`` (before Linux 5.8) fails the worker closed.
"""

from __future__ import annotations

# Only what the template needs is imported before it is forked: every module here is in the
# interpreter every run is forked from, its pages copied into each run's page tables and torn down
# at its exit (the template's resident memory: 7.7 -> ~5 MB without json, socket, signal's and
# socket's enums, array and the monitor's own code). So no threading, shutil, dataclasses,
# pyseccomp (the host compiles the seccomp filter), linecache (tracebacks read solution.py from
# the work dir) or random (its at-fork hook would reseed it in every child; the program's `random`
# is seeded when imported, see _child.seed_random); the C modules _signal and _socket stand in for
# signal and socket, marshal for json (the configuration and the template's commands are ours).
# The monitor loads json and its own module (_monitor) once the template is forked (load_monitor).
import _signal
import _socket
import binascii
import gc
import marshal
import os
import struct
import time

# Imported as plain modules (not the ``sandbox`` package): the worker never loads pydantic.
import _child
import _linux
import _paths
from _template import (
    PROGRAM_HEADER,
    SHMDIR,
    WORK_PARENT,
    WORKDIR,
    Cgroup,
    Template,
    _read_exact,
    has_init,
    weak_workdir,
)

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from typing import Any

    import _monitor
else:
    _monitor = None  # loaded by load_monitor, in the monitor only, once the template is forked
MONITOR_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_monitor.py")


def load_monitor(source: bytes) -> None:
    """The monitor's own module (``_monitor``, from its source read before the jail was built: the
    jail does not hold our files), for this process only."""
    global _monitor
    import types

    module = types.ModuleType("_monitor")
    module.__file__ = MONITOR_FILE
    exec(compile(source, MONITOR_FILE, "exec"), module.__dict__)
    _monitor = module



# ----------------------------------------------------------------------------- isolation


def enter_namespaces(privileged: bool) -> list[str]:
    """The slot's namespaces (but PID, which takes a fork: see ``serve``)."""
    flags = _linux.CLONE_NEWNS | _linux.CLONE_NEWNET | _linux.CLONE_NEWIPC | _linux.CLONE_NEWUTS
    names = ["mount", "net", "ipc", "uts"]
    if not privileged:
        uid, gid = os.getuid(), os.getgid()
        _linux.unshare(_linux.CLONE_NEWUSER | flags)
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"0 {gid} 1")
        names.insert(0, "user")
    else:
        _linux.unshare(flags)
    try:
        _linux.sethostname("sandbox")
    except OSError:
        pass
    _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
    return names


def _ro_flags() -> int:
    return _linux.MS_BIND | _linux.MS_REMOUNT | _linux.MS_RDONLY | _linux.MS_NOSUID | _linux.MS_NODEV


def _bind(src: str, dst: str) -> None:
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            open(dst, "a").close()
    _linux.mount(src, dst, None, _linux.MS_BIND | _linux.MS_REC)
    try:
        _linux.mount(None, dst, None, _ro_flags())
    except OSError:
        # in a user namespace, a bind of a mount that is nodev/noexec must keep those flags
        _linux.mount(None, dst, None, _ro_flags() | _linux.MS_NOEXEC)


def build_root(root: str, mounts: list[list[str]]) -> None:
    """Fill the tmpfs at ``root`` with the jail's view of the host, an allowlist the host computed
    with ``_paths.jail_mounts`` (the worker does not import importlib.metadata: every module it
    holds makes each fork slower)."""
    hiding: list[str] = []
    for item in mounts:
        m = _paths.Mount(*item)
        dst = root + m.dst
        if m.kind == "bind":
            _bind(m.src, dst)
        elif m.kind == "symlink":
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.lexists(dst):
                os.symlink(m.src, dst)
        elif m.kind == "tmpfs":
            os.makedirs(dst, exist_ok=True)
            _linux.mount("tmpfs", dst, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "size=1m,mode=0755")
            hiding.append(dst)
        elif m.kind == "dir":
            os.makedirs(dst, exist_ok=True)
        else:
            raise ValueError(f"unknown mount kind {m.kind!r}")
    for dst in hiding:  # they only hold mount points: read-only once those are in place
        _linux.mount(None, dst, None, _linux.MS_REMOUNT | _linux.MS_RDONLY | _linux.MS_NOSUID | _linux.MS_NODEV)


def setup_root(cfg: dict[str, Any], answers_sysinfo: bool) -> int | None:
    """A private, read-only root with only what a program needs; ``/proc`` of the slot's own PID
    namespace (this process must be its PID 1 by now). Returns the monitor's ``writable_proc`` when
    the runs' ``sysinfo`` is the monitor's to answer (``answers_sysinfo``: the worker has the layer)."""
    root = cfg["root_dir"]
    _linux.mount("tmpfs", root, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "size=16m,mode=0755")
    build_root(root, cfg["mounts"])
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ("null", "zero", "full", "random", "urandom"):
        if os.path.exists("/dev/" + dev):
            target = root + "/dev/" + dev
            open(target, "a").close()
            _linux.mount("/dev/" + dev, target, None, _linux.MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                         ("shm", SHMDIR)):  # fmt: skip
        os.symlink(target, root + "/dev/" + name)
    os.makedirs(root + "/proc", exist_ok=True)
    # the pid directories only (``_paths.PROC_OPTIONS``): no global file to mask or replace
    _linux.mount_proc(root + "/proc", _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC, cfg["proc_options"])
    proc_fd = writable_proc(root + "/.proc-rw") if answers_sysinfo else None
    os.makedirs(root + WORK_PARENT, exist_ok=True)
    if not os.path.lexists(root + "/tmp"):
        os.symlink(WORKDIR, root + "/tmp")  # /tmp is the run's own work dir
    os.chdir(root)
    os.makedirs(".oldroot")
    _linux.pivot_root(".", ".oldroot")
    _linux.umount2("/.oldroot", _linux.MNT_DETACH)
    os.rmdir("/.oldroot")
    os.chdir("/")
    _linux.mount(None, "/", None, _ro_flags())
    try:  # read-only where the kernel allows it
        _linux.mount(None, "/proc", None, _linux.MS_REMOUNT | _linux.MS_RDONLY | _linux.MS_NOSUID
                     | _linux.MS_NODEV | _linux.MS_NOEXEC, cfg["proc_options"])  # fmt: skip
    except OSError:
        pass
    return proc_fd


def writable_proc(path: str) -> int:
    """A directory fd of a /proc of the slot's PID namespace that the monitor may write through (the
    answers to the runs' ``sysinfo`` calls go to ``/proc/<pid>/mem``; the jail's /proc is read-only):
    mounted on ``path`` (a fresh directory) for a moment, then detached, so that it is reachable
    through this fd alone and in no run's mount namespace. Made while the slot's own /proc is fresh
    (in a user namespace the kernel mounts a proc only where one is already fully visible, and
    writable)."""
    os.mkdir(path, 0o700)
    flags = _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC
    _linux.mount("proc", path, "proc", flags, "subset=pid")  # the processes are all it needs
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    finally:
        _linux.umount2(path, _linux.MNT_DETACH)
        os.rmdir(path)


# ----------------------------------------------------------------------------- the monitor


class Pending:
    """A run child forked by the template, waiting for its program, its sleeper (the PID 1 of its
    PID namespace, ``_template.init_kind``; -1: none) and our ends of its pipes."""

    __slots__ = ("cgroup", "err_r", "go_w", "key", "out_r", "pid", "sleeper", "st_r", "stdin_w")

    def __init__(self, pid: int, key: tuple[Any, ...], cgroup: int | None, stdin_w: int, out_r: int,
                 err_r: int, st_r: int, go_w: int, sleeper: int = -1) -> None:  # fmt: skip
        self.pid, self.key, self.cgroup, self.sleeper = pid, key, cgroup, sleeper
        self.stdin_w, self.out_r, self.err_r, self.st_r, self.go_w = stdin_w, out_r, err_r, st_r, go_w

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.stdin_w, self.out_r, self.err_r, self.st_r, self.go_w)


class Worker:
    """The monitor: serves the host's requests with children forked by the template."""

    def __init__(self, cfg: dict[str, Any], info: dict[str, Any]) -> None:
        self.cfg = cfg
        self.info = info
        self.uid_switch: bool = cfg["uid_switch"]
        self.cgroups: list[Cgroup | None] = []
        for path in cfg.get("cgroup_dirs") or []:
            try:
                self.cgroups.append(Cgroup(path, cfg["cgroup_version"]))
            except OSError as exc:
                info["cgroup_error"] = str(exc)
                self.cgroups = []
                break
        info["memory"] = f"cgroup v{cfg['cgroup_version']}" if self.cgroups else "monitor (resident memory polled, killed over the limit)"
        self.next_cgroup = 0
        self.pending: Pending | None = None
        # a fork asked of the template and not yet answered: (setup key, cgroup, our pipe ends)
        self.spawning: tuple[tuple[Any, ...], int | None, tuple[int, ...]] | None = None
        self.expected: dict[str, Any] = cfg["default_limits"]
        # AF_UNIX sockets only where the run has a filesystem (and a network namespace) of its own
        variant = "nounix" if cfg.get("isolation") == "weak" else "unix"
        self.filters = {  # (may fork, runs another language's program: may execve)
            (fork, ex): _child.SeccompProgram(bytes.fromhex(
                cfg["seccomp"][f"{variant}-{'fork' if fork else 'nofork'}" + ("-exec" if ex else "")]))
            for fork in (False, True) for ex in (False, True)
        }  # fmt: skip
        listener_hex = cfg["seccomp"].get("sysinfo-listener")
        self.listener_bpf = bytes.fromhex(listener_hex) if listener_hex else None
        self.listener: int | None = None  # the runs' seccomp listener: their sysinfo calls, ours to answer
        self.proc_fd: int | None = None  # where the answers are written through (None: /proc)
        self.sock: _socket.socket | None = None
        self.unix_baseline: frozenset[int] = frozenset()
        self.broken: str | None = None  # set when the template is gone: this worker must be replaced

    def start_template(self) -> None:
        """Fork the template. Called once, before the first request."""
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            ours.close()
            if self.proc_fd is not None:
                os.close(self.proc_fd)
            try:
                template = Template(self.cfg, theirs, self.cgroups, self.filters, own_pidns)
                template.offer_listener(self.listener_bpf)
                template.serve()
            finally:
                os._exit(0)
        os.close(own_pidns)
        theirs.close()
        self.sock = ours
        msg, anc, _flags, _addr = ours.recvmsg(4096, _socket.CMSG_SPACE(struct.calcsize("i")))
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                (self.listener,) = struct.unpack_from("i", data)
        if self.listener is None:
            self.info["sysinfo"] = "the host's (" + msg[1:].decode("utf-8", "replace") + ")"
        else:
            self.info["sysinfo"] = "the run's own view (answered by the monitor)"
        # the slot's network namespace holds the sockets of this worker and its template (and no
        # run yet): what a run holds there is every other one
        load_monitor(self.cfg.pop("monitor_source"))
        self.unix_baseline = frozenset(_monitor.unix_socket_inodes("self"))

    def _ask(self, msg: bytes, fds: list[int] | None = None) -> bytes:
        """Send the template a command and wait for its answer (after the answer of a fork asked
        for earlier: the template answers in order)."""
        self._collect_spawn()
        self._tell(msg, fds)
        return self._answer()

    def _tell(self, msg: bytes, fds: list[int] | None = None) -> None:
        assert self.sock is not None
        try:
            if fds:
                self.sock.sendmsg([msg], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
            else:
                self.sock.send(msg)
        except OSError as exc:
            self.broken = f"the template process is gone ({exc})"
            raise OSError(self.broken) from None

    def _answer(self) -> bytes:
        assert self.sock is not None
        try:
            reply = self.sock.recv(4096)
        except OSError as exc:
            self.broken = f"the template process is gone ({exc})"
            raise OSError(self.broken) from None
        if not reply:
            self.broken = "the template process is gone"
            raise OSError(self.broken)
        if reply[:1] == b"E":
            raise OSError(reply[1:].decode("utf-8", "replace"))
        return reply

    # -- the waiting child: forked ahead of the request, so the fork is off the critical path
    def prefork(self) -> None:
        """Have the template fork and set up the next run's child, without waiting for it: the
        template forks while this process watches the run in progress; its answer (the child's
        pid) is read before the next command to the template (``_collect_spawn``)."""
        if self.pending is None and self.spawning is None:
            try:
                self.spawning = self._request_spawn(self.expected)
            except OSError as exc:
                self.info["prefork_error"] = str(exc)

    def _spawn(self, limits: dict[str, Any]) -> Pending:
        """A child set up for ``limits``, forked now."""
        self.spawning = self._request_spawn(limits)
        self._collect_spawn()
        p, self.pending = self.pending, None
        assert p is not None
        return p

    def _request_spawn(self, limits: dict[str, Any]) -> tuple[tuple[Any, ...], int | None, tuple[int, ...]]:
        """Ask the template for a child set up for ``limits`` (``F``, with the child's ends of its
        pipes): what its answer will need, the setup key, the cgroup and our ends of the pipes."""
        self._collect_spawn()
        cgroup = None
        if self.cgroups:
            cgroup = self.next_cgroup
            self.next_cgroup = (self.next_cgroup + 1) % len(self.cgroups)
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        st_r, st_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        spec = setup_spec(limits) | {"cgroup": cgroup}
        try:
            self._tell(b"F" + marshal.dumps(spec), [stdin_r, out_w, err_w, st_w, go_r])
        except BaseException:
            for fd in (stdin_w, out_r, err_r, st_r, go_w):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, out_w, err_w, st_w, go_r):  # the template holds them now
                os.close(fd)
        return setup_key(limits), cgroup, (stdin_w, out_r, err_r, st_r, go_w)

    def _collect_spawn(self) -> None:
        """Read the answer to the fork asked for (``prefork``): the waiting child, or an error
        (raised; the next request forks on demand and reports it)."""
        if self.spawning is None:
            return
        (key, cgroup, ours), self.spawning = self.spawning, None
        try:
            reply = self._answer()
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        stdin_w, out_r, err_r, st_r, go_w = ours
        pid, sleeper = (int(x) for x in reply[1:].split())
        self.pending = Pending(pid, key, cgroup, stdin_w, out_r, err_r, st_r, go_w, sleeper)

    def discard_pending(self) -> None:
        try:
            self._collect_spawn()
        except OSError:
            pass
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            try:
                os.kill(p.pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(p.pid, p.sleeper)
        finally:
            for fd in p.fds:
                os.close(fd)

    def _reap(self, pid: int, sleeper: int = -1) -> tuple[int, float, int]:
        """Have the template reap ``pid``: (wait status, CPU seconds, max RSS in KiB); and then
        kill and reap ``sleeper``, the PID 1 of its run's namespace (-1: none)."""
        reply = self._ask(b"W%d %d" % (pid, sleeper) if sleeper > 0 else b"W%d" % pid)
        (status,) = struct.unpack_from("<i", reply, 1)
        us, uus, ss, sus, maxrss = struct.unpack_from("<qqqqq", reply, 5)
        return status, us + uus / 1e6 + ss + sus / 1e6, maxrss

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        limits = req["limits"]
        cpu_budget = limits["cpu_time_s"] if limits.get("cpu_time_s") is not None else limits["timeout_s"]
        # never run twice: a run starved of CPU by a busy machine keeps its progress, its wall
        # clock moves by the time it waited for a CPU (_monitor.MAX_WALL_FACTOR)
        res = self._run_once(req, limits, cpu_budget)
        res.pop("_outcome")
        return res

    def _run_once(self, req: dict[str, Any], limits: dict[str, Any], cpu_budget: float) -> dict[str, Any]:
        try:
            self._collect_spawn()  # the child forked while the previous run ran
        except OSError as exc:
            self.info["prefork_error"] = str(exc)
        if self.pending is not None and self.pending.key != setup_key(limits):
            self.discard_pending()  # it was set up for other limits
        p = self.pending or self._spawn(limits)
        self.pending = None
        self.expected = limits
        cg = self.cgroups[p.cgroup] if p.cgroup is not None else None
        oom_before = 0
        limit_bytes = limits["memory_mb"] * 1024 * 1024
        if cg is not None:
            cg.set_limit(limit_bytes)
            cg.reset_peak()
            oom_before = cg.oom_kills()
        weak = self.cfg.get("isolation") == "weak"
        wrapped = has_init(limits, uid_switch=self.uid_switch, weak=weak, sleeper=self.cfg["sleeper"])
        # a compiled program: its files, packed (_child.pack_files), in base64 (the request is JSON)
        extra = binascii.a2b_base64(req["extra"]) if "extra" in req else None  # the run's input files, packed
        if "files" in req:
            source = binascii.a2b_base64(req["files"]) + (extra or b"")
        else:
            source = _child.join_source(req["code"].encode("utf-8", "surrogatepass"), extra)
        command = b"\0".join(w.encode() for w in req["command"]) if req.get("command") else b""
        payload = PROGRAM_HEADER.pack(limits["random_seed"], len(source), len(command)) + source + command
        reaped: list[tuple[int, float, int]] = []
        outcome: Any = None

        def reap(pid: int) -> tuple[int, float, int]:
            r = self._reap(pid, p.sleeper)  # (the sleeper goes with the run: nothing else is left in its namespace)
            reaped.append(r)
            return r

        try:
            try:
                _write_all(p.go_w, payload)
            except OSError:
                pass  # the child died waiting; the monitor reports its status as a setup failure
            os.close(p.go_w)
            outcome = _monitor.watch(
                _monitor.Watch(
                    pid=p.pid,
                    stdout_fd=p.out_r,
                    stderr_fd=p.err_r,
                    stdin_fd=p.stdin_w,
                    stdin_data=req.get("stdin", "").encode("utf-8"),
                    timeout_s=limits["timeout_s"],
                    cpu_time_s=cpu_budget,
                    max_output_bytes=limits["max_output_bytes"],
                    kill_on_overflow=limits["on_output_overflow"] == "kill",
                    status_fd=p.st_r,
                    reap=reap,
                    kill=(lambda sig: _killpg(p.pid, sig)) if weak else None,
                    init_report=wrapped,
                    cpu_probe=(lambda: _monitor.tree_cpu_s(p.pid)) if wrapped else None,
                    delay_probe=(lambda: _monitor.tree_run_delay_s(p.pid)) if wrapped else None,
                    memory_probe=None if cg is not None else _monitor.TreeMemory(
                        (lambda: _monitor.tree_pids(p.pid)) if wrapped else (lambda: [p.pid]), limit_bytes,
                        max_open_files=limits["max_open_files"], private_mounts=not weak,
                        unix_baseline=None if weak else self.unix_baseline),
                    memory_limit_bytes=limit_bytes,
                    max_wall_s=_monitor.MAX_WALL_FACTOR * limits["timeout_s"],
                    # fork the next run's child while this one runs (for the limits just set as
                    # expected)
                    on_start=self.prefork,
                    listener=self.listener,
                    sysinfo=_monitor.sysinfo_reply(limit_bytes),
                    proc_fd=self.proc_fd,
                )
            )
        finally:
            for fd in (p.out_r, p.err_r, p.st_r):
                os.close(fd)
            if weak:  # no PID namespace took the run's processes down: its process group, then its dir
                _killpg(p.pid, _signal.SIGKILL)
            if not reaped:  # the watch failed: the run (and its sleeper) must not outlive it
                try:
                    os.kill(p.pid, _signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._reap(p.pid, p.sleeper)
            if weak:
                import shutil  # only here (the template forked long ago: it never holds it)

                workdir = weak_workdir(self.cfg["root_dir"], p.pid)
                collect = limits.get("collect")
                if collect and outcome is not None:  # no init in weak mode: the run's files, now its processes are gone
                    outcome.files = _child.collect_files_for(workdir, collect[0], int(collect[1]))
                shutil.rmtree(workdir, ignore_errors=True)
        peak = cg.peak_bytes() if cg is not None else None
        oom_killed = cg is not None and cg.oom_kills() > oom_before
        if peak is None and outcome.peak_rss_bytes:
            peak = max(outcome.peak_rss_bytes, outcome.maxrss_kb * 1024)
        evidence = oom_killed or _monitor.memory_at_limit(peak, outcome.maxrss_kb, limit_bytes)
        if wrapped and outcome.program_status is not None:
            outcome.set_status(outcome.program_status)  # the init's report: the program's own status
        elif wrapped and outcome.killed_for is None and not outcome.setup_error and not evidence:
            # the init (root, unreachable by the program) ended without its report
            outcome.setup_error = f"the run's init ended without reporting (status {outcome.exit_code}, signal {outcome.signal})"
        res = _monitor.result_dict(outcome, limits, peak_bytes=peak, memory_evidence=evidence, cpu_budget=cpu_budget)
        if outcome.files is not None:  # a compile's artefacts (base64: the answer is JSON)
            res["files"] = binascii.b2a_base64(outcome.files, newline=False).decode("ascii")
        return res


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def setup_key(limits: dict[str, Any]) -> tuple[Any, ...]:
    """What a waiting child has already applied: a request with other values needs another child.
    Of the time limits, a child applies only ``RLIMIT_CPU``, in whole seconds (``setup_spec``; the
    monitor keeps the exact ones): requests whose budgets differ by a fraction of a second — a
    verifier's, which grow with the size of their input — share a waiting child."""
    collect = limits.get("collect")
    return (_cpu_seconds(limits), *(limits[k] for k in SETUP_FIELDS), tuple(collect) if collect else None)


def setup_spec(limits: dict[str, Any]) -> dict[str, Any]:
    """The part of ``limits`` a child is set up with (the template's ``F`` command)."""
    whole = _cpu_seconds(limits)
    spec = {k: limits[k] for k in SETUP_FIELDS} | {"cpu_time_s": whole, "timeout_s": whole}
    if limits.get("collect"):  # a compile: the run's init sends back this directory's files
        spec["collect"] = tuple(limits["collect"])
    return spec


def _cpu_seconds(limits: dict[str, Any]) -> int:
    budget = limits["cpu_time_s"] if limits.get("cpu_time_s") is not None else limits["timeout_s"]
    return int(-(-budget // 1))  # its ceiling (no math module here)


SETUP_FIELDS = ("memory_mb", "max_file_bytes", "max_disk_mb", "max_open_files", "max_processes", "max_threads")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# ----------------------------------------------------------------------------- serving


def _send(fd: int, obj: dict[str, Any]) -> None:
    import json  # (not before the template is forked: see the imports)

    data = json.dumps(obj, ensure_ascii=True).encode()
    view = memoryview(struct.pack("<I", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv(fd: int) -> dict[str, Any]:
    import json

    (n,) = struct.unpack("<I", _read_exact(fd, 4))
    msg: dict[str, Any] = json.loads(_read_exact(fd, n))
    return msg


def _recv_config(fd: int) -> dict[str, Any]:
    """The first message: the configuration, in marshal's format (the host's own data: json is not
    imported before the template is forked)."""
    (n,) = struct.unpack("<I", _read_exact(fd, 4))
    cfg: dict[str, Any] = marshal.loads(_read_exact(fd, n))
    return cfg


def serve() -> None:
    # Requests arrive on fd 0 and answers leave on fd 1; nothing else may write there. The first
    # message is the configuration (not on the command line: `ps` would show it).
    req_fd = os.dup(0)
    resp_fd = os.dup(1)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(resp_fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    _child.set_process_name("code-env-worker")
    try:
        cfg = _recv_config(req_fd)
        with open(MONITOR_FILE, "rb") as fh:  # (the jail will not hold it)
            cfg["monitor_source"] = fh.read()
        weak = cfg.get("isolation") == "weak"
        info: dict[str, Any] = {"namespaces": [], "private_root": False}
        privileged = os.geteuid() == 0
        info["mode"] = "weak" if weak else "root" if privileged else "user namespace"
        info["why"] = {
            "weak": "isolation='weak' was asked for: seccomp, rlimits and a private directory only",
            "root": "running as root: namespaces, a private uid per worker, memory cgroups",
            "user namespace": "not root: unprivileged user namespaces (the run is uid 0 of the worker's user "
                              "namespace with every capability dropped)",
        }[info["mode"]]
        if not weak:
            try:
                info["namespaces"] = enter_namespaces(privileged)
                # The slot's PID namespace: this process stays outside as a mere waiter; its child is
                # PID 1 there and does the work (it reaps whatever a run leaves, and takes the slot
                # down with it).
                _linux.unshare(_linux.CLONE_NEWPID)
            except OSError as exc:
                _send(resp_fd, {"ready": False, "isolation_unavailable": str(exc)})
                return
            pid = os.fork()
            if pid != 0:
                os.close(req_fd)
                os.close(resp_fd)
                _, status = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 1)
            _child.prctl(_child.PR_SET_PDEATHSIG, _signal.SIGKILL)  # the waiter and we live and die together
            info["namespaces"].append("pid")
        cfg["uid_switch"] = privileged
        # a run that may not fork, in a user namespace: a sleeper (no copy of the interpreter) is
        # the PID 1 of its PID namespace, where the machine has one (_template.init_kind)
        cfg["sleeper"] = not weak and _linux.sleeper_available()
        info["uid"] = cfg["uid"] if privileged else os.getuid()
        info["uid_switch"] = privileged
        worker = Worker(cfg, info)  # opens the cgroups while the host's filesystem is in reach
        if not weak:
            try:
                worker.proc_fd = setup_root(cfg, answers_sysinfo=worker.listener_bpf is not None)
            except _linux.ProcOptionsRefused as exc:
                _send(resp_fd, {"ready": False, "isolation_unavailable": str(exc), "proc_refused": True})
                return
            info["private_root"] = True
            info["proc"] = _paths.PROC_NOTE
        else:
            info["proc"] = _paths.WEAK_PROC_NOTE
        info["seccomp"] = True
        # Done once: every child inherits the run's environment and interpreter state.
        os.environ.clear()
        os.environ.update(_child.child_environment(WORKDIR))
        # The site module, as `python solution.py` runs it, but here, with the jail's view: its
        # site-packages hold only the allowed packages (and their .pth files), none of the host's
        # (the worker was started with -S; weak mode has no jail: prepare_interpreter then drops
        # an editable install's hook)
        import site

        site.main()
    except BaseException as exc:
        import traceback

        _send(resp_fd, {"ready": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        return
    # No PR_SET_PDEATHSIG here: it fires when the host *thread* that started us ends. The worker
    # ends when its request pipe closes (the host closed it, or died).
    # Every object so far is shared with every child: keep the collector off them, so that neither
    # side writes their GC headers (each write to a shared page costs a copy-on-write fault).
    gc.collect()
    gc.freeze()
    # Modules most programs import (typing alone costs ~13 ms to import): loaded once here, they
    # cost a run nothing. Import errors are not ours to report.
    import importlib

    for name in cfg.get("preload", ()):
        try:
            importlib.import_module(name)
        except Exception:
            info.setdefault("preload_failed", []).append(name)
    # From here on this interpreter is the template of every run.
    _child.prepare_interpreter(WORKDIR)
    _child.precompile(cfg.get("programs", ()))
    gc.collect()
    gc.freeze()
    try:
        worker.start_template()  # before the first request: it never sees one
        worker.prefork()
    except BaseException as exc:
        import traceback

        _send(resp_fd, {"ready": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        return
    _send(resp_fd, {"ready": True, "info": info})
    while True:
        try:
            req = _recv(req_fd)
        except EOFError:
            worker.discard_pending()
            return
        if req.get("op") == "exit":
            worker.discard_pending()
            return
        started = time.monotonic()
        not_after = req.get("not_after")
        if not_after is not None and started > not_after:  # it waited in our pipe past its deadline
            _send(resp_fd, {"queue_expired": True, "began": started})
            continue
        try:
            res = worker.run(req)
        except BaseException as exc:
            import traceback

            res = {"sandbox_error": f"worker error: {type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            try:
                worker.discard_pending()
            except BaseException:
                pass
        res["worker_ms"] = round((time.monotonic() - started) * 1000, 3)
        res["began"] = started
        _send(resp_fd, res)
        if worker.broken:
            return  # the host replaces a worker that exits
        if worker.pending is None:
            worker.prefork()  # not forked during the run (it failed)


if __name__ == "__main__":
    serve()
