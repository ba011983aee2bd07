"""The ``code-env`` command, run as a real subprocess: results, help, every kind of bad input as
one line and exit status 2, task lookup, standard input, the main job's run directories."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator
from tqdm import tqdm

from code_env._errors import first_error
from code_env.cli import build_parser
from code_env.demo import new_run_dir
from sandbox import ExecutionResult, Limits

CLI = [sys.executable, "-m", "code_env"]


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it; its standard input is ``stdin``, else empty (never ours)."""
    feed: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    out = subprocess.run([*CLI, *args], capture_output=True, timeout=120, check=False, **feed)
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode(errors="replace"),
                                       out.stderr.decode(errors="replace"))  # fmt: skip


def test_run_takes_the_language_from_the_extension_or_the_flag(tmp_path: Path) -> None:
    from sandbox.languages import discover

    if not (discover("javascript").found and discover("bash").found):
        pytest.skip("node or bash missing")
    (tmp_path / "p.js").write_text("console.log(6 * 7)\n")
    (tmp_path / "p.txt").write_text("echo $((6 * 7))\n")
    (tmp_path / "p.c").write_text('#include <stdio.h>\nint main(void) { printf("%d\\n", 6 * 7); }\n')
    (tmp_path / "broken.c").write_text("int main(void) {\n  return x;\n}\n")
    out = cli("run", "--json", str(tmp_path / "p.js"))
    assert out.returncode == 0 and json.loads(out.stdout)["stdout"] == "42\n", out.stderr
    out = cli("run", "--json", "--language", "sh", str(tmp_path / "p.txt"))
    assert out.returncode == 0 and json.loads(out.stdout)["stdout"] == "42\n", out.stderr
    out = cli("run", str(tmp_path / "p.txt"))
    assert out.returncode == 2 and "no language has the extension '.txt'" in out.stderr and "--language" in out.stderr
    if discover("c").found:  # compiled in the sandbox, then run
        out = cli("run", "--json", str(tmp_path / "p.c"))
        got = json.loads(out.stdout)
        assert (out.returncode, got["compile_status"], got["stdout"]) == (0, "ok", "42\n"), out.stderr
        out = cli("run", str(tmp_path / "broken.c"))
        assert out.returncode == 0 and "verdict: COMPILE ERROR" in out.stdout and "main.c:2:" in out.stdout, out.stdout
    out = cli("run", "--language", "cobol", str(tmp_path / "p.js"))
    assert out.returncode == 2 and "unknown language 'cobol'" in out.stderr


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


# A step record with only what the log tools require: enough for a well-formed log.
RECORD = {"trace_id": "builtin/sum-of-evens/0/0", "action": "pass\n", "episode": 0, "turn": 0, "reward": 0.0,
          "terminated": True, "problem_id": "builtin/sum-of-evens"}  # fmt: skip
UNWRITABLE = "/proc/code-env-no-such-dir"  # even root cannot make anything there

# (id, arguments, what the one line says, standard input); {tmp} is a directory of test files:
# prog.py (a program), garbage.bin (binary bytes), bad.jsonl (a log with a line that is not
# JSON), garbage.jsonl (binary bytes), good.jsonl (a one-step log), empty/ (an empty directory),
# runs/ (a directory of run directories), latest-is-a-dir/ (its "latest" a real directory).
BAD_USAGE = [
    ("no-command", [], "the following arguments are required: COMMAND", None),
    ("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'", None),
    ("run-unknown-backend", ["run", "{tmp}/prog.py", "--backend", "docker"], "unknown sandbox backend 'docker'", None),
    ("run-typo-backend", ["run", "{tmp}/prog.py", "--backend", "nsjial"], "did you mean 'nsjail'", None),
    ("run-missing-file", ["run", "{tmp}/nope.py"], "cannot read program '{tmp}/nope.py': No such file", None),
    ("run-directory-as-program", ["run", "{tmp}/empty"], "Is a directory", None),
    ("run-directory-as-stdin", ["run", "{tmp}/prog.py", "--stdin", "{tmp}/empty"], "cannot read stdin file", None),
    ("run-binary-program", ["run", "{tmp}/garbage.bin"], "is not UTF-8 text: byte 0x80 at offset 128", None),
    ("run-binary-stdin", ["run", "{tmp}/prog.py"], "standard input '-' is not UTF-8 text", b"\xff\xfe"),
    ("run-nul-byte", ["run", "-"], "NUL byte at offset 8", b"print(1)\x00\n"),
    ("run-negative-timeout", ["run", "{tmp}/prog.py", "--timeout", "-1"], "invalid limits: timeout_s", None),
    ("run-zero-timeout", ["run", "{tmp}/prog.py", "--timeout", "0"], "invalid limits: timeout_s", None),
    ("run-zero-memory", ["run", "{tmp}/prog.py", "--memory-mb", "0"], "invalid limits: memory_mb", None),
    ("run-negative-memory", ["run", "{tmp}/prog.py", "--memory-mb", "-5"], "invalid limits: memory_mb", None),
    ("run-timeout-not-a-number", ["run", "{tmp}/prog.py", "--timeout", "soon"], "invalid float value: 'soon'", None),
    ("run-unknown-overflow", ["run", "{tmp}/prog.py", "--on-output-overflow", "x"], "invalid choice: 'x'", None),
    ("run-stdin-over-limit", ["run", "{tmp}/prog.py", "--max-stdin-bytes", "1"], "over max_stdin_bytes=1", b"12"),
    ("run-stdin-twice", ["run", "-", "--stdin", "-"], "cannot both come from standard input", b"print(1)\n"),
    ("demo-zero-tasks", ["demo", "--tasks", "0"], "expected a positive integer, got 0", None),
    ("demo-log-dir-is-a-file", ["demo", "--log-dir", "{tmp}/prog.py"], "not a directory", None),
    ("demo-log-dir-under-a-file", ["demo", "--log-dir", "{tmp}/prog.py/runs"], "Not a directory", None),
    ("demo-log-dir-unwritable", ["demo", "--log-dir", UNWRITABLE + "/runs"], "cannot make a run directory", None),
    ("demo-latest-not-a-link", ["demo", "--log-dir", "{tmp}/latest-is-a-dir"], "is not a symbolic link", None),
    ("sandbox-demo-unknown-backend", ["sandbox-demo", "--backend", "docker"], "unknown sandbox backend 'docker'", None),
    ("info-unknown-backend", ["info", "--backend", "docker"], "unknown sandbox backend 'docker'", None),
    ("tasks-no-action", ["tasks"], "the following arguments are required: ACTION", None),
    ("tasks-list-unknown-set", ["tasks", "list", "--set", "bultin"], "did you mean 'builtin'", None),
    ("tasks-list-bad-difficulty", ["tasks", "list", "--difficulty", "9"], "expected a difficulty 1..5", None),
    ("tasks-show-unknown-id", ["tasks", "show", "builtin/sum-of-evenz"], "did you mean 'builtin/sum-of-evens'", None),
    ("tasks-show-no-set-named", ["tasks", "show", "nope"], "no task 'nope'", None),
    ("tasks-show-unknown-set", ["tasks", "show", "builtin/sum-of-evens", "--set", "nope"], "unknown task set 'nope'", None),
    ("tasks-show-synthetic-out-of-range", ["tasks", "show", "synthetic:arith/s0/d3/999999"], "at most", None),
    ("tasks-validate-unknown-set", ["tasks", "validate", "nope"], "unknown task set 'nope'", None),
    ("tasks-validate-directory", ["tasks", "validate", "{tmp}/empty"], "Is a directory", None),
    ("tasks-validate-binary", ["tasks", "validate", "{tmp}/garbage.jsonl"], "not UTF-8 text", None),
    ("tasks-validate-malformed", ["tasks", "validate", "{tmp}/bad.jsonl"], "bad.jsonl:1: field 'prompt': Field required", None),
    *[
        (f"{cmd}-{case}", [cmd, *args], message, None)
        for cmd in ("replay", "audit", "stats")
        for case, args, message in [
            ("missing", ["{tmp}/nope.jsonl"], "{tmp}/nope.jsonl: no such file or directory"),
            ("empty-directory", ["{tmp}/empty"], "no *.jsonl trajectory logs"),
            ("malformed", ["{tmp}/bad.jsonl"], "{tmp}/bad.jsonl:2: invalid JSON"),
            ("binary", ["{tmp}/garbage.jsonl"], "{tmp}/garbage.jsonl: not UTF-8 text"),
            ("runs-root", ["{tmp}/runs"], "run directories with logs: give one, e.g. {tmp}/runs/latest"),
        ]
    ],
    ("audit-zero-top", ["audit", "{tmp}/good.jsonl", "--top", "0"], "expected a positive integer", None),
    ("audit-seed-not-a-number", ["audit", "{tmp}/good.jsonl", "--seed", "x"], "invalid int value: 'x'", None),
    ("stats-png-under-a-file", ["stats", "{tmp}/good.jsonl", "--png", "{tmp}/prog.py/x.png"], "cannot write", None),
    ("stats-png-unwritable", ["stats", "{tmp}/good.jsonl", "--png", UNWRITABLE + "/x.png"], "cannot write", None),
    ("stats-png-directory", ["stats", "{tmp}/good.jsonl", "--png", "{tmp}/empty"], "cannot write", None),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("files")
    (d / "prog.py").write_text("print(input())\n")
    (d / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (d / "garbage.jsonl").write_bytes(bytes(range(128, 256)) * 4)
    good = json.dumps(RECORD) + "\n"
    (d / "good.jsonl").write_text(good)
    (d / "bad.jsonl").write_text(good + "{not json\n")
    (d / "empty").mkdir()
    run = new_run_dir(d / "runs")
    (run / "steps-1-0.jsonl").write_text(good)
    (d / "latest-is-a-dir" / "latest").mkdir(parents=True)
    return d


@pytest.mark.parametrize(("args", "message", "stdin"), [c[1:] for c in BAD_USAGE], ids=[c[0] for c in BAD_USAGE])
def test_bad_usage_is_one_line_and_exit_2(files: Path, args: list[str], message: str, stdin: bytes | None) -> None:
    out = cli(*[a.replace("{tmp}", str(files)) for a in args], stdin=stdin)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert re.fullmatch(r"code-env( [a-z-]+)*: error: .+\n", out.stderr), out.stderr
    assert message.replace("{tmp}", str(files)) in out.stderr


def test_help_states_each_default_once() -> None:
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    helps = {a.dest: a.help or "" for a in run._actions}
    assert helps["cpu_time_s"] == "CPU-time limit, seconds (default: timeout_s)"
    assert helps["memory_mb"] == "memory limit, MiB (default: 512)"
    assert all(helps[name].count("(default:") == 1 for name in Limits.model_fields)
    text = " ".join(cli("run", "--help").stdout.split())
    assert "(default: timeout_s)" in text and "(default: None)" not in text
    assert "--on-output-overflow {discard,kill}" in text


class _Options(BaseModel):
    turns: int = Field(ge=1)
    name: str

    @field_validator("name")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not v.isidentifier():
            raise ValueError(f"expected an identifier, got {v!r}")
        return v


@pytest.mark.parametrize(
    ("data", "prefix", "line"),
    [
        ({"turns": 0, "name": "a"}, "", "turns: Input should be greater than or equal to 1 (got 0)"),
        ({"turns": 1, "name": "a b"}, "config.", "config.name: expected an identifier, got 'a b'"),
        ({"name": "a"}, "", "turns: Field required"),
        ({"turns": "x\ny", "name": "?"}, "", "turns: Input should be a valid integer, unable to parse string as an "
                                            "integer (got 'x\\ny') (and 1 more)"),
    ],
    ids=["bound", "validator-message", "missing", "several"],
)
def test_first_error_is_one_line(data: dict[str, Any], prefix: str, line: str) -> None:
    with pytest.raises(ValidationError) as info:
        _Options.model_validate(data)
    assert first_error(info.value, prefix=prefix) == line


def test_program_from_stdin() -> None:
    out = cli("run", "-", "--json", stdin=b"print(6 * 7)\n")
    assert json.loads(out.stdout)["stdout"] == "42\n"


def test_piped_standard_input_reaches_the_program(tmp_path: Path) -> None:
    """``echo abc | code-env run rev.py`` as ``echo abc | python rev.py``; ``--stdin -`` says it
    explicitly, ``--stdin FILE`` wins over a pipe, and no pipe (a terminal, or nothing) is empty."""
    prog = tmp_path / "rev.py"
    prog.write_text("import sys\nprint(sys.stdin.read()[::-1], end='')\n")
    (tmp_path / "in.txt").write_text("from a file")
    runs = {
        "piped": cli("run", str(prog), "--json", stdin=b"abc\n"),
        "explicit": cli("run", str(prog), "--json", "--stdin", "-", stdin=b"xyz"),
        "file": cli("run", str(prog), "--json", "--stdin", str(tmp_path / "in.txt"), stdin=b"ignored"),
        "none": cli("run", str(prog), "--json"),
    }
    got = {k: ExecutionResult.from_wire(json.loads(out.stdout)).stdout for k, out in runs.items()}
    assert got == {"piped": "\ncba", "explicit": "zyx", "file": "elif a morf", "none": ""}


def test_tasks_show_finds_the_set_from_the_id() -> None:
    for problem_id in ("HumanEval/0", "builtin/sum-of-evens", "synthetic:arith/s0/d3/5"):
        out = cli("tasks", "show", problem_id)
        assert out.returncode == 0, out.stderr
        task = json.loads(out.stdout)
        assert task["problem_id"] == problem_id and task["hidden_tests"].endswith("(not shown)")
    out = cli("tasks", "show", "sum-of-evens")  # a bare name: the close builtin id is suggested
    assert out.returncode == 2 and "did you mean 'builtin/sum-of-evens'?" in out.stderr
    out = cli("tasks", "show", "builtin/sum-of-evens", "--set", "synthetic:arith")
    assert out.returncode == 2 and "no task 'builtin/sum-of-evens'" in out.stderr


def test_tasks_validate_warns_about_a_task_without_hidden_tests_and_admits_it(tmp_path: Path) -> None:
    import registry
    from registry.validate import NO_HIDDEN_TEST

    task = registry.resolve("builtin/sum-of-evens")
    capped = task.model_copy(update={"problem_id": "t/capped", "hidden_tests": []})
    registry.write_tasks([task, capped], tmp_path / "two.jsonl")
    out = cli("tasks", "validate", str(tmp_path / "two.jsonl"))
    assert out.returncode == 0, out.stdout + out.stderr
    warnings = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING t/capped: " + NO_HIDDEN_TEST] and "2/2 tasks admitted" in out.stdout
    listed = cli("tasks", "list", "--set", str(tmp_path / "two.jsonl")).stdout
    assert [("top tier all_public" in line) for line in listed.splitlines()[1:]] == [False, True]


def test_tasks_list_filters_by_set_difficulty_and_substring() -> None:
    out = cli("tasks", "list", "SUM", "--set", "builtin", "--difficulty", "1-2")
    assert out.returncode == 0, out.stderr
    head, *rows = out.stdout.splitlines()
    assert re.fullmatch(r"builtin: \d+ tasks \(of \d+\)", head) and rows
    assert all("sum" in r.split()[0] and re.search(r"difficulty [12] ", r) for r in rows)
    assert "builtin/sum-of-evens" in out.stdout
    out = cli("tasks", "list", "--set", "synthetic:list", "--difficulty", "3")
    rows = out.stdout.splitlines()[1:]
    assert len(rows) == 20 and all("difficulty 3 " in r for r in rows)
    assert re.fullmatch(r"builtin: 0 tasks \(of \d+\)\n", cli("tasks", "list", "no-such-task", "--set", "builtin").stdout)


def test_each_main_job_logs_to_a_run_directory_of_its_own(tmp_path: Path) -> None:
    first, second = new_run_dir(tmp_path / "runs"), new_run_dir(tmp_path / "runs")
    assert first != second and first.parent == second.parent == tmp_path / "runs"
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, second.name, "latest"])
    latest = tmp_path / "runs" / "latest"
    assert os.readlink(latest) == second.name and latest.resolve() == second.resolve()  # relative: the tree can move
    assert list(first.iterdir()) == list(second.iterdir()) == []


def test_info_reports_the_isolation() -> None:
    out = cli("info")
    info = json.loads(out.stdout)
    assert info["backend"] == "process"
    if os.geteuid() == 0:
        assert {"mount", "net", "ipc", "pid"} <= set(info["isolation"]["namespaces"])
    # every language of the table, with its toolchain's version or the package that brings it
    from sandbox.languages import LANGUAGES, RUNNABLE, discover_cached

    assert list(info["languages"]) == list(LANGUAGES)
    for name, got in info["languages"].items():
        found = discover_cached(name)  # the toolchain a run gets (the jail's PATH), not another one on ours
        assert got["toolchain"] == found.version and got["runs_in_sandbox"] == (name in RUNNABLE and found.found)
        assert ("install" in got) == (not found.found)


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
    tiers = {(e["policy"], e["tier"]) for e in episodes if e["policy"] in ("infinite loop", "memory bomb")}
    assert tiers == {("infinite loop", "timeout"), ("memory bomb", "oom")}  # the row's label is the verdict
    assert all(r <= 0.8 for r in returns["hard-codes public outputs"])
    assert returns["scripted fixer (3 turns)"] == pytest.approx([1.0] * 4)
    assert all(len(e["rewards"]) == 2 for e in episodes if e["policy"] == "scripted fixer (3 turns)")
    steps = sum(len(e["rewards"]) for e in episodes)
    (run,) = [d for d in (tmp_path / "log").iterdir() if d.name != "latest"]
    assert out.stderr.splitlines()[-1] == f"trajectory log: {run} (linked as {tmp_path / 'log' / 'latest'})"
    assert sum(len(f.read_text().splitlines()) for f in run.glob("*.jsonl")) == steps
    table = cli("demo", "--tasks", "2", "--log-dir", str(tmp_path / "log"))
    assert "episodes/s" in table.stdout and "scripted fixer" in table.stdout
    # the scripted coding agent on CodeAgent-v0: it fixes its mistake and returns its tier
    assert "CodeAgent-v0, a scripted agent" in table.stdout and "run_tests() -> 1/3 public tests passed" in table.stdout
    assert "return +1.00" in table.stdout
    (second,) = [d for d in (tmp_path / "log").iterdir() if d.name not in ("latest", run.name)]
    assert f"trajectory log: {second} (linked as {tmp_path / 'log' / 'latest'})" in table.stdout
    assert sum(len(f.read_text().splitlines()) for f in run.glob("*.jsonl")) == steps  # the first run's log is as it was
    assert (tmp_path / "log" / "latest").resolve() == second.resolve()


def _hog(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


@pytest.mark.slow
def test_the_demos_memory_bomb_is_oom_on_a_busy_machine(tmp_path: Path) -> None:
    # the main job's expected column must hold under load: with every core busy twice over, the
    # bomb still reaches its limit before the per-test time limit (a timeout would be a wrong label)
    from code_env.demo import POLICIES, pick_tasks, run_policy

    bomb = next(p for p in POLICIES if p.name == "memory bomb")
    stop_at = time.time() + 300  # the hogs stop by themselves even if the test dies
    ctx = mp.get_context("fork")
    hogs = [ctx.Process(target=_hog, args=(stop_at,), daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
    for h in hogs:
        h.start()
    try:
        tasks = pick_tasks(8)
        with tqdm(disable=True) as bar:
            episodes = run_policy(bomb, tasks, tmp_path / "log", bar)
    finally:
        for h in hogs:
            h.kill()
            h.join()
    assert [e["tier"] for e in episodes] == ["oom"] * len(tasks)


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
