"""A grade's total time budget: what one sample (a program against a task's public and hidden
tests) may spend in sandbox runs, all runs together.

Each call has its per-test limit and each run one limit plus start-up (``registry.verify``), but
nothing bounded their sum: a program whose every process answers one call (slowly enough not to
look stalled) and then sleeps until killed was resumed run after run, one run per test, and
earned 1.0 for (tests) x (limit + start-up) of sandbox time: minutes per sample on HumanEval/53.

The rule (``budget_s``), from the task alone: ``runs`` one-run limits (the per-test limit plus
``START_UP_S``; ``runs`` = 1.5 by default, ``RewardConfig.grade_budget_runs``), plus, per test,
``PER_TEST_FRACTION`` of the per-test limit (and, on a stdio task, where every test is a run of
its own, one start-up). A correct program of the built-in tasks or HumanEval spends a few per
cent of it (its runs take tens of milliseconds, against 3.7 to 6.9 s for the built-in tasks, 2 s
limit; 4.9 to 11.2 s for HumanEval, 3 s limit, up to 105 tests), and so does any program with
one call near its limit; a program that spends most of the per-test limit on many of its calls
does not fit, and is a timeout. A stalling program so costs at most about 1.5 run limits plus
2 % of the limit per test, where it cost a run per test, each to its limit.

What is charged: each program run's wall clock as the sandbox measured it (never what the
program reports), at most the run's own limit (a run whose deadline the sandbox moved for the
time it waited for a CPU on a busy machine is charged its limit, not the wait). Checker runs are
the task's, not the program's, and are not charged; a try the sandbox failed is refunded (its
runs are made again). A function task's runs are sequential, and each gets at most what is left
of the budget as its limit: so the sample costs at most its budget (plus the sandbox's grace per
run). A stdio task's runs of one test group start together, each with at most what was left
when they started; the hidden group does not start once the public one has spent the budget.
"""

from __future__ import annotations

import math
import threading

from .schema import Task

START_UP_S = 0.25  # a run's allowance for starting and loading the program, on top of one per-test limit
PER_TEST_FRACTION = 0.02  # of the per-test limit, per test
MIN_RUN_S = 0.05  # less than this left: no run is started (it could not even start the interpreter)
DEFAULT_RUNS = 1.5


def budget_s(task: Task, runs: float = DEFAULT_RUNS) -> float:
    """A grade's total time budget for ``task``: ``runs`` x (per-test limit + start-up) + per test
    ``PER_TEST_FRACTION`` x the per-test limit (+ one start-up on a stdio task). Seconds."""
    if not (isinstance(runs, (int, float)) and math.isfinite(runs) and runs > 0):
        raise ValueError(f"runs: expected a positive finite number, got {runs!r}")
    tests = len(task.public_tests) + len(task.hidden_tests)
    per_test = PER_TEST_FRACTION * task.timeout_s + (START_UP_S if task.kind == "stdio" else 0.0)
    return round(runs * (task.timeout_s + START_UP_S) + tests * per_test, 3)


class Budget:
    """One sample's budget, shared by its public and hidden verification (and their retries).
    Thread-safe: the vector env and ``grade_many`` may verify jobs of one sample in one batch."""

    def __init__(self, seconds: float) -> None:
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds: expected a positive finite number, got {seconds!r}")
        self.budget_s = float(seconds)
        self._spent = 0.0
        self._lock = threading.Lock()

    @property
    def spent_s(self) -> float:
        """Seconds charged so far."""
        return self._spent

    @property
    def left_s(self) -> float:
        """Seconds left (never below 0)."""
        return max(0.0, self.budget_s - self._spent)

    def charge(self, seconds: float) -> None:
        with self._lock:
            self._spent += max(0.0, seconds)

    def refund(self, seconds: float) -> None:
        """Give back what a try the sandbox failed was charged (its runs are made again)."""
        with self._lock:
            self._spent = max(0.0, self._spent - max(0.0, seconds))

    def message(self) -> str:
        """The feedback line of the test the budget stopped."""
        return f"the grade's time budget of {self.budget_s:g} s was spent (registry.budget): not run to the end"
