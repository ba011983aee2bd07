"""Cancellation, everywhere: whatever interrupts a caller (an exception raised in its thread by a
signal handler, as verl's ``compute_score_timeout`` does with SIGALRM; an asyncio cancellation; a
deadline of ``asyncio.wait_for``) kills the runs it started and frees their workers at once, and
the caller gets its own exception back (never a ``sandbox_error`` of ours). Checked from the host:
no process of the interrupted runs is left, and the next, correct program scores 1.0. The runs
here sleep 60 s under a 60 s limit: were they not killed, they would hold every worker for a
minute, far past the liveness bounds below (which are not speed targets)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator

import pytest

import registry
from code_env import agrade_many, compute_score, grade
from sandbox import Limits, Sandbox

from .conftest import assert_contained

pytestmark = pytest.mark.slow

SLEEPER = "import time\ntime.sleep(60)\nprint(input())\n"
ECHO = registry.Task(
    problem_id="cancel/echo", prompt="Print the input.", kind="stdio",
    reference_solution="print(input())\n", timeout_s=60.0,
    public_tests=[registry.TestCase(stdin=f"{i}\n", expected_stdout=f"{i}\n") for i in range(3)],
    hidden_tests=[registry.TestCase(stdin=f"{i}\n", expected_stdout=f"{i}\n") for i in range(3, 6)],
)  # fmt: skip
LONG = Limits(timeout_s=60.0)


def eventually_contained(sb: Sandbox, within_s: float = 20.0) -> None:
    """Nothing of a run alive (``assert_contained``) within ``within_s``: a killed run's processes
    take a moment to go; a run left alive would be there for a minute."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            assert_contained(sb)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """verl's ``_score_timeout``: SIGALRM raises ``TimeoutError`` in this (the main) thread."""

    def handler(signum: int, frame: object) -> None:
        raise TimeoutError(f"timed out after {seconds}s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_deadline_in_the_callers_thread_kills_its_runs(sb: Sandbox) -> None:
    # as verl's NaiveRewardManager with compute_score_timeout=1: the grade of a program that hangs
    with pytest.raises(TimeoutError, match="timed out after 1"), alarm(1.0):
        compute_score("inline", SLEEPER, ECHO.model_dump_json(), sandbox=sb)
    eventually_contained(sb)
    # the next, correct sample is not starved: it scores 1.0 (and nothing waited for a worker)
    g = grade(ECHO, "print(input())\n", sandbox=sb)
    assert g.reward == 1.0, g.breakdown
    # the same for a single run and a batch of them, called directly
    with pytest.raises(TimeoutError), alarm(0.5):
        sb.run(SLEEPER, stdin="x\n", limits=LONG)
    with pytest.raises(TimeoutError), alarm(0.5):
        sb.run_many([{"code": SLEEPER, "stdin": "x\n", "limits": LONG}] * (2 * sb.workers + 3))
    eventually_contained(sb)
    assert sb.run("print(input())", stdin="ok\n").stdout == "ok\n"


def test_an_asyncio_cancellation_kills_its_runs(sb: Sandbox) -> None:
    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sb.arun_many([{"code": SLEEPER, "stdin": "x\n", "limits": LONG}] * 5), timeout=1.0)
        task = asyncio.ensure_future(agrade_many([(ECHO, SLEEPER)], sandbox=sb))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    eventually_contained(sb)  # the run_many's runs and the grade's (its thread's runs, cancelled with it)
    assert grade(ECHO, "print(input())\n", sandbox=sb).reward == 1.0
