"""Graded samples per second through ``code_env.TRLReward``, the way GRPO calls it: one call with a
generation batch of 8 tasks × 8 candidates (64 completions), against ``code_env.grade`` called on
the same 64 programs one at a time, and against ``code_env.grade_many`` on the same 64 in one call
(the adapter's own cost: extraction, joining, look-up).

The candidates of a task are 8 *different* programs (so that judging identical programs once,
which ``grade_many`` does, earns nothing here): the reference solution as plain text, in a fenced
reply, in a chat message and with a comment, a syntax error, an empty reply, a constant answer and
a crash. Each benchmark round runs both sides back to back on the whole batch, alternating which
goes first, on the same warm sandbox; the ratio is the median of the per-round ratios of their
times. No assertion on speed: only that every side gives every sample the same reward.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import code_env
import registry
from registry import Task
from sandbox import Sandbox

from .conftest import record_overhead

CORES = os.cpu_count() or 1
TASKS, CANDIDATES = 8, 8
ROUNDS, WARMUP = 5, 1
Batch = tuple[list[Task], list[str], list[Any]]  # tasks, programs, completions as TRL passes them


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many(["pass"] * 20)
        yield s


def _candidates(task: Task) -> list[tuple[str, Any]]:
    """(program, completion) pairs: 8 different programs, and the completion a model would give."""
    ref = task.reference_solution
    if task.kind == "function":
        constant = f"def {task.entry_point}(*args, **kwargs):\n    return 0\n"
        crash = f"def {task.entry_point}(*args, **kwargs):\n    raise ValueError('no')\n"
    else:
        constant, crash = "print(0)\n", "raise SystemExit(1)\n"
    fenced, chat, commented = ref + "# 2\n", ref + "# 3\n", ref + "# 4\n"
    return [
        (ref, ref),
        (fenced, f"Here is my solution.\n```python\n{fenced}```\nIt runs in linear time."),
        (chat, [{"role": "assistant", "content": f"```python\n{chat}```"}]),
        (commented, commented),
        ("def broken(:\n    return\n", "def broken(:\n    return\n"),
        ("", ""),
        (constant, f"```python\n{constant}```"),
        (crash, crash),
    ]


@pytest.fixture(scope="module")
def batch() -> Batch:
    every = registry.load("builtin")
    functions, stdio = [t for t in every if t.kind == "function"], [t for t in every if t.kind == "stdio"]
    tasks = functions[:: len(functions) // 6][:6] + stdio[:: len(stdio) // 2][:2]  # spread over the set
    assert len(tasks) == TASKS
    rows = [(t, program, completion) for t in tasks for program, completion in _candidates(t)]
    assert len(rows) == TASKS * CANDIDATES and len({(t.problem_id, p) for t, p, _ in rows}) == len(rows)
    return [t for t, _, _ in rows], [p for _, p, _ in rows], [c for _, _, c in rows]


def _paired(benchmark: Any, side_a: Callable[[], list[Any]], side_b: Callable[[], list[Any]]) -> tuple[list[float], list[float]]:
    """Rounds of both sides back to back, alternating which goes first; the seconds of each per
    round, warm-up rounds left out. Every round, both sides give the same rewards."""
    a_t: list[float] = []
    b_t: list[float] = []

    def pair() -> None:
        out = {}
        for side in (side_a, side_b) if len(a_t) % 2 == 0 else (side_b, side_a):
            t0 = time.perf_counter()
            out[side] = side()
            (a_t if side is side_a else b_t).append(time.perf_counter() - t0)
        assert out[side_a] == out[side_b]

    benchmark.pedantic(pair, rounds=ROUNDS, warmup_rounds=WARMUP)
    return a_t[WARMUP:] or a_t, b_t[WARMUP:] or b_t


def _trl_side(sb: Sandbox, batch: Batch) -> Callable[[], list[Any]]:
    tasks, _, completions = batch
    reward = code_env.TRLReward(list({t.problem_id: t for t in tasks}.values()), sandbox=sb)
    prompts = [t.prompt for t in tasks]
    ids = [t.problem_id for t in tasks]

    def trl() -> list[Any]:
        return reward(prompts=prompts, completions=completions, completion_ids=None, problem_id=ids)

    first = trl()
    assert first.count(1.0) == 4 * TASKS and -1.0 in first and None not in first
    return trl


def test_trl_reward_vs_grade_one_at_a_time(benchmark: Any, sb: Sandbox, batch: Batch) -> None:
    tasks, programs, _ = batch
    trl = _trl_side(sb, batch)

    def one_at_a_time() -> list[Any]:
        return [code_env.grade(t, p, sandbox=sb).reward for t, p in zip(tasks, programs, strict=True)]

    trl_t, grade_t = _paired(benchmark, trl, one_at_a_time)
    record_overhead(benchmark, engine=f"TRLReward ({len(tasks)} completions a call)", anchor="code_env.grade (one at a time)",
                    program=f"builtin ({TASKS} tasks × {CANDIDATES})", mode=f"GRPO batch ({CORES} cores)",
                    episodes=len(tasks), env_s=trl_t, anchor_s=grade_t)  # fmt: skip


def test_trl_reward_vs_grade_many(benchmark: Any, sb: Sandbox, batch: Batch) -> None:
    tasks, programs, _ = batch
    trl = _trl_side(sb, batch)

    def all_at_once() -> list[Any]:
        return [g.reward for g in code_env.grade_many(list(zip(tasks, programs, strict=True)), sandbox=sb)]

    trl_t, many_t = _paired(benchmark, trl, all_at_once)
    record_overhead(benchmark, engine=f"TRLReward ({len(tasks)} completions a call)", anchor=f"code_env.grade_many ({len(tasks)} a call)",
                    program=f"builtin ({TASKS} tasks × {CANDIDATES})", mode=f"GRPO batch ({CORES} cores)",
                    episodes=len(tasks), env_s=trl_t, anchor_s=many_t)  # fmt: skip
