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
