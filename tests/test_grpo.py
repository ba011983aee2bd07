"""The GRPO baseline (``baselines/grpo.py``): its config, group-normalised advantages, the
temperature floor, a short run through the command line with every artefact, the same curve from
the same seed (overlapped rollouts included), dropped sandbox failures, the reference curve (a
prefix reproduced exactly, learning visible) and the language-model policy on a tiny local model."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from baselines.common import CONFIG_DIR, Run, load_config, read_curve, tomllib
from baselines.determinism import check_pin
from baselines.grpo import (
    REFERENCE,
    GRPOSettings,
    advantages,
    main,
    temperature_at,
    train,
)
from sandbox import ExecutionResult, RunRequest

from .conftest import get_sandbox

SHORT = ["grpo.steps=6", "grpo.prompts_per_step=3", "grpo.group_size=4", "grpo.eval_interval=3", "env.n_eval_tasks=8",
         "env.n_tasks=40", "grpo.checkpoint_interval=3", "grpo.hidden=32", "env.log_every=1"]  # fmt: skip


def _set(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------------- config


def test_shipped_config_loads_and_every_field_is_described() -> None:
    cfg = load_config("grpo", GRPOSettings)
    assert cfg.algo == GRPOSettings()  # grpo.toml spells out the defaults
    shipped = set(tomllib.loads((CONFIG_DIR / "grpo.toml").read_text())["grpo"])
    assert shipped == set(GRPOSettings.model_fields) - {"model", "generation_timeout_s", "redis_url"}  # None: no null in TOML
    assert all(f.description for f in GRPOSettings.model_fields.values())
    assert cfg.env.max_tokens == 16 and cfg.env.difficulty == 1  # the task as env.json gives it, not eased


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.group_sise=4", r"grpo\.group_sise: unknown key"),
        ("grpo.group_size=1", r"grpo\.group_size"),
        ("grpo.temperature=0.5", r"temperature 0\.5 is below temperature_floor 1\.0"),
        ("env.task_set=builtin", r"env\.task_set: the GRU policy writes programs for synthetic:arith only"),
        ("grpo.model=/nonexistent/model", r"--model /nonexistent/model: not a Hugging Face model folder"),
    ],
    ids=["unknown-key", "group-of-one", "below-floor", "task-set", "no-model"],
)
def test_a_bad_config_is_a_clear_error_naming_the_key(override: str, message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["--quiet", "--out", str(tmp_path / "run"), *_set(override)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re

    assert re.search(message, err), err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_advantages_are_normalised_within_each_group_and_failures_are_dropped() -> None:
    adv, keep = advantages([1.0, 0.0, 0.0, 1.0, None, -1.0, 0.5, None], group_size=4, eps=1e-4)
    assert keep.tolist() == [True, True, True, True, False, True, True, False]
    expected = 0.5 / ((1 / 3) ** 0.5 + 1e-4)  # (r - mean) / (unbiased std + eps)
    assert torch.allclose(adv[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]) * expected)
    assert adv[:4].sum().abs() < 1e-6 and adv[4] == 0 and adv[7] == 0
    assert adv[5] < 0 < adv[6]  # the second group's two judged samples
    alone, _ = advantages([1.0, None, None, None], group_size=4, eps=1e-4)
    assert alone.tolist() == [0.0, 0.0, 0.0, 0.0]  # no baseline: no signal
    same, _ = advantages([0.8] * 4, group_size=4, eps=1e-4)
    assert same.tolist() == [0.0] * 4


def test_the_temperature_anneals_to_its_floor_and_never_below() -> None:
    algo = GRPOSettings(steps=11, temperature=1.2, temperature_floor=0.7)
    ts = [temperature_at(algo, s) for s in range(11)]
    assert ts[0] == 1.2 and abs(ts[-1] - 0.7) < 1e-12 and ts == sorted(ts, reverse=True)
    assert temperature_at(algo, 50) == 0.7


# ----------------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grpo") / "run"
    assert main(["--quiet", "--out", str(out), *_set(*SHORT)]) == 0
    return out


def test_a_short_run_writes_every_artefact(short_run: Path) -> None:
    for name in ("config.json", "meta.json", "curve.csv", "timing.csv", "summary.json", "curve.png"):
        assert (short_run / name).is_file() and (short_run / name).stat().st_size > 0, name
    assert list((short_run / "tb").glob("events.out.tfevents.*"))
    assert {p.name for p in (short_run / "checkpoints").iterdir()} == {"grpo_3.pt", "grpo_6.pt", "grpo_final.pt"}
    rows = _rows(short_run / "curve.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    for column in ("reward_mean", "reward_std", "pass_rate", "entropy", "kl", "learning_rate", "cached_fraction",
                   "dropped", "unique", "staleness", "temperature", "loss"):  # fmt: skip
        assert all(r[column] != "" for r in rows), column
    assert [r["staleness"] for r in rows] == ["0", "1", "1", "1", "1", "1"]  # overlapped: one update stale
    assert all(0 <= float(r["cached_fraction"]) <= 1 for r in rows)
    assert all(int(r["unique"]) <= 12 for r in rows)  # 3 tasks x 4 programs, identical ones judged once
    assert [r["eval_pass_rate"] != "" for r in rows] == [False, False, True, False, False, True]
    timing = _rows(short_run / "timing.csv")
    assert all(float(t["executions_per_s"]) >= 0 and 0 <= float(t["learner_wait_fraction"]) <= 1 for t in timing)
    summary = json.loads((short_run / "summary.json").read_text())
    assert summary["start"]["policy"] == "untrained" and summary["random"]["tasks"] == 8
    config = json.loads((short_run / "config.json").read_text())
    assert config["grpo"]["group_size"] == 4
    from code_env.trajectory import read_log

    logged = list(read_log(short_run / "trajectories" / "train"))  # env.log_every: every sample, here
    assert logged and all(r["step"] in range(1, 7) and r["action"].startswith("def f(x):") for r in logged)
    assert list(read_log(short_run / "trajectories" / "heldout"))


def test_every_sample_has_its_whole_record_and_replays(short_run: Path) -> None:
    """Each training sample: the prompt, the reply (its tokens), the program, the raw runs (or,
    answered from the cache, the sample that ran it), the timed states, the breakdown, the
    advantage the update used — the group-normalised reward, recomputed here — and its step."""
    import statistics

    from code_env.logtools import audit, format_audit, replay
    from code_env.trajectory import read_log

    from ._records import assert_complete

    logged = list(read_log(short_run / "trajectories" / "train"))
    assert len(logged) == 6 * 3 * 4  # 6 steps of 3 tasks x 4 samples, every one logged (env.log_every=1)
    for rec in logged:
        assert_complete(rec, trainer="grpo")
        assert rec["completion"].endswith("<end>") and rec["completion_tokens"] == len(rec["completion"].split())
    assert any(r["ran_as"] != r["trace_id"] for r in logged)  # a duplicate in its batch: judged once, as the first
    for k in range(0, len(logged), 4):  # a group: one task's 4 samples of a step
        group = logged[k : k + 4]
        rewards = [r["reward"] for r in group]
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        assert [round(r["advantage"], 5) for r in group] == [round((x - mean) / (std + 1e-4), 5) for x in rewards]
        assert len({(r["problem_id"], r["step"]) for r in group}) == 1
    rows = {int(r["step"]): r for r in _rows(short_run / "curve.csv")}
    assert {r["step"] for r in logged} == set(rows)  # each record's step has its curve row (KL, entropy, lr)
    held = list(read_log(short_run / "trajectories" / "heldout"))
    for rec in held:
        assert_complete(rec, trainer="grpo", step=False, advantage=False)  # (the start's step is 0)
    for log in ("train", "heldout"):
        report = replay(short_run / "trajectories" / log)
        assert report.steps > 0 and report.differences == [], report.summary()
    text = format_audit(audit(short_run / "trajectories" / "train", top=2))
    assert "trainer grpo, step " in text and "advantage " in text and "--- completion (the model's reply) ---" in text


def test_a_sample_answered_from_the_cache_names_the_sample_that_ran(tmp_path: Path) -> None:
    import time

    import registry
    from baselines.grpo import Judge
    from code_env import RewardConfig
    from code_env.logtools import replay
    from code_env.trajectory import read_log

    from ._records import assert_complete

    task = registry.load("synthetic:arith", n=1, seed=0, difficulty=1)[0]
    judge = Judge(get_sandbox("process"), RewardConfig(), True, tmp_path)
    for step in (1, 2):
        programs = [task.reference_solution, "def f(x):\n    return 0\n"]
        _, unique, verdicts = judge.verdicts([task, task], programs, generating=time.time())
        assert unique == (2 if step == 1 else 0)
        judge.write(verdicts, step, torch.tensor([0.7, -0.7]))
    judge.close()
    first, _, again, _ = records = list(read_log(tmp_path))
    assert (again["cached"], again["ran_as"], again["executions"]) == (True, first["trace_id"], [])
    assert again["reward_breakdown"] == first["reward_breakdown"] and again["public_cases"] == first["public_cases"]
    for rec in records:
        assert_complete(rec, trainer="grpo", truncation_known=False)
    assert replay(tmp_path).ok


def test_same_seed_same_curve_and_another_seed_differs(short_run: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["--quiet", "--out", str(again), *_set(*SHORT)]) == 0
    assert (again / "curve.csv").read_bytes() == (short_run / "curve.csv").read_bytes()
    other = tmp_path / "other"
    assert main(["--quiet", "--out", str(other), *_set(*SHORT, "grpo.seed=1")]) == 0
    assert (other / "curve.csv").read_bytes() != (short_run / "curve.csv").read_bytes()


def test_without_overlap_the_batch_is_fresh(tmp_path: Path) -> None:
    out = tmp_path / "serial"
    assert main(["--quiet", "--out", str(out), *_set(*SHORT, "grpo.overlap=false", "grpo.steps=3")]) == 0
    assert [r["staleness"] for r in _rows(out / "curve.csv")] == ["0", "0", "0"]


class FailsOnX:
    """The real sandbox, except that every program that returns ``x`` alone is answered as the
    sandbox answers when it fails itself (a worker lost): those samples must be dropped, counted
    and never scored, nor cached."""

    def __init__(self) -> None:
        self.sandbox = get_sandbox("process")
        self.failed = 0

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        out = self.sandbox.run_many(requests)
        for i, r in enumerate(requests):
            if "result = x\\n" in (r.stdin or ""):  # the candidate travels in the driver's stdin, JSON-encoded
                out[i] = ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test")
                self.failed += 1
        return out


def test_samples_the_sandbox_failed_are_dropped_and_counted(tmp_path: Path) -> None:
    cfg = load_config("grpo", GRPOSettings, overrides=[*SHORT, "grpo.steps=4", "grpo.temperature=3", "env.max_tokens=1"])
    executor = FailsOnX()  # one-token programs: "x" is one of 16 possible, so it comes up
    with Run.create("grpo", cfg, out=tmp_path / "run") as run:
        result = train(cfg, run, progress=False, executor=executor)
    rows = _rows(tmp_path / "run" / "curve.csv")
    dropped = sum(int(r["dropped"]) for r in rows)
    assert executor.failed > 0 and dropped > 0 and result.dropped == dropped
    assert result.samples == 4 * 12
    for r in rows:  # a dropped sample is not in the step's rewards: 12 samples, n judged
        assert float(r["reward_mean"]) <= 1.0


# ------------------------------------------------------------------------------ the reference


def test_the_reference_curve_shows_learning() -> None:
    curve = read_curve(REFERENCE)
    tenth = max(len(curve["pass_rate"]) // 10, 1)
    for column, margin in (("pass_rate", 0.1), ("reward_mean", 0.3)):
        first, last = sum(curve[column][:tenth]) / tenth, sum(curve[column][-tenth:]) / tenth
        assert last > first + margin, (column, first, last)
    evals = [v for v in curve["eval_pass_rate"] if v == v]
    assert evals[-1] > 0.2


@pytest.mark.slow
def test_a_prefix_of_the_default_run_reproduces_the_reference_rows_exactly(tmp_path: Path) -> None:
    cfg = load_config("grpo", GRPOSettings)  # the shipped defaults, as the reference was made
    assert check_pin()["pinned"], "the CPU pin is not in force: the reference holds under it only"
    with Run.create("grpo", cfg, out=tmp_path / "prefix") as run:
        train(cfg, run, progress=False, max_steps=8)
    mine = (tmp_path / "prefix" / "curve.csv").read_text().splitlines()
    assert len(mine) == 9
    assert mine == REFERENCE.read_text().splitlines()[:9]


# ------------------------------------------------------------------------- a language model


@pytest.mark.slow
def test_a_local_language_model_trains_two_steps(tmp_path: Path) -> None:
    from baselines.tiny_lm import build_tiny_lm

    path = build_tiny_lm(tmp_path / "model", seed=0, n_positions=512)
    from transformers import AutoModelForCausalLM

    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}
    out = tmp_path / "run"
    argv = ["--quiet", "--out", str(out), "--model", str(path),
            *_set("env.task_set=builtin", "grpo.steps=2", "grpo.prompts_per_step=3", "grpo.group_size=4",
                  "grpo.eval_interval=0", "grpo.max_new_tokens=2", "grpo.learning_rate=1e-2", "grpo.temperature=1.0",
                  "env.log_every=1")]  # fmt: skip
    # replies of two tokens from random weights: a syntax error (-1), nothing (-0.5), a name error...: rewards that
    # differ within a group, so the advantages are not all zero and the policy must move
    assert main(argv) == 0
    rows = _rows(out / "curve.csv")
    assert len(rows) == 2
    for r in rows:
        assert r["reward_mean"] != "" and -1.0 <= float(r["reward_mean"]) <= 1.0  # rewards came back
        assert torch.isfinite(torch.tensor(float(r["loss"])))
    assert any(float(r["reward_std"]) > 0 for r in rows)
    after: dict[str, Any] = torch.load(out / "checkpoints" / "grpo_final.pt")
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert changed, "no parameter changed"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["start"]["tasks"] == summary["end"]["tasks"] > 0
    # every sample's whole record: the prompt as the model read it, the reply (cut at 2 tokens), the program
    from code_env.logtools import replay
    from code_env.trajectory import read_log

    from ._records import assert_complete

    logged = list(read_log(out / "trajectories" / "train"))
    assert len(logged) == 2 * 3 * 4 and {r["step"] for r in logged} == {1, 2}
    for rec in logged:
        assert_complete(rec, trainer="grpo")
        assert rec["task"]["prompt"] in rec["prompt"] or rec["task"]["prompt"].strip() in rec["prompt"]
        assert rec["completion_tokens"] <= 2 and (rec["completion_tokens"] == 2 or not rec["completion_truncated"])
    assert any(r["completion_truncated"] for r in logged)  # cut at max_new_tokens, and said so
    report = replay(out / "trajectories" / "train")
    assert report.steps == len(logged) and report.differences == [], report.summary()
