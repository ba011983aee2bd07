"""Host-side resources of a sandbox slot: a private uid/gid (locked so that no two slots on this
machine share one, even across processes), a memory cgroup, and the clean-up of both.

Where a slot's memory cgroups live (``memory_cgroup_parent``): as root, under root's own memory
cgroup; as a normal user, under ``$CODE_ENV_CGROUP`` (a cgroup delegated to it; unusable is an
error, never a silent fall-back) or under its own memory cgroup where it may make children there;
else none, and memory is the monitor's (``_monitor.TreeMemory``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass

UID_BASE = 1_600_000_000
UID_SPAN = 65_536
# One fixed place per user, whatever $TMPDIR says: two sandboxes that saw different temp dirs
# must still never lease the same uid.
_RUNTIME = os.environ.get("XDG_RUNTIME_DIR")
LOCK_DIR = (
    "/run/code-env-uids" if os.geteuid() == 0
    else os.path.join(_RUNTIME, "code-env-uids") if _RUNTIME else f"/tmp/code-env-uids-{os.getuid()}"
)


@dataclass
class UidLease:
    uid: int
    fd: int

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def lease_uid() -> UidLease:
    """An unprivileged uid no other live sandbox slot on this machine holds (flock'ed)."""
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    start = (os.getpid() * 7919) % UID_SPAN
    for i in range(UID_SPAN):
        k = (start + i) % UID_SPAN
        path = os.path.join(LOCK_DIR, f"{k}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(UID_BASE + k, fd)
    raise RuntimeError(f"no free sandbox uid in {UID_BASE}..{UID_BASE + UID_SPAN}")


def uid_processes(uid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose real uid is ``uid``."""
    import psutil

    pids = []
    for p in psutil.process_iter(["uids", "status"]):
        try:
            if p.info["uids"] is not None and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE:
                pids.append(p.pid)
        except (psutil.Error, AttributeError):
            continue
    return pids


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (root only): ``kill -9 -1`` run as ``uid`` (so the kernel
    picks exactly that uid's processes, in every namespace), until none is left."""
    if os.geteuid() != 0:
        return
    kill = shutil.which("kill") or "/bin/kill"
    for _ in range(20):
        if not uid_processes(uid):
            return
        subprocess.run(
            [kill, "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
        time.sleep(0.01)


CGROUP_ENV = "CODE_ENV_CGROUP"
MONITOR = "memory is the monitor's (resident memory polled, killed over the limit)"
SYSTEMD_HINT = ("with systemd, start a shell with `systemd-run --user --scope -p Delegate=yes bash`, move it "
                "into a leaf of its scope (mkdir $SCOPE/main; echo $$ > $SCOPE/main/cgroup.procs) and set "
                + CGROUP_ENV + "=$SCOPE")  # fmt: skip


@dataclass
class CgroupInfo:
    """A memory cgroup. ``origin``: ``"own"`` (under the caller's own memory cgroup) or
    ``"delegated"`` (under ``$CODE_ENV_CGROUP``)."""

    path: str
    version: int
    origin: str = "own"


def memory_mode(cgroups: list[CgroupInfo], reason: str | None) -> str:
    """How memory is limited, in words (the ``memory`` entry of a backend's ``isolation``)."""
    if not cgroups:
        return f"no cgroup: {reason or 'none was made'}; {MONITOR}"
    cg = cgroups[0]
    return f"cgroup v{cg.version} at {os.path.dirname(cg.path)} ({cg.origin})"


def _own_memory_cgroup() -> CgroupInfo | None:
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    v2_path = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory"
            if os.path.isdir(base):
                return CgroupInfo(os.path.normpath(base + path), 1)
        if controllers == "":
            v2_path = path
    if v2_path is not None:
        for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
            ctl = os.path.join(base, "cgroup.controllers")
            if os.path.exists(ctl):
                with open(ctl) as fh:
                    if "memory" in fh.read().split():
                        return CgroupInfo(os.path.normpath(base + v2_path), 2)
    return None


def _text(path: str) -> str:
    """The file's text; empty when it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _writable(path: str) -> str | None:
    """None if this user may write ``path``, else why not (its owner and mode)."""
    if os.access(path, os.W_OK):
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    return f"{path} is not writable by uid {os.geteuid()} (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)})"


def _v2_own_cgroup_path() -> str | None:
    """This process's cgroup v2 path, as a directory under the v2 mount, if any."""
    for line in _text("/proc/self/cgroup").splitlines():
        hier, controllers, path = line.split(":", 2)
        if hier == "0" and controllers == "":
            for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                if os.path.exists(os.path.join(base, "cgroup.controllers")):
                    return os.path.normpath(base + path)
    return None


def _unusable(path: str, version: int) -> str | None:
    """Why this (non-root) user cannot make memory cgroups under ``path`` and move its runs into
    them, or None. Checks what the kernel will check: write permission on the directory (mkdir),
    and for v2 the memory controller in ``cgroup.controllers``, enabled (or enable-able) in
    ``cgroup.subtree_control``, and write permission on the ``cgroup.procs`` of the common ancestor
    of our cgroup and the target (v1 checks only that the mover's uid is the moved process's)."""
    if version == 2 and "memory" not in _text(os.path.join(path, "cgroup.controllers")).split():
        return (f"the memory controller is not in {path}/cgroup.controllers (its parent does not delegate it: "
                "memory is not enabled in the parent's cgroup.subtree_control)")  # fmt: skip
    why = _writable(path) if os.access(path, os.X_OK) else f"{path} cannot be entered by uid {os.geteuid()}"
    if why is not None:
        return f"{why}: no child cgroup can be made there"
    if version == 1:
        return None
    ctl = os.path.join(path, "cgroup.subtree_control")
    if "memory" not in _text(ctl).split():
        if _text(os.path.join(path, "cgroup.procs")).split():
            return (f"{path} holds processes, and cgroup v2 lets a cgroup with processes in it enable no "
                    f"controller for its children (memory is not in {ctl}); {SYSTEMD_HINT}")  # fmt: skip
        why = _writable(ctl)
        if why is not None:
            return f"memory is not enabled in {ctl}, and {why}"
    own = _v2_own_cgroup_path()
    if own is not None:
        common = os.path.commonpath([own, path])
        why = _writable(os.path.join(common, "cgroup.procs"))
        if why is not None:
            return (f"a run cannot be moved from {own} into a cgroup under {path}: cgroup v2 needs write permission "
                    f"on the cgroup.procs of their common ancestor, and {why}")  # fmt: skip
    return None


def _delegated(path: str) -> CgroupInfo:
    """``$CODE_ENV_CGROUP``, checked: the cgroup, or ``CgroupUnusableError``."""
    from .errors import CgroupUnusableError

    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise CgroupUnusableError(path, "it is not a directory")
    if os.path.exists(os.path.join(real, "cgroup.controllers")):
        version = 2
    elif os.path.exists(os.path.join(real, "memory.limit_in_bytes")):
        version = 1
    elif os.path.exists(os.path.join(real, "tasks")):
        raise CgroupUnusableError(path, "it is a cgroup v1 directory of another hierarchy than memory's "
                                        "(no memory.limit_in_bytes)")  # fmt: skip
    else:
        raise CgroupUnusableError(path, "it is not a cgroup directory (no cgroup.controllers, no memory.limit_in_bytes)")
    why = _unusable(real, version)
    if why is not None:
        raise CgroupUnusableError(path, why)
    return CgroupInfo(real, version, "delegated")


def memory_cgroup_parent() -> tuple[CgroupInfo | None, str | None]:
    """The cgroup under which this process makes its slots' memory cgroups, or None and why not.

    Root: its own memory cgroup. A normal user: ``$CODE_ENV_CGROUP`` if set (a cgroup it may
    write; else ``CgroupUnusableError``, never a silent fallback), or its own memory cgroup where
    it may make children with a memory limit there, or None with the precise reason."""
    if os.geteuid() == 0:
        own = _own_memory_cgroup()
        return (own, None) if own is not None else (None, "no memory cgroup controller")
    explicit = os.environ.get(CGROUP_ENV)
    if explicit:
        return _delegated(explicit), None
    own = _own_memory_cgroup()
    if own is None:
        return None, "no memory cgroup controller"
    why = _unusable(own.path, own.version)
    if why is not None:
        hint = f"set {CGROUP_ENV} to a memory cgroup delegated to uid {os.geteuid()}"
        if own.version == 1:
            hint += f" (as root: mkdir {os.path.join(own.path, 'code-env')} and chown -R {os.geteuid()} it)"
        return None, f"not root, and its own memory cgroup (v{own.version}) is not delegated to it: {why}; {hint}"
    return own, None


def make_cgroup(name: str) -> tuple[CgroupInfo | None, str | None]:
    """Create a memory cgroup for one slot; returns it, or None and why not. Raises
    ``CgroupUnusableError`` when ``$CODE_ENV_CGROUP`` is set (a normal user) and unusable."""
    parent, why = memory_cgroup_parent()
    if parent is None:
        return None, why
    path = os.path.join(parent.path, name)
    try:
        if parent.version == 2:
            ctl = os.path.join(parent.path, "cgroup.subtree_control")
            with open(ctl) as fh:
                enabled = fh.read().split()
            if "memory" not in enabled:
                with open(ctl, "w") as fh:
                    fh.write("+memory")
        os.makedirs(path, exist_ok=True)
        limit_file = "memory.limit_in_bytes" if parent.version == 1 else "memory.max"
        for f in (limit_file, "cgroup.procs"):
            if not os.access(os.path.join(path, f), os.W_OK):
                raise PermissionError(f"{os.path.join(path, f)} is missing or not writable by uid {os.geteuid()}")
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        why = f"cannot create a memory cgroup in {parent.path} ({exc})"
        if parent.origin == "delegated":
            from .errors import CgroupUnusableError

            raise CgroupUnusableError(os.environ.get(CGROUP_ENV, parent.path), why) from None
        return None, why
    return CgroupInfo(path, parent.version, parent.origin), None


def remove_cgroup(info: CgroupInfo | None) -> None:
    if info is None:
        return
    for _ in range(100):
        try:
            os.rmdir(info.path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
