"""An ``ExecutionResult`` in words, for the ``code-env`` command and the sandbox demo: a one-word
``verdict`` and a one-screen ``summary`` (the program's text in it through ``visible``: nothing
it writes acts on the terminal)."""

from __future__ import annotations

from sandbox import ExecutionResult

from ._visible import visible

SHOWN_CHARS = 4000  # of each stream, in a summary


def verdict(res: ExecutionResult) -> str:
    """``OK``, ``EXIT n``, ``TIMEOUT (cpu|wall)``, ``OOM``, ``OUTPUT LIMIT``, ``KILLED (SIG...)``,
    ``COMPILE ERROR``, ``COMPILE TIMEOUT`` or ``SANDBOX ERROR`` (the sandbox failed: nothing is
    said about the program)."""
    if res.sandbox_error:
        return "SANDBOX ERROR"
    if res.compile_failed:
        return "COMPILE TIMEOUT" if res.compile_status == "timeout" else "COMPILE ERROR"
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
    lines = [f"trace_id: {visible(str(res.trace_id), keep_newlines=False)}   backend: {res.backend}   verdict: {verdict(res)}"]
    lines.append(
        f"exit_code: {res.exit_code}   signal: {res.signal_name}   wall: {res.execution_time_ms:.1f} ms   "
        f"cpu: {res.cpu_time_ms:.1f} ms   peak memory: {res.peak_memory_mb} MB"
    )
    if res.reruns:
        lines.append(f"re-run: {visible(str(res.rerun_reason), keep_newlines=False)}")
    if res.sandbox_error:
        lines.append(f"sandbox error: {visible(res.sandbox_error)}")
    if res.compile_status is not None:
        lines.append(f"compile: {res.compile_status}   exit_code: {res.compile_exit_code}   "
                     + ("cached" if res.compile_cached else f"wall: {res.compile_time_ms:.1f} ms"))  # fmt: skip
    streams = [("compile stdout", res.compile_stdout, False), ("compile stderr", res.compile_stderr, False),
               ("stdout", res.stdout, res.stdout_truncated), ("stderr", res.stderr, res.stderr_truncated)]  # fmt: skip
    for name, text, cut in streams:
        if text or cut:
            lines.append(f"--- {name}{' (truncated)' if cut else ''} ---")
            shown = text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}\n[... shown {SHOWN_CHARS} chars ...]"
            lines.append(visible(shown))
    return "\n".join(lines)
