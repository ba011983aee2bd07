"""``CodeAgentTools``: ``CodeAgent-v0`` as a TRL ``environment_factory``. TRL's view of the class
(its tools, their JSON schemas from the docstrings), an episode through the tools on the real
sandbox (solved: return 1.0; ended without submit: graded as submitted; the calls budget; a
sandbox failure: None), the prompts of ``trl_dataset(format="tools")``, and one real ``GRPOTrainer`` step where a tiny model, warm-started on a
demonstration, writes ``main.py``, runs the tests and submits through TRL's tool loop."""

from __future__ import annotations

import inspect
import math
import os
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import code_env
import registry
from code_env.agent import TOOL_NAMES, TOOLS, starter_files
from code_env.trl import CodeAgentTools, trl_rows
from sandbox import ExecutionResult, RunRequest

from .conftest import get_sandbox
from .test_trl_tools import memorize, one_thread, qwen_tokenizer, render, tiny_qwen  # noqa: F401  (one_thread: a fixture)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"

TASKS = registry.load("builtin")
EVENS = registry.get(TASKS, "builtin/sum-of-evens")
BITS = registry.get(TASKS, "builtin/count-set-bits")
WRONG = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2)\n"  # passes 1 of the 3 public tests


def trl_tools(instance: Any) -> list[Any]:
    """The tools TRL (1.16) makes of an environment instance: the functions of its class, but
    ``reset``, ``get_reward`` and names with a leading underscore, bound to the instance."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]  # fmt: skip


def row(task: Any) -> dict[str, Any]:
    (r,) = trl_rows([task])
    return r


def agent(**kw: Any) -> CodeAgentTools:
    tools = CodeAgentTools([EVENS, BITS], sandbox=get_sandbox("process"), **kw)
    tools.reset(**row(EVENS))
    return tools


def test_trl_sees_the_env_tools_with_their_schemas() -> None:
    from transformers.utils import get_json_schema

    tools = CodeAgentTools([EVENS], sandbox=get_sandbox("process"))
    methods = trl_tools(tools)
    assert sorted(m.__name__ for m in methods) == sorted(TOOL_NAMES)
    env_schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for method in methods:
        schema = get_json_schema(method)["function"]  # what TRL renders into the prompt (raises on a bad docstring)
        ours = env_schemas[schema["name"]]
        assert schema["description"] and "Args:" not in schema["description"], schema
        assert set(schema["parameters"]["properties"]) == set(ours["properties"]), schema["name"]
        assert sorted(schema["parameters"].get("required", [])) == sorted(ours["required"]), schema["name"]
        for name, prop in schema["parameters"]["properties"].items():
            assert prop["type"] == "string" and prop["description"], (schema["name"], name)
    run = get_json_schema(tools.run)["function"]["parameters"]["properties"]
    assert run["path"].get("nullable") and run["command"].get("nullable") and "nullable" not in run["stdin"]


def test_an_episode_through_the_tools_returns_one(tmp_path: Path) -> None:
    tools = CodeAgentTools([EVENS, BITS], sandbox=get_sandbox("process"))
    with pytest.raises(RuntimeError, match=r"a tool was called before reset\(\)"):
        tools.list_files()
    shown = tools.reset(**row(EVENS))  # TRL appends this to the prompt's last message
    assert shown is not None and shown.startswith("\n\n") and "main.py" in shown and "submit()" in shown
    assert tools.env.task is not None and tools.env.task.problem_id == EVENS.problem_id
    listing = tools.list_files()
    assert listing.splitlines()[1].startswith("main.py") and "test_public.py" in listing
    assert "sum_of_evens" in tools.read_file("PROMPT.md")
    assert "no file 'nope.py'" in tools.read_file("nope.py")  # refused by the env: its message, the episode goes on
    assert tools.write_file("main.py", WRONG) == f"wrote main.py ({len(WRONG)} bytes)"
    assert "test 1: FAIL" in tools.run(path="test_public.py")
    assert "test 1: FAIL" in tools.run(command="python test_public.py")
    assert tools.run(path="main.py", stdin="").startswith("exit code 0")
    assert tools.run_tests().startswith("1/3 public tests passed")
    assert tools.edit_file("main.py", "n % 2", "n % 2 == 0") == "edited main.py"
    assert tools.run_tests().startswith("3/3 public tests passed")
    assert tools.submit().startswith("submitted: all_tests (reward 1)")
    assert tools.ended == "submit" and tools.rewards[-4:] == pytest.approx([0.05, 0.0, 0.05, 0.9])  # the bonuses: advances
    after = tools.write_file("main.py", "")
    assert after == "write_file: the episode is over (main.py was submitted); no tool can change it any more"
    assert tools.get_reward() == 1.0 and tools.get_reward() == 1.0  # (asked twice: the same)
    assert [name for name, _ in tools.calls] == ["list_files", "read_file", "read_file", "write_file", "run", "run",
                                                 "run", "run_tests", "edit_file", "run_tests", "submit"]  # fmt: skip
    assert tools.calls[5] == ("run", {"stdin": "", "command": "python test_public.py"})

    # TRL keeps the instance for the next batch: reset starts afresh, on the row's task
    tools.reset(**row(BITS))
    assert (tools.calls, tools.rewards, tools.ended) == ([], [], None)
    assert tools.env.task is not None and tools.env.task.problem_id == BITS.problem_id
    assert BITS.entry_point in tools.read_file("PROMPT.md") and "sum_of_evens" not in tools.read_file("main.py")


def test_a_rollout_without_submit_is_graded_as_submitted() -> None:
    tools = agent()
    tools.write_file("main.py", WRONG)
    assert tools.run_tests().startswith("1/3")  # the process bonus: an advance on the tier
    tier = code_env.grade(EVENS, WRONG, sandbox=get_sandbox("process")).reward  # 0.6 * 1/3, public and hidden
    assert tier is not None and tools.rewards == [0.0, 0.05]
    assert tools.get_reward() == pytest.approx(tier) and tools.ended == "rollout"
    assert "the episode is over (main.py was graded)" in tools.list_files()

    untouched = agent()  # no tool called at all: the starter main.py, graded
    starter = untouched.env.workspace["main.py"].decode()
    assert untouched.get_reward() == code_env.grade(EVENS, starter, sandbox=get_sandbox("process")).reward


def test_the_calls_budget_ends_the_episode_as_the_env_does() -> None:
    tools = agent(max_calls=2)
    tools.write_file("main.py", WRONG)
    last = tools.list_files()
    assert "the 2 tool calls are spent: main.py was graded as submitted: partial" in last and tools.ended == "tool_calls"
    assert tools.run_tests() == "run_tests: the episode is over (its tool_calls budget is spent); no tool can change it any more"
    assert tools.get_reward() == pytest.approx(0.2) and len(tools.calls) == 2  # its tier; nothing graded again


class Breaks:
    """The real process sandbox until ``broken``; then every run answered as the sandbox answers
    when it fails itself."""

    def __init__(self) -> None:
        self.broken = False

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        if self.broken:
            return [ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test") for r in requests]
        return get_sandbox("process").run_many(requests)


def test_a_sandbox_failure_is_none_which_trl_skips() -> None:
    runner = Breaks()
    tools = CodeAgentTools([EVENS], sandbox=runner)
    tools.reset(**row(EVENS))
    tools.write_file("main.py", EVENS.reference_solution)
    assert tools.run_tests().startswith("3/3")
    runner.broken = True
    assert "sandbox failed" in tools.submit()
    assert tools.ended == "sandbox_error" and tools.get_reward() is None
    assert "the episode is over (the sandbox failed)" in tools.list_files()


def test_arguments_and_rows_are_checked() -> None:
    with pytest.raises(TypeError, match="the env's 'reward' is CodeAgentTools' 'config' argument"):
        CodeAgentTools([EVENS], reward="reward.toml")
    with pytest.raises(ValueError, match="max_calls: expected an int >= 1"):
        CodeAgentTools([EVENS], max_calls=0)
    tools = CodeAgentTools([EVENS], sandbox=get_sandbox("process"), config={"all_tests": 2.0})
    with pytest.raises(KeyError, match=r"no 'problem_id' column \(id_column=\); it has \['prompt'\]"):
        tools.reset(prompt="x")
    with pytest.raises(registry.UnknownTaskError):
        tools.reset(problem_id="builtin/no-such-task")
    tools.reset(problem_id=BITS.problem_id)  # a task of the registry outside the instance's set: made from its id
    assert tools.env.task is not None and tools.env.task.problem_id == BITS.problem_id
    tools.write_file("main.py", BITS.reference_solution)
    assert tools.submit().startswith("submitted: all_tests (reward 2)") and tools.get_reward() == 2.0  # the config's tier


def test_tools_prompts_tell_the_agent_of_its_workspace() -> None:
    """``trl_rows(format="tools")``: the task for an agent that works through tools (main.py is
    graded, run_tests when it likes, submit when done), no ```python block asked for; the columns
    of ``format="chat"``; a HumanEval prompt shown as the code main.py holds."""
    stdio = next(t for t in TASKS if t.kind == "stdio")
    human = registry.load("humaneval")[0]
    tasks = [EVENS, stdio, human]
    rows, chat = trl_rows(tasks, format="tools"), trl_rows(tasks)
    assert [set(r) for r in rows] == [set(r) for r in chat]
    assert [r["problem_id"] for r in rows] == [r["problem_id"] for r in chat] == [t.problem_id for t in tasks]
    for r, c in zip(rows, chat, strict=True):
        ((message,),) = [r["prompt"]]
        text = message["content"]
        assert message["role"] == "user" and isinstance(text, str)
        assert "main.py" in text and "submit()" in text and "run_tests()" in text and "tool calls" in text, text
        assert "```python" not in text and "block" not in text, text
        assert "```python" in c["prompt"][0]["content"]  # (the chat format asks for one)
    assert EVENS.prompt.rstrip() in rows[0]["prompt"][0]["content"] and "`sum_of_evens`" in rows[0]["prompt"][0]["content"]
    assert "standard input" in rows[1]["prompt"][0]["content"]
    shown = rows[2]["prompt"][0]["content"]
    main = starter_files(human)["main.py"].decode()
    assert shown.startswith("Complete the Python function in main.py") and main.strip() in shown and human.prompt.strip() in shown

    # the dataset, a system message, and the row as CodeAgentTools.reset reads it
    ds = code_env.trl_dataset([EVENS], format="tools", system_prompt="Be brief.")
    assert ds.column_names == ["prompt", "problem_id"] and [m["role"] for m in ds[0]["prompt"]] == ["system", "user"]
    tools = CodeAgentTools([EVENS], sandbox=get_sandbox("process"))
    assert "main.py" in str(tools.reset(**ds[0])) and tools.env.task is EVENS

    with pytest.raises(ValueError, match=r"format: expected 'chat' .*'tools' .*'plain' .*got 'tool'"):
        trl_rows([EVENS], format="tool")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"format: expected 'chat' .*'tools' .*'plain' .*got 'tool'"):
        code_env.trl_dataset([EVENS], format="tool")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format='tools' is for CodeAgent-v0"):
        trl_rows([stdio], format="tools", language="cpp")


def tool_call(name: str, **arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.mark.slow
def test_the_agent_tools_in_a_real_grpo_step(tmp_path: Path, one_thread: None) -> None:  # noqa: F811
    """``GRPOTrainer(environment_factory=CodeAgentTools)``: TRL renders the seven tools into the
    prompt, parses the model's calls, steps each rollout's env with them, feeds the results back
    and scores the rollout with ``get_reward``. The tiny model is first warm-started on one
    demonstration per task (``write_file`` of the reference program, ``run_tests``, ``submit``,
    an empty closing reply; the tool results are the real ones), as in ``test_trl_tools``."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    sandbox = get_sandbox("process")
    tasks = [EVENS, BITS]
    rows = trl_rows(tasks)
    scripted = CodeAgentTools(tasks, sandbox=sandbox)
    tools = trl_tools(scripted)
    conversations = []
    for r, task in zip(rows, tasks, strict=True):
        prompt = [dict(m) for m in r["prompt"]]
        prompt[-1]["content"] += scripted.reset(**r)  # TRL appends reset()'s text to the last user message
        whole = list(prompt)
        for name, args in (("write_file", {"path": "main.py", "content": task.reference_solution}), ("run_tests", {}), ("submit", {})):
            whole += [tool_call(name, **args), {"role": "tool", "name": name, "content": getattr(scripted, name)(**args)}]
        assert scripted.get_reward() == 1.0
        conversations.append((prompt, [*whole, {"role": "assistant", "content": ""}]))
    tok = qwen_tokenizer([render(whole, tools) for _, whole in conversations])
    examples = []
    for prompt, whole in conversations:
        p = tok.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(whole, tools=tools, tokenize=True, return_dict=False)
        assert full[: len(p)] == p and full[-2] == tok.eos_token_id
        examples.append((p, full[len(p) : -1]))
    model = tiny_qwen(tok)
    memorize(model, examples, tok.pad_token_id)
    longest = max(len(c) for _, c in examples)
    assert max(len(p) + len(c) for p, c in examples) + 16 <= model.config.max_position_embeddings

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=longest + 16, temperature=0.1, learning_rate=1e-3, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0, shuffle_dataset=False)  # fmt: skip
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(rows),
                          environment_factory=partial(CodeAgentTools, tasks, sandbox=sandbox))  # fmt: skip
    assert sorted(t.__name__ for t in trainer._env_tools[None]) == sorted(TOOL_NAMES)  # TRL's own view: the seven tools
    out = trainer.train()
    assert out.global_step == 1 and math.isfinite(out.training_loss)

    (logged,) = [h for h in trainer.state.log_history if "loss" in h]
    envs = trainer.environments
    assert len(envs) == 4 and all(isinstance(e, CodeAgentTools) for e in envs)
    # every call TRL executed reached an env, and none failed
    assert logged["tools/call_frequency"] == pytest.approx(sum(len(e.calls) for e in envs) / len(envs))
    assert logged["tools/call_frequency"] >= 1 and logged["tools/failure_frequency"] == 0
    # each rollout's reward is get_reward's: the sum of its env's rewards
    rewards = list(trainer._logs["rewards"]["CodeAgentTools"])
    assert len(rewards) == 4 and logged["rewards/CodeAgentTools/mean"] == pytest.approx(sum(rewards) / 4)
    for env, reward in zip(envs, rewards, strict=True):
        assert env.ended is not None and reward == pytest.approx(sum(env.rewards))
    solved = [e for e in envs if e.ended == "submit" and e.env.task is not None
              and e.env.workspace["main.py"].decode() == e.env.task.reference_solution]  # fmt: skip
    assert solved and 1.0 in rewards  # a submission graded on public and hidden tests: no other path gives 1.0
    # the env's answers went back to the model, as tool messages of the completions TRL logged
    tool_messages = [m for completion in trainer._logs["completion"] for m in completion if m.get("role") == "tool"]
    assert any(m["name"] == "run_tests" and str(m["content"]).startswith("3/3 public tests passed") for m in tool_messages)
    assert any(m["name"] == "submit" and str(m["content"]).startswith("submitted: all_tests") for m in tool_messages)
    assert torch.isfinite(torch.tensor(logged["loss"]))
