"""The measuring apparatus of ``pytest benchmarks/``: paired comparisons, CPU of process trees, and
the table every run ends with.

Every comparison is **paired**: its sides (an engine and its anchors) run in the same rounds, one
after another, the order reversed every other round (A B C, C B A, A B C, ...), so that a machine
whose speed moves from minute to minute slows all sides alike. Per round and side: the wall time
and the **CPU time of the side's whole process tree** (user + system of the calling process and of
all its descendants, reaped children included: ``utime + stime + cutime + cstime`` of every process
of the tree from ``/proc``, as ``scripts/throughput_vs.py`` measures it), so that CPU spent in
workers, jails and forked children counts, not just the caller's. A ratio between two sides is the
median of the **per-round** ratios, with its spread (the interquartile range from 8 rounds on, the
range below); a target is a bound on such a median (or on one side's own per-round value) and says
met or missed. Nothing asserts a speed: the numbers are reported, never assumed.

With ``--benchmark-disable`` (the CI smoke run) each body runs one round, checking that every side
works, and nothing is recorded. The table (markdown + JSON) goes to the untracked
``.benchmarks/code-env/``; with ``--save-results`` (``scripts/bench.sh``) to the tracked
``benchmarks/results/sandbox.{md,json}``, which ``scripts/readme_tables.py`` copies into the README.
Only a full, unfiltered, passing run writes it. ``test_timing_channel.py`` writes its own table
(``timing_channel.md``): it is one measurement, not a comparison of this table."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

RESULTS = Path(__file__).parent / "results"
SCRATCH = Path(__file__).resolve().parents[1] / ".benchmarks" / "code-env"
WIDTH = 110
TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
IQR_FROM = 8  # rounds: from this many on the spread is the interquartile range, below it the range


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--save-results", action="store_true",
                     help="write the result table to benchmarks/results/ (tracked; the README copies it)")  # fmt: skip


# ------------------------------------------------------------------------------ CPU of a process tree


Snapshot = dict[int, tuple[int, int, int]]  # pid -> (utime + stime, cutime + cstime, ppid), in clock ticks


def tree_snapshot(root: int | None = None) -> Snapshot:
    """The CPU counters of the process ``root`` (default: this one) and all its descendants, read
    from the host's ``/proc`` (see ``tree_cpu_s``)."""
    out: Snapshot = {}
    todo = [root or os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]), int(fields[1]))
            tids = os.listdir(f"/proc/{pid}/task")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        for tid in tids:  # each thread's own children; a thread that just ended has none left
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo += [int(x) for x in fh.read().split()]
            except OSError:
                pass
    return out


def settled_snapshot(root: int | None, before: Snapshot, tries: int = 3) -> Snapshot:
    """A snapshot after ``before``, taken again (up to ``tries`` times) while a process of
    ``before`` that still exists is missing from it: a walk that raced with a thread's exit or a
    re-parenting, not a process that left."""
    after = tree_snapshot(root)
    for _ in range(tries - 1):
        if not any(pid not in after and os.path.exists(f"/proc/{pid}/stat") for pid in before):
            break
        after = tree_snapshot(root)
    return after


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds (user + system) spent so far by the process ``root`` (default: this one) and all
    its descendants, live ones and reaped ones: ``utime + stime + cutime + cstime`` of each process
    of the tree, read from the host's ``/proc`` (clock ticks: 10 ms each where ``CLK_TCK`` is 100, so
    a measurement needs rounds of a good fraction of a second). A process that ends between two
    readings moves its time into its parent's ``cutime`` once reaped, so the difference of two
    readings is what the tree spent meanwhile; a process reaped outside the tree (re-parented to
    init) takes its time with it (``cpu_between`` says how much may have gone)."""
    return sum(own + kids for own, kids, _ in tree_snapshot(root).values()) / TICK


def cpu_between(before: Snapshot, after: Snapshot) -> tuple[float, float]:
    """(CPU seconds the tree spent between two snapshots, CPU seconds that may have left it): a
    process of ``before`` missing from ``after`` whose parent is gone too, or whose parent's
    ``cutime + cstime`` did not grow by its time, was not reaped inside the tree, and the first
    figure misses what it had spent (up to ``before``: the second figure) and what it spent since."""
    spent = sum(o + k for o, k, _ in after.values()) - sum(o + k for o, k, _ in before.values())
    left = 0
    for pid, (own, kids, ppid) in before.items():
        if pid in after:
            continue
        parent_before, parent_after = before.get(ppid), after.get(ppid)
        absorbed = parent_before is not None and parent_after is not None and parent_after[1] - parent_before[1] >= own + kids - 2
        if not absorbed:
            left += own + kids
    return spent / TICK, left / TICK


# ------------------------------------------------------------------------------ paired comparisons


class Latencies(list[float]):
    """What a side may return: the wall time of each of its executions (seconds), for p50/p99 of
    single executions (a sequential side); otherwise p50/p99 are over rounds (round wall time /
    executions in it: amortised over a batch)."""


class Timed(float):
    """What a side may return instead: the seconds of its round's work as it measured them itself
    (a training run's step times from its timing log, without its set-up), which then stand for
    the round's wall time; its CPU is still the tree's over the whole call."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: ``run`` does one round's work (``executions`` executions) and
    returns what ``paired``'s ``check`` looks at; ``tree`` is the pid whose process tree spends its
    CPU (default: this process's tree, which holds every sandbox and pool this process started)."""

    run: Callable[[], object]
    executions: int
    tree: int | None = None


@dataclass
class Paired:
    """What ``paired`` measured: per side, per recorded round, wall and tree-CPU seconds."""

    sides: dict[str, Side]
    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    latencies: dict[str, list[float]]
    left: dict[str, list[float]] = field(default_factory=dict)  # CPU seconds that may have left the tree, per round
    skipped: dict[str, str] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def rounds(self) -> int:
        return min((len(v) for v in self.wall.values()), default=0)

    def per_round(self, side: str, metric: str) -> list[float]:
        """Per round: ``speed`` executions/s, ``time`` wall ms per execution, ``cpu`` CPU ms per execution."""
        n = self.sides[side].executions
        if metric == "speed":
            return [n / w for w in self.wall[side]]
        if metric == "time":
            return [1000 * w / n for w in self.wall[side]]
        if metric == "cpu":
            return [1000 * c / n for c in self.cpu[side]]
        raise ValueError(metric)

    def ratios(self, a: str, b: str, metric: str) -> list[float]:
        """Per round, side ``a``'s value of ``metric`` over side ``b``'s."""
        return [x / y for x, y in zip(self.per_round(a, metric), self.per_round(b, metric), strict=True) if y > 0]


def paired(benchmark: Any, sides: Mapping[str, Side], *, rounds: int, warmup_rounds: int = 1,
           check: Callable[[dict[str, object]], None] | None = None,
           skipped: Mapping[str, str] | None = None) -> Paired:  # fmt: skip
    """Run ``sides`` in alternating rounds: in round k the sides go in their order for even k and in
    reverse for odd k (A B, B A, A B, ...). Each side's round is timed on the wall clock and by the
    CPU of its process tree (``tree_cpu_s``, read just outside the wall-clock window). ``check``
    gets each round's outputs by side name (both sides agree, say). The first ``warmup_rounds``
    are dropped; with benchmarks disabled one round runs, and it is all that is kept (nothing gets
    recorded from it). ``skipped``: sides that could not run here, with the reason (shown in the
    table)."""
    out = Paired(sides=dict(sides), wall={k: [] for k in sides}, cpu={k: [] for k in sides},
                 latencies={k: [] for k in sides}, left={k: [] for k in sides}, skipped=dict(skipped or {}))  # fmt: skip
    calls = [0]
    load0 = os.getloadavg()[0]

    def one_round() -> None:
        k = calls[0]
        calls[0] += 1
        keep = k >= warmup_rounds or not benchmark.enabled
        order = list(sides) if k % 2 == 0 else list(reversed(list(sides)))
        results: dict[str, object] = {}
        for name in order:
            side = sides[name]
            s0 = tree_snapshot(side.tree)
            t0 = time.perf_counter()
            results[name] = side.run()
            wall = time.perf_counter() - t0
            cpu, left = cpu_between(s0, settled_snapshot(side.tree, s0))
            if isinstance(results[name], Timed):
                wall = float(results[name])  # type: ignore[arg-type]
            if keep:
                out.wall[name].append(wall)
                out.cpu[name].append(cpu)
                out.left[name].append(left)
                if isinstance(results[name], Latencies):
                    out.latencies[name] += results[name]  # type: ignore[arg-type]
        if check is not None:
            check({name: results[name] for name in sides})

    benchmark.pedantic(one_round, rounds=rounds, warmup_rounds=warmup_rounds)
    out.load = (load0, os.getloadavg()[0])
    return out


Metric = Literal["speed", "time", "cpu"]


@dataclass(frozen=True)
class Target:
    """A line of the targets table. With ``vs``: the median of the per-round ratios of ``side``'s
    ``metric`` over ``vs``'s (``speed``: executions/s, ``time``: wall per execution, ``cpu``: CPU
    per execution); without: ``side``'s own per-round value (executions/s, ms or CPU ms per
    execution). ``bound`` with ``op``: the target (met or missed); without: reported only, under its
    comparison, or also among the targets with ``beside_targets`` (what a target is read against)."""

    label: str
    side: str
    metric: Metric
    vs: str | None = None
    op: Literal[">=", "<="] = "<="
    bound: float | None = None
    beside_targets: bool = False


_UNIT = {"speed": "/s", "time": " ms", "cpu": " ms CPU"}

_comparisons: list[dict[str, Any]] = []


def spread(values: list[float]) -> tuple[float, float, str]:
    """(low, high, kind): the interquartile range from ``IQR_FROM`` values on, else the range."""
    if len(values) >= IQR_FROM:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return q1, q3, "IQR"
    return min(values), max(values), "range"


def record_paired(benchmark: Any, result: Paired, *, title: str, program: str, mode: str, targets: Sequence[Target] = (),
                  unit: str = "executions", note: str = "", rank: int = 50) -> None:  # fmt: skip
    """Store a paired comparison: per side executions/s (median over rounds), p50/p99 ms per
    execution, CPU ms per execution (the tree's CPU over all recorded rounds / their executions,
    which averages the clock ticks out) and, against the first side, the paired speed ratio; and
    each target's median per-round value with its spread. Nothing is stored when benchmarks are
    disabled (the body ran once as a smoke test). ``rank``: where the comparison and its targets
    come in the table (lower first; equal ranks in the order they ran)."""
    if not benchmark.enabled or result.rounds < 2:
        return
    names = list(result.sides)
    first = names[0]
    sides = []
    for name in names:
        n = result.sides[name].executions
        lat = sorted(result.latencies[name]) or sorted(w / n for w in result.wall[name])
        vs_first = result.ratios(first, name, "speed") if name != first else []
        lo_hi = spread(vs_first) if vs_first else None
        sides.append({
            "name": name, "executions_per_round": n,
            "exec_per_s": statistics.median(result.per_round(name, "speed")),
            "p50_ms": 1000 * _pct(lat, 50), "p99_ms": 1000 * _pct(lat, 99),
            "cpu_ms_per_exec": 1000 * sum(result.cpu[name]) / (n * len(result.cpu[name])),
            "cpu_s_left_tree": sum(result.left.get(name, [])), "cpu_s": sum(result.cpu[name]),
            "first_over_this": statistics.median(vs_first) if vs_first else None,
            "first_over_this_spread": [lo_hi[0], lo_hi[1], lo_hi[2]] if lo_hi else None,
        })  # fmt: skip
    rows = []
    for t in targets:
        values = result.ratios(t.side, t.vs, t.metric) if t.vs else result.per_round(t.side, t.metric)
        lo, hi, kind = spread(values)
        median = statistics.median(values)
        met = None if t.bound is None else median >= t.bound if t.op == ">=" else median <= t.bound
        rows.append({"label": t.label, "side": t.side, "vs": t.vs, "metric": t.metric, "median": median, "low": lo,
                     "high": hi, "spread": kind, "op": t.op, "bound": t.bound, "met": met,
                     "beside_targets": t.beside_targets})  # fmt: skip
    entry = {"title": title, "program": program, "mode": mode, "unit": unit, "rounds": result.rounds,
             "load_before": result.load[0], "load_after": result.load[1], "sides": sides, "skipped": result.skipped,
             "targets": rows, "note": note, "rank": rank}  # fmt: skip
    benchmark.extra_info["paired"] = entry
    _comparisons.append(entry)
    _comparisons.sort(key=lambda c: c["rank"])  # (stable)


def _pct(sorted_data: list[float], p: float) -> float:
    k = (len(sorted_data) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_data) - 1)
    return sorted_data[lo] + (sorted_data[hi] - sorted_data[lo]) * (k - lo)


# ------------------------------------------------------------------------------ the table


def _num(value: float, metric: str, ratio: bool) -> str:
    return f"{value:.3g}" if ratio else f"{value:.0f}" if metric == "speed" else f"{value:.2f}"


def _fmt(value: float, metric: str, ratio: bool) -> str:
    return _num(value, metric, ratio) + ("×" if ratio else _UNIT[metric])


def _target_cells(t: dict[str, Any]) -> tuple[str, str, str, str]:
    ratio = t["vs"] is not None
    measured = _fmt(t["median"], t["metric"], ratio)
    spread_ = f"{t['spread']} {_num(t['low'], t['metric'], ratio)}–{_fmt(t['high'], t['metric'], ratio)}"
    bound = "–" if t["bound"] is None else f"{'≥' if t['op'] == '>=' else '≤'} {_fmt(t['bound'], t['metric'], ratio)}"
    verdict = "reported" if t["met"] is None else "met" if t["met"] else "**missed**"
    return measured, spread_, bound, verdict


def markdown() -> list[str]:
    """The generated section: how it was measured, every target line, then each comparison."""
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {CORES} cores, Python "
        f"{platform.python_version()} (`bash scripts/bench.sh`), on a shared machine whose speed moves from "
        "minute to minute: read the spreads and the load averages before the medians.",
        "",
        "Every comparison is paired: its sides ran in the same rounds, one after another, in alternating order. "
        "A ratio is the median of the per-round ratios, with its spread (IQR from 8 rounds on, else the range "
        "over rounds). CPU is user + system time of each side's whole process tree (the caller, its workers and "
        "jails, their reaped children), from `/proc`; CPU ms per execution in the tables is the total over "
        "all rounds divided by the executions, in the targets the median of the per-round values. p50/p99 "
        "are per execution (sequential sides), or per round divided by its executions (batches).",
        "",
        "### Targets",
        "",
        "| target | measured (median) | spread | rounds | target | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for c in _comparisons:
        for t in c["targets"]:
            if t["bound"] is not None or t["beside_targets"]:
                measured, spread_, bound, verdict = _target_cells(t)
                lines.append(f"| {t['label']} | {measured} | {spread_} | {c['rounds']} | {bound} | {verdict} |")
    for c in _comparisons:
        lines += ["", f"#### {c['title']}", "",
                  f"{c['program']}, {c['mode']}; {c['rounds']} alternating rounds, load average "
                  f"{c['load_before']:.1f} → {c['load_after']:.1f}." + (f" {c['note']}" if c["note"] else ""),
                  "", f"| engine | {c['unit']}/round | {c['unit']}/s | p50 ms | p99 ms | CPU ms / execution | "
                  f"{c['sides'][0]['name']} ÷ this (speed, paired) |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for s in c["sides"]:
            ratio = "–"
            if s["first_over_this"] is not None:
                lo, hi, kind = s["first_over_this_spread"]
                ratio = f"{s['first_over_this']:.3g}× ({kind} {lo:.3g}–{hi:.3g})"
            lines.append(f"| {s['name']} | {s['executions_per_round']} | {s['exec_per_s']:.1f} | {s['p50_ms']:.2f} | "
                         f"{s['p99_ms']:.2f} | {s['cpu_ms_per_exec']:.2f} | {ratio} |")  # fmt: skip
        for name, why in c["skipped"].items():
            lines.append(f"| {name} | – | skipped: {why} | | | | |")
        short = [s for s in c["sides"] if s["cpu_s_left_tree"] > 0.02 * max(s["cpu_s"], 1e-9)]
        if short:
            lines += ["", "CPU that may have left the measured tree (processes of it that ended and were not reaped "
                      "inside it), so the side's CPU above may be short by up to: " + "; ".join(
                          f"{s['name']} {s['cpu_s_left_tree']:.2f} s of {s['cpu_s']:.2f} s" for s in short) + "."]  # fmt: skip
        reported = [t for t in c["targets"] if t["bound"] is None and not t["beside_targets"]]
        if reported:
            lines.append("")
            for t in reported:
                measured, spread_, _, _ = _target_cells(t)
                lines.append(f"- {t['label']}: {measured} ({spread_})")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The readable table, whatever ran (pytest-benchmark's own counts rounds, in microseconds)."""
    if not _comparisons:
        return
    tr = terminalreporter
    tr.section("code-env benchmarks: paired comparisons (medians of per-round values)", sep="=")
    for c in _comparisons:
        tr.write_line(f"{c['title']} [{c['rounds']} rounds, load {c['load_before']:.1f}→{c['load_after']:.1f}]"[:WIDTH])
        tr.write_line(f"  {'engine':<44} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms':>7} {'first÷this':>11}")
        for s in c["sides"]:
            ratio = f"{s['first_over_this']:.3g}×" if s["first_over_this"] is not None else ""
            tr.write_line(f"  {s['name'][:44]:<44} {s['exec_per_s']:>8.1f} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} "
                          f"{s['cpu_ms_per_exec']:>7.2f} {ratio:>11}")  # fmt: skip
        for name, why in c["skipped"].items():
            tr.write_line(f"  {name[:44]:<44} skipped: {why}"[:WIDTH])
    tr.section("code-env benchmarks: targets", sep="-")
    for c in _comparisons:
        for t in c["targets"]:
            measured, spread_, bound, verdict = _target_cells(t)
            tr.write_line(f"{t['label']}: {measured} ({spread_}) target {bound}: {verdict.replace('**', '').upper()}")
    where = _destination(config)
    tr.write_line(f"table: {where / 'sandbox.md'}" if where else "(a partial or failed run writes no table)")


def _full_run(session: pytest.Session) -> bool:
    """Every benchmark module ran, unfiltered: only then may the table be replaced."""
    if session.config.getoption("keyword") or session.config.getoption("markexpr"):
        return False
    ran = {Path(str(item.path)).name for item in session.items}
    return ran >= {p.name for p in Path(__file__).parent.glob("test_*.py")}


_complete: dict[str, bool] = {}


def _destination(config: pytest.Config) -> Path | None:
    return None if not _complete.get("ok") else RESULTS if config.getoption("--save-results") else SCRATCH


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _comparisons or exitstatus != 0 or not _full_run(session):
        return  # a partial run must not replace the full table
    _complete["ok"] = True
    dest = _destination(session.config)
    assert dest is not None
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "sandbox.md").write_text("\n".join(markdown()) + "\n")
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cores": CORES,
            "python": platform.python_version()}  # fmt: skip
    (dest / "sandbox.json").write_text(json.dumps({"meta": meta, "comparisons": _comparisons}, indent=2) + "\n")
