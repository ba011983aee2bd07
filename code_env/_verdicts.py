"""An ``ExecutionResult`` in words, for the ``code-env`` command and the sandbox demo: a one-word
``verdict`` and a one-screen ``summary``."""

from __future__ import annotations

from sandbox import ExecutionResult

SHOWN_CHARS = 4000  # of each stream, in a summary


def verdict(res: ExecutionResult) -> str:
    """``OK``, ``EXIT n``, ``TIMEOUT (cpu|wall)``, ``OOM``, ``OUTPUT LIMIT``, ``KILLED (SIG...)`` or
    ``SANDBOX ERROR`` (the sandbox failed: nothing is said about the program)."""
    if res.sandbox_error:
        return "SANDBOX ERROR"
    if res.oom:
        return "OOM"
    if res.timeout_hit:
        return f"TIMEOUT ({res.timeout_kind})"
    if res.output_limit_hit:
        return "OUTPUT LIMIT"
    if res.signal is not None:
        return f"KILLED ({res.signal_name})"
    return "OK" if res.exit_code == 0 else f"EXIT {res.exit_code}"


def summary(res: ExecutionResult) -> str:
    """A readable one-screen account of a result: verdict, status, timings, then each stream."""
    lines = [f"trace_id: {res.trace_id}   backend: {res.backend}   verdict: {verdict(res)}"]
    lines.append(
        f"exit_code: {res.exit_code}   signal: {res.signal_name}   wall: {res.execution_time_ms:.1f} ms   "
        f"cpu: {res.cpu_time_ms:.1f} ms   peak memory: {res.peak_memory_mb} MB"
    )
    if res.reruns:
        lines.append(f"re-run: {res.rerun_reason}")
    if res.sandbox_error:
        lines.append(f"sandbox error: {res.sandbox_error}")
    for name, text, cut in (("stdout", res.stdout, res.stdout_truncated), ("stderr", res.stderr, res.stderr_truncated)):
        if text or cut:
            lines.append(f"--- {name}{' (truncated)' if cut else ''} ---")
            lines.append(text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}\n[... shown {SHOWN_CHARS} chars ...]")
    return "\n".join(lines)
