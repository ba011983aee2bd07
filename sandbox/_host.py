"""Host-side resources of a sandbox slot: a private uid/gid (locked so that no two slots on this
machine share one, even across processes), a memory cgroup, and the clean-up of both."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
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


@dataclass
class CgroupInfo:
    path: str
    version: int


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


def make_cgroup(name: str) -> tuple[CgroupInfo | None, str | None]:
    """Create a memory cgroup for one slot; returns it, or None and why not."""
    if os.geteuid() != 0:
        return None, "not root: memory is limited with RLIMIT_AS"
    parent = _own_memory_cgroup()
    if parent is None:
        return None, "no memory cgroup controller: memory is limited with RLIMIT_AS"
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
        if not os.path.exists(os.path.join(path, limit_file)):
            raise OSError(f"{limit_file} missing in {path}")
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None, f"cannot create a memory cgroup ({exc}): memory is limited with RLIMIT_AS"
    return CgroupInfo(path, parent.version), None


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
