"""Graded samples per second through ``code_env.TRLReward``, the way GRPO calls it: one call with a
generation batch of 8 tasks × 8 candidates (64 completions), against ``code_env.grade`` called on
the same 64 programs one at a time, and against ``code_env.grade_many`` on the same 64 in one call
(the adapter's own cost: extraction, joining, look-up).

The candidates of a task are 8 *different* programs (so that judging identical programs once,
which ``grade_many`` does, earns nothing here): the reference solution as plain text, in a fenced
reply, in a chat message and with a comment, a syntax error, an empty reply, a constant answer and
a crash. Paired (``conftest.paired``): each round runs both sides back to back on the whole batch,
the order reversed every other round, on the same warm sandbox; the ratio is the median of the
per-round ratios of their times, and each side's CPU per sample is that of the whole process tree.
No assertion on speed: only that every side gives every sample the same reward.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import code_env
import registry
from registry import Task
from sandbox import Sandbox

from .conftest import Side, Target, paired, record_paired

CORES = os.cpu_count() or 1
TASKS, CANDIDATES = 8, 8
ROUNDS, WARMUP = 7, 1
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


def _compare(benchmark: Any, engine: str, trl: Callable[[], list[Any]], anchor: str, other: Callable[[], list[Any]],
             samples: int) -> None:  # fmt: skip
    """Alternating rounds of both sides on the whole batch; every round both give the same rewards."""

    def check(out: dict[str, object]) -> None:
        assert out[engine] == out[anchor]

    result = paired(benchmark, {anchor: Side(other, samples), engine: Side(trl, samples)}, rounds=ROUNDS,
                    warmup_rounds=WARMUP, check=check)  # fmt: skip
    record_paired(benchmark, result, title=f"{engine} against {anchor}", program=f"builtin ({TASKS} tasks × {CANDIDATES})",
                  mode=f"GRPO batch ({CORES} cores)", unit="samples",
                  targets=[Target(f"{engine}: time per sample ≤ +10 % over `{anchor}`", engine, "time", vs=anchor, op="<=", bound=1.1)])  # fmt: skip


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

    _compare(benchmark, f"TRLReward ({len(tasks)} completions a call)", trl, "code_env.grade (one at a time)",
             one_at_a_time, len(tasks))


def test_trl_reward_vs_grade_many(benchmark: Any, sb: Sandbox, batch: Batch) -> None:
    tasks, programs, _ = batch
    trl = _trl_side(sb, batch)

    def all_at_once() -> list[Any]:
        return [g.reward for g in code_env.grade_many(list(zip(tasks, programs, strict=True)), sandbox=sb)]

    _compare(benchmark, f"TRLReward ({len(tasks)} completions a call)", trl, f"code_env.grade_many ({len(tasks)} a call)",
             all_at_once, len(tasks))
