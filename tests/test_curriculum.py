"""The curriculum that adds tasks (``registry.sampling.AddingCurriculum``) on synthetic outcome
sequences — too easy, too hard, inside the target, ties, empty bands, determinism — the rule by
which GRPO's draws read it (``CurriculumDraws``: only the outcomes of steps <= s - 1 - lag), and a
short GRPO run with it on, twice: the same curve, its band column included."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

import registry
from baselines.common import load_config
from baselines.grpo import CurriculumDraws, GRPOSettings, main
from registry import Task
from registry.sampling import AddingCurriculum, Curriculum

POOL = registry.load("synthetic:arith", n=100, seed=0, difficulty=None)  # 20 tasks of each band 1-5


def feed(cur: AddingCurriculum, level: int, passes: int, fails: int) -> list[tuple[Task, bool]]:
    """Outcomes on the set's tasks of band ``level``: ``passes`` passed, then ``fails`` failed."""
    tasks = [t for t in cur.active if t.difficulty == level]
    assert tasks, f"no task of band {level} in the set"
    results = [True] * passes + [False] * fails
    return [(tasks[i % len(tasks)], ok) for i, ok in enumerate(results)]


def bands_of(cur: AddingCurriculum) -> list[int]:
    return [t.difficulty for t in cur.active]


# ------------------------------------------------------------------------- the curriculum alone


def test_too_easy_adds_the_next_band_up_and_never_removes() -> None:
    cur = AddingCurriculum(POOL, window=20, initial=4, add=2)
    start = list(cur.active)
    assert bands_of(cur) == [1] * 4 and cur.events[0].direction == "start"
    assert cur.observe(feed(cur, 1, 19, 0)) is None  # a decision waits for a whole window
    ev = cur.observe(feed(cur, 1, 1, 0))
    assert ev is not None and (ev.direction, ev.band, len(ev.added), ev.active) == ("harder", 2, 2, 6)
    assert ev.rate == 1.0 and "next untried band up" in ev.note
    assert cur.active[:4] == start  # added to, never removed from
    assert cur.observe(feed(cur, 1, 19, 0)) is None  # the next decision waits for a new window
    ev = cur.observe(feed(cur, 1, 1, 0))
    assert ev is not None and ev.band == 3  # band 2 not measured yet, the set's hardest: the next up
    assert bands_of(cur) == [1] * 4 + [2] * 2 + [3] * 2


def test_too_hard_adds_the_next_band_down() -> None:
    cur = AddingCurriculum(POOL, window=20, initial=4, add=3, start_band=3)
    ev = cur.observe(feed(cur, 3, 2, 18))  # 10 %: too hard
    assert ev is not None and (ev.direction, ev.band, ev.rate) == ("easier", 2, 0.1)
    assert bands_of(cur) == [3] * 4 + [2] * 3


@pytest.mark.parametrize("rate", [0.2, 0.3, 0.4], ids=["low-edge", "middle", "high-edge"])
def test_inside_the_target_nothing_changes(rate: float) -> None:
    cur = AddingCurriculum(POOL, window=20, initial=4)
    before = list(cur.active)
    passes = round(rate * 20)
    for _ in range(5):
        assert cur.observe(feed(cur, 1, passes, 20 - passes)) is None
    assert cur.active == before and len(cur.events) == 1  # the start only


def _three_bands(low: float = 0.2, high: float = 0.4) -> AddingCurriculum:
    """A set of bands 1, 2 and 3 (each measured below), grown by two decisions."""
    cur = AddingCurriculum(POOL, low=low, high=high, window=20, initial=4, add=2, min_band_results=4)
    for _ in range(2):
        assert cur.observe(feed(cur, 1, 20, 0)) is not None
    assert sorted(set(bands_of(cur))) == [1, 2, 3]
    return cur


def test_a_tie_between_medium_bands_goes_the_needed_way_not_to_the_easiest() -> None:
    # too easy (band 1 at 100 % fills the window); bands 2 and 3 at 25 % and 35 %: both inside the
    # target, equally near its middle (30 %): the harder one is what the set needs
    cur = _three_bands()
    ev = cur.observe(feed(cur, 2, 5, 15) + feed(cur, 3, 7, 13) + feed(cur, 1, 20, 0))
    assert (cur.band_rate(1), cur.band_rate(2), cur.band_rate(3)) == (1.0, 0.25, 0.35)
    assert ev is not None and (ev.direction, ev.band) == ("harder", 3) and "inside the target" in ev.note
    # too hard, the same two medium bands: the easier one
    cur = _three_bands()
    ev = cur.observe(feed(cur, 1, 20, 0) + feed(cur, 2, 5, 15) + feed(cur, 3, 7, 13) + feed(cur, 3, 0, 20))
    assert cur.band_rate(2) == 0.25 and cur.rate() == 0.0
    assert ev is not None and (ev.direction, ev.band) == ("easier", 2)


def test_the_band_nearest_the_middle_is_preferred() -> None:
    cur = _three_bands()  # band 2 at the target's low edge (20 %), band 3 at its middle (30 %)
    ev = cur.observe(feed(cur, 2, 4, 16) + feed(cur, 3, 6, 14) + feed(cur, 1, 20, 0))
    assert ev is not None and ev.band == 3


def test_the_old_curriculum_no_longer_breaks_a_tie_toward_the_easiest() -> None:
    cur = Curriculum(POOL, low=0.4, high=0.6, window=10)
    for t, ok in [(cur.bands[1][0], True)] * 10 + [(cur.bands[2][0], False)] * 10:
        cur.update(t, ok)
    for level in (3, 4, 5):
        for i in range(10):
            cur.update(cur.bands[level][0], i < 9)  # 90 %: 0.3 above the range
    cur.update(cur.bands[1][0], False)  # band 1: 90 %; band 2: 0 %, 0.4 below
    assert cur.eligible() == [1, 3, 4, 5]  # equally near: all of them, not the easiest alone


def test_an_empty_band_is_skipped_and_said_so() -> None:
    no_two = [t for t in POOL if t.difficulty != 2]
    cur = AddingCurriculum(no_two, window=10, initial=4, add=2, start_band=2)
    assert bands_of(cur) == [3] * 4  # band 2 absent: the nearest above
    assert "band 2 skipped: none in the pool; started from band 3" in cur.events[0].note
    ev = cur.observe(feed(cur, 3, 0, 10))
    assert ev is not None and ev.band == 1 and ev.note.startswith("band 2 skipped: none in the pool; band 1")
    only_one = [t for t in POOL if t.difficulty == 1][:5]
    cur = AddingCurriculum(only_one, window=10, initial=4, add=2)
    ev = cur.observe(feed(cur, 1, 0, 10))
    assert ev is not None and ev.band is None and ev.added == () and "nothing added" in ev.note
    ev = cur.observe(feed(cur, 1, 10, 0))  # too easy: no band above; band 1 is not below the rate
    assert ev is not None and ev.band is None and len(cur.active) == 4
    assert cur.left(1) == 1 and "band 1 has only" not in cur.events[0].note


def test_the_same_seed_and_outcomes_give_the_same_curriculum() -> None:
    def run(seed: int) -> tuple[list[str], list[str]]:
        cur = AddingCurriculum(POOL, window=16, initial=4, add=3, seed=seed)
        rng = random.Random(7)
        for _ in range(40):
            cur.observe([(t, rng.random() < 1.2 - 0.3 * t.difficulty) for t in rng.choices(cur.active, k=8)])
        return [t.problem_id for t in cur.active], [e.model_dump_json() for e in cur.events]

    assert run(0) == run(0)
    assert run(0) != run(1)  # another seed: another order within the bands
    active, events = run(0)
    assert len(events) > 2 and len(set(active)) == len(active)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"low": 0.5, "high": 0.4}, r"0 <= low < high <= 1"), ({"window": 0}, r"window: expected >= 1, got 0"),
     ({"add": 0}, r"add: expected >= 1"), ({"min_band_results": 99, "window": 10}, r"min_band_results: expected 1\.\.window")],
    ids=["bounds", "window", "add", "min-band-results"],
)  # fmt: skip
def test_bad_settings_are_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AddingCurriculum(POOL, **kwargs)  # type: ignore[arg-type]


def test_an_outcome_for_a_task_outside_the_set_is_an_error() -> None:
    cur = AddingCurriculum(POOL, initial=2)
    later = next(t for t in POOL if t.difficulty == 5)
    with pytest.raises(ValueError, match=rf"outcome for '{later.problem_id}': that task is in the pool but not added yet"):
        cur.observe([(later, True)])
    with pytest.raises(ValueError, match="outcome for 'nope': that task is not in the pool"):
        cur.observe([("nope", True)])


# ----------------------------------------------------------------------- GRPO's draws from it


def test_step_s_draws_after_the_outcomes_of_steps_up_to_s_minus_1_minus_lag() -> None:
    algo = GRPOSettings(curriculum=True, curriculum_window=8, curriculum_initial=4, curriculum_add=2)
    easy = [("", True)] * 8

    def outcomes(draws: CurriculumDraws, step: int) -> list[tuple[str, bool]]:
        return [(draws.tasks_for(step)[0].problem_id, ok) for _, ok in easy]

    lagged = CurriculumDraws(POOL, algo, lag=1)
    assert len(lagged.tasks_for(0)) == len(lagged.tasks_for(1)) == 4  # nothing observed: the start
    lagged.record(0, outcomes(lagged, 0))  # too easy: 2 tasks added after step 0
    assert len(lagged.tasks_for(1)) == 4 and len(lagged.tasks_for(2)) == 6  # step 1 drew before step 0 was judged
    with pytest.raises(RuntimeError, match=r"step 3 draws after the outcomes of steps < 2, but only those of steps < 1"):
        lagged.tasks_for(3)
    fresh = CurriculumDraws(POOL, algo, lag=0)
    fresh.record(0, outcomes(fresh, 0))
    assert len(fresh.tasks_for(1)) == 6 and fresh.state_for(1) == (6, 1.0)
    # outcomes recorded out of order are observed in step order: the same state
    a, b = CurriculumDraws(POOL, algo, lag=0), CurriculumDraws(POOL, algo, lag=0)
    first = [(a.tasks_for(0)[0].problem_id, False)] * 8
    a.record(0, first)
    a.record(1, outcomes(a, 1))
    b.record(1, outcomes(a, 1))
    assert b.observed == 0
    b.record(0, first)
    assert b.curriculum.events == a.curriculum.events and b.tasks_for(2) == a.tasks_for(2)
    with pytest.raises(ValueError, match="the outcomes of step 1 were recorded already"):
        b.record(1, [])


def test_the_shipped_config_has_it_off_and_checks_its_band() -> None:
    assert load_config("grpo", GRPOSettings).algo.curriculum is False  # curve.csv as the reference's
    with pytest.raises(ValueError, match=r"curriculum_low 0\.5 is not below curriculum_high 0\.4"):
        GRPOSettings(curriculum_low=0.5)


SHORT = ["grpo.steps=5", "grpo.prompts_per_step=3", "grpo.group_size=4", "grpo.eval_interval=0", "env.n_eval_tasks=4",
         "env.n_tasks=40", "grpo.checkpoint_interval=0", "grpo.hidden=32", "env.log_every=1000", "env.difficulty=null",
         "grpo.curriculum=true", "grpo.curriculum_start_band=3", "grpo.curriculum_window=12",
         "grpo.curriculum_initial=3", "grpo.curriculum_add=2"]  # fmt: skip


def _run(out: Path, *pairs: str) -> tuple[list[dict[str, str]], bytes, bytes]:
    assert main(["--quiet", "--out", str(out), *[a for p in (*SHORT, *pairs) for a in ("--set", p)]]) == 0
    with open(out / "curve.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return rows, (out / "curve.csv").read_bytes(), (out / "curriculum.jsonl").read_bytes()


@pytest.fixture(scope="module")
def thread_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, str]], bytes, bytes]:
    return _run(tmp_path_factory.mktemp("curriculum") / "thread")


def test_grpo_with_the_curriculum_gives_the_same_curve_twice(thread_run: tuple[list[dict[str, str]], bytes, bytes],
                                                             tmp_path: Path) -> None:  # fmt: skip
    rows, curve, events = thread_run
    assert _run(tmp_path / "again")[1:] == (curve, events)  # the band column and every decision included
    assert list(rows[0])[-3:] == ["band", "curriculum_tasks", "curriculum_rate"]
    # the untrained writer fails band 3: easier tasks are added, seen by the draws one step later
    # (overlap: step s draws after the outcomes of steps <= s - 2)
    sizes = [int(r["curriculum_tasks"]) for r in rows]
    assert sizes[:2] == [3, 3] and sizes == sorted(sizes) and sizes[-1] > 3
    assert float(rows[0]["band"]) == 3.0 and float(rows[-1]["band"]) < 3.0
    logged = [json.loads(line) for line in events.decode().splitlines()]
    assert logged[0]["direction"] == "start" and logged[1]["direction"] == "easier" and logged[1]["band"] == 2


@pytest.mark.slow
def test_the_redis_topology_draws_as_the_thread_topology_does(thread_run: tuple[list[dict[str, str]], bytes, bytes],
                                                              tmp_path: Path) -> None:  # fmt: skip
    from ._redis import REDIS_SERVER

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    _, curve, events = thread_run
    assert _run(tmp_path / "redis", "grpo.topology=redis", "grpo.executors=1")[1:] == (curve, events)
