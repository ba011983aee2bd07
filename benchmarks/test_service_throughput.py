"""``code-env serve`` against the sandbox in-process, paired (alternating rounds in one run, see
``conftest.paired``), on a trivial program (``print(1)``), at 4, 16 and 64 concurrent clients:

* ``/run_code`` (SandboxFusion's API): C client threads, each posting one program at a time on
  its own keep-alive connection, against the same C threads each calling ``Sandbox.run`` on an
  in-process sandbox with as many workers;
* ``/v1/run_many``: C clients each posting a batch, against one in-process ``run_many`` of all
  their programs.

The server is the real command (``python -m code_env serve``, a child process with its own
sandbox: its CPU is in this process tree's); the clients are ``requests`` sessions in threads of
this process. p50/p99 are per call (a program for ``/run_code`` and ``Sandbox.run``, a batch for
``/v1/run_many``): served in arrival order, p99 stays within a small multiple of p50. Target:
the service within 1.25x of in-process (time per program). No assertion on speed: only that
every side prints what the program prints."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from code_env.service import wait_ready
from sandbox import Sandbox

from .conftest import CORES, Latencies, Side, Target, paired, record_paired

REPO = Path(__file__).resolve().parents[1]
PROGRAM = "print(1)"
ROUNDS = 6
PER_ROUND = 128  # programs per round and side


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "code_env", "serve", "--port", str(port), "--workers", str(CORES),
                             "--log-level", "warning", "--max-client-requests", "256"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, alive=lambda: proc.poll() is None)
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many([PROGRAM] * 20)
        yield s


def threaded(clients: int, calls: int, call: Callable[[Any], str], make: Callable[[], Any] = lambda: None) -> Latencies:
    """``clients`` threads, each making ``calls`` calls (``call(state)``, ``state`` from ``make``
    once per thread); every call's wall time; every call must give PROGRAM's output."""
    lat = Latencies()
    outs: list[str] = []
    lock = threading.Lock()
    states = [make() for _ in range(clients)]

    def client(state: Any) -> None:
        mine, seen = [], []
        for _ in range(calls):
            t = time.perf_counter()
            seen.append(call(state))
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)
            outs.extend(seen)

    threads = [threading.Thread(target=client, args=(s,)) for s in states]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outs == ["1\n" * (len(o) // 2) for o in outs] and all(outs), outs[:3]
    return lat


@pytest.mark.parametrize("clients", [4, 16, 64])
def test_service_against_in_process(benchmark: Any, server: str, sb: Sandbox, clients: int) -> None:
    calls = max(1, PER_ROUND // clients)
    n = clients * calls

    def run_code(session: requests.Session) -> str:
        body = session.post(server + "/run_code", json={"code": PROGRAM, "language": "python"}, timeout=120).json()
        return str(body["run_result"]["stdout"])

    def run_many(session: requests.Session) -> str:
        body = session.post(server + "/v1/run_many", json={"requests": [{"code": PROGRAM}] * calls}, timeout=120).json()
        return "".join(r["stdout"] for r in body["results"])

    def in_process_many() -> Latencies:
        t = time.perf_counter()
        outs = [r.stdout for r in sb.run_many([PROGRAM] * n)]
        assert outs == ["1\n"] * n
        return Latencies([time.perf_counter() - t])

    sides = {
        "in-process Sandbox.run, C threads": Side(lambda: threaded(clients, calls, lambda _: sb.run(PROGRAM).stdout), n),
        "/run_code, C clients": Side(lambda: threaded(clients, calls, run_code, requests.Session), n),
        "in-process Sandbox.run_many (one batch)": Side(in_process_many, n),
        "/v1/run_many, C clients (a batch each)": Side(lambda: threaded(clients, 1, run_many, requests.Session), n),
    }
    result = paired(benchmark, sides, rounds=ROUNDS)
    names = list(sides)
    title = f"code-env serve, {clients} concurrent clients"
    targets = [Target(f"{title}: /run_code ÷ in-process Sandbox.run (time per program)", names[1], "time", vs=names[0],
                      op="<=", bound=1.25),
               Target(f"{title}: /v1/run_many ÷ in-process run_many (time per program)", names[3], "time", vs=names[2],
                      op="<=", bound=1.25)]  # fmt: skip
    record_paired(benchmark, result, title=title, program="print(1)", mode=f"{clients} clients, {calls} calls each",
                  unit="programs", targets=targets, rank=40,
                  note=f"C = {clients}. p50/p99: per call (a program, or a client's batch of {calls}); the in-process "
                       "batch: the round's one call. The server: `python -m code_env serve`, its own sandbox of "
                       f"{CORES} workers, a child of this process (its CPU counted).")  # fmt: skip
