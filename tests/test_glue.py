"""The glue around the envs: the process-wide sandbox's workers start on first use and stop with
the last env (counted from the host side, in a fresh interpreter), the envs' handles on it copy
and pickle; Stable-Baselines3's own ``check_env`` (a pointer to ``CodeExecTokens-v0`` on the
text env, a pass on the token env); Gymnasium's ``RecordVideo`` (extra ``video``)."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import gymnasium as gym
import pytest
from gymnasium.wrappers import RecordVideo
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import code_env
import registry
from code_env import grading
from code_env.grading import SharedSandbox

from .conftest import get_sandbox

ROOT = Path(__file__).resolve().parents[1]
EVENS = registry.resolve("builtin/sum-of-evens")


# ------------------------------------------------------------------ the shared sandbox's life


def test_the_shared_sandbox_starts_on_first_use_and_stops_with_its_last_env() -> None:
    """``tests/_sandbox_lifecycle.py`` counts this process's sandbox worker processes at each point."""
    done = subprocess.run([sys.executable, "-m", "tests._sandbox_lifecycle"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout)
    # making envs (two text envs, a token env) starts nothing, nor does reset
    assert seen["made"] == seen["reset"] == 0, seen
    # the first step starts the workers; they run while any env that ran a program is open
    assert seen["a_reward"] == seen["b_reward"] == 1.0
    assert seen["a_stepped"] > 0 and seen["a_closed_b_open"] > 0, seen
    assert seen["both_closed"] == 0, seen  # the last user's close stops them
    # a step after close (on the closed env itself) starts them again; its close stops them again
    assert seen["a_again_reward"] == 1.0 and seen["a_again_stepped"] > 0 and seen["a_closed_again"] == 0, seen
    # the batching vector env: none until its first step, none after its close
    assert seen["vec_made"] == 0 and seen["vec_stepped"] > 0 and seen["vec_closed"] == 0, seen
    assert seen["vec_rewards"] == [1.0, 1.0]
    # AsyncVectorEnv: the parent's env that gave the spaces starts none; the workers' sandboxes
    # start with the first step and are gone when close() returns
    assert seen["async_made_parent"] == seen["async_made_tree"] == 0, seen
    assert seen["async_rewards"] == [1.0, 1.0]
    assert seen["async_stepped_parent"] == 0 and seen["async_stepped_tree"] > 0, seen
    assert seen["async_closed_tree"] == 0, seen
    # grade() without an env pins them for the process (documented): an env's close leaves them
    assert seen["grade_reward"] == seen["c_reward"] == 1.0
    assert seen["pinned_after_close"] > 0, seen


def test_each_env_holds_its_own_handle_and_copies_get_their_own() -> None:
    """Copies and pickles of an env hold handles of their own on the same process-wide sandbox
    (so that each one's close releases only its own), of the same backend."""
    backend = "process"
    env = code_env.CodeExecEnv(backend=backend)
    lease = env.executor
    assert isinstance(lease, SharedSandbox) and lease.backend == backend
    assert grading.is_shared_sandbox(lease, backend) and not grading.is_shared_sandbox(lease, "nsjail")
    for copied in (copy.deepcopy(env), pickle.loads(pickle.dumps(env)), pickle.loads(cloudpickle.dumps(env))):
        assert isinstance(copied.executor, SharedSandbox) and copied.executor is not lease
        assert copied.executor.backend == backend
        copied.close()
    handle = pickle.loads(pickle.dumps(lease))
    assert isinstance(handle, SharedSandbox) and handle is not lease and handle.backend == backend
    # an env made with another env's handle (the vector env's sub-envs) gets one of its own
    other = code_env.CodeExecEnv(backend=backend, executor=lease)
    assert isinstance(other.executor, SharedSandbox) and other.executor is not lease
    assert pickle.loads(pickle.dumps(other)).executor.backend == backend  # (still picklable)
    other.close()
    env.close()
    env.close()  # idempotent
    with pytest.raises(TypeError, match="backend: expected a backend name"):
        SharedSandbox(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ SB3's check_env


@pytest.mark.parametrize("unwrapped", [False, True], ids=["made", "unwrapped"])
def test_sb3_check_env_on_the_text_env_points_to_the_token_env(unwrapped: bool) -> None:
    env = gym.make("CodeExec-v0")
    with pytest.raises(TypeError) as caught:
        sb3_check_env(env.unwrapped if unwrapped else env)
    message = str(caught.value)
    for needed in ("CodeExec-v0 is not an env for Stable-Baselines3", "use CodeExecTokens-v0", "LLM policy"):
        assert needed in message, message
    assert caught.value.__cause__ is None and caught.value.__context__ is None  # the first thing read
    # nothing else changes: an attribute the env lacks is still an ordinary AttributeError
    assert not hasattr(env.unwrapped, "no_such_attribute") and not hasattr(env, "compute_reward")
    env.close()


def test_sb3_check_env_passes_on_the_token_env() -> None:
    # pytest turns every warning into an error: SB3 must not warn either
    env = gym.make("CodeExecTokens-v0", n_tasks=4, executor=get_sandbox("process"))
    sb3_check_env(env)
    env.close()
    env = gym.make("CodeExecTokens-v0", n_tasks=4, render_mode="rgb_array", executor=get_sandbox("process"))
    sb3_check_env(env, skip_render_check=False)  # (renders, then closes it)


# ------------------------------------------------------------------------- RecordVideo


def test_record_video_of_an_episode_writes_an_mp4(tmp_path: Path) -> None:
    try:
        import imageio_ffmpeg
        from moviepy import VideoFileClip  # (what RecordVideo needs: moviepy)
    except ImportError:
        pytest.skip("moviepy is not installed: pip install 'code-env[video]' (the dev extra has it)")
    folder = tmp_path / "videos"  # (RecordVideo warns about a folder that already exists)
    env = RecordVideo(gym.make("CodeExec-v0", render_mode="rgb_array", max_turns=2, executor=get_sandbox("process")),
                      str(folder), episode_trigger=lambda episode: True, disable_logger=True)  # fmt: skip
    env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    assert env.step("def sum_of_evens(nums:\n")[1:3] == (0.0, False)  # turn 1: a syntax error, revised
    assert env.step(EVENS.reference_solution)[1:3] == (1.0, True)
    env.close()
    videos = list(folder.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0, videos
    with VideoFileClip(str(videos[0])) as clip:  # read back by ffmpeg
        assert clip.size == [480, 240]  # the env's 80 x 24 character image
    assert imageio_ffmpeg.count_frames_and_secs(str(videos[0])) == (3, 3.0)  # reset, two steps (render_fps 1)
