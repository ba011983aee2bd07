"""TRL: ``TRLReward`` called the way the installed TRL calls reward functions, ``trl_dataset``, and a
real ``trl.GRPOTrainer`` run (a tiny randomly initialised GPT-2 and a tokenizer trained here, on
CPU, no downloads)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

import code_env
import registry
from baselines.tiny_lm import build_tiny_lm
from code_env import TRLReward, trl_dataset
from registry import Task, TestCase

from .conftest import get_sandbox

# No model hub: everything below is built here. (Set before transformers is imported anywhere.)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

TASKS = registry.load("builtin")
EVENS = registry.get(TASKS, "builtin/sum-of-evens")
FIZZ = registry.get(TASKS, "builtin/fizzbuzz-line")


def _tiny(name: str, body: str, cases: list[tuple[int, int]]) -> Task:
    """A HumanEval-style task whose prompt ends inside the function: a base model continues it."""
    tests = [TestCase(args=[a], expected=e) for a, e in cases]
    prompt = f"def {name}(x):\n    return "
    return Task(problem_id=f"tiny/{name}", prompt=prompt, kind="function", entry_point=name, starter_code=prompt,
                reference_solution=f"{prompt}{body}\n", public_tests=tests[:2], hidden_tests=tests[2:])  # fmt: skip


TINY = [_tiny("add_one", "x + 1", [(1, 2), (5, 6), (-3, -2)]), _tiny("double", "x * 2", [(1, 2), (4, 8), (-3, -6)])]


class Logged:
    """What a reward function hands to TRL's ``log_extra`` and ``log_metric``."""

    def __init__(self) -> None:
        self.extra: dict[str, list[Any]] = {}
        self.metrics: dict[str, list[float]] = {}

    def log_extra(self, column: str, values: list[Any]) -> None:
        self.extra.setdefault(column, []).extend(values)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)


def test_reward_called_as_grpo_trainer_calls_it() -> None:
    # trl 1.x, GRPOTrainer._calculate_rewards: every argument by keyword, the dataset's other
    # columns, and trainer_state / log_extra / log_metric
    from transformers import TrainerState
    from trl.trainer.utils import get_callable_name, is_async_callable

    fn = TRLReward("builtin", sandbox=get_sandbox("process"))
    assert get_callable_name(fn) == "code_env_reward" and not is_async_callable(fn)
    logged = Logged()
    prompts = [[{"role": "user", "content": "sum the evens"}]] * 2 + [[{"role": "user", "content": "fizzbuzz"}]] * 2
    completions = [
        [{"role": "assistant", "content": f"Sure.\n```python\n{EVENS.reference_solution}```"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "```python\ndef sum_of_evens(nums:\n```"}]}],
        [{"role": "assistant", "content": f"```python\n{FIZZ.reference_solution}"}],  # cut off inside its fence
        [{"role": "assistant", "content": ""}],
    ]
    rewards = fn(prompts=prompts, completions=completions, completion_ids=[[1, 2]] * 4,
                 problem_id=[EVENS.problem_id] * 2 + [FIZZ.problem_id] * 2, difficulty=[1, 1, 2, 2],
                 trainer_state=TrainerState(), log_extra=logged.log_extra, log_metric=logged.log_metric)  # fmt: skip
    assert rewards == [1.0, -1.0, 1.0, -0.5]
    assert logged.extra == {"code_env_tier": ["all_tests", "syntax_error", "all_tests", "no_attempt"]}
    assert logged.metrics == {"code_env/solved": [0.5], "code_env/syntax_error": [0.25], "code_env/sandbox_error": [0.0],
                              "code_env/judge_error": [0.0]}
    assert [g.breakdown.tier for g in fn.last_grades] == logged.extra["code_env_tier"]


def test_plain_prompts_of_a_base_model_are_joined_with_their_completion() -> None:
    fn = TRLReward(TINY, sandbox=get_sandbox("process"))
    rows = code_env.trl.trl_rows(TINY, format="plain")
    assert [r["prompt"] for r in rows] == [t.prompt for t in TINY]  # the model continues the function
    got = fn(prompts=[rows[0]["prompt"]] * 4, completions=["x + 1", "x + 1\n```\nDone", "x", ")"],
             problem_id=["tiny/add_one"] * 4)  # fmt: skip
    assert got == [1.0, 1.0, 0.0, -1.0]
    prose = code_env.trl.trl_rows([EVENS], format="plain")[0]["prompt"]
    assert prose.startswith(EVENS.prompt) and prose.endswith("```python\n")  # a prose task: an opened fence
    body = EVENS.reference_solution
    assert fn(prompts=[prose] * 3, completions=[body, body + "```\nThat is all.", body.rstrip("\n")[:-3]],
              problem_id=[EVENS.problem_id] * 3) == [1.0, 1.0, -1.0]  # fmt: skip


def test_reward_configuration(tmp_path: Path) -> None:
    toml = tmp_path / "reward.toml"
    toml.write_text("[reward]\nsyntax_error = -2.0\n")
    for config in (str(toml), toml, {"syntax_error": -2.0}, code_env.RewardConfig(syntax_error=-2.0)):
        fn = TRLReward([EVENS], sandbox=get_sandbox("process"), config=config)
        assert fn(["p"], ["def sum_of_evens(:"], problem_id=[EVENS.problem_id]) == [-2.0]


def test_a_sandbox_failure_is_none_which_trl_skips() -> None:
    from sandbox import ExecutionResult, RunRequest

    class Failing:  # every run answered as the sandbox answers when it fails itself
        def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
            return [ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test") for r in requests]

    logged = Logged()
    fn = TRLReward([EVENS], sandbox=Failing())
    assert fn([""], [EVENS.reference_solution], problem_id=[EVENS.problem_id], log_metric=logged.log_metric) == [None]
    assert logged.metrics["code_env/sandbox_error"] == [1.0]


def test_completions_are_logged_as_replayable_trajectories(tmp_path: Path) -> None:
    from transformers import TrainerState

    from code_env.logtools import replay, stats
    from code_env.trajectory import read_log
    from sandbox import ExecutionResult, RunRequest

    fn = TRLReward(TINY, sandbox=get_sandbox("process"), log_dir=tmp_path / "traj", log_every=2)
    state = TrainerState(global_step=3)
    prompt = code_env.trl.trl_rows(TINY, format="plain")[0]["prompt"]
    assert fn([prompt] * 3, ["x + 1", "x", ")"], problem_id=["tiny/add_one"] * 3, trainer_state=state) == [1.0, 0.0, -1.0]
    chat = [{"role": "user", "content": "double it"}]
    done = [{"role": "assistant", "content": "```python\ndef double(x):\n    return 2 * x\n```"}]
    assert fn([chat] * 2, [done, [{"role": "assistant", "content": ""}]], problem_id=["tiny/double"] * 2) == [1.0, -0.5]
    fn.close()
    records = list(read_log(tmp_path / "traj"))
    assert [r["trace_id"] for r in records] == ["tiny/add_one/0/0/0", "tiny/add_one/2/0/0", "tiny/double/4/0/0"]  # every 2nd
    first, last = records[0], records[-1]
    assert (first["step"], first["prompt"], first["completion"], first["action"]) == (4, prompt, "x + 1", prompt + "x + 1")
    assert (first["reward"], first["reward_breakdown"]["tier"], first["terminated"]) == (1.0, "all_tests", True)
    assert last["step"] is None and last["action"] == TINY[1].prompt and last["reward_breakdown"]["tier"] == "no_attempt"
    assert len(first["public_cases"]) == 2 and records[1]["reward_breakdown"]["tier"] == "syntax_error"
    assert stats(tmp_path / "traj").episodes == 3
    report = replay(tmp_path / "traj")  # re-judged as a single-turn env would judge them
    assert report.ok and report.steps == 3, report.summary()

    class Failing:
        def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
            return [ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test") for r in requests]

    broken = TRLReward([EVENS], sandbox=Failing(), log_dir=tmp_path / "failed")
    assert broken([""], [EVENS.reference_solution], problem_id=[EVENS.problem_id]) == [None]
    broken.close()
    (rec,) = read_log(tmp_path / "failed")
    assert rec["sandbox_error"] and rec["reward"] == 0.0 and rec["truncated"] and not rec["terminated"]  # as the env logs it
    assert replay(tmp_path / "failed").skipped_sandbox_errors == 1


def test_prompt_format_follows_the_chat_template(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    path = build_tiny_lm(tmp_path / "model", [t.reference_solution for t in TINY], vocab_size=300)
    tok = AutoTokenizer.from_pretrained(path)
    assert code_env.trl.prompt_format(path) == code_env.trl.prompt_format(str(path)) == code_env.trl.prompt_format(tok) == "chat"
    tok.chat_template = None  # a base model
    assert code_env.trl.prompt_format(tok) == "plain"
    with pytest.raises(TypeError, match="model: expected a tokenizer, a processor or a model's folder, got int"):
        code_env.trl.prompt_format(3)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="join_prompt: expected 'auto', True or False, got 'always'"):
        TRLReward("builtin", join_prompt="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log_every: expected an integer >= 1, got 0"):
        TRLReward("builtin", log_every=0)
    with pytest.raises(ValueError, match=r"config: cannot read reward config nope\.toml"):
        TRLReward("builtin", config="nope.toml")
    fn = TRLReward([EVENS], sandbox=get_sandbox("process"))
    with pytest.raises(KeyError, match=r"no 'problem_id' column \(columns passed: \['task'\]\).*trl_dataset"):
        fn(prompts=["p"], completions=["x"], task=["t"], trainer_state=None)
    with pytest.raises(TypeError, match=r"completions\[0\]: expected str or a list of chat messages, got int"):
        fn(["p"], [3], problem_id=[EVENS.problem_id])
    with pytest.raises(registry.UnknownTaskError, match="did you mean 'builtin/sum-of-evens'"):
        fn(["p"], ["x"], problem_id=["builtin/sum-of-evenz"])


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_trl_dataset(fmt: str) -> None:
    from trl.data_utils import is_conversational

    ds = trl_dataset("humaneval", format=fmt)  # type: ignore[arg-type]
    humaneval = registry.load("humaneval")
    assert len(ds) == len(humaneval) and ds.column_names == ["prompt", "problem_id"]
    row, task = ds[0], humaneval[0]
    assert row["problem_id"] == task.problem_id
    assert is_conversational(row) == (fmt == "chat")
    if fmt == "plain":
        assert row["prompt"] == task.prompt  # HumanEval: a base model continues the prompt as it is
    else:
        (msg,) = row["prompt"]
        assert msg["role"] == "user" and task.prompt.rstrip() in msg["content"] and "```python" in msg["content"]
    synthetic = trl_dataset("synthetic:arith", n=3, seed=1, difficulty=2, system_prompt="You write Python.")
    assert len(synthetic) == 3 and all([m["role"] for m in p] == ["system", "user"] for p in synthetic["prompt"])
    assert synthetic[0]["prompt"][0] == {"role": "system", "content": "You write Python."}
    assert synthetic["problem_id"] == [t.problem_id for t in registry.load("synthetic:arith", n=3, seed=1, difficulty=2)]
    stdio = trl_dataset([FIZZ])[0]["prompt"][0]["content"]
    assert "reads standard input" in stdio


def test_trl_dataset_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"format: expected 'chat'.*or 'plain'.*got 'text'"):
        trl_dataset("builtin", format="text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="system_prompt: only a chat dataset"):
        trl_dataset("builtin", format="plain", system_prompt="x")
    with pytest.raises(registry.UnknownTaskSetError, match="did you mean 'builtin'"):
        trl_dataset("builtn")
    with pytest.raises(TypeError, match="parameters \\['n'\\] are for a task set's name"):
        trl_dataset([EVENS], n=3)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["plain", "chat"])
def test_grpo_trainer_trains_on_code_env_rewards(tmp_path: Path, fmt: str) -> None:
    import huggingface_hub.constants
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    assert huggingface_hub.constants.HF_HUB_OFFLINE  # nothing below may reach a hub

    path = build_tiny_lm(tmp_path / "model", [t.prompt + t.reference_solution for t in TASKS] + [t.reference_solution for t in TINY])
    model = AutoModelForCausalLM.from_pretrained(path)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    reward = TRLReward(TINY, sandbox=get_sandbox("process"), log_dir=tmp_path / "traj")
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=2, learning_rate=1e-2, logging_steps=1, report_to="none",
                      save_strategy="no", use_cpu=True, bf16=False, seed=0)  # fmt: skip
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=AutoTokenizer.from_pretrained(path),
                          train_dataset=trl_dataset(TINY, format=fmt))  # fmt: skip
    assert reward.attach(trainer) is reward
    out = trainer.train()
    reward.close()

    assert out.global_step == 2 and math.isfinite(out.training_loss)
    steps = [h for h in trainer.state.log_history if "rewards/code_env_reward/mean" in h]
    assert len(steps) == 2  # our reward came back, and TRL logged it, on both steps
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["rewards/code_env_reward/mean"]) for h in steps)
    assert all("code_env/solved" in h for h in steps)
    assert len(reward.last_grades) == 8 and all(g.reward is not None for g in reward.last_grades)
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach().cpu(), before[name])]
    assert changed, "GRPO changed no parameter: every group had the same reward"

    # attached, every completion's record carries TRL's own advantage (group-normalised: checked
    # here from the logged rewards), the step of its curve row, and the cut at max_completion_length
    import statistics

    from code_env.logtools import replay
    from code_env.trajectory import read_log

    from ._records import assert_complete

    records = list(read_log(tmp_path / "traj"))
    assert len(records) == 16 and [r["step"] for r in records] == [1] * 8 + [2] * 8
    for rec in records:
        assert_complete(rec, trainer="trl")
        assert rec["completion_tokens"] <= 2 and (rec["completion_tokens"] == 2 or not rec["completion_truncated"])
    for k in range(0, 16, 4):  # TRL's groups: one prompt's 4 completions, one after another
        group = records[k : k + 4]
        rewards = [r["reward"] for r in group]
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        assert [round(r["advantage"], 4) for r in group] == [round((x - mean) / (std + 1e-4), 4) for x in rewards]
    if fmt == "chat":
        assert all(r["prompt"] != r["task"]["prompt"] and isinstance(r["prompt"], str) for r in records)  # templated
    report = replay(tmp_path / "traj")
    assert report.ok and report.steps == 16, report.summary()


def test_code_exec_tools_is_an_environment_factory_as_trl_reads_one() -> None:
    """``environment_factory=CodeExecTools``: TRL lists the class's public functions but ``reset``
    and ``get_reward`` as tools (their schemas from the signatures and docstrings, as
    transformers' ``get_json_schema`` makes them), calls ``reset(**row)`` per rollout and
    ``get_reward()`` at its end."""
    import inspect

    from transformers.utils import get_json_schema

    from code_env.trl import CodeExecTools

    tools = [n for n, _ in inspect.getmembers(CodeExecTools, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]  # fmt: skip
    assert tools == ["run_tests", "submit"]
    env = CodeExecTools(sandbox=get_sandbox("process"), max_test_runs=2)
    for name in tools:
        schema = get_json_schema(getattr(env, name))["function"]
        assert schema["name"] == name and schema["parameters"]["required"] == ["code"] and schema["description"]
    task = registry.resolve("builtin/sum-of-evens")
    row = {"prompt": [{"role": "user", "content": task.prompt}], "problem_id": task.problem_id}
    assert "run_tests(code)" in (env.reset(**row) or "")
    assert env.get_reward() == -0.5  # nothing written: the no-attempt tier
    shown = env.run_tests("def sum_of_evens(nums):\n    return 0\n")
    assert shown.startswith("2/3 public tests passed") and "expected 6; got 0" in shown
    hidden = [json.dumps(c.args)[1:-1] for c in task.hidden_tests if c.args not in [p.args for p in task.public_tests]]
    assert not any(h in shown for h in hidden)  # the hidden tests never reach the model
    assert env.get_reward() == pytest.approx(0.4)  # no submission: the last program tested
    env.run_tests("x = 1")
    assert "budget of 2 test runs" in env.run_tests("x = 2")
    assert env.submit(task.reference_solution) == "submitted" and env.get_reward() == 1.0
    assert [name for name, _ in env.calls] == ["run_tests"] * 3 + ["submit"]  # the refused one too
    assert env.calls[-1] == ("submit", task.reference_solution)
    env.reset(**row)  # a new rollout starts clean
    assert env.get_reward() == -0.5 and env.calls == []
    with pytest.raises(KeyError, match="no 'problem_id' column"):
        env.reset(prompt="x")
    with pytest.raises(RuntimeError, match="before reset"):
        CodeExecTools().run_tests("x")
