"""`code-env sandbox-demo`: a handful of sample programs — a correct one and
hostile ones — through every available sandbox backend, printed as a table of verdicts. A backend
that cannot run here is skipped with a note; the progress bar shows only on a terminal."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from tqdm import tqdm

from sandbox import BackendUnavailableError, ExecutionResult, Limits, Sandbox

from ._verdicts import verdict
from ._visible import visible

DEMO_LIMITS = Limits(timeout_s=2.0, memory_mb=256)


@dataclass(frozen=True)
class Sample:
    name: str
    code: str
    expect: str
    stdin: str = ""
    limits: Limits = DEMO_LIMITS


def samples(port: int) -> list[Sample]:
    return [
        Sample("correct program", "n = int(input())\nprint(sum(i * i for i in range(n)))\n", "OK, prints 328350", "100\n"),
        Sample("syntax error", "def f(:\n    pass\n", "EXIT 1 with a SyntaxError"),
        Sample("infinite loop", "while True:\n    pass\n", "TIMEOUT"),
        Sample("sleeping forever", "import time\ntime.sleep(3600)\n", "TIMEOUT (wall)"),
        Sample("memory bomb", "blocks = []\nwhile True:\n    blocks.append(b'x' * (64 << 20))\n", "OOM"),
        Sample(
            "fork bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            "contained; TIMEOUT",
            limits=Limits(timeout_s=2.0, memory_mb=256, max_processes=16),
        ),
        Sample(
            "network attempt",
            f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')\n",
            "EXIT 1, no connection arrives",
        ),
        Sample("reads the host's secrets", "import os\nprint(sorted(os.environ))\nprint(open('/root/.bashrc').read())\n", "EXIT 1"),
    ]


def run_demo(backends: list[str], *, as_json: bool = False) -> int:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    progs = samples(port)
    rows: list[tuple[str, str, ExecutionResult, str]] = []
    notes: list[str] = []
    started = time.monotonic()
    try:
        for backend in backends:
            try:
                sb = Sandbox(backend=backend)
            except BackendUnavailableError as exc:
                notes.append(f"{backend}: skipped ({exc})")
                continue
            with sb:
                for s in tqdm(progs, desc=f"{backend:8}", unit="prog", leave=False, disable=None):
                    res = sb.run(s.code, stdin=s.stdin, limits=s.limits, trace_id=f"demo/{backend}/{s.name}")
                    rows.append((backend, s.name, res, s.expect))
        try:
            conn, _ = listener.accept()
            conn.close()
            notes.append("WARNING: a sandboxed program reached the loopback listener")
        except BlockingIOError:
            notes.append(f"loopback listener on port {port}: no connection arrived")
    finally:
        listener.close()
    if as_json:
        for backend, name, res, expect in rows:
            print(json.dumps({"backend": backend, "program": name, "expect": expect, "result": json.loads(res.model_dump_json())}))
        return 0
    header = ("backend", "program", "verdict", "exit", "signal", "wall ms", "cpu ms", "peak MB", "expected")
    table = [header]
    for backend, name, res, expect in rows:
        table.append((backend, name, verdict(res), str(res.exit_code), str(res.signal_name or "-"),
                      f"{res.execution_time_ms:.0f}", f"{res.cpu_time_ms:.0f}",
                      f"{res.peak_memory_mb:.0f}" if res.peak_memory_mb is not None else "-", expect))  # fmt: skip
    shown = [[visible(c, keep_newlines=False) for c in r] for r in table]
    widths = [max(len(r[i]) for r in shown) for i in range(len(header))]
    for i, r in enumerate(shown):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print()
    for n in notes:
        print(visible(n))  # (an exception's text)
    print(f"{len(rows)} runs in {time.monotonic() - started:.1f}s")
    return 0
