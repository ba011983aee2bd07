"""Per-test time limits derived from the reference solution instead of one global constant
(the EvalPlus rule): ``max(floor_s, factor x the reference's slowest call)``, measured in the
sandbox and cached on disk with a hash of what was measured."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from sandbox import Sandbox

from .schema import Task
from .verify import verify


def _fingerprint(task: Task) -> str:
    blob = json.dumps([task.reference_solution, task.model_dump(include={"public_tests", "hidden_tests"})], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def calibrate(tasks: Sequence[Task], sandbox: Sandbox, *, factor: float = 4.0, floor_s: float = 1.0,
              cache_path: str | Path | None = None) -> list[Task]:  # fmt: skip
    """The tasks with ``timeout_s`` set from their references' measured call times."""
    if factor <= 0 or floor_s <= 0:
        raise ValueError(f"expected factor > 0 and floor_s > 0, got factor={factor}, floor_s={floor_s}")
    cache: dict[str, dict[str, object]] = {}
    if cache_path is not None and os.path.exists(cache_path):
        with open(cache_path, encoding="utf-8") as fh:
            cache = json.load(fh)
    out: list[Task] = []
    changed = False
    for task in tasks:
        fp = _fingerprint(task)
        entry = cache.get(task.problem_id)
        if entry and entry.get("fingerprint") == fp:
            slowest_ms = float(entry["slowest_ms"])  # type: ignore[arg-type]
        else:
            slowest_ms = 0.0
            for which in ("public", "hidden"):
                v = verify(task, task.reference_solution, sandbox, which=which, trace_id=f"{task.problem_id}/calibrate")
                if v.sandbox_error or v.passed != v.total:
                    raise RuntimeError(f"cannot calibrate {task.problem_id}: its reference does not pass its {which} tests")
                slowest_ms = max([slowest_ms, *(c.elapsed_ms or 0.0 for c in v.cases)])
            cache[task.problem_id] = {"fingerprint": fp, "slowest_ms": slowest_ms}
            changed = True
        out.append(task.model_copy(update={"timeout_s": round(max(floor_s, factor * slowest_ms / 1000), 3)}))
    if cache_path is not None and changed:
        tmp = f"{cache_path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(cache, fh, indent=1, sort_keys=True)
        os.replace(tmp, cache_path)
    return out
