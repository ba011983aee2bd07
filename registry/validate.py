"""Admission of tasks: a task is admitted only if its reference solution passes all its tests in
the sandbox, twice, with the same outcome — the verifier is verified before it judges anyone."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from sandbox import Sandbox

from .schema import Task
from .verify import Verification, verify


class TaskReport(BaseModel):
    problem_id: str
    ok: bool
    problems: list[str]


def _summary(v: Verification) -> tuple[object, ...]:
    return (v.syntax_error, v.load_error, v.sandbox_error, tuple((c.index, c.status, c.got) for c in v.cases))


def validate_task(task: Task, sandbox: Sandbox) -> TaskReport:
    problems: list[str] = []
    runs = []
    for attempt in range(2):
        for which in ("public", "hidden"):
            v = verify(task, task.reference_solution, sandbox, which=which, trace_id=f"{task.problem_id}/validate/{attempt}")
            runs.append((which, v))
            if v.sandbox_error:
                problems.append(f"{which}: sandbox error: {v.sandbox_error}")
            elif v.syntax_error or v.load_error:
                problems.append(f"{which}: the reference does not load: {v.syntax_error or v.load_error}")
            else:
                bad = [c for c in v.cases if not c.passed]
                for c in bad[:3]:
                    problems.append(f"{which} test {c.index}: {c.status} ({c.error or 'wrong output'})")
    for which in ("public", "hidden"):
        a, b = [_summary(v) for w, v in runs if w == which]
        if a != b and not any("sandbox error" in p for p in problems):
            problems.append(f"{which}: the outcome differs between two runs of the reference (nondeterministic test?)")
    return TaskReport(problem_id=task.problem_id, ok=not problems, problems=sorted(set(problems)))


def validate(tasks: Iterable[Task], sandbox: Sandbox, *, progress: bool = False) -> list[TaskReport]:
    items = list(tasks)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="validate", unit="task")
    return [validate_task(t, sandbox) for t in items]
