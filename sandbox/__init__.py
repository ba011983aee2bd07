"""Untrusted-code execution for code-env.

>>> from sandbox import Sandbox, Limits, ExecutionResult
>>> with Sandbox(backend="auto") as sb:                                  # doctest: +SKIP
...     res = sb.run("print(1 + 1)", limits=Limits(timeout_s=2, memory_mb=256), trace_id="p1/0/0")
...     many = sb.run_many(["print(i)" for i in range(3)])

Backends: ``process`` (default; warm forking workers, namespaces, seccomp, rlimits, cgroups) and
``nsjail`` (the nsjail binary). This package imports neither ``code_env`` nor ``registry``.
"""

from ._sandbox import BACKENDS, Sandbox
from .cache import ResultCache
from .errors import (
    BackendUnavailableError,
    IsolationUnavailableError,
    SandboxClosedError,
    SandboxError,
    UnknownBackendError,
)
from .models import ExecutionResult, Limits, RunRequest

__all__ = [
    "BACKENDS",
    "BackendUnavailableError",
    "ExecutionResult",
    "IsolationUnavailableError",
    "Limits",
    "ResultCache",
    "RunRequest",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "UnknownBackendError",
]
