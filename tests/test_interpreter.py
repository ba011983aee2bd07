"""``code_env.interpreter.CodeInterpreter``: a sandboxed Python session whose variables persist
between cells (replayed in a fresh jail for every cell). On both backends (conftest's ``sb``: after
each test, nothing of a run is alive and no file appeared outside the work dirs): state survives
between cells, an exception or a hanging cell leaves the earlier state, two sessions never see
each other's variables or files, no connection leaves a cell, nothing survives the session, and
the limits of a cell and of a session end what they should with a message that says so."""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from code_env.interpreter import (
    TOOL,
    CellResult,
    CodeInterpreter,
    InterpreterClosedError,
    InterpreterLimits,
)
from sandbox import Sandbox

from ._nobody import ROOT, as_user, can_drop
from .conftest import BACKENDS, REPO, SECRET_NAME, loopback_listener

FAST = {"cell_timeout_s": 1.0}


def ok(result: CellResult) -> CellResult:
    assert result.status == "ok" and result.committed, result
    return result


def test_state_survives_between_cells(sb: Sandbox) -> None:
    with CodeInterpreter(sb) as py:
        first = ok(py.run("import math\nr = 2\ndef area(x):\n    return math.pi * x * x\nclass P:\n    k = 7\n"
                          "open('notes.txt', 'w').write('kept')\nprint('set')"))  # fmt: skip
        assert (first.stdout, first.value, first.cell, first.replayed) == ("set\n", None, 1, 0)
        second = ok(py.run("print(round(area(r), 3))\nr += 1\nP.k + r"))
        assert (second.stdout, second.value, second.cell, second.replayed) == ("12.566\n", "10", 2, 1)
        third = ok(py.run("import os\n[open('notes.txt').read(), r, sorted(os.listdir('.')), _]"))
        assert third.value == "['kept', 3, ['notes.txt', 'solution.py'], 10]"
        assert third.stdout == "" and third.stderr == ""
        assert py.history == (py.history[0], "print(round(area(r), 3))\nr += 1\nP.k + r", py.history[2])
        assert ok(py.run("x = None\nx")).value is None  # (None is not shown, as in a notebook)
        assert ok(py.run("import inspect\ninspect.getsource(area)")).value == repr(
            "def area(x):\n    return math.pi * x * x\n")  # (the cells' text is where inspect looks)


def test_a_fork_goes_its_own_way(sb: Sandbox) -> None:
    with CodeInterpreter(sb) as py:
        ok(py.run("x = 1\nopen('f', 'w').write('base')"))
        with py.fork() as branch:
            assert (branch.session_id != py.session_id, branch.history, branch.cells) == (True, py.history, 1)
            assert ok(branch.run("x += 10\nopen('f', 'a').write('+branch')\nx, open('f').read()")).value == "(11, 'base+branch')"
            assert branch.run("x").cell == 3
        assert ok(py.run("x, open('f').read()")).value == "(1, 'base')"


def test_an_exception_keeps_the_earlier_state(sb: Sandbox) -> None:
    with CodeInterpreter(sb) as py:
        ok(py.run("x = 1\nitems = [1]"))
        bad = py.run("x = 2\nitems.append(2)\n1 / 0")
        assert (bad.status, bad.committed, bad.exit_code) == ("error", False, 1)
        assert bad.error == "ZeroDivisionError: division by zero"
        # the traceback points into the cell, with its line, and none of the interpreter's own frames
        assert 'File "<cell 2>", line 3, in <module>' in bad.stderr and "1 / 0" in bad.stderr, bad.stderr
        assert "solution.py" not in bad.stderr and "run_cell" not in bad.stderr
        syntax = py.run("def f(:\n    pass")
        assert syntax.status == "error" and syntax.error is not None and syntax.error.startswith("SyntaxError"), syntax
        quit_ = py.run("x = 3\nimport sys\nsys.exit(0)")
        assert quit_.status == "error" and quit_.error == "SystemExit: 0"
        gone = py.run("x = 4\nimport os\nos._exit(0)")
        assert gone.status == "error" and not gone.committed and "ended the interpreter" in (gone.message or "")
        assert ok(py.run("x, items")).value == "(1, [1])"  # a cell commits all or nothing


def test_a_hanging_cell_times_out_and_the_next_cell_works(sb: Sandbox) -> None:
    with CodeInterpreter(sb, limits=FAST) as py:
        ok(py.run("x = 41"))
        for hang in ("while True:\n    x += 1", "import time\nprint('before', flush=True)\nx = 0\ntime.sleep(600)"):
            r = py.run(hang)
            assert (r.status, r.timeout, r.committed, r.exit_code) == ("timeout", True, False, None), r
            assert "time limit (1 s" in (r.message or "")
        assert r.stdout == "before\n"  # what it printed before it hung is shown
        assert ok(py.run("x + 1")).value == "42"


def test_two_sessions_never_see_each_others_variables_or_files(sb: Sandbox) -> None:
    with CodeInterpreter(sb) as a, CodeInterpreter(sb) as b:
        ok(a.run("secret = 'a-only'\nopen('a.txt', 'w').write(secret)"))
        seen = ok(b.run("import os\n[sorted(os.listdir('.')), 'secret' in globals()]"))
        assert seen.value == "[['solution.py'], False]"
        ok(b.run("secret = 'b-only'"))
        assert ok(a.run("secret, open('a.txt').read()")).value == "('a-only', 'a-only')"
        assert a.session_id != b.session_id

        # concurrently: each session only ever sees its own value
        def work(py: CodeInterpreter, tag: str) -> list[str | None]:
            return [ok(py.run(f"secret = {tag!r} + str({i})\nsecret")).value for i in range(3)]

        with ThreadPoolExecutor(2) as pool:
            fa, fb = pool.submit(work, a, "A"), pool.submit(work, b, "B")
            assert fa.result() == ["'A0'", "'A1'", "'A2'"] and fb.result() == ["'B0'", "'B1'", "'B2'"]


def test_no_network_nor_host_files_from_a_cell(sb: Sandbox) -> None:
    with loopback_listener() as port, CodeInterpreter(sb) as py:
        connect = f"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('127.0.0.1', {port}))\n"
        r = py.run(connect + "'connected'")
        assert r.status == "error" and r.value is None and not r.committed, r
        assert r.error is not None and "Error" in r.error.split(":")[0], r.error
        # a cell that catches the refusal commits: every later cell replays the attempt, never connecting
        probe = (f"import socket\ntry:\n    s = socket.socket()\n    s.settimeout(3)\n    s.connect(('127.0.0.1', {port}))\n"
                 "    got = 'connected'\nexcept OSError as exc:\n    got = type(exc).__name__\ngot")  # fmt: skip
        caught = ok(py.run(probe))
        assert caught.value != "'connected'"
        assert ok(py.run("got")).value == caught.value
        # nor a host file or a secret of the host's environment
        host = str(REPO / "tests" / "conftest.py")
        leak = ok(py.run(f"import os\n[os.environ.get({SECRET_NAME!r}), os.path.exists({host!r})]"))
        assert leak.value == "[None, False]"


def test_nothing_survives_the_session(sb: Sandbox) -> None:
    py = CodeInterpreter(sb)
    with py:
        ok(py.run("import threading, time\nkept = 'value'\nopen('f.txt', 'w').write('x')\n"
                  "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()"))  # fmt: skip
        assert ok(py.run("kept")).value == "'value'"
    assert py.closed and py.history == ()
    with pytest.raises(InterpreterClosedError, match="closed"):
        py.run("kept")
    with pytest.raises(InterpreterClosedError):
        py.reset()
    py.close()  # (idempotent)
    with CodeInterpreter(sb) as fresh:
        r = ok(fresh.run("import os\n[sorted(os.listdir('.')), 'kept' in globals()]"))
        assert r.value == "[['solution.py'], False]"
    # reset: the same object, a new session
    with CodeInterpreter(sb) as py2:
        ok(py2.run("y = 1"))
        old = py2.session_id
        py2.reset()
        assert (py2.session_id != old, py2.history, py2.cells) == (True, (), 0)
        assert py2.run("y").status == "error"


def test_the_replay_is_deterministic_and_says_when_it_is_not(sb: Sandbox) -> None:
    with CodeInterpreter(sb, seed=7) as py:
        first = ok(py.run("import random\nimport numpy as np\na = random.random()\nb = float(np.random.rand())\n(a, b)"))
        again = ok(py.run("(a, b)"))
        assert again.value == first.value and again.message is None  # seeded: the replay gives the same values
        ok(py.run("import time\nstarted = time.time()\nstable = 5"))
        note = ok(py.run("stable"))
        assert note.message is not None and "started (cell 3)" in note.message and "stable" not in note.message
        assert ok(py.run("stable")).message is None  # (said once)
        drawn = ok(py.run("a")).value
    with CodeInterpreter(sb, seed=8) as other:
        assert ok(other.run("import random\nrandom.random()")).value != drawn


def test_a_cell_that_fails_when_replayed_ends_the_session_clearly(sb: Sandbox) -> None:
    with CodeInterpreter(sb) as py:
        # passes when it runs (stdout is the sandbox's pipe), fails when replayed (stdout is /dev/null)
        ok(py.run("import os, stat\nassert not stat.S_ISCHR(os.fstat(1).st_mode)\nx = 1"))
        r = py.run("x")
        assert (r.status, r.session_ended, r.committed) == ("ended", True, False), r
        assert "cell 1, which ran before, raised AssertionError" in (r.message or ""), r.message
        assert py.ended is not None and py.history == ()
        later = py.run("1")
        assert later.status == "ended" and "start a new session" in (later.message or "")


def test_cell_limits_memory_and_output(sb: Sandbox) -> None:
    with CodeInterpreter(sb, limits={"memory_mb": 64, "max_output_bytes": 1000, "max_value_chars": 50,
                                     "max_cell_chars": 100}) as py:  # fmt: skip
        ok(py.run("x = 1"))
        big = py.run("b = bytearray(256 << 20)\nb[::4096] = b'x' * len(b[::4096])")
        assert (big.status, big.oom, big.committed) == ("oom", True, False), big
        loud = ok(py.run("print('y' * 5000)\n'v' * 500"))
        assert loud.stdout_truncated and len(loud.stdout.encode()) <= 1000
        assert loud.value is not None and loud.value.startswith("'vvv") and loud.value.endswith("(502 characters)")
        long = py.run("# " + "z" * 200)
        assert long.status == "error" and "max_cell_chars=100" in (long.message or "")
        assert ok(py.run("x")).value == "1"


def test_session_limits_cells_time_and_idleness(sb: Sandbox) -> None:
    with CodeInterpreter(sb, limits={"max_cells": 2}) as py:
        ok(py.run("a = 1"))
        last = ok(py.run("a"))
        assert last.session_ended and "2 cells" in (last.message or "")
        after = py.run("a")
        assert after.status == "ended" and "max_cells" in (after.message or "")
    with CodeInterpreter(sb, limits={"session_time_s": 0.5, "cell_timeout_s": 30}) as py:
        r = py.run("while True:\n    pass")
        assert r.status == "timeout" and r.session_ended and "time budget" in (r.message or ""), r
        assert py.run("1").status == "ended"
    with CodeInterpreter(sb, limits={"idle_timeout_s": 0.2}) as py:
        ok(py.run("a = 1"))
        deadline = time.monotonic() + 60  # (the reaper runs on its own thread; this only bounds the wait)
        while py.ended is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert py.ended is not None and "idle" in py.ended and py.history == ()
        r = py.run("a")
        assert r.status == "ended" and "idle for more than 0.2 s" in (r.message or "")


def test_a_busy_session_is_not_closed_as_idle(sb: Sandbox) -> None:
    with CodeInterpreter(sb, limits={"idle_timeout_s": 0.3, "cell_timeout_s": 5}) as py:
        ok(py.run("a = 1"))
        # a cell that runs longer than the idle timeout: the session is busy, not idle
        r = ok(py.run("import time\ntime.sleep(1)\na + 1"))
        assert r.value == "2" and not r.session_ended


def test_bad_arguments_get_clear_errors(sb: Sandbox) -> None:
    with pytest.raises(ValueError, match=r"limits\.cell_timeout_s"):
        CodeInterpreter(sb, limits={"cell_timeout_s": -1})
    with pytest.raises(ValueError, match=r"limits\.max_cells"):
        CodeInterpreter(sb, limits={"max_cells": "many"})
    with pytest.raises(TypeError, match="limits: expected InterpreterLimits"):
        CodeInterpreter(sb, limits=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        CodeInterpreter(sb, seed=-1)
    with pytest.raises(ValueError, match="interpreter's own file"):
        CodeInterpreter(sb, files={".cell-result.json": "x"})
    with pytest.raises(ValueError, match=r"'\.\.'"):
        CodeInterpreter(sb, files={"../x": "x"})
    with CodeInterpreter(sb, limits=InterpreterLimits(max_cells=3)) as py:
        with pytest.raises(TypeError, match="cell: expected str"):
            py.run(b"1")  # type: ignore[arg-type]
        nul = py.run("x = '\x00'")
        assert nul.status == "error" and "NUL" in (nul.message or "")


def test_files_are_in_every_cell_and_the_result_reads_as_a_tool_answer(sb: Sandbox) -> None:
    with CodeInterpreter(sb, files={"data/in.csv": "a,b\n1,2\n"}) as py:
        ok(py.run("rows = open('data/in.csv').read().split()"))
        r = ok(py.run("print('rows:', len(rows))\nrows[1]"))
        assert r.text() == "rows: 2\nOut[2]: '1,2'"
        err = py.run("rows[5]")
        assert "IndexError: list index out of range" in err.text() and "effects were not kept" in err.text()
    assert TOOL["function"]["name"] == "python" and TOOL["function"]["parameters"]["required"] == ["code"]


def test_one_session_runs_one_cell_at_a_time(sb: Sandbox) -> None:
    """Calls from two threads on one session are serialised: no cell is lost or replayed twice."""
    with CodeInterpreter(sb) as py:
        ok(py.run("n = 0"))
        barrier = threading.Barrier(2)

        def bump() -> str:
            barrier.wait()
            return ok(py.run("n += 1\nn")).value or ""

        with ThreadPoolExecutor(2) as pool:
            values = sorted(pool.map(lambda _: bump(), range(2)))
        assert values == ["1", "2"] and ok(py.run("n")).value == "2"


def sessions_as_seen(backend: str, port: int, secret_name: str, host_file: str) -> dict[str, Any]:
    """Two sessions on a sandbox of ``backend`` of its own (run as a normal user by the test
    below): what each kept, what one saw of the other, a connect() to the host's listener, a
    secret of this (the sandbox's parent) process's environment and a host file, a hanging cell,
    and what a session after them sees."""
    import os

    os.environ[secret_name] = "s3cr3t-of-the-normal-users-parent"
    with Sandbox(backend=backend, workers=1) as box:  # type: ignore[arg-type]
        with CodeInterpreter(box, limits=FAST) as a, CodeInterpreter(box, limits=FAST) as b:
            a.run("secret = 'a-only'\nopen('a.txt', 'w').write(secret)")
            seen = b.run("import os\n[sorted(os.listdir('.')), 'secret' in globals()]").value
            kept = a.run("secret, open('a.txt').read()").value
            net = a.run(f"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('127.0.0.1', {port}))\n'connected'")
            leak = b.run(f"import os\n[os.environ.get({secret_name!r}), os.path.exists({host_file!r})]").value
            hang = b.run("import time\ntime.sleep(60)")
            after = b.run("1 + 1").value
        with CodeInterpreter(box) as fresh:
            left = fresh.run("import os\n[sorted(os.listdir('.')), 'secret' in globals()]").value
    return {"seen": seen, "kept": kept, "net": [net.status, net.value], "leak": leak, "hang": hang.status,
            "after": after, "left": left}  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="already a normal user: the tests above run as this user")
@pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))
@pytest.mark.parametrize("backend", BACKENDS)
def test_sessions_as_a_normal_user(backend: str, nobody_tmp: Path) -> None:
    # the listener is this (root) process's; the sessions and their sandbox's parent run as uid 65534
    with loopback_listener() as port:
        args = f"{backend!r}, {port}, {SECRET_NAME!r}, {str(REPO / 'tests' / 'conftest.py')!r}"
        code = f"import json\nfrom tests.test_interpreter import sessions_as_seen\nprint(json.dumps(sessions_as_seen({args})))"
        out = as_user([sys.executable, "-c", code], tmp=nobody_tmp, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"seen": "[['solution.py'], False]", "kept": "('a-only', 'a-only')", "net": ["error", None],
                   "leak": "[None, False]", "hang": "timeout", "after": "2",
                   "left": "[['solution.py'], False]"}, got  # fmt: skip
