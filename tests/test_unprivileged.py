"""The same isolation without root: the containment suites and the main job, run as an
unprivileged user. As root (CI), each test drops to ``nobody`` with ``setpriv``; as a normal user,
it runs as that user directly (``tests._nobody.as_user``), and only the comparisons with root are
left out.

Where the interpreter lives under a directory ``nobody`` may not enter (pyenv under a 0700
``/root``, say), the root test first makes it reachable in a mount namespace of its own, as it would
be on a machine where Python is installed for every user; nothing else is granted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._nobody import ROOT, as_root, as_user, can_drop

pytestmark = [pytest.mark.slow, pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))]

CONTAINMENT = ["tests/test_adversarial.py", "tests/test_isolation.py", "tests/test_sandbox_api.py", "tests/test_languages_run.py",
               "tests/test_languages_compiled.py"]


@pytest.mark.skipif(not ROOT, reason=f"already a normal user: {', '.join(CONTAINMENT)} run directly as this user")
def test_the_containment_suites_pass_as_a_normal_user(nobody_tmp: Path) -> None:
    out = as_user([sys.executable, "-m", "pytest", *CONTAINMENT, "-m", "not nsjail", "-q", "-p", "no:cacheprovider"],
                    tmp=nobody_tmp, timeout=1200)  # fmt: skip
    tail = (out.stdout + out.stderr)[-3000:]
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and not re.search(r"\d+ (failed|errors?)\b", summary), tail


def test_the_sandbox_reports_user_namespaces_as_a_normal_user(nobody_tmp: Path) -> None:
    code = "import json; from sandbox import Sandbox\nwith Sandbox(workers=1) as sb: print(json.dumps(sb.isolation))"
    out = as_user([sys.executable, "-c", code], tmp=nobody_tmp, timeout=120)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert {"user", "mount", "net", "ipc", "pid"} <= set(info["namespaces"]), info
    assert info["memory"].startswith("no cgroup: ") and "memory is the monitor's" in info["memory"], info
    assert info["seccomp"], info


def test_the_main_job_runs_as_a_normal_user(nobody_tmp: Path) -> None:
    out = as_user([sys.executable, "-m", "code_env", "demo", "--tasks", "4", "--json", "--log-dir",
                     str(nobody_tmp / "demo")], tmp=nobody_tmp, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert rows, out.stdout[-2000:]


VERDICTS = r'''
import json, sys, warnings
from sandbox import Limits, Sandbox
from tests._nobody import VERDICT_PROGRAMS as PROGRAMS
mode = sys.argv[1]
if mode == "weak":
    import pyseccomp as sc  # a kernel without unprivileged user namespaces, simulated
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    f.add_rule(sc.ERRNO(1), "unshare")
    f.add_rule(sc.ERRNO(1), "clone", sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
    f.load()
    try:
        Sandbox(workers=1)
        raise SystemExit("full isolation did not fail closed")
    except Exception as exc:
        print(json.dumps({"refused": f"{type(exc).__name__}: {exc}"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb = Sandbox(workers=1, isolation="weak")
    print(json.dumps({"warned": [str(w.message) for w in caught]}))
else:
    sb = Sandbox(workers=1)
lim = Limits(timeout_s=2, memory_mb=256, max_output_bytes=1 << 20)
out = {}
for name, code in PROGRAMS.items():
    r = sb.run(code, stdin="abc", limits=lim)
    out[name] = [r.exit_code, r.signal, r.timeout_hit, r.oom, r.stdout_truncated, r.stdout[:20], r.sandbox_error]
print(json.dumps({"verdicts": out}))
# the same through the grader: a memory bomb inside a function test is the run's oom, everywhere
import registry
from code_env import grade
task = registry.get(registry.load("builtin"), "builtin/sum-of-evens")
bomb = "def sum_of_evens(nums):\n    b = bytearray(4 << 30)\n    b[::4096] = b'x' * len(b[::4096])\n    return 0\n"
rewards = {}
for name, code in {"reference": task.reference_solution, "bomb": bomb, "wrong": "def sum_of_evens(nums):\n    return 1\n"}.items():
    g = grade(task, code, sandbox=sb)
    rewards[name] = [g.reward, g.breakdown.tier]
sb.close()
print(json.dumps({"rewards": rewards}))
'''


def _verdicts(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert out.returncode == 0, out.stderr[-3000:]
    merged: dict[str, object] = {}
    for line in out.stdout.splitlines():
        merged.update(json.loads(line))
    return merged


def test_the_same_program_gets_the_same_verdict_whoever_runs_it(nobody_tmp: Path) -> None:
    """As root (when we are), as a normal user (user namespaces) and in weak mode where the kernel
    cannot isolate (simulated with a seccomp filter that refuses new user namespaces)."""
    runs = {"user": _verdicts(as_user([sys.executable, "-c", VERDICTS, "user"], tmp=nobody_tmp, timeout=300)),
            "weak": _verdicts(as_user([sys.executable, "-c", VERDICTS, "weak"], tmp=nobody_tmp, timeout=300))}  # fmt: skip
    if ROOT:
        runs["root"] = _verdicts(as_root([sys.executable, "-c", VERDICTS, "root"], timeout=300))
    assert len({json.dumps(r["verdicts"], sort_keys=True) for r in runs.values()}) == 1, runs
    assert len({json.dumps(r["rewards"], sort_keys=True) for r in runs.values()}) == 1, runs
    user, weak = runs["user"], runs["weak"]
    assert user["rewards"]["bomb"][1] == "oom", user["rewards"]  # type: ignore[index]
    assert user["rewards"]["reference"] == [1.0, "all_tests"], user["rewards"]  # type: ignore[index]
    verdicts = user["verdicts"]
    assert isinstance(verdicts, dict)
    assert verdicts["ok"] == [0, None, False, False, False, "45\n", None]
    assert verdicts["memory-bomb"][3] is True and verdicts["loop"][2] is True and verdicts["flood"][4] is True
    refused = str(weak["refused"])
    assert refused.startswith("IsolationUnavailableError") and "run as root" in refused and "isolation='weak'" in refused
    assert any("weak isolation" in w and "read every file" in w for w in weak["warned"])  # type: ignore[union-attr]
