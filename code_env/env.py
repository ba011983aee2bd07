"""``CodeExec-v0``: write a program, run it in the sandbox against the task's tests, get a reward.

A single-turn episode: ``reset`` picks a task and shows its prompt; ``step(code)`` runs the
program on the public and hidden tests and terminates with the graded reward. With
``max_turns > 1`` the agent sees the public tests' feedback and revises until its program passes
every public test (then the hidden tests decide the final reward) or a budget runs out.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import registry
from registry import Task
from registry.sampling import Curriculum, sample_stratified
from registry.verify import FUNCTION_DRIVERS, CaseResult, Job, Runner, Verification
from sandbox.languages import UnknownLanguageError
from sandbox.languages import resolve as resolve_language

from ._errors import first_error
from ._textimage import GREEN, RED, text_image
from ._visible import visible
from .grading import (
    RunSummary,
    Scored,
    SharedSandbox,
    grade_many,
    is_shared_sandbox,
    overflow_breakdown,
    resolve_executor,
    run_rounds,
    score_rounds,
)
from .reward import RewardBreakdown, RewardConfig
from .spaces import NO_SHAPE, AnyText
from .summary import LLMSummarizer, SummaryConfig, SummaryResult
from .tracing import GENERATION_ENDS, GenerationEnd, State, trace_id
from .trajectory import MAX_TOTAL_BYTES, TEXT_BYTES, TrajectoryLogger

MAX_TEXT_CHARS = 1 << 20  # prompt, stdout, stderr and feedback in an observation
INT_BOUND = 2**31 - 1
Budget = Literal["turns", "action_chars", "turn_time", "episode_time"]


class EnvConfig(BaseModel):
    """Every setting of a ``CodeExecEnv`` except the objects (tasks list, executor), validated.
    It is written into each trajectory log line, so that ``code-env replay`` can rebuild the env."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: str = Field("builtin", description="task set name or .jsonl path ('<inline>' for a list)")
    task_params: dict[str, Any] = Field(default_factory=dict, description="for generated sets: n, seed, difficulty")
    sampling: Literal["uniform", "difficulty", "curriculum"] = "uniform"
    max_turns: int = Field(1, ge=1, le=1000)
    max_action_chars: int = Field(100_000, ge=1, le=MAX_TEXT_CHARS, description="longer actions truncate the episode")
    turn_time_s: float | None = Field(None, gt=0, description="execution time per turn (sum over the turn's runs)")
    episode_time_s: float | None = Field(None, gt=0, description="wall clock per episode, from reset")
    timeout_s: float | None = Field(None, gt=0, le=600, description="per-test time limit (default: the task's)")
    memory_mb: int | None = Field(None, ge=32, le=65536, description="memory limit (default: the task's)")
    backend: str = Field("auto", description="sandbox backend when no executor is given")
    log_dir: str | None = None
    log_every: int = Field(1, ge=1, description="log every N-th episode")
    log_max_bytes: int = Field(MAX_TOTAL_BYTES, ge=16 << 10, description="cap of the log directory's *.jsonl files, bytes: past it the oldest parts are deleted")
    log_text_bytes: int = Field(TEXT_BYTES, ge=64, le=MAX_TEXT_CHARS, description="bytes kept of each long text of a run in a log record (first and last half, with the whole's size and SHA-256)")
    reward: RewardConfig = Field(default_factory=RewardConfig)
    timing_in_observation: bool = Field(False, description="add execution_time_ms to the observation (not reproducible)")
    language: str = Field("python", description="the programs' language (sandbox.languages; the prompt names it; "
                          "one without a function-task driver answers the set's stdio tasks only)")
    include_llm_summary: bool = Field(False, description="a model's few sentences on each run in the observation "
                                      "(``llm_summary``; code_env.summary): needs llm_summary")  # fmt: skip
    llm_summary: SummaryConfig | None = Field(None, description="the summary's [llm] channel, model id, token budget and recording")

    @model_validator(mode="after")
    def _summary_configured(self) -> EnvConfig:
        if self.include_llm_summary and self.llm_summary is None:
            raise ValueError("include_llm_summary needs llm_summary: its [llm] channel (an inline table or a TOML file's "
                             "path), model id, token budget (max_tokens) and recording (mode, cache_path)")  # fmt: skip
        return self

    @field_validator("language")
    @classmethod
    def _known_language(cls, v: str) -> str:
        try:
            return resolve_language(v).name
        except UnknownLanguageError as exc:
            raise ValueError(str(exc)) from None

    def logger(self, log_dir: str | os.PathLike[str] | None = None) -> TrajectoryLogger | None:
        """The trajectory logger of these settings, into ``log_dir`` (default: ``self.log_dir``; None: no log)."""
        where = self.log_dir if log_dir is None else log_dir
        if where is None:
            return None
        return TrajectoryLogger(where, every=self.log_every, max_total_bytes=self.log_max_bytes, text_bytes=self.log_text_bytes)


class StepInfo(BaseModel):
    """What ``info`` holds after a step (as a dict): everything that explains the reward, and
    nothing that varies between two runs of the same seed (timings and time-stamped state
    transitions are in the trajectory log and in ``env.unwrapped.last_timing``). The breakdown
    leaves out its empty fields (no ``reward`` when the sandbox failed), so that vector envs can
    stack infos without mixing numbers and None."""

    trace_id: str
    problem_id: str
    turn: int
    reward_breakdown: dict[str, Any]
    sandbox_error: str | None = None
    judge_error: str | None = Field(None, description="the LLM judge's endpoint failed: not scored, drop the sample")
    budget: Budget | None = None
    feedback: list[dict[str, Any]] = Field(default_factory=list, description="public tests (no timings)")


def _obs_space(max_turns: int, timing: bool, llm_summary: bool = False) -> spaces.Dict:
    text = AnyText(MAX_TEXT_CHARS)
    count = spaces.Box(0, INT_BOUND, shape=(), dtype=np.int64)
    fields: dict[str, spaces.Space[Any]] = {
        "prompt": text,
        "stdout": text,
        "stderr": text,
        "feedback": text,
        "exit_code": spaces.Box(-INT_BOUND, INT_BOUND, shape=(), dtype=np.int64),
        "timeout": spaces.Discrete(2),
        "oom": spaces.Discrete(2),
        "syntax_error": spaces.Discrete(2),
        "public_passed": count,
        "public_total": count,
        "turn": spaces.Box(0, max_turns, shape=(), dtype=np.int64),
    }  # fmt: skip
    if timing:
        fields["execution_time_ms"] = spaces.Box(0.0, 1e9, shape=(), dtype=np.float64)
    if llm_summary:
        fields["llm_summary"] = text
    return spaces.Dict(fields)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 14] + "…[truncated]\n"


StepResult = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


def make_observation(prompt: str, cases: Sequence[CaseResult] | None, summary: RunSummary | None, turn: int,
                     *, timing: bool = False, llm_summary: str | None = None) -> dict[str, Any]:  # fmt: skip
    """An observation of ``CodeExec-v0``'s space (``cases`` None: nothing ran yet; ``llm_summary``
    given: the env includes one)."""
    s = summary or RunSummary()
    shown = [{"input": c.input, "expected": c.expected, "got": c.got, "status": c.status, "error": c.error,
              "traceback": c.traceback} for c in cases or []]  # fmt: skip
    obs = {
        "prompt": _clip(prompt),
        "stdout": _clip(s.stdout),
        "stderr": _clip(s.stderr),
        "feedback": _clip(json.dumps(shown, ensure_ascii=False)) if cases is not None else "",
        "exit_code": np.array(max(-INT_BOUND, min(INT_BOUND, s.exit_code)), dtype=np.int64),
        "timeout": np.int64(s.timeout),
        "oom": np.int64(s.oom),
        "syntax_error": np.int64(s.syntax_error),
        "public_passed": np.array(sum(c.passed for c in cases or []), dtype=np.int64),
        "public_total": np.array(len(cases or []), dtype=np.int64),
        "turn": np.array(turn, dtype=np.int64),
    }
    if timing:
        obs["execution_time_ms"] = np.array(min(s.execution_time_ms, 1e9), dtype=np.float64)
    if llm_summary is not None:
        obs["llm_summary"] = _clip(llm_summary)
    return obs


def default_executor(backend: str, executor: Runner | str | None = None) -> Runner:
    """The executor of an env: ``executor`` as ``grading.resolve_executor`` makes it (``"ray"``:
    the process-wide ``RayExecutor``; an object with ``run_many``: itself); given none (or
    ``"local"``, or the process-wide sandbox itself, or another env's handle on it), a
    ``grading.SharedSandbox`` of its own on the process-wide sandbox of ``backend``: the workers
    start with the first program any env runs and stop when the last env that ran one closes (a
    vector env's workers, in ``AsyncVectorEnv`` or SB3's ``SubprocVecEnv``, each have their own,
    stopped by the env's ``close()`` or at the worker's exit, before it is joined)."""
    if isinstance(executor, SharedSandbox):
        return SharedSandbox(executor.backend)
    if executor is None or executor == "local" or is_shared_sandbox(executor, backend):
        return SharedSandbox(backend)
    return resolve_executor(executor, backend=backend)


class PicklableEnv:
    """What makes an env picklable and deep-copyable (``copy.deepcopy``, ``pickle``,
    ``cloudpickle``: Ray's and RLlib's remote env runners, SB3's ``SubprocVecEnv``): its executor
    and its trajectory logger belong to the process (worker processes, open files), so they are
    left out and made again where the copy lands: the process-wide sandbox of the same backend
    (or the process-wide ``RayExecutor``), a logger of the same configuration. An env made with an
    executor object of its own (a ``Sandbox`` instance) cannot be copied: a ``TypeError`` says to
    make it with ``executor="local"`` or ``"ray"``."""

    _executor_spec: str | None
    _backend_name: str
    executor: Runner

    def _remember_executor(self, executor: Runner | str | None, backend: str) -> None:
        """After ``self.executor = default_executor(backend, executor)``: what a copy remakes."""
        self._backend_name = backend
        if isinstance(self.executor, SharedSandbox):  # a copy gets one on its own process's sandbox
            self._backend_name, self._executor_spec = self.executor.backend, "local"
        elif executor is None or isinstance(executor, str):
            self._executor_spec = executor or "local"
        else:  # None: an object of its own, which no copy can share
            self._executor_spec = None

    def _release_executor(self) -> None:
        """``close()``: the env no longer uses the process-wide sandbox's workers (the last env's
        close stops them; a later step starts them again). An executor object of the caller's
        (a ``Sandbox``, a ``RayExecutor``) stays the caller's to close."""
        executor = getattr(self, "executor", None)
        if isinstance(executor, SharedSandbox):
            executor.close()

    def __getstate__(self) -> dict[str, Any]:
        if self._executor_spec is None:
            raise TypeError(f"{type(self).__name__} with an executor object of its own ({type(self.executor).__name__}) "
                            "cannot be pickled or copied: its workers are this process's; make the env with "
                            "executor='local' (or 'ray') and each copy uses its own process's")  # fmt: skip
        state = dict(self.__dict__)
        state.pop("executor", None)
        state["logger"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.executor = default_executor(self._backend_name, self._executor_spec)
        self.logger = self._make_logger()

    def _make_logger(self) -> Any:
        raise NotImplementedError


def requested_task(options: dict[str, Any] | None, tasks: list[Task], by_id: dict[str, Task],
                   known: tuple[str, ...] = ()) -> Task | None:  # fmt: skip
    """The task that ``reset(options={"problem_id": ...})`` asks for (None: draw one); unknown
    options (beyond ``known``, which the caller reads) and ids are errors, the latter with a "did
    you mean"."""
    options = {k: v for k, v in (options or {}).items() if k not in known}
    pid = options.pop("problem_id", None)
    if options:
        raise ValueError(f"reset options: unknown {sorted(options)} (known: {sorted(['problem_id', *known])})")
    if pid is None:
        return None
    if not isinstance(pid, str):
        raise TypeError(f"problem_id: expected str, got {type(pid).__name__}")
    return by_id.get(pid) or registry.get(tasks, pid)


def requested_sample(options: dict[str, Any] | None) -> int | None:
    """``reset(options={"sample": n})``: the sample number of the episode's trace id, as the agent
    counts its samples (None: the env's own count)."""
    n = (options or {}).get("sample")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"reset options: sample: expected an int >= 0, got {n!r}")
    return n


def task_fingerprint(task: Task) -> str:
    """A short hash of the whole task, logged so that a replay can tell when the task changed."""
    return hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]


def task_prompt(task: Task, language: str = "python") -> str:
    """What the agent reads: the task's prompt, and its starter code when it has one that the
    prompt does not already hold (a HumanEval prompt *is* its starter code: shown once). In another
    language than Python (a stdio task), the prompt says which, and what the program must be."""
    if language != "python":
        lang = resolve_language(language)
        if task.kind == "function":
            types = (" Its parameter and return types convert from and to JSON: numbers, bool, char, std::string, "
                     "std::vector, std::array, std::set, std::map (string or integer keys), std::pair, std::tuple (and "
                     "std::optional returned); code_env::Json holds any value. No main is needed.") if lang.name == "cpp" else ""  # fmt: skip
            return _clip(f"{task.prompt}\n\nWrite the solution in {lang.title}: a function `{task.entry_point}`, defined "
                         "at the top level, called with the arguments as JSON data (lists are arrays, dicts objects) "
                         f"and returning a value that JSON can hold.{types}")  # fmt: skip
        main = " Its class must be `public class Main`." if lang.name == "java" else ""
        return _clip(f"{task.prompt}\n\nWrite the solution in {lang.title}: a complete program that reads standard "
                     f"input and writes standard output.{main}")  # fmt: skip
    starter = task.starter_code.strip()
    if not starter or starter in task.prompt:
        return _clip(task.prompt)
    return _clip(f"{task.prompt}\n\n```python\n{task.starter_code.rstrip()}\n```\n")


RENDER_PROMPT_LINES = 20
RENDER_STDERR_LINES = 10
RENDER_FAILURES = 3
RENDER_TRACEBACK_LINES = 6


def check_render_mode(render_mode: str | None, modes: Sequence[str]) -> str | None:
    """``render_mode`` if it is one of ``modes`` or None, else a ``ValueError`` naming them."""
    if render_mode is not None and render_mode not in modes:
        raise ValueError(f"render_mode: expected one of {list(modes)} or None, got {render_mode!r}")
    return render_mode


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _one_line(text: str | None, n: int = 60) -> str:
    """A value of a test case on one line: as is, or quoted when it spans lines; either way with
    every control and invisible character escaped (``visible``)."""
    text = "" if text is None else text
    shown = visible(text, keep_newlines=False)
    return _short(f"'{shown}'" if "\n" in text else shown, n)


def failing_tests(cases: Sequence[CaseResult]) -> list[str]:
    """What ``render`` says about the failing public tests: at most ``RENDER_FAILURES`` of them,
    one line each (input, then expected and got, or the error's first line), and the last lines
    of the first traceback (they end with the exception)."""
    failing = [c for c in cases if not c.passed]
    lines: list[str] = []
    traceback_shown = False
    for c in failing[:RENDER_FAILURES]:
        head = f"test {c.index + 1} {c.status}: input {_one_line(c.input)}"
        if c.status == "failed" and c.error is None:
            lines.append(f"{head} -> expected {_one_line(c.expected)}, got {_one_line(c.got)}")
        else:
            error = visible(c.error or "").strip().splitlines()
            lines.append(f"{head} -> {_short(error[0], 120) if error else c.status}")
        if c.traceback and not traceback_shown:
            traceback_shown = True
            lines += ["    " + _short(t, 150) for t in visible(c.traceback.rstrip("\n")).splitlines()[-RENDER_TRACEBACK_LINES:]]
    if len(failing) > RENDER_FAILURES:
        lines.append(f"... and {len(failing) - RENDER_FAILURES} more failing tests")
    return lines


class Evaluation(BaseModel):
    """One candidate's judgement in a batch: the observation a single-turn step would give, the
    reward (None when the sandbox or the LLM judge's endpoint failed: skip the sample) and its breakdown."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    problem_id: str
    observation: dict[str, Any]
    reward: float | None
    breakdown: RewardBreakdown
    sandbox_error: str | None = None
    judge_error: str | None = None


def evaluate(items: Sequence[tuple[Task, str]], *, executor: Runner | str | None = None, config: RewardConfig | None = None,
             timing: bool = False, language: str = "python") -> list[Evaluation]:  # fmt: skip
    """Judge N tasks x K candidate programs in one call: every public run goes to the executor in
    one batch, then every hidden run in another (``registry.phases``), and identical (task,
    program) pairs are judged once. ``language``: the programs' (``grade``).
    Results come back in order, each as a single-turn ``CodeExec-v0`` step would judge it."""
    grades = grade_many(items, sandbox=executor, config=config, language=language)
    language = resolve_language(language).name
    return [
        Evaluation(problem_id=g.problem_id, reward=g.reward, breakdown=g.breakdown, sandbox_error=g.sandbox_error,
                   judge_error=g.judge_error, observation=make_observation(task_prompt(t, language), g.feedback, g.run, 1,
                                                timing=timing))
        for (t, _), g in zip(items, grades, strict=True)
    ]  # fmt: skip


class CodeExecEnv(PicklableEnv, gym.Env[dict[str, Any], str]):
    """Write a program for a task; it runs in a hardened sandbox against the task's tests.

    ## Action space
    ``AnyText(max_action_chars)``: the program's source, any ``str``. A longer action truncates
    the episode with the ``budget_exhausted`` reward; a non-string raises ``TypeError``.

    ## Observation space
    A ``Dict``: ``prompt`` (the task, with its starter code unless the prompt already holds it,
    as a HumanEval prompt does), ``stdout``, ``stderr`` (of the first
    failing public run, else the first; for function tasks the program's prints are on stderr),
    ``feedback`` (JSON list of the public tests: input, expected, got, error), ``exit_code``,
    ``timeout``, ``oom``, ``syntax_error`` (0/1), ``public_passed``, ``public_total``, ``turn``.
    Text fields are ``AnyText``: any character. The turn's execution time is in
    ``env.unwrapped.last_timing`` and the log; ``timing_in_observation=True`` adds it to the observation, which
    then no longer follows from the seed (wall-clock time is noise).
    Hidden tests never show: only their counts, in ``info["reward_breakdown"]``.
    Text fields flatten (``gymnasium.wrappers.FlattenObservation``) to ``ord(c) + 1`` per character,
    zero-padded to ``2**20`` each: about 4.2 million integers per observation. They have no array
    ``shape``: Stable-Baselines3 and other libraries that need numeric spaces stop with a
    ``TypeError`` that points to ``CodeExecTokens-v0`` (SB3's algorithms where they ask for the
    shape, its ``check_env`` where it asks for ``compute_reward``).

    ## Rewards (``RewardConfig``, defaults)
    Single-turn: syntax error -1, timeout -0.5, OOM -0.5, no attempt (nothing defined, no entry
    point, a crash while loading, every call returned None, no output on a stdio task) -0.5, ``0.6 * k/n`` for k of n
    public tests, 0.8 all public, 1.0 all public and hidden; tampering with the verifier's result
    channel earns the lowest of timeout, OOM, no attempt and 0. An LLM judge in the reward config
    scales positive final rewards, exactly as ``code_env.grade`` does (one code path:
    ``code_env.grading.score_rounds``). Multi-turn: intermediate steps earn only the process
    bonus (0.05 when the public pass count improves, at most 0.1 per episode); the step that passes
    every public test earns its tier minus the bonus already paid (a solved episode returns exactly
    its tier, so failing on purpose first never pays). The ladder holds at every episode's end:
    when the turns run out, the last program keeps its tier (less the bonus paid), so two syntax
    errors return -1, not -0.1; any other exhausted budget (characters, turn time, episode clock)
    returns ``min(budget_exhausted, tier)`` = at most -0.1, the tier being that of the program it
    stopped, else of the episode's last program (none run yet: -0.1). A failure of
    the sandbox itself (run once more by the grader): reward 0, the episode is truncated and
    ``info["sandbox_error"]`` says why; drop such samples. The same for a failure of the LLM
    judge's endpoint (timeout, no connection, HTTP 5xx/429 after its retries; tier
    ``judge_error``): reward 0, truncated, ``info["judge_error"]`` says why; drop the sample.

    ## Episode end
    ``terminated``: single-turn after the step; multi-turn when every public test passes.
    ``truncated``: a budget ran out (turns, characters per action, execution time per turn, wall
    clock per episode; ``info["budget"]`` names it) or the sandbox or the LLM judge's endpoint
    failed. ``info["reward_breakdown"]`` is the last program's (``budget_exhausted`` when the action
    did not run); the step's reward is ``info["step_reward"]``.

    ## Arguments
    ``tasks`` (set name, .jsonl path or list of ``Task``), ``task_params``, ``sampling``
    (uniform | difficulty | curriculum), ``max_turns``, budgets, ``reward`` (``RewardConfig`` or
    a file), ``backend``, ``timeout_s``/``memory_mb`` overrides, ``log_dir``/``log_every`` and the
    log's bounds ``log_max_bytes`` (the directory's cap) and ``log_text_bytes`` (kept of each long
    text of a run; see ``code_env.trajectory``), and
    ``executor`` (anything with ``run_many``, shared between environments; ``"ray"`` for the
    process-wide ``sandbox.RayExecutor`` over a Ray cluster, ``$RAY_ADDRESS`` or a local one;
    default the process-wide sandbox of ``backend``, whose workers start with the first program
    an env runs and stop when the last env that ran one closes: ``grading.SharedSandbox``), ``render_mode``
    (``"ansi"``: text; ``"rgb_array"``: that text as a 480 x 240 image; see ``render``). See
    ``EnvConfig``.

    ## Version history
    v0: first release; since then the reward gained the ``no_attempt`` and ``tampered`` tiers, the
    judge of the reward config, and per-test limits measured by the sandbox (one per-test limit
    per run, resumed after each answer); ``render_mode="rgb_array"``; ``render()`` shows the failing
    public tests and their errors; a HumanEval prompt shows its code once (it was twice, as prompt
    and as starter code); a failure of the LLM judge's endpoint is no longer a neutral score but
    ``judge_error`` (0, truncated, dropped like a sandbox failure), and the judge reads all the
    code that runs, whatever its length (past its window: unjudged, score 0); running out of turns
    keeps the last program's tier, and a budget end is capped at the tier of the program it
    stopped (it was -0.1 whatever the program did); a call that fails after 80 % of its limit is a
    timeout; a crash while loading is no attempt; a task without hidden tests tops out at
    all_public.

    >>> import gymnasium as gym, code_env
    >>> env = gym.make("CodeExec-v0")
    >>> obs, info = env.reset(seed=0, options={"problem_id": "builtin/sum-of-evens"})
    >>> code = "def sum_of_evens(nums):\\n    return sum(n for n in nums if n % 2 == 0)\\n"
    >>> obs, reward, terminated, truncated, info = env.step(code)
    >>> reward, terminated, info["reward_breakdown"]["tier"]
    (1.0, True, 'all_tests')
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, executor: Runner | str | None = None,
                 reward: RewardConfig | str | Path | None = None, render_mode: str | None = None,
                 **options: Any) -> None:  # fmt: skip
        if isinstance(reward, (str, Path)):
            reward = RewardConfig.from_file(reward)
        task_list: list[Task] | None = None
        if isinstance(tasks, (str, Path)):
            name = str(tasks)
        elif isinstance(tasks, Sequence) and all(isinstance(t, Task) for t in tasks):
            name, task_list = "<inline>", [t for t in tasks if isinstance(t, Task)]
        else:
            raise TypeError(f"tasks: expected a task set name, a .jsonl path or a list of registry.Task, got {type(tasks).__name__}")
        try:
            self.config = EnvConfig(tasks=name, reward=reward or RewardConfig(), **options)
        except ValidationError as exc:
            raise ValueError(f"CodeExec-v0: {first_error(exc)}") from None
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.tasks: list[Task] = task_list if task_list is not None else registry.load(name, **self.config.task_params)
        if not self.tasks:
            raise ValueError(f"task set {name!r} is empty")
        if self.config.language not in FUNCTION_DRIVERS:  # (a function task's tests call a driver's function)
            self.tasks = [t for t in self.tasks if t.kind == "stdio"]
            if not self.tasks:
                raise ValueError(f"task set {name!r} has no stdio task: a {self.config.language} program answers "
                                 f"stdio tasks only (function tasks take {', '.join(FUNCTION_DRIVERS)})")  # fmt: skip
        self._by_id = {t.problem_id: t for t in self.tasks}
        self.executor: Runner = default_executor(self.config.backend, executor)
        self._remember_executor(executor, self.config.backend)
        self.curriculum = Curriculum(self.tasks) if self.config.sampling == "curriculum" else None
        self.logger = self.config.logger()
        self.action_space = AnyText(self.config.max_action_chars)
        self.observation_space = _obs_space(self.config.max_turns, self.config.timing_in_observation,
                                            self.config.include_llm_summary)  # fmt: skip
        self.summarizer = LLMSummarizer(self.config.llm_summary) if self.config.llm_summary and self.config.include_llm_summary else None
        self._task: Task | None = None
        self._episode = -1  # every episode of this env
        self._sample = -1  # episodes since the last reset with a seed: the trace id's "sample"
        self._turn = 0
        self._done = True
        self._seed: int | None = None
        self._started = 0.0
        self._best_passed = 0
        self._bonus_paid = 0.0
        self._last_tier_reward: float | None = None  # the tier reward of the episode's last program run
        self._obs: dict[str, Any] | None = None
        self._cases: list[CaseResult] = []  # the last turn's public tests, for render()
        self._transitions: list[tuple[str, float]] = []
        self._generation: GenerationEnd | None = None
        self.last_timing: dict[str, Any] = {}

    # ------------------------------------------------------------------------------- reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        sample = requested_sample(options)
        self._task = requested_task(options, self.tasks, self._by_id, known=("sample",)) or self._draw()
        if seed is not None:
            self._seed, self._sample = seed, -1
        self._episode += 1
        self._sample = self._sample + 1 if sample is None else sample
        self._turn = 0
        self._done = False
        self._started = time.monotonic()
        self._best_passed = 0
        self._bonus_paid = 0.0
        self._last_tier_reward = None
        self._transitions = [("generating", time.time())]
        self._generation = None
        self._obs = self._observation(None, None)
        task = self._task
        return self._obs, {"problem_id": task.problem_id, "trace_id": self._trace_id(), "difficulty": task.difficulty}

    def _draw(self) -> Task:
        """A task drawn with ``self.np_random`` (the one seeding path)."""
        if self.config.sampling == "uniform":
            return self.tasks[int(self.np_random.integers(0, len(self.tasks)))]
        rng = random.Random(int(self.np_random.integers(0, 2**63 - 1)))
        if self.config.sampling == "difficulty":
            return sample_stratified(self.tasks, rng)
        assert self.curriculum is not None
        return self.curriculum.sample(rng)

    @property
    def task(self) -> Task | None:
        """The current episode's task."""
        return self._task

    def _trace_id(self) -> str:
        assert self._task is not None
        return trace_id(self._task.problem_id, self._sample, self._turn)

    @property
    def trace_id(self) -> str | None:
        """The next step's trace id (``problem_id/sample/turn/retry``, ``code_env.tracing``): an
        agent puts it on its own log lines about the sample (an LLM agent's requests), so that
        every log of the run joins on it. None before the first ``reset``."""
        return None if self._task is None else self._trace_id()

    def end_generation(self, how: GenerationEnd) -> None:
        """How the next action's generation ended, told by the agent that owns it: ``"stop"`` (by
        itself), ``"context_window_overflow"`` (at the model's token or context limit) or
        ``"timed-out"`` (past the agent's deadline). The step's states show it after
        ``generating``; with ``RewardConfig.context_window_overflow`` set, an overflowed action
        is not run: the step ends the episode with that reward (tier
        ``context_window_overflow``)."""
        if how not in GENERATION_ENDS:
            raise ValueError(f"end_generation: expected one of {list(GENERATION_ENDS)}, got {how!r}")
        if self._task is None or self._done:
            raise ResetNeeded("CodeExec-v0: end_generation() outside an episode; call reset()")
        self._generation = how

    def _prompt(self) -> str:
        assert self._task is not None
        return task_prompt(self._task, self.config.language)

    # -------------------------------------------------------------------------------- step

    def step(self, action: str) -> StepResult:
        result: StepResult = run_rounds(self.step_rounds(action), self.executor)
        return result

    def step_rounds(self, action: Any) -> Generator[list[Job], list[Verification], StepResult]:
        """The step as rounds of verification jobs: each ``yield`` hands the caller a list of jobs
        and receives their verifications; the return value is the step's result. ``step`` runs
        the rounds itself; a vector env interleaves the rounds of all its sub-envs, so that their
        programs go to the executor together."""
        if self._task is None:
            raise ResetNeeded("CodeExec-v0: step() before reset()")
        if self._done:
            raise ResetNeeded("CodeExec-v0: the episode is over (terminated or truncated); call reset()")
        if not isinstance(action, str):
            raise TypeError(f"CodeExec-v0: the action is the program's source, a str; got {type(action).__name__}")
        task = self._task
        cfg = self.config
        if self._generation in ("context_window_overflow", "timed-out"):
            self._mark(self._generation)
        if self._generation == "context_window_overflow" and cfg.reward.context_window_overflow is not None:
            return self._overflow_end(action)
        self._mark("queued")
        if len(action) > cfg.max_action_chars:
            self._mark("overflow")
            why = f"the action has {len(action)} characters, the budget {cfg.max_action_chars}"
            return self._budget_end(action, "action_chars", why)
        if cfg.episode_time_s is not None and time.monotonic() - self._started > cfg.episode_time_s:
            self._mark("timed-out")
            return self._budget_end(action, "episode_time", f"the episode ran past its {cfg.episode_time_s:g} s")
        run_task = self._effective(task)
        single = cfg.max_turns == 1
        tid = self._trace_id()
        rounds = score_rounds([(run_task, action, tid)], cfg.reward, hidden="together" if single else "after_public",
                              language=cfg.language)  # fmt: skip
        (scored,) = yield from rounds
        graded, pub, hid = scored.grade, scored.public, scored.hidden
        marks = scored.transitions[1:] if scored.transitions[:1] and scored.transitions[0][0] == "queued" else scored.transitions
        self._transitions.extend(marks)  # the step's own "queued" began the first round
        breakdown = graded.breakdown
        summary = graded.run
        executions = pub.executions + (hid.executions if hid is not None else [])
        sandbox_error, judge_error = graded.sandbox_error, graded.judge_error
        budget: Budget | None = None
        terminated = truncated = False
        if sandbox_error or judge_error:
            reward, truncated = 0.0, True
        elif cfg.turn_time_s is not None and sum(r.execution_time_ms for r in executions) > cfg.turn_time_s * 1000:
            self._transitions.insert(len(self._transitions) - 1, ("timed-out", self._transitions[-1][1]))  # before "judged"
            reward, truncated, budget = self._cut_short(breakdown.reward), True, "turn_time"
        elif single:
            assert breakdown.reward is not None
            reward, terminated = breakdown.reward, True
        elif breakdown.tier in ("all_public", "all_tests"):
            assert breakdown.reward is not None
            reward, terminated = breakdown.reward - self._bonus_paid, True
        elif self._turn + 1 >= cfg.max_turns:  # the last turn's program keeps its tier: the ladder holds at the end
            assert breakdown.reward is not None
            reward, truncated, budget = breakdown.reward - self._bonus_paid, True, "turns"
        else:
            reward = 0.0
            if pub.passed > self._best_passed:
                reward = min(cfg.reward.process_bonus, cfg.reward.process_bonus_cap - self._bonus_paid)
                self._bonus_paid += reward
            self._best_passed = max(self._best_passed, pub.passed)
        reward = round(float(reward), 6)
        if not (sandbox_error or judge_error):
            self._last_tier_reward = breakdown.reward
        if self.curriculum is not None and (terminated or truncated) and not (sandbox_error or judge_error):
            self.curriculum.update(task, breakdown.tier == "all_tests")
        self._obs = self._observation(pub, summary)
        llm_summary = self._summarize(action, terminated or truncated, bool(sandbox_error or judge_error))
        info = StepInfo(
            trace_id=tid, problem_id=task.problem_id, turn=self._turn,
            reward_breakdown=breakdown.model_dump(exclude_none=True), sandbox_error=sandbox_error, budget=budget,
            judge_error=judge_error, feedback=[c.model_dump(exclude={"elapsed_ms"}) for c in pub.cases],
        ).model_dump()  # fmt: skip
        info["step_reward"] = reward
        if llm_summary is not None:
            info["llm_summary_error"] = llm_summary.error
        self.last_timing = {"execution_time_ms": summary.execution_time_ms, "transitions": list(self._transitions)}
        self._log(action, reward, terminated, truncated, info, executions, pub, hid, scored, llm_summary)
        return self._advance(self._obs, reward, terminated, truncated, info)

    def _summarize(self, action: str, ends: bool, failed: bool) -> SummaryResult | None:
        """The LLM summary of the step's run into ``self._obs`` (``include_llm_summary``): none
        (an empty text) for a step whose sandbox or judge failed, or that ends the episode unless
        ``on_last_step``; None when the env includes no summary."""
        if self.summarizer is None:
            return None
        assert self._obs is not None
        if failed or (ends and not self.summarizer.config.on_last_step):
            return SummaryResult()
        result = self.summarizer.summarize(self._prompt(), action, self._obs)
        self._obs["llm_summary"] = _clip(result.text)
        return result

    def _overflow_end(self, action: str) -> StepResult:
        """The step of an action whose generation overflowed, under ``context_window_overflow``:
        not run, that reward, the episode over."""
        reward = round(float(self.config.reward.context_window_overflow or 0.0), 6)
        why = "the reply stopped at the model's token or context limit: not run"
        return self._unrun_end(action, overflow_breakdown(self.config.reward), reward, why, terminated=True)

    def _effective(self, task: Task) -> Task:
        """The task with this env's limits: overrides, and a per-test time within the turn budget."""
        update: dict[str, Any] = {}
        if self.config.timeout_s is not None:
            update["timeout_s"] = self.config.timeout_s
        if self.config.memory_mb is not None:
            update["memory_mb"] = self.config.memory_mb
        if self.config.turn_time_s is not None:
            update["timeout_s"] = min(update.get("timeout_s", task.timeout_s), self.config.turn_time_s)
        return task.model_copy(update=update) if update else task

    def _cut_short(self, tier_reward: float | None) -> float:
        """The step reward of a budget that cuts the episode short: ``budget_exhausted``, but never
        above the tier of the program it stopped (a too-slow turn) or, for an action that did not
        run (too long, past the episode's clock), the tier of the episode's last program; less the
        process bonus already paid. So the episode returns ``min(budget_exhausted, tier)``: a
        budget never turns a syntax error (-1) or a timeout (-0.5) into -0.1. With no program run
        yet, ``budget_exhausted``."""
        cap = self.config.reward.budget_exhausted
        return (cap if tier_reward is None else min(cap, tier_reward)) - self._bonus_paid

    def _budget_end(self, action: str, budget: Budget, why: str) -> StepResult:
        assert self._task is not None
        reward = round(self._cut_short(self._last_tier_reward), 6)
        if self._last_tier_reward is not None and self._last_tier_reward < self.config.reward.budget_exhausted:
            why += f"; capped at the tier of the episode's last program ({self._last_tier_reward:g})"
        breakdown = RewardBreakdown(tier="budget_exhausted", reward=round(reward + self._bonus_paid, 6), explanation=why)
        return self._unrun_end(action, breakdown, reward, f"budget exhausted: {why}", terminated=False, budget=budget)

    def _unrun_end(self, action: str, breakdown: RewardBreakdown, reward: float, stderr: str, *, terminated: bool,
                   budget: Budget | None = None) -> StepResult:  # fmt: skip
        """The last step of an episode whose action did not run: the previous observation with
        ``stderr`` saying why, ``reward``, terminated (or else truncated)."""
        assert self._task is not None
        # fresh arrays: the caller may hold (and mutate) the previous observation's, e.g. reset's
        obs = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in (self._obs or self._observation(None, None)).items()}
        obs["stderr"] = _clip(stderr + "\n")
        obs["turn"] = np.array(self._turn + 1, dtype=np.int64)
        if self.summarizer is not None:
            obs["llm_summary"] = ""  # nothing ran
        info = StepInfo(trace_id=self._trace_id(), problem_id=self._task.problem_id, turn=self._turn,
                        reward_breakdown=breakdown.model_dump(exclude_none=True), budget=budget).model_dump()  # fmt: skip
        info["step_reward"] = reward
        if self.summarizer is not None:
            info["llm_summary_error"] = None
        self.last_timing = {"execution_time_ms": 0.0, "transitions": list(self._transitions)}
        self._log(action, reward, terminated, not terminated, info, [], None, None)
        return self._advance(obs, reward, terminated, not terminated, info)

    def _advance(self, obs: dict[str, Any], reward: float, terminated: bool, truncated: bool,
                 info: dict[str, Any]) -> StepResult:  # fmt: skip
        self._turn += 1
        if terminated or truncated:
            self._done = True
        else:
            self._transitions = [("generating", time.time())]
        self._obs = obs
        self._generation = None
        return obs, reward, terminated, truncated, info

    def _mark(self, state: State) -> None:
        self._transitions.append((state, time.time()))

    def _observation(self, pub: Verification | None, summary: RunSummary | None) -> dict[str, Any]:
        turn = self._turn + (1 if pub is not None else 0)
        cases = pub.cases if pub is not None else None
        self._cases = list(cases or [])
        return make_observation(self._prompt(), cases, summary, turn, timing=self.config.timing_in_observation,
                                llm_summary="" if self.summarizer is not None else None)  # fmt: skip

    def evaluate(self, programs: Sequence[str], problem_id: str | None = None) -> list[Evaluation]:
        """Judge K candidate programs for one task (this episode's, or ``problem_id``) in one
        batch through this env's executor, outside any episode: a GRPO group. See ``evaluate``."""
        if problem_id is not None:
            task = self._by_id.get(problem_id) or registry.get(self.tasks, problem_id)
        elif self._task is not None:
            task = self._task
        else:
            raise ResetNeeded("CodeExec-v0: evaluate() needs a problem_id, or reset() first")
        return evaluate([(self._effective(task), p) for p in programs], executor=self.executor,
                        config=self.config.reward, timing=self.config.timing_in_observation)  # fmt: skip

    # -------------------------------------------------------------------------------- logs

    def _log(self, action: str, reward: float, terminated: bool, truncated: bool, info: dict[str, Any],
             executions: list[Any], pub: Verification | None, hid: Verification | None,
             scored: Scored | None = None, llm_summary: SummaryResult | None = None) -> None:  # fmt: skip
        if self.logger is None or not self.logger.wants(self._episode):
            return
        assert self._task is not None
        task = self._task
        record = {
            "trace_id": info["trace_id"],
            "episode": self._episode,
            "seed": self._seed,
            "sample": self._sample,
            "turn": self._turn,
            "problem_id": task.problem_id,
            "difficulty": task.difficulty,
            "task_fingerprint": task_fingerprint(task),
            "prompt": self._prompt(),
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "budget": info["budget"],
            "sandbox_error": info["sandbox_error"],
            "judge_error": info.get("judge_error"),
            "reward_breakdown": info["reward_breakdown"],
            "public_cases": [c.model_dump() for c in pub.cases] if pub else [],
            "hidden_cases": [{"status": c.status, "elapsed_ms": c.elapsed_ms} for c in hid.cases] if hid else [],
            "executions": [r.model_dump() for r in executions],
            "ran_as": scored.ran_as if scored is not None else info["trace_id"],
            "retried_executions": [r.model_dump() for v in (scored.retried if scored is not None else []) for r in v.executions],
            "execution_time_ms": self.last_timing["execution_time_ms"],
            "grade_spent_s": scored.grade.spent_s if scored is not None else 0.0,
            "transitions": self.last_timing["transitions"],
            "config": self.config.model_dump(mode="json"),
        }
        if llm_summary is not None:
            record["llm_summary"] = llm_summary.model_dump()
        if self.config.tasks == "<inline>":
            record["task"] = task.model_dump(mode="json")
        self.logger.write(record)

    # ---------------------------------------------------------------------------- misc

    def render(self) -> str | np.ndarray | None:
        """``"ansi"``: the text below; ``"rgb_array"``: the same text as an image (80 x 24
        characters, 480 x 240 pixels, the first line green when every public test passed, else
        red); ``None``: nothing. After ``reset``: the task and the start of its prompt. After a
        step: the public tests passed, exit code, timeout/OOM/syntax error, then each failing test
        (at most 3: its input, expected and got, or its error, and the end of the first
        traceback), then the end of stderr (where a function task's prints go)."""
        if self.render_mode is None or self._obs is None:
            return None
        lines = self.render_lines()
        if self.render_mode == "ansi":
            return "\n".join(lines) + "\n"
        o = self._obs
        passed = int(o["public_total"]) > 0 and int(o["public_passed"]) == int(o["public_total"])
        return text_image(lines, [GREEN if passed else RED] if int(o["turn"]) > 0 else None)

    def render_lines(self) -> list[str]:
        """The lines ``render`` shows (for any ``render_mode``): what the program wrote, the
        task's text too, with every control, bidi, zero-width and other invisible character
        escaped (``code_env._visible``), so that none acts on a terminal or hides in an image."""
        if self._obs is None or self._task is None:
            return []
        o = self._obs
        if int(o["turn"]) == 0:
            prompt = visible(o["prompt"]).splitlines()  # (visible leaves \n the only line break)
            more = [f"... ({len(prompt) - RENDER_PROMPT_LINES} more lines)"] if len(prompt) > RENDER_PROMPT_LINES else []
            return [f"{visible(self._task.problem_id, keep_newlines=False)}, turn 0: no program yet",
                    *prompt[:RENDER_PROMPT_LINES], *more]  # fmt: skip
        flags = "".join(f" {name}" for name, key in (("SYNTAX ERROR", "syntax_error"), ("TIMEOUT", "timeout"),
                                                    ("OOM", "oom")) if o[key])  # fmt: skip
        lines = [f"{visible(self._task.problem_id, keep_newlines=False)}, turn {int(o['turn'])}: {int(o['public_passed'])}/{int(o['public_total'])} "
                 f"public tests passed, exit {int(o['exit_code'])}{flags}"]  # fmt: skip
        lines += failing_tests(self._cases)
        stderr = visible(o["stderr"].rstrip("\n")).splitlines()
        if stderr:
            cut = len(stderr) > RENDER_STDERR_LINES
            lines.append(f"stderr{f' (last {RENDER_STDERR_LINES} of {len(stderr)} lines)' if cut else ''}:")
            lines += ["  " + _short(line, 200) for line in stderr[-RENDER_STDERR_LINES:]]
        said = visible(str(o.get("llm_summary", "")).strip()).splitlines()
        if said:
            lines += ["summary:", *("  " + line for line in said)]
        return lines

    def _make_logger(self) -> Any:
        return self.config.logger()

    @property
    def compute_reward(self) -> NoReturn:
        """Not an attribute of this env: the ``TypeError`` that points to ``CodeExecTokens-v0``.
        Stable-Baselines3's ``check_env`` first asks every env whether it is goal-conditioned
        (``hasattr(env.unwrapped, "compute_reward")``), before it checks observations that a text
        env cannot give it (SB3 wants numeric arrays, and a scalar ``Box``'s bounds check fails in
        NumPy 2): this is where it learns what to use instead. (``hasattr`` stays False for any
        other attribute this env lacks; no Gymnasium code asks for this one.)"""
        raise TypeError("CodeExec-v0 is not an env for Stable-Baselines3 (its check_env, its algorithms): "
                        + NO_SHAPE.format(space=self.action_space))

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
        self._release_executor()
        super().close()
