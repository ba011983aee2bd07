"""verl: ``compute_score`` and ``compute_score_batch`` called the way verl's reward managers call
them (verl is not installed: its documented signatures), loaded the ways verl loads them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import code_env
import registry
from code_env import compute_score, compute_score_batch
from code_env.verl import SANDBOX_ERROR_SCORE
from sandbox import ExecutionResult, RunRequest

from .conftest import CountingRunner, get_sandbox

TASKS = registry.load("builtin")
EVENS = registry.get(TASKS, "builtin/sum-of-evens")
FIZZ = registry.get(TASKS, "builtin/fizzbuzz-line")
WRONG = "def sum_of_evens(nums):\n    return 0\n"
KEYS = ["score", "tier", "acc", "public_passed", "public_total", "hidden_passed", "hidden_total",
        "reward_before_judge", "sandbox_error", "judge_error", "explanation"]  # fmt: skip


class Failing:
    """Every run answered as the sandbox answers when it fails itself."""

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        return [ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test") for r in requests]


def test_naive_reward_manager_call() -> None:
    # verl's NaiveRewardManager: compute_score(data_source=, solution_str=, ground_truth=, extra_info=)
    # plus custom_reward_function.reward_kwargs, and whatever else a verl version passes
    sol = f"Let me think.\n```python\n{EVENS.reference_solution}```"
    assert compute_score(data_source="builtin", solution_str=sol, ground_truth=EVENS.problem_id,
                         extra_info={"split": "train", "index": 0}, reward_router_address=None) == 1.0  # fmt: skip
    res = compute_score(data_source="builtin", solution_str=WRONG, ground_truth=EVENS.problem_id, extra_info=None, return_dict=True)
    assert isinstance(res, dict) and list(res) == KEYS
    assert res["tier"] == "partial" and res["score"] == pytest.approx(0.6 * res["public_passed"] / res["public_total"])
    assert res["acc"] == 0.0 and res["sandbox_error"] is False and "public tests passed" in res["explanation"]
    assert res["reward_before_judge"] == res["score"]  # no judge configured


def test_batch_reward_manager_call_gives_what_the_per_sample_form_gives() -> None:
    # verl's BatchRewardManager: compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=,
    # **reward_kwargs), with numpy arrays where verl has them; extra_infos carry rollout_reward_scores
    solutions = [EVENS.reference_solution, WRONG, "def sum_of_evens(:", "", FIZZ.reference_solution, f"```python\n{FIZZ.reference_solution}"]
    ids = [EVENS.problem_id] * 4 + [FIZZ.problem_id] * 2
    infos = np.array([{"index": i, "rollout_reward_scores": {}} for i in range(6)], dtype=object)
    got = compute_score_batch(data_sources=np.array(["builtin"] * 6, dtype=object), solution_strs=solutions,
                              ground_truths=ids, extra_infos=infos, return_dict=True)  # fmt: skip
    assert all(isinstance(g, dict) and list(g) == KEYS for g in got)  # the same keys for every sample
    assert [g["tier"] for g in got] == ["all_tests", "partial", "syntax_error", "no_attempt", "all_tests", "all_tests"]  # type: ignore[index]
    singles = [compute_score("builtin", s, i, None) for s, i in zip(solutions, ids, strict=True)]
    assert [g["score"] for g in got] == singles == [1.0, got[1]["score"], -1.0, -0.5, 1.0, 1.0]  # type: ignore[index]
    assert compute_score_batch(["builtin"] * 2, solutions[:2], ids[:2]) == singles[:2]  # extra_infos optional
    with pytest.raises(ValueError, match="2 solution_strs, 1 data_sources, 2 ground_truths and 2 extra_infos"):
        compute_score_batch(["builtin"], solutions[:2], ids[:2], [None, None])


def test_the_batch_is_one_sandbox_batch_per_phase() -> None:

    runner = CountingRunner()
    compute_score_batch(["builtin"] * 8, [EVENS.reference_solution, WRONG] * 4, [EVENS.problem_id] * 8, sandbox=runner)
    # 8 samples, 2 distinct programs: one run_many of their joint runs (public and hidden tests in one)
    assert runner.batches == [2]


def test_reward_configuration_from_reward_kwargs_or_extra_info(tmp_path: Path) -> None:
    toml = tmp_path / "reward.toml"
    toml.write_text("[reward]\nsyntax_error = -2.0\nno_attempt = 0.0\n")
    broken = "def sum_of_evens(:"
    assert compute_score("builtin", broken, EVENS.problem_id) == -1.0
    assert compute_score("builtin", broken, EVENS.problem_id, config=str(toml)) == -2.0  # a file
    assert compute_score("builtin", broken, EVENS.problem_id, config={"syntax_error": -3.0}) == -3.0  # a mapping
    assert compute_score("builtin", broken, EVENS.problem_id, config=code_env.RewardConfig(syntax_error=-4.0)) == -4.0
    # per sample, extra_info["reward_config"] comes first
    got = compute_score_batch(["builtin"] * 3, [broken, broken, ""], [EVENS.problem_id] * 3,
                              [{"reward_config": {"syntax_error": -5.0}}, None, {"reward_config": str(toml)}],
                              config={"syntax_error": -3.0})  # fmt: skip
    assert got == [-5.0, -3.0, 0.0]
    with pytest.raises(ValueError, match="config: syntax_errorr: Extra inputs are not permitted"):
        compute_score("builtin", broken, EVENS.problem_id, config={"syntax_errorr": -3.0})
    with pytest.raises(ValueError, match=r"extra_infos\[0\]\['reward_config'\]: cannot read reward config"):
        compute_score("builtin", broken, EVENS.problem_id, {"reward_config": str(tmp_path / "nope.toml")})
    with pytest.raises(TypeError, match="config: expected a RewardConfig, a mapping of its fields or a file path, got int"):
        compute_score("builtin", broken, EVENS.problem_id, config=3)
    with pytest.raises(TypeError, match="return_dict: expected true or false, got 'false'"):
        compute_score("builtin", broken, EVENS.problem_id, return_dict="false")


def test_a_sandbox_failure_is_a_neutral_score_marked_never_an_exception(caplog: pytest.LogCaptureFixture) -> None:
    assert SANDBOX_ERROR_SCORE == 0.0
    assert compute_score("builtin", EVENS.reference_solution, EVENS.problem_id, sandbox=Failing()) == 0.0
    assert "sandbox failure on builtin/sum-of-evens" in caplog.text
    res = compute_score("builtin", EVENS.reference_solution, EVENS.problem_id, sandbox=Failing(), return_dict=True)
    assert isinstance(res, dict) and list(res) == KEYS
    assert (res["score"], res["tier"], res["sandbox_error"], res["acc"]) == (0.0, "sandbox_error", True, 0.0)
    assert "worker lost" in res["explanation"]
    assert compute_score("builtin", WRONG, EVENS.problem_id, sandbox=Failing(), sandbox_error_score=-0.25) == -0.25


def test_ground_truth_forms() -> None:
    sb = get_sandbox("process")
    assert compute_score("my-dataset", EVENS.reference_solution, EVENS.model_dump_json(), sandbox=sb) == 1.0
    assert compute_score("builtin", EVENS.reference_solution, None, {"problem_id": EVENS.problem_id}, sandbox=sb) == 1.0
    with pytest.raises(ValueError, match=r"ground_truth is neither a Task nor verl's \{'inputs', 'outputs'\}: task\.prompt: Field required"):
        compute_score("my-dataset", "x", json.dumps({"problem_id": "x"}))
    with pytest.raises(registry.UnknownTaskError, match="did you mean 'builtin/sum-of-evens'"):
        compute_score("builtin", "x", "builtin/sum-of-evenz")
    with pytest.raises(TypeError, match="ground_truth: expected a problem id, a Task as JSON or verl's"):
        compute_score("builtin", "x", None)


def test_verl_can_load_it_by_package_or_by_file_path() -> None:
    # custom_reward_function.path=pkg://code_env: verl imports the module and takes the name
    module = importlib.import_module("code_env")
    assert module.compute_score is compute_score and module.compute_score_batch is compute_score_batch
    # custom_reward_function.path=/path/to/code_env/verl.py: verl execs the file as a module of its own
    path = Path(code_env.verl.__file__)
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = loaded
    try:
        spec.loader.exec_module(loaded)
        fn: Any = loaded.compute_score
        assert fn("builtin", EVENS.reference_solution, EVENS.problem_id) == 1.0
    finally:
        del sys.modules["custom_module"]


def test_samples_are_logged_as_whole_replayable_records(tmp_path: Path) -> None:
    """``log_dir`` in reward_kwargs: every sample's record (per process and directory, numbered
    across calls), in the shape the log tools read; what verl does not pass stays None."""
    from code_env.logtools import replay
    from code_env.trajectory import read_log

    from ._records import assert_complete

    solutions = [f"```python\n{EVENS.reference_solution}```", WRONG, "def sum_of_evens(:"]
    infos = [{"index": 0, "prompt": "Sum the evens.", "step": 7}, None, {"index": 2}]
    for _ in range(2):
        compute_score_batch(["builtin"] * 3, solutions, [EVENS.problem_id] * 3, infos, log_dir=str(tmp_path))
    assert compute_score("builtin", solutions[0], EVENS.problem_id, None, log_dir=str(tmp_path)) == 1.0
    records = list(read_log(tmp_path))
    assert [r["trace_id"] for r in records] == [f"{EVENS.problem_id}/{n}/0/0" for n in range(7)]
    for rec in records:
        assert_complete(rec, trainer="verl", step=False, advantage=False, truncation_known=False, generation_timed=False)
        assert rec["completion"] in solutions and rec["advantage"] is None and rec["completion_truncated"] is None
    assert (records[0]["prompt"], records[0]["step"], records[1]["step"]) == ("Sum the evens.", 7, None)
    assert records[1]["prompt"] == code_env.env.task_prompt(EVENS)  # not passed: the task's own prompt
    assert [r["reward"] for r in records[:3]] == [1.0, records[1]["reward"], -1.0]
    report = replay(tmp_path)
    assert report.ok and report.steps == 7, report.summary()
    with pytest.raises(ValueError, match="log_every: expected an integer >= 1, got 0"):
        compute_score("builtin", WRONG, EVENS.problem_id, None, log_dir=str(tmp_path / "other"), log_every=0)


# --------------------------------------------------------------------------- verl's own ground truths


FIZZ_IN_OUTS = {"inputs": [c.stdin for c in [*FIZZ.public_tests, *FIZZ.hidden_tests]],
                "outputs": [c.expected_stdout for c in [*FIZZ.public_tests, *FIZZ.hidden_tests]]}  # fmt: skip
EVENS_IN_OUTS = {"fn_name": "sum_of_evens", "inputs": [c.args for c in [*EVENS.public_tests, *EVENS.hidden_tests]],
                 "outputs": [c.expected for c in [*EVENS.public_tests, *EVENS.hidden_tests]]}  # fmt: skip


def test_verls_inputs_outputs_ground_truths_are_tasks_as_they_are() -> None:
    sb = get_sandbox("process")
    for truth in (FIZZ_IN_OUTS, json.dumps(FIZZ_IN_OUTS)):  # a mapping, or its JSON (as parquet keeps it)
        assert compute_score("codecontests", f"```python\n{FIZZ.reference_solution}```", truth, sandbox=sb) == 1.0
    wrong = compute_score("codecontests", "```python\nprint(1)\n```", FIZZ_IN_OUTS, sandbox=sb, return_dict=True)
    assert wrong["score"] < 0.8 and wrong["public_total"] + wrong["hidden_total"] == len(FIZZ_IN_OUTS["inputs"])
    # the split: the first max(1, min(3, n // 2)) tests are public, the rest hidden
    n = len(FIZZ_IN_OUTS["inputs"])
    assert (wrong["public_total"], wrong["hidden_total"]) == (max(1, min(3, n // 2)), n - max(1, min(3, n // 2)))
    # call-based (fn_name): the inputs are the arguments, the outputs the values
    right = compute_score("apps", f"```python\n{EVENS.reference_solution}```", json.dumps(EVENS_IN_OUTS), sandbox=sb,
                          return_dict=True)  # fmt: skip
    assert (right["score"], right["tier"]) == (1.0, "all_tests")
    # one test: public and hidden both, so that passing it earns 1.0
    one = {"inputs": ["3\n"], "outputs": ["1\n2\nFizz\n"]}
    assert compute_score("x", f"```python\n{FIZZ.reference_solution}```", one, sandbox=sb) == 1.0
    for bad, message in [({"inputs": ["1"], "outputs": []}, "as many outputs as inputs"),
                         ({"inputs": [1], "outputs": ["1"]}, "must be text"),
                         ('{"inputs": [', "ground_truth is not JSON")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            compute_score("x", "print(1)", bad, sandbox=sb)


def test_acompute_score_batches_what_verls_reward_loop_awaits_together() -> None:
    """verl 0.9's reward loop worker: ``asyncio.gather`` of one ``compute_score`` per sample, each
    after its own decode; an async one is awaited in the loop. The samples go in one batch."""
    import asyncio

    from code_env import acompute_score

    right = f"```python\n{EVENS.reference_solution}```"
    rows = [(right if i % 2 == 0 else "```python\ndef sum_of_evens(nums):\n    return 0\n```") for i in range(12)]
    together, apart = CountingRunner(), CountingRunner()

    async def loop() -> list[Any]:
        async def one(i: int, solution: str) -> Any:
            await asyncio.sleep(0.001 * (i % 4))  # (each sample's decode in the executor)
            return await acompute_score(data_source="builtin", solution_str=solution, ground_truth=EVENS.problem_id,
                                        extra_info={"index": i}, sandbox=together, return_dict=True)  # fmt: skip
        return await asyncio.gather(*(one(i, s) for i, s in enumerate(rows)))

    scores = asyncio.run(loop())
    expected = compute_score_batch(["builtin"] * 12, rows, [EVENS.problem_id] * 12, sandbox=apart, return_dict=True)
    assert [s["score"] for s in scores] == [s["score"] for s in expected] and [s["tier"] for s in scores][:2] == ["all_tests", "partial"]
    assert together.batches == apart.batches, (together.batches, apart.batches)  # one batch's runs, as the batch form
