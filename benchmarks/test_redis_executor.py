"""The per-request overhead of the Redis path: ``sandbox.RedisExecutor`` with one executor process
(``code-env executor``, as many sandbox workers as this machine has cores) on a redis-server of
its own, against the in-process ``Sandbox`` with the same workers, in one run, in alternating rounds
(``conftest.paired``) on the same trivial program (``print(1)``):

* a batch: ``run_many`` of 500 programs (the throughput a trainer's grader sees);
* one at a time: ``run`` of 40 programs in a row (the latency a single request pays).

Each is reported as a ratio of times (the median of the per-round ratios, with its range) and each
side's CPU per execution, that of this process's whole tree, which holds the local sandbox's
workers, the executor and its workers, and the redis-server. The Redis side's CPU is also split,
per round from ``/proc``, into the client's (this process), the executor's (its process tree) and
the server's, kept in the benchmark's ``extra_info`` (``redis_cpu_ms_per_run``; printed with
``-s``). No assertion on speed: only that both sides agree. Skipped, saying why, without a
redis-server or the ``redis`` package."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, RedisExecutor, Sandbox
from tests._redis import RedisServer

from .conftest import CORES, Latencies, Side, Target, paired, record_paired, tree_snapshot

pytest.importorskip("redis", reason="the redis package is not installed: pip install 'code-env[redis]'")

REPO = Path(__file__).resolve().parents[1]
PROGRAM = "print(1)"
LIMITS = Limits(timeout_s=10.0, memory_mb=512)
BATCH, SEQUENTIAL, ROUNDS = 500, 40, 5
LOCAL, REDIS = "local Sandbox", "RedisExecutor (1 executor process)"


def cpu_s(pid: int) -> float:
    """CPU seconds so far of ``pid``'s process tree (its reaped children included), from /proc."""
    return sum(own + kids for own, kids, _ in tree_snapshot(pid).values()) / os.sysconf("SC_CLK_TCK")


def own_cpu_s(pid: int) -> float:
    """CPU seconds so far of the process ``pid`` alone (its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Setup:
    def __init__(self, sb: Sandbox, client: RedisExecutor, executor: subprocess.Popen[bytes], server: RedisServer) -> None:
        self.sb, self.client, self.executor, self.server = sb, client, executor, server
        assert server.proc is not None
        self.server_pid = server.proc.pid
        self.split: dict[str, list[float]] = {"client": [], "executor": [], "redis-server": []}

    def redis_round(self, work: Callable[[], Any], n: int) -> Any:
        """``work`` on the Redis side, its CPU split by process (ms per run) kept for the record."""
        before = (own_cpu_s(os.getpid()), cpu_s(self.executor.pid), own_cpu_s(self.server_pid))
        out = work()
        after = (own_cpu_s(os.getpid()), cpu_s(self.executor.pid), own_cpu_s(self.server_pid))
        for key, b, a in zip(self.split, before, after, strict=True):
            self.split[key].append(1000 * (a - b) / n)
        return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("redis-bench")
    server = RedisServer(directory / "redis")  # (skips, saying why, without a redis-server)
    server.start()
    log = open(directory / "executor.log", "wb")
    executor = subprocess.Popen([sys.executable, "-m", "code_env", "executor", "--redis", server.url, "--workers", str(CORES),
                                 "--log-level", "warning"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=REPO,
                                start_new_session=True)  # fmt: skip
    try:
        with Sandbox(workers=CORES) as sb, RedisExecutor(server.url) as client:
            deadline = time.monotonic() + 120
            while client.workers < CORES:
                assert executor.poll() is None and time.monotonic() < deadline, (directory / "executor.log").read_text()
                time.sleep(0.1)
            sb.run_many([PROGRAM] * 20, limits=LIMITS)
            client.run_many([PROGRAM] * 20, limits=LIMITS)
            yield Setup(sb, client, executor, server)
    finally:
        os.killpg(executor.pid, signal.SIGKILL)
        executor.wait(timeout=30)
        log.close()
        server.stop(kill=True)


def _verdicts(results: list[Any]) -> list[tuple[int | None, str, str | None]]:
    return [(r.exit_code, r.stdout, r.sandbox_error) for r in results]


def _record(benchmark: Any, setup: Setup, result: Any, what: str, mode: str) -> None:
    split = {k: statistics.median(v) for k, v in setup.split.items() if v}
    benchmark.extra_info["redis_cpu_ms_per_run"] = split
    note = ("CPU per run of the Redis side, by process (medians over rounds): "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in split.items()) + ".")  # fmt: skip
    print(f"\n{REDIS} ({what}): {note}")
    record_paired(benchmark, result, title=f"{REDIS} against the {LOCAL}: {what}", program=f"`{PROGRAM}`", mode=mode,
                  note=note, rank=55,
                  targets=[Target(f"Redis path ({what}): time per run ÷ the local Sandbox's", REDIS, "time", vs=LOCAL),
                           Target(f"Redis path ({what}): CPU per run ÷ the local Sandbox's", REDIS, "cpu", vs=LOCAL)])  # fmt: skip
    for k in setup.split:
        setup.split[k].clear()


def test_redis_vs_local_batch(benchmark: Any, setup: Setup) -> None:
    n = BATCH if benchmark.enabled else 50  # as a smoke test: one small round

    def local() -> list[Any]:
        return _verdicts(setup.sb.run_many([PROGRAM] * n, limits=LIMITS))

    def redis() -> list[Any]:
        return setup.redis_round(lambda: _verdicts(setup.client.run_many([PROGRAM] * n, limits=LIMITS)), n)

    def check(out: dict[str, object]) -> None:
        assert out[LOCAL] == out[REDIS] == [(0, "1\n", None)] * n

    result = paired(benchmark, {LOCAL: Side(local, n), REDIS: Side(redis, n)}, rounds=ROUNDS, warmup_rounds=1, check=check)
    _record(benchmark, setup, result, f"run_many of {n}", f"{CORES} workers on each side")


def test_redis_vs_local_one_at_a_time(benchmark: Any, setup: Setup) -> None:
    n = SEQUENTIAL if benchmark.enabled else 5

    def sequential(run: Callable[[], Any]) -> Latencies:
        out = Latencies()
        for _ in range(n):
            t0 = time.perf_counter()
            res = run()
            out.append(time.perf_counter() - t0)
            assert (res.exit_code, res.stdout) == (0, "1\n"), res
        return out

    def local() -> Latencies:
        return sequential(lambda: setup.sb.run(PROGRAM, limits=LIMITS))

    def redis() -> Latencies:
        return setup.redis_round(lambda: sequential(lambda: setup.client.run(PROGRAM, limits=LIMITS)), n)

    result = paired(benchmark, {LOCAL: Side(local, n), REDIS: Side(redis, n)}, rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, setup, result, f"run, {n} in a row", "one run at a time")
