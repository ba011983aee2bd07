"""The reward: one number from a verification, and the breakdown that explains it.

Tiers (defaults; every one configurable from a TOML or JSON file, validated):

| outcome | reward |
|---|---|
| the program does not compile | ``syntax_error`` = -1.0 |
| a public test ran out of time (and not all public tests passed), or the grade's time budget was spent | ``timeout`` = -0.5 |
| a public test ran out of memory (and not all passed) | ``oom`` = -0.5 |
| no attempt: nothing defined, no entry point, it raised or died while loading (before any test), every call returned None, no output (stdio, crashed or not) | ``no_attempt`` = -0.5 |
| k of n public tests pass | ``partial_max * k / n`` (0 … 0.6) |
| every public test passes | ``all_public`` = 0.8 |
| every public and hidden test passes (a task without hidden tests tops out at ``all_public``) | ``all_tests`` = 1.0 |
| an episode budget ran out | ``budget_exhausted`` = -0.1 (slightly below a plain failure, 0) |
| the model stopped at its token or context limit | ``context_window_overflow`` = None: the reply is judged as it is; a number: that reward, unrun |
| the program tampered with the verifier's result channel | the lowest of ``timeout``, ``oom``, ``no_attempt`` and 0 |
| a failure of the sandbox itself | no reward (``None``): never scored as a wrong answer |
| a failure of the LLM judge's endpoint (timeout, no connection, HTTP 5xx/429 after retries) | no reward (``None``, tier ``judge_error``): dropped like a sandbox failure |

``no_attempt`` closes the floor-score shortcut: answering with nothing earns no more than running
out of time (by default), and less than answering wrongly; a crash while loading is no answer
either (else ``raise`` at import would beat an empty program); ``no_attempt = 0`` gives back the plain
ladder.

With an LLM judge (``judge``, weight ``w`` <= 0.3), a positive reward ``r`` becomes
``r * (1 - w * (1 - s))`` for the judge's score ``s``: the judge can take away, never add. A reply
without a score counts as ``s = 0.5``; code longer than the judge's window as ``s = 0``
(unjudged); an endpoint that failed gives no reward at all (``judge_error``), never a guess.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._errors import first_error
from .judge import JudgeConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Tier = Literal["syntax_error", "timeout", "oom", "no_attempt", "tampered", "partial", "all_public", "all_tests",
               "budget_exhausted", "context_window_overflow", "sandbox_error", "judge_error"]


class RewardConfig(BaseModel):
    """Reward values per tier. Unknown fields are an error (a typo must not fall back silently)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    syntax_error: float = -1.0
    timeout: float = -0.5
    oom: float = -0.5
    no_attempt: float = Field(-0.5, description="an empty or no-op program: it answered nothing (0: the plain ladder)")
    partial_max: float = Field(0.6, ge=0)
    all_public: float = 0.8
    all_tests: float = 1.0
    budget_exhausted: float = -0.1
    context_window_overflow: float | None = Field(
        None, description="a reply cut at the model's token or context limit: None judges it as it is; "
                          "a number is its reward, without running it (the sample ends in context_window_overflow)")  # fmt: skip
    process_bonus: float = Field(0.05, ge=0, le=0.2, description="per verified revision in multi-turn episodes")
    process_bonus_cap: float = Field(0.1, ge=0, le=0.3)
    judge: JudgeConfig | None = Field(None, description="an optional LLM judge (weight <= 0.3)")
    grade_budget_runs: float | None = Field(
        1.5, gt=0, allow_inf_nan=False,
        description="a grade's total time budget (registry.budget), in one-run limits (per-test limit + 0.25 s), "
                    "plus 2 % of the per-test limit per test (and 0.25 s per stdio test): spent, the sample is a "
                    "timeout; None: no budget")  # fmt: skip

    @model_validator(mode="after")
    def _ordered(self) -> RewardConfig:
        if not self.partial_max <= self.all_public <= self.all_tests:
            raise ValueError(
                f"expected partial_max <= all_public <= all_tests, got {self.partial_max}, {self.all_public}, {self.all_tests}"
            )
        return self

    @property
    def tampered(self) -> float:
        """A program that tampered with the verifier's channel: the lowest reward a program that
        compiles can get, so that tampering never beats an honest failure."""
        return min(self.timeout, self.oom, self.no_attempt, 0.0)

    @classmethod
    def from_file(cls, path: str | Path) -> RewardConfig:
        """Read a ``.toml`` or ``.json`` file (a ``[reward]`` table, or the top level)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read reward config {p}: {exc.strerror}") from None
        try:
            data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{p}: not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("reward"), dict):
            data = data["reward"]
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"{p}: {first_error(exc)}") from None


class RewardBreakdown(BaseModel):
    """Why the reward is what it is."""

    tier: Tier
    reward: float | None
    public_passed: int = 0
    public_total: int = 0
    hidden_passed: int = 0
    hidden_total: int = 0
    explanation: str = ""
    judge_score: float | None = Field(None, description="the LLM judge's score, when one judged")
    budget_s: float | None = Field(None, description="the grade's total time budget, seconds (registry.budget; None: none)")
    judge_neutral: bool = False
    reward_before_judge: float | None = None
