"""A memory cgroup delegated to a normal user (``CODE_ENV_CGROUP``): as ``nobody``, both backends
make their memory cgroups under it and move every run in, exactly as root does under its own.

The test (root) makes a subtree under its own memory cgroup (cgroup v1), hands it to ``nobody``
(``chown -R``: the directory and its files) and runs the sandbox as ``nobody`` with
``CODE_ENV_CGROUP`` naming it. What the runs were charged is read on the host, from the kernel's
counters of that subtree, while the ``nobody`` process waits: never from the sandbox's own report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import _host

from ._nobody import NOBODY, REPO, as_nobody, nobody_argv

MIB = 2**20
OWN = _host._own_memory_cgroup() if os.geteuid() == 0 else None
NO_V1 = "the machine has no cgroup v1 memory hierarchy (/sys/fs/cgroup/memory and a memory line in /proc/self/cgroup)"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the test delegates a cgroup to nobody, which takes root"),
    pytest.mark.skipif(not shutil.which("setpriv") or not shutil.which("unshare"), reason="needs util-linux setpriv and unshare"),
    pytest.mark.skipif(OWN is None or OWN.version != 1, reason=NO_V1),
]

BACKENDS = [pytest.param("process"), pytest.param("nsjail", marks=pytest.mark.nsjail)]

# as nobody: one Sandbox; for each program named on stdin, one run and its verdict on stdout, then
# wait for the next line (meanwhile the test reads the cgroup's counters)
SERVE = r"""
import json, sys
from sandbox import Limits, Sandbox
PROGRAMS = {
    "bomb": ("b = bytearray(400 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('allocated')", 64),
    # 200 MiB in a file of the work dir (a tmpfs): memory no process of the run maps
    "tmpfs": ("import time\nwith open('held', 'wb') as f:\n    for _ in range(200):\n        f.write(b'x' * (1 << 20))\n"
              "print('held', flush=True)\ntime.sleep(4)", 128),
}
with Sandbox(sys.argv[1], workers=1) as sb:
    print(json.dumps({"memory": sb.isolation["memory"]}), flush=True)
    for line in sys.stdin:
        code, mb = PROGRAMS[line.strip()]
        r = sb.run(code, limits=Limits(timeout_s=6, memory_mb=mb, max_disk_mb=512, max_file_bytes=300 << 20))
        print(r.model_dump_json(), flush=True)
"""


def _cgroup_dirs(root: Path) -> list[Path]:
    """``root`` and every cgroup below it, children first."""
    return [Path(d) for d, _, _ in os.walk(root, topdown=False)]


@pytest.fixture
def delegated() -> Iterator[Path]:
    """A memory cgroup (v1) under ours, owned by nobody; removed with whatever was made in it."""
    assert OWN is not None
    path = Path(OWN.path) / f"code-env-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        for d, _, files in os.walk(path):
            os.chown(d, NOBODY, NOBODY)
            for f in files:
                os.chown(os.path.join(d, f), NOBODY, NOBODY)
        yield path
    finally:
        for d in _cgroup_dirs(path):
            for _ in range(200):  # a cgroup whose last process just died may be busy a moment
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        assert not path.exists(), f"{path} could not be removed"


def _read(path: Path) -> int:
    return int(path.read_text().split()[0])


def _oom_kills(root: Path) -> int:
    """The kernel's OOM kills in ``root``'s subtree (``memory.oom_control``; this kernel's
    ``memory.failcnt`` stays 0 at a v1 limit)."""
    kills = 0
    for d in _cgroup_dirs(root):
        for line in (d / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            kills += int(value) if key == "oom_kill" else 0
    return kills


class Serving:
    """The SERVE snippet as nobody, driven a program at a time."""

    def __init__(self, backend: str, cgroup: Path, tmp: Path, *, own: bool = False) -> None:
        """``cgroup``: delegated through ``CODE_ENV_CGROUP``, or (``own``) the one it starts in."""
        self.backend = backend
        env, start_in = ({}, cgroup) if own else ({"CODE_ENV_CGROUP": str(cgroup)}, None)
        self.proc = subprocess.Popen(
            nobody_argv([sys.executable, "-c", SERVE, backend], tmp=tmp, env=env, cgroup=start_in),
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.info = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"the sandbox as nobody ended: {err[-3000:]}")
        out: dict[str, Any] = json.loads(line)
        return out

    def run(self, name: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.proc.returncode is not None:
            return  # already ended and reaped (_line)
        try:
            self.proc.communicate(timeout=120)  # closes its stdin (it ends), then our ends of its pipes
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()


@pytest.fixture
def serving(request: pytest.FixtureRequest, delegated: Path, nobody_tmp: Path) -> Iterator[Serving]:
    s = Serving(request.param, delegated, nobody_tmp)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_info_reports_the_delegated_cgroup(backend: str, delegated: Path, nobody_tmp: Path) -> None:
    out = as_nobody([sys.executable, "-m", "code_env", "info", "--backend", backend], tmp=nobody_tmp,
                    timeout=180, env={"CODE_ENV_CGROUP": str(delegated)})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout)["isolation"]
    assert info["mode"] == "user namespace", info
    assert info["memory"] == f"cgroup v1 at {delegated} (delegated)", info


def test_a_user_who_owns_its_memory_cgroup_uses_it_without_being_told(delegated: Path, nobody_tmp: Path) -> None:
    serving = Serving("process", delegated, nobody_tmp, own=True)
    try:
        assert serving.info["memory"] == f"cgroup v1 at {delegated} (own)"
        before = _oom_kills(delegated)
        res = serving.run("bomb")
        assert res["oom"] and res["sandbox_error"] is None, res
        assert _oom_kills(delegated) > before  # in the slot's cgroup, read on the host
    finally:
        serving.close()


def test_without_a_delegated_cgroup_info_says_why_memory_is_the_monitors(nobody_tmp: Path) -> None:
    out = as_nobody([sys.executable, "-m", "code_env", "info"], tmp=nobody_tmp, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    memory = json.loads(out.stdout)["isolation"]["memory"]
    assert memory.startswith("no cgroup: ") and memory.endswith("killed over the limit)"), memory
    assert f"{OWN.path if OWN else ''} is not writable by uid {NOBODY}" in memory and "CODE_ENV_CGROUP" in memory


@pytest.mark.parametrize("serving", BACKENDS, indirect=True)
def test_a_memory_bomb_is_held_and_charged_to_the_delegated_cgroup(serving: Serving, delegated: Path) -> None:
    assert serving.info["memory"] == f"cgroup v1 at {delegated} (delegated)"
    before = _oom_kills(delegated)
    (delegated / "memory.max_usage_in_bytes").write_text("0")  # the subtree's peak from now on
    res = serving.run("bomb")
    # on the host: the run's memory went into the subtree, up to its 64 MiB and no further
    peak = _read(delegated / "memory.max_usage_in_bytes")
    assert 48 * MIB < peak <= 72 * MIB, peak / MIB
    assert res["oom"] and res["exit_code"] is None and "allocated" not in res["stdout"], res
    assert res["sandbox_error"] is None, res
    if serving.backend == "process":  # nsjail's run cgroup is gone by now; the process backend's stays
        assert _oom_kills(delegated) > before


@pytest.mark.parametrize("serving", BACKENDS, indirect=True)
def test_memory_held_in_a_tmpfs_file_is_charged_and_killed(serving: Serving, delegated: Path) -> None:
    before = _oom_kills(delegated)
    (delegated / "memory.max_usage_in_bytes").write_text("0")
    res = serving.run("tmpfs")
    peak = _read(delegated / "memory.max_usage_in_bytes")
    # the file's pages are no process's resident memory, yet the subtree was charged up to the limit
    assert 115 * MIB < peak <= 136 * MIB, peak / MIB
    assert res["oom"] and res["exit_code"] is None and "held" not in res["stdout"], res
    assert res["sandbox_error"] is None, res
    if serving.backend == "process":
        assert _oom_kills(delegated) > before


UNUSABLE = r"""
import sys
from sandbox import CgroupUnusableError, Sandbox
try:
    Sandbox(sys.argv[1], workers=1).close()
except CgroupUnusableError as exc:
    print(f"{exc.path}|{exc.missing}|{exc}")
else:
    print("no error")
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["root-owned", "not-a-cgroup", "v2-without-memory"])
def test_an_unusable_cgroup_is_a_clear_error(backend: str, kind: str, delegated: Path, nobody_tmp: Path) -> None:
    if kind == "root-owned":
        target = delegated / "root-owned"
        target.mkdir()  # by root: nobody may not make cgroups in it
        missing = f"{target} is not writable by uid {NOBODY} (owner uid 0, mode drwxr-xr-x)"
    elif kind == "not-a-cgroup":
        target, missing = nobody_tmp, "it is not a cgroup directory"
    else:
        target = Path("/sys/fs/cgroup/unified")
        if not (target / "cgroup.controllers").exists() or "memory" in (target / "cgroup.controllers").read_text():
            pytest.skip("needs a cgroup v2 mount at /sys/fs/cgroup/unified without the memory controller")
        missing = f"the memory controller is not in {target}/cgroup.controllers"
    out = as_nobody([sys.executable, "-c", UNUSABLE, backend], tmp=nobody_tmp, timeout=180,
                    env={"CODE_ENV_CGROUP": str(target)})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    path, why, message = out.stdout.strip().split("|", 2)
    assert path == str(target) and missing in why, out.stdout
    assert message.startswith(f"CODE_ENV_CGROUP={str(target)!r} cannot hold") and "chown -R 65534" in message
    # nothing was left in the subtree
    assert [d for d in _cgroup_dirs(delegated) if d.name.startswith("code-env-") and d != delegated] == []


def test_code_env_info_names_an_unusable_cgroup(delegated: Path, nobody_tmp: Path) -> None:
    target = delegated / "root-owned"
    target.mkdir()
    out = as_nobody([sys.executable, "-m", "code_env", "info"], tmp=nobody_tmp, timeout=180,
                    env={"CODE_ENV_CGROUP": str(target)})  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"CODE_ENV_CGROUP={str(target)!r} cannot hold" in out.stderr and f"uid {NOBODY}" in out.stderr, out.stderr
