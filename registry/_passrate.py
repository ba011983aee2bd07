"""Keeping the tasks of a measured difficulty: ``filter_by_pass_rate(tasks, rates, band=(0.2, 0.4))``.

The seeds' advice for RL on code is to start where the model's public pass@1 is 20-40 %: easier
tasks teach nothing (every sample of a group earns the same reward), harder ones give no signal.
``code-env tasks pass-rate SET --agent ...`` (``code_env.passrate``) measures each task's public
and hidden pass@k for an agent and writes ``pass_rate.csv``; this module reads that file (or a
mapping of rates) and keeps the tasks whose rate lies in the band. It never runs anything.

>>> import registry
>>> tasks = registry.load("builtin")[:3]
>>> rates = {t.problem_id: r for t, r in zip(tasks, (0.1, 0.25, 0.4))}
>>> [t.problem_id for t in registry.filter_by_pass_rate(tasks, rates)] == [tasks[1].problem_id, tasks[2].problem_id]
True
"""

from __future__ import annotations

import csv
import difflib
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from .errors import UnknownTaskError
from .schema import Task

Which = Literal["public", "hidden"]
COLUMNS = {"public": "public_pass_at_k", "hidden": "hidden_pass_at_k"}
"""The column of ``pass_rate.csv`` each ``which`` reads (``hidden``: every test passed)."""


def read_rates(path: str | Path, which: Which = "public") -> dict[str, float | None]:
    """The rates of a ``pass_rate.csv``: problem id -> its ``which`` pass@k, or None where the
    task had fewer judged samples than ``k`` (an empty cell)."""
    column = _column(which)
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = {"problem_id", column} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"{path}: not a pass_rate.csv (no column {', '.join(sorted(missing))}; "
                                 f"code-env tasks pass-rate writes one)")  # fmt: skip
            rates: dict[str, float | None] = {}
            for line, row in enumerate(reader, start=2):
                pid, cell = row["problem_id"], (row[column] or "").strip()
                if pid in rates:
                    raise ValueError(f"{path}:{line}: problem id {pid!r} appears twice")
                try:
                    rates[pid] = float(cell) if cell else None
                except ValueError:
                    raise ValueError(f"{path}:{line}: {column} of {pid!r} is not a number: {cell!r}") from None
    except OSError as exc:
        raise ValueError(f"cannot read pass rates from {path}: {exc.strerror or exc}") from None
    return rates


def filter_by_pass_rate(tasks: Sequence[Task], rates: str | Path | Mapping[str, float | None], *,
                        band: tuple[float, float] = (0.2, 0.4), which: Which = "public") -> list[Task]:  # fmt: skip
    """The tasks of ``tasks`` (in their order) whose measured rate lies in ``band`` (both ends
    included). ``rates``: the path of a ``pass_rate.csv`` (its ``which`` column: ``public`` pass@k,
    or ``hidden``, every test passed) or a mapping problem id -> rate.

    Every task must have a measured rate and every measured id must be one of the tasks: a rate for
    another set's task is an ``UnknownTaskError`` ("did you mean"), a task never measured a
    ``ValueError`` naming it. A rate of None (fewer judged samples than ``k``) is not in any band:
    such tasks are left out, with a warning that counts them."""
    lo, hi = _band(band)
    if isinstance(rates, (str, Path)):
        measured = read_rates(rates, which)
    elif isinstance(rates, Mapping):
        _column(which)
        measured = dict(rates)
    else:
        raise TypeError(f"rates: expected the path of a pass_rate.csv or a mapping problem id -> rate, "
                        f"got {type(rates).__name__}")  # fmt: skip
    ids = [t.problem_id for t in tasks]
    known = set(ids)
    for pid, rate in measured.items():
        if pid not in known:
            close = difflib.get_close_matches(pid, ids, n=1)
            if close:
                raise UnknownTaskError(pid, close[0])
            raise UnknownTaskError(pid, reason=f"a measured rate names a task that is not among the {len(ids)} tasks "
                                               "given (rates measured on another set?)")  # fmt: skip
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, numbers.Real)
                                 or not 0 <= float(rate) <= 1):  # fmt: skip
            raise ValueError(f"rate of {pid!r}: expected a number in [0, 1] or None, got {rate!r}")
    unmeasured = [pid for pid in ids if pid not in measured]
    if unmeasured:
        shown = ", ".join(unmeasured[:5]) + (f" ... and {len(unmeasured) - 5} more" if len(unmeasured) > 5 else "")
        raise ValueError(f"{len(unmeasured)} of {len(ids)} tasks have no measured rate: {shown} "
                         f"(measure them: code-env tasks pass-rate SET --agent ...)")  # fmt: skip
    unrated = [pid for pid in ids if measured[pid] is None]
    if unrated:
        warnings.warn(f"{len(unrated)} task(s) have no {which} rate (fewer judged samples than k), left out: "
                      f"{', '.join(unrated[:5])}", stacklevel=2)  # fmt: skip
    kept = []
    for t in tasks:
        rate = measured[t.problem_id]
        if rate is not None and lo <= float(rate) <= hi:
            kept.append(t)
    return kept


def _band(band: object) -> tuple[float, float]:
    if (not isinstance(band, (tuple, list)) or len(band) != 2
            or not all(isinstance(b, numbers.Real) and not isinstance(b, bool) for b in band)):  # fmt: skip
        raise ValueError(f"band: expected two numbers (low, high), got {band!r}")
    lo, hi = float(band[0]), float(band[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi <= 1):
        raise ValueError(f"band: expected 0 <= low <= high <= 1, got ({band[0]!r}, {band[1]!r})")
    return lo, hi


def _column(which: object) -> str:
    if which not in COLUMNS:
        raise ValueError(f"which: expected 'public' or 'hidden', got {which!r}")
    return COLUMNS[str(which)]
