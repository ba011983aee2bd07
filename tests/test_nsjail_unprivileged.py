"""The nsjail backend without root: nsjail's user-namespace mode, checked as a normal user (as root,
CI, each test drops to ``nobody`` with ``setpriv``; as a normal user, it runs as that user directly:
``tests._nobody.as_user``; the comparisons with nsjail as root are then left out).

* the nsjail tests of the suites (isolation, adversarial, API, CLI, env) pass again, unprivileged;
* the jail is the same: the same mounts, all read-only but the work dir (and ``/dev/null``), no
  capability, ``no_new_privs``, the seccomp filter, the caller's own uid alone;
* the same program gets the same verdict from nsjail as root (with a memory cgroup, and without
  one), nsjail as a normal user and the process backend (memory: the cgroup as root, the monitor's
  own kill without one);
* a kernel that refuses user namespaces (simulated with a seccomp filter) fails closed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.errors import BackendUnavailableError

from ._nobody import ROOT, USER_GID, USER_UID, as_root, as_user, can_drop


def _nsjail_missing() -> str | None:
    from sandbox._nsjail import find_nsjail

    try:
        find_nsjail()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


pytestmark = [pytest.mark.nsjail, pytest.mark.slow, pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))]
NEEDS_ROOT = "compares with nsjail run as root, which needs root"


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


# ----------------------------------------------------------------------------- the suites


@pytest.mark.skipif(not ROOT, reason="already a normal user: the nsjail tests of the other files run directly as this user")
def test_the_nsjail_suites_pass_as_a_normal_user(nobody_tmp: Path) -> None:
    """Every nsjail test of the other files (tests/test_nsjail_isolation.py, tests/test_adversarial.py,
    tests/test_isolation.py, tests/test_sandbox_api.py, ...), as uid 65534."""
    out = as_user([sys.executable, "-m", "pytest", "tests", "-m", "nsjail", "--ignore", "tests/" + Path(__file__).name,
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
    """What nsjail shows as a normal user, and (when we are root) as root."""
    d = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
    if ROOT:
        shutil.chown(d, USER_UID, USER_UID)
    try:
        out = {"user": _json_lines(as_user([sys.executable, "-c", JAIL], tmp=d, timeout=300))}
        if ROOT:
            out["root"] = _json_lines(as_root([sys.executable, "-c", JAIL], timeout=300))
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_backend_says_it_runs_in_a_user_namespace(jails: dict[str, dict[str, object]]) -> None:
    user = jails["user"]["isolation"]
    assert isinstance(user, dict)
    assert user["mode"] == "user namespace"
    assert "not root" in user["why"] and "capability" in user["why"]
    assert user["namespaces"][0] == "user" and {"mount", "net", "ipc", "uts", "pid"} <= set(user["namespaces"])
    assert "memory is the monitor's" in str(user["memory"]) and user["seccomp"] and user["uid"] == USER_UID
    assert user["uid_switch"] is False
    assert jails["user"]["uids"] == []  # no private uid: nothing to audit by uid
    assert jails["user"]["left"] == []


@pytest.mark.skipif(not ROOT, reason=NEEDS_ROOT)
def test_the_backend_as_root_differs_only_by_the_user_namespace(jails: dict[str, dict[str, object]]) -> None:
    root, user = jails["root"]["isolation"], jails["user"]["isolation"]
    assert isinstance(root, dict) and isinstance(user, dict)
    assert root["mode"] == "root" and user["namespaces"] == ["user", *root["namespaces"]]
    assert root["uid_switch"] is True and jails["root"]["left"] == []


@pytest.mark.parametrize("jail", ["jail-1", "jail-4"])
def test_the_jail_is_locked_down_without_root(jails: dict[str, dict[str, object]], jail: str) -> None:
    """As a normal user, and (when we are root) as root alike."""
    for who, mode in jails.items():
        view = mode[jail]
        assert isinstance(view, dict), who
        assert {"/", "/sandbox", "/proc", "/sbx", "/usr"} <= {m[0] for m in view["mounts"]}, (who, view["mounts"])
        for point, fstype, ro, wrote, chmodded in view["mounts"]:
            if point == "/sandbox":  # the run's own work dir
                assert not ro and wrote, (who, point)
            elif point == "/tmp":  # the interpreter lives under /tmp: the run's own /tmp (a tmpfs)
                assert not ro and fstype == "tmpfs" and sys.prefix.startswith("/tmp/"), (who, point)
            elif point == "/dev/null":
                assert not wrote, (who, point)
            else:
                assert ro and not wrote and not chmodded, (who, point, fstype)
        # no capability in any set, no way to gain one, the seccomp filter on
        status = view["status"]
        assert {k: v for k, v in status.items() if k.startswith("Cap")} == dict.fromkeys(
            ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], "0000000000000000"), (who, status)  # fmt: skip
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", (who, status)
        # the program is not PID 1 and sees no other process (its init is hidden)
        assert view["pid"] != 1 and view["pids"] == [view["pid"]], who
    # the caller's uid, alone (no group)
    user = jails["user"][jail]
    assert isinstance(user, dict)
    assert user["ids"] == [[USER_UID] * 3, [USER_GID] * 3, []]


@pytest.mark.skipif(not ROOT, reason=NEEDS_ROOT)
@pytest.mark.parametrize("jail", ["jail-1", "jail-4"])
def test_the_jail_is_the_same_without_root(jails: dict[str, dict[str, object]], jail: str) -> None:
    root, user = jails["root"][jail], jails["user"][jail]
    assert isinstance(root, dict) and isinstance(user, dict)
    # the same mounts, in the same order, of the same types, read-only alike
    assert [m[:3] for m in user["mounts"]] == [m[:3] for m in root["mounts"]]
    # as root, the slot's private uid, alone
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
    """nsjail and the process backend as a normal user; as root (when we are) nsjail with and without
    a memory cgroup and the process backend again."""
    runs = {"nsjail as a normal user": _json_lines(as_user([sys.executable, "-c", VERDICTS, "nsjail"], tmp=nobody_tmp, timeout=300)),
            "process as a normal user": _json_lines(as_user([sys.executable, "-c", VERDICTS, "process"], tmp=nobody_tmp, timeout=300))}  # fmt: skip
    nsjail_user = runs["nsjail as a normal user"]
    assert nsjail_user["mode"] == "user namespace" and "memory is the monitor's" in str(nsjail_user["memory"]), nsjail_user
    if ROOT:
        runs["nsjail as root"] = _json_lines(as_root([sys.executable, "-c", VERDICTS, "nsjail"], timeout=300))
        runs["nsjail as root, no cgroup"] = _json_lines(as_root([sys.executable, "-c", VERDICTS, "nsjail", "no-cgroup"], timeout=300))
        runs["process as root"] = _json_lines(as_root([sys.executable, "-c", VERDICTS, "process"], timeout=300))
        assert runs["nsjail as root"]["mode"] == runs["nsjail as root, no cgroup"]["mode"] == "root", runs
        assert "memory is the monitor's" in str(runs["nsjail as root, no cgroup"]["memory"]), runs
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
    out = _json_lines(as_user([sys.executable, "-c", FAIL_CLOSED], tmp=nobody_tmp, timeout=120))
    refused = str(out["refused"])
    assert refused.startswith("IsolationUnavailableError"), refused
    assert "user namespace" in refused and "run as root" in refused, refused
    assert "CLONE_NEWUSER" in refused, refused  # nsjail's own words, the cause
