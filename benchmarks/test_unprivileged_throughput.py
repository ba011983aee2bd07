"""The process backend without root (user namespaces, the worker's memory monitor) beside the
same backend as root, on the same batch of trivial programs, in alternating rounds (target: the
unprivileged path within 1.25x of the root path). Needs root to start the unprivileged side (it
drops to uid 65534, see tests/_nobody.py)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, Sandbox
from tests._nobody import NOBODY, as_nobody

from .conftest import record_ratio

CORES = os.cpu_count() or 1
BATCH, ROUNDS = 400, 5
LIMITS = Limits(timeout_s=10.0, memory_mb=512)
# Measures ROUNDS batches inside one process (start-up excluded) and prints the seconds of each.
MEASURE = f"""
import json, sys, time
from sandbox import Limits, Sandbox
with Sandbox("process", workers={CORES}) as sb:
    sb.run_many(["pass"] * 40)
    out = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        res = sb.run_many(["def f():\\n    return 1\\nassert f() == 1\\n"] * {BATCH}, limits=Limits(timeout_s=10.0, memory_mb=512))
        out.append(time.perf_counter() - t)
        assert all(r.exit_code == 0 for r in res), [r for r in res if r.exit_code != 0][:1]
    print(json.dumps(out))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to a normal user")


def test_unprivileged_vs_root(benchmark: Any) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
    os.chown(tmp, NOBODY, NOBODY)
    root_s: list[float] = []
    user_s: list[float] = []
    try:
        with Sandbox("process", workers=CORES) as sb:
            sb.run_many(["pass"] * 40)

            def pair() -> None:
                t = time.perf_counter()
                res = sb.run_many(["def f():\n    return 1\nassert f() == 1\n"] * BATCH, limits=LIMITS)
                root_s.append(time.perf_counter() - t)
                assert all(r.exit_code == 0 for r in res)
                out = as_nobody([sys.executable, "-c", MEASURE, "1"], tmp=tmp, timeout=600)
                assert out.returncode == 0, out.stderr[-2000:]
                user_s.extend(json.loads(out.stdout.strip().splitlines()[-1]))

            benchmark.pedantic(pair, rounds=ROUNDS, warmup_rounds=0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(root_s) > 1:
        ratio = statistics.median(u / r for u, r in zip(user_s, root_s, strict=True))
        record_ratio(
            name="process backend as a normal user (user namespaces) vs as root, run_many of "
            f"{BATCH} trivial programs, {len(root_s)} alternating rounds",
            ours=BATCH / statistics.median(user_s), anchor=BATCH / statistics.median(root_s),
            ratio=ratio, target=1.25, unit="executions/s",
        )
