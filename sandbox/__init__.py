"""Untrusted-code execution for code-env.

>>> from sandbox import Sandbox, Limits, ExecutionResult
>>> with Sandbox(backend="auto") as sb:                                  # doctest: +SKIP
...     res = sb.run("print(1 + 1)", limits=Limits(timeout_s=2, memory_mb=256), trace_id="p1/0/0")
...     many = sb.run_many(["print(i)" for i in range(3)])

Backends: ``process`` (default; warm forking workers, namespaces, seccomp, rlimits, cgroups) and
``nsjail`` (the nsjail binary). ``RayExecutor`` spreads runs over a Ray cluster (the ``ray``
extra; Ray is imported when one is made, not by ``import sandbox``); ``RedisExecutor`` over
executor processes joined by Redis Streams (``code-env executor --redis URL``; the ``redis``
extra, imported when one is made). This package imports neither ``code_env`` nor ``registry``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._programs import register_program, registered_programs
from ._sandbox import BACKENDS, Sandbox
from .cache import ResultCache
from .errors import (
    BackendUnavailableError,
    CgroupUnusableError,
    IsolationUnavailableError,
    LanguageUnavailableError,
    SandboxClosedError,
    SandboxError,
    UnknownBackendError,
)
from .models import (
    CANCELLED,
    QUEUE_TIMEOUT,
    Cancel,
    ExecutionResult,
    Limits,
    RunRequest,
    cancelling,
)

if _TYPE_CHECKING:
    from ._ray import RayExecutor
    from ._redis import RedisExecutor

__all__ = [
    "BACKENDS",
    "CANCELLED",
    "QUEUE_TIMEOUT",
    "BackendUnavailableError",
    "Cancel",
    "CgroupUnusableError",
    "ExecutionResult",
    "IsolationUnavailableError",
    "LanguageUnavailableError",
    "Limits",
    "RayExecutor",
    "RedisExecutor",
    "ResultCache",
    "RunRequest",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "UnknownBackendError",
    "cancelling",
    "register_program",
    "registered_programs",
]


def __getattr__(name: str) -> _Any:
    if name == "RayExecutor":  # loaded on first use
        from ._ray import RayExecutor

        return RayExecutor
    if name == "RedisExecutor":  # (redis itself is imported when one is made)
        from ._redis import RedisExecutor

        return RedisExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "RayExecutor", "RedisExecutor"})
