"""Mixing task sets (``registry.mix`` and the ``mix:...`` name): ratios, difficulty strata,
determinism, ids that stay the sets' own, precise errors, and the name working everywhere a
task-set name is taken (``gym.make``, ``trl_dataset``, a baseline's ``env.json``, the CLI)."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import registry
from registry import loaders
from registry.mix import DEFAULT_N, UnknownMixSetError

BUILTIN = registry.load("builtin")
BUILTIN_BANDS = Counter(t.difficulty for t in BUILTIN)
# a .jsonl copy of builtin tasks is a set of its own; load it as it is (validation is another test's subject)
OPT_OUT: dict[str, Any] = {"validate": False} if "validate" in inspect.signature(loaders.load).parameters else {}


def _set_of(task_id: str) -> str:
    return task_id.split("/", 1)[0]


def test_a_mix_keeps_the_ratios_and_each_sets_difficulty_mix() -> None:
    tasks = registry.mix({"builtin": 1, "synthetic:list": 2}, n=60, seed=0)
    ids = [t.problem_id for t in tasks]
    assert len(ids) == len(set(ids)) == 60
    assert Counter(map(_set_of, ids)) == {"builtin": 20, "synthetic:list": 40}
    # builtin: 20 of 62 split over its bands in proportion to their sizes (floor or ceil of the exact share)
    drawn = Counter(t.difficulty for t in tasks if t.problem_id.startswith("builtin/"))
    for level, size in BUILTIN_BANDS.items():
        assert drawn[level] in (math.floor(20 * size / 62), math.ceil(20 * size / 62)), (level, drawn)
    # generated: difficulties 1-5 in turn, the mix's seed in the ids
    assert Counter(t.difficulty for t in tasks if t.problem_id.startswith("synthetic:")) == dict.fromkeys(range(1, 6), 8)
    assert all(t.problem_id.startswith("synthetic:list/s0/") for t in tasks if t.problem_id.startswith("synthetic:"))
    # shuffled: the sets are interleaved, not one block after the other
    assert Counter(map(_set_of, ids[:30]))["builtin"] not in (0, 30)


def test_half_of_builtin_is_each_band_halved() -> None:
    # 31 of 62: exactly half of each band, the .5s going to the earliest bands (2, 3) by largest remainder
    drawn = Counter(t.difficulty for t in registry.mix({"builtin": 1}, n=31, seed=4))
    assert BUILTIN_BANDS == {1: 14, 2: 15, 3: 13, 4: 11, 5: 9}  # (what this test's numbers assume)
    assert drawn == {1: 7, 2: 8, 3: 7, 4: 5, 5: 4}


def test_the_same_arguments_give_the_same_tasks_and_the_seed_changes_the_draw() -> None:
    ratios = {"builtin": 1, "synthetic:arith": 1}
    a = registry.mix(ratios, n=20, seed=3)
    assert a == registry.mix(ratios, n=20, seed=3)
    assert a == registry.load("mix:builtin=1,synthetic:arith=1", n=20, seed=3)
    assert a == registry.load("mix:builtin=1,synthetic:arith=1,n=20,seed=3")
    assert a == registry.mix({"builtin": 0.5, "synthetic:arith": 0.5}, n=20, seed=3)  # ratios are relative
    b = registry.mix(ratios, n=20, seed=4)
    assert {t.problem_id for t in a} != {t.problem_id for t in b}
    assert Counter(_set_of(t.problem_id) for t in b) == Counter(_set_of(t.problem_id) for t in a)  # counts: not the seed's


def test_ids_stay_the_sets_own_and_resolve_alone() -> None:
    tasks = registry.load("mix:synthetic:string=2,builtin=1", n=9, seed=7)
    for t in tasks:
        assert registry.resolve(t.problem_id) == t  # a generated id makes its task again


def test_sets_that_share_ids_give_each_id_once(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    registry.write_tasks(BUILTIN[:40], copy)
    tasks = registry.mix({str(copy): 1, "builtin": 1}, n=60, seed=0, **OPT_OUT)
    ids = [t.problem_id for t in tasks]
    assert len(ids) == len(set(ids)) == 60  # builtin's 30 come from the ids the copy's 30 left
    # 40 and 40: the copy takes all its ids, builtin has only 22 others
    with pytest.raises(registry.MixError, match=r"'builtin' should give 40 tasks, but only 22 of its ids"):
        registry.mix({str(copy): 1, "builtin": 1}, n=80, seed=0, **OPT_OUT)


def test_n_defaults_to_100_or_the_most_the_sets_give() -> None:
    assert len(registry.load("mix:synthetic:arith=1,synthetic:list=1")) == DEFAULT_N == 100
    tasks = registry.load("mix:builtin=3,synthetic:list")  # a ratio left out is 1
    assert Counter(_set_of(t.problem_id) for t in tasks) == {"builtin": 62, "synthetic:list": 21}


def test_a_spec_round_trips_through_its_name() -> None:
    spec = registry.parse_mix("mix: builtin = 1 , synthetic:list=2.5,seed=3")
    assert spec == registry.MixSpec(ratios={"builtin": 1.0, "synthetic:list": 2.5}, seed=3)
    assert spec.name == "mix:builtin=1,synthetic:list=2.5,seed=3"
    assert registry.parse_mix(spec.name) == spec


@pytest.mark.parametrize(("ratios", "n", "match"), [
    pytest.param({}, 5, r"an empty mix; give at least one task set", id="empty"),
    pytest.param({"builtin": 0}, 5, r"the ratio of 'builtin': expected a positive number, got 0", id="zero"),
    pytest.param({"builtin": -1.5}, 5, r"expected a positive number, got -1.5", id="negative"),
    pytest.param({"builtin": "2"}, 5, r"expected a positive number, got '2'", id="string"),
    pytest.param({"builtin": True}, 5, r"expected a positive number, got True", id="bool"),
    pytest.param({"builtin": float("nan")}, 5, r"expected a positive number, got nan", id="nan"),
    pytest.param({"builtin": float("inf")}, 5, r"expected a positive number, got inf", id="inf"),
    pytest.param({"mix:builtin=1": 1}, 5, r"a mix cannot hold another mix", id="nested"),
    pytest.param({"builtin": 1, "synthetic:list": 2}, 500,
                 r"n=500 is more tasks than these sets give in these ratios: builtin has 62 \(its share is 167\); "
                 r"at most n=187 keeps the ratios", id="n-too-large"),
    pytest.param({"builtin": 1}, 0, r"n: expected an int >= 1, got 0", id="n-zero"),
    pytest.param({"builtin": 1}, "5", r"n: expected an int >= 1, got '5'", id="n-string"),
])  # fmt: skip
def test_a_bad_mix_is_a_value_error_that_says_why(ratios: dict[str, Any], n: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        registry.mix(ratios, n=n, seed=0)
    assert isinstance(info.value, registry.MixError)


def test_an_unknown_set_is_named_with_its_close_match() -> None:
    for call in (lambda: registry.mix({"bulitin": 1, "synthetic:list": 1}, n=4),
                 lambda: registry.load("mix:builtin=1,synthetic:lists=1")):  # fmt: skip
        with pytest.raises(UnknownMixSetError, match=r"unknown task set .*did you mean '(builtin|synthetic:list)'") as info:
            call()
        assert isinstance(info.value, ValueError) and isinstance(info.value, registry.UnknownTaskSetError)


@pytest.mark.parametrize(("name", "params", "error", "match"), [
    pytest.param("mix:", {}, registry.MixError, r"an empty mix", id="empty"),
    pytest.param("mix:builtin=x", {}, registry.MixError, r"the ratio of 'builtin': expected a positive number, got 'x'", id="ratio"),
    pytest.param("mix:builtin=1,,synthetic:list", {}, registry.MixError, r"entry 2 is empty", id="stray-comma"),
    pytest.param("mix:builtin=1,builtin=2", {}, registry.MixError, r"'builtin' is named twice", id="twice"),
    pytest.param("mix:n=5", {}, registry.MixError, r"names no task set", id="only-n"),
    pytest.param("mix:builtin,seed=x", {}, registry.MixError, r"seed: expected an integer, got 'x'", id="seed"),
    pytest.param("mix:builtin,n=5", {"n": 6}, registry.MixError, r"n is 5 in the name but 6 was passed", id="n-twice"),
    pytest.param("mix:builtin", {"difficulty": 2}, TypeError, r"a mix takes no difficulty", id="difficulty"),
])  # fmt: skip
def test_a_bad_mix_name_says_which_entry(name: str, params: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        registry.load(name, **params)


def test_gym_make_and_trl_dataset_take_a_mix() -> None:
    import gymnasium as gym

    import code_env

    name, params = "mix:builtin=1,synthetic:arith=1", dict[str, Any](n=6, seed=2)
    expected = registry.load(name, **params)
    env = gym.make("CodeExec-v0", tasks=name, task_params=params)
    try:
        assert env.unwrapped.tasks == expected  # type: ignore[attr-defined]
        _, info = env.reset(seed=0)
        assert info["problem_id"] in {t.problem_id for t in expected}
    finally:
        env.close()
    pytest.importorskip("datasets")
    rows = code_env.trl_dataset(name, format="plain", **params)
    assert rows["problem_id"] == [t.problem_id for t in expected]


def test_a_baselines_env_json_takes_a_mix_with_its_sizes_and_seeds() -> None:
    from baselines.common import ConfigError, EnvSettings

    env = EnvSettings(task_set="mix:builtin=1,synthetic:list=2", n_tasks=30, task_seed=1, n_eval_tasks=9, eval_task_seed=2)
    assert env.train_tasks() == registry.mix({"builtin": 1, "synthetic:list": 2}, n=30, seed=1)
    assert env.eval_tasks() == registry.mix({"builtin": 1, "synthetic:list": 2}, n=9, seed=2)
    with pytest.raises(ConfigError, match=r"as n_tasks/task_seed and n_eval_tasks/eval_task_seed, not as seed in the mix"):
        EnvSettings(task_set="mix:builtin=1,seed=3").train_tasks()


def test_the_cli_lists_a_mix(capsys: pytest.CaptureFixture[str]) -> None:
    from code_env.cli import main

    assert main(["tasks", "list", "--set", "mix:builtin=1,synthetic:list=2,n=6,seed=1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mix:builtin=1,synthetic:list=2,n=6,seed=1: 6 tasks\n")
    assert out.count("  builtin/") == 2 and out.count("  synthetic:list/s1/") == 4
    assert main(["tasks", "list", "--set", "mix:bulitin=1"]) == 2
    assert "did you mean 'builtin'" in capsys.readouterr().err
