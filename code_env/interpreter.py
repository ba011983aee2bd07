"""A stateful code interpreter: the Python tool of tool-integrated reasoning, where a model calls
Python mid-reasoning and its variables persist between calls.

>>> from code_env.interpreter import CodeInterpreter
>>> with CodeInterpreter() as py:                            # doctest: +SKIP
...     py.run("import math\\nr = 2")
...     out = py.run("print('area:', math.pi * r * r)\\nr * 2")
>>> out.stdout, out.value                                    # doctest: +SKIP
('area: 12.566370614359172\\n', '4')

**How state persists: the session's cells are replayed.** Every ``run(cell)`` is one ordinary
sandbox run (``Sandbox.run_many``) in a fresh jail: a small driver first replays the session's
earlier cells that completed, in order, in one ``__main__`` namespace, with their output sent to
``/dev/null``, then runs the new cell, notebook-style (its output, and the ``repr`` of its last
expression, if it ends with one). Between cells nothing of the session exists but the text of
its cells on the host: no process, no file, no memory of it anywhere in the sandbox.

Why replay, and not a long-lived process in a jail of its own or the globals serialised between
cells: the sandbox runs one-shot programs, and every invariant it enforces — no network, no host
file, no orphan, nothing of one run visible to another, the work dir gone afterwards, a timeout
enforced and verified from outside — holds for a replayed session because each cell *is* such a
run; a process kept alive between calls would need a second kind of jail with its own lifetime,
accounting and clean-up, and a session that idles would hold a whole interpreter (tens of MiB)
instead of a few KiB of text. Serialising the globals (pickle, dill) cannot keep what most
sessions define — functions, classes, modules, generators, open files — without re-executing
code anyway, and such a blob must never be unpickled on the host. Replay is also what the
tool-integrated-reasoning evaluators do (ToRA, Qwen-Math's executor: earlier cells re-run before
the new one). Its costs, measured in ``benchmarks/test_interpreter.py``: a cell's latency grows
with the time its session's earlier cells take to run again (O(n) per cell), and whatever a cell
draws from outside the program differs on replay. Against the latter: ``random`` is seeded
(``seed``; the sandbox's own seeding), so is ``numpy.random``'s global state when a cell imports
it, the hash seed is fixed, and after each replayed cell the driver compares a fingerprint of the
session's variables (each name's type, and the hash of a number, a string or bytes) with the one
the cell left the first time: a variable that came out differently (the clock, ``os.urandom``,
``uuid4``) is named once in the next result's ``message``.

Semantics that follow, stated so nobody is surprised:

- A cell commits all or nothing: only a cell that ran to its end without an exception joins the
  session. A cell that raised, timed out, ran out of memory or ended the process (``os._exit``,
  ``sys.exit()``) leaves the session as it was before it, partial assignments included.
- Files a cell writes are part of its effects: they are written again by the replay, in each
  cell's fresh work dir. ``files`` given to the session are in the work dir of every cell.
- Threads and processes do not outlive their cell; stdin is empty.
- The limits of a cell (``InterpreterLimits``): ``cell_timeout_s`` is the cell's own wall clock,
  on top of a replay allowance (``REPLAY_START_S`` + ``REPLAY_FACTOR`` times the earlier cells' own
  times), the whole enforced by the sandbox from outside; ``memory_mb`` holds the whole session
  (its state is rebuilt in the same process); ``max_output_bytes`` per stream, ``max_value_chars``
  of the shown value, ``max_cell_chars`` of source. The session's: ``max_cells``,
  ``session_time_s`` (the sandbox time of all its runs, replays included: a long session spends it
  faster) and ``idle_timeout_s``, after which an idle session is closed (its cells are forgotten).
  A session that ran out of a session limit, or whose earlier cells fail when replayed, ends with
  a result that says why (``status="ended"``); ``close()`` (or the ``with`` block's end) forgets it
  for good and ``run`` then raises.
- ``fork()`` gives a second session in the same state (its cells' text copied): several
  continuations of one reasoning prefix, at no cost until they run.
- A cell that hangs is that cell's timeout; the session keeps the state it had before the cell.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from registry.verify import Runner
from sandbox import ExecutionResult, Limits, RunRequest, register_program
from sandbox.models import MiB, check_files, coerce_files

from ._errors import first_error
from .env import default_executor
from .grading import SharedSandbox

REPORT = ".cell-result.json"  # what the driver leaves in the work dir: the new cell's outcome
MARK = "\x1ecode-env: cell starts\x1e\n"  # on stderr, written once the replay is done (the cell's stderr follows)
REPLAY_START_S = 1.0  # a run's allowance for starting and replaying, on top of the cell's limit ...
REPLAY_FACTOR = 2.0  # ... plus this many times the earlier cells' own times
MAX_FINGERPRINT_NAMES = 256  # variables fingerprinted after a cell (the first ones of its namespace)
MAX_REPORT_BYTES = 4 * MiB
MAX_ERROR_CHARS = 500

Status = Literal["ok", "error", "timeout", "oom", "ended", "sandbox_error"]

# The program every run of a session runs (registered: the process backend's workers compile it
# once). Its input is one JSON document on stdin; it runs in the jail, so it trusts nothing of
# the cells, and the host trusts nothing of what it reports (``_read_report``).
DRIVER = r'''"""code-env interpreter: replay a session's cells, then run the new one (code_env.interpreter)."""
import _ast
import builtins
import json
import os
import sys
import time
import types

MARK = __MARK__
REPORT = __REPORT__
MAX_NAMES = __MAX_NAMES__
MAX_ERROR = __MAX_ERROR__
SCALARS = (int, float, complex, str, bytes)


class Hooks:
    """On their import (by a cell, or by traceback and inspect): numpy.random's global state seeded,
    as the sandbox seeds random; linecache given the cells' text. (Imported through __import__,
    never an import statement: the process backend preloads a registered program's imports in
    every run's template, and these are only some runs' business.)"""

    def __init__(self, seed, sources):
        self.seed, self.sources = seed, sources

    def find_spec(self, name, path=None, target=None):
        if name not in ("numpy.random", "linecache"):
            return None
        machinery = __import__("importlib.machinery").machinery
        spec = machinery.PathFinder.find_spec(name, path, target)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            run, after = loader.exec_module, self.after

            def exec_module(module):
                run(module)
                after(module)

            loader.exec_module = exec_module
        return spec

    def after(self, module):
        if module.__name__ == "numpy.random":
            module.seed(self.seed)
        else:
            for name, source in self.sources:
                module.cache[name] = (len(source), None, source.splitlines(True), name)


def run_cell(source, name, ns, value_chars):
    """Run one cell in ns; the repr of its last expression's value (None: no value to show)."""
    tree = compile(source, name, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec", dont_inherit=True), ns)
    if last is None:
        return None
    value = eval(compile(last, name, "eval", dont_inherit=True), ns)
    if value is None:
        return None
    ns["_"] = value
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr failed: {describe(exc)}>"
    if len(text) > value_chars:
        text = text[:value_chars] + f"... ({len(text)} characters)"
    return text


def fingerprint(ns):
    """Each variable's type, and the hash of a number, string or bytes, or a container's length."""
    out = {}
    for key, value in list(ns.items()):
        if len(out) >= MAX_NAMES:
            break
        if not isinstance(key, str) or len(key) > 200 or (key.startswith("__") and key.endswith("__")):
            continue
        kind = type(value)
        label = (str(kind.__module__) + "." + str(kind.__qualname__))[:200]
        try:
            if isinstance(value, SCALARS) and kind.__module__ in ("builtins", "numpy"):
                label += f":{hash(value)}"
            elif kind in (list, tuple, dict, set, frozenset, bytearray):
                label += f":{len(value)}"
            elif kind.__module__ == "numpy" and kind.__name__ == "ndarray":
                label += f":{value.shape}:{value.dtype}"
        except Exception:
            pass
        out[key] = label
    return out


def describe(exc):
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = type(exc).__name__
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR] + "..."


def show(exc):
    """The cell's traceback on stderr, from the cell's own frames on."""
    try:
        traceback = __import__("traceback")
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == run_cell.__code__.co_filename:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb, file=sys.__stderr__)
        sys.__stderr__.flush()
    except BaseException:
        os.write(2, (describe(exc) + "\n").encode("utf-8", "replace"))


def flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def finish(out, status):
    flush()
    try:
        with open(REPORT_PATH, "w") as fh:
            fh.write(json.dumps(out))
    except BaseException:
        status = 4
    os._exit(status)


def main():
    p = json.loads(sys.stdin.read())
    cells, names, want = p["cells"], p["names"], p["fingerprints"]
    hooks = Hooks(p["seed"], list(zip(names, cells + [p["cell"]])))
    sys.meta_path.insert(0, hooks)
    if "linecache" in sys.modules:
        hooks.after(sys.modules["linecache"])
    main_module = types.ModuleType("__main__")
    ns = main_module.__dict__
    ns["__builtins__"] = builtins
    sys.modules["__main__"] = main_module
    out = {"status": "ok", "value": None, "error": None, "cell": None, "diverged": [], "replay_ms": 0.0,
           "time_ms": 0.0, "fingerprint": None}
    t0 = time.perf_counter()
    if cells:
        flush()
        saved = os.dup(1), os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        seen, expected, comparing = set(), {}, True
        try:
            for i, source in enumerate(cells):
                try:
                    run_cell(source, names[i], ns, p["value_chars"])
                except BaseException as exc:
                    out.update(status="replay_failed", cell=i, error=describe(exc))
                    break
                comparing = comparing and want[i] is not None  # (what a cell changed: its first run's fingerprint)
                if not comparing:
                    continue
                for key, label in want[i].items():
                    if label is None:
                        expected.pop(key, None)
                    else:
                        expected[key] = label
                got = fingerprint(ns)
                for key in sorted(set(expected) | set(got)):
                    if expected.get(key) != got.get(key) and key not in seen and len(seen) < MAX_NAMES:
                        seen.add(key)
                        out["diverged"].append([i, key])
        finally:
            flush()  # (the replay's buffered output goes to /dev/null)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out["replay_ms"] = 1000 * (time.perf_counter() - t0)
        if out["status"] != "ok":
            finish(out, 3)
    try:
        sys.stdout.reconfigure(line_buffering=True)  # a cell that hangs has shown what it printed
    except Exception:
        pass
    os.write(2, MARK.encode())
    t1 = time.perf_counter()
    status = 0
    try:
        out["value"] = run_cell(p["cell"], names[-1], ns, p["value_chars"])
        out["time_ms"] = 1000 * (time.perf_counter() - t1)
        out["fingerprint"] = fingerprint(ns)
    except BaseException as exc:
        out["time_ms"] = 1000 * (time.perf_counter() - t1)
        flush()
        out.update(status="error", error=describe(exc))
        show(exc)
        status = 1
    finish(out, status)


REPORT_PATH = os.path.join(os.getcwd(), REPORT)
main()
'''
for _key, _value in (("__MARK__", repr(MARK)), ("__REPORT__", repr(REPORT)), ("__MAX_NAMES__", str(MAX_FINGERPRINT_NAMES)),
                     ("__MAX_ERROR__", str(MAX_ERROR_CHARS))):  # fmt: skip
    DRIVER = DRIVER.replace(_key, _value, 1)

TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "python",
    "description": "Run Python code in a persistent session (variables, functions and imports stay defined between "
                   "calls; no network, no files but the session's own). Shows stdout, stderr and the value of the last "
                   "expression.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "the Python cell to run"}},
                   "required": ["code"]}}}  # fmt: skip
"""An OpenAI ``tools`` entry for a session's ``run`` (the argument ``code`` is the cell)."""


def interpreter_limits(limits: InterpreterLimits | Mapping[str, Any] | None, owner: str) -> InterpreterLimits:
    """``limits`` as ``InterpreterLimits`` (None: the defaults; a mapping: its fields), or a
    clear error that names ``owner``."""
    if limits is None:
        return InterpreterLimits()
    if isinstance(limits, InterpreterLimits):
        return limits
    if isinstance(limits, Mapping):
        try:
            return InterpreterLimits(**limits)
        except ValidationError as exc:
            raise ValueError(f"{owner}: {first_error(exc, prefix='limits.')}") from None
    raise TypeError(f"limits: expected InterpreterLimits or a mapping, got {type(limits).__name__}")


class InterpreterClosedError(RuntimeError):
    """``run`` on a session after ``close()`` (or after its ``with`` block)."""


class InterpreterLimits(BaseModel):
    """A session's limits: per cell, then per session (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cell_timeout_s: float = Field(10.0, gt=0, le=600, description="a cell's own wall clock, seconds (replay apart)")
    memory_mb: int = Field(512, ge=32, le=64 * 1024, description="memory of a run: the session's state and the cell")
    max_output_bytes: int = Field(64 * 1024, ge=0, le=64 * MiB, description="bytes kept of a cell's stdout, and of its stderr")
    max_value_chars: int = Field(10_000, ge=16, le=1 << 20, description="characters kept of the last expression's repr")
    max_cell_chars: int = Field(50_000, ge=1, le=1 << 20, description="largest cell accepted")
    max_disk_mb: int = Field(64, ge=1, le=16 * 1024, description="the work dir of a cell (the files the session writes)")
    max_cells: int = Field(100, ge=1, le=10_000, description="cells a session runs; then it ends")
    session_time_s: float = Field(600.0, gt=0, le=86_400, description="sandbox time of all the session's runs")
    idle_timeout_s: float | None = Field(600.0, gt=0, description="an idle session is closed after this; None: never")


class CellResult(BaseModel):
    """What one cell did. ``status``: ``ok`` (ran to its end: its effects are kept), ``error`` (it
    raised, did not compile, or ended the process), ``timeout``, ``oom``, ``ended`` (not run: the
    session is over, ``message`` says why), ``sandbox_error`` (the sandbox failed: not the cell's
    doing; run it again). Only ``ok`` commits (``committed``). ``message``: the interpreter's own
    words (why a cell was not kept, notes on the replay); ``error``: the exception's last line."""

    model_config = ConfigDict(extra="forbid")

    session: str
    cell: int = Field(description="the cell's number in its session (In[n]), from 1")
    status: Status
    stdout: str = ""
    stderr: str = ""
    value: str | None = Field(None, description="repr of the value of the cell's last expression (None: none to show)")
    error: str | None = None
    message: str | None = None
    committed: bool = False
    session_ended: bool = Field(False, description="the session is over after this cell")
    exit_code: int | None = None
    timeout: bool = False
    oom: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    time_ms: float = Field(0.0, description="the cell's own time (the driver's clock); a whole run's when it did not report")
    run_ms: float = Field(0.0, description="the sandbox run: start, replay of the earlier cells, the cell")
    replayed: int = Field(0, description="earlier cells replayed before it")
    peak_memory_mb: float | None = None
    sandbox_error: str | None = None

    def text(self, max_chars: int = 20_000) -> str:
        """The result as a chat model reads a tool's answer: output, value, what went wrong."""
        parts = []
        if self.stdout:
            parts.append(_tail(self.stdout, max_chars).rstrip("\n") + (" [stdout truncated]" if self.stdout_truncated else ""))
        if self.stderr:
            parts.append("[stderr]\n" + _tail(self.stderr, max_chars).rstrip("\n")
                         + (" [stderr truncated]" if self.stderr_truncated else ""))
        if self.value is not None:
            parts.append(f"Out[{self.cell}]: {_tail(self.value, max_chars)}")
        if self.status == "timeout":
            parts.append("[timed out]")
        elif self.status == "oom":
            parts.append("[out of memory]")
        elif self.status == "sandbox_error":
            parts.append(f"[the sandbox failed, not your code: {self.sandbox_error}]")
        if self.message:
            parts.append(f"[{self.message}]")
        return "\n".join(parts) if parts else "(no output)"


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else f"...({len(text) - n} characters cut)\n" + text[-n:]


class _Cell:
    """A committed cell: its text, number, own time and what it changed of the session's
    fingerprint (name -> label, None: deleted; None for all of it: not known)."""

    __slots__ = ("fingerprint", "number", "source", "time_s")

    def __init__(self, number: int, source: str, time_s: float, fingerprint: dict[str, str | None] | None) -> None:
        self.number, self.source, self.time_s, self.fingerprint = number, source, time_s, fingerprint


class CodeInterpreter:
    """A sandboxed Python session whose variables persist between cells (see the module).

    ``executor``: what runs the cells (a ``Sandbox``, ``"ray"``, any runner with ``run_many``;
    default: a handle of the session's own on the process-wide sandbox of ``backend``, let go by
    ``close()``). ``limits``: ``InterpreterLimits`` (or a mapping of its fields). ``files``:
    input files in the work dir of every cell (path -> bytes or str). ``seed``: of ``random`` and
    ``numpy.random`` in every cell. Use it as a context manager (``with CodeInterpreter() as
    py:``), or call ``close()``. ``run`` is safe to call from any thread (one cell at a time).
    """

    def __init__(self, executor: Runner | str | None = None, *, backend: str = "auto",
                 limits: InterpreterLimits | Mapping[str, Any] | None = None,
                 files: Mapping[str, bytes | str] | None = None, seed: int = 0) -> None:  # fmt: skip
        limits = interpreter_limits(limits, "CodeInterpreter")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise ValueError(f"seed: expected an int in [0, 2**32), got {seed!r}")
        # (registered by the first session, not on import: a worker started after it compiles the
        # driver once and preloads what it imports; importing this module costs no other run anything)
        register_program(DRIVER)
        self.limits = limits
        self.seed = seed
        self.files = coerce_files(files)
        if REPORT in self.files:
            raise ValueError(f"files {REPORT!r}: the interpreter's own file; choose another name")
        check_files(self.files, (), DRIVER, self._run_limits(1.0, 0))
        self._backend = backend
        self._executor = default_executor(backend, executor)
        # (a handle of its own on the process-wide sandbox: let go by close(); anything given is the caller's)
        self._owns_executor = isinstance(self._executor, SharedSandbox) and self._executor is not executor
        self._lock = threading.Lock()
        self._closed = False
        self._start()

    def _start(self) -> None:
        self.session_id = uuid.uuid4().hex[:12]
        self._history: list[_Cell] = []
        self._cells = 0
        self._spent_s = 0.0
        self._ended: str | None = None
        self._noted: set[tuple[int, str]] = set()
        self._fingerprint: dict[str, str] = {}  # of the session's variables after its last kept cell
        self._last_active = time.monotonic()
        self._busy = False
        if self.limits.idle_timeout_s is not None:
            _reaper.watch(self)

    # -- the API
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ended(self) -> str | None:
        """Why the session is over (a limit, idleness, a replay that failed), or None."""
        return self._ended

    @property
    def cells(self) -> int:
        """Cells run so far (each ``run`` that reached the sandbox or was refused counts)."""
        return self._cells

    @property
    def history(self) -> tuple[str, ...]:
        """The committed cells' text, in order: what the next cell's run replays."""
        return tuple(c.source for c in self._history)

    @property
    def time_spent_s(self) -> float:
        """Sandbox time the session's runs took so far (counted against ``session_time_s``)."""
        return self._spent_s

    def run(self, cell: str) -> CellResult:
        """Run one cell in the session (see the module); never raises for what the cell does or
        for a session that is over (the result says so). ``TypeError`` for a cell that is not a
        str; ``InterpreterClosedError`` after ``close()``."""
        if not isinstance(cell, str):
            raise TypeError(f"cell: expected str, got {type(cell).__name__}")
        with self._lock:
            if self._closed:
                raise InterpreterClosedError("this CodeInterpreter is closed; create a new one")
            self._busy = True
            try:
                return self._run(cell)
            finally:
                self._busy = False
                self._last_active = time.monotonic()
                _reaper.poke()

    def reset(self) -> None:
        """Start over: a new, empty session (its cells forgotten, its limits renewed)."""
        with self._lock:
            if self._closed:
                raise InterpreterClosedError("this CodeInterpreter is closed; create a new one")
            self._start()

    def fork(self) -> CodeInterpreter:
        """A new session in this one's state (its kept cells, the cells and time it has spent of
        its limits), on the same executor; from then on the two go their own ways: several
        continuations of one reasoning prefix, say. Cheap: the state is the cells' text. Close it
        as any session."""
        with self._lock:
            if self._closed:
                raise InterpreterClosedError("this CodeInterpreter is closed; create a new one")
            other = CodeInterpreter(self._executor, backend=self._backend, limits=self.limits, files=self.files, seed=self.seed)
            other._history = list(self._history)  # (a kept cell is never changed: shared)
            other._cells, other._spent_s, other._ended = self._cells, self._spent_s, self._ended
            other._noted, other._fingerprint = set(self._noted), dict(self._fingerprint)
            return other

    def close(self) -> None:
        """Forget the session for good (idempotent). Nothing of it runs between cells, so nothing
        is left anywhere: its cells' text is dropped and the executor handle it made let go."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._history, self._fingerprint = [], {}
            self._ended = "closed"
        _reaper.forget(self)
        if self._owns_executor:
            close = getattr(self._executor, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> CodeInterpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"ended: {self._ended}" if self._ended else "open"
        return f"CodeInterpreter(session={self.session_id!r}, cells={self._cells}, kept={len(self._history)}, {state})"

    # -- the idle reaper's side
    def _idle_deadline(self) -> float | None:
        if self._closed or self._busy or self._ended or self.limits.idle_timeout_s is None:
            return None
        return self._last_active + self.limits.idle_timeout_s

    def _expire(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # a cell is running: its end moves the deadline
        try:
            deadline = self._idle_deadline()
            if deadline is not None and time.monotonic() >= deadline:
                self._history, self._fingerprint = [], {}
                self._ended = f"the session was closed after it was idle for more than {self.limits.idle_timeout_s:g} s"
        finally:
            self._lock.release()

    # -- a cell
    def _result(self, number: int, status: Status, **kw: Any) -> CellResult:
        return CellResult(session=self.session_id, cell=number, status=status, **kw)

    def _run(self, cell: str) -> CellResult:
        lim = self.limits
        remaining = lim.session_time_s - self._spent_s
        if remaining <= 0:
            self._end(f"the session's time budget ({lim.session_time_s:g} s of sandbox time) is spent")
        if self._ended is not None:
            return self._result(self._cells + 1, "ended", session_ended=True, message=f"not run: {self._ended}; start a new session")
        self._cells += 1
        number = self._cells
        last = number >= lim.max_cells
        if last:
            self._end(f"the session ran its {lim.max_cells} cells (max_cells)")
        if len(cell) > lim.max_cell_chars:
            return self._result(number, "error", session_ended=last,
                                message=f"not run: the cell has {len(cell)} characters, over max_cell_chars={lim.max_cell_chars}")  # fmt: skip
        if "\x00" in cell:
            return self._result(number, "error", session_ended=last, message="not run: the cell holds a NUL character")
        try:
            cell.encode("utf-8")
        except UnicodeEncodeError as exc:
            return self._result(number, "error", session_ended=last,
                                message=f"not run: the cell cannot be encoded as UTF-8 ({exc.reason})")  # fmt: skip
        allowance = REPLAY_START_S + REPLAY_FACTOR * sum(c.time_s for c in self._history)
        timeout = min(lim.cell_timeout_s + allowance, 3600.0)
        capped = remaining < timeout  # the session's time budget is the run's limit
        timeout = min(timeout, remaining)
        payload = json.dumps({
            "cells": [c.source for c in self._history], "names": [f"<cell {c.number}>" for c in self._history] + [f"<cell {number}>"],
            "fingerprints": [c.fingerprint for c in self._history], "cell": cell, "seed": self.seed,
            "value_chars": lim.max_value_chars,
        })  # fmt: skip
        request = RunRequest(code=DRIVER, stdin=payload, limits=self._run_limits(timeout, len(payload.encode("utf-8"))),
                             files=self.files, fetch_files=(REPORT,), trace_id=f"interpreter/{self.session_id}/{number}")  # fmt: skip
        (res,) = self._executor.run_many([request])
        result = self._judge(number, cell, res, timeout, capped)
        if self._ended is not None and not result.session_ended:
            result = result.model_copy(update={"session_ended": True, "message": _join(result.message, f"the session is over: {self._ended}")})
        return result

    def _run_limits(self, timeout_s: float, stdin_bytes: int) -> Limits:
        lim = self.limits
        return Limits(timeout_s=timeout_s, memory_mb=lim.memory_mb, max_output_bytes=lim.max_output_bytes + len(MARK.encode()),
                      max_processes=1, max_disk_mb=lim.max_disk_mb, max_file_bytes=lim.max_disk_mb * MiB,
                      max_code_bytes=min(MiB, lim.max_disk_mb * MiB), max_stdin_bytes=max(stdin_bytes, 1),
                      random_seed=self.seed)  # fmt: skip

    def _end(self, why: str) -> None:
        if self._ended is None:
            self._ended = why

    def _judge(self, number: int, cell: str, res: ExecutionResult, timeout: float, capped: bool) -> CellResult:
        """The cell's result from the run's (the sandbox's verdicts; the driver's report only for
        what the cell itself did); commits the cell when it completed."""
        lim = self.limits
        replayed = len(self._history)
        common: dict[str, Any] = {"exit_code": res.exit_code, "run_ms": res.execution_time_ms, "replayed": replayed,
                                  "peak_memory_mb": res.peak_memory_mb}  # fmt: skip
        if res.sandbox_error is not None:
            return self._result(number, "sandbox_error", sandbox_error=res.sandbox_error,
                                message="the sandbox failed (not the cell's doing): the session is as before; run the cell again",
                                **common)  # fmt: skip
        self._spent_s += res.execution_time_ms / 1000
        if res.timeout_hit and capped:  # (stopped by the session's budget: it is spent, however the clock rounded)
            self._spent_s = max(self._spent_s, lim.session_time_s)
        before, started, stderr = res.stderr.partition(MARK)
        started_ok = bool(started)
        stdout, cut = _cap(res.stdout, lim.max_output_bytes)
        common |= {"stdout": stdout, "stderr": stderr, "stdout_truncated": res.stdout_truncated or cut,
                   "stderr_truncated": res.stderr_truncated, "timeout": res.timeout_hit, "oom": res.oom}  # fmt: skip
        report = _read_report(res.files.get(REPORT))
        time_ms = float(report["time_ms"]) if report is not None else res.execution_time_ms
        common["time_ms"] = min(time_ms, res.execution_time_ms)
        notes = self._divergence(report)
        spent = self._spent_s >= lim.session_time_s
        if spent:
            self._end(f"the session's time budget ({lim.session_time_s:g} s of sandbox time) is spent")

        if not started_ok:  # the replay did not get through: the state could not be rebuilt
            common["stderr"] = ""
            if res.timeout_hit and not capped:
                return self._result(number, "timeout", message=_join(notes, (
                    f"not run: replaying the session's {replayed} earlier cells to rebuild its state took longer than "
                    f"their allowance ({timeout - lim.cell_timeout_s:.1f} s); the session is as before: try again")), **common)  # fmt: skip
            if res.timeout_hit:
                return self._result(number, "timeout", message=_join(notes, "not run: the session's time budget ran out "
                                                                             "while its earlier cells were replayed"), **common)  # fmt: skip
            if report is not None and report["status"] == "replay_failed" and isinstance(report.get("cell"), int) \
                    and 0 <= report["cell"] < replayed:  # fmt: skip
                old = self._history[report["cell"]].number
                why = f"cell {old}, which ran before, raised {report['error']} when replayed"
            elif res.oom:
                why = "replaying the earlier cells ran out of memory"
            else:
                why = (f"the interpreter's process ended while the earlier cells were replayed (exit code {res.exit_code}"
                       + (f", {res.signal_name}" if res.signal is not None else "") + ")")  # fmt: skip
                if before.strip():
                    why += ": " + before.strip()[-MAX_ERROR_CHARS:]
            reason = (f"its state could not be rebuilt: {why} (a cell whose outcome depends on something outside the "
                      "program: the clock, os.urandom, the files it finds)")  # fmt: skip
            self._end(reason)
            self._history, self._fingerprint = [], {}
            return self._result(number, "ended", session_ended=True,
                                message=_join(notes, f"not run: the session is over: {reason}; start a new session"),
                                **common)  # fmt: skip
        if res.timeout_hit:
            why = "the session's time budget ran out" if capped else (
                f"the cell ran past its time limit ({lim.cell_timeout_s:g} s; its run was stopped at {timeout:.1f} s, "
                f"with the allowance for starting and replaying the {replayed} earlier cells)")
            return self._result(number, "timeout", message=_join(notes, f"{why}: its effects were not kept; the "
                                                                         "session is as before it"), **common)  # fmt: skip
        if res.oom:
            return self._result(number, "oom", message=_join(notes, f"the session ran out of memory (memory_mb={lim.memory_mb}) "
                                                                     "in this cell: its effects were not kept"), **common)  # fmt: skip
        if report is not None and report["status"] == "ok" and res.exit_code == 0:
            fp = report.get("fingerprint")
            delta: dict[str, str | None] | None = None
            if isinstance(fp, dict):  # (kept as what the cell changed: a session's fingerprints grow with it)
                delta = {k: v for k, v in fp.items() if self._fingerprint.get(k) != v}
                delta |= {k: None for k in self._fingerprint if k not in fp}
            self._fingerprint = fp if isinstance(fp, dict) else {}
            self._history.append(_Cell(number, cell, min(float(report["time_ms"]), res.execution_time_ms) / 1000, delta))
            value = report.get("value")
            return self._result(number, "ok", committed=True, value=value if isinstance(value, str) else None,
                                message=notes, **common)  # fmt: skip
        if report is not None and report["status"] == "error":
            return self._result(number, "error", error=str(report.get("error"))[:MAX_ERROR_CHARS],
                                message=_join(notes, "the cell raised: its effects were not kept; the session is as before it"),
                                **common)  # fmt: skip
        how = f"exit code {res.exit_code}" + (f", {res.signal_name}" if res.signal is not None else "")
        return self._result(number, "error", message=_join(notes, (
            f"the cell ended the interpreter's process before it finished ({how}: os._exit, a signal, a crash): its "
            "effects were not kept; the session is as before it")), **common)  # fmt: skip

    def _divergence(self, report: dict[str, Any] | None) -> str | None:
        """A note naming the variables a replay gave other values than the first run did (each once)."""
        if report is None:
            return None
        found: list[str] = []
        for item in report.get("diverged") or []:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], str)):
                continue
            if not 0 <= item[0] < len(self._history):
                continue
            key = (self._history[item[0]].number, item[1][:80])
            if key not in self._noted:
                self._noted.add(key)
                found.append(f"{key[1]} (cell {key[0]})")
        if not found:
            return None
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        return (f"note: the earlier cells are run again before each cell, and this time they gave {shown} another "
                "value than before (it comes from outside the program: the clock, os.urandom, uuid...)")


def _join(a: str | None, b: str | None) -> str | None:
    return b if not a else a if not b else f"{a}; {b}"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` UTF-8 bytes (the run's own cap leaves room for the mark)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


def _read_report(data: bytes | None) -> dict[str, Any] | None:
    """The driver's report, checked field by field (it comes from the jail: untrusted)."""
    if data is None or len(data) > MAX_REPORT_BYTES:
        return None
    try:
        report = json.loads(data)
    except ValueError:
        return None
    if not isinstance(report, dict) or report.get("status") not in ("ok", "error", "replay_failed"):
        return None
    t = report.get("time_ms")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e9:
        return None
    fp = report.get("fingerprint")
    if fp is not None and not (isinstance(fp, dict) and len(fp) <= MAX_FINGERPRINT_NAMES
                               and all(isinstance(k, str) and isinstance(v, str) for k, v in fp.items())):  # fmt: skip
        report["fingerprint"] = None
    return report


class _Reaper:
    """One thread for every session with an idle timeout: closes each when its deadline passes
    (the thread ends when no session is watched, and starts again with the next)."""

    def __init__(self) -> None:
        self._sessions: weakref.WeakSet[CodeInterpreter] = weakref.WeakSet()
        self.after_fork()

    def after_fork(self) -> None:
        """(In a forked child: the parent's thread is not there, and its lock may have been held.)"""
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, session: CodeInterpreter) -> None:
        with self._cond:
            self._sessions.add(session)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="code-env-interpreter-reaper", daemon=True)
                self._thread.start()
            self._cond.notify()

    def forget(self, session: CodeInterpreter) -> None:
        with self._cond:
            self._sessions.discard(session)
            self._cond.notify()

    def poke(self) -> None:
        """A deadline moved (a cell ended)."""
        with self._cond:
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due: list[CodeInterpreter] = []
                nearest: float | None = None
                for s in list(self._sessions):
                    deadline = s._idle_deadline()
                    if deadline is None:
                        if s.closed or s.ended:
                            self._sessions.discard(s)
                    elif deadline <= now:
                        due.append(s)
                    elif nearest is None or deadline < nearest:
                        nearest = deadline
                if not due:
                    if not self._sessions:
                        self._thread = None
                        return
                    self._cond.wait(None if nearest is None else nearest - now)
                    continue
            for s in due:
                s._expire()


_reaper = _Reaper()
# a forked child has no reaper thread (only the parent's state): it starts its own when it needs one
os.register_at_fork(after_in_child=_reaper.after_fork)
