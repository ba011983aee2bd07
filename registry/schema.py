"""What a task is: ``Task`` and ``TestCase`` (pydantic), ``Comparator`` (data, not code), and the
JSONL round trip whose errors name the file, the line and the field."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from .errors import TaskFileError

# The languages whose programs answer function tasks (``registry.verify.FUNCTION_DRIVERS``: a
# driver of each calls the program's function with the tests' arguments as JSON data).
FUNCTION_LANGUAGES = ("python", "javascript", "typescript", "cpp")

ComparatorKind = Literal["exact", "float", "unordered", "whitespace", "tokens"]


class Comparator(BaseModel):
    """How an output is compared with the expected one, in the trusted parent.

    ``exact``: equal after JSON normalisation (tuples are lists); ``float``: numbers within
    ``abs_tol`` or ``rel_tol`` (recursively through lists and dicts); ``unordered``: equal as
    multisets (top-level list); ``whitespace``: stdout equal after collapsing runs of whitespace and
    trimming the ends; ``tokens``: stdout equal token by token (numbers compared as floats within
    the tolerances).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ComparatorKind = "exact"
    abs_tol: float = Field(1e-9, ge=0)
    rel_tol: float = Field(1e-9, ge=0)


class TestCase(BaseModel):
    """One test. Function tests: ``args``/``kwargs`` and ``expected``; stdio tests: ``stdin`` and
    ``expected_stdout``. The expected side never enters the sandbox."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(frozen=True, extra="forbid")

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any = None
    stdin: str | None = None
    expected_stdout: str | None = None
    comparator: Comparator = Comparator()
    checker: str | None = Field(
        None,
        description="a special judge: a Python program run in its own sandbox run instead of the "
        "comparator; it reads {'cases': [...]} as JSON on stdin, each case {'args', 'kwargs', 'output'} "
        "(function tests: output is the returned value) or {'stdin', 'output'} (stdio tests: output is "
        "the program's stdout), and prints one line per case, 1 (accepted) or 0",
    )

    @property
    def is_stdio(self) -> bool:
        return self.stdin is not None or self.expected_stdout is not None

    def describe_input(self) -> str:
        if self.is_stdio:
            return repr(self.stdin)
        parts = [json.dumps(a) for a in self.args] + [f"{k}={json.dumps(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)


class Task(BaseModel):
    """A programming problem with its reference solution and its public and hidden tests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    problem_id: str = Field(min_length=1)
    prompt: str
    kind: Literal["function", "stdio"]
    entry_point: str | None = None
    starter_code: str = ""
    reference_solution: str
    public_tests: list[TestCase] = Field(min_length=1)
    hidden_tests: list[TestCase] = Field(default_factory=list)
    timeout_s: float = Field(2.0, gt=0, le=600)
    memory_mb: int = Field(256, ge=32, le=65536)
    difficulty: int = Field(1, ge=1, le=5)
    tags: list[str] = Field(default_factory=list)
    source: str = "unknown"
    solutions: dict[str, str] = Field(default_factory=dict, description="reference solutions in other languages than "
                                      "Python (a stdio task's), by sandbox.languages name: validated as the reference is")

    @model_serializer(mode="wrap")
    def _without_empty_solutions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A task without other languages' solutions dumps as before they existed (its file, its
        fingerprint in logs and recorded replies unchanged)."""
        out: dict[str, Any] = handler(self)
        if not self.solutions:
            out.pop("solutions", None)
        return out

    @model_validator(mode="after")
    def _consistent(self) -> Task:
        if self.kind == "function" and not self.entry_point:
            raise ValueError("a function task needs an entry_point")
        if self.entry_point is not None and not (self.entry_point.isidentifier() and self.entry_point.isascii()):
            raise ValueError(f"entry_point: {self.entry_point[:80]!r} is not a name (letters, digits and _, not first a "
                             "digit): the drivers call it by name in every language")  # fmt: skip
        if self.solutions:
            from sandbox.languages import UnknownLanguageError, resolve

            for name in self.solutions:
                try:
                    canonical = resolve(name).name
                except UnknownLanguageError as exc:
                    raise ValueError(f"solutions: {exc}") from None
                if canonical == "python":
                    raise ValueError(f"solutions: {name!r}: Python's is reference_solution")
                if canonical != name:
                    raise ValueError(f"solutions: {name!r}: use the language's name ({canonical!r})")
                if self.kind == "function" and name not in FUNCTION_LANGUAGES:
                    raise ValueError(f"solutions: {name!r}: a function task's tests call a driver, which exists for "
                                     f"{', '.join(FUNCTION_LANGUAGES)}")  # fmt: skip
        for where, cases in (("public_tests", self.public_tests), ("hidden_tests", self.hidden_tests)):
            for i, case in enumerate(cases):
                if self.kind == "stdio" and (case.stdin is None or case.expected_stdout is None):
                    raise ValueError(f"{where}[{i}]: a stdio test needs stdin and expected_stdout")
                if self.kind == "function" and case.is_stdio:
                    raise ValueError(f"{where}[{i}]: a function test has args/kwargs/expected, not stdin")
                if self.kind == "function" and not _json_ok(case.expected):
                    raise ValueError(f"{where}[{i}]: expected is not JSON-serialisable (or not finite)")
        return self


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


# ----------------------------------------------------------------------------- JSONL


def read_tasks(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file (one task per line; blank lines and ``#`` lines skipped)."""
    return parse_tasks(read_task_bytes(path), str(path))


def read_task_bytes(path: str | Path) -> bytes:
    """A task file's bytes, as they are (the loader hashes what it parses: ``parse_tasks``)."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise TaskFileError(str(p), None, None, "no such file") from None
    except OSError as exc:  # a directory, no permission...
        raise TaskFileError(str(p), None, None, exc.strerror or str(exc)) from None


def parse_tasks(data: bytes, path: str) -> list[Task]:
    """The tasks of a task file's bytes (``path`` names it in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(path, None, None, f"not UTF-8 text (byte offset {exc.start})") from None
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(path, lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(raw, dict):
            raise TaskFileError(path, lineno, None, f"expected a JSON object, got {type(raw).__name__}")
        try:
            task = Task.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"]) or None
            raise TaskFileError(path, lineno, field, err["msg"]) from None
        if task.problem_id in seen:
            raise TaskFileError(path, lineno, "problem_id", f"duplicate of line {seen[task.problem_id]}")
        seen[task.problem_id] = lineno
        tasks.append(task)
    return tasks


def write_tasks(tasks: Iterable[Task], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for t in tasks:
            fh.write(t.model_dump_json() + "\n")
