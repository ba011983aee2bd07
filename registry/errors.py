"""Errors of the task registry.

Hierarchy::

    RegistryError                       root
    ├── TaskFileError (ValueError)      a malformed task file: names the file, the line and the field
    │   └── TaskSetRefusedError         a task file whose verifiers failed validation on load: names
    │                                   each refused task and why (the test, what happened)
    ├── ValidationUnavailableError      the sandbox itself failed while validating a task file: no
    │                                   verdict on its tasks (nothing is cached; try again)
    ├── UnknownTaskSetError (KeyError)  a task-set name that does not exist: lists the known ones
    └── UnknownTaskError (KeyError)     a problem id that is not in the set ("did you mean"), or names none
"""

from __future__ import annotations


class RegistryError(Exception):
    """Root of the errors the registry raises on purpose."""


class TaskFileError(RegistryError, ValueError):
    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path, self.line, self.field = path, line, field
        where = path + (f":{line}" if line is not None else "")
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {message}")


class TaskSetRefusedError(TaskFileError):
    """``refused``: (problem id, reasons) of each refused task; ``total``: the tasks in the file."""

    SHOWN = 10  # tasks named in the message (all of them are in ``refused``)

    def __init__(self, path: str, refused: list[tuple[str, list[str]]], total: int) -> None:
        self.refused, self.total = refused, total
        lines = [f"{len(refused)} of {total} task(s) refused on load: a task is admitted when its reference "
                 "solution passes every public and hidden test twice with the same outcome, and it has a hidden test"]  # fmt: skip
        for problem_id, reasons in refused[: self.SHOWN]:
            lines.append(f"  - {problem_id}: {'; '.join(reasons)}")
        if len(refused) > self.SHOWN:
            lines.append(f"  ... and {len(refused) - self.SHOWN} more (`code-env tasks validate FILE` lists them all)")
        lines.append("fix the tasks, or load the file unvalidated: registry.load(path, validate=False), or $CODE_ENV_VALIDATE=0")
        super().__init__(path, None, None, "\n".join(lines))


class ValidationUnavailableError(RegistryError):
    """The sandbox failed (``sandbox_error``, or it could not run at all) while validating a task
    file, after retries: a failure of the machine, not a verdict on the tasks."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        shown = "; ".join(problems[:5]) + (f"; ... and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"{path}: cannot validate the task file: the sandbox failed ({shown}); this says nothing about "
                         "the tasks and nothing was cached: try again (`code-env info` checks the sandbox), or load "
                         "it unvalidated: registry.load(path, validate=False), or $CODE_ENV_VALIDATE=0")  # fmt: skip


class UnknownTaskSetError(RegistryError, KeyError):
    def __init__(self, name: str, known: list[str], suggestion: str | None = None) -> None:
        self.name, self.known = name, known
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(f"unknown task set {name!r} (known: {', '.join(known)}, or a path to a .jsonl file){hint}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnknownTaskError(RegistryError, KeyError):
    def __init__(self, problem_id: str, suggestion: str | None = None, reason: str | None = None) -> None:
        self.problem_id = problem_id
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(f"no task {problem_id!r}: {reason}" if reason else f"no task {problem_id!r} in this set{hint}")

    def __str__(self) -> str:
        return str(self.args[0])
