"""Running a command as an unprivileged user. From a root test (CI runs as root) that is uid/gid
65534, no groups, no capabilities; where the interpreter lives under a directory others may not
enter (pyenv under a 0700 ``/root``, say), it is first made reachable in a mount namespace of the
command's own, as it would be on a machine where Python is installed for every user; nothing else
is granted. From a normal user's test it is that user, as is: the command runs directly."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
ROOT = os.geteuid() == 0
USER_UID = NOBODY if ROOT else os.geteuid()  # who ``as_user`` runs things as
USER_GID = NOBODY if ROOT else os.getegid()
# What a checkout needs to run its tests (``copy_checkout``): the packages and pytest's configuration.
CHECKOUT = ["pyproject.toml", "sandbox", "code_env", "registry", "baselines", "tests"]
# Programs whose verdicts must not depend on who runs the sandbox (the verdict-equality tests run
# them as root, as a normal user, in weak mode and on both backends; their scripts import this,
# with the repository as working directory).
VERDICT_PROGRAMS = {
    "ok": "print(sum(range(10)))",
    "exception": "raise ValueError('no')",
    "syntax": "def f(:\n    pass",
    "exit-3": "import sys\nsys.exit(3)",
    "loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(30)",
    "memory-bomb": "b = bytearray(400 << 20)\nb[::4096] = b'x' * len(b[::4096])",
    "growing-list": "x = []\nwhile True:\n    x.append(' ' * (1 << 20))",
    "flood": "import sys\nsys.stdout.write('x' * (5 << 20))",
    "sigkill-self": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    "read-stdin": "print(input()[::-1])",
}


def _closed_ancestor(path: str) -> str | None:
    """The outermost directory above ``path`` that uid 65534 cannot enter, if any."""
    parts = Path(path).resolve().parts
    for i in range(2, len(parts)):
        d = Path(*parts[:i])
        st = d.stat()
        if not st.st_mode & stat.S_IXOTH and not (st.st_uid == NOBODY and st.st_mode & stat.S_IXUSR):
            return str(d)
    return None


def _user_env(tmp: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8"}


def as_nobody(argv: list[str], *, tmp: Path, timeout: float, env: dict[str, str] | None = None,
              cgroup: Path | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``argv`` as uid/gid 65534 (we are root) with HOME and TMPDIR in ``tmp`` (which that user
    must own), ``env`` added to its otherwise fixed environment, started in ``cgroup`` (a v1 or v2
    cgroup directory) if given, in ``cwd``."""
    assert ROOT, "dropping to uid 65534 needs root"
    return subprocess.run(nobody_argv(argv, tmp=tmp, env=env, cgroup=cgroup, cwd=cwd), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL, check=False)  # fmt: skip


def nobody_argv(argv: list[str], *, tmp: Path, env: dict[str, str] | None = None,
                cgroup: Path | None = None, cwd: Path = REPO) -> list[str]:  # fmt: skip
    """The command that runs ``argv`` as ``as_nobody`` does (for a ``Popen`` with cwd ``cwd``)."""
    script = ["mount --make-rprivate /"]
    if cgroup is not None:
        script.append(f"echo $$ > {shlex.quote(str(cgroup / 'cgroup.procs'))}")  # the shell, then what it execs
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), str(cwd)}):
        closed = _closed_ancestor(prefix)
        if closed is None:
            continue
        stage = f"/run/code-env-stage{len(script)}"
        script += [f"mkdir -p {stage}", f"mount --bind {shlex.quote(prefix)} {stage}",
                   f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(closed)}",
                   f"mkdir -p {shlex.quote(prefix)}", f"mount --bind {stage} {shlex.quote(prefix)}"]  # fmt: skip
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--", "env", "-i",
            *[f"{k}={v}" for k, v in {**_user_env(tmp), **(env or {})}.items()], *argv]  # fmt: skip
    script.append("exec " + shlex.join(drop))
    return ["unshare", "-m", "sh", "-c", " && ".join(script)]


def as_user(argv: list[str], *, tmp: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as a normal user with HOME and TMPDIR in ``tmp`` and nothing else of our
    environment: as root, uid 65534 (``as_nobody``); as a normal user, ourselves."""
    if ROOT:
        return as_nobody(argv, tmp=tmp, timeout=timeout)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=_user_env(tmp),
                          stdin=subprocess.DEVNULL, check=False)  # fmt: skip


def as_root(argv: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ourselves (the caller checks we are root), in the repository."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL,
                          check=False)  # fmt: skip


def can_drop() -> str | None:
    """Why ``as_user`` cannot run here, if it cannot (as root it needs util-linux)."""
    if ROOT and not (shutil.which("setpriv") and shutil.which("unshare")):
        return "dropping to uid 65534 needs util-linux setpriv and unshare"
    return None


def copy_checkout(dst: Path) -> Path:
    """A copy of what this checkout needs to run its tests (``CHECKOUT``), under ``dst``, owned by
    uid 65534 (a git worktree's files need not be readable by others)."""
    repo = dst / "repo"
    repo.mkdir()
    for name in CHECKOUT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, repo / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))  # fmt: skip
        else:
            shutil.copy2(src, repo / name)
    for d, dirs, files in os.walk(dst):
        for n in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.lchown(n, NOBODY, NOBODY)
    return repo
