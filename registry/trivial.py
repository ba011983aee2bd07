"""Trivial answers, and public tests that none of them passes.

A policy that finds one constant answer passing every public test of a task earns ``all_public``
(0.8) without solving anything. The trivial answers: each JSON constant (``None``, ``True``,
``False``, ``0``, ``1``, ``-1``, ``""``, ``[]``, ``{}``: the empty containers of every return type
among them), the identity of the first argument, and for stdio tasks no output, the input echoed
and each constant printed. ``choose_public`` picks a task's public tests so that none passes them
all (and, where two or more public tests allow it, so that no single constant does either);
``trivial_passes`` is the check every shipped set must pass (with the sandbox for tasks judged
by a special checker).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .comparators import normalise, stdout_equal, values_equal
from .schema import Task, TestCase
from .verify import Job, Runner, verify_many

CONSTANTS: tuple[Any, ...] = (None, True, False, 0, 1, -1, "", [], {})

Answer = Callable[[TestCase], Any]  # a function test's returned value, or a stdio test's stdout


def _first_arg(case: TestCase) -> Any:
    if case.args:
        return case.args[0]
    return next(iter(case.kwargs.values()), None)


def _constant(value: Any) -> Answer:
    return lambda case: value


def trivial_answers(kind: str) -> dict[str, Answer]:
    """The trivial answers of a task kind, by name (``return []``, ``identity``, ``print(0)`` ...)."""
    if kind == "function":
        answers: dict[str, Answer] = {f"return {c!r}": _constant(c) for c in CONSTANTS}
        answers["return the first argument"] = _first_arg
        return answers
    answers = {"print nothing": lambda case: "", "echo the input": lambda case: case.stdin or ""}
    for c in CONSTANTS:
        for text in {str(c), json.dumps(c)}:
            answers[f"print({text!r})"] = _constant(text + "\n")
    return answers


def trivial_program(task: Task, name: str) -> str:
    """The program that gives the trivial answer ``name``, to run in the sandbox."""
    if task.kind == "function":
        body = "return (args[0] if args else next(iter(kwargs.values()), None))" if name == "return the first argument" else name
        return f"def {task.entry_point}(*args, **kwargs):\n    {body}\n"
    if name == "print nothing":
        return "pass\n"
    if name == "echo the input":
        return "import sys\nsys.stdout.write(sys.stdin.read())\n"
    return f"{name}\n"


def passes(case: TestCase, answer: Answer) -> bool:
    """Does the trivial answer pass this test (a test without a special checker)?"""
    try:
        got = answer(case)
    except Exception:
        return False
    if case.is_stdio:
        return stdout_equal(case.expected_stdout or "", got, case.comparator)
    return values_equal(case.expected, normalise(got), case.comparator)


def choose_public(cases: Sequence[TestCase], n_public: int, kind: str = "function") -> tuple[list[TestCase], list[TestCase]]:
    """``n_public`` of ``cases`` as the public tests (the rest hidden, both in their original
    order), chosen one at a time: each time the test that leaves the fewest trivial answers
    passing every public test so far, then the fewest single constants (the expected value of
    some test), then the earliest. So the first tests stay public unless a later one is needed.
    Tests with a special checker cannot be judged here and count as rejecting nothing. Of two or
    more tests at least one stays hidden whatever ``n_public`` asks (without a hidden test the top
    tier is out of reach: ``code_env.grading.aggregate``); a single test is public."""
    trivial = list(trivial_answers(kind).values())
    constants = [_constant(c.expected_stdout if kind == "stdio" else c.expected) for c in cases]
    kills = [[c.checker is None and not passes(c, a) for a in trivial + constants] for c in cases]
    n_trivial = len(trivial)
    alive = [True] * len(kills[0]) if cases else []
    chosen: list[int] = []

    def after(alive: list[bool], i: int) -> list[bool]:
        return [a and not k for a, k in zip(alive, kills[i], strict=True)]

    for _ in range(min(n_public, max(1, len(cases) - 1))):
        rank = {i: after(alive, i) for i in range(len(cases)) if i not in chosen}
        pick = min(rank, key=lambda i: (sum(rank[i][:n_trivial]), sum(rank[i][n_trivial:]), i))
        alive = rank[pick]
        chosen.append(pick)
    public = [cases[i] for i in sorted(chosen)]
    hidden = [c for i, c in enumerate(cases) if i not in chosen]
    return public, hidden


def trivial_passes(tasks: Sequence[Task], runner: Runner | None = None) -> dict[str, list[str]]:
    """For each task, the trivial answers that pass every one of its public tests (empty lists
    left out). Tests judged here; a task with a special checker needs ``runner``: its trivial
    programs run in the sandbox."""
    found: dict[str, list[str]] = {}
    jobs: list[tuple[Task, str]] = []
    for task in tasks:
        for name, answer in trivial_answers(task.kind).items():
            if any(c.checker is not None for c in task.public_tests):
                jobs.append((task, name))
            elif all(passes(c, answer) for c in task.public_tests):
                found.setdefault(task.problem_id, []).append(name)
    if jobs:
        if runner is None:
            raise ValueError(f"{len({t.problem_id for t, _ in jobs})} tasks have a special checker: pass a runner to check them")
        results = verify_many([Job(t, trivial_program(t, name), "public", f"{t.problem_id}/trivial") for t, name in jobs], runner)
        for (task, name), v in zip(jobs, results, strict=True):
            if v.sandbox_error:
                raise RuntimeError(f"{task.problem_id}: the sandbox failed on {name!r}: {v.sandbox_error}")
            if v.total and v.passed == v.total:
                found.setdefault(task.problem_id, []).append(name)
    return found
