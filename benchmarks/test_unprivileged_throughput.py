"""The process backend without root (user namespaces, the worker's memory monitor) beside the same
backend as root, on the same batch of trivial programs, paired (alternating rounds, see
``conftest.paired``). Each side is a long-lived process of its own holding one
``Sandbox("process")``, one as root and one as uid 65534 (``tests/_nobody.py``); per round, each
runs ``run_many`` of the batch when told to, and its wall time and the CPU of **its own process
tree** (that process, its workers, their runs, reaped ones included) are read from the host's
/proc. Targets: the unprivileged path within 1.25x of root's CPU per run, and of its wall time.
Needs root to start the unprivileged side."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._nobody import NOBODY, REPO, nobody_argv

from .conftest import CORES, Side, Target, paired, record_paired

BATCH, ROUNDS = 400, 7
# One side's process: ``python -c WORKER BATCH``; "ready" once warm, then one line per "go" on stdin.
WORKER = f"""
import sys
from sandbox import Limits, Sandbox
code, limits = "def f():\\n    return 1\\nassert f() == 1\\n", Limits(timeout_s=10.0, memory_mb=512)
with Sandbox("process", workers={CORES}) as sb:
    sb.run_many(["pass"] * 40)
    print("ready", flush=True)
    for _ in sys.stdin:
        res = sb.run_many([code] * int(sys.argv[1]), limits=limits)
        bad = [r for r in res if r.exit_code != 0 or r.sandbox_error is not None]
        print("ok" if not bad else f"bad {{bad[0]!r}}", flush=True)
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to a normal user")


class Worker:
    """A side's long-lived process."""

    def __init__(self, argv: list[str], env: dict[str, str] | None) -> None:
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"worker did not start: {line!r} (exit {self.proc.wait()})")

    def round(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line == "ok", line or f"worker died (exit {self.proc.wait()})"

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()  # its end of the loop: the sandbox closes, the process exits
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def workers(benchmark: Any) -> Iterator[tuple[Worker, Worker, int]]:
    batch = BATCH if benchmark.enabled else 20
    home = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
    os.chown(home, NOBODY, NOBODY)
    argv = [sys.executable, "-c", WORKER, str(batch)]
    started: list[Worker] = []
    try:
        started.append(Worker(argv, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}))
        started.append(Worker(nobody_argv(argv, tmp=home, cwd=REPO), None))
        yield started[0], started[1], batch
    finally:
        for w in started:
            w.close()
        shutil.rmtree(home, ignore_errors=True)


def test_unprivileged_vs_root(benchmark: Any, workers: tuple[Worker, Worker, int]) -> None:
    root, user, batch = workers
    root_name, user_name = "process backend as root", "process backend as uid 65534 (user namespaces)"
    sides = {root_name: Side(root.round, batch, tree=root.proc.pid), user_name: Side(user.round, batch, tree=user.proc.pid)}
    result = paired(benchmark, sides, rounds=ROUNDS)
    record_paired(benchmark, result, title="the process backend as a normal user against root", program="trivial",
                  mode=f"run_many of {batch}, all cores ({CORES})",
                  targets=[Target("normal user: CPU per trivial run ≤ 1.25× root's", user_name, "cpu", vs=root_name, op="<=", bound=1.25),
                           Target("normal user: wall time per trivial run ≤ 1.25× root's", user_name, "time", vs=root_name, op="<=", bound=1.25)],
                  note="Each side a process of its own, CPU measured in its own process tree.", rank=30)  # fmt: skip
