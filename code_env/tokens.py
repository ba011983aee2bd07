"""``CodeExecTokens-v0``: write ``f(x)``'s expression one token at a time; the finished program
runs in the sandbox like any ``CodeExec-v0`` program. Small discrete spaces, so that an
off-the-shelf RL library (Stable-Baselines3's PPO with ``MlpPolicy``) trains on real, sandboxed
execution without a language model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

import registry
from registry import Task
from registry.verify import Runner
from sandbox.languages import UnknownLanguageError
from sandbox.languages import resolve as resolve_language

from ._textimage import GREEN, RED, text_image
from ._visible import visible
from .env import (
    EnvConfig,
    PicklableEnv,
    check_render_mode,
    default_executor,
    requested_task,
    task_prompt,
)
from .grading import Judged, judge_many
from .records import grade_record
from .reward import RewardConfig
from .tracing import trace_id
from .trajectory import MAX_TOTAL_BYTES, TEXT_BYTES

#: The vocabulary: action ``i`` appends ``VOCAB[i]``; ``END`` (the last) finishes the program.
VOCAB: tuple[str, ...] = ("x", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "-", "*", "(", ")", "<end>")
END = len(VOCAB) - 1
_INDEX = {tok: i for i, tok in enumerate(VOCAB[:END])}

LOG_SCALE = 16.0  # an example's value v shows as clip(sign(v) * ln(1 + |v|) / 16, -1, 1) ...
LINEAR_SCALE = 20.0  # ... and as clip(v / 20, -1, 1) (the arith family's inputs are -20..20)
EXAMPLE_FEATURES = 5  # present, log x, log f(x), linear x, linear f(x)


def expression(tokens: list[int] | tuple[int, ...]) -> str:
    """The Python expression of a token sequence (without ``END``): tokens are separated by
    spaces, except that digits run together into numbers and parentheses hug their contents.
    Two ``*`` never make ``**``: ``x * * 2`` is a syntax error, there is no power operator."""
    out: list[str] = []
    prev = ""
    for t in tokens:
        tok = VOCAB[t]
        if out and not ((prev.isdigit() and tok.isdigit()) or prev == "(" or tok == ")"):
            out.append(" ")
        out.append(tok)
        prev = tok
    return "".join(out)


def token_text(tokens: list[int] | tuple[int, ...]) -> str:
    """Tokens as the policy wrote them, one ``VOCAB`` entry each, space-separated (``<end>``
    included when written): a token-level policy's reply in its trajectory record."""
    return " ".join(VOCAB[t] for t in tokens)


def tokenize(expr: str) -> list[int]:
    """The tokens of an expression over the vocabulary (spaces ignored; a number is one token
    per digit); ``expression(tokenize(e))`` is ``e`` in canonical spacing. ``ValueError`` for a
    character outside the vocabulary."""
    tokens: list[int] = []
    for ch in expr:
        if ch.isspace():
            continue
        if ch not in _INDEX:
            raise ValueError(f"{ch!r} is not in the vocabulary {VOCAB[:END]}")
        tokens.append(_INDEX[ch])
    return tokens


# The program around the expression, per language (those whose programs answer function tasks:
# ``registry.verify.FUNCTION_DRIVERS``). The expression goes into an assignment, not straight
# into ``return``: an empty one is then a syntax error (a compile error), as it should be, rather
# than a valid ``return`` of nothing. The languages read the same tokens their own way: digits
# after a leading 0 are a syntax error in Python and an octal number in C++ (and in JavaScript's
# sloppy mode); C++'s ``long long`` wraps where Python's int grows (a wrong answer, not an error).
PROGRAMS = {
    "python": "def {f}(x):\n    result = {expr}\n    return result\n",
    "javascript": "function {f}(x) {{\n  const result = {expr};\n  return result;\n}}\n",
    "typescript": "function {f}(x: number): number {{\n  const result: number = {expr};\n  return result;\n}}\n",
    "cpp": "long long {f}(long long x) {{\n    long long result = {expr};\n    return result;\n}}\n",
}


def program(entry_point: str, expr: str, language: str = "python") -> str:
    """The program a token sequence stands for, in ``language`` (``PROGRAMS``)."""
    return PROGRAMS[language].format(f=entry_point, expr=expr)


def _encode(v: Any) -> tuple[float, float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        return 0.0, 0.0
    log = float(np.sign(v) * np.log1p(abs(float(v))) / LOG_SCALE)
    return float(np.clip(log, -1.0, 1.0)), float(np.clip(v / LINEAR_SCALE, -1.0, 1.0))


class CodeExecTokensEnv(PicklableEnv, gym.Env[np.ndarray, np.int64]):
    """Write ``f(x)`` token by token for a ``synthetic:arith`` task; the program runs in the sandbox.

    A task of the ``synthetic:arith`` family asks for an integer function ``f(x)`` given
    input/output examples (its public tests; hidden tests check more inputs). The agent builds the
    expression ``f`` returns from a fixed vocabulary; when it emits ``<end>`` or the length budget
    runs out, the program ``def f(x): result = <expression>; return result`` is graded on the
    public and hidden tests in the sandbox, exactly as ``CodeExec-v0`` grades a program.

    ``language`` (default Python; JavaScript, TypeScript or C++) is the program's around the
    expression (``PROGRAMS``): the same tokens, graded through that language's function-task
    driver; the prompt names it.

    ## Action space
    ``Discrete(17)``: ``VOCAB`` = ``x``, digits ``0``-``9``, ``+``, ``-``, ``*``, ``(``, ``)``,
    ``<end>`` (action 16). Tokens join with spaces, except that consecutive digits make one number
    (``1``, ``2`` is ``12``) and parentheses hug their contents; ``*``, ``*`` is therefore a
    syntax error, not a power. An action outside the space raises ``ValueError``.

    ## Observation space
    ``Box(-1, 1, (5 K + max_tokens * 17 + 1,), float32)``, K = the most public examples of a pool
    task (4 for ``synthetic:arith``):

    * per public example (zeros after the task's last): 1, then ``x`` and ``f(x)`` each as
      ``clip(sign(v) ln(1 + |v|) / 16, -1, 1)`` and as ``clip(v / 20, -1, 1)``;
    * the tokens so far, one-hot, one row of 17 per position (rows past the end all zero);
    * the fraction of the length budget used, ``len(tokens) / max_tokens``.

    ## Rewards
    0 for every token but the last. The last step (``<end>``, or the token that fills the
    budget) earns the program's grade, the ``CodeExec-v0`` tiers (``RewardConfig``, defaults):
    syntax error -1 (an empty or garbled expression), timeout or OOM -0.5, ``0.6 k/n`` for ``k``
    of ``n`` public tests, 0.8 all public, 1.0 all public and hidden, scaled by the reward config's
    LLM judge if it has one: ``code_env.grade``'s reward, to the digit. A failure of the sandbox
    itself (run once more by the grader), or of the LLM judge's endpoint (``info["judge_error"]``),
    gives 0 and truncates the episode; ``info["sandbox_error"]``
    says why.

    ## Episode end
    ``terminated`` when the program is graded: after ``<end>``, or after the ``max_tokens``-th
    token (``info["budget"] == "max_tokens"``; the budget is part of the task and in the
    observation, and nothing follows the grade, so it is a terminal state, not a truncation).
    ``truncated`` only when the sandbox failed. Stepping before ``reset`` or after the end raises
    ``gymnasium.error.ResetNeeded``.

    ## Info
    Every step: ``problem_id``, ``expression`` (the tokens so far, as text), ``n_tokens``,
    ``sandbox_error`` (None unless the sandbox failed). The last step also: ``reward_breakdown``
    (``RewardBreakdown`` as a dict: tier, reward, test counts, explanation) and ``budget``
    (``"max_tokens"`` or None). ``reset`` gives ``problem_id`` and ``difficulty``. Nothing in it
    varies between two runs with the same seed and actions.

    ## Arguments
    ``difficulty`` (1-5, or None for a pool of every level in turn; default 1: a level-1
    reference takes at most 9 tokens), ``n_tasks`` (pool size, default 200), ``task_seed`` (the
    pool's generator seed, default 0): the pool is ``registry.load("synthetic:arith", n=n_tasks,
    seed=task_seed, difficulty=difficulty)``. ``max_tokens`` (length budget, default 16; raise it
    for difficulty > 2), ``reward`` (``RewardConfig``, file path, or None for the defaults),
    ``executor`` (anything with ``run_many``; default the process-wide sandbox of ``backend``,
    ``"auto"``, started by the first graded program, stopped when the last env that used it
    closes: ``grading.SharedSandbox``), ``render_mode`` (``"ansi"``, ``"rgb_array"`` or None; see ``render``),
    ``log_dir`` (a folder for the trajectory log, or None: no log), ``log_every`` (log every
    N-th episode, default 1), ``log_max_bytes`` and ``log_text_bytes`` (the log's bounds, as
    ``CodeExec-v0``'s). ``reset(options={"problem_id": ...})`` picks a task of the pool;
    otherwise ``reset`` draws one uniformly with ``self.np_random``.

    ## Trajectory log
    With ``log_dir``, every ``log_every``-th episode (counting from this instance's first, 0) is
    one JSONL record (``code_env.trajectory``; one file per instance, so per worker process),
    written when the program is graded. It has the shape of a single-turn ``CodeExec-v0`` step's
    record, so that ``code-env stats``, ``audit`` and ``replay`` read it: ``trace_id``
    (``problem_id/sample/0``, sample = episodes since the last seeded reset), ``episode``,
    ``seed``, ``sample``, ``turn`` (0), the task's ``problem_id``, ``difficulty``,
    ``task_fingerprint`` and ``prompt``, ``action`` (the program that ran), ``reward``,
    ``terminated``, ``truncated``, ``budget`` (None: the length budget ends the episode with the
    program's own grade, not with a budget penalty), ``sandbox_error``, ``reward_breakdown``,
    ``public_cases``, ``hidden_cases`` (status and time only), ``executions``,
    ``execution_time_ms``, ``transitions`` (time-stamped states, generating → judged) and
    ``config`` (the equivalent ``CodeExec-v0`` ``EnvConfig``: ``code-env replay`` re-judges the
    program on the same task with it); the fields of every trainer's record (``code_env.records``):
    ``completion`` (the tokens written, as text), ``completion_truncated`` (the length budget
    ended it), ``completion_tokens``, ``trainer`` and ``step`` (with ``rollout=(n_steps, n_envs)``
    of an on-policy trainer such as PPO: ``"ppo"`` and the trainer's ``num_timesteps`` after the
    update that trains on the episode, the step of its ``curve.csv`` row; else None),
    ``advantage`` (None: PPO's advantages are per token, inside its rollout buffer), ``ran_as``;
    plus the token-level ``tokens`` (the actions, ``<end>`` included when written),
    ``expression`` and ``max_tokens_reached``. Long texts of the runs are clipped
    (``code_env.trajectory``).

    ## Version history
    v0: first release; since then ``render_mode="rgb_array"`` (which Stable-Baselines3 asks for
    when it makes the env from its id); ``log_dir``/``log_every``, the trajectory log.

    >>> import gymnasium as gym, code_env
    >>> from code_env.tokens import END, tokenize
    >>> env = gym.make("CodeExecTokens-v0")
    >>> obs, info = env.reset(seed=0, options={"problem_id": "synthetic:arith/s0/d1/1"})
    >>> env.unwrapped.task.reference_solution
    'def f(x):\\n    return (7 * x)\\n'
    >>> for action in [*tokenize("7 * x"), END]:
    ...     obs, reward, terminated, truncated, info = env.step(action)
    >>> info["expression"], reward, terminated, info["reward_breakdown"]["tier"]
    ('7 * x', 1.0, True, 'all_tests')
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self, *, difficulty: int | None = 1, n_tasks: int = 200, task_seed: int = 0,
                 max_tokens: int = 16, executor: Runner | str | None = None,
                 reward: RewardConfig | str | Path | None = None, backend: str = "auto",
                 render_mode: str | None = None, log_dir: str | Path | None = None,
                 log_every: int = 1, log_max_bytes: int = MAX_TOTAL_BYTES, log_text_bytes: int = TEXT_BYTES,
                 rollout: tuple[int, int] | None = None, language: str = "python") -> None:  # fmt: skip
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 1024:
            raise ValueError(f"max_tokens: expected an int in 1..1024, got {max_tokens!r}")
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
            raise ValueError(f"log_every: expected an int >= 1, got {log_every!r}")
        if rollout is not None and not (isinstance(rollout, tuple) and len(rollout) == 2
                                        and all(isinstance(v, int) and v >= 1 for v in rollout)):  # fmt: skip
            raise ValueError(f"rollout: expected (n_steps, n_envs), two ints >= 1, or None, got {rollout!r}")
        if log_dir is not None and not isinstance(log_dir, (str, Path)):
            raise TypeError(f"log_dir: expected a folder path or None, got {type(log_dir).__name__}")
        if isinstance(reward, (str, Path)):
            reward = RewardConfig.from_file(reward)
        if reward is not None and not isinstance(reward, RewardConfig):
            raise TypeError(f"reward: expected a RewardConfig, a file path or None, got {type(reward).__name__}")
        try:
            self.language = resolve_language(language).name
        except UnknownLanguageError as exc:
            raise ValueError(f"CodeExecTokens-v0: language: {exc}") from None
        if self.language not in PROGRAMS:
            raise ValueError(f"CodeExecTokens-v0: language: a {self.language} program cannot answer the arith tasks' "
                             f"function tests (they take {', '.join(PROGRAMS)})")  # fmt: skip
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.reward_config = reward or RewardConfig()
        self.max_tokens = max_tokens
        self.tasks: list[Task] = registry.load("synthetic:arith", n=n_tasks, seed=task_seed, difficulty=difficulty)
        self._by_id = {t.problem_id: t for t in self.tasks}
        self.executor: Runner = default_executor(backend, executor)
        self._remember_executor(executor, backend)
        self.n_examples = max(len(t.public_tests) for t in self.tasks)
        n_ex = EXAMPLE_FEATURES * self.n_examples
        low = np.concatenate([np.tile(np.array([0, -1, -1, -1, -1], np.float32), self.n_examples),
                              np.zeros(max_tokens * len(VOCAB) + 1, np.float32)])  # fmt: skip
        self.observation_space = spaces.Box(low, np.ones_like(low), dtype=np.float32)
        self._size = int(low.size)
        self.action_space = spaces.Discrete(len(VOCAB))
        self._tokens_at = n_ex  # where the one-hot rows start
        self._task: Task | None = None
        self._examples = np.zeros(n_ex, np.float32)
        self._tokens: list[int] = []
        self._done = True
        self._last_reward: float | None = None  # the episode's grade, for render()
        self._episode = -1  # every episode of this instance
        self._sample = -1  # episodes since the last reset with a seed: the trace id's "sample"
        self._seed: int | None = None
        self._generating = self._generated = 0.0  # when the episode's first token was asked for, when its last came
        self._env_steps = 0  # actions taken by this instance since it was made
        self.rollout = rollout
        self.log_config = EnvConfig(tasks="synthetic:arith", reward=self.reward_config, backend=backend, language=self.language,
                                    task_params={"n": n_tasks, "seed": task_seed, "difficulty": difficulty},
                                    log_dir=None if log_dir is None else str(log_dir), log_every=log_every,
                                    log_max_bytes=log_max_bytes, log_text_bytes=log_text_bytes)  # fmt: skip
        self.logger = self.log_config.logger()

    def _make_logger(self) -> Any:
        return self.log_config.logger()

    @property
    def task(self) -> Task | None:
        """The current episode's task."""
        return self._task

    def reference_actions(self) -> list[int]:
        """The actions that write the current task's reference expression, then ``END``."""
        if self._task is None:
            raise ResetNeeded("CodeExecTokens-v0: reference_actions() before reset()")
        ref = self._task.reference_solution.split("return", 1)[1].strip()
        return [*tokenize(ref), END]

    # ------------------------------------------------------------------------------- reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        task = requested_task(options, self.tasks, self._by_id)
        if task is None:
            task = self.tasks[int(self.np_random.integers(0, len(self.tasks)))]
        self._task = task
        self._tokens = []
        self._done = False
        self._last_reward = None
        if seed is not None:
            self._seed, self._sample = seed, -1
        self._episode += 1
        self._sample += 1
        self._generating = self._generated = time.time()
        ex = np.zeros((self.n_examples, EXAMPLE_FEATURES), np.float32)
        for k, case in enumerate(task.public_tests):
            (log_x, lin_x), (log_y, lin_y) = _encode(case.args[0] if case.args else None), _encode(case.expected)
            ex[k] = (1.0, log_x, log_y, lin_x, lin_y)
        self._examples = ex.reshape(-1)
        return self._observation(), {"problem_id": task.problem_id, "difficulty": task.difficulty}

    # -------------------------------------------------------------------------------- step

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise ResetNeeded("CodeExecTokens-v0: step() before reset()")
        if self._done:
            raise ResetNeeded("CodeExecTokens-v0: the episode is over (terminated or truncated); call reset()")
        if not self.action_space.contains(action):
            raise ValueError(f"CodeExecTokens-v0: the action must be a token id, an int in 0..{END} "
                             f"({END} is <end>); got {action!r} of type {type(action).__name__}")  # fmt: skip
        task = self._task
        token = int(action)
        self._env_steps += 1
        if token != END:
            self._tokens.append(token)
        expr = expression(self._tokens)
        info: dict[str, Any] = {"problem_id": task.problem_id, "expression": expr,
                                "n_tokens": len(self._tokens), "sandbox_error": None, "judge_error": None}  # fmt: skip
        if token != END and len(self._tokens) < self.max_tokens:
            return self._observation(), 0.0, False, False, info
        self._done = True
        code = program(task.entry_point or "f", expr, self.language)
        tid = trace_id(task.problem_id, self._sample)
        self._generated = time.time()
        # the path of code_env.grade (score_rounds), with the verifications and timed states the log
        # needs; the length budget is the model's token limit: context_window_overflow
        (judged,) = judge_many([(task, code)], sandbox=self.executor, config=self.reward_config, trace_ids=[tid],
                               overflowed=[token != END], language=self.language)  # fmt: skip
        g = judged.grade
        info["reward_breakdown"] = g.breakdown.model_dump()
        info["budget"] = None if token == END else "max_tokens"
        if g.reward is None:
            if g.judge_error is not None:  # the LLM judge's endpoint failed: dropped like a sandbox failure
                info["judge_error"] = g.judge_error
            else:
                info["sandbox_error"] = g.sandbox_error or g.breakdown.explanation
            self._log(code, 0.0, False, True, info, token, judged)
            return self._observation(), 0.0, False, True, info
        self._last_reward = round(float(g.reward), 6)
        self._log(code, self._last_reward, True, False, info, token, judged)
        return self._observation(), self._last_reward, True, False, info

    def _log(self, code: str, reward: float, terminated: bool, truncated: bool, info: dict[str, Any], last: int,
             judged: Judged) -> None:  # fmt: skip
        if self.logger is None or not self.logger.wants(self._episode):
            return
        assert self._task is not None
        task = self._task
        tokens = [*self._tokens, *([END] if last == END else [])]
        step = None
        if self.rollout is not None:  # the trainer's step after the update that trains on this episode
            n_steps, n_envs = self.rollout
            step = -(-self._env_steps // n_steps) * n_steps * n_envs
        record = grade_record(task, code, judged, self.log_config, trace_id=trace_id(task.problem_id, self._sample),
                              n=self._episode, sample=self._sample, seed=self._seed, generating=self._generating,
                              generated=self._generated,
                              completion=token_text(tokens), completion_truncated=last != END,
                              completion_tokens=len(tokens), trainer="ppo" if self.rollout is not None else None,
                              step=step, prompt=task_prompt(task, self.language), tokens=tokens, expression=info["expression"],
                              max_tokens_reached=last != END)  # fmt: skip
        record["reward"], record["terminated"], record["truncated"] = reward, terminated, truncated
        record["sandbox_error"], record["judge_error"] = info["sandbox_error"], info["judge_error"]
        self.logger.write(record)

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self._size, np.float32)
        obs[: self._tokens_at] = self._examples
        rows = obs[self._tokens_at : -1].reshape(self.max_tokens, len(VOCAB))
        rows[np.arange(len(self._tokens)), self._tokens] = 1.0
        obs[-1] = len(self._tokens) / self.max_tokens
        return obs

    # ---------------------------------------------------------------------------- misc

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
        self._release_executor()
        super().close()

    def render(self) -> str | np.ndarray | None:
        """``"ansi"``: ``problem_id: f(x) = <expression>`` (`` <end>`` once graded);
        ``"rgb_array"``: that line, the public examples and the budget used, as a 240 x 100 image
        (40 x 10 characters; the expression green once it earned 1.0, red once graded lower);
        ``None``: nothing."""
        if self.render_mode is None or self._task is None:
            return None
        line = f"{visible(self._task.problem_id, keep_newlines=False)}: f(x) = {expression(self._tokens)}{' <end>' if self._done else ''}"
        if self.render_mode == "ansi":
            return line + "\n"
        examples = [f"  f({c.args[0] if c.args else '?'}) = {c.expected}" for c in self._task.public_tests]
        lines = [visible(self._task.problem_id, keep_newlines=False), line.split(": ", 1)[1], "examples:", *examples,
                 f"tokens: {len(self._tokens)} of {self.max_tokens}"]  # fmt: skip
        color = None if self._last_reward is None else GREEN if self._last_reward >= 1.0 else RED
        return text_image(lines, [None, color], columns=40, rows=10)
