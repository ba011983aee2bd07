"""``CodeAgent-v0``: a coding agent's episode. The action is a tool call; the agent reads, writes
and edits the files of a private workspace, runs them in the sandbox, runs the public tests when it
chooses, and submits. Same task sets, grader and reward ladder as ``CodeExec-v0``.

The workspace is held on the host, a mapping of relative paths to bytes, within its limits
(``max_files``, ``max_bytes``, ``max_file_bytes``). A ``run`` gives all of it to a fresh jail
(``Sandbox.run(files=...)``) and takes back what the run left there (``fetch_files=["."]``:
regular files only, no link followed, nothing from outside the run's own filesystem): only the
workspace's own changes persist, and only within the limits (past them, the run's changes are
dropped and the result says so). The files start as the task's: ``main.py`` (its starter code, the
file that is graded), ``PROMPT.md`` and ``test_public.py`` (the public tests, runnable); the hidden
tests and their expected values never enter it. It is gone at the episode's end.

Tools (``env.tools``: OpenAI ``tools`` schemas): ``list_files``, ``read_file``, ``write_file``,
``edit_file`` (search and replace, one occurrence), ``run`` (a Python file of the workspace, run as
``python FILE``), ``run_tests`` (``main.py`` against the public tests, the per-test feedback of
``CodeExec-v0``), ``submit`` (``main.py`` graded on public and hidden tests: the reward ladder; the
episode ends). An action is the call: ``{"name": ..., "arguments": "<json>" or {...}}``, OpenAI's
``{"function": {...}}``, either as JSON text, or a model's reply carrying one in
``<tool_call>...</tool_call>`` (Hermes, Qwen). A call that cannot be read or done is an error
observation (``info["tool_error"]``), never an exception.

Reward: 0 per call, but ``run_tests`` that passes more public tests than before pays the process
bonus (0.05, at most 0.1 an episode), an advance on the final tier: ``submit`` pays its tier less
the advances (a solved episode returns exactly its tier). Budgets, each its own label in
``info["budget"]``: ``tool_calls`` (the calls run out: ``main.py`` is graded as submitted, its tier
less the advances), ``call_chars`` and ``episode_time`` (``min(budget_exhausted, tier of the last
run_tests)`` less the advances, as ``CodeExec-v0``'s); ``call_time_s`` is each run's time limit
(a run past it is that call's timeout, shown in its result).

Logs (``log_dir``, ``log_every``, ``log_max_bytes``, ``log_text_bytes``: as ``CodeExec-v0``'s,
through the same ``TrajectoryLogger``): one record per call, ``"env": "CodeAgent-v0"``, with the
call (``action``: the text, or an object as its JSON with ``action_format`` ``"json"``, whole as
``CodeExec-v0``'s programs are; ``call``: its parsed name and arguments, long texts clipped), the
observation (texts bounded), the run's ``ExecutionResult`` (``executions``), the grade's public
tests and the program it graded, the reward, its breakdown, the budget label, the workspace's
size and SHA-256 after the call (``workspace``) and a unified diff against the workspace before it
(``workspace_diff``: a binary file or one too large is named, not dumped; the diff and the graded
program keep 4 x ``log_text_bytes``), and the env's ``config`` (``AgentConfig``), from which
``code-env replay`` rebuilds the env, steps the calls again and compares the rewards,
observations and workspaces.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from registry import Task
from sandbox import ExecutionResult, LanguageUnavailableError, Limits, RunRequest
from sandbox.languages import LANGUAGES, OUTPUT_DIR, Language, UnknownLanguageError
from sandbox.languages import resolve as resolve_language

from ._errors import first_error
from .adapters import load_tasks, reward_config
from .env import (
    INT_BOUND,
    MAX_TEXT_CHARS,
    PicklableEnv,
    _clip,
    check_render_mode,
    default_executor,
    task_fingerprint,
    task_prompt,
)
from .grading import Grade, grade_many
from .reward import RewardConfig
from .spaces import AnyText
from .tracing import trace_id
from .trajectory import MAX_TOTAL_BYTES, TEXT_BYTES, TrajectoryLogger, clip_text

MAIN = "main.py"
TOOL_NAMES = ("list_files", "read_file", "write_file", "edit_file", "run", "run_tests", "submit")
PYTHON_TOOL = "python"  # the stateful code interpreter's tool (``interpreter=True``: code_env.interpreter)
RUN_PROCESSES = 16  # of a ``run`` (a shell script's pipeline forks)
READ_CHARS = 20_000  # of a file shown by read_file, and of a run's stdout and stderr each
_SANDBOX_PROGRAM = "solution.py"  # the name a Python program has in its jail (never a workspace file)
_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "list_files", "description": "List the workspace's files with their sizes.",
        "parameters": {"type": "object", "properties": {}, "required": []}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the workspace (UTF-8 text).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "relative path"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Create or overwrite a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace the one occurrence of `old` in a file by `new`.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                                        "new": {"type": "string"}},
                       "required": ["path", "old", "new"]}}},
    {"type": "function", "function": {
        "name": "run", "description": "Run a file of the workspace in the sandbox, with stdin: a program of its language "
                                     "by its extension (.py as `python FILE`, .js, .sh, .c, .cpp, .rs, .go, .java, .ts), "
                                     "or `command`: a runtime and the file (`python test_public.py`). The files it "
                                     "writes stay in the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "command": {"type": "string"},
                                                        "stdin": {"type": "string"}},
                       "required": []}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": f"Run {MAIN} against the task's public tests; one line per test.",
        "parameters": {"type": "object", "properties": {}, "required": []}}},
    {"type": "function", "function": {
        "name": "submit", "description": f"Hand in {MAIN}: graded on the public and hidden tests; the episode ends.",
        "parameters": {"type": "object", "properties": {}, "required": []}}},
]  # fmt: skip


class ToolError(Exception):
    """A call that cannot be done: its message is the observation."""


def parse_tool_call(action: Any) -> tuple[str, dict[str, Any]]:
    """The tool's name and arguments of an action (see the module); ``ToolError`` saying what is
    wrong with it otherwise."""
    call: Any = action
    if isinstance(action, str):
        text = action.strip()
        tagged = _TOOL_CALL_TAG.search(text)
        if tagged is not None:
            text = tagged.group(1)
        elif text.startswith("```"):
            text = text.strip("`").removeprefix("json").strip()
        try:
            call = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolError(f"the action is no tool call: expected JSON {{\"name\": ..., \"arguments\": {{...}}}}, "
                            f"alone or in <tool_call>...</tool_call> ({exc.msg} at character {exc.pos})") from None  # fmt: skip
    if isinstance(call, list) and len(call) == 1:
        call = call[0]
    if not isinstance(call, Mapping):
        raise ToolError(f"a tool call is an object with name and arguments, got {type(call).__name__}")
    if isinstance(call.get("function"), Mapping):  # OpenAI's tool_calls item
        call = call["function"]
    name = call.get("name")
    if not isinstance(name, str):
        raise ToolError("the tool call has no name")
    args: Any = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(f"{name}: the arguments are not JSON ({exc.msg} at character {exc.pos})") from None
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ToolError(f"{name}: the arguments must be a JSON object, got {type(args).__name__}")
    if name not in (*TOOL_NAMES, PYTHON_TOOL):
        raise ToolError(f"unknown tool {name!r}: the tools are {', '.join(TOOL_NAMES)} (and {PYTHON_TOOL} with interpreter=True)")
    return name, dict(args)


def check_path(path: Any) -> str:
    """A workspace path: relative, "/"-separated, no empty, "." or ".." step, printable."""
    if not isinstance(path, str):
        raise ToolError(f"path: expected a string, got {type(path).__name__}")
    if not path or path.startswith("/") or "\\" in path:
        raise ToolError(f"path {path[:100]!r}: expected a relative path inside the workspace, such as {MAIN!r}")
    if any(p in ("", ".", "..") for p in path.split("/")):
        raise ToolError(f"path {path[:100]!r}: a path may not hold '.', '..' or an empty step")
    if len(path) > 255 or not path.isprintable():
        raise ToolError(f"path {path[:100]!r}: at most 255 printable characters")
    if path == _SANDBOX_PROGRAM:
        raise ToolError(f"path {path!r}: reserved for the sandbox's own program; choose another name")
    return path


def _arg(args: Mapping[str, Any], tool: str, key: str, default: Any = ...) -> str:
    value = args.get(key, default)
    if value is ...:
        raise ToolError(f"{tool}: missing argument {key!r}")
    if not isinstance(value, str):
        raise ToolError(f"{tool}: argument {key!r} must be a string, got {type(value).__name__}")
    return value


def starter_files(task: Task) -> dict[str, bytes]:
    """The workspace an episode of ``task`` begins with: ``main.py``, ``PROMPT.md``, ``test_public.py``
    (and a stdio task's public inputs and outputs under ``tests/``). Nothing of the hidden tests."""
    stub = f"def {task.entry_point}(*args, **kwargs):\n    raise NotImplementedError\n"
    if task.starter_code.strip():
        main = task.starter_code.rstrip() + "\n"
        try:
            compile(main, MAIN, "exec")
        except SyntaxError:  # a sketch (``def f(...): ...``): shown, and a stub that runs, to be replaced
            main = "".join(f"# {line}\n" for line in main.splitlines()) + ("\n" + stub if task.kind == "function" else "")
    elif task.kind == "function":
        main = stub
    else:
        main = "import sys\n\ndata = sys.stdin.read()\n"
    files = {MAIN: main, "PROMPT.md": task_prompt(task) + "\n"}
    if task.kind == "function":
        cases = [{"args": t.args, "kwargs": t.kwargs, "expected": t.expected} for t in task.public_tests]
        files["test_public.py"] = (
            f'"""The public tests of this task (run_tests() is what grades: some tests compare loosely)."""\n'
            f"import json\n\nfrom main import {task.entry_point}\n\nCASES = json.loads({json.dumps(json.dumps(cases))})\n"
            f"for i, c in enumerate(CASES, 1):\n    try:\n        got = {task.entry_point}(*c['args'], **c['kwargs'])\n"
            "    except Exception as exc:\n        print(f'test {i}: error {type(exc).__name__}: {exc}')\n        continue\n"
            "    print(f\"test {i}: {'ok' if got == c['expected'] else 'FAIL'}: args {c['args']!r} \"\n"
            "          f\"expected {c['expected']!r} got {got!r}\")\n"
        )  # fmt: skip
    else:
        for i, t in enumerate(task.public_tests, 1):
            files[f"tests/public_{i}.in"] = t.stdin or ""
            files[f"tests/public_{i}.out"] = t.expected_stdout or ""
        files["test_public.py"] = (
            f'"""The public tests of this task (run_tests() is what grades)."""\nimport io\nimport runpy\nimport sys\n\n'
            f"for i in range(1, {len(task.public_tests) + 1}):\n"
            "    sys.stdin, out = open(f'tests/public_{i}.in'), io.StringIO()\n    sys.stdout = out\n    try:\n"
            f"        runpy.run_path({MAIN!r}, run_name='__main__')\n    except SystemExit:\n        pass\n"
            "    except Exception as exc:\n        print(f'{type(exc).__name__}: {exc}', file=sys.stderr)\n"
            "    finally:\n        sys.stdout = sys.__stdout__\n"
            "    expected = open(f'tests/public_{i}.out').read()\n"
            "    print(f\"test {i}: {'ok' if out.getvalue().split() == expected.split() else 'FAIL'}\")\n"
        )  # fmt: skip
    return {k: v.encode("utf-8") for k, v in files.items()}


class CodeAgentEnv(PicklableEnv, gym.Env[dict[str, Any], Any]):
    """A coding agent's episode over a workspace of files (see the module).

    ## Observation space
    A ``Dict``: ``prompt``, ``tool_result`` (the call's result as text, for a chat model),
    ``stdout``, ``stderr``, ``exit_code``, ``timeout``, ``oom`` (the last run's), ``public_passed``,
    ``public_total`` (the last ``run_tests``'), ``calls`` (made so far), ``files`` (in the
    workspace). ``info``: ``tool``, ``tool_error``, ``step_reward``, ``budget``, ``reward_breakdown``
    (``run_tests`` and ``submit``), ``sandbox_error``.

    ## Arguments
    ``tasks`` (set name, .jsonl path or list of ``Task``), ``executor``/``backend`` (as
    ``CodeExec-v0``'s), ``reward``, ``max_calls`` (30), ``max_call_chars`` (100,000),
    ``call_time_s`` (10), ``episode_time_s`` (None), the workspace's ``max_files`` (64),
    ``max_bytes`` (1 MiB) and ``max_file_bytes`` (256 KiB), ``render_mode`` (``"ansi"``); the
    trajectory log's ``log_dir`` (None: no log), ``log_every`` (every N-th episode),
    ``log_max_bytes`` (the directory's cap) and ``log_text_bytes`` (kept of each long text).
    """

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, executor: Any = None, backend: str = "auto",
                 reward: RewardConfig | Mapping[str, Any] | str | Path | None = None, max_calls: int = 30,
                 max_call_chars: int = 100_000, call_time_s: float = 10.0, episode_time_s: float | None = None,
                 max_files: int = 64, max_bytes: int = 1 << 20, max_file_bytes: int = 256 << 10,
                 render_mode: str | None = None, log_dir: str | os.PathLike[str] | None = None, log_every: int = 1,
                 log_max_bytes: int = MAX_TOTAL_BYTES, log_text_bytes: int = TEXT_BYTES,
                 interpreter: bool = False) -> None:  # fmt: skip
        for name, value, low in (("max_calls", max_calls, 1), ("max_call_chars", max_call_chars, 1),
                                 ("max_files", max_files, 4), ("max_bytes", max_bytes, 4096),
                                 ("max_file_bytes", max_file_bytes, 1024)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"CodeAgent-v0: {name}: expected an int >= {low}, got {value!r}")
        if not (isinstance(call_time_s, (int, float)) and 0 < call_time_s <= 600):
            raise ValueError(f"CodeAgent-v0: call_time_s: expected seconds in (0, 600], got {call_time_s!r}")
        if episode_time_s is not None and not (isinstance(episode_time_s, (int, float)) and episode_time_s > 0):
            raise ValueError(f"CodeAgent-v0: episode_time_s: expected seconds > 0 or None, got {episode_time_s!r}")
        self.tasks = load_tasks(tasks)
        self.by_id = {t.problem_id: t for t in self.tasks}
        self.reward_config = reward_config(reward)
        self.max_calls, self.max_call_chars, self.call_time_s = max_calls, max_call_chars, float(call_time_s)
        self.episode_time_s = episode_time_s
        self.max_files, self.max_bytes, self.max_file_bytes = max_files, max_bytes, max_file_bytes
        try:
            self.config = AgentConfig(
                tasks=str(tasks) if isinstance(tasks, (str, Path)) else INLINE, backend=backend, reward=self.reward_config,
                max_calls=max_calls, max_call_chars=max_call_chars, call_time_s=call_time_s, episode_time_s=episode_time_s,
                max_files=max_files, max_bytes=max_bytes, max_file_bytes=max_file_bytes,
                log_dir=None if log_dir is None else os.fspath(log_dir), log_every=log_every,
                log_max_bytes=log_max_bytes, log_text_bytes=log_text_bytes, interpreter=interpreter)  # fmt: skip
        except ValidationError as exc:
            raise ValueError(f"CodeAgent-v0: {first_error(exc)}") from None
        self.render_mode = check_render_mode(render_mode, self.metadata["render_modes"])
        self.executor = default_executor(backend, executor)
        self._remember_executor(executor, backend)
        self.interpreter = bool(interpreter)
        self._session: Any = None  # the episode's CodeInterpreter, made by its first python call
        if self.interpreter:
            from .interpreter import TOOL as PYTHON

            self.tools = [*TOOLS, PYTHON]
        else:
            self.tools = TOOLS
        text, count = AnyText(MAX_TEXT_CHARS), spaces.Box(0, INT_BOUND, shape=(), dtype=np.int64)
        self.action_space = AnyText(max(max_call_chars, 1) * 2)
        self.observation_space = spaces.Dict({
            "prompt": text, "tool_result": text, "stdout": text, "stderr": text,
            "exit_code": spaces.Box(-INT_BOUND, INT_BOUND, shape=(), dtype=np.int64),
            "timeout": spaces.Discrete(2), "oom": spaces.Discrete(2),
            "public_passed": count, "public_total": count, "calls": count, "files": count,
        })  # fmt: skip
        self.workspace: dict[str, bytes] = {}
        self._task: Task | None = None
        self._done = True
        self._calls = 0
        self._bonus_paid = 0.0
        self._best_passed = 0
        self._last_tier: float | None = None
        self._started = 0.0
        self._obs: dict[str, Any] = {}
        self._last_call = ""
        self._episode = -1  # every episode of this env (the log's ``episode``)
        self._seed: int | None = None
        self._step_run: ExecutionResult | None = None  # this step's run, for its log record
        self._step_grades: list[tuple[str, Grade]] = []  # this step's grades (the program graded, its grade)
        self.logger: TrajectoryLogger | None = self._make_logger()

    def _make_logger(self) -> TrajectoryLogger | None:
        c = self.config
        if c.log_dir is None:
            return None
        return TrajectoryLogger(c.log_dir, every=c.log_every, max_total_bytes=c.log_max_bytes, text_bytes=c.log_text_bytes)

    # -- episode
    @property
    def task(self) -> Task | None:
        return self._task

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        pid = (options or {}).get("problem_id")
        if pid is not None:
            if pid not in self.by_id:
                raise ValueError(f"CodeAgent-v0: unknown problem_id {pid!r} (this env has {len(self.tasks)} tasks)")
            self._task = self.by_id[pid]
        else:
            self._task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.workspace = starter_files(self._task)
        self._end_session()
        self._episode += 1
        if seed is not None:
            self._seed = seed
        self._done, self._calls, self._bonus_paid, self._best_passed = False, 0, 0.0, 0
        self._last_tier, self._started, self._last_call = None, time.monotonic(), ""
        result = f"Workspace: {', '.join(sorted(self.workspace))}. Edit {MAIN}; run_tests() when you like; submit() to finish."
        self._obs = self._observation(result, None, None)
        return self._obs, {"problem_id": self._task.problem_id, "tools": [t["function"]["name"] for t in self.tools]}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        logged = self.logger is not None and self.logger.wants(self._episode) and self._task is not None and not self._done
        before = dict(self.workspace) if logged else {}
        self._step_run, self._step_grades = None, []
        out = self._step(action)
        if logged:
            self._log(action, before, *out)
        return out

    def _step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise ResetNeeded("CodeAgent-v0: step() before reset()")
        if self._done:
            raise ResetNeeded("CodeAgent-v0: the episode is over (terminated or truncated); call reset()")
        self._calls += 1
        info: dict[str, Any] = {"tool": None, "tool_error": None, "budget": None, "sandbox_error": None}
        size = len(action) if isinstance(action, str) else len(json.dumps(action, default=str))
        if size > self.max_call_chars:
            return self._budget_end(info, "call_chars", f"the call has {size} characters, the budget {self.max_call_chars}")
        if self.episode_time_s is not None and time.monotonic() - self._started > self.episode_time_s:
            return self._budget_end(info, "episode_time", f"the episode ran past its {self.episode_time_s:g} s")
        reward, terminated, run, grade = 0.0, False, None, None
        try:
            name, args = parse_tool_call(action)
            info["tool"] = name
            self._last_call = f"{name}({', '.join(f'{k}={_short(v)}' for k, v in args.items())})"
            if name == "submit":
                grade = self._grade(hidden=True)
                if grade.reward is None:
                    return self._failed(info, grade)
                reward, terminated = grade.reward - self._bonus_paid, True
                result = f"submitted: {grade.breakdown.tier} (reward {grade.reward:g}); {grade.breakdown.explanation}"
            elif name == "run_tests":
                grade = self._grade(hidden=False)
                if grade.reward is None:
                    return self._failed(info, grade)
                self._last_tier = grade.reward
                passed = grade.breakdown.public_passed or 0
                if passed > self._best_passed:
                    reward = min(self.reward_config.process_bonus, self.reward_config.process_bonus_cap - self._bonus_paid)
                    self._bonus_paid += reward
                self._best_passed = max(self._best_passed, passed)
                result = _test_lines(grade)
            elif name == PYTHON_TOOL:
                result = self._python(args)
            elif name == "run":
                run, result = self._run(args)
                if run.sandbox_error is not None:
                    info["sandbox_error"] = run.sandbox_error
            else:
                result = self._file_tool(name, args)
        except ToolError as exc:
            info["tool_error"] = result = str(exc)
        if grade is not None:
            info["reward_breakdown"] = grade.breakdown.model_dump(exclude_none=True)
        truncated = False
        if not terminated and self._calls >= self.max_calls:  # the ladder holds at the end: main.py as submitted
            final = self._grade(hidden=True)
            if final.reward is None:
                return self._failed(info, final)
            reward += final.reward - self._bonus_paid
            truncated, info["budget"] = True, "tool_calls"
            info["reward_breakdown"] = final.breakdown.model_dump(exclude_none=True)
            result += f"\n(the {self.max_calls} tool calls are spent: {MAIN} was graded as submitted: {final.breakdown.tier})"
        reward = round(float(reward), 6)
        info["step_reward"] = reward
        self._done = terminated or truncated
        self._obs = self._observation(result, run, grade)
        return self._obs, reward, terminated, truncated, info

    def _failed(self, info: dict[str, Any], grade: Grade) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The sandbox (or the judge) failed: reward 0, truncated; drop the sample."""
        info.update(sandbox_error=grade.sandbox_error, judge_error=grade.judge_error, step_reward=0.0)
        self._done = True
        self._obs = self._observation(f"the sandbox failed (not the program's fault): {grade.sandbox_error or grade.judge_error}",
                                      None, None)  # fmt: skip
        return self._obs, 0.0, False, True, info

    def _budget_end(self, info: dict[str, Any], budget: str, why: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        cap = self.reward_config.budget_exhausted
        reward = round((cap if self._last_tier is None else min(cap, self._last_tier)) - self._bonus_paid, 6)
        info.update(budget=budget, step_reward=reward)
        self._done = True
        self._obs = self._observation(f"budget exhausted: {why}", None, None)
        return self._obs, reward, False, True, info

    # -- tools
    def _file_tool(self, name: str, args: dict[str, Any]) -> str:
        if name == "list_files":
            return "\n".join(f"{p} ({len(d)} bytes)" for p, d in sorted(self.workspace.items())) or "(no files)"
        path = check_path(_arg(args, name, "path"))
        if name == "read_file":
            if path not in self.workspace:
                raise ToolError(f"read_file: no file {path!r}; the files: {', '.join(sorted(self.workspace))}")
            text = self.workspace[path].decode("utf-8", "replace")
            return text if len(text) <= READ_CHARS else text[:READ_CHARS] + f"\n[... {len(text) - READ_CHARS} more characters]"
        if name == "write_file":
            self._store({**self.workspace, path: _arg(args, name, "content").encode("utf-8", "surrogatepass")}, name)
            return f"wrote {path} ({len(self.workspace[path])} bytes)"
        old, new = _arg(args, name, "old"), _arg(args, name, "new")
        if path not in self.workspace:
            raise ToolError(f"edit_file: no file {path!r}")
        text = self.workspace[path].decode("utf-8", "replace")
        n = text.count(old) if old else 0
        if n != 1:
            raise ToolError(f"edit_file: `old` must occur exactly once in {path}; it occurs {n} times")
        self._store({**self.workspace, path: text.replace(old, new, 1).encode("utf-8", "surrogatepass")}, name)
        return f"edited {path}"

    def _store(self, files: dict[str, bytes], what: str) -> None:
        """Make ``files`` the workspace if it is within the limits; ``ToolError`` naming the limit otherwise."""
        if len(files) > self.max_files:
            raise ToolError(f"{what}: the workspace would hold {len(files)} files, over its {self.max_files}")
        big = [p for p, d in files.items() if len(d) > self.max_file_bytes]
        if big:
            raise ToolError(f"{what}: {big[0]} would be {len(files[big[0]])} bytes, over the {self.max_file_bytes} a file may hold")
        total = sum(len(d) for d in files.values())
        if total > self.max_bytes:
            raise ToolError(f"{what}: the workspace would hold {total} bytes, over its {self.max_bytes}")
        dirs = {"/".join(p.split("/")[:k]) for p in files for k in range(1, p.count("/") + 1)}
        clash = sorted(dirs & set(files))
        if clash:
            raise ToolError(f"{what}: {clash[0]} would be both a file and a directory")
        self.workspace = files

    def _run(self, args: dict[str, Any]) -> tuple[ExecutionResult, str]:
        path, lang = self._program(args)
        stdin = _arg(args, "run", "stdin", "")
        assert self._task is not None
        if lang.name == "python":  # ``python FILE``: the file runs as itself, beside every other file
            code = f"import runpy, sys\nsys.argv = [{path!r}]\nrunpy.run_path({path!r}, run_name='__main__')\n"
            files, program_file = self.workspace, _SANDBOX_PROGRAM
        else:  # the file is the program (the jail names it as its language does), the rest beside it
            code = self.workspace[path].decode("utf-8", "replace")
            files, program_file = {p: d for p, d in self.workspace.items() if p != path}, lang.source
            if lang.source in files:
                raise ToolError(f"run: {lang.source} is where a {lang.title} program goes in the sandbox; "
                                f"rename that file to run {path}")  # fmt: skip
            if lang.compiled and any(p.split("/")[0] == OUTPUT_DIR for p in files):
                raise ToolError(f"run: {OUTPUT_DIR}/ is where the compiled {lang.title} program goes; rename that directory")
        limits = Limits(timeout_s=self.call_time_s, memory_mb=self._task.memory_mb, max_processes=RUN_PROCESSES,
                        max_disk_mb=max(16, 4 * self.max_bytes >> 20))  # fmt: skip
        try:
            request = RunRequest(code=code, stdin=stdin, limits=limits, files=files, fetch_files=(".",), language=lang.name,
                                 trace_id=f"{self._task.problem_id}/agent/{self._calls}")  # fmt: skip
            (res,) = self.executor.run_many([request])
            self._step_run = res
        except (TypeError, ValueError, LanguageUnavailableError) as exc:  # (stdin UTF-8 cannot encode; no toolchain)
            raise ToolError(f"run: {first_line(exc)}") from None
        if res.sandbox_error is not None:
            return res, f"run: the sandbox failed (not your program's fault): {res.sandbox_error}"
        lines = []
        if res.compile_status is not None and res.compile_status != "ok":
            lines.append(f"compile {'timed out' if res.compile_timeout_hit else 'failed'}:\n{res.compile_stderr[-READ_CHARS:]}")
        else:
            lines.append(f"exit code {res.exit_code}" + (f" (signal {res.signal_name})" if res.signal is not None else "")
                         + (" — timed out" if res.timeout_hit else "") + (" — out of memory" if res.oom else ""))  # fmt: skip
        if res.compile_status in (None, "ok"):
            # what the run left: not the program's own file in the jail, nor a compiled program's output
            left = {p: d for p, d in res.files.items()
                    if p != program_file and not (lang.compiled and p.split("/")[0] == OUTPUT_DIR)}  # fmt: skip
            if lang.name != "python":
                left[path] = self.workspace[path]
            try:
                if not res.files:  # (the jail's work dir is never empty: the program is in it)
                    raise ToolError("run: the work dir held more than 256 files or entries, or more bytes than it may")
                self._store(left, "run")
            except ToolError as exc:
                lines.append(f"{exc}: the run's changes to the workspace were dropped")
        lines.append(f"stdout:\n{res.stdout[-READ_CHARS:]}" if res.stdout else "stdout: (none)")
        if res.stderr:
            lines.append(f"stderr:\n{res.stderr[-READ_CHARS:]}")
        return res, "\n".join(lines)

    def _program(self, args: dict[str, Any]) -> tuple[str, Language]:
        """The file a ``run`` call runs and its language: ``path`` (the language by its extension)
        or ``command`` (``RUNTIME FILE``: ``python main.py``, ``node x.js``, ``g++ a.cpp``...)."""
        if "command" in args and "path" not in args:
            words = shlex.split(_arg(args, "run", "command"))
            if len(words) != 2:
                raise ToolError("run: a command is a runtime and a file of the workspace, such as `python test_public.py`")
            try:
                lang = resolve_language(words[0])
            except UnknownLanguageError as exc:
                raise ToolError(f"run: {exc}") from None
            path = check_path(words[1])
        else:
            path = check_path(_arg(args, "run", "path"))
            ext = "." + path.rsplit(".", 1)[-1] if "." in path.split("/")[-1] else ""
            found = [lang for lang in LANGUAGES.values() if ext in lang.extensions]
            if not found:
                known = ", ".join(e for lang in LANGUAGES.values() for e in lang.extensions)
                raise ToolError(f"run: {path} has no extension of a language here ({known})")
            lang = found[0]
        if path not in self.workspace:
            raise ToolError(f"run: no file {path!r}")
        return path, lang

    def _grade(self, *, hidden: bool) -> Grade:
        assert self._task is not None
        program = self.workspace.get(MAIN, b"").decode("utf-8", "replace")
        task = self._task.model_copy(update={"timeout_s": min(self._task.timeout_s, self.call_time_s)})
        grade = grade_many([(task, program)], sandbox=self.executor, config=self.reward_config, hidden=hidden,
                           trace_ids=[f"{self._task.problem_id}/agent/{self._calls}"])[0]  # fmt: skip
        self._step_grades.append((program, grade))
        return grade

    # -- observation
    def _observation(self, result: str, run: ExecutionResult | None, grade: Grade | None) -> dict[str, Any]:
        assert self._task is not None
        prev = self._obs or {}
        passed = prev.get("public_passed", np.array(0, dtype=np.int64))
        total = prev.get("public_total", np.array(0, dtype=np.int64))
        if grade is not None:
            passed = np.array(grade.breakdown.public_passed or 0, dtype=np.int64)
            total = np.array(grade.breakdown.public_total or 0, dtype=np.int64)
        return {
            "prompt": _clip(task_prompt(self._task)),
            "tool_result": _clip(result),
            "stdout": _clip(run.stdout if run is not None else grade.run.stdout if grade is not None else ""),
            "stderr": _clip(run.stderr if run is not None else grade.run.stderr if grade is not None else ""),
            "exit_code": np.array(max(-INT_BOUND, min(INT_BOUND, run.exit_code if run is not None and run.exit_code is not None else 0)),
                                  dtype=np.int64),
            "timeout": np.int64(bool(run is not None and run.timeout_hit)),
            "oom": np.int64(bool(run is not None and run.oom)),
            "public_passed": passed.copy(), "public_total": total.copy(),
            "calls": np.array(self._calls, dtype=np.int64),
            "files": np.array(len(self.workspace), dtype=np.int64),
        }  # fmt: skip

    def render(self) -> str | None:
        if self.render_mode is None or self._task is None:
            return None
        tree = "\n".join(f"  {p} ({len(d)} B)" for p, d in sorted(self.workspace.items()))
        result = str(self._obs.get("tool_result", ""))
        return (f"{self._task.problem_id}, call {self._calls}/{self.max_calls}\nworkspace:\n{tree}\n"
                f"last call: {self._last_call or '(none)'}\n{result[:2000]}\n")  # fmt: skip

    # -- trajectory log
    def _log(self, action: Any, before: dict[str, bytes], obs: dict[str, Any], reward: float, terminated: bool,
             truncated: bool, info: dict[str, Any]) -> None:  # fmt: skip
        """The step's record (see the module): everything but the action bounded by ``log_text_bytes``."""
        assert self.logger is not None and self._task is not None
        task, keep = self._task, self.logger.text_bytes
        try:
            name, args = parse_tool_call(action)
            call: dict[str, Any] | None = {"name": name, "arguments": {k: _clip_value(v, keep) for k, v in args.items()}}
        except ToolError:
            call = None
        run, grades = self._step_run, self._step_grades
        turn = self._calls - 1
        record: dict[str, Any] = {
            "env": AGENT_ENV, "trace_id": trace_id(task.problem_id, self._episode, turn), "episode": self._episode,
            "seed": self._seed, "sample": self._episode, "turn": turn, "problem_id": task.problem_id,
            "difficulty": task.difficulty, "task_fingerprint": task_fingerprint(task), "prompt": task_prompt(task),
            "action": action if isinstance(action, str) else json.dumps(action, default=str),
            "action_format": "text" if isinstance(action, str) else "json", "call": call, "tool_error": info.get("tool_error"),
            "observation": {k: clip_text(v, keep) if isinstance(v, str) else int(v) for k, v in obs.items() if k != "prompt"},
            "reward": reward, "terminated": terminated, "truncated": truncated, "budget": info.get("budget"),
            "sandbox_error": info.get("sandbox_error"), "judge_error": info.get("judge_error"),
            "reward_breakdown": info.get("reward_breakdown") or {}, "bonus_paid": round(self._bonus_paid, 6),
            "executions": [] if run is None else [_logged_run(run, keep)],
            "public_cases": [c.model_dump() for c in grades[-1][1].feedback] if grades else [], "hidden_cases": [],
            "graded_program": clip_text(grades[-1][0], DIFF_KEEP_FACTOR * keep) if grades else None,
            "execution_time_ms": run.execution_time_ms if run is not None else
                                 sum(g.run.execution_time_ms for _, g in grades) if grades else None,  # (None: nothing ran)
            "workspace": {"files": len(self.workspace), "bytes": sum(len(d) for d in self.workspace.values()),
                          "sha256": workspace_digest(self.workspace)},
            "workspace_diff": clip_text(workspace_diff(before, self.workspace), DIFF_KEEP_FACTOR * keep),
            "config": self.config.model_dump(mode="json"),
        }  # fmt: skip
        if self.config.tasks == INLINE:
            record["task"] = task.model_dump(mode="json")
        self.logger.write(record)

    def _python(self, args: dict[str, Any]) -> str:
        """The ``python`` tool: a cell of the episode's stateful session (``code_env.interpreter``:
        a fresh jail per cell, the session's earlier cells replayed), which ends with the episode."""
        if not self.interpreter:
            raise ToolError(f"unknown tool {PYTHON_TOOL!r}: this env has no interpreter (CodeAgent-v0(interpreter=True))")
        code = _arg(args, PYTHON_TOOL, "code")
        if self._session is None:
            from .interpreter import CodeInterpreter

            self._session = CodeInterpreter(self.executor, limits={"cell_timeout_s": self.call_time_s})
        cell = self._session.run(code)
        text: str = cell.text()
        return text

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_session"] = None  # (a copy starts its own session: the cells run are this process's)
        return state

    def _end_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def close(self) -> None:
        self._end_session()
        if self.logger is not None:
            self.logger.close()
        self.workspace = {}
        self._release_executor()
        super().close()


AGENT_ENV = "CodeAgent-v0"  # the ``env`` of this env's log records (CodeExec-v0's have none)
INLINE = "<inline>"  # ``AgentConfig.tasks`` of a list of tasks: each record then carries its task
DIFF_KEEP_FACTOR = 4  # a record keeps this many times ``log_text_bytes`` of its diff and its graded program
DIFF_MAX_BYTES = 64 << 10  # a file larger than this (before or after) is named in the diff, not diffed


class AgentConfig(BaseModel):
    """Every setting of a ``CodeAgentEnv`` but its objects (the task list, the executor, the
    render mode), validated. It is written into each log record, so that ``code-env replay`` can
    rebuild the env."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: str = Field("builtin", description=f"task set name or .jsonl path ({INLINE!r} for a list)")
    backend: str = "auto"
    reward: RewardConfig = Field(default_factory=RewardConfig)
    max_calls: int = Field(30, ge=1)
    max_call_chars: int = Field(100_000, ge=1)
    call_time_s: float = Field(10.0, gt=0, le=600)
    episode_time_s: float | None = Field(None, gt=0)
    max_files: int = Field(64, ge=4)
    max_bytes: int = Field(1 << 20, ge=4096)
    max_file_bytes: int = Field(256 << 10, ge=1024)
    log_dir: str | None = None
    log_every: int = Field(1, ge=1, description="log every N-th episode")
    log_max_bytes: int = Field(MAX_TOTAL_BYTES, ge=16 << 10, description="cap of the log directory's *.jsonl files, bytes")
    log_text_bytes: int = Field(TEXT_BYTES, ge=64, le=MAX_TEXT_CHARS, description="bytes kept of each long text in a record")
    interpreter: bool = Field(False, description="the python tool: a stateful code interpreter per episode")


def workspace_digest(files: Mapping[str, bytes]) -> str:
    """SHA-256 of a workspace: every path and its bytes, in order."""
    h = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        h.update(path.encode("utf-8", "surrogatepass") + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _is_binary(data: bytes) -> bool:
    if b"\0" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def workspace_diff(before: Mapping[str, bytes], after: Mapping[str, bytes], max_bytes: int = DIFF_MAX_BYTES) -> str:
    """A unified diff (``difflib``, ``a/PATH`` to ``b/PATH``, ``/dev/null`` for a file added or
    deleted) of every file that changed, in path order. A binary file (a NUL byte, or not UTF-8)
    or one over ``max_bytes`` is named with its sizes, not dumped."""
    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        a = "/dev/null" if old is None else f"a/{path}"
        b = "/dev/null" if new is None else f"b/{path}"
        sizes = f"{0 if old is None else len(old)} -> {0 if new is None else len(new)} bytes"
        if any(d is not None and _is_binary(d) for d in (old, new)):
            out.append(f"Binary files {a} and {b} differ ({sizes})\n")
            continue
        if any(d is not None and len(d) > max_bytes for d in (old, new)):
            out.append(f"Files {a} and {b} differ ({sizes}: too large to diff)\n")
            continue
        old_lines = [] if old is None else old.decode("utf-8").splitlines(keepends=True)
        new_lines = [] if new is None else new.decode("utf-8").splitlines(keepends=True)
        lines = list(difflib.unified_diff(old_lines, new_lines, fromfile=a, tofile=b))
        if not lines:  # (an empty file added or deleted)
            out.append(f"Files {a} and {b} differ ({sizes})\n")
        out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    return "".join(out)


def _clip_value(value: Any, keep: int) -> Any:
    """An argument of a call, for the log: a long text (or a long JSON value, as its text) clipped."""
    if isinstance(value, str):
        return clip_text(value, keep)
    text = json.dumps(value, default=str)
    return value if len(text) <= keep else clip_text(text, keep)


def _logged_run(run: ExecutionResult, keep: int) -> dict[str, Any]:
    """A run's result for the log: its fetched files are in the workspace's diff, its compiler's
    output clipped (its stdout and stderr are ``TrajectoryLogger``'s to clip)."""
    data = run.model_dump(exclude={"files"})
    data["fetched_files"] = len(run.files)
    for name in ("compile_stdout", "compile_stderr"):
        data[name] = clip_text(data[name], keep)
    return data


def first_line(exc: Exception) -> str:
    """An exception's message, pydantic's or not, in one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors())
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _short(value: Any, n: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return repr(text if len(text) <= n else text[:n] + "...")


def _test_lines(g: Grade) -> str:
    lines = [f"{g.breakdown.public_passed}/{g.breakdown.public_total} public tests passed ({g.breakdown.tier})"]
    for c in g.feedback:
        line = f"- test {c.index}: {c.status}; input {c.input}; expected {c.expected}; got {c.got}"
        lines.append(line + (f"; {c.error}" if c.error else ""))
    if g.run.stderr:
        lines.append(f"stderr: {g.run.stderr[-2000:]}")
    return "\n".join(lines)
