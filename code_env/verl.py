"""verl: ``compute_score`` for verl's per-sample reward managers (``naive``, ``prime``, ``dapo``)
and ``compute_score_batch`` for its ``batch`` reward manager, as a ``custom_reward_function``::

    custom_reward_function.path=pkg://code_env          # or the path of this file (see below)
    custom_reward_function.name=compute_score
    # the batch form, every sample of a step in one sandbox batch:
    reward_model.reward_manager=batch
    custom_reward_function.name=compute_score_batch

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...,
**reward_kwargs)`` per sample, and ``compute_score_batch(data_sources=..., solution_strs=...,
ground_truths=..., extra_infos=..., **reward_kwargs)`` once per batch, where ``reward_kwargs`` are
``custom_reward_function.reward_kwargs`` from the config (and whatever else a verl version adds:
unknown keywords are ignored). The dataset's ``reward_model.ground_truth`` is the problem id (or a
whole ``Task`` as JSON), ``data_source`` the task set (a name or a ``.jsonl`` path, used when the id
alone names no task).

This module imports ``code_env`` absolutely, so verl may also load it by its file path
(``python -c "import code_env.verl as m; print(m.__file__)"``), as versions without ``pkg://`` do.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

import registry
from code_env._errors import first_error
from code_env.adapters import JoinPrompt, needs_extras, program_of, resolve_task, reward_config
from code_env.grading import Grade, Judged, judge_many, program_language, resolve_executor
from code_env.records import grade_record
from code_env.reward import RewardConfig
from code_env.tracing import trace_id
from code_env.trajectory import MAX_TOTAL_BYTES, TEXT_BYTES, TrajectoryLogger
from registry import Task
from registry.verify import Runner

log = logging.getLogger(__name__)

SANDBOX_ERROR_SCORE = 0.0
"""The score of a sample the sandbox failed to run (twice): verl cannot skip a sample, so it gets
this neutral value (the reward of a plain wrong answer) and, in the dict form, ``sandbox_error``.
A sample whose LLM judge call failed (tier ``judge_error``: the endpoint timed out, refused the
connection or answered 5xx/429 after the retries) takes the same path, with ``judge_error``."""

Score = float | dict[str, Any]


def compute_score(data_source: str, solution_str: str, ground_truth: str | None, extra_info: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> Score:  # fmt: skip
    """verl's per-sample reward function: ``grade``'s reward for the program in ``solution_str``.

    ``ground_truth``: the problem id (``registry.resolve``: a generated id regenerates its task; an
    id of the set ``data_source`` names is looked up there), or a whole ``Task`` as JSON; when it
    is None, ``extra_info["problem_id"]``. An id that names no task raises
    ``registry.UnknownTaskError`` (a broken dataset, never a zero).

    Keywords (``custom_reward_function.reward_kwargs``; unknown ones are ignored, verl adds its own):

    * ``config``: the reward configuration, tiers and judge: a ``RewardConfig``, a mapping of its
      fields, or the path of a TOML/JSON reward file; per sample, ``extra_info["reward_config"]``
      (a mapping or a path) takes precedence;
    * ``return_dict`` (False): verl's dict form, ``score`` and the breakdown: ``tier``, ``acc``
      (1.0 when every test passed), ``public_passed``, ``public_total``, ``hidden_passed``,
      ``hidden_total``, ``reward_before_judge``, ``sandbox_error`` (bool), ``judge_error`` (bool), ``explanation`` — the
      same keys for every sample, which verl's reward managers collect into ``reward_extra_info``;
    * ``join_prompt`` ("auto"): a base model's response continues the task's prompt; see
      ``code_env.adapters.program_of``;
    * ``language`` ("python"): the programs' (``sandbox.languages``; per sample,
      ``extra_info["language"]`` takes precedence): another than Python answers stdio tasks, its
      program the response's block in that language;
    * ``sandbox_error_score`` (``SANDBOX_ERROR_SCORE``, 0.0): the score of a sample the sandbox
      failed to run twice, or whose judge call failed (``judge_error``) — never an exception, since
      verl cannot skip a sample; logged, and ``sandbox_error: True`` (``judge_error: True``) in the dict form;
    * ``backend`` ("auto"), or ``executor``/``sandbox``: where programs run: ``"local"`` (the
      process-wide sandbox of ``backend``), ``"ray"`` (the process-wide ``sandbox.RayExecutor``:
      inside verl's Ray job it uses verl's own cluster; elsewhere ``ray_address``, else
      ``$RAY_ADDRESS``, else a local instance) or any runner with ``run_many``;
    * ``log_dir`` (None), ``log_every`` (1), ``log_max_bytes``, ``log_text_bytes``: write every
      ``log_every``-th sample (counted per process and directory) as a trajectory record
      (``code_env.records``: ``trainer="verl"``, the response as ``completion``, the program, the
      raw runs, the timed states, the breakdown), which ``code-env stats``, ``audit`` and
      ``replay`` read. What verl does not pass to a reward function stays unknown in the record:
      the prompt (``extra_info["prompt"]`` if the dataset puts it there; else the task's prompt),
      the step (``extra_info["step"]`` or ``["global_step"]``; else None), whether the response
      was cut at ``max_response_length`` (``completion_truncated`` None) and the advantage
      (None: verl's trainer computes it after the reward manager returns, in
      ``compute_advantage``, and never calls the reward function again).
    """
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[str | None],
                        extra_infos: Sequence[Mapping[str, Any] | None] | None = None, **kwargs: Any) -> list[Score]:  # fmt: skip
    """verl's batch reward function (``reward_model.reward_manager=batch``): one score per sample,
    every program of the batch graded in one ``grade_many`` (one sandbox batch per reward
    configuration). Arguments and keywords as ``compute_score``, one entry per sample."""
    n = len(solution_strs)
    infos = [None] * n if extra_infos is None else list(extra_infos)
    if not len(data_sources) == len(ground_truths) == len(infos) == n:
        raise ValueError(f"{n} solution_strs, {len(data_sources)} data_sources, {len(ground_truths)} ground_truths and "
                         f"{len(infos)} extra_infos: expected one of each per sample")  # fmt: skip
    join: JoinPrompt = kwargs.get("join_prompt", "auto")
    fallback = float(kwargs.get("sandbox_error_score", SANDBOX_ERROR_SCORE))
    default = reward_config(kwargs.get("config"))
    as_dict = _flag(kwargs.get("return_dict", False), "return_dict")
    given = kwargs.get("sandbox", kwargs.get("executor"))
    sandbox: Runner = resolve_executor(given, backend=str(kwargs.get("backend") or "auto"), ray_address=kwargs.get("ray_address"))
    groups: dict[str, tuple[RewardConfig, str, list[int]]] = {}
    pairs: list[tuple[Task, str]] = []
    for i, (source, solution, truth, info) in enumerate(zip(data_sources, solution_strs, ground_truths, infos, strict=True)):
        info = _mapping(info, f"extra_infos[{i}]")
        if not isinstance(solution, str):
            raise TypeError(f"solution_strs[{i}]: expected str, got {type(solution).__name__}")
        task = _task(str(source), truth if truth is not None else info.get("problem_id"))
        language = program_language(str(info.get("language", kwargs.get("language", "python"))), [task])
        pairs.append((task, program_of(task, solution, join_prompt=join, language=language)))
        own = info.get("reward_config")
        cfg = default if own is None else reward_config(own, f"extra_infos[{i}]['reward_config']")
        groups.setdefault(cfg.model_dump_json() + "\0" + language, (cfg, language, []))[2].append(i)
    log = _log_for(kwargs, n)
    first = log.first if log is not None else 0
    judged: list[Judged | None] = [None] * n
    for cfg, language, idx in groups.values():
        out = judge_many([pairs[i] for i in idx], sandbox=sandbox, config=cfg, language=language,
                         trace_ids=[trace_id(pairs[i][0].problem_id, first + i) for i in idx])  # fmt: skip
        for i, j in zip(idx, out, strict=True):
            judged[i] = j
            if log is not None and log.logger.wants(first + i):
                info = _mapping(infos[i], f"extra_infos[{i}]")
                step = info.get("step", info.get("global_step"))
                prompt = info.get("prompt")
                log.logger.write(grade_record(
                    pairs[i][0], pairs[i][1], j, cfg, trace_id=trace_id(pairs[i][0].problem_id, first + i), n=first + i,
                    prompt=prompt if isinstance(prompt, str) else None, completion=solution_strs[i], trainer="verl",
                    step=step if isinstance(step, int) and not isinstance(step, bool) else None))  # fmt: skip
    return [_score(j.grade, fallback, as_dict) for j in judged if j is not None]


class _Log:
    """A process's trajectory log in one directory, and how many samples it has counted."""

    def __init__(self, logger: TrajectoryLogger) -> None:
        self.logger, self.seen, self.first = logger, 0, 0


_logs: dict[tuple[int, str], _Log] = {}


def _log_for(kwargs: Mapping[str, Any], n: int) -> _Log | None:
    """The log of ``reward_kwargs["log_dir"]`` (None: no log), with ``n`` more samples counted."""
    where = kwargs.get("log_dir")
    if where is None:
        return None
    if not isinstance(where, (str, os.PathLike)):
        raise TypeError(f"log_dir: expected a folder path, got {type(where).__name__}")
    key = (os.getpid(), str(where))
    if key not in _logs:
        every = kwargs.get("log_every", 1)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"log_every: expected an integer >= 1, got {every!r}")
        _logs[key] = _Log(TrajectoryLogger(where, every=every, max_total_bytes=int(kwargs.get("log_max_bytes", MAX_TOTAL_BYTES)),
                                           text_bytes=int(kwargs.get("log_text_bytes", TEXT_BYTES))))  # fmt: skip
    log = _logs[key]
    log.first, log.seen = log.seen, log.seen + n
    return log


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # (numpy's too)
        return bool(value)
    raise TypeError(f"{what}: expected true or false, got {value!r}")


def _score(g: Grade, fallback: float, as_dict: bool) -> Score:
    b = g.breakdown
    if g.reward is None:
        what, why = ("judge failure", g.judge_error) if g.judge_error is not None else ("sandbox failure", g.sandbox_error)
        log.warning("%s on %s (scored %s, not the program's fault): %s", what, g.problem_id, fallback, why)
    score = fallback if g.reward is None else g.reward
    if not as_dict:
        return score
    return {
        "score": score,
        "tier": b.tier,
        "acc": 1.0 if b.tier == "all_tests" else 0.0,
        "public_passed": b.public_passed,
        "public_total": b.public_total,
        "hidden_passed": b.hidden_passed,
        "hidden_total": b.hidden_total,
        "reward_before_judge": b.reward_before_judge if b.reward_before_judge is not None else score,
        "sandbox_error": g.reward is None and g.judge_error is None,
        "judge_error": g.judge_error is not None,
        "explanation": b.explanation,
    }


def _task(data_source: str, ground_truth: Any) -> Task:
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth: expected a problem id or a Task as JSON (str), got {type(ground_truth).__name__}")
    if ground_truth.lstrip().startswith("{"):
        try:
            return Task.model_validate_json(ground_truth)
        except ValidationError as exc:
            raise ValueError(f"ground_truth is not a Task: {first_error(exc, prefix='task.')}") from None
    try:
        return resolve_task(ground_truth, what="ground_truth")
    except registry.UnknownTaskError:
        if data_source.endswith(".jsonl") or data_source in registry.list():
            with needs_extras():
                return registry.get(_named(data_source), ground_truth)
        raise


_sets: dict[str, list[Task]] = {}


def _named(data_source: str) -> list[Task]:
    """A task set named by verl's ``data_source``, loaded once per process."""
    if data_source not in _sets:
        _sets[data_source] = registry.load(data_source)
    return _sets[data_source]


def _mapping(info: Any, what: str) -> dict[str, Any]:
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise TypeError(f"{what}: expected a mapping (the sample's extra_info) or None, got {type(info).__name__}")
    return dict(info)
