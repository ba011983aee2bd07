"""Seeded procedural task families: ``registry.load("synthetic:<family>", n=..., seed=...)``.

* ``arith``: write ``f(x)`` from input/output examples; the hidden function is an integer
  expression over ``x`` whose depth is the difficulty (small enough for a from-scratch policy);
* ``list``: a pipeline of list operations (map, filter, sort, reverse, take) of length = difficulty;
* ``string``: a pipeline of string operations of length = difficulty.

Same family, ``n``, ``seed`` and ``difficulty``: the same tasks. Expected values come from the
generated reference, evaluated here: it is our own code, built from a fixed grammar.

Task ids say how to make the task again: ``synthetic:<family>/s<seed>/d<difficulty>/<index>``
(``d1-5`` when the difficulty runs 1-5 in turn), e.g. ``synthetic:arith/s0/d3/5`` is task 5 of
``registry.load("synthetic:arith", seed=0, difficulty=3)``, whatever ``n`` (a longer set begins
with the same tasks). ``task_by_id`` regenerates any such task wherever it is looked up.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .errors import UnknownTaskError
from .schema import Task, TestCase
from .trivial import choose_public

FAMILIES = ("arith", "list", "string")
MAX_TASKS = 100_000
CACHED_TASKS = 20_000  # per (family, seed, difficulty): longer sets are generated afresh, not kept
_ID = re.compile(r"synthetic:(?P<family>[a-z]+)/s(?P<seed>-?[0-9]+)/d(?P<difficulty>[1-5]|1-5)/(?P<index>[0-9]+)")


def _arith_expr(rng: random.Random, depth: int) -> str:
    if depth <= 0:
        return rng.choice(["x", "x", str(rng.randint(1, 9))])
    op = rng.choice(["+", "-", "*"])
    left = _arith_expr(rng, depth - 1)
    right = _arith_expr(rng, rng.randint(0, depth - 1))
    return f"({left} {op} {right})"


def _arith(rng: random.Random, i: int, difficulty: int) -> dict[str, Any]:
    expr = _arith_expr(rng, difficulty)
    if "x" not in expr:
        expr = f"({expr} + x)"
    xs = rng.sample(range(-20, 21), 12)
    return {
        "entry_point": "f",
        "reference": f"def f(x):\n    return {expr}\n",
        "describe": "Write `f(x: int) -> int` matching these examples:",
        "public": [[x] for x in xs[:4]],
        "hidden": [[x] for x in xs[4:]],
    }


_LIST_OPS: list[tuple[str, str]] = [
    ("double every element", "xs = [x * 2 for x in xs]"),
    ("add 3 to every element", "xs = [x + 3 for x in xs]"),
    ("square every element", "xs = [x * x for x in xs]"),
    ("keep the even elements", "xs = [x for x in xs if x % 2 == 0]"),
    ("keep the positive elements", "xs = [x for x in xs if x > 0]"),
    ("sort ascending", "xs = sorted(xs)"),
    ("reverse the order", "xs = xs[::-1]"),
    ("keep the first three elements", "xs = xs[:3]"),
    ("drop duplicates, keeping first occurrences", "xs = list(dict.fromkeys(xs))"),
]

_STRING_OPS: list[tuple[str, str]] = [
    ("make it upper case", "s = s.upper()"),
    ("make it lower case", "s = s.lower()"),
    ("reverse it", "s = s[::-1]"),
    ("strip surrounding spaces", "s = s.strip()"),
    ("replace every 'a' with '4'", "s = s.replace('a', '4')"),
    ("remove the vowels", "s = ''.join(c for c in s if c.lower() not in 'aeiou')"),
    ("double every character", "s = ''.join(c * 2 for c in s)"),
    ("keep the first five characters", "s = s[:5]"),
]


def _pipeline(rng: random.Random, ops: list[tuple[str, str]], difficulty: int, var: str, name: str,
              inputs: list[Any], kind: str) -> dict[str, Any]:  # fmt: skip
    chosen = [rng.choice(ops) for _ in range(difficulty)]
    body = "".join(f"    {code}\n" for _, code in chosen)
    steps = "; then ".join(desc for desc, _ in chosen)
    return {
        "entry_point": name,
        "reference": f"def {name}({var}):\n{body}    return {var}\n",
        "describe": f"Write `{name}({var}: {kind}) -> {kind}` that does, in order: {steps}.",
        "public": [[x] for x in inputs[:3]],
        "hidden": [[x] for x in inputs[3:]],
    }


def _list(rng: random.Random, i: int, difficulty: int) -> dict[str, Any]:
    inputs = [[rng.randint(-9, 9) for _ in range(rng.randint(0, 8))] for _ in range(10)]
    return _pipeline(rng, _LIST_OPS, difficulty, "xs", "transform", inputs, "list[int]")


def _string(rng: random.Random, i: int, difficulty: int) -> dict[str, Any]:
    alphabet = "abcdeAEIxyz  "
    inputs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(10)]
    return _pipeline(rng, _STRING_OPS, difficulty, "s", "rewrite", inputs, "str")


_MAKERS: dict[str, Callable[[random.Random, int, int], dict[str, Any]]] = {
    "arith": _arith, "list": _list, "string": _string,
}  # fmt: skip


def task_id(family: str, seed: int, difficulty: int | None, index: int) -> str:
    """The self-describing id of task ``index`` of ``generate(family, seed=seed, difficulty=difficulty)``."""
    return f"synthetic:{family}/s{seed}/d{difficulty if difficulty is not None else '1-5'}/{index}"


def parse_id(problem_id: str) -> tuple[str, int, int | None, int]:
    """``(family, seed, difficulty, index)`` of a generated task's id; ``UnknownTaskError`` (with
    the expected form) for anything else."""
    m = _ID.fullmatch(problem_id)
    if m is None or m["family"] not in FAMILIES:
        example = task_id("arith", 0, 3, 5)
        raise UnknownTaskError(problem_id, reason=f"not a generated task's id: expected synthetic:<family>/s<seed>/"
                                                  f"d<1..5 or 1-5>/<index> with a family of {', '.join(FAMILIES)}, "
                                                  f"e.g. {example!r}")  # fmt: skip
    index = int(m["index"])
    if index >= MAX_TASKS:
        raise UnknownTaskError(problem_id, reason=f"a generated set has at most {MAX_TASKS} tasks")
    difficulty = None if m["difficulty"] == "1-5" else int(m["difficulty"])
    return m["family"], int(m["seed"]), difficulty, index


class _Pool:
    """The tasks of one (family, seed, difficulty), generated as far as anyone asked."""

    def __init__(self, family: str, seed: int, difficulty: int | None) -> None:
        self.key = (family, seed, difficulty)
        self.tasks: list[Task] = []
        self.stream = _stream(family, seed, difficulty)
        self.lock = threading.Lock()

    def first(self, n: int) -> list[Task]:
        if n > CACHED_TASKS:
            return list(itertools.islice(_stream(*self.key), n))
        with self.lock:
            while len(self.tasks) < n:
                self.tasks.append(next(self.stream))
            return self.tasks[:n]


_pools: dict[tuple[str, int, int | None], _Pool] = {}
_pools_lock = threading.Lock()


def _pool(family: str, seed: int, difficulty: int | None) -> _Pool:
    with _pools_lock:
        key = (family, seed, difficulty)
        if key not in _pools:
            _pools[key] = _Pool(*key)
        return _pools[key]


def task_by_id(problem_id: str) -> Task:
    """The generated task an id names, made again (the same task ``generate`` made)."""
    family, seed, difficulty, index = parse_id(problem_id)
    return _pool(family, seed, difficulty).first(index + 1)[index]


def generate(family: str, *, n: int = 100, seed: int = 0, difficulty: int | None = None) -> list[Task]:
    """``n`` tasks of ``family``; difficulties 1-5 in turn unless ``difficulty`` fixes one."""
    if family not in _MAKERS:
        raise KeyError(family)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_TASKS:
        raise ValueError(f"n: expected an int in 1..{MAX_TASKS}, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    if difficulty is not None and (isinstance(difficulty, bool) or difficulty not in range(1, 6)):
        raise ValueError(f"difficulty: expected 1..5, got {difficulty!r}")
    return _pool(family, seed, difficulty).first(n)


def _stream(family: str, seed: int, difficulty: int | None) -> Iterator[Task]:
    rng = random.Random(f"{family}/{seed}")
    for i in range(MAX_TASKS):
        level = difficulty if difficulty is not None else 1 + i % 5
        for _attempt in range(50):
            spec = _MAKERS[family](rng, i, level)
            ns: dict[str, Any] = {}
            exec(compile(spec["reference"], f"<synthetic {family}>", "exec"), ns)
            fn = ns[spec["entry_point"]]
            args = spec["public"] + spec["hidden"]
            outs = [fn(*a) for a in args]
            # no degenerate task: a constant, or one that gives back its input everywhere
            if len({repr(o) for o in outs}) > 1 and any(o != a[0] for o, a in zip(outs, args, strict=True)):
                break
        # the examples shown are the public tests: no trivial answer may pass them all
        public, hidden = choose_public([TestCase(args=a, expected=o) for a, o in zip(args, outs, strict=True)],
                                       len(spec["public"]))  # fmt: skip
        examples = "\n".join(f"    {spec['entry_point']}({c.args[0]!r}) == {c.expected!r}" for c in public)
        yield Task(
            problem_id=task_id(family, seed, difficulty, i),
            prompt=f"{spec['describe']}\n{examples}\n",
            kind="function",
            entry_point=spec["entry_point"],
            starter_code=f"def {spec['entry_point']}(...):\n    ...\n",
            reference_solution=spec["reference"],
            public_tests=public,
            hidden_tests=hidden,
            difficulty=level,
            tags=["synthetic", family],
            source=f"code-env synthetic generator {family!r}, seed {seed}, "
            + (f"difficulty {difficulty}" if difficulty is not None else "difficulties 1-5 in turn"),
        )
