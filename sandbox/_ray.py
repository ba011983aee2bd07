"""``RayExecutor``: ``Sandbox``'s ``run``/``run_many`` spread over a Ray cluster, with the same
results. Ray does the work: actors pinned to nodes, remote calls, ``ray.wait``, actor restarts and
task retries, ``ray.cancel``. The executor only cuts batches into chunks, puts back the chunks a
lost actor never answered, and cancels those of a caller that went away. Ray is imported when an
executor is made, never by ``import sandbox``."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import difflib
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import _child
from ._programs import registered_programs
from ._sandbox import BACKENDS, Sandbox
from .cache import ResultCache
from .errors import BackendUnavailableError, SandboxClosedError, UnknownBackendError
from .models import (
    CANCELLED,
    Cancel,
    ExecutionResult,
    Limits,
    RunRequest,
    checked_request,
    coerce_requests,
    current_cancel,
    resolve_limits,
)

log = logging.getLogger("sandbox.ray")

INSTALL = "pip install 'code-env[ray]'"
START_TIMEOUT_S = 120.0
STATS = ("requests", "answered", "cache_hits", "chunks", "chunks_done", "chunks_retried", "unplaceable", "actors_started",
         "actors_lost", "peak_in_flight", "actor_decode_ms", "actor_sandbox_ms", "actor_encode_ms")  # fmt: skip
REFRESH_INTERVAL_S = 30.0
CHUNK_PER_WORKER = 4
CONTROL = "control"  # the actors' concurrency group of cancel_chunks: never queued behind running chunks
CANCEL_MEMORY_S = 600.0  # how long an actor remembers the cancel of a chunk it has not (yet) begun
DISPATCH_THREADS = 64  # batches dispatched at once (the callers only wait); more wait in line


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` with the install line."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"RayExecutor needs Ray, which is not installed ({exc}): {INSTALL}") from None
    return ray


class SandboxActor:
    """The Ray actor (``ray.remote`` is applied when an executor starts): one ``Sandbox`` on its
    node, running the chunks it is sent with ``Sandbox.run_many``. Requests arrive and results
    leave as JSON (``model_dump_json``, the wire format), each result stamped with the node.
    ``cancel_chunks`` runs in a concurrency group of its own (``CONTROL``), beside the chunks."""

    def __init__(self, options: dict[str, Any]) -> None:
        import ray

        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.node_ip: str = ray.util.get_node_ip_address()
        self.error: str | None = None
        self._lock = threading.Lock()
        self._running: dict[int, tuple[list[concurrent.futures.Future[ExecutionResult]], Cancel]] = {}
        self._cancelled: dict[int, float] = {}  # chunks cancelled before they began -> when
        try:
            self.sandbox = Sandbox(
                options["backend"], workers=options["workers"], limits=Limits.model_validate(options["limits"]),
                nsjail_path=options["nsjail_path"], allowed_packages=options["allowed_packages"],
                isolation=options["isolation"], programs=options.get("programs"),
            )  # fmt: skip
        except Exception as exc:  # told to the driver by info(): the node cannot run the sandbox
            self.error = f"{type(exc).__name__}: {exc}"

    def info(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        backend = self.sandbox._live()
        return {"node_id": self.node_id, "node_ip": self.node_ip, "workers": backend.size, "backend": backend.name,
                "version": backend.version, "pid": os.getpid()}  # fmt: skip

    def run_chunk(self, requests: list[str], chunk_id: int | None = None) -> tuple[list[str], dict[str, float]]:
        """Run one chunk; returns the results (JSON, in order) and where the actor's time went.
        ``chunk_id``: the driver's name of the chunk, for ``cancel_chunks``."""
        t0 = time.perf_counter()
        reqs = [RunRequest.model_validate_json(r) for r in requests]
        t1 = time.perf_counter()
        cancel = Cancel()
        futures: list[concurrent.futures.Future[ExecutionResult]] = []
        with self._lock:
            if chunk_id is None or self._cancelled.pop(chunk_id, None) is None:
                futures = self.sandbox._submit_many(reqs, None, cancel)
                if chunk_id is not None:
                    self._running[chunk_id] = (futures, cancel)
        try:
            concurrent.futures.wait(futures)
        finally:
            if chunk_id is not None:
                with self._lock:
                    self._running.pop(chunk_id, None)
        if not futures:  # cancelled before it began: nothing of it runs
            results = [ExecutionResult.infrastructure_failure(CANCELLED, trace_id=r.trace_id, backend=self.sandbox.backend_name)
                       for r in reqs]  # fmt: skip
        else:
            results = [f.result() if not f.cancelled() else
                       ExecutionResult.infrastructure_failure(CANCELLED, trace_id=r.trace_id, backend=self.sandbox.backend_name)
                       for f, r in zip(futures, reqs, strict=True)]  # fmt: skip
        t2 = time.perf_counter()
        out = [r.model_copy(update={"node": self.node_id}).model_dump_json() for r in results]
        t3 = time.perf_counter()
        return out, {"decode_ms": 1e3 * (t1 - t0), "sandbox_ms": 1e3 * (t2 - t1), "encode_ms": 1e3 * (t3 - t2)}

    def cancel_chunks(self, chunk_ids: list[int]) -> int:
        """The driver's caller went away: each chunk's runs not begun are withdrawn and those in
        flight killed by the sandbox (their workers free at once; the chunk answers ``CANCELLED``
        for them); a chunk not begun yet answers so when it comes. Returns how many were running.
        (``ray.cancel`` alone cannot: it never interrupts a running task of a threaded actor; the
        Rays since late 2025 only set a flag the task must poll, older ones nothing.)"""
        now = time.monotonic()
        hit = []
        with self._lock:
            for cid in [c for c, t in self._cancelled.items() if now - t > CANCEL_MEMORY_S]:
                del self._cancelled[cid]
            for cid in chunk_ids:
                running = self._running.get(cid)
                if running is None:
                    self._cancelled[cid] = now
                else:
                    hit.append(running)
        for futures, cancel in hit:
            self.sandbox._withdraw(futures, cancel)
        return len(hit)

    def cpu_time_s(self) -> float:
        """CPU time of this actor's process so far (its threads; the runs are other processes)."""
        return time.process_time()

    def close(self) -> None:
        self.sandbox.close()


_remote: list[Any] = []


def _remote_class(ray: Any) -> Any:
    """``ray.remote(SandboxActor)``, made once per process."""
    if not _remote:
        _remote.append(ray.remote(concurrency_groups={CONTROL: 1})(SandboxActor))
    return _remote[0]


@dataclass(eq=False)
class _Actor:
    handle: Any
    node_id: str
    workers: int
    started: float
    ready: Any = None  # the ObjectRef of info() until the actor has answered it
    node_ip: str = ""
    alive: bool = True
    in_flight: int = 0


# One Ray connection per process: the executors that started it share it; the last one closed
# shuts it down. A connection made by someone else (ray.init by the user, verl) is never closed.
_session_lock = threading.Lock()
_session = {"owned": False, "users": 0}


class RayExecutor:
    """Runs untrusted programs on a Ray cluster: the ``run``/``run_many``/context-manager API of
    ``Sandbox``, the same ``ExecutionResult`` per request, in the caller's order, each with
    ``node`` set to the Ray node id (hex) of the node that ran it (``nodes`` maps ids to IPs).

    >>> from sandbox import RayExecutor
    >>> with RayExecutor() as ex:                              # doctest: +SKIP
    ...     res = ex.run_many(["print(1 + 1)", "print(input())"])

    **Where.** ``address``: ``None`` connects to ``$RAY_ADDRESS`` when it is set (as ``ray.init``
    does) and otherwise starts a local Ray instance with this machine's cores
    (``include_dashboard=False``, ``log_to_driver=False``); ``"auto"`` or ``"host:port"``
    connects to a running cluster. A process already connected (``ray.init`` called by you or by
    a trainer such as verl) is used as it is and never shut down by ``close``. ``init_kwargs``
    go to ``ray.init`` (``namespace``, ``runtime_env``, ``_temp_dir``, ...). Every node must have
    this package installed (and nsjail for that backend), at the same version.

    **Actors.** ``actors_per_node`` (default 1) actors on every alive node that has CPUs (a head
    started with ``--num-cpus=0`` gets none), each pinned there
    (``NodeAffinitySchedulingStrategy(soft=False)``) and owning a local ``Sandbox`` with
    ``workers_per_actor`` workers (default: the node's Ray CPUs divided among its actors).
    ``backend``, ``limits``, ``allowed_packages``, ``isolation`` and ``nsjail_path`` are those
    of ``Sandbox``, the same on every node; the actors run the very same sandbox, so every
    invariant holds on every node and the executor opens no channel to a program (requests and
    results pass between the driver and the actors, never through a run). The actors reserve no
    Ray CPUs (their runs are processes of their own, not Ray tasks: a reservation would keep a
    trainer's Ray tasks off those cores, or our actors off a busy node); ``actor_options``
    are added to each actor's ``.options(...)``, e.g. ``{"num_cpus": 4}`` to make Ray account
    for them. Nodes that join are given actors at the next ``run_many`` after
    ``refresh_interval_s`` (30 s), or at once when no actor is left.

    **Batches.** ``run_many`` cuts its requests into chunks and keeps at most
    ``max_in_flight_per_actor`` (2) chunks per actor in flight, counted over every thread of the
    process (back-pressure: the rest wait on the driver, not in Ray's queues). A chunk is
    ``chunk_size`` runs, or by default sized to the receiving actor's cores: at most 4 runs per
    worker (a chunk costs about a millisecond of CPU on the driver and on the actor, which this
    amortises), and no more than an equal share of what is left over every in-flight slot, so a
    small batch still reaches every node and chunks shrink as a batch drains (see ``chunk_for``). An actor runs its
    in-flight chunks side by side (``max_concurrency``), so the next chunk's runs fill the cores a
    slow run leaves idle. Chunks are collected with ``ray.wait`` as each finishes: a slow or stuck
    program delays only its own chunk's answers, and only up to its own limits (``Limits``,
    enforced by the sandbox on the node).

    **Failures.** Ray's options do what Ray can do: each actor has ``max_restarts`` (3) and
    ``max_task_retries`` (3), so an actor process that dies on a live node is restarted there
    and the chunks it held are run again by Ray, transparently. A pinned actor cannot move, so
    when its node dies the calls fail (``ActorDiedError``); the executor then puts the chunks it
    never answered back at the head of the queue for the other actors. A request is sent at most
    ``max_attempts`` (3) times; past that, or when no actor is left anywhere (not even after
    looking for new nodes), it is answered with ``ExecutionResult.infrastructure_failure``
    (``sandbox_error``, never a verdict on the program). A program may thus run more than once
    (runs are idempotent: a fresh sandbox each time), but every request gets exactly one answer.

    **Cancellation**, as ``Sandbox``'s: when the caller goes away (an exception raised in its
    thread, e.g. by a SIGALRM handler; the cancel of a ``sandbox.cancelling()`` block; the
    asyncio cancellation of ``arun``/``arun_many``), the requests still on the driver are never
    sent and every chunk in flight is cancelled: its actor is told at once (a method in a
    concurrency group of its own, so never queued behind running chunks) and its sandbox withdraws
    the chunk's runs not begun and kills those in flight, freeing their workers (the actor lives
    on); a chunk still in an actor's queue never starts (``ray.cancel``). The caller gets its own
    exception; in a ``cancelling()`` block, the batch's unanswered requests answer
    ``sandbox_error`` ``CANCELLED``.

    ``cache``: as ``Sandbox``'s, kept on the driver (a hit never leaves it; it keeps the node of
    the run it repeats). ``stats`` counts requests, chunks, retries and where time went.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        backend: str = "process",
        actors_per_node: int | None = None,
        workers_per_actor: int | None = None,
        limits: Limits | None = None,
        allowed_packages: Iterable[str] | None = None,
        isolation: Literal["full", "weak"] = "full",
        nsjail_path: str | None = None,
        max_in_flight_per_actor: int = 2,
        chunk_size: int | None = None,
        max_attempts: int = 3,
        max_restarts: int = 3,
        max_task_retries: int = 3,
        cache: ResultCache | bool | None = None,
        actor_options: Mapping[str, Any] | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        if backend not in BACKENDS:
            close = difflib.get_close_matches(str(backend), BACKENDS, n=1)
            raise UnknownBackendError(str(backend), list(BACKENDS), close[0] if close else None)
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address: expected a Ray address (str) or None, got {type(address).__name__}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits: expected sandbox.Limits, got {type(limits).__name__}")
        if isinstance(allowed_packages, str):
            raise TypeError("allowed_packages: expected a list of package names, got a str")
        if isolation not in ("full", "weak"):
            raise ValueError(f"isolation: expected 'full' or 'weak', got {isolation!r}")
        for name, value, low in (("actors_per_node", actors_per_node, 1), ("workers_per_actor", workers_per_actor, 1),
                                 ("chunk_size", chunk_size, 1)):  # fmt: skip
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name}: expected an int >= {low} or None, got {value!r}")
        for name, value, low in (("max_in_flight_per_actor", max_in_flight_per_actor, 1), ("max_attempts", max_attempts, 1),
                                 ("max_restarts", max_restarts, -1), ("max_task_retries", max_task_retries, -1)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
        for name, seconds in (("start_timeout_s", start_timeout_s), ("refresh_interval_s", refresh_interval_s)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                raise ValueError(f"{name}: expected a positive number of seconds, got {seconds!r}")
        if cache is not None and not isinstance(cache, (bool, ResultCache)):
            raise TypeError(f"cache: expected bool or sandbox.ResultCache, got {type(cache).__name__}")
        self.default_limits = limits or Limits()
        self.backend = backend
        self.actors_per_node = actors_per_node or 1
        self.workers_per_actor = workers_per_actor
        self.max_in_flight_per_actor = max_in_flight_per_actor
        self.chunk_size = chunk_size
        self.max_attempts = max_attempts
        self.start_timeout_s = float(start_timeout_s)
        self.refresh_interval_s = float(refresh_interval_s)
        self.cache: ResultCache | None = ResultCache() if cache is True else cache if isinstance(cache, ResultCache) else None
        self._actor_options = {
            "num_cpus": 0,
            "max_restarts": max_restarts,
            "max_task_retries": max_task_retries,
            "max_concurrency": max_in_flight_per_actor,
            **dict(actor_options or {}),
        }
        self._sandbox_options = {
            "backend": backend, "limits": self.default_limits.model_dump(), "nsjail_path": nsjail_path,
            "allowed_packages": None if allowed_packages is None else list(allowed_packages), "isolation": isolation,
            "programs": registered_programs(),  # (the driver's process registered them; the actors' did not)
        }  # fmt: skip
        self._counter = itertools.count()
        self._chunk_ids = itertools.count()
        self._cond = threading.Condition()
        self._actors: list[_Actor] = []
        self._refreshed = 0.0
        self._closed = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # the dispatching threads
        self._stats: dict[str, float] = dict.fromkeys(STATS, 0.0)
        self.backend_name = "process" if backend == "auto" else backend
        self._version = ""
        self._ray = import_ray()
        self._connect(address, dict(init_kwargs or {}))
        try:
            self._start()
        except BaseException:
            self._disconnect()
            raise

    # -- connection and actors
    def _connect(self, address: str | None, init_kwargs: dict[str, Any]) -> None:
        ray = self._ray
        with _session_lock:
            if not ray.is_initialized():
                address = address if address is not None else os.environ.get("RAY_ADDRESS") or None
                kwargs: dict[str, Any] = {"log_to_driver": False, **init_kwargs}
                if address is None:  # a local instance of our own: this machine's cores
                    kwargs = {"num_cpus": os.cpu_count() or 1, "include_dashboard": False, **kwargs}
                ray.init(address=address, **kwargs)
                _session["owned"], _session["users"] = True, 0
            elif address is not None or init_kwargs:
                log.info("Ray is already initialized in this process: using its connection (address and "
                         "init_kwargs ignored)")  # fmt: skip
            _session["users"] += 1

    def _disconnect(self) -> None:
        with _session_lock:
            _session["users"] -= 1
            if _session["owned"] and _session["users"] <= 0 and self._ray.is_initialized():
                self._ray.shutdown()
                _session["owned"] = False

    def _start(self) -> None:
        """Actors on every node, and wait until they answer (or fail, or time out)."""
        with self._cond:
            self._refresh()
            starting = list(self._actors)
        errors = self._await_ready(starting, self.start_timeout_s)
        with self._cond:
            live = [a for a in self._actors if a.alive and a.ready is None]
        if not live:
            why = "; ".join(errors) if errors else "no alive Ray node has CPUs"
            raise BackendUnavailableError("ray", f"no sandbox actor could start: {why}")

    def _await_ready(self, actors: list[_Actor], timeout_s: float) -> list[str]:
        ray = self._ray
        refs = {a.ready: a for a in actors if a.ready is not None}
        if refs:
            ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        with self._cond:
            return self._promote(force_deadline=True)

    def _refresh(self) -> None:
        """(With the lock.) Start actors on alive nodes with CPUs that have none; forget the
        actors of nodes that are gone."""
        ray = self._ray
        self._refreshed = time.monotonic()
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0}
        for a in self._actors:
            if a.node_id not in nodes:
                log.warning("Ray node %s is gone, and its sandbox actor with it", a.node_id)
                self._stats["actors_lost"] += 1
                a.alive = False
        self._actors = [a for a in self._actors if a.alive]
        have = {a.node_id for a in self._actors}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cls = _remote_class(ray)
        for node_id, node in nodes.items():
            if node_id in have:
                continue
            cpus = int(node["Resources"]["CPU"])
            workers = self.workers_per_actor or max(1, cpus // self.actors_per_node)
            for _ in range(self.actors_per_node):
                handle = cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), **self._actor_options
                ).remote({**self._sandbox_options, "workers": workers})
                self._actors.append(_Actor(handle, node_id, workers, time.monotonic(), handle.info.remote()))
                self._stats["actors_started"] += 1

    def _promote(self, *, force_deadline: bool = False) -> list[str]:
        """(With the lock.) Starting actors that answered join the pool; those that failed, or
        did not answer within ``start_timeout_s``, are dropped. Returns why each was dropped."""
        ray = self._ray
        starting = {a.ready: a for a in self._actors if a.alive and a.ready is not None}
        if not starting:
            return []
        done, _ = ray.wait(list(starting), num_returns=len(starting), timeout=0)
        errors = []
        for ref in done:
            a = starting.pop(ref)
            try:
                info = ray.get(ref)
            except Exception as exc:  # the actor itself did not start (its sandbox's errors are in info)
                info = {"error": _reason(exc)}
            if "error" in info:
                errors.append(f"node {a.node_id}: {info['error']}")
                log.warning("sandbox actor on node %s failed to start: %s", a.node_id, info["error"])
                self._drop(a)
                continue
            a.ready, a.node_ip, a.workers = None, info["node_ip"], info["workers"]
            self.backend_name, self._version = info["backend"], info["version"]
        now = time.monotonic()
        for a in starting.values():
            if force_deadline or now - a.started > self.start_timeout_s:
                errors.append(f"node {a.node_id}: not started within {self.start_timeout_s:g} s (cannot be placed?)")
                log.warning("sandbox actor on node %s did not start within %g s", a.node_id, self.start_timeout_s)
                self._drop(a)
        return errors

    def _drop(self, a: _Actor) -> None:
        a.alive = False
        self._actors = [b for b in self._actors if b is not a]
        try:
            self._ray.kill(a.handle, no_restart=True)
        except Exception as exc:  # already gone
            log.debug("kill of the actor on %s: %s", a.node_id, exc)

    # -- info
    @property
    def workers(self) -> int:
        """Concurrent runs over every live actor."""
        with self._cond:
            self._check_open()
            return sum(a.workers for a in self._actors if a.alive and a.ready is None)

    @property
    def nodes(self) -> dict[str, str]:
        """The node id -> IP of every node with a live actor."""
        with self._cond:
            return {a.node_id: a.node_ip for a in self._actors if a.alive and a.ready is None}

    @property
    def stats(self) -> dict[str, float]:
        """Counters since the executor started: ``requests``, ``answered`` (by a run or a
        failure, as each chunk comes back), ``cache_hits``, ``chunks`` (sent),
        ``chunks_done`` (answered), ``chunks_retried`` (put back after their actor failed), ``unplaceable`` (requests
        answered with ``sandbox_error`` for want of an actor), ``actors_started``, ``actors_lost``,
        ``peak_in_flight`` (the most chunks one actor held at once),
        and the actors' time in ms: ``actor_decode_ms``, ``actor_encode_ms``, ``actor_sandbox_ms``
        (inside ``Sandbox.run_many``)."""
        with self._cond:
            return dict(self._stats)

    def actor_cpu_time_s(self) -> float:
        """CPU time of every live actor's process so far (a measurement aid)."""
        with self._cond:
            handles = [a.handle for a in self._actors if a.alive and a.ready is None]
        return float(sum(self._ray.get([h.cpu_time_s.remote() for h in handles])))

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("this RayExecutor is closed; create a new one")

    # -- running
    def run(self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
            language: str = "python", files: Mapping[str, bytes | str] | None = None,
            fetch_files: Sequence[str] = ()) -> ExecutionResult:  # fmt: skip
        """Run one program on some node; blocks until it is done. Safe to call from any thread.
        ``language``, ``files`` (input files), ``fetch_files`` (files the result brings back): as
        ``Sandbox.run`` (the nodes' sandboxes check the language)."""
        return self.run_many([checked_request(code, stdin, self._limits(limits), trace_id, language, files, fetch_files)])[0]

    def _limits(self, limits: Limits | None) -> Limits:
        return resolve_limits(limits, self.default_limits)

    def run_many(
        self,
        requests: Iterable[RunRequest | Mapping[str, Any] | str],
        *,
        limits: Limits | None = None,
        progress: bool = False,
    ) -> list[ExecutionResult]:
        """Run many programs over the cluster; results come back in request order, one per
        request. Requests as for ``Sandbox.run_many``, all validated before any runs. The batch is
        dispatched by a thread of this executor while this one only waits: whatever interrupts it
        (an exception raised in it, its ``cancelling()`` block's cancel) cancels the batch."""
        reqs, results, keys, todo = self._prepare(requests, limits)
        if not todo:
            return self._finish(results, keys, todo)
        cancel = Cancel()
        future = self._submit(reqs, results, keys, todo, cancel, progress)
        outer = current_cancel()
        link = 0 if outer is None else outer.on_cancel(cancel.cancel)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # (not begun: never runs)
            cancel.cancel()
            raise
        finally:
            if outer is not None:
                outer.forget(link)

    def _prepare(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], limits: Limits | None,
                 ) -> tuple[list[RunRequest], list[ExecutionResult | None], list[str | None], list[int]]:  # fmt: skip
        """The requests validated, with their limits and trace ids; the cache's answers; what is left to run."""
        default = self._limits(limits)
        items = coerce_requests(requests, default)
        self._check_open()
        reqs = [
            r.model_copy(update={"limits": r.limits or default,
                                 "trace_id": r.trace_id if r.trace_id is not None else f"run/{next(self._counter)}"})
            for r in items
        ]  # fmt: skip
        results: list[ExecutionResult | None] = [None] * len(reqs)
        keys: list[str | None] = [None] * len(reqs)
        if self.cache is not None:
            for i, r in enumerate(reqs):
                assert r.limits is not None
                packed = _child.pack_files([(n, False, d) for n, d in sorted(r.files.items())]) if r.files else None
                keys[i] = self.cache.key(r.code, r.stdin, r.limits, self._version, r.language, packed, r.fetch_files)
                hit = self.cache.get(keys[i] or "")
                if hit is not None:
                    results[i] = hit.model_copy(update={"trace_id": r.trace_id, "cached": True})
        todo = [i for i, r in enumerate(results) if r is None]
        with self._cond:
            self._stats["requests"] += len(reqs)
            self._stats["cache_hits"] += len(reqs) - len(todo)
        return reqs, results, keys, todo

    def _submit(self, reqs: list[RunRequest], results: list[ExecutionResult | None], keys: list[str | None],
                todo: list[int], cancel: Cancel, progress: bool = False) -> concurrent.futures.Future[list[ExecutionResult]]:  # fmt: skip
        """The batch's dispatch (``_dispatch``, then ``_finish``) on one of ``DISPATCH_THREADS``."""

        def work() -> list[ExecutionResult]:
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=len(todo), desc="ray", unit="run")
            try:
                self._dispatch(reqs, todo, results, bar, cancel)
            finally:
                if bar is not None:
                    bar.close()
            return self._finish(results, keys, todo)

        with self._cond:
            self._check_open()
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(DISPATCH_THREADS, thread_name_prefix="ray-dispatch")
            return self._pool.submit(work)

    def _finish(self, results: list[ExecutionResult | None], keys: list[str | None], todo: list[int]) -> list[ExecutionResult]:
        if self.cache is not None:
            for i in todo:
                res, key = results[i], keys[i]
                if res is not None and key is not None:
                    self.cache.put(key, res)
        assert all(r is not None for r in results)
        return [r for r in results if r is not None]

    # -- asyncio
    async def arun(self, code: str, stdin: str = "", limits: Limits | None = None, trace_id: str | None = None, *,
                   language: str = "python", files: Mapping[str, bytes | str] | None = None,
                   fetch_files: Sequence[str] = ()) -> ExecutionResult:  # fmt: skip
        """``run`` for an event loop (``arun_many``)."""
        return (await self.arun_many([checked_request(code, stdin, self._limits(limits), trace_id, language, files, fetch_files)]))[0]

    async def arun_many(self, requests: Iterable[RunRequest | Mapping[str, Any] | str], *,
                        limits: Limits | None = None) -> list[ExecutionResult]:  # fmt: skip
        """``run_many`` for an event loop: the batch is dispatched by a thread of this executor
        while the caller awaits; the requests are validated first, in the caller. Cancelling the
        awaiting task (a client that went away, ``asyncio.wait_for``'s deadline) cancels the batch:
        nothing more is sent, its chunks in flight are cancelled and their runs killed on their nodes."""
        reqs, results, keys, todo = self._prepare(requests, limits)
        if not todo:
            return self._finish(results, keys, todo)
        cancel = Cancel()
        future = self._submit(reqs, results, keys, todo, cancel)
        try:
            return await asyncio.wrap_future(future)
        except BaseException:
            future.cancel()  # (not begun: never runs)
            cancel.cancel()
            raise

    def _dispatch(self, reqs: list[RunRequest], todo: list[int], results: list[ExecutionResult | None], bar: Any,
                  cancel: Cancel) -> None:  # fmt: skip
        """Send ``todo`` out in chunks, at most ``max_in_flight_per_actor`` per actor, collect them as
        they finish; put back the chunks of a failed actor; fill ``results`` exactly once each.
        On ``cancel`` (from any thread: the caller went away) nothing more is sent, every chunk in
        flight is cancelled and the requests left unanswered answer ``CANCELLED``."""
        ray = self._ray
        errors = ray.exceptions  # the actor will not come back (older Rays raise the base class)
        gone = (getattr(errors, "ActorDiedError", errors.RayActorError), errors.ActorUnschedulableError)
        payload = {i: reqs[i].model_dump_json() for i in todo}
        pending: collections.deque[tuple[int, int]] = collections.deque((i, 0) for i in todo)  # (index, tries)
        inflight: dict[Any, tuple[_Actor, list[tuple[int, int]], int]] = {}  # ref -> actor, chunk, chunk id
        guard = threading.Lock()  # ``inflight``'s changes, as a cancel from another thread reads it
        looked_again = False
        last_error: dict[int, str] = {}

        def answer(i: int, res: ExecutionResult) -> None:
            assert results[i] is None, f"request {i} answered twice"
            results[i] = res
            self._stats["answered"] += 1
            if bar is not None:
                bar.update(1)

        def give_up(i: int, why: str) -> None:
            self._stats["unplaceable"] += 1
            answer(i, ExecutionResult.infrastructure_failure(f"ray: {why}", trace_id=reqs[i].trace_id, backend=self.backend_name))

        def withdraw() -> None:  # (any thread) every chunk in flight: its actor stops it
            with guard:
                chunks = dict(inflight)
            self._cancel_chunks(chunks)
            with self._cond:
                self._cond.notify_all()  # (a wait for another thread's slot looks again)

        cancel.on_cancel(withdraw)
        try:
            while (pending or inflight) and not cancel.cancelled:
                starting: list[Any] = []
                with self._cond:
                    self._check_open()
                    self._promote()
                    if time.monotonic() - self._refreshed > self.refresh_interval_s:
                        self._refresh()
                    live = [a for a in self._actors if a.alive and a.ready is None]
                    starting = [a.ready for a in self._actors if a.alive and a.ready is not None]
                    if pending and not live and not starting and not inflight:
                        if not looked_again:  # every actor is gone: look for nodes once more
                            looked_again = True
                            self._refresh()
                            continue
                        while pending:
                            i, _ = pending.popleft()
                            why = "no live sandbox actor on any Ray node (no alive node with CPUs)"
                            give_up(i, why + (f"; last error: {last_error[i]}" if i in last_error else ""))
                        break
                    while pending and not cancel.cancelled:
                        free = [a for a in live if a.in_flight < self.max_in_flight_per_actor]
                        if not free:
                            break
                        a = min(free, key=lambda a: a.in_flight)
                        size = self.chunk_size or chunk_for(a.workers, len(pending), len(live) * self.max_in_flight_per_actor)
                        chunk = [pending.popleft() for _ in range(min(size, len(pending)))]
                        cid = next(self._chunk_ids)
                        ref = a.handle.run_chunk.remote([payload[i] for i, _ in chunk], cid)
                        a.in_flight += 1
                        self._stats["peak_in_flight"] = max(self._stats["peak_in_flight"], a.in_flight)
                        with guard:
                            inflight[ref] = (a, chunk, cid)
                        self._stats["chunks"] += 1
                    if not inflight and not starting:  # every slot is another thread's: wait for one
                        self._cond.wait(timeout=1.0)
                        continue
                ready, _ = ray.wait(list(inflight) + starting, num_returns=1, timeout=1.0)
                if len(ready) < len(inflight):
                    rest = [r for r in inflight if r not in ready]
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready = list(ready) + list(more)
                for ref in ready:
                    with guard:
                        entry = inflight.pop(ref, None)
                    if entry is None:
                        continue  # a starting actor answered: promoted at the top of the loop
                    a, chunk, _ = entry
                    try:
                        out, timing = ray.get(ref)
                        if len(out) != len(chunk):
                            raise RuntimeError(f"the actor returned {len(out)} results for {len(chunk)} requests")
                        done = [ExecutionResult.from_wire(json.loads(raw)) for raw in out]
                    except Exception as exc:
                        why = _reason(exc)
                        with self._cond:
                            a.in_flight -= 1
                            self._cond.notify_all()
                            if cancel.cancelled:  # (cancelled by us: answered below)
                                continue
                            self._stats["chunks_retried"] += 1
                            if isinstance(exc, gone) and a.alive:
                                log.warning("sandbox actor on node %s is gone (%s): its unfinished runs go to other actors",
                                            a.node_id, why.splitlines()[0])  # fmt: skip
                                self._stats["actors_lost"] += 1
                                self._drop(a)
                        for i, tries in reversed(chunk):
                            last_error[i] = why
                            if tries + 1 >= self.max_attempts:
                                give_up(i, f"{why} (sent {tries + 1} times)")
                            else:
                                pending.appendleft((i, tries + 1))
                        continue
                    with self._cond:
                        a.in_flight -= 1
                        self._stats["chunks_done"] += 1
                        self._stats["actor_decode_ms"] += timing["decode_ms"]
                        self._stats["actor_sandbox_ms"] += timing["sandbox_ms"]
                        self._stats["actor_encode_ms"] += timing["encode_ms"]
                        self._cond.notify_all()
                    for (i, _), res in zip(chunk, done, strict=True):
                        answer(i, res)
            if cancel.cancelled:  # what is left answers at once, as a local sandbox's withdrawn runs
                for i in todo:
                    if results[i] is None:
                        answer(i, ExecutionResult.infrastructure_failure(CANCELLED, trace_id=reqs[i].trace_id,
                                                                         backend=self.backend_name))  # fmt: skip
        finally:
            with guard:
                left = dict(inflight)
                inflight.clear()
            if left:  # cancelled (or this thread failed): its chunks stop
                self._cancel_chunks(left)
                with self._cond:
                    for a, _, _ in left.values():
                        a.in_flight -= 1
                    self._cond.notify_all()

    def _cancel_chunks(self, chunks: Mapping[Any, tuple[_Actor, list[tuple[int, int]], int]]) -> None:
        """Stop chunks in flight (ref -> actor, chunk, chunk id): each actor is told which of its
        chunks to cancel (``SandboxActor.cancel_chunks``, in its own concurrency group: its sandbox
        kills their runs, the actor lives on), and each chunk is ``ray.cancel``ed (``force=False``,
        which Ray refuses for an actor task anyway): one still in the actor's queue never starts."""
        by_actor: dict[int, tuple[_Actor, list[int]]] = {}
        for a, _, cid in chunks.values():
            by_actor.setdefault(id(a), (a, []))[1].append(cid)
        for a, ids in by_actor.values():
            try:
                a.handle.cancel_chunks.options(concurrency_group=CONTROL).remote(ids)
            except Exception as exc:  # its actor is gone, or Ray is shutting down
                log.debug("cancel of chunks on %s: %s", a.node_id, exc)
        for ref in chunks:
            try:
                self._ray.cancel(ref)
            except Exception as exc:
                log.debug("ray.cancel of a chunk: %s", exc)

    # -- lifecycle
    def close(self) -> None:
        """Close every actor's sandbox, end the actors, and shut Ray down if this process started
        it (and no other executor of the process still uses it)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            actors, self._actors = self._actors, []
            pool, self._pool = self._pool, None
            self._cond.notify_all()
        if pool is not None:  # (a batch that has not begun finds the executor closed)
            pool.shutdown(wait=False)
        ray = self._ray
        if ray.is_initialized():
            closing = [a.handle.close.remote() for a in actors if a.alive and a.ready is None]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=30)
            for a in actors:
                try:
                    ray.kill(a.handle, no_restart=True)
                except Exception as exc:
                    log.debug("kill of the actor on %s: %s", a.node_id, exc)
        if self.cache is not None:
            self.cache.close()
        self._disconnect()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return f"RayExecutor(backend={self.backend_name!r}, closed)"
        live = [a for a in self._actors if a.alive and a.ready is None]
        return (f"RayExecutor(backend={self.backend_name!r}, {len(live)} actors on {len({a.node_id for a in live})} nodes, "
                f"{sum(a.workers for a in live)} workers)")  # fmt: skip


def chunk_for(workers: int, pending: int, slots: int) -> int:
    """The default chunk: a share of what is left that gives every in-flight slot of every live
    actor one (so a small batch still spreads over every node), at most ``CHUNK_PER_WORKER`` runs
    per worker of the receiving actor (each chunk costs about a millisecond of CPU on each side:
    the cap amortises it), at least one. Chunks shrink as the batch drains, which evens out the
    tail."""
    return max(1, min(CHUNK_PER_WORKER * workers, -(-pending // max(1, slots))))


def _reason(exc: BaseException) -> str:
    """An exception from Ray in one line: its type, the first line of its message and, when there
    are more, the last (Ray puts the cause there, after a traceback or the actor's details)."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"
