"""Run in a fresh interpreter by ``tests/test_glue.py`` (``python -m tests._sandbox_lifecycle``):
when the process-wide sandbox's workers run, counted from the host side, at each point of the
life of the envs that use it. Prints one JSON object: point -> number of worker processes.

A fresh process, because the workers' lifetime is process-wide state: in the test process an
earlier test's env (or a ``grade()``, which pins them) would decide what this one sees."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import psutil

import code_env
import registry
from sandbox._process import ZYGOTE

EVENS = registry.resolve("builtin/sum-of-evens")


def workers(recursive: bool = False) -> int:
    """Live processes under this one that are sandbox workers (started as ``python -S ... _zygote.py``;
    the monitor and template they fork keep that command line): this process's own by default,
    with ``recursive`` those of its children too (an ``AsyncVectorEnv``'s worker processes)."""
    n = 0
    for p in psutil.Process().children(recursive=recursive):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and ZYGOTE in p.cmdline():
                n += 1
        except psutil.NoSuchProcess:
            pass
    return n


def solve(env: gym.Env) -> float:  # type: ignore[type-arg]
    env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    return float(env.step(EVENS.reference_solution)[1])


def main() -> None:
    seen: dict[str, object] = {}
    a = gym.make("CodeExec-v0")
    b = gym.make("CodeExec-v0")
    tokens = gym.make("CodeExecTokens-v0", n_tasks=4)
    seen["made"] = workers()
    a.reset(seed=0)
    seen["reset"] = workers()
    seen["a_reward"] = solve(a)
    seen["a_stepped"] = workers()
    seen["b_reward"] = solve(b)
    a.close()
    seen["a_closed_b_open"] = workers()  # b still uses them
    b.close()
    seen["both_closed"] = workers()
    tokens.close()  # never ran a program: never a user
    seen["a_again_reward"] = solve(a)  # a step after close: the workers start again
    seen["a_again_stepped"] = workers()
    a.close()
    seen["a_closed_again"] = workers()

    vec = gym.make_vec("CodeExec-v0", num_envs=2)  # the batching vector env
    seen["vec_made"] = workers()
    _, info = vec.reset(seed=0)
    rewards = vec.step(tuple(registry.resolve(p).reference_solution for p in info["problem_id"]))[1]
    seen["vec_rewards"] = rewards.tolist()
    seen["vec_stepped"] = workers()
    vec.close()
    seen["vec_closed"] = workers()

    async_vec = gym.make_vec("CodeExec-v0", num_envs=2, vectorization_mode="async")
    seen["async_made_parent"] = workers()  # the dummy env that gave the spaces ran nothing
    seen["async_made_tree"] = workers(recursive=True)
    _, info = async_vec.reset(seed=0)
    rewards = async_vec.step(tuple(registry.resolve(p).reference_solution for p in info["problem_id"]))[1]
    seen["async_rewards"] = rewards.tolist()
    seen["async_stepped_parent"] = workers()
    seen["async_stepped_tree"] = workers(recursive=True)
    async_vec.close()
    seen["async_closed_tree"] = workers(recursive=True)

    # grade() without an env pins the workers for the process: an env's close leaves them running
    seen["grade_reward"] = code_env.grade(EVENS, EVENS.reference_solution).reward
    c = gym.make("CodeExec-v0")
    seen["c_reward"] = solve(c)
    c.close()
    seen["pinned_after_close"] = workers()
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
