"""``sandbox.RayExecutor`` on a local Ray instance (one node: this machine) against the local
``Sandbox`` with as many workers, in one run, in alternating rounds on the same batches:

* 1,000 trivial programs in one ``run_many`` (target: Ray at most 1.5x the local time);
* a full HumanEval evaluation: the 164 reference solutions through ``code_env.grade_many``.

Each is paired (``conftest.paired``) and reported as a ratio of times (the median of the per-round
ratios) with each side's CPU per execution, that of this process's whole tree, which holds the
local sandbox's workers and the local Ray instance (its daemons' background CPU lands on whichever
side is running, in proportion to its wall time). The first also
measures what the executor costs: CPU time of the driver (this process) and of the actor per
request and per chunk, from the same batch cut into chunks of three sizes (kept in the
benchmark's ``extra_info``, printed with ``-s``). No assertion on speed: only that both sides agree."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import code_env
import registry
from sandbox import Limits, RayExecutor, Sandbox
from tests._rayenv import ray_environment

from .conftest import Side, Target, paired, record_paired

CORES = os.cpu_count() or 1
BATCH, ROUNDS = 1000, 3
TRIVIAL = "def f():\n    return 1\nassert f() == 1\n"
LIMITS = Limits(timeout_s=10.0, memory_mb=512)


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[Sandbox, RayExecutor]]:
    with ray_environment(), Sandbox(workers=CORES) as sb, RayExecutor(workers_per_actor=CORES) as ex:
        sb.run_many(["pass"] * 40)
        ex.run_many(["pass"] * 40)
        yield sb, ex


LOCAL, RAY = "local Sandbox", "RayExecutor (local Ray, 1 node)"


def _compare(benchmark: Any, local: Callable[[], Any], ray: Callable[[], Any], n: int, *, what: str, unit: str) -> None:
    """Alternating rounds of both sides; both must give the same answer; Ray's time ≤ 1.5x."""

    def check(out: dict[str, object]) -> None:
        assert out[LOCAL] == out[RAY]

    result = paired(benchmark, {LOCAL: Side(local, n), RAY: Side(ray, n)}, rounds=ROUNDS, warmup_rounds=0, check=check)
    record_paired(benchmark, result, title=f"{RAY} against the {LOCAL}: {what}", program=what, mode=f"{CORES} workers",
                  unit=unit, targets=[Target(f"Ray executor ({what}): time ≤ 1.5× the local Sandbox's", RAY, "time", vs=LOCAL,
                                             op="<=", bound=1.5)])  # fmt: skip


def test_ray_vs_local_trivial_batch(benchmark: Any, both: tuple[Sandbox, RayExecutor]) -> None:
    sb, ex = both
    n = BATCH if benchmark.enabled else 100  # as a smoke test: one small round

    def verdicts(runner: Sandbox | RayExecutor) -> list[tuple[int | None, str]]:
        return [(r.exit_code, r.stdout) for r in runner.run_many([TRIVIAL] * n, limits=LIMITS)]

    _compare(benchmark, lambda: verdicts(sb), lambda: verdicts(ex), n, what=f"run_many of {n} trivial programs",
             unit="executions")


def _costs(n: int) -> dict[str, float]:
    """CPU per request and per chunk, on the driver and on the actor, from the same batch cut into
    chunks of 1, 4 runs per worker and n/8 runs: a least-squares fit of cpu = a + chunks * b on
    each side (a / n: per request)."""
    points = []
    for size in (1, 4 * CORES, max(1, n // 8)):
        small = RayExecutor(workers_per_actor=CORES, chunk_size=size)
        try:
            small.run_many(["pass"] * 20)
            before, actor0, c0 = small.stats, small.actor_cpu_time_s(), time.process_time()
            small.run_many([TRIVIAL] * n, limits=LIMITS)
            driver, actor = time.process_time() - c0, small.actor_cpu_time_s() - actor0
            after = small.stats
        finally:
            small.close()
        wire = sum(after[k] - before[k] for k in ("actor_decode_ms", "actor_encode_ms"))
        points.append((after["chunks"] - before["chunks"], driver, actor, wire))
    chunks = [p[0] for p in points]
    out = {}
    for side, k in (("driver", 1), ("actor", 2)):
        per_chunk, fixed = _fit(chunks, [p[k] for p in points])
        out[f"{side}_ms_per_chunk"], out[f"{side}_ms_per_request"] = 1e3 * per_chunk, 1e3 * fixed / n
    out["actor_wire_ms_per_request"] = statistics.median(p[3] for p in points) / n  # JSON in and out, on the actor
    return out  # actor_ms_per_request includes the sandbox's own host-side work (a local Sandbox's too)


def _fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (b, a)."""
    mx, my = statistics.fmean(x), statistics.fmean(y)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sum((xi - mx) ** 2 for xi in x)
    return b, my - b * mx


def test_ray_vs_local_full_humaneval(benchmark: Any, both: tuple[Sandbox, RayExecutor]) -> None:
    sb, ex = both
    tasks = registry.load("humaneval")
    items = [(t, t.reference_solution) for t in tasks]

    def rewards(runner: Sandbox | RayExecutor) -> list[float | None]:
        grades = code_env.grade_many(items, sandbox=runner)
        top = [1.0 if t.hidden_tests else 0.8 for t, _ in items]  # without a hidden test, all_public is the top tier
        assert [g.reward for g in grades] == top, [g.breakdown for g, r in zip(grades, top, strict=True) if g.reward != r][:1]
        return [g.reward for g in grades]

    _compare(benchmark, lambda: rewards(sb), lambda: rewards(ex), len(items),
             what=f"HumanEval full evaluation ({len(items)} reference solutions, grade_many)", unit="problems")


def test_ray_executor_costs(both: tuple[Sandbox, RayExecutor], request: pytest.FixtureRequest) -> None:
    """What the executor costs per request and per chunk (printed with ``-s``). Last in the module:
    it starts and stops executors of its own, and an actor that ends takes its CPU (and its
    sandbox's workers') out of this process's tree while the next comparison would be measuring it."""
    if request.config.getoption("benchmark_disable"):
        return  # the smoke run
    costs = _costs(BATCH)
    print("\nRayExecutor costs (CPU ms):", ", ".join(f"{k} {v:.3f}" for k, v in costs.items()))
