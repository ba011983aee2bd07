"""``grade(task, code)``: the reward of a program for a task, outside any episode — the same
function the environment, GRPO and the TRL/verl adapters use."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

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


class RunSummary(BaseModel):
    """What the program's runs on the public tests looked like, as an agent sees it: exit code and
    output of the first run that failed (else of the first run), flags, and the total time."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timeout: bool = False
    oom: bool = False
    syntax_error: bool = False
    execution_time_ms: float = 0.0

    @classmethod
    def of(cls, v: Verification) -> RunSummary:
        if v.kind == "function":  # one run; its stdout is the verifier's channel, prints are on stderr
            runs, hide_stdout = v.executions[:1], True
        else:  # a compile check, then one run per test (checker runs come after)
            runs, hide_stdout = v.executions[1 : 1 + len(v.cases)], False
        shown = next((r for r in runs if not r.ok), runs[0] if runs else None)
        if shown is None:
            return cls(syntax_error=v.syntax_error is not None, stderr=v.syntax_error or "")
        stderr = v.syntax_error or shown.stderr  # (the compile check's message, not a runner's traceback)
        return cls(
            exit_code=shown.exit_code if shown.exit_code is not None else -1,
            stdout="" if hide_stdout else shown.stdout,
            stderr=stderr,
            timeout=v.timeout,
            oom=v.oom,
            syntax_error=v.syntax_error is not None,
            execution_time_ms=round(sum(r.execution_time_ms for r in runs), 3),
        )


class Grade(BaseModel):
    """A program's reward for a task, and everything that explains it. ``reward`` is None when the
    sandbox itself failed (``sandbox_error``): such a sample must be skipped, not scored."""

    problem_id: str
    reward: float | None
    breakdown: RewardBreakdown
    feedback: list[CaseResult] = Field(default_factory=list, description="public tests only")
    run: RunSummary = Field(default_factory=RunSummary, description="the public runs, as an agent sees them")
    sandbox_error: str | None = None


def aggregate(public: Verification, hidden: Verification | None, config: RewardConfig) -> RewardBreakdown:
    """The reward tier of a verification (public, and hidden when it ran). A program that does
    not compile has no hidden verdict: its hidden run, if any, is ignored."""
    if public.syntax_error:
        hidden = None
    pp, pt = public.passed, public.total
    hp, ht = (hidden.passed, hidden.total) if hidden is not None else (0, 0)
    counts = {"public_passed": pp, "public_total": pt, "hidden_passed": hp, "hidden_total": ht}
    errors = [v.sandbox_error for v in (public, hidden) if v is not None and v.sandbox_error]
    if errors:
        return RewardBreakdown(tier="sandbox_error", reward=None, explanation=f"sandbox failure: {errors[0]}", **counts)
    if public.syntax_error:
        return RewardBreakdown(tier="syntax_error", reward=config.syntax_error, explanation=public.syntax_error, **counts)
    if pt and pp == pt:
        if hidden is not None and hp == ht:  # a task without hidden tests: its public ones are all
            return RewardBreakdown(tier="all_tests", reward=config.all_tests, explanation="every public and hidden test passed", **counts)
        why = "every public test passed" + (f"; {hp}/{ht} hidden" if hidden is not None else "")
        return RewardBreakdown(tier="all_public", reward=config.all_public, explanation=why, **counts)
    if public.timeout or any(c.status == "timeout" for c in public.cases):
        return RewardBreakdown(tier="timeout", reward=config.timeout, explanation="a public test ran out of time", **counts)
    if public.oom:
        return RewardBreakdown(tier="oom", reward=config.oom, explanation="the program ran out of memory", **counts)
    reward = config.partial_max * pp / pt if pt else 0.0
    why = f"{pp}/{pt} public tests passed" + (f" ({public.load_error})" if public.load_error else "")
    return RewardBreakdown(tier="partial", reward=round(reward, 6), explanation=why, **counts)


def grade(task: Task, code: str, *, sandbox: Runner | None = None, config: RewardConfig | None = None,
          hidden: bool = True, trace_id: str | None = None) -> Grade:  # fmt: skip
    """Run ``code`` on the task's public tests and, unless ``hidden=False``, its hidden tests (both
    at once: the hidden verdict is simply ignored when the program does not compile)."""
    return grade_many([(task, code)], sandbox=sandbox, config=config, hidden=hidden,
                      trace_ids=[trace_id] if trace_id else None)[0]  # fmt: skip


def grade_many(items: Sequence[tuple[Task, str]], *, sandbox: Runner | None = None, config: RewardConfig | None = None,
               hidden: bool = True, trace_ids: Sequence[str] | None = None) -> list[Grade]:  # fmt: skip
    """Grade many (task, program) pairs in one batch: every sandbox run of every pair goes to the
    runner (a ``Sandbox`` or any executor with its ``run_many``) at once. Identical pairs are judged
    once. Grades come back in order; each is what ``grade`` would give."""
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
    sb = sandbox or default_sandbox()
    cfg = config or RewardConfig()
    unique: dict[tuple[int, str], int] = {}
    first: list[int] = []
    for i, (task, code) in enumerate(items):
        first.append(unique.setdefault((id(task), code), i))  # the tasks live through the call
    todo = sorted(set(first))
    tids = {i: (trace_ids[i] if trace_ids else f"{items[i][0].problem_id}/{i}/0") for i in todo}
    jobs = [Job(items[i][0], items[i][1], "public", f"{tids[i]}/public") for i in todo]
    if hidden:
        jobs += [Job(items[i][0], items[i][1], "hidden", f"{tids[i]}/hidden") for i in todo]
    results = verify_many(jobs, sb)
    grades: dict[int, Grade] = {}
    for n, i in enumerate(todo):
        pub = results[n]
        hid = results[len(todo) + n] if hidden and not pub.syntax_error and not pub.sandbox_error else None
        breakdown = aggregate(pub, hid, cfg)
        grades[i] = Grade(
            problem_id=items[i][0].problem_id,
            reward=breakdown.reward,
            breakdown=breakdown,
            feedback=pub.cases,
            run=RunSummary.of(pub),
            sandbox_error=pub.sandbox_error or (hid.sandbox_error if hid else None),
        )
    if cfg.judge is not None:
        _judge([(items[i][0], items[i][1], grades[i]) for i in todo], cfg.judge)
    return [grades[f] if f == i else grades[f].model_copy(deep=True) for i, f in enumerate(first)]


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
