"""The sandbox's public behaviour: results, batches, threads, bad input, the cache."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

import registry.verify
import sandbox
from sandbox import ExecutionResult, Limits, ResultCache, RunRequest, Sandbox, UnknownBackendError
from sandbox._monitor import wall_deadline_s

from .conftest import BACKENDS, get_sandbox


def test_public_api_is_explicit() -> None:
    public = {n for n in dir(sandbox) if not n.startswith("_")}
    modules = {"cache", "errors", "languages", "models"}
    assert set(sandbox.__all__) == public - modules


def test_hello_world_result_fields(sb: Sandbox) -> None:
    res = sb.run("import sys\nprint(input()[::-1])\nprint('to stderr', file=sys.stderr)\n", stdin="abc\n", trace_id="p1/0/0")
    assert res.trace_id == "p1/0/0"
    assert res.backend == sb.backend_name
    assert (res.exit_code, res.signal, res.stdout, res.stderr) == (0, None, "cba\n", "to stderr\n")
    assert not (res.timeout_hit or res.oom or res.stdout_truncated or res.stderr_truncated)
    assert res.ok and res.sandbox_error is None
    assert res.execution_time_ms > 0 and res.cpu_time_ms > 0
    assert res.peak_memory_mb is not None and res.peak_memory_mb > 0
    assert ExecutionResult.from_wire(json.loads(res.model_dump_json())) == res


def test_exit_codes_and_tracebacks_match_python(sb: Sandbox) -> None:
    cases = {
        "import sys\nsys.exit(3)\n": 3,
        "import sys\nsys.exit('bye')\n": 1,
        "raise SystemExit(None)\n": 0,
        "import os\nos._exit(7)\n": 7,
        "1/0\n": 1,
        "def f(:\n": 1,
    }
    results = sb.run_many(list(cases))
    assert [r.exit_code for r in results] == list(cases.values())
    assert "bye" in results[1].stderr
    assert 'File "solution.py", line 1, in <module>\n    1/0' in results[4].stderr and "ZeroDivisionError" in results[4].stderr
    assert "SyntaxError" in results[5].stderr


def test_program_sees_a_fixed_hash_seed_and_a_seeded_random(sb: Sandbox) -> None:
    code = "import random\nprint(hash('code-env'), random.random())\n"
    a, b = sb.run_many([code, code])
    assert a.stdout == b.stdout
    c = sb.run(code, limits=Limits(random_seed=1))
    assert c.stdout.split()[0] == a.stdout.split()[0] and c.stdout != a.stdout
    import random

    assert a.stdout.split()[1] == repr(random.Random(0).random())  # exactly random.seed(0)


def test_atexit_and_non_daemon_threads_run_as_in_python(sb: Sandbox) -> None:
    res = sb.run(
        "import atexit, threading, time\natexit.register(print, 'atexit ran')\n"
        "threading.Thread(target=lambda: (time.sleep(0.1), print('thread done'))).start()\nprint('main done')\n"
    )
    assert res.stdout == "main done\nthread done\natexit ran\n"


def test_large_stdin_and_stdout_do_not_deadlock(sb: Sandbox) -> None:
    data = "x" * (4 << 20) + "\n"
    res = sb.run("import sys\nd = sys.stdin.read()\nsys.stdout.write(d)\nprint(len(d), file=sys.stderr)\n", stdin=data,
                 limits=Limits(max_output_bytes=8 << 20))  # fmt: skip
    assert res.exit_code == 0 and res.stdout == data and res.stderr.strip() == str(len(data))


def test_program_closing_stdin_early(sb: Sandbox) -> None:
    res = sb.run("import os\nos.close(0)\nprint('closed')\n", stdin="y" * (1 << 20))
    assert res.exit_code == 0 and res.stdout == "closed\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_many_preserves_order_and_runs_concurrently(backend: str) -> None:
    sb = get_sandbox(backend)
    code = "import time, sys\nstart = time.time()\ntime.sleep(0.3)\nprint(sys.stdin.read(), start, time.time())\n"
    reqs = [RunRequest(code=code, stdin=str(i), trace_id=f"t/{i}") for i in range(6)]
    results = sb.run_many(reqs)
    assert [r.trace_id for r in results] == [f"t/{i}" for i in range(6)]
    spans = []
    for i, r in enumerate(results):
        tag, start, end = r.stdout.split()
        assert tag == str(i)
        spans.append((float(start), float(end)))
    overlapping = any(a[0] < b[1] and b[0] < a[1] for j, a in enumerate(spans) for b in spans[j + 1 :])
    assert overlapping, "run_many ran nothing at the same time"


def test_run_many_accepts_strings_mappings_and_requests() -> None:
    sb = get_sandbox("process")
    results = sb.run_many(["print(1)", {"code": "print(2)"}, RunRequest(code="print(3)")])
    assert [r.stdout for r in results] == ["1\n", "2\n", "3\n"]
    assert sb.run_many([]) == []


def test_timeouts_hold_from_threads_and_event_loops() -> None:
    sb = get_sandbox("process")
    loop_code = "while True:\n    pass\n"
    lim = Limits(timeout_s=0.5)
    out: list[ExecutionResult] = []
    t = threading.Thread(target=lambda: out.append(sb.run(loop_code, limits=lim)))
    t.start()
    t.join()

    async def main() -> list[ExecutionResult]:
        loop = asyncio.get_running_loop()
        inline = sb.run(loop_code, limits=lim)  # blocking call inside a coroutine
        offloaded = await loop.run_in_executor(None, lambda: sb.run(loop_code, limits=lim))
        return [inline, offloaded]

    out += asyncio.run(main())
    assert len(out) == 3 and all(r.timeout_hit for r in out)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("code", "exc", "match"),
    [
        (b"print(1)", TypeError, "expected str, got bytes"),
        (None, TypeError, "expected str, got NoneType"),
        (123, TypeError, "expected str, got int"),
        ("print(1)\x00", ValueError, "NUL byte at offset 8"),
        ("x" * (1 << 20 + 1), ValueError, "over max_code_bytes"),
    ],
    ids=["bytes", "none", "int", "nul", "too-big"],
)
def test_bad_code_is_a_clear_error(code: object, exc: type[Exception], match: str) -> None:
    sb = get_sandbox("process")
    with pytest.raises(exc, match=match):
        sb.run(code)  # type: ignore[arg-type]


def test_bad_stdin_and_limits_type() -> None:
    sb = get_sandbox("process")
    with pytest.raises(TypeError, match="stdin: expected str, got bytes"):
        sb.run("pass", stdin=b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expected sandbox\.Limits, got dict"):
        sb.run("pass", limits={"timeout_s": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": -1},
        {"timeout_s": 0},
        {"timeout_s": 1e9},
        {"timeout_s": float("nan")},
        {"memory_mb": 1},
        {"memory_mb": -256},
        {"max_output_bytes": -5},
        {"max_processes": 0},
        {"cpu_time_s": -0.1},
        {"max_open_files": 3},
        {"timeout": 2},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_invalid_limits_are_validation_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_limits_are_frozen() -> None:
    lim = Limits()
    with pytest.raises(ValidationError):
        lim.timeout_s = 3  # type: ignore[misc]


def test_unknown_backend_suggests_a_fix() -> None:
    with pytest.raises(UnknownBackendError, match="did you mean 'process'") as info:
        Sandbox(backend="procss")
    assert isinstance(info.value, ValueError)


def test_run_many_names_the_bad_request_and_runs_nothing() -> None:
    sb = get_sandbox("process")
    with pytest.raises(ValueError, match=r"request 1: .*NUL byte"):
        sb.run_many(["print(1)", "print(2)\x00", "print(3)"])


def test_binary_garbage_as_code_is_a_program_error_not_a_crash(sb: Sandbox) -> None:
    garbage = bytes(range(1, 256)).decode("latin-1") * 4 + bytes(range(128, 256)).decode("utf-8", "replace")
    res = sb.run(garbage)
    assert res.sandbox_error is None
    assert res.exit_code == 1
    assert "Error" in res.stderr


@pytest.mark.parametrize("field", ["code", "stdin"])
def test_text_utf8_cannot_encode_is_refused_up_front_and_the_batch_survives(sb: Sandbox, field: str) -> None:
    """A lone surrogate (what errors="surrogateescape" makes of invalid bytes) has no UTF-8 form:
    a clear ValueError naming the field, before anything runs; the other requests still run."""
    bad = {"code": "print(input())", "stdin": "x"} | {field: "print('\udc80')" if field == "code" else "\udc80"}
    with pytest.raises(ValueError, match=rf"^{field} cannot be encoded as UTF-8.*offset"):
        sb.run(bad["code"], stdin=bad["stdin"])
    with pytest.raises(ValueError, match=rf"request 1: {field} cannot be encoded"):
        sb.run_many([{"code": "print(1)"}, bad])
    assert [r.stdout for r in sb.run_many(["print(1)", "print(2)"])] == ["1\n", "2\n"]


def test_closed_sandbox_refuses_runs() -> None:
    sb = Sandbox(workers=1)
    sb.close()
    with pytest.raises(sandbox.SandboxClosedError):
        sb.run("pass")
    sb.close()  # idempotent


# ----------------------------------------------------------------------------- failures of ours


def test_worker_killed_mid_run_is_replaced_and_the_run_answered() -> None:
    sb = Sandbox(workers=1)
    try:
        pid_before = sb._backend.worker_pids()[0]  # type: ignore[union-attr]
        out: list[ExecutionResult] = []
        t = threading.Thread(target=lambda: out.append(sb.run("import time\ntime.sleep(1)\nprint('done')\n")))
        t.start()
        time.sleep(0.4)
        os.kill(pid_before, signal.SIGKILL)
        t.join()
        res = out[0]
        # retried once on a fresh worker, and the result says so; never a verdict on the program
        assert res.sandbox_error is None and res.stdout == "done\n"
        assert res.reruns == 1 and "worker failed" in (res.rerun_reason or "")
        assert sb._backend.worker_pids()[0] != pid_before  # type: ignore[union-attr]
        assert sb.run("print('next')").stdout == "next\n"
    finally:
        sb.close()


def test_a_worker_holds_the_next_request_and_a_failure_sends_it_back_unbegun() -> None:
    """One worker, two requests at once: it runs the first while the second waits in its pipe.
    Killed mid-run, the worker fails the first (run once more, on a fresh worker: a rerun) and
    hands back the second, which it had not begun: sent again, no rerun. Both answered, in order."""
    sb = Sandbox(workers=1)
    try:
        assert sb._backend.concurrency == 2  # type: ignore[union-attr]
        pid_before = sb._backend.worker_pids()[0]  # type: ignore[union-attr]
        out: list[list[ExecutionResult]] = []
        code = "import time, sys\ntime.sleep(0.8)\nprint(sys.stdin.read())\n"
        t = threading.Thread(target=lambda: out.append(sb.run_many([{"code": code, "stdin": "first"},
                                                                     {"code": code, "stdin": "second"}])))  # fmt: skip
        t.start()
        time.sleep(0.4)
        os.kill(pid_before, signal.SIGKILL)
        t.join()
        first, second = out[0]
        assert (first.stdout, second.stdout) == ("first\n", "second\n"), out
        assert first.sandbox_error is None and second.sandbox_error is None
        assert first.reruns == 1 and "worker failed" in (first.rerun_reason or "")
        assert second.reruns == 0, second
    finally:
        sb.close()


def test_runs_leave_nothing_in_the_slot() -> None:
    """After any number of runs a slot holds what it held before: its monitor, its template, the
    child set up for the next run (and, as a normal user, that child's sleeper); no init, sleeper or
    child of an earlier run."""
    with Sandbox(workers=1) as sb:
        sb.run_many(["pass"] * 4)
        (monitor,) = sb._backend.worker_pids()  # type: ignore[union-attr]

        def tree() -> int:
            time.sleep(0.3)  # the next run's child is forked while a run ends: let it settle
            return len(psutil.Process(monitor).children(recursive=True))

        before = tree()
        for fork in (1, 4, 1):
            sb.run_many(["print(1)", "import os\nos._exit(3)", "while True: pass"] * 3,
                        limits=Limits(timeout_s=0.3, max_processes=fork))  # fmt: skip
        assert tree() == before <= 3, psutil.Process(monitor).children(recursive=True)


def test_a_failure_twice_is_a_sandbox_error_not_a_verdict() -> None:
    sb = Sandbox(workers=1)
    stop = threading.Event()

    def assassin() -> None:
        # keeps killing whatever worker is current while the run is in flight
        while not stop.is_set():
            for pid in sb._backend.worker_pids():  # type: ignore[union-attr]
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.3)

    try:
        t = threading.Thread(target=assassin)
        t.start()
        res = sb.run("import time\ntime.sleep(3)\n")
        stop.set()
        t.join()
        assert res.sandbox_error is not None and "failed twice" in res.sandbox_error
        assert res.exit_code is None and not res.timeout_hit and not res.oom
    finally:
        stop.set()
        sb.close()


def test_each_run_gets_the_cpu_rlimit_of_its_own_limits() -> None:
    """A worker forks the next run's child ahead of time, set up for the last run's limits, and
    uses it when the next request's setup is the same: budgets that differ by a fraction of a
    second (a verifier's grow with their input) share one, since only RLIMIT_CPU is applied in
    the child, in whole seconds; whatever the order, each run has the rlimit of its own budget
    (its ceiling plus one second: the monitor enforces the exact budget) and no other's."""
    probe = "import resource\nprint(*resource.getrlimit(resource.RLIMIT_CPU))\n"
    budgets = [2.0, 2.3, 1.6, 5.0, 5.0001, 2.2, 0.4, 7.9, 1.0]
    with Sandbox(workers=1) as sb:
        got = [sb.run(probe, limits=Limits(timeout_s=b + 1, cpu_time_s=b)).stdout for b in budgets]
        plain = sb.run(probe, limits=Limits(timeout_s=3.5)).stdout  # cpu_time_s: the wall clock's
    assert got == [f"{math.ceil(b) + 1} {math.ceil(b) + 2}\n" for b in budgets]
    assert plain == "5 6\n"


def test_the_wall_clock_does_not_charge_the_wait_for_a_cpu() -> None:
    """The deadline of a run that waited on a run queue moves by that wait, up to the hard stop; one
    that slept (no wait) is stopped at its limit; without a hard stop nothing moves."""
    assert wall_deadline_s(2.0, 0.0, 8.0) == 2.0  # it slept: the machine was not to blame
    assert wall_deadline_s(2.0, 1.5, 8.0) == 3.5
    assert wall_deadline_s(2.0, 60.0, 8.0) == 8.0
    assert wall_deadline_s(2.0, 1.5, None) == 2.0
    assert wall_deadline_s(2.0, -1.0, 8.0) == 2.0


# ----------------------------------------------------------------------------- cache


def test_cache_hits_are_marked_and_keyed_by_everything(tmp_path: Path) -> None:
    cache = ResultCache(path=str(tmp_path / "cache.sqlite"))
    with Sandbox(workers=1, cache=cache) as sb:
        a = sb.run("print(41 + 1)", trace_id="a")
        b = sb.run("print(41 + 1)", trace_id="b")
        c = sb.run("print(41 + 1)", limits=Limits(memory_mb=128))
        d = sb.run("print(41 + 1)", stdin="x")
        t1 = sb.run("while True: pass", limits=Limits(timeout_s=0.3))
        t2 = sb.run("while True: pass", limits=Limits(timeout_s=0.3))
    assert not a.cached and b.cached and b.trace_id == "b" and b.stdout == a.stdout
    assert not c.cached and not d.cached
    assert not t1.cached and not t2.cached  # timeouts depend on load: never reused
    with Sandbox(workers=1, cache=ResultCache(path=str(tmp_path / "cache.sqlite"))) as sb2:
        assert sb2.run("print(41 + 1)").cached


def test_cache_is_off_by_default() -> None:
    sb = get_sandbox("process")
    assert sb.cache is None
    assert not sb.run("print(1)").cached and not sb.run("print(1)").cached


def test_an_interrupted_call_leaves_no_worker_out_of_step() -> None:
    """Ctrl-C in the middle of a run: a real SIGINT to the main thread (which ends its wait at
    once, as a terminal's would; ``_thread.interrupt_main`` only takes effect once the wait is
    over, so a timer thread scheduled late on a loaded machine let the run finish first). The
    interrupted run's reply, which comes later, must never be taken for the next call's."""
    sb = Sandbox(workers=1)
    got: list[ExecutionResult] = []
    # Python's own handler, whatever this process inherited: started in the background by a shell
    # without job control (CI, the normal-user suite), SIGINT is ignored, and Python then keeps it so
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            got.append(sb.run("import time\ntime.sleep(3)\nprint('late')\n"))
            time.sleep(30)  # not reached unless the run ended before the signal: then the signal ends this
        timer.join()
        assert not got, f"the run ended before the interrupt: {got[0]!r}"
        # the late reply of the interrupted run must never be taken for this one's
        assert sb.run("print('fresh')").stdout == "fresh\n"
        assert sb.run("print('again')").stdout == "again\n"
    finally:
        signal.signal(signal.SIGINT, previous)
        sb.close()


@pytest.mark.slow
def test_watchdog_replaces_a_hung_worker() -> None:
    """A worker that stops answering (here: frozen with SIGSTOP mid-run) is killed after the
    run's limit plus grace, replaced, and the run retried; nothing waits forever."""
    sb = Sandbox(workers=1)
    try:
        pid = sb._backend.worker_pids()[0]  # type: ignore[union-attr]
        out: list[ExecutionResult] = []
        t = threading.Thread(target=lambda: out.append(sb.run("import time\ntime.sleep(0.3)\nprint('ok')\n", limits=Limits(timeout_s=0.5))))
        t.start()
        time.sleep(0.1)
        os.kill(pid, signal.SIGSTOP)
        t.join(timeout=60)
        assert not t.is_alive()
        res = out[0]
        assert res.stdout == "ok\n" and res.reruns == 1 and "watchdog" in (res.rerun_reason or "")
        assert sb._backend.worker_pids()[0] != pid  # type: ignore[union-attr]
    finally:
        sb.close()


def test_standard_streams_can_be_opened_by_path(sb: Sandbox) -> None:
    res = sb.run(
        "import sys\ndata = open('/dev/stdin').read()\nwith open('/dev/stdout', 'w') as out:\n    out.write(data.upper())\n",
        stdin="shout\n",
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout == "SHOUT\n"


def test_a_registered_program_runs_as_compiled_in_the_run() -> None:
    """A program registered with ``register_program`` is compiled once by each worker, and a run
    whose program is exactly it behaves as if it had compiled it itself: same output, exit status
    and traceback (its lines, its file name); one character more and the run compiles its own."""
    code = "import sys\nprint(sys.stdin.read()[::-1])\nif sys.argv:\n    raise ValueError('line four')\n"
    with Sandbox(workers=1, programs=[code]) as warm, Sandbox(workers=1, programs=[]) as cold:
        assert warm.programs == (code,) and cold.programs == ()
        for program in (code, code + "\n"):
            a, b = warm.run(program, stdin="abc"), cold.run(program, stdin="abc")
            assert (a.stdout, a.exit_code, a.stderr) == (b.stdout, b.exit_code, b.stderr) == (
                "cba\n", 1, 'Traceback (most recent call last):\n  File "solution.py", line 4, in <module>\n'
                "    raise ValueError('line four')\nValueError: line four\n"), (a, b)  # fmt: skip
    with pytest.raises(TypeError, match="programs: expected a list of programs, got a str"):
        Sandbox(workers=1, programs="print(1)")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="code: expected str"):
        sandbox.register_program(b"print(1)")  # type: ignore[arg-type]
    assert registry.verify.DRIVER in sandbox.registered_programs()  # the verifier's, registered on import


def test_what_a_registered_program_imports_is_preloaded() -> None:
    """The standard-library modules a registered program imports (anywhere in it: the driver imports
    inside its function) are in every run's interpreter before it starts, as the preloaded ones are;
    third-party and relative imports are not, and a program that does not parse names none."""
    from sandbox._programs import program_imports

    code = "def main():\n    import json, fcntl\n    from email import utils\n    import numpy\n    from . import x\n"
    assert program_imports([code, "def f(:\n"]) == ("json", "fcntl", "email")
    assert {"json", "fcntl"} <= set(program_imports([registry.verify.DRIVER]))
    probe = "import sys\nprint(*[m in sys.modules for m in ('email', 'fcntl', 'numpy')])\n"
    with Sandbox(workers=1, programs=[code]) as warm, Sandbox(workers=1, programs=[]) as cold:
        assert warm.run(probe).stdout == "True True False\n"
        assert cold.run(probe).stdout == "False False False\n"
