"""Hidden runs never overlap runs whose output an agent sees (``registry.phases``), proved from the
host side by the runs' own clocks: each program stamps when it was loaded and when it answered
on its stderr, which the grader keeps; no hidden run's span may meet a public run's, in one batch
or across threads. A control runs the same jobs unphased and sees them overlap."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

import registry
from code_env.grading import judge_many
from registry.phases import PhaseLock
from registry.verify import Job, Verification, _verify_phase, verify_many

from .conftest import BACKENDS, get_sandbox

BY_ID = {t.problem_id: t for t in registry.load("builtin")}
EVENS = BY_ID["builtin/sum-of-evens"]
FIZZ = BY_ID["builtin/fizzbuzz-line"]
# loaded, it sleeps (so that runs of one batch overlap), then every answer prints its span
STAMPED = '''import sys, time
_T0 = time.time()
time.sleep(0.15)
def _span():
    print(f"SPAN {_T0!r} {time.time()!r}", file=sys.stderr, flush=True)
'''
EVENS_CODE = STAMPED + "def sum_of_evens(nums):\n    _span()\n    return sum(n for n in nums if n % 2 == 0)\n"
FIZZ_CODE = STAMPED + "_span()\n" + FIZZ.reference_solution


def spans(vs: list[Verification | None]) -> list[tuple[float, float]]:
    out = []
    for v in vs:
        for r in v.executions if v is not None else []:
            out += [(float(a), float(b)) for a, b in re.findall(r"SPAN (\S+) (\S+)", r.stderr)]
    return out


def overlaps(public: list[tuple[float, float]], hidden: list[tuple[float, float]]) -> int:
    return sum(1 for a0, a1 in public for b0, b1 in hidden if a0 < b1 and b0 < a1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_hidden_run_overlaps_a_public_one_in_a_batch_or_across_threads(backend: str) -> None:
    """Single-turn grades (joint runs: public and hidden tests in one run, or a stdio task's hidden
    runs after its public ones) in three threads, and the public verification of a multi-turn step
    (its output is what the agent reads next) in two more: no run that sees hidden inputs meets a
    public one."""
    sb = get_sandbox(backend)
    items = [(EVENS, EVENS_CODE), (FIZZ, FIZZ_CODE), (EVENS, EVENS_CODE + "\n# another\n")]
    public: list[tuple[float, float]] = []
    hidden: list[tuple[float, float]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def grade() -> None:
        try:
            judged = judge_many(items, sandbox=sb)
            with lock:  # every run of a single-turn grade is of the hidden phase
                hidden.extend(spans([j.public for j in judged] + [j.hidden for j in judged]))
            assert all(j.grade.reward == 1.0 for j in judged), [j.grade.breakdown for j in judged]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def step() -> None:
        try:
            for v in verify_many([Job(t, c, "public") for t, c in items], sb):
                assert v.passed == v.total, v
                with lock:
                    public.extend(spans([v]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=grade) for _ in range(3)] + [threading.Thread(target=step) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(public) >= 2 * 3 and len(hidden) >= 3 * 3  # every run stamped (stdio: one per test)
    assert overlaps(public, hidden) == 0

    # the control: the same jobs in one unphased batch do overlap, so the check above can fail
    jobs = [Job(t, c, which) for t, c in items for which in ("public", "both")]
    mixed = _verify_phase(jobs, sb)
    assert overlaps(spans([v for v, j in zip(mixed, jobs, strict=True) if j.which == "public"]),
                    spans([v for v, j in zip(mixed, jobs, strict=True) if j.which == "both"])) > 0  # fmt: skip


def test_the_phase_lock_admits_one_phase_at_a_time_and_starves_neither() -> None:
    lock = PhaseLock()
    log: list[str] = []
    public_in, hidden_waiting, release = threading.Event(), threading.Event(), threading.Event()

    def hold(which: Any, name: str, inside: threading.Event | None = None) -> None:
        with lock.hold(which):
            log.append(f"{name} in")
            if inside is not None:
                inside.set()
                release.wait(10)
            log.append(f"{name} out")

    first = threading.Thread(target=hold, args=("public", "p1", public_in))
    first.start()
    assert public_in.wait(10) and lock.active == "public"
    second = threading.Thread(target=hold, args=("hidden", "h1"))
    second.start()
    while lock._waiting["hidden"] == 0:  # (the hidden thread is waiting)
        hidden_waiting.wait(0.01)
    third = threading.Thread(target=hold, args=("public", "p2"))
    third.start()
    while lock._waiting["public"] == 0:
        hidden_waiting.wait(0.01)
    release.set()
    for t in (first, second, third):
        t.join(10)
    # p2 arrived while h1 waited: it waits for h1 (no starvation of the hidden phase)
    assert log == ["p1 in", "p1 out", "h1 in", "h1 out", "p2 in", "p2 out"]
    assert lock.active is None
    with pytest.raises(ValueError, match="phase: expected 'public' or 'hidden'"):
        with lock.hold("both"):  # type: ignore[arg-type]
            pass
