"""Running a candidate program against a task's tests — the rule that defeats reward hacking:
the sandbox receives the program and the test *inputs*; it returns outputs, serialised; the
comparison with the expected values runs here, in the trusted parent.

Function tasks: a sandbox run executes the program once (as a module named ``__solution__``) and
calls the entry point on the inputs in order. Results leave on a pipe of their own (the original
stdout, moved to a descriptor chosen at random), tagged with a per-run nonce, while the program's
own prints go to stderr. Stdio tasks: one run per test, all at once through ``run_many``. A test may
carry a special checker (task data): it judges the candidate's outputs in a sandbox run of its own,
afterwards. Public and hidden tests never share a run, so a program cannot echo hidden inputs into
feedback the agent sees.

Nothing the candidate's process writes is trusted (it shares the process with the driver, so it
can find the nonce and write result lines of its own):

* **the result channel is untrusted data**: every line is bounded in length, parsed with bounded
  nesting and number sizes, and checked against a strict schema and a strict order (a header, one
  line per call in order, an end line, nothing after). Anything else on the channel — a forged,
  duplicate, extra, malformed or late line — means the program tampered with it: none of its
  answers count (``Verification.tampered``). A returned value that breaks the bounds fails its
  test. The host's parsing is bounded by the run's own budget (``PARSE_CHARS_PER_S``,
  ``PARSE_NODES_PER_S``), measured before anything is parsed: a program cannot make the host
  spend more than a fraction of what its run may spend. No input makes this module raise, and none makes a ``sandbox_error``.
* **time is measured outside the program**: a run's budget is *one* per-test limit plus start-up
  (wall clock and CPU, enforced by the sandbox). Every answer a run gave was therefore computed
  within one per-test limit, whatever timings the program reports (they are informational,
  ``CaseResult.elapsed_ms``, never a verdict). A run stopped by its budget after some answers is
  resumed from the first unanswered call in a fresh run; a run stopped before its first answer, or
  whose call in flight had most of its limit by the host's clocks (``_stalled``: a program that
  answers one call per process and then stalls), means that call is too slow: it times out and
  the remaining calls are skipped. So an infinite
  loop costs one per-test limit plus start-up, not the sum of all limits. And all runs of a sample
  together are bounded by its grade's time budget (``Job.budget``, ``registry.budget``): a run
  gets at most what is left of it as its limit; once it is spent, the test due is a timeout
  (``Verification.budget_spent``) and no more runs start.
* **a call that spends its budget and then fails is a timeout**: a too-slow program could arm its
  own timer (``signal.alarm``, a thread calling ``_thread.interrupt_main``, ``os._exit``) and raise
  or quit just before the limit, turning the timeout tier into a wrong answer's 0. So a call that
  ends in an error, or ends its run, after ``SLOW_FRACTION`` of the per-test limit is a timeout.
  Its time is the larger of what the driver measured and the host's evidence: the run's CPU time
  (the sandbox's clock) not accounted for by the other calls' reported times, less ``LOAD_CPU_S``
  for start-up. Reported times that add up to more than the run's wall clock are tampering. A
  fast wrong answer is still a wrong answer.
* **a special checker that fails on a candidate's output** is the candidate's failure; only a
  checker that also fails on the reference's outputs (the expected values) is a task defect
  (``sandbox_error``).
"""

from __future__ import annotations

import itertools
import json
import operator
import secrets
from collections.abc import Sequence
from importlib.resources import files
from typing import Annotated, Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sandbox import ExecutionResult, LanguageUnavailableError, Limits, RunRequest, register_program

from .budget import MIN_RUN_S, START_UP_S, Budget
from .comparators import stdout_equal, values_equal
from .phases import phase
from .schema import FUNCTION_LANGUAGES, Task, TestCase

CaseStatus = Literal["passed", "failed", "error", "timeout", "missing", "skipped"]
FEEDBACK_CHARS = 2000
MAX_VALUE_CHARS = 1 << 20  # the JSON text of one returned value
MAX_LINE_CHARS = 2 * MAX_VALUE_CHARS + (16 << 10)  # a result line: the value, escaped, and its envelope
MAX_DEPTH = 100  # nesting of a returned value
DRIVER_OUTPUT_BYTES = 8 << 20  # the result channel of one run
# The host's parsing of a run's returned values is bounded by the run's own budget (a small
# fraction of it, whatever the program returns): per second of it, this many characters of JSON
# (measured before parsing, ~0.1 s per MiB at worst) and values (~1 us each to parse, at worst).
PARSE_CHARS_PER_S = 1 << 20
PARSE_NODES_PER_S = 100_000
MAX_LINE_STRUCTURE = 1000  # characters of a result line outside its strings (the driver's: ~60)
SLOW_FRACTION = 0.8  # a call that ends in an error (or ends the run) after this much of its limit is a timeout
LOAD_CPU_S = 0.1  # CPU time a run may spend outside the calls it reports (start-up, loading) before it counts
REPORT_SLACK_S = 0.05  # how far the per-call times a run reports may exceed the run's wall clock
CHANNEL_LOST = 113  # the driver's exit status when it cannot write to its channel any more
MAX_PROGRAM_BYTES = Limits().max_code_bytes  # the largest candidate program run, either task kind
CHECKER_LIMITS = Limits(timeout_s=30.0, memory_mb=512, max_stdin_bytes=64 << 20)
# Written on stderr by the driver of a joint run right before its first hidden test: what follows
# is what the program printed while the hidden tests ran, which no agent is shown (``shown_output``)
HIDDEN_MARK = "\x1e[code-env: the hidden tests start here; nothing below is shown]\x1e\n"

# Runs inside the sandbox. Reads {"nonce", "code", "entry_point", "cases", "start", "hidden_from"}
# from stdin; calls the entry point on cases[0], cases[1], ... (test numbers start, start + 1, ...).
# Everything it needs is bound before the candidate's code runs (a candidate that patches
# json, os or builtins changes nothing here); the nonce and the channel's descriptor live only
# in a closure, never in a global. It imports only what every worker holds already (json, os,
# sys, time, fcntl; resource is a built-in extension): a traceback is formatted here, from the
# frames, not by the ``traceback`` module (whose import cost ~3 ms of every run).
# ``hidden_from``: the first hidden test of a joint run (``Job.which == "both"``; None: none), before
# which the driver writes ``HIDDEN_MARK`` on stderr, so that what the program prints from then on
# is told apart from what it printed on the public tests (``shown_output``).
DRIVER = r'''
def _driver():
    globals().pop("_driver", None)
    import fcntl, json, os, resource, sys, time
    spec = json.loads(sys.stdin.read())
    tag = spec.pop("nonce").encode() + b" "
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = soft - 8 if 16 < soft < 4096 else 4000
    lowest = 10 + int.from_bytes(os.urandom(2), "big") % (top - 10)
    out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, lowest)
    os.dup2(2, 1)
    write, exit_, dumps, perf = os.write, os._exit, json.dumps, time.perf_counter
    isinstance_, callable_, sorted_, list_, len_, type_, str_, int_, id_, set_, enumerate_, repr_ = (
        isinstance, callable, sorted, list, len, type, str, int, id, set, enumerate, repr)
    streams = (sys.stdout, sys.stderr)

    def emit(obj):
        try:
            data = tag + dumps(obj).encode() + b"\n"
            while data:
                data = data[write(out, data):]
        except BaseException:
            exit_(CHANNEL_LOST)  # the program closed or broke the channel: nothing more can be reported

    def text(e, limit):  # valid UTF-8 (no lone surrogate), as the host's schema requires
        try:
            return str_(e)[:limit].encode("utf-8", "replace").decode("utf-8")
        except BaseException:
            return "<unprintable>"

    def only(e):  # the last line of a traceback, as Python prints it
        t = type_(e)
        name = t.__qualname__ if t.__module__ in ("builtins", "__main__") else t.__module__ + "." + t.__qualname__
        message = text(e, 500)
        return name + (": " + message if message else "") + "\n"

    def frames(e):  # from the candidate's first frame on: none of the driver's
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "candidate.py":
            tb = tb.tb_next
        lines = ["Traceback (most recent call last):\n"] if tb is not None else []
        while tb is not None and len_(lines) < 200:
            co = tb.tb_frame.f_code
            lines.append('  File "' + str_(co.co_filename) + '", line ' + str_(tb.tb_lineno) + ", in " + str_(co.co_name) + "\n")
            if co.co_filename == "candidate.py" and 0 < (tb.tb_lineno or 0) <= len_(source):
                lines.append("    " + source[tb.tb_lineno - 1].strip() + "\n")
            tb = tb.tb_next
        return lines + [only(e)]

    def trace(e):  # Python's layout, chained exceptions included (at most 5)
        try:
            parts, seen = [], set_()
            while e is not None and id_(e) not in seen and len_(seen) < 5:
                seen.add(id_(e))
                parts.append("".join(frames(e)))
                if e.__cause__ is not None:
                    e, link = e.__cause__, "\nThe above exception was the direct cause of the following exception:\n\n"
                elif e.__context__ is not None and not e.__suppress_context__:
                    e, link = e.__context__, "\nDuring handling of the above exception, another exception occurred:\n\n"
                else:
                    break
                parts.append(link)
            return "".join(parts[::-1])[-2000:].encode("utf-8", "replace").decode("utf-8")
        except BaseException:
            return None

    def plain(x):
        if isinstance_(x, (set, frozenset)):
            try:
                return sorted_(x)
            except TypeError:
                return list_(x)
        raise TypeError("return value of type " + type_(x).__name__ + " is not JSON data")

    def flush():
        for stream in streams:
            try:
                stream.flush()
            except BaseException:
                pass

    def finish(status):
        flush()
        exit_(status)

    def hidden_start():  # what the program prints from here on is not shown (shown_output)
        flush()
        try:
            write(2, HIDDEN_MARK)
        except BaseException:
            pass

    code, entry, cases, start, hidden_from = spec["code"], spec["entry_point"], spec["cases"], spec["start"], spec.get("hidden_from")
    del spec
    source = code.splitlines()
    ns = {"__name__": "__solution__", "__builtins__": __builtins__, "__file__": "candidate.py"}
    try:
        with open("candidate.py", "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(code)  # so that the program's own tools (linecache) find its lines
    except OSError:
        pass
    if hidden_from is not None and hidden_from <= start:
        hidden_start()
    try:
        exec(compile(code, "candidate.py", "exec"), ns)
    except SystemExit as e:
        if e.code is None or (type_(e.code) is int_ and e.code == 0):
            emit({"k": "no_entry_point", "reason": "the program exited (status 0) while loading, before any test"})
        else:
            emit({"k": "load_error", "error": "SystemExit", "message": text(e, 500), "traceback": trace(e)})
        finish(0)
    except BaseException as e:
        emit({"k": "load_error", "error": text(type_(e).__name__, 100), "message": text(e, 500), "traceback": trace(e)})
        finish(0)
    fn = ns.get(entry)
    if not callable_(fn):
        emit({"k": "no_entry_point", "reason": "the program defines no function " + repr_(entry)})
        finish(0)
    emit({"k": "loaded"})
    for k, case in enumerate_(cases):
        if start + k == hidden_from:
            hidden_start()
        t = perf()
        try:
            r = fn(*case["args"], **case["kwargs"])
        except BaseException as e:
            s = perf() - t
            emit({"k": "error", "i": start + k, "error": text(type_(e).__name__, 100), "message": text(e, 500),
                  "traceback": trace(e), "s": s})
            continue
        s = perf() - t
        try:
            v = dumps(r, default=plain)
        except BaseException as e:
            emit({"k": "error", "i": start + k, "error": "TypeError", "message": "the return value is not JSON data: "
                  + text(e, 400), "traceback": None, "s": s})
            continue
        if len_(v) > MAX_VALUE_CHARS:
            emit({"k": "error", "i": start + k, "error": "ValueError", "message": "the return value is "
                  + str_(len_(v)) + " characters of JSON, over the limit of " + str_(MAX_VALUE_CHARS),
                  "traceback": None, "s": s})
        else:
            emit({"k": "result", "i": start + k, "value": v, "s": s})
    emit({"k": "end", "n": len_(cases)})
    finish(0)


_driver()
'''.replace("MAX_VALUE_CHARS", str(MAX_VALUE_CHARS)).replace("CHANNEL_LOST", str(CHANNEL_LOST)).replace(
    "HIDDEN_MARK", repr(HIDDEN_MARK.encode()))

register_program(DRIVER)  # compiled once per worker, not in every run (sandbox._programs)

# The same driver for a JavaScript program (Node.js), the same protocol: the spec on stdin, the
# tagged lines on the result channel (fd 1, written by the driver alone: the program's console
# and process.stdout go to stderr), ``HIDDEN_MARK`` on stderr before the first hidden test. The
# candidate runs as a script of this context (``vm``): its top-level functions and bindings are
# the entry point's candidates, the driver's own (the nonce, the channel) live in a closure it
# cannot reach (what it can reach, ``__code_env_driver``, runs the tests once, on the function
# its caller gives, and emits only what the tests return). A value is what JSON.stringify makes of it (undefined: null; a Set: its sorted
# elements); a thrown value is the test's error; a parse error of the program, its syntax error.
_JS_HARNESS = r"""
const __code_env_driver = (() => {
  const fs = require('fs'), util = require('util');
  const writeSync = fs.writeSync, stringify = JSON.stringify, hrtime = process.hrtime.bigint;
  const exit = (process.reallyExit || process.exit).bind(process), from = Array.from, bytes = Buffer.from;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  /* all of it, whatever the descriptor's mode (Node makes its pipes non-blocking): true when written */
  const writeAll = (fd, text) => {
    const buf = bytes(text);
    for (let off = 0; off < buf.length;) {
      try { off += writeSync(fd, buf, off); } catch (e) {
        if (e.code !== 'EAGAIN') return false;
        Atomics.wait(pause, 0, 0, 1);
      }
    }
    return true;
  };
  const spec = JSON.parse(fs.readFileSync(0, 'utf8'));
  const tag = spec.nonce + ' ';
  delete spec.nonce;
  const stderr = (text) => { writeAll(2, text); };
  for (const name of ['log', 'info', 'debug']) console[name] = (...a) => stderr(util.format(...a) + '\n');
  process.stdout.write = (chunk) => { stderr(typeof chunk === 'string' ? chunk : String(chunk)); return true; };
  const emit = (obj) => { if (!writeAll(1, tag + stringify(obj) + '\n')) exit(CHANNEL_LOST); };
  const text = (x, limit) => { try { return String(x).slice(0, limit); } catch (e) { return '<unprintable>'; } };
  const name = (e) => text(e !== null && typeof e === 'object' && e.name ? e.name : typeof e, 100);
  const message = (e) => text(e !== null && typeof e === 'object' && 'message' in e ? e.message : e, 500);
  const trace = (e) => (e !== null && typeof e === 'object' && typeof e.stack === 'string') ? text(e.stack, 2000) : null;
  const plain = (key, value) => {
    if (value instanceof Set) { const a = from(value); try { a.sort(); } catch (e) { /* as it is */ } return a; }
    if (typeof value === 'bigint') throw new TypeError('a BigInt is not JSON data');
    return value;
  };
  const seconds = (t) => Number(hrtime() - t) / 1e9;
  const { code, entry_point: entry, cases, start, hidden_from: hiddenFrom } = spec;
  if (hiddenFrom !== null && hiddenFrom <= start) stderr(HIDDEN_MARK);
  let used = false;
  return (load) => {
    if (used) return;
    used = true;
    let fn;
    try {
      fn = load(entry, code);
    } catch (e) {
      emit({ k: 'load_error', error: name(e), message: message(e), traceback: trace(e) });
      exit(0);
    }
    if (typeof fn !== 'function') {
      emit({ k: 'no_entry_point', reason: 'the program defines no function ' + stringify(entry) });
      exit(0);
    }
    emit({ k: 'loaded' });
    cases.forEach((c, k) => {
      if (start + k === hiddenFrom) stderr(HIDDEN_MARK);
      const t = hrtime();
      let r;
      try {
        if (Object.keys(c.kwargs).length) throw new TypeError('keyword arguments: a JavaScript function takes none');
        r = fn(...c.args);
      } catch (e) {
        emit({ k: 'error', i: start + k, error: name(e), message: message(e), traceback: trace(e), s: seconds(t) });
        return;
      }
      const s = seconds(t);
      let v;
      try {
        if (r instanceof Promise) throw new TypeError('the function returned a Promise, not a value');
        v = stringify(r === undefined ? null : r, plain);
      } catch (e) {
        emit({ k: 'error', i: start + k, error: 'TypeError', message: 'the return value is not JSON data: ' + message(e),
               traceback: null, s });
        return;
      }
      if (v.length > MAX_VALUE_CHARS) {
        emit({ k: 'error', i: start + k, error: 'RangeError', message: 'the return value is ' + v.length +
               ' characters of JSON, over the limit of MAX_VALUE_CHARS', traceback: null, s });
      } else {
        emit({ k: 'result', i: start + k, value: v, s });
      }
    });
    emit({ k: 'end', n: cases.length });
    exit(0);
  };
})();
""".replace("MAX_VALUE_CHARS", str(MAX_VALUE_CHARS)).replace("CHANNEL_LOST", str(CHANNEL_LOST)).replace(
    "HIDDEN_MARK", json.dumps(HIDDEN_MARK)).strip()
JS_DRIVER = _JS_HARNESS + r"""
__code_env_driver((entry, code) => {
  const vm = require('vm'), fs = require('fs');
  try { fs.writeFileSync('candidate.js', code); } catch (e) { /* its lines are for stack traces only */ }
  vm.runInThisContext(code, { filename: 'candidate.js' });
  return vm.runInThisContext('typeof ' + entry + " === 'function' ? " + entry + ' : undefined');
});
"""
# TypeScript: the program is compiled (``sandbox._compile``), so the driver goes into its source:
# the harness first, on the program's first line (so that the compiler's line numbers are the
# program's own), then the program, then the call, which finds the entry point among the module's
# bindings. The spec on stdin carries no code; the harness reads it before the program runs.
TS_PREFIX = " ".join(line.strip() for line in _JS_HARNESS.splitlines()) + " "
TS_SUFFIX = "\n;__code_env_driver((entry: string) => eval('typeof ' + entry + \" === 'function' ? \" + entry + ' : undefined'));\n"


def _c_string(text: str) -> str:
    """``text`` as a C string literal (every byte that is not a letter, a digit or a space as a
    three-digit octal escape, which, unlike a hex one, never runs into the next character)."""
    return '"' + "".join(chr(b) if chr(b).isalnum() or b == 32 else f"\\{b:03o}" for b in text.encode()) + '"'


# C++: the driver (drivers/cpp_driver.hpp) goes around the program's source, which is compiled
# with it: its header first (the JSON conversions, the channel, the loop over the tests), then
# the program, numbered as its own file (``#line 1 "candidate.cpp"``: the compiler's messages name
# the program's lines), then the call, which names the entry point: each argument converts from
# JSON to the type of the parameter the overload resolution picks, and the value back.
# ``CPP_DRIVER_FILES``: the names the driver's own lines have in the compiler's messages: a
# program whose every error is there compiles, but has no function the driver can call.
_CPP = (files("registry") / "drivers" / "cpp_driver.hpp").read_text(encoding="utf-8")
_CPP = (_CPP.replace("CHANNEL_LOST", str(CHANNEL_LOST)).replace("MAX_VALUE_CHARS", str(MAX_VALUE_CHARS))
        .replace("HIDDEN_MARK", _c_string(HIDDEN_MARK)))  # fmt: skip
CPP_PREFIX, CPP_SUFFIX = _CPP.split("//@@CANDIDATE@@\n")
CPP_DRIVER_FILES = ("code-env-driver", "code-env-driver-call")
# The languages whose programs answer function tasks: a driver of their own speaks the protocol
# above (for a compiled one, ``IN_SOURCE``: the driver is compiled with the program).
FUNCTION_DRIVERS = {"python": DRIVER, "javascript": JS_DRIVER, "typescript": TS_SUFFIX, "cpp": CPP_SUFFIX}
IN_SOURCE = {"typescript": (TS_PREFIX, TS_SUFFIX), "cpp": (CPP_PREFIX, CPP_SUFFIX)}
assert tuple(FUNCTION_DRIVERS) == FUNCTION_LANGUAGES


def driven_program(language: str, code: str, entry_point: str) -> str:
    """The source a ``language`` program runs as, for a function task: the driver itself (which
    gets the program's code in its spec), or, for a compiled language, the program inside its
    driver."""
    if language not in IN_SOURCE:
        return FUNCTION_DRIVERS[language]
    prefix, suffix = IN_SOURCE[language]
    if language == "cpp":
        return prefix + code + ("" if code.endswith("\n") else "\n") + suffix.replace("ENTRY_POINT", entry_point)
    return prefix + code + suffix


def driver_refusal(language: str, compiler_says: str) -> str | None:
    """When a compiled program fails to compile with its driver (``IN_SOURCE``) but every error is
    in the driver's own lines, the program itself compiles but has no function the driver can
    call (none of that name, or one whose types are not JSON data): the reason, from the
    compiler's first error; None when the program has errors of its own (its syntax error)."""
    if language != "cpp":
        return None
    errors = [line for line in compiler_says.splitlines() if ": error: " in line or ": fatal error: " in line]
    if not errors or not all(line.startswith(tuple(f"{f}:" for f in CPP_DRIVER_FILES)) for line in errors):
        return None
    first = errors[0].split(": error: ", 1)[-1].split(": fatal error: ", 1)[-1]
    return _short(f"the program has no function the driver can call with JSON data: {first}")

SYNTAX_CHECK = r'''
import sys
try:
    compile(sys.stdin.read(), "solution.py", "exec")
except (SyntaxError, ValueError) as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
'''


register_program(SYNTAX_CHECK)


class CaseResult(BaseModel):
    """One test's outcome. ``expected`` and ``got`` are shown only for public tests.
    ``elapsed_ms``: for function tests, the call's time *as the program's process reported it*
    (informational; limits are decided by the sandbox's own clocks), for stdio tests the run's."""

    index: int
    status: CaseStatus
    input: str = ""
    expected: str | None = None
    got: str | None = None
    error: str | None = None
    traceback: str | None = None
    elapsed_ms: float | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


class Verification(BaseModel):
    """Everything a grader needs: per-case results and what went wrong with the run(s).

    ``tampered``: why the result channel cannot be believed (none of the answers count);
    ``no_answer``: the program answered nothing (no entry point, it raised or ended while being
    loaded, before any test, every call returned None, or no stdio run printed anything, crashed
    or not), the "no attempt" of the reward;
    ``program_runs``: how many of ``executions`` ran the program (checker runs follow them);
    ``budget_s``: the grade's time budget it ran under (``registry.budget``; None: none);
    ``spent_s``: what its program runs were charged (the sandbox's wall clock, each at most its
    limit); ``budget_spent``: the budget stopped it (a run cut short, or not started);
    ``hidden_part``: a joint job's hidden verification (``Job``); the runs that served both are in
    this one's ``executions``, the hidden part holds only its own (its stdio runs, its checkers)."""

    kind: Literal["function", "stdio"] | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    syntax_error: str | None = None
    load_error: str | None = None
    timeout: bool = False
    oom: bool = False
    tampered: str | None = None
    no_answer: bool = False
    sandbox_error: str | None = None
    executions: list[ExecutionResult] = Field(default_factory=list)
    program_runs: int = 0
    budget_s: float | None = None
    spent_s: float = 0.0
    budget_spent: bool = False
    hidden_part: Verification | None = Field(
        None, description="of a joint job (Job.which == 'both'): its hidden tests' verification; this one is the public tests'")

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def total(self) -> int:
        return len(self.cases)


class Runner(Protocol):
    """Whatever runs programs: a ``Sandbox`` or any executor with the same ``run_many`` (results
    in request order). Verification needs nothing else, so executors plug in unchanged."""

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]: ...


class Job(NamedTuple):
    """One verification to do: a program against the public or the hidden tests of a task, or both
    (``"both"``, a joint job: one verification of each, the hidden one in the public one's
    ``hidden_part``); ``budget``: the sample's total time budget, shared by its jobs
    (``registry.budget``). ``trace_id``: what its runs' trace ids start with (``.../public``);
    of a joint job, the sample's own, to which its runs add ``/public+hidden`` (a function
    task's runs, which serve both), ``/public/<k>``, ``/hidden/<k>`` (a stdio task's).

    A joint job is for a grade that shows no observation between its public and its hidden tests
    (a single-turn grade): a function task's program then answers both in one run, public tests
    first (``HIDDEN_MARK`` between them on its stderr); a stdio task's hidden runs follow its public
    ones a round later, in the same phase, sharing one compile check, and do not start when that
    check failed or the public runs spent the budget. Joint jobs run in the hidden phase
    (``registry.phases``): never beside a run whose output an agent sees before its hidden tests."""

    task: Task
    code: str
    which: Literal["public", "hidden", "both"] = "public"
    trace_id: str | None = None
    budget: Budget | None = None
    language: str = "python"  # a stdio task's program may be in any language the sandbox runs


def shown_output(stderr: str) -> str:
    """What a function task's run printed on its public tests: its stderr up to ``HIDDEN_MARK``
    (all of it in a run without hidden tests). The mark is written by the driver before the first
    hidden test of a joint run; a program that prints it itself only hides its own output."""
    return stderr.partition(HIDDEN_MARK)[0]


def run_limits(task: Task, stdin_chars: int = 0) -> Limits:
    """One function-task run: one per-test limit plus start-up (and the time to read its input),
    wall clock and CPU alike. A run that needs more for several calls is resumed, never extended."""
    budget = min(task.timeout_s + START_UP_S + stdin_chars / 50e6, 600.0)
    return Limits(timeout_s=budget, cpu_time_s=budget, memory_mb=task.memory_mb, max_stdin_bytes=64 << 20,
                  max_output_bytes=DRIVER_OUTPUT_BYTES)  # fmt: skip


def verify(task: Task, code: str, sandbox: Runner, *, which: Literal["public", "hidden"] = "public",
           trace_id: str | None = None) -> Verification:  # fmt: skip
    """Run ``code`` against the task's public or hidden tests."""
    return verify_many([Job(task, code, which, trace_id)], sandbox)[0]


def verify_many(jobs: Sequence[Job], runner: Runner) -> list[Verification]:
    """Verify many (task, program, test group) jobs at once, results in job order: first every
    public job, then every hidden and joint one (``registry.phases``: a hidden run never runs at the
    same time as a run whose output an agent sees, in this process, on any runner). Within a phase
    every program run of every job goes to the runner in one ``run_many`` (so they run
    concurrently); runs stopped by their budget after some answers are resumed, all together, in
    the next ``run_many`` (and a joint stdio job's hidden runs with them); then every checker run."""
    out: list[Verification | None] = [None] * len(jobs)
    for which, members in (("public", ("public",)), ("hidden", ("hidden", "both"))):
        idx = [k for k, job in enumerate(jobs) if job.which in members]
        if idx:
            with phase(which):  # type: ignore[arg-type]
                for k, v in zip(idx, _verify_phase([jobs[k] for k in idx], runner), strict=True):
                    out[k] = v
    assert all(v is not None for v in out), "a job that is neither public, hidden nor both"
    return [v for v in out if v is not None]


def _verify_phase(jobs: Sequence[Job], runner: Runner) -> list[Verification]:
    """``verify_many`` of the jobs of one phase."""
    plans = [_plan(job) for job in jobs]
    while True:
        todo = [(plan, plan.take()) for plan in plans]
        todo = [(plan, reqs) for plan, reqs in todo if reqs]
        if not todo:
            break
        results = runner.run_many([r for _, reqs in todo for r in reqs])
        at = 0
        for plan, reqs in todo:
            plan.feed(results[at : at + len(reqs)])
            at += len(reqs)
    verifications: list[Verification] = []
    pending: list[tuple[Verification, list[_CheckItem], str | None]] = []
    for plan in plans:
        parts = plan.finish()
        for v, checks, prefix in parts:
            if checks and not v.sandbox_error and not v.tampered:
                pending.append((v, checks, prefix))
        first = parts[0][0]
        if len(parts) > 1:
            first.hidden_part = parts[1][0]
        verifications.append(first)
    if pending:
        _run_checkers(pending, runner)
    return verifications


_CheckItem = tuple[CaseResult, TestCase, Any]
# a verification, the outputs its task's checker must judge, and its checker runs' trace id prefix
_Part = tuple[Verification, list[_CheckItem], "str | None"]


class _Plan(Protocol):
    def take(self) -> list[RunRequest]: ...  # the runs wanted now ([] when done)
    def feed(self, results: list[ExecutionResult]) -> None: ...
    def finish(self) -> list[_Part]: ...  # the job's verification (and a joint job's hidden one)


class _Done:
    """A verification decided without running anything."""

    def __init__(self, v: Verification) -> None:
        self.v = v

    def take(self) -> list[RunRequest]:
        return []

    def feed(self, results: list[ExecutionResult]) -> None:
        raise AssertionError("nothing was asked")

    def finish(self) -> list[_Part]:
        return [(self.v, [], None)]


def function_task_refusal(problem_id: str, language: str) -> str:
    """Why a ``language`` program cannot answer a function task."""
    *rest, last = FUNCTION_DRIVERS
    return (f"{problem_id}: a function task's tests call the program's function through a driver, which exists for "
            f"{', '.join(rest)} and {last}; a {language} program can answer stdio tasks")


def _plan(job: Job) -> _Plan:
    task, code, which, trace_id, budget, language = job
    if task.kind == "function" and language not in FUNCTION_DRIVERS:
        raise LanguageUnavailableError(function_task_refusal(task.problem_id, language))
    if which == "both":
        return _joint_plan(task, code, trace_id, budget, language)
    cases = task.public_tests if which == "public" else task.hidden_tests
    limit = None if budget is None else budget.budget_s
    if not cases:
        return _Done(Verification(budget_s=limit))
    refused = refuse_program(code)
    if refused is not None:
        return _Done(Verification(kind=task.kind, syntax_error=refused, budget_s=limit))
    if task.kind == "function":
        return _FunctionPlan(task, cases, code, len(cases) if which == "public" else 0, trace_id, budget, language=language)
    return _StdioPlan(task, cases, code, which == "public", trace_id, budget, language=language)


def _joint_plan(task: Task, code: str, root: str | None, budget: Budget | None, language: str = "python") -> _Plan:
    """A joint job's plan (see ``Job``): one function plan over the public and then the hidden
    tests, or a stdio plan of each in sequence; a group without tests, or a program refused before
    it runs, is planned apart."""
    public_id, hidden_id = (None, None) if root is None else (f"{root}/public", f"{root}/hidden")
    if not task.public_tests or not task.hidden_tests or refuse_program(code) is not None:
        return _Both(_plan(Job(task, code, "public", public_id, budget, language)),
                     _plan(Job(task, code, "hidden", hidden_id, budget, language)))
    if task.kind == "function":
        run_id = None if root is None else f"{root}/public+hidden"
        return _FunctionPlan(task, [*task.public_tests, *task.hidden_tests], code, len(task.public_tests), run_id,
                             budget, joint=(public_id, hidden_id), language=language)  # fmt: skip
    first = _StdioPlan(task, task.public_tests, code, True, public_id, budget, language=language)
    return _Chain(first, _StdioPlan(task, task.hidden_tests, code, False, hidden_id, budget, compiled_by=first,
                                    language=language))  # fmt: skip


class _Both:
    """Two plans side by side, round by round (a joint job planned apart)."""

    def __init__(self, public: _Plan, hidden: _Plan) -> None:
        self.plans = (public, hidden)
        self.sizes = (0, 0)

    def take(self) -> list[RunRequest]:
        wanted = [p.take() for p in self.plans]
        self.sizes = (len(wanted[0]), len(wanted[1]))
        return wanted[0] + wanted[1]

    def feed(self, results: list[ExecutionResult]) -> None:
        a = self.sizes[0]
        for plan, mine in zip(self.plans, (results[:a], results[a:]), strict=True):
            if mine:
                plan.feed(mine)

    def finish(self) -> list[_Part]:
        return [self.plans[0].finish()[0], self.plans[1].finish()[0]]


class _Chain:
    """A joint stdio job: its public runs (and the compile check), then, a round later, its hidden
    runs, unless the check failed or the sandbox did (the hidden runs are then not made: a program
    that does not compile has no hidden verdict, and a failed try is made again whole)."""

    def __init__(self, first: _StdioPlan, second: _StdioPlan) -> None:
        self.first, self.second = first, second
        self.stage = 0

    def take(self) -> list[RunRequest]:
        if self.stage == 0:
            reqs = self.first.take()
            if reqs:
                return reqs
            self.stage = 1
        if self.stage == 1:
            self.stage = 2
            if self.first.compiled():
                return self.second.take()
        return []

    def feed(self, results: list[ExecutionResult]) -> None:
        (self.first if self.stage == 0 else self.second).feed(results)

    def finish(self) -> list[_Part]:
        public = self.first.finish()[0]
        if self.second.started:
            return [public, self.second.finish()[0]]
        pv = public[0]
        return [public, (Verification(kind="stdio", budget_s=pv.budget_s, syntax_error=pv.syntax_error,
                                      sandbox_error=pv.sandbox_error), [], self.second.trace_id)]  # fmt: skip


def refuse_program(code: str) -> str | None:
    """Why ``code`` cannot be a program at all, as a ``SyntaxError`` line (the program's own
    ``syntax_error``, decided before anything runs), or None. The same for both task kinds, and
    what the sandbox's ``RunRequest`` would refuse (so no candidate's text can make verification
    raise): text that is not UTF-8 (a lone surrogate), a NUL byte (``python solution.py`` refuses
    both), a program over ``MAX_PROGRAM_BYTES``."""
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"SyntaxError: the source is not valid UTF-8 ({exc.reason} at offset {exc.start})"
    nul = code.find("\x00")
    if nul >= 0:
        return f"SyntaxError: source code cannot contain null bytes (a NUL byte at offset {nul}); it was not run"
    if size > MAX_PROGRAM_BYTES:
        return f"SyntaxError: the program is {size} bytes of UTF-8, over the limit of {MAX_PROGRAM_BYTES}; it was not run"
    return None


# ----------------------------------------------------------------------------- function tasks


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Loaded(_Line):
    k: Literal["loaded"]


class _NoEntryPoint(_Line):
    k: Literal["no_entry_point"]
    reason: str = Field(max_length=1000)


class _LoadError(_Line):
    k: Literal["load_error"]
    error: str = Field(max_length=100)
    message: str = Field(max_length=1000)
    traceback: str | None = Field(max_length=4000)


class _Result(_Line):
    k: Literal["result"]
    i: int = Field(ge=0, le=1 << 30)
    value: str = Field(max_length=MAX_VALUE_CHARS)
    s: float = Field(ge=0, le=1e7, allow_inf_nan=False)


class _CallError(_Line):
    k: Literal["error"]
    i: int = Field(ge=0, le=1 << 30)
    error: str = Field(max_length=100)
    message: str = Field(max_length=1000)
    traceback: str | None = Field(max_length=4000)
    s: float = Field(ge=0, le=1e7, allow_inf_nan=False)


class _End(_Line):
    k: Literal["end"]
    n: int = Field(ge=0, le=1 << 30)


_Message = Annotated[_Loaded | _NoEntryPoint | _LoadError | _Result | _CallError | _End, Field(discriminator="k")]
_MESSAGE: TypeAdapter[Any] = TypeAdapter(_Message)


class Channel(NamedTuple):
    """What one run's result channel said, once checked: the header (``loaded``, a load error or
    no entry point; None when the run ended before it), the calls' results in order, whether the
    end line came, and why the channel cannot be believed (``tampered``: then ignore the rest)."""

    header: _Loaded | _NoEntryPoint | _LoadError | None
    calls: list[_Result | _CallError]
    ended: bool
    tampered: str | None


def read_channel(stdout: str, nonce: str, start: int, n_calls: int) -> Channel:
    """Parse a run's result channel as untrusted data. Never raises: whatever is not exactly what
    the driver writes (a header, results ``start``, ``start + 1``, ... in order, an end line with
    their number, nothing else) is tampering. A last line without its newline, if it begins as
    the driver's lines do, was cut short by the run's end (a kill, or the output limit) and is
    ignored."""
    header: _Loaded | _NoEntryPoint | _LoadError | None = None
    calls: list[_Result | _CallError] = []
    ended = False

    def broken(why: str) -> Channel:
        return Channel(header, calls, ended, why)

    lines = stdout.split("\n")
    for n, line in enumerate(lines[:-1]):  # lines[-1]: after the last newline, an unfinished line or ""
        where = f"line {n + 1}"
        if len(line) > MAX_LINE_CHARS:
            return broken(f"{where} is {len(line)} characters long, over {MAX_LINE_CHARS}")
        tag, _, body = line.partition(" ")
        if tag != nonce:
            return broken(f"{where} is not the verifier's (no valid tag)")
        if len(_outside_strings(body)) > MAX_LINE_STRUCTURE:  # not parsed: the driver's lines are flat
            return broken(f"{where} holds more than {MAX_LINE_STRUCTURE} characters of JSON outside its strings")
        try:
            raw = json.loads(body)
        except (ValueError, RecursionError):
            return broken(f"{where} is not well-formed JSON (or nested too deeply)")
        try:
            msg = _MESSAGE.validate_python(raw)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(x) for x in err["loc"])
            return broken(f"{where} does not fit the schema ({field}: {err['type']})")
        if ended:
            return broken(f"{where} comes after the end line")
        if header is None:
            if not isinstance(msg, (_Loaded, _NoEntryPoint, _LoadError)):
                return broken(f"{where}: a {msg.k!r} line before the program was loaded")
            header = msg
        elif isinstance(msg, (_Result, _CallError)):
            if not isinstance(header, _Loaded):
                return broken(f"{where}: a result after the program failed to load")
            if msg.i != start + len(calls) or msg.i >= n_calls:
                return broken(f"{where}: a result for test {msg.i} where test {start + len(calls)} was due")
            calls.append(msg)
        elif isinstance(msg, _End):
            if not isinstance(header, _Loaded) or msg.n != len(calls) or start + len(calls) != n_calls:
                return broken(f"{where}: an end line after {len(calls)} of {n_calls - start} results")
            ended = True
        else:
            return broken(f"{where}: a second {msg.k!r} line")
    rest, prefix = lines[-1], nonce + " "
    if rest and not ((rest.startswith(prefix) or prefix.startswith(rest)) and len(rest) <= MAX_LINE_CHARS):
        return broken(f"line {len(lines)}, unfinished, is not the start of one of the verifier's lines")
    return Channel(header, calls, ended, None)


_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # an opening bracket steps up (2 - 1), a closing one down
_TOO_DEEP = b"\x02" * (MAX_DEPTH + 1)


def _outside_strings(text: str) -> str:
    """What JSON text holds outside its string literals (exact for well-formed text; for broken text
    exact up to the first error, where ``json.loads`` stops too). C-speed passes only: no regex
    that could backtrack, no loop per character in Python."""
    bare = text.replace("\\\\", "").replace('\\"', "")  # escaped backslashes, then escaped quotes
    return "".join(bare.split('"')[::2])


def value_shape(text: str) -> tuple[int, int]:
    """``(nodes, depth)`` of JSON text, before parsing it: about how many values it holds (each
    costs the parser about a microsecond) and how deeply its brackets nest. Linear in the text."""
    bare = _outside_strings(text)
    nodes = 1 + bare.count(",") + bare.count(":") + bare.count("[") + bare.count("{")
    steps = bare.encode("utf-8", "surrogatepass").translate(_STEP, _NOT_BRACKETS)
    if _TOO_DEEP in steps:  # a run of opening brackets alone goes too deep (the common attack): no walk
        return nodes, MAX_DEPTH + 1
    depth = max(map(operator.sub, itertools.accumulate(steps), range(1, len(steps) + 1)), default=0)
    return nodes, depth


def parse_value(text: str, max_nodes: int | None = None) -> tuple[Any, str | None]:
    """A returned value from its JSON text, within the bounds (nesting at most ``MAX_DEPTH``, an
    integer at most Python's digit limit, at most ``max_nodes`` values); ``(None, why)`` when it
    breaks them. The bounds are checked before parsing, at a small cost per character. Never
    raises."""
    nodes, depth = value_shape(text)
    return _load_value(text, nodes, depth, max_nodes)


def _load_value(text: str, nodes: int, depth: int, max_nodes: int | None) -> tuple[Any, str | None]:
    if depth > MAX_DEPTH:
        return None, f"the returned value is nested more than {MAX_DEPTH} levels deep"
    if max_nodes is not None and nodes > max_nodes:
        return None, (f"the returned value holds about {nodes} values, over the {max_nodes} the verifier still "
                      "parses for this run (its share of the run's time budget)")  # fmt: skip
    try:
        return json.loads(text), None
    except (ValueError, RecursionError):
        return None, "the returned value is not well-formed JSON within the limits (digits, nesting)"


class _FunctionPlan:
    """One program against function tests, in as many runs as its budget needs. ``cases[:shown]``
    are shown (their inputs, values and tracebacks go into the feedback), the rest are not.
    ``joint``: the checker trace id prefixes of a joint job's two parts (``Job``): ``cases`` are
    then its public tests, ``shown`` of them, followed by its hidden ones, and ``finish`` gives a
    verification of each; the facts of the runs (executions, time charged, a sandbox failure,
    tampering, a syntax or load error) are the first part's, and the second shares the verdicts."""

    def __init__(self, task: Task, cases: Sequence[TestCase], code: str, shown: int, trace_id: str | None,
                 grade_budget: Budget | None = None, *, joint: tuple[str | None, str | None] | None = None,
                 language: str = "python") -> None:  # fmt: skip
        self.task, self.cases, self.code, self.shown, self.trace_id = task, cases, code, shown, trace_id
        self.language = language  # the driver's (FUNCTION_DRIVERS)
        self.grade_budget = grade_budget
        self.joint = joint
        limit = None if grade_budget is None else grade_budget.budget_s
        self.parts = [Verification(kind="function", budget_s=limit) for _ in range(2 if joint else 1)]
        self.v = self.parts[0]
        self.results: dict[int, CaseResult] = {}
        self.to_check: dict[int, Any] = {}  # test -> the returned value, for the task's checker
        self.next = 0  # the first test not yet decided
        self.nonce = ""
        self.want = True  # a run is due
        self.silent = [True] * len(self.parts)  # per part: no answer so far (nothing but None, no error, no crash)
        self.parse_left = self.parse_chars_left = 0  # what the host still parses of the current run's values
        self.budget_s = 0.0  # the current run's time budget
        self.capped = False  # the current run's budget is what was left of the grade's, less than its own

    def take(self) -> list[RunRequest]:
        if not self.want:
            return []
        self.want = False
        self.nonce = secrets.token_hex(16)
        compiled = self.language in IN_SOURCE  # the driver is in the program's source
        spec = json.dumps({"nonce": self.nonce, "code": "" if compiled else self.code, "entry_point": self.task.entry_point, "start": self.next,
                           "hidden_from": self.shown if self.joint else None,
                           "cases": [{"args": c.args, "kwargs": c.kwargs} for c in self.cases[self.next :]]})  # fmt: skip
        tid = None if self.trace_id is None else self.trace_id + (f"/from/{self.next}" if self.next else "")
        limits = run_limits(self.task, len(spec))
        self.capped = False
        if self.grade_budget is not None:
            left = self.grade_budget.left_s
            if left < MIN_RUN_S:
                self._out_of_budget()
                return []
            if left < limits.timeout_s:
                self.capped = True
                limits = limits.model_copy(update={"timeout_s": left, "cpu_time_s": left})
        self.parse_left = int(PARSE_NODES_PER_S * limits.timeout_s)  # this run's returned values, at most
        self.parse_chars_left = int(PARSE_CHARS_PER_S * limits.timeout_s)
        self.budget_s = limits.timeout_s
        program = driven_program(self.language, self.code, self.task.entry_point or "")
        return [RunRequest(code=program, stdin=spec, limits=limits, trace_id=tid, language=self.language)]

    def feed(self, results: list[ExecutionResult]) -> None:
        (res,) = results
        v = self.v
        v.executions.append(res)
        v.program_runs += 1
        if res.sandbox_error:
            v.sandbox_error = res.sandbox_error
            return
        if res.compile_failed:  # a compiled language's (IN_SOURCE): the program's syntax error...
            said = res.compile_stderr.strip() or res.compile_stdout.strip()
            refused = None if res.compile_timeout_hit else driver_refusal(self.language, said)
            if refused is not None:  # ... unless the program compiles but the driver finds no function to call
                v.load_error = refused
                self._rest("missing", refused)
                return
            v.syntax_error = _short(said) or "the program does not compile"
            return
        _charge(v, self.grade_budget, res, self.budget_s)
        start, n = self.next, len(self.cases)
        ch = read_channel(res.stdout, self.nonce, start, n)
        if ch.tampered is None and res.exit_code == CHANNEL_LOST and not ch.ended:
            ch = ch._replace(tampered="the program closed or broke the channel before the driver finished")
        if ch.tampered:
            v.tampered = ch.tampered
            return
        if isinstance(ch.header, _LoadError):
            text = _short(f"{ch.header.error}: {ch.header.message}") or ""
            if ch.header.error in ("SyntaxError", "IndentationError", "TabError"):
                v.syntax_error = text
                return
            # raising while loading answers no call: a "no attempt", not a wrong answer (else a crash
            # at import would earn more than an empty program); answers of an earlier run still count
            v.load_error = _short(f"the program failed to load: {text}")
            self._rest("error", v.load_error or "", _short(ch.header.traceback))
            return
        if isinstance(ch.header, _NoEntryPoint):
            v.load_error = _short(ch.header.reason)
            self._rest("missing", v.load_error or "")
            return
        reported = sum(msg.s for msg in ch.calls)
        if reported > res.execution_time_ms / 1000 + REPORT_SLACK_S:
            v.tampered = (f"the per-call times the program reported ({reported:.3f} s) add up to more than the "
                          f"sandbox measured for the whole run ({res.execution_time_ms / 1000:.3f} s)")  # fmt: skip
            return
        # CPU time the host measured that no reported call accounts for: start-up, loading, or time
        # a program hid from the driver's clock; any of it may belong to a call that failed
        unexplained = max(0.0, res.cpu_time_ms / 1000 - reported - LOAD_CPU_S)
        for msg in ch.calls:
            self._record(msg)
            if isinstance(msg, _CallError):
                self._slow_error(msg.i, msg.s + unexplained, "raised")
        self.next = start + len(ch.calls)
        if ch.ended or self.next == n:
            return
        if res.timeout_hit:
            if self.capped:  # what was left of the grade's budget stopped it, not the test's own limit
                self._out_of_budget()
                return
            # progress: the rest gets a budget of its own, unless the call in flight had most of its
            # limit by the host's clocks (answer one call, then stall until killed, in every process)
            if ch.calls and not self._stalled(res, reported, unexplained):
                self.want = True
                return
            self._part(self.next).timeout = True
            self._speak(self.next)
            limit = f"over the time limit of {self.task.timeout_s:g} s (measured by the sandbox)"
            self._set(self.next, "timeout", limit if ch.header is not None else f"loading the program took {limit}")
            self._rest("skipped", "not run: an earlier test ran out of time")
        elif res.oom:
            self._part(self.next).oom = True
            self._speak(self.next)
            self._rest("error", "out of memory")
        elif res.stdout_truncated:
            self._speak(self.next)
            if ch.calls:  # the answers so far fill the run's channel: the rest in a run of their own
                self.want = True
                return
            self._rest("missing", "the results went over the output limit")
        else:
            why = f"exit code {res.exit_code}" if res.exit_code is not None else f"signal {res.signal}"
            if ch.header is not None and self._slow_error(self.next, unexplained, f"ended its run ({why})"):
                self._rest("skipped", "not run: an earlier test ran out of time")
                return
            if ch.header is None:  # it ended while loading (os._exit, a signal): a load error, no attempt
                v.load_error = f"the program stopped while loading, before any test ({why})"
                self._rest("error", v.load_error)
                return
            if res.exit_code != 0:
                self._speak(self.next)  # a crash in a call, not a program that did nothing
            self._rest("missing", f"the program stopped before this test returned ({why})")

    def _out_of_budget(self) -> None:
        """The grade's time budget is spent: the test in flight (or due) times out, the rest are
        not run."""
        assert self.grade_budget is not None
        part = self._part(self.next)
        part.timeout = part.budget_spent = True
        self._speak(self.next)
        self._set(self.next, "timeout", self.grade_budget.message())
        self._rest("skipped", "not run: the grade's time budget was spent")

    def _stalled(self, res: ExecutionResult, reported: float, unexplained: float) -> bool:
        """A run stopped by its budget after some answers: did the call in flight have
        ``SLOW_FRACTION`` of its limit? Its time, by the host's clocks: the run's CPU time that the
        answered calls' reported times do not account for (less start-up), and, when the run was
        idle at the kill (it slept: ``timeout_kind == "wall"``, no wait for a CPU to stretch it),
        the wall clock left after them. A run that gave many fast answers before the budget cut a
        call short is resumed as before.

        And the call in flight must have had that long by the sandbox's own clock too: the time
        from the last answer's arrival (``stdout_last_ms``) to the end of the run. The CPU time
        left over is not the call in flight's when the program made it while answering earlier
        calls and reported them as instant (forged times): such a run was cut short after an answer
        that just came, and is resumed, as its honest twin is, until the grade's budget stops it
        (a stalled call that loses only its own test would be worth more than that)."""
        limit = SLOW_FRACTION * self.task.timeout_s
        spent = unexplained
        if res.timeout_kind == "wall":
            spent = max(spent, res.execution_time_ms / 1000 - reported - START_UP_S)
        if res.stdout_last_ms is not None and (res.execution_time_ms - res.stdout_last_ms) / 1000 < limit:
            return False
        return spent >= limit

    def _slow_error(self, i: int, spent_s: float, how: str) -> bool:
        """Call ``i`` failed after ``spent_s``: a timeout when that is most of its limit (the
        program stopped itself short of the sandbox's limit). Whether it was."""
        limit = self.task.timeout_s
        if spent_s < SLOW_FRACTION * limit:
            return False
        self._part(i).timeout = True
        self._speak(i)
        self._set(i, "timeout", f"the call {how} after {spent_s:.2f} s, {SLOW_FRACTION:.0%} or more of the time limit of "
                                f"{limit:g} s: too slow (stopping itself short of the limit does not make it faster)")  # fmt: skip
        return True

    def _record(self, msg: _Result | _CallError) -> None:
        case = self.cases[msg.i]
        r = self._new(msg.i)
        r.elapsed_ms = round(msg.s * 1000, 3)
        self.results[msg.i] = r
        show = msg.i < self.shown
        if isinstance(msg, _CallError):
            self._speak(msg.i)
            r.status, r.error = "error", _short(f"{msg.error}: {msg.message}")
            r.traceback = _short(msg.traceback) if show else None
            return
        if show:
            r.got = _short(msg.value)
        got, problem = self._parse(msg.value)
        if problem is not None or got is not None:
            self._speak(msg.i)
        if problem is not None:
            r.status, r.error = "error", problem
        elif case.checker is not None:
            r.status = "failed"  # until the checker says otherwise
            self.to_check[msg.i] = got
        else:
            r.status = "passed" if values_equal(case.expected, got, case.comparator) else "failed"

    def _parse(self, text: str) -> tuple[Any, str | None]:
        """``parse_value`` within what is left of this run's parsing budget (PARSE_*_PER_S)."""
        if len(text) > self.parse_chars_left:
            return None, (f"the returned values of this run are over the {int(PARSE_CHARS_PER_S * self.budget_s)} "
                          "characters of JSON the verifier parses for it (its share of the run's time budget)")  # fmt: skip
        self.parse_chars_left -= len(text)
        nodes, depth = value_shape(text)
        got, problem = _load_value(text, nodes, depth, self.parse_left)
        if problem is None:
            self.parse_left -= nodes
        return got, problem

    def _part(self, i: int) -> Verification:
        """The verification test ``i`` belongs to."""
        return self.parts[-1] if self.joint and i >= self.shown else self.parts[0]

    def _speak(self, i: int) -> None:
        """Test ``i``'s part answered something (it is no "no attempt")."""
        self.silent[1 if self.joint and i >= self.shown else 0] = False

    def _new(self, i: int) -> CaseResult:
        show = i < self.shown
        index = i - self.shown if self.joint and i >= self.shown else i
        r = CaseResult(index=index, status="missing", input=self.cases[i].describe_input() if show else "")
        if show:
            r.expected = _short(json.dumps(self.cases[i].expected))
        return r

    def _set(self, i: int, status: CaseStatus, error: str, traceback: str | None = None) -> None:
        r = self._new(i)
        r.status, r.error = status, error
        r.traceback = traceback if i < self.shown else None
        self.results[i] = r

    def _rest(self, status: CaseStatus, error: str, traceback: str | None = None) -> None:
        for i in range(self.next, len(self.cases)):
            if i not in self.results:
                self._set(i, status, error, traceback)
        self.next = len(self.cases)

    def finish(self) -> list[_Part]:
        v = self.v
        for other in self.parts[1:]:  # what the runs say of the program as a whole is both parts'
            other.sandbox_error, other.syntax_error, other.tampered = v.sandbox_error, v.syntax_error, v.tampered
            other.load_error = v.load_error
        prefixes = self.joint or (self.trace_id,)
        if v.sandbox_error or v.syntax_error:
            return [(part, [], prefix) for part, prefix in zip(self.parts, prefixes, strict=True)]
        if v.tampered:
            why = f"not counted: the program tampered with the verifier's result channel ({v.tampered})"
            for i in range(len(self.cases)):
                self._set(i, "error", why)
            self.to_check.clear()
        cases = [self.results.get(i) or self._new(i) for i in range(len(self.cases))]
        split = self.shown if self.joint else len(cases)
        out: list[_Part] = []
        for k, (part, prefix) in enumerate(zip(self.parts, prefixes, strict=True)):
            lo, hi = (0, split) if k == 0 else (split, len(cases))
            part.cases = cases[lo:hi]
            checks = [(self.results[i], self.cases[i], got) for i, got in self.to_check.items() if lo <= i < hi]
            part.no_answer = self.silent[k] and not v.tampered and not part.timeout and not part.oom
            out.append((part, checks, prefix))
        return out


# ----------------------------------------------------------------------------- stdio tasks


class _StdioPlan:
    """A compile check, then one run per test, all at once (each run's limit at most what is left
    of the grade's budget; none when it is spent). ``compiled_by``: another plan of the same
    program whose compile check this one shares (a joint job's hidden runs: ``_Chain``).

    A program in another language than Python has no check run: each of its runs carries its
    compile phase (a compiled language's, ``ExecutionResult.compile_status``; the sandbox compiles
    a program once for all its runs), and a compile that failed is the program's syntax error."""

    def __init__(self, task: Task, cases: Sequence[TestCase], code: str, show: bool, trace_id: str | None,
                 grade_budget: Budget | None = None, *, compiled_by: _StdioPlan | None = None,
                 language: str = "python") -> None:  # fmt: skip
        self.task, self.cases, self.code, self.show, self.trace_id = task, cases, code, show, trace_id
        self.grade_budget = grade_budget
        self.compiled_by = compiled_by
        self.language = language
        self.checked = compiled_by is None and language == "python"  # its first run is the compile check
        self.due = True
        self.started = False
        self.capped = self.unrun = False
        self.results: list[ExecutionResult] = []
        self.limits: list[Limits] = []
        self.spent_s = 0.0  # what its runs were charged (``feed``)
        self.over = False  # its runs spent the grade's budget

    def compiled(self) -> bool:
        """Its runs are back, the sandbox failed none of them, and the program compiles."""
        if not self.results or any(r.sandbox_error for r in self.results):
            return False
        return self.results[0].exit_code == 0 if self.checked else not self.results[0].compile_failed

    def take(self) -> list[RunRequest]:
        if not self.due:
            return []
        self.due = False
        self.started = True
        lim = Limits(timeout_s=self.task.timeout_s, memory_mb=self.task.memory_mb, max_stdin_bytes=64 << 20)
        if self.grade_budget is not None:
            left = self.grade_budget.left_s
            if left < MIN_RUN_S:
                self.unrun = True
                return []
            if left < lim.timeout_s:
                self.capped = True
                lim = lim.model_copy(update={"timeout_s": left})
        check = Limits(timeout_s=10.0)
        tid = self.trace_id
        runs = [RunRequest(code=self.code, stdin=c.stdin or "", limits=lim, trace_id=f"{tid}/{i}", language=self.language)
                for i, c in enumerate(self.cases)]  # fmt: skip
        self.limits = [lim] * len(self.cases)
        if not self.checked:
            return runs
        self.limits.insert(0, check)
        return [RunRequest(code=SYNTAX_CHECK, stdin=self.code, limits=check, trace_id=f"{tid}/syntax"), *runs]

    def feed(self, results: list[ExecutionResult]) -> None:
        """Take the runs and charge them to the grade's budget at once (a joint job's hidden runs,
        a round later, get what is left)."""
        self.results = results
        if any(r.sandbox_error for r in results):
            return
        budget = self.grade_budget
        for res, lim in zip(results, self.limits, strict=True):
            seconds = min(res.execution_time_ms / 1000, lim.timeout_s)
            self.spent_s = round(self.spent_s + seconds, 6)
            if budget is not None:
                budget.charge(seconds)
        outs = results[1:] if self.checked else results
        # the runs started together: all of them may add up to more than was left
        self.over = budget is not None and (budget.left_s <= 0 or (self.capped and any(r.timeout_hit for r in outs)))

    def finish(self) -> list[_Part]:
        checks: list[_CheckItem] = []
        return [(self._finish(checks), checks, self.trace_id)]

    def _finish(self, checks: list[_CheckItem]) -> Verification:
        budget = self.grade_budget
        v = Verification(kind="stdio", budget_s=None if budget is None else budget.budget_s)
        if self.unrun:
            assert budget is not None
            v.timeout = v.budget_spent = True
            v.cases = [CaseResult(index=i, status="timeout" if i == 0 else "skipped",
                                  error=budget.message() if i == 0 else "not run: the grade's time budget was spent",
                                  input=_short(c.stdin or "") or "" if self.show else "") for i, c in enumerate(self.cases)]  # fmt: skip
            return v
        results = self.results
        if self.compiled_by is not None:
            syntax, outs = self.compiled_by.results[0], results
        elif self.checked:
            syntax, outs = results[0], results[1:]
        else:  # (the first run's compile phase is every run's)
            syntax, outs = results[0], results
        v.executions, v.program_runs = list(results), len(results)
        errors = [r.sandbox_error for r in results if r.sandbox_error]
        if errors:
            v.sandbox_error = errors[0]
            return v
        v.spent_s, over = self.spent_s, self.over
        if self.language == "python" and syntax.exit_code != 0:
            v.syntax_error = syntax.stdout.strip() or "the program does not compile"
        elif self.language != "python" and syntax.compile_failed:
            # (the compiler's message: on stderr, or on stdout as Go's compile tool writes it)
            message = syntax.compile_stderr.strip() or syntax.compile_stdout.strip()
            v.syntax_error = _short(message) or f"the {self.language} program does not compile"
        v.timeout = any(r.timeout_hit for r in outs)
        v.oom = any(r.oom for r in outs)
        mine: list[_CheckItem] = []
        for i, (case, res) in enumerate(zip(self.cases, outs, strict=True)):
            r = CaseResult(index=i, status="failed", input=_short(case.stdin or "") if self.show else "",
                           elapsed_ms=res.execution_time_ms)  # fmt: skip
            if self.show:
                r.expected = _short(case.expected_stdout or "")
                r.got = _short(res.stdout)
            if res.timeout_hit:
                r.status, r.error = "timeout", budget.message() if over and budget is not None else "time limit"
            elif res.exit_code != 0:
                r.status = "error"
                r.error = _short(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit code {res.exit_code}")
                r.traceback = _short(res.stderr) if self.show else None
            elif case.checker is not None:
                mine.append((r, case, res.stdout))
            elif stdout_equal(case.expected_stdout or "", res.stdout, case.comparator):
                r.status = "passed"
            v.cases.append(r)
        if not v.syntax_error:
            checks.extend(mine)
        if over and not v.syntax_error:
            v.timeout = v.budget_spent = True
        # no output on any test, whatever the exit status: a stdio program's run is all "loading", so
        # one that crashes before printing anything answered nothing (as a function task's load error)
        v.no_answer = all(not r.timeout_hit and not r.oom and not r.stdout.strip() for r in outs)
        return v


def _charge(v: Verification, budget: Budget | None, res: ExecutionResult, limit_s: float) -> None:
    """Charge a program run to its verification and the grade's budget: the sandbox's wall clock,
    at most the run's own limit (a deadline moved for CPU wait on a busy machine is not charged)."""
    seconds = min(res.execution_time_ms / 1000, limit_s)
    v.spent_s = round(v.spent_s + seconds, 6)
    if budget is not None:
        budget.charge(seconds)


# ----------------------------------------------------------------------------- special checkers


def _run_checkers(pending: list[tuple[Verification, list[_CheckItem], str | None]], runner: Runner) -> None:
    """Special judges: one sandbox run per (verification, distinct checker), over all the outputs
    it judges, all in one ``run_many``. The candidate's process is long gone; a checker never
    shares a run with it. A checker that fails (crashes, times out, gives the wrong number of
    verdicts) is judged once more, in one more ``run_many``: on the reference's outputs (the
    expected ones) and on each of the candidate's outputs alone. If it fails on the reference's,
    the task is broken (``sandbox_error``, never a score); otherwise each output it fails on is
    the candidate's failure."""
    groups: list[tuple[Verification, str, list[_CheckItem], str]] = []
    for v, items, trace_id in pending:
        by_checker: dict[str, list[_CheckItem]] = {}
        for item in items:
            by_checker.setdefault(item[1].checker or "", []).append(item)
        for n, (checker, group) in enumerate(by_checker.items()):
            groups.append((v, checker, group, f"{trace_id}/checker/{n}"))
    reqs = [_checker_request(checker, [(c, got) for _, c, got in group], tid) for _, checker, group, tid in groups]
    retry: list[tuple[Verification, list[_CheckItem], int]] = []
    retry_reqs: list[RunRequest] = []
    for res, (v, checker, group, tid) in zip(runner.run_many(reqs), groups, strict=True):
        v.executions.append(res)
        if res.sandbox_error:
            v.sandbox_error = v.sandbox_error or res.sandbox_error
            continue
        verdicts = _verdicts(res, len(group))
        if verdicts is not None:
            _apply(group, verdicts)
            continue
        retry.append((v, group, len(retry_reqs)))
        retry_reqs.append(_checker_request(checker, [(c, _reference_output(c)) for _, c, _ in group], f"{tid}/reference"))
        retry_reqs += [_checker_request(checker, [(c, got)], f"{tid}/{k}") for k, (_, c, got) in enumerate(group)]
    if not retry:
        return
    results = runner.run_many(retry_reqs)
    for v, group, at in retry:
        mine = results[at : at + 1 + len(group)]
        v.executions.extend(mine)
        errors = [r.sandbox_error for r in mine if r.sandbox_error]
        if errors:
            v.sandbox_error = v.sandbox_error or errors[0]
            continue
        if _verdicts(mine[0], len(group)) is None:
            ref = mine[0]
            v.sandbox_error = v.sandbox_error or (
                f"the task's checker failed on the reference's outputs too (exit {ref.exit_code}, "
                f"{len(ref.stdout.split())} verdicts for {len(group)} outputs): {ref.stderr.strip()[-300:]}"
            )
            continue
        for item, res in zip(group, mine[1:], strict=True):
            verdict = _verdicts(res, 1)
            if verdict is None:
                item[0].status, item[0].error = "failed", "the task's checker failed on this output"
            else:
                _apply([item], verdict)


def _checker_request(checker: str, outputs: list[tuple[TestCase, Any]], trace_id: str) -> RunRequest:
    stdin = json.dumps({"cases": [_checker_case(c, got) for c, got in outputs]})
    return RunRequest(code=checker, stdin=stdin, trace_id=trace_id, limits=CHECKER_LIMITS)


def _verdicts(res: ExecutionResult, n: int) -> list[bool] | None:
    """A checker run's verdicts (1 accepts, anything else rejects), or None when it failed."""
    verdicts = res.stdout.split()
    if res.exit_code != 0 or res.timeout_hit or res.oom or res.stdout_truncated or len(verdicts) != n:
        return None
    return [x == "1" for x in verdicts]


def _apply(group: list[_CheckItem], verdicts: list[bool]) -> None:
    for (r, _, _), ok in zip(group, verdicts, strict=True):
        r.status = "passed" if ok else "failed"
        if not ok:
            r.error = "rejected by the task's checker"


def _reference_output(case: TestCase) -> Any:
    return case.expected_stdout if case.is_stdio else case.expected


def _checker_case(case: TestCase, got: Any) -> dict[str, Any]:
    if case.is_stdio:
        return {"stdin": case.stdin, "output": got}
    return {"args": case.args, "kwargs": case.kwargs, "output": got}


def _short(text: str | None) -> str | None:
    """Text for feedback: at most ``FEEDBACK_CHARS``, and valid UTF-8 (a JSON escape can make a
    lone surrogate, which no log or JSON encoder downstream would accept)."""
    if text is None:
        return None
    text = text if len(text) <= FEEDBACK_CHARS else text[:FEEDBACK_CHARS] + "…[truncated]"
    return text.encode("utf-8", "replace").decode("utf-8")


