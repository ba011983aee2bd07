"""The process backend's warm worker ("zygote"). Standard library (plus libseccomp) only.

Started once per worker slot by the host with an empty environment. At start it isolates itself
once — new mount, network, IPC and UTS namespaces, a private read-only root holding only what
Python needs, ``/proc`` mounted with ``hidepid=2``, its own memory cgroup — and compiles the seccomp
filters. Then it serves requests, one at a time, over its stdin/stdout (4-byte length + JSON).

Per run it forks a child into a fresh PID namespace (so the child, as PID 1, takes every process it
started down with it), which applies rlimits, an empty work dir, the worker's own unprivileged
uid/gid, an empty environment and the seccomp filter, then runs the program in-process. The worker
feeds stdin, reads the output, enforces wall clock and CPU budget from outside (``_monitor``), and
answers with a plain dict that the host turns into an ``ExecutionResult``.
"""

from __future__ import annotations

# What every run needs, imported once here so that no child pays for it. Kept lean on purpose:
# every module here makes each fork slower (page tables, copy-on-write, at-fork hooks), so no
# threading, shutil, dataclasses, pyseccomp (the host compiles the seccomp filter), linecache
# (tracebacks read solution.py from the work dir) or random (its at-fork hook would reseed it in
# every child; the program's `random` is seeded when imported, see _child.seed_random).
import atexit  # noqa: F401
import gc
import io  # noqa: F401
import json
import math
import os
import resource
import signal
import struct
import sys
import time
import types  # noqa: F401

# Imported as plain modules (not the ``sandbox`` package): the worker never loads pydantic.
import _child
import _linux
import _monitor
import _paths

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from typing import Any

WORK_PARENT = "/sandbox"
WORKDIR = "/sandbox/run"
SETUP_FAILED = 125


class Cgroup:
    """The worker's memory cgroup (v1 or v2), reached through file descriptors opened before the
    worker leaves the host's filesystem."""

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

    def peak_bytes(self) -> int | None:
        if self.peak is None:
            return None
        try:
            return int(os.pread(self.peak, 64, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return None

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


# ----------------------------------------------------------------------------- isolation


def _bind(src: str, root: str, *, writable: bool = False) -> None:
    dst = root + src
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            open(dst, "a").close()
    _linux.mount(src, dst, None, _linux.MS_BIND | _linux.MS_REC)
    if not writable:
        _linux.mount(
            None,
            dst,
            None,
            _linux.MS_BIND | _linux.MS_REMOUNT | _linux.MS_RDONLY | _linux.MS_NOSUID | _linux.MS_NODEV,
        )


def setup_isolation(cfg: dict[str, Any]) -> dict[str, Any]:
    """Isolate this worker once; returns what was achieved (reported to the host)."""
    info: dict[str, Any] = {"namespaces": [], "private_root": False, "uid_switch": False}
    privileged = os.geteuid() == 0
    flags = _linux.CLONE_NEWNS | _linux.CLONE_NEWNET | _linux.CLONE_NEWIPC | _linux.CLONE_NEWUTS
    if not privileged:
        uid, gid = os.getuid(), os.getgid()
        _linux.unshare(_linux.CLONE_NEWUSER | flags)
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"0 {gid} 1")
        info["namespaces"].append("user")
    else:
        _linux.unshare(flags)
    info["namespaces"] += ["mount", "net", "ipc", "uts"]
    try:
        _linux.sethostname("sandbox")
    except OSError:
        pass
    _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
    root = cfg["root_dir"]
    _linux.mount("tmpfs", root, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "size=16m,mode=0755")
    for top in sorted(os.listdir("/")):
        src = "/" + top
        if top in ("usr", "lib", "lib64", "lib32", "libx32", "bin", "sbin") or top.startswith("lib"):
            if os.path.islink(src):
                os.symlink(os.readlink(src), root + src)
            elif os.path.isdir(src):
                _bind(src, root)
    for d in _paths.python_dirs():
        if not os.path.exists(root + d) or not os.path.ismount(root + d):
            covered = any(d == p or d.startswith(p + os.sep) for p in ("/usr", "/lib", "/lib64", "/bin"))
            if not covered:
                _bind(d, root)
    for f in ("/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(f):
            _bind(os.path.realpath(f), root) if os.path.islink(f) else _bind(f, root)
            if os.path.islink(f) and not os.path.exists(root + f):
                os.makedirs(root + "/etc", exist_ok=True)
                os.symlink(os.readlink(f), root + f)
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ("null", "zero", "full", "random", "urandom"):
        if os.path.exists("/dev/" + dev):
            target = root + "/dev/" + dev
            open(target, "a").close()
            _linux.mount("/dev/" + dev, target, None, _linux.MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, root + "/dev/" + name)
    os.makedirs(root + "/dev/shm")
    _linux.mount("tmpfs", root + "/dev/shm", "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "size=64m,mode=1777")
    os.makedirs(root + "/proc")
    if privileged:
        _linux.mount("proc", root + "/proc", "proc", _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC, "hidepid=2")
        info["proc"] = "hidepid=2"
    os.makedirs(root + WORK_PARENT)
    if not os.path.lexists(root + "/tmp"):
        os.symlink(WORKDIR, root + "/tmp")  # /tmp is the run's own work dir
    os.chdir(root)
    os.makedirs(".oldroot")
    _linux.pivot_root(".", ".oldroot")
    _linux.umount2("/.oldroot", _linux.MNT_DETACH)
    os.rmdir("/.oldroot")
    os.chdir("/")
    _linux.mount(None, "/", None, _linux.MS_BIND | _linux.MS_REMOUNT | _linux.MS_RDONLY | _linux.MS_NOSUID | _linux.MS_NODEV)
    info["private_root"] = True
    info["uid_switch"] = privileged
    return info


# ----------------------------------------------------------------------------- one run


class Worker:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.uid: int = cfg["uid"]
        self.gid: int = cfg["gid"]
        self.cgroup: Cgroup | None = None
        self.info: dict[str, Any] = {"pid": os.getpid()}
        self.disk_mb: int | None = None
        if cfg.get("cgroup_dir"):
            try:
                self.cgroup = Cgroup(cfg["cgroup_dir"], cfg["cgroup_version"])
                self.info["memory"] = f"cgroup v{cfg['cgroup_version']}"
            except OSError as exc:
                self.info["cgroup_error"] = str(exc)
        if self.cgroup is None:
            self.info["memory"] = "rlimit"
        self.pending: Pending | None = None
        # The limits the next run will most likely have (an RL job uses the same ones for every
        # run): the waiting child applies them in advance and then only needs its program.
        self.expected: dict[str, Any] = cfg["default_limits"]
        self.isolated = False
        # Handles on the host's /proc and our own pid namespace, taken before we leave the host's
        # filesystem (an unprivileged worker cannot mount a /proc of its own).
        _monitor.set_proc_dir(os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        try:
            self.own_pidns: int | None = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.own_pidns = None
        if cfg.get("isolate", True) and os.geteuid() != 0:
            self.info["isolation_error"] = (
                "not root: no private namespaces or uid; seccomp (all sockets refused), rlimits and a "
                "private work dir only. Run as root for full isolation."
            )
        elif cfg.get("isolate", True):
            try:
                self.info.update(setup_isolation(cfg))
                self.isolated = True
            except OSError as exc:
                self.info["isolation_error"] = str(exc)
        if not self.isolated:
            self.workparent = cfg["fallback_work_parent"]
        else:
            self.workparent = WORK_PARENT
        self.workdir = os.path.join(self.workparent, "run")
        # the waiting child's dir: root's and closed until it becomes the run's work dir (renamed,
        # then handed over), so the run before it cannot plant files in it
        self.nextdir = os.path.join(self.workparent, "next")
        self.uid_switch = os.geteuid() == 0
        self.pidns = False
        try:
            if self.own_pidns is None:
                raise OSError("no handle on our own pid namespace")
            if os.geteuid() != 0 or "user" in self.info.get("namespaces", []):
                # inside a user namespace we could enter a new pid namespace but never come back
                raise OSError("a pid namespace per run needs root")
            _linux.unshare(_linux.CLONE_NEWPID)
            _linux.setns(self.own_pidns, _linux.CLONE_NEWPID)
            self.pidns = True
            self.info["namespaces"] = [*self.info.get("namespaces", []), "pid (per run)"]
        except OSError as exc:
            self.info["pidns_error"] = str(exc)
        # compiled by the host (libseccomp), keyed as _seccomp.variant names them; AF_UNIX sockets
        # only where the filesystem is private
        variant = "unix" if self.isolated else "nounix"
        self.filters = {
            fork: _child.SeccompProgram(bytes.fromhex(cfg["seccomp"][f"{variant}-{'fork' if fork else 'nofork'}"]))
            for fork in (False, True)
        }
        # Done once: every child inherits the run's environment and interpreter state.
        os.environ.clear()
        os.environ.update(_child.child_environment(self.workdir))
        self.info["seccomp"] = True
        self.info["uid"] = self.uid if self.uid_switch else os.getuid()

    # -- disk of the work dir
    def _mount_disk(self, disk_mb: int) -> None:
        if self.isolated and disk_mb != self.disk_mb:
            if self.disk_mb is not None:
                _linux.umount2(WORK_PARENT, _linux.MNT_DETACH)
            _linux.mount("tmpfs", WORK_PARENT, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV,
                         f"size={disk_mb}m,mode=0755")  # fmt: skip
            self.disk_mb = disk_mb

    def _activate(self) -> None:
        """The waiting child's dir becomes the run's work dir (its cwd follows the rename)."""
        if os.path.lexists(self.workdir):
            self._clean_workdir()  # left by a run whose clean-up was interrupted
        os.rename(self.nextdir, self.workdir)
        if self.uid_switch:
            os.chown(self.workdir, self.uid, self.gid)

    def _clean_workdir(self) -> None:
        _rmtree(self.workdir)
        if os.path.lexists(self.workdir):
            raise OSError(f"could not remove the work dir {self.workdir}")
        if self.isolated:
            for name in os.listdir("/dev/shm"):
                _rmtree(os.path.join("/dev/shm", name))

    def _kill_leftovers(self, pid: int) -> None:
        """Without a PID namespace, end whatever the run left behind."""
        if self.pidns:
            return
        if self.uid_switch:
            for _ in range(100):
                helper = os.fork()
                if helper == 0:
                    try:
                        os.setresgid(self.gid, self.gid, self.gid)
                        os.setresuid(self.uid, self.uid, self.uid)
                        os.kill(-1, signal.SIGKILL)
                        os._exit(0)
                    except ProcessLookupError:
                        os._exit(3)
                    except BaseException:
                        os._exit(4)
                _, st = os.waitpid(helper, 0)
                if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 3:
                    break
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        limits = req["limits"]
        cpu_budget = limits["cpu_time_s"] if limits.get("cpu_time_s") is not None else limits["timeout_s"]
        first = self._run_once(req, limits, cpu_budget)
        reason = _monitor.starved(first["_outcome"], timeout_s=limits["timeout_s"], cpu_budget_s=cpu_budget)
        if reason is None:
            first.pop("_outcome")
            return first
        second = self._run_once(req, limits, cpu_budget)
        second.pop("_outcome")
        second["reruns"] = 1
        second["rerun_reason"] = reason
        return second

    # -- the waiting child: forked ahead of the request, so the fork is off the critical path
    def prefork(self) -> None:
        """Have a child forked and set up, waiting for its program (called while idle)."""
        if self.pending is None:
            try:
                self.pending = self._spawn(self.expected)
            except OSError:
                self.pending = None  # the next request forks on demand and reports the error

    def pending_pid(self) -> int | None:
        return self.pending.pid if self.pending is not None else None

    def discard_pending(self) -> None:
        p, self.pending = self.pending, None
        if p is None:
            return
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(p.pid, 0)
        for fd in p.fds:
            os.close(fd)
        _rmtree(self.nextdir)

    def _spawn(self, limits: dict[str, Any]) -> Pending:
        if self.pending is None:
            self._mount_disk(limits["max_disk_mb"])  # never under a waiting child
        if os.path.lexists(self.nextdir):
            _rmtree(self.nextdir)
        os.mkdir(self.nextdir, 0o700)
        try:
            return self._fork_child(limits)
        except BaseException:
            _rmtree(self.nextdir)
            raise

    def _fork_child(self, limits: dict[str, Any]) -> Pending:
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        st_r, st_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        # the child enters its dir through this handle: the dir may be renamed before it gets there
        dir_fd = os.open(self.nextdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        vsize = _own_vsize()
        pid = -1
        pipes = (stdin_r, stdin_w, out_r, out_w, err_r, err_w, st_r, st_w, go_r, go_w, dir_fd)
        if self.pidns:
            _linux.unshare(_linux.CLONE_NEWPID)
        try:
            pid = os.fork()
        except OSError:
            for fd in pipes:
                os.close(fd)
            raise
        finally:
            if self.pidns and pid != 0 and self.own_pidns is not None:
                _linux.setns(self.own_pidns, _linux.CLONE_NEWPID)
        if pid == 0:  # ------------------------------------------------ the child
            self._child(limits, vsize, stdin_r, out_w, err_w, st_w, go_r, dir_fd)
        for fd in (stdin_r, out_w, err_w, st_w, go_r, dir_fd):
            os.close(fd)
        return Pending(pid, setup_key(limits), stdin_w, out_r, err_r, st_r, go_w)

    def _run_once(self, req: dict[str, Any], limits: dict[str, Any], cpu_budget: float) -> dict[str, Any]:
        if self.pending is not None and self.pending.key != setup_key(limits):
            self.discard_pending()  # it was set up for other limits
        p = self.pending or self._spawn(limits)
        self.pending = None
        self.expected = limits
        self._activate()
        _child.write_source(req["code"], self.workdir)
        oom_before = 0
        if self.cgroup is not None:
            self.cgroup.set_limit(limits["memory_mb"] * 1024 * 1024)
            self.cgroup.reset_peak()
            oom_before = self.cgroup.oom_kills()
        payload = json.dumps({"code": req["code"], "seed": limits["random_seed"]}).encode()
        try:
            try:
                _write_all(p.go_w, struct.pack("<I", len(payload)) + payload)
            except OSError:
                pass  # the child died waiting; the monitor reports its status as a setup failure
            os.close(p.go_w)
            outcome = _monitor.watch(
                _monitor.Watch(
                    pid=p.pid,
                    stdout_fd=p.out_r,
                    stderr_fd=p.err_r,
                    stdin_fd=p.stdin_w,
                    stdin_data=req.get("stdin", "").encode("utf-8", "surrogateescape"),
                    timeout_s=limits["timeout_s"],
                    cpu_time_s=cpu_budget,
                    max_output_bytes=limits["max_output_bytes"],
                    kill_on_overflow=limits["on_output_overflow"] == "kill",
                    status_fd=p.st_r,
                    kill=self._killer(p.pid),
                    # fork the next run's child while this one runs (for the limits just set as
                    # expected); only with a pid namespace per run: without one, the clean-up
                    # after a run would take the waiting child with it
                    on_start=self.prefork if self.pidns else None,
                )
            )
        finally:
            for fd in (p.out_r, p.err_r, p.st_r):
                os.close(fd)
            self._kill_leftovers(p.pid)
            self._clean_workdir()
        peak = self.cgroup.peak_bytes() if self.cgroup is not None else None
        oom_killed = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
        return _monitor.result_dict(outcome, limits, peak_bytes=peak, oom_killed=oom_killed, cpu_budget=cpu_budget)

    def _killer(self, pid: int) -> Any:
        def kill(sig: int) -> None:
            try:
                if self.pidns:
                    os.kill(pid, sig)  # PID 1 of its namespace: the kernel takes the rest
                else:
                    os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

        return kill

    def _child(self, limits: dict[str, Any], vsize: int, stdin_r: int, out_w: int, err_w: int, st_w: int,
               go_r: int, dir_fd: int) -> None:  # fmt: skip
        """The forked child: set up completely for ``limits``, then wait for the program."""
        status_fd = st_w
        try:
            os.fchdir(dir_fd)  # our dir, whatever its name is by now (it becomes the work dir)
            _child.set_process_name("code-env-run")
            os.setsid()
            if self.cgroup is not None and self.cgroup.procs is not None:
                os.write(self.cgroup.procs, b"0")  # "0": the writer itself, in any pid namespace
            os.dup2(stdin_r, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.dup2(st_w, 3)
            status_fd = 3
            os.dup2(go_r, 4)
            os.closerange(5, _max_fd())
            cpu = limits["cpu_time_s"] if limits.get("cpu_time_s") is not None else limits["timeout_s"]
            _apply_rlimits(limits, cpu, vsize, use_as=self.cgroup is None, nproc=self.uid_switch)
            if self.uid_switch:
                for fd in (0, 1, 2):  # our pipes: /dev/stdin, /proc/self/fd/1 ... must open for the run
                    os.fchown(fd, self.uid, self.gid)
                os.setgroups([])
                os.setresgid(self.gid, self.gid, self.gid)
                os.setresuid(self.uid, self.uid, self.uid)
            _child.prctl(_child.PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
            self.filters[limits["max_processes"] > 1].install()  # the environment is already the run's
            # wait for the program (the worker may keep us waiting for a long time)
            (n,) = struct.unpack("<I", _read_exact(4, 4))
            payload = json.loads(_read_exact(4, n))
            os.close(4)
            os.write(3, b"R")
            os.close(3)
        except BaseException as exc:
            try:
                os.write(status_fd, ("E" + f"child setup failed: {type(exc).__name__}: {exc}").encode())
            finally:
                os._exit(SETUP_FAILED)
        status = 1
        try:
            status = _child.run_program(payload["code"], int(payload["seed"]))
        finally:
            os._exit(status)


def setup_key(limits: dict[str, Any]) -> tuple[Any, ...]:
    """What a waiting child has already applied: a request with other values needs another child."""
    return tuple(limits[k] for k in SETUP_FIELDS)


SETUP_FIELDS = ("timeout_s", "cpu_time_s", "memory_mb", "max_file_bytes", "max_disk_mb", "max_open_files",
                "max_processes", "max_threads")  # fmt: skip


class Pending:
    """A forked child waiting for its program, and the worker's ends of its pipes."""

    __slots__ = ("err_r", "go_w", "key", "out_r", "pid", "st_r", "stdin_w")

    def __init__(self, pid: int, key: tuple[Any, ...], stdin_w: int, out_r: int, err_r: int, st_r: int, go_w: int) -> None:
        self.pid, self.key = pid, key
        self.stdin_w, self.out_r, self.err_r, self.st_r, self.go_w = stdin_w, out_r, err_r, st_r, go_w

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.stdin_w, self.out_r, self.err_r, self.st_r, self.go_w)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _rmtree(path: str) -> None:
    """Remove a file or a directory tree without following symlinks (root: permissions don't stop us)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not (st.st_mode & 0o170000 == 0o040000):
        os.unlink(path)
        return
    with os.scandir(path) as it:
        entries = list(it)
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            _rmtree(e.path)
        else:
            try:
                os.unlink(e.path)
            except FileNotFoundError:
                pass
    os.rmdir(path)


def _apply_rlimits(limits: dict[str, Any], cpu_budget: float, vsize: int, *, use_as: bool, nproc: bool) -> None:
    cpu = math.ceil(cpu_budget) + 1
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, (limits["max_file_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
    ]
    if nproc:  # counted per real uid: only meaningful when the run has a uid of its own
        n = limits["max_processes"] + limits["max_threads"] + 1  # + the next run's waiting child
        pairs.append((resource.RLIMIT_NPROC, (n, n)))
    if use_as:
        limit = vsize + limits["memory_mb"] * 1024 * 1024
        pairs.append((resource.RLIMIT_AS, (limit, limit)))
    for res, val in pairs:
        resource.setrlimit(res, val)


def _own_vsize() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _max_fd() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft < 1 << 20 else 1 << 20


# ----------------------------------------------------------------------------- serving


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _send(fd: int, obj: dict[str, Any]) -> None:
    data = json.dumps(obj, ensure_ascii=True).encode()
    view = memoryview(struct.pack("<I", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def serve() -> None:
    cfg = json.loads(sys.argv[1])
    _child.set_process_name("code-env-worker")
    # Requests arrive on fd 0 and answers leave on fd 1; nothing else may write there.
    req_fd = os.dup(0)
    resp_fd = os.dup(1)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(resp_fd, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    # No PR_SET_PDEATHSIG here: it fires when the host *thread* that started us ends. The worker
    # ends when its request pipe closes (the host closed it, or died).
    try:
        worker = Worker(cfg)
    except BaseException as exc:
        import traceback

        _send(resp_fd, {"ready": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        return
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
            worker.info.setdefault("preload_failed", []).append(name)
    # From here on this interpreter is the template of every run; the worker itself uses only the
    # fds it holds (req_fd, resp_fd, its log on fd 2), never sys.std*.
    _child.prepare_interpreter(worker.workdir)
    worker.prefork()
    _send(resp_fd, {"ready": True, "info": worker.info, "next_pid": worker.pending_pid()})
    while True:
        try:
            (n,) = struct.unpack("<I", _read_exact(req_fd, 4))
            req = json.loads(_read_exact(req_fd, n))
        except EOFError:
            worker.discard_pending()
            return
        if req.get("op") == "exit":
            worker.discard_pending()
            return
        started = time.monotonic()
        try:
            res = worker.run(req)
        except BaseException as exc:
            import traceback

            res = {"sandbox_error": f"worker error: {type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            try:
                worker.discard_pending()
                worker._clean_workdir()
            except BaseException:
                pass
        res["worker_ms"] = round((time.monotonic() - started) * 1000, 3)
        res["next_pid"] = worker.pending_pid()
        _send(resp_fd, res)
        if worker.pending is None:
            worker.prefork()  # not forked during the run (no pid namespace, or it failed)


if __name__ == "__main__":
    serve()
