"""The nsjail backend without root: nsjail's user-namespace mode, checked as uid 65534 (CI runs as
root, so each test drops to ``nobody`` with ``setpriv``, see ``tests/_nobody.py``).

* the nsjail tests of the suites (isolation, adversarial, API, CLI, env) pass again, unprivileged;
* the jail is the same: the same mounts, all read-only but the work dir (and ``/dev/null``), no
  capability, ``no_new_privs``, the seccomp filter, the caller's own uid alone;
* the same program gets the same verdict from nsjail as root (with a memory cgroup, and without
  one), nsjail as uid 65534 and the process backend (memory: the cgroup as root, the monitor's own
  kill without one);
* a kernel that refuses user namespaces (simulated with a seccomp filter) fails closed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.errors import BackendUnavailableError

from ._nobody import NOBODY, REPO, as_nobody


def _nsjail_missing() -> str | None:
    from sandbox._nsjail import find_nsjail

    try:
        find_nsjail()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


NOT_ROOT = ("drops to uid 65534 with setpriv, which needs root (as a normal user, the nsjail tests of the "
            "other files already run unprivileged)")  # fmt: skip
pytestmark = [
    pytest.mark.nsjail,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason=NOT_ROOT),
    pytest.mark.skipif(not shutil.which("setpriv") or not shutil.which("unshare"), reason="needs util-linux setpriv and unshare"),
]



@pytest.fixture(autouse=True)
def _needs_nsjail() -> None:
    missing = _nsjail_missing()
    if missing:
        pytest.skip(f"nsjail backend unavailable: {missing}")


def _json_lines(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    merged: dict[str, object] = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            merged.update(json.loads(line))
    return merged


def _as_root(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL,
                          check=False)  # fmt: skip


# ----------------------------------------------------------------------------- the suites


def test_the_nsjail_suites_pass_as_a_normal_user(nobody_tmp: Path) -> None:
    """Every nsjail test of the other files (tests/test_nsjail_isolation.py, tests/test_adversarial.py,
    tests/test_isolation.py, tests/test_sandbox_api.py, ...), as uid 65534."""
    out = as_nobody([sys.executable, "-m", "pytest", "tests", "-m", "nsjail", "--ignore", "tests/" + Path(__file__).name,
                     "-q", "-p", "no:cacheprovider"], tmp=nobody_tmp, timeout=1500)  # fmt: skip
    tail = (out.stdout + out.stderr)[-4000:]
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and not re.search(r"\d+ (failed|errors?)\b", summary), tail
    # the nsjail tests ran, unprivileged: none skipped for want of the backend
    assert "nsjail backend unavailable" not in out.stdout, tail


# ----------------------------------------------------------------------------- the jail


# Run as root and as uid 65534: what the backend says of itself, and what a program sees of its
# jail: its ids, capabilities, seccomp, and every mount point, each tried for a write and a chmod.
JAIL = r'''
import json, sys
from sandbox import Limits, Sandbox
PROGRAM = r"""
import json, os
status = {k: v.strip() for k, v in (l.split(":", 1) for l in open("/proc/self/status")) if k.startswith(("Cap", "NoNewPrivs", "Seccomp"))}
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    point, opts = f[4].encode().decode("unicode_escape"), f[5].split(",")
    fstype = f[f.index("-") + 1]
    wrote = chmodded = False
    target = point if os.path.isdir(point) else None
    if target and point not in ("/proc",):
        try:
            with open(os.path.join(target, "code-env-probe"), "w") as fh:
                fh.write("x")
            wrote = True
        except OSError:
            pass
    try:
        os.chmod(point, 0o777)
        chmodded = True
    except OSError:
        pass
    mounts.append([point, fstype, "ro" in opts, wrote, chmodded])
print(json.dumps({"ids": [os.getresuid(), os.getresgid(), os.getgroups()], "status": status, "mounts": mounts,
                  "pid": os.getpid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
"""
DAEMON = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(3600)\n"
with Sandbox("nsjail", workers=1) as sb:
    info = sb.isolation
    print(json.dumps({"isolation": {k: v for k, v in info.items() if k != "mounts"}, "uids": sb.uids}))
    for max_processes in (1, 4):
        res = sb.run(PROGRAM, limits=Limits(timeout_s=20, max_processes=max_processes))
        assert res.exit_code == 0 and res.sandbox_error is None, (res.exit_code, res.sandbox_error, res.stderr)
        print(json.dumps({f"jail-{max_processes}": json.loads(res.stdout)}))
    res = sb.run(DAEMON, limits=Limits(timeout_s=20, max_processes=4))
    assert res.exit_code == 0 and res.sandbox_error is None, (res.exit_code, res.sandbox_error, res.stderr)
    # nsjail and its jail are gone: nothing of the run (a double-forked daemon) outlived it
    import psutil
    print(json.dumps({"left": [p.pid for p in psutil.Process().children(recursive=True)]}))
'''


@pytest.fixture(scope="module")
def jails() -> Iterator[dict[str, dict[str, object]]]:
    d = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
    os.chown(d, NOBODY, NOBODY)
    try:
        yield {"root": _json_lines(_as_root([sys.executable, "-c", JAIL], timeout=300)),
               "user": _json_lines(as_nobody([sys.executable, "-c", JAIL], tmp=d, timeout=300))}  # fmt: skip
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_backend_says_it_runs_in_a_user_namespace(jails: dict[str, dict[str, object]]) -> None:
    root, user = jails["root"]["isolation"], jails["user"]["isolation"]
    assert isinstance(root, dict) and isinstance(user, dict)
    assert (root["mode"], user["mode"]) == ("root", "user namespace")
    assert "not root" in user["why"] and "capability" in user["why"]
    assert user["namespaces"] == ["user", *root["namespaces"]]
    assert {"mount", "net", "ipc", "uts", "pid"} <= set(root["namespaces"])
    assert "memory is the monitor's" in str(user["memory"]) and user["seccomp"] and user["uid"] == NOBODY
    assert user["uid_switch"] is False and root["uid_switch"] is True
    assert jails["user"]["uids"] == []  # no private uid: nothing to audit by uid
    assert jails["root"]["left"] == jails["user"]["left"] == []


@pytest.mark.parametrize("jail", ["jail-1", "jail-4"])
def test_the_jail_is_the_same_without_root(jails: dict[str, dict[str, object]], jail: str) -> None:
    root, user = jails["root"][jail], jails["user"][jail]
    assert isinstance(root, dict) and isinstance(user, dict)
    # the same mounts, in the same order, of the same types, read-only alike
    assert [m[:3] for m in user["mounts"]] == [m[:3] for m in root["mounts"]]
    points = {m[0]: m for m in user["mounts"]}
    assert {"/", "/sandbox", "/proc", "/sbx", "/usr"} <= set(points)
    for mode in (root, user):
        for point, fstype, ro, wrote, chmodded in mode["mounts"]:
            if point == "/sandbox":  # the run's own work dir
                assert not ro and wrote, point
            elif point == "/tmp":  # the interpreter lives under /tmp: the run's own /tmp (a tmpfs)
                assert not ro and fstype == "tmpfs" and sys.prefix.startswith("/tmp/"), point
            elif point == "/dev/null":
                assert not wrote, point
            else:
                assert ro and not wrote and not chmodded, (point, fstype)
        # no capability in any set, no way to gain one, the seccomp filter on
        status = mode["status"]
        assert {k: v for k, v in status.items() if k.startswith("Cap")} == dict.fromkeys(
            ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], "0000000000000000"), status  # fmt: skip
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
        # the program is not PID 1 and sees no other process (its init is hidden)
        assert mode["pid"] != 1 and mode["pids"] == [mode["pid"]]
    # the caller's uid, alone (no group), as root the slot's private uid
    assert user["ids"] == [[NOBODY] * 3, [NOBODY] * 3, []]
    root_ids = root["ids"]
    assert isinstance(root_ids, list) and root_ids[0][0] >= 1_600_000_000 and root_ids[2] == []


# ----------------------------------------------------------------------------- verdicts

VERDICTS = r'''
import json, sys
from sandbox import Limits, Sandbox, _host
if sys.argv[2:] == ["no-cgroup"]:  # root on a machine without cgroup v1 memory, simulated
    _host.make_cgroup = lambda name: (None, "no memory cgroup controller")
from tests._nobody import VERDICT_PROGRAMS
PROGRAMS = {
    **VERDICT_PROGRAMS,
    # 16 small processes that share most of their pages: a timeout, not a 16-fold memory bill
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
}
with Sandbox(sys.argv[1], workers=1) as sb:
    print(json.dumps({"mode": sb.isolation.get("mode"), "memory": sb.isolation.get("memory")}))
    lim = Limits(timeout_s=2, memory_mb=256, max_output_bytes=1 << 20)
    out = {}
    for name, code in PROGRAMS.items():
        r = sb.run(code, stdin="abc", limits=lim.model_copy(update={"max_processes": 16}) if "fork" in name else lim)
        out[name] = [r.exit_code, r.signal, r.timeout_hit, r.oom, r.stdout_truncated, r.stdout[:20], r.sandbox_error]
    print(json.dumps({"verdicts": out}))
'''


def test_the_same_program_gets_the_same_verdict_from_nsjail_with_or_without_root(nobody_tmp: Path) -> None:
    nsjail_root = _json_lines(_as_root([sys.executable, "-c", VERDICTS, "nsjail"], timeout=300))
    nsjail_root_monitor = _json_lines(_as_root([sys.executable, "-c", VERDICTS, "nsjail", "no-cgroup"], timeout=300))
    nsjail_user = _json_lines(as_nobody([sys.executable, "-c", VERDICTS, "nsjail"], tmp=nobody_tmp, timeout=300))
    process = _json_lines(_as_root([sys.executable, "-c", VERDICTS, "process"], timeout=300))
    assert (nsjail_root["mode"], nsjail_root_monitor["mode"], nsjail_user["mode"]) == ("root", "root", "user namespace")
    assert all("memory is the monitor's" in str(r["memory"]) for r in (nsjail_user, nsjail_root_monitor))
    runs = {"nsjail as root": nsjail_root, "nsjail as root, no cgroup": nsjail_root_monitor,
            "nsjail as uid 65534": nsjail_user, "process as root": process}  # fmt: skip
    assert len({json.dumps(r["verdicts"], sort_keys=True) for r in runs.values()}) == 1, runs
    verdicts = nsjail_user["verdicts"]
    assert isinstance(verdicts, dict)
    assert verdicts["ok"] == [0, None, False, False, False, "45\n", None]
    assert verdicts["memory-bomb"][3] is True and verdicts["growing-list"][3] is True
    assert verdicts["loop"][2] is True and verdicts["sleep"][2] is True
    assert verdicts["flood"][4] is True and verdicts["sigkill-self"][1] == 9
    assert verdicts["fork-bomb"][2:4] == [True, False]


# ----------------------------------------------------------------------------- fail closed

FAIL_CLOSED = r'''
import json
import pyseccomp as sc  # a kernel without unprivileged user namespaces, simulated
f = sc.SyscallFilter(defaction=sc.ALLOW)
f.add_rule(sc.ERRNO(1), "unshare")
f.add_rule(sc.ERRNO(1), "clone", sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
f.add_rule(sc.ERRNO(38), "clone3")  # ENOSYS: its flags are out of a filter's reach; callers fall back to clone
f.load()
from sandbox import Sandbox
try:
    Sandbox("nsjail", workers=1)
    print(json.dumps({"refused": None}))
except Exception as exc:
    print(json.dumps({"refused": f"{type(exc).__name__}: {exc}"}))
'''


def test_nsjail_fails_closed_where_the_kernel_refuses_user_namespaces(nobody_tmp: Path) -> None:
    out = _json_lines(as_nobody([sys.executable, "-c", FAIL_CLOSED], tmp=nobody_tmp, timeout=120))
    refused = str(out["refused"])
    assert refused.startswith("IsolationUnavailableError"), refused
    assert "user namespace" in refused and "run as root" in refused, refused
    assert "CLONE_NEWUSER" in refused, refused  # nsjail's own words, the cause
