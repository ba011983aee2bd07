"""``code-env replay``: rebuild each logged episode's environment from the record's ``config``,
step the logged actions again and report every reward that differs (none, for deterministic
tasks). Steps cut by a wall-clock budget are counted apart: their reward depends on the machine."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from registry import RegistryError, Task
from registry.verify import Runner
from sandbox import SandboxError

from .._errors import first_error
from .._visible import visible
from ..env import CodeExecEnv, EnvConfig, task_fingerprint
from ..grading import shared_sandbox
from ..tracing import GenerationEnd
from ._read import Episode, Step, episodes, outcome

TIMING_BUDGETS = frozenset({"episode_time", "turn_time"})  # budgets that depend on wall-clock time
TOLERANCE = 1e-9


@dataclass
class Difference:
    """A step whose replayed reward is not the logged one (``new_reward`` None: the replayed
    episode had already ended)."""

    trace_id: str
    where: str
    logged_reward: float
    new_reward: float | None
    logged_tier: str | None
    new_tier: str | None
    note: str = ""

    def __str__(self) -> str:
        new = "-" if self.new_reward is None else f"{self.new_reward:g} ({self.new_tier})"
        note = f"  [{self.note}]" if self.note else ""
        text = f"{self.trace_id} ({self.where}): logged {self.logged_reward:g} ({self.logged_tier}), replayed {new}{note}"
        return visible(text, keep_newlines=False)  # one line: a trace id from the log cannot forge another


@dataclass
class ReplayReport:
    """What a replay found. ``ok``: no reward differs (timing-dependent steps aside)."""

    episodes: int = 0
    steps: int = 0
    differences: list[Difference] = field(default_factory=list)
    timing_dependent: int = 0  # re-judged steps cut by a wall-clock budget (in the log or the replay)
    timing_differences: list[Difference] = field(default_factory=list)  # of those, the differing ones
    skipped_sandbox_errors: int = 0  # logged steps where the sandbox itself failed
    skipped_judge_errors: int = 0  # logged steps where the LLM judge's endpoint failed
    replay_sandbox_errors: list[str] = field(default_factory=list)  # where the sandbox failed in the replay
    incomplete_episodes: int = 0  # not starting at turn 0: cannot be replayed
    tasks_changed: int = 0  # episodes whose task no longer matches the logged fingerprint

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        lines = [f"replayed {self.episodes} episodes, {self.steps} steps re-judged: {len(self.differences)} differ"]
        if self.timing_dependent:
            lines.append(f"timing-dependent (a wall-clock budget): {self.timing_dependent} steps, "
                         f"{len(self.timing_differences)} of them differ (not counted)")  # fmt: skip
        if self.skipped_sandbox_errors:
            lines.append(f"skipped: {self.skipped_sandbox_errors} steps with a sandbox error in the log")
        if self.skipped_judge_errors:
            lines.append(f"skipped: {self.skipped_judge_errors} steps with a judge error in the log")
        if self.incomplete_episodes:
            lines.append(f"skipped: {self.incomplete_episodes} episodes that do not start at turn 0")
        if self.replay_sandbox_errors:
            lines.append(f"not re-judged: the sandbox failed on {len(self.replay_sandbox_errors)} steps "
                         f"({', '.join(self.replay_sandbox_errors[:3])}{', ...' if len(self.replay_sandbox_errors) > 3 else ''})")  # fmt: skip
        if self.tasks_changed:
            lines.append(f"warning: the task changed since logging in {self.tasks_changed} episodes")
        lines += [f"DIFF {d}" for d in self.differences]
        lines += [f"timing {d}" for d in self.timing_differences]
        return "\n".join(visible(line, keep_newlines=False) for line in lines)


def _env_builder(executor: Runner | None) -> tuple[Callable[[Step], CodeExecEnv], dict[str, CodeExecEnv]]:
    """An env per distinct config (and inline task), built from a record, without a log."""
    envs: dict[str, CodeExecEnv] = {}

    def env_for(step: Step) -> CodeExecEnv:
        raw = step.rec.get("config")
        if not isinstance(raw, dict):
            raise step.error("cannot replay: no 'config' in the record")
        try:
            cfg = EnvConfig.model_validate(raw)
        except ValidationError as exc:
            raise step.error(first_error(exc, prefix="config.")) from None
        key = cfg.model_dump_json()
        tasks: str | list[Task] = cfg.tasks
        if cfg.tasks == "<inline>":
            try:
                task = Task.model_validate(step.rec.get("task"))
            except ValidationError as exc:
                raise step.error(f"{first_error(exc, prefix='task.')} (an inline task set logs each task)") from None
            tasks = [task]
            key += task.model_dump_json()
        if key not in envs:
            options = cfg.model_dump(exclude={"tasks", "reward", "log_dir"})
            try:
                runner = executor if executor is not None else shared_sandbox(cfg.backend)
                envs[key] = CodeExecEnv(tasks, executor=runner, reward=cfg.reward, log_dir=None, **options)
            except (RegistryError, SandboxError, ValueError, TypeError, OSError, ImportError) as exc:
                raise step.error(f"cannot rebuild the environment: {exc}") from None
        return envs[key]

    return env_for, envs


def generation_end(rec: dict[str, Any]) -> GenerationEnd | None:
    """How a logged step's generation ended, when not by itself: the state right after
    ``generating`` in its transitions (``context_window_overflow`` or ``timed-out``)."""
    marks = [t[0] for t in rec.get("transitions") or [] if isinstance(t, list) and t]
    if len(marks) >= 2 and marks[0] == "generating" and marks[1] in ("context_window_overflow", "timed-out"):
        return "context_window_overflow" if marks[1] == "context_window_overflow" else "timed-out"
    return None


def _replay_episode(ep: Episode, env: CodeExecEnv, report: ReplayReport) -> None:
    first = ep.first
    problem_id = first.rec.get("problem_id")
    if not isinstance(problem_id, str):
        raise first.error("cannot replay: no 'problem_id' in the record")
    try:
        env.reset(options={"problem_id": problem_id})
    except RegistryError as exc:
        raise first.error(f"cannot replay: {exc}") from None
    assert env.task is not None
    logged_fp = first.rec.get("task_fingerprint")
    changed = logged_fp is not None and logged_fp != task_fingerprint(env.task)
    report.tasks_changed += changed
    report.episodes += 1
    ended, ended_by_timing = False, False
    for step in ep.steps:
        if step.rec.get("sandbox_error"):  # our failure when logging: nothing to compare with
            report.skipped_sandbox_errors += 1
            break
        if step.rec.get("judge_error"):  # the judge's endpoint failed when logging: no verdict to compare with
            report.skipped_judge_errors += 1
            break
        if ended:
            d = Difference(step.rec["trace_id"], step.where, step.reward, None, outcome(step.rec), None,
                           "the replayed episode had already ended")  # fmt: skip
            (report.timing_differences if ended_by_timing else report.differences).append(d)
            continue
        end = generation_end(step.rec)
        if end is not None:  # the agent said how the generation ended: the env is told again
            env.end_generation(end)
        _, reward, terminated, truncated, info = env.step(step.rec["action"])
        if info.get("sandbox_error") or info.get("judge_error"):
            report.replay_sandbox_errors.append(step.where)
            break
        report.steps += 1
        timing = step.rec.get("budget") in TIMING_BUDGETS or info.get("budget") in TIMING_BUDGETS
        report.timing_dependent += timing
        if not (reward == step.reward or abs(reward - step.reward) < TOLERANCE):
            d = Difference(step.rec["trace_id"], step.where, step.reward, reward, outcome(step.rec), outcome(info),
                           "the task changed since logging" if changed else "")  # fmt: skip
            (report.timing_differences if timing else report.differences).append(d)
        ended, ended_by_timing = terminated or truncated, timing


def replay(log: str | Path, *, executor: Runner | None = None, progress: bool = False) -> ReplayReport:
    """Re-judge every logged step: rebuild each episode's environment from its record (no log is
    written), reset to the logged task, step the logged actions and compare the rewards.

    Raises ``LogFileError`` (file and line) for a log that cannot be read or replayed."""
    from tqdm import tqdm

    eps = list(episodes(log, slim=True))  # read it all first: a malformed line fails before any run
    env_for, built = _env_builder(executor)
    report = ReplayReport()
    try:
        for ep in tqdm(eps, desc="replay", unit="episode", file=sys.stderr, disable=None if progress else True):
            if not ep.complete:
                report.incomplete_episodes += 1
                continue
            _replay_episode(ep, env_for(ep.first), report)
    finally:
        for env in built.values():
            env.close()
    return report
