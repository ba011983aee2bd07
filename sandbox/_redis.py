"""``RedisExecutor``: ``Sandbox``'s ``run``/``run_many`` served by executor processes
(``code-env executor --redis URL``) that share one Redis server, joined by Redis Streams. The
client and the executors never talk to each other: each talks to Redis. The ``redis`` package is
imported when an executor or a client is made, never by ``import sandbox``.

**The protocol.** Every key of a pool P begins with ``code-env:P:``.

* ``requests``: a stream, read by the consumer group ``executors`` (made with ``MKSTREAM`` by
  whoever comes first; made again, never a crash, after a Redis that lost its data answers
  ``NOGROUP``). One entry per request sent: ``id`` (a uuid of the request, the same for every
  send of it: the key of exactly-once), ``trace_id``, ``req`` (the ``RunRequest`` as JSON, its
  limits filled in), ``reply`` (the client's result stream), ``sent`` (unix time), ``deadline_s``
  (how long an executor may hold it: the longest its run may take, as the sandbox's own watchdog
  counts it, plus the client's margin), ``retries`` (how often it may be taken again from an
  executor that died or stalled) and ``attempt`` (0; 1, 2, ... when the client sent it again
  after Redis lost it). Any other field, a missing one, or a ``req`` that is not a valid
  ``RunRequest`` makes the entry bad input (below).
* ``results:C``: a stream per client C. One entry per answer: ``id``, ``res`` (the
  ``ExecutionResult`` as JSON, the wire format), ``by`` (the executor's name), ``attempt`` (the
  deliveries of the entry, plus the client's resends: 1 is the first try). Bounded
  (``MAXLEN ~``), and expiring an hour after its last answer (a client that died); the client
  trims what it read ``result_retention_s`` after newer answers came.
* ``executor:NAME``: an executor's heartbeat (JSON: host, pid, workers, batch, rounds, backend),
  with a TTL of its ``lease_s``, refreshed several times per lease; ``executors``, the set of names.
* ``stats``: a hash of counters: ``answered``, ``reclaimed`` (entries the watchdog took from an
  executor that died, stalled or hung, to run again), ``retries_exhausted``, ``late_dropped``
  (answers that came after another's, or after their client withdrew them), ``bad_entries``;
  the clients': ``resent``, ``unavailable``, ``withdrawn`` (by a client's ``close``).
* ``epoch``: a random token, set (``SET NX``) by whoever finds none. A new epoch means that Redis
  lost its data (a restart without persistence): what was sent before it is gone.

**Who does what.** An executor reads with ``XREADGROUP`` (blocking, at most as many entries as it
has room for: ``batch``, by default twice its workers), runs them with its local ``Sandbox``, and
answers each with one script that, atomically, ``XACK``s the entry, publishes the answer to the
entry's reply stream only if that ``XACK`` acknowledged it (the first executor to finish) or the
epoch changed since the entry was read (Redis lost the entry: the answer is still good), and
``XDEL``s it. So an entry is answered once on the stream whoever ran it, and a late executor's
answer (one that was stalled, then resumed) is dropped there (``late_dropped``).

**The watchdog** (a thread of every executor): ``XPENDING`` lists, holder by holder, the entries
delivered and not yet acknowledged; one whose executor has no heartbeat any more (killed, or
stopped with ``SIGSTOP``: its lease ran out), or that bears this executor's name but that this
process never took (an earlier life of an executor restarted under the same name), is claimed
(``XCLAIM``, whose idle-time guard lets only one watchdog win) once idle for a second; one whose
executor lives is claimed once it has been held past its deadline (the entry's ``deadline_s``
times the rounds the holder's batch takes on its workers: a live executor that hangs).
``XAUTOCLAIM`` takes one idle time for every entry, where each entry has its own deadline and a
dead holder's ask for none, hence ``XPENDING`` and ``XCLAIM``. The delivery count bounds the
retries: an entry delivered more than ``1 + retries`` times is answered ``sandbox_error``
(``ExecutionResult.infrastructure_failure``, saying so; ``retries_exhausted``) instead of being
run again; the others are run by the claimer (``reclaimed``).

**The client** sends each batch in one transaction, and a reader thread of its own reads its
result stream (``XREAD``): an answer resolves its request's future; an answer for an id the client
already answered (a duplicate) or withdrew is dropped; one for an id it never sent is logged and
skipped. Its watchdog thread: a request sent before a new epoch (Redis lost it) is sent again at
once, with the same id; one past its deadline that is neither on the request stream nor answered
(its answer was lost) is sent again too; at most ``max_retries`` times, then it is answered
``sandbox_error``. With no live executor in the pool, or Redis unreachable, for
``unavailable_timeout_s``, every request waiting is answered ``sandbox_error``: never a hang. A
caller that goes away withdraws its requests: their entries are acknowledged and deleted, so no
executor takes them, and the answer of one already running is dropped by its ``XACK``.

**Restarts of Redis.** With persistence (AOF), the streams, the pending entries and the epoch
survive: executors and clients reconnect (backing off) and go on, and an answer that could not be
written is written when Redis is back: nothing is lost, nothing answered twice. Without, every
key is gone: executors make the group again, clients see the new epoch and send what was
unanswered again; an executor that was running an entry still answers it (the epoch changed), so a
request may be answered twice on the stream, and the client keeps the first.

**Exactly once**, for the caller: each request's future is resolved once, by the first answer of
its id; a program may run more than once (a fresh sandbox each time: runs are idempotent).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import itertools
import json
import logging
import math
import os
import queue
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._sandbox import Sandbox
from .errors import BackendUnavailableError, SandboxClosedError, SandboxError
from .models import (
    CANCELLED,
    Cancel,
    ExecutionResult,
    Limits,
    MiB,
    RunRequest,
    checked_request,
    coerce_requests,
    current_cancel,
    resolve_limits,
)

log = logging.getLogger("sandbox.redis")

INSTALL = "pip install 'code-env[redis]'"
SCHEMES = ("redis://", "rediss://", "unix://")
DEFAULT_URL = "redis://127.0.0.1:6379/0"
GROUP = "executors"
REQUEST_FIELDS = ("id", "trace_id", "req", "reply", "sent", "deadline_s", "retries", "attempt")
DEFAULT_MAX_PAYLOAD_BYTES = 32 * MiB
DEFAULT_LEASE_S = 10.0
RESULT_MAXLEN = 100_000  # answers kept on a result stream (approximately: MAXLEN ~), should its client lag or die
RESULT_TTL_S = 3600  # a result stream expires this long after its last answer (a client that died)
BLOCK_MS = 1000  # an XREAD/XREADGROUP waits this long for entries (a stop is seen within it)
SOCKET_TIMEOUT_S = 15.0  # a reply that takes longer (a blocking read's included): the connection is broken
MIN_IDLE_MS = 1000  # an entry of a dead executor is claimed once it has been idle this long
LIVE_MIN_IDLE_MS = 5000  # a live executor's entries idle less than this are never past their deadline (>= 7 s)
SCAN = 500  # pending entries the watchdog looks at per tick
RECENT = 100_000  # ids a client remembers it answered or withdrew (to drop duplicates quietly)
STOP_GRACE_S = 30.0  # a stopping executor that cannot reach Redis gives up its answers after this long
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
_POOL = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def import_redis() -> Any:
    """The ``redis`` module, or an ``ImportError`` with the install line."""
    try:
        import redis
    except ImportError as exc:
        raise ImportError(f"RedisExecutor needs the redis package, which is not installed ({exc}): {INSTALL}") from None
    return redis


def connect(url: str, *, retries: int = 0, backoff_base_s: float = 0.05, backoff_cap_s: float = 1.0,
            socket_timeout_s: float = SOCKET_TIMEOUT_S, connect_timeout_s: float = 5.0, health_check_interval: int = 0,
            decode_responses: bool = False) -> Any:  # fmt: skip
    """A ``redis.Redis`` for ``url``, the one way this project makes one. By default (bytes in,
    bytes out) it does not retry by itself: the executor and its clients back off and reconnect
    their own way, and a command is never sent twice unseen. ``retries`` > 0: a command that
    cannot reach the server is tried again that many times, backing off exponentially from
    ``backoff_base_s`` to ``backoff_cap_s`` (callers whose commands may run twice: the sample
    states' scripts refuse a repeated move, the topology's writes are idempotent).
    ``decode_responses``: str replies (undecodable bytes replaced)."""
    redis = import_redis()
    from redis.backoff import ExponentialBackoff, NoBackoff
    from redis.retry import Retry

    if not isinstance(url, str) or not url.startswith(SCHEMES):
        raise ValueError(f"url: expected a Redis URL ({', '.join(s + '...' for s in SCHEMES)}), got {url!r}")
    options: dict[str, Any] = {"socket_timeout": socket_timeout_s, "socket_connect_timeout": connect_timeout_s,
                               "health_check_interval": health_check_interval}  # fmt: skip
    if retries > 0:
        options["retry"] = Retry(ExponentialBackoff(cap=backoff_cap_s, base=backoff_base_s), retries)
        options["retry_on_error"] = [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]
    else:
        options["retry"] = Retry(NoBackoff(), 0)
    if decode_responses:
        options |= {"decode_responses": True, "encoding_errors": "replace"}
    try:
        return redis.Redis.from_url(url, **options)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"url {redact(url)!r}: {exc}") from None


def redact(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def check_pool(pool: object) -> str:
    if not isinstance(pool, str) or not _POOL.fullmatch(pool):
        raise ValueError(f"pool: expected 1 to 64 letters, digits, '_', '.' or '-', got {pool!r}")
    return pool


def _connection_errors() -> tuple[type[BaseException], ...]:
    redis = import_redis()
    return (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError, OSError)


@dataclass(frozen=True)
class PoolKeys:
    """The Redis keys of pool ``pool`` (see the module docstring)."""

    pool: str

    @property
    def prefix(self) -> str:
        return f"code-env:{self.pool}:"

    @property
    def requests(self) -> str:
        return self.prefix + "requests"

    @property
    def stats(self) -> str:
        return self.prefix + "stats"

    @property
    def executors(self) -> str:
        return self.prefix + "executors"

    @property
    def epoch(self) -> str:
        return self.prefix + "epoch"

    def executor(self, name: str) -> str:
        return self.prefix + "executor:" + name

    def results(self, client_id: str) -> str:
        return self.prefix + "results:" + client_id


def run_budget_s(req: RunRequest) -> float:
    """The longest the sandbox may take over ``req`` once a worker has it (its own watchdog's
    bound: a starved run's wall clock moves up to four times its limit, plus grace), its compile
    phase included."""
    from ._compile import compile_limits
    from ._process import watchdog_s
    from .languages import LANGUAGES

    lim = req.limits or Limits()
    budget = watchdog_s(lim)
    lang = LANGUAGES.get(req.language)
    if lang is not None and lang.compiled:
        budget += watchdog_s(compile_limits(lim))
    return budget


def _epoch(r: Any, keys: PoolKeys) -> bytes:
    """The pool's epoch, made if there is none (the first comer's, or Redis lost its data)."""
    pipe = r.pipeline(transaction=True)
    pipe.set(keys.epoch, uuid.uuid4().hex, nx=True)
    pipe.get(keys.epoch)
    return bytes(pipe.execute()[1])


def _ensure_group(r: Any, keys: PoolKeys) -> None:
    """The consumer group on the request stream (and the stream: ``MKSTREAM``), if not there."""
    redis = import_redis()
    try:
        r.xgroup_create(keys.requests, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _validation(exc: ValidationError) -> str:
    """A ``ValidationError`` in one line: its first error (``where: what``) and how many more."""
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc)
    err = errors[0]
    where = ".".join(str(p) for p in err["loc"])
    text = f"{where}: {err['msg'].removeprefix('Value error, ')}" if where else err["msg"]
    return text + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")


# ------------------------------------------------------------------------------ the entries


class RequestEntry(BaseModel):
    """A request entry of the stream (see the module docstring), as the executors read it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_NAME.pattern)
    trace_id: str = ""
    req: RunRequest
    reply: str
    sent: float = 0.0
    deadline_s: float = Field(60.0, gt=0, le=10 * 86400)
    retries: int = Field(2, ge=0, le=100)
    attempt: int = Field(0, ge=0)


class BadEntry(ValueError):
    """An entry of the request stream that is not a request: why, and where its answer would go
    (``reply`` and ``id``, when it names them well enough to be answered)."""

    def __init__(self, why: str, reply: str | None = None, rid: str | None = None, trace_id: str | None = None) -> None:
        super().__init__(why)
        self.why, self.reply, self.rid, self.trace_id = why, reply, rid, trace_id


def parse_request(fields: Mapping[bytes, bytes], keys: PoolKeys, max_payload_bytes: int) -> RequestEntry:
    """The request an entry holds, or ``BadEntry`` saying why it is none: too large, fields not
    UTF-8, missing or foreign fields, a reply stream that is not a result stream of this pool (an
    executor writes nowhere else), a ``req`` that is not a valid ``RunRequest``. The ``BadEntry``
    names the reply stream and id when the entry has usable ones: it is answered there."""
    text = {k.decode("utf-8", "replace"): v.decode("utf-8") for k, v in fields.items() if _utf8(k) and _utf8(v)}
    reply = text.get("reply")
    prefix = keys.results("")
    usable = reply is not None and reply.startswith(prefix) and _NAME.fullmatch(reply[len(prefix):]) is not None
    rid = text.get("id")
    rid = rid if rid is not None and _NAME.fullmatch(rid) else None

    def bad(why: str) -> BadEntry:
        return BadEntry(why, reply if usable else None, rid, text.get("trace_id") or None)

    size = sum(len(k) + len(v) for k, v in fields.items())
    if size > max_payload_bytes:
        raise bad(f"it is {size} bytes, over this executor's max_payload_bytes={max_payload_bytes}")
    undecodable = [k for k, v in fields.items() if not (_utf8(k) and _utf8(v))]
    if undecodable:
        raise bad(f"field {undecodable[0].decode('utf-8', 'replace')[:40]!r} is not UTF-8")
    foreign = sorted(set(text) - set(REQUEST_FIELDS))
    missing = [f for f in ("id", "req", "reply") if f not in text]
    if foreign or missing:
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"foreign {', '.join(repr(f[:40]) for f in foreign[:5])}"] if foreign else []
        raise bad(f"not a request of code-env's protocol (fields: {'; '.join(parts)}; a request has "
                  f"{', '.join(REQUEST_FIELDS)})")  # fmt: skip
    if not usable:
        raise bad(f"its reply stream {(reply or '')[:100]!r} is not a result stream of pool {keys.pool!r} ({prefix}<client>)")
    if rid is None:
        raise bad(f"its id {text['id'][:100]!r} is not 1 to 128 letters, digits or _.:@-")
    try:  # (req in JSON mode: its files are base64 there)
        req = RunRequest.model_validate_json(text["req"])
    except ValidationError as exc:
        raise bad(f"not a valid RunRequest: {_validation(exc)}") from None
    try:
        return RequestEntry.model_validate({**text, "req": req})
    except ValidationError as exc:
        raise bad(f"not a valid request: {_validation(exc)}") from None


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# The answer of an entry, atomically: acknowledge it; publish the answer if this acknowledged it
# (the first to finish) or Redis lost its data since the entry was read; delete the entry.
# KEYS: requests, reply, stats, epoch. ARGV: group, entry id, epoch at read, maxlen, ttl,
# counter, then the result's id, res, by, attempt.
ANSWER = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
local lost = redis.call('GET', KEYS[4]) ~= ARGV[3]
redis.call('XDEL', KEYS[1], ARGV[2])
if acked == 1 or lost then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'id', ARGV[7], 'res', ARGV[8], 'by', ARGV[9], 'attempt', ARGV[10])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
  return 1
end
redis.call('HINCRBY', KEYS[3], 'late_dropped', 1)
return 0
"""


# ------------------------------------------------------------------------------ the client


@dataclass(eq=False)
class _Request:
    """One request of a client, from its send until its answer."""

    rid: str
    trace_id: str
    payload: str  # the RunRequest's JSON
    deadline_s: float
    future: concurrent.futures.Future[ExecutionResult] = field(default_factory=concurrent.futures.Future)
    entry_id: bytes | None = None  # its entry on the request stream (of the last send)
    epoch: bytes = b""  # the pool's epoch when it was sent
    sent: float = 0.0  # time.monotonic() of the last send
    attempt: int = 0  # sends after the first
    missing: bool = False  # past its deadline, neither on the stream nor answered, at the last look


@dataclass(eq=False)
class _Batch:
    requests: list[_Request]
    lock: threading.Lock = field(default_factory=threading.Lock)
    withdrawn: bool = False


_shared_lock = threading.Lock()
_shared: dict[tuple[str, str, int], RedisExecutor] = {}


class RedisExecutor:
    """Runs untrusted programs on the executor processes of a Redis pool: the
    ``run``/``run_many``/``arun``/``arun_many``/context-manager API of ``Sandbox``, the same
    ``ExecutionResult`` per request, in the caller's order, whichever executor ran it.

    >>> from sandbox import RedisExecutor
    >>> with RedisExecutor("redis://127.0.0.1:6379/0") as ex:   # doctest: +SKIP
    ...     res = ex.run_many(["print(1 + 1)", "print(input())"])

    Start executors beside it, on this machine or any that reaches Redis:
    ``code-env executor --redis URL [--pool NAME] [--backend B] [--workers N]``. The protocol,
    its watchdog and what happens when a process or Redis dies: the module docstring.

    ``url``: the Redis server. ``pool``: the executors' pool (its keys begin ``code-env:POOL:``).
    ``limits``: the default ``Limits`` of requests that have none. ``timeout_margin_s``: added to
    each request's longest run (``run_budget_s``) to make its deadline: past it, an executor that
    still holds it is taken for hung (its request goes to another), and a request whose answer
    was lost is sent again. ``max_retries``: how often a request is run again after its executor
    died, stalled or hung, or sent again after Redis lost it; then it is answered
    ``sandbox_error``. ``max_payload_bytes``: the largest request (its JSON) sent; a larger one
    is refused before anything is sent (``ValueError``); executors refuse larger entries of
    their own limit. ``unavailable_timeout_s``: how long requests wait while the pool cannot run
    them (no executor alive in it, or Redis unreachable) before they are answered
    ``sandbox_error``. ``result_retention_s``: how long an answer stays on this client's result
    stream once read (for inspection), counted from the newest answer.

    **Cancellation**, as ``Sandbox``'s: when the caller goes away (an exception raised in its
    thread, a ``cancelling()`` block's cancel, the asyncio cancellation of ``arun_many``), its
    requests are withdrawn: acknowledged and deleted on the stream, so that no executor takes
    those not yet taken, and the answers of those running are dropped (the executor's run goes on
    to its end: a remote run is not killed). The caller gets its own exception; in a
    ``cancelling()`` block, the unanswered requests answer ``sandbox_error`` ``CANCELLED``.

    Thread-safe; results resolve futures from this client's reader thread. No result cache (a
    ``Sandbox``'s or ``RayExecutor``'s ``cache``): a run on an executor may use its own.
    """

    backend_name = "redis"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        pool: str = "default",
        *,
        limits: Limits | None = None,
        timeout_margin_s: float = 10.0,
        max_retries: int = 2,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        unavailable_timeout_s: float = 60.0,
        result_retention_s: float = 60.0,
    ) -> None:
        self.pool = check_pool(pool)
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits: expected sandbox.Limits, got {type(limits).__name__}")
        for name, seconds in (("timeout_margin_s", timeout_margin_s), ("unavailable_timeout_s", unavailable_timeout_s),
                              ("result_retention_s", result_retention_s)):  # fmt: skip
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 86400:
                raise ValueError(f"{name}: expected seconds in (0, 86400], got {seconds!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 100:
            raise ValueError(f"max_retries: expected an int in [0, 100], got {max_retries!r}")
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or not 1024 <= max_payload_bytes <= 512 * MiB:
            raise ValueError(f"max_payload_bytes: expected an int in [1024, {512 * MiB}] (Redis's own limit), got {max_payload_bytes!r}")
        self.url = url
        self.keys = PoolKeys(self.pool)
        self.default_limits = limits or Limits()
        self.timeout_margin_s = float(timeout_margin_s)
        self.max_retries = max_retries
        self.max_payload_bytes = max_payload_bytes
        self.unavailable_timeout_s = float(unavailable_timeout_s)
        self.result_retention_s = float(result_retention_s)
        self.client_id = uuid.uuid4().hex[:16]
        self.reply = self.keys.results(self.client_id)
        self._redis = connect(url)
        self._errors = _connection_errors()
        try:
            self._epoch = _epoch(self._redis, self.keys)
        except self._errors as exc:
            self._redis.close()
            raise BackendUnavailableError("redis", f"cannot reach Redis at {redact(url)}: {_text(exc)}") from None
        self._lock = threading.Lock()
        self._pending: dict[str, _Request] = {}
        self._recent: collections.OrderedDict[str, str] = collections.OrderedDict()  # id -> answered | withdrawn
        self._counter = itertools.count()
        self._closed = False
        self._stop = threading.Event()
        self._stats: dict[str, int] = dict.fromkeys(
            ("requests", "answered", "duplicates", "unknown", "malformed", "resent", "unavailable", "withdrawn"), 0)
        self._sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="redis-send")
        self._threads = [threading.Thread(target=self._read_loop, name="redis-results", daemon=True),
                         threading.Thread(target=self._watch_loop, name="redis-watchdog", daemon=True)]  # fmt: skip
        for t in self._threads:
            t.start()

    @classmethod
    def shared(cls, url: str, pool: str = "default") -> RedisExecutor:
        """The process-wide client of (``url``, ``pool``), made on first use and closed at exit
        (what ``executor="redis://..."`` gives wherever an executor is accepted)."""
        key = (url, pool, os.getpid())
        with _shared_lock:
            ex = _shared.get(key)
            if ex is None or ex._closed:
                ex = _shared[key] = cls(url, pool)
                atexit.register(ex.close)
            return ex

    # -- info
    @property
    def executors(self) -> list[dict[str, Any]]:
        """The live executors of the pool (by heartbeat): name, host, pid, workers, batch, backend."""
        self._check_open()
        try:
            return live_executors(self._redis, self.keys)
        except self._errors as exc:
            raise BackendUnavailableError("redis", f"cannot reach Redis at {redact(self.url)}: {_text(exc)}") from None

    @property
    def workers(self) -> int:
        """Concurrent runs over every live executor of the pool (0: none is alive)."""
        return sum(int(e.get("workers", 0)) for e in self.executors)

    @property
    def stats(self) -> dict[str, int]:
        """This client's counters: ``requests``, ``answered``, ``duplicates`` (answers of a
        request already answered, dropped), ``unknown`` (answers of ids never sent here, skipped),
        ``malformed`` (result entries that could not be read), ``resent``, ``unavailable``
        (answered ``sandbox_error`` for want of an executor or of Redis), ``withdrawn``."""
        with self._lock:
            return dict(self._stats)

    def pool_stats(self) -> dict[str, int]:
        """The pool's counters in Redis (module docstring: ``stats``)."""
        self._check_open()
        try:
            return {k.decode(): int(v) for k, v in self._redis.hgetall(self.keys.stats).items()}
        except self._errors as exc:
            raise BackendUnavailableError("redis", f"cannot reach Redis at {redact(self.url)}: {_text(exc)}") from None

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("this RedisExecutor is closed; create a new one")

    # -- running
    def run(self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
            language: str = "python", files: Mapping[str, bytes | str] | None = None,
            fetch_files: Sequence[str] = ()) -> ExecutionResult:  # fmt: skip
        """Run one program on an executor of the pool; blocks until it is answered. Safe to call
        from any thread. ``language``, ``files``, ``fetch_files``: as ``Sandbox.run`` (the
        executors' sandboxes check the language: one that cannot run it answers ``sandbox_error``)."""
        return self.run_many([checked_request(code, stdin, resolve_limits(limits, self.default_limits), trace_id, language, files, fetch_files)])[0]

    def run_many(
        self,
        requests: Iterable[RunRequest | Mapping[str, Any] | str],
        *,
        limits: Limits | None = None,
        progress: bool = False,
    ) -> list[ExecutionResult]:
        """Run many programs on the pool; results come back in request order, one per request.
        Requests as for ``Sandbox.run_many``, all validated (and their sizes checked against
        ``max_payload_bytes``) before any is sent. This thread sends them, then only waits:
        whatever interrupts it (an exception raised in it, its ``cancelling()`` block's cancel)
        withdraws the batch."""
        batch = self._prepare(requests, limits)
        if not batch.requests:
            return []
        cancel = Cancel()
        cancel.on_cancel(lambda: self._withdraw(batch, CANCELLED))
        outer = current_cancel()
        link = 0 if outer is None else outer.on_cancel(cancel.cancel)
        futures = [r.future for r in batch.requests]
        try:
            self._send(batch)
            if progress:
                from tqdm import tqdm

                for _ in tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc="redis", unit="run"):
                    pass
            return [f.result() for f in futures]
        except BaseException:
            self._withdraw(batch, None)
            raise
        finally:
            if outer is not None:
                outer.forget(link)

    async def arun(self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
                   language: str = "python", files: Mapping[str, bytes | str] | None = None,
                   fetch_files: Sequence[str] = ()) -> ExecutionResult:  # fmt: skip
        """``run`` for an event loop (``arun_many``)."""
        return (await self.arun_many([checked_request(code, stdin, resolve_limits(limits, self.default_limits), trace_id, language, files, fetch_files)]))[0]

    async def arun_many(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], *,
                        limits: Limits | None = None) -> list[ExecutionResult]:  # fmt: skip
        """``run_many`` for an event loop: the requests are validated in the caller, sent by this
        client's sender thread (the loop never waits on Redis), and awaited. Cancelling the
        awaiting task withdraws the batch."""
        batch = self._prepare(requests, limits)
        if not batch.requests:
            return []
        try:
            await asyncio.wrap_future(self._sender.submit(self._send, batch))
            return list(await asyncio.gather(*(asyncio.wrap_future(r.future) for r in batch.requests)))
        except BaseException:
            self._withdraw(batch, None)
            raise

    def _prepare(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], limits: Limits | None) -> _Batch:
        """The requests validated, with their limits, trace ids, payloads and deadlines."""
        default = resolve_limits(limits, self.default_limits)
        items = coerce_requests(requests, default)
        self._check_open()
        out = []
        for i, r in enumerate(items):
            req = r.model_copy(update={"limits": r.limits or default,
                                       "trace_id": r.trace_id if r.trace_id is not None else f"run/{next(self._counter)}"})  # fmt: skip
            payload = req.model_dump_json()
            size = len(payload.encode("utf-8"))
            if size > self.max_payload_bytes:
                raise ValueError(f"request {i}: its payload is {size} bytes of JSON, over max_payload_bytes="
                                 f"{self.max_payload_bytes}; send less (code, stdin, files) or raise the limit")  # fmt: skip
            assert req.trace_id is not None
            out.append(_Request(uuid.uuid4().hex, req.trace_id, payload, run_budget_s(req) + self.timeout_margin_s))
        return _Batch(out)

    def _fields(self, r: _Request) -> dict[str, str]:
        return {"id": r.rid, "trace_id": r.trace_id, "req": r.payload, "reply": self.reply, "sent": f"{time.time():.6f}",
                "deadline_s": f"{r.deadline_s:g}", "retries": str(self.max_retries), "attempt": str(r.attempt)}  # fmt: skip

    def _send(self, batch: _Batch) -> None:
        """Put the batch's requests on the request stream (one transaction, with the epoch),
        registered first so that no answer can come for an id not yet known. Redis unreachable:
        tried again, backing off, for ``unavailable_timeout_s``; then they answer ``sandbox_error``."""
        with batch.lock:
            if batch.withdrawn:
                return
            with self._lock:
                self._check_open()
                for r in batch.requests:
                    self._pending[r.rid] = r
                self._stats["requests"] += len(batch.requests)
        self._put(batch.requests)
        if batch.withdrawn:  # withdrawn while it was being sent: what was just put goes too
            self._withdraw(batch, None)

    def _put(self, requests: list[_Request]) -> None:
        give_up = time.monotonic() + self.unavailable_timeout_s
        delay = 0.05
        while True:
            todo = [r for r in requests if not r.future.done()]
            if not todo or self._closed:
                return
            try:
                pipe = self._redis.pipeline(transaction=True)
                pipe.set(self.keys.epoch, uuid.uuid4().hex, nx=True)
                pipe.get(self.keys.epoch)
                for r in todo:
                    pipe.xadd(self.keys.requests, self._fields(r))
                out = pipe.execute()
            except self._errors as exc:
                if time.monotonic() > give_up:
                    self._give_up(todo, f"redis: cannot send to Redis at {redact(self.url)} for "
                                        f"{self.unavailable_timeout_s:g} s: {_text(exc)}", "unavailable")  # fmt: skip
                    return
                log.warning("cannot send %d requests to Redis at %s (%s): trying again", len(todo), redact(self.url), _text(exc))
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
                continue
            now = time.monotonic()
            epoch = bytes(out[1])
            for r, eid in zip(todo, out[2:], strict=True):
                r.entry_id, r.epoch, r.sent, r.missing = bytes(eid), epoch, now, False
            return

    def _withdraw(self, batch: _Batch, answer: str | None) -> None:
        """The batch's caller went away: its unanswered requests are forgotten (their answers,
        should any come, are dropped), their entries acknowledged and deleted (no executor takes
        them any more); with ``answer``, each is answered ``sandbox_error`` ``answer``."""
        with batch.lock:
            batch.withdrawn = True
        with self._lock:
            gone = [r for r in batch.requests if self._pending.pop(r.rid, None) is not None]
            for r in gone:
                self._remember(r.rid, "withdrawn")
            self._stats["withdrawn"] += len(gone)
        self._forget_entries([r.entry_id for r in gone if r.entry_id is not None])  # (before the caller goes on)
        for r in batch.requests:  # (sent or not: one withdrawn before its send is never sent)
            if r.future.done():
                continue
            if answer is not None:
                _resolve(r.future, ExecutionResult.infrastructure_failure(answer, trace_id=r.trace_id, backend=self.backend_name))
            else:
                r.future.cancel()

    def _forget_entries(self, entry_ids: list[bytes]) -> None:
        """Acknowledge and delete entries of the request stream (best effort: an entry left
        is answered, and its answer dropped)."""
        if not entry_ids or self._closed:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.xack(self.keys.requests, GROUP, *entry_ids)
            pipe.xdel(self.keys.requests, *entry_ids)
            pipe.execute()
        except self._errors as exc:
            log.info("could not delete %d withdrawn entries (%s): their answers will be dropped", len(entry_ids), _text(exc))

    def _remember(self, rid: str, what: str) -> None:
        """(With the lock.) An id answered or withdrawn, for the answers that may still come."""
        self._recent[rid] = what
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    def _give_up(self, requests: Iterable[_Request], why: str, counter: str) -> None:
        """Answer these requests ``sandbox_error`` ``why`` (a failure of the pool, never scored)."""
        done = []
        with self._lock:
            for r in requests:
                if self._pending.pop(r.rid, None) is not None:
                    self._remember(r.rid, "answered")
                    done.append(r)
            self._stats[counter] += len(done)
        if not done:
            return
        shown = ", ".join(r.trace_id for r in done[:3]) + (", ..." if len(done) > 3 else "")
        log.log(logging.INFO if counter == "withdrawn" else logging.WARNING, "pool %r: %d requests (%s) answered "
                "sandbox_error: %s", self.pool, len(done), shown, why)  # fmt: skip
        self._count(counter, len(done))
        self._forget_entries([r.entry_id for r in done if r.entry_id is not None])  # (before the caller goes on)
        for r in done:
            _resolve(r.future, ExecutionResult.infrastructure_failure(why, trace_id=r.trace_id, backend=self.backend_name))

    def _count(self, counter: str, n: int) -> None:
        try:
            self._redis.hincrby(self.keys.stats, counter, n)
        except self._errors:
            pass

    # -- the reader
    def _read_loop(self) -> None:
        """Read this client's result stream; each answer resolves its request (module docstring)."""
        last = b"0-0"
        delay, failing = 0.05, False
        trimmed = time.monotonic()
        while not self._stop.is_set():
            try:
                got = self._redis.xread({self.reply: last}, count=1000, block=BLOCK_MS)
                if failing:
                    log.info("results of %s: Redis at %s is back", self.client_id, redact(self.url))
                    failing, delay = False, 0.05
            except self._errors as exc:
                if self._stop.is_set():
                    return
                if not failing:
                    log.warning("results of %s: Redis at %s unreachable (%s): reconnecting", self.client_id,
                                redact(self.url), _text(exc))  # fmt: skip
                failing = True
                self._stop.wait(delay)
                delay = min(2 * delay, 1.0)
                continue
            except Exception as exc:  # a reply we cannot read: never the end of the reader
                log.error("results of %s: XREAD failed (%s): trying again", self.client_id, _text(exc))
                self._stop.wait(1.0)
                continue
            if self._stop.is_set():  # (woken by close)
                return
            for _, entries in got or []:
                for eid, fields in entries:
                    last = eid
                    self._deliver(eid, fields)
            if time.monotonic() - trimmed > 5.0 and last != b"0-0":
                trimmed = time.monotonic()
                newest_ms = int(last.split(b"-")[0])
                try:
                    self._redis.xtrim(self.reply, minid=f"{newest_ms - int(1000 * self.result_retention_s)}-0", approximate=False)
                except self._errors:
                    pass

    def _deliver(self, eid: bytes, fields: Mapping[bytes, bytes]) -> None:
        """One answer from the result stream: resolve its request, or say why not."""
        try:
            rid = fields[b"id"].decode("utf-8")
            res = ExecutionResult.from_wire(json.loads(fields[b"res"]))
            by = fields.get(b"by", b"?").decode("utf-8", "replace")
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            shown = {k.decode("utf-8", "replace")[:40]: v[:80].decode("utf-8", "replace") for k, v in list(fields.items())[:6]}
            log.warning("results of %s: entry %s is not an answer (%s): skipped: %s", self.client_id, eid.decode(),
                        _validation(exc) if isinstance(exc, ValidationError) else _text(exc), shown)  # fmt: skip
            with self._lock:
                self._stats["malformed"] += 1
            return
        with self._lock:
            r = self._pending.pop(rid, None)
            if r is not None:
                self._remember(rid, "answered")
                self._stats["answered"] += 1
                known = "pending"
            else:
                known = self._recent.get(rid, "unknown")
                if known == "answered":
                    self._stats["duplicates"] += 1
                elif known == "unknown":
                    self._stats["unknown"] += 1
        if r is not None:
            _resolve(r.future, res)
        elif known == "unknown":
            log.warning("results of %s: an answer for request id %r (trace %s, by %s), which this client never sent "
                        "or no longer remembers: skipped", self.client_id, rid[:128], res.trace_id, by)  # fmt: skip
        else:
            log.debug("results of %s: a late answer for request %s (%s), by %s: dropped", self.client_id, rid, known, by)

    # -- the watchdog
    def _watch_loop(self) -> None:
        """Every half second: requests lost by Redis or past their deadline without an answer are
        sent again (``max_retries`` times, then answered ``sandbox_error``); with no live executor
        or no Redis for ``unavailable_timeout_s``, every request waiting is answered ``sandbox_error``."""
        no_executor_since: float | None = None
        unreachable_since: float | None = None
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._lock:
                waiting = [r for r in self._pending.values() if r.entry_id is not None]
            try:
                epoch = _epoch(self._redis, self.keys)
                live = bool(live_executors(self._redis, self.keys)) if waiting else True
                unreachable_since = None
            except self._errors as exc:
                unreachable_since = unreachable_since or now
                if now - unreachable_since > self.unavailable_timeout_s:
                    self._give_up(waiting, f"redis: Redis at {redact(self.url)} unreachable for "
                                           f"{now - unreachable_since:.0f} s: {_text(exc)}", "unavailable")  # fmt: skip
                continue
            except Exception:  # never the end of the watchdog
                log.exception("client %s: the watchdog's look at Redis failed", self.client_id)
                continue
            if not waiting:
                no_executor_since = None
                continue
            if epoch != self._epoch:
                log.warning("pool %r: a new epoch (Redis lost its data): requests sent before it are sent again", self.pool)
                self._epoch = epoch
            lost = [r for r in waiting if r.epoch != epoch]
            if not live:
                no_executor_since = no_executor_since or now
                if now - no_executor_since > self.unavailable_timeout_s:
                    self._give_up(waiting, f"redis: no live executor in pool {self.pool!r} for "
                                           f"{now - no_executor_since:.0f} s (none has a heartbeat; start some: "
                                           f"code-env executor --redis URL --pool {self.pool})", "unavailable")  # fmt: skip
                    continue
            else:
                no_executor_since = None
            late = [r for r in waiting if r.epoch == epoch and now - r.sent > r.deadline_s]
            if late:
                try:
                    pipe = self._redis.pipeline(transaction=False)
                    for r in late:
                        pipe.xrange(self.keys.requests, min=r.entry_id, max=r.entry_id, count=1)
                    there = pipe.execute()
                except self._errors:
                    continue
                for r, entries in zip(late, there, strict=True):
                    if entries or r.future.done():
                        r.missing = False
                    elif r.missing:  # gone at two looks, and still no answer: its answer was lost
                        lost.append(r)
                    else:
                        r.missing = True
            if lost:
                self._resend(lost)

    def _resend(self, requests: list[_Request]) -> None:
        again: list[_Request] = []
        spent: list[_Request] = []
        for r in requests:
            (spent if r.attempt >= self.max_retries else again).append(r)
        if spent:
            self._give_up(spent, f"redis: the request was lost {self.max_retries + 1} times (Redis lost its data, or "
                                 "its answer), max_retries={self.max_retries}", "unavailable")  # fmt: skip
        if again:
            for r in again:
                r.attempt += 1
                r.entry_id = None
            with self._lock:
                self._stats["resent"] += len(again)
            self._count("resent", len(again))
            log.warning("pool %r: %d requests lost by Redis (or their answers) are sent again", self.pool, len(again))
            self._put(again)

    # -- lifecycle
    def close(self) -> None:
        """Stop the reader and the watchdog; requests still waiting are withdrawn and answered
        ``sandbox_error``; this client's result stream is deleted."""
        with self._lock:
            if self._closed:
                return
            waiting = list(self._pending.values())
        self._give_up(waiting, "redis: the RedisExecutor was closed", "withdrawn")
        with self._lock:
            self._closed = True
        self._stop.set()
        self._sender.shutdown(wait=False)
        try:  # wakes the reader from its XREAD
            self._redis.xadd(self.reply, {"closed": "1"})
        except self._errors:
            pass
        for t in self._threads:
            t.join(timeout=BLOCK_MS / 1000 + SOCKET_TIMEOUT_S)
        try:
            self._redis.delete(self.reply)
        except self._errors:
            pass
        self._redis.close()

    def __enter__(self) -> RedisExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"client {self.client_id}"
        return f"RedisExecutor({redact(self.url)!r}, pool={self.pool!r}, {state})"


def _resolve(future: concurrent.futures.Future[ExecutionResult], res: ExecutionResult) -> None:
    try:
        future.set_result(res)
    except concurrent.futures.InvalidStateError:  # cancelled (withdrawn) meanwhile
        pass


def live_executors(r: Any, keys: PoolKeys) -> list[dict[str, Any]]:
    """The executors of a pool whose heartbeat has not run out (their info); the names of those
    whose has are removed from the pool's set."""
    names = sorted(n.decode("utf-8", "replace") for n in r.smembers(keys.executors))
    if not names:
        return []
    beats = r.mget([keys.executor(n) for n in names])
    dead = [n for n, b in zip(names, beats, strict=True) if b is None]
    if dead:
        r.srem(keys.executors, *dead)
    out = []
    for b in beats:
        if b is not None:
            try:
                out.append(json.loads(b))
            except ValueError:
                continue
    return out


# ------------------------------------------------------------------------------ the executor


@dataclass(eq=False)
class _Held:
    """An entry an executor has taken, until its answer is written."""

    entry_id: bytes
    epoch: bytes
    deliveries: int
    entry: RequestEntry | None = None
    bad: BadEntry | None = None
    counter: str = "answered"  # the pool's counter of its answer


class _Executor:
    """One executor process's loop (``serve``): the reader (this thread), the sandbox's runs, a
    writer of answers and the watchdog (threads)."""

    def __init__(self, url: str, pool: str, sandbox: Sandbox, *, name: str | None, batch: int | None, lease_s: float,
                 max_payload_bytes: int, stop: threading.Event,
                 observe: Callable[[str, list[str]], None] | None = None) -> None:  # fmt: skip
        self.observe = observe
        self.keys = PoolKeys(check_pool(pool))
        self.url = url
        self.sandbox = sandbox
        self.workers = sandbox.workers
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"name: expected 1 to 128 letters, digits or _.:@-, got {self.name!r}")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ValueError(f"batch: expected an int >= 1 or None, got {batch!r}")
        if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)) or not 0.5 <= lease_s <= 3600:
            raise ValueError(f"lease_s: expected seconds in [0.5, 3600], got {lease_s!r}")
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1024:
            raise ValueError(f"max_payload_bytes: expected an int >= 1024, got {max_payload_bytes!r}")
        self.batch = batch or 2 * self.workers
        self.rounds = math.ceil(self.batch / self.workers)
        self.lease_s = float(lease_s)
        self.max_payload_bytes = max_payload_bytes
        self.stop = stop
        self._redis = connect(url)
        self._errors = _connection_errors()
        self._answer = self._redis.register_script(ANSWER)
        self._cond = threading.Condition()
        self._held = 0
        self._holding: set[bytes] = set()  # the entries taken and not yet answered, by id
        self._outbox: queue.Queue[tuple[_Held, ExecutionResult | None]] = queue.Queue()
        self._epoch = b""
        self._ready = False
        self._finished = threading.Event()  # every request taken is answered: the heartbeat may stop
        self.info = {"name": self.name, "host": socket.gethostname(), "pid": os.getpid(), "workers": self.workers,
                     "batch": self.batch, "rounds": self.rounds, "backend": sandbox.backend_name, "lease_s": self.lease_s,
                     "started": time.time()}  # fmt: skip

    # -- the reader
    def run(self, announce: Callable[[str], None] | None = None) -> None:
        threads = [threading.Thread(target=self._write_loop, name="executor-answers", daemon=True),
                   threading.Thread(target=self._watch_loop, name="executor-watchdog", daemon=True)]  # fmt: skip
        redis = import_redis()
        delay, failing, started = 0.05, False, False
        try:
            while not self.stop.is_set():
                with self._cond:
                    while self._held >= self.batch and not self.stop.is_set():
                        self._cond.wait(0.5)
                    room = self.batch - self._held
                if self.stop.is_set():
                    break
                try:
                    if not self._ready:
                        self._join()
                        if not started:
                            started = True
                            for t in threads:
                                t.start()
                            if announce is not None:
                                announce(f"executor {self.name}: pool {self.keys.pool!r} at {redact(self.url)}, "
                                         f"{self.sandbox.backend_name} backend, {self.workers} workers, batch {self.batch}")  # fmt: skip
                    got = self._redis.xreadgroup(GROUP, self.name, {self.keys.requests: ">"}, count=room, block=BLOCK_MS)
                    if failing:
                        log.info("executor %s: Redis at %s is back", self.name, redact(self.url))
                        failing, delay = False, 0.05
                except redis.ResponseError as exc:
                    self._ready = False
                    if "NOGROUP" in str(exc):
                        log.warning("executor %s: the consumer group is gone (Redis lost its data?): made again", self.name)
                        continue
                    if not failing:  # (a key of the pool holding something else: logged, and tried again)
                        log.error("executor %s: Redis refused to read %s (%s): trying again", self.name,
                                  self.keys.requests, _text(exc))  # fmt: skip
                    failing = True
                    self.stop.wait(delay)
                    delay = min(2 * delay, 2.0)
                    continue
                except self._errors as exc:
                    if not failing:
                        log.warning("executor %s: Redis at %s unreachable (%s): reconnecting", self.name,
                                    redact(self.url), _text(exc))  # fmt: skip
                    failing, self._ready = True, False
                    self.stop.wait(delay)
                    delay = min(2 * delay, 2.0)
                    continue
                entries = [(eid, fields) for _, batch in got or [] for eid, fields in batch]
                if entries:
                    self.take(entries, 1, self._epoch)
            self._drain()
        finally:
            self.stop.set()
            self._finished.set()
            for t in threads:
                if t.is_alive():
                    t.join(timeout=STOP_GRACE_S)
            self._leave()
            self._redis.close()

    def _join(self) -> None:
        """(Re)connected: the group, the epoch, the heartbeat, before any read."""
        _ensure_group(self._redis, self.keys)
        self._epoch = _epoch(self._redis, self.keys)
        self._beat(self._redis)
        self._ready = True

    def _beat(self, r: Any) -> None:
        pipe = r.pipeline(transaction=False)
        pipe.set(self.keys.executor(self.name), json.dumps({**self.info, "held": self._held}), px=int(1000 * self.lease_s))
        pipe.sadd(self.keys.executors, self.name)
        pipe.execute()

    def _leave(self) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(self.keys.executor(self.name))
            pipe.srem(self.keys.executors, self.name)
            pipe.execute()
        except self._errors:
            pass

    def _drain(self) -> None:
        """Stopping: wait until every entry taken is answered (their runs end within their limits;
        answers that cannot reach Redis are given up after ``STOP_GRACE_S``)."""
        with self._cond:
            if self._held:
                log.info("executor %s: stopping once its %d requests are answered", self.name, self._held)
            while self._held:
                self._cond.wait(0.5)

    def take(self, entries: list[tuple[bytes, Mapping[bytes, bytes]]], deliveries: int | Mapping[bytes, int],
             epoch: bytes) -> None:  # fmt: skip
        """Entries taken from the stream (read, or claimed by the watchdog): the bad ones are
        answered at once, the others handed to the sandbox; each is answered when its run ends."""
        with self._cond:
            self._held += len(entries)
            self._holding.update(eid for eid, _ in entries)
        good: list[_Held] = []
        for eid, fields in entries:
            n = deliveries if isinstance(deliveries, int) else deliveries.get(eid, 1)
            held = _Held(eid, epoch, n)
            try:
                held.entry = parse_request(fields, self.keys, self.max_payload_bytes)
            except BadEntry as exc:
                held.bad = exc
                log.warning("executor %s: entry %s of %s is bad input: %s; %s", self.name, eid.decode(), self.keys.requests,
                            exc.why, "answered sandbox_error, acknowledged and deleted" if exc.reply and exc.rid
                            else "acknowledged and deleted (it names no reply stream and id to answer)")  # fmt: skip
                self._outbox.put((held, None))
                continue
            try:
                self.sandbox.check_language(held.entry.req.language)
            except (SandboxError, ValueError) as exc:
                self._outbox.put((held, self._failure(held, f"executor {self.name}: {exc}")))
                continue
            good.append(held)
        if not good:
            return
        self._observe("running", good)
        try:
            futures = self.sandbox._submit_many([h.entry.req for h in good if h.entry is not None], None)
        except Exception as exc:  # (the requests were checked: a fault of the sandbox's)
            log.exception("executor %s: its sandbox refused a batch", self.name)
            for h in good:
                self._outbox.put((h, self._failure(h, f"executor {self.name}: {_text(exc)}")))
            return
        for h, f in zip(good, futures, strict=True):
            f.add_done_callback(lambda f, h=h: self._outbox.put((h, self._outcome(h, f))))  # type: ignore[misc]

    def _observe(self, event: str, held: list[_Held]) -> None:
        if self.observe is None or not held:
            return
        try:
            self.observe(event, [h.entry.req.trace_id for h in held if h.entry is not None and h.entry.req.trace_id])
        except Exception:  # (an observer's fault never stops the executor)
            log.exception("executor %s: its observer failed on %s", self.name, event)

    def _outcome(self, h: _Held, f: concurrent.futures.Future[ExecutionResult]) -> ExecutionResult:
        if f.cancelled():
            return self._failure(h, CANCELLED)
        exc = f.exception()
        if exc is not None:
            return self._failure(h, f"executor {self.name}: {_text(exc)}")
        return f.result()

    def _failure(self, h: _Held, why: str) -> ExecutionResult:
        tid = h.entry.req.trace_id if h.entry is not None else h.bad.trace_id if h.bad is not None else None
        return ExecutionResult.infrastructure_failure(why, trace_id=tid, backend=self.sandbox.backend_name)

    # -- the writer
    def _write_loop(self) -> None:
        """Write the answers as runs end, many per round trip (``ANSWER``, one per entry). Redis
        unreachable: tried again, backing off (given up after ``STOP_GRACE_S`` once stopping)."""
        while True:
            try:
                items = [self._outbox.get(timeout=0.2)]
            except queue.Empty:
                if self.stop.is_set() and self._held == 0:
                    return
                continue
            while len(items) < 256:
                try:
                    items.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(items)
            except Exception:  # a fault of ours: never the end of the writer (the entries stay pending)
                log.exception("executor %s: %d answers could not be written", self.name, len(items))
            with self._cond:
                self._held -= len(items)
                self._holding.difference_update(h.entry_id for h, _ in items)
                self._cond.notify_all()

    def _write(self, items: list[tuple[_Held, ExecutionResult | None]]) -> None:
        # before the answers exist: whoever reads an answer finds its run already observed
        self._observe("answered", [h for h, res in items if h.bad is None and res is not None])
        delay, failing_since = 0.05, None
        while True:
            try:
                pipe = self._redis.pipeline(transaction=False)
                spans = [self._queue_answer(pipe, h, res) for h, res in items]
                out = iter(pipe.execute(raise_on_error=False))
                for (h, _), n in zip(items, spans, strict=True):
                    failed = [o for o in itertools.islice(out, n) if isinstance(o, Exception)]
                    if failed:
                        log.error("executor %s: the answer of entry %s failed: %s", self.name, h.entry_id.decode(), _text(failed[0]))
                return
            except self._errors as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if self.stop.is_set() and now - failing_since > STOP_GRACE_S:
                    log.error("executor %s: stopping without writing %d answers: Redis at %s unreachable (%s); their "
                              "entries stay pending, for another executor's watchdog", self.name, len(items),
                              redact(self.url), _text(exc))  # fmt: skip
                    return
                log.warning("executor %s: cannot write %d answers (%s): trying again", self.name, len(items), _text(exc))
                time.sleep(delay)
                delay = min(2 * delay, 2.0)

    def _queue_answer(self, pipe: Any, h: _Held, res: ExecutionResult | None) -> int:
        """One entry's answer on the pipeline: the result, a bad entry's ``sandbox_error``, or, for
        an entry that names no one to answer, its acknowledgement and deletion alone. Returns how
        many commands it queued."""
        counter = "answered"
        if h.bad is not None:
            counter = "bad_entries"
            if not (h.bad.reply and h.bad.rid):
                pipe.xack(self.keys.requests, GROUP, h.entry_id)
                pipe.xdel(self.keys.requests, h.entry_id)
                pipe.hincrby(self.keys.stats, counter, 1)
                return 3
            reply, rid, attempt = h.bad.reply, h.bad.rid, h.deliveries
            res = self._failure(h, f"executor {self.name}: bad request entry: {h.bad.why}")
        else:
            assert h.entry is not None and res is not None
            reply, rid, attempt, counter = h.entry.reply, h.entry.id, h.entry.attempt + h.deliveries, h.counter
        self._answer(keys=[self.keys.requests, reply, self.keys.stats, self.keys.epoch],
                     args=[GROUP, h.entry_id, h.epoch, RESULT_MAXLEN, RESULT_TTL_S, counter, rid, res.model_dump_json(),
                           self.name, attempt], client=pipe)  # fmt: skip
        return 1

    # -- the watchdog
    def _watch_loop(self) -> None:
        """The heartbeat, several times per lease, and a look at the pending entries each tick."""
        tick = min(1.0, self.lease_s / 4)
        r = connect(self.url)
        failing, cleaned = False, time.monotonic()
        try:
            while not self._finished.wait(tick):
                try:
                    self._beat(r)
                    if not self.stop.is_set():
                        self._reclaim(r)
                    if time.monotonic() - cleaned > 30:
                        cleaned = time.monotonic()
                        self._forget_consumers(r)
                    failing = False
                except self._errors as exc:
                    if not failing:
                        log.warning("executor %s: watchdog: Redis unreachable (%s)", self.name, _text(exc))
                    failing = True
                except Exception:  # never the end of the watchdog
                    log.exception("executor %s: the watchdog's round failed", self.name)
        finally:
            r.close()

    def _reclaim(self, r: Any) -> None:
        """Claim the entries of executors that died or stalled (no heartbeat), those of this
        executor's name that this process does not hold (an earlier life under the same name), and
        those of live executors past the entry's deadline (times the holder's rounds); run them
        here, or answer ``sandbox_error`` once their deliveries exceed ``1 + retries`` (module
        docstring). Each holder's pending entries are looked at separately (``XPENDING`` by
        consumer), so that a long backlog of live ones never hides a dead one's."""
        redis = import_redis()
        try:
            summary = r.xpending(self.keys.requests, GROUP)
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc).lower():
                return
            raise
        owners = sorted(c["name"] for c in summary.get("consumers") or [])
        if not owners:
            return
        beats = dict(zip(owners, r.mget([self.keys.executor(o.decode("utf-8", "replace")) for o in owners]), strict=True))
        me = self.name.encode()

        def lapsed(owner: bytes) -> bool:  # its entries are nobody's: dead, stalled, or an earlier life of ours
            return beats[owner] is None or owner == me

        pipe = r.pipeline(transaction=False)
        for o in owners:
            pipe.xpending_range(self.keys.requests, GROUP, min="-", max="+", count=SCAN, consumername=o,
                                idle=MIN_IDLE_MS if lapsed(o) else LIVE_MIN_IDLE_MS)  # fmt: skip
        with self._cond:
            holding = set(self._holding)
            room = self.batch - self._held
        pending = [p for got in pipe.execute() for p in got if p["message_id"] not in holding]
        if not pending:
            return
        pipe = r.pipeline(transaction=False)
        for p in pending:
            pipe.xrange(self.keys.requests, min=p["message_id"], max=p["message_id"], count=1)
        found = pipe.execute()
        claims: list[tuple[dict[str, Any], int, bool]] = []  # (pending entry, min idle ms, to run here)
        gone: list[bytes] = []
        for p, entries in zip(pending, found, strict=True):
            if not entries:  # deleted (withdrawn by its client) while pending
                gone.append(p["message_id"])
                continue
            fields = entries[0][1]
            if lapsed(p["consumer"]):
                min_idle = MIN_IDLE_MS
            else:
                try:
                    rounds = max(1, int(json.loads(beats[p["consumer"]]).get("rounds", 1)))
                    deadline_s = float(fields.get(b"deadline_s", b"60"))
                except (ValueError, TypeError, AttributeError):
                    rounds, deadline_s = 1, 60.0
                min_idle = int(1000 * deadline_s * rounds)
                if p["time_since_delivered"] < min_idle:
                    continue
            try:
                retries = int(fields.get(b"retries", b"2"))
            except ValueError:
                retries = 2
            run_here = p["times_delivered"] <= retries
            if run_here:
                if room <= 0:
                    continue
                room -= 1
            claims.append((p, min_idle, run_here))
        if gone:
            r.xack(self.keys.requests, GROUP, *gone)
        if not claims:
            return
        pipe = r.pipeline(transaction=False)
        for p, min_idle, _ in claims:
            pipe.xclaim(self.keys.requests, GROUP, self.name, min_idle, [p["message_id"]])
        got = pipe.execute()
        taken: list[tuple[bytes, Mapping[bytes, bytes]]] = []
        deliveries: dict[bytes, int] = {}
        for (p, _, run_here), claimed in zip(claims, got, strict=True):
            if not claimed:
                continue  # another watchdog was first, or the holder answered meanwhile
            eid, fields = claimed[0]
            owner = p["consumer"].decode("utf-8", "replace")
            why = ("an earlier life of this executor's name" if p["consumer"] == me else
                   "no heartbeat: died or stalled" if beats[p["consumer"]] is None else "past its deadline: hung")  # fmt: skip
            n = p["times_delivered"] + 1
            if run_here:
                r.hincrby(self.keys.stats, "reclaimed", 1)
                log.warning("executor %s: reclaimed entry %s (trace %s) from executor %s (%s) after %.1f s; delivery %d",
                            self.name, eid.decode(), fields.get(b"trace_id", b"?").decode("utf-8", "replace"), owner, why,
                            p["time_since_delivered"] / 1000, n)  # fmt: skip
                taken.append((eid, fields))
                deliveries[eid] = n
            else:
                self._exhausted(eid, fields, n, owner, why)
        if taken:
            self.take(taken, deliveries, self._epoch)

    def _forget_consumers(self, r: Any) -> None:
        """Remove from the group the consumers that hold nothing and have no heartbeat (executors
        gone for good: each start of an executor is a new consumer)."""
        try:
            consumers = r.xinfo_consumers(self.keys.requests, GROUP)
        except import_redis().ResponseError:
            return
        idle = [c["name"] for c in consumers if int(c.get("pending", 0)) == 0 and int(c.get("idle", 0)) > 1000 * self.lease_s
                and c["name"] != self.name.encode()]  # fmt: skip
        if not idle:
            return
        beats = r.mget([self.keys.executor(n.decode("utf-8", "replace")) for n in idle])
        for name, beat in zip(idle, beats, strict=True):
            if beat is None:
                r.xgroup_delconsumer(self.keys.requests, GROUP, name)

    def _exhausted(self, eid: bytes, fields: Mapping[bytes, bytes], n: int, owner: str, why: str) -> None:
        """An entry delivered ``n`` times, more than its retries allow: answered ``sandbox_error``."""
        with self._cond:
            self._held += 1
            self._holding.add(eid)
        held = _Held(eid, self._epoch, n)
        try:
            held.entry = parse_request(fields, self.keys, self.max_payload_bytes)
        except BadEntry as exc:
            held.bad = exc
            self._outbox.put((held, None))
            return
        reason = (f"redis: retries exhausted: the request was delivered {n - 1} times (max {held.entry.retries + 1}) "
                  f"to executors that died, stalled or hung (last: {owner}, {why})")  # fmt: skip
        held.counter = "retries_exhausted"
        log.warning("executor %s: entry %s (trace %s): %s", self.name, eid.decode(), held.entry.trace_id, reason)
        self._outbox.put((held, self._failure(held, reason)))


def serve(url: str, pool: str, sandbox: Sandbox, *, name: str | None = None, batch: int | None = None,
          lease_s: float = DEFAULT_LEASE_S, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
          stop: threading.Event | None = None, announce: Callable[[str], None] | None = None,
          observe: Callable[[str, list[str]], None] | None = None) -> None:  # fmt: skip
    """Be an executor of ``pool`` at ``url`` with ``sandbox`` until ``stop`` is set (the CLI sets
    it on SIGTERM or SIGINT): read requests, run them, answer them, keep the heartbeat and watch
    the pool's other executors (module docstring). Once stopped, the requests taken are finished
    and answered before it returns; nothing new is taken. Redis unreachable (not started yet,
    restarting): it reconnects, backing off, and goes on. ``batch``: the most requests held at
    once (default: twice the sandbox's workers). ``lease_s``: the heartbeat's time to live: an
    executor silent that long is taken for dead, and its requests for another's. ``observe``:
    called with ``("running", trace_ids)`` when requests go to the sandbox and ``("answered",
    trace_ids)`` when their runs have ended, just before their answers are written: an answer is
    readable only once its ``answered`` call has returned (from the executor's threads: it must be
    quick; ``code-env executor --samples-run`` moves the samples' states with it, so a sample is in
    ``executed_with_result`` before anyone can read its result)."""
    if not isinstance(sandbox, Sandbox):
        raise TypeError(f"sandbox: expected sandbox.Sandbox, got {type(sandbox).__name__}")
    _Executor(url, pool, sandbox, name=name, batch=batch, lease_s=lease_s, max_payload_bytes=max_payload_bytes,
              stop=stop or threading.Event(), observe=observe).run(announce)  # fmt: skip
