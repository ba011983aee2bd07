"""``CodeExecVectorEnv``: N ``CodeExec-v0`` environments stepped together, whose programs go to
one shared executor in one batch per round — so they run side by side on every core.

``gym.make_vec("CodeExec-v0", num_envs=8)`` builds it (the spec's ``vector_entry_point``, which
Gymnasium picks when no mode is named). It is a Gymnasium ``SyncVectorEnv``: same spaces, same
conventions, but **same-step autoreset by default**: a finished sub-env is reset within the step
that finished it (its last observation and info in ``info["final_obs"]``/``info["final_info"]``),
so every step runs every program it is given — with Gymnasium's next-step default, every other
step of a single-turn env would be a reset step that ignores its programs and rewards them 0.
``autoreset_mode`` takes the enum or its name in any spelling (``"same_step"``, ``"SameStep"``,
``"next_step"``, ``"disabled"``). Sub-env ``i`` is seeded ``seed + i`` by ``reset(seed=seed)``.
What differs is ``step``: every sub-env's step is a sequence of verification rounds
(``CodeExecEnv.step_rounds``); the rounds of all sub-envs are merged, so one ``run_many`` carries
every program of the batch. Naming a mode gives Gymnasium's own classes, which step sub-envs
without batching them: ``"sync"`` one after another in this process (each step's public and
hidden runs still side by side), ``"async"`` one process per sub-env, each with its own sandbox
(closed as the worker exits, so ``close()`` leaves no process behind). In every mode the
sandbox's workers start with the first program run (making an env starts none) and stop when
the last env using them closes (``grading.SharedSandbox``).
"""

from __future__ import annotations

from collections.abc import Generator
from copy import deepcopy
from functools import partial
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate

from registry.verify import Job, Runner, Verification, verify_many

from .env import CodeExecEnv, StepResult, default_executor
from .grading import SharedSandbox


def autoreset_mode_of(mode: str | AutoresetMode) -> AutoresetMode:
    """``AutoresetMode`` from the enum, its value (``"SameStep"``) or its name in any case, with
    ``_``, ``-`` or nothing between the words (``"same_step"``, ``"same-step"``, ``"SAME_STEP"``)."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        key = mode.replace("_", "").replace("-", "").lower()
        for m in AutoresetMode:
            if key in (m.value.lower(), m.name.replace("_", "").lower()):
                return m
    names = ", ".join(repr(m.name.lower()) for m in AutoresetMode)
    raise ValueError(f"autoreset_mode: expected one of {names} (or gymnasium.vector.AutoresetMode), got {mode!r}")


class CodeExecVectorEnv(SyncVectorEnv):
    """``num_envs`` sub-environments sharing one executor; see the module docstring."""

    def __init__(self, num_envs: int = 8, *, executor: Runner | str | None = None, copy: bool = True,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.SAME_STEP, **env_kwargs: Any) -> None:  # fmt: skip
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs: expected an int >= 1, got {num_envs!r}")
        autoreset_mode = autoreset_mode_of(autoreset_mode)
        env_kwargs.pop("max_episode_steps", None)  # episodes end by their own budgets (max_turns)
        self.executor: Runner = default_executor(env_kwargs.get("backend", "auto"), executor)
        make = partial(CodeExecEnv, executor=self.executor, **env_kwargs)
        super().__init__([make] * num_envs, copy=copy, autoreset_mode=autoreset_mode)

    def close_extras(self, **kwargs: Any) -> None:
        """The sub-envs, then this env's handle on the process-wide sandbox (``default_executor``):
        the last env's close stops its workers."""
        super().close_extras(**kwargs)
        executor = getattr(self, "executor", None)
        if isinstance(executor, SharedSandbox):
            executor.close()

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        acts = list(iterate(self.action_space, actions))
        if len(acts) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(acts)}")
        results: dict[int, StepResult] = {}
        rounds: dict[int, Generator[list[Job], list[Verification], StepResult]] = {}
        pending: dict[int, list[Job]] = {}
        reset_now: set[int] = set()
        for i, (env, action) in enumerate(zip(self.envs, acts, strict=True)):
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                reset_now.add(i)
                continue
            assert isinstance(env, CodeExecEnv)
            gen = env.step_rounds(action)
            try:
                pending[i] = next(gen)
                rounds[i] = gen
            except StopIteration as stop:  # decided without running anything (a budget)
                results[i] = stop.value
        while pending:  # one batch per round, every sub-env's jobs together
            order = list(pending)
            flat = [job for i in order for job in pending[i]]
            verdicts = verify_many(flat, self.executor)
            at = 0
            for i in order:
                mine = verdicts[at : at + len(pending[i])]
                at += len(pending[i])
                try:
                    pending[i] = rounds[i].send(mine)
                except StopIteration as stop:
                    results[i] = stop.value
                    del pending[i]
        infos: dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            if i in reset_now:
                self._env_obs[i], env_info = env.reset()
                self._rewards[i] = 0.0
                self._terminations[i] = self._truncations[i] = False
            else:
                obs, reward, term, trunc, env_info = results[i]
                self._env_obs[i] = obs  # type: ignore[call-overload]  # (upstream types it list[None])
                self._rewards[i] = reward
                self._terminations[i], self._truncations[i] = term, trunc
                if self.autoreset_mode == AutoresetMode.SAME_STEP and (term or trunc):
                    infos = self._add_info(infos, {"final_obs": obs, "final_info": env_info}, i)
                    self._env_obs[i], env_info = env.reset()
            infos = self._add_info(infos, env_info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )
