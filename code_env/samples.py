"""Each sample's state machine, held in Redis: where every sample of a run is, since when, until
when, and who may move it on. The learner, the rollout actors and the executors of the Redis
topology (issue 24) are separate processes; a state written after the fact in one of them says
nothing about a sample another one dropped. Here a sample's state lives outside all of them, is
moved only by the component that owns it, and a sample whose owner died is not left hanging: past
its state's deadline the watchdog ends it. ``code-env samples --redis URL`` shows how many samples
are in each state and the oldest of each, so "every process is running but no sample moves" shows.

One sample is one turn of an episode (``code_env.tracing``'s key ``problem_id/sample/turn``); its
sandbox retries are its ``attempt``.

The states, their owner (the only component that may move a sample out of the state) and where
they lead (``TRANSITIONS``):

========================  ========  =============================================================
state                     owner     moves (by whom)
========================  ========  =============================================================
``generating``            actor     → ``queued_for_execution`` (actor: the reply is there)
                                    → ``executed_with_result`` (actor: its program's result is
                                    known without a run: judged in an earlier step, or run for
                                    another sample of the batch)
                                    → ``context_window_overflow`` (actor: the reply was cut at the
                                    model's limit and ends the sample without a run)
                                    → ``budget_exhausted`` (actor: a budget of the episode ran
                                    out; watchdog: the deadline passed, or
                                    ``context_window_overflow`` if its caller says so)
``queued_for_execution``  executor  → ``running`` (executor: a worker took it)
                                    → ``sandbox_error`` (executor: it gave up on it)
                                    → ``execution_timeout`` (watchdog: the deadline passed)
``running``               executor  → ``executed_with_result`` (executor: the result is there)
                                    → ``queued_for_execution`` (executor: a retry; ``attempt`` + 1)
                                    → ``sandbox_error`` (executor: it gave up after its retries)
                                    → ``execution_timeout`` (watchdog: the deadline passed)
``executed_with_result``  learner   → ``judged`` (learner: the reward is known)
                                    → ``sandbox_error`` (learner: the judge failed; watchdog: the
                                    deadline passed)
``judged``                          terminal: the reward is known
``context_window_overflow``         terminal: scored by ``RewardConfig.context_window_overflow``
``execution_timeout``               terminal: no result came back in time; never scored
``budget_exhausted``                terminal: scored as an exhausted budget
``sandbox_error``                   terminal: the harness failed, not the program; never scored
========================  ========  =============================================================

How they correspond to the states ``code_env.tracing`` records in the trajectory log:

- ``generating`` = ``generating``; ``queued_for_execution`` = ``queued``; ``running`` =
  ``running``; ``executed_with_result`` = ``executed`` and ``judging`` (the judge is the learner's,
  within this state's deadline); ``judged`` = ``judged``.
- ``context_window_overflow`` = ``context_window_overflow`` when that ends the sample (a reward
  for it is configured); a cut reply that is judged as it is goes on to ``queued_for_execution``
  here (the record still says it was cut).
- ``execution_timeout`` = ``timed-out`` after ``queued`` or ``running`` when no result came back:
  the executor died or stalled. A program that hits its own time limit is not one: tracing's
  ``running → timed-out → executed`` is ``running → executed_with_result`` here, the verdict
  ``timeout`` is in the result and judged like any verdict.
- ``budget_exhausted`` = ``timed-out`` after ``generating`` (the agent's request timeout, GRPO's
  ``generation_timeout_s``), the environment's budgets (``turn_time_s``, ``episode_time_s``) and
  ``overflow`` (an action longer than ``max_action_chars``).
- ``sandbox_error`` = a run answered ``sandbox_error`` after its retries (tracing's ``queued →
  timed-out`` with ``QUEUE_TIMEOUT`` at the last retry), and, decided here, ``executed_with_result``
  past its deadline or a judge that failed (tracing's ``judging → timed-out``, a ``judge_error``):
  in both the harness failed, not the program, and the sample is dropped, never scored; the
  ``reason`` field says which.
- tracing's ``retry`` is ``attempt``.

The rules every move obeys (``SampleStates.move``), checked and applied in one Lua script, so two
processes never both move the same sample: the sample exists and is readable, is not terminal, the
move is in ``TRANSITIONS``, ``by`` is the owner of the current state (or the watchdog, once the
state's deadline has passed). A refused move raises a ``MoveRefusedError`` naming why, and changes
nothing. An owner may still move a sample after its deadline as long as the watchdog has not ended
it: whichever comes first wins, and the other is refused (``TerminalSampleError``: the executor
then knows its late result is dropped).

Times are the Redis server's clock (``TIME`` inside the script, unix seconds), so every process
agrees; a sample's times never go backwards, even if that clock is set back. A state's deadline is
``deadline_s`` after entering it (``DEFAULT_DEADLINES_S`` unless the move gives one; ``0``: due at
once); terminal states have none.

In Redis, per run (keys ``code-env:samples:{RUN}:...``; the braces keep a run's keys in one
cluster slot): a hash per sample (``sample:ID``: ``state``, ``owner``, ``entered_at``,
``deadline``, ``attempt``, ``trace_id``, ``transitions`` as JSON ``[[state, t], ...]``,
``moved_by``, ``reason``), a sorted set per state (``state:STATE``, scored by ``entered_at``: how
many, and the oldest, in O(log n)) and a sorted set of deadlines per non-terminal state
(``deadline:STATE``: what is overdue, in O(log n)). Nothing here expires on its own: a run's keys
stay until someone deletes them.

>>> states = SampleStates("redis://127.0.0.1:6379/0", run="demo")      # doctest: +SKIP
>>> states.start("HumanEval/0/3/0", trace_id="HumanEval/0/3/0/0", deadline_s=120)  # doctest: +SKIP
>>> states.move("HumanEval/0/3/0", "queued_for_execution", by="actor")  # doctest: +SKIP
>>> with Watchdog(states, interval_s=1.0):                               # doctest: +SKIP
...     ...                                                # overdue samples end, once each
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox._redis import connect, redact

from ._errors import first_error

log = logging.getLogger("code_env.samples")

__all__ = [
    "DEFAULT_DEADLINES_S",
    "OWNERS",
    "STATES",
    "TERMINAL",
    "TRANSITIONS",
    "Counts",
    "IllegalTransitionError",
    "MoveRefusedError",
    "NotOwnerError",
    "Sample",
    "SampleExistsError",
    "SampleStateError",
    "SampleStates",
    "StateCount",
    "StoreCommandError",
    "StoreUnavailableError",
    "TerminalSampleError",
    "UnknownSampleError",
    "Unreadable",
    "UnreadableSampleError",
    "Watchdog",
]

INSTALL = "pip install 'code-env[redis]'"

SampleState = Literal["generating", "queued_for_execution", "running", "executed_with_result", "judged",
                      "context_window_overflow", "execution_timeout", "budget_exhausted", "sandbox_error"]  # fmt: skip
STATES: tuple[SampleState, ...] = get_args(SampleState)
TERMINAL: frozenset[SampleState] = frozenset(
    {"judged", "context_window_overflow", "execution_timeout", "budget_exhausted", "sandbox_error"}
)
LIVE: tuple[SampleState, ...] = tuple(s for s in STATES if s not in TERMINAL)  # the states with a deadline

Component = Literal["actor", "executor", "learner", "watchdog"]
COMPONENTS: tuple[Component, ...] = get_args(Component)

OWNERS: dict[SampleState, Component] = {
    "generating": "actor",
    "queued_for_execution": "executor",
    "running": "executor",
    "executed_with_result": "learner",
}
"""The owner of each non-terminal state: the one component that may move a sample out of it (the
watchdog aside, past the deadline). Terminal states have none."""

TRANSITIONS: dict[SampleState, dict[SampleState, tuple[Component, ...]]] = {
    "generating": {
        "queued_for_execution": ("actor",),
        "executed_with_result": ("actor",),  # answered without a run (a cache hit, a duplicate)
        "context_window_overflow": ("actor", "watchdog"),
        "budget_exhausted": ("actor", "watchdog"),
    },
    "queued_for_execution": {
        "running": ("executor",),
        "sandbox_error": ("executor",),
        "execution_timeout": ("watchdog",),
    },
    "running": {
        "executed_with_result": ("executor",),
        "queued_for_execution": ("executor",),  # a retry: attempt + 1
        "sandbox_error": ("executor",),
        "execution_timeout": ("watchdog",),
    },
    "executed_with_result": {
        "judged": ("learner",),
        "sandbox_error": ("learner", "watchdog"),
    },
}
"""Every legal move: ``TRANSITIONS[from][to]`` is who may make it. The watchdog's moves are legal
only once the state's deadline has passed."""

TIMEOUT_ENDS: dict[SampleState, SampleState] = {
    "generating": "budget_exhausted",  # or context_window_overflow, if the watchdog's caller says so
    "queued_for_execution": "execution_timeout",
    "running": "execution_timeout",
    "executed_with_result": "sandbox_error",
}
"""Where the watchdog sends a sample past the deadline of its state."""

DEFAULT_DEADLINES_S: dict[SampleState, float] = {
    "generating": 600.0,
    "queued_for_execution": 600.0,
    "running": 300.0,
    "executed_with_result": 300.0,
}
"""How long a sample may stay in a state when the move does not say (``SampleStates(deadlines_s=)``
changes them for a store): generous, so that only a sample nobody is working on ends by timeout."""

FROM_TRACING: dict[str, SampleState] = {
    "queued": "queued_for_execution",
    "executed": "executed_with_result",
    "judging": "executed_with_result",
    "overflow": "budget_exhausted",
}
"""The names ``code_env.tracing`` gives states that are named otherwise here (its ``timed-out`` is
one of several ends: the module's docstring tells which)."""

PREFIX = "code-env:samples:"
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+@=-]{0,255}")
_RUN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+@=-]{0,127}")
MAX_TRACE_ID_CHARS = 1024
MAX_REASON_CHARS = 1000
CONNECT_TIMEOUT_S = 5.0
COMMAND_TIMEOUT_S = 30.0


# ------------------------------------------------------------------------------------ errors


class SampleStateError(Exception):
    """Root of this module's errors (bad arguments are plain ``ValueError``\\ s)::

        SampleStateError
        ├── StoreUnavailableError        Redis cannot be reached: the URL and why
        ├── StoreCommandError            Redis refused a command (a key of the wrong type, ...)
        ├── UnknownSampleError           no such sample in this run (also a LookupError)
        ├── SampleExistsError            start() of a sample already there
        ├── UnreadableSampleError        the hash under our key is not one of ours: the key and why
        └── MoveRefusedError             a move the rules forbid; nothing changed
            ├── TerminalSampleError      the sample has already ended
            ├── IllegalTransitionError   no such move from its state
            └── NotOwnerError            ``by`` does not own its state (or the watchdog came early)
    """


class StoreUnavailableError(SampleStateError):
    """Redis did not answer (down, wrong address, refused): ``where`` and ``why``."""

    def __init__(self, where: str, why: str) -> None:
        self.where, self.why = where, why
        super().__init__(f"cannot reach Redis at {where}: {why}")


class StoreCommandError(SampleStateError):
    """Redis answered with an error (a key of ours holding another type, a read-only replica, ...)."""

    def __init__(self, where: str, why: str) -> None:
        self.where, self.why = where, why
        super().__init__(f"Redis at {where} refused it: {why}")


class UnknownSampleError(SampleStateError, LookupError):
    def __init__(self, run: str, sample_id: str) -> None:
        self.run, self.sample_id = run, sample_id
        super().__init__(f"no sample {sample_id!r} in run {run!r}")

    def __str__(self) -> str:  # LookupError's would quote the message
        return str(self.args[0])


class SampleExistsError(SampleStateError):
    def __init__(self, run: str, sample_id: str, state: str) -> None:
        self.run, self.sample_id, self.state = run, sample_id, state
        super().__init__(f"sample {sample_id!r} of run {run!r} was already started (it is {state}): a new "
                         "attempt of the same turn is a move (running → queued_for_execution), a new turn a new id")  # fmt: skip


class UnreadableSampleError(SampleStateError):
    """What is stored under the sample's key is not a sample of this module (foreign or garbled)."""

    def __init__(self, key: str, why: str) -> None:
        self.key, self.why = key, why
        super().__init__(f"{key}: unreadable: {why}")


class MoveRefusedError(SampleStateError):
    """A move the rules forbid; nothing was changed. ``state`` is the sample's current state."""

    def __init__(self, sample_id: str, state: str, to: str, by: str, why: str) -> None:
        self.sample_id, self.state, self.to, self.by = sample_id, state, to, by
        super().__init__(f"move of sample {sample_id!r} from {state} to {to} by {by} refused: {why}")


class TerminalSampleError(MoveRefusedError):
    pass


class IllegalTransitionError(MoveRefusedError):
    pass


class NotOwnerError(MoveRefusedError):
    pass


# ------------------------------------------------------------------------------------ models


class Sample(BaseModel):
    """One sample as stored: its state, since when (``entered_at``) and until when (``deadline``,
    None in a terminal state), on the Redis server's clock (unix seconds)."""

    model_config = ConfigDict(frozen=True)

    run: str
    sample_id: str
    trace_id: str
    state: SampleState
    owner: Component | None = Field(description="who may move it on; None once terminal")
    entered_at: float
    deadline: float | None
    attempt: int = Field(ge=0, description="the sandbox's tries before this one (tracing's retry)")
    transitions: list[tuple[SampleState, float]] = Field(description="[state, time] from the start, in order")
    moved_by: Component = Field(description="who made the last move (the actor started it)")
    reason: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def overdue(self, now: float) -> bool:
        """Past its state's deadline at ``now`` (never, once terminal)."""
        return self.deadline is not None and self.deadline <= now


class StateCount(BaseModel):
    """How many samples are in one state, the oldest of them (the one in it longest) and how many
    are past their deadline (not yet ended by a watchdog)."""

    state: SampleState
    owner: Component | None
    terminal: bool
    count: int
    oldest: str | None = Field(default=None, description="the sample id of the oldest")
    oldest_age_s: float | None = None
    overdue: int = 0


class Unreadable(BaseModel):
    """A key under the run's prefix that is not one of this module's, or a sample hash that does
    not read: the key, and why."""

    key: str
    why: str


class Counts(BaseModel):
    """A snapshot of a run (one Lua script: consistent): per state, in ``STATES`` order."""

    run: str
    now: float = Field(description="the Redis server's clock at the snapshot (or the time asked for)")
    states: dict[SampleState, StateCount]
    unreadable: list[Unreadable] = Field(default_factory=list, description="filled by a scan (counts(scan=True))")

    @property
    def total(self) -> int:
        return sum(c.count for c in self.states.values())

    @property
    def overdue(self) -> int:
        return sum(c.overdue for c in self.states.values())


# ------------------------------------------------------------------------------- the scripts


def _lua(value: Any) -> str:
    """A Lua literal of a JSON-like value (strings here are our own names: no escaping needed)."""
    if isinstance(value, str):
        assert re.fullmatch(r"[a-z_]*", value), value
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"[{_lua(k)}]={_lua(v)}" for k, v in value.items()) + "}"
    return "{" + ",".join(_lua(v) for v in value) + "}"


# The layout of KEYS for the start and move scripts: the sample's hash, then the sorted set of each
# state (STATES order), then the deadline set of each live state (LIVE order).
_PRELUDE = f"""
local STATES = {_lua(STATES)}
local LIVE = {_lua(LIVE)}
local TERMINAL = {_lua({s: True for s in TERMINAL})}
local OWNERS = {_lua(OWNERS)}
local EDGES = {_lua({s: {t: {o: True for o in by} for t, by in edges.items()} for s, edges in TRANSITIONS.items()})}
local ZSET, DSET = {{}}, {{}}
for i, s in ipairs(STATES) do ZSET[s] = KEYS[1 + i] end
for i, s in ipairs(LIVE) do DSET[s] = KEYS[1 + #STATES + i] end
local function fmt(t) return string.format('%.6f', t) end
local function clock(floor)  -- the server's time, never before `floor`
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  if floor and now < floor then now = floor end
  return now
end
local function append(transitions, state, t)
  local body = string.sub(transitions, 2, -2)
  if body ~= '' then body = body .. ',' end
  return '[' .. body .. '["' .. state .. '",' .. fmt(t) .. ']]'
end
-- the sample's hash, read and checked: nil and a reason when it is not one of ours
local function load(h)
  local kind = redis.call('TYPE', h)['ok']
  if kind == 'none' then return nil, 'unknown' end
  if kind ~= 'hash' then return nil, 'a ' .. kind .. ', not a hash' end
  local f = redis.call('HMGET', h, 'state', 'entered_at', 'transitions', 'attempt', 'last_move', 'deadline')
  local s = {{state = f[1], entered_at = tonumber(f[2]), transitions = f[3], attempt = tonumber(f[4]),
             last_move = f[5], deadline = tonumber(f[6])}}
  if not s.state then return nil, 'no state field' end
  if not ZSET[s.state] then return nil, 'unknown state ' .. string.format('%q', string.sub(s.state, 1, 60)) end
  if not s.entered_at then return nil, 'entered_at is not a number' end
  if not s.attempt then return nil, 'attempt is not a number' end
  if not s.transitions or string.sub(s.transitions, 1, 1) ~= '[' or string.sub(s.transitions, -1) ~= ']' then
    return nil, 'transitions is not a JSON list'
  end
  if not TERMINAL[s.state] and not s.deadline then return nil, 'deadline is not a number' end
  return s, nil
end
"""

# ARGV: sample_id, trace_id, deadline_s, token
_START = _PRELUDE + """
local h, sid = KEYS[1], ARGV[1]
if redis.call('EXISTS', h) == 1 then
  local s, why = load(h)
  if not s then return {'unreadable', why} end
  if s.last_move == ARGV[4] then return {'ok', 'replayed', fmt(s.entered_at), redis.call('HGETALL', h)} end  -- a retry of this call
  return {'exists', s.state}
end
local now = clock(nil)
local deadline = now + tonumber(ARGV[3])
redis.call('HSET', h, 'state', 'generating', 'owner', 'actor', 'entered_at', fmt(now), 'deadline', fmt(deadline),
           'attempt', '0', 'trace_id', ARGV[2], 'transitions', append('[]', 'generating', now), 'moved_by', 'actor',
           'last_move', ARGV[4])
redis.call('ZADD', ZSET['generating'], fmt(now), sid)
redis.call('ZADD', DSET['generating'], fmt(deadline), sid)
return {'ok', '', fmt(now), redis.call('HGETALL', h)}
"""

# ARGV: sample_id, to, by, deadline_s ('' for a terminal state), token, reason ('' none),
#       expect ('' any: else the state the caller saw), at ('' the server's clock: the watchdog's now)
_MOVE = _PRELUDE + """
local h, sid, to, by = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local s, why = load(h)
if not s then
  if why == 'unknown' then return {'unknown'} end
  return {'unreadable', why}
end
if s.last_move == ARGV[5] then return {'ok', 'replayed', fmt(s.entered_at), redis.call('HGETALL', h)} end  -- a retry of this call
local from = s.state
if ARGV[7] ~= '' and from ~= ARGV[7] then return {'moved_on', from} end
if TERMINAL[from] then return {'terminal', from} end
local allowed = EDGES[from][to]
if not allowed then return {'illegal', from} end
if not allowed[by] then return {'owner', from} end
local now = clock(s.entered_at)
if by == 'watchdog' then
  local at = now
  if ARGV[8] ~= '' then at = tonumber(ARGV[8]) end
  if s.deadline > at then return {'early', from, fmt(s.deadline), fmt(at)} end
end
redis.call('ZREM', ZSET[from], sid)
redis.call('ZREM', DSET[from], sid)
redis.call('ZADD', ZSET[to], fmt(now), sid)
local attempt = s.attempt
if from == 'running' and to == 'queued_for_execution' then attempt = attempt + 1 end
local deadline, owner = '', ''
if not TERMINAL[to] then
  deadline = fmt(now + tonumber(ARGV[4]))
  owner = OWNERS[to]
  redis.call('ZADD', DSET[to], deadline, sid)
end
redis.call('HSET', h, 'state', to, 'owner', owner, 'entered_at', fmt(now), 'deadline', deadline,
           'attempt', tostring(attempt), 'transitions', append(s.transitions, to, now), 'moved_by', by,
           'last_move', ARGV[5], 'reason', ARGV[6])
return {'ok', from, fmt(now), redis.call('HGETALL', h)}
"""

# KEYS: the sorted set of each state, then the deadline set of each live state; ARGV: at ('' now)
_COUNTS = f"""
local STATES = {_lua(STATES)}
local LIVE = {_lua(LIVE)}
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) end
local out = {{string.format('%.6f', now)}}
for i, s in ipairs(STATES) do
  local n = redis.call('ZCARD', KEYS[i])
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  local overdue = -1
  for j, l in ipairs(LIVE) do
    if l == s then overdue = redis.call('ZCOUNT', KEYS[#STATES + j], '-inf', string.format('%.6f', now)) end
  end
  table.insert(out, n)
  table.insert(out, first[1] or '')
  table.insert(out, first[2] or '')
  table.insert(out, overdue)
end
return out
"""


_FIELDS = ("state", "owner", "entered_at", "deadline", "attempt", "trace_id", "transitions", "moved_by")


def _pairs(flat: Any) -> dict[Any, Any]:
    """``HGETALL``'s reply inside a script's (a flat list) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: Any) -> str:
    """A Redis reply as text (a client made with or without ``decode_responses``)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _import_redis() -> Any:
    try:
        import redis
    except ImportError as exc:
        raise ImportError(f"code_env.samples needs the redis client, which is not installed ({exc}): {INSTALL}") from None
    return redis


# ------------------------------------------------------------------------------ bad input


def check_sample_id(sample_id: object) -> str:
    """A sample id: 1-256 characters of letters, digits and ``_ . : / + @ = -``, not starting with
    a punctuation mark (a trace key such as ``HumanEval/0/3/0`` is one). Else a ``ValueError``."""
    if not isinstance(sample_id, str):
        raise ValueError(f"a sample id is a string, got {type(sample_id).__name__}")
    if not _ID.fullmatch(sample_id):
        raise ValueError(f"invalid sample id {sample_id!r:.80}: expected 1-256 characters of letters, digits and "
                         "'_.:/+@=-', starting with a letter, digit or '_'")  # fmt: skip
    return sample_id


def check_run(run: object) -> str:
    if not isinstance(run, str) or not _RUN.fullmatch(run):
        raise ValueError(f"invalid run name {run!r:.80}: expected 1-128 characters of letters, digits and "
                         "'_.:+@=-', starting with a letter, digit or '_'")  # fmt: skip
    return run


def check_state(state: object) -> SampleState:
    """A state name, or a ``ValueError`` that names the states (and the closest one, or the one
    a ``code_env.tracing`` name stands for)."""
    if isinstance(state, str) and state in STATES:
        return state
    close = difflib.get_close_matches(str(state), STATES, n=1)
    if state in FROM_TRACING:
        hint = f"; did you mean {FROM_TRACING[state]!r} (code_env.tracing's {state!r})?"
    else:
        hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown state {state!r:.80}: expected one of {', '.join(STATES)}{hint}")


def check_component(by: object) -> Component:
    if isinstance(by, str) and by in COMPONENTS:
        return by
    close = difflib.get_close_matches(str(by), COMPONENTS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown component {by!r:.80}: expected one of {', '.join(COMPONENTS)}{hint}")


def check_deadline(deadline_s: object, what: str = "deadline_s") -> float:
    """Seconds from now, finite and ``>= 0`` (``0``: due at once)."""
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float):
        raise ValueError(f"{what} is a number of seconds, got {type(deadline_s).__name__}")
    if not math.isfinite(deadline_s) or deadline_s < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {deadline_s!r}")
    return float(deadline_s)


def _check_text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise ValueError(f"invalid {what} {value!r:.80}: expected 1-{limit} printable characters")
    return value


# ------------------------------------------------------------------------------- the store


class SampleStates:
    """The state machines of one run's samples in Redis.

    ``url_or_client``: a ``redis://`` (``rediss://``, ``unix://``) URL, or a ``redis.Redis`` client
    of yours (used as it is). ``run`` names the run: runs share a Redis without seeing each other.
    ``deadlines_s`` overrides ``DEFAULT_DEADLINES_S`` per state for moves that give none.

    Every call that reaches Redis raises ``StoreUnavailableError`` when it cannot (after the
    client's retries: a restarting server is waited for briefly); the scripts are loaded again by
    themselves when the server forgot them (``EVALSHA``, then ``SCRIPT LOAD``). A move the client
    sends again after a lost reply is recognised (the hash keeps the token of its last move) and
    not applied twice.
    """

    def __init__(self, url_or_client: Any, run: str = "default", *,
                 deadlines_s: Mapping[str, float] | None = None) -> None:  # fmt: skip
        redis = _import_redis()
        self._errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        self._redis_error = redis.exceptions.RedisError
        self.run = check_run(run)
        if isinstance(url_or_client, str):
            self.where = redact(url_or_client)
            try:
                self.client = connect(url_or_client, retries=4, backoff_base_s=0.1, backoff_cap_s=1.0, decode_responses=True,
                                      socket_timeout_s=COMMAND_TIMEOUT_S, connect_timeout_s=CONNECT_TIMEOUT_S)  # fmt: skip
            except ValueError as exc:
                raise ValueError(f"invalid Redis URL {self.where!r}: {exc}") from None
        elif hasattr(url_or_client, "register_script"):
            self.client, self.where = url_or_client, "the given client"
        else:
            raise ValueError(f"expected a Redis URL or a redis.Redis client, got {type(url_or_client).__name__}")
        self.deadlines_s: dict[SampleState, float] = dict(DEFAULT_DEADLINES_S)
        for state, seconds in (deadlines_s or {}).items():
            if check_state(state) in TERMINAL:
                raise ValueError(f"deadlines_s: {state} is terminal: it has no deadline")
            self.deadlines_s[check_state(state)] = check_deadline(seconds, f"deadlines_s[{state!r}]")
        self.prefix = f"{PREFIX}{{{self.run}}}:"
        self._start = self.client.register_script(_START)
        self._move = self.client.register_script(_MOVE)
        self._counts = self.client.register_script(_COUNTS)
        self._zkeys = [f"{self.prefix}state:{s}" for s in STATES]
        self._dkeys = [f"{self.prefix}deadline:{s}" for s in LIVE]
        self._warned: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"SampleStates({self.where!r}, run={self.run!r})"

    # ---------------------------------------------------------------------------- keys

    def key(self, sample_id: str) -> str:
        """The Redis key of a sample's hash."""
        return f"{self.prefix}sample:{check_sample_id(sample_id)}"

    def _keys(self, sample_id: str) -> list[str]:
        return [self.key(sample_id), *self._zkeys, *self._dkeys]

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; a Redis that cannot be reached is a ``StoreUnavailableError``, one that
        answers with an error a ``StoreCommandError``."""
        try:
            return fn(*args)
        except self._errors as exc:
            raise StoreUnavailableError(self.where, f"{what}: {exc}") from None
        except self._redis_error as exc:
            raise StoreCommandError(self.where, f"{what}: {exc}") from None

    # ------------------------------------------------------------------------- moves

    def start(self, sample_id: str, trace_id: str | None = None, deadline_s: float | None = None) -> Sample:
        """A new sample, ``generating`` (owned by the actor) from now until ``deadline_s`` from now
        (default: ``deadlines_s["generating"]``). ``trace_id`` defaults to the sample id. A sample
        id already used in this run raises ``SampleExistsError``."""
        keys = self._keys(sample_id)
        trace = _check_text(trace_id if trace_id is not None else sample_id, "trace id", MAX_TRACE_ID_CHARS)
        seconds = self.deadlines_s["generating"] if deadline_s is None else check_deadline(deadline_s)
        reply = self._call("start", self._start, keys, [sample_id, trace, repr(seconds), uuid.uuid4().hex])
        code = _text(reply[0])
        if code == "exists":
            raise SampleExistsError(self.run, sample_id, _text(reply[1]))
        if code == "unreadable":
            raise UnreadableSampleError(keys[0], _text(reply[1]))
        return self._parse(keys[0], sample_id, _pairs(reply[3]))

    def move(self, sample_id: str, to: str, by: str, deadline_s: float | None = None, *,
             reason: str | None = None) -> Sample:  # fmt: skip
        """Move a sample to state ``to``, as component ``by``; returns it as it now is. ``deadline_s``:
        how long it may stay in ``to`` (default: ``deadlines_s[to]``; none for a terminal state).
        ``reason`` (optional, one line) is kept with it: why it ended, which retry this is.
        Refused (``MoveRefusedError``, nothing changed): a terminal sample, a move not in
        ``TRANSITIONS``, a component that does not own the state, the watchdog before the deadline."""
        return self._moved(self._move_args(sample_id, to, by, deadline_s, reason, expect="", at=None))

    def apply(self, ops: Sequence[tuple[str, ...]]) -> list[SampleStateError | None]:
        """Many starts and moves in one round trip: ``("start", sample_id, trace_id)`` or
        ``("move", sample_id, to, by)``, each with its default deadline, sent in order on one
        pipeline of the same scripts (each atomic on its own, as ``start`` and ``move``). Per op:
        None when done, else the error ``start`` or ``move`` would have raised (returned, not
        raised). Redis unreachable: ``StoreUnavailableError``, raised."""
        pipe = self.client.pipeline(transaction=False)
        sent: list[tuple[str, str, str, str, str]] = []  # kind, sample id, key, to, by
        for op in ops:
            if op[0] == "start":
                sample_id, trace = op[1], _check_text(op[2], "trace id", MAX_TRACE_ID_CHARS)
                keys = self._keys(sample_id)
                self._start(keys, [sample_id, trace, repr(self.deadlines_s["generating"]), uuid.uuid4().hex], client=pipe)
                sent.append(("start", sample_id, keys[0], "", ""))
            elif op[0] == "move":
                sample_id, to, by, keys, args = self._move_args(op[1], op[2], op[3], None, None, expect="", at=None)
                self._move(keys, args, client=pipe)
                sent.append(("move", sample_id, keys[0], to, by))
            else:
                raise ValueError(f"ops: expected ('start', id, trace_id) or ('move', id, to, by), got {op!r:.100}")
        replies = self._call("apply", pipe.execute, False)
        out: list[SampleStateError | None] = []
        for (kind, sample_id, key, to, by), reply in zip(sent, replies, strict=True):
            try:
                if isinstance(reply, Exception):
                    raise StoreCommandError(self.where, f"{kind} {sample_id}: {reply}")
                code = _text(reply[0])
                if kind == "start" and code == "exists":
                    raise SampleExistsError(self.run, sample_id, _text(reply[1]))
                if kind == "start" and code == "unreadable":
                    raise UnreadableSampleError(key, _text(reply[1]))
                if kind == "move":
                    self._check(reply, sample_id, to, by, key)
                out.append(None)
            except SampleStateError as exc:
                out.append(exc)
        return out

    def _move_args(self, sample_id: str, to: str, by: str, deadline_s: float | None, reason: str | None,
                   expect: str, at: float | None) -> tuple[str, str, str, list[str], list[str]]:  # fmt: skip
        keys = self._keys(sample_id)
        target, who = check_state(to), check_component(by)
        if target in TERMINAL:
            if deadline_s is not None:
                raise ValueError(f"{target} is terminal: it has no deadline (got deadline_s={deadline_s!r})")
            seconds = ""
        else:
            seconds = repr(self.deadlines_s[target] if deadline_s is None else check_deadline(deadline_s))
        why = "" if reason is None else _check_text(reason, "reason", MAX_REASON_CHARS)
        args = [sample_id, target, who, seconds, uuid.uuid4().hex, why, expect, "" if at is None else repr(at)]
        return sample_id, target, who, keys, args

    def _moved(self, prepared: tuple[str, str, str, list[str], list[str]]) -> Sample:
        sample_id, to, by, keys, args = prepared
        reply = self._call("move", self._move, keys, args)
        self._check(reply, sample_id, to, by, keys[0])
        return self._parse(keys[0], sample_id, _pairs(reply[3]))

    def _check(self, reply: Any, sample_id: str, to: str, by: str, key: str) -> None:
        """Raise the error a move script's refusal stands for."""
        code = _text(reply[0])
        if code == "ok":
            return
        if code == "unknown":
            raise UnknownSampleError(self.run, sample_id)
        if code == "unreadable":
            raise UnreadableSampleError(key, _text(reply[1]))
        state = _text(reply[1])
        if code == "terminal":
            raise TerminalSampleError(sample_id, state, to, by, f"it has already ended ({state} is terminal)")
        if code == "illegal":
            legal = ", ".join(TRANSITIONS.get(check_state(state), {})) or "none"
            raise IllegalTransitionError(sample_id, state, to, by, f"{state} never leads to {to} (it leads to: {legal})")
        if code == "owner":
            owners = TRANSITIONS[check_state(state)][check_state(to)]
            hint = " (the watchdog only past the deadline)" if "watchdog" in owners else ""
            raise NotOwnerError(sample_id, state, to, by, f"only the {' or the '.join(owners)} may make this move{hint}")
        if code == "early":
            raise NotOwnerError(sample_id, state, to, by, f"the watchdog may end it only past its deadline "
                                                          f"({_text(reply[2])}; now {_text(reply[3])})")  # fmt: skip
        if code == "moved_on":
            raise MoveRefusedError(sample_id, state, to, by, "it has moved on meanwhile")
        raise SampleStateError(f"unexpected reply of the move script: {reply!r:.200}")  # pragma: no cover

    # -------------------------------------------------------------------------- reads

    def get(self, sample_id: str) -> Sample:
        """The sample as stored; ``UnknownSampleError`` if there is none, ``UnreadableSampleError`` if
        what is under its key is not one of ours."""
        key = self.key(sample_id)
        kind = _text(self._call("get", self.client.type, key))
        if kind == "none":
            raise UnknownSampleError(self.run, sample_id)
        if kind != "hash":
            raise UnreadableSampleError(key, f"a {kind}, not a hash")
        return self._parse(key, sample_id, self._call("get", self.client.hgetall, key))

    def _parse(self, key: str, sample_id: str, raw: Mapping[Any, Any]) -> Sample:
        """A sample from its hash's fields, or ``UnreadableSampleError`` saying what is wrong."""
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if not fields:
            raise UnknownSampleError(self.run, sample_id)
        if "state" in fields and fields["state"] not in STATES:
            raise UnreadableSampleError(key, f"unknown state {fields['state']!r:.60}")
        missing = [f for f in _FIELDS if f not in fields]
        if missing:
            raise UnreadableSampleError(key, f"no field {', '.join(missing)} (fields: {', '.join(sorted(fields))[:200]})")
        try:
            transitions = json.loads(fields["transitions"])
        except ValueError as exc:
            raise UnreadableSampleError(key, f"transitions is not JSON ({exc})") from None
        data = {
            "run": self.run, "sample_id": sample_id, "trace_id": fields.get("trace_id"), "state": fields.get("state"),
            "owner": fields.get("owner") or None, "entered_at": fields.get("entered_at"),
            "deadline": fields.get("deadline") or None, "attempt": fields.get("attempt"),
            "transitions": transitions, "moved_by": fields.get("moved_by"), "reason": fields.get("reason") or None,
        }  # fmt: skip
        try:
            sample = Sample.model_validate(data)
        except ValidationError as exc:
            raise UnreadableSampleError(key, first_error(exc)) from None
        if sample.terminal != (sample.deadline is None):
            raise UnreadableSampleError(key, f"{sample.state} with deadline {sample.deadline}")
        if not sample.transitions or sample.transitions[-1][0] != sample.state:
            raise UnreadableSampleError(key, f"its transitions do not end in its state {sample.state}")
        return sample

    def time(self) -> float:
        """The Redis server's clock (unix seconds): the one every time here is on."""
        secs, micros = self._call("time", self.client.time)
        return int(secs) + int(micros) / 1e6

    def counts(self, now: float | None = None, *, scan: bool = True) -> Counts:
        """Per state: how many samples, the oldest (id, seconds in the state) and how many are past
        their deadline, at ``now`` (default: the server's clock), in one consistent snapshot (one
        script, O(log n) per state). ``scan``: also read every key of the run (``SCAN``, O(n))
        and list in ``unreadable`` those that are not ours or do not read (a foreign or garbled
        hash, a key of the wrong type), each named with why; ``scan=False`` for a cheap poll."""
        at = "" if now is None else repr(_finite(now, "now"))
        reply = self._call("counts", self._counts, [*self._zkeys, *self._dkeys], [at])
        t = float(_text(reply[0]))
        states: dict[SampleState, StateCount] = {}
        for i, state in enumerate(STATES):
            n, oldest, entered, overdue = reply[1 + 4 * i : 5 + 4 * i]
            oldest_id = _text(oldest) or None
            states[state] = StateCount(
                state=state, owner=OWNERS.get(state), terminal=state in TERMINAL, count=int(n), oldest=oldest_id,
                oldest_age_s=None if oldest_id is None else max(0.0, t - float(_text(entered))),
                overdue=max(0, int(overdue)),
            )  # fmt: skip
        return Counts(run=self.run, now=t, states=states, unreadable=self.check() if scan else [])

    def check(self) -> list[Unreadable]:
        """Every key under the run's prefix that is not one of ours or does not read, with why
        (``SCAN`` in pages: the server is never blocked; O(n) round trips batched by 500)."""
        bad: list[Unreadable] = []
        known = {*self._zkeys, *self._dkeys}
        hashes: list[str] = []
        for raw in self._call("scan", lambda: list(self.client.scan_iter(match=self.prefix + "*", count=1000))):
            key = _text(raw)
            if "\ufffd" in key:  # not UTF-8 (as decoded): no name of ours, and not readable back by this name
                bad.append(Unreadable(key=key, why="the key is not UTF-8 text: not a key of code_env.samples"))
            elif key.startswith(self.prefix + "sample:"):
                hashes.append(key)
            elif key not in known:
                bad.append(Unreadable(key=key, why="not a key of code_env.samples"))
        for i in range(0, len(hashes), 500):
            chunk = hashes[i : i + 500]
            pipe = self.client.pipeline(transaction=False)
            for key in chunk:
                pipe.type(key)
                pipe.hgetall(key)
            replies = self._call("scan", pipe.execute, False)
            for j, key in enumerate(chunk):
                kind, fields = replies[2 * j], replies[2 * j + 1]
                sample_id = key[len(self.prefix + "sample:") :]
                if _text(kind) == "none":
                    continue  # deleted since the scan saw it
                if _text(kind) != "hash":
                    bad.append(Unreadable(key=key, why=f"a {_text(kind)}, not a hash"))
                    continue
                if not _ID.fullmatch(sample_id):
                    bad.append(Unreadable(key=key, why="not a valid sample id"))
                    continue
                try:
                    self._parse(key, sample_id, fields)
                except UnreadableSampleError as exc:
                    bad.append(Unreadable(key=key, why=exc.why))
                except UnknownSampleError:
                    continue
        bad += self._check_indexes()
        return sorted(bad, key=lambda u: u.key)

    def _check_indexes(self) -> list[Unreadable]:
        """Members of the state and deadline sets whose sample is not in that state (or is not
        there at all): each suspect of the ``ZSCAN`` is read again with its set in one
        ``MULTI``, so a sample that merely moved meanwhile is not reported."""
        bad = []
        sets = [(k, s) for k, s in zip(self._zkeys, STATES, strict=True)] + \
               [(k, s) for k, s in zip(self._dkeys, LIVE, strict=True)]  # fmt: skip
        for zkey, state in sets:
            members = self._call("scan", lambda zkey=zkey: [_text(m) for m, _ in self.client.zscan_iter(zkey, count=1000)])
            for i in range(0, len(members), 500):
                chunk = [m for m in members[i : i + 500] if _ID.fullmatch(m)]
                bad += [Unreadable(key=zkey, why=f"member {m!r:.80} is not a valid sample id")
                        for m in members[i : i + 500] if not _ID.fullmatch(m)]  # fmt: skip
                pipe = self.client.pipeline(transaction=False)
                for m in chunk:
                    pipe.hget(f"{self.prefix}sample:{m}", "state")
                suspects = [m for m, got in zip(chunk, self._call("scan", pipe.execute, False), strict=True)
                            if isinstance(got, Exception) or got is None or _text(got) != state]  # fmt: skip
                for m in suspects:
                    pipe = self.client.pipeline(transaction=True)
                    pipe.hget(f"{self.prefix}sample:{m}", "state")
                    pipe.zscore(zkey, m)
                    got, score = self._call("scan", pipe.execute, False)
                    if score is None or (got is not None and not isinstance(got, Exception) and _text(got) == state):
                        continue  # it moved on meanwhile
                    now = "no such sample" if got is None else "a sample not readable" if isinstance(got, Exception) \
                        else f"the sample is {_text(got)!r:.60}"  # fmt: skip
                    bad.append(Unreadable(key=zkey, why=f"member {m!r:.80}: {now}"))
        return bad

    def runs(self) -> list[str]:
        """The runs that have samples in this Redis (a ``SCAN`` of the whole key space)."""
        names = set()
        for raw in self._call("scan", lambda: list(self.client.scan_iter(match=PREFIX + "{*}:state:*", count=1000))):
            m = re.fullmatch(re.escape(PREFIX) + r"\{(.*)\}:state:[a-z_]+", _text(raw))
            if m and _RUN.fullmatch(m[1]):
                names.add(m[1])
        return sorted(names)

    # -------------------------------------------------------------------------- watchdog

    def expire(self, now: float | None = None, *, generating_end: str = "budget_exhausted", batch: int = 100) -> list[str]:
        """The watchdog's pass: every non-terminal sample past its deadline at ``now`` (default:
        the server's clock) is moved to its state's timeout end (``TIMEOUT_ENDS``; a ``generating``
        one to ``generating_end``: ``budget_exhausted`` or ``context_window_overflow``) by the
        watchdog. Each sample moves in its own script: one that its owner moved on meanwhile, or
        another watchdog ended first, is left alone, so with any number of watchdogs at once a
        sample ends once. Returns the ids this pass ended. An entry that does not read is skipped
        (logged once per store), never a crash."""
        if generating_end not in ("budget_exhausted", "context_window_overflow"):
            raise ValueError(f"generating_end must be 'budget_exhausted' or 'context_window_overflow', got {generating_end!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        at = self.time() if now is None else _finite(now, "now")
        ended: list[str] = []
        for state, dkey in zip(LIVE, self._dkeys, strict=True):
            to = generating_end if state == "generating" else TIMEOUT_ENDS[state]
            skipped = 0
            while True:
                due = [_text(m) for m in self._call("expire", self.client.zrangebyscore, dkey, "-inf", repr(at), skipped, batch)]
                if not due:
                    break
                pipe = self.client.pipeline(transaction=False)
                prepared: list[tuple[str, str] | None] = []
                for sample_id in due:
                    if not _ID.fullmatch(sample_id):
                        prepared.append(None)
                        continue
                    _, _, _, keys, args = self._move_args(sample_id, to, "watchdog", None, f"{state} past its deadline",
                                                          expect=state, at=None if now is None else at)  # fmt: skip
                    self._move(keys, args, client=pipe)
                    prepared.append((sample_id, keys[0]))
                replies = iter(self._call("expire", pipe.execute, False)) if any(prepared) else iter(())
                for sample_id, item in zip(due, prepared, strict=True):
                    if item is None:
                        skipped += 1
                        self._warn(dkey, f"member {sample_id!r:.80} is not a valid sample id")
                        continue
                    reply = next(replies)
                    if isinstance(reply, Exception):
                        skipped += 1
                        self._warn(item[1], f"the move script failed: {reply}")
                        continue
                    code = _text(reply[0])
                    if code == "ok":
                        ended.append(sample_id)
                        log.info("watchdog: %s %s → %s (past its deadline)", sample_id, state, to)
                    elif code in ("unknown", "unreadable"):
                        skipped += 1
                        self._warn(item[1], "no such hash" if code == "unknown" else _text(reply[1]))
                    # terminal / moved_on / early: its owner or another watchdog was first
                if len(due) < batch:
                    break
        return ended

    def _warn(self, key: str, why: str) -> None:
        if (key, why) not in self._warned:
            self._warned.add((key, why))
            log.warning("samples: skipped %s: %s (left as it is; `code-env samples` lists it)", key, why)


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number (unix seconds), got {value!r}")
    return float(value)


# ------------------------------------------------------------------------------- watchdog


class Watchdog:
    """A thread that calls ``states.expire()`` every ``interval_s`` seconds (the first pass at
    once), so that no sample stays past its deadline for longer than that. Any number of
    watchdogs may run on one run, in any processes: each overdue sample is ended once.
    A pass that fails (Redis down) is logged and counted in ``errors``; the next pass tries
    again. ``passes`` and ``ended`` count what it did.

    >>> with Watchdog(states, interval_s=1.0):                       # doctest: +SKIP
    ...     train()
    """

    def __init__(self, states: SampleStates, interval_s: float = 1.0, *,
                 generating_end: str = "budget_exhausted") -> None:  # fmt: skip
        if not isinstance(states, SampleStates):
            raise ValueError(f"expected a SampleStates, got {type(states).__name__}")
        if isinstance(interval_s, bool) or not isinstance(interval_s, int | float) or not (0 < interval_s < math.inf):
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s!r}")
        if generating_end not in ("budget_exhausted", "context_window_overflow"):
            raise ValueError(f"generating_end must be 'budget_exhausted' or 'context_window_overflow', got {generating_end!r}")
        self.states, self.interval_s, self.generating_end = states, float(interval_s), generating_end
        self.passes = self.ended = self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        if self._thread is not None:
            raise RuntimeError("this watchdog has already been started")
        self._thread = threading.Thread(target=self._loop, name=f"samples-watchdog-{self.states.run}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the pass in progress (if any); waits for the thread up to ``timeout_s``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.ended += len(self.states.expire(generating_end=self.generating_end))
            except Exception as exc:  # a watchdog that dies would leave every sample hanging: log, go on
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("samples watchdog of run %r: the pass failed: %s", self.states.run, self.last_error)
            self.passes += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def format_counts(counts: Counts) -> str:
    """``counts`` as the table ``code-env samples`` prints (sample ids as they are: the caller
    escapes what a person reads)."""
    rows = [("state", "owner", "samples", "oldest", "age_s", "overdue")]
    for c in counts.states.values():
        rows.append((c.state, c.owner or "-", str(c.count), c.oldest or "-",
                     "-" if c.oldest_age_s is None else f"{c.oldest_age_s:.1f}", "-" if c.terminal else str(c.overdue)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 4, 5}
    lines = ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in rows]  # fmt: skip
    live = sum(c.count for c in counts.states.values() if not c.terminal)
    lines.append(f"run {counts.run!r}: {counts.total} samples, {live} in flight, {counts.overdue} past their deadline")
    if counts.unreadable:
        lines.append(f"unreadable ({len(counts.unreadable)}):")
        lines += [f"  {u.key}: {u.why}" for u in counts.unreadable]
    return "\n".join(lines)


def sample_of(trace_id: str) -> str:
    """The sample id of a sample's or a run's trace id: its trace key (``problem_id/sample/turn``)."""
    from .tracing import trace_key

    key = trace_key(trace_id)
    if key is None:
        raise ValueError(f"trace id {trace_id!r}: expected problem_id/sample/turn/retry[/...]")
    return key


class StateMover:
    """Starts and moves of sample states made in order by a thread of their own, off the caller's
    way (an actor's sampling, a learner's update, an executor's reader). A move the state machine
    refuses (a step made twice after its actor was taken for dead; a sample the watchdog ended
    first; a run that belongs to no sample of the run) is counted in ``refused``, never raised;
    Redis unreachable, the same (the run goes on, its states are behind)."""

    def __init__(self, states: SampleStates) -> None:
        import queue

        self.states = states
        self._q: queue.Queue[Any] = queue.Queue()
        self.refused = 0
        self.done = 0
        self._thread = threading.Thread(target=self._work, name="sample-states", daemon=True)
        self._thread.start()

    def start(self, trace_ids: Sequence[str]) -> None:
        """Start a sample per trace id (its id: ``sample_of``), in ``generating``."""
        self._q.put(("start", list(trace_ids)))

    def put(self, moves: Sequence[tuple[str, str, str]]) -> None:
        """Moves, each ``(sample_id, to, by)``."""
        self._q.put(("move", list(moves)))

    def flush(self) -> None:
        """Wait until everything put so far is done."""
        done = threading.Event()
        self._q.put(("flush", done))
        done.wait()

    def close(self) -> None:
        self.flush()
        self._q.put(None)
        self._thread.join(timeout=10)

    def _work(self) -> None:
        while (item := self._q.get()) is not None:
            what, arg = item
            if what == "flush":
                arg.set()
                continue
            ops = [("start", sample_of(x), x) for x in arg] if what == "start" else [("move", *x) for x in arg]
            try:  # one round trip for the lot
                errors: list[Any] = self.states.apply(ops)
            except Exception:  # Redis away, a bad id: counted, the run goes on
                errors = [True] * len(ops)
            self.refused += sum(e is not None for e in errors)
            self.done += sum(e is None for e in errors)
