"""``code-env replay``: rebuild each logged episode's environment from the record's ``config``,
step the logged actions again and report every reward that differs (none, for deterministic
tasks). Steps cut by a wall-clock budget are counted apart: their reward depends on the machine.

A ``CodeAgent-v0`` episode (records with ``"env": "CodeAgent-v0"``) is rebuilt as that env
(``code_env.agent.AgentConfig``) and its calls are made again, each as it was given (the text,
or the object whose JSON the record holds): a step differs when its reward, its observation (the tool's
result, the run's output and flags, the counters: texts compared by size and SHA-256, since the
log may hold only their head and tail), the workspace after it (its SHA-256) or the episode's end
differ. Clock-dependent steps are counted apart: the ``episode_time`` budget, and a ``run`` that
hit its time limit (``call_time_s``) in the log or in the replay. A run's duration is never
compared (it is in no observation)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from registry import RegistryError, Task
from registry.verify import Runner
from sandbox import SandboxError

from .._errors import first_error
from .._visible import visible
from ..agent import INLINE, AgentConfig, CodeAgentEnv, workspace_digest
from ..env import CodeExecEnv, EnvConfig, task_fingerprint
from ..grading import shared_sandbox
from ..tracing import GenerationEnd
from ..trajectory import clipped, text_digest
from ._read import Episode, Step, agent_label, episodes, is_agent, outcome

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
    agent_steps: int = 0  # of ``steps``, the calls of CodeAgent-v0 episodes made again
    timing_dependent: int = 0  # re-judged steps cut by a wall-clock budget, or runs past their time (log or replay)
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
        if self.agent_steps:
            lines.append(f"of them {self.agent_steps} calls of CodeAgent-v0 episodes, made again: rewards, observations "
                         "and workspaces compared")  # fmt: skip
        if self.timing_dependent:
            lines.append(f"timing-dependent (a wall-clock budget, or a run past its time limit): {self.timing_dependent} steps, "
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


ConfigT = TypeVar("ConfigT", EnvConfig, AgentConfig)


def _logged_config(step: Step, model: type[ConfigT]) -> tuple[ConfigT, str | list[Task], str]:
    """A record's env config (validated as ``model``), its tasks (a set's name, or the record's own
    task for an inline set) and the key of the env they make; an error naming the record if not."""
    raw = step.rec.get("config")
    if not isinstance(raw, dict):
        raise step.error("cannot replay: no 'config' in the record")
    try:
        cfg = model.model_validate(raw)
    except ValidationError as exc:
        raise step.error(first_error(exc, prefix="config.")) from None
    key = cfg.model_dump_json()
    if cfg.tasks != INLINE:  # (both envs spell an inline set alike)
        return cfg, cfg.tasks, key
    try:
        task = Task.model_validate(step.rec.get("task"))
    except ValidationError as exc:
        raise step.error(f"{first_error(exc, prefix='task.')} (an inline task set logs each task)") from None
    return cfg, [task], key + task.model_dump_json()


def _env_builder(executor: Runner | None) -> tuple[Callable[[Step], CodeExecEnv], dict[str, CodeExecEnv]]:
    """An env per distinct config (and inline task), built from a record, without a log."""
    envs: dict[str, CodeExecEnv] = {}

    def env_for(step: Step) -> CodeExecEnv:
        cfg, tasks, key = _logged_config(step, EnvConfig)
        if key not in envs:
            options = cfg.model_dump(exclude={"tasks", "reward", "log_dir"})
            try:
                runner = executor if executor is not None else shared_sandbox(cfg.backend)
                envs[key] = CodeExecEnv(tasks, executor=runner, reward=cfg.reward, log_dir=None, **options)
            except (RegistryError, SandboxError, ValueError, TypeError, OSError, ImportError) as exc:
                raise step.error(f"cannot rebuild the environment: {exc}") from None
        return envs[key]

    return env_for, envs


def _agent_env_builder(executor: Runner | None) -> tuple[Callable[[Step], CodeAgentEnv], dict[str, CodeAgentEnv]]:
    """A ``CodeAgent-v0`` env per distinct config (and inline task), built from a record, without a log."""
    envs: dict[str, CodeAgentEnv] = {}

    def env_for(step: Step) -> CodeAgentEnv:
        cfg, tasks, key = _logged_config(step, AgentConfig)
        if key not in envs:
            options = cfg.model_dump(exclude={"tasks", "reward", "log_dir", "log_every", "log_max_bytes", "log_text_bytes"})
            try:
                runner = executor if executor is not None else shared_sandbox(cfg.backend)
                envs[key] = CodeAgentEnv(tasks, executor=runner, reward=cfg.reward, **options)
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


def _begin(ep: Episode, env: CodeExecEnv | CodeAgentEnv, report: ReplayReport,
           reset_errors: tuple[type[Exception], ...]) -> bool:  # fmt: skip
    """Reset ``env`` to the episode's task (an error naming the record if it cannot be) and count
    the episode, and its task if it changed since the log; whether it did."""
    first = ep.first
    problem_id = first.rec.get("problem_id")
    if not isinstance(problem_id, str):
        raise first.error("cannot replay: no 'problem_id' in the record")
    try:
        env.reset(options={"problem_id": problem_id})
    except reset_errors as exc:
        raise first.error(f"cannot replay: {exc}") from None
    assert env.task is not None
    logged_fp = first.rec.get("task_fingerprint")
    changed = logged_fp is not None and logged_fp != task_fingerprint(env.task)
    report.tasks_changed += changed
    report.episodes += 1
    return changed


def _replay_episode(ep: Episode, env: CodeExecEnv, report: ReplayReport) -> None:
    changed = _begin(ep, env, report, (RegistryError,))
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


def _preview(value: Any, n: int = 40) -> str:
    c = clipped(value)
    text = c.head if c is not None else str(value)
    return repr(text if len(text) <= n else text[:n] + "...")


def _agent_mismatches(rec: dict[str, Any], obs: dict[str, Any], env: CodeAgentEnv, terminated: bool,
                      truncated: bool) -> list[str]:  # fmt: skip
    """What of a replayed call is not as logged: observation fields, the workspace, the end."""
    out = []
    logged = rec.get("observation")
    for key, value in (logged.items() if isinstance(logged, dict) else ()):
        if key not in obs:
            out.append(f"{key}: not in the replayed observation")
        elif isinstance(obs[key], str):
            if text_digest(value) != text_digest(obs[key]):
                out.append(f"{key}: logged {_preview(value)}, replayed {_preview(obs[key])}")
        elif value != int(obs[key]):
            out.append(f"{key}: logged {value!r:.40}, replayed {int(obs[key])}")
    ws = rec.get("workspace")
    if isinstance(ws, dict) and ws.get("sha256") != workspace_digest(env.workspace):
        out.append(f"the workspace after the call (logged {ws.get('files')} files, {ws.get('bytes')} bytes; replayed "
                   f"{len(env.workspace)} files, {sum(len(d) for d in env.workspace.values())} bytes)")  # fmt: skip
    if (bool(rec.get("terminated")), bool(rec.get("truncated"))) != (terminated, truncated):
        out.append(f"the end: logged terminated={bool(rec.get('terminated'))} truncated={bool(rec.get('truncated'))}, "
                   f"replayed terminated={terminated} truncated={truncated}")  # fmt: skip
    return out


def _ran_past_its_time(observation: Any) -> bool:
    return isinstance(observation, dict) and bool(observation.get("timeout"))


def _replay_agent_episode(ep: Episode, env: CodeAgentEnv, report: ReplayReport) -> None:
    changed = _begin(ep, env, report, (ValueError,))
    ended, ended_by_timing = False, False
    for step in ep.steps:
        rec = step.rec
        if rec.get("sandbox_error"):
            report.skipped_sandbox_errors += 1
            break
        if rec.get("judge_error"):
            report.skipped_judge_errors += 1
            break
        if ended:
            d = Difference(rec["trace_id"], step.where, step.reward, None, agent_label(rec), None,
                           "the replayed episode had already ended")  # fmt: skip
            (report.timing_differences if ended_by_timing else report.differences).append(d)
            continue
        try:
            action = json.loads(rec["action"]) if rec.get("action_format") == "json" else rec["action"]
        except json.JSONDecodeError as exc:
            raise step.error(f"cannot replay: 'action' is not the JSON its action_format says ({exc.msg})") from None
        obs, reward, terminated, truncated, info = env.step(action)
        if info.get("sandbox_error") or info.get("judge_error"):
            report.replay_sandbox_errors.append(step.where)
            break
        report.steps += 1
        report.agent_steps += 1
        timing = (rec.get("budget") in TIMING_BUDGETS or info.get("budget") in TIMING_BUDGETS
                  or _ran_past_its_time(rec.get("observation")) or _ran_past_its_time(obs))  # fmt: skip
        report.timing_dependent += timing
        mismatches = _agent_mismatches(rec, obs, env, terminated, truncated)
        if changed:
            mismatches.append("the task changed since logging")
        if mismatches or not (reward == step.reward or abs(reward - step.reward) < TOLERANCE):
            note = "; ".join(mismatches[:3]) + (f"; and {len(mismatches) - 3} more" if len(mismatches) > 3 else "")
            replayed = {**info, "call": {"name": info.get("tool")} if info.get("tool") else None}
            d = Difference(rec["trace_id"], step.where, step.reward, reward, agent_label(rec), agent_label(replayed), note)
            (report.timing_differences if timing else report.differences).append(d)
        ended, ended_by_timing = terminated or truncated, timing


def replay(log: str | Path, *, executor: Runner | None = None, progress: bool = False) -> ReplayReport:
    """Re-judge every logged step: rebuild each episode's environment from its record (no log is
    written), reset to the logged task, step the logged actions and compare the rewards (and, for
    a ``CodeAgent-v0`` episode, the observations and the workspace: see the module).

    Raises ``LogFileError`` (file and line) for a log that cannot be read or replayed."""
    from tqdm import tqdm

    eps = list(episodes(log, slim=True))  # read it all first: a malformed line fails before any run
    env_for, built = _env_builder(executor)
    agent_for, agents = _agent_env_builder(executor)
    report = ReplayReport()
    try:
        for ep in tqdm(eps, desc="replay", unit="episode", file=sys.stderr, disable=None if progress else True):
            if not ep.complete:
                report.incomplete_episodes += 1
                continue
            if is_agent(ep.first.rec):
                _replay_agent_episode(ep, agent_for(ep.first), report)
            else:
                _replay_episode(ep, env_for(ep.first), report)
    finally:
        for env in built.values():
            env.close()
        for agent in agents.values():
            agent.close()
    return report
