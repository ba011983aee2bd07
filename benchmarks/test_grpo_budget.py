"""A GRPO group with one answer-then-stall program against the same group without it, side by side.

A group is 8 samples of one task (``builtin/expression-eval``: 3 public + 12 hidden tests, 2 s per
test), graded in one ``code_env.grading.judge_many`` call as GRPO grades a group: 8 correct
programs (distinct, so that none is answered from the in-batch dedup), against 7 correct ones and
one whose every process answers one call and then sleeps until killed (``"sleeps"``: the issue's
program; ``"answers-slowly"``: it first sleeps 70 % of the limit on its one answer, which the stall
rule resumes run after run: 1.0 for 15 x 2.25 s without the grade's time budget). Paired
(``conftest.paired``): rounds alternate the order of the groups. Reported: the ratio of the stalling group's wall time to the
clean group's (median and spread over rounds; target <= 1.5x), the CPU time per sandbox run (the
sandbox's clock), and, for ``"sleeps"``, the same group without the budget
(``RewardConfig(grade_budget_runs=None)``).

No assertion on speed: only that the verdicts are right (the stalling sample a timeout, the
others 1.0)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pytest

import registry
from code_env.grading import Judged, judge_many, shared_sandbox
from code_env.reward import RewardConfig
from registry import Task

from .conftest import Side, Target, paired, record_paired

ROUNDS = 5
GROUP = 8


def answer_then_stall(task: Task, first_s: float = 0.0) -> str:
    """The reference, except that every process answers its first call (after ``first_s``) and
    then sleeps until the sandbox kills it."""
    return (f"{task.reference_solution}\nimport time\n_calls = []\n_answer = {task.entry_point}\n"
            f"def {task.entry_point}(*args, **kwargs):\n    _calls.append(1)\n    if len(_calls) > 1:\n"
            f"        time.sleep(1000)\n    time.sleep({first_s})\n    return _answer(*args, **kwargs)\n")


STALLERS = {"sleeps": 0.0, "answers-slowly": 1.4}


def _cpu_per_run(judged: list[Judged]) -> float:
    runs = [r for j in judged for v in (j.public, j.hidden) if v is not None for r in v.executions]
    return sum(r.cpu_time_ms for r in runs) / len(runs)  # ms


@pytest.mark.parametrize("staller", list(STALLERS))
def test_grpo_group_with_an_answer_then_stall_program(benchmark: Any, staller: str) -> None:
    task = {t.problem_id: t for t in registry.load("builtin")}["builtin/expression-eval"]
    correct = [task.reference_solution + f"\n# sample {k}\n" for k in range(GROUP)]
    groups = {"clean": correct, "stall": [*correct[:-1], answer_then_stall(task, STALLERS[staller])]}
    configs = {"clean": RewardConfig(), "stall": RewardConfig()}
    if staller == "sleeps" and benchmark.enabled:
        groups["unbounded"], configs["unbounded"] = groups["stall"], RewardConfig(grade_budget_runs=None)
    sandbox = shared_sandbox("auto")
    judge_many([(task, correct[0])], sandbox=sandbox)  # warm
    cpu: dict[str, list[float]] = {k: [] for k in groups}

    def judge(side: str) -> Callable[[], object]:
        def run() -> list[str]:
            judged = judge_many([(task, c) for c in groups[side]], sandbox=sandbox, config=configs[side])
            cpu[side].append(_cpu_per_run(judged))
            return [j.grade.breakdown.tier for j in judged]

        return run

    def check(out: dict[str, object]) -> None:
        for side, tiers in out.items():
            assert isinstance(tiers, list)
            assert tiers[:-1] == ["all_tests"] * (GROUP - 1), tiers
            last = "all_tests" if side == "clean" else "timeout"  # (unbounded: "sleeps" only, the stall rule's timeout)
            assert tiers[-1] == last, (side, tiers)

    result = paired(benchmark, {k: Side(judge(k), GROUP) for k in groups}, rounds=ROUNDS if benchmark.enabled else 1,
                    warmup_rounds=0, check=check)  # fmt: skip
    wall = result.wall
    ratios = result.ratios("stall", "clean", "time")
    line = (f"GRPO group of {GROUP} ({task.problem_id}), one answer-then-stall ({staller}) vs none, {len(ratios)} "
            f"alternating rounds: {statistics.median(ratios):.2f}x (spread {min(ratios):.2f}-{max(ratios):.2f}); "
            f"wall {statistics.median(wall['stall']):.2f} s vs {statistics.median(wall['clean']):.2f} s; "
            f"sandbox CPU per run {statistics.median(cpu['stall']):.0f} ms vs {statistics.median(cpu['clean']):.0f} ms")
    if "unbounded" in wall:
        line += f"; without the grade budget {statistics.median(wall['unbounded']):.2f} s"
    print("\n" + line)
    benchmark.extra_info.update({"ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                                 "ratio_max": max(ratios), "wall_s": wall, "cpu_ms_per_run": cpu})  # fmt: skip
    note = (f"`clean`: {GROUP} correct programs; `stall`: 7 of them and one that stalls ({staller}); "
            f"the sandbox's own clock gives {statistics.median(cpu['stall']):.0f} vs {statistics.median(cpu['clean']):.0f} ms "
            "of CPU per run (stall vs clean)" + ("; `unbounded`: the stalling group without the grade's time budget" if "unbounded" in wall else "") + ".")
    record_paired(benchmark, result, title=f"a GRPO group with one answer-then-stall program ({staller}) against none",
                  program=task.problem_id, mode=f"one group of {GROUP} (judge_many)", unit="samples",
                  targets=[Target(f"GRPO group with one staller ({staller}): time ≤ 1.5× the clean group's", "stall", "time",
                                  vs="clean", op="<=", bound=1.5)], note=note)  # fmt: skip
