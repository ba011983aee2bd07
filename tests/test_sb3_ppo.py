"""The SB3 PPO baseline (``baselines/sb3_ppo.py``): its config (defaults, overrides, errors that name
the key), a short run through the command line that writes every artefact of the run directory,
the held-out evaluations (the trained and the random policy on the same fresh tasks), trajectory
logs the log tools read, and the same curve from the same seed, in either vector env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from stable_baselines3 import PPO

import registry
from baselines.common import CONFIG_DIR, ConfigError, Run, load_config, read_curve, tomllib
from baselines.determinism import check_pin
from baselines.sb3_ppo import (
    REFERENCE,
    PPOSettings,
    entropy_coefficient,
    evaluate,
    heldout_env,
    main,
    random_policy,
    train,
)
from code_env.logtools import replay, stats
from code_env.trajectory import read_log

from .conftest import get_sandbox

# A run of a few seconds: 2 sub-envs x 64 steps per rollout, 4 rollouts, 6 held-out tasks.
SHORT = ["env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64", "ppo.n_epochs=2", "ppo.total_timesteps=512",
         "env.n_eval_tasks=6", "env.n_tasks=50", "ppo.eval_interval=2", "ppo.random_samples=2",
         "ppo.checkpoint_interval=256", "env.log_every=3"]  # fmt: skip


def _set(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


# ------------------------------------------------------------------------------------- config


def test_shipped_config_loads_and_every_field_is_described() -> None:
    cfg = load_config("ppo", PPOSettings)
    algo = cfg.algo
    assert isinstance(algo, PPOSettings)
    assert algo == PPOSettings()  # ppo.toml spells out the defaults
    shipped = set(tomllib.loads((CONFIG_DIR / "ppo.toml").read_text())["ppo"])
    assert shipped <= set(PPOSettings.model_fields)
    assert all(PPOSettings.model_fields[k].default is None for k in set(PPOSettings.model_fields) - shipped)  # no null in TOML
    assert (algo.n_steps * cfg.env.n_envs) % algo.batch_size == 0
    assert all(f.description for f in PPOSettings.model_fields.values())
    assert load_config("ppo", PPOSettings, overrides=["ppo.learning_rate=1e-4"]).algo.learning_rate == 1e-4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ppo.learing_rate=1e-4", r"ppo\.learing_rate: unknown key \(known keys: learning_rate, "),
        ("ppo.n_steps=0", r"ppo\.n_steps: .*greater than or equal to 1"),
        ("ppo.vec_env=forkserver", r"ppo\.vec_env: .*'dummy' or 'subproc'"),
        ("ppo.batch_size=100", r"ppo\.batch_size: 100 does not divide a rollout of ppo\.n_steps x env\.n_envs"),
        ("env.task_set=synthetic:list", r"env\.task_set: CodeExecTokens-v0 writes programs for synthetic:arith only"),
        ("env.max_turns=3", r"env\.max_turns: CodeExecTokens-v0 is single-turn"),
        ("env.eval_task_seed=0", r"env\.eval_task_seed: the held-out tasks must not be the training tasks"),
    ],
    ids=["unknown-key", "out-of-range", "bad-choice", "batch-size", "task-set", "turns", "held-out-seed"],
)
def test_a_bad_config_is_a_clear_error_naming_the_key(override: str, message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "run"
    assert main(["--quiet", "--out", str(out), *_set(override)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    with pytest.raises(ConfigError, match=message):
        raise ConfigError(err.removeprefix("error: ").strip())
    assert not out.exists() or not any(out.iterdir())  # nothing trained, nothing written


def test_entropy_coefficient_anneals_linearly_then_stays() -> None:
    algo = PPOSettings(ent_coef=0.5, ent_coef_final=0.1, ent_decay_fraction=0.5)
    assert [entropy_coefficient(algo, step, 1000) for step in (0, 250, 500, 900)] == pytest.approx([0.5, 0.3, 0.1, 0.1])
    assert entropy_coefficient(PPOSettings(ent_coef=0.2, ent_coef_final=None), 900, 1000) == 0.2


# ----------------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ppo") / "run"
    assert main(["--quiet", "--out", str(out), *_set(*SHORT)]) == 0
    return out


def test_a_short_run_writes_every_artefact(short_run: Path) -> None:
    for name in ("config.json", "meta.json", "curve.csv", "timing.csv", "summary.json", "curve.png", "sb3/progress.csv"):
        assert (short_run / name).is_file() and (short_run / name).stat().st_size > 0, name
    assert list((short_run / "tb").glob("events.out.tfevents.*"))
    config = json.loads((short_run / "config.json").read_text())
    assert config["ppo"]["total_timesteps"] == 512 and config["env"]["n_envs"] == 2
    assert json.loads((short_run / "meta.json").read_text())["seed"] == 0
    curve = read_curve(short_run / "curve.csv")
    assert curve["step"] == [128.0, 256.0, 384.0, 512.0] and curve["rollouts"] == [1.0, 2.0, 3.0, 4.0]
    assert curve["episodes"][-1] > 20 and all(-1.0 <= r <= 1.0 for r in curve["reward_mean"])
    evaluated = [v == v for v in curve["eval_pass_rate"]]  # NaN (an empty cell) between evaluations
    assert evaluated == [False, True, False, True]
    assert all(v > 0 for v in curve["entropy"]) and all(v == v for v in curve["approx_kl"])
    checkpoints = sorted(p.name for p in (short_run / "checkpoints").iterdir())
    assert checkpoints == ["ppo_256_steps.zip", "ppo_512_steps.zip", "ppo_final.zip"]
    first, final = PPO.load(short_run / "checkpoints" / "ppo_256_steps.zip"), PPO.load(short_run / "checkpoints" / "ppo_final.zip")
    assert any(not torch.equal(a, b) for a, b in zip(first.policy.parameters(), final.policy.parameters(), strict=True))
    assert final.num_timesteps == 512


def test_trained_and_random_policies_are_evaluated_on_the_same_fresh_held_out_tasks(short_run: Path) -> None:
    summary = json.loads((short_run / "summary.json").read_text())
    held_out = [t.problem_id for t in registry.load("synthetic:arith", n=6, seed=10_000, difficulty=1)]
    training = {t.problem_id for t in registry.load("synthetic:arith", n=50, seed=0, difficulty=1)}
    for name in ("start", "trained", "random"):
        assert summary[name]["problem_ids"] == held_out, name
    assert not training & set(held_out)
    assert summary["start"]["episodes"] == summary["trained"]["episodes"] == 6  # deterministic: one per task
    assert summary["random"]["episodes"] == 12  # ppo.random_samples = 2 per task
    assert summary["timesteps"] == 512 and summary["model_path"].endswith("ppo_final.zip")
    assert isinstance(summary["target_met"], bool)


def test_the_trajectory_logs_are_read_by_the_log_tools(short_run: Path) -> None:
    logs = short_run / "trajectories"
    records = list(read_log(logs))
    assert len(list(logs.glob("*.jsonl"))) == 2  # one per sub-env
    assert records and all(r["episode"] % 3 == 0 for r in records)  # env.log_every = 3
    assert all(r["action"].startswith("def f(x):") and r["problem_id"].startswith("synthetic:arith/s0/d1/") for r in records)
    assert stats(logs).episodes == len(records)
    report = replay(logs, executor=get_sandbox("process"))
    assert report.ok and report.steps == len(records), report.summary()
    from ._records import assert_complete

    steps = set(read_curve(short_run / "curve.csv")["step"])
    for rec in records:  # PPO's advantages are per token, inside SB3's rollout buffer: none per episode
        assert_complete(rec, trainer="ppo", advantage=False)
        assert rec["step"] in steps, rec["step"]  # the curve row of the update that trained on the episode's end
    # the final held-out evaluations are logged whole, apart from training: the headline numbers replay
    summary = json.loads((short_run / "summary.json").read_text())
    for name, episodes in (("trained", 6), ("random", 12)):
        held_out = list(read_log(logs / f"heldout-{name}"))
        assert len(held_out) == episodes and {r["problem_id"] for r in held_out} == set(summary[name]["problem_ids"])
        assert sum(r["reward"] for r in held_out) / episodes == pytest.approx(summary[name]["reward_mean"])
        assert replay(logs / f"heldout-{name}", executor=get_sandbox("process")).ok


def test_random_policy_evaluation_is_seeded() -> None:
    cfg = load_config("ppo", PPOSettings, overrides=["env.n_eval_tasks=4"])
    env = heldout_env(cfg)
    env.executor = get_sandbox("process")
    a = evaluate(random_policy(7), env, name="random", samples=2)
    b = evaluate(random_policy(7), env, name="random", samples=2)
    assert a == b and a.episodes == 8 and a.problem_ids == [t.problem_id for t in env.tasks]
    env.close()


# ---------------------------------------------------------------------------- reproducibility


def _curve(tmp_path: Path, name: str, *extra: str) -> bytes:
    cfg = load_config("ppo", PPOSettings, overrides=[*SHORT, "ppo.total_timesteps=256", "ppo.eval_interval=1",
                                                     "env.log_every=1000", *extra])  # fmt: skip
    with Run.create("ppo", cfg, out=tmp_path / name) as run:
        train(cfg, run, progress=False)
    return (tmp_path / name / "curve.csv").read_bytes()


@pytest.mark.slow
def test_same_seed_same_curve_in_either_vector_env_and_another_seed_differs(tmp_path: Path) -> None:
    dummy = _curve(tmp_path, "dummy")
    assert dummy == _curve(tmp_path, "dummy-again")
    assert dummy == _curve(tmp_path, "subproc", "ppo.vec_env=subproc")  # the same sub-envs, seeds and rewards
    assert dummy != _curve(tmp_path, "seed-1", "ppo.seed=1")



# ------------------------------------------------------------------------------ the reference


def _float_rows(path: Path, n: int | None = None) -> list[list[str]]:
    rows = path.read_text(encoding="utf-8").splitlines()
    return [r.split(",") for r in rows[: None if n is None else n + 1]]


def test_the_algorithm_file_may_set_what_it_needs_of_the_env() -> None:
    assert load_config("ppo", PPOSettings).env.max_tokens == 3  # [env] of ppo.toml over env.json's 16
    assert load_config("ppo", PPOSettings, overrides=["env.max_tokens=5"]).env.max_tokens == 5  # --set wins


def test_the_reference_curve_shows_learning() -> None:
    curve = read_curve(REFERENCE)
    reward = curve["reward_mean"]
    tenth = max(len(reward) // 10, 1)
    first, last = sum(reward[:tenth]) / tenth, sum(reward[-tenth:]) / tenth
    assert last > first + 0.3, (first, last)
    assert max(curve["pass_rate"][-tenth:]) > 0.05


@pytest.mark.slow
def test_a_prefix_of_the_default_run_reproduces_the_reference_rows_exactly(tmp_path: Path) -> None:
    cfg = load_config("ppo", PPOSettings)  # the shipped defaults, as the reference was made
    assert check_pin()["pinned"], "the CPU pin is not in force: the reference holds under it only"
    with Run.create("ppo", cfg, out=tmp_path / "prefix") as run:
        train(cfg, run, progress=False, max_rows=3)
    mine = _float_rows(tmp_path / "prefix" / "curve.csv")
    assert len(mine) == 4  # header and 3 rows
    assert mine == _float_rows(REFERENCE, 3)
