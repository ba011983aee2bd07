"""Running a command as an unprivileged user from a root test (CI runs as root): uid/gid 65534, no
groups, no capabilities. Where the interpreter lives under a directory others may not enter (pyenv
under a 0700 ``/root``, say), it is first made reachable in a mount namespace of the command's own,
as it would be on a machine where Python is installed for every user; nothing else is granted."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
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
    """The outermost directory above ``path`` that others cannot enter, if any."""
    parts = Path(path).resolve().parts
    for i in range(2, len(parts)):
        d = Path(*parts[:i])
        if not d.stat().st_mode & stat.S_IXOTH:
            return str(d)
    return None


def as_nobody(argv: list[str], *, tmp: Path, timeout: float, env: dict[str, str] | None = None,
              cgroup: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``argv`` as uid/gid 65534 with HOME and TMPDIR in ``tmp`` (which that user must own),
    ``env`` added to its otherwise fixed environment, and started in ``cgroup`` (a v1 or v2 cgroup
    directory) if given."""
    return subprocess.run(nobody_argv(argv, tmp=tmp, env=env, cgroup=cgroup), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL, check=False)  # fmt: skip


def nobody_argv(argv: list[str], *, tmp: Path, env: dict[str, str] | None = None,
                cgroup: Path | None = None) -> list[str]:  # fmt: skip
    """The command that runs ``argv`` as ``as_nobody`` does (for a ``Popen`` with cwd ``REPO``)."""
    script = ["mount --make-rprivate /"]
    if cgroup is not None:
        script.append(f"echo $$ > {shlex.quote(str(cgroup / 'cgroup.procs'))}")  # the shell, then what it execs
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), str(REPO)}):
        closed = _closed_ancestor(prefix)
        if closed is None:
            continue
        stage = f"/run/code-env-stage{len(script)}"
        script += [f"mkdir -p {stage}", f"mount --bind {shlex.quote(prefix)} {stage}",
                   f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(closed)}",
                   f"mkdir -p {shlex.quote(prefix)}", f"mount --bind {stage} {shlex.quote(prefix)}"]  # fmt: skip
    fixed = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "TMPDIR": str(tmp),
             "LANG": "C.UTF-8"}  # fmt: skip
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--", "env", "-i", *[f"{k}={v}" for k, v in {**fixed, **(env or {})}.items()],
            *argv]  # fmt: skip
    script.append("exec " + shlex.join(drop))
    return ["unshare", "-m", "sh", "-c", " && ".join(script)]
