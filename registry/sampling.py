"""Choosing tasks: stratified by difficulty; ``Curriculum``, which samples from the difficulty
band where the policy's current pass rate is between 20 % and 80 % (where learning happens); and
``AddingCurriculum``, which grows a training set from a pool, band by band, to keep the rolling
public pass rate inside a target band (the seeds' 20-40 %)."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

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
    whose rate is nearest to that range (bands equally near, one below and one above it, are all
    eligible: a tie is not settled in favour of the easiest)."""

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

        nearest = min(round(distance(level), 9) for level in self.bands)  # (rounded: 0.1 below and above tie)
        return [level for level in self.bands if round(distance(level), 9) == nearest]

    def sample(self, rng: random.Random) -> Task:
        level = rng.choice(self.eligible())
        return rng.choice(self.bands[level])


# ------------------------------------------------------------------------ the adding curriculum


class CurriculumEvent(BaseModel):
    """One decision of ``AddingCurriculum`` that changed, or tried to change, the training set."""

    model_config = ConfigDict(frozen=True)

    observed: int  # outcome batches (a trainer's steps) observed when it was taken; 0: the start
    rate: float | None  # the rolling public pass rate it saw (None at the start)
    direction: Literal["start", "harder", "easier"]
    band: int | None  # the band added from (None: none could be)
    added: tuple[str, ...]  # the problem ids added, in order
    active: int  # the size of the training set after it
    note: str  # why this band, and every band skipped on the way (empty, exhausted)


class AddingCurriculum:
    """A training set that grows from ``pool`` so that the rolling public pass rate stays inside
    [``low``, ``high``] (default 0.2-0.4: too easy and learning stops, too hard and there is no
    signal). Tasks are only ever added, never removed: what the policy has learnt stays in the set
    (a band that proves too hard is diluted by the easier tasks added after it, not dropped), so
    the set a step drew from is always a prefix of ``active``.

    **Start.** ``initial`` tasks of band ``start_band`` (a band is a ``difficulty`` level). If the
    pool has no task of that band, the nearest band above it that has some (else below) is used,
    and the start event says so.

    **Outcomes.** ``observe(outcomes)`` takes one batch of ``(task or problem_id, public tests
    passed)``, a trainer's step. The rolling rate is that of the last ``window`` outcomes of every
    band together; each band also keeps the rate of its own last ``window`` outcomes, which counts
    as *measured* once it holds ``min_band_results`` of them (default ``window // 4``).

    **Decisions.** One is taken only once ``window`` outcomes have been observed since the start or
    since the last decision, so that the rate it reads is that of the set as it now is. Inside
    [low, high]: nothing changes (no event). Above ``high`` (too easy) the set needs harder tasks,
    below ``low`` easier ones; ``add`` tasks (fewer if the band has fewer left) come from one band
    with tasks left, chosen in this order:

    1. a *measured medium* band: its own rate inside [low, high] and on the correcting side of the
       rolling rate (below it when too easy, above it when too hard); of several, the one whose rate
       is nearest the middle of the target; a tie there goes to the band in the needed direction
       (the harder when too easy, the easier when too hard) — never simply to the easiest;
    2. else the next *untried* band beyond the set in the needed direction: the first band above
       the hardest band in the set when too easy (below the easiest when too hard);
    3. else a measured band outside the target but on the correcting side, the one nearest the
       middle (ties as in 1).

    A band with no task left — none in the pool, or all of them added — is skipped and the event's
    ``note`` says so; if no band can correct the rate, the event records that nothing was added
    (``band`` None) and the next decision waits for another ``window`` of outcomes.

    **Determinism.** Each band's tasks are added in an order shuffled once by ``seed``; the state
    depends only on the pool, the settings, the seed and the sequence of outcomes observed.

    >>> import registry
    >>> cur = AddingCurriculum(registry.load("synthetic:arith", n=50, seed=0), window=8, initial=4, add=2)
    >>> [t.difficulty for t in cur.active]
    [1, 1, 1, 1]
    >>> cur.observe([(t, True) for t in cur.active * 2]).direction  # 100 % public: too easy
    'harder'
    >>> [t.difficulty for t in cur.active]
    [1, 1, 1, 1, 2, 2]
    """

    def __init__(self, pool: Sequence[Task], *, low: float = 0.2, high: float = 0.4, window: int = 256,
                 start_band: int = 1, initial: int = 16, add: int = 8, min_band_results: int | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        if not 0 <= low < high <= 1:
            raise ValueError(f"expected 0 <= low < high <= 1, got low={low}, high={high}")
        for name, value in (("window", window), ("initial", initial), ("add", add)):
            if value < 1:
                raise ValueError(f"{name}: expected >= 1, got {value}")
        if min_band_results is not None and not 1 <= min_band_results <= window:
            raise ValueError(f"min_band_results: expected 1..window ({window}), got {min_band_results}")
        self.bands = by_difficulty(pool)
        if not self.bands:
            raise ValueError("no tasks to sample from")
        ids = [t.problem_id for t in pool]
        if len(set(ids)) != len(ids):
            dup = next(p for p in ids if ids.count(p) > 1)
            raise ValueError(f"pool: problem id {dup!r} appears more than once")
        self.low, self.high, self.window, self.add = low, high, window, add
        self.min_band_results = min_band_results or max(1, window // 4)
        self._level = {t.problem_id: t.difficulty for t in pool}
        self._left: dict[int, deque[Task]] = {}
        for level, tasks in self.bands.items():
            order = list(tasks)
            random.Random(f"curriculum/{seed}/{level}").shuffle(order)
            self._left[level] = deque(order)
        self._recent: deque[bool] = deque(maxlen=window)
        self._band: dict[int, deque[bool]] = {level: deque(maxlen=window) for level in self.bands}
        self._since = 0
        self.observed = 0
        self.active: list[Task] = []
        self._in: set[str] = set()
        self.events: list[CurriculumEvent] = []
        level, note = self._start_level(start_band)
        taken = self._take(level, initial)
        if len(taken) < initial:
            note += f"{'; ' if note else ''}band {level} has only {len(taken)} tasks"
        self._event(None, "start", level, taken, note or f"{len(taken)} tasks of band {level}")

    # -- state

    @property
    def middle(self) -> float:
        return (self.low + self.high) / 2

    def rate(self) -> float | None:
        """The rolling public pass rate (None before any outcome)."""
        return sum(self._recent) / len(self._recent) if self._recent else None

    def band_rate(self, level: int) -> float | None:
        """A band's rate over its last ``window`` outcomes; None until it holds ``min_band_results``."""
        results = self._band.get(level)
        if results is None or len(results) < self.min_band_results:
            return None
        return sum(results) / len(results)

    def left(self, level: int) -> int:
        """How many of the band's tasks are not in the set yet."""
        return len(self._left.get(level, ()))

    # -- outcomes and decisions

    def observe(self, outcomes: Iterable[tuple[Task | str, bool]]) -> CurriculumEvent | None:
        """One batch of outcomes (a trainer's step; it may be empty); the decision it led to, if any."""
        n = 0
        for task, passed in outcomes:
            pid = task if isinstance(task, str) else task.problem_id
            if pid not in self._in:
                where = "in the pool but not added yet" if pid in self._level else "not in the pool"
                raise ValueError(f"outcome for {pid!r}: that task is {where}")
            self._recent.append(bool(passed))
            self._band[self._level[pid]].append(bool(passed))
            n += 1
        self.observed += 1
        self._since += n
        if self._since < self.window:
            return None
        rate = self.rate()
        assert rate is not None
        if self.low <= rate <= self.high:
            return None
        self._since = 0
        direction: Literal["harder", "easier"] = "harder" if rate > self.high else "easier"
        level, note = self._choose(rate, direction)
        taken = self._take(level, self.add) if level is not None else []
        return self._event(rate, direction, level, taken, note)

    def _choose(self, rate: float, direction: Literal["harder", "easier"]) -> tuple[int | None, str]:
        sign = 1 if direction == "harder" else -1  # which way along the difficulty levels helps
        mid = self.middle
        measured = {lv: r for lv in self.bands if (r := self.band_rate(lv)) is not None}
        correcting = {lv: r for lv, r in measured.items() if self.left(lv) and (r < rate if sign > 0 else r > rate)}

        def nearest(levels: dict[int, float]) -> int:  # nearest the middle; a tie: the needed direction
            return min(levels, key=lambda lv: (round(abs(levels[lv] - mid), 9), -sign * lv))  # (rounded: 0.25 and 0.35 tie)

        medium = {lv: r for lv, r in correcting.items() if self.low <= r <= self.high}
        if medium:
            lv = nearest(medium)
            return lv, f"band {lv} measured {medium[lv]:.0%} public, inside the target (medium tasks)"
        in_set = {t.difficulty for t in self.active}
        edge = max(in_set) if sign > 0 else min(in_set)
        skipped: list[str] = []
        lo, hi = min(self.bands), max(self.bands)
        level = edge + sign
        while lo <= level <= hi:
            if self.left(level):  # (beyond the set's bands: never sampled, so untried)
                return level, self._skipped(skipped, f"band {level}: the next untried band {'up' if sign > 0 else 'down'}")
            skipped.append(self._why_empty(level))
            level += sign
        if correcting:
            lv = nearest(correcting)
            return lv, self._skipped(skipped, f"band {lv} measured {correcting[lv]:.0%} public: outside the target, "
                                              f"the nearest on the {'harder' if sign > 0 else 'easier'} side")  # fmt: skip
        side = "above" if sign > 0 else "below"
        return None, self._skipped(skipped, f"nothing added: no band {side} the set's, nor a measured band that would "
                                            f"move the rate toward the target, has tasks left")  # fmt: skip

    def _why_empty(self, level: int) -> str:
        if level not in self.bands:
            return f"band {level} skipped: none in the pool"
        return f"band {level} skipped: all its {len(self.bands[level])} tasks already added"

    @staticmethod
    def _skipped(skipped: list[str], what: str) -> str:
        return "; ".join([*skipped, what])

    def _start_level(self, start_band: int) -> tuple[int, str]:
        if start_band in self.bands:
            return start_band, ""
        above = [lv for lv in self.bands if lv > start_band]
        level = min(above) if above else max(self.bands)
        return level, f"band {start_band} skipped: none in the pool; started from band {level}"

    def _take(self, level: int, n: int) -> list[Task]:
        left = self._left[level]
        taken = [left.popleft() for _ in range(min(n, len(left)))]
        self.active.extend(taken)
        self._in.update(t.problem_id for t in taken)
        return taken

    def _event(self, rate: float | None, direction: Literal["start", "harder", "easier"], level: int | None,
               taken: list[Task], note: str) -> CurriculumEvent:  # fmt: skip
        ev = CurriculumEvent(observed=self.observed, rate=rate, direction=direction, band=level,
                             added=tuple(t.problem_id for t in taken), active=len(self.active), note=note)  # fmt: skip
        self.events.append(ev)
        return ev
