"""The grader as trainers want it: a TRL ``reward_funcs`` callable, a verl ``compute_score``
function, and extraction of code from a markdown reply. All of them call ``grading.grade``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import registry
from registry import Task
from registry.verify import Runner

from .grading import default_sandbox, grade, grade_many
from .reward import RewardConfig

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(completion: str) -> str:
    """The program in an LLM reply: the last fenced block marked python/py (or unmarked), else the
    last fenced block of any language, else the whole text."""
    blocks = _FENCE.findall(completion)
    if not blocks:
        return completion
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3", "")]
    return (python or [body for _, body in blocks])[-1]


def _text(completion: Any) -> str:
    """TRL passes strings, or chat messages (a list of {"role", "content"})."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion: expected str or a list of chat messages, got {type(completion).__name__}")


class TRLReward:
    """``reward_funcs`` for TRL's GRPOTrainer: ``(prompts, completions, **columns) -> list[float | None]``.

    The task of each completion comes from the dataset column ``problem_id`` (name it with
    ``id_column``), looked up in ``tasks`` (a task-set name, a path, or a list of ``Task``), else
    made from the id itself (``registry.resolve``: a generated id such as
    ``synthetic:arith/s0/d3/5`` regenerates its task); an id that names no task raises
    ``registry.UnknownTaskError``. A completion the sandbox failed to run (twice) gets ``None``,
    which TRL skips: a policy is never punished for our infrastructure.
    """

    def __init__(self, tasks: str | Sequence[Task] = "builtin", *, sandbox: Runner | None = None,
                 config: RewardConfig | None = None, id_column: str = "problem_id") -> None:  # fmt: skip
        loaded = registry.load(tasks) if isinstance(tasks, str) else list(tasks)
        self.tasks = {t.problem_id: t for t in loaded}
        self.sandbox = sandbox
        self.config = config or RewardConfig()
        self.id_column = id_column
        self.__name__ = "code_env_reward"

    def _resolve(self, problem_id: Any) -> Task:
        if not isinstance(problem_id, str):
            raise TypeError(f"{self.id_column}: expected str, got {type(problem_id).__name__}")
        task = registry.resolve(problem_id, list(self.tasks.values()))
        self.tasks[problem_id] = task
        return task

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        ids = kwargs.get(self.id_column)
        if ids is None:
            raise KeyError(f"the dataset has no {self.id_column!r} column (columns passed: {sorted(kwargs)})")
        if len(ids) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(ids)} {self.id_column!r} values")
        sb = self.sandbox or default_sandbox()
        jobs = []
        for i, (pid, completion) in enumerate(zip(ids, completions, strict=True)):
            task = self.tasks[pid] if pid in self.tasks else self._resolve(pid)
            jobs.append((task, extract_code(_text(completion)), f"{pid}/{i}/0"))
        # a GRPO group is many completions at once: one batch, every run on every worker
        grades = grade_many([(t, c) for t, c, _ in jobs], sandbox=sb, config=self.config, trace_ids=[j[2] for j in jobs])
        return [g.reward for g in grades]


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None,
                  *, config: RewardConfig | None = None, sandbox: Runner | None = None) -> float:  # fmt: skip
    """verl's reward function. ``ground_truth`` is a problem id (``registry.resolve``: a generated id
    regenerates its task; an id of a ``.jsonl`` file named by ``data_source`` is looked up there),
    or a whole ``Task`` as JSON. An id that names no task raises ``registry.UnknownTaskError``.
    verl cannot skip a sample: a sandbox failure (after the grader's one more try) raises."""
    code = extract_code(solution_str)
    res = grade(_verl_task(data_source, ground_truth), code, sandbox=sandbox, config=config)
    if res.reward is None:
        raise RuntimeError(f"the sandbox failed twice on {res.problem_id}: {res.sandbox_error}")
    return res.reward


def _verl_task(data_source: str, ground_truth: str) -> Task:
    if ground_truth.lstrip().startswith("{"):
        return Task.model_validate(json.loads(ground_truth))
    try:
        return registry.resolve(ground_truth)
    except registry.UnknownTaskError:
        if data_source.endswith(".jsonl") or data_source in registry.list():
            return registry.get(registry.load(data_source), ground_truth)
        raise
