"""Running a candidate program against a task's tests — the rule that defeats reward hacking:
the sandbox receives the program and the test *inputs*; it returns outputs, serialised; the
comparison with the expected values runs here, in the trusted parent.

Function tasks: one sandbox run per test group executes the program once (as a module named
``__solution__``) and calls the entry point on every input, each call timed; results leave on the
original stdout, tagged with a per-run nonce, while the program's own prints go to stderr. Stdio
tasks: one run per test, all at once through ``run_many``. A test may carry a special checker
(task data): it judges the candidate's outputs in a sandbox run of its own, afterwards. Public and hidden tests never share a
run, so a program cannot echo hidden inputs into feedback the agent sees.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, Field

from sandbox import ExecutionResult, Limits, RunRequest

from .comparators import stdout_equal, values_equal
from .schema import Task, TestCase

CaseStatus = Literal["passed", "failed", "error", "timeout", "missing"]
FEEDBACK_CHARS = 2000

# Runs inside the sandbox. Reads {"nonce", "code", "entry_point", "cases"} from stdin.
DRIVER = r'''
import json, os, sys, time
_spec = json.loads(sys.stdin.read())
_out = os.dup(1)
os.dup2(2, 1)
_nonce = _spec.pop("nonce")
def _emit(obj):
    os.write(_out, (_nonce + " " + json.dumps(obj) + "\n").encode())
def _plain(x):
    if isinstance(x, (set, frozenset)):
        try:
            return sorted(x)
        except TypeError:
            return list(x)
    raise TypeError(f"return value of type {type(x).__name__} is not JSON data")
_ns = {"__name__": "__solution__", "__builtins__": __builtins__, "__file__": "candidate.py"}
try:
    with open("candidate.py", "w", encoding="utf-8", errors="surrogatepass") as _fh:
        _fh.write(_spec["code"])  # so that tracebacks can show the candidate's lines
    exec(compile(_spec["code"], "candidate.py", "exec"), _ns)
    _fn = _ns.get(_spec["entry_point"])
    if not callable(_fn):
        raise NameError(f"solution.py defines no function {_spec['entry_point']!r}")
except BaseException as _e:
    import traceback
    _emit({"load_error": type(_e).__name__, "message": str(_e)[:500], "traceback": traceback.format_exc()[-2000:]})
    os._exit(0)
for _i, _case in enumerate(_spec["cases"]):
    _t = time.perf_counter()
    try:
        _r = _fn(*_case["args"], **_case["kwargs"])
        _s = time.perf_counter() - _t
        try:
            _emit({"i": _i, "value": json.dumps(_r, default=_plain), "s": _s})
        except (TypeError, ValueError) as _e:
            _emit({"i": _i, "error": "TypeError", "message": str(_e)[:500], "s": _s})
    except BaseException as _e:
        import traceback
        _emit({"i": _i, "error": type(_e).__name__, "message": str(_e)[:500],
               "traceback": traceback.format_exc()[-2000:], "s": time.perf_counter() - _t})
try:
    sys.stdout.flush()
except BaseException:
    pass
os._exit(0)
'''

SYNTAX_CHECK = r'''
import sys
try:
    compile(sys.stdin.read(), "solution.py", "exec")
except (SyntaxError, ValueError) as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
'''


class CaseResult(BaseModel):
    """One test's outcome. ``expected`` and ``got`` are shown only for public tests."""

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
    """Everything a grader needs: per-case results and what went wrong with the run."""

    kind: Literal["function", "stdio"] | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    syntax_error: str | None = None
    load_error: str | None = None
    timeout: bool = False
    oom: bool = False
    sandbox_error: str | None = None
    executions: list[ExecutionResult] = Field(default_factory=list)

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
    """One verification to do: a program against the public or the hidden tests of a task."""

    task: Task
    code: str
    which: Literal["public", "hidden"] = "public"
    trace_id: str | None = None


def limits_for(task: Task, n_cases: int) -> Limits:
    """One call per case, each with the task's time budget; the run gets them all plus start-up."""
    timeout = min(task.timeout_s * max(n_cases, 1) + 1.0, 600.0)
    return Limits(timeout_s=timeout, cpu_time_s=timeout, memory_mb=task.memory_mb, max_stdin_bytes=64 << 20)


def verify(task: Task, code: str, sandbox: Runner, *, which: Literal["public", "hidden"] = "public",
           trace_id: str | None = None) -> Verification:  # fmt: skip
    """Run ``code`` against the task's public or hidden tests."""
    return verify_many([Job(task, code, which, trace_id)], sandbox)[0]


def verify_many(jobs: Sequence[Job], runner: Runner) -> list[Verification]:
    """Verify many (task, program, test group) jobs at once: every program run of every job goes to
    the runner in one ``run_many`` (so they run concurrently), then every checker run in a second
    one. Results come back in job order."""
    plans = [_plan(job) for job in jobs]
    results = runner.run_many([r for plan in plans for r in plan.requests]) if any(p.requests for p in plans) else []
    verifications: list[Verification] = []
    pending: list[tuple[Verification, list[_CheckItem], str | None]] = []
    at = 0
    for job, plan in zip(jobs, plans, strict=True):
        mine = results[at : at + len(plan.requests)]
        at += len(plan.requests)
        checks: list[_CheckItem] = []
        v = plan.finish(mine, checks)
        if checks and not v.sandbox_error:
            pending.append((v, checks, job.trace_id))
        verifications.append(v)
    if pending:
        _run_checkers(pending, runner)
    return verifications


_CheckItem = tuple[CaseResult, TestCase, Any]


class _Plan(NamedTuple):
    requests: list[RunRequest]
    finish: Callable[[list[ExecutionResult], list[_CheckItem]], Verification]


def _plan(job: Job) -> _Plan:
    task, code, which, trace_id = job
    cases = task.public_tests if which == "public" else task.hidden_tests
    show = which == "public"
    if not cases:
        return _Plan([], lambda results, checks: Verification())
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        # as `python solution.py` does with a file that is not UTF-8: refused before it runs
        error = f"SyntaxError: the source is not valid UTF-8 ({exc.reason} at offset {exc.start})"
        return _Plan([], lambda results, checks: Verification(kind=task.kind, syntax_error=error))
    if task.kind == "function":
        nonce = secrets.token_hex(16)
        spec = {"nonce": nonce, "code": code, "entry_point": task.entry_point,
                "cases": [{"args": c.args, "kwargs": c.kwargs} for c in cases]}  # fmt: skip
        req = RunRequest(code=DRIVER, stdin=json.dumps(spec), limits=limits_for(task, len(cases)), trace_id=trace_id)
        return _Plan([req], lambda results, checks: _judge_function(task, cases, results[0], nonce, show, checks))
    lim = Limits(timeout_s=task.timeout_s, memory_mb=task.memory_mb, max_stdin_bytes=64 << 20)
    check = RunRequest(code=SYNTAX_CHECK, stdin=code, limits=Limits(timeout_s=10.0), trace_id=f"{trace_id}/syntax")
    runs = [RunRequest(code=code, stdin=c.stdin or "", limits=lim, trace_id=f"{trace_id}/{i}") for i, c in enumerate(cases)]
    return _Plan([check, *runs], lambda results, checks: _judge_stdio(cases, results, show, checks))


def _judge_function(task: Task, cases: Sequence[TestCase], res: ExecutionResult, nonce: str, show: bool,
                    checks: list[_CheckItem]) -> Verification:  # fmt: skip
    v = Verification(kind="function", executions=[res], timeout=res.timeout_hit, oom=res.oom,
                     sandbox_error=res.sandbox_error)  # fmt: skip
    if res.sandbox_error:
        return v
    found: dict[int, dict[str, Any]] = {}
    conflicts: set[int] = set()
    for line in res.stdout.splitlines():
        tag, _, body = line.partition(" ")
        if tag != nonce:
            continue
        try:
            msg = json.loads(body)
        except json.JSONDecodeError:
            continue
        if not isinstance(msg, dict):
            continue  # the sandbox's output is data from an untrusted program: check its shape
        if "load_error" in msg:
            kind = str(msg["load_error"])
            text = f"{kind}: {msg.get('message', '')}"
            if kind == "SyntaxError" or kind == "IndentationError" or kind == "TabError":
                v.syntax_error = text
            else:
                v.load_error = text
            continue
        i = msg.get("i")
        if isinstance(i, int) and 0 <= i < len(cases):
            if i in found:
                conflicts.add(i)  # two answers for one call: someone forged a line
            found[i] = msg
    for i, case in enumerate(cases):
        msg = found.get(i)
        r = CaseResult(index=i, status="missing", input=case.describe_input() if show else "")
        if show:
            r.expected = _short(json.dumps(case.expected))
        if i in conflicts:
            r.status, r.error = "error", "conflicting results for this call"
        elif msg is None:
            r.status = "timeout" if res.timeout_hit else "missing"
            r.error = "the program stopped before this call returned" if not res.timeout_hit else "time limit"
        elif "error" in msg:
            r.status, r.error = "error", _short(f"{msg['error']}: {msg.get('message', '')}")
            r.traceback = _short(msg.get("traceback")) if show else None
            r.elapsed_ms = _ms(msg.get("s"))
        else:
            r.elapsed_ms = _ms(msg.get("s"))
            try:
                got = json.loads(msg["value"])
            except (json.JSONDecodeError, TypeError, KeyError, RecursionError):
                r.status, r.error = "error", "malformed result"
            else:
                if r.elapsed_ms is not None and r.elapsed_ms > task.timeout_s * 1000:
                    r.status, r.error = "timeout", f"call took {r.elapsed_ms:.0f} ms (limit {task.timeout_s:g} s)"
                elif case.checker is not None:
                    checks.append((r, case, got))
                else:
                    r.status = "passed" if values_equal(case.expected, got, case.comparator) else "failed"
                if show:
                    r.got = _short(str(msg.get("value")))
        v.cases.append(r)
    return v


def _judge_stdio(cases: Sequence[TestCase], results: list[ExecutionResult], show: bool,
                 checks: list[_CheckItem]) -> Verification:  # fmt: skip
    syntax, outs = results[0], results[1:]
    v = Verification(kind="stdio", executions=results)
    errors = [r.sandbox_error for r in results if r.sandbox_error]
    if errors:
        v.sandbox_error = errors[0]
        return v
    if syntax.exit_code != 0:
        v.syntax_error = syntax.stdout.strip() or "the program does not compile"
    v.timeout = any(r.timeout_hit for r in outs)
    v.oom = any(r.oom for r in outs)
    for i, (case, res) in enumerate(zip(cases, outs, strict=True)):
        r = CaseResult(index=i, status="failed", input=_short(case.stdin or "") if show else "",
                       elapsed_ms=res.execution_time_ms)  # fmt: skip
        if show:
            r.expected = _short(case.expected_stdout or "")
            r.got = _short(res.stdout)
        if res.timeout_hit:
            r.status, r.error = "timeout", "time limit"
        elif res.exit_code != 0:
            r.status = "error"
            r.error = _short(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit code {res.exit_code}")
            r.traceback = _short(res.stderr) if show else None
        elif case.checker is not None:
            if not v.syntax_error:
                checks.append((r, case, res.stdout))
        elif stdout_equal(case.expected_stdout or "", res.stdout, case.comparator):
            r.status = "passed"
        v.cases.append(r)
    return v


def _run_checkers(pending: list[tuple[Verification, list[_CheckItem], str | None]], runner: Runner) -> None:
    """Special judges: one sandbox run per (verification, distinct checker), over all the outputs
    it judges, all in one ``run_many``. The candidate's process is long gone; a checker never
    shares a run with it. A checker that fails is our failure (sandbox_error), never a score."""
    reqs: list[RunRequest] = []
    groups: list[tuple[Verification, list[_CheckItem]]] = []
    for v, items, trace_id in pending:
        by_checker: dict[str, list[_CheckItem]] = {}
        for item in items:
            by_checker.setdefault(item[1].checker or "", []).append(item)
        for n, (checker, group) in enumerate(by_checker.items()):
            stdin = json.dumps({"cases": [_checker_case(c, got) for _, c, got in group]})
            reqs.append(RunRequest(code=checker, stdin=stdin, trace_id=f"{trace_id}/checker/{n}",
                                   limits=Limits(timeout_s=30.0, memory_mb=512, max_stdin_bytes=64 << 20)))  # fmt: skip
            groups.append((v, group))
    for res, (v, group) in zip(runner.run_many(reqs), groups, strict=True):
        v.executions.append(res)
        verdicts = res.stdout.split()
        if res.sandbox_error or res.exit_code != 0 or len(verdicts) != len(group):
            v.sandbox_error = v.sandbox_error or res.sandbox_error or (
                f"the task's checker failed (exit {res.exit_code}): {res.stderr.strip()[-300:]}"
            )
            continue
        for (r, _, _), verdict in zip(group, verdicts, strict=True):
            r.status = "passed" if verdict == "1" else "failed"
            if r.status == "failed":
                r.error = "rejected by the task's checker"


def _checker_case(case: TestCase, got: Any) -> dict[str, Any]:
    if case.is_stdio:
        return {"stdin": case.stdin, "output": got}
    return {"args": case.args, "kwargs": case.kwargs, "output": got}


def _short(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= FEEDBACK_CHARS else text[:FEEDBACK_CHARS] + "…[truncated]"


def _ms(seconds: Any) -> float | None:
    return round(float(seconds) * 1000, 3) if isinstance(seconds, (int, float)) else None
