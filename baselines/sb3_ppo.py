"""Stable-Baselines3 PPO on ``CodeExecTokens-v0``: an MLP policy writes ``f(x)`` one token at a
time, the sandbox runs every finished program on the task's tests, and the graded reward trains it.

Run it as ``python -m baselines.sb3_ppo [--set ppo.learning_rate=1e-4] [--out DIR]``. Configured by
``baselines/configs/env.json`` (the training pool: ``difficulty``, ``n_tasks``, ``task_seed``,
``max_tokens``; ``n_envs`` sub-envs, sub-env i seeded ``seed + i``; the held-out pool:
``eval_task_seed``, ``n_eval_tasks``, ``eval_difficulty``), ``reward.json`` and ``ppo.toml``
(``PPOSettings``: the PPO hyper-parameters as Stable-Baselines3 names them, and the run's own).

What a run does:

1. evaluates the untrained policy deterministically on the held-out tasks (the "start");
2. trains ``PPO("MlpPolicy")`` for ``total_timesteps`` (whole rollouts of ``n_steps x n_envs``)
   on a ``DummyVecEnv`` or ``SubprocVecEnv`` of ``CodeExecTokens-v0``, with a progress bar, a
   row of ``curve.csv`` every ``log_interval`` rollouts, a held-out evaluation every
   ``eval_interval`` rows, checkpoints, and the sub-envs' trajectory logs (every
   ``env.log_every``-th episode of each);
3. saves the model, then evaluates it deterministically (``deterministic=True``) and a uniformly
   random policy on the same held-out tasks, prints both and a summary table, and writes
   ``summary.json`` and ``curve.png``.

``curve.csv`` columns (deterministic: the same config and seed give the same file, to the last
digit, on CPU; whichever vector env runs the sub-envs): ``step`` (environment steps so far),
``rollouts``, ``episodes`` (finished so far), ``reward_mean``, ``pass_rate`` (every public and
hidden test passed), ``public_pass_rate`` (every public test passed), ``syntax_error_rate`` and
``tokens_mean`` of the episodes that finished in the row's rollouts (``sandbox_errors``: episodes
the sandbox failed, never scored), the last update's ``entropy``, ``policy_loss``,
``value_loss``, ``approx_kl``, ``clip_fraction``, ``explained_variance``, and the held-out
``eval_reward`` and ``eval_pass_rate`` of the deterministic policy (empty between evaluations).
``timing.csv`` holds the wall-clock columns (``steps_per_s``, ``episodes_per_s``). ``ent_coef``
is the entropy weight of the row's update (annealed: ``ent_coef`` -> ``ent_coef_final`` over the
first ``ent_decay_fraction`` of training).

Why the defaults are what they are (``ppo.toml`` says it too): each finished program costs one
sandboxed grade, about 27 ms of CPU, so 10 minutes on 2 cores buy about 35,000 episodes. A random
writer makes a syntax error (-1) 9 times in 10, while any string of digits is a valid constant
(0): with SB3's default PPO the policy settles on constants within 20,000 steps and never writes
``x`` again. A large entropy bonus annealed over the first half, 20 epochs per rollout and a
larger step size keep programs with ``x`` alive until the policy has learnt which continuations
compile, then use the rare programs that pass to the full. The length budget matters as much:
with ``env.max_tokens = 3`` (every difficulty-1 task has a 3-token answer such as ``x * x``,
``x + 7`` or ``2 * x``) PPO finds ``x * x`` and ``x * 2`` within 100,000 steps; with 16 tokens it
does not find ``x`` at all in that budget. What it reaches depends on the seed: the square and the
double families (32.5% of the held-out tasks) are learnt in some runs, only one of them in others.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psutil
import torch
from pydantic import BaseModel, ConfigDict, Field
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv
from tqdm import tqdm

from baselines.common import (
    ConfigError,
    Run,
    RunConfig,
    add_run_args,
    compare_rows,
    format_table,
    load_config,
    read_curve,
    seed_everything,
    text_plot,
)
from code_env.reward import RewardConfig
from code_env.tokens import VOCAB, CodeExecTokensEnv

NAME = "ppo"
REFERENCE = Path(__file__).resolve().parent / "reference" / "ppo.csv"
# the learner's float columns of curve.csv: the only ones a CPU's arithmetic could move (the pin
# keeps them identical on x86-64; compare_rows names any difference elsewhere)
LEARNER_FLOATS = ("entropy", "policy_loss", "value_loss", "approx_kl", "clip_fraction", "explained_variance")
TARGET_MARGIN = 0.5  # the trained policy's mean reward at least this much above the random policy's
TARGET_PASS_RATE = 0.30  # and its hidden-test pass rate at least this, on the held-out tasks


class PPOSettings(BaseModel):
    """``ppo.toml``: Stable-Baselines3's PPO hyper-parameters (its names), and the run's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size")
    n_steps: int = Field(128, ge=1, description="steps per sub-env per rollout; a rollout is n_steps x env.n_envs steps")
    batch_size: int = Field(256, ge=2, description="minibatch size; it must divide the rollout (n_steps x env.n_envs)")
    n_epochs: int = Field(20, ge=1, description="passes over each rollout (many: the rare successes are used to the full)")
    gamma: float = Field(1.0, ge=0, le=1, description="discount (the reward comes at an episode's last token)")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    clip_range: float = Field(0.3, gt=0, le=1, description="PPO's policy ratio clip")
    ent_coef: float = Field(0.5, ge=0, description="entropy bonus weight (at the start, when ent_coef_final is set)")
    ent_coef_final: float | None = Field(0.05, ge=0, description="anneal ent_coef linearly to this value (None: constant)")
    ent_decay_fraction: float = Field(0.5, gt=0, le=1, description="fraction of total_timesteps over which ent_coef anneals")
    vf_coef: float = Field(0.5, ge=0, description="value loss weight")
    max_grad_norm: float = Field(0.5, gt=0, description="gradient clipping (global L2 norm)")
    normalize_advantage: bool = Field(True, description="normalise the advantages of each minibatch")
    target_kl: float | None = Field(None, gt=0, description="stop an update's epochs early past this KL (None: never)")
    net_arch: list[int] = Field(default_factory=lambda: [64, 64], description="hidden layers of the policy and of the value network (separate)")
    activation: Literal["tanh", "relu"] = Field("tanh", description="activation of the hidden layers")
    ortho_init: bool = Field(True, description="orthogonal initialisation (SB3's default)")
    total_timesteps: int = Field(100_000, ge=1, description="environment steps to train (rounded up to whole rollouts)")
    log_interval: int = Field(1, ge=1, description="rollouts per curve row (and per dump of SB3's own logger)")
    eval_interval: int = Field(20, ge=0, description="held-out evaluation every N curve rows (0: only before and after training)")
    random_samples: int = Field(2, ge=1, le=1000, description="episodes of the random policy per held-out task")
    checkpoint_interval: int = Field(50_000, ge=0, description="save a checkpoint every N environment steps (0: only the final model)")
    seed: int = Field(0, description="seed of the policy (torch), PPO's sampling and the random policy")
    threads: int = Field(1, ge=1, le=256, description="torch intra-op threads (1: reproducible to the last digit)")
    vec_env: Literal["dummy", "subproc"] = Field("dummy", description="DummyVecEnv (one process) or SubprocVecEnv (a process per sub-env)")


class EvalResult(BaseModel):
    """A policy on the held-out tasks: one episode per task (``samples`` per task for the random
    policy); episodes the sandbox failed are counted, not scored."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    episodes: int
    reward_mean: float
    pass_rate: float = Field(description="every public and hidden test passed")
    public_pass_rate: float = Field(description="every public test passed")
    syntax_error_rate: float
    tokens_mean: float
    sandbox_errors: int
    tiers: dict[str, int]
    problem_ids: list[str] = Field(description="the held-out tasks, in order")
    top_programs: list[tuple[str, int]] = Field(description="the most frequent expressions and their counts")


class PPOResult(BaseModel):
    """What ``train`` returns (``summary.json`` holds the same)."""

    model_config = ConfigDict(extra="forbid")

    run_dir: Path
    model_path: Path
    timesteps: int
    episodes: int
    start: EvalResult
    trained: EvalResult
    random: EvalResult
    wall_s: float
    cpu_s: float
    target_met: bool


# ------------------------------------------------------------------------------ environments


def _check(cfg: RunConfig) -> PPOSettings:
    """Reject what this baseline cannot honour, naming the key (``ConfigError``)."""
    algo = cfg.algo
    if not isinstance(algo, PPOSettings):
        raise TypeError(f"cfg.algo: expected PPOSettings, got {type(algo).__name__} (load_config('ppo', PPOSettings))")
    env = cfg.env
    if env.task_set != "synthetic:arith":
        raise ConfigError(f"env.task_set: CodeExecTokens-v0 writes programs for synthetic:arith only, got {env.task_set!r}")
    if env.max_turns != 1:
        raise ConfigError(f"env.max_turns: CodeExecTokens-v0 is single-turn (1), got {env.max_turns}")
    if env.eval_task_seed == env.task_seed and env.eval_difficulty == env.difficulty:
        raise ConfigError(f"env.eval_task_seed: the held-out tasks must not be the training tasks "
                          f"(both seed {env.task_seed}, difficulty {env.difficulty})")  # fmt: skip
    if env.sampling != "uniform":
        raise ConfigError(f"env.sampling: CodeExecTokens-v0 draws its tasks uniformly, got {env.sampling!r}")
    rollout = algo.n_steps * env.n_envs
    if rollout % algo.batch_size:
        raise ConfigError(f"ppo.batch_size: {algo.batch_size} does not divide a rollout of ppo.n_steps x env.n_envs "
                          f"= {algo.n_steps} x {env.n_envs} = {rollout} steps")  # fmt: skip
    return algo


def make_token_env(*, difficulty: int | None, n_tasks: int, task_seed: int, max_tokens: int, reward: RewardConfig,
                   backend: str, log_dir: Path | None = None, log_every: int = 1, executor: str = "local",
                   log_max_bytes: int, log_text_bytes: int, rollout: tuple[int, int] | None = None) -> Monitor:  # fmt: skip
    """One ``CodeExecTokens-v0`` sub-env in SB3's ``Monitor`` (module level: ``SubprocVecEnv``
    pickles it into its workers; each worker then makes its own sandbox, or connects to Ray).
    ``rollout``: PPO's ``(n_steps, n_envs)``, so that each record names its update's curve step."""
    env = CodeExecTokensEnv(difficulty=difficulty, n_tasks=n_tasks, task_seed=task_seed, max_tokens=max_tokens,
                            reward=reward, backend=backend, log_dir=log_dir, log_every=log_every,
                            executor=executor, rollout=rollout, log_max_bytes=log_max_bytes,
                            log_text_bytes=log_text_bytes)  # fmt: skip
    return Monitor(env)


def make_vec_env(cfg: RunConfig, log_dir: Path | None) -> VecEnv:
    """The training envs: ``env.n_envs`` sub-envs on the training pool, in the configured vector env."""
    algo, env = _check(cfg), cfg.env
    if env.executor == "ray" and env.ray_address:
        os.environ["RAY_ADDRESS"] = env.ray_address  # where every sub-env (and SubprocVecEnv's workers) connects
    make = functools.partial(make_token_env, difficulty=env.difficulty, n_tasks=env.n_tasks, task_seed=env.task_seed,
                             max_tokens=env.max_tokens, reward=cfg.reward, backend=env.backend, log_dir=log_dir,
                             log_every=env.log_every, executor=env.executor, log_max_bytes=env.log_max_bytes,
                             log_text_bytes=env.log_text_bytes, rollout=(algo.n_steps, env.n_envs))  # fmt: skip
    fns: list[Callable[[], Any]] = [make] * env.n_envs
    return DummyVecEnv(fns) if algo.vec_env == "dummy" else SubprocVecEnv(fns)


def heldout_env(cfg: RunConfig, log_dir: Path | None = None) -> CodeExecTokensEnv:
    """The held-out pool (``eval_task_seed``, ``n_eval_tasks``, ``eval_difficulty``: never trained on)."""
    env = cfg.env
    return CodeExecTokensEnv(difficulty=env.eval_difficulty, n_tasks=env.n_eval_tasks, task_seed=env.eval_task_seed,
                             max_tokens=env.max_tokens, reward=cfg.reward, backend=env.backend,
                             log_dir=log_dir, executor=env.executor, log_max_bytes=env.log_max_bytes,
                             log_text_bytes=env.log_text_bytes)  # fmt: skip


# -------------------------------------------------------------------------------- evaluation


Policy = Callable[[np.ndarray], int]


def evaluate(policy: Policy, env: CodeExecTokensEnv, *, name: str, samples: int = 1, progress: bool = False) -> EvalResult:
    """Run ``policy`` (observation -> token) for ``samples`` episodes on every task of ``env``'s
    pool, in order, through the env itself (so graded exactly as in training)."""
    rewards: list[float] = []
    tiers: Counter[str] = Counter()
    tokens: list[int] = []
    programs: Counter[str] = Counter()
    sandbox_errors = 0
    with tqdm(total=len(env.tasks) * samples, desc=f"eval {name}", unit="episode", file=sys.stderr,
              disable=None if progress else True, leave=False) as bar:  # fmt: skip
        for task in env.tasks:
            for _ in range(samples):
                obs, _ = env.reset(options={"problem_id": task.problem_id})
                while True:
                    obs, reward, terminated, truncated, info = env.step(policy(obs))
                    if terminated or truncated:
                        break
                bar.update()
                programs[info["expression"]] += 1
                if info["sandbox_error"]:
                    sandbox_errors += 1
                    continue
                rewards.append(float(reward))
                tiers[info["reward_breakdown"]["tier"]] += 1
                tokens.append(info["n_tokens"])
    n = len(rewards)
    return EvalResult(
        policy=name, episodes=n + sandbox_errors, reward_mean=_mean(rewards), pass_rate=tiers["all_tests"] / n if n else math.nan,
        public_pass_rate=(tiers["all_tests"] + tiers["all_public"]) / n if n else math.nan,
        syntax_error_rate=tiers["syntax_error"] / n if n else math.nan, tokens_mean=_mean(tokens),
        sandbox_errors=sandbox_errors, tiers=dict(sorted(tiers.items())), problem_ids=[t.problem_id for t in env.tasks],
        top_programs=programs.most_common(5),
    )  # fmt: skip


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def model_policy(model: Any) -> Policy:
    """The trained policy's most likely token (``deterministic=True``)."""

    def act(obs: np.ndarray) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    return act


def random_policy(seed: int) -> Policy:
    """A uniformly random token, from its own seeded generator."""
    rng = np.random.default_rng(seed)
    return lambda obs: int(rng.integers(0, len(VOCAB)))


# ------------------------------------------------------------------------------------ training


def _cpu_s() -> float:
    """CPU seconds of this process and of every process under it (the sandbox's workers and the
    runs they forked, SubprocVecEnv's forkserver and its workers), living or reaped."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + ru.ru_utime + ru.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


class _Rows(BaseCallback):
    """The SB3 callback behind ``curve.csv``, the checkpoints, the progress bar and the periodic
    held-out evaluation. A row is written once the update that follows its rollouts is done (at
    the next rollout's start, or at the end of training): its losses are that update's."""

    def __init__(self, run: Run, algo: PPOSettings, total: int, evaluate_now: Callable[[], EvalResult],
                 progress: bool, max_rows: int | None = None) -> None:  # fmt: skip
        super().__init__()
        self.run, self.algo, self.total, self.evaluate_now, self.progress = run, algo, total, evaluate_now, progress
        self.max_rows = max_rows
        self.rollouts = self.rows = self.episodes = 0
        self.pending = False
        self.window: list[tuple[float | None, str, int]] = []  # (reward, tier, tokens) per finished episode
        self.next_checkpoint = algo.checkpoint_interval or math.inf
        self.bar: Any = None
        self.clock = (time.monotonic(), 0, 0)  # when the last row was written, its step and episode counts
        self.last: dict[str, Any] = {}

    def _on_training_start(self) -> None:
        self.bar = tqdm(total=self.total, desc="train ppo", unit="step", file=sys.stderr,
                        disable=None if self.progress else True, dynamic_ncols=True)  # fmt: skip

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done:
                self.episodes += 1
                failed = info.get("sandbox_error")
                tier = "sandbox_error" if failed else info["reward_breakdown"]["tier"]
                # the return as Monitor sums it, in Python floats: the vector envs' reward arrays
                # differ in dtype (DummyVecEnv float32, SubprocVecEnv float64)
                self.window.append((None if failed else float(info["episode"]["r"]), tier, int(info["n_tokens"])))
        self.bar.update(self.training_env.num_envs)
        return not self.stopped

    @property
    def stopped(self) -> bool:
        """``max_rows`` rows written: stop before the next rollout (a prefix of the full run)."""
        return self.max_rows is not None and self.rows >= self.max_rows

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        self.pending = self.rollouts % self.algo.log_interval == 0
        if self.model.num_timesteps >= self.next_checkpoint:
            self.model.save(self.run.checkpoints / f"ppo_{self.model.num_timesteps}_steps.zip")
            while self.next_checkpoint <= self.model.num_timesteps:
                self.next_checkpoint += self.algo.checkpoint_interval

    def _on_rollout_start(self) -> None:
        if self.pending:
            self.write_row()
        assert isinstance(self.model, PPO)
        self.model.ent_coef = entropy_coefficient(self.algo, self.model.num_timesteps, self.total)

    def _on_training_end(self) -> None:
        if (self.pending or self.window) and not self.stopped:
            self.write_row()
        self.bar.close()

    def write_row(self) -> None:
        self.pending = False
        self.rows += 1
        scored = [(r, tier, n) for r, tier, n in self.window if r is not None]
        k = len(scored)
        count = Counter(tier for _, tier, _ in scored)
        train = self.model.logger.name_to_value
        evaluated = self.algo.eval_interval and self.rows % self.algo.eval_interval == 0
        ev = self.evaluate_now() if evaluated else None
        self.last = {
            "rollouts": self.rollouts,
            "episodes": self.episodes,
            "reward_mean": _mean([r for r, _, _ in scored if r is not None]),
            "pass_rate": count["all_tests"] / k if k else math.nan,
            "public_pass_rate": (count["all_tests"] + count["all_public"]) / k if k else math.nan,
            "syntax_error_rate": count["syntax_error"] / k if k else math.nan,
            "tokens_mean": _mean([n for _, _, n in scored]),
            "sandbox_errors": len(self.window) - k,
            "entropy": -float(train["train/entropy_loss"]) if "train/entropy_loss" in train else None,
            "policy_loss": _float(train.get("train/policy_gradient_loss")),
            "value_loss": _float(train.get("train/value_loss")),
            "approx_kl": _float(train.get("train/approx_kl")),
            "clip_fraction": _float(train.get("train/clip_fraction")),
            "explained_variance": _float(train.get("train/explained_variance")),
            "eval_reward": ev.reward_mean if ev else None,
            "eval_pass_rate": ev.pass_rate if ev else None,
        }
        now, step0, episodes0 = self.clock
        wall = max(time.monotonic() - now, 1e-9)
        steps = self.model.num_timesteps
        self.run.log(steps, self.last, timing={"steps_per_s": round((steps - step0) / wall, 3),
                                               "episodes_per_s": round((self.episodes - episodes0) / wall, 3)})  # fmt: skip
        self.clock = (time.monotonic(), steps, self.episodes)
        self.window = []
        postfix = {"reward": f"{self.last['reward_mean']:.3f}", "pass": f"{self.last['pass_rate']:.1%}"}
        if ev:
            postfix["eval_pass"] = f"{ev.pass_rate:.1%}"
        self.bar.set_postfix(postfix, refresh=False)



class KLToInitial(BaseCallback):
    """KL from the policy to a frozen copy of its initial self, after every update, beside SB3's
    step-to-step ``approx_kl``: how far the whole run has moved, which ``approx_kl`` (one update's
    move, and all PPO's clip bounds) never shows. ``KL(current || initial)`` of the action
    distributions, exact for the categorical policy, averaged over the observations of the rollout
    the update learnt from (kept when the rollout ends: SB3's buffer makes new arrays on reset).
    Written to SB3's logger (``train/kl_initial`` in ``sb3/progress.csv``), to TensorBoard
    (``kl_initial``, at the curve row's step) and to the run's ``guards.csv`` (``step``,
    ``kl_initial``, ``approx_kl``: deterministic, like ``curve.csv``). Not a column of
    ``curve.csv``: that file is compared column by column with the reference curve. Evaluating
    draws no random numbers, so the curve is the same with it as without."""

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run
        self.initial: Any = None
        self.observations: np.ndarray | None = None
        self.values: list[tuple[int, float]] = []
        self._csv: Any = None

    def _on_training_start(self) -> None:
        import copy

        from baselines.common import _Csv

        self.initial = copy.deepcopy(self.model.policy)
        self.initial.set_training_mode(False)
        self._csv = _Csv(self.run.path / "guards.csv")

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        assert isinstance(self.model, PPO)
        self.observations = np.asarray(self.model.rollout_buffer.observations)

    def _on_rollout_start(self) -> None:
        self._measure()

    def _on_training_end(self) -> None:
        self._measure()
        if self._csv is not None:
            self._csv.close()

    def kl(self, observations: np.ndarray) -> float:
        """Mean ``KL(current || initial)`` over ``observations`` (any leading shape)."""
        from stable_baselines3.common.utils import obs_as_tensor

        policy: Any = self.model.policy
        shape = policy.observation_space.shape or ()
        obs = obs_as_tensor(observations.reshape(-1, *shape), policy.device)
        with torch.no_grad():
            now, then = policy.get_distribution(obs).distribution, self.initial.get_distribution(obs).distribution
            return max(0.0, float(torch.distributions.kl_divergence(now, then).mean()))  # (rounding: -1e-10)

    def _measure(self) -> None:
        if self.observations is None:  # no update since the last measure
            return
        value, self.observations = self.kl(self.observations), None
        step = int(self.model.num_timesteps)
        approx = self.model.logger.name_to_value.get("train/approx_kl")
        self.model.logger.record("train/kl_initial", value)
        self.run.tensorboard.add_scalar("kl_initial", value, step)
        self._csv.write({"step": step, "kl_initial": value, "approx_kl": None if approx is None else float(approx)})
        self.values.append((step, value))


def entropy_coefficient(algo: PPOSettings, step: int, total: int) -> float:
    """``ent_coef`` at environment step ``step`` of ``total``: linear from ``ent_coef`` to
    ``ent_coef_final`` over the first ``ent_decay_fraction`` of training, then constant."""
    if algo.ent_coef_final is None:
        return algo.ent_coef
    done = min(1.0, step / (algo.ent_decay_fraction * total))
    return algo.ent_coef + (algo.ent_coef_final - algo.ent_coef) * done


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def train(cfg: RunConfig, run: Run, *, progress: bool = True, max_rows: int | None = None) -> PPOResult:
    """Train PPO as configured, into ``run``'s directory; evaluate the untrained, the trained and a
    uniformly random policy on the held-out tasks and return the three (``report`` prints them).
    The final evaluations' trajectories go to ``trajectories/heldout-trained`` and
    ``trajectories/heldout-random`` (``code-env replay`` re-judges the headline numbers).
    ``max_rows`` stops after that many rows of ``curve.csv``: the exact prefix of the full run
    (the schedules still span ``total_timesteps``), for checking a reference curve quickly."""
    algo = _check(cfg)
    started, cpu0 = time.monotonic(), _cpu_s()
    seed_everything(algo.seed, threads=algo.threads)
    heldout = heldout_env(cfg)
    try:
        venv = make_vec_env(cfg, run.trajectories)
        try:
            model, start, episodes = _learn(cfg, run, venv, heldout, progress, max_rows)
        finally:
            venv.close()
    finally:
        heldout.close()
    model_path = run.checkpoints / "ppo_final.zip"
    model.save(model_path)
    evaluations = []
    for name, policy, samples in (("trained", model_policy(model), 1), ("random", random_policy(algo.seed), algo.random_samples)):
        env = heldout_env(cfg, log_dir=run.trajectories / f"heldout-{name}")
        try:
            evaluations.append(evaluate(policy, env, name=name, samples=samples, progress=progress))
        finally:
            env.close()
    trained, rand = evaluations
    wall, cpu = time.monotonic() - started, _cpu_s() - cpu0
    met = trained.reward_mean >= rand.reward_mean + TARGET_MARGIN and trained.pass_rate >= TARGET_PASS_RATE
    result = PPOResult(run_dir=run.path, model_path=model_path, timesteps=int(model.num_timesteps), episodes=episodes,
                       start=start, trained=trained, random=rand, wall_s=round(wall, 1), cpu_s=round(cpu, 1),
                       target_met=met)  # fmt: skip
    run.write_summary(result.model_dump(mode="json"))
    run.plot(["reward_mean", "pass_rate", "eval_pass_rate"], reference=REFERENCE if REFERENCE.exists() else None)
    return result


def _learn(cfg: RunConfig, run: Run, venv: VecEnv, heldout: CodeExecTokensEnv, progress: bool,
           max_rows: int | None = None) -> tuple[PPO, EvalResult, int]:  # fmt: skip
    """The model, its held-out evaluation before training, and the episodes it trained on."""
    algo = _check(cfg)
    if venv.observation_space.shape != heldout.observation_space.shape:
        raise ConfigError(f"the held-out tasks' observations {heldout.observation_space.shape} differ from the "
                          f"training tasks' {venv.observation_space.shape}: they show a different number of examples")  # fmt: skip
    model = PPO(
        "MlpPolicy", venv, learning_rate=algo.learning_rate, n_steps=algo.n_steps, batch_size=algo.batch_size,
        n_epochs=algo.n_epochs, gamma=algo.gamma, gae_lambda=algo.gae_lambda, clip_range=algo.clip_range,
        ent_coef=algo.ent_coef, vf_coef=algo.vf_coef, max_grad_norm=algo.max_grad_norm,
        normalize_advantage=algo.normalize_advantage, target_kl=algo.target_kl, seed=algo.seed, device="cpu",
        policy_kwargs={"net_arch": list(algo.net_arch), "ortho_init": algo.ortho_init,
                       "activation_fn": {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[algo.activation]},
    )  # fmt: skip
    venv.seed(cfg.env.seed)  # sub-env i: env.seed + i (PPO(seed=...) had seeded them with the policy's seed)
    start = evaluate(model_policy(model), heldout, name="untrained", progress=progress)
    rollout = algo.n_steps * cfg.env.n_envs
    total = math.ceil(algo.total_timesteps / rollout) * rollout
    rows = _Rows(run, algo, total, lambda: evaluate(model_policy(model), heldout, name="periodic"), progress, max_rows)
    sb3_logger = configure(str(run.path / "sb3"), ["csv"])
    model.set_logger(sb3_logger)
    try:
        model.learn(total_timesteps=total, callback=[rows, KLToInitial(run)], log_interval=algo.log_interval)
    finally:
        sb3_logger.close()
    return model, start, rows.episodes


def report(result: PPOResult, cfg: RunConfig) -> str:
    """The evaluations and the summary table, as printed at the end of a run."""
    env = cfg.env
    rows = [(e.policy, e.episodes, e.reward_mean, f"{e.pass_rate:.1%}", f"{e.syntax_error_rate:.1%}",
             ", ".join(f"{p or '<empty>'} x{n}" for p, n in e.top_programs[:3]))
            for e in (result.random, result.start, result.trained)]  # fmt: skip
    lines = [
        f"held-out tasks: {env.n_eval_tasks} of synthetic:arith, difficulty {env.eval_difficulty}, seed "
        f"{env.eval_task_seed} (training: {env.n_tasks} tasks, seed {env.task_seed})",
        format_table(["policy", "episodes", "mean reward", "pass rate", "syntax errors", "most frequent programs"], rows),
        "",
        format_table(["", "start (untrained)", "end (trained)", "random", "end - random"], [
            ("mean reward", result.start.reward_mean, result.trained.reward_mean, result.random.reward_mean,
             result.trained.reward_mean - result.random.reward_mean),
            ("hidden-test pass rate", f"{result.start.pass_rate:.1%}", f"{result.trained.pass_rate:.1%}",
             f"{result.random.pass_rate:.1%}", f"{result.trained.pass_rate - result.random.pass_rate:+.1%}"),
        ]),
        f"target (mean reward >= random + {TARGET_MARGIN}, pass rate >= {TARGET_PASS_RATE:.0%}): "
        f"{'met' if result.target_met else 'NOT met'}",
        f"{result.timesteps} steps, {result.episodes} episodes in {result.wall_s:.0f} s wall, {result.cpu_s:.0f} s CPU; "
        f"run directory {result.run_dir}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.sb3_ppo", description=__doc__.splitlines()[0])
    add_run_args(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(NAME, PPOSettings, config_dir=args.config_dir, overrides=args.set)
        _check(cfg)
        with Run.create(args.name or NAME, cfg, out=args.out) as run:
            result = train(cfg, run, progress=not args.quiet)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(result, cfg))
    curve = read_curve(result.run_dir / "curve.csv")
    if curve.get("pass_rate"):
        series = {"pass rate (training episodes)": curve["pass_rate"]}
        if REFERENCE.exists():
            series["reference"] = read_curve(REFERENCE).get("pass_rate", [])
        print(text_plot(series, width=60, height=10, lo=0.0, hi=1.0))
    if REFERENCE.exists():
        print(f"curve.csv: {compare_rows(result.run_dir / 'curve.csv', REFERENCE, tolerant=LEARNER_FLOATS).message}")
    print(f"curve: {result.run_dir / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
