"""Each sample's state machine in Redis (``code_env.samples``) against a real ``redis-server``:
the whole path with its times in order, refused moves that change nothing, the watchdog ending an
overdue sample exactly once while two watchdog processes race, a sample whose owner died visibly
stuck until the watchdog ends it, counts and the oldest of ~100 samples, ``code-env samples``
as a user runs it, foreign and garbled keys, a Redis restart with persistence on.

Every check reads Redis from the host side with a raw client of its own (the hashes, the sorted
sets, what each watchdog process printed), never what the store says about itself."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from code_env.samples import (
    LIVE,
    OWNERS,
    STATES,
    TERMINAL,
    TIMEOUT_ENDS,
    TRANSITIONS,
    IllegalTransitionError,
    MoveRefusedError,
    NotOwnerError,
    SampleExistsError,
    SampleStates,
    StoreUnavailableError,
    TerminalSampleError,
    UnknownSampleError,
    UnreadableSampleError,
    Watchdog,
)

from ._redis import RedisServer, free_port, redis_server

CLI = [sys.executable, "-m", "code_env"]
# the path to each state, from generating: (to, by) moves
PATHS: dict[str, list[tuple[str, str]]] = {
    "generating": [],
    "queued_for_execution": [("queued_for_execution", "actor")],
    "running": [("queued_for_execution", "actor"), ("running", "executor")],
    "executed_with_result": [("queued_for_execution", "actor"), ("running", "executor"), ("executed_with_result", "executor")],
    "judged": [("queued_for_execution", "actor"), ("running", "executor"), ("executed_with_result", "executor"),
               ("judged", "learner")],
    "context_window_overflow": [("context_window_overflow", "actor")],
    "budget_exhausted": [("budget_exhausted", "actor")],
    "sandbox_error": [("queued_for_execution", "actor"), ("sandbox_error", "executor")],
    "execution_timeout": [("queued_for_execution", "actor"), ("running", "executor"), ("execution_timeout", "watchdog")],
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the module: each test works in a run of its own."""
    with redis_server(tmp_path_factory.mktemp("redis")) as srv:
        yield srv


@pytest.fixture
def run(request: pytest.FixtureRequest) -> str:
    """A run name of the test's own (runs share the module's server without seeing each other)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:100]


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    """The host's own view of the server."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    yield client
    client.close()


def prefix(run: str) -> str:
    return f"code-env:samples:{{{run}}}:"


def snapshot(raw: redis.Redis, run: str) -> dict[bytes, Any]:
    """Everything stored under the run's prefix, byte for byte, as the host reads it."""
    kw = raw.connection_pool.connection_kwargs
    client = redis.Redis(host=kw["host"], port=kw["port"], db=kw.get("db", 0))
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(match=prefix(run).encode() + b"*"):
        kind = client.type(key)
        out[key] = (kind, client.hgetall(key) if kind == b"hash" else client.zrange(key, 0, -1, withscores=True)
                    if kind == b"zset" else client.lrange(key, 0, -1) if kind == b"list" else client.get(key))  # fmt: skip
    client.close()
    return out


def where(raw: redis.Redis, run: str, sample_id: str) -> tuple[list[str], list[str]]:
    """The state sets and the deadline sets that hold the sample."""
    states = [s for s in STATES if raw.zscore(prefix(run) + f"state:{s}", sample_id) is not None]
    deadlines = [s for s in LIVE if raw.zscore(prefix(run) + f"deadline:{s}", sample_id) is not None]
    return states, deadlines


def stored(raw: redis.Redis, run: str, sample_id: str) -> dict[str, Any]:
    h = raw.hgetall(prefix(run) + f"sample:{sample_id}")
    h["transitions"] = json.loads(h["transitions"])
    return h


def walk(states: SampleStates, sample_id: str, to: str, deadline_s: float = 3600.0) -> None:
    """Start a sample and move it along PATHS to ``to``, each state's deadline ``deadline_s`` (0
    for a state the watchdog ends: due at once)."""
    moves = PATHS[to]
    bys = [by for _, by in moves] + [None]
    states.start(sample_id, deadline_s=0 if bys[0] == "watchdog" else deadline_s)
    for (target, by), following in zip(moves, bys[1:], strict=True):
        states.move(sample_id, target, by, None if target in TERMINAL else 0 if following == "watchdog" else deadline_s)


def server_time(raw: redis.Redis) -> float:
    secs, micros = raw.time()
    return secs + micros / 1e6


# ------------------------------------------------------------------------------ the table


def test_the_table_has_one_owner_per_state_and_a_timeout_end_for_each() -> None:
    assert set(TRANSITIONS) == set(OWNERS) == set(LIVE) == set(STATES) - TERMINAL
    for state, edges in TRANSITIONS.items():
        assert {o for by in edges.values() for o in by} - {"watchdog"} == {OWNERS[state]}, state
        assert "watchdog" in edges[TIMEOUT_ENDS[state]], state
        assert all(t in STATES for t in edges)
    assert not any(s in TRANSITIONS for s in TERMINAL)


# ------------------------------------------------------------------------- the happy path


def test_the_whole_path_with_a_retry_times_in_order_on_the_servers_clock(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    before = server_time(raw)
    path = [("generating", "actor", 30.0), ("queued_for_execution", "actor", 60.0), ("running", "executor", 10.0),
            ("queued_for_execution", "executor", 60.0), ("running", "executor", 10.0),
            ("executed_with_result", "executor", 20.0), ("judged", "learner", None)]  # fmt: skip
    seen = []
    for i, (state, by, deadline_s) in enumerate(path):
        if i == 0:
            got = states.start("HumanEval/0/3/0", trace_id="HumanEval/0/3/0/0", deadline_s=deadline_s)
        else:
            got = states.move("HumanEval/0/3/0", state, by, deadline_s, reason="worker lost" if i == 3 else None)
        h = stored(raw, run, "HumanEval/0/3/0")
        seen.append(h)
        assert h["state"] == got.state == state and h["moved_by"] == by
        assert h["owner"] == (OWNERS[state] if state in OWNERS else "")
        assert [s for s, _ in h["transitions"]] == [s for s, _, _ in path[: i + 1]]
        assert h["transitions"][-1][1] == pytest.approx(float(h["entered_at"]), abs=1e-6)
        in_states, in_deadlines = where(raw, run, "HumanEval/0/3/0")
        assert in_states == [state]
        assert raw.zscore(prefix(run) + f"state:{state}", "HumanEval/0/3/0") == pytest.approx(float(h["entered_at"]))
        if deadline_s is None:
            assert h["deadline"] == "" and in_deadlines == []
        else:
            assert in_deadlines == [state]
            assert float(h["deadline"]) == pytest.approx(float(h["entered_at"]) + deadline_s, abs=1e-5)
            assert raw.zscore(prefix(run) + f"deadline:{state}", "HumanEval/0/3/0") == pytest.approx(float(h["deadline"]))
    after = server_time(raw)
    times = [t for _, t in seen[-1]["transitions"]]
    assert before <= times[0] and times == sorted(times) and times[-1] <= after
    final = seen[-1]
    assert final["attempt"] == "1" and final["trace_id"] == "HumanEval/0/3/0/0"
    assert seen[3]["reason"] == "worker lost" and seen[3]["attempt"] == "1" and seen[2]["attempt"] == "0"
    # the model says what the host read
    sample = states.get("HumanEval/0/3/0")
    assert sample.terminal and sample.owner is None and sample.deadline is None and sample.attempt == 1
    assert [list(t) for t in sample.transitions] == [[s, pytest.approx(t, abs=1e-6)] for s, t in final["transitions"]]


def test_a_call_the_client_repeats_after_a_lost_reply_is_applied_once(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    states.start("p/1/0")
    _, _, _, keys, args = states._move_args("p/1/0", "queued_for_execution", "actor", None, None, expect="", at=None)
    first = states._move(keys, args)
    again = states._move(keys, args)  # what redis-py's retry sends when the reply was lost
    assert first[0] == again[0] == "ok"
    assert [s for s, _ in stored(raw, run, "p/1/0")["transitions"]] == ["generating", "queued_for_execution"]


# ---------------------------------------------------------------------------- refused moves


REFUSED = [
    pytest.param("generating", "queued_for_execution", "executor", NotOwnerError, "only the actor", id="executor-queues"),
    pytest.param("queued_for_execution", "running", "actor", NotOwnerError, "only the executor", id="actor-runs"),
    pytest.param("executed_with_result", "judged", "executor", NotOwnerError, "only the learner", id="executor-judges"),
    pytest.param("running", "executed_with_result", "learner", NotOwnerError, "only the executor", id="learner-executes"),
    pytest.param("generating", "running", "executor", IllegalTransitionError, "never leads to running", id="skip-queue"),
    pytest.param("queued_for_execution", "judged", "learner", IllegalTransitionError, "leads to: running", id="skip-run"),
    pytest.param("running", "generating", "actor", IllegalTransitionError, "never leads", id="backwards"),
    pytest.param("queued_for_execution", "budget_exhausted", "watchdog", IllegalTransitionError, "never leads", id="wrong-end"),
    pytest.param("queued_for_execution", "execution_timeout", "watchdog", NotOwnerError, "only past its deadline", id="watchdog-early"),
    pytest.param("running", "execution_timeout", "executor", NotOwnerError, "only the watchdog", id="executor-times-out"),
    pytest.param("judged", "sandbox_error", "learner", TerminalSampleError, "already ended", id="judged"),
    pytest.param("budget_exhausted", "queued_for_execution", "actor", TerminalSampleError, "already ended", id="exhausted"),
    pytest.param("execution_timeout", "executed_with_result", "executor", TerminalSampleError, "already ended", id="late-result"),
]  # fmt: skip


@pytest.mark.parametrize(("at", "to", "by", "error", "match"), REFUSED)
def test_a_refused_move_says_why_and_changes_nothing(server: RedisServer, raw: redis.Redis, run: str, at: str, to: str,
                                                     by: str, error: type[Exception], match: str) -> None:  # fmt: skip
    states = SampleStates(server.url, run=run)
    walk(states, "p/0/0", at)
    assert states.get("p/0/0").state == at
    states.start("other/0/0")  # a neighbour: untouched too
    before = snapshot(raw, run)
    with pytest.raises(error, match=match) as info:
        states.move("p/0/0", to, by)
    assert isinstance(info.value, MoveRefusedError) and info.value.state == at
    assert snapshot(raw, run) == before


def test_unknown_and_existing_samples_are_refused(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    states.start("p/0/0")
    before = snapshot(raw, run)
    with pytest.raises(SampleExistsError, match="already started"):
        states.start("p/0/0")
    with pytest.raises(UnknownSampleError, match="no sample 'p/9/0' in run"):
        states.move("p/9/0", "queued_for_execution", "actor")
    with pytest.raises(UnknownSampleError):
        states.get("p/9/0")
    assert snapshot(raw, run) == before


ODD_IDS = {"space": "a b", "newline": "x\n", "braces": "{x}", "empty": "", "glob": "a*", "accent": "caf\u00e9",
           "dash-first": "-x", "too-long": "x" * 300, "escape": "p/0\x1b[2K"}


@pytest.mark.parametrize("sample_id", ODD_IDS.values(), ids=ODD_IDS.keys())
def test_a_sample_id_with_odd_characters_is_a_value_error(server: RedisServer, raw: redis.Redis, run: str, sample_id: str) -> None:
    states = SampleStates(server.url, run=run)
    for call in (lambda: states.start(sample_id), lambda: states.move(sample_id, "running", "executor"),
                 lambda: states.get(sample_id)):  # fmt: skip
        with pytest.raises(ValueError, match="invalid sample id"):
            call()
    assert snapshot(raw, run) == {}


def test_bad_arguments_are_value_errors_that_name_the_fix(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    states.start("p/0/0")
    before = snapshot(raw, run)
    bad = [
        (lambda: states.move("p/0/0", "runing", "executor"), "unknown state 'runing'.*did you mean 'running'"),
        (lambda: states.move("p/0/0", "queued", "actor"), "unknown state 'queued'.*did you mean 'queued_for_execution' "
                                                           "\\(code_env.tracing's 'queued'\\)"),
        (lambda: states.move("p/0/0", "queued_for_execution", "actr"), "unknown component 'actr'.*did you mean 'actor'"),
        (lambda: states.move("p/0/0", "queued_for_execution", "actor", -1), "finite number of seconds >= 0, got -1"),
        (lambda: states.move("p/0/0", "queued_for_execution", "actor", math.nan), "finite number"),
        (lambda: states.move("p/0/0", "queued_for_execution", "actor", math.inf), "finite number"),
        (lambda: states.move("p/0/0", "budget_exhausted", "actor", 5), "terminal: it has no deadline"),
        (lambda: states.move("p/0/0", "budget_exhausted", "actor", reason="a\nb"), "invalid reason"),
        (lambda: states.start("p/1/0", deadline_s=-0.5), "got -0.5"),
        (lambda: states.start("p/1/0", trace_id=""), "invalid trace id"),
        (lambda: states.counts(now=math.nan), "finite number"),
        (lambda: states.expire(generating_end="judged"), "generating_end"),
        (lambda: states.expire(batch=0), "batch must be a positive integer"),
        (lambda: SampleStates(server.url, run="a b"), "invalid run name"),
        (lambda: SampleStates(server.url, run="{x}"), "invalid run name"),
        (lambda: SampleStates("http://localhost:6379"), "invalid Redis URL.*redis://"),
        (lambda: SampleStates(server.url, deadlines_s={"judged": 3}), "judged is terminal"),
        (lambda: SampleStates(server.url, deadlines_s={"running": -3}), "deadlines_s\\['running'\\]"),
        (lambda: Watchdog(states, interval_s=0), "interval_s must be a positive number"),
    ]  # fmt: skip
    for call, match in bad:
        with pytest.raises(ValueError, match=match):
            call()
    assert snapshot(raw, run) == before


# ----------------------------------------------------------------------------- the watchdog

RACER = """
import json, sys
import redis
from code_env.samples import SampleStates
url, run, go = sys.argv[1:4]
states = SampleStates(url, run=run)
states.time()                                      # connected before the start signal
redis.Redis.from_url(url).blpop([go], timeout=60)  # both released by one RPUSH
print(json.dumps(states.expire(batch=2)))
"""


def test_two_watchdog_processes_racing_end_each_overdue_sample_exactly_once(server: RedisServer, raw: redis.Redis,
                                                                            run: str) -> None:  # fmt: skip
    states = SampleStates(server.url, run=run)
    overdue: dict[str, str] = {}
    for i in range(60):  # past their deadline (0 s) in every live state
        state = LIVE[i % len(LIVE)]
        states.start(f"due/{i}", deadline_s=0 if state == "generating" else 3600)
        for target, by in PATHS[state]:
            states.move(f"due/{i}", target, by, 0 if target == state else 3600)
        overdue[f"due/{i}"] = state
    for i in range(12):  # not due for an hour: never touched
        walk(states, f"later/{i}", LIVE[i % len(LIVE)])
    later = {k: v for k, v in snapshot(raw, run).items() if b":sample:later/" in k}
    go = prefix(run) + "go"
    procs = [subprocess.Popen([*CLI[:1], "-c", RACER, server.url, run, go], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]  # fmt: skip
    deadline = time.monotonic() + 60
    while raw.client_list() and sum(c.get("cmd") == "blpop" for c in raw.client_list()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # both blocked on the signal: then they start at once
    raw.rpush(go, "go", "go")
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    ended = [json.loads(out) for out, _ in outs]
    assert set(ended[0]).isdisjoint(ended[1])
    assert sorted(ended[0] + ended[1]) == sorted(overdue)
    for sample_id, state in overdue.items():
        h = stored(raw, run, sample_id)
        end = TIMEOUT_ENDS[state]
        assert h["state"] == end and h["moved_by"] == "watchdog" and h["owner"] == "", sample_id
        assert [s for s, _ in h["transitions"]] == [s for s, _ in [("generating", 0), *PATHS[state]]] + [end]
        assert where(raw, run, sample_id) == ([end], [])
        assert h["reason"] == f"{state} past its deadline"
    assert {k: v for k, v in snapshot(raw, run).items() if b":sample:later/" in k} == later


def test_watchdog_threads_end_overdue_samples_and_stop(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    for i in range(20):
        states.start(f"p/{i}", deadline_s=3600)
        states.move(f"p/{i}", "queued_for_execution", "actor", 0.0)
    states.start("gen/0", deadline_s=0.0)
    dogs = [Watchdog(SampleStates(server.url, run=run), interval_s=0.05, generating_end="context_window_overflow")
            for _ in range(2)]  # fmt: skip
    with dogs[0], dogs[1]:
        deadline = time.monotonic() + 30
        while raw.zcard(prefix(run) + "state:execution_timeout") < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        while raw.zcard(prefix(run) + "state:context_window_overflow") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not any(d.alive for d in dogs)
    for i in range(20):
        h = stored(raw, run, f"p/{i}")
        assert [s for s, _ in h["transitions"]] == ["generating", "queued_for_execution", "execution_timeout"]
    assert stored(raw, run, "gen/0")["state"] == "context_window_overflow"
    assert raw.zcard(prefix(run) + "deadline:queued_for_execution") == 0
    assert sum(d.errors for d in dogs) == 0


def test_a_sample_whose_owner_died_is_stuck_in_counts_until_the_watchdog_ends_it(server: RedisServer, raw: redis.Redis,
                                                                                  run: str) -> None:  # fmt: skip
    states = SampleStates(server.url, run=run)
    states.start("p/0/0")
    states.move("p/0/0", "queued_for_execution", "actor")
    states.move("p/0/0", "running", "executor", deadline_s=30)  # ... and the executor dies
    h = stored(raw, run, "p/0/0")
    entered, deadline = float(h["entered_at"]), float(h["deadline"])
    soon = states.counts(now=entered + 10).states["running"]
    assert (soon.count, soon.oldest, soon.overdue) == (1, "p/0/0", 0)
    assert soon.oldest_age_s == pytest.approx(10, abs=1e-3)
    assert states.expire(now=entered + 10) == []  # not yet due: left alone
    assert stored(raw, run, "p/0/0")["state"] == "running"
    late = states.counts(now=deadline + 5)
    assert (late.states["running"].count, late.states["running"].overdue, late.overdue) == (1, 1, 1)
    assert late.states["running"].oldest_age_s == pytest.approx(35, abs=1e-3)
    assert states.expire(now=deadline + 5) == ["p/0/0"]
    after = states.counts(now=deadline + 6)
    assert (after.states["running"].count, after.states["execution_timeout"].count, after.overdue) == (0, 1, 0)
    assert stored(raw, run, "p/0/0")["state"] == "execution_timeout"
    # the executor comes back with its result: too late, refused, nothing changes
    before = snapshot(raw, run)
    with pytest.raises(TerminalSampleError, match="already ended"):
        states.move("p/0/0", "executed_with_result", "executor")
    assert snapshot(raw, run) == before


def test_an_owner_may_still_move_an_overdue_sample_the_watchdog_has_not_ended(server: RedisServer, raw: redis.Redis,
                                                                              run: str) -> None:  # fmt: skip
    states = SampleStates(server.url, run=run)
    states.start("p/0/0", deadline_s=0)
    assert states.counts(scan=False).states["generating"].overdue == 1
    states.move("p/0/0", "queued_for_execution", "actor", deadline_s=3600)
    assert states.expire() == []
    assert stored(raw, run, "p/0/0")["state"] == "queued_for_execution"


# --------------------------------------------------------------------------------- counts


def test_counts_and_the_oldest_of_each_state_over_a_hundred_samples(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    for i in range(100):  # a third of the live ones due at once
        walk(states, f"s/{i}", STATES[(i * 7) % len(STATES)], deadline_s=0 if i % 3 == 0 else 3600)
    now = server_time(raw) + 1
    counts = states.counts(now=now)
    # the host's own count, from every hash
    hashes = {k.rsplit(":sample:", 1)[1]: raw.hgetall(k) for k in raw.scan_iter(match=prefix(run) + "sample:*")}
    assert len(hashes) == 100 and counts.total == 100 and counts.unreadable == []
    for state in STATES:
        here = {sid: h for sid, h in hashes.items() if h["state"] == state}
        c = counts.states[state]
        assert c.count == len(here), state
        if here:
            oldest = min(here, key=lambda sid: (float(here[sid]["entered_at"]), sid))
            assert c.oldest == oldest, state
            assert c.oldest_age_s == pytest.approx(now - float(here[oldest]["entered_at"]), abs=1e-3)
        else:
            assert c.oldest is None and c.oldest_age_s is None
        want_overdue = 0 if state in TERMINAL else sum(float(h["deadline"]) <= now for h in here.values())
        assert c.overdue == want_overdue, state
    assert counts.overdue > 0 and sum(c.count for c in counts.states.values() if c.terminal) > 0


# ------------------------------------------------------------------------ foreign and garbled


def test_foreign_and_garbled_keys_are_named_never_a_crash(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    p = prefix(run)
    states.start("good/0", deadline_s=0)
    states.start("mangled/0", deadline_s=0)
    raw.hset(p + "sample:mangled/0", "transitions", "[not json")
    raw.hset(p + "sample:foreign", mapping={"state": "bogus", "owner": "me"})
    raw.zadd(p + "deadline:generating", {"foreign": 0, "ghost/0": 0})  # one garbled, one without a hash
    raw.set(p + "junk", "x")
    raw.lpush(p + "sample:alist", "x")
    raw.set(p.encode() + b"sample:\xff\xfe", b"x")
    counts = states.counts()
    named = {u.key: u.why for u in counts.unreadable}
    assert "transitions" in named[p + "sample:mangled/0"]
    assert named[p + "sample:foreign"] == "unknown state 'bogus'"
    assert named[p + "junk"] == "not a key of code_env.samples"
    assert "list" in named[p + "sample:alist"]
    assert any("\ufffd" in k for k in named)  # a key that is not UTF-8, named as it reads
    deadline_notes = [u.why for u in counts.unreadable if u.key == p + "deadline:generating"]
    assert any("'ghost/0': no such sample" in w for w in deadline_notes)
    assert any("'foreign'" in w for w in deadline_notes)
    assert counts.states["generating"].count == 2
    # reading or moving one of them: a named error, and nothing changes
    before = snapshot(raw, run)
    with pytest.raises(UnreadableSampleError, match="sample:foreign: unreadable: unknown state 'bogus'"):
        states.get("foreign")
    with pytest.raises(UnreadableSampleError, match="transitions"):
        states.get("mangled/0")
    with pytest.raises(UnreadableSampleError, match="a list, not a hash"):
        states.move("alist", "queued_for_execution", "actor")
    with pytest.raises(UnreadableSampleError, match="unknown state"):
        states.move("foreign", "queued_for_execution", "actor")
    with pytest.raises(UnreadableSampleError):
        states.start("alist")
    assert snapshot(raw, run) == before
    # the watchdog skips them and still ends the good one
    assert states.expire() == ["good/0"]
    assert stored(raw, run, "good/0")["state"] == "budget_exhausted"
    assert raw.hgetall(p + "sample:foreign") == {"state": "bogus", "owner": "me"}


def test_a_key_of_ours_holding_another_type_is_a_clear_error(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    states.start("p/0/0")
    raw.delete(prefix(run) + "state:queued_for_execution")
    raw.set(prefix(run) + "state:queued_for_execution", "x")
    with pytest.raises(Exception, match="refused it: move: WRONGTYPE") as info:
        states.move("p/0/0", "queued_for_execution", "actor")
    assert type(info.value).__name__ == "StoreCommandError"


# ------------------------------------------------------------------------------------ the CLI


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


def test_the_cli_prints_the_table_and_json(server: RedisServer, raw: redis.Redis, run: str) -> None:
    states = SampleStates(server.url, run=run)
    for i, state in enumerate(["generating", "generating", "running", "judged", "sandbox_error"]):
        walk(states, f"c/{i}", state)
    states.start("late/0", deadline_s=0)
    raw.hset(prefix(run) + "sample:foreign", "state", "bogus")
    out = cli("samples", "--redis", server.url, "--run", run)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.split() and line.split()[0] in STATES}
    assert list(rows) == list(STATES)
    assert rows["generating"][1:4] == ["actor", "3", "c/0"] and rows["generating"][-1] == "1"
    assert rows["running"][1:4] == ["executor", "1", "c/2"] and rows["running"][-1] == "0"
    assert rows["judged"][1:4] == ["-", "1", "c/3"] and rows["budget_exhausted"][2:4] == ["0", "-"]
    assert f"run '{run}': 6 samples, 4 in flight, 1 past their deadline" in out.stdout
    assert f"{prefix(run)}sample:foreign: unknown state 'bogus'" in out.stdout
    js = cli("samples", "--redis", server.url, "--run", run, "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    host = {s: raw.zcard(prefix(run) + f"state:{s}") for s in STATES}
    assert {s: c["count"] for s, c in data["states"].items()} == host
    assert data["states"]["generating"]["oldest"] == "c/0" and data["states"]["generating"]["overdue"] == 1
    assert [u["key"] for u in data["unreadable"]] == [prefix(run) + "sample:foreign"]


def test_the_cli_flags_no_scan_and_the_runs_of_an_empty_one(server: RedisServer, raw: redis.Redis, run: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from code_env.cli import main

    SampleStates(server.url, run=run).start("p/0/0")
    raw.set(prefix(run) + "junk", "x")
    assert main(["samples", "--redis", server.url, "--run", run, "--json", "--no-scan"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["unreadable"] == [] and data["states"]["generating"]["count"] == 1
    assert main(["samples", "--redis", server.url, "--run", "nothing-here"]) == 0
    assert "no samples in run 'nothing-here'; runs here: " in capsys.readouterr().out
    assert main(["samples", "--redis", server.url, "--run", "a b"]) == 2
    assert "invalid run name 'a b'" in capsys.readouterr().err


def test_the_cli_says_in_one_line_when_redis_is_unreachable() -> None:
    out = cli("samples", "--redis", f"redis://127.0.0.1:{free_port()}/0")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("code-env samples: error: cannot reach Redis at redis://127.0.0.1:")
    assert "Connection refused" in out.stderr


def test_a_client_of_the_callers_without_decoded_replies_works_the_same(server: RedisServer, raw: redis.Redis,
                                                                      run: str) -> None:  # fmt: skip
    client = redis.Redis.from_url(server.url)  # bytes replies
    states = SampleStates(client, run=run)
    walk(states, "p/0/0", "executed_with_result")
    states.start("p/1/0", deadline_s=0)
    raw.set(prefix(run) + "junk", "x")
    assert states.get("p/0/0").state == "executed_with_result"
    assert states.expire() == ["p/1/0"]
    counts = states.counts()
    assert counts.states["executed_with_result"].oldest == "p/0/0" and counts.states["budget_exhausted"].count == 1
    assert [u.key for u in counts.unreadable] == [prefix(run) + "junk"]
    client.close()


def test_an_unreachable_redis_is_a_store_unavailable_error(server: RedisServer) -> None:
    states = SampleStates(f"redis://127.0.0.1:{free_port()}/0", run="x")
    with pytest.raises(StoreUnavailableError, match="cannot reach Redis at"):
        states.start("p/0/0")


# ---------------------------------------------------------------------------- a restart


def test_the_states_survive_a_redis_restart_with_persistence_on(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", persistent=True) as srv:
        states = SampleStates(srv.url, run="r")
        for i, state in enumerate(STATES):
            walk(states, f"p/{i}", state)
        raw = redis.Redis.from_url(srv.url, decode_responses=True)
        before = snapshot(raw, "r")
        counts = states.counts(now=server_time(raw))
        raw.close()
        srv.restart(kill=True)  # SIGKILL: only what was on disk (AOF, fsync always) comes back
        raw = redis.Redis.from_url(srv.url, decode_responses=True)
        assert snapshot(raw, "r") == before
        again = states.counts(now=counts.now)  # the same store, reconnected
        assert again == counts and again.unreadable == []
        assert SampleStates(srv.url, run="r").get("p/1").state == "queued_for_execution"
        # moves go on: the scripts the server forgot are loaded again
        states.move("p/1", "running", "executor")
        states.move("p/1", "executed_with_result", "executor")
        assert stored(raw, "r", "p/1")["state"] == "executed_with_result"
        raw.close()


def test_the_watchdog_thread_survives_a_redis_outage(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", persistent=True) as srv:
        states = SampleStates(srv.url, run="r")
        with Watchdog(states, interval_s=0.05) as dog:
            srv.stop(kill=True)
            deadline = time.monotonic() + 30
            while dog.errors == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert dog.alive and dog.last_error is not None and "cannot reach Redis" in dog.last_error
            srv.start()
            states.start("p/0/0", deadline_s=0)
            raw = redis.Redis.from_url(srv.url, decode_responses=True)
            while raw.hget("code-env:samples:{r}:sample:p/0/0", "state") != "budget_exhausted" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert raw.hget("code-env:samples:{r}:sample:p/0/0", "state") == "budget_exhausted"
            raw.close()
        assert not dog.alive



def test_apply_sends_many_starts_and_moves_in_one_round_trip_with_the_same_rules(tmp_path: Path) -> None:
    from code_env.samples import StateMover

    with redis_server(tmp_path) as server:
        st = SampleStates(server.url, run="batch")
        got = st.apply([("start", "a/0/0", "a/0/0/0"), ("start", "a/1/0", "a/1/0/0"), ("move", "a/0/0", "queued_for_execution", "actor"),
                        ("move", "a/1/0", "running", "actor"), ("start", "a/0/0", "a/0/0/0"), ("move", "nope/0/0", "judged", "learner")])
        assert [type(e).__name__ if e else None for e in got] == [None, None, None, "IllegalTransitionError", "SampleExistsError",
                                                                  "UnknownSampleError"]
        assert (st.get("a/0/0").state, st.get("a/1/0").state) == ("queued_for_execution", "generating")
        mover = StateMover(st)
        mover.start(["b/0/0/0", "b/1/0/0"])
        mover.put([("b/0/0", "executed_with_result", "actor"), ("b/1/0", "judged", "learner")])
        mover.close()
        assert (mover.done, mover.refused) == (3, 1)
        assert st.get("b/0/0").state == "executed_with_result" and st.get("b/1/0").state == "generating"
