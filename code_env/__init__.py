"""code-env: a Gymnasium environment for reinforcement learning of coding agents on real,
sandboxed code execution.

This release ships the sandbox (``sandbox`` package) and the ``code-env`` command; the
environments (``CodeExec-v0``), the task registry and the grader build on it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
