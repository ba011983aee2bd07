"""``code-env serve``: the sandbox and the grader as an HTTP service (FastAPI on uvicorn).

Two APIs side by side:

* SandboxFusion's ``POST /run_code`` (what verl's ``sandbox_fusion`` reward path and its tool
  agents call), field for field: ``code``, ``language`` (SandboxFusion's names: ``nodejs``,
  ``cpp``, ...), ``stdin``, ``run_timeout``, ``compile_timeout``, ``memory_limit_MB``, ``files``,
  ``fetch_files`` → ``status`` (``Success`` / ``Failed`` / ``SandboxError``), ``message``,
  ``compile_result``, ``run_result`` (``status`` ``Finished`` / ``TimeLimitExceeded`` / ``Error``,
  ``execution_time`` in seconds, ``return_code``, ``stdout``, ``stderr``), ``files``. ``files``
  (relative path -> base64) go into the run's work dir; ``fetch_files`` (relative paths) come
  back base64 in ``files`` (``Sandbox.run(files=..., fetch_files=...)``).
* Ours, versioned: ``POST /v1/run_many`` (order-preserving batches of ``RunRequest``, whose
  ``files`` are base64 in JSON, as the results' are),
  ``POST /v1/grade`` and ``/v1/grade_many`` (by task id: the hidden tests and expected values
  stay here, the client sends code; or an inline task), ``GET /v1/tasks``, ``/healthz``,
  ``/metrics`` (Prometheus text), the OpenAPI schema at ``/openapi.json``.

Safe by default: ``serve`` binds 127.0.0.1; another address needs a bearer token (generated and
printed once when none is given); bodies, programs and batches have size limits; each client (its
token, else its address) has a cap on requests in flight; the runs admitted and not finished are
bounded, past which a request is answered 429 with ``Retry-After``; a server that is shutting
down answers 503. A client that goes away has its batch's runs that have not begun withdrawn.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import secrets
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import registry
from registry import Task
from sandbox import ExecutionResult, Limits, RunRequest, Sandbox
from sandbox.errors import LanguageUnavailableError
from sandbox.languages import LANGUAGES, UnknownLanguageError
from sandbox.languages import resolve as resolve_language

from ._errors import first_error
from .grading import Grade, agrade_many
from .reward import RewardConfig

T = TypeVar("T")

LOOPBACK = ("127.0.0.1", "::1", "localhost")
ROUTES = ("/run_code", "/v1/run_many", "/v1/grade", "/v1/grade_many", "/v1/tasks", "/v1/languages", "/healthz", "/metrics",
          "/openapi.json", "/docs")  # fmt: skip


@dataclass(frozen=True)
class ServiceLimits:
    """What one request may ask (a larger one is refused, 413 or 422, before anything runs) and
    how much work the service holds at once."""

    max_body_bytes: int = 32 << 20
    max_code_bytes: int = 1 << 20
    max_batch: int = 1024
    max_pending_runs: int = 4096  # admitted and not finished, all clients: past it, 429
    max_client_requests: int = 64  # in flight per client (its token, else its address): past it, 429
    retry_after_s: int = 1


# --------------------------------------------------------------------------- SandboxFusion's API


class RunCodeRequest(BaseModel):
    """SandboxFusion's ``/run_code`` request (its defaults: 10 s to compile, 10 s to run)."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    stdin: str | None = None
    compile_timeout: float = Field(10, gt=0, le=600)
    run_timeout: float = Field(10, gt=0, le=3600)
    memory_limit_MB: int = Field(-1, description="-1: the service's default")  # (SandboxFusion's name)
    files: dict[str, str] = Field(default_factory=dict, description="path -> base64 content")
    fetch_files: list[str] = Field(default_factory=list)


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


def _return_code(exit_code: int | None, signal: int | None) -> int | None:
    """A process's status as SandboxFusion gives it (asyncio's: a signal as its negative number)."""
    if exit_code is not None:
        return exit_code
    return -signal if signal is not None else None


def fusion_response(res: ExecutionResult) -> RunCodeResponse:
    """An ``ExecutionResult`` as SandboxFusion answers: ``Success`` only when the program ran and
    exited 0 within its time; a compile that failed or timed out, a run that timed out, crashed or
    exited non-zero (memory included: killed, a negative return code) is ``Failed``; our own
    failure is ``SandboxError`` (never the program's)."""
    if res.sandbox_error is not None:
        return RunCodeResponse(status="SandboxError", message=res.sandbox_error)
    compile_result = None
    if res.compile_status is not None:
        compile_result = CommandRunResult(
            status="TimeLimitExceeded" if res.compile_timeout_hit else "Finished",
            execution_time=round(res.compile_time_ms / 1000, 6), return_code=res.compile_exit_code,
            stdout=res.compile_stdout, stderr=res.compile_stderr,
        )  # fmt: skip
        if res.compile_status != "ok":
            why = "compile timed out" if res.compile_timeout_hit else "compile failed"
            return RunCodeResponse(status="Failed", message=why, compile_result=compile_result)
    run_result = CommandRunResult(
        status="TimeLimitExceeded" if res.timeout_hit else "Finished",
        execution_time=round(res.execution_time_ms / 1000, 6), return_code=_return_code(res.exit_code, res.signal),
        stdout=res.stdout, stderr=res.stderr,
    )  # fmt: skip
    ok = not res.timeout_hit and run_result.return_code == 0
    message = "" if ok else ("out of memory" if res.oom else "time limit exceeded" if res.timeout_hit else "")
    return RunCodeResponse(status="Success" if ok else "Failed", message=message, compile_result=compile_result,
                           run_result=run_result,
                           files={k: base64.b64encode(v).decode("ascii") for k, v in res.files.items()})  # fmt: skip


# --------------------------------------------------------------------------- our API


class RunManyRequest(BaseModel):
    requests: list[RunRequest]


class RunManyResponse(BaseModel):
    results: list[ExecutionResult]


class GradeRequest(BaseModel):
    """One program for one task: the task by id (``problem_id``, from ``task_set``'s tasks, the
    builtin set by default), or inline (``task``: a whole ``registry.Task``, its tests sent by the
    client)."""

    code: str
    problem_id: str | None = None
    task_set: str = "builtin"
    task: Task | None = None
    language: str = "python"
    hidden: bool = True


class GradeManyRequest(BaseModel):
    items: list[GradeRequest]
    reward: RewardConfig | None = None


class GradeManyResponse(BaseModel):
    grades: list[Grade]


class TaskSummary(BaseModel):
    """What a client may see of a task: never its hidden tests."""

    problem_id: str
    kind: str
    difficulty: int
    prompt: str
    entry_point: str | None
    public_tests: int
    hidden_tests: int


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# --------------------------------------------------------------------------- metrics


def metric_verdict(res: ExecutionResult) -> str:
    """A run's verdict as a label of few values: ok, exit_nonzero, timeout, oom, output_limit,
    killed, compile_error, compile_timeout, sandbox_error."""
    if res.sandbox_error:
        return "sandbox_error"
    if res.compile_failed:
        return "compile_timeout" if res.compile_status == "timeout" else "compile_error"
    for flag, label in ((res.oom, "oom"), (res.timeout_hit, "timeout"), (res.output_limit_hit, "output_limit"),
                        (res.signal is not None, "killed")):  # fmt: skip
        if flag:
            return label
    return "ok" if res.exit_code == 0 else "exit_nonzero"


@dataclass
class Metrics:
    """What ``/metrics`` shows (Prometheus text format)."""

    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    pending: int = 0
    in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latency_sum: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency_count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latency_buckets: dict[str, list[int]] = field(default_factory=dict)

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

    def observe(self, endpoint: str, seconds: float) -> None:
        self.latency_sum[endpoint] += seconds
        self.latency_count[endpoint] += 1
        buckets = self.latency_buckets.setdefault(endpoint, [0] * len(self.BUCKETS))
        for k, edge in enumerate(self.BUCKETS):
            if seconds <= edge:
                buckets[k] += 1

    def count_results(self, results: list[ExecutionResult]) -> None:
        self.runs += len(results)
        for r in results:
            self.verdicts[metric_verdict(r)] += 1

    def text(self, workers: int) -> str:
        lines = ["# HELP code_env_runs_total Programs run.", "# TYPE code_env_runs_total counter",
                 f"code_env_runs_total {self.runs}",
                 "# HELP code_env_verdicts_total Runs by verdict.", "# TYPE code_env_verdicts_total counter"]  # fmt: skip
        lines += [f'code_env_verdicts_total{{verdict="{v}"}} {n}' for v, n in sorted(self.verdicts.items())]
        lines += ["# HELP code_env_requests_total HTTP requests by endpoint and status.",
                  "# TYPE code_env_requests_total counter"]  # fmt: skip
        lines += [f'code_env_requests_total{{endpoint="{e}",status="{s}"}} {n}' for (e, s), n in sorted(self.requests.items())]
        lines += ["# HELP code_env_queue_depth Runs admitted and not finished.", "# TYPE code_env_queue_depth gauge",
                  f"code_env_queue_depth {self.pending}",
                  "# HELP code_env_workers Sandbox workers.", "# TYPE code_env_workers gauge", f"code_env_workers {workers}",
                  "# HELP code_env_request_seconds Request latency by endpoint.",
                  "# TYPE code_env_request_seconds histogram"]  # fmt: skip
        for e in sorted(self.latency_count):
            for edge, n in zip(self.BUCKETS, self.latency_buckets[e], strict=True):
                lines.append(f'code_env_request_seconds_bucket{{endpoint="{e}",le="{edge:g}"}} {n}')
            lines.append(f'code_env_request_seconds_bucket{{endpoint="{e}",le="+Inf"}} {self.latency_count[e]}')
            lines.append(f'code_env_request_seconds_sum{{endpoint="{e}"}} {self.latency_sum[e]:.6f}')
            lines.append(f'code_env_request_seconds_count{{endpoint="{e}"}} {self.latency_count[e]}')
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the app


class Service:
    """The state behind the app: the sandbox, the limits, the counters, the task sets loaded."""

    def __init__(self, sandbox: Sandbox, *, token: str | None = None, limits: ServiceLimits | None = None,
                 default_limits: Limits | None = None) -> None:  # fmt: skip
        self.sandbox = sandbox
        self.token = token
        self.limits = limits or ServiceLimits()
        self.default_limits = default_limits or sandbox.default_limits
        self.metrics = Metrics()
        self.draining = False
        self._task_sets: dict[str, dict[str, Task]] = {}
        self._limits_seen: dict[tuple[float, float, int], Limits] = {}
        self._sets_lock = threading.Lock()

    # -- admission
    @staticmethod
    def client_of(host: str | None) -> str:
        return host or "?"

    def check_token(self, authorization: str | None) -> None:
        if self.token is None:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise ApiError(401, "a bearer token is required: Authorization: Bearer <token> (code-env serve printed it)",
                           {"WWW-Authenticate": "Bearer"})  # fmt: skip

    async def admitted(self, client: str, runs: int, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` (``runs`` sandbox runs) if the service has room, else 429/503."""
        if self.draining:
            raise ApiError(503, "the server is shutting down", {"Retry-After": str(self.limits.retry_after_s)})
        if self.metrics.in_flight[client] >= self.limits.max_client_requests:
            raise ApiError(429, f"this client has {self.metrics.in_flight[client]} requests in flight, the most "
                                f"the server takes from one", {"Retry-After": str(self.limits.retry_after_s)})  # fmt: skip
        if self.metrics.pending + runs > self.limits.max_pending_runs:
            raise ApiError(429, f"the server holds {self.metrics.pending} runs, {runs} more would pass its "
                                f"{self.limits.max_pending_runs}", {"Retry-After": str(self.limits.retry_after_s)})  # fmt: skip
        self.metrics.in_flight[client] += 1
        self.metrics.pending += runs
        try:
            return await work()
        finally:
            self.metrics.pending -= runs
            self.metrics.in_flight[client] -= 1

    # -- tasks
    def task_set(self, name: str) -> dict[str, Task]:
        with self._sets_lock:
            if name not in self._task_sets:
                try:
                    tasks = registry.load(name)
                except (ValueError, KeyError, OSError, ImportError) as exc:
                    raise ApiError(404, f"task set {name!r}: {exc}") from None
                self._task_sets[name] = {t.problem_id: t for t in tasks}
            return self._task_sets[name]

    def task_of(self, item: GradeRequest, i: int | None = None) -> Task:
        where = "" if i is None else f"items[{i}]: "
        if (item.task is None) == (item.problem_id is None):
            raise ApiError(422, f"{where}give either problem_id (a task of task_set) or task (an inline task)")
        if item.task is not None:
            return item.task
        tasks = self.task_set(item.task_set)
        if item.problem_id not in tasks:
            raise ApiError(404, f"{where}no task {item.problem_id!r} in the task set {item.task_set!r}")
        return tasks[item.problem_id]

    # -- checks
    def check_language(self, name: str) -> str:
        try:
            return self.sandbox.check_language(name)
        except UnknownLanguageError:
            raise ApiError(400, f"unknown language {name!r}: code-env runs {', '.join(self.languages())} (SandboxFusion's "
                                "names, such as nodejs, are accepted)") from None  # fmt: skip
        except LanguageUnavailableError as exc:
            raise ApiError(400, f"{exc}; this server runs {', '.join(self.languages())}") from None

    def languages(self) -> list[str]:
        out = []
        for name in LANGUAGES:
            try:
                self.sandbox.check_language(name)
            except (LanguageUnavailableError, UnknownLanguageError):
                continue
            out.append(name)
        return out

    def check_code(self, code: str, where: str = "code") -> None:
        if len(code.encode("utf-8", "surrogatepass")) > self.limits.max_code_bytes:
            raise ApiError(413, f"{where}: more than the server's {self.limits.max_code_bytes} bytes of program")

    def check_batch(self, n: int) -> None:
        if n > self.limits.max_batch:
            raise ApiError(413, f"a batch of {n}: more than the server's {self.limits.max_batch}")

    def run_limits(self, req: RunCodeRequest) -> Limits:
        key = (req.run_timeout, req.compile_timeout, req.memory_limit_MB)
        if key not in self._limits_seen:  # (a few distinct ones serve every request: made once each)
            update: dict[str, Any] = {"timeout_s": req.run_timeout, "cpu_time_s": None, "compile_timeout_s": req.compile_timeout}
            if req.memory_limit_MB not in (-1, 0):
                update["memory_mb"] = req.memory_limit_MB
            try:
                made = Limits.model_validate({**self.default_limits.model_dump(), **update})
            except ValidationError as exc:
                raise ApiError(422, first_error(exc)) from None
            if len(self._limits_seen) > 1024:
                self._limits_seen.clear()
            self._limits_seen[key] = made
        return self._limits_seen[key]


async def _until_disconnected(request: Any, work: Awaitable[T]) -> T:
    """``work``, cancelled when the client goes away first (its runs not begun are withdrawn)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.25)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise ApiError(499, "the client closed the connection")


class _Guard:
    """Every request's first and last step (plain ASGI, so that a client's disconnect reaches the
    handler): the token, the body's declared size, then the counters."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app, self.svc = app, service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        svc, started = self.svc, time.monotonic()
        path = scope["path"] if scope["path"] in ROUTES else "other"  # (a label of few values)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        status = {"code": 500}
        received = [0]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        async def receiving() -> dict[str, Any]:  # a body sent in chunks, with no length said, is counted too
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > svc.limits.max_body_bytes:
                    raise ApiError(413, f"a body of more than the server's {svc.limits.max_body_bytes} bytes")
            return message

        try:
            if path != "/healthz":
                svc.check_token(headers.get("authorization"))
            size = headers.get("content-length", "")
            if size.isdigit() and int(size) > svc.limits.max_body_bytes:
                raise ApiError(413, f"a body of {size} bytes: more than the server's {svc.limits.max_body_bytes}")
        except ApiError as exc:
            answer = JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers)
            await answer(scope, receive, sending)  # type: ignore[arg-type]
        else:
            await self.app(scope, receiving, sending)
        svc.metrics.requests[(path, status["code"])] += 1
        svc.metrics.observe(path, time.monotonic() - started)


def create_app(sandbox: Sandbox, *, token: str | None = None, limits: ServiceLimits | None = None) -> Any:
    """The ASGI app over ``sandbox`` (which the caller owns and closes)."""
    from . import __version__

    svc = Service(sandbox, token=token, limits=limits)
    app = FastAPI(title="code-env", version=__version__,
                  description="Sandboxed code execution and grading; SandboxFusion's /run_code beside code-env's /v1 API.")  # fmt: skip
    app.state.service = svc

    app.add_middleware(_Guard, service=svc)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Any:
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers)

    def client(request: Request) -> str:
        return svc.client_of(request.client.host if request.client else None)

    # (the answers are serialized once, by pydantic-core, and given as they are: the response
    # models are for the schema)
    @app.post("/run_code", response_model=RunCodeResponse, openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": RunCodeRequest.model_json_schema()}}}})  # fmt: skip
    async def run_code(request: Request) -> RunCodeResponse:
        """SandboxFusion's ``/run_code``. (Its body is parsed here, by pydantic-core from the raw
        bytes: the per-request cost of the service is what it adds to the sandbox's.)"""
        try:
            body = RunCodeRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise ApiError(422, first_error(exc)) from None
        language = svc.check_language(body.language)
        svc.check_code(body.code)
        files: dict[str, bytes] = {}
        for path, content in body.files.items():
            try:
                files[path] = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise ApiError(422, f"files[{path!r}]: not base64") from None
        lim = svc.run_limits(body)
        try:
            req = RunRequest(code=body.code, stdin=body.stdin or "", limits=lim, language=language, files=files,
                             fetch_files=tuple(body.fetch_files))  # fmt: skip
        except ValidationError as exc:
            raise ApiError(422, first_error(exc)) from None
        except TypeError as exc:
            raise ApiError(422, str(exc)) from None

        async def work() -> list[ExecutionResult]:
            return await _until_disconnected(request, svc.sandbox.arun_many([req]))

        (res,) = await svc.admitted(client(request), 1, work)
        svc.metrics.count_results([res])
        return Response(fusion_response(res).model_dump_json(), media_type="application/json")  # type: ignore[return-value]

    @app.post("/v1/run_many", response_model=RunManyResponse, openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": RunManyRequest.model_json_schema()}}}})  # fmt: skip
    async def run_many(request: Request) -> RunManyResponse:
        """Many programs, results in request order (``Sandbox.run_many``). (Parsed from the raw
        bytes as JSON: a request's ``files`` are base64 there, as the results' are.)"""
        try:
            body = RunManyRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise ApiError(422, first_error(exc)) from None
        except TypeError as exc:  # (a validator's: a field of the wrong type)
            raise ApiError(422, str(exc)) from None
        svc.check_batch(len(body.requests))
        for i, r in enumerate(body.requests):
            svc.check_code(r.code, f"requests[{i}].code")
            try:
                svc.check_language(r.language)
            except ApiError as exc:
                raise ApiError(exc.status, f"requests[{i}]: {exc.message}") from None

        async def work() -> list[ExecutionResult]:
            return await _until_disconnected(request, svc.sandbox.arun_many(body.requests, limits=svc.default_limits))

        results = await svc.admitted(client(request), len(body.requests), work)
        svc.metrics.count_results(results)
        return Response(RunManyResponse(results=results).model_dump_json(), media_type="application/json")  # type: ignore[return-value]

    async def grade_items(items: list[GradeRequest], reward: RewardConfig | None, request: Request) -> list[Grade]:
        svc.check_batch(len(items))
        tasks = [svc.task_of(item, i if len(items) > 1 else None) for i, item in enumerate(items)]
        for i, item in enumerate(items):
            svc.check_code(item.code, f"items[{i}].code")
            svc.check_language(item.language)
        by_language: dict[tuple[str, bool], list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            by_language[(resolve_language(item.language).name, item.hidden)].append(i)
        out: list[Grade | None] = [None] * len(items)

        async def work() -> None:
            for (language, hidden), idx in by_language.items():
                grades = await _until_disconnected(request, agrade_many(
                    [(tasks[i], items[i].code) for i in idx], sandbox=svc.sandbox, config=reward, hidden=hidden,
                    language=language))  # fmt: skip
                for i, g in zip(idx, grades, strict=True):
                    out[i] = g

        runs = sum(1 if t.kind == "function" else len(t.public_tests) + len(t.hidden_tests) for t in tasks)
        try:
            await svc.admitted(client(request), min(runs, svc.limits.max_pending_runs), work)
        except LanguageUnavailableError as exc:
            raise ApiError(400, str(exc)) from None
        return [g for g in out if g is not None]

    @app.post("/v1/grade", response_model=Grade)
    async def grade(body: GradeRequest, request: Request) -> Grade:
        """One program's grade for one task (the reward ladder), by task id or inline task."""
        (g,) = await grade_items([body], None, request)
        return g

    @app.post("/v1/grade_many", response_model=GradeManyResponse)
    async def grade_many(body: GradeManyRequest, request: Request) -> GradeManyResponse:
        """Grades of many (task, program) pairs, in order."""
        return GradeManyResponse(grades=await grade_items(body.items, body.reward, request))

    @app.get("/v1/tasks", response_model=list[TaskSummary])
    async def tasks(task_set: str = "builtin") -> list[TaskSummary]:
        """The tasks of a set, without their hidden tests."""
        found = await asyncio.to_thread(svc.task_set, task_set)
        return [TaskSummary(problem_id=t.problem_id, kind=t.kind, difficulty=t.difficulty, prompt=t.prompt,
                            entry_point=t.entry_point, public_tests=len(t.public_tests), hidden_tests=len(t.hidden_tests))
                for t in found.values()]  # fmt: skip

    @app.get("/v1/languages")
    async def languages() -> dict[str, list[str]]:
        """The languages this server runs (SandboxFusion's names are accepted as aliases)."""
        return {"languages": svc.languages()}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "draining" if svc.draining else "ok", "backend": svc.sandbox.backend_name,
                "workers": svc.sandbox.workers, "queue_depth": svc.metrics.pending}  # fmt: skip

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return svc.metrics.text(svc.sandbox.workers)

    return app


def wait_ready(url: str, *, timeout_s: float = 60.0, alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until the service at ``url`` answers ``/healthz`` (``TimeoutError`` after ``timeout_s``,
    ``RuntimeError`` as soon as ``alive()`` says the server process ended)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        if not alive():
            raise RuntimeError(f"the server at {url} ended before it answered")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from {url}/healthz within {timeout_s:g} s") from None
            time.sleep(0.05)


def serve(*, host: str = "127.0.0.1", port: int = 8080, token: str | None = None, backend: str = "auto",
          workers: int | None = None, limits: ServiceLimits | None = None, log_level: str = "info",
          announce: Callable[[str], None] = print) -> None:  # fmt: skip
    """Run the service until SIGINT/SIGTERM (what is running finishes, nothing new is taken).
    Any address but the loopback needs a token: one is generated and announced when none is given."""
    import uvicorn

    if token is None and host not in LOOPBACK:
        token = secrets.token_urlsafe(32)
        announce(f"code-env serve: {host} is not the loopback: clients must send 'Authorization: Bearer {token}' "
                 "(shown once; give --token to choose it)")  # fmt: skip
    with Sandbox(backend, workers=workers) as sb:
        app = create_app(sb, token=token, limits=limits)
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=600)
        server = uvicorn.Server(config)

        original = server.handle_exit

        def handle_exit(sig: int, frame: Any) -> None:  # refuse new work at once, finish the rest
            app.state.service.draining = True
            original(sig, frame)

        server.handle_exit = handle_exit  # type: ignore[method-assign]
        server.run()
