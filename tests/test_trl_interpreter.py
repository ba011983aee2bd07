"""``CodeInterpreterTools``: the stateful code interpreter as a TRL ``environment_factory`` for
tool-integrated reasoning. TRL's view of the class (one tool, ``python``, its JSON schema from the
docstring; no ``get_reward``: the reward is the user's ``reward_funcs``), read by TRL itself in a
``GRPOTrainer`` that is built but not trained; then, on the real sandbox (conftest's ``sb``: after
each test nothing of a run is alive), state that persists within an episode, a fresh session on
``reset``, two instances that never see each other's variables, and nothing left after ``close``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from code_env.grading import SharedSandbox
from code_env.interpreter import TOOL, InterpreterLimits
from code_env.trl import CodeInterpreterTools
from sandbox import Sandbox

from .conftest import assert_contained
from .test_trl_agent import trl_tools
from .test_trl_tools import qwen_tokenizer, render, tiny_qwen

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"


def test_trl_sees_one_python_tool_with_its_schema() -> None:
    from transformers.utils import get_json_schema

    tools = CodeInterpreterTools()
    assert [m.__name__ for m in trl_tools(tools)] == ["python"]  # close() is no tool: a property
    assert not hasattr(tools, "get_reward")
    schema = get_json_schema(tools.python)["function"]  # what TRL renders into the prompt
    assert schema["name"] == "python" and schema["description"] and "Args:" not in schema["description"]
    params = schema["parameters"]
    assert set(params["properties"]) == {"code"} and params["required"] == ["code"]
    assert params["properties"]["code"]["type"] == "string" and params["properties"]["code"]["description"]
    ours = TOOL["function"]["parameters"]  # the interpreter's own OpenAI schema: the same arguments
    assert set(ours["properties"]) == set(params["properties"]) and ours["required"] == params["required"]
    text = render([{"role": "user", "content": "What is 2**100?"}], tools=trl_tools(tools))
    assert '"name": "python"' in text and '"code"' in text

    # default sandbox: a handle of the session's own on the process-wide one (nothing runs until a cell)
    tools.reset()
    assert tools.session is not None and isinstance(tools.session._executor, SharedSandbox)
    tools.close()
    assert tools.session is None


def test_trl_builds_the_environment_as_it_reads_one(tmp_path: Path) -> None:
    """TRL's own discovery, in a ``GRPOTrainer`` built (not trained): the tools it offers each
    rollout, and the reward sources (the user's only: the class has no ``get_reward``)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = qwen_tokenizer(["x = 1\nprint(x)"], vocab_size=300)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, report_to="none", save_strategy="no", use_cpu=True, bf16=False)  # fmt: skip
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "What is 2**100?"}]}])

    def answer(completions: list[object], **kwargs: object) -> list[float | None]:
        return [0.0] * len(completions)

    trainer = GRPOTrainer(model=tiny_qwen(tok), args=args, processing_class=tok, reward_funcs=[answer],
                          train_dataset=data, environment_factory=CodeInterpreterTools)  # fmt: skip
    assert [t.__name__ for t in trainer._env_tools[None]] == ["python"]
    assert trainer.reward_func_names == ["answer"]  # no column of the environment's own
    (probe,) = trainer._environment_pool[None]
    assert isinstance(probe, CodeInterpreterTools) and probe.reset(**data[0]) is None  # the prompt stays as written
    probe.close()
    with pytest.raises(ValueError, match="No reward source provided"):
        GRPOTrainer(model=tiny_qwen(tok), args=args, processing_class=tok, reward_funcs=[], train_dataset=data,
                    environment_factory=CodeInterpreterTools)  # fmt: skip


def test_state_persists_within_an_episode_and_reset_starts_afresh(sb: Sandbox) -> None:
    tools = CodeInterpreterTools(sandbox=sb)
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        tools.python("1")
    assert tools.reset(problem_id="any", prompt="rows are not read") is None
    assert tools.python("import math\nr = 2\ndef area(x):\n    return round(math.pi * x * x, 3)") == "(no output)"
    assert tools.python("print('r is', r)\narea(r)") == "r is 2\nOut[2]: 12.566"
    assert [code for code, _ in tools.calls] == ["import math\nr = 2\ndef area(x):\n    return round(math.pi * x * x, 3)",
                                                 "print('r is', r)\narea(r)"]  # fmt: skip
    assert all(result.status == "ok" for _, result in tools.calls)
    failed = tools.python("r = 99\n1 / 0")  # raised: nothing of it kept
    assert "ZeroDivisionError" in failed and "r = 99" not in tools.session.history  # type: ignore[union-attr]
    assert tools.python("r") == "Out[4]: 2"
    assert tools.session is not None
    first = tools.session.session_id

    assert tools.reset() is None  # TRL's next batch: the same instance, a fresh session
    assert tools.calls == [] and tools.session.session_id != first and tools.session.history == ()
    gone = tools.python("r")
    assert "NameError: name 'r' is not defined" in gone and tools.calls[0][1].status == "error"
    assert "NameError" in tools.python("area(1)")
    tools.close()


def test_two_instances_never_see_each_others_variables(sb: Sandbox) -> None:
    a, b = CodeInterpreterTools(sandbox=sb), CodeInterpreterTools(sandbox=sb)
    with a, b:
        a.reset()
        b.reset()
        a.python("secret = 'a'\nopen('a.txt', 'w').write('a')")
        assert b.python("import os\n['secret' in globals(), os.path.exists('a.txt')]") == "Out[1]: [False, False]"
        b.python("secret = 'b'")
        assert a.python("secret") == "Out[2]: 'a'" and b.python("secret") == "Out[3]: 'b'"
        assert a.session is not None and b.session is not None and a.session.session_id != b.session.session_id
    assert a.session is None and b.session is None  # (the with block closed both)


def test_close_leaves_nothing_of_the_session(sb: Sandbox) -> None:
    tools = CodeInterpreterTools(sandbox=sb)
    tools.reset()
    tools.python("import threading, time\nkept = 'value'\nopen('f.txt', 'w').write('x')\n"
                 "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()")  # fmt: skip
    assert tools.python("kept") == "Out[2]: 'value'"
    session = tools.session
    assert session is not None
    tools.close()
    assert session.closed and session.history == () and tools.session is None
    assert_contained(sb)  # no process of the session's runs alive (the thread died with its cell's run)
    with pytest.raises(RuntimeError, match=r"after close\(\)"):
        tools.python("kept")
    tools.close()  # (idempotent)
    tools.reset()  # a later episode: a new session, empty
    assert tools.python("import os\n['kept' in globals(), sorted(os.listdir('.'))]") == "Out[1]: [False, ['solution.py']]"
    tools.close()
    assert_contained(sb)


def test_limits_end_a_cell_or_the_session_until_reset(sb: Sandbox) -> None:
    with pytest.raises(ValueError, match=r"CodeInterpreterTools: limits\.cell_timeout_s"):
        CodeInterpreterTools(sandbox=sb, limits={"cell_timeout_s": -1})
    with pytest.raises(TypeError, match="limits: expected InterpreterLimits or a mapping"):
        CodeInterpreterTools(sandbox=sb, limits=3)  # type: ignore[arg-type]
    with CodeInterpreterTools(sandbox=sb, limits={"cell_timeout_s": 1.0, "max_cells": 3}) as tools:
        assert tools.limits == InterpreterLimits(cell_timeout_s=1.0, max_cells=3)
        tools.reset()
        tools.python("n = 1")
        assert "[timed out]" in tools.python("n = 2\nwhile True: pass")
        last = tools.python("n")  # the third cell: the session's last
        assert last.startswith("Out[3]: 1") and "the session is over" in last
        assert "not run" in tools.python("n") and tools.calls[-1][1].status == "ended"
        tools.reset()  # the next episode has the whole of its limits
        assert tools.python("n = 5\nn") == "Out[1]: 5"
