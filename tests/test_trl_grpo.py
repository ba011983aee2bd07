"""The TRL recipe (``baselines.trl_grpo``) and the tiny local model it is tested with
(``baselines.tiny_lm``): a real ``trl.GRPOTrainer`` run through ``main``, on CPU, no downloads."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

import registry
from baselines.common import load_config
from baselines.tiny_lm import CHAT_TEMPLATE, build_tiny_lm, default_corpus
from baselines.tiny_lm import main as tiny_main
from registry.schema import write_tasks
from tests.test_trl import TINY

# No model hub: everything below is built here. (Set before transformers is imported anywhere:
# baselines.trl_grpo imports it, so it is imported inside the tests.)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"


def recipe() -> Any:
    import baselines.trl_grpo

    return baselines.trl_grpo




def _load(path: Path) -> tuple[Any, Any]:
    import huggingface_hub.constants
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert huggingface_hub.constants.HF_HUB_OFFLINE  # nothing here may reach a hub
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_tiny_lm_loads_offline_and_encodes_any_text(tmp_path: Path) -> None:
    path = build_tiny_lm(tmp_path / "model", seed=3, n_positions=128)
    assert path == tmp_path / "model"
    model, tok = _load(path)
    assert model.config.model_type == "gpt2" and model.config.n_positions == 128
    assert len(tok) == model.config.vocab_size == 512 and tok.model_max_length == 128
    assert tok.eos_token == tok.pad_token == "<|endoftext|>" and model.config.eos_token_id == tok.eos_token_id
    text = "def f(x):\n\treturn x  # é 漢 \x00 ✓\n"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: nothing is unknown, nothing is lost
    chat = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                   tokenize=False, add_generation_prompt=True)  # fmt: skip
    assert chat == "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"
    assert tok.chat_template == CHAT_TEMPLATE
    assert json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok.convert_ids_to_tokens(tok("<|user|>")["input_ids"]) == ["<|user|>"]  # one special token each
    # the default corpus is the builtin set's prompts and reference solutions
    builtin = registry.load("builtin")
    assert default_corpus() == [x for t in builtin for x in (t.prompt, t.reference_solution)]


def test_tiny_lm_is_reproducible(tmp_path: Path) -> None:
    corpus = [t.reference_solution for t in TINY] * 3
    a, b, c = (build_tiny_lm(tmp_path / n, corpus, seed=s, vocab_size=300) for n, s in (("a", 0), ("b", 0), ("c", 1)))
    files = sorted(p.name for p in a.iterdir())
    assert files == ["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
                     "tokenizer.json", "tokenizer_config.json"]  # fmt: skip
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()  # the seed is the weights'


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"vocab_size": 100}, ValueError, r"vocab_size: expected at least 261 \(256 bytes and 5 special tokens\), got 100"),
    ({"n_embd": 30, "n_head": 4}, ValueError, r"n_embd: must be a multiple of n_head \(4\), got 30"),
    ({"n_layer": 0}, ValueError, "n_layer: expected a positive integer, got 0"),
    ({"corpus": ["a", 3]}, TypeError, "corpus: expected an iterable of str, got an item of type int"),
    ({"corpus": ["", ""]}, ValueError, "corpus: expected at least one non-empty text"),
], ids=["vocab", "heads", "layers", "corpus-type", "corpus-empty"])  # fmt: skip
def test_tiny_lm_arguments_are_checked(tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        build_tiny_lm(tmp_path / "m", **kwargs)
    assert not (tmp_path / "m").exists()


def test_tiny_lm_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_main([str(tmp_path / "m"), "--seed", "1", "--n-layer", "1", "--vocab-size", "300"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    model, tok = _load(tmp_path / "m")
    assert model.config.n_layer == 1 and len(tok) == 300
    assert tiny_main([str(tmp_path / "n"), "--vocab-size", "10"]) == 2
    assert "error: vocab_size: expected at least 261" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert tiny_main([str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err == f"error: out_dir: {tmp_path / 'file'} exists and is not a directory\n"


def test_shipped_config_is_the_defaults(tmp_path: Path) -> None:
    TRLGRPOSettings = recipe().TRLGRPOSettings
    cfg = load_config("trl_grpo", TRLGRPOSettings)
    assert cfg.algo == TRLGRPOSettings()
    args = TRLGRPOSettings(trainer_args={"top_k": 5, "log_completions": True}).grpo_config(tmp_path / "trl")
    assert (args.top_k, args.log_completions, args.output_dir) == (5, True, str(tmp_path / "trl"))
    assert (args.bf16, args.gradient_checkpointing, args.use_cpu, args.save_strategy) == (False, False, True, "no")
    assert args.report_to == [] and args.learning_rate == 1e-6 and args.num_generations == 8
    assert TRLGRPOSettings(save_steps=5).grpo_config(tmp_path / "trl").save_strategy == "steps"


@pytest.mark.parametrize(("argv", "match"), [
    (["--set", "trl_grpo.learnin_rate=1"], r"trl_grpo\.toml \(with --set\): trl_grpo\.learnin_rate: unknown key \(known keys: model, "),
    (["--set", "trl_grpo.num_generations=3"], r"per_device_train_batch_size \(8\) × gradient_accumulation_steps \(1\) = 8 "
                                              r"must be a multiple of num_generations \(3\)"),
    (["--set", 'trl_grpo.trainer_args={"top_kk": 5}'], r"trl_grpo\.trainer_args: .*'top_kk' is not a GRPOConfig field \(did you mean 'top_k'\?\)"),
    (["--set", 'trl_grpo.trainer_args={"output_dir": "x"}'], r"'output_dir' is set by the recipe \(the run directory's trl/\)"),
    (["--set", 'trl_grpo.trainer_args={"beta": 0.1}'], r"'beta' is a field of trl_grpo itself: set trl_grpo\.beta"),
    (["--set", "trl_grpo.prompt_format=text"], r"trl_grpo\.prompt_format: .*'auto', 'chat' or 'plain'"),
    (["--set", "trl_grpo.lr_scheduler_type=cosin"], r"trl_grpo: GRPOConfig rejects these settings, cosin is not a valid SchedulerType"),
    ([], r"no model: pass --model DIR .* python -m baselines\.tiny_lm DIR builds a tiny one"),
    (["--model", "{tmp}"], r"--model .*: not a model folder \(no config\.json in it\)"),
    (["--model", "{tmp}/nope"], r"--model .*/nope: no such folder"),
    (["--model", "{tmp}/typeless"], r"--model .*/typeless: Unrecognized model in .*typeless.*model_type"),
], ids=["unknown-key", "groups", "trainer-args-unknown", "trainer-args-reserved", "trainer-args-own", "format",
        "scheduler", "no-model", "not-a-model", "no-folder", "no-model-type"])  # fmt: skip
def test_bad_configuration_is_a_precise_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              argv: list[str], match: str) -> None:  # fmt: skip
    out = tmp_path / "run"
    (tmp_path / "typeless").mkdir()
    (tmp_path / "typeless" / "config.json").write_text("{}")
    assert recipe().main([a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(match, err), err
    assert not out.exists()  # nothing was written


def _curve(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_two_grpo_steps_through_the_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from code_env.logtools import replay, stats

    main, CURVE = recipe().main, recipe().CURVE

    model_dir = build_tiny_lm(tmp_path / "model", default_corpus() + [t.reference_solution for t in TINY])
    write_tasks(TINY, tmp_path / "tasks.jsonl")
    argv = ["--model", str(model_dir), "--set", f"env.task_set={tmp_path / 'tasks.jsonl'}", "--set", "env.backend=process",
            "--set", "env.log_every=3", "--set", "trl_grpo.max_steps=2", "--set", "trl_grpo.num_generations=4",
            "--set", "trl_grpo.per_device_train_batch_size=8", "--set", "trl_grpo.max_completion_length=2",
            "--set", "trl_grpo.learning_rate=0.01", "--set", "trl_grpo.beta=0.04"]  # fmt: skip
    run = tmp_path / "run"
    assert main([*argv, "--out", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "reward_mean" in printed and f"2 steps on 2 tasks of {tmp_path / 'tasks.jsonl'}; run: {run}" in printed

    rows = _curve(run / "curve.csv")
    assert [r["step"] for r in rows] == ["1", "2"]  # two optimisation steps, one curve row each
    assert list(rows[0]) == ["step", *CURVE]
    for r in rows:
        assert all(math.isfinite(float(r[c])) for c in CURVE), r  # kl too: beta > 0
        assert -1.0 <= float(r["reward_mean"]) <= 1.0 and 0.0 <= float(r["pass_rate"]) <= 1.0
    assert any(float(r["reward_std"]) > 0 for r in rows)  # the rewards told the completions apart
    assert any(float(r["grad_norm"]) > 0 for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and math.isfinite(summary["train_loss"]) and summary["prompt_format"] == "chat"
    config = json.loads((run / "config.json").read_text())
    assert config["trl_grpo"]["model"] == str(model_dir) and config["trl_grpo"]["max_steps"] == 2
    assert config["env"]["task_set"] == str(tmp_path / "tasks.jsonl")
    assert (run / "meta.json").is_file() and (run / "curve.png").is_file() and list((run / "tb").glob("events.*"))

    # the rewards came from our TRLReward: its trajectory log holds every third completion,
    # graded in the sandbox, and re-judging them gives the same rewards
    st = stats(run / "trajectories")
    assert st.episodes == 2 * 8 // 3 + 1 and st.per_task.keys() == {t.problem_id for t in TINY}
    report = replay(run / "trajectories")
    assert report.ok and report.steps == st.episodes, report.summary()
    from code_env.trajectory import read_log

    from ._records import assert_complete

    records = list(read_log(run / "trajectories"))
    for rec in records:  # the whole record: TRL's advantage and step, the templated prompt, the cut
        assert_complete(rec, trainer="trl")
        assert rec["step"] in (1, 2) and rec["prompt"] != rec["task"]["prompt"] and rec["completion_tokens"] <= 2
    assert {r["step"] for r in records} == {1, 2} and any(r["completion_truncated"] for r in records)

    # the parameters changed, and the trained model loads offline like the initial one
    initial, _ = _load(model_dir)
    trained, tok = _load(run / "checkpoints" / "final")
    before, after = initial.state_dict(), trained.state_dict()
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "GRPO changed no parameter"
    assert tok.chat_template == CHAT_TEMPLATE

    # the same config and seed: the same curve, to the last digit, and the same weights
    again = tmp_path / "again"
    assert main([*argv, "--out", str(again)]) == 0
    assert (again / "curve.csv").read_text() == (run / "curve.csv").read_text()
    trained_again, _ = _load(again / "checkpoints" / "final")
    assert all(torch.equal(v, trained_again.state_dict()[k]) for k, v in after.items())
