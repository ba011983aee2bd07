"""The ``code-env`` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import ExecutionResult

CLI = [sys.executable, "-m", "code_env"]


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin.decode() if stdin else None, capture_output=True, text=True, timeout=120, check=False)


def test_run_json_prints_one_execution_result(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text("print(input().upper())\n")
    data = tmp_path / "in.txt"
    data.write_text("shout\n")
    out = cli("run", str(prog), "--json", "--stdin", str(data), "--timeout", "3", "--memory-mb", "128")
    assert out.returncode == 0, out.stderr
    res = ExecutionResult.from_wire(json.loads(out.stdout))
    assert res.stdout == "SHOUT\n" and res.exit_code == 0 and res.trace_id == "cli/0"


@pytest.mark.nsjail
def test_run_with_the_nsjail_backend(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text("import os\nprint(os.getpid())\n")
    out = cli("run", str(prog), "--json", "--backend", "nsjail")
    res = ExecutionResult.from_wire(json.loads(out.stdout))
    assert res.backend == "nsjail" and res.stdout == "2\n"  # the jail's init is PID 1, never the program


def test_run_readable_summary_and_timeout(tmp_path: Path) -> None:
    prog = tmp_path / "loop.py"
    prog.write_text("while True:\n    pass\n")
    out = cli("run", str(prog), "--timeout", "0.5")
    assert out.returncode == 0
    assert "verdict: TIMEOUT" in out.stdout and "signal: SIGKILL" in out.stdout


def test_every_limit_is_a_flag(tmp_path: Path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text("print('x' * 100)\n")
    out = cli("run", str(prog), "--json", "--max-output-bytes", "10", "--cpu-time-s", "1", "--max-processes", "2")
    res = ExecutionResult.from_wire(json.loads(out.stdout))
    assert res.stdout == "x" * 10 and res.stdout_truncated


@pytest.mark.parametrize(
    ("args", "content", "message"),
    [
        (["--memory-mb", "-5"], b"pass\n", "invalid limits: memory_mb"),
        (["--timeout", "0"], b"pass\n", "invalid limits: timeout_s"),
        (["--backend", "nsjial"], b"pass\n", "did you mean 'nsjail'"),
        ([], b"print('\xff\xfe')\n", "is not UTF-8 text: byte 0xff at offset 7"),
        ([], b"print(1)\x00\n", "NUL byte at offset 8"),
    ],
    ids=["negative-memory", "zero-timeout", "typo-backend", "not-utf8", "nul-byte"],
)
def test_bad_input_is_a_clear_message_and_exit_2(tmp_path: Path, args: list[str], content: bytes, message: str) -> None:
    prog = tmp_path / "p.py"
    prog.write_bytes(content)
    out = cli("run", str(prog), *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_file(tmp_path: Path) -> None:
    out = cli("run", str(tmp_path / "nope.py"))
    assert out.returncode == 2 and "cannot read program" in out.stderr and "Traceback" not in out.stderr


def test_program_from_stdin() -> None:
    out = cli("run", "-", "--json", stdin=b"print(6 * 7)\n")
    assert json.loads(out.stdout)["stdout"] == "42\n"


def test_info_reports_the_isolation() -> None:
    out = cli("info")
    info = json.loads(out.stdout)
    assert info["backend"] == "process"
    if os.geteuid() == 0:
        assert {"mount", "net", "ipc", "pid"} <= set(info["isolation"]["namespaces"])


@pytest.mark.slow
def test_demo_runs_the_policies_side_by_side(tmp_path: Path) -> None:
    out = cli("demo", "--tasks", "4", "--json", "--log-dir", str(tmp_path / "log"))
    assert out.returncode == 0, out.stderr
    episodes = [json.loads(line) for line in out.stdout.splitlines()]
    returns: dict[str, list[float]] = {}
    for e in episodes:
        returns.setdefault(e["policy"], []).append(sum(e["rewards"]))
    assert returns["reference solution"] == [1.0] * 4
    assert returns["syntax error"] == [-1.0] * 4
    assert returns["infinite loop"] == [-0.5] * 4 and returns["memory bomb"] == [-0.5] * 4
    assert all(r <= 0.8 for r in returns["hard-codes public outputs"])
    assert returns["scripted fixer (3 turns)"] == pytest.approx([1.0] * 4)
    assert all(len(e["rewards"]) == 2 for e in episodes if e["policy"] == "scripted fixer (3 turns)")
    steps = sum(len(e["rewards"]) for e in episodes)
    assert sum(len(f.read_text().splitlines()) for f in (tmp_path / "log").glob("*.jsonl")) == steps
    table = cli("demo", "--tasks", "2", "--log-dir", str(tmp_path / "log2"))
    assert "episodes/s" in table.stdout and "trajectory log:" in table.stdout and "scripted fixer" in table.stdout


@pytest.mark.slow
def test_sandbox_demo_shows_every_sample_contained() -> None:
    out = cli("sandbox-demo", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    by = {(r["backend"], r["program"]): ExecutionResult.from_wire(r["result"]) for r in rows}
    for backend in {b for b, _ in by}:
        assert by[backend, "correct program"].stdout == "328350\n"
        assert by[backend, "infinite loop"].timeout_hit
        assert by[backend, "memory bomb"].oom
        assert by[backend, "network attempt"].exit_code == 1
        assert all(r.sandbox_error is None for (b, _), r in by.items() if b == backend)
