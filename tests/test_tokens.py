"""CodeExecTokens-v0: spaces and both env checkers, the token language, rewards through the
sandbox (right, equivalent, constant, empty, garbled, length budget), seeding, sandbox failures,
the trajectory log (read by the log tools), misuse, and Stable-Baselines3 PPO on DummyVecEnv and
SubprocVecEnv."""

from __future__ import annotations

import doctest
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import code_env
import code_env.tokens
import registry
from code_env import RewardConfig
from code_env._textimage import GREEN, RED
from code_env.logtools import replay, stats
from code_env.tokens import END, VOCAB, CodeExecTokensEnv, expression, program, tokenize
from code_env.trajectory import read_log
from sandbox.languages import discover_cached

from ._records import assert_complete
from .conftest import get_sandbox

SEVEN_X = "synthetic:arith/s0/d1/1"  # difficulty 1, seed 0, task 1: (7 * x)


def make(**kw: Any) -> CodeExecTokensEnv:
    return CodeExecTokensEnv(executor=get_sandbox("process"), **kw)


def write(env: CodeExecTokensEnv, actions: list[int]) -> tuple[list[np.ndarray], list[float], bool, bool, dict[str, Any]]:
    observations, rewards = [], []
    terminated = truncated = False
    info: dict[str, Any] = {}
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        observations.append(obs)
        rewards.append(reward)
    return observations, rewards, terminated, truncated, info


# ------------------------------------------------------------------------ spaces, checkers


def test_registered_and_checked_without_warnings() -> None:
    # pytest turns every warning into an error: neither checker may warn
    env = gym.make("CodeExecTokens-v0")
    assert isinstance(env.unwrapped, CodeExecTokensEnv)
    check_env(env.unwrapped)
    check_env(gym.make("CodeExecTokens-v0", difficulty=None, max_tokens=40, render_mode="ansi").unwrapped)
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    sb3_check_env(make(), warn=True)
    env.close()


def test_spaces_and_observation_layout() -> None:
    env = make(max_tokens=8)
    assert env.action_space == gym.spaces.Discrete(len(VOCAB)) and VOCAB[END] == "<end>"
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.dtype == np.float32
    assert space.shape == (5 * 4 + 8 * len(VOCAB) + 1,)
    assert np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
    obs, info = env.reset(seed=0, options={"problem_id": SEVEN_X})
    task = env.task
    assert task is not None and info == {"problem_id": SEVEN_X, "difficulty": 1}
    examples = obs[:20].reshape(4, 5)
    for row, case in zip(examples, task.public_tests, strict=True):
        x, y = case.args[0], case.expected
        assert row[0] == 1.0
        assert row[1] == pytest.approx(np.sign(x) * np.log1p(abs(x)) / 16, abs=1e-6)
        assert row[2] == pytest.approx(np.sign(y) * np.log1p(abs(y)) / 16, abs=1e-6)
        assert row[3] == pytest.approx(np.clip(x / 20, -1, 1)) and row[4] == pytest.approx(np.clip(y / 20, -1, 1))
    assert not obs[20:].any()  # no tokens yet
    obs, *_ = env.step(np.int64(VOCAB.index("7")))
    obs, *_ = env.step(VOCAB.index("*"))
    rows = obs[20:-1].reshape(8, len(VOCAB))
    assert rows[0].argmax() == VOCAB.index("7") and rows[1].argmax() == VOCAB.index("*")
    assert rows.sum() == 2 and obs[-1] == pytest.approx(2 / 8) and space.contains(obs)
    assert np.array_equal(obs[:20], examples.reshape(-1))  # the examples stay


def test_token_language() -> None:
    assert expression(tokenize("(7 * x)")) == "(7 * x)"
    assert expression(tokenize("((x+12)-(3*x))")) == "((x + 12) - (3 * x))"
    assert expression([VOCAB.index("1"), VOCAB.index("2")]) == "12"  # digits make numbers
    star = VOCAB.index("*")
    assert expression([0, star, star, VOCAB.index("2")]) == "x * * 2"  # never a power
    assert expression([]) == ""
    with pytest.raises(ValueError, match="'/' is not in the vocabulary"):
        tokenize("x / 2")
    assert program("f", "") == "def f(x):\n    result = \n    return result\n"  # a syntax error
    # every reference of the family is written with the vocabulary
    for task in registry.load("synthetic:arith", n=50, seed=3):
        ref = task.reference_solution.split("return", 1)[1].strip()
        assert expression(tokenize(ref)) == ref


# --------------------------------------------------------------------------------- rewards


def test_the_reference_token_by_token_earns_1() -> None:
    env = make(max_tokens=16)
    for pid in [SEVEN_X, *(t.problem_id for t in env.tasks[:5])]:
        env.reset(options={"problem_id": pid})
        actions = env.reference_actions()
        _, rewards, terminated, truncated, info = write(env, actions)
        assert rewards[:-1] == [0.0] * (len(actions) - 1)
        assert (rewards[-1], terminated, truncated) == (1.0, True, False), info
        assert info["reward_breakdown"]["tier"] == "all_tests" and info["budget"] is None
        assert info["sandbox_error"] is None and info["n_tokens"] == len(actions) - 1
        assert env.task is not None and info["expression"] in env.task.reference_solution


@pytest.mark.slow
@pytest.mark.parametrize("language", [pytest.param(n, marks=pytest.mark.skipif(not discover_cached(n).found, reason=f"no {n}"))
                                      for n in ("cpp", "javascript", "typescript")])  # fmt: skip
def test_the_program_can_be_in_another_language(language: str, tmp_path: Any) -> None:
    env = make(max_tokens=16, language=language, log_dir=tmp_path)
    env.reset(seed=0, options={"problem_id": SEVEN_X})
    assert env.unwrapped.language == language
    _, rewards, terminated, _, info = write(env, env.reference_actions())
    assert (rewards[-1], terminated, info["reward_breakdown"]["tier"]) == (1.0, True, "all_tests"), info
    for expr, tier in [("x*6", "partial"), ("", "syntax_error"), ("x**2", "syntax_error")]:
        env.reset(options={"problem_id": SEVEN_X})
        _, rewards, _, _, info = write(env, [*tokenize(expr), END])
        assert info["reward_breakdown"]["tier"] == tier, (expr, info)
    if language == "cpp":  # the same tokens, C++'s reading: 010 is octal (8), where Python refuses it
        assert program("f", "x * 010", "cpp") == "long long f(long long x) {\n    long long result = x * 010;\n    return result;\n}\n"
        env.reset(options={"problem_id": SEVEN_X})
        _, _, _, _, info = write(env, [*tokenize("x*010"), END])
        assert info["reward_breakdown"]["tier"] == "partial"  # x * 8, a wrong answer, not a syntax error
    env.close()
    [record, *_] = read_log(tmp_path)
    assert record["config"]["language"] == language and "Write the solution in" in record["prompt"]
    assert replay(tmp_path).ok  # code-env replay re-judges it in the same language


def test_the_program_language_is_checked() -> None:
    with pytest.raises(ValueError, match="CodeExecTokens-v0: language: unknown language 'cobol'"):
        make(language="cobol")
    with pytest.raises(ValueError, match="CodeExecTokens-v0: language: a rust program cannot answer the arith tasks' "
                       "function tests \\(they take python, javascript, typescript, cpp\\)"):
        make(language="rust")


@pytest.mark.parametrize(
    ("expr", "tier", "reward"),
    [
        ("x*7", "all_tests", 1.0),  # an equivalent program: graded by running it
        ("x+x+x+x+x+x+x", "all_tests", 1.0),
        ("7", "partial", None),  # a constant
        ("x*6", "partial", None),
        ("", "syntax_error", -1.0),  # <end> at once
        ("7x", "syntax_error", -1.0),
        ("(x*7", "syntax_error", -1.0),
        ("x**2", "syntax_error", -1.0),  # two '*' are not a power
        ("xx", "syntax_error", -1.0),  # x x
        ("x(7)", "partial", 0.0),  # TypeError: it compiles, every test fails
    ],
)
def test_rewards_follow_the_grader(expr: str, tier: str, reward: float | None) -> None:
    env = make()
    env.reset(seed=0, options={"problem_id": SEVEN_X})
    _, rewards, terminated, truncated, info = write(env, [*tokenize(expr), END])
    assert (terminated, truncated) == (True, False)
    assert info["reward_breakdown"]["tier"] == tier, info
    if reward is not None:
        assert rewards[-1] == reward
    else:
        assert rewards[-1] < 0.8
    assert rewards[-1] == info["reward_breakdown"]["reward"]
    assert env.task is not None
    graded = code_env.grade(env.task, program("f", info["expression"]), sandbox=get_sandbox("process"))
    assert graded.reward == rewards[-1]  # exactly what CodeExec-v0's grader says


def test_length_budget_grades_what_is_written() -> None:
    env = make(max_tokens=5)
    env.reset(options={"problem_id": SEVEN_X})
    _, rewards, terminated, truncated, info = write(env, tokenize("(7*x)"))  # no <end>: the 5th token ends it
    assert (rewards, terminated, truncated) == ([0.0] * 4 + [1.0], True, False)
    assert info["budget"] == "max_tokens" and info["expression"] == "(7 * x)"
    env.reset(options={"problem_id": SEVEN_X})
    _, rewards, terminated, _, info = write(env, tokenize("(7*x"))
    assert not terminated and "reward_breakdown" not in info
    _, reward, terminated, _, info = env.step(VOCAB.index("x"))
    assert (reward, terminated, info["reward_breakdown"]["tier"]) == (-1.0, True, "syntax_error")
    with pytest.raises(ResetNeeded, match="the episode is over"):
        env.step(0)


def test_reward_config_applies() -> None:
    env = make(reward=RewardConfig(syntax_error=-0.25, all_tests=0.9))
    env.reset(options={"problem_id": SEVEN_X})
    assert env.step(END)[1] == -0.25
    env.reset(options={"problem_id": SEVEN_X})
    assert write(env, env.reference_actions())[1][-1] == 0.9


def test_a_sandbox_failure_truncates_and_is_reported_not_scored() -> None:
    # a real failure on our side: the task's special checker is broken (it cannot judge anything)
    env = make()
    task = env._by_id[SEVEN_X]
    env._by_id[SEVEN_X] = task.model_copy(update={"public_tests": [c.model_copy(update={"checker": "raise SystemExit(3)"})
                                                                   for c in task.public_tests]})  # fmt: skip
    env.reset(options={"problem_id": SEVEN_X})
    _, rewards, terminated, truncated, info = write(env, env.reference_actions())
    assert (rewards[-1], terminated, truncated) == (0.0, False, True)
    assert "checker failed" in info["sandbox_error"] and info["reward_breakdown"]["tier"] == "sandbox_error"


def test_a_failure_of_the_judges_endpoint_truncates_and_is_reported_not_scored(monkeypatch: pytest.MonkeyPatch) -> None:
    from code_env.judge import JudgeConfig

    from ._openai_server import KEY, OpenAIServer, Reply

    monkeypatch.setenv("TOKENS_JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, attempt: Reply(status=503)) as server:
        judge = JudgeConfig(base_url=server.url, model="m", api_key="${TOKENS_JUDGE_KEY}", weight=0.3, max_retries=0,
                            mode="live")  # fmt: skip
        env = make(reward=RewardConfig(judge=judge))
        env.reset(options={"problem_id": SEVEN_X})
        _, rewards, terminated, truncated, info = write(env, env.reference_actions())
    assert (rewards[-1], terminated, truncated) == (0.0, False, True)
    assert "HTTP 503" in info["judge_error"] and info["sandbox_error"] is None
    assert info["reward_breakdown"]["tier"] == "judge_error"


# -------------------------------------------------------------------------------- seeding


def test_same_seed_same_actions_same_episodes() -> None:
    def run(env: CodeExecTokensEnv) -> list[Any]:
        rng = np.random.default_rng(7)
        trace: list[Any] = []
        obs, info = env.reset(seed=123)
        trace.append((obs, info))
        for _ in range(120):
            obs, reward, terminated, truncated, info = env.step(int(rng.integers(0, len(VOCAB))))
            trace.append((obs, reward, terminated, truncated, info))
            if terminated or truncated:
                trace.append(env.reset())  # unseeded: continues the seeded generator
        return trace

    a, b = run(make()), run(make())
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert len(x) == len(y)
        for u, v in zip(x, y, strict=True):
            if isinstance(u, np.ndarray):
                assert np.array_equal(u, v)
            else:
                assert u == v
    env = make()
    assert len({env.reset(seed=s)[1]["problem_id"] for s in range(20)}) > 5  # seeds pick different tasks


def test_pool_parameters() -> None:
    env = make(difficulty=3, n_tasks=7, task_seed=5, max_tokens=40)
    assert [t.problem_id for t in env.tasks] == [t.problem_id for t in registry.load("synthetic:arith", n=7, seed=5, difficulty=3)]
    assert {t.difficulty for t in env.tasks} == {3}
    assert {t.difficulty for t in make(difficulty=None, n_tasks=10).tasks} == {1, 2, 3, 4, 5}
    env.reset(options={"problem_id": "synthetic:arith/s5/d3/6"})
    assert write(env, env.reference_actions())[1][-1] == 1.0


def test_render() -> None:
    env = make(render_mode="ansi")
    env.reset(options={"problem_id": SEVEN_X})
    env.step(VOCAB.index("7"))
    assert env.render() == f"{SEVEN_X}: f(x) = 7\n"
    assert make().render() is None


def test_render_rgb_array_one_frame_size_coloured_by_the_grade() -> None:
    env = make(render_mode="rgb_array")
    env.reset(options={"problem_id": SEVEN_X})
    first = env.render()
    assert isinstance(first, np.ndarray) and first.shape == (100, 240, 3) and first.dtype == np.uint8
    frames = [first]
    for action in [*tokenize("7 * x"), END]:
        env.step(action)
        frames.append(env.render())
    assert all(f.shape == first.shape for f in frames) and not np.array_equal(frames[0], frames[-1])
    expression_row = frames[-1][10:20]  # the second text row: f(x) = 7 * x <end>
    assert (expression_row == GREEN).all(axis=-1).any()  # graded 1.0
    env.reset(options={"problem_id": SEVEN_X})
    for action in [*tokenize("x"), END]:
        env.step(action)
    assert (env.render()[10:20] == RED).all(axis=-1).any()  # graded lower


def test_docstring_example_runs() -> None:
    result = doctest.testmod(code_env.tokens, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------------------ the log


def test_trajectory_log_every_nth_episode_is_read_replayed_and_counted_by_the_log_tools(tmp_path: Any) -> None:
    log = tmp_path / "tokens"
    env = make(max_tokens=5, log_dir=log, log_every=2)
    episodes = [("7 * x", [END]), ("x", [END]), ("", [END]), ("(7*x)", []), ("7 7 7 7 7", [])]  # the last two fill the budget
    env.reset(seed=4, options={"problem_id": SEVEN_X})
    rewards = []
    for k, (expr, end) in enumerate(episodes):
        if k:
            env.reset(options={"problem_id": SEVEN_X})
        rewards.append(write(env, [*tokenize(expr), *end])[1][-1])
    env.close()
    assert rewards[:3] == [1.0, 0.0, -1.0] and rewards[3] == 1.0
    records = list(read_log(log))
    assert [r["episode"] for r in records] == [0, 2, 4]  # every 2nd episode, counted from 0
    first, empty, sevens = records
    assert first["trace_id"] == f"{SEVEN_X}/0/0/0" and first["seed"] == 4 and first["turn"] == 0
    assert first["action"] == program("f", "7 * x") and first["reward"] == 1.0 and first["terminated"]
    assert first["tokens"] == [*tokenize("7 * x"), END] and not first["max_tokens_reached"]
    assert first["reward_breakdown"]["tier"] == "all_tests" and len(first["hidden_cases"]) == 8
    assert all(e["trace_id"].startswith(f"{SEVEN_X}/0/0/") for e in first["executions"])  # the runs' own ids
    assert (empty["action"], empty["reward"], empty["reward_breakdown"]["tier"]) == (program("f", ""), -1.0, "syntax_error")
    assert sevens["max_tokens_reached"] and sevens["budget"] is None and sevens["expression"] == "77777"
    assert sevens["trace_id"] == f"{SEVEN_X}/4/0/0"  # sample: episodes since the seeded reset
    # the record has the shape of a CodeExec-v0 step's (every key of it), so the log tools read it
    text_env = code_env.CodeExecEnv("synthetic:arith", task_params={"n": 5, "seed": 0, "difficulty": 1},
                                    executor=get_sandbox("process"), log_dir=str(tmp_path / "text"))  # fmt: skip
    text_env.reset(seed=0, options={"problem_id": SEVEN_X})
    text_env.step(program("f", "7 * x"))
    text_env.close()
    (text_record,) = read_log(tmp_path / "text")
    assert set(text_record) <= set(first)
    assert first["config"] == {**text_record["config"], "task_params": {"n": 200, "seed": 0, "difficulty": 1},
                               "log_dir": str(log), "log_every": 2}  # fmt: skip
    report = replay(log, executor=get_sandbox("process"))
    assert report.ok and (report.episodes, report.steps) == (3, 3), report.summary()
    st = stats(log)
    assert (st.episodes, st.outcomes["all_tests"], st.outcomes["syntax_error"]) == (3, 1, 1)
    assert st.outcomes["budget_exhausted"] == 0  # the length budget ends with the program's own grade
    assert_complete(first, trainer=None, step=False, advantage=False)  # no trainer said which update it is in
    assert first["completion"] == "7 * x <end>" and (first["completion_truncated"], first["completion_tokens"]) == (False, 4)
    assert sevens["completion_truncated"] and sevens["completion_tokens"] == 5


def test_under_an_on_policy_trainer_each_record_names_its_update(tmp_path: Any) -> None:
    """``rollout=(n_steps, n_envs)``: the step of a record is the trainer's step count after the
    update that trains on the episode (PPO: ``num_timesteps``, the step of its curve row)."""
    env = make(max_tokens=5, log_dir=tmp_path, rollout=(3, 2))
    for expr in ("7 * x", "x", "x + 1"):  # 4 actions (update 2), 2 (6 in all: update 2), 4 (10: update 4)
        env.reset(options={"problem_id": SEVEN_X})
        write(env, [*tokenize(expr), END])
    env.close()
    records = list(read_log(tmp_path))
    assert [r["step"] for r in records] == [12, 12, 24] and {r["trainer"] for r in records} == {"ppo"}
    for rec in records:
        assert_complete(rec, trainer="ppo", advantage=False)  # PPO's advantages are per token, in its buffer
    assert replay(tmp_path, executor=get_sandbox("process")).ok
    with pytest.raises(ValueError, match="rollout: expected \\(n_steps, n_envs\\)"):
        make(rollout=(0, 2))


def test_no_log_without_log_dir_and_bad_log_arguments(tmp_path: Any) -> None:
    env = make()
    assert env.logger is None
    with pytest.raises(ValueError, match="log_every: expected an int >= 1, got 0"):
        make(log_dir=tmp_path, log_every=0)
    with pytest.raises(TypeError, match="log_dir: expected a folder path or None, got int"):
        make(log_dir=3)


# --------------------------------------------------------------------------------- misuse


def test_misuse() -> None:
    env = make()
    with pytest.raises(ResetNeeded, match="before reset"):
        env.step(0)
    with pytest.raises(ResetNeeded):
        gym.make("CodeExecTokens-v0").step(0)  # Gymnasium's order enforcing says so too
    env.reset(seed=0)
    for bad in [len(VOCAB), -1, 1.0, "x", None, np.array([1, 2])]:
        with pytest.raises(ValueError, match=r"the action must be a token id, an int in 0\.\.16"):
            env.step(bad)
    env.step(np.int64(0))  # still usable after refused actions
    with pytest.raises(ValueError, match="unknown"):
        env.reset(options={"bogus": 1})
    with pytest.raises(registry.UnknownTaskError):
        env.reset(options={"problem_id": "synthetic:arith/s0/d1/100000"})
    with pytest.raises(TypeError, match="problem_id: expected str"):
        env.reset(options={"problem_id": 3})
    bad_kwargs: list[dict[str, Any]] = [{"max_tokens": 0}, {"max_tokens": 2.5}, {"difficulty": 9}, {"n_tasks": 0}, {"render_mode": "human"}]
    for kw in bad_kwargs:
        with pytest.raises(ValueError):
            make(**kw)
    with pytest.raises(TypeError, match="reward"):
        make(reward={"syntax_error": -1})


# ---------------------------------------------------------------------- Stable-Baselines3


def _params(model: Any) -> list[Any]:
    return [p.detach().clone() for p in model.policy.parameters()]


def _changed(before: list[Any], model: Any) -> bool:
    import torch

    return any(not torch.equal(b, a) for b, a in zip(before, model.policy.parameters(), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("vec", ["DummyVecEnv", "SubprocVecEnv"])
def test_ppo_out_of_the_box(vec: str) -> None:
    # SubprocVecEnv with SB3's default start method (forkserver): each worker process makes its
    # own sandbox.
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if vec == "DummyVecEnv":
        venv = DummyVecEnv([make])
    else:
        venv = SubprocVecEnv([lambda: gym.make("code_env:CodeExecTokens-v0") for _ in range(2)])
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, seed=0, device="cpu")
    before = _params(model)
    model.learn(256)
    assert model.num_timesteps == 256 and _changed(before, model)
    venv.close()


@pytest.mark.slow
def test_ppo_learns_to_write_programs_that_compile() -> None:
    # 4096 steps (~15 s): the share of syntax errors falls, so the return rises (seeds 0-2 all
    # went from about -0.84 in the first fifth of the episodes to -0.38 .. -0.48 in the last)
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    returns: list[float] = []

    class Recording(CodeExecTokensEnv):
        def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
            result = super().step(action)
            if result[2] or result[3]:
                returns.append(result[1])
            return result

    venv = DummyVecEnv([lambda: Recording(executor=get_sandbox("process")) for _ in range(4)])
    PPO("MlpPolicy", venv, n_steps=128, batch_size=128, seed=0, device="cpu").learn(4096)
    fifth = len(returns) // 5
    first, last = np.mean(returns[:fifth]), np.mean(returns[-fifth:])
    assert last > first + 0.2, (first, last)
    venv.close()


def test_gymnasium_vector_env() -> None:
    envs = gym.make_vec("CodeExecTokens-v0", num_envs=3, executor=get_sandbox("process"))
    obs, info = envs.reset(seed=0)
    single = make().observation_space
    assert obs.shape[0] == 3 and all(single.contains(o) for o in obs) and len(info["problem_id"]) == 3
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(40):
        obs, reward, terminated, truncated, info = envs.step(rng.integers(0, len(VOCAB), size=3))
        ended += int((terminated | truncated).sum())
        assert obs.dtype == np.float32 and reward.shape == (3,)
    assert ended > 0
    envs.close()
