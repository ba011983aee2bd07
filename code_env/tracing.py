"""THE trace id of a sample and THE states it goes through: one key joins every line about a
sample in every log of a run (the trajectory records, the runs in them, an LLM agent's
``llm_record.jsonl``).

A sample's trace id is ``problem_id/sample/turn/retry``: ``sample`` numbers the samples of a run
(the episodes since the last seeded ``reset`` of ``CodeExec-v0``, or the one an agent gives with
``reset(options={"sample": n})``; a trainer's running count), ``turn`` the step of a multi-turn
episode (0 for a single-turn sample), ``retry`` how often the sandbox was asked again after a
failure of its own (0: the first try). Its runs carry it with what they are appended
(``.../public``, ``.../hidden``, ``.../public+hidden`` for a single-turn grade's joint run of a
function task, ``.../public/3`` for a stdio task's test 3, ``.../public/syntax``,
``.../public/checker/0``). ``key`` (``problem_id/sample/turn``) is the same for every retry: the
join key.

The states (``transitions`` in a record, each ``[state, unix time]``) and the part that owns each
one's deadline:

============================  ================  ==================================================
state                         owner             its timeout, and what follows it
============================  ================  ==================================================
``generating``                agent / trainer   the LLM agent's ``timeout_s`` per request; GRPO
                                                ``--model``'s ``generation_timeout_s``. Past it:
                                                ``timed-out``, then what was written (maybe nothing)
                                                is judged.
``context_window_overflow``   agent / trainer   not a timeout: the model stopped at its token or
                                                context limit. The reply is judged as it is, unless
                                                ``RewardConfig.context_window_overflow`` gives it a
                                                reward: then the sample ends here, with no run.
``queued``                    executor          ``Sandbox(queue_timeout_s=...)``: a run that waited
                                                longer for a worker is answered ``sandbox_error``
                                                (``timed-out``); the grader asks once more, with
                                                ``retry`` + 1, then gives up (never scored).
``running``                   executor          the test's time limit (wall and CPU): ``timed-out``,
                                                and the verdict ``timeout``.
``executed``                  grader            the runs are back; ``judging`` when an LLM judge
``judging``                                     is asked, within ``JudgeConfig.timeout_s`` (past it,
                                                after the retries: ``timed-out``, and the sample is
                                                a ``judge_error``: no reward, dropped).
``judged``                                      the reward is known (terminal).
``overflow``                  environment       the action was longer than ``max_action_chars``
                                                (terminal).
============================  ================  ==================================================

A ``timed-out`` always follows the state whose deadline passed. The environment's own budgets
(``turn_time_s``, ``episode_time_s``) end in ``timed-out`` too.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple, get_args

from sandbox import QUEUE_TIMEOUT  # the start of such a run's sandbox_error

State = Literal["generating", "context_window_overflow", "queued", "running", "executed", "judging", "judged",
                "timed-out", "overflow"]  # fmt: skip
STATES: tuple[State, ...] = get_args(State)
GenerationEnd = Literal["stop", "context_window_overflow", "timed-out"]
GENERATION_ENDS: tuple[GenerationEnd, ...] = get_args(GenerationEnd)

Transitions = list[tuple[str, float]]


class TraceId(NamedTuple):
    """``problem_id/sample/turn/retry`` (``str()`` of it)."""

    problem_id: str
    sample: int
    turn: int
    retry: int = 0

    def __str__(self) -> str:
        return f"{self.problem_id}/{self.sample}/{self.turn}/{self.retry}"

    @property
    def key(self) -> str:
        """``problem_id/sample/turn``: the same for every retry of the sample."""
        return f"{self.problem_id}/{self.sample}/{self.turn}"

    def again(self, times: int = 1) -> TraceId:
        """The id of the sandbox's next try."""
        return self._replace(retry=self.retry + times)

    @classmethod
    def parse(cls, text: str) -> TraceId | None:
        """The sample's id in a trace id (a sample's, or one of its runs'); None when ``text`` has
        none (a user's own trace id). A problem id may hold slashes (``HumanEval/0``): the run's
        part starts at its last ``public``/``hidden``/``public+hidden`` after three numbers."""
        parts = text.split("/")
        end = len(parts)
        for j in range(len(parts) - 1, 3, -1):
            if parts[j] in RUN_PARTS and all(_number(p) for p in parts[j - 3 : j]):
                end = j
                break
        head = parts[:end]
        if len(head) < 4 or not all(_number(p) for p in head[-3:]):
            return None
        return cls("/".join(head[:-3]), int(head[-3]), int(head[-2]), int(head[-1]))


RUN_PARTS = ("public", "hidden", "public+hidden")  # what a sample's runs append (public+hidden: a joint run)


def _number(part: str) -> bool:
    return part.isascii() and part.isdigit()


def trace_id(problem_id: str, sample: int, turn: int = 0, retry: int = 0) -> str:
    """``problem_id/sample/turn/retry``."""
    return str(TraceId(problem_id, sample, turn, retry))


def trace_key(text: str) -> str | None:
    """The join key (``problem_id/sample/turn``) of a sample's or a run's trace id; None if it has none."""
    t = TraceId.parse(text)
    return None if t is None else t.key


def retried(text: str, times: int = 1) -> str:
    """The trace id of a run asked again ``times`` more: its sample's retry counter moved on,
    whatever follows it kept (``p/3/0/0/public/2`` → ``p/3/0/1/public/2``). A trace id that is not
    a sample's (a user's own) gets ``/retry<n>`` appended."""
    t = TraceId.parse(text)
    if t is None or times == 0:
        return text if times == 0 else f"{text}/retry{times}"
    return str(t.again(times)) + text[len(str(t)) :]


def run_marks(submitted: float, runs: Iterable[Any], done: float) -> Transitions:
    """A verification round's states for one sample, from its runs (``ExecutionResult``\\ s):
    ``queued`` when the round was handed to the executor, ``running`` when the first of its
    runs left the executor's queue (``queued_ms``), ``timed-out`` where a deadline passed (the
    queue's: then no ``running``; a test's time limit: after ``running``), ``executed`` when the
    round came back."""
    runs = list(runs)
    marks: Transitions = [("queued", submitted)]
    started = [r.queued_ms for r in runs if not (r.sandbox_error or "").startswith(QUEUE_TIMEOUT)]
    if runs and not started:  # every run waited past the queue's deadline
        waited = max(r.queued_ms for r in runs)
        return [*marks, ("timed-out", min(submitted + waited / 1000, done)), ("executed", done)]
    if started:
        marks.append(("running", min(submitted + min(started) / 1000, done)))
    if any(r.timeout_hit or (r.sandbox_error or "").startswith(QUEUE_TIMEOUT) for r in runs):
        marks.append(("timed-out", done))
    marks.append(("executed", done))
    return marks


def generation_marks(started: float | None, ended: float | None, end: GenerationEnd | None) -> Transitions:
    """``generating`` (when it began, if known), then how it ended when not by itself."""
    marks: Transitions = [("generating", started)] if started is not None else []
    if end in ("context_window_overflow", "timed-out"):
        marks.append((end, ended if ended is not None else started if started is not None else 0.0))
    return marks


def check_transitions(transitions: Sequence[Sequence[Any]]) -> list[str]:
    """What is wrong with a record's transitions (empty: nothing): unknown states, times that go
    back, a ``timed-out`` first."""
    problems = []
    states = [t[0] for t in transitions]
    times = [t[1] for t in transitions]
    problems += [f"unknown state {s!r}" for s in states if s not in STATES]
    if any(b < a for a, b in itertools.pairwise(times)):
        problems.append("the states' times go backwards")
    if states and states[0] == "timed-out":
        problems.append("timed-out follows no state")
    return problems
