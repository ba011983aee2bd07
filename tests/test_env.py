"""CodeExec-v0: spaces (text flattening, the async shared memory) and check_env, seeding, single-
and multi-turn episodes, every budget, rendering (text and image) and the prompt, vector envs
(batched, sync, async: no process outlives close), the batched evaluation API, trajectory logs, and
misuse. Stable-Baselines3: tests/test_sb3.py."""

from __future__ import annotations

import copy
import doctest
import importlib
import json
import pickle
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.spaces.utils import flatdim, flatten, flatten_space, unflatten
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils import (
    batch_space,
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)
from gymnasium.wrappers import FlattenObservation

import code_env
import code_env.env
import registry
from code_env import CodeExecEnv, evaluate
from code_env._textimage import GREEN, RED
from code_env.env import task_prompt
from code_env.grading import SharedSandbox
from code_env.reward import RewardConfig
from code_env.spaces import AnyText, SharedTexts
from registry import Task
from sandbox import Sandbox

from .conftest import BACKENDS, CountingRunner, get_sandbox

TASKS = registry.load("builtin")
BY_ID = {t.problem_id: t for t in TASKS}
EVENS = BY_ID["builtin/sum-of-evens"]
FIZZ = BY_ID["builtin/fizzbuzz-line"]
WRONG_EVENS = "def sum_of_evens(nums):\n    return sum(nums)\n"


def make(**kw: Any) -> CodeExecEnv:
    return CodeExecEnv(executor=get_sandbox("process"), **kw)


def test_registered_and_makeable_without_the_import() -> None:
    assert "CodeExec-v0" in gym.registry and "CodeExecTokens-v0" in gym.registry
    env = gym.make("code_env:CodeExec-v0")
    assert isinstance(env.unwrapped, CodeExecEnv)
    env.close()


def test_check_env_passes_without_warnings() -> None:
    # pytest turns every warning into an error: check_env must not warn about the spaces
    check_env(gym.make("CodeExec-v0").unwrapped)
    check_env(gym.make("CodeExec-v0", max_turns=3).unwrapped)
    check_env(gym.make("CodeExec-v0", tasks="humaneval", render_mode="ansi").unwrapped)


def test_any_text_space() -> None:
    space = AnyText(50)
    for text in ["", "print('λ → 中')\n\t", "\udcff\x00 binary", "x" * 50]:
        assert space.contains(text)
    assert not space.contains("x" * 51) and not space.contains(b"bytes") and not space.contains(None)
    space.seed(0)
    assert all(space.contains(space.sample()) for _ in range(50))
    with pytest.raises(ValueError, match="max_length: expected an int >= 0"):
        AnyText(-1)


@pytest.mark.parametrize("text", ["", "print('λ → 中')\n\t", "\udcff\x00 binary", "\x00", "🙂" * 50],
                         ids=["empty", "unicode", "surrogate-and-nul", "nul", "full"])
def test_any_text_flattens_to_character_codes_and_back(text: str) -> None:
    space = AnyText(50)
    flat = flatten(space, text)
    assert flatdim(space) == 50 and flatten_space(space).contains(flat)
    assert unflatten(space, flat) == text
    pair = gym.spaces.Tuple((space, gym.spaces.Discrete(2)))  # inside another space, too
    assert unflatten(pair, flatten(pair, (text, 1))) == (text, 1)
    with pytest.raises(ValueError, match="expected a str of at most 50 characters, got a str of 51"):
        flatten(space, "x" * 51)
    with pytest.raises(ValueError, match=r"character codes are 1\.\.1114112"):
        unflatten(space, np.full(50, -3, dtype=np.int32))


def test_shared_texts_the_async_shared_memory_of_a_text_space() -> None:
    space = AnyText(10)
    shared = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, shared, n=3)
    assert isinstance(view, SharedTexts) and list(view) == ["", "", ""]
    for i, text in enumerate(["λ\x00", "\udcff→", "x" * 10]):
        write_to_shared_memory(space, i, text, shared)
    assert view[0] == "λ\x00" and view[1:] == ("\udcff→", "x" * 10) and view == ["λ\x00", "\udcff→", "x" * 10]
    assert batch_space(space, 3).contains(view)  # a live view (copy=False) is a batch like any other
    snapshot = copy.deepcopy({"prompt": view})["prompt"]  # what copy=True hands out
    write_to_shared_memory(space, 0, "", shared)
    assert snapshot == ("λ\x00", "\udcff→", "x" * 10) and view[0] == ""
    with pytest.raises(RuntimeError, match="through inheritance"):  # only into a process being started
        pickle.dumps(view)
    view.close()


def test_flatten_observation_wraps_the_env() -> None:
    env = FlattenObservation(make())
    inner = env.unwrapped.observation_space
    assert env.observation_space.shape == (flatdim(inner),) and flatdim(inner) > 4 * code_env.env.MAX_TEXT_CHARS
    obs, _ = env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    assert env.observation_space.contains(obs)
    assert unflatten(inner, obs)["prompt"] == task_prompt(EVENS)
    program = "import sys\nprint('λ\\x00 →', file=sys.stderr)\n" + EVENS.reference_solution
    obs, reward, terminated, _, _ = env.step(program)
    assert env.observation_space.contains(obs) and terminated and reward == 1.0
    back = unflatten(inner, obs)
    assert inner.contains(back) and "λ\x00 →" in back["stderr"] and int(back["public_passed"]) == 3
    env.close()


@pytest.mark.parametrize(
    "program",
    [
        EVENS.reference_solution,
        "def f(:\n",
        "import sys\nsys.stderr.buffer.write(b'\\xff\\xfe\\x00 garbage ' * 1000)\nraise SystemExit(3)\n",
        "print('x' * 5_000_000)\ndef sum_of_evens(n):\n    return 0\n",
        "while True:\n    pass\n",
        "\x00\x01\x02 binary garbage \udcff",
    ],
    ids=["reference", "syntax", "binary-stderr", "huge-output", "loop", "garbage-source"],
)
def test_every_observation_is_in_the_space(program: str) -> None:
    env = make(timeout_s=1.0)
    obs, _ = env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    assert env.observation_space.contains(obs)
    obs, reward, terminated, _, info = env.step(program)
    assert env.observation_space.contains(obs), {k: type(v) for k, v in obs.items()}
    assert terminated and isinstance(reward, float)
    assert info["reward_breakdown"]["reward"] == reward


def rollout(env: CodeExecEnv, seed: int, episodes: int = 6) -> list[Any]:
    """A seeded policy: the reference or a wrong program, drawn from its own rng."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    _, info = env.reset(seed=seed)
    for _ in range(episodes):
        task = env.task
        assert task is not None
        program = task.reference_solution if rng.random() < 0.5 else "print(42)\n"
        obs2, reward, term, trunc, info = env.step(program)
        out.append((info["problem_id"], {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obs2.items()},
                    reward, term, trunc, info))  # fmt: skip
        _obs, info = env.reset()
    return out


def test_same_seed_same_observations_and_rewards() -> None:
    a, b = rollout(make(), seed=7), rollout(make(), seed=7)
    assert a == b
    assert len({x[0] for x in a}) > 1  # several tasks were drawn
    assert rollout(make(), seed=8) != a


def test_single_turn_rewards_and_info() -> None:
    env = make()
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    obs, reward, term, trunc, info = env.step(WRONG_EVENS)
    assert term and not trunc
    assert info["reward_breakdown"]["tier"] == "partial" and 0 < reward < 0.6
    assert obs["public_total"] == 3 and obs["turn"] == 1
    feedback = json.loads(obs["feedback"])
    assert {c["status"] for c in feedback} == {"passed", "failed"} and "expected" in feedback[0]
    assert info["trace_id"] == "builtin/sum-of-evens/0/0/0"
    assert [s for s, _ in env.last_timing["transitions"]] == ["generating", "queued", "running", "executed", "judged"]
    assert env.last_timing["execution_time_ms"] > 0
    with pytest.raises(ResetNeeded, match="the episode is over"):
        env.step(EVENS.reference_solution)


def test_multi_turn_a_wrong_first_program_is_fixed_from_the_feedback() -> None:
    env = make(max_turns=3)
    obs, _ = env.reset(seed=0, options={"problem_id": "builtin/fizzbuzz-line"})
    obs, r1, term, trunc, info = env.step("n = int(input())\nfor i in range(1, n + 1):\n    print(i)\n")
    assert not term and not trunc and obs["turn"] == 1
    assert 0 < obs["public_passed"] < obs["public_total"]
    assert r1 == pytest.approx(0.05)  # the process bonus: the pass count improved
    assert info["reward_breakdown"]["hidden_total"] == 0  # hidden tests wait for the final program
    failing = [c for c in json.loads(obs["feedback"]) if c["status"] != "passed"]
    assert failing and "Fizz" in failing[0]["expected"]
    obs, r2, term, trunc, info = env.step(FIZZ.reference_solution)
    assert term and not trunc and obs["turn"] == 2
    assert info["reward_breakdown"]["tier"] == "all_tests"
    assert r1 + r2 == pytest.approx(1.0)  # a solved episode returns its tier: the bonus was an advance
    assert info["trace_id"] == "builtin/fizzbuzz-line/0/1/0"


def test_process_bonus_is_capped_and_failing_on_purpose_never_pays() -> None:
    env = make(max_turns=5)
    env.reset(seed=0, options={"problem_id": "builtin/fizzbuzz-line"})
    rewards = []
    for program in ["print(1)\n", "n=int(input())\nfor i in range(1,n+1): print(i)\n", "print(1)\n", "pass\n"]:
        rewards.append(env.step(program)[1])
    assert sum(rewards) <= 0.1 + 1e-9 and rewards[2] == rewards[3] == 0.0
    _, final, term, _, info = env.step(FIZZ.reference_solution)
    assert term and info["reward_breakdown"]["tier"] == "all_tests"
    assert sum(rewards) + final == pytest.approx(1.0)


def episode(programs: list[str], **options: Any) -> tuple[list[float], dict[str, Any]]:
    """Step ``programs`` through one episode of sum-of-evens: the step rewards and the last info."""
    env = make(**options)
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    rewards, info = [], {}
    for p in programs:
        _obs, reward, term, trunc, info = env.step(p)
        rewards.append(reward)
        if term or trunc:
            break
    return rewards, info


SLOW_EVENS = "import time\ndef sum_of_evens(nums):\n    time.sleep(0.3)\n    return sum(n for n in nums if n % 2 == 0)\n"


def test_budget_turns_keeps_the_last_programs_tier() -> None:
    partial = "def sum_of_evens(nums):\n    return 0\n"
    rewards, info = episode([partial, partial], max_turns=2)
    assert info["budget"] == "turns" and info["reward_breakdown"]["tier"] == "partial"
    assert sum(rewards) == pytest.approx(info["reward_breakdown"]["reward"]) and rewards[0] == 0.05  # bonus, then the rest
    # two syntax errors: -1 as in a single turn, not the -0.1 of a budget
    rewards, info = episode(["def f(:\n", "def f(:\n"], max_turns=2)
    assert rewards == [0.0, -1.0] and info["reward_breakdown"]["tier"] == "syntax_error"
    # a regression on the last turn: the bonus paid for the first does not lift the return above the tier
    rewards, info = episode([partial, "def f(:\n"], max_turns=2)
    assert sum(rewards) == pytest.approx(-1.0)
    loop = "def sum_of_evens(nums):\n    while True:\n        pass\n"
    assert sum(episode([loop, loop, loop], max_turns=3, timeout_s=0.5)[0]) == -0.5  # the timeout tier, not -0.1


@pytest.mark.parametrize("budget", ["action_chars", "turn_time", "episode_time"])
def test_a_budget_that_cuts_an_episode_short_never_scores_above_the_tier(budget: str) -> None:
    long_syntax_error = "def f(:\n" + "#" * 200
    if budget == "action_chars":  # the last program run was a syntax error: the too-long action gets no more
        rewards, info = episode(["def f(:\n", long_syntax_error], max_turns=3, max_action_chars=100)
        assert "capped at the tier of the episode's last program (-1)" in info["reward_breakdown"]["explanation"]
    elif budget == "turn_time":  # a program past the turn's time is at most its own tier: here a timeout
        rewards, info = episode(["def sum_of_evens(nums):\n    while True:\n        pass\n"], max_turns=3, turn_time_s=0.5)
        assert sum(rewards) == -0.5
        # and a correct but too-slow program: at most budget_exhausted (without the grade's time budget,
        # which would make its 0.3 s on every call of a 0.5 s limit a timeout of its own, -0.55)
        unbounded = RewardConfig(grade_budget_runs=None)
        assert episode(["def sum_of_evens(nums):\n    return 0\n", SLOW_EVENS], max_turns=3, turn_time_s=0.5,
                       reward=unbounded)[0] == [0.05, -0.15]  # fmt: skip
    else:
        env = make(episode_time_s=0.5, max_turns=3)
        env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
        rewards = [env.step("def f(:\n")[1]]
        time.sleep(0.6)
        _, reward, _, _, info = env.step(EVENS.reference_solution)
        rewards.append(reward)
    assert info["budget"] == budget
    assert sum(rewards) <= -0.5


def test_budget_action_chars_truncates_without_crashing() -> None:
    env = make(max_action_chars=100)
    obs, _ = env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    obs, reward, term, trunc, info = env.step("# " + "x" * 10_000 + "\n" + EVENS.reference_solution)
    assert trunc and not term and info["budget"] == "action_chars" and reward == -0.1
    assert "budget exhausted" in obs["stderr"] and env.observation_space.contains(obs)
    assert [s for s, _ in env.last_timing["transitions"]][-1] == "overflow"


def test_a_budget_end_returns_fresh_arrays_not_resets() -> None:
    # gym.make's passive checker warns when step returns the very arrays reset returned; a caller
    # holding reset's observation must not see it change under its feet
    env = gym.make("CodeExec-v0", max_action_chars=100)
    obs0, _ = env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    before = {k: v.copy() for k, v in obs0.items() if isinstance(v, np.ndarray)}
    obs1, *_ = env.step("# " + "x" * 1000 + "\n")
    for k, v in obs0.items():
        if isinstance(v, np.ndarray):
            assert not np.shares_memory(v, obs1[k]), k
            assert np.array_equal(v, before[k]), k
    env.close()


def test_budget_execution_time_per_turn() -> None:
    env = make(turn_time_s=0.5, max_turns=3)
    env.reset(seed=0, options={"problem_id": "builtin/fizzbuzz-line"})
    _obs, reward, _term, trunc, info = env.step("import time\ntime.sleep(0.2)\nprint(1)\n")  # 3 runs x 0.2 s
    assert trunc and info["budget"] == "turn_time" and reward == -0.1
    assert [s for s, _ in env.last_timing["transitions"]][-2:] == ["timed-out", "judged"]


def test_budget_wall_clock_per_episode() -> None:
    env = make(episode_time_s=0.3, max_turns=3)
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    time.sleep(0.4)  # the agent thinks for too long
    _obs, reward, _term, trunc, info = env.step(EVENS.reference_solution)
    assert trunc and info["budget"] == "episode_time" and reward == -0.1


def test_a_sandbox_failure_surfaces_in_info_not_as_a_reward() -> None:
    broken = EVENS.model_copy(update={"problem_id": "test/broken-checker", "public_tests": [
        c.model_copy(update={"checker": "raise SystemExit(3)"}) for c in EVENS.public_tests]})  # fmt: skip
    env = make(tasks=[broken])
    env.reset(seed=0)
    _obs, reward, term, trunc, info = env.step(EVENS.reference_solution)
    assert reward == 0.0 and trunc and not term
    assert "checker failed" in info["sandbox_error"] and "reward" not in info["reward_breakdown"]


def test_misuse_gets_clear_errors() -> None:
    env = make()
    with pytest.raises(ResetNeeded, match=r"step\(\) before reset\(\)"):
        env.step("print(1)")
    wrapped = gym.make("CodeExec-v0")
    with pytest.raises(ResetNeeded):
        wrapped.step("print(1)")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="the action is the program's source, a str; got int"):
        env.step(42)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="did you mean 'builtin/sum-of-evens'"):
        env.reset(options={"problem_id": "builtin/sum-of-even"})
    with pytest.raises(ValueError, match=r"reset options: unknown \['difficulty'\]"):
        env.reset(options={"difficulty": 3})
    with pytest.raises(ValueError, match="CodeExec-v0: max_turns: Input should be greater than or equal to 1"):
        make(max_turns=0)
    with pytest.raises(ValueError, match="CodeExec-v0: sampling: Input should be 'uniform', 'difficulty' or 'curriculum'"):
        make(sampling="random")
    with pytest.raises(ValueError, match="CodeExec-v0: colour: Extra inputs are not permitted"):
        make(colour="red")
    with pytest.raises(registry.UnknownTaskSetError, match="did you mean 'builtin'"):
        make(tasks="bultin")


def test_sampling_modes_draw_reproducibly() -> None:
    for mode in ("uniform", "difficulty", "curriculum"):
        ids = []
        for _ in range(2):
            env = make(sampling=mode)
            env.reset(seed=3)
            ids.append([env.reset()[1]["problem_id"] for _ in range(20)])
        assert ids[0] == ids[1] and len(set(ids[0])) > 3, mode


def test_reward_config_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "reward.toml"
    path.write_text("[reward]\nsyntax_error = -2.0\n")
    env = make(reward=path)
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    assert env.step("def f(:\n")[1] == -2.0


# ---------------------------------------------------------------------------- render, prompt


def test_render_shows_why_the_failing_tests_failed() -> None:
    env = make(render_mode="ansi")
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    start = env.render()
    assert isinstance(start, str) and "turn 0" in start and "sum_of_evens" in start
    env.step("def sum_of_evens(nums):\n    print('looking')\n    return nums[10]\n")
    text = env.render()
    assert isinstance(text, str)
    assert "0/3 public tests passed, exit 0" in text  # the run itself exited 0: only the tests say why
    assert "test 1 error: input [1, 2, 3, 4] -> IndexError: list index out of range" in text
    assert "return nums[10]" in text and "looking" in text  # the traceback's end, the prints
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    env.step(WRONG_EVENS)
    assert "test 1 failed: input [1, 2, 3, 4] -> expected 6, got 10" in env.render()  # type: ignore[operator]


def test_render_rgb_array_is_the_same_text_as_an_image() -> None:
    env = make(render_mode="rgb_array")
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    frames = [env.render()]
    env.step("def sum_of_evens(nums):\n    return nums[10]\n")
    frames.append(env.render())
    env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    env.step(EVENS.reference_solution)
    frames.append(env.render())
    for frame in frames:
        assert isinstance(frame, np.ndarray) and frame.shape == (240, 480, 3) and frame.dtype == np.uint8
    header = [f[:10] for f in frames]  # the first text row: red while a public test fails, then green
    assert (header[1] == RED).all(axis=-1).any() and not (header[1] == GREEN).all(axis=-1).any()
    assert (header[2] == GREEN).all(axis=-1).any() and not (header[2] == RED).all(axis=-1).any()
    assert make().render() is None


def test_a_humaneval_prompt_appears_once() -> None:
    env = make(tasks="humaneval")
    for pid in ("HumanEval/0", "HumanEval/14", "HumanEval/163"):
        obs, _ = env.reset(seed=0, options={"problem_id": pid})
        task = env.task
        assert task is not None and task.starter_code.strip() in task.prompt  # the prompt is the stub
        assert obs["prompt"].count(task.prompt.strip()) == 1
        assert obs["prompt"].count(f"def {task.entry_point}(") == 1
    # a prompt in words still shows the starter code after it
    obs, _ = make().reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    assert obs["prompt"].startswith(EVENS.prompt) and EVENS.starter_code.strip() in obs["prompt"]


# ------------------------------------------------------------------------------ vector envs


def test_make_vec_batches_every_sub_env_into_one_run_many_per_phase() -> None:
    runner = CountingRunner()
    envs = gym.make_vec("CodeExec-v0", num_envs=8, executor=runner, autoreset_mode="next_step")
    assert type(envs).__name__ == "CodeExecVectorEnv"
    obs, info = envs.reset(seed=10)
    singles = [make() for _ in range(8)]
    assert list(info["problem_id"]) == [e.reset(seed=10 + i)[1]["problem_id"] for i, e in enumerate(singles)]
    tasks = [BY_ID[pid] for pid in info["problem_id"]]
    runner.batches.clear()
    obs, rewards, term, _, info = envs.step(tuple(t.reference_solution for t in tasks))
    assert rewards.tolist() == [1.0] * 8 and term.all()
    # a single-turn step shows nothing between the public and the hidden tests: joint jobs. One batch
    # for the function tasks' joint runs and the stdio tasks' compile checks and public runs, then one
    # for the stdio tasks' hidden runs, then one for the special checkers, if any
    first = sum(1 if t.kind == "function" else 1 + len(t.public_tests) for t in tasks)
    stdio_hidden = sum(len(t.hidden_tests) for t in tasks if t.kind != "function")
    checkers = any(c.checker for t in tasks for c in (*t.public_tests, *t.hidden_tests))
    assert stdio_hidden and checkers  # this seed's 8 tasks have both kinds, and a checker
    assert runner.batches[:2] == [first, stdio_hidden] and len(runner.batches) == 3
    assert obs["public_total"].tolist() == [len(t.public_tests) for t in tasks]
    # next-step autoreset: the finished sub-envs reset on this step, with reward 0
    obs, rewards, term, _trunc, info = envs.step(("pass",) * 8)
    assert rewards.tolist() == [0.0] * 8 and not term.any() and obs["turn"].tolist() == [0] * 8
    envs.close()


@pytest.mark.parametrize("mode", [None, gym.vector.AutoresetMode.SAME_STEP, "same_step", "SameStep", "same-step"],
                         ids=["default", "enum", "snake", "value", "kebab"])
def test_make_vec_same_step_autoreset_by_default_never_drops_a_program(mode: object) -> None:
    """Every step runs every program it is given: the default is same-step autoreset."""
    kwargs = {} if mode is None else {"autoreset_mode": mode}
    envs = gym.make_vec("CodeExec-v0", num_envs=2, executor=get_sandbox("process"), **kwargs)
    obs, info = envs.reset(seed=0)
    for _ in range(2):  # two episodes back to back: no reset step in between
        actions = tuple(BY_ID[p].reference_solution for p in info["problem_id"])  # the next episode's, after a step
        obs, rewards, term, _, info = envs.step(actions)
        assert term.all() and rewards.tolist() == [1.0, 1.0]
        assert list(info["final_info"]["reward_breakdown"]["tier"]) == ["all_tests", "all_tests"]
        assert obs["turn"].tolist() == [0, 0]  # already the next episode's first observation
    envs.close()


def test_make_vec_names_an_unknown_autoreset_mode() -> None:
    with pytest.raises(ValueError, match=r"autoreset_mode: expected one of 'next_step', 'same_step', 'disabled'"):
        gym.make_vec("CodeExec-v0", num_envs=2, executor=get_sandbox("process"), autoreset_mode="sometimes")


def _alive(p: psutil.Process) -> str | None:
    """``name (parent pid)`` of a live process, None for one that is gone (or a zombie)."""
    try:
        return None if p.status() == psutil.STATUS_ZOMBIE else f"{p.name()} (parent {p.ppid()})"
    except psutil.NoSuchProcess:
        return None


def _children() -> dict[int, str]:
    return {p.pid: about for p in psutil.Process().children(recursive=True) if (about := _alive(p))}


@pytest.mark.slow
@pytest.mark.parametrize("context", [None, "forkserver"], ids=["default-context", "forkserver"])
def test_async_vector_env_shows_the_text_and_leaves_no_process_behind(context: str | None) -> None:
    """Text observations cross from the workers (fork: inherited; forkserver: descriptors passed),
    and close() leaves nothing: no helper of the shared memory, no sandbox of a worker."""
    single = make()

    def cycle() -> list[psutil.Process]:
        envs = gym.make_vec("CodeExec-v0", num_envs=2, vectorization_mode="async", vector_kwargs={"context": context})
        obs, info = envs.reset(seed=0)
        assert list(obs["prompt"]) == [task_prompt(BY_ID[p]) for p in info["problem_id"]]
        assert list(obs["prompt"]) == [single.reset(seed=i)[0]["prompt"] for i in range(2)]
        obs, *_ = envs.step(("print('λ\\x00 →')\n",) * 2)
        assert all("λ\x00 →" in out + err for out, err in zip(obs["stdout"], obs["stderr"], strict=True))
        assert envs.observation_space.contains(obs)
        workers = [psutil.Process(p.pid) for p in envs.unwrapped.processes]  # type: ignore[attr-defined]
        their_sandboxes = [c for w in workers for c in w.children(recursive=True)]
        assert their_sandboxes  # each worker runs programs in its own sandbox
        envs.close()
        return their_sandboxes

    cycle()  # what lives as long as this process: a forkserver (the spaces' dummy env starts no sandbox)
    before = _children()
    left = {p.pid: about for _ in range(3) for p in cycle() if (about := _alive(p))}
    after = _children()
    assert len(after) == len(before), {pid: after[pid] for pid in after.keys() - before.keys()}
    assert not left, left  # a worker's sandbox ends with the worker, not a moment after it


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_gymnasium_modes(mode: str) -> None:
    envs = gym.make_vec("CodeExec-v0", num_envs=8, vectorization_mode=mode)
    _, info = envs.reset(seed=0)
    assert list(info["problem_id"]) == [make().reset(seed=i)[1]["problem_id"] for i in range(8)]
    actions = tuple(BY_ID[p].reference_solution for p in info["problem_id"])
    _, rewards, term, _, info = envs.step(actions)
    assert rewards.tolist() == [1.0] * 8 and term.all()
    _, rewards, *_ = envs.step(("def f(:\n",) * 8)  # autoreset step
    _obs, rewards, *_ = envs.step(("def f(:\n",) * 8)
    assert rewards.tolist() == [-1.0] * 8
    envs.close()


# ------------------------------------------------------------------------------ batched API


def test_evaluate_k_candidates_in_one_batch_identical_ones_judged_once() -> None:
    runner = CountingRunner()
    candidates = [EVENS.reference_solution, WRONG_EVENS, EVENS.reference_solution, "def f(:\n"]
    env = CodeExecEnv(executor=runner)
    results = env.evaluate(candidates, problem_id="builtin/sum-of-evens")
    assert [r.reward for r in results] == [1.0, results[1].reward, 1.0, -1.0]
    assert runner.batches == [3]  # 3 distinct programs, each one joint run of its public and hidden tests
    for r in results:
        assert env.observation_space.contains(r.observation)
    assert results[1].observation["public_passed"] == 1
    # N tasks x K candidates
    both = evaluate([(EVENS, EVENS.reference_solution), (FIZZ, FIZZ.reference_solution), (FIZZ, "print(1)\n")],
                    executor=get_sandbox("process"))  # fmt: skip
    assert [r.problem_id for r in both] == ["builtin/sum-of-evens", "builtin/fizzbuzz-line", "builtin/fizzbuzz-line"]
    assert [r.reward for r in both][:2] == [1.0, 1.0] and both[2].reward is not None and both[2].reward < 0.8


# ------------------------------------------------------------------------------ logs


def test_trajectory_log_one_line_per_step_with_everything(tmp_path: Path) -> None:
    env = make(log_dir=str(tmp_path), max_turns=2)
    env.reset(seed=5, options={"problem_id": "builtin/sum-of-evens"})
    env.step(WRONG_EVENS)
    env.step(EVENS.reference_solution)
    env.close()
    (path,) = tmp_path.glob("*.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["trace_id"] for x in lines] == ["builtin/sum-of-evens/0/0/0", "builtin/sum-of-evens/0/1/0"]
    first, last = lines
    assert first["seed"] == 5 and first["action"] == WRONG_EVENS and first["prompt"].startswith(EVENS.prompt)
    assert first["executions"] and first["public_cases"] and first["reward_breakdown"]["tier"] == "partial"
    assert [s for s, _ in last["transitions"]] == ["generating", "queued", "running", "executed", "queued", "running", "executed", "judged"]
    assert last["reward"] + first["reward"] == pytest.approx(1.0) and last["terminated"]
    assert last["config"]["max_turns"] == 2 and last["hidden_cases"]


def test_trajectory_log_sampling_and_rotation(tmp_path: Path) -> None:
    env = make(log_dir=str(tmp_path / "every3"), log_every=3)
    env.reset(seed=0)
    for _ in range(7):
        env.step("print(1)\n")
        env.reset()
    env.close()
    lines = [json.loads(x) for f in (tmp_path / "every3").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert sorted(x["episode"] for x in lines) == [0, 3, 6]
    env = make(log_dir=str(tmp_path / "rotate"))
    assert env.logger is not None
    env.logger.max_bytes = 4096
    env.reset(seed=0)
    for _ in range(6):
        env.step(EVENS.reference_solution)
        env.reset()
    env.close()
    files = sorted((tmp_path / "rotate").glob("*.jsonl"))
    assert len(files) > 1 and sum(len(f.read_text().splitlines()) for f in files) == 6


def test_inline_task_lists_and_generated_sets() -> None:
    custom = Task.model_validate({**EVENS.model_dump(), "problem_id": "mine/evens"})
    env = make(tasks=[custom])
    env.reset(seed=0)
    assert env.step(EVENS.reference_solution)[1] == 1.0
    env = make(tasks="synthetic:arith", task_params={"n": 5, "seed": 1})
    _, info = env.reset(seed=0)
    assert info["problem_id"].startswith("synthetic:arith/")
    with pytest.raises(TypeError, match="tasks: expected a task set name"):
        make(tasks=[1, 2])  # type: ignore[list-item]


@pytest.mark.parametrize("module", ["code_env.env", "code_env.spaces", "code_env._textimage"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_public_api_lists_the_env() -> None:
    assert {"CodeExecEnv", "EnvConfig", "Evaluation", "evaluate", "AnyText"} <= set(code_env.__all__)


def test_a_vector_env_stacks_a_sandbox_failure_beside_ordinary_results() -> None:
    broken = EVENS.model_copy(update={"problem_id": "test/broken-checker", "public_tests": [
        c.model_copy(update={"checker": "raise SystemExit(3)"}) for c in EVENS.public_tests]})  # fmt: skip
    envs = gym.make_vec("CodeExec-v0", num_envs=3, executor=get_sandbox("process"), tasks=[EVENS, broken])
    for env, pid in zip(envs.unwrapped.envs, ["builtin/sum-of-evens", "test/broken-checker", "builtin/sum-of-evens"],
                        strict=True):  # fmt: skip
        env.reset(seed=0, options={"problem_id": pid})
    _, rewards, term, trunc, info = envs.step((EVENS.reference_solution,) * 3)
    assert rewards.tolist() == [1.0, 0.0, 1.0] and term.tolist() == [True, False, True] and trunc.tolist() == [False, True, False]
    final = info["final_info"]  # every sub-env ended: same-step autoreset moved their step infos here
    assert final["sandbox_error"][0] is None and "checker failed" in final["sandbox_error"][1]
    assert final["reward_breakdown"]["_reward"].tolist() == [True, False, True]  # no reward where the sandbox failed
    envs.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_judges_alike(backend: str) -> None:
    env = CodeExecEnv(executor=get_sandbox(backend), timeout_s=1.0)
    rewards = []
    for task in (EVENS, FIZZ):
        for program in (task.reference_solution, "def f(:\n", "while True:\n    pass\n"):
            env.reset(seed=0, options={"problem_id": task.problem_id})
            rewards.append(env.step(program)[1])
    assert rewards == [1.0, -1.0, -0.5] * 2


def test_the_envs_pickle_and_copy_with_the_process_wide_sandbox() -> None:
    """Ray's and RLlib's remote runners (cloudpickle), SubprocVecEnv and deepcopy copy an env:
    the copy gets the process-wide sandbox of its own process, and steps as the original does."""
    import copy
    import pickle

    import cloudpickle

    import code_env.tokens

    task = registry.resolve("builtin/sum-of-evens")
    for make in (lambda: code_env.CodeExecEnv(), lambda: code_env.tokens.CodeExecTokensEnv()):
        env = make()
        assert isinstance(env.executor, SharedSandbox)
        for copied in (pickle.loads(pickle.dumps(env)), pickle.loads(cloudpickle.dumps(env)), copy.deepcopy(env)):
            # a handle of its own on this process's sandbox (each env's close releases its own)
            assert isinstance(copied.executor, SharedSandbox) and copied.executor is not env.executor
            assert copied.executor.backend == env.executor.backend
            if isinstance(env, code_env.CodeExecEnv):
                copied.reset(seed=0, options={"problem_id": task.problem_id})
                assert copied.step(task.reference_solution)[1] == 1.0
            else:
                copied.reset(seed=0)
                rewards = [copied.step(a)[1] for a in copied.reference_actions()]
                assert rewards[-1] == 1.0
            copied.close()
        env.close()
    own = Sandbox(workers=1)
    try:
        with pytest.raises(TypeError, match="executor object of its own \\(Sandbox\\) cannot be pickled or copied"):
            pickle.dumps(code_env.CodeExecEnv(executor=own))
    finally:
        own.close()
