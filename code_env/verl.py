"""verl: ``compute_score`` for verl's per-sample reward managers (``naive``, ``prime``, ``dapo``),
``acompute_score`` for verl 0.9's reward loop (it awaits every sample of a worker's share at
once: they are graded in one sandbox batch) and ``compute_score_batch`` for the ``batch`` reward
manager of verl versions that have one, as a ``custom_reward_function``::

    custom_reward_function.path=pkg://code_env          # or the path of this file (see below)
    custom_reward_function.name=compute_score
    # verl >= 0.9 (its reward loop; no batch manager): the samples a worker awaits together, one batch
    reward.custom_reward_function.name=acompute_score
    # verl < 0.9, the batch form:
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

import asyncio
import concurrent.futures
import hashlib
import json
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
from code_env.reward import RewardBreakdown, RewardConfig
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
    ended: dict[int, Grade] = {}  # tool episodes (code_env.verl_tools) that ended: their return, not a grade
    for i, (source, solution, truth, info) in enumerate(zip(data_sources, solution_strs, ground_truths, infos, strict=True)):
        info = _mapping(info, f"extra_infos[{i}]")
        if not isinstance(solution, str):
            raise TypeError(f"solution_strs[{i}]: expected str, got {type(solution).__name__}")
        task = _task(str(source), truth if truth is not None else info.get("problem_id"))
        episode = info.get(EPISODE_KEY)
        if episode is not None:
            program, done = _episode(task, episode, f"extra_infos[{i}][{EPISODE_KEY!r}]")
            pairs.append((task, program))
            if done is not None:
                ended[i] = done
                continue
            language = "python"
        else:
            language = program_language(str(info.get("language", kwargs.get("language", "python"))), [task])
            pairs.append((task, program_of(task, solution, join_prompt=join, language=language)))
        own = info.get("reward_config", episode.get("reward_config") if isinstance(episode, Mapping) else None)
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
    return [_score(ended[i] if i in ended else judged[i].grade, fallback, as_dict) for i in range(n)]  # type: ignore[union-attr]


EPISODE_KEY = "code_env"
"""``extra_info``'s key of a tool episode's state (``code_env.verl_tools`` writes it into verl's
``agent_data.extra_fields``, which verl passes on in ``extra_info``)."""


def _episode(task: Task, state: Any, what: str) -> tuple[str, Grade | None]:
    """A tool episode's program (its ``main.py``) and, when the episode ended, its score as a
    ``Grade``: the return (the sum of its rewards) with the final breakdown (``submit``, or the
    calls ran out: ``main.py`` graded as submitted), a budget's tier otherwise, or a sandbox error.
    An episode still going on (None) is graded as submitted, as ``CodeAgent-v0`` does when its
    calls run out: the tier, whose advances the episode already holds."""
    if not isinstance(state, Mapping) or not isinstance(state.get("main_py"), str):
        raise TypeError(f"{what}: expected the state code_env.verl_tools writes (main_py, return, ended, ...), "
                        f"got {type(state).__name__}")  # fmt: skip
    if state.get("problem_id") != task.problem_id:
        raise ValueError(f"{what}: the episode ran task {state.get('problem_id')!r} but the row's ground truth is "
                         f"{task.problem_id!r}")  # fmt: skip
    program, how = state["main_py"], state.get("ended")
    if how is None:
        return program, None
    if how == "sandbox_error":
        why = str(state.get("sandbox_error") or "the sandbox failed during the episode")
        return program, Grade(problem_id=task.problem_id, reward=None, sandbox_error=why,
                              breakdown=RewardBreakdown(tier="sandbox_error", reward=None, explanation=why))  # fmt: skip
    total = float(state.get("return", 0.0))
    final = state.get("breakdown")
    if isinstance(final, Mapping):
        breakdown = RewardBreakdown.model_validate({**final, "reward": total})
    else:
        breakdown = RewardBreakdown(tier="budget_exhausted", reward=total, reward_before_judge=total,
                                    explanation=f"the episode ended on its {how} budget")  # fmt: skip
    return program, Grade(problem_id=task.problem_id, reward=total, breakdown=breakdown)


# ``acompute_score``'s batching: samples that arrive within BATCH_WINDOW_S of each other (the
# window slides, up to BATCH_MAX_WAIT_S after the first) are graded in one ``compute_score_batch``.
BATCH_WINDOW_S = 0.02
BATCH_MAX_WAIT_S = 0.5
BATCH_MAX = 4096


class _Pending:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.started = loop.time()
        self.rows: list[tuple[str, str, Any, Mapping[str, Any] | None]] = []
        self.futures: list[asyncio.Future[Score]] = []
        self.timer: asyncio.TimerHandle | None = None


_pending: dict[tuple[int, str], _Pending] = {}


async def acompute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                         **kwargs: Any) -> Score:  # fmt: skip
    """``compute_score`` as a coroutine, for verl's reward loop (verl >= 0.9: its reward loop
    workers await an async ``compute_score`` for every sample of their share of the batch at
    once, with the default ``naive`` reward manager; verl 0.9.1 has no ``batch`` manager): the
    samples that arrive together are graded in one ``compute_score_batch``, one sandbox batch,
    by a grading thread while the event loop goes on. Same arguments and keywords as
    ``compute_score`` (samples with other keywords are batched apart)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), json.dumps(kwargs, sort_keys=True, default=repr))
    batch = _pending.get(key)
    if batch is None:
        batch = _pending[key] = _Pending(loop)
    future: asyncio.Future[Score] = loop.create_future()
    batch.rows.append((data_source, solution_str, ground_truth, extra_info))
    batch.futures.append(future)
    if batch.timer is not None:
        batch.timer.cancel()
    due = min(BATCH_WINDOW_S, max(0.0, batch.started + BATCH_MAX_WAIT_S - loop.time()))
    batch.timer = loop.call_later(0.0 if len(batch.rows) >= BATCH_MAX else due, _flush, key, kwargs)
    return await future


def _flush(key: tuple[int, str], kwargs: dict[str, Any]) -> None:
    batch = _pending.pop(key, None)
    if batch is None:
        return
    from code_env.grading import _grading_executor

    sources, solutions, truths, infos = (list(col) for col in zip(*batch.rows, strict=True))
    job = _grading_executor().submit(compute_score_batch, sources, solutions, truths, infos, **kwargs)

    def deliver(done: concurrent.futures.Future[list[Score]]) -> None:
        def settle() -> None:
            error = done.exception()
            for k, f in enumerate(batch.futures):
                if f.done():
                    continue
                if error is not None:
                    f.set_exception(error)
                else:
                    f.set_result(done.result()[k])

        batch.loop.call_soon_threadsafe(settle)

    job.add_done_callback(deliver)


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


def in_outs_task(ground_truth: Mapping[str, Any]) -> Task:
    """A task from verl's usual code ground truth (APPS, TACO, CodeContests, PRIME as verl's
    recipes carry them): ``{"inputs": [...], "outputs": [...]}``, with ``"fn_name"`` for a
    call-based problem.

    * Without ``fn_name``: stdio tests; an input is the program's stdin (a list of lines is joined
      with newlines), an output its expected stdout (compared as the stdio comparator does:
      trailing whitespace of lines and the end ignored).
    * With ``fn_name``: function tests; an input is the list of arguments (a single non-list
      value: one argument), an output the expected return value, compared as is (APPS wraps some
      in a one-element list: unwrap them in the dataset).
    * The split: with one test, it is the public test and the hidden one (a program passing it
      earns 1.0, as in verl's own score); with n >= 2, the first ``max(1, min(3, n // 2))`` are
      public (their results are feedback) and the rest hidden.

    The task's id is ``verl/<hash>`` of the ground truth (the same rows, the same id in logs);
    its limits are the defaults of ``registry.Task`` (2 s, 256 MiB)."""
    inputs, outputs = ground_truth.get("inputs"), ground_truth.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs or len(inputs) != len(outputs):
        raise ValueError("ground_truth: expected {'inputs': [...], 'outputs': [...]} with as many outputs as inputs "
                         f"(at least one), got {len(inputs) if isinstance(inputs, list) else type(inputs).__name__} inputs "
                         f"and {len(outputs) if isinstance(outputs, list) else type(outputs).__name__} outputs")  # fmt: skip
    fn_name = ground_truth.get("fn_name")
    cases: list[registry.TestCase] = []
    for i, (given, expected) in enumerate(zip(inputs, outputs, strict=True)):
        if fn_name:
            cases.append(registry.TestCase(args=given if isinstance(given, list) else [given], expected=expected))
            continue
        stdin = "\n".join(map(str, given)) + "\n" if isinstance(given, list) else given
        out = "\n".join(map(str, expected)) + "\n" if isinstance(expected, list) else expected
        if not isinstance(stdin, str) or not isinstance(out, str):
            raise ValueError(f"ground_truth: inputs[{i}] and outputs[{i}] of a stdio problem (no fn_name) must be text")
        cases.append(registry.TestCase(stdin=stdin, expected_stdout=out))
    n = len(cases)
    public, hidden = (cases, cases) if n == 1 else (cases[: max(1, min(3, n // 2))], cases[max(1, min(3, n // 2)) :])
    digest = hashlib.sha256(json.dumps(ground_truth, sort_keys=True, default=str).encode()).hexdigest()[:16]
    try:
        return Task(problem_id=f"verl/{digest}", prompt="", kind="function" if fn_name else "stdio",
                    entry_point=str(fn_name) if fn_name else None, reference_solution="", public_tests=public,
                    hidden_tests=hidden, source="verl ground truth")  # fmt: skip
    except ValidationError as exc:
        raise ValueError(f"ground_truth: {first_error(exc)}") from None


def _task(data_source: str, ground_truth: Any) -> Task:
    if isinstance(ground_truth, Mapping):
        return in_outs_task(ground_truth)
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth: expected a problem id, a Task as JSON or verl's {{'inputs', 'outputs'}} (a mapping "
                        f"or its JSON), got {type(ground_truth).__name__}")  # fmt: skip
    if ground_truth.lstrip().startswith("{"):
        try:
            raw = json.loads(ground_truth)
        except ValueError as exc:
            raise ValueError(f"ground_truth is not JSON: {exc}") from None
        if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:
            return in_outs_task(raw)
        try:
            return Task.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(f"ground_truth is neither a Task nor verl's {{'inputs', 'outputs'}}: "
                             f"{first_error(exc, prefix='task.')}") from None  # fmt: skip
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


AGENT_TOOLS = ("list_files", "read_file", "write_file", "edit_file", "run", "run_tests", "submit")


def tool_config(tasks: str = "builtin", *, tools: Sequence[str] = AGENT_TOOLS, interpreter: bool = False,
                **env_config: Any) -> dict[str, Any]:  # fmt: skip
    """verl's tool config (the file ``actor_rollout_ref.rollout.multi_turn.tool_config_path``
    names; write it with ``yaml.safe_dump``) of ``CodeAgent-v0``'s tools as
    ``code_env.verl_tools.CodeAgentTool`` (``interpreter``: the ``python`` tool too), every tool
    with the same configuration (``tasks``; ``env_config``: ``backend``, ``reward`` and any
    ``CodeAgent-v0`` argument), so that they share the trajectory's episode."""
    names = [*tools, "python"] if interpreter else list(tools)
    known = {*AGENT_TOOLS, "python"}
    if not names or set(names) - known:
        raise ValueError(f"tools: expected some of {sorted(known)}, got {list(tools)!r}")
    config = {"type": "native", "tasks": tasks, **env_config, **({"interpreter": True} if interpreter else {})}
    return {"tools": [{"class_name": "code_env.verl_tools.CodeAgentTool", "config": {**config, "tool": name}}
                      for name in names]}  # fmt: skip


def agent_rows(tasks: str = "builtin", *, tools: Sequence[str] = AGENT_TOOLS, interpreter: bool = False,
               system_prompt: str | None = None, **params: Any) -> list[dict[str, Any]]:  # fmt: skip
    """verl dataset rows for an agent that works through ``code_env.verl_tools`` (one per task;
    ``pandas.DataFrame(rows).to_parquet(...)``): ``data_source`` (the set), ``prompt`` (a chat:
    an optional system message and the task, to be solved in the workspace through the tools),
    ``ability``, ``reward_model`` (``ground_truth``: the problem id), ``agent_name``
    (``tool_agent``: verl's tool agent loop) and ``extra_info``: ``problem_id``, ``index`` and
    ``tools_kwargs`` (every tool's ``create_kwargs``: the problem id its episode starts on).
    ``tasks``: a set name or ``.jsonl`` path, the same as the tools' ``tasks`` (``params`` go to
    ``registry.load``: ``n``, ``seed``, ``difficulty`` of a generated set, whose ids the tools
    regenerate)."""
    from code_env.trl import trl_rows

    if not isinstance(tasks, str):
        raise TypeError(f"tasks: expected a task-set name or .jsonl path (the tools load the same), got {type(tasks).__name__}")
    loaded = registry.load(tasks, **params)
    names = [*tools, "python"] if interpreter else list(tools)
    tool_config(tasks, tools=tools, interpreter=interpreter)  # (the same check of the names)
    chats = trl_rows(loaded, format="tools", system_prompt=system_prompt)
    return [{
        "data_source": tasks,
        "prompt": chat["prompt"],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": task.problem_id},
        "agent_name": "tool_agent",
        "extra_info": {"problem_id": task.problem_id, "index": i,
                       "tools_kwargs": {name: {"create_kwargs": {"problem_id": task.problem_id}} for name in names}},
    } for i, (task, chat) in enumerate(zip(loaded, chats, strict=True))]  # fmt: skip
