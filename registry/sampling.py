"""Choosing tasks: stratified by difficulty, and a curriculum that samples from the difficulty
band where the policy's current pass rate is between 20 % and 80 % (where learning happens)."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence

from .schema import Task


def by_difficulty(tasks: Sequence[Task]) -> dict[int, list[Task]]:
    bands: dict[int, list[Task]] = {}
    for t in tasks:
        bands.setdefault(t.difficulty, []).append(t)
    return dict(sorted(bands.items()))


def sample_stratified(tasks: Sequence[Task], rng: random.Random, weights: Mapping[int, float] | None = None) -> Task:
    """A task from a difficulty band drawn with ``weights`` (default: every band alike)."""
    bands = by_difficulty(tasks)
    if not bands:
        raise ValueError("no tasks to sample from")
    levels = list(bands)
    w = [float((weights or {}).get(level, 1.0 if weights is None else 0.0)) for level in levels]
    if not any(x > 0 for x in w):
        raise ValueError(f"weights give no band a chance: {dict(weights or {})} over bands {levels}")
    level = rng.choices(levels, weights=w)[0]
    return rng.choice(bands[level])


class Curriculum:
    """Pass rates per difficulty band over the last ``window`` results; ``sample`` draws from the
    bands whose rate lies in [low, high] (bands never tried count as inside), else from the band
    whose rate is nearest to that range."""

    def __init__(self, tasks: Sequence[Task], *, low: float = 0.2, high: float = 0.8, window: int = 50) -> None:
        if not 0 <= low < high <= 1:
            raise ValueError(f"expected 0 <= low < high <= 1, got low={low}, high={high}")
        if window < 1:
            raise ValueError(f"window: expected >= 1, got {window}")
        self.bands = by_difficulty(tasks)
        if not self.bands:
            raise ValueError("no tasks to sample from")
        self.low, self.high = low, high
        self._level = {t.problem_id: t.difficulty for t in tasks}
        self._results: dict[int, deque[bool]] = {level: deque(maxlen=window) for level in self.bands}

    def pass_rate(self, level: int) -> float | None:
        results = self._results[level]
        return sum(results) / len(results) if results else None

    def update(self, task: Task | str, passed: bool) -> None:
        pid = task if isinstance(task, str) else task.problem_id
        self._results[self._level[pid]].append(bool(passed))

    def eligible(self) -> list[int]:
        inside = [lv for lv in self.bands if (r := self.pass_rate(lv)) is None or self.low <= r <= self.high]
        if inside:
            return inside

        def distance(level: int) -> float:
            r = self.pass_rate(level)
            assert r is not None
            return self.low - r if r < self.low else r - self.high

        return [min(self.bands, key=distance)]

    def sample(self, rng: random.Random) -> Task:
        level = rng.choice(self.eligible())
        return rng.choice(self.bands[level])
