"""Time limits derived from the reference (EvalPlus rule), cached on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

import registry
from registry.timing import calibrate

from .conftest import get_sandbox

TASKS = registry.load("builtin")


def test_limits_follow_the_reference_and_are_cached(tmp_path: Path) -> None:
    sb = get_sandbox("process")
    quick = next(t for t in TASKS if t.problem_id == "builtin/sum-of-evens")
    slow = quick.model_copy(update={
        "problem_id": "slow/evens",
        "reference_solution": "import time\ndef sum_of_evens(nums):\n    time.sleep(0.4)\n    return sum(n for n in nums if n % 2 == 0)\n",
    })  # fmt: skip
    cache = tmp_path / "timing.json"
    fast_cal, slow_cal = calibrate([quick, slow], sb, cache_path=cache)
    assert fast_cal.timeout_s == 1.0  # the floor
    assert slow_cal.timeout_s >= 1.6  # 4 x the slowest call (>= 0.4 s)
    assert cache.exists()
    # cached: a closed sandbox is never asked again
    from sandbox import Sandbox

    closed = Sandbox(workers=1)
    closed.close()
    again = calibrate([quick, slow], closed, cache_path=cache)
    assert [t.timeout_s for t in again] == [fast_cal.timeout_s, slow_cal.timeout_s]


def test_calibration_refuses_a_failing_reference() -> None:
    broken = TASKS[0].model_copy(update={"reference_solution": "def sum_of_evens(nums):\n    return 1\n"})
    with pytest.raises(RuntimeError, match="its reference does not pass its public tests"):
        calibrate([broken], get_sandbox("process"))
    with pytest.raises(ValueError, match="factor > 0"):
        calibrate(TASKS[:1], get_sandbox("process"), factor=0)
