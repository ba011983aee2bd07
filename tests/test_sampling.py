"""Difficulty-stratified sampling and the curriculum."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import registry
from registry.sampling import Curriculum, sample_stratified

TASKS = registry.load("synthetic:arith", n=50, seed=0)


def test_stratified_sampling_is_seeded_and_weighted() -> None:
    a = [sample_stratified(TASKS, random.Random(3)).problem_id for _ in range(5)]
    b = [sample_stratified(TASKS, random.Random(3)).problem_id for _ in range(5)]
    assert a == b
    rng = random.Random(0)
    levels = Counter(sample_stratified(TASKS, rng, {2: 1.0}).difficulty for _ in range(50))
    assert set(levels) == {2}
    with pytest.raises(ValueError, match="no band a chance"):
        sample_stratified(TASKS, rng, {9: 1.0})


def test_curriculum_moves_to_the_band_where_learning_happens() -> None:
    cur = Curriculum(TASKS, window=20)
    rng = random.Random(0)
    assert set(cur.eligible()) == {1, 2, 3, 4, 5}  # nothing tried yet
    for t in cur.bands[1] + cur.bands[2]:
        for _ in range(4):
            cur.update(t, True)  # too easy: 100 %
    for t in cur.bands[5]:
        for _ in range(4):
            cur.update(t, False)  # too hard: 0 %
    for i, t in enumerate(cur.bands[3] * 2):
        cur.update(t, i % 2 == 0)  # 50 %: learning happens here
    assert cur.pass_rate(1) == 1.0 and cur.pass_rate(5) == 0.0 and cur.pass_rate(3) == 0.5
    assert set(cur.eligible()) == {3, 4}  # 4 untried counts as inside
    assert {cur.sample(rng).difficulty for _ in range(40)} <= {3, 4}
    four = cur.bands[4][0]
    for i in range(20):
        cur.update(four.problem_id, i == 0)  # 5 %
    for _ in range(20):
        cur.update(cur.bands[3][0], True)  # 100 %
    # nothing inside [20 %, 80 %]: the band nearest to it (5 % is 0.15 away, the others 0.2)
    assert cur.eligible() == [4]


def test_curriculum_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError, match="0 <= low < high <= 1"):
        Curriculum(TASKS, low=0.9, high=0.1)
