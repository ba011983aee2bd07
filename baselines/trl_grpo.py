"""TRL recipe: ``trl.GRPOTrainer`` trained on code-env's sandboxed reward, ``code_env.TRLReward``.

The whole recipe is four lines of TRL (see ``train`` below)::

    tasks = registry.load("builtin")                     # or humaneval, synthetic:arith, a JSONL file
    trainer = GRPOTrainer(model="path/to/model", args=GRPOConfig(...),
                          train_dataset=code_env.trl_dataset(tasks, format=prompt_format(model)),
                          reward_funcs=code_env.TRLReward(tasks))
    trainer.train()

One row per task (the prompt and its ``problem_id``); every completion is graded in the sandbox
against the task's public and hidden tests (the reward ladder of ``reward.json``), a group of
``num_generations`` completions per prompt at once. ``prompt_format="auto"`` gives a chat model
(a tokenizer with a chat template) a conversation and a base model a prompt to continue.

Run it::

    python -m baselines.tiny_lm runs/tiny-lm            # a tiny random model, if you have none
    python -m baselines.trl_grpo --model runs/tiny-lm --set trl_grpo.max_steps=2
    python -m baselines.trl_grpo --model ~/models/Qwen2.5-0.5B-Instruct --set env.task_set=humaneval

Configs: ``baselines/configs/env.json`` (the tasks: ``task_set``, and ``n_tasks``, ``task_seed``,
``difficulty`` for a generated set; ``backend``), ``reward.json``, ``trl_grpo.toml`` (the
``GRPOConfig`` fields by TRL's names, any other one under ``trainer_args``).

The run directory (``runs/trl-grpo-<timestamp>/`` or ``--out``): ``config.json``, ``meta.json``,
``curve.csv`` (one row per logged step, from TRL's ``log_history``: ``reward_mean``,
``reward_std``, ``pass_rate`` = share of completions that passed every test, ``syntax_error_rate``,
``sandbox_error_rate``, ``loss``, ``grad_norm``, ``kl`` (with ``beta`` > 0), ``entropy``,
``completion_length``, ``learning_rate``), ``timing.csv`` (``step_time_s``), ``tb/`` (every
metric TRL logs, under ``train/``, and the curve), ``trajectories/`` (every ``env.log_every``-th
completion's whole record, ``code_env.records``: the prompt through the chat template, the
completion and whether ``max_completion_length`` cut it, the program, the raw runs, the timed
states, the reward and its breakdown, TRL's advantage for it and the step of its curve row;
``code-env stats``, ``audit`` and ``replay`` read it), ``trl/`` (TRL's ``output_dir``: its
checkpoints when ``save_steps`` > 0, its completion tables with ``log_completions``),
``checkpoints/final/`` (the trained model and tokenizer, loadable with ``from_pretrained``),
``summary.json`` and ``curve.png``.

Needs the extras ``trl`` and ``baselines`` (transformers, trl, datasets, accelerate, tensorboard,
matplotlib) and a torch build.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from baselines.common import (
    ConfigError,
    Run,
    RunConfig,
    add_run_args,
    format_table,
    load_config,
    seed_everything,
)
from baselines.guards import warn_kl_off

try:
    from transformers import TrainerCallback
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the installed extras
    raise ModuleNotFoundError("baselines.trl_grpo needs transformers and trl: pip install 'code-env[trl,baselines]'",
                              name=exc.name) from exc  # fmt: skip

NAME = "trl_grpo"

# TRL's log_history key -> our curve column (deterministic on CPU with a fixed seed)
CURVE = {
    "reward_mean": "rewards/code_env_reward/mean",
    "reward_std": "rewards/code_env_reward/std",
    "pass_rate": "code_env/solved",
    "syntax_error_rate": "code_env/syntax_error",
    "sandbox_error_rate": "code_env/sandbox_error",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "kl": "kl",
    "entropy": "entropy",
    "completion_length": "completions/mean_length",
    "learning_rate": "learning_rate",
}
TIMING = {"step_time_s": "step_time"}

# fields of TRLGRPOSettings that are the recipe's own, not GRPOConfig's
_OWN = {"model", "prompt_format", "system_prompt", "join_prompt", "threads", "trainer_args"}


class TRLGRPOSettings(BaseModel):
    """``trl_grpo.toml``: the model, the prompt format, and the ``GRPOConfig`` fields people set (TRL's names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = Field(None, description="the policy: a folder with a Hugging Face causal LM and its tokenizer, or a hub id (--model overrides)")
    prompt_format: Literal["auto", "chat", "plain"] = Field("auto", description="chat: a conversation; plain: a prompt a base model continues; auto: chat when the tokenizer has a chat template")
    system_prompt: str | None = Field(None, description="a system message for chat prompts")
    join_prompt: Literal["auto"] | bool = Field("auto", description="grade the prompt followed by the completion (see code_env.TRLReward)")
    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate")
    num_generations: int = Field(8, ge=2, description="completions per prompt (the GRPO group)")
    per_device_train_batch_size: int = Field(8, ge=1, description="completions per device per step (a multiple of num_generations together with gradient_accumulation_steps)")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-batches per optimisation step")
    max_completion_length: int = Field(256, ge=1, description="tokens per completion at most")
    max_steps: int = Field(100, ge=1, description="optimisation steps")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    # 0.04: the beta of the GRPO paper (DeepSeekMath) and TRL's own default until TRL turned KL off
    # by default; a KL anchor to the reference model keeps a small run from drifting into degenerate
    # text while its groups still tell completions apart (0 warns: baselines.guards.warn_kl_off)
    beta: float = Field(0.04, ge=0, description="KL coefficient to the reference model (0: no reference model, no KL "
                        "penalty: a warning at the start of the run)")  # fmt: skip
    epsilon: float = Field(0.2, gt=0, description="clipping range of the policy ratio")
    num_iterations: int = Field(1, ge=1, description="optimisation passes per generated batch")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "vespo", "luspo"] = Field("dapo", description="TRL's loss normalisation")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="advantage scaling: by the group's std, the batch's, or none")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    lr_scheduler_type: str = Field("linear", description="learning-rate schedule (transformers' names)")
    warmup_steps: float = Field(0, ge=0, description="warm-up steps (a float < 1: a fraction of max_steps)")
    logging_steps: float = Field(1, gt=0, description="log (a curve row) every N steps")
    save_steps: int = Field(0, ge=0, description="save a checkpoint into trl/ every N steps (0: only the final model)")
    bf16: bool = Field(False, description="bfloat16 mixed precision (TRL's default is on; off for exact CPU runs)")
    gradient_checkpointing: bool = Field(False, description="recompute activations to save memory (TRL's default is on)")
    use_cpu: bool = Field(True, description="train on the CPU even when a GPU is present")
    seed: int = Field(0, description="seed of torch, sampling and data order")
    threads: int = Field(1, ge=1, description="torch intra-op threads")
    trainer_args: dict[str, Any] = Field(default_factory=dict, description="any other GRPOConfig field, by its TRL name")

    @field_validator("trainer_args")
    @classmethod
    def _known_trainer_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        names = _grpo_fields()
        for key in value:
            if key in cls.model_fields and key not in _OWN:
                raise ValueError(f"{key!r} is a field of trl_grpo itself: set trl_grpo.{key}")
            if key in _RESERVED:
                raise ValueError(f"{key!r} is set by the recipe ({_RESERVED[key]})")
            if key not in names:
                close = difflib.get_close_matches(key, sorted(names), n=1)
                raise ValueError(f"{key!r} is not a GRPOConfig field" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return value

    @model_validator(mode="after")
    def _groups_fit(self) -> TRLGRPOSettings:
        batch = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if batch % self.num_generations:
            raise ValueError(f"per_device_train_batch_size ({self.per_device_train_batch_size}) × gradient_accumulation_steps "
                             f"({self.gradient_accumulation_steps}) = {batch} must be a multiple of num_generations "
                             f"({self.num_generations}), as each step generates whole groups")  # fmt: skip
        try:
            self.grpo_config(Path("trl"))  # TRL's own checks (a scheduler's name, ...), before a run starts
        except (ValueError, TypeError) as exc:
            raise ValueError(f"GRPOConfig rejects these settings, {exc}") from None
        return self

    def grpo_config(self, output_dir: Path) -> Any:
        """The ``trl.GRPOConfig`` of these settings, writing into ``output_dir``."""
        from trl import GRPOConfig

        fields = self.model_dump(exclude=_OWN | {"save_steps"})
        save = {"save_strategy": "steps", "save_steps": self.save_steps} if self.save_steps else {"save_strategy": "no"}
        return GRPOConfig(output_dir=str(output_dir), report_to="none", **save, **fields, **self.trainer_args)


_RESERVED = {"output_dir": "the run directory's trl/", "report_to": "TensorBoard in tb/", "save_strategy": "from save_steps"}


def _grpo_fields() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_model(model: str | None) -> str:
    """The model to load: an existing folder with a ``config.json``, or (not a path) a hub id."""
    if model is None:
        raise ConfigError("no model: pass --model DIR (a folder with a Hugging Face causal LM and its tokenizer) or "
                          "set trl_grpo.model; python -m baselines.tiny_lm DIR builds a tiny one")  # fmt: skip
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"--model {model}: not a model folder (no config.json in it)")
        from transformers import AutoConfig

        try:
            AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--model {model}: {exc}") from None
        return str(path)
    if model.startswith((".", "/", "~")) or not _HUB_ID.match(model):
        raise ConfigError(f"--model {model}: no such folder")
    return model  # a hub id: transformers downloads it (unless HF_HUB_OFFLINE)


def curve_row(logs: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, float | None]] | None:
    """The curve metrics and timing of one of TRL's training logs (``None`` for another log: the
    end-of-training summary, an evaluation)."""
    if CURVE["reward_mean"] not in logs:
        return None
    return {col: _num(logs.get(key)) for col, key in CURVE.items()}, {col: _num(logs.get(key)) for col, key in TIMING.items()}


class _CurveLogger(TrainerCallback):
    """A ``transformers.TrainerCallback``: each training log of TRL becomes a row of the run's curve
    as it happens (the same dicts end up in ``trainer.state.log_history``)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.rows: list[dict[str, float | None]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        row = curve_row(logs or {})
        if row is not None:
            self.run.log(state.global_step, row[0], timing=row[1])
            self.rows.append(row[0])


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def train(cfg: RunConfig, settings: TRLGRPOSettings, model: str, run: Run) -> dict[str, Any]:
    """The recipe: the tasks, TRLReward, GRPOTrainer; the curve into ``run``. Returns the summary."""
    from transformers.integrations import TensorBoardCallback
    from trl import GRPOTrainer

    import code_env

    warn_kl_off("trl_grpo.beta", settings.beta, "TRL's GRPOTrainer")
    tasks = cfg.env.train_tasks()
    curve = _CurveLogger(run)
    fmt = code_env.trl.prompt_format(model) if settings.prompt_format == "auto" else settings.prompt_format
    reward = code_env.TRLReward(tasks, sandbox=cfg.env.runner(), config=cfg.reward,
                                join_prompt=settings.join_prompt, log_dir=run.trajectories,
                                log_every=cfg.env.log_every, log_max_bytes=cfg.env.log_max_bytes,
                                log_text_bytes=cfg.env.log_text_bytes)  # fmt: skip
    dataset = code_env.trl_dataset(tasks, format=fmt, system_prompt=settings.system_prompt)
    try:
        trainer = GRPOTrainer(
            model=model,
            args=settings.grpo_config(run.path / "trl"),
            train_dataset=dataset,
            reward_funcs=reward,
            callbacks=[curve, TensorBoardCallback(run.tensorboard)],  # TRL's metrics under train/ in tb/
        )
    except (OSError, ValueError) as exc:  # a folder that is no causal LM, settings TRL refuses for this model
        raise ConfigError(f"--model {model}: GRPOTrainer cannot train it: {exc}") from None
    reward.attach(trainer)  # the records get TRL's advantages, the step, the templated prompt, the cut
    try:
        result = trainer.train()
    finally:
        reward.close()
    trainer.save_model(str(run.checkpoints / "final"))

    rows = curve.rows
    return {"model": model, "prompt_format": fmt, "task_set": cfg.env.task_set, "n_tasks": len(tasks),
            "steps": result.global_step, "train_loss": result.training_loss,
            "final_model": str(run.checkpoints / "final"), "logged_steps": len(rows),
            "start": rows[0] if rows else {}, "end": rows[-1] if rows else {}}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.trl_grpo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a folder with a Hugging Face causal LM and its tokenizer (or a hub id)")
    add_run_args(parser)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(NAME, TRLGRPOSettings, config_dir=args.config_dir, overrides=args.set)
        settings = cfg.algo
        assert isinstance(settings, TRLGRPOSettings)
        model = resolve_model(args.model if args.model is not None else settings.model)
        if args.model is not None:  # the run's config.json records the model it trained
            settings = settings.model_copy(update={"model": args.model})
            cfg = cfg.model_copy(update={"algo": settings})
        seed_everything(settings.seed, threads=settings.threads)
        run = Run.create((args.name or NAME).replace("_", "-"), cfg, out=args.out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with run:
        try:
            summary = train(cfg, settings, model, run)
        except ConfigError as exc:
            print(f"error: {exc} (run directory: {run.path})", file=sys.stderr)
            return 2
        run.write_summary(summary)
        run.plot(["reward_mean", "pass_rate"])
    rows = [[k, summary["start"].get(k), summary["end"].get(k)] for k in ("reward_mean", "pass_rate", "syntax_error_rate")]
    rows = [[k, _show(a), _show(b)] for k, a, b in rows]
    print(format_table(["metric", "first step", "last step"], rows))
    steps = summary["steps"]
    print(f"{steps} step{'' if steps == 1 else 's'} on {summary['n_tasks']} tasks of {summary['task_set']}; run: {run.path}")
    return 0


def _show(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.3f}"


if __name__ == "__main__":
    sys.exit(main())
