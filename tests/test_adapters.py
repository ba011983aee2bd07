"""The trainer adapters: TRL reward_funcs, verl compute_score, code extraction, the tasks CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

import code_env
import registry
from code_env import TRLReward, compute_score, extract_code

from .conftest import get_sandbox

TASKS = registry.load("builtin")
EVENS = next(t for t in TASKS if t.problem_id == "builtin/sum-of-evens")


def test_public_api_is_explicit() -> None:
    public = {n for n in dir(code_env) if not n.startswith("_")} | {"__version__"}
    modules = {"adapters", "cli", "demo", "env", "grading", "judge", "logtools", "reward", "spaces", "tokens", "trajectory", "vector"}
    assert set(code_env.__all__) == public - modules


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ("here:\n```python\nprint(1)\n```\nbye", "print(1)\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```text\nnot code\n```\n```py\nprint(2)\n```", "print(2)\n"),
        ("```python\na\n```\n```python\nb\n```", "b\n"),
        ("```bash\nls\n```", "ls\n"),
        ("def f(): pass", "def f(): pass"),
    ],
)
def test_extract_code(reply: str, code: str) -> None:
    assert extract_code(reply) == code


def test_trl_reward_funcs_with_strings_and_chat_messages() -> None:
    fn = TRLReward("builtin", sandbox=get_sandbox("process"))
    good = f"```python\n{EVENS.reference_solution}```"
    chat = [{"role": "assistant", "content": "```python\ndef sum_of_evens(nums):\n    return 0\n```"}]
    rewards = fn(["p", "p", "p"], [good, chat, "def sum_of_evens(:"], problem_id=[EVENS.problem_id] * 3)
    assert rewards[0] == 1.0 and rewards[1] is not None and 0 <= rewards[1] < 0.8 and rewards[2] == -1.0
    assert fn.__name__ == "code_env_reward"
    with pytest.raises(KeyError, match="no 'problem_id' column"):
        fn(["p"], [good], task=["x"])
    with pytest.raises(ValueError, match="1 completions but 2"):
        fn(["p"], [good], problem_id=["a", "b"])


def test_verl_compute_score() -> None:
    sol = f"```python\n{EVENS.reference_solution}```"
    assert compute_score("builtin", sol, EVENS.problem_id) == 1.0
    assert compute_score("my-dataset", "def sum_of_evens(nums):\n    return 0\n", EVENS.model_dump_json()) < 0.8


@pytest.mark.parametrize("name", registry.list())
def test_tasks_cli_validates_every_shipped_set(name: str) -> None:
    n = len(registry.load(name))
    out = subprocess.run([sys.executable, "-m", "code_env", "tasks", "validate", name],
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{n}/{n} tasks admitted" in out.stdout


def test_tasks_cli_rejects_a_task_whose_reference_fails(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = EVENS.model_copy(update={"problem_id": "broken/evens", "reference_solution": "def sum_of_evens(nums):\n    return 1\n"})
    path = tmp_path / "broken.jsonl"
    registry.write_tasks([broken], path)
    out = subprocess.run([sys.executable, "-m", "code_env", "tasks", "validate", str(path)],
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert out.returncode == 1
    assert "REJECTED broken/evens" in out.stdout and "public test 0: failed" in out.stdout
    out = subprocess.run([sys.executable, "-m", "code_env", "tasks", "show", "nope", "--set", "builtin"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 2 and "no task 'nope'" in out.stderr and "Traceback" not in out.stderr


def test_trl_reward_keeps_the_order_of_a_group() -> None:
    fn = TRLReward(TASKS, sandbox=get_sandbox("process"))
    good, bad = EVENS.reference_solution, "def sum_of_evens(nums):\n    return -1\n"
    group = [good if i % 3 == 0 else bad for i in range(9)]
    rewards = fn(["p"] * 9, group, problem_id=[EVENS.problem_id] * 9)
    assert rewards == [1.0 if i % 3 == 0 else 0.0 for i in range(9)]
