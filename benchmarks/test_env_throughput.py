"""``CodeExec-v0``'s overhead over calling the grader directly, in one run.

One fixed workload: a single-turn episode for every task of the builtin set with its reference
solution, plus wrong programs (a syntax error, an empty one) up to a multiple of 8 episodes. It
runs four ways on the same warm sandbox:

* ``code_env.grade`` on each pair, one after another, against ``gym.make("CodeExec-v0")``
  (``reset(options={"problem_id": ...})`` then ``step(code)``) on the same pairs;
* ``code_env.grade_many`` on 8 pairs at a time, against ``gym.make_vec("CodeExec-v0", num_envs=8)``
  stepping the same 8 pairs (each sub-env reset to its task, then one batched ``step``).

Each benchmark round goes through the workload once, each episode (or batch of 8) through both
sides back to back, alternating which goes first, so that the machine's load drifts the same way
for both; the overhead is the median of the per-round ratios of their times (target: within 10%).
No assertion on speed: only that the environment gives every episode the reward ``grade`` gives
it. The numbers go to ``benchmarks/results/sandbox.md`` and the README.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode

import code_env
import registry
from registry import Task
from sandbox import Sandbox

from .conftest import record_overhead

CORES = os.cpu_count() or 1
NUM_ENVS = 8
ROUNDS, WARMUP = 5, 1
WRONG = ("def broken(:\n    return\n", "")  # a syntax error; nothing at all (no entry point, no output)
Items = list[tuple[Task, str]]
Side = Callable[[Items], list[Any]]  # a unit of the workload -> the reward of each of its episodes


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many(["pass"] * 20)
        yield s


@pytest.fixture(scope="module")
def workload() -> Items:
    tasks = registry.load("builtin")
    items: Items = [(t, t.reference_solution) for t in tasks]
    n_wrong = 2 + (-(len(items) + 2)) % NUM_ENVS  # at least two, and whole batches of 8
    items += [(tasks[i % len(tasks)], WRONG[i % 2]) for i in range(n_wrong)]
    return items


def _check(items: Items, grades: list[Any], episodes: list[Any]) -> None:
    """The env's reward is grade's for every episode, and the workload scores as it should."""
    assert episodes == grades
    for (task, code), reward in zip(items, grades, strict=True):
        no_attempt = code_env.RewardConfig().no_attempt  # nothing at all is no attempt
        expected = 1.0 if code == task.reference_solution else -1.0 if code == WRONG[0] else no_attempt
        assert reward == expected, (task.problem_id, code[:40], reward)


def _paired(benchmark: Any, units: list[Items], grade_side: Side, env_side: Side, items: Items) -> tuple[list[float], list[float]]:
    """Rounds over the workload, unit by unit (an episode, or a batch of 8), each unit through the
    grader and through the env back to back, alternating which goes first: the machine's load
    drifts the same way for both. The seconds of each side per round, warm-up rounds left out."""
    grade_t: list[float] = []
    env_t: list[float] = []

    def pair() -> None:
        spent = {grade_side: 0.0, env_side: 0.0}
        rewards: dict[Side, list[Any]] = {grade_side: [], env_side: []}
        for k, unit in enumerate(units):
            for side in (grade_side, env_side) if (len(grade_t) + k) % 2 == 0 else (env_side, grade_side):
                t0 = time.perf_counter()
                out = side(unit)
                spent[side] += time.perf_counter() - t0
                rewards[side] += out
        grade_t.append(spent[grade_side])
        env_t.append(spent[env_side])
        _check(items, rewards[grade_side], rewards[env_side])

    benchmark.pedantic(pair, rounds=ROUNDS, warmup_rounds=WARMUP)
    return grade_t[WARMUP:] or grade_t, env_t[WARMUP:] or env_t


def test_single_env_vs_grade(benchmark: Any, sb: Sandbox, workload: Items) -> None:
    env = gym.make("CodeExec-v0", executor=sb)
    env.reset(seed=0)  # (the passive env checker looks at the first reset and step: not timed)

    def grade_side(unit: Items) -> list[Any]:
        return [code_env.grade(task, code, sandbox=sb).reward for task, code in unit]

    def env_side(unit: Items) -> list[Any]:
        ((task, code),) = unit
        env.reset(options={"problem_id": task.problem_id})
        _, reward, terminated, _, _ = env.step(code)
        assert terminated
        return [reward]

    try:
        grade_t, env_t = _paired(benchmark, [[item] for item in workload], grade_side, env_side, workload)
    finally:
        env.close()
    record_overhead(benchmark, engine="CodeExec-v0 (gym.make)", anchor="code_env.grade", program=f"builtin ({len(workload)} episodes)",
                    mode="sequential", episodes=len(workload), env_s=env_t, anchor_s=grade_t)  # fmt: skip


def test_vector_env_vs_grade_many(benchmark: Any, sb: Sandbox, workload: Items) -> None:
    envs = gym.make_vec("CodeExec-v0", num_envs=NUM_ENVS, executor=sb, autoreset_mode=AutoresetMode.DISABLED)
    envs.reset(seed=0)
    subs = envs.unwrapped.envs  # type: ignore[attr-defined]
    batches = [workload[i : i + NUM_ENVS] for i in range(0, len(workload), NUM_ENVS)]

    def grade_side(batch: Items) -> list[Any]:
        return [g.reward for g in code_env.grade_many(batch, sandbox=sb)]

    def env_side(batch: Items) -> list[Any]:
        for sub, (task, _) in zip(subs, batch, strict=True):
            sub.reset(options={"problem_id": task.problem_id})
        _, reward, terminated, _, _ = envs.step([code for _, code in batch])
        assert terminated.all()
        return [float(r) for r in reward]

    try:
        grade_t, env_t = _paired(benchmark, batches, grade_side, env_side, workload)
    finally:
        envs.close()
    record_overhead(benchmark, engine=f"CodeExec-v0 (gym.make_vec, {NUM_ENVS} envs)", anchor=f"code_env.grade_many ({NUM_ENVS} at a time)",
                    program=f"builtin ({len(workload)} episodes)", mode=f"batches of {NUM_ENVS} ({CORES} cores)",
                    episodes=len(workload), env_s=env_t, anchor_s=grade_t)  # fmt: skip
