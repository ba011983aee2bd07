"""``grade(task, code)``: the reward of a program for a task, outside any episode. Every reward
of the package comes from one function, ``score_rounds`` (the verification rounds, one more try on a
sandbox failure, the tiers, the LLM judge): ``grade``, ``grade_many``, ``evaluate``, the steps of
``CodeExec-v0`` (single and vector) and ``CodeExecTokens-v0``, and the TRL/verl adapters."""

from __future__ import annotations

import atexit
import difflib
import os
import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from registry import Task
from registry.verify import CaseResult, Job, Runner, Verification, verify_many
from sandbox import Sandbox

from .judge import JudgeConfig, LLMJudge, apply
from .reward import RewardBreakdown, RewardConfig

_shared: dict[tuple[str, int], Sandbox] = {}
_lock = threading.Lock()


def shared_sandbox(backend: str = "auto") -> Sandbox:
    """A process-wide sandbox per backend (one worker per core), made on first use and shared by
    every grader and environment of the process that does not bring its own executor. A forked
    child (a SubprocVecEnv or AsyncVectorEnv worker) makes its own: the parent's workers are not its."""
    key = (backend, os.getpid())
    with _lock:
        if key not in _shared:
            sb = Sandbox(backend)
            _shared[key] = sb
            atexit.register(sb.close)
        return _shared[key]


def default_sandbox() -> Sandbox:
    """The shared sandbox of the default backend."""
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
    any object with ``run_many`` (a ``Sandbox``, a ``RayExecutor``, ...) is used as it is."""
    if executor is None or executor == "local":
        return shared_sandbox(backend)
    if executor == "ray":
        return shared_ray_executor(backend, ray_address)
    if isinstance(executor, str):
        close = difflib.get_close_matches(executor.lower(), EXECUTORS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"executor: expected 'local', 'ray' or an object with run_many (a sandbox.Sandbox, "
                         f"a sandbox.RayExecutor), got {executor!r}{hint}")  # fmt: skip
    if not callable(getattr(executor, "run_many", None)):
        raise TypeError(f"executor: expected 'local', 'ray' or an object with run_many, got {type(executor).__name__}")
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
            shown = runs[-1] if runs else None
            stdout, stderr = "", "".join(r.stderr for r in runs)
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
    sandbox itself failed (``sandbox_error``, after one more try): such a sample must be skipped,
    not scored."""

    problem_id: str
    reward: float | None
    breakdown: RewardBreakdown
    feedback: list[CaseResult] = Field(default_factory=list, description="public tests only")
    run: RunSummary = Field(default_factory=RunSummary, description="the public runs, as an agent sees them")
    sandbox_error: str | None = None


def aggregate(public: Verification, hidden: Verification | None, config: RewardConfig) -> RewardBreakdown:
    """The reward tier of a verification (public, and hidden when it ran), before any judge. A
    program that does not compile has no hidden verdict: its hidden run, if any, is ignored."""
    if public.syntax_error:
        hidden = None
    pp, pt = public.passed, public.total
    hp, ht = (hidden.passed, hidden.total) if hidden is not None else (0, 0)
    counts = {"public_passed": pp, "public_total": pt, "hidden_passed": hp, "hidden_total": ht}
    both = [v for v in (public, hidden) if v is not None]
    errors = [v.sandbox_error for v in both if v.sandbox_error]
    if errors:
        return RewardBreakdown(tier="sandbox_error", reward=None, explanation=f"sandbox failure: {errors[0]}", **counts)
    if public.syntax_error:
        return RewardBreakdown(tier="syntax_error", reward=config.syntax_error, explanation=public.syntax_error, **counts)
    tampered = [v.tampered for v in both if v.tampered]
    if tampered:
        why = f"the program tampered with the verifier's result channel ({tampered[0]}): none of its answers count"
        return RewardBreakdown(tier="tampered", reward=config.tampered, explanation=why, **counts)
    if pt and pp == pt:
        if hidden is not None and hp == ht:  # a task without hidden tests: its public ones are all
            return RewardBreakdown(tier="all_tests", reward=config.all_tests, explanation="every public and hidden test passed", **counts)
        why = "every public test passed" + (f"; {hp}/{ht} hidden" if hidden is not None else "")
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
    (``hidden`` None when the hidden tests did not run or do not count)."""

    grade: Grade
    public: Verification
    hidden: Verification | None


HiddenTests = Literal["together", "after_public", "no"]
Rounds = Generator[list[Job], list[Verification], list[Scored]]


def score_rounds(items: Sequence[tuple[Task, str, str]], config: RewardConfig, *,
                 hidden: HiddenTests = "together") -> Rounds:  # fmt: skip
    """THE path from programs to rewards: ``grade``, ``grade_many``, ``evaluate``, both
    environments' steps and the TRL/verl adapters all come here. ``items`` are (task, program,
    trace id). A generator of verification rounds: each ``yield`` hands the caller jobs and
    receives their verifications (``verify_many``), so that a vector env can merge the rounds of
    all its sub-envs into one batch; the return value is one ``Scored`` per item.

    ``hidden``: ``"together"`` runs the hidden tests beside the public ones; ``"after_public"``
    only for programs that pass every public test (a multi-turn episode's step); ``"no"`` never.
    A verification the sandbox failed is run once more (our failure, not the program's); the
    tiers come from ``aggregate``; the LLM judge, when configured, then scales every positive
    final reward (with ``"after_public"``, final means the hidden tests ran)."""
    n = len(items)
    public = [Job(t, code, "public", f"{tid}/public") for t, code, tid in items]
    secret = [Job(t, code, "hidden", f"{tid}/hidden") for t, code, tid in items]
    hid: list[Verification | None] = [None] * n
    if hidden == "together":
        both = yield from _verified(public + secret)
        pub, hid = both[:n], list(both[n:])
    else:
        pub = yield from _verified(public)
        due = [k for k, v in enumerate(pub) if hidden == "after_public" and not v.sandbox_error and v.total and v.passed == v.total]
        if due:
            for k, v in zip(due, (yield from _verified([secret[k] for k in due])), strict=True):
                hid[k] = v
    scored: list[Scored] = []
    for (task, _, _), p, h in zip(items, pub, hid, strict=True):
        h = None if p.syntax_error or p.sandbox_error else h
        b = aggregate(p, h, config)
        g = Grade(problem_id=task.problem_id, reward=b.reward, breakdown=b, feedback=p.cases, run=RunSummary.of(p),
                  sandbox_error=p.sandbox_error or (h.sandbox_error if h else None))  # fmt: skip
        scored.append(Scored(g, p, h))
    if config.judge is not None:
        final = [k for k in range(n) if hidden != "after_public" or hid[k] is not None]
        _judge([(items[k][0], items[k][1], scored[k].grade) for k in final], config.judge)
    return scored


def _verified(jobs: list[Job]) -> Generator[list[Job], list[Verification], list[Verification]]:
    """One round of verification; the jobs the sandbox failed on (ours, not the program's) run once more."""
    results = list((yield jobs))
    again = [k for k, v in enumerate(results) if v.sandbox_error]
    if again:
        for k, v in zip(again, (yield [jobs[k] for k in again]), strict=True):
            results[k] = v
    return results


def run_rounds(rounds: Generator[list[Job], list[Verification], Any], runner: Runner,
               marks: list[tuple[str, float]] | None = None) -> Any:  # fmt: skip
    """Drive a generator of verification rounds with ``verify_many`` on ``runner``; its return
    value. ``marks``: appended ``("running", t)`` and ``("executed", t)`` (``time.time()``) around
    each round, the states of the trajectory log."""
    try:
        jobs = next(rounds)
        while True:
            if marks is not None:
                marks.append(("running", time.time()))
            results = verify_many(jobs, runner)
            if marks is not None:
                marks.append(("executed", time.time()))
            jobs = rounds.send(results)
    except StopIteration as stop:
        return stop.value


def grade(task: Task, code: str, *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
          hidden: bool = True, trace_id: str | None = None) -> Grade:  # fmt: skip
    """Run ``code`` on the task's public tests and, unless ``hidden=False``, its hidden tests (both
    at once: the hidden verdict is simply ignored when the program does not compile)."""
    return grade_many([(task, code)], sandbox=sandbox, config=config, hidden=hidden,
                      trace_ids=[trace_id] if trace_id else None)[0]  # fmt: skip


def grade_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
               hidden: bool = True, trace_ids: Sequence[str] | None = None) -> list[Grade]:  # fmt: skip
    """Grade many (task, program) pairs in one batch: every sandbox run of every pair goes to the
    runner (a ``Sandbox`` or any executor with its ``run_many``, or ``"local"``/``"ray"``: see
    ``resolve_executor``) at once. Identical pairs are judged once. Grades come back in order; each
    is what ``grade`` would give."""
    return [j.grade for j in judge_many(items, sandbox=sandbox, config=config, hidden=hidden, trace_ids=trace_ids)]


class Judged(NamedTuple):
    """One pair of ``judge_many``: its grade, the verifications behind it, the trace id its runs
    carry (``ran_as``: its own, or that of the identical pair of the batch that was judged for
    it) and the states of the batch with their times (``("queued", t)``, then ``("running", t)``
    and ``("executed", t)`` per round, ``("judged", t)``)."""

    grade: Grade
    public: Verification
    hidden: Verification | None
    ran_as: str
    transitions: list[tuple[str, float]]


def judge_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | str | None = None, config: RewardConfig | None = None,
               hidden: bool = True, trace_ids: Sequence[str] | None = None) -> list[Judged]:  # fmt: skip
    """``grade_many`` with everything a trajectory record needs: per pair, the verifications
    (raw ``ExecutionResult``s included), the trace id of its runs and the batch's timed states."""
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
    marks: list[tuple[str, float]] = [("queued", time.time())]
    unique: dict[tuple[int, str], int] = {}
    first: list[int] = []
    for i, (task, code) in enumerate(items):
        first.append(unique.setdefault((id(task), code), i))  # the tasks live through the call
    todo = sorted(set(first))
    tids = [trace_ids[i] if trace_ids else f"{items[i][0].problem_id}/{i}/0" for i in range(len(items))]
    batch = [(items[i][0], items[i][1], tids[i]) for i in todo]
    runner = resolve_executor(sandbox)
    scored = run_rounds(score_rounds(batch, config or RewardConfig(), hidden="together" if hidden else "no"), runner, marks)
    marks.append(("judged", time.time()))
    by_first = dict(zip(todo, scored, strict=True))
    out = []
    for i, f in enumerate(first):
        g, pub, hid = by_first[f]
        out.append(Judged(g if f == i else g.model_copy(deep=True), pub, hid, tids[f], marks))
    return out


_judges: dict[JudgeConfig, LLMJudge] = {}


def judge_for(config: JudgeConfig) -> LLMJudge:
    """One judge (and one cache) per configuration in this process."""
    with _lock:
        if config not in _judges:
            _judges[config] = LLMJudge(config)
        return _judges[config]


def _judge(graded: list[tuple[Task, str, Grade]], config: JudgeConfig) -> None:
    """Ask the judge about every program with a positive reward, concurrently (the calls wait on
    the network, not the CPU), and fold its score into the reward and the breakdown."""
    todo = [(t, c, g) for t, c, g in graded if g.reward is not None and g.reward > 0]
    if not todo:
        return
    judge = judge_for(config)
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        verdicts = list(pool.map(lambda item: judge.score(item[0].prompt, item[1]), todo))
    for (_, _, g), verdict in zip(todo, verdicts, strict=True):
        assert g.reward is not None
        b = g.breakdown
        b.reward_before_judge, b.judge_score, b.judge_neutral = g.reward, verdict.score, verdict.neutral
        b.reward = g.reward = apply(g.reward, verdict, config.weight)
        b.explanation += f"; {verdict.reason} (weight {config.weight:g})"
