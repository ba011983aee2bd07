"""Seeded procedural task families."""

from __future__ import annotations

import pytest

import registry
from code_env.grading import grade
from registry import UnknownTaskSetError

from .conftest import get_sandbox

FAMILIES = ["arith", "list", "string"]


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_tasks_other_seed_other_tasks(family: str) -> None:
    a = registry.load(f"synthetic:{family}", n=30, seed=7)
    assert a == registry.load(f"synthetic:{family}", n=30, seed=7)
    assert a != registry.load(f"synthetic:{family}", n=30, seed=8)
    assert {t.difficulty for t in a} == {1, 2, 3, 4, 5}
    assert all(t.difficulty == 3 for t in registry.load(f"synthetic:{family}", n=5, seed=7, difficulty=3))


@pytest.mark.parametrize("family", FAMILIES)
def test_no_degenerate_tasks(family: str) -> None:
    for t in registry.load(f"synthetic:{family}", n=100, seed=0):
        cases = t.public_tests + t.hidden_tests
        assert len({repr(c.expected) for c in cases}) > 1, t.reference_solution
        assert any(c.expected != c.args[0] for c in cases), t.reference_solution


@pytest.mark.parametrize("family", FAMILIES)
def test_references_score_1_and_constants_do_not(family: str) -> None:
    sb = get_sandbox("process")
    for t in registry.load(f"synthetic:{family}", n=5, seed=0):
        assert grade(t, t.reference_solution, sandbox=sb).reward == 1.0
        first = t.public_tests[0].expected
        constant = f"def {t.entry_point}(*args):\n    return {first!r}\n"
        assert (grade(t, constant, sandbox=sb).reward or 0) < 0.8


def test_bad_parameters_are_clear() -> None:
    with pytest.raises(UnknownTaskSetError, match="did you mean 'synthetic:arith'"):
        registry.load("synthetic:arithm")
    with pytest.raises(TypeError, match="takes n, seed and difficulty"):
        registry.load("synthetic:arith", size=3)
    with pytest.raises(ValueError, match=r"difficulty: expected 1\.\.5"):
        registry.load("synthetic:list", difficulty=9)
    with pytest.raises(ValueError, match="n: expected an int"):
        registry.load("synthetic:list", n=0)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("difficulty", [None, 1, 3, 5])
def test_ids_say_how_to_make_the_task_again(family: str, difficulty: int | None) -> None:
    tasks = registry.load(f"synthetic:{family}", n=12, seed=4, difficulty=difficulty)
    level = "1-5" if difficulty is None else str(difficulty)
    assert [t.problem_id for t in tasks] == [f"synthetic:{family}/s4/d{level}/{i}" for i in range(12)]
    for t in tasks[::5]:
        assert registry.resolve(t.problem_id) == t  # regenerated from the id alone
    # the same task whatever the set's length: a longer set begins with the same tasks
    assert registry.load(f"synthetic:{family}", n=30, seed=4, difficulty=difficulty)[:12] == tasks


def test_an_id_of_another_difficulty_is_that_task_everywhere() -> None:
    # the issue: a right answer for an id made at difficulty 3 scored 0.0 through the adapters,
    # which looked it up in the default set (difficulties 1-5 in turn) under an ambiguous id
    from code_env import TRLReward, compute_score

    sb = get_sandbox("process")
    task = registry.load("synthetic:arith", n=6, seed=0, difficulty=3)[5]
    assert task.problem_id == "synthetic:arith/s0/d3/5"
    assert task.problem_id not in {t.problem_id for t in registry.load("synthetic:arith")}
    reward = TRLReward("synthetic:arith", sandbox=sb)
    assert reward(["p"], [task.reference_solution], problem_id=[task.problem_id]) == [1.0]
    assert compute_score("synthetic:arith", task.reference_solution, task.problem_id, sandbox=sb) == 1.0


@pytest.mark.parametrize("bad", ["synthetic:arith/0/5", "synthetic:arith/s0/d9/5", "synthetic:maths/s0/d3/5",
                                 "synthetic:arith/s0/d3/100000", "synthetic:arith/s0/d3"])  # fmt: skip
def test_an_id_that_names_no_task_is_a_clear_error_never_a_zero(bad: str) -> None:
    from code_env import TRLReward, compute_score

    with pytest.raises(registry.UnknownTaskError, match=r"synthetic:<family>/s<seed>/d<1\.\.5 or 1-5>/<index>|at most 100000"):
        registry.resolve(bad)
    with pytest.raises(registry.UnknownTaskError):
        TRLReward("synthetic:arith", sandbox=get_sandbox("process"))(["p"], ["def f(x):\n    return x\n"], problem_id=[bad])
    with pytest.raises(registry.UnknownTaskError):
        compute_score("synthetic:arith", "def f(x):\n    return x\n", bad)
