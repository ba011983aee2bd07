"""Admission of tasks: a task is admitted only if its reference solution passes all its tests in
the sandbox, twice, with the same outcome — the verifier is verified before it judges anyone —
and so does each of its solutions in other languages (``Task.solutions``: the tests judge a C++
or Java program as they judge Python). A task admitted with a flaw that caps its reward (no
hidden test: its top tier is ``all_public``), or whose solution in a language this machine has
no toolchain for could not be run, carries a warning, not a rejection."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from .schema import Task
from .verify import Job, Runner, Verification, verify_many

NO_HIDDEN_TEST = ("no hidden test: its top tier is all_public (an answer copied from the prompt's examples "
                  "would earn all_tests otherwise); give it a second test to keep hidden")


class TaskReport(BaseModel):
    """``problems`` reject the task; ``warnings`` admit it, with what they say."""

    problem_id: str
    ok: bool
    problems: list[str]
    warnings: list[str] = Field(default_factory=list)
    languages: list[str] = Field(default_factory=lambda: ["python"], description="the solutions' languages that ran")


def warnings_of(task: Task) -> list[str]:
    """What admits a task but caps what it can teach (no I/O: ``tasks list`` shows them too)."""
    return [] if task.hidden_tests else [NO_HIDDEN_TEST]


def _summary(v: Verification) -> tuple[object, ...]:
    return (v.syntax_error, v.load_error, v.sandbox_error, tuple((c.index, c.status, c.got) for c in v.cases))


def _report(task: Task, runs: list[tuple[str, Verification]], language: str = "python") -> TaskReport:
    problems: list[str] = []
    for which, v in runs:
        which = which if language == "python" else f"{language} {which}"
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
            label = which if language == "python" else f"{language} {which}"
            problems.append(f"{label}: the outcome differs between two runs of the reference (nondeterministic test?)")
    return TaskReport(problem_id=task.problem_id, ok=not problems, problems=sorted(set(problems)), warnings=warnings_of(task))


def runnable(sandbox: Runner, language: str) -> bool:
    """Does ``sandbox`` run ``language`` here (its toolchain found, its backend able)? A runner
    that is not a local ``Sandbox`` (Ray, Redis) is trusted to: its nodes say otherwise per run."""
    from sandbox import LanguageUnavailableError, Sandbox

    if not isinstance(sandbox, Sandbox):
        return True
    try:
        sandbox.check_language(language)
    except LanguageUnavailableError:
        return False
    return True


def validate(tasks: Iterable[Task], sandbox: Runner, *, progress: bool = False, batch: int = 16) -> list[TaskReport]:
    """Every reference (and every solution in another language) twice against its public and
    hidden tests, ``batch`` tasks per ``run_many``."""
    items = list(tasks)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="validate", unit="task", disable=None)  # a bar on a terminal only
    reports: list[TaskReport] = []
    groups: tuple[Literal["public", "hidden"], ...] = ("public", "hidden")
    order = [(attempt, which) for attempt in range(2) for which in groups]
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        jobs = [Job(t, t.reference_solution, which, f"{t.problem_id}/validate/{attempt}")
                for t in chunk for attempt, which in order]  # fmt: skip
        # the solutions in other languages, where this sandbox runs the language
        others = [(t, lang, code) for t in chunk for lang, code in sorted(t.solutions.items()) if runnable(sandbox, lang)]
        jobs += [Job(t, code, which, f"{t.problem_id}/validate/{lang}/{attempt}", language=lang)
                 for t, lang, code in others for attempt, which in order]  # fmt: skip
        results = verify_many(jobs, sandbox)
        for n, task in enumerate(chunk):
            mine = results[n * len(order) : (n + 1) * len(order)]
            report = _report(task, [(which, v) for (_, which), v in zip(order, mine, strict=True)])
            for m, (t, lang, _) in enumerate(others):
                if t is task:
                    at = (len(chunk) + m) * len(order)
                    extra = _report(task, [(w, v) for (_, w), v in zip(order, results[at : at + len(order)], strict=True)], lang)
                    report.problems = sorted(set(report.problems + extra.problems))
            report.languages += [lang for t, lang, _ in others if t is task]
            missing = [lang for lang in sorted(task.solutions) if not runnable(sandbox, lang)]
            if missing:
                report.warnings.append(f"not validated here: the {', '.join(missing)} solution(s) (no toolchain the "
                                       "sandbox runs on this machine: `code-env info` lists them)")  # fmt: skip
            report.ok = not report.problems
            reports.append(report)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return reports
