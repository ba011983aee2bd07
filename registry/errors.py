"""Errors of the task registry.

Hierarchy::

    RegistryError                       root
    ├── TaskFileError (ValueError)      a malformed task file: names the file, the line and the field
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
