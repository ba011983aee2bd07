"""Guards on the training signal (``baselines/guards.py``): the share of zero-spread groups, the
three alerts on crafted statistics (each fires once when its condition starts, again only after it
cleared, never on a steady run), the committed GRPO reference run that raises none, GRPO runs that
provoke them on purpose (a warning line, ``alerts.csv``, ``guards.csv`` and TensorBoard, the curve
untouched), the warning when a config turns KL off, the TRL recipe shipping KL on, and PPO's KL to
its initial policy beside ``approx_kl``."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch

from baselines.common import load_config, read_curve
from baselines.grpo import REFERENCE as GRPO_REFERENCE
from baselines.grpo import GRPOSettings
from baselines.grpo import main as grpo_main
from baselines.guards import SignalGuard, warn_kl_off, zero_std_fraction

from .test_grpo import _rows, _set

# a GRPO run of a few seconds (as tests/test_grpo.py's)
SHORT = ["grpo.steps=6", "grpo.prompts_per_step=3", "grpo.group_size=4", "grpo.eval_interval=0", "env.n_eval_tasks=4",
         "env.n_tasks=40", "grpo.checkpoint_interval=0", "grpo.hidden=32", "env.log_every=1000"]  # fmt: skip


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _guard(**kw: float) -> SignalGuard:
    args = {"window": 4, "entropy_drop": 0.5, "kl_max": 1.0, "zero_std_fraction": 0.9, **kw}
    return SignalGuard(window=int(args.pop("window")), **args)


# ----------------------------------------------------------------------------- the statistics


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        ([0.0, 0.0, 1.0, 1.0], 2, 1.0),  # each group all equal: every advantage 0
        ([0.0, 0.5, 1.0, 1.0], 2, 0.5),
        ([0.0, 0.5, 1.0, 0.2], 2, 0.0),
        ([0.0, None, 0.3, 0.3, 0.3, None], 3, 0.5),  # a dropped sample does not count; the rest are compared
        ([0.0, None, None, 1.0], 2, None),  # no group with two judged samples: nothing to judge
    ],
    ids=["all-flat", "half", "none-flat", "dropped", "nothing-judged"],
)
def test_zero_std_fraction_counts_groups_whose_rewards_are_all_equal(rewards: list[float | None], group_size: int,
                                                                     expected: float | None) -> None:  # fmt: skip
    assert zero_std_fraction(rewards, group_size) == expected


def test_bad_guard_settings_are_precise_errors() -> None:
    with pytest.raises(ValueError, match=r"window: expected at least 2 steps .*got 1"):
        _guard(window=1)
    with pytest.raises(ValueError, match=r"entropy_drop: expected a fraction in \(0, 1\], got 1.5"):
        _guard(entropy_drop=1.5)
    with pytest.raises(ValueError, match=r"kl_max: expected a positive bound, got 0"):
        _guard(kl_max=0)
    with pytest.raises(ValueError, match=r"group_size: expected a positive number .*got 0"):
        zero_std_fraction([1.0], 0)


# ------------------------------------------------------------------------- crafted statistics


def _feed(guard: SignalGuard, entropy: list[float], kl: list[float], flat: list[float]) -> list[tuple[int, str]]:
    fired = []
    for i, (e, k, z) in enumerate(zip(entropy, kl, flat, strict=True), start=1):
        _, alerts = guard.observe(i, entropy=e, kl=k, zero_std=z)
        fired += [(a.step, a.alert) for a in alerts]
    return fired


def test_a_steady_run_raises_no_alert() -> None:
    n = 40
    entropy = [1.5 - 0.01 * i + 0.05 * (-1) ** i for i in range(n)]  # a slow, noisy decline
    assert _feed(_guard(), entropy, [0.3] * n, [0.5] * n) == []


def test_an_entropy_collapse_fires_once_when_it_starts_and_again_after_it_cleared() -> None:
    entropy = [1.0, 1.0, 1.0, 1.0, 0.6, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.8, 0.8, 0.05, 0.05]
    guard = _guard()
    fired = _feed(guard, entropy, [0.1] * len(entropy), [0.0] * len(entropy))
    # window 4: halves of 2; step 6: (0.6 + 0.3) / 2 vs 1.0 is a 55% drop (> 50%); steady after;
    # steps 13-14 recover; 15-16: 0.05 vs 0.8, a collapse again
    assert fired == [(6, "entropy_drop"), (16, "entropy_drop")]


def test_kl_past_its_bound_fires_and_names_the_numbers() -> None:
    guard = _guard(kl_max=0.5)
    stats, alerts = guard.observe(1, entropy=1.0, kl=0.2, zero_std=0.0)
    assert alerts == [] and stats.kl == 0.2
    _, alerts = guard.observe(2, entropy=1.0, kl=0.75, zero_std=0.0)
    assert [(a.alert, a.value, a.bound) for a in alerts] == [("kl", 0.75, 0.5)]
    assert "step 2: KL to the reference is 0.75, past the bound 0.5" in alerts[0].message
    assert guard.observe(3, entropy=1.0, kl=0.9, zero_std=0.0)[1] == []  # still past: no second alert
    assert guard.active["kl"]


def test_groups_that_stop_differing_fire_over_the_window_not_on_one_step() -> None:
    flat = [0.2, 1.0, 0.2, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0, 1.0]  # one flat step is no collapse; four in a row are
    fired = _feed(_guard(), [1.0] * len(flat), [0.1] * len(flat), flat)
    assert fired == [(9, "reward_spread")]
    # a step without any judged group is skipped, not counted as spread
    guard = _guard(window=2)
    assert guard.observe(1, entropy=None, kl=None, zero_std=None)[0].zero_std_mean is None


def test_the_reference_grpo_run_raises_no_entropy_or_kl_alert() -> None:
    """The committed 300-step default run, through the default guards: learning that works (entropy
    1.5 -> 0.6, KL up to 1.3) is not a collapse."""
    algo = GRPOSettings()
    guard = SignalGuard(window=algo.alert_window, entropy_drop=algo.alert_entropy_drop, kl_max=algo.alert_kl_max,
                        zero_std_fraction=algo.alert_zero_std_fraction)  # fmt: skip
    curve = read_curve(GRPO_REFERENCE)
    fired = []
    for i, (e, k) in enumerate(zip(curve["entropy"], curve["kl"], strict=True), start=1):
        stats, alerts = guard.observe(i, entropy=e, kl=k, zero_std=None)
        fired += alerts
        if stats.entropy_drop is not None:
            assert stats.entropy_drop < algo.alert_entropy_drop - 0.15  # a margin, not a near miss
    assert fired == [] and len(curve["entropy"]) == algo.steps


# ----------------------------------------------------------------------------- KL on or off


def test_turning_kl_off_warns_in_the_log_and_on_stderr(caplog: pytest.LogCaptureFixture,
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="baselines.guards"):
        assert not warn_kl_off("grpo.kl_coef", 0.1, "GRPO")
        assert warn_kl_off("trl_grpo.beta", 0.0, "TRL's GRPOTrainer")
    assert [r.getMessage()[:30] for r in caplog.records] == ["trl_grpo.beta = 0: TRL's GRPOT"]
    err = capsys.readouterr().err
    assert err.count("warning: trl_grpo.beta = 0") == 1 and "set trl_grpo.beta > 0" in err


def test_every_recipe_ships_kl_on() -> None:
    from baselines.trl_grpo import TRLGRPOSettings

    trl = load_config("trl_grpo", TRLGRPOSettings).algo
    assert isinstance(trl, TRLGRPOSettings) and trl.beta == 0.04 == TRLGRPOSettings().beta
    assert trl.grpo_config(Path("trl")).beta == 0.04  # what GRPOTrainer gets: a reference model and its KL
    grpo = load_config("grpo", GRPOSettings).algo
    assert isinstance(grpo, GRPOSettings) and grpo.kl_coef > 0


# ------------------------------------------------------------------------------- GRPO, provoked


@pytest.fixture(scope="module")
def normal_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("guards") / "normal"
    assert grpo_main(["--quiet", "--out", str(out), *_set(*SHORT)]) == 0
    return out


def test_a_normal_short_run_raises_no_alert_and_records_its_guards(normal_run: Path) -> None:
    assert _rows(normal_run / "alerts.csv") == []
    assert (normal_run / "alerts.csv").read_text().splitlines() == ["step,alert,value,bound,message"]
    guards = _rows(normal_run / "guards.csv")
    assert [g["step"] for g in guards] == ["1", "2", "3", "4", "5", "6"]
    assert all(0 <= float(g["zero_std_fraction"]) <= 1 and float(g["kl"]) >= 0 for g in guards)
    assert all(g["entropy_drop"] == "" for g in guards)  # a window of 50 steps: not filled in 6
    tb = _scalars(normal_run)
    assert [v for _, v in tb["alerts/kl"]] == [0.0] * 6 and len(tb["guards/zero_std_fraction"]) == 6
    assert "guards/kl" in tb and "kl" in tb  # beside the curve's own scalars


def test_alerts_provoked_on_purpose_fire_everywhere_and_leave_the_curve_alone(
        normal_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "provoked"
    # a KL bound no update stays under; a window of 2 steps where a share of 1% flat groups is "most";
    # a 0.1% entropy fall between two steps a collapse
    provoke = ["grpo.alert_kl_max=1e-9", "grpo.alert_window=2", "grpo.alert_zero_std_fraction=0.01",
               "grpo.alert_entropy_drop=0.001"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="baselines.guards"):
        assert grpo_main(["--quiet", "--out", str(out), *_set(*SHORT, *provoke)]) == 0
    alerts = _rows(out / "alerts.csv")
    names = {a["alert"] for a in alerts}
    assert {"kl", "reward_spread"} <= names, alerts
    kl = next(a for a in alerts if a["alert"] == "kl")
    assert kl["step"] == "1" and float(kl["value"]) > float(kl["bound"]) == 1e-9  # KL > 0 after the first update
    flat = next(a for a in alerts if a["alert"] == "reward_spread")
    assert flat["step"] == "2"  # the window's first full step
    guards = _rows(out / "guards.csv")
    drops = [float(g["entropy_drop"]) for g in guards if g["entropy_drop"]]
    assert any(d > 0.001 for d in drops) == ("entropy_drop" in names)  # fires exactly when the entropy fell
    # a warning line per alert, in the log and on stderr
    logged = [r.getMessage() for r in caplog.records if r.name == "baselines.guards"]
    assert len(logged) == len(alerts) and all(m.startswith("step ") for m in logged)
    err = capsys.readouterr().err
    assert err.count("warning: step ") == len(alerts) and "past the bound 1e-09" in err
    tb = _scalars(out)
    assert tb["alerts/kl"][0] == (1, 1.0) and tb["alerts/reward_spread"][1][1] == 1.0
    # the alerts watch the training; they never steer it: the same curve as the normal run's
    assert (out / "curve.csv").read_text() == (normal_run / "curve.csv").read_text()


def test_a_grpo_run_without_kl_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="baselines.guards"):
        assert grpo_main(["--quiet", "--out", str(tmp_path / "run"), *_set(*SHORT, "grpo.kl_coef=0", "grpo.steps=2")]) == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "baselines.guards"]
    assert len(logged) == 1 and logged[0].startswith("grpo.kl_coef = 0: GRPO trains without a KL penalty")
    assert capsys.readouterr().err.count("grpo.kl_coef = 0") == 1
    assert all(g["kl"] == "" for g in _rows(tmp_path / "run" / "guards.csv"))  # no KL term: no KL to watch


# -------------------------------------------------------------------------- PPO, KL to initial


def test_ppo_logs_kl_to_its_initial_policy_beside_approx_kl(tmp_path: Path) -> None:
    from baselines.sb3_ppo import LEARNER_FLOATS, main

    short = ["env.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64", "ppo.n_epochs=2", "ppo.total_timesteps=256",
             "env.n_eval_tasks=4", "env.n_tasks=50", "ppo.eval_interval=0", "ppo.random_samples=1",
             "ppo.checkpoint_interval=0", "env.log_every=1000"]  # fmt: skip
    out = tmp_path / "ppo"
    assert main(["--quiet", "--out", str(out), *_set(*short)]) == 0
    guards = _rows(out / "guards.csv")
    curve = _rows(out / "curve.csv")
    assert [g["step"] for g in guards] == [c["step"] for c in curve] == ["128", "256"]  # after each update
    kl = [float(g["kl_initial"]) for g in guards]
    assert all(math.isfinite(v) and v > 0 for v in kl)  # the updates moved the policy
    assert [g["approx_kl"] for g in guards] == [c["approx_kl"] for c in curve]  # the same update's step-to-step KL
    assert "kl_initial" not in curve[0] and "approx_kl" in LEARNER_FLOATS  # the curve keeps the reference's columns
    progress = _rows(out / "sb3" / "progress.csv")
    assert any(r.get("train/kl_initial") for r in progress)  # SB3's own logger has it too
    tb = _scalars(out)["kl_initial"]
    assert [s for s, _ in tb] == [128, 256] and all(math.isclose(a, b, rel_tol=1e-6) for (_, a), b in zip(tb, kl, strict=True))


def test_kl_to_initial_is_zero_before_any_update(tmp_path: Path) -> None:
    import numpy as np
    from stable_baselines3 import PPO

    from baselines.common import Run
    from baselines.sb3_ppo import KLToInitial, PPOSettings, make_vec_env

    cfg = load_config("ppo", PPOSettings, overrides=["env.n_envs=1", "env.n_tasks=5", "ppo.batch_size=128"])
    venv = make_vec_env(cfg, None)
    try:
        model = PPO("MlpPolicy", venv, n_steps=8, batch_size=8, seed=0, device="cpu")
        with Run.create("kl", {}, out=tmp_path / "run") as run:
            cb = KLToInitial(run)
            cb.init_callback(model)
            cb.on_training_start({}, {})  # the frozen copy of the initial policy
            obs = np.stack([venv.observation_space.sample() for _ in range(5)])
            assert cb.kl(obs) == 0.0
            with torch.no_grad():
                for p in model.policy.action_net.parameters():
                    p.mul_(3.0)  # a policy that moved (sharper: not a shift every logit shares)
            assert cb.kl(obs) > 0
    finally:
        venv.close()
