"""How many bits per second the CPU-contention channel carries between two graders' runs on one
machine (see ``benchmarks/_timing_channel.py``): a sender modulates its CPU use per slot, a
receiver in another ``Sandbox`` times its own progress, the host decodes, for slots of 10, 50 and
200 ms, beside the same programs as plain host processes (the anchor). No assertion on the numbers (they depend on the machine and its load): with
``--save-results`` they go to ``benchmarks/results/timing_channel.md`` and, through
``scripts/readme_tables.py``, the README's threat model. With ``--benchmark-disable`` (the CI
smoke) one short transmission checks that the measurement works end to end."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import pytest

from ._timing_channel import ChannelResult, as_json, capacity_range, decode, entropy, measure, table
from .conftest import RESULTS

CORES = os.cpu_count() or 1
PLAN = ((10, 600), (50, 300), (200, 100))  # (slot ms, slots): 6, 15 and 20 s of transmission


def test_timing_channel(benchmark: Any, request: pytest.FixtureRequest) -> None:
    results: list[ChannelResult] = []
    if not benchmark.enabled:  # the smoke: one short transmission, end to end
        benchmark.pedantic(lambda: results.append(measure(50, 16, senders=1, seed=1)), rounds=1, iterations=1)
        (smoke,) = results
        assert smoke.slots == 16 and 0 <= smoke.bit_errors <= 16
        assert 0 <= smoke.capacity_bits_per_s <= smoke.raw_bits_per_s == 20
        assert measure(50, 16, senders=1, seed=1, where="host").slots == 16  # the anchor's path works too
        return
    load = os.getloadavg()[0]
    benchmark.pedantic(lambda: results.extend(measure(ms, n, senders=CORES, where=where) for ms, n in PLAN
                                              for where in ("sandbox", "host")), rounds=1, iterations=1)  # fmt: skip
    benchmark.extra_info["timing_channel"] = as_json(results)
    when = f"{time.strftime('%Y-%m-%d')}, load average {load:.1f} before the run"
    text = table(results, cores=CORES, when=when)
    print("\n" + text)
    if request.config.getoption("--save-results"):
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "timing_channel.md").write_text(text)
        (RESULTS / "timing_channel.json").write_text(json.dumps({"load_average": load, "results": as_json(results)}, indent=2) + "\n")


def test_the_decoder_follows_a_drifting_load() -> None:
    """A clean channel on a machine whose load grows steadily (the receiver's progress halves over
    the run): every bit is read back, where one threshold for the whole run misreads many."""
    rng = random.Random(3)
    bits = [rng.randint(0, 1) for _ in range(200)]
    counts = [(1000 - 2.5 * i) * (0.7 if b else 1.0) for i, b in enumerate(bits)]
    assert decode([round(c) for c in counts]) == bits
    assert decode([round(c) for c in counts], window=len(bits)) != bits


def test_capacity_of_the_binary_symmetric_channel() -> None:
    assert entropy(0.0) == entropy(1.0) == 0.0 and entropy(0.5) == 1.0
    assert entropy(0.11) == pytest.approx(0.4999, abs=1e-3)  # p = 0.11 halves the raw rate
    assert capacity_range(0, 400, 100.0)[1] == 100.0 and capacity_range(0, 400, 100.0)[0] > 90
    assert capacity_range(30, 60, 5.0)[0] == 0.0  # p = 0.5 within the interval: maybe nothing
