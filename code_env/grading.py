"""``grade(task, code)``: the reward of a program for a task, outside any episode. Every reward
of the package comes from one function, ``score_rounds`` (the verification rounds, one more try on a
sandbox failure, the tiers, the LLM judge): ``grade``, ``grade_many``, ``evaluate``, the steps of
``CodeExec-v0`` (single and vector) and ``CodeExecTokens-v0``, and the TRL/verl adapters."""

from __future__ import annotations

import asyncio
import atexit
import difflib
import multiprocessing
import multiprocessing.util
import os
import threading
import time
import weakref
from collections.abc import Generator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from registry import Task
from registry.budget import Budget, budget_s
from registry.verify import (
    FUNCTION_DRIVERS,
    CaseResult,
    Job,
    Runner,
    Verification,
    function_task_refusal,
    shown_output,
    verify_many,
)
from sandbox import (
    Cancel,
    ExecutionResult,
    LanguageUnavailableError,
    RunRequest,
    Sandbox,
    cancelling,
)

from .judge import JudgeConfig, LLMJudge, apply
from .reward import RewardBreakdown, RewardConfig
from .tracing import Transitions, retried, run_marks, trace_id

_lock = threading.Lock()


class _Shared:
    """The process-wide sandbox of one backend in one process, and who uses it: started on first
    use; stopped when nothing uses it any more (no ``SharedSandbox`` of an open env that ran a
    program, no call in flight) unless pinned (``shared_sandbox``: a caller with no ``close``,
    such as ``grade``); started again by the next use. A re-entrant lock: a vector env that the
    garbage collector closes (Gymnasium's ``VectorEnv.__del__``) may release its handle at any
    allocation, inside this class's own critical sections too; each of them changes the state
    before it does anything that allocates much, so that such a re-entry finds it consistent."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.lock = threading.RLock()
        self.sandbox: Sandbox | None = None
        self.pinned = False
        self.users: weakref.WeakSet[SharedSandbox] = weakref.WeakSet()
        self.busy = 0  # calls in flight
        self.starts = 0  # sandboxes started so far (for tests and diagnostics)

    def _start(self) -> Sandbox:
        if self.sandbox is None:
            sb = Sandbox(self.backend)
            self.sandbox, self.starts = sb, self.starts + 1
        return self.sandbox

    def pin(self) -> Sandbox:
        with self.lock:
            self.pinned = True
            return self._start()

    def enter(self, user: SharedSandbox) -> Sandbox:
        """A call of ``user`` begins: the running sandbox (started if needed)."""
        with self.lock:
            self.busy += 1  # (first: nothing stops the sandbox while it starts)
            try:
                sb = self._start()
                self.users.add(user)
            except BaseException:
                self.busy -= 1
                raise
            return sb

    def leave(self) -> None:
        """A call has ended."""
        with self.lock:
            self.busy -= 1
            self._stop_if_unused()

    def release(self, user: SharedSandbox) -> None:
        with self.lock:
            self.users.discard(user)
            self._stop_if_unused()

    def _stop_if_unused(self) -> None:
        if self.sandbox is not None and not (self.pinned or self.busy or len(self.users)):
            sb, self.sandbox = self.sandbox, None
            sb.close()

    def shutdown(self) -> None:
        """At the process's exit (or a multiprocessing worker's): stop the workers, whoever uses them."""
        with self.lock:
            sb, self.sandbox, self.pinned = self.sandbox, None, False
            self.users.clear()
            if sb is not None:
                sb.close()


_shared: dict[tuple[str, int], _Shared] = {}


def _shared_of(backend: str) -> _Shared:
    """This process's ``_Shared`` of ``backend``. A forked child (a SubprocVecEnv or
    AsyncVectorEnv worker) has its own: the parent's workers are not its. In a multiprocessing
    worker its sandbox is also stopped when the worker ends, before the worker is joined, so that
    a vector env's ``close()`` returns with no sandbox process of its workers left."""
    key = (backend, os.getpid())
    with _lock:
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = _Shared(backend)
            atexit.register(shared.shutdown)
            if multiprocessing.parent_process() is not None:
                multiprocessing.util.Finalize(None, shared.shutdown, exitpriority=10)
        return shared


class SharedSandbox:
    """An environment's handle on the process-wide sandbox of ``backend``: a runner (``run_many``,
    ``run``) whose first call starts the sandbox's workers, if they are not running, and makes it
    one of their users until ``close()``; when the last user closes (and no call is in flight),
    the workers stop, unless something pinned them (``shared_sandbox``: ``grade``, the adapters).
    A call after ``close()`` starts them again and makes the handle a user again, transparently.
    Every env made without an executor object holds one of its own (``code_env.env.default_executor``);
    a handle that is never closed counts until it is garbage-collected (the workers stop at the
    next release, or at exit). It pickles (and copies) as a new handle on the process-wide sandbox
    of the process where it lands, and a forked copy uses its own process's."""

    def __init__(self, backend: str = "auto") -> None:
        if not isinstance(backend, str):
            raise TypeError(f"backend: expected a backend name, got {type(backend).__name__}")
        self.backend = backend

    def run_many(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], **kwargs: Any) -> list[ExecutionResult]:
        """``Sandbox.run_many`` on the process-wide sandbox (started if needed)."""
        shared = _shared_of(self.backend)
        sb = shared.enter(self)
        try:
            return sb.run_many(requests, **kwargs)
        finally:
            shared.leave()

    def run(self, code: str, stdin: str = "", **kwargs: Any) -> ExecutionResult:
        """``Sandbox.run`` on the process-wide sandbox (started if needed)."""
        shared = _shared_of(self.backend)
        sb = shared.enter(self)
        try:
            return sb.run(code, stdin, **kwargs)
        finally:
            shared.leave()

    @property
    def sandbox(self) -> Sandbox | None:
        """The process-wide sandbox while its workers run, else None (never starts them)."""
        shared = _shared.get((self.backend, os.getpid()))
        return None if shared is None else shared.sandbox

    def close(self) -> None:
        """This handle no longer uses the workers (idempotent); the last user's close stops them."""
        shared = _shared.get((self.backend, os.getpid()))
        if shared is not None:
            shared.release(self)

    def __reduce__(self) -> tuple[type[SharedSandbox], tuple[str]]:
        return (SharedSandbox, (self.backend,))

    def __repr__(self) -> str:
        return f"SharedSandbox(backend={self.backend!r}, {'running' if self.sandbox is not None else 'not running'})"


def shared_sandbox(backend: str = "auto") -> Sandbox:
    """The process-wide sandbox of ``backend`` (one worker per core), started if it is not running
    and **pinned**: it then runs until the process exits, whatever environments close. The callers
    that have no ``close`` use it: ``grade``/``grade_many``/``evaluate`` without a sandbox (their
    first call starts the workers, which then stay, as ever), the TRL and verl adapters, replay,
    the demo. Environments hold a ``SharedSandbox`` instead, which starts the workers on their
    first program and stops them when the last env closes (unless pinned). A forked child (a
    SubprocVecEnv or AsyncVectorEnv worker) makes its own: the parent's workers are not its."""
    return _shared_of(backend).pin()


def is_shared_sandbox(runner: object, backend: str = "auto") -> bool:
    """Whether ``runner`` is this process's shared sandbox of ``backend``, or a ``SharedSandbox``
    handle on it (never starts one)."""
    if isinstance(runner, SharedSandbox):
        return runner.backend == backend
    with _lock:
        shared = _shared.get((backend, os.getpid()))
    return shared is not None and runner is not None and runner is shared.sandbox


def default_sandbox() -> Sandbox:
    """The shared sandbox of the default backend (pinned: ``shared_sandbox``)."""
    return shared_sandbox("auto")


EXECUTORS = ("local", "ray")
_shared_ray: dict[tuple[str | None, str, int], Runner] = {}


def shared_ray_executor(backend: str = "auto", address: str | None = None) -> Runner:
    """A process-wide ``sandbox.RayExecutor`` per (address, backend), made on first use (which
    starts a local Ray instance, or connects to ``address``, else to ``$RAY_ADDRESS``) and
    closed at exit."""
    from sandbox import RayExecutor

    address = address or os.environ.get("RAY_ADDRESS") or None
    key = (address, backend, os.getpid())
    with _lock:
        if key not in _shared_ray:
            ex = RayExecutor(address, backend="process" if backend == "auto" else backend)
            _shared_ray[key] = ex
            atexit.register(ex.close)
        return _shared_ray[key]


def resolve_executor(executor: Runner | str | None = None, *, backend: str = "auto",
                     ray_address: str | None = None) -> Runner:  # fmt: skip
    """THE place an executor option becomes a runner: None or ``"local"`` is the process-wide
    sandbox of ``backend`` (``shared_sandbox``); ``"ray"`` the process-wide ``RayExecutor``
    (``shared_ray_executor``: ``ray_address``, else ``$RAY_ADDRESS``, else a local Ray instance);
    a Redis URL (``"redis://HOST:PORT/DB"``) the process-wide ``RedisExecutor`` of that server's
    pool ``default`` (its executors: ``code-env executor --redis URL``); any object with
    ``run_many`` (a ``Sandbox``, a ``RayExecutor``, ...) is used as it is."""
    if executor is None or executor == "local":
        return shared_sandbox(backend)
    if executor == "ray":
        return shared_ray_executor(backend, ray_address)
    if isinstance(executor, str) and executor.startswith(("redis://", "rediss://", "unix://")):
        from sandbox import RedisExecutor

        return RedisExecutor.shared(executor)
    if isinstance(executor, str):
        close = difflib.get_close_matches(executor.lower(), EXECUTORS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"executor: expected 'local', 'ray', a Redis URL (redis://HOST:PORT/DB) or an object with "
                         f"run_many (a sandbox.Sandbox, a sandbox.RayExecutor), got {executor!r}{hint}")  # fmt: skip
    if not callable(getattr(executor, "run_many", None)):
        raise TypeError(f"executor: expected 'local', 'ray', a Redis URL or an object with run_many, got {type(executor).__name__}")
    return executor


class RunSummary(BaseModel):
    """What the program's runs on the public tests looked like, as an agent sees it: exit code and
    output of the run that shows what went wrong (function tasks: the last run, with the prints of
    every run; stdio tasks: the first run that failed, else the first), flags, and the total time."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timeout: bool = False
    oom: bool = False
    syntax_error: bool = False
    execution_time_ms: float = 0.0

    @classmethod
    def of(cls, v: Verification) -> RunSummary:
        runs = v.executions[: v.program_runs]
        if v.kind == "function":  # its stdout is the verifier's channel; the program's prints are on stderr
            shown = runs[-1] if runs else None  # (of a joint run, what it printed on the public tests)
            stdout, stderr = "", "".join(shown_output(r.stderr) for r in runs)
        else:  # a compile check, then one run per test
            runs = runs[1:]
            shown = next((r for r in runs if not r.ok), runs[0] if runs else None)
            stdout, stderr = (shown.stdout, shown.stderr) if shown is not None else ("", "")
        if shown is None:
            return cls(syntax_error=v.syntax_error is not None, stderr=v.syntax_error or "")
        return cls(
            exit_code=shown.exit_code if shown.exit_code is not None else -1,
            stdout=stdout,
            stderr=v.syntax_error or stderr,  # (the compile check's message, not a runner's traceback)
            timeout=v.timeout,
            oom=v.oom,
            syntax_error=v.syntax_error is not None,
            execution_time_ms=round(sum(r.execution_time_ms for r in runs), 3),
        )


class Grade(BaseModel):
    """A program's reward for a task, and everything that explains it. ``reward`` is None when the
    sandbox itself failed (``sandbox_error``, after one more try) or the LLM judge's endpoint did
    (``judge_error``: a timeout, a refused connection, HTTP 5xx or 429 after the retries): such a
    sample must be skipped, not scored."""

    problem_id: str
    reward: float | None
    breakdown: RewardBreakdown
    feedback: list[CaseResult] = Field(default_factory=list, description="public tests only")
    run: RunSummary = Field(default_factory=RunSummary, description="the public runs, as an agent sees them")
    sandbox_error: str | None = None
    judge_error: str | None = Field(None, description="why the LLM judge's endpoint failed (tier judge_error)")
    spent_s: float = Field(0.0, description="what its sandbox runs were charged of the grade's time budget "
                                            "(breakdown.budget_s): the sandbox's wall clock, each run at most its limit")


def aggregate(public: Verification, hidden: Verification | None, config: RewardConfig) -> RewardBreakdown:
    """The reward tier of a verification (public, and hidden when it ran), before any judge. A
    program that does not compile has no hidden verdict: its hidden run, if any, is ignored.
    ``all_tests`` needs at least one hidden test passed: a task without hidden tests tops out at
    ``all_public`` (its public tests are in the prompt, so an answer copied from there passes them).
    A grade whose time budget was spent (``Verification.budget_spent``, public or hidden) is a
    ``timeout``, whatever passed before; ``budget_s`` is recorded in every breakdown."""
    if public.syntax_error:
        hidden = None
    pp, pt = public.passed, public.total
    hp, ht = (hidden.passed, hidden.total) if hidden is not None else (0, 0)
    both = [v for v in (public, hidden) if v is not None]
    counts: dict[str, Any] = {"public_passed": pp, "public_total": pt, "hidden_passed": hp, "hidden_total": ht,
                              "budget_s": public.budget_s}  # fmt: skip
    errors = [v.sandbox_error for v in both if v.sandbox_error]
    if errors:
        return RewardBreakdown(tier="sandbox_error", reward=None, explanation=f"sandbox failure: {errors[0]}", **counts)
    if public.syntax_error:
        return RewardBreakdown(tier="syntax_error", reward=config.syntax_error, explanation=public.syntax_error, **counts)
    tampered = [v.tampered for v in both if v.tampered]
    if tampered:
        why = f"the program tampered with the verifier's result channel ({tampered[0]}): none of its answers count"
        return RewardBreakdown(tier="tampered", reward=config.tampered, explanation=why, **counts)
    if any(v.budget_spent for v in both):
        why = f"the grade's time budget of {public.budget_s:g} s was spent (registry.budget): a timeout"
        return RewardBreakdown(tier="timeout", reward=config.timeout, explanation=why, **counts)
    if pt and pp == pt:
        if hidden is not None and ht and hp == ht:
            return RewardBreakdown(tier="all_tests", reward=config.all_tests, explanation="every public and hidden test passed", **counts)
        # no hidden test, no top tier: a constant copied from the prompt's examples passes the public ones
        why = "every public test passed" + ((f"; {hp}/{ht} hidden" if ht else "; the task has no hidden test, so "
                                             "all_public is its top tier") if hidden is not None else "")  # fmt: skip
        return RewardBreakdown(tier="all_public", reward=config.all_public, explanation=why, **counts)
    if public.timeout or any(c.status == "timeout" for c in public.cases):
        return RewardBreakdown(tier="timeout", reward=config.timeout, explanation="a public test ran out of time", **counts)
    if public.oom:
        return RewardBreakdown(tier="oom", reward=config.oom, explanation="the program ran out of memory", **counts)
    if public.no_answer:
        why = "no attempt: " + (public.load_error or ("the program printed nothing" if public.kind == "stdio"
                                                      else "every call returned None"))  # fmt: skip
        return RewardBreakdown(tier="no_attempt", reward=config.no_attempt, explanation=why, **counts)
    reward = config.partial_max * pp / pt if pt else 0.0
    why = f"{pp}/{pt} public tests passed" + (f" ({public.load_error})" if public.load_error else "")
    return RewardBreakdown(tier="partial", reward=round(reward, 6), explanation=why, **counts)


class Scored(NamedTuple):
    """One candidate through ``score_rounds``: its grade and the verifications behind it
    (``hidden`` None when the hidden tests did not run or do not count); ``ran_as``: the trace id
    its public runs carry (the item's, with the retry counter of the try that counted);
    ``retried``: the verifications of the tries the sandbox failed (their runs carry the earlier
    retry counters); ``transitions``: its timed states, ``queued`` to ``judged`` (see
    ``code_env.tracing``)."""

    grade: Grade
    public: Verification
    hidden: Verification | None
    ran_as: str
    retried: list[Verification]
    transitions: Transitions


HiddenTests = Literal["together", "after_public", "no"]
Rounds = Generator[list[Job], list[Verification], list[Scored]]


def score_rounds(items: Sequence[tuple[Task, str, str]], config: RewardConfig, *,
                 hidden: HiddenTests = "together", language: str = "python") -> Rounds:  # fmt: skip
    """THE path from programs to rewards: ``grade``, ``grade_many``, ``evaluate``, both
    environments' steps and the TRL/verl adapters all come here. ``items`` are (task, program,
    trace id). A generator of verification rounds: each ``yield`` hands the caller jobs and
    receives their verifications (``verify_many``), so that a vector env can merge the rounds of
    all its sub-envs into one batch; the return value is one ``Scored`` per item.

    ``hidden``: ``"together"`` runs the hidden tests with the public ones (joint jobs: a function
    task's program answers both in one run, public tests first; ``registry.verify.Job``), for a
    grade that shows no observation between them; ``"after_public"``
    only for programs that pass every public test (a multi-turn episode's step); ``"no"`` never.
    A verification the sandbox failed is run once more (our failure, not the program's), its runs
    under the trace id's next retry counter (``code_env.tracing``); the tiers come from
    ``aggregate``; the LLM judge, when configured, then scales every positive final reward (with
    ``"after_public"``, final means the hidden tests ran). Each item's states are timed here,
    around each round: the generator waits at its ``yield`` while the round runs. Each item has
    one total time budget (``registry.budget``, ``config.grade_budget_runs``; None: none) that its
    public and hidden jobs share and a try the sandbox failed is refunded from: spent, the item
    is a ``timeout`` (``aggregate``), ``Grade.spent_s`` says what its runs were charged.
    ``language``: the programs' (``sandbox.languages``; a stdio task's program may be in any language
    the sandbox runs, a function task's is Python)."""
    n = len(items)
    runs = config.grade_budget_runs
    budgets = [None if runs is None else Budget(budget_s(t, runs)) for t, _, _ in items]
    hid: list[Verification | None] = [None] * n
    marks: list[Transitions] = [[] for _ in range(n)]
    failed: list[list[Verification]] = [[] for _ in range(n)]
    if hidden == "together":  # no observation between them: joint jobs (registry.verify.Job)
        joint = [Job(t, code, "both", tid, b, language) for (t, code, tid), b in zip(items, budgets, strict=True)]
        pub, public_again = yield from _verified(joint, list(range(n)), marks, failed)
        hid = [v.hidden_part for v in pub]
    else:
        public = [Job(t, code, "public", f"{tid}/public", b, language) for (t, code, tid), b in zip(items, budgets, strict=True)]
        secret = [Job(t, code, "hidden", f"{tid}/hidden", b, language) for (t, code, tid), b in zip(items, budgets, strict=True)]
        pub, public_again = yield from _verified(public, list(range(n)), marks, failed)
        due = [k for k, v in enumerate(pub) if hidden == "after_public" and not v.sandbox_error and v.total and v.passed == v.total]
        if due:
            checked, _ = yield from _verified([secret[k] for k in due], due, marks, failed)
            for k, v in zip(due, checked, strict=True):
                hid[k] = v
    scored: list[Scored] = []
    for k, ((task, _, tid), p, h) in enumerate(zip(items, pub, hid, strict=True)):
        h = None if p.syntax_error or p.sandbox_error else h
        b = aggregate(p, h, config)
        g = Grade(problem_id=task.problem_id, reward=b.reward, breakdown=b, feedback=p.cases, run=RunSummary.of(p),
                  sandbox_error=p.sandbox_error or (h.sandbox_error if h else None),
                  spent_s=round(p.spent_s + (h.spent_s if h else 0.0), 3))  # fmt: skip
        scored.append(Scored(g, p, h, retried(tid, public_again[k]), failed[k], marks[k]))
    if config.judge is not None:
        final = [k for k in range(n) if hidden != "after_public" or hid[k] is not None]
        asked = [k for k in final if (scored[k].grade.reward or 0.0) > 0]
        t0 = time.time()
        timed_out = _judge([(items[k][0], items[k][1], scored[k].grade) for k in final], config.judge)
        t1 = time.time()
        for k, late in zip(asked, timed_out, strict=True):
            scored[k].transitions.extend([("judging", t0), *([("timed-out", t1)] if late else [])])
    now = time.time()
    for s in scored:
        s.transitions.append(("judged", now))
    return scored


def _verified(jobs: list[Job], owners: list[int], marks: list[Transitions],
              failed: list[list[Verification]]) -> Generator[list[Job], list[Verification], tuple[list[Verification], list[int]]]:  # fmt: skip
    """One round of verification; the jobs the sandbox failed on (ours, not the program's) run
    once more, under their trace ids' next retry counter. ``owners[k]``: the item job k belongs
    to, whose ``marks`` get the round's states and whose ``failed`` the failed tries. Returns the
    verifications and, per job, how many more tries it took (0 or 1)."""
    submitted = time.time()
    results = list((yield jobs))
    _mark_round(submitted, results, owners, marks)
    again = [k for k, v in enumerate(results) if any(part.sandbox_error for part in _parts(v))]
    tries = [0] * len(jobs)
    for k in again:  # the runs of a try the sandbox failed are made again: not the program's to pay
        if (b := jobs[k].budget) is not None:
            b.refund(sum(part.spent_s for part in _parts(results[k])))
    if again:
        retry = [jobs[k]._replace(trace_id=retried(t)) if (t := jobs[k].trace_id) else jobs[k] for k in again]
        submitted = time.time()
        second = list((yield retry))
        _mark_round(submitted, second, [owners[k] for k in again], marks)
        for k, v in zip(again, second, strict=True):
            failed[owners[k]].extend(_parts(results[k]))
            results[k], tries[k] = v, 1
    return results, tries


def _parts(v: Verification) -> list[Verification]:
    """A verification and, of a joint job, its hidden part."""
    return [v] if v.hidden_part is None else [v, v.hidden_part]


def _mark_round(submitted: float, results: list[Verification], owners: list[int], marks: list[Transitions]) -> None:
    done = time.time()
    runs: dict[int, list[Any]] = {}
    for owner, v in zip(owners, results, strict=True):
        runs.setdefault(owner, []).extend(r for part in _parts(v) for r in part.executions)
    for owner, rs in runs.items():
        marks[owner].extend(run_marks(submitted, rs, done))


def program_language(language: str, tasks: Iterable[Task] = ()) -> str:
    """The canonical name of ``language`` (``sandbox.languages``) for programs that answer
    ``tasks``: ``UnknownLanguageError`` for a name no language has, ``LanguageUnavailableError``
    where a task is a function task and the language has no driver (``registry.verify.FUNCTION_DRIVERS``:
    Python and JavaScript)."""
    from sandbox.languages import resolve

    name = resolve(language).name
    if name not in FUNCTION_DRIVERS:
        for task in tasks:
            if task.kind == "function":
                raise LanguageUnavailableError(function_task_refusal(task.problem_id, name))
    return name


def run_rounds(rounds: Generator[list[Job], list[Verification], Any], runner: Runner) -> Any:
    """Drive a generator of verification rounds with ``verify_many`` on ``runner``; its return value."""
    try:
        jobs = next(rounds)
        while True:
            jobs = rounds.send(verify_many(jobs, runner))
    except StopIteration as stop:
        return stop.value


def grade(task: Task, code: str, *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
          hidden: bool = True, trace_id: str | None = None, language: str = "python") -> Grade:  # fmt: skip
    """Run ``code`` on the task's public tests and, unless ``hidden=False``, its hidden tests (both
    at once: the hidden verdict is simply ignored when the program does not compile). ``language``:
    the program's (a stdio task takes any language the sandbox runs; a compile error is the
    syntax-error tier)."""
    return grade_many([(task, code)], sandbox=sandbox, config=config, hidden=hidden,
                      trace_ids=[trace_id] if trace_id else None, language=language)[0]  # fmt: skip


def grade_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
               hidden: bool = True, trace_ids: Sequence[str] | None = None, language: str = "python") -> list[Grade]:  # fmt: skip
    """Grade many (task, program) pairs in one batch: every sandbox run of every pair goes to the
    runner (a ``Sandbox`` or any executor with its ``run_many``, or ``"local"``/``"ray"``: see
    ``resolve_executor``) at once. Identical pairs are judged once. Grades come back in order; each
    is what ``grade`` would give."""
    return [j.grade for j in judge_many(items, sandbox=sandbox, config=config, hidden=hidden, trace_ids=trace_ids,
                                        language=language)]  # fmt: skip


# The threads that drive ``agrade_many``'s grades (a grade waits on its sandbox runs; the runs
# themselves are the sandbox's workers'): a bounded pool, so that many awaiting callers hold no
# thread each; made on first use.
GRADING_THREADS = 8
_grading_pool: ThreadPoolExecutor | None = None
_grading_pool_lock = threading.Lock()


def _grading_executor() -> ThreadPoolExecutor:
    global _grading_pool
    with _grading_pool_lock:
        if _grading_pool is None:
            _grading_pool = ThreadPoolExecutor(max_workers=GRADING_THREADS, thread_name_prefix="code-env-grade")
        return _grading_pool


async def agrade(task: Task, code: str, *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
                 hidden: bool = True, trace_id: str | None = None, language: str = "python") -> Grade:  # fmt: skip
    """``grade`` for an event loop (``agrade_many``)."""
    return (await agrade_many([(task, code)], sandbox=sandbox, config=config, hidden=hidden,
                              trace_ids=[trace_id] if trace_id else None, language=language))[0]  # fmt: skip


async def agrade_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | str | None = None,
                      config: RewardConfig | None = None, hidden: bool = True, trace_ids: Sequence[str] | None = None,
                      language: str = "python") -> list[Grade]:  # fmt: skip
    """``grade_many`` for an event loop: the batch is graded by one of ``GRADING_THREADS`` shared
    threads while the caller awaits (no thread per call: batches beyond that wait in line).
    Cancelling the awaiting task withdraws a batch that has not begun and kills the runs of one
    that has (``sandbox.cancelling``: a sandbox in this process; its grade is dropped)."""
    cancel = Cancel()

    def work() -> list[Grade]:
        with cancelling(cancel):
            return grade_many(items, sandbox=sandbox, config=config, hidden=hidden, trace_ids=trace_ids, language=language)

    future = _grading_executor().submit(work)
    try:
        return await asyncio.wrap_future(future)
    except BaseException:
        future.cancel()
        cancel.cancel()  # its runs in flight are killed, the rest answer at once: the thread is free
        raise


class Judged(NamedTuple):
    """One pair of ``judge_many``: its grade, the verifications behind it, the trace id its public
    runs carry (``ran_as``: its own, with the retry counter of the try that counted, or that of
    the identical pair of the batch that was judged for it), the verifications of the tries the
    sandbox failed (``retried``) and its timed states (``queued``, ``running``, ``executed`` per
    round, ``judged``: ``code_env.tracing``)."""

    grade: Grade
    public: Verification
    hidden: Verification | None
    ran_as: str
    transitions: Transitions
    retried: list[Verification]


def judge_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
               hidden: bool = True, trace_ids: Sequence[str] | None = None,
               overflowed: Sequence[bool] | None = None, language: str = "python") -> list[Judged]:  # fmt: skip
    """``grade_many`` with everything a trajectory record needs: per pair, the verifications
    (raw ``ExecutionResult``s included), the trace id of its runs and its timed states.
    ``overflowed[i]``: pair i's reply stopped at the model's token or context limit; with
    ``config.context_window_overflow`` set, such a pair is not run: its reward is that value
    (tier ``context_window_overflow``), its verifications empty. ``language``: the programs' (a name
    or alias of ``sandbox.languages``; ``LanguageUnavailableError`` for a function task in another
    language than Python, before anything runs)."""
    for i, pair in enumerate(items):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"items[{i}]: expected a (task, code) pair, got {type(pair).__name__}")
        task, code = pair
        if not isinstance(task, Task):
            raise TypeError(f"task: expected registry.Task, got {type(task).__name__}")
        if not isinstance(code, str):
            raise TypeError(f"code: expected str, got {type(code).__name__}")
    if trace_ids is not None and len(trace_ids) != len(items):
        raise ValueError(f"{len(items)} items but {len(trace_ids)} trace ids")
    if overflowed is not None and len(overflowed) != len(items):
        raise ValueError(f"{len(items)} items but {len(overflowed)} overflow flags")
    language = program_language(language, [task for task, _ in items])
    cfg = config or RewardConfig()
    tids = [trace_ids[i] if trace_ids else trace_id(items[i][0].problem_id, i) for i in range(len(items))]
    cut = [bool(overflowed and overflowed[i]) and cfg.context_window_overflow is not None for i in range(len(items))]
    unique: dict[tuple[int, str], int] = {}
    first: list[int] = []
    for i, (task, code) in enumerate(items):
        first.append(-1 if cut[i] else unique.setdefault((id(task), code), i))  # the tasks live through the call
    todo = sorted({f for f in first if f >= 0})
    batch = [(items[i][0], items[i][1], tids[i]) for i in todo]
    scored = run_rounds(score_rounds(batch, cfg, hidden="together" if hidden else "no", language=language),
                        resolve_executor(sandbox)) if batch else []  # fmt: skip
    by_first = dict(zip(todo, scored, strict=True))
    out = []
    for i, f in enumerate(first):
        if f < 0:
            out.append(_overflowed(items[i][0], cfg, tids[i]))
            continue
        s = by_first[f]
        out.append(Judged(s.grade if f == i else s.grade.model_copy(deep=True), s.public, s.hidden, s.ran_as,
                          list(s.transitions), list(s.retried)))  # fmt: skip
    return out


def overflow_breakdown(config: RewardConfig) -> RewardBreakdown:
    """The breakdown of a reply that stopped at the model's limit, under ``context_window_overflow``."""
    why = "the reply stopped at the model's token or context limit; it was not run (reward config context_window_overflow)"
    return RewardBreakdown(tier="context_window_overflow", reward=config.context_window_overflow, explanation=why)


def _overflowed(task: Task, config: RewardConfig, tid: str) -> Judged:
    b = overflow_breakdown(config)
    none = Verification(kind=task.kind)
    return Judged(Grade(problem_id=task.problem_id, reward=b.reward, breakdown=b), none, None, tid, [], [])


_judges: dict[JudgeConfig, LLMJudge] = {}


def judge_for(config: JudgeConfig) -> LLMJudge:
    """One judge (and one cache) per configuration in this process."""
    with _lock:
        if config not in _judges:
            _judges[config] = LLMJudge(config)
        return _judges[config]


def _judge(graded: list[tuple[Task, str, Grade]], config: JudgeConfig) -> list[bool]:
    """Ask the judge about every program with a positive reward, concurrently (the calls wait on
    the network, not the CPU), and fold its score into the reward and the breakdown. A call the
    endpoint failed (``JudgeVerdict.error``) makes the grade a ``judge_error``: reward None (drop
    the sample, as for a ``sandbox_error``), ``Grade.judge_error`` says why. Per program asked:
    whether the judge timed out."""
    todo = [(t, c, g) for t, c, g in graded if g.reward is not None and g.reward > 0]
    if not todo:
        return []
    judge = judge_for(config)
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        verdicts = list(pool.map(lambda item: judge.score(item[0].prompt, item[1]), todo))
    for (_, _, g), verdict in zip(todo, verdicts, strict=True):
        assert g.reward is not None
        b = g.breakdown
        b.reward_before_judge, b.judge_score, b.judge_neutral = g.reward, verdict.score, verdict.neutral
        if verdict.error is not None:
            b.tier, b.reward, g.reward, g.judge_error = "judge_error", None, None, verdict.error
            b.explanation += f"; {verdict.reason}: not scored (a failure of the judge's endpoint, not of the program)"
            continue
        b.reward = g.reward = apply(g.reward, verdict, config.weight)
        b.explanation += f"; {verdict.reason} (weight {config.weight:g})"
    return [v.timed_out for v in verdicts]
