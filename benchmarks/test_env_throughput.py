"""``CodeExec-v0``'s overhead over calling the grader directly, in one run.

One fixed workload: a single-turn episode for every task of the builtin set with its reference
solution, plus wrong programs (a syntax error, an empty one) up to a multiple of 8 episodes. It
runs four ways on the same warm sandbox:

* ``code_env.grade`` on each pair, one after another, against ``gym.make("CodeExec-v0")``
  (``reset(options={"problem_id": ...})`` then ``step(code)``) on the same pairs;
* ``code_env.grade_many`` on 8 pairs at a time, against ``gym.make_vec("CodeExec-v0", num_envs=8)``
  stepping the same 8 pairs (each sub-env reset to its task, then one batched ``step``).

Paired (``conftest.paired``): each round takes the whole workload through each side, one after the
other, the order reversed every other round, so that the machine's load drifts the same way for
both; the overhead is the median of the per-round ratios of their times (target: within 10%), and
each side's CPU per episode is that of the whole process tree (the sandbox's workers included).
No assertion on speed: only that the environment gives every episode the reward ``grade`` gives
it. The numbers go to ``benchmarks/results/sandbox.md`` and the README.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode

import code_env
import registry
from registry import Task
from sandbox import Sandbox

from .conftest import Side as Run
from .conftest import Target, paired, record_paired

CORES = os.cpu_count() or 1
NUM_ENVS = 8
ROUNDS, WARMUP = 7, 1
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


def _compare(benchmark: Any, units: list[Items], grade_side: Side, env_side: Side, items: Items, *, anchor: str,
             engine: str, mode: str) -> None:  # fmt: skip
    """Alternating rounds of the whole workload, unit by unit (an episode, or a batch of 8), through
    the grader and through the env; every round both give the same rewards, and the right ones."""

    def through(side: Side) -> Callable[[], list[Any]]:
        return lambda: [r for unit in units for r in side(unit)]

    def check(out: dict[str, object]) -> None:
        _check(items, out[anchor], out[engine])  # type: ignore[arg-type]

    sides = {anchor: Run(through(grade_side), len(items)), engine: Run(through(env_side), len(items))}
    result = paired(benchmark, sides, rounds=ROUNDS, warmup_rounds=WARMUP, check=check)
    record_paired(benchmark, result, title=f"{engine} against {anchor}", program=f"builtin ({len(items)} episodes)",
                  mode=mode, unit="episodes",
                  targets=[Target(f"{engine}: time per episode ≤ +10 % over `{anchor}`", engine, "time", vs=anchor, op="<=", bound=1.1)])  # fmt: skip


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
        _compare(benchmark, [[item] for item in workload], grade_side, env_side, workload, anchor="code_env.grade",
                 engine="CodeExec-v0 (gym.make)", mode="one episode at a time")  # fmt: skip
    finally:
        env.close()


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
        _compare(benchmark, batches, grade_side, env_side, workload, anchor=f"code_env.grade_many ({NUM_ENVS} at a time)",
                 engine=f"CodeExec-v0 (gym.make_vec, {NUM_ENVS} envs)", mode=f"batches of {NUM_ENVS} ({CORES} cores)")  # fmt: skip
    finally:
        envs.close()
