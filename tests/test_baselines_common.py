"""The baselines' shared contract: configs on disk with overrides and precise errors, seeds, and
a run directory that holds everything a run writes."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field

from baselines.common import (
    CONFIG_DIR,
    ConfigError,
    EnvSettings,
    Run,
    format_table,
    load_config,
    plot_curves,
    read_curve,
    seed_everything,
    text_plot,
)
from code_env import RewardConfig


class Algo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    learning_rate: float = Field(3e-4, gt=0)
    steps: int = Field(10, ge=1)
    seed: int = 0


def _configs(tmp_path: Path, algo: str = "learning_rate = 0.001\nsteps = 5\n") -> Path:
    (tmp_path / "algo.toml").write_text(algo)
    return tmp_path


def test_shipped_defaults_load() -> None:
    env = EnvSettings.model_validate(json.loads((CONFIG_DIR / "env.json").read_text()))
    assert env == EnvSettings()  # the file spells out the defaults
    assert RewardConfig.model_validate(json.loads((CONFIG_DIR / "reward.json").read_text())) == RewardConfig()
    assert env.eval_task_seed != env.task_seed
    train = {t.problem_id for t in env.train_tasks()}
    held_out = env.eval_tasks()
    assert len(held_out) == env.n_eval_tasks and not train & {t.problem_id for t in held_out}


def test_overrides_and_sections(tmp_path: Path) -> None:
    cfg = load_config("algo", Algo, config_dir=_configs(tmp_path),
                      overrides=["algo.learning_rate=1e-4", "env.n_envs=4", "reward.timeout=-0.25",
                                 "env.task_set=synthetic:list", "env.difficulty=null"])  # fmt: skip
    assert cfg.algo == Algo(learning_rate=1e-4, steps=5)
    assert cfg.env.n_envs == 4 and cfg.env.task_set == "synthetic:list" and cfg.env.difficulty is None
    assert cfg.reward.timeout == -0.25 and cfg.reward.syntax_error == -1.0
    assert cfg.as_dict()["algo"]["learning_rate"] == 1e-4


def test_a_table_named_after_the_algorithm_is_read_too(tmp_path: Path) -> None:
    cfg = load_config("algo", Algo, config_dir=_configs(tmp_path, "[algo]\nsteps = 7\n"))
    assert cfg.algo.steps == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(("overrides", "algo", "message"), [
    (["algo.learnin_rate=1"], "", r"algo\.toml \(with --set\): algo\.learnin_rate: unknown key \(known keys: learning_rate, steps, seed\)"),
    ([], "typo = 1\n", r"algo\.toml: algo\.typo: unknown key"),
    (["env.n_env=2"], "", r"env\.json \(with --set\): env\.n_env: unknown key \(known keys: task_set, "),
    (["reward.syntax=-2"], "", r"reward\.json \(with --set\): reward\.syntax: unknown key"),
    (["algo.steps=0"], "", r"algo\.steps: Input should be greater than or equal to 1"),
    (["algo.learning_rate=fast"], "", r"algo\.learning_rate: Input should be a valid number"),
    (["ppo.steps=1"], "", r"--set 'ppo\.steps=1': unknown section 'ppo' \(known: env, reward, algo\)"),
    (["steps=1"], "", r"--set 'steps=1': expected SECTION\.KEY=VALUE"),
    (["algo.steps"], "", r"expected SECTION\.KEY=VALUE"),
    ([], "steps = [", r"algo\.toml: not valid TOML"),
    (["reward.all_public=0.5"], "", r"reward: .*partial_max <= all_public <= all_tests"),
], ids=["typo-override", "typo-in-file", "env-key", "reward-key", "range", "type", "section", "no-section",
        "no-value", "bad-toml", "reward-order"])  # fmt: skip
def test_bad_configuration_names_the_file_and_key(tmp_path: Path, overrides: list[str], algo: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("algo", Algo, config_dir=_configs(tmp_path, algo), overrides=overrides)


def test_missing_config_dir_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--config-dir .*nowhere: not a directory"):
        load_config("algo", Algo, config_dir=tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"gone\.toml: cannot read: No such file or directory"):
        load_config("algo", Algo, files={"algo": tmp_path / "gone.toml"})
    (tmp_path / "list.toml").write_text("")
    (tmp_path / "env.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"env\.json: expected a table of settings, got list"):
        load_config("algo", Algo, config_dir=tmp_path)


def test_seed_everything_repeats_every_generator() -> None:
    def draw() -> tuple[float, float, float]:
        seed_everything(123)
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    assert draw() == draw()
    assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1


def test_run_directory_holds_everything(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    cfg = load_config("algo", Algo, config_dir=_configs(tmp_path / "cfg"))
    out = tmp_path / "run"
    with Run.create("algo", cfg, out=out) as run:
        for step in range(3):
            run.log(step, {"reward_mean": 0.1 * step + 1 / 3, "pass_rate": step / 7, "eval": None if step else 0.5},
                    timing={"exec_per_s": 100.0 + step})  # fmt: skip
        run.write_summary({"end": 0.5})
        png = run.plot(["reward_mean", "pass_rate"])
    assert json.loads((out / "config.json").read_text())["algo"] == {"learning_rate": 0.001, "steps": 5, "seed": 0}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["versions"]["torch"] == torch.__version__
    assert set(meta["git"]) == {"commit", "dirty"}
    rows = list(csv.reader((out / "curve.csv").read_text().splitlines()))
    assert rows[0] == ["step", "reward_mean", "pass_rate", "eval"]
    assert float(rows[2][1]) == 0.1 + 1 / 3 and float(rows[3][2]) == 2 / 7  # exact round trip
    assert rows[1][3] == "0.5" and rows[2][3] == ""
    assert "wall_s" in (out / "timing.csv").read_text().splitlines()[0]
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tb").iterdir())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "trajectories").is_dir() and (out / "checkpoints").is_dir()
    assert json.loads((out / "summary.json").read_text()) == {"end": 0.5}
    curve = read_curve(out / "curve.csv")
    assert curve["step"] == [0.0, 1.0, 2.0] and math.isnan(curve["eval"][1])


def test_a_run_never_overwrites_another(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "curve.csv").write_text("x")
    with pytest.raises(ConfigError, match=r"old: exists and is not an empty directory"):
        Run.create("algo", {}, out=tmp_path / "old")


def test_default_run_dirs_are_named_and_distinct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # Two runs started in the same second: the clock is held still (on a loaded machine a second
    # may pass between the two calls, and then the second run gets a stamp of its own instead).
    real_strftime, now = time.strftime, time.localtime()
    with monkeypatch.context() as m:
        m.setattr(time, "strftime", lambda fmt, t=now: real_strftime(fmt, t))
        a, b = Run.create("algo", {}), Run.create("algo", {})
    a.close()
    b.close()
    assert a.path.parent == b.path.parent == Path("runs") and a.path != b.path
    assert re.fullmatch(r"algo-\d{8}-\d{6}", a.path.name) and b.path.name == f"{a.path.name}-2"


def test_curve_columns_cannot_change_mid_run(tmp_path: Path) -> None:
    with Run.create("algo", {}, out=tmp_path / "r") as run:
        run.log(0, {"a": 1.0})
        with pytest.raises(ValueError, match=r"curve\.csv: columns changed"):
            run.log(1, {"b": 1.0})


def test_plots_and_tables(tmp_path: Path) -> None:
    ref = tmp_path / "ref.csv"
    ref.write_text("step,pass_rate\n0,0.0\n1,0.5\n")
    run = tmp_path / "run.csv"
    run.write_text("step,pass_rate\n0,0.0\n1,0.25\n")
    assert plot_curves(run, tmp_path / "c.png", ["pass_rate"], reference=ref).stat().st_size > 1000
    art = text_plot({"this run": [0.0, 0.25], "reference": [0.0, 0.5]}, width=20, height=5, lo=0.0, hi=1.0)
    lines = art.splitlines()
    assert len(lines) == 7 and lines[0].startswith("1.00 |") and lines[4].startswith("0.00 |")
    assert "* this run" in lines[-1] and "o reference" in lines[-1]
    assert lines[4][6] in "*o" and "o" in lines[2]  # both start at 0; the reference reaches 0.5
    table = format_table(["policy", "pass"], [["random", 0.0], ["trained", 0.5]])
    assert table.splitlines()[1].startswith("------") and "trained  0.500" in table
    # a cell may hold a model's program: it stays on its row and cannot act on the terminal
    table = format_table(["policy", "most frequent programs"], [["trained", "x\x1b[1A\x1b[2K\u202e\ny x3"]])
    assert len(table.splitlines()) == 3 and "x\\x1b[1A\\x1b[2K\\u202e\\ny x3" in table
    assert "\x1b" not in table and "\u202e" not in table
