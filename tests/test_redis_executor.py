"""sandbox.RedisExecutor against a real redis-server and real executor processes
(``python -m code_env executor --redis URL``), everything counted from the host side: the
answers per request on a client's result stream (``XRANGE``), the entries left on the request
stream and pending in its group, the pool's counters, the executors' processes and heartbeats.

The same results as a local Sandbox for every kind of program (run, run_many, arun, arun_many, in
order, over two executors); cancellation; bad input on either stream; the client's own checks.
Faults: an executor killed mid-batch, one stalled (SIGSTOP) then resumed, one stopped with
SIGTERM, every executor dead, retries exhausted, Redis restarted with persistence off and on:
every request answered exactly once to its caller, nothing lost, the watchdog's reclaims counted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from code_env import grading
from code_env.cli import main
from sandbox import (
    CANCELLED,
    Cancel,
    ExecutionResult,
    Limits,
    RedisExecutor,
    RunRequest,
    cancelling,
)
from sandbox._redis import GROUP, PoolKeys
from sandbox.errors import BackendUnavailableError

from ._redis import RedisServer, free_port, redis_server
from .conftest import get_sandbox

redis = pytest.importorskip("redis")

REPO = Path(__file__).resolve().parents[1]
KEYS = PoolKeys("default")
# Fields that depend on timing or on where a run happened, not on the program.
NOT_COMPARED = {"execution_time_ms", "cpu_time_ms", "stdout_last_ms", "peak_memory_mb", "reruns", "rerun_reason", "node", "queued_ms"}
WAIT_S = 90.0  # the most any wait for a state of the pool here lasts (a loaded machine: never reached otherwise)
SLEEP = Limits(timeout_s=10)


def sleeper(i: int, seconds: float = 1.0) -> RunRequest:
    return RunRequest(code=f"import time\ntime.sleep({seconds})\nprint({i})", limits=SLEEP, trace_id=f"sleep/{i}")


def sleepers_in_background(client: RedisExecutor, n: int) -> tuple[threading.Thread, list[list[ExecutionResult]]]:
    """``client.run_many`` of ``n`` sleepers on a started thread, and the list its results go to."""
    out: list[list[ExecutionResult]] = []
    t = threading.Thread(target=lambda: out.append(client.run_many([sleeper(i) for i in range(n)])))
    t.start()
    return t, out


def until(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Executor:
    """One ``code-env executor`` process, in a session of its own, logging to a file; its process
    tree (the sandbox's workers set up sessions of their own) is recorded once it is live, and
    must be gone once it is closed."""

    def __init__(self, url: str, name: str, directory: Path, *args: str) -> None:
        self.name, self.url = name, url
        self.log_path = directory / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "code_env", "executor", "--redis", url, "--name", name, "--workers", "2",
                 "--lease-s", "1.5", *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=REPO, start_new_session=True,
            )  # fmt: skip
        self.tree: set[int] = set()

    def wait_live(self, r: Any) -> None:
        until(f"executor {self.name}'s heartbeat ({self.log()[-500:]})",
              lambda: r.exists(KEYS.executor(self.name)) or self.proc.poll() is not None)  # fmt: skip
        assert self.proc.poll() is None, self.log()
        self.tree |= descendants(self.proc.pid)

    def pending(self, r: Any) -> int:
        """Entries delivered to this executor and not yet acknowledged (XPENDING, per consumer)."""
        for c in r.xpending(KEYS.requests, GROUP)["consumers"]:
            if c["name"].decode() == self.name:
                return int(c["pending"])
        return 0

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        """The executor killed (and its session), and nothing of its process tree left: its
        sandbox's workers die with it."""
        if self.proc.poll() is None:
            self.tree |= descendants(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        until(f"the processes of executor {self.name} to end", lambda: not alive(self.tree), 30)


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, from /proc (each thread's children)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo += [int(x) for x in fh.read().split()]
        except OSError:
            continue
    return out


def alive(pids: set[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie waiting for init to reap it does not)."""
    out = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(p)
        except OSError:
            continue
    return out


class Pool:
    """A redis-server, executors, and a raw client for the host's own looks."""

    def __init__(self, server: RedisServer, directory: Path) -> None:
        self.server, self.dir = server, directory
        self.r = redis.Redis.from_url(server.url)
        self.executors: list[Executor] = []

    def start(self, name: str, *args: str, wait: bool = True) -> Executor:
        ex = Executor(self.server.url, name, self.dir, *args)
        self.executors.append(ex)
        if wait:
            ex.wait_live(self.r)
        return ex

    def stats(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(KEYS.stats).items()}

    def answers(self, client: RedisExecutor) -> list[tuple[str, str, str]]:
        """(request id, trace id, executor) of every answer on ``client``'s result stream."""
        out = []
        for _, f in self.r.xrange(client.reply):
            res = json.loads(f[b"res"])
            out.append((f[b"id"].decode(), res["trace_id"], f[b"by"].decode()))
        return out

    def assert_drained(self) -> None:
        """Nothing left of any request on the request stream: no entry, nothing pending."""
        until("the request stream to drain", lambda: self.r.xlen(KEYS.requests) == 0
              and self.r.xpending(KEYS.requests, GROUP)["pending"] == 0)  # fmt: skip

    def close(self) -> None:
        for ex in self.executors:
            ex.close()
        self.r.close()


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    with redis_server(tmp_path / "redis") as server:
        p = Pool(server, tmp_path)
        try:
            yield p
        finally:
            p.close()


@pytest.fixture
def persistent_pool(tmp_path: Path) -> Iterator[Pool]:
    with redis_server(tmp_path / "redis", persistent=True) as server:
        p = Pool(server, tmp_path)
        try:
            yield p
        finally:
            p.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """One Redis and two executors (entries over 200 kB refused) for the tests that kill nothing."""
    directory = tmp_path_factory.mktemp("redis-pool")
    with redis_server(directory / "redis") as server:
        p = Pool(server, directory)
        try:
            for name in ("a", "b"):
                p.start(name, "--max-payload-bytes", "200000", wait=False)
            for ex in p.executors:
                ex.wait_live(p.r)
            yield p
            for ex in p.executors:  # bad input and the rest never ended a consumer
                assert ex.proc.poll() is None, ex.log()
                assert "Traceback" not in ex.log(), ex.log()
        finally:
            p.close()


@pytest.fixture
def client(shared: Pool) -> Iterator[RedisExecutor]:
    with RedisExecutor(shared.server.url) as ex:
        yield ex
    shared.assert_drained()


# -- without Redis


def test_import_sandbox_imports_no_redis() -> None:
    code = "import sys, sandbox; assert 'redis' not in sys.modules; sandbox.RedisExecutor; assert 'redis' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"url": "http://127.0.0.1:6379"}, ValueError, r"url: expected a Redis URL \(redis://..."),
        ({"pool": "a b"}, ValueError, "pool: expected 1 to 64 letters"),
        ({"max_retries": -1}, ValueError, r"max_retries: expected an int in \[0, 100\], got -1"),
        ({"timeout_margin_s": 0}, ValueError, r"timeout_margin_s: expected seconds in \(0, 86400\], got 0"),
        ({"max_payload_bytes": 10}, ValueError, "max_payload_bytes: expected an int in"),
        ({"limits": {"timeout_s": 1}}, TypeError, "limits: expected sandbox.Limits, got dict"),
    ],
    ids=["url", "pool", "max_retries", "margin", "payload", "limits"],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RedisExecutor(**{"url": "redis://127.0.0.1:1/0", **kwargs})


def test_an_unreachable_redis_is_told_at_once() -> None:
    with pytest.raises(BackendUnavailableError, match=r"cannot reach Redis at redis://127\.0\.0\.1:\d+/0"):
        RedisExecutor(f"redis://127.0.0.1:{free_port()}/0")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--redis", "http://x"], "--redis: url: expected a Redis URL"),
        (["--redis", "redis://127.0.0.1:1/0", "--batch", "0"], "--batch: expected a positive integer, got 0"),
        (["--redis", "redis://127.0.0.1:1/0", "--lease-s", "-1"], "--lease-s: expected a positive number of seconds"),
    ],
    ids=["url", "batch", "lease"],
)
def test_the_cli_refuses_bad_usage_in_one_line(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["executor", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err


# -- two executors, shared by the tests that kill nothing


def mix() -> list[RunRequest]:
    """Every kind of verdict, each program its own."""
    quick = Limits(timeout_s=10, memory_mb=256)
    return [
        RunRequest(code="print('hi')", limits=quick, trace_id="ok"),
        RunRequest(code="def f():\n    raise ValueError('boom')\nf()", limits=quick, trace_id="exception"),
        RunRequest(code="import sys\nprint(sys.stdin.read()[::-1])", stdin="abc\n", limits=quick, trace_id="stdin"),
        RunRequest(code="import time\ntime.sleep(30)", limits=Limits(timeout_s=0.5), trace_id="timeout"),
        RunRequest(code="x = bytearray(400 * 1024 * 1024)\nprint(len(x))", limits=Limits(memory_mb=64), trace_id="oom"),
        RunRequest(code="import sys\nprint('x' * 300_000)\nsys.exit(3)", limits=quick.model_copy(update={"max_output_bytes": 100}),
                   trace_id="exit and a lot"),
        RunRequest(code="open('out/b.txt', 'w').write(open('a.txt').read() * 2)", files={"a.txt": b"\x00ab", "out/x": ""},
                   fetch_files=("out",), limits=quick, trace_id="files"),
        RunRequest(code="def f(:\n    pass", limits=quick, trace_id="syntax"),
    ]


def compared(r: ExecutionResult) -> dict[str, Any]:
    return r.model_dump(exclude=NOT_COMPARED)


def test_the_same_results_as_a_local_sandbox_in_order(shared: Pool, client: RedisExecutor) -> None:
    reqs = mix()
    local = get_sandbox("process").run_many(reqs)
    assert [r.oom for r in local][4] and local[3].timeout_hit and local[6].files == {"out/b.txt": b"\x00ab\x00ab", "out/x": b""}
    many = client.run_many(reqs)
    assert [compared(r) for r in many] == [compared(r) for r in local]
    one = [client.run(r.code, r.stdin, r.limits, r.trace_id, files=r.files, fetch_files=r.fetch_files) for r in reqs[:3]]
    assert [compared(r) for r in one] == [compared(r) for r in local[:3]]

    async def both() -> tuple[list[ExecutionResult], ExecutionResult]:
        return await client.arun_many(list(reversed(reqs))), await client.arun(reqs[2].code, reqs[2].stdin, reqs[2].limits, "stdin")

    amany, aone = asyncio.run(both())
    assert [compared(r) for r in amany] == [compared(r) for r in reversed(local)]
    assert compared(aone) == compared(local[2])
    assert client.run_many([]) == []
    # from the host: one answer per request on the client's stream, by the pool's executors
    answers = shared.answers(client)
    assert len(answers) == 2 * len(reqs) + 3 + 1 and len({rid for rid, _, _ in answers}) == len(answers)
    assert {by for _, _, by in answers} <= {"a", "b"}
    assert client.stats["answered"] == len(answers) and client.stats["duplicates"] == 0
    assert client.workers == 4 and sorted(e["name"] for e in client.executors) == ["a", "b"]


def test_a_cancelled_batch_is_withdrawn_and_its_late_answers_dropped(shared: Pool, client: RedisExecutor) -> None:
    before = shared.stats().get("late_dropped", 0)
    cancel = Cancel()
    out: list[list[ExecutionResult]] = []

    def caller() -> None:
        with cancelling(cancel):
            out.append(client.run_many([sleeper(i, 2.0) for i in range(6)]))

    t = threading.Thread(target=caller)
    t.start()
    until("the executors to take the batch", lambda: shared.r.xpending(KEYS.requests, GROUP)["pending"] >= 2)
    held = shared.r.xpending(KEYS.requests, GROUP)["pending"]
    cancel.cancel()
    t.join(timeout=WAIT_S)
    assert [r.sandbox_error for r in out[0]] == [CANCELLED] * 6
    shared.assert_drained()  # withdrawn: acknowledged and deleted, taken or not
    until("the runs taken to end and their answers to be dropped", lambda: shared.stats().get("late_dropped", 0) - before >= held)
    assert shared.answers(client) == [] and client.stats["withdrawn"] == 6

    async def deadline() -> None:
        await asyncio.wait_for(client.arun_many([sleeper(i, 2.0) for i in range(2)]), 0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(deadline())
    shared.assert_drained()
    assert client.stats["withdrawn"] == 8 and client.run("print(7)").stdout == "7\n"
    already = Cancel()
    already.cancel()
    with cancelling(already):  # cancelled before it is sent: never sent
        assert [r.sandbox_error for r in client.run_many(["print(1)"] * 2)] == [CANCELLED] * 2
    assert client.stats["requests"] == 6 + 2 + 1 and shared.r.xlen(KEYS.requests) == 0  # (those two never counted)


def test_bad_entries_are_answered_or_dropped_and_never_lose_a_neighbour(shared: Pool, caplog: pytest.LogCaptureFixture) -> None:
    reply = KEYS.results("host")  # the test is the client: it reads this stream itself
    good = RunRequest(code="print(input())", stdin="fine", limits=Limits(timeout_s=10), trace_id="good").model_dump_json()

    def entry(rid: str, **fields: str) -> dict[str, str]:
        return {"id": rid, "trace_id": rid, "req": good, "reply": reply, **fields}

    entries = [
        entry("good-1"),
        {"id": "missing-req", "reply": reply},  # answered: it names where
        {"foo": "bar", "baz": "1"},  # foreign: no one to answer
        entry("foreign-field", extra="1"),
        entry("bad-json", req="{not json"),
        entry("bad-request", req=json.dumps({"code": "print(1)", "limits": {"timeout_s": -1}})),
        entry("oversized", stdin_pad="x" * 300_000),
        entry("elsewhere", reply=KEYS.requests),  # a reply that is no result stream: never written to
        entry("good-2"),
    ]
    stats0 = shared.stats()
    for e in entries:
        shared.r.xadd(KEYS.requests, e)
    until("the answers", lambda: len(shared.r.xrange(reply)) >= 7)
    shared.assert_drained()
    got = {f[b"id"].decode(): ExecutionResult.from_wire(json.loads(f[b"res"])) for _, f in shared.r.xrange(reply)}
    assert got["good-1"].stdout == got["good-2"].stdout == "fine\n" and got["good-1"].sandbox_error is None
    errors = {k: v.sandbox_error for k, v in got.items() if k.startswith(("missing", "foreign", "bad", "oversized"))}
    assert set(got) == {"good-1", "good-2", *errors}, got
    assert "missing req" in (errors["missing-req"] or "")
    assert "foreign 'extra'" in (errors["foreign-field"] or "")
    assert "not a valid RunRequest: Invalid JSON" in (errors["bad-json"] or "")
    assert "not a valid RunRequest: limits.timeout_s: Input should be greater than 0" in (errors["bad-request"] or "")
    assert "over this executor's max_payload_bytes=200000" in (errors["oversized"] or "")
    assert shared.r.type(KEYS.requests) == b"stream" and shared.r.xlen(KEYS.requests) == 0
    assert shared.stats()["bad_entries"] - stats0.get("bad_entries", 0) == 7
    logs = shared.executors[0].log() + shared.executors[1].log()
    assert "is bad input: not a request of code-env's protocol (fields: missing id, req, reply; foreign 'baz', 'foo'" in logs
    assert "its reply stream 'code-env:default:requests' is not a result stream of pool 'default'" in logs
    shared.r.delete(reply)


def test_the_client_skips_unknown_and_malformed_answers_and_drops_duplicates(shared: Pool, client: RedisExecutor,
                                                                             caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    assert client.run("print(1)", trace_id="first").stdout == "1\n"
    (rid, _, _), = shared.answers(client)
    forged = ExecutionResult(trace_id="forged", exit_code=0, stdout="forged\n").model_dump_json()
    with caplog.at_level(logging.INFO, logger="sandbox.redis"):
        shared.r.xadd(client.reply, {"id": "never-sent", "res": forged, "by": "host", "attempt": "1"})
        shared.r.xadd(client.reply, {"id": rid, "res": "{not json", "by": "host"})
        shared.r.xadd(client.reply, {"id": rid, "res": forged, "by": "host", "attempt": "2"})  # a duplicate of an answered id
        until("the reader to see them", lambda: client.stats["unknown"] + client.stats["malformed"] + client.stats["duplicates"] == 3)
    assert "an answer for request id 'never-sent' (trace forged, by host), which this client never sent" in caplog.text
    assert "is not an answer (JSONDecodeError" in caplog.text
    assert client.run("print(2)", trace_id="after").stdout == "2\n"  # the reader goes on


def test_an_oversized_payload_is_refused_before_anything_is_sent(shared: Pool) -> None:
    with RedisExecutor(shared.server.url, max_payload_bytes=4096) as small:
        with pytest.raises(ValueError, match=r"request 1: its payload is \d+ bytes of JSON, over max_payload_bytes=4096"):
            small.run_many(["print(1)", "print(1)  # " + "x" * 5000])
        with pytest.raises(ValueError, match="over max_payload_bytes=4096"):
            small.run("print(1)", stdin="x" * 5000)
        assert small.stats["requests"] == 0
    assert shared.r.xlen(KEYS.requests) == 0


def test_resolve_executor_takes_a_redis_url(shared: Pool) -> None:
    ex = grading.resolve_executor(shared.server.url)
    try:
        assert isinstance(ex, RedisExecutor) and ex is grading.resolve_executor(shared.server.url)
        assert ex.run_many(["print(6 * 7)"])[0].stdout == "42\n"
    finally:
        ex.close()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="got 'rediss'"):
        grading.resolve_executor("rediss")  # not a URL


# -- faults: a pool of their own


@pytest.mark.slow
def test_an_executor_killed_mid_batch_loses_nothing(pool: Pool) -> None:
    a, b = pool.start("a", wait=False), pool.start("b", wait=False)
    a.wait_live(pool.r)
    b.wait_live(pool.r)
    with RedisExecutor(pool.server.url) as client:
        t, out = sleepers_in_background(client, 12)
        until("executor a to hold requests", lambda: a.pending(pool.r) >= 1)
        held, tree = a.pending(pool.r), descendants(a.proc.pid)
        a.signal(signal.SIGKILL)
        until("a's sandbox workers to die with it", lambda: not alive(tree))
        t.join(timeout=WAIT_S)
        assert [r.stdout for r in out[0]] == [f"{i}\n" for i in range(12)]
        assert [r.trace_id for r in out[0]] == [f"sleep/{i}" for i in range(12)]
        answers = pool.answers(client)
        per_trace = Counter(tid for _, tid, _ in answers)
        assert per_trace == Counter(f"sleep/{i}" for i in range(12))  # once each on the stream, too
        assert client.stats["duplicates"] == 0
    assert pool.stats()["reclaimed"] >= held >= 1
    assert "reclaimed entry" in b.log() and "from executor a (no heartbeat: died or stalled)" in b.log()
    pool.assert_drained()


@pytest.mark.slow
def test_a_stalled_executor_is_taken_over_and_its_late_answers_dropped(pool: Pool) -> None:
    a = pool.start("a", "--batch", "2")
    with RedisExecutor(pool.server.url) as client:
        t, out = sleepers_in_background(client, 4)
        until("executor a to hold two requests", lambda: a.pending(pool.r) == 2)
        a.signal(signal.SIGSTOP)
        try:
            pool.start("b", "--batch", "4")
            t.join(timeout=WAIT_S)
        finally:
            a.signal(signal.SIGCONT)
        assert [r.stdout for r in out[0]] == [f"{i}\n" for i in range(4)]
        until("a's late answers to be dropped", lambda: pool.stats().get("late_dropped", 0) >= 2)
        assert Counter(tid for _, tid, _ in pool.answers(client)) == Counter(f"sleep/{i}" for i in range(4))
        assert {by for _, _, by in pool.answers(client)} == {"b"} and client.stats["duplicates"] == 0
        assert pool.stats()["reclaimed"] == 2
        until("a's heartbeat again", lambda: pool.r.exists(KEYS.executor("a")))  # resumed, it goes on
        assert a.proc.poll() is None and client.run("print(3)").stdout == "3\n"
    pool.assert_drained()


@pytest.mark.slow
def test_sigterm_finishes_the_requests_held_then_exits(pool: Pool) -> None:
    a = pool.start("a", "--batch", "2")
    with RedisExecutor(pool.server.url) as client:
        t, out = sleepers_in_background(client, 2)
        until("executor a to hold the requests", lambda: a.pending(pool.r) == 2)
        a.signal(signal.SIGTERM)
        assert a.proc.wait(timeout=WAIT_S) == 0, a.log()
        t.join(timeout=WAIT_S)
        assert [r.stdout for r in out[0]] == ["0\n", "1\n"]
    assert not pool.r.exists(KEYS.executor("a")) and pool.stats().get("reclaimed", 0) == 0
    assert "stopping once its 2 requests are answered" in a.log()
    pool.assert_drained()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_with_every_executor_dead_requests_answer_sandbox_error_never_hang(pool: Pool) -> None:
    a = pool.start("a")
    a.signal(signal.SIGKILL)
    with RedisExecutor(pool.server.url, unavailable_timeout_s=1.0) as client:
        res = client.run_many([sleeper(i) for i in range(3)])
        assert all(r.sandbox_error and "no live executor in pool 'default'" in r.sandbox_error for r in res), res
        assert client.stats["unavailable"] == 3
    pool.assert_drained()


@pytest.mark.slow
def test_retries_exhausted_answer_sandbox_error(pool: Pool) -> None:
    """A request whose executors stall one after the other: taken by a, then by b (its one
    retry), then answered ``sandbox_error`` by c's watchdog; a's and b's late answers dropped."""
    a = pool.start("a", "--workers", "1", "--batch", "1")
    with RedisExecutor(pool.server.url, max_retries=1) as client:
        out: list[ExecutionResult] = []
        t = threading.Thread(target=lambda: out.append(client.run("import time\ntime.sleep(2)\nprint(1)", limits=SLEEP)))
        t.start()
        stalled = [a]
        try:
            until("a to hold it", lambda: a.pending(pool.r) == 1)
            a.signal(signal.SIGSTOP)
            b = pool.start("b", "--workers", "1", "--batch", "1")
            until("b to take it over", lambda: b.pending(pool.r) == 1)
            b.signal(signal.SIGSTOP)
            stalled.append(b)
            pool.start("c", "--workers", "1")
            t.join(timeout=WAIT_S)
        finally:
            for ex in stalled:
                ex.signal(signal.SIGCONT)
        assert out[0].sandbox_error is not None and "retries exhausted: the request was delivered 2 times (max 2)" in out[0].sandbox_error
        until("a's and b's late answers to be dropped", lambda: pool.stats().get("late_dropped", 0) == 2)
        stats = pool.stats()
        assert (stats["reclaimed"], stats["retries_exhausted"], stats.get("answered", 0)) == (1, 1, 0)
        assert [by for _, _, by in pool.answers(client)] == ["c"]
    pool.assert_drained()


def _restart_mid_batch(pool: Pool) -> tuple[RedisExecutor, list[ExecutionResult], Executor]:
    a = pool.start("a", "--batch", "2")
    client = RedisExecutor(pool.server.url)
    t, out = sleepers_in_background(client, 6)
    until("a to hold two requests", lambda: a.pending(pool.r) == 2)
    pool.server.restart(kill=True)
    pool.r = redis.Redis.from_url(pool.server.url)
    t.join(timeout=WAIT_S)
    assert out and [r.stdout for r in out[0]] == [f"{i}\n" for i in range(6)], out
    return client, out[0], a


@pytest.mark.slow
def test_redis_restarted_without_persistence_loses_no_request(pool: Pool) -> None:
    client, _, a = _restart_mid_batch(pool)
    with client:
        assert client.stats["resent"] >= 4  # the four still on the stream were lost with it
        pool.assert_drained()  # (the copies sent again are answered too: a second answer, dropped)
        per_trace = Counter(tid for _, tid, _ in pool.answers(client))
        assert set(per_trace) == {f"sleep/{i}" for i in range(6)}
        until("the client to drop the second answers", lambda: client.stats["duplicates"] == sum(per_trace.values()) - 6)
        until("a's heartbeat after the restart", lambda: pool.r.exists(KEYS.executor("a")))
        assert a.proc.poll() is None and client.run("print(5)").stdout == "5\n"
    pool.assert_drained()


@pytest.mark.slow
def test_redis_restarted_with_persistence_loses_nothing_and_answers_once(persistent_pool: Pool) -> None:
    client, _, a = _restart_mid_batch(persistent_pool)
    with client:
        assert client.stats["resent"] == 0 and client.stats["duplicates"] == 0
        assert Counter(tid for _, tid, _ in persistent_pool.answers(client)) == Counter(f"sleep/{i}" for i in range(6))
        stats = persistent_pool.stats()
        assert stats["answered"] == 6 and stats.get("reclaimed", 0) == 0 and stats.get("late_dropped", 0) == 0
        assert a.proc.poll() is None and client.run("print(5)").stdout == "5\n"
    persistent_pool.assert_drained()


@pytest.mark.slow
def test_an_executor_restarted_under_its_name_takes_back_what_it_held(pool: Pool) -> None:
    a = pool.start("a", "--batch", "2")
    with RedisExecutor(pool.server.url) as client:
        t, out = sleepers_in_background(client, 2)
        until("a to hold the requests", lambda: a.pending(pool.r) == 2)
        a.signal(signal.SIGKILL)
        again = pool.start("a", "--batch", "2")  # its only executor: nobody else would take them
        t.join(timeout=WAIT_S)
        assert [r.stdout for r in out[0]] == ["0\n", "1\n"]
    assert pool.stats()["reclaimed"] == 2 and "(an earlier life of this executor's name)" in again.log()
    pool.assert_drained()


@pytest.mark.slow
def test_a_live_executor_holding_an_entry_past_its_deadline_is_taken_for_hung(pool: Pool) -> None:
    """The test plays a hung executor: it takes an entry (deadline 1 s) and keeps its heartbeat,
    never answering; the real executor's watchdog claims the entry past the deadline and answers."""
    reply = KEYS.results("host")
    req = RunRequest(code="print('taken over')", limits=Limits(timeout_s=5), trace_id="hung").model_dump_json()
    pool.r.xgroup_create(KEYS.requests, GROUP, id="0", mkstream=True)
    pool.r.xadd(KEYS.requests, {"id": "hung-1", "trace_id": "hung", "req": req, "reply": reply, "deadline_s": "1"})
    assert pool.r.xreadgroup(GROUP, "fake", {KEYS.requests: ">"}, count=1)
    pool.r.set(KEYS.executor("fake"), json.dumps({"name": "fake", "workers": 1, "batch": 1, "rounds": 1}), px=600_000)
    pool.r.sadd(KEYS.executors, "fake")
    b = pool.start("b")
    (_, fields), = until("the answer", lambda: pool.r.xrange(reply))
    assert (fields[b"by"], json.loads(fields[b"res"])["stdout"], fields[b"attempt"]) == (b"b", "taken over\n", b"2")
    assert pool.stats()["reclaimed"] == 1 and "from executor fake (past its deadline: hung)" in b.log()
    pool.assert_drained()


def test_with_samples_run_a_result_is_read_only_after_its_sample_is_executed(pool: Pool) -> None:
    """``code-env executor --samples-run RUN`` moves each run's sample to ``executed_with_result``
    before the answer is written: whoever reads a result (an actor, then its learner) finds the
    sample there at once, and the learner's ``judged`` is never refused for being early."""
    from code_env.samples import SampleStates, sample_of
    from code_env.tracing import trace_id

    pool.start("a", "--samples-run", "r1")
    states = SampleStates(pool.server.url, run="r1")
    ids = [trace_id("p", n) for n in range(40)]
    for t in ids:
        states.start(sample_of(t), t)
        states.move(sample_of(t), "queued_for_execution", "actor")
    with RedisExecutor(pool.server.url) as client:
        for t in ids:  # one at a time: each read as soon as it is answered
            assert client.run("print(1)", trace_id=t).stdout == "1\n"
            assert states.get(sample_of(t)).state == "executed_with_result"
            states.move(sample_of(t), "judged", "learner")
    assert {s: c.count for s, c in states.counts().states.items() if c.count} == {"judged": 40}
