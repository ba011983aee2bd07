"""RLlib without glue: its remote env runners make the env from a string in processes that never
imported ``code_env``. ``"code_env:CodeExecTokens-v0"`` (Gymnasium imports the module named before
the colon, which registers the env) works there; a bare ``"CodeExecTokens-v0"`` would be
``NameNotFound`` in the runner. Real RLlib PPO, a real local Ray instance, one remote env runner,
one training iteration on real sandboxed execution."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

from ._rayenv import ray_environment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("tree") is None,
                       reason="RLlib needs its own dependencies (dm-tree, lz4, ...): the dev extra installs them"),
]  # fmt: skip


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    with ray_environment():
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            yield ray
        finally:
            ray.shutdown()


def test_rllib_ppo_trains_on_code_exec_tokens_in_a_remote_env_runner(ray_instance: Any) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("code_env:CodeExecTokens-v0", env_config={"max_tokens": 8, "n_tasks": 20})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1, rollout_fragment_length=32)
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        runner_pids = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)
    finally:
        algo.stop()
    runners = result["env_runners"]
    assert runners["num_env_steps_sampled"] >= 64, runners
    assert runners["num_episodes"] >= 1, runners  # episodes ended: programs were run and graded
    assert runner_pids and all(pid != os.getpid() for pid in runner_pids)  # remote, not this process
