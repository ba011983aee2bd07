"""Guards on the training signal: the alerts that notice a run drifting before its curve shows it.

A policy-gradient run can fail quietly: the entropy collapses (every sample of a group is the same
program, so no group tells good from bad), the policy wanders far from its reference (the KL
term was turned off, or is too weak), or the rewards inside each group stop differing (all fail,
or all pass: every advantage is 0 and the update learns nothing). The loss keeps a plausible
value through all three. ``SignalGuard`` watches the three per step and says when one starts:

* ``entropy_drop``: over the last ``window`` steps, the mean entropy of the later half fell by more
  than ``entropy_drop`` (a fraction) below that of the earlier half (halves, not single steps:
  one step's entropy is noisy);
* ``kl``: the update's KL to the reference (the frozen initial policy) is above ``kl_max``;
* ``reward_spread``: over the last ``window`` steps, on average more than ``zero_std_fraction``
  of the groups had rewards all equal (zero spread, every advantage 0).

An alert fires when its condition becomes true and again only after it has been false; each
firing is a warning line on stderr and in the ``baselines.guards`` logger, a row of the run's
``alerts.csv`` (``step, alert, value, bound, message``), and TensorBoard's ``alerts/<name>`` is 1
while the condition holds (0 otherwise). The per-step values behind them go to ``guards.csv``
(deterministic, like ``curve.csv``) and to TensorBoard under ``guards/``. They are kept out of
``curve.csv`` on purpose: that file is compared, every column and every digit, with the committed
reference curves (``baselines.common.compare_rows``), and a new column would make every
comparison "NOT compared: the columns differ".

``warn_kl_off`` is the other half: a recipe that has a KL term calls it once when a config turns
the term off (GRPO ``kl_coef = 0``, TRL ``beta = 0``), so that no run drops its anchor silently.
"""

from __future__ import annotations

import csv
import logging
import math
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from baselines.common import Run, _Csv

__all__ = ["Alert", "AlertLog", "GuardStats", "SignalGuard", "warn_kl_off", "zero_std_fraction"]

log = logging.getLogger("baselines.guards")
log.addHandler(logging.NullHandler())  # printed by ``_say`` itself: no second copy from logging's last resort

AlertName = Literal["entropy_drop", "kl", "reward_spread"]
ALERTS: tuple[AlertName, ...] = ("entropy_drop", "kl", "reward_spread")


def _say(message: str) -> None:
    """One warning line: to the ``baselines.guards`` logger and to stderr (above a progress bar)."""
    log.warning(message)
    from tqdm import tqdm

    tqdm.write(f"warning: {message}", file=sys.stderr)


def warn_kl_off(setting: str, value: float, recipe: str) -> bool:
    """Warn (logged and printed, once: call it when the run starts) that ``setting`` = ``value``
    turns the KL term of ``recipe`` off. Returns whether it warned (``value`` is 0)."""
    if value != 0:
        return False
    _say(f"{setting} = {value:g}: {recipe} trains without a KL penalty to its reference policy, so nothing holds "
         f"the policy near it; watch the kl, entropy and alerts of the run, or set {setting} > 0")  # fmt: skip
    return True


def zero_std_fraction(rewards: Sequence[float | None], group_size: int, tol: float = 1e-9) -> float | None:
    """The share of the groups (consecutive ``group_size`` samples; at least two judged ones)
    whose judged rewards are all equal (within ``tol``): groups whose advantages are all 0.
    ``None`` when no group has two judged samples."""
    if group_size < 1:
        raise ValueError(f"group_size: expected a positive number of samples per group, got {group_size}")
    groups = flat = 0
    for g in range(0, len(rewards), group_size):
        judged = [r for r in rewards[g : g + group_size] if r is not None]
        if len(judged) < 2:
            continue
        groups += 1
        flat += max(judged) - min(judged) <= tol
    return flat / groups if groups else None


class Alert(BaseModel):
    """One firing of a guard: at ``step``, ``value`` crossed ``bound``."""

    model_config = ConfigDict(frozen=True)

    step: int
    alert: AlertName
    value: float
    bound: float
    message: str


class GuardStats(BaseModel):
    """The values the guards judged at one step (``None``: not enough steps yet, or nothing to judge)."""

    model_config = ConfigDict(frozen=True)

    entropy_drop: float | None = Field(None, description="1 - mean entropy of the window's later half / its earlier half's")
    kl: float | None = Field(None, description="the update's KL to the reference")
    zero_std_fraction: float | None = Field(None, description="this step's share of groups with rewards all equal")
    zero_std_mean: float | None = Field(None, description="that share, averaged over the window")


class SignalGuard:
    """Watches entropy, KL and the reward spread step by step (see the module's docstring);
    ``observe`` returns the step's values and the alerts that fired at it. Deterministic: the same
    inputs give the same alerts."""

    def __init__(self, *, window: int, entropy_drop: float, kl_max: float, zero_std_fraction: float) -> None:
        if window < 2:
            raise ValueError(f"window: expected at least 2 steps (two halves to compare), got {window}")
        if not 0 < entropy_drop <= 1:
            raise ValueError(f"entropy_drop: expected a fraction in (0, 1], got {entropy_drop}")
        if not kl_max > 0:
            raise ValueError(f"kl_max: expected a positive bound, got {kl_max}")
        if not 0 < zero_std_fraction <= 1:
            raise ValueError(f"zero_std_fraction: expected a fraction in (0, 1], got {zero_std_fraction}")
        self.window, self.entropy_drop, self.kl_max, self.zero_std = window, entropy_drop, kl_max, zero_std_fraction
        self._entropy: deque[float] = deque(maxlen=window)
        self._flat: deque[float] = deque(maxlen=window)
        self._on: dict[str, bool] = dict.fromkeys(ALERTS, False)

    def observe(self, step: int, *, entropy: float | None, kl: float | None,
                zero_std: float | None) -> tuple[GuardStats, list[Alert]]:  # fmt: skip
        """Take one step's entropy, KL and share of zero-spread groups (``None`` where the step
        has none: it is skipped, not counted as 0)."""
        if entropy is not None and math.isfinite(entropy):
            self._entropy.append(entropy)
        if zero_std is not None and math.isfinite(zero_std):
            self._flat.append(zero_std)
        drop = None
        if len(self._entropy) == self.window:
            half = self.window // 2
            values = list(self._entropy)
            early, late = values[:half], values[-half:]
            before = sum(early) / half
            drop = 1 - (sum(late) / half) / before if before > 0 else None
        flat_mean = sum(self._flat) / len(self._flat) if len(self._flat) == self.window else None
        stats = GuardStats(entropy_drop=drop, kl=kl if kl is not None and math.isfinite(kl) else None,
                           zero_std_fraction=zero_std, zero_std_mean=flat_mean)  # fmt: skip
        w = self.window
        checks: dict[AlertName, tuple[float | None, float, str]] = {
            "entropy_drop": (drop, self.entropy_drop,
                             f"entropy fell by {drop if drop is not None else 0:.0%} within {w} steps (mean of the last "
                             f"{w // 2} vs the {w // 2} before; bound {self.entropy_drop:.0%}): the policy is collapsing "
                             f"onto few programs"),
            "kl": (stats.kl, self.kl_max,
                   f"KL to the reference is {stats.kl if stats.kl is not None else 0:.4g}, past the bound {self.kl_max:g}: "
                   f"the policy is drifting far from where it started"),
            "reward_spread": (flat_mean, self.zero_std,
                              f"over the last {w} steps {flat_mean if flat_mean is not None else 0:.0%} of the groups "
                              f"had rewards all equal (bound {self.zero_std:.0%}): advantages near zero, little to "
                              f"learn from"),
        }  # fmt: skip
        fired = []
        for name, (value, bound, message) in checks.items():
            on = value is not None and value > bound
            if value is not None and on and not self._on[name]:
                fired.append(Alert(step=step, alert=name, value=value, bound=bound, message=f"step {step}: {message}"))
            self._on[name] = on
        return stats, fired

    @property
    def active(self) -> dict[str, bool]:
        """Which conditions held at the last step."""
        return dict(self._on)


class AlertLog:
    """Where a run's guard values and alerts go: ``guards.csv`` (every step), ``alerts.csv`` (every
    firing; only the header when none fired), TensorBoard (``guards/*``, ``alerts/*``) and a
    warning line per firing."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._guards = _Csv(run.path / "guards.csv")
        self._alerts = open(run.path / "alerts.csv", "w", newline="", encoding="utf-8")  # closed by close()
        self._writer = csv.writer(self._alerts)
        self._writer.writerow(list(Alert.model_fields))
        self._alerts.flush()
        self.fired: list[Alert] = []

    def record(self, step: int, stats: GuardStats, fired: Sequence[Alert], active: dict[str, bool]) -> None:
        self._guards.write({"step": step, **stats.model_dump()})
        tb: Any = self.run.tensorboard
        for k, v in stats.model_dump().items():
            if v is not None and math.isfinite(v):
                tb.add_scalar(f"guards/{k}", v, step)
        for name in ALERTS:
            tb.add_scalar(f"alerts/{name}", float(active.get(name, False)), step)
        for alert in fired:
            self._writer.writerow([repr(v) if isinstance(v, float) else v for v in alert.model_dump().values()])
            self._alerts.flush()
            self.fired.append(alert)
            _say(alert.message)

    def close(self) -> None:
        self._guards.close()
        self._alerts.close()
