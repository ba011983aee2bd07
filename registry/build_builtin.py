"""Write ``registry/data/builtin.jsonl`` from ``registry/builtin_source.py``: each reference
solution runs (in this trusted process: it is our own code) on its inputs, and its outputs become
the expected values; each stdio task takes its solutions in C++, Java and Rust, some function tasks theirs in C++, from
``registry/builtin_solutions.py`` (``code-env tasks validate`` runs them against those values).
``python -m registry.build_builtin``; ``--check`` fails if the file is stale."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from .builtin_solutions import FUNCTION_SOLUTIONS, SOLUTIONS
from .builtin_source import TASKS
from .schema import Comparator, Task, TestCase

DATA = Path(__file__).parent / "data" / "builtin.jsonl"


def _function_case(ref: dict[str, Any], args: list[Any], comparator: Comparator) -> TestCase:
    ns: dict[str, Any] = {"__name__": "__reference__"}
    exec(compile(ref["reference"], f"<{ref['id']}>", "exec"), ns)
    expected = ns[ref["entry_point"]](*json.loads(json.dumps(args)))
    return TestCase(args=args, expected=json.loads(json.dumps(expected)), comparator=comparator,
                    checker=ref.get("checker"))  # fmt: skip


def _stdio_case(ref: dict[str, Any], stdin: str, comparator: Comparator) -> TestCase:
    out = io.StringIO()
    old_stdin = sys.stdin
    try:
        sys.stdin = io.StringIO(stdin)
        with contextlib.redirect_stdout(out):
            exec(compile(ref["reference"], f"<{ref['id']}>", "exec"), {"__name__": "__main__"})
    finally:
        sys.stdin = old_stdin
    return TestCase(stdin=stdin, expected_stdout=out.getvalue(), comparator=comparator, checker=ref.get("checker"))


def build() -> list[Task]:
    tasks = []
    for ref in TASKS:
        default = "exact" if ref["kind"] == "function" else "whitespace"
        cmp = Comparator(**ref.get("comparator", {"kind": default}))
        make = _function_case if ref["kind"] == "function" else _stdio_case
        tasks.append(
            Task(
                problem_id=ref["id"],
                prompt=ref["prompt"],
                kind=ref["kind"],
                entry_point=ref.get("entry_point"),
                starter_code=(f"def {ref['entry_point']}(...):\n    ...\n" if ref["kind"] == "function" else ""),
                reference_solution=ref["reference"],
                public_tests=[make(ref, x, cmp) for x in ref["public"]],
                hidden_tests=[make(ref, x, cmp) for x in ref["hidden"]],
                difficulty=ref["difficulty"],
                tags=ref["tags"],
                source="code-env builtin",
                solutions={**SOLUTIONS.get(ref["id"], {}), **FUNCTION_SOLUTIONS.get(ref["id"], {})},
            )
        )
    return tasks


def render(tasks: list[Task]) -> str:
    return "".join(t.model_dump_json() + "\n" for t in tasks)


def main(argv: list[str]) -> int:
    text = render(build())
    if "--check" in argv:
        if not DATA.exists() or DATA.read_text() != text:
            print(f"{DATA} is stale: run python -m registry.build_builtin", file=sys.stderr)
            return 1
        return 0
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(text)
    print(f"wrote {len(text.splitlines())} tasks to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
