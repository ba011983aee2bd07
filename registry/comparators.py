"""Comparing an output with the expected one — always in the trusted parent, on plain data
(JSON values decoded from the sandbox's output, or stdout text), never on objects the program made."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from .schema import Comparator

_WS = re.compile(r"\s+")


def normalise(value: Any) -> Any:
    """JSON normal form: tuples become lists, dict keys strings (what the sandbox sends back)."""
    return json.loads(json.dumps(value))


def values_equal(expected: Any, got: Any, cmp: Comparator) -> bool:
    expected = normalise(expected)
    if cmp.kind == "exact":
        return _strict_equal(expected, got)
    if cmp.kind == "float":
        return _close(expected, got, cmp)
    if cmp.kind == "unordered":
        if not isinstance(expected, list) or not isinstance(got, list):
            return _strict_equal(expected, got)
        # (lengths first: a huge wrong answer costs nothing to reject)
        return len(expected) == len(got) and Counter(_key(x) for x in expected) == Counter(_key(x) for x in got)
    raise ValueError(f"comparator {cmp.kind!r} compares stdout text, not return values")


def stdout_equal(expected: str, got: str, cmp: Comparator) -> bool:
    if cmp.kind == "exact":
        return expected == got
    if cmp.kind == "whitespace":
        return _WS.sub(" ", expected).strip() == _WS.sub(" ", got).strip()
    if cmp.kind in ("tokens", "float"):
        a, b = expected.split(), got.split()
        return len(a) == len(b) and all(_token_equal(x, y, cmp) for x, y in zip(a, b, strict=True))
    if cmp.kind == "unordered":
        return Counter(expected.split()) == Counter(got.split())
    raise ValueError(f"unknown comparator {cmp.kind!r}")


def _strict_equal(a: Any, b: Any) -> bool:
    """Python's ``==`` on JSON values (so ``1 == 1.0 == True``, as an ``assert`` would judge)."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _strict_equal(x, y) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _strict_equal(a[k], b[k]) for k in a
        )
    return bool(a == b)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a: Any, b: Any, cmp: Comparator) -> bool:
    if _is_number(a) and _is_number(b):
        try:
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            return math.isclose(a, b, rel_tol=cmp.rel_tol, abs_tol=cmp.abs_tol)
        except OverflowError:  # an integer beyond any float: only an exact match is close
            return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, cmp) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], cmp) for k in a)
    return _strict_equal(a, b)


def _token_equal(x: str, y: str, cmp: Comparator) -> bool:
    if x == y:
        return True
    try:
        return math.isclose(float(x), float(y), rel_tol=cmp.rel_tol, abs_tol=cmp.abs_tol)
    except ValueError:
        return False


def _key(x: Any) -> str:
    return json.dumps(x, sort_keys=True)
