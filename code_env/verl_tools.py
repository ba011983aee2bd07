"""verl's multi-turn tools: ``CodeAgent-v0``'s tools and the stateful interpreter as ``BaseTool``
classes that verl's tool agent loop loads by name from its tool config file::

    # tools.yaml (code_env.verl.tool_config writes one)
    tools:
      - class_name: code_env.verl_tools.CodeAgentTool
        config: {type: native, tool: read_file, tasks: builtin}
      - class_name: code_env.verl_tools.CodeAgentTool
        config: {type: native, tool: submit, tasks: builtin}
      ...
      - class_name: code_env.verl_tools.CodeInterpreterTool     # the interpreter alone (tool-integrated reasoning)
        config: {type: native}

    actor_rollout_ref.rollout.multi_turn.enable=True
    actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml
    data.return_raw_chat=True                                   # rows from code_env.verl.agent_rows (agent_name tool_agent)
    reward.custom_reward_function.path=pkg://code_env
    reward.custom_reward_function.name=acompute_score

This module needs verl (``verl.tools.base_tool``); ``code_env.verl`` (the reward functions, the
rows and the tool config) does not.

**The episode.** verl 0.9's agent loop makes a tool instance for every call (``create``,
``execute``, ``release``) and hands ``execute`` the trajectory's ``agent_data``: the episode — one
``CodeAgentEnv`` and its workspace — belongs to that trajectory (held on its ``agent_data``; every
``CodeAgentTool`` of the same configuration shares it, so ``write_file`` then ``run_tests`` see
one workspace), and two trajectories never share one. A caller that passes no ``agent_data`` but
keeps one ``instance_id`` for a trajectory (verl's older SGLang rollout: ``create(request_id)``
per tool, ``release`` at the end) gets the episode of that id, closed by ``release``. The task is
``create_kwargs["problem_id"]`` (the row's ``extra_info.tools_kwargs``: ``agent_rows`` fills it
for every tool). Calls of one trajectory that verl runs in parallel are stepped one at a time.

**Rewards.** ``execute`` returns the env's step reward (the capped process bonus of
``run_tests``, an advance on the final tier; ``submit``'s tier less the advances) as the tool
reward verl records, and writes the episode's state into ``agent_data.extra_fields["code_env"]``,
which verl hands the reward function in ``extra_info``: ``code_env.compute_score`` (and
``acompute_score``, ``compute_score_batch``) then scores the episode, not the response's text: an
episode that ended (``submit``, or a budget of the env) scores its return, the sum of its
rewards; one the model left without submitting (it stopped calling tools, or verl's turn limits)
has its ``main.py`` graded as submitted, as ``CodeAgent-v0`` does when its calls run out. Hidden
tests and their expected values never leave the grader: the state carries the task's id, the
workspace's ``main.py`` and the rewards.

``config`` keys (beside verl's ``type: native``): ``tool`` (which of the env's tools; default the
schema's name), ``tasks`` (a set name or ``.jsonl``; default ``builtin``), ``backend``
(``auto``), ``reward`` (a mapping of ``RewardConfig`` fields or a reward file), ``interpreter``
(the ``python`` tool), and any ``CodeAgent-v0`` argument (``max_calls``, ``max_call_chars``,
``call_time_s``, ``episode_time_s``, ``max_files``, ``max_bytes``, ``max_file_bytes``). Tools of a
trajectory share its episode when these agree (``tool`` aside). ``tool_schema`` may be left out:
it is the env's own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from typing import Any
from uuid import uuid4

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ModuleNotFoundError as exc:  # pragma: no cover - only without verl
    if (exc.name or "").split(".")[0] != "verl":
        raise
    raise ModuleNotFoundError("code_env.verl_tools are verl's tool classes: it needs verl (pip install verl)",
                              name="verl") from exc  # fmt: skip

from .adapters import load_tasks, resolve_task
from .agent import MAIN, PYTHON_TOOL, TOOLS, CodeAgentEnv
from .interpreter import TOOL as PYTHON_SCHEMA
from .interpreter import CodeInterpreter

STATE_KEY = "code_env"  # agent_data.extra_fields' key of the episode's state (code_env.verl reads it)
_HELD = "_code_env_episodes"  # agent_data's attribute holding its episodes, by configuration
_ENV_KEYS = frozenset({"tasks", "backend", "reward", "interpreter", "max_calls", "max_call_chars", "call_time_s",
                       "episode_time_s", "max_files", "max_bytes", "max_file_bytes"})  # fmt: skip


# a caller without agent_data: the episode of an instance id, shared by the tools of one configuration
_BY_INSTANCE: dict[tuple[str, str], _Episode] = {}
_LOCK = threading.Lock()


class _Episode:
    """One trajectory's env, stepped by one call at a time."""

    def __init__(self, env: CodeAgentEnv, problem_id: str, tasks: str) -> None:
        self.env, self.problem_id, self.tasks = env, problem_id, tasks
        self.lock = threading.Lock()
        self.rewards: list[float] = []
        self.ended: str | None = None
        self.breakdown: dict[str, Any] | None = None
        self.sandbox_error: str | None = None
        self.final: dict[str, Any] | None = None  # the state at the episode's end

    def step(self, name: str, args: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
        with self.lock:
            if self.ended is not None:
                return f"{name}: the episode is over ({self.ended}); no tool can change it any more", 0.0, {"ended": self.ended}
            obs, reward, terminated, truncated, info = self.env.step({"name": name, "arguments": args})
            self.rewards.append(float(reward))
            if terminated:
                self.ended = "submit"
            elif truncated:  # a budget of the env, or the sandbox failed (not the program's fault)
                self.ended = info.get("budget") or "sandbox_error"
                self.sandbox_error = None if info.get("budget") else str(info.get("sandbox_error") or info.get("judge_error"))
            if self.ended in ("submit", "tool_calls"):  # main.py graded with the hidden tests: the final breakdown
                self.breakdown = info.get("reward_breakdown")
            if self.ended is not None:
                self.final = self._state()
            metrics = {k: info.get(k) for k in ("tool", "tool_error", "budget", "sandbox_error")}
            metrics["calls"] = int(obs["calls"])
            return str(obs["tool_result"]), float(reward), metrics

    def state(self) -> dict[str, Any]:
        """What the reward function needs (``code_env.verl``): the task, the graded file, the
        rewards, how it ended and its final breakdown; never a hidden test. Fixed at the end."""
        with self.lock:
            return dict(self.final) if self.final is not None else self._state()

    def _state(self) -> dict[str, Any]:
        main = self.env.workspace.get(MAIN, b"")
        return {"problem_id": self.problem_id, "tasks": self.tasks, "main_py": main.decode("utf-8", "replace"),
                "rewards": list(self.rewards), "return": round(sum(self.rewards), 6), "ended": self.ended,
                "breakdown": self.breakdown, "sandbox_error": self.sandbox_error,
                "calls": int(self.env._calls), "reward_config": self.env.reward_config.model_dump(mode="json")}  # fmt: skip

    def close(self) -> None:
        with self.lock:
            self.env.close()


class CodeAgentTool(BaseTool):
    """One of ``CodeAgent-v0``'s tools for verl's tool agent loop (see the module)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        config = dict(config or {})
        name = config.get("tool") or (tool_schema.function.name if tool_schema is not None else None)
        own = {t["function"]["name"]: t for t in [*TOOLS, PYTHON_SCHEMA]}
        if name not in own:
            raise ValueError(f"code_env.verl_tools.CodeAgentTool: config.tool: expected one of {sorted(own)}, got {name!r}")
        if name == PYTHON_TOOL:
            config.setdefault("interpreter", True)
        if tool_schema is None:
            tool_schema = OpenAIFunctionToolSchema.model_validate(own[name])
        elif tool_schema.function.name != name:
            raise ValueError(f"code_env.verl_tools.CodeAgentTool: the tool_schema names {tool_schema.function.name!r} "
                             f"but config.tool is {name!r}")  # fmt: skip
        unknown = sorted(set(config) - _ENV_KEYS - {"type", "tool"})
        if unknown:
            raise ValueError(f"code_env.verl_tools.CodeAgentTool: unknown config keys {unknown}; expected any of "
                             f"{sorted(_ENV_KEYS | {'type', 'tool'})}")  # fmt: skip
        self.tool: str = str(name)
        self.env_config = {k: config[k] for k in sorted(_ENV_KEYS & set(config))}
        self.tasks_name = str(self.env_config.pop("tasks", "builtin"))
        self.backend = str(self.env_config.pop("backend", "auto"))
        self.reward = self.env_config.pop("reward", None)
        self.key = json.dumps([self.tasks_name, self.backend, self.reward, self.env_config], sort_keys=True, default=str)
        self.tasks = load_tasks(self.tasks_name)  # once per tool; every episode shares the list
        # a check of the env's arguments now (a typo fails at load, not at the first call)
        CodeAgentEnv(self.tasks, backend=self.backend, reward=self.reward, **self.env_config).close()
        self._created: dict[str, dict[str, Any]] = {}
        super().__init__(config, tool_schema)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        create_kwargs = kwargs.get("create_kwargs", kwargs)
        self._created[instance_id] = dict(create_kwargs or {})
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        if not isinstance(parameters, dict):
            return ToolResponse(text=f"{self.tool}: the arguments must be a JSON object, got {type(parameters).__name__}"), 0.0, {}
        agent_data = kwargs.get("agent_data")
        episode = self._episode(instance_id, agent_data)
        text, reward, metrics = await asyncio.to_thread(episode.step, self.tool, dict(parameters))
        fields = getattr(agent_data, "extra_fields", None)
        if isinstance(fields, dict):
            fields[STATE_KEY] = episode.state()
        if episode.ended is not None and agent_data is not None:
            episode.close()  # (its state stays in extra_fields; the env's files go now)
        return ToolResponse(text=text), reward, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The episode's return so far (the sum of its rewards)."""
        with _LOCK:
            episode = _BY_INSTANCE.get((self.key, instance_id))
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            episode = getattr(agent_data, _HELD, {}).get(self.key)
        return 0.0 if episode is None else round(sum(episode.rewards), 6)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._created.pop(instance_id, None)
        with _LOCK:
            episode = _BY_INSTANCE.pop((self.key, instance_id), None)
        if episode is not None:
            episode.close()

    def _episode(self, instance_id: str, agent_data: Any) -> _Episode:
        if agent_data is not None:
            held = agent_data.__dict__.setdefault(_HELD, {})
            if self.key not in held:
                held[self.key] = episode = self._start(instance_id)
                weakref.finalize(agent_data, episode.close)
            return held[self.key]
        with _LOCK:
            if (self.key, instance_id) not in _BY_INSTANCE:
                _BY_INSTANCE[(self.key, instance_id)] = self._start(instance_id)
            return _BY_INSTANCE[(self.key, instance_id)]

    def _start(self, instance_id: str) -> _Episode:
        create_kwargs = self._created.get(instance_id, {})
        problem_id = create_kwargs.get("problem_id")
        if problem_id is None:
            raise ValueError(f"{self.tool}: no problem_id in the tool's create_kwargs (the row's extra_info.tools_kwargs."
                             f"{self.tool}.create_kwargs; code_env.verl.agent_rows fills it)")  # fmt: skip
        task = resolve_task(problem_id, self.tasks, what="problem_id")
        env = CodeAgentEnv([task], backend=self.backend, reward=self.reward, **self.env_config)
        env.reset(options={"problem_id": task.problem_id})
        return _Episode(env, task.problem_id, self.tasks_name)


class CodeInterpreterTool(BaseTool):
    """The stateful code interpreter alone (``code_env.interpreter``), for tool-integrated
    reasoning: a ``python`` tool whose session — its variables, functions, imports and files —
    lives through the trajectory (held on verl's ``agent_data``, as ``CodeAgentTool``'s episode;
    without one, through an instance id until ``release``) and ends with it. Reward 0: the
    trajectory's reward is the task's own. ``config``: ``backend`` (``auto``) and ``limits`` (the
    fields of ``code_env.interpreter.InterpreterLimits``)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        config = dict(config or {})
        unknown = sorted(set(config) - {"type", "backend", "limits"})
        if unknown:
            raise ValueError(f"code_env.verl_tools.CodeInterpreterTool: unknown config keys {unknown}; expected any of "
                             "['backend', 'limits', 'type']")  # fmt: skip
        self.backend = str(config.get("backend", "auto"))
        self.limits = config.get("limits")
        CodeInterpreter(backend=self.backend, limits=self.limits).close()  # (bad limits fail at load)
        self._by_instance: dict[str, CodeInterpreter] = {}
        self._lock = threading.Lock()
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(PYTHON_SCHEMA))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str):
            return ToolResponse(text=f"{self.name}: expected the argument 'code' (a string)"), 0.0, {}
        session = self._session(instance_id, kwargs.get("agent_data"))
        cell = await asyncio.to_thread(session.run, code)
        return ToolResponse(text=cell.text()), 0.0, {"status": cell.status, "cell": cell.cell}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        with self._lock:
            session = self._by_instance.pop(instance_id, None)
        if session is not None:
            session.close()

    def _session(self, instance_id: str, agent_data: Any) -> CodeInterpreter:
        with self._lock:
            if agent_data is not None:
                held = agent_data.__dict__.setdefault(_HELD, {})
                key = f"interpreter:{self.name}"
                if key not in held:
                    held[key] = session = CodeInterpreter(backend=self.backend, limits=self.limits)
                    weakref.finalize(agent_data, session.close)
                return held[key]
            if instance_id not in self._by_instance:
                self._by_instance[instance_id] = CodeInterpreter(backend=self.backend, limits=self.limits)
            return self._by_instance[instance_id]
