"""Errors raised by the sandbox package.

Hierarchy::

    SandboxError                      root of everything this package raises on purpose
    ├── UnknownBackendError (ValueError)  a backend name that does not exist ("did you mean ...")
    ├── BackendUnavailableError           a backend that exists but cannot run on this machine
    │   │                                 (missing binary, missing kernel feature); says how to fix it
    │   └── IsolationUnavailableError     the kernel refuses the namespaces a run needs (not root and
    │                                     no unprivileged user namespaces) or the jail's /proc
    │                                     (subset=pid, Linux < 5.8): fails closed, names the ways out
    │                                     (root, user namespaces, a newer kernel, or isolation="weak")
    ├── LanguageUnavailableError (ValueError)  a language the sandbox cannot run here: not runnable
    │                                     yet, its toolchain missing (names the package), or not on
    │                                     this backend
    ├── CgroupUnusableError               ``$CODE_ENV_CGROUP`` names a cgroup this user cannot use
    │                                     (the path, and the permission or controller it lacks)
    └── SandboxClosedError                ``run`` on a sandbox that was closed

Bad arguments (code that is not a string, a NUL byte in the code, limits out of range) raise the
plain ``TypeError`` / ``ValueError`` / pydantic ``ValidationError`` that Python users expect.

A failure of the sandbox *machinery during a run* is not raised: it is reported in
``ExecutionResult.sandbox_error`` so that a batch never loses its other results and a failure of
ours is never mistaken for a verdict on the program.
"""

from __future__ import annotations

import os


class SandboxError(Exception):
    """Root of the errors the sandbox raises on purpose."""


class UnknownBackendError(SandboxError, ValueError):
    """A backend name that does not exist."""

    def __init__(self, name: str, known: list[str], suggestion: str | None = None) -> None:
        self.name = name
        self.known = known
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(f"unknown sandbox backend {name!r} (known: {', '.join(known)}){hint}")


class BackendUnavailableError(SandboxError):
    """A backend exists but cannot run here; the message says what is missing and how to fix it."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"sandbox backend {backend!r} is unavailable: {reason}")


class LanguageUnavailableError(SandboxError, ValueError):
    """A language the sandbox cannot run here (``sandbox.languages``): the message says why and
    what would bring it. Raised before anything runs, never a ``sandbox_error`` of a run."""


class CgroupUnusableError(SandboxError):
    """``$CODE_ENV_CGROUP`` is set but this user cannot make memory cgroups there and move runs
    into them; raised when the ``Sandbox`` is created (never a silent fall-back to no cgroup)."""

    def __init__(self, path: str, missing: str) -> None:
        self.path = path
        self.missing = missing
        super().__init__(
            f"CODE_ENV_CGROUP={path!r} cannot hold the sandbox's memory cgroups: {missing}. Delegate it to uid "
            f"{os.geteuid()} (as root: chown -R {os.geteuid()} {path}; with systemd: systemd-run --user --scope -p "
            "Delegate=yes ...), or unset CODE_ENV_CGROUP (memory is then watched by the sandbox's monitor)"
        )


class SandboxClosedError(SandboxError):
    """The sandbox was closed; create a new one."""


class IsolationUnavailableError(BackendUnavailableError):
    """The kernel cannot isolate runs here: not root and unprivileged user namespaces are off, or
    (``kernel`` given: the kernel's own words) it is too old for the jail's /proc (``subset=pid``,
    Linux >= 5.8), which nothing but another kernel fixes."""

    def __init__(self, backend: str, cause: str, *, kernel: str | None = None) -> None:
        self.cause = cause
        weak = "Sandbox(isolation='weak')" if backend == "process" else "Sandbox(backend='process', isolation='weak')"
        if kernel is not None:
            fix = f" ({kernel}). Run on a newer kernel, or accept weak isolation (the host's /proc) by name: {weak}"
        else:
            fix = (". Either run as root, or enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0; "
                   "on Debian/Ubuntu also kernel.unprivileged_userns_clone=1, or the AppArmor restriction "
                   f"kernel.apparmor_restrict_unprivileged_userns=0), or accept weak isolation by name: {weak}")
        super().__init__(backend, f"cannot isolate runs: {cause}{fix}")
