"""Admission of tasks: a task is admitted only if its reference solution passes all its tests in
the sandbox, twice, with the same outcome — the verifier is verified before it judges anyone —
and so does each of its solutions in other languages (``Task.solutions``: the tests judge a C++
or Java program as they judge Python). A task admitted with a flaw that caps its reward (no
hidden test: its top tier is ``all_public``), or whose solution in a language this machine has
no toolchain for could not be run, carries a warning, not a rejection (``code-env tasks validate``).

On load (``admit``): ``registry.load`` of a task file validates it before anyone trains on it,
once per content: an admission is cached by the file's sha256 in ``cache_dir()``. There a task
without a hidden test is refused too; the shipped sets are trusted (the test suite validates
them) and loaded as they are."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .errors import TaskSetRefusedError, ValidationUnavailableError
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
    sandbox_error: bool = Field(False, description="a run failed in the sandbox itself: no verdict on the task")


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
    return TaskReport(problem_id=task.problem_id, ok=not problems, problems=sorted(set(problems)), warnings=warnings_of(task),
                      sandbox_error=any(v.sandbox_error for _, v in runs))  # fmt: skip


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
                    report.sandbox_error = report.sandbox_error or extra.sandbox_error
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


# ----------------------------------------------------------------------------- on load

VALIDATE_ENV = "CODE_ENV_VALIDATE"  # 0 (false, no, off): load task files unvalidated
CACHE_ENV = "CODE_ENV_CACHE_DIR"
VALIDATOR_VERSION = 1  # of what an admission means: bump it, and every file is validated again
SANDBOX_RETRIES = 2  # validations again of the tasks a failure of the sandbox left undecided
_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def validate_on_load(validate: bool | None = None) -> bool:
    """Whether ``registry.load`` validates a task file: ``validate`` when it is given, else
    ``$CODE_ENV_VALIDATE`` (unset or ``1``: yes; ``0``, ``false``, ``no``, ``off``: no)."""
    if validate is not None:
        if not isinstance(validate, bool):
            raise TypeError(f"validate: expected True, False or None, got {validate!r}")
        return validate
    raw = os.environ.get(VALIDATE_ENV, "")
    if raw.strip().lower() in _ON:
        return True
    if raw.strip().lower() in _OFF:
        return False
    raise ValueError(f"${VALIDATE_ENV}: expected 1 or 0 (or true/false, yes/no, on/off), got {raw!r}")


def cache_dir() -> Path:
    """code-env's cache directory: ``$CODE_ENV_CACHE_DIR``, else ``$XDG_CACHE_HOME/code-env``, else
    ``~/.cache/code-env``: the user's, never inside the installed package or a checkout."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # a relative one is to be ignored (XDG spec)
    return base / "code-env"


class Admission(BaseModel):
    """What the cache keeps of an admitted task file (``validated/<sha256>.json``): enough to
    trust the file again without running it, and what its validation said."""

    sha256: str = Field(description="of the file's bytes")
    validator: int = Field(VALIDATOR_VERSION, description="VALIDATOR_VERSION of the validation")
    tasks: int
    languages: dict[str, int] = Field(default_factory=dict, description="solutions run, by language")
    warnings: dict[str, list[str]] = Field(default_factory=dict, description="by problem id: what admitted it with a flaw")


def admission_path(sha256: str) -> Path:
    return cache_dir() / "validated" / f"{sha256}.json"


def cached_admission(sha256: str) -> Admission | None:
    """The cached admission of the content with this hash; None when there is none, or none
    usable (unreadable, of another validator version): the content is then validated again."""
    try:
        record = Admission.model_validate_json(admission_path(sha256).read_bytes())
    except (OSError, ValueError):  # (pydantic's ValidationError is a ValueError)
        return None
    return record if record.sha256 == sha256 and record.validator == VALIDATOR_VERSION else None


def admit(tasks: Sequence[Task], *, sha256: str, source: str, sandbox: Runner | None = None) -> Admission:
    """Admit the tasks of ``source`` (a task file, whose bytes hash to ``sha256``), from the cache
    when it holds their admission, else by validating them in the sandbox: each reference solution
    passes every public and hidden test twice with the same outcome, and each task has a hidden
    test. ``TaskSetRefusedError`` names every refused task and why; only an admission is cached (a
    refusal is made again on the next load: it may be a timeout of a busy machine, and the file will
    change anyway). ``sandbox``: the runner (default: a ``sandbox.Sandbox`` of the default backend,
    for this validation only). A failure of the sandbox is no verdict: the tasks it hit are
    validated again (``SANDBOX_RETRIES``), then ``ValidationUnavailableError``, nothing cached."""
    hit = cached_admission(sha256)
    if hit is not None:
        return hit
    reports = _validated(list(tasks), source, sandbox)
    refused = [(r.problem_id, r.problems + [w for w in r.warnings if w == NO_HIDDEN_TEST])
               for r in reports if not r.ok or NO_HIDDEN_TEST in r.warnings]  # fmt: skip
    if refused:
        raise TaskSetRefusedError(source, refused, len(reports))
    languages: dict[str, int] = {}
    for r in reports:
        for lang in r.languages:
            languages[lang] = languages.get(lang, 0) + 1
    record = Admission(sha256=sha256, tasks=len(reports), languages=languages,
                       warnings={r.problem_id: r.warnings for r in reports if r.warnings})  # fmt: skip
    _store(record, source)
    return record


def _validated(tasks: list[Task], source: str, sandbox: Runner | None) -> list[TaskReport]:
    from sandbox import Sandbox, SandboxError

    try:
        if sandbox is not None:
            return _retrying(tasks, source, sandbox)
        with Sandbox("auto") as sb:
            return _retrying(tasks, source, sb)
    except SandboxError as exc:  # it could not start, or stopped: no verdict either
        raise ValidationUnavailableError(source, [f"{type(exc).__name__}: {exc}"]) from exc


def _retrying(tasks: list[Task], source: str, runner: Runner) -> list[TaskReport]:
    reports = validate(tasks, runner, progress=True)  # (a bar on a terminal only: a big file takes a while)
    for _ in range(SANDBOX_RETRIES):
        again = [n for n, r in enumerate(reports) if r.sandbox_error]
        if not again:
            break
        for n, r in zip(again, validate([tasks[n] for n in again], runner), strict=True):
            reports[n] = r
    failed = [r for r in reports if r.sandbox_error]
    if failed:
        raise ValidationUnavailableError(source, [f"{r.problem_id}: {p}" for r in failed for p in r.problems if "sandbox error" in p])
    return reports


def _store(record: Admission, source: str) -> None:
    """Write the record whole or not at all (a reader never sees half of it); a cache that cannot
    be written costs a validation on every load, with a warning that says so, never the load."""
    path = admission_path(record.sha256)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(record.model_dump_json(indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        warnings.warn(f"cannot cache the validation of {source} in {path.parent} ({exc.strerror or exc}): it is validated "
                      f"again on every load; ${CACHE_ENV} names another directory", RuntimeWarning, stacklevel=4)  # fmt: skip
