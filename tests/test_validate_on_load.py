"""A task file is validated when it is loaded (``registry.load`` -> ``registry.validate.admit``):
its verifiers are checked in the real sandbox before anyone trains on them, once per content
(the admission is cached by the file's sha256), a refusal names each task and why, a failure of
the sandbox is no refusal, and ``validate=False`` / ``$CODE_ENV_VALIDATE=0`` opt out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gymnasium as gym
import pytest

import registry
from registry import Task, TaskSetRefusedError, TestCase, ValidationUnavailableError
from registry.validate import CACHE_ENV, NO_HIDDEN_TEST, VALIDATE_ENV, admission_path, cache_dir
from sandbox import ExecutionResult, RunRequest, Sandbox
from tests.conftest import CountingRunner, get_sandbox

BUILTIN = registry.load("builtin")
EVENS = registry.get(BUILTIN, "builtin/sum-of-evens")
# a small task of our own: each validation is 4 runs, and a stdio task's is a run per test
ADD = Task(problem_id="t/add", prompt="Add two numbers.", kind="function", entry_point="add",
           reference_solution="def add(a, b):\n    return a + b\n",
           public_tests=[TestCase(args=[1, 2], expected=3)], hidden_tests=[TestCase(args=[-4, 4], expected=0)])  # fmt: skip


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the test's own; validation on load as it is by default."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(VALIDATE_ENV, raising=False)
    return tmp_path / "cache"


def task_file(path: Path, *tasks: Task) -> Path:
    registry.write_tasks(tasks, path)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "validated").glob("*.json")) if (cache / "validated").is_dir() else []


# a reference that fails a public test; one that passes the public tests but not a hidden one
# (a hidden expectation that is wrong); a task without a hidden test
WRONG = EVENS.model_copy(update={"problem_id": "t/wrong", "reference_solution": "def sum_of_evens(nums):\n    return 1\n"})
HIDDEN_WRONG = EVENS.model_copy(update={
    "problem_id": "t/hidden-wrong",
    "hidden_tests": [EVENS.hidden_tests[0].model_copy(update={"expected": 10**9}), *EVENS.hidden_tests[1:]]})  # fmt: skip
CAPPED = EVENS.model_copy(update={"problem_id": "t/capped", "hidden_tests": []})


class FailingSandbox:
    """The real process sandbox, except that its first ``fail`` batches come back as failures of
    the sandbox itself (a worker lost): what no program can provoke, and what retries are for."""

    def __init__(self, fail: int) -> None:
        self.fail, self.batches = fail, 0

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        results = get_sandbox("process").run_many(requests)
        self.batches += 1
        if self.batches > self.fail:
            return results
        return [r.model_copy(update={"sandbox_error": "worker lost", "exit_code": None}) for r in results]


def test_a_file_is_validated_once_then_admitted_by_its_hash(tmp_path: Path, cache: Path) -> None:
    path = task_file(tmp_path / "tasks.jsonl", EVENS, ADD)
    runner = CountingRunner()
    assert registry.load(path, sandbox=runner) == [EVENS, ADD]
    assert runner.batches  # the references ran
    assert cached(cache) == [f"{sha256(path)}.json"]
    record = json.loads(admission_path(sha256(path)).read_text())
    assert record["sha256"] == sha256(path) and record["tasks"] == 2 and record["languages"]["python"] == 2

    ran = len(runner.batches)
    assert registry.load(str(path), sandbox=runner) == [EVENS, ADD]
    assert len(runner.batches) == ran  # the same content: nothing runs again

    with open(path, "a", encoding="utf-8") as fh:
        fh.write("# another content, the same tasks\n")
    assert registry.load(path, sandbox=runner) == [EVENS, ADD]
    assert len(runner.batches) > ran and len(cached(cache)) == 2


def test_the_default_sandbox_validates_when_none_is_given(tmp_path: Path, cache: Path) -> None:
    path = task_file(tmp_path / "one.jsonl", ADD)
    assert registry.load(path) == [ADD]
    assert cached(cache) == [f"{sha256(path)}.json"]
    with pytest.raises(TaskSetRefusedError, match=r"t/wrong: .*public test 0: failed \(wrong output\)"):
        registry.load(task_file(tmp_path / "wrong.jsonl", WRONG))


def test_a_refused_file_names_each_task_and_why_and_is_not_cached(tmp_path: Path, cache: Path) -> None:
    path = task_file(tmp_path / "mixed.jsonl", EVENS, WRONG, HIDDEN_WRONG, CAPPED)
    with pytest.raises(TaskSetRefusedError) as err:
        registry.load(path, sandbox=get_sandbox("process"))
    message = str(err.value)
    assert message.startswith(f"{path}: 3 of 4 task(s) refused on load")
    assert [pid for pid, _ in err.value.refused] == ["t/wrong", "t/hidden-wrong", "t/capped"]
    assert "\n  - t/wrong: " in message and "public test 0: failed (wrong output)" in dict(err.value.refused)["t/wrong"]
    assert "hidden test 0: failed (wrong output)" in dict(err.value.refused)["t/hidden-wrong"][0]
    assert dict(err.value.refused)["t/capped"] == [NO_HIDDEN_TEST]  # admitted by `tasks validate`, refused here
    assert "validate=False" in message and VALIDATE_ENV in message  # the way out is named
    assert isinstance(err.value, ValueError) and err.value.path == str(path)
    assert cached(cache) == []  # a refusal is made again next time


def test_opting_out_by_argument_or_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    path = task_file(tmp_path / "bad.jsonl", WRONG, CAPPED)
    runner = CountingRunner()
    assert registry.load(path, validate=False, sandbox=runner) == [WRONG, CAPPED]
    monkeypatch.setenv(VALIDATE_ENV, "0")
    assert registry.load(path, sandbox=runner) == [WRONG, CAPPED]
    assert runner.batches == [] and cached(cache) == []  # nothing ran
    with pytest.raises(TaskSetRefusedError, match="2 of 2 task"):
        registry.load(path, validate=True, sandbox=runner)  # the argument wins over the environment
    monkeypatch.setenv(VALIDATE_ENV, "maybe")
    with pytest.raises(ValueError, match=r"\$CODE_ENV_VALIDATE: expected 1 or 0 \(or true/false, yes/no, on/off\), got 'maybe'"):
        registry.load(path)
    with pytest.raises(TypeError, match="validate: expected True, False or None, got 'no'"):
        registry.load(path, validate="no")  # type: ignore[arg-type]


def test_a_sandbox_failure_is_retried_and_never_a_refusal(tmp_path: Path, cache: Path) -> None:
    path = task_file(tmp_path / "tasks.jsonl", EVENS)
    flaky = FailingSandbox(fail=1)
    assert registry.load(path, sandbox=flaky) == [EVENS]  # validated again, and admitted
    assert flaky.batches > 1 and cached(cache) == [f"{sha256(path)}.json"]

    other = task_file(tmp_path / "other.jsonl", ADD)
    with pytest.raises(ValidationUnavailableError, match=r"the sandbox failed .*worker lost.*says nothing about the tasks") as err:
        registry.load(other, sandbox=FailingSandbox(fail=10**6))
    assert not isinstance(err.value, TaskSetRefusedError) and "t/add" in str(err.value)
    closed = Sandbox("process", workers=1)
    closed.close()
    with pytest.raises(ValidationUnavailableError, match="SandboxClosedError"):
        registry.load(other, sandbox=closed)
    assert cached(cache) == [f"{sha256(path)}.json"]  # neither failure was cached


def test_an_unusable_cache_costs_a_validation_never_the_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              cache: Path) -> None:  # fmt: skip
    path = task_file(tmp_path / "tasks.jsonl", EVENS)
    runner = CountingRunner()
    registry.load(path, sandbox=runner)
    admission_path(sha256(path)).write_text("{not json")  # a damaged record: validated again, rewritten
    ran = len(runner.batches)
    assert registry.load(path, sandbox=runner) == [EVENS]
    assert len(runner.batches) > ran and json.loads(admission_path(sha256(path)).read_text())["tasks"] == 1

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "a-file"))  # no directory can be made there
    with pytest.warns(RuntimeWarning, match=r"cannot cache the validation of .*tasks\.jsonl.*validated again on every load"):
        assert registry.load(path, sandbox=runner) == [EVENS]


def test_shipped_sets_are_trusted_unless_asked(cache: Path) -> None:
    runner = CountingRunner()
    assert registry.load("builtin", sandbox=runner) == BUILTIN
    assert registry.load("synthetic:arith", n=2, seed=0, sandbox=runner)
    assert runner.batches == []  # validated by the test suite, not on every load
    tasks = registry.load("synthetic:arith", n=2, seed=0, validate=True, sandbox=runner)
    assert runner.batches and len(cached(cache)) == 1  # asked by name: validated, and cached too
    ran = len(runner.batches)
    assert registry.load("synthetic:arith", n=2, seed=0, validate=True, sandbox=runner) == tasks
    assert len(runner.batches) == ran


@pytest.mark.parametrize(("env", "expected"), [
    ({CACHE_ENV: "{tmp}/mine", "XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/mine"),
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/code-env"),
    ({"XDG_CACHE_HOME": "relative/xdg"}, "{tmp}/home/.cache/code-env"),  # a relative one is ignored (XDG spec)
    ({}, "{tmp}/home/.cache/code-env"),
], ids=["override", "xdg", "xdg-relative", "home"])  # fmt: skip
def test_the_cache_directory_is_the_users(env: dict[str, str], expected: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    for var in (CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var, value in env.items():
        monkeypatch.setenv(var, value.format(tmp=tmp_path))
    assert cache_dir() == Path(expected.format(tmp=tmp_path))


def test_an_environment_refuses_a_file_and_takes_the_opt_out(tmp_path: Path) -> None:
    one = Task(problem_id="t/one", prompt="Return 1.", kind="function", entry_point="one",
               reference_solution="def one():\n    return 2\n",
               public_tests=[TestCase(args=[], expected=1)], hidden_tests=[TestCase(args=[], expected=1)])  # fmt: skip
    path = task_file(tmp_path / "one.jsonl", one)
    with pytest.raises(TaskSetRefusedError, match=r"t/one: hidden test 0: failed \(wrong output\); public test 0: failed"):
        gym.make("code_env:CodeExec-v0", tasks=str(path))
    env = gym.make("code_env:CodeExec-v0", tasks=str(path), task_params={"validate": False})
    try:
        assert [t.problem_id for t in env.unwrapped.tasks] == ["t/one"]  # type: ignore[attr-defined]
    finally:
        env.close()
