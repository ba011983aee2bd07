"""Stable-Baselines3, used as its users do: from the env id, through ``make_vec_env`` (both pass
``render_mode="rgb_array"``), and the one clear message when it is pointed at the text env."""

from __future__ import annotations

import copy
import pickle
import traceback
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import code_env  # noqa: F401 - registers the ids
from code_env.spaces import AnyText


def _params(model: PPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def _changed(before: list[torch.Tensor], model: PPO) -> bool:
    return any(not torch.equal(b, a) for b, a in zip(before, model.policy.parameters(), strict=True))


def test_make_vec_env_of_the_token_env_trains() -> None:
    venv = make_vec_env("CodeExecTokens-v0", n_envs=4, seed=0)
    assert venv.render_mode == "rgb_array"  # what make_vec_env asks for
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = _params(model)
    model.learn(256)
    assert model.num_timesteps == 256 and _changed(before, model)
    frames = venv.get_images()  # what SB3's video recorder reads
    assert len(frames) == 4 and all(f.shape == (100, 240, 3) and f.dtype == np.uint8 for f in frames)
    venv.close()


def test_ppo_from_the_token_env_id_trains() -> None:
    model = PPO("MlpPolicy", "CodeExecTokens-v0", n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu")
    venv = model.get_env()
    assert venv is not None and venv.render_mode == "rgb_array"  # what PPO asks for, from an id
    before = _params(model)
    model.learn(256)
    assert model.num_timesteps == 256 and _changed(before, model)
    venv.close()


SB3_ON_TEXT: dict[str, Callable[[], Any]] = {
    "PPO-from-the-id": lambda: PPO("MlpPolicy", "CodeExec-v0", device="cpu"),
    "make_vec_env-then-PPO": lambda: PPO("MlpPolicy", make_vec_env("CodeExec-v0", n_envs=2), device="cpu"),
    "MultiInputPolicy": lambda: PPO("MultiInputPolicy", "CodeExec-v0", device="cpu"),
    "a-made-env": lambda: PPO("MlpPolicy", gym.make("CodeExec-v0"), device="cpu"),
}


@pytest.mark.parametrize("call", list(SB3_ON_TEXT.values()), ids=list(SB3_ON_TEXT))
def test_sb3_on_the_text_env_says_what_to_use_instead(call: Callable[[], Any]) -> None:
    with pytest.raises(TypeError) as caught:
        call()
    message = str(caught.value)
    for needed in ("AnyText", "text space", "Stable-Baselines3", "use CodeExecTokens-v0", "LLM policy"):
        assert needed in message, message
    # raised where SB3 first asks the text space for its shape, as the error itself (not the
    # context of another one): the message is the first thing a user reads
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].filename.endswith("code_env/spaces.py") and frames[-1].name == "shape"
    assert any("stable_baselines3" in f.filename for f in frames)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_the_text_space_has_no_shape_but_stays_a_gymnasium_space() -> None:
    space = AnyText(8)
    with pytest.raises(TypeError, match=r"AnyText\(8\) is a text space: .* use CodeExecTokens-v0"):
        _ = space.shape
    # Gymnasium itself never asks: spaces compare, copy, pickle and batch as before
    assert copy.deepcopy(space) == space == pickle.loads(pickle.dumps(space))
    assert gym.vector.utils.batch_space(space, 3).contains(("a", "b", ""))
