"""``code_env.interpreter.CodeInterpreter``: what a stateful session costs.

* Cell latency, one cell at a time (what a model waiting on its tool sees: ``run`` from call to
  answer), at a session depth of 1, 10 and 50 cells: the measured cell is the session's 1st, 10th
  or 50th, so its run replays 0, 9 or 49 earlier cells first. The sessions are built once (real
  cells, each a small computation that a tool-integrated-reasoning model would write, some with a
  print); each measured cell runs in a ``fork()`` of one, so the depth stays put. Paired
  (``conftest.paired``: the three depths in alternating rounds), p50/p99 over single cells, on the
  process backend, and on the nsjail backend where it runs (skipped, saying why, where it cannot).
* The memory an idle session holds: between cells a session is only its kept cells' text (and the
  fingerprints of their variables) on the host, no process and no file: measured as what
  ``close()`` frees (``tracemalloc``) of a session that ran 10 and 50 such cells, and from it how
  many idle sessions this machine's available memory holds. The sessions that *run* at once are
  the sandbox's workers (one per core), each within its ``memory_mb``; the peak memory of a run at
  each depth is reported beside it.

No assertion on speed: only that every cell gives its expected value. The numbers are printed with
``-s`` and kept in the benchmark's ``extra_info`` and the table's notes."""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from code_env.interpreter import CellResult, CodeInterpreter
from sandbox import Sandbox

from .conftest import CORES, Latencies, Side, Target, paired, record_paired

DEPTHS = (1, 10, 50)
ROUNDS, PER_ROUND = 6, 20  # per depth: 120 cells, for p99


def cell(i: int) -> str:
    """The i-th cell of a session: a small computation on the earlier cells' variables."""
    if i == 0:
        return "import math\nfrom collections import Counter\nvalues = [0]\ndef f(n):\n    return sum(k * k for k in range(n))"
    if i % 5 == 0:
        return f"v{i} = f({i * 10})\nvalues.append(v{i} % 97)\nprint('step', {i}, len(values))"
    return f"v{i} = math.isqrt(f({i * 20})) + values[-1]\nc{i} = Counter(str(v{i}))\nvalues.append(c{i}.most_common(1)[0][1])"


MEASURED = "vals = globals().get('values', [])\ntotal = sum(vals) + len(vals)\ntotal"


def session(sb: Sandbox, depth: int) -> CodeInterpreter:
    """A session whose next cell is its ``depth``-th."""
    py = CodeInterpreter(sb, limits={"max_cells": 1000, "session_time_s": 86_400})
    for i in range(depth - 1):
        r = py.run(cell(i))
        assert r.status == "ok", r
    return py


def expected(depth: int) -> str:
    """The measured cell's value, computed here the same way."""
    ns: dict[str, Any] = {}
    for i in range(depth - 1):
        exec(cell(i).replace("print(", "(lambda *a: None)("), ns)
    vals = ns.get("values", [])
    return repr(sum(vals) + len(vals))


def measure(base: CodeInterpreter, want: str, n: int) -> Latencies:
    out = Latencies()
    for _ in range(n):
        branch = base.fork()
        t0 = time.perf_counter()
        r = branch.run(MEASURED)
        out.append(time.perf_counter() - t0)
        branch.close()
        assert r.status == "ok" and r.value == want, r
    return out


def idle_bytes(sb: Sandbox, cells: int) -> tuple[int, CellResult]:
    """What ``close()`` frees of a session that ran ``cells`` cells: the memory it held idle."""
    tracemalloc.start()
    try:
        py = session(sb, cells + 1)
        last = py.run(MEASURED)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        py.close()
        del py
        gc.collect()
        return held - tracemalloc.get_traced_memory()[0], last
    finally:
        tracemalloc.stop()


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module", params=["process", "nsjail"])
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox | str]:
    try:
        s = Sandbox(request.param, workers=CORES)
    except Exception as exc:  # no nsjail binary, or a kernel that refuses it: skipped, saying why
        yield f"{request.param} backend unavailable: {exc}"[:200]
        return
    with s:
        s.run_many(["pass"] * 4)
        yield s


def side(base: CodeInterpreter, want: str, n: int) -> Side:
    def round_() -> Latencies:
        return measure(base, want, n)

    return Side(round_, n)


def test_cell_latency_by_session_depth(benchmark: Any, sb: Sandbox | str) -> None:
    if isinstance(sb, str):
        pytest.skip(sb)
    rounds, n = (ROUNDS, PER_ROUND) if benchmark.enabled else (1, 2)
    if sb.backend_name == "nsjail" and benchmark.enabled:
        rounds, n = ROUNDS, PER_ROUND // 2  # (a jail takes ~40 ms to start)
    bases = {d: session(sb, d) for d in DEPTHS}
    try:
        sides = {f"depth {d} (replays {d - 1})": side(bases[d], expected(d), n) for d in DEPTHS}
        result = paired(benchmark, sides, rounds=rounds)
        memory: dict[str, float] = {}
        peaks = []
        for d in (10, 50):
            held, last = idle_bytes(sb, d)
            memory[f"idle_bytes_depth_{d}"] = held
            peaks.append(f"depth {d + 1}: {last.peak_memory_mb or 0:.1f} MiB")
        available = mem_available()
        fit = {d: available // max(memory[f"idle_bytes_depth_{d}"], 1) for d in (10, 50)}
        p = {name: sorted(result.latencies[name]) for name in sides}
        summary = {f"p50_ms_{name}": 1000 * statistics.median(v) for name, v in p.items() if v}
        summary |= {f"p99_ms_{name}": 1000 * v[min(len(v) - 1, round(0.99 * (len(v) - 1)))] for name, v in p.items() if v}
        benchmark.extra_info.update(memory | {"mem_available_bytes": available, "idle_sessions_fit_depth_10": fit[10],
                                              "idle_sessions_fit_depth_50": fit[50]} | summary)  # fmt: skip
        note = (f"Idle session (what close() frees): {memory['idle_bytes_depth_10'] / 1024:.1f} KiB after 10 cells, "
                f"{memory['idle_bytes_depth_50'] / 1024:.1f} KiB after 50, and no process or file; "
                f"{available / 2**30:.1f} GiB available holds ~{fit[10]:,} idle 10-cell sessions (~{fit[50]:,} of 50). "
                f"Running at once: {sb.workers} cells (the workers), each within its memory_mb; peak memory of a "
                f"run: {', '.join(peaks)}.")  # fmt: skip
        print(f"\n{sb.backend_name}: {note}\n" + "\n".join(f"  {k}: {v:.2f}" for k, v in summary.items()))
        record_paired(benchmark, result, title=f"Stateful interpreter: cell latency by session depth ({sb.backend_name} backend)",
                      program="a small computation cell (CodeInterpreter.run)", mode="one cell at a time, sequential",
                      unit="cells", note=note, rank=60,
                      targets=[Target(f"interpreter cell at depth {d}, {sb.backend_name} backend: ms per cell",
                                      f"depth {d} (replays {d - 1})", "time") for d in DEPTHS])  # fmt: skip
    finally:
        for base in bases.values():
            base.close()
