"""GRPO on real, sandboxed execution, in one file: a small GRU reads a task's public examples and
writes ``f(x)`` token by token; groups of programs per task are judged in one batch by the sandbox;
group-normalised rewards train the writer.

Run it as ``python -m baselines.grpo [--set grpo.steps=100] [--out DIR]`` (``--model PATH``: a
Hugging Face causal LM instead, see below). Configured by ``baselines/configs/env.json`` (training
pool, held-out pool, ``max_tokens``), ``reward.json`` and ``grpo.toml`` (``GRPOSettings``).

One step, as the code below does it:

1. **Rollout** (``rollout``): draw ``prompts_per_step`` training tasks, sample ``group_size``
   programs for each from the *behaviour* policy at the step's temperature, and judge the whole
   batch with one ``code_env.grade_many`` call (the batched API under ``code_env.evaluate``, which
   also gives the trajectory log its records). Identical (task, program) pairs are judged once,
   and a pair judged in an earlier step is answered from a cache (programs here are pure
   arithmetic: the same pair always earns the same reward). A sample the sandbox failed to judge,
   or whose LLM judge call failed (a judge in ``reward.json``; tier ``judge_error``), has reward
   ``None``: it is dropped and counted (``dropped``), never scored nor cached.
2. **Advantages**: ``(reward - group mean) / (group std + adv_eps)`` within each task's group.
3. **Update** (``update``): ``epochs`` passes of the clipped policy-gradient objective on token
   log-probabilities (ratio to the behaviour policy, clipped at ``1 +- clip_eps``), plus
   ``kl_coef`` times a KL estimate to the frozen initial policy (``exp(r) - r - 1``, r the
   reference-minus-policy log-ratio), averaged over each program's tokens; gradients clipped at
   ``max_grad_norm``.

Rollouts and learning overlap (``overlap = true``): while the learner updates on step t's batch, a
thread samples step t+1's programs from a copy of the weights taken before that update and the
sandbox's own processes run them. Step t+1's batch is then one update stale (``staleness`` in the
curve); the ratio in the objective corrects for it. The copy is taken at a fixed point of the loop
and every step's sampling has its own seeded generator, so the curve does not depend on timing:
the same config and seed give the same ``curve.csv`` to the last digit, overlap or not.

The temperature anneals linearly from ``temperature`` to ``temperature_floor`` over the run and
never goes below the floor: the groups keep differing, so advantages stay informative. The
defaults keep it at 1.0 throughout, with a KL weight of 0.1: measured here, annealing to 0.7 with
a KL weight of 0.02 held the groups to one program per family early and reached 57% held-out at
step 250 where the defaults reach 70%.

``curve.csv`` (one row per step): ``reward_mean``/``reward_std``/``pass_rate`` of the step's
judged samples (pass: every public and hidden test), ``public_pass_rate``, ``dropped``,
``unique`` (pairs sent to the sandbox), ``cached_fraction`` (samples answered without a run:
duplicates in the batch or pairs judged before), ``entropy`` and ``kl`` (to the reference) of the
update, ``loss``, ``learning_rate``, ``temperature``, ``staleness``, and every ``eval_interval``
steps ``eval_pass_rate``/``eval_reward`` of the greedy policy on the held-out tasks.
With ``curriculum = true`` three more columns (only then, so that a run without it keeps today's
columns): ``band`` (the mean difficulty of the step's tasks), ``curriculum_tasks`` (the size of the
training set it drew from) and ``curriculum_rate`` (the rolling public pass rate that set had).
``timing.csv``: ``executions_per_s`` (sandbox runs per second of rollout), ``learner_wait_fraction``
(the share of the step the learner spent waiting for the rollout), ``step_s``.

**The curriculum** (``curriculum = true``; ``registry.sampling.AddingCurriculum``): instead of the
whole training pool, each step draws from a set that starts with ``curriculum_initial`` tasks of
band ``curriculum_start_band`` and grows by ``curriculum_add`` tasks of a band chosen to bring the
rolling public pass rate (over ``curriculum_window`` samples) back inside
[``curriculum_low``, ``curriculum_high``]. Step s draws from the set as it stood after the outcomes
of steps <= s - 1 - k (k: ``max_staleness`` with overlap, else 0): with overlap, step s is drawn
before step s - 1 is judged, so the rule reads only outcomes every topology already has when it
draws s; the draw depends on the seed, the step and those outcomes alone, never on timing. Every
change of the set is a line of ``curriculum.jsonl`` (what was added, from which band, why).

**The language-model policy** (``--model PATH``, extra ``llm``): a local Hugging Face causal LM and
its tokenizer take the place of the GRU, on any task set (``--set env.task_set=builtin``); the
prompt is what ``code_env.trl_rows`` gives (chat or plain, by the tokenizer), the program is taken
from the reply by ``code_env.program_of`` (``extract_code``), and the same loop runs on it.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
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
from baselines.guards import AlertLog, SignalGuard, warn_kl_off, zero_std_fraction
from code_env.tokens import END, VOCAB, expression, program
from code_env.tracing import trace_id
from registry import Task
from registry.sampling import AddingCurriculum

NAME = "grpo"
REFERENCE = Path(__file__).resolve().parent / "reference" / "grpo.csv"
# the learner's float columns of curve.csv: the only ones a CPU's arithmetic could move (the pin
# keeps them identical on x86-64; compare_rows names any difference elsewhere)
LEARNER_FLOATS = ("loss", "entropy", "kl")
TARGET_PASS_RATE = 0.5  # the target: held-out every-test pass rate of the greedy policy


class GRPOSettings(BaseModel):
    """``grpo.toml``: the algorithm, the policy and the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(300, ge=1, description="optimisation steps (one rollout each)")
    prompts_per_step: int = Field(8, ge=1, le=4096, description="tasks per step")
    group_size: int = Field(8, ge=2, le=1024, description="programs sampled per task (K)")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size (constant)")
    epochs: int = Field(2, ge=1, le=100, description="passes over each batch")
    clip_eps: float = Field(0.2, gt=0, le=1, description="policy ratio clip: 1 +- clip_eps")
    kl_coef: float = Field(0.1, ge=0, description="weight of the KL penalty to the frozen initial policy (0: off)")
    adv_eps: float = Field(1e-4, gt=0, description="advantage = (r - group mean) / (group std + adv_eps)")
    temperature: float = Field(1.0, gt=0, le=10, description="sampling temperature at the first step")
    temperature_floor: float = Field(1.0, gt=0, le=10, description="the temperature anneals to this floor and never goes below")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping (global L2 norm)")
    hidden: int = Field(128, ge=8, le=4096, description="GRU policy: hidden size")
    n_examples: int = Field(4, ge=1, le=16, description="GRU policy: public examples it reads")
    grammar_mask: bool = Field(True, description="GRU policy: sample only tokens that keep the expression parseable")
    pointer: float = Field(10.0, ge=0, le=100, description="GRU policy: initial weight of the digit pointer (0: none)")
    overlap: bool = Field(True, description="sample and judge the next batches while the learner updates")
    max_staleness: int = Field(1, ge=1, le=16, description="with overlap: step s samples from the weights after update "
                               "max(s - max_staleness, 0): how many batches may be made ahead (the async buffer's bound)")
    topology: Literal["thread", "redis"] = Field("thread", description="thread: rollouts on a thread of the learner's "
                                                 "process; redis: learner, rollout actors and executors as processes "
                                                 "joined by Redis (baselines.topology)")
    actors: int = Field(1, ge=1, le=64, description="topology redis: rollout actor processes (with max_staleness 1 one makes every batch; more take over a dead one's step at once)")
    executors: int = Field(2, ge=1, le=64, description="topology redis: executor processes (code-env executor)")
    executor_workers: int = Field(1, ge=1, le=64, description="topology redis: sandbox workers of each executor")
    redis_url: str | None = Field(None, description="topology redis: the server (None: a redis-server of the run's own)")
    cache: bool = Field(True, description="answer a (task, program) pair judged in an earlier step from a cache")
    eval_interval: int = Field(25, ge=0, description="greedy held-out evaluation every N steps (0: start and end only)")
    checkpoint_interval: int = Field(100, ge=0, description="save the policy every N steps (0: only the final one)")
    seed: int = Field(0, ge=0, description="seed of the policy's weights, the task draws and the sampling")
    threads: int = Field(1, ge=1, le=256, description="torch intra-op threads (1: reproducible to the last digit)")
    model: str | None = Field(None, description="a local Hugging Face causal LM folder (--model): the LM policy")
    max_new_tokens: int = Field(96, ge=1, le=8192, description="LM policy: reply length budget")
    generation_timeout_s: float | None = Field(None, gt=0, le=3600, description="LM policy: a batch's generation deadline "
                                               "(transformers' max_time); a reply it cut ends its generation timed-out")  # fmt: skip
    alert_window: int = Field(50, ge=2, le=100_000, description="guards: the window of steps the entropy and reward-spread "
                              "alerts look at (baselines.guards)")
    alert_entropy_drop: float = Field(0.5, gt=0, le=1, description="guards: alert when the mean entropy of the window's "
                                      "later half is more than this fraction below its earlier half's (1: never)")
    alert_kl_max: float = Field(2.0, gt=0, description="guards: alert when the update's KL to the reference exceeds this "
                                "(nats per token; inf: never)")
    alert_zero_std_fraction: float = Field(0.9, gt=0, le=1, description="guards: alert when, averaged over the window, "
                                           "more than this share of the groups have rewards all equal (advantages 0; 1: never)")  # fmt: skip

    curriculum: bool = Field(False, description="draw each step's tasks from a set grown from the pool to keep the rolling "
                             "public pass rate in [curriculum_low, curriculum_high] (registry.sampling.AddingCurriculum)")
    curriculum_low: float = Field(0.2, ge=0, le=1, description="curriculum: below this rolling public pass rate, easier tasks are added")
    curriculum_high: float = Field(0.4, ge=0, le=1, description="curriculum: above this rolling public pass rate, harder tasks are added")
    curriculum_window: int = Field(256, ge=1, le=1_000_000, description="curriculum: samples the rolling pass rates are taken "
                                   "over (overall and per band); a decision waits for this many new samples after the last")
    curriculum_start_band: int = Field(1, ge=1, le=5, description="curriculum: the difficulty band the set starts from "
                                       "(absent from the pool: the nearest band above it)")
    curriculum_initial: int = Field(16, ge=1, le=100_000, description="curriculum: tasks the set starts with")
    curriculum_add: int = Field(8, ge=1, le=100_000, description="curriculum: tasks added at a time")

    @model_validator(mode="after")
    def _floor(self) -> GRPOSettings:
        if self.temperature < self.temperature_floor:
            raise ValueError(f"temperature {self.temperature} is below temperature_floor {self.temperature_floor}")
        if self.curriculum_low >= self.curriculum_high:
            raise ValueError(f"curriculum_low {self.curriculum_low} is not below curriculum_high {self.curriculum_high}")
        return self


# -------------------------------------------------------------------------------- the policies


@dataclass
class Samples:
    """A batch of sampled programs: row i answers ``tasks[i]``; ``tokens``/``mask`` are what the
    policy wrote (mask: the tokens that count), ``old_logp`` their log-probabilities under the
    behaviour policy at ``temperature``; ``context`` is whatever the policy needs to score them again."""

    tasks: list[Task]
    programs: list[str]
    tokens: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    context: Any
    temperature: float
    texts: Texts | None = None  # the same samples as text, for the trajectory records


@dataclass
class Texts:
    """What a batch's policy read and wrote, as text, one entry per sample: the prompt, the whole
    reply, whether the length budget cut it, its length in tokens (its end token included), and
    whether the generation's deadline (``generation_timeout_s``) cut it."""

    prompts: list[str]
    replies: list[str]
    cut: list[bool]
    lengths: list[int]
    timed_out: list[bool] = field(default_factory=list)


class Policy(Protocol):
    module: nn.Module

    def sample(self, tasks: Sequence[Task], temperature: float, generator: torch.Generator | None,
               greedy: bool = False) -> Samples: ...  # fmt: skip

    def logprobs(self, samples: Samples) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probabilities of ``samples`` at their temperature, and entropies."""
        ...


_PERIODS = (3, 4, 5, 7, 10, 16, 25, 40, 64, 100)
_NUMBER_FEATURES = 6 + 2 * len(_PERIODS)
_RELATIONS = 4  # y - x, x - y, y + x, y / x
_EXAMPLE_FEATURES = 1 + 2 * _NUMBER_FEATURES + 4 + 10 * _RELATIONS


def _number(v: float) -> list[float]:
    """A number as the network sees it: sign, zero, log and linear magnitudes, and residues mod
    small periods (as angles), so that differences and ratios between examples are easy to read."""
    a = abs(v)
    out = [float(np.sign(v)), float(v == 0), math.log1p(a) / 6.0, (math.log(a) if a > 0 else 0.0) / 6.0,
           float(np.clip(v / 20, -1, 1)), float(np.clip(v / 400, -1, 1))]  # fmt: skip
    for p in _PERIODS:
        out += [math.sin(2 * math.pi * v / p), math.cos(2 * math.pi * v / p)]
    return out


def example_features(task: Task, n_examples: int) -> np.ndarray:
    """``(n_examples, _EXAMPLE_FEATURES)``: the task's first public examples ``(x, f(x))``; a row
    of zeros (its first feature, "present", 0) where the task has fewer. Besides x and f(x), how
    they relate: their difference, sum and ratio, as numbers and, where one is a single digit, as
    that digit (one-hot; ``GRUWriter`` can point at it when it writes a digit)."""
    rows = np.zeros((n_examples, _EXAMPLE_FEATURES), dtype=np.float32)
    for i, case in enumerate(task.public_tests[:n_examples]):
        x, y = float(case.args[0]), float(case.expected)
        rel = [float(np.clip((y - x) / 20, -4, 4)), float(np.clip((y + x) / 20, -4, 4)),
               float(np.clip(y / x, -20, 20)) / 5 if x else 0.0, float(x == 0)]  # fmt: skip
        digits = np.zeros((_RELATIONS, 10), dtype=np.float32)
        for r, v in enumerate((y - x, x - y, y + x, y / x if x else math.nan)):
            if v == v and float(v).is_integer() and 0 <= v <= 9:
                digits[r, int(v)] = 1.0
        rows[i] = [1.0, *_number(x), *_number(y), *rel, *digits.ravel()]
    return rows


class GRUWriter(nn.Module):
    """Reads the examples (each encoded, with a bilinear x-y term, then mean- and max-pooled) into
    a context; a GRU cell writes tokens from it. The head is two-level: first the kind of token
    (``x``, a digit, ``+ - * ( )``, end), then which digit, so that a random writer is not mostly
    digits (10 of the 17 tokens). Which digit also has a pointer: from its state the writer weighs
    the relations of the examples (difference, sum, ratio) and adds, to each digit's logit, how
    consistently the examples show that digit under them."""

    def __init__(self, hidden: int, pointer: float) -> None:
        super().__init__()
        d = hidden
        self.bx, self.by = nn.Linear(_NUMBER_FEATURES, 2 * d), nn.Linear(_NUMBER_FEATURES, 2 * d)
        self.encode = nn.Sequential(nn.Linear(_EXAMPLE_FEATURES + 2 * d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d), nn.ReLU())
        self.pool = nn.Sequential(nn.Linear(2 * d, d), nn.ReLU(), nn.Linear(d, d))
        self.embed = nn.Embedding(len(VOCAB) + 1, d)  # the last: "start"
        self.cell = nn.GRUCell(2 * d, d)
        self.h0 = nn.Linear(d, d)
        self.head = nn.Sequential(nn.Linear(2 * d, d), nn.ReLU(), nn.Linear(d, len(VOCAB) + 1))
        last = self.head[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)  # a uniform first policy over kinds and digits
        nn.init.zeros_(last.bias)
        self.gate = nn.Linear(2 * d, _RELATIONS + 1)  # which relation the next digit follows (or none)
        self.pointer_scale = nn.Parameter(torch.tensor(float(pointer)), requires_grad=pointer > 0)

    def context(self, ex: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The task's context vector, and per relation and digit the share of examples showing it."""
        fx = ex[..., 1:1 + _NUMBER_FEATURES]
        fy = ex[..., 1 + _NUMBER_FEATURES:1 + 2 * _NUMBER_FEATURES]
        e = self.encode(torch.cat([ex, self.bx(fx) * self.by(fy)], -1))
        present = ex[..., :1]
        n = present.sum(1).clamp(min=1.0)
        mean = (e * present).sum(1) / n
        biggest = e.masked_fill(present == 0, -1e4).max(1).values
        shown = (ex[..., -10 * _RELATIONS:] * present).sum(1) / n
        return self.pool(torch.cat([mean, biggest], -1)), shown.view(-1, _RELATIONS, 10)

    def start(self, ctx: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.tanh(self.h0(ctx[0]))

    def step(self, ctx: tuple[torch.Tensor, torch.Tensor], h: torch.Tensor,
             prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Log-probabilities over ``VOCAB`` after token ``prev`` (two-level head folded into one)."""
        c, shown = ctx
        h = self.cell(torch.cat([self.embed(prev), c], -1), h)
        z = torch.cat([h, c], -1)
        o = self.head(z)
        digit_kind = len(VOCAB)  # the extra output: "a digit"
        kinds = torch.log_softmax(torch.cat([o[..., :1], o[..., digit_kind:], o[..., 11:END + 1]], -1), -1)
        weights = torch.softmax(self.gate(z), -1)[:, :_RELATIONS]
        pointer = self.pointer_scale * torch.einsum("br,brd->bd", weights, shown)
        digits = torch.log_softmax(o[..., 1:11] + pointer, -1) + kinds[..., 1:2]
        return torch.cat([kinds[..., :1], digits, kinds[..., 2:]], -1), h


_OPERAND = torch.tensor([i for i, t in enumerate(VOCAB) if t == "x" or t.isdigit() or t == "("])
_DIGIT = torch.tensor([i for i, t in enumerate(VOCAB) if t.isdigit()])
_OPERATOR = torch.tensor([VOCAB.index(t) for t in "+-*"])
_OPEN, _CLOSE, _ZERO = VOCAB.index("("), VOCAB.index(")"), VOCAB.index("0")


class Grammar:
    """What may come next in a batch of programs being written, ``length`` slots each (the last
    only for ``<end>``, so at most ``length - 1`` tokens, as ``CodeExecTokens-v0`` counts them).

    With ``syntax=True`` (``grammar_mask``), only tokens that keep the expression parseable and
    finishable in the slots left: an operand (``x``, a digit, ``(``) where one is expected, an
    operator, ``)`` or ``<end>`` after one, no digit after a lone ``0`` (``07`` is not Python),
    ``)`` and ``<end>`` only where the parentheses balance. The policy then never writes a syntax
    error and its samples are spent on what the program computes. The task is unchanged: the
    same tests, the same budget, the same reward for what is written."""

    def __init__(self, batch: int, length: int, syntax: bool) -> None:
        self.length, self.syntax = length, syntax
        self.expect = torch.ones(batch, dtype=torch.bool)  # an operand must come next
        self.depth = torch.zeros(batch, dtype=torch.long)
        self.in_number = torch.zeros(batch, dtype=torch.bool)
        self.lone_zero = torch.zeros(batch, dtype=torch.bool)
        self.t = 0

    def allowed(self) -> torch.Tensor:
        """``(batch, len(VOCAB))``: the tokens allowed in the next slot."""
        b = self.expect.shape[0]
        left = self.length - self.t - 1  # slots after this one
        if not self.syntax:
            ok = torch.ones(b, len(VOCAB), dtype=torch.bool)
            if left == 0:
                ok[:, :END] = False
            return ok
        ok = torch.zeros(b, len(VOCAB), dtype=torch.bool)
        d = self.depth
        operand = self.expect & (d + 1 <= left)  # the operand, then the closes and <end>
        ok[:, _OPERAND] = operand[:, None]
        ok[:, _OPEN] = self.expect & (d + 3 <= left)  # "(", an operand, d + 1 closes, <end>
        after = ~self.expect
        ok[:, _OPERATOR] = (after & (d + 2 <= left))[:, None]
        ok[:, _CLOSE] = after & (d > 0) & (d <= left)
        ok[:, END] = after & (d == 0)
        more = after & self.in_number & ~self.lone_zero & (d + 1 <= left)
        ok[:, _DIGIT] |= more[:, None]
        return ok

    def advance(self, a: torch.Tensor) -> None:
        digit = (a >= _ZERO) & (a <= _ZERO + 9)
        self.lone_zero = torch.where(digit, (a == _ZERO) & ~self.in_number, torch.zeros_like(self.lone_zero))
        self.in_number = digit
        self.depth = self.depth + (a == _OPEN).long() - (a == _CLOSE).long()
        self.expect = (a == _OPEN) | torch.isin(a, _OPERATOR) | (self.expect & (a == END))
        self.t += 1


def _masked(logits: torch.Tensor, ok: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities at ``temperature`` over the allowed tokens, and their entropy."""
    lp = torch.log_softmax((logits / temperature).masked_fill(~ok, float("-inf")), -1)
    ent = -torch.where(ok, lp.exp() * lp, torch.zeros_like(lp)).sum(-1)
    return lp, ent


class GRUPolicy:
    """The default policy: ``GRUWriter`` over ``CodeExecTokens-v0``'s vocabulary, programs of at
    most ``max_tokens`` tokens (``code_env.tokens.program``), syntax kept by ``Grammar`` when
    ``grammar_mask``."""

    def __init__(self, hidden: int, n_examples: int, max_tokens: int, grammar_mask: bool, pointer: float = 10.0) -> None:
        self.module: nn.Module = GRUWriter(hidden, pointer)
        self.n_examples, self.max_tokens, self.grammar_mask = n_examples, max_tokens, grammar_mask

    def _features(self, tasks: Sequence[Task]) -> torch.Tensor:
        return torch.from_numpy(np.stack([example_features(t, self.n_examples) for t in tasks]))

    @torch.no_grad()
    def sample(self, tasks: Sequence[Task], temperature: float, generator: torch.Generator | None,
               greedy: bool = False) -> Samples:  # fmt: skip
        w: Any = self.module
        ex = self._features(tasks)
        c = w.context(ex)
        h = w.start(c)
        prev = torch.full((len(tasks),), len(VOCAB), dtype=torch.long)
        done = torch.zeros(len(tasks), dtype=torch.bool)
        grammar = Grammar(len(tasks), self.max_tokens + 1, self.grammar_mask)
        out, logps, masks = [], [], []
        for _ in range(self.max_tokens + 1):
            logits, h = w.step(c, h, prev)
            ok = grammar.allowed() | done[:, None]
            lp, _ = _masked(logits, ok, temperature)
            a = lp.argmax(-1) if greedy else torch.multinomial(lp.exp(), 1, generator=generator)[:, 0]
            a = torch.where(done, torch.full_like(a, END), a)
            out.append(a)
            masks.append(ok)
            logps.append(lp.gather(-1, a[:, None])[:, 0])
            grammar.advance(a)
            done |= a == END
            prev = a
            if bool(done.all()):
                break
        tokens = torch.stack(out, 1)
        is_end = (tokens == END).long()
        mask = ((torch.cumsum(is_end, 1) - is_end) == 0).float()  # up to and including the first END
        from code_env.env import task_prompt
        from code_env.tokens import token_text

        programs, replies, cut, lengths = [], [], [], []
        for task, row in zip(tasks, tokens.tolist(), strict=True):
            body = row[: row.index(END)] if END in row else row
            programs.append(program(task.entry_point or "f", expression(body)))
            written = row[: row.index(END) + 1] if END in row else row
            replies.append(token_text(written))
            cut.append(len(body) >= self.max_tokens)  # the budget ended it (its last slot holds only <end>)
            lengths.append(len(written))
        return Samples(list(tasks), programs, tokens, mask, torch.stack(logps, 1) * mask, (ex, torch.stack(masks, 1)),
                       temperature, Texts([task_prompt(t) for t in tasks], replies, cut, lengths))  # fmt: skip

    def logprobs(self, samples: Samples) -> tuple[torch.Tensor, torch.Tensor]:
        w: Any = self.module
        ex, allowed = samples.context
        c = w.context(ex)
        h = w.start(c)
        prev = torch.full((len(samples.tasks),), len(VOCAB), dtype=torch.long)
        lps, ents = [], []
        for t in range(samples.tokens.shape[1]):
            logits, h = w.step(c, h, prev)
            lp, ent = _masked(logits, allowed[:, t], samples.temperature)
            lps.append(lp.gather(-1, samples.tokens[:, t : t + 1])[:, 0])
            ents.append(ent)
            prev = samples.tokens[:, t]
        return torch.stack(lps, 1), torch.stack(ents, 1)


class LMPolicy:
    """A local Hugging Face causal LM (``--model PATH``): prompts from ``code_env.trl_rows`` in the
    format its tokenizer wants, replies of at most ``max_new_tokens``, the program taken from the
    reply by ``code_env.program_of``. Dropout is off (the learner must be deterministic)."""

    def __init__(self, path: str, max_new_tokens: int, generation_timeout_s: float | None = None) -> None:
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ModuleNotFoundError as exc:
            raise ConfigError("--model needs transformers: pip install 'code-env[llm]'") from exc
        from code_env.trl import prompt_format

        if not Path(path, "config.json").is_file():
            raise ConfigError(f"--model {path}: not a Hugging Face model folder (no config.json)")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.module: nn.Module = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.module.eval()
        self.format = prompt_format(self.tokenizer)
        self.max_new_tokens = max_new_tokens
        self.generation_timeout_s = generation_timeout_s

    def _prompt(self, task: Task) -> str:
        from code_env.trl import trl_rows

        prompt = trl_rows([task], format=self.format)[0]["prompt"]
        if self.format == "chat":
            return str(self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True))
        return str(prompt)

    @torch.no_grad()
    def sample(self, tasks: Sequence[Task], temperature: float, generator: torch.Generator | None,
               greedy: bool = False) -> Samples:  # fmt: skip
        from code_env.adapters import program_of

        prompts = [self._prompt(t) for t in tasks]
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True)
        if generator is not None:  # generate() draws from torch's global generator: seed it from ours
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        lm: Any = self.module
        t0 = time.monotonic()
        out = lm.generate(**enc, do_sample=not greedy, temperature=temperature if not greedy else None,
                      top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens, max_time=self.generation_timeout_s,
                      pad_token_id=self.tokenizer.pad_token_id)  # fmt: skip
        late = self.generation_timeout_s is not None and time.monotonic() - t0 >= self.generation_timeout_s
        tokens = out[:, enc["input_ids"].shape[1] :]
        eos = self.tokenizer.eos_token_id
        is_end = (tokens == eos).long() if eos is not None else torch.zeros_like(tokens)
        mask = ((torch.cumsum(is_end, 1) - is_end) == 0).float()
        replies = [str(self.tokenizer.decode(row[m.bool()], skip_special_tokens=True)) for row, m in zip(tokens, mask, strict=True)]
        programs = [program_of(t, r, p if self.format == "plain" else None) for t, r, p in zip(tasks, replies, prompts, strict=True)]
        ended = [eos is not None and bool((row == eos).any()) for row in tokens]
        full = tokens.shape[1] >= self.max_new_tokens  # max_time stops the batch short of the budget
        cut = [not e and full for e in ended]  # the token budget ended it
        timed_out = [not e and late and not full for e in ended]  # the deadline ended it
        lengths = [int(m.sum()) for m in mask]
        samples = Samples(list(tasks), programs, tokens, mask, torch.zeros(tokens.shape), enc, temperature,
                          Texts(prompts, replies, cut, lengths, timed_out))  # fmt: skip
        samples.old_logp = self.logprobs(samples)[0].detach() * mask
        return samples

    def logprobs(self, samples: Samples) -> tuple[torch.Tensor, torch.Tensor]:
        enc = samples.context
        ids = torch.cat([enc["input_ids"], samples.tokens], 1)
        attention = torch.cat([enc["attention_mask"], torch.ones_like(samples.tokens)], 1)
        n = samples.tokens.shape[1]
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # as generate() counts them under left padding
        logits = self.module(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -n - 1 : -1]
        lp = torch.log_softmax(logits.float() / samples.temperature, -1)
        return lp.gather(-1, samples.tokens[..., None])[..., 0], -(lp.exp() * lp).sum(-1)


def make_policy(cfg: RunConfig) -> Policy:
    algo: GRPOSettings = cfg.algo  # type: ignore[assignment]
    if algo.model is not None:
        return LMPolicy(algo.model, algo.max_new_tokens, algo.generation_timeout_s)
    return GRUPolicy(algo.hidden, algo.n_examples, cfg.env.max_tokens, algo.grammar_mask, algo.pointer)


# ----------------------------------------------------------------------------- rollout, update


@dataclass
class Verdict:
    """One sample's judgement, kept for its trajectory record (only for samples the log wants)."""

    task: Task
    program: str
    trace_id: str
    n: int  # the sample's number in the run
    judged: Any  # code_env.grading.Judged, or (answered from the cache) the Grade of the pair
    ran_as: str
    cached: bool
    generating: float | None
    prompt: str | None
    reply: str | None
    cut: bool | None
    length: int | None
    generated: float | None = None
    timed_out: bool = False


@dataclass
class Batch:
    samples: Samples
    rewards: list[float | None]
    passed: list[bool]
    public: list[bool]
    unique: int  # pairs the sandbox ran
    judge_s: float  # wall time of the sandbox call
    staleness: int
    verdicts: list[Verdict | None] | None = None  # per sample, for the log (None: not logged)


class Judge:
    """The sandbox's verdicts, one batched ``code_env.grading.judge_many`` call per batch (what
    ``code_env.grade_many`` and ``evaluate`` run: identical pairs judged once), behind a (task,
    program) cache that lives as long as the run, so a rerun sees the same hits. Every
    ``log_every``-th sample (counted over the run) goes to the trajectory log in ``log_dir``
    (``code_env.records.grade_record``: the prompt, the whole reply, the program, the raw runs,
    the timed states, the breakdown, the advantage and the step; ``code-env stats``/``audit``/
    ``replay`` read it): at once through ``__call__``, or, for training batches, by ``write``
    after the update, with the advantages it used. A sample answered from the cache has no runs
    of its own: its record names the sample that ran it (``ran_as``, ``cached``)."""

    def __init__(self, executor: Any, reward: Any, use_cache: bool, log_dir: Path | None = None,
                 log_every: int = 1, log_max_bytes: int | None = None, log_text_bytes: int | None = None) -> None:  # fmt: skip
        from code_env.trajectory import MAX_TOTAL_BYTES, TEXT_BYTES, TrajectoryLogger

        self.executor, self.reward = executor, reward
        self.cache: dict[tuple[str, str], tuple[float, str]] | None = {} if use_cache else None
        self.logger = None if log_dir is None else TrajectoryLogger(
            log_dir, every=log_every, max_total_bytes=log_max_bytes or MAX_TOTAL_BYTES, text_bytes=log_text_bytes or TEXT_BYTES)  # fmt: skip
        self.judged = 0  # pairs sent to the sandbox so far
        self.samples = 0  # samples judged so far (the records' sample numbers)
        self._graded: dict[tuple[str, str], tuple[Any, str]] = {}  # the cache's grades and trace ids, for the log

    def __call__(self, tasks: Sequence[Task], programs: Sequence[str], texts: Texts | None = None,
                 step: int | None = None, generating: float | None = None) -> tuple[list[tuple[float, str] | None], int]:  # fmt: skip
        """(reward, tier) per sample (None: the sandbox failed), and how many pairs it ran; the
        logged samples' records are written at once (``step``: the updates done before;
        ``generating``: when the programs' generation began)."""
        results, unique, verdicts = self.verdicts(tasks, programs, texts, generating)
        self.write(verdicts, step)
        return results, unique

    def verdicts(self, tasks: Sequence[Task], programs: Sequence[str], texts: Texts | None = None,
                 generating: float | None = None,
                 generated: float | None = None) -> tuple[list[tuple[float, str] | None], int, list[Verdict | None]]:  # fmt: skip
        """``__call__``'s answer without writing: also each sample's ``Verdict`` for the log. With
        the reward's ``context_window_overflow`` set, a reply the length budget cut is not run:
        its reward is that value (and no cache is asked)."""
        from code_env.grading import RunSummary, judge_many

        keys: list[tuple[str, str]] = [(t.problem_id, p) for t, p in zip(tasks, programs, strict=True)]
        n0 = self.samples
        self.samples += len(keys)
        ids = [trace_id(t.problem_id, n0 + i) for i, t in enumerate(tasks)]
        known = self.cache if self.cache is not None else {}
        results: dict[tuple[str, str], tuple[float, str] | None] = {}
        judged: dict[tuple[str, str], Any] = {}
        if texts is not None and self.reward.context_window_overflow is not None:
            over = [i for i, c in enumerate(texts.cut) if c]
            for i, j in zip(over, judge_many([(tasks[i], programs[i]) for i in over], config=self.reward,
                                             trace_ids=[ids[i] for i in over], overflowed=[True] * len(over)), strict=True):  # fmt: skip
                keys[i] = (f"\0overflow/{i}", programs[i])  # its own key: never the cache's
                results[keys[i]], judged[keys[i]] = (float(j.grade.reward or 0.0), j.grade.breakdown.tier), j
        todo: dict[tuple[str, str], int] = {}  # pair -> its first sample in the batch
        for i, k in enumerate(keys):
            if k not in known and k not in results:
                todo.setdefault(k, i)
        if todo:
            pairs = [(tasks[i], programs[i]) for i in todo.values()]
            out = judge_many(pairs, sandbox=self.executor, config=self.reward, trace_ids=[ids[i] for i in todo.values()])
            self.judged += len(todo)
            for k, j in zip(todo, out, strict=True):
                g = j.grade
                results[k] = None if g.reward is None else (float(g.reward), g.breakdown.tier)
                judged[k] = j
                if self.cache is not None and results[k] is not None:
                    self.cache[k] = results[k]  # type: ignore[assignment]
                    if self.logger is not None:  # the grade without the runs' output, for a later hit's record
                        self._graded[k] = (g.model_copy(update={"run": RunSummary(execution_time_ms=g.run.execution_time_ms)}), j.ran_as)
        verdicts: list[Verdict | None] = []
        columns: tuple[Any, ...] = (texts.prompts, texts.replies, texts.cut, texts.lengths) if texts else (None,) * 4
        for i, k in enumerate(keys):
            if self.logger is None or not self.logger.wants(n0 + i):
                verdicts.append(None)
                continue
            hit = k not in judged
            j, ran_as = self._graded[k] if hit else (judged[k], judged[k].ran_as)
            prompt, reply, cut, length = (None if xs is None else xs[i] for xs in columns)
            late = bool(texts and texts.timed_out and texts.timed_out[i])
            verdicts.append(Verdict(tasks[i], programs[i], ids[i], n0 + i, j, ran_as, hit, generating, prompt, reply, cut,
                                    length, generated, late))  # fmt: skip
        return [results[k] if k in results else known[k] for k in keys], len(todo), verdicts

    def write(self, verdicts: Sequence[Verdict | None], step: int | None, adv: torch.Tensor | None = None,
              keep: torch.Tensor | None = None) -> None:  # fmt: skip
        """The records of the logged samples; ``adv``/``keep``: the advantages the update used,
        and which samples it used (a dropped sample has no advantage)."""
        from code_env.records import grade_record

        if self.logger is None:
            return
        for i, v in enumerate(verdicts):
            if v is None:
                continue
            a = float(adv[i]) if adv is not None and (keep is None or bool(keep[i])) else None
            self.logger.write(grade_record(
                v.task, v.program, v.judged, self.reward, trace_id=v.trace_id, n=v.n, prompt=v.prompt,
                completion=v.reply, completion_truncated=v.cut, completion_tokens=v.length, trainer="grpo", step=step,
                advantage=a, generating=v.generating, generated=v.generated, cached=v.cached, ran_as=v.ran_as,
                generation_end="timed-out" if v.timed_out else None))  # fmt: skip

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()


def temperature_at(algo: GRPOSettings, step: int) -> float:
    """Linear from ``temperature`` to ``temperature_floor`` over the run; never below the floor."""
    frac = step / max(algo.steps - 1, 1)
    return max(algo.temperature_floor, algo.temperature + (algo.temperature_floor - algo.temperature) * frac)


def rollout(policy: Policy, judge: Judge, pool: Sequence[Task], algo: GRPOSettings, step: int, threads: int) -> Batch:
    """Step ``step``'s batch: its tasks and sampling come from generators seeded by (seed, step)
    alone, so the batch depends only on the behaviour weights, not on when it runs."""
    drawn = sample_step(policy, pool, algo, step, threads)
    return judge_step(judge, drawn)


@dataclass
class Drawn:
    """A step's sampled programs, not yet judged (``sample_step``)."""

    samples: Samples
    generating: float  # unix time the generation began
    generated: float  # and ended


def sample_step(policy: Policy, pool: Sequence[Task], algo: GRPOSettings, step: int, threads: int,
                drawing: Any = None) -> Drawn:  # fmt: skip
    """The sampling half of ``rollout``: the step's tasks and programs from (seed, step) and the
    weights (``drawing``: called with the step's tasks before their programs are sampled)."""
    torch.set_num_threads(threads)  # per thread: this runs in the rollout thread too
    rng = np.random.default_rng([algo.seed, step])
    picks = rng.choice(len(pool), size=min(algo.prompts_per_step, len(pool)), replace=False)
    tasks = [pool[i] for i in picks for _ in range(algo.group_size)]
    if drawing is not None:
        drawing(tasks)
    generator = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
    generating = time.time()
    samples = policy.sample(tasks, temperature_at(algo, step), generator)
    return Drawn(samples, generating, time.time())


class CurriculumDraws:
    """GRPO's view of an ``AddingCurriculum`` over the training pool (``grpo.curriculum``): the
    outcomes of each step go in with ``record`` (in any order; they are observed in step order),
    and ``tasks_for(step)`` is the set step ``step`` draws from: the set after the outcomes of steps
    ``<= step - 1 - lag`` (``lag``: how many steps the rollouts run ahead, ``max_staleness`` with
    overlap, else 0). Those outcomes are known when any topology draws the step, so the draw never
    depends on timing. Thread-safe (the rollout thread draws while the learner records)."""

    def __init__(self, pool: Sequence[Task], algo: GRPOSettings, lag: int) -> None:
        self.curriculum = AddingCurriculum(pool, low=algo.curriculum_low, high=algo.curriculum_high,
                                           window=algo.curriculum_window, start_band=algo.curriculum_start_band,
                                           initial=algo.curriculum_initial, add=algo.curriculum_add, seed=algo.seed)  # fmt: skip
        self.lag = lag
        self._pending: dict[int, list[tuple[str, bool]]] = {}
        self._sizes = [len(self.curriculum.active)]  # [j]: the set's size after the outcomes of steps < j
        self._rates: list[float | None] = [None]
        self._lock = threading.Lock()

    @property
    def observed(self) -> int:
        """Steps whose outcomes are in (0..observed - 1)."""
        return len(self._sizes) - 1

    def record(self, step: int, outcomes: Sequence[tuple[str, bool]]) -> None:
        with self._lock:
            if step < self.observed or step in self._pending:
                raise ValueError(f"curriculum: the outcomes of step {step} were recorded already")
            self._pending[step] = list(outcomes)
            while self.observed in self._pending:
                self.curriculum.observe(self._pending.pop(self.observed))
                self._sizes.append(len(self.curriculum.active))
                self._rates.append(self.curriculum.rate())

    def _known(self, step: int) -> int:
        need = max(step - self.lag, 0)  # the outcomes of steps 0..need-1
        if need > self.observed:
            raise RuntimeError(f"curriculum: step {step} draws after the outcomes of steps < {need}, "
                               f"but only those of steps < {self.observed} are recorded")  # fmt: skip
        return need

    def tasks_for(self, step: int) -> list[Task]:
        with self._lock:
            return self.curriculum.active[: self._sizes[self._known(step)]]

    def state_for(self, step: int) -> tuple[int, float | None]:
        """The size of the set step ``step`` draws from, and the rolling public pass rate it had."""
        with self._lock:
            need = self._known(step)
            return self._sizes[need], self._rates[need]


def outcomes_of(batch: Batch) -> list[tuple[str, bool]]:
    """A batch's (problem id, public tests passed) of its judged samples (the dropped ones say nothing)."""
    return [(t.problem_id, pub) for t, r, pub in zip(batch.samples.tasks, batch.rewards, batch.public, strict=True)
            if r is not None]  # fmt: skip


def judge_step(judge: Judge, drawn: Drawn) -> Batch:
    """The judging half of ``rollout``: one batched verdict for the step's programs."""
    samples = drawn.samples
    t0 = time.monotonic()
    judged, unique, verdicts = judge.verdicts(samples.tasks, samples.programs, samples.texts, drawn.generating, drawn.generated)
    judge_s = time.monotonic() - t0
    rewards = [None if j is None else j[0] for j in judged]
    passed = [j is not None and j[1] == "all_tests" for j in judged]
    public = [j is not None and j[1] in ("all_tests", "all_public") for j in judged]
    return Batch(samples, rewards, passed, public, unique, judge_s, staleness=0, verdicts=verdicts)


def advantages(rewards: Sequence[float | None], group_size: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-normalised advantages, and which samples count (the judged ones). A group with fewer
    than two judged samples has no baseline: its advantages are 0."""
    adv = torch.zeros(len(rewards))
    keep = torch.tensor([r is not None for r in rewards])
    for g in range(0, len(rewards), group_size):
        idx = [i for i in range(g, g + group_size) if rewards[i] is not None]
        if len(idx) < 2:
            continue
        r = torch.tensor([rewards[i] for i in idx], dtype=torch.float64)
        adv[idx] = ((r - r.mean()) / (r.std() + eps)).float()
    return adv, keep


def update(policy: Policy, ref: Policy, opt: torch.optim.Optimizer, batch: Batch, algo: GRPOSettings) -> dict[str, float]:
    """``epochs`` passes of the clipped objective with the KL penalty on the batch's judged samples."""
    adv, keep = advantages(batch.rewards, algo.group_size, algo.adv_eps)
    s = batch.samples
    mask = s.mask * keep[:, None].float()
    tokens = mask.sum(1).clamp(min=1.0)
    n = max(int(keep.sum()), 1)
    with torch.no_grad():
        ref_logp = ref.logprobs(s)[0] if algo.kl_coef > 0 else None
    stats: dict[str, float] = {}
    for _ in range(algo.epochs):
        logp, ent = policy.logprobs(s)
        ratio = torch.exp(logp - s.old_logp)
        a = adv[:, None]
        pg = -torch.min(ratio * a, torch.clamp(ratio, 1 - algo.clip_eps, 1 + algo.clip_eps) * a)
        if ref_logp is not None:
            d = ref_logp - logp
            kl = torch.exp(d) - d - 1
        else:
            kl = torch.zeros_like(logp)
        per_sample = ((pg + algo.kl_coef * kl) * mask).sum(1) / tokens
        loss = per_sample.sum() / n
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(policy.module.parameters(), algo.max_grad_norm)
        opt.step()
        stats = {"loss": float(loss.detach()), "entropy": float((ent.detach() * mask).sum() / mask.sum().clamp(min=1)),
                 "kl": float((kl.detach() * mask).sum() / mask.sum().clamp(min=1))}  # fmt: skip
    return stats


# ---------------------------------------------------------------------------------- evaluation


class EvalResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str
    tasks: int
    reward_mean: float
    pass_rate: float
    public_pass_rate: float
    sandbox_errors: int = Field(description="samples dropped unscored: the sandbox (or the LLM judge's endpoint) failed")
    top_programs: list[tuple[str, int]]


def evaluate_policy(policy: Policy | None, judge: Judge, tasks: Sequence[Task], *, name: str, max_tokens: int,
                    seed: int = 0, step: int | None = None) -> EvalResult:  # fmt: skip
    """The greedy policy (or, ``policy=None``, uniformly random tokens) once on every task;
    ``step`` (the updates done before) goes into the trajectory records."""
    generating = time.time()
    if policy is None:
        from code_env.env import task_prompt
        from code_env.tokens import token_text

        rng = np.random.default_rng(seed)
        programs = []
        written_as = Texts([], [], [], [])
        for t in tasks:
            toks: list[int] = []
            while len(toks) < max_tokens and (a := int(rng.integers(0, len(VOCAB)))) != END:
                toks.append(a)
            programs.append(program(t.entry_point or "f", expression(toks)))
            written = toks + ([END] if len(toks) < max_tokens else [])
            written_as.prompts.append(task_prompt(t))
            written_as.replies.append(token_text(written))
            written_as.cut.append(len(toks) >= max_tokens)
            written_as.lengths.append(len(written))
        texts: Texts | None = written_as
    else:
        samples = policy.sample(tasks, 1.0, None, greedy=True)
        programs, texts = samples.programs, samples.texts
    judged, _ = judge(tasks, programs, texts, step, generating)
    ok = [j for j in judged if j is not None]
    n = len(ok)
    exprs = Counter(p.split("result = ", 1)[-1].split("\n", 1)[0] if "result = " in p else p[:40] for p in programs)
    return EvalResult(policy=name, tasks=len(tasks), reward_mean=sum(r for r, _ in ok) / n if n else math.nan,
                      pass_rate=sum(t == "all_tests" for _, t in ok) / n if n else math.nan,
                      public_pass_rate=sum(t in ("all_tests", "all_public") for _, t in ok) / n if n else math.nan,
                      sandbox_errors=len(judged) - n, top_programs=exprs.most_common(5))  # fmt: skip


# ------------------------------------------------------------------------------------ training


class GRPOResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_dir: Path
    steps: int
    samples: int
    dropped: int
    start: EvalResult
    end: EvalResult
    random: EvalResult
    best_eval_pass_rate: float
    learner_wait_fraction: float
    wall_s: float
    target_met: bool


def _check(cfg: RunConfig) -> GRPOSettings:
    algo = cfg.algo
    if not isinstance(algo, GRPOSettings):
        raise TypeError(f"cfg.algo: expected GRPOSettings, got {type(algo).__name__} (load_config('grpo', GRPOSettings))")
    env = cfg.env
    if algo.model is None and not env.task_set.startswith("synthetic:arith"):
        raise ConfigError(f"env.task_set: the GRU policy writes programs for synthetic:arith only, got {env.task_set!r} "
                          f"(--model PATH trains a language model on any task set)")  # fmt: skip
    if env.max_turns != 1:
        raise ConfigError(f"env.max_turns: this GRPO is single-turn (1), got {env.max_turns}")
    if algo.model is not None and not Path(algo.model, "config.json").is_file():
        raise ConfigError(f"--model {algo.model}: not a Hugging Face model folder (no config.json)")
    if algo.topology == "redis" and algo.model is not None:
        raise ConfigError("grpo.topology = 'redis' runs the GRU policy (its samples travel between processes as tensors); "
                          "the LM policy (--model) runs in the thread topology")  # fmt: skip
    if algo.topology == "redis" and algo.redis_url is None:
        import shutil

        if shutil.which("redis-server") is None:
            raise ConfigError("grpo.topology = 'redis' needs a redis-server: install Debian's (scripts/bootstrap.sh does, "
                              "as root) or give grpo.redis_url")  # fmt: skip
    return algo


def train(cfg: RunConfig, run: Run, *, progress: bool = True, max_steps: int | None = None,
          executor: Any = None) -> GRPOResult:  # fmt: skip
    """Train as configured, into ``run``'s directory; return the held-out evaluations of the
    policy before and after training and of a uniformly random writer. ``max_steps`` stops
    early: the exact prefix of the full run (the schedules still span ``steps``). ``executor``:
    a runner object (a ``Sandbox``, a ``RayExecutor``) instead of ``env.executor``."""
    algo = _check(cfg)
    started = time.monotonic()
    seed_everything(algo.seed, threads=algo.threads)
    policy = make_policy(cfg)
    ref = copy.deepcopy(policy)
    for p in ref.module.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(policy.module.parameters(), lr=algo.learning_rate)
    from code_env.grading import resolve_executor

    runner = cfg.env.runner() if executor is None else resolve_executor(executor)
    log_every = cfg.env.log_every
    bounds = {"log_max_bytes": cfg.env.log_max_bytes, "log_text_bytes": cfg.env.log_text_bytes}
    judge = Judge(runner, cfg.reward, algo.cache, run.trajectories / "train", log_every, **bounds)
    eval_judge = Judge(runner, cfg.reward, True, run.trajectories / "heldout", log_every, **bounds)
    pool, held_out = cfg.env.train_tasks(), cfg.env.eval_tasks()
    max_tokens = cfg.env.max_tokens

    def held_out_eval(name: str, step: int) -> EvalResult:
        return evaluate_policy(policy, eval_judge, held_out, name=name, max_tokens=max_tokens, step=step)

    start = held_out_eval("untrained", 0)
    steps = algo.steps if max_steps is None else min(max_steps, algo.steps)
    samples_seen = dropped = 0
    waited = busy = 0.0
    best = start.pass_rate
    end = start
    ahead = algo.max_staleness if algo.overlap else 0

    warn_kl_off("grpo.kl_coef", algo.kl_coef, "GRPO")
    guard = SignalGuard(window=algo.alert_window, entropy_drop=algo.alert_entropy_drop, kl_max=algo.alert_kl_max,
                        zero_std_fraction=algo.alert_zero_std_fraction)  # fmt: skip
    alerts = AlertLog(run)

    draws = CurriculumDraws(pool, algo, ahead) if algo.curriculum else None
    events = run.path / "curriculum.jsonl"
    written = 0

    def make(step: int, behaviour: Policy) -> Batch:
        tasks = pool if draws is None else draws.tasks_for(step)
        return _staled(rollout(behaviour, judge, tasks, algo, step, algo.threads), step - max(step - ahead, 0))

    if algo.topology == "redis":
        from baselines.topology import RedisSource

        source: BatchSource = RedisSource(cfg, run, policy, pool, steps=steps, staleness=ahead)
    else:
        source = ThreadSource(make, policy, steps=steps, staleness=ahead)

    try:
        with tqdm(total=steps, desc="train grpo", unit="step", file=sys.stderr, disable=None if progress else True,
                  dynamic_ncols=True) as bar:  # fmt: skip
            for step in range(steps):
                t0 = time.monotonic()
                batch = source.get(step)
                wait = time.monotonic() - t0
                stats = update(policy, ref, opt, batch, algo)
                source.published(step + 1, policy)
                if batch.verdicts is not None:  # the records, with the advantages that update used
                    judge.write(batch.verdicts, step + 1, *advantages(batch.rewards, algo.group_size, algo.adv_eps))
                judged = [r for r in batch.rewards if r is not None]
                k = len(judged)
                samples_seen += len(batch.rewards)
                dropped += len(batch.rewards) - k
                step_s = time.monotonic() - t0
                waited, busy = waited + wait, busy + step_s
                ev = None
                if (algo.eval_interval and (step + 1) % algo.eval_interval == 0) or step + 1 == algo.steps:
                    ev = held_out_eval("trained" if step + 1 == algo.steps else "periodic", step + 1)
                    best, end = max(best, ev.pass_rate), ev
                row = {
                    "reward_mean": sum(judged) / k if k else math.nan,
                    "reward_std": float(np.std(judged)) if k else math.nan,
                    "pass_rate": sum(batch.passed) / k if k else math.nan,
                    "public_pass_rate": sum(batch.public) / k if k else math.nan,
                    "dropped": len(batch.rewards) - k,
                    "unique": batch.unique,
                    "cached_fraction": 1 - batch.unique / len(batch.rewards),
                    **stats,
                    "learning_rate": algo.learning_rate,
                    "temperature": batch.samples.temperature,
                    "staleness": batch.staleness,
                    "eval_pass_rate": ev.pass_rate if ev else None,
                    "eval_reward": ev.reward_mean if ev else None,
                }
                if draws is not None:
                    size, rate = draws.state_for(step)
                    drawn = batch.samples.tasks
                    row.update(band=sum(t.difficulty for t in drawn) / len(drawn), curriculum_tasks=size, curriculum_rate=rate)
                    draws.record(step, outcomes_of(batch))
                    new = draws.curriculum.events[written:]
                    with open(events, "a", encoding="utf-8") as fh:
                        fh.writelines(e.model_dump_json() + "\n" for e in new)
                    written += len(new)
                run.log(step + 1, row, timing={"executions_per_s": round(batch.unique / max(batch.judge_s, 1e-9), 1),
                                               "learner_wait_fraction": round(wait / max(step_s, 1e-9), 4),
                                               "step_s": round(step_s, 4)})  # fmt: skip
                seen, fired = guard.observe(step + 1, entropy=stats.get("entropy"), kl=stats.get("kl") if algo.kl_coef > 0 else None,
                                            zero_std=zero_std_fraction(batch.rewards, algo.group_size))  # fmt: skip
                alerts.record(step + 1, seen, fired, guard.active)
                if algo.checkpoint_interval and (step + 1) % algo.checkpoint_interval == 0:
                    torch.save(policy.module.state_dict(), run.checkpoints / f"grpo_{step + 1}.pt")
                bar.update()
                bar.set_postfix({"reward": f"{row['reward_mean']:.3f}", "pass": f"{row['pass_rate']:.1%}",
                                 **({"eval_pass": f"{ev.pass_rate:.1%}"} if ev else {})}, refresh=False)  # fmt: skip
    finally:
        source.close()
        judge.close()
        alerts.close()
    if steps < algo.steps:  # a prefix: its end is evaluated, not logged (the full run has no row there)
        end = held_out_eval("trained", steps)
    torch.save(policy.module.state_dict(), run.checkpoints / "grpo_final.pt")
    rand = evaluate_policy(None, eval_judge, held_out, name="random", max_tokens=max_tokens, seed=algo.seed, step=steps)
    eval_judge.close()
    result = GRPOResult(run_dir=run.path, steps=steps, samples=samples_seen, dropped=dropped, start=start, end=end,
                        random=rand, best_eval_pass_rate=best, learner_wait_fraction=round(waited / max(busy, 1e-9), 4),
                        wall_s=round(time.monotonic() - started, 1), target_met=end.pass_rate >= TARGET_PASS_RATE)  # fmt: skip
    run.write_summary(result.model_dump(mode="json"))
    run.plot(["reward_mean", "pass_rate", "eval_pass_rate"], reference=REFERENCE if REFERENCE.exists() else None)
    return result


class BatchSource(Protocol):
    """Where the learner's batches come from: ``get(step)`` waits for step ``step``'s batch (made
    from the weights after update ``max(step - staleness, 0)``); ``published(version, policy)``
    hands over the weights after update ``version``; ``close()`` stops what makes them."""

    def get(self, step: int) -> Batch: ...

    def published(self, version: int, policy: Policy) -> None: ...

    def close(self) -> None: ...


class ThreadSource:
    """Batches made on one thread of this process (``topology = "thread"``), in step order. With
    ``staleness`` k >= 1 the thread makes up to k batches ahead: step s from a copy of the weights
    taken when the learner got batch ``s - k`` (before its update: the weights after update
    ``s - k``), so every batch depends on the seed, its step and those weights alone, never on
    timing. k = 0: each batch is made when the learner asks, from the current weights."""

    def __init__(self, make: Any, policy: Policy, *, steps: int, staleness: int) -> None:
        self.make, self.policy, self.steps, self.k = make, policy, steps, staleness
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpo-rollout") if staleness else None
        self.pending: dict[int, Future[Batch]] = {}
        for s in range(min(staleness, steps)):  # steps 0..k-1 sample from the initial weights
            self._launch(s)

    def _launch(self, step: int) -> None:
        assert self.pool is not None
        self.pending[step] = self.pool.submit(self.make, step, copy.deepcopy(self.policy))

    def get(self, step: int) -> Batch:
        if self.pool is None:
            return self.make(step, self.policy)
        batch = self.pending.pop(step).result()
        if step + self.k < self.steps:  # the weights now are those after update `step`: step + k's
            self._launch(step + self.k)
        return batch

    def published(self, version: int, policy: Policy) -> None:
        pass  # (get takes its copies)

    def close(self) -> None:
        for f in self.pending.values():
            f.cancel()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _staled(batch: Batch, staleness: int) -> Batch:
    batch.staleness = staleness
    return batch


def report(result: GRPOResult, cfg: RunConfig) -> str:
    env = cfg.env
    rows = [(e.policy, e.tasks, e.reward_mean, f"{e.pass_rate:.1%}", f"{e.public_pass_rate:.1%}",
             ", ".join(f"{p or '<empty>'} x{n}" for p, n in e.top_programs[:3]))
            for e in (result.random, result.start, result.end)]  # fmt: skip
    return "\n".join([
        f"held-out tasks: {env.n_eval_tasks} of {env.task_set}, difficulty {env.eval_difficulty}, seed "
        f"{env.eval_task_seed} (training: {env.n_tasks} tasks, seed {env.task_seed}); greedy policy",
        format_table(["policy", "tasks", "mean reward", "pass rate", "public pass", "most frequent programs"], rows),
        f"hidden-test pass rate: start {result.start.pass_rate:.1%} -> end {result.end.pass_rate:.1%} "
        f"(random {result.random.pass_rate:.1%}); target {TARGET_PASS_RATE:.0%}: {'met' if result.target_met else 'NOT met'}",
        f"{result.steps} steps, {result.samples} samples ({result.dropped} dropped: sandbox errors) in {result.wall_s:.0f} s; "
        f"the learner waited on the sandbox {result.learner_wait_fraction:.0%} of the time; run directory {result.run_dir}",
    ])  # fmt: skip


def smoothed(values: Sequence[float], window: int = 20) -> list[float]:
    """The trailing mean of the last ``window`` values (NaN skipped)."""
    out = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i - window + 1) : i + 1] if not math.isnan(v)]
        out.append(sum(seen) / len(seen) if seen else math.nan)
    return out


def curve_plot(run_dir: Path, width: int = 60) -> str:
    """The training pass rate of the run (every-test, a trailing mean over 20 steps) next to the
    reference run's, on the reference's step axis, as a text plot."""
    mine = smoothed(read_curve(run_dir / "curve.csv").get("pass_rate", []))
    series = {"this run": mine}
    note = ""
    if REFERENCE.exists():
        ref = smoothed(read_curve(REFERENCE).get("pass_rate", []))
        # the reference first: where this run lies on it, this run's marks are the ones drawn
        series = {"reference": ref, "this run": mine + [math.nan] * (len(ref) - len(mine))}
        note = f"\ncurve.csv: {compare_rows(run_dir / 'curve.csv', REFERENCE, tolerant=LEARNER_FLOATS).message}"
    steps = max(len(v) for v in series.values())
    return (f"training pass rate (trailing mean of 20 steps) over {steps} steps\n"
            + text_plot(series, width=width, height=10, lo=0.0, hi=1.0) + note)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.grpo", description=__doc__.splitlines()[0])
    add_run_args(parser)
    parser.add_argument("--model", default=None, help="a local Hugging Face causal LM folder (extra llm)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="stop after N steps: exactly the first N rows of the full run (schedules span grpo.steps)")  # fmt: skip
    parser.add_argument("--topology", choices=["thread", "redis"], default=None,
                        help="redis: the learner, rollout actors and executors as processes joined by Redis (grpo.topology)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max-steps: expected a positive number of steps, got {args.max_steps}")
    overrides = list(args.set) + ([f"grpo.model={args.model}"] if args.model else [])
    overrides += [f"grpo.topology={args.topology}"] if args.topology else []
    try:
        cfg = load_config(NAME, GRPOSettings, config_dir=args.config_dir, overrides=overrides)
        _check(cfg)
        with Run.create(args.name or NAME, cfg, out=args.out) as run:
            result = train(cfg, run, progress=not args.quiet, max_steps=args.max_steps)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(result, cfg))
    print(curve_plot(result.run_dir))
    print(f"curve: {result.run_dir / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
