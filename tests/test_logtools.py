"""``code-env replay / audit / stats`` over trajectory logs written by real environments."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import registry
from code_env import CodeExecEnv
from code_env.logtools import audit, episodes, format_audit, outcome, replay, stats, turns_exhausted
from code_env.trajectory import LogFileError, TrajectoryLogger

CLI = [sys.executable, "-m", "code_env"]
TASKS = {t.problem_id: t for t in registry.load("builtin")}
REF = {pid: t.reference_solution for pid, t in TASKS.items()}
WRONG_SUM = "def sum_of_evens(nums):\n    return 0\n"  # 2 of 3 public tests
WRONG_PALINDROME = "def is_palindrome(s):\n    return False\n"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def play(env: CodeExecEnv, problem_id: str, *programs: str) -> list[float]:
    env.reset(options={"problem_id": problem_id})
    return [float(env.step(p)[1]) for p in programs]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven episodes in two files: three references, two wrong programs, a syntax error, and a
    multi-turn episode solved at the second attempt."""
    d = tmp_path_factory.mktemp("log")
    single = CodeExecEnv(log_dir=str(d))
    assert play(single, "builtin/sum-of-evens", REF["builtin/sum-of-evens"]) == [1.0]
    assert play(single, "builtin/reverse-words", REF["builtin/reverse-words"]) == [1.0]
    assert play(single, "builtin/is-palindrome", REF["builtin/is-palindrome"]) == [1.0]
    assert play(single, "builtin/sum-of-evens", WRONG_SUM) == [0.4]
    assert play(single, "builtin/fizzbuzz-line", "print(1)\n")[0] < 1.0
    assert play(single, "builtin/sum-of-evens", "def sum_of_evens(:\n") == [-1.0]
    multi = CodeExecEnv(log_dir=str(d), max_turns=3)
    rewards = play(multi, "builtin/is-palindrome", WRONG_PALINDROME, REF["builtin/is-palindrome"])
    assert round(sum(rewards), 6) == 1.0 and rewards[1] < 1.0  # the bonus, then the tier less the bonus
    single.close()
    multi.close()
    assert len(list(d.glob("*.jsonl"))) == 2
    return d


def tampered(log: Path, dest: Path, match: Callable[[dict[str, Any]], bool], **changes: Any) -> tuple[Path, int]:
    """A copy of the log with ``changes`` applied to the one record ``match`` picks; its line."""
    shutil.copytree(log, dest)
    hits = []
    for f in sorted(dest.glob("*.jsonl")):
        lines = f.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            rec = json.loads(line)
            if match(rec):
                rec.update(changes)
                lines[i] = json.dumps(rec) + "\n"
                hits.append((f, i + 1))
        f.write_text("".join(lines))
    assert len(hits) == 1, hits
    return hits[0]


# ---------------------------------------------------------------------------------- replay


def test_replay_of_an_untouched_log_matches(log: Path) -> None:
    report = replay(log)
    assert (report.episodes, report.steps) == (7, 8)
    assert report.differences == [] and report.ok
    assert report.skipped_sandbox_errors == report.timing_dependent == report.incomplete_episodes == 0
    out = cli("replay", str(log))
    assert out.returncode == 0, out.stderr
    assert "replayed 7 episodes, 8 steps re-judged: 0 differ" in out.stdout


def test_replay_reports_exactly_the_tampered_reward(log: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    f, line = tampered(log, copy, lambda r: r["problem_id"] == "builtin/reverse-words", reward=0.5)
    report = replay(copy)
    assert len(report.differences) == 1
    d = report.differences[0]
    assert d.trace_id.startswith("builtin/reverse-words/") and d.where == f"{f}:{line}"
    assert (d.logged_reward, d.new_reward, d.logged_tier, d.new_tier) == (0.5, 1.0, "all_tests", "all_tests")
    out = cli("replay", str(copy))
    assert out.returncode == 1, out.stderr
    diffs = [x for x in out.stdout.splitlines() if x.startswith("DIFF")]
    assert diffs == [f"DIFF {d}"] and "logged 0.5" in diffs[0] and "replayed 1 (all_tests)" in diffs[0]
    assert "Traceback" not in out.stderr


def test_replay_tampered_multi_turn_step(log: Path, tmp_path: Path) -> None:
    f, line = tampered(log, tmp_path / "copy", lambda r: r["config"]["max_turns"] == 3 and r["turn"] == 0, reward=0.0)
    report = replay(tmp_path / "copy")
    assert [(d.where, d.logged_reward, d.new_reward) for d in report.differences] == [(f"{f}:{line}", 0.0, 0.05)]


def test_replay_skips_logged_sandbox_errors(log: Path, tmp_path: Path) -> None:
    tampered(log, tmp_path / "copy", lambda r: r["action"] == WRONG_SUM, sandbox_error="worker died", reward=0.0)
    report = replay(tmp_path / "copy")
    assert report.skipped_sandbox_errors == 1 and report.steps == 7 and report.ok


def test_timing_dependent_steps_are_not_differences(tmp_path: Path) -> None:
    env = CodeExecEnv(log_dir=str(tmp_path / "log"), episode_time_s=1e-9)  # past its budget at once
    assert play(env, "builtin/sum-of-evens", REF["builtin/sum-of-evens"]) == [-0.1]
    env.close()
    report = replay(tmp_path / "log")
    assert report.timing_dependent == 1 and report.ok and not report.timing_differences
    tampered(tmp_path / "log", tmp_path / "copy", lambda r: True, reward=1.0)
    report = replay(tmp_path / "copy")
    assert report.ok and len(report.timing_differences) == 1
    out = cli("replay", str(tmp_path / "copy"))
    assert out.returncode == 0 and "1 of them differ (not counted)" in out.stdout


def test_replay_of_inline_tasks_and_rotated_parts(tmp_path: Path) -> None:
    """An inline task set (each record carries its task) and a log rotated into 12 parts: the
    parts are read in order (``.2`` before ``.10``, the first part before ``.1``)."""
    tasks = [TASKS["builtin/is-palindrome"], TASKS["builtin/sum-of-evens"]]
    env = CodeExecEnv(tasks, max_turns=3)
    env.logger = TrajectoryLogger(tmp_path, max_bytes=1024)  # every record in a part of its own
    wrong = {"builtin/is-palindrome": WRONG_PALINDROME, "builtin/sum-of-evens": WRONG_SUM}
    for pid in [*wrong, *wrong]:
        play(env, pid, "def nothing(:\n", wrong[pid], REF[pid])
    env.close()
    assert len(list(tmp_path.glob("*.jsonl"))) == 12
    eps = list(episodes(tmp_path))
    assert [len(e.steps) for e in eps] == [3, 3, 3, 3]
    assert all([s.rec["turn"] for s in e.steps] == [0, 1, 2] for e in eps)
    report = replay(tmp_path)
    assert (report.episodes, report.steps, report.differences) == (4, 12, [])


# ----------------------------------------------------------------------------------- audit


def test_audit_samples_the_highest_returns(log: Path) -> None:
    two = audit(log, top=2)
    assert [e.ret for e in two] == [1.0, 1.0]
    assert all(e.record["action"] in REF.values() for e in two)
    assert [e.ret for e in audit(log, top=6)] == [1.0, 1.0, 1.0, 1.0, 0.4, 0.2]
    assert len(audit(log, top=50)) == 7
    assert {e.record["trace_id"] for e in audit(log, top=4)} == {e.record["trace_id"] for e in audit(log, top=4, seed=9)}
    text = format_audit(two)
    assert two[0].record["action"].strip() in text and "--- public tests: 3/3 passed ---" in text


def test_audit_shows_the_programs_own_output_only(tmp_path: Path) -> None:
    """A function task's program prints on stdout, which the verifier moves to stderr (its stdout
    carries the verifier's nonce-tagged result lines): audit shows the prints, never those lines.
    A stdio task's output is shown for the first public test that failed."""
    env = CodeExecEnv(log_dir=str(tmp_path))
    prints = "def sum_of_evens(nums):\n    print('looking at', nums)\n    return sum(n for n in nums if n % 2 == 0)\n"
    assert play(env, "builtin/sum-of-evens", prints) == [1.0]
    assert play(env, "builtin/fizzbuzz-line", "import sys\nprint('my own line')\nprint('oops', file=sys.stderr)\n")[0] < 1.0
    env.close()
    entries = {e.record["problem_id"]: e for e in audit(tmp_path, top=2)}
    function, stdio = entries["builtin/sum-of-evens"].render(), entries["builtin/fizzbuzz-line"].render()
    assert "--- program output (prints and errors, public tests) ---\nlooking at [" in function
    assert "--- stdout (public test 0) ---\nmy own line\n--- stderr (public test 0) ---\noops" in stdio
    tagged = re.compile(r"[0-9a-f]{32} \{")
    assert not tagged.search(function) and not tagged.search(stdio)
    assert tagged.search(json.dumps(entries["builtin/sum-of-evens"].record["executions"][0]["stdout"]))  # it was there
    out = cli("audit", str(tmp_path))
    assert out.returncode == 0 and "looking at [" in out.stdout and not tagged.search(out.stdout)


def test_audit_cli_shows_n_episodes_with_their_code_and_is_seeded(log: Path) -> None:
    first, again = cli("audit", str(log), "--top", "2", "--seed", "3"), cli("audit", str(log), "--top", "2", "--seed", "3")
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    headers = [x for x in first.stdout.splitlines() if x.startswith("=== ")]
    assert len(headers) == 2 and all("return 1" in h for h in headers)
    assert first.stdout.count("--- code ---") == 2 and "all_tests: every public and hidden test passed" in first.stdout
    assert any(code.strip() in first.stdout for code in REF.values())


# ----------------------------------------------------------------------------------- stats


def test_stats_match_the_logged_episodes(log: Path) -> None:
    st = stats(log)
    assert (st.files, st.episodes, st.steps, st.unfinished, st.sandbox_errors) == (2, 7, 8, 0, 0)
    assert dict(st.outcomes) == {"all_tests": 4, "partial": 2, "syntax_error": 1}
    assert st.pass_rate == st.public_rate == pytest.approx(4 / 7)
    assert sorted(st.returns, reverse=True)[:5] == [1.0, 1.0, 1.0, 1.0, 0.4] and min(st.returns) == -1.0
    assert len(st.execution_ms) == len(st.wall_ms) == 8 and all(w > 0 for w in st.wall_ms)
    assert st.per_task["builtin/sum-of-evens"] == [1, 3] and st.per_task["builtin/is-palindrome"] == [2, 2]


def test_episodes_out_of_turns_are_labelled_by_the_tier_they_scored(tmp_path: Path) -> None:
    """Out of turns, the last program keeps its tier: the outcome is that tier, the fact that the
    turns ran out a flag beside it; another budget (here the episode's clock) is budget_exhausted."""
    multi = CodeExecEnv(log_dir=str(tmp_path / "log"), max_turns=2)
    assert play(multi, "builtin/sum-of-evens", "def sum_of_evens(:\n", "def sum_of_evens(:\n") == [0.0, -1.0]
    assert sum(play(multi, "builtin/sum-of-evens", WRONG_SUM, WRONG_SUM)) == pytest.approx(0.4)
    multi.close()
    clock = CodeExecEnv(log_dir=str(tmp_path / "log"), max_turns=2, episode_time_s=1e-9)
    assert play(clock, "builtin/sum-of-evens", REF["builtin/sum-of-evens"]) == [-0.1]
    clock.close()
    lasts = [ep.last.rec for ep in episodes(tmp_path / "log")]
    assert [(outcome(r), turns_exhausted(r)) for r in lasts] == [
        ("syntax_error", True), ("partial", True), ("budget_exhausted", False)]  # fmt: skip
    st = stats(tmp_path / "log")
    assert dict(st.outcomes) == {"syntax_error": 1, "partial": 1, "budget_exhausted": 1} and st.turns_exhausted == 2
    assert "(the turns ran out in 2 of them: each scored its last program's tier, counted above)" in st.table()
    rendered = {e.record["trace_id"]: e.render() for e in audit(tmp_path / "log", top=3)}
    assert sum("syntax_error (the turns ran out): " in r for r in rendered.values()) == 1
    assert sum("partial (the turns ran out): " in r for r in rendered.values()) == 1
    assert sum("budget_exhausted: " in r for r in rendered.values()) == 1


def test_stats_cli_table_and_png(log: Path, tmp_path: Path) -> None:
    png = tmp_path / "stats.png"
    out = cli("stats", str(log), "--png", str(png))
    assert out.returncode == 0, out.stderr
    assert "pass rate: 57.1% all tests (4/7)" in out.stdout
    assert "all_tests" in out.stdout and "syntax_error" in out.stdout and "p95" in out.stdout
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = cli("stats", str(log), "--png", str(tmp_path / "no" / "such" / "dir.png"))
    assert bad.returncode == 2 and "cannot write" in bad.stderr and "Traceback" not in bad.stderr


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("command", ["replay", "audit", "stats"])
def test_missing_log_and_malformed_line(log: Path, tmp_path: Path, command: str) -> None:
    out = cli(command, str(tmp_path / "nope.jsonl"))
    assert out.returncode == 2 and "nope.jsonl: no such file or directory" in out.stderr
    assert "Traceback" not in out.stderr
    bad = tmp_path / "bad.jsonl"
    first = next(iter(sorted(log.glob("*.jsonl")))).read_text().splitlines()[0]
    bad.write_text(first + "\n{not json\n")
    out = cli(command, str(bad))
    assert out.returncode == 2 and out.stderr == f"code-env {command}: error: {bad}:2: invalid JSON: Expecting property name enclosed in double quotes\n"
    assert out.stdout == ""


def test_other_bad_input(log: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    out = cli("stats", str(tmp_path / "empty"))
    assert out.returncode == 2 and "no *.jsonl trajectory logs" in out.stderr
    f, line = tampered(log, tmp_path / "copy", lambda r: r["action"] == WRONG_SUM, config={"tasks": "builtin", "max_turns": 0})
    out = cli("replay", str(tmp_path / "copy"))
    assert out.returncode == 2 and f"{f}:{line}: config.max_turns" in out.stderr and "Traceback" not in out.stderr
    shutil.rmtree(tmp_path / "copy")
    f, line = tampered(log, tmp_path / "copy", lambda r: r["action"] == WRONG_SUM, problem_id="builtin/sum-of-evenz")
    out = cli("replay", str(tmp_path / "copy"))
    assert out.returncode == 2 and f"{f}:{line}: cannot replay" in out.stderr and "sum-of-evens" in out.stderr
    (tmp_path / "odd.jsonl").write_text('{"trace_id": "x", "action": "", "episode": "one", "turn": 0, "reward": 0}\n')
    with pytest.raises(LogFileError, match=r"odd.jsonl:1: 'episode': expected an integer"):
        stats(tmp_path / "odd.jsonl")
    out = cli("audit", str(log), "--top", "0")
    assert out.returncode == 2 and "expected a positive integer" in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------------- bounded logs

# 9 MiB of stderr and a return value of 1 MiB less 64 bytes (the verifier's result channel takes up to 1 MiB of JSON)
FLOOD = "import sys\ndef f(x):\n    sys.stderr.write('e' * (9 << 20))\n    return 'r' * ((1 << 20) - 64)\n"
FLOOD_TASK = registry.Task(problem_id="flood/f", prompt="Return x.", kind="function", entry_point="f",
                           reference_solution="def f(x):\n    return x\n", public_tests=[registry.TestCase(args=[1], expected=1)],
                           hidden_tests=[registry.TestCase(args=[2], expected=2)])  # fmt: skip
RECORD_BOUND = 64 << 10  # a flooding step's record, with the default log_text_bytes (4096)


class Recording:
    """The real sandbox, keeping every result it returned: the host's side of what was logged."""

    def __init__(self) -> None:
        from .conftest import get_sandbox

        self.sandbox = get_sandbox("process")
        self.results: list[Any] = []

    def run_many(self, requests: list[Any]) -> list[Any]:
        results = self.sandbox.run_many(requests)
        self.results += results
        return results


def _check_clipped(rec: dict[str, Any], runs: list[Any], line: str) -> None:
    """Each run's streams in the record: whole when short, else head, tail, size and SHA-256 of
    the text the sandbox returned (computed here from the host's results)."""
    import hashlib

    from code_env.trajectory import clipped

    assert len(line.encode()) < RECORD_BOUND, f"a record of {len(line.encode())} bytes"
    by_id = {r.trace_id: r for r in runs}
    assert [r["trace_id"] for r in rec["executions"]] and all(r["trace_id"] in by_id for r in rec["executions"])
    flooded = 0
    for logged in rec["executions"]:
        real = by_id[logged["trace_id"]]
        for name in ("stdout", "stderr"):
            whole = getattr(real, name).encode()
            c = clipped(logged[name])
            if c is None:
                assert logged[name] == getattr(real, name) and len(whole) <= 4096
                continue
            flooded += 1
            assert (c.bytes, c.sha256) == (len(whole), hashlib.sha256(whole).hexdigest())
            assert whole.startswith(c.head.encode()) and whole.endswith(c.tail.encode())
            assert 2040 <= len(c.head.encode()) <= 2048 and 2040 <= len(c.tail.encode()) <= 2048
    stderr = [by_id[r["trace_id"]].stderr for r in rec["executions"]]
    assert any(len(s) >= 8 << 20 for s in stderr)  # the sandbox kept 8 MiB of the 9 (its max_output_bytes) ...
    assert any(by_id[r["trace_id"]].stderr_truncated for r in rec["executions"])  # ... and says so
    # stdout (the 1 MiB answers on the result channel) and stderr of the one joint run (public and hidden tests)
    assert flooded == 2


def test_a_flooding_program_makes_a_bounded_record_through_the_env(tmp_path: Path) -> None:
    runner = Recording()
    env = CodeExecEnv([FLOOD_TASK], executor=runner, log_dir=str(tmp_path))
    assert play(env, "flood/f", FLOOD) == [0.0]  # it answered 'rrr...', not 1
    env.close()
    (f,) = tmp_path.glob("*.jsonl")
    (line,) = f.read_text(encoding="utf-8").splitlines()
    rec = json.loads(line)
    _check_clipped(rec, runner.results, line)
    assert rec["public_cases"][0]["got"].startswith('"rrrr') and len(rec["public_cases"][0]["got"]) <= 2100  # short already
    text = format_audit(audit(tmp_path))
    assert "[clipped in the log: 8388608 bytes, sha256 " in text and "eeee" in text  # the size and the head
    report = replay(tmp_path)  # re-runs the program: compares rewards, never the clipped texts
    assert (report.steps, report.differences) == (1, []), report.summary()


def test_a_flooding_completion_makes_a_bounded_record_through_grade_record(tmp_path: Path) -> None:
    from code_env import TRLReward

    runner = Recording()
    fn = TRLReward([FLOOD_TASK], sandbox=runner, log_dir=tmp_path)
    assert fn([FLOOD_TASK.prompt], [f"```python\n{FLOOD}```"], problem_id=[FLOOD_TASK.problem_id]) == [0.0]
    fn.close()
    (f,) = tmp_path.glob("*.jsonl")
    (line,) = f.read_text(encoding="utf-8").splitlines()
    _check_clipped(json.loads(line), runner.results, line)
    report = replay(tmp_path)
    assert (report.steps, report.differences) == (1, []), report.summary()


def test_the_log_directory_stays_under_its_cap_deleting_the_oldest_parts(tmp_path: Path) -> None:
    """Two loggers in one directory, 16 KiB cap (parts of 1 KiB): the oldest closed parts go,
    the newest records stay, every deletion is counted, and what is left still replays."""
    from code_env.trajectory import DELETED_PARTS, TrajectoryLogger

    env = CodeExecEnv(log_dir=str(tmp_path), log_max_bytes=16 << 10)
    other = TrajectoryLogger(tmp_path, max_total_bytes=16 << 10)
    assert env.logger is not None and env.logger.max_bytes == other.max_bytes == 1024
    sizes = []
    for i in range(40):
        play(env, "builtin/sum-of-evens", WRONG_SUM if i % 2 else REF["builtin/sum-of-evens"])
        other.write({"trace_id": f"x/{i}/0/0", "action": "pass", "episode": i, "turn": 0, "reward": 0.0, "pad": "p" * 500})
        sizes.append(sum(f.stat().st_size for f in tmp_path.glob("*.jsonl")))
    env.close()
    other.close()
    assert max(sizes) <= 16 << 10 and env.logger.deleted_parts + other.deleted_parts > 0  # (either deletes either's)
    notes = (tmp_path / DELETED_PARTS).read_text(encoding="utf-8").splitlines()
    assert len(notes) == env.logger.deleted_parts + other.deleted_parts
    assert all(re.fullmatch(r"steps-\d+-\d+(\.\d+)?\.jsonl\t\d+ bytes\t\d+ records", n) for n in notes)
    kept = [r["trace_id"] for r in (json.loads(x) for f in sorted(tmp_path.glob("*.jsonl")) for x in f.read_text().splitlines())]
    assert "x/39/0/0" in kept and "x/0/0/0" not in kept  # the newest kept, the oldest deleted, of both streams
    assert "builtin/sum-of-evens/39/0/0" in kept and "builtin/sum-of-evens/0/0/0" not in kept
    assert f"rotated: the {len(notes)} oldest parts were deleted" in stats(tmp_path).table()
    env_logs = tmp_path / "env"
    env_logs.mkdir()
    for f in tmp_path.glob(f"{env.logger.stem}*.jsonl"):
        f.rename(env_logs / f.name)
    report = replay(env_logs)
    assert report.steps > 0 and report.differences == [], report.summary()
    with pytest.raises(ValueError, match="max_total_bytes: expected >= 16384"):
        TrajectoryLogger(tmp_path, max_total_bytes=1000)
    with pytest.raises(ValueError, match="log_max_bytes"):
        CodeExecEnv(log_dir=str(tmp_path), log_max_bytes=10)
