"""``CodeAgent-v0``'s trajectory log, on the real sandbox: one record per call (the call, its
result, the run's result, the reward and its breakdown, the budget, a diff of the workspace), bounded;
``code-env replay`` makes the calls again and finds no difference, and finds a tampered reward,
result or workspace; ``audit`` lists the calls; ``stats`` counts them; CodeExec-v0's records in
the same directory keep working."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from code_env import CodeExecEnv
from code_env.agent import AGENT_ENV, CodeAgentEnv, workspace_diff, workspace_digest
from code_env.logtools import (
    agent_label,
    audit,
    episodes,
    format_audit,
    is_agent,
    outcome,
    replay,
    stats,
    turns_exhausted,
)
from code_env.trajectory import LogFileError, clipped

from .conftest import get_sandbox

PID = "builtin/sum-of-evens"
WRONG = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2)\n"
RIGHT_EDIT = {"path": "main.py", "old": "n % 2", "new": "n % 2 == 0"}
# a run that leaves a text file and a binary one in the workspace
MAKES_FILES = "open('notes.txt', 'w').write('one\\ntwo\\n')\nopen('blob.bin', 'wb').write(bytes(range(256)))\nprint('made')\n"
CLI = [sys.executable, "-m", "code_env"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False)


def call(env: CodeAgentEnv, name: str, **args: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
    return env.step({"name": name, "arguments": json.dumps(args)})


def scripted(env: CodeAgentEnv) -> list[float]:
    """The scripted agent: lists, reads, writes a wrong program, runs the public tests as a file and
    as run_tests, fixes it (a Hermes-style text call), sends a malformed call, makes files by a run,
    and submits. Its rewards."""
    env.reset(seed=0, options={"problem_id": PID})
    rewards = [call(env, "list_files")[1], call(env, "read_file", path="PROMPT.md")[1],
               call(env, "write_file", path="main.py", content=WRONG)[1], call(env, "run", path="test_public.py")[1],
               call(env, "run_tests")[1]]  # fmt: skip
    fix = json.dumps({"name": "edit_file", "arguments": RIGHT_EDIT})
    rewards.append(env.step(f"Let me fix the parity test.\n<tool_call>\n{fix}\n</tool_call>")[1])
    rewards.append(env.step("I think I am done?")[1])  # no call at all: an error observation
    rewards.append(call(env, "write_file", path="make.py", content=MAKES_FILES)[1])
    rewards.append(call(env, "run", command="python make.py")[1])
    rewards.append(call(env, "run_tests")[1])
    _, r, terminated, _, info = call(env, "submit")
    assert terminated and info["reward_breakdown"]["tier"] == "all_tests"
    return [*rewards, r]


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(log.glob("*.jsonl")) for line in f.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted agent's episode, an episode whose tool calls run out, and a CodeExec-v0
    episode, in one directory."""
    d = tmp_path_factory.mktemp("agentlog")
    sb = get_sandbox("process")
    env = CodeAgentEnv("builtin", executor=sb, log_dir=d)
    assert sum(scripted(env)) == pytest.approx(1.0)
    env.close()
    short = CodeAgentEnv("builtin", executor=sb, log_dir=d, max_calls=2)
    short.reset(options={"problem_id": PID})
    call(short, "write_file", path="main.py", content="def sum_of_evens(nums):\n    return 0\n")
    _, r, _, truncated, info = call(short, "list_files")
    assert truncated and info["budget"] == "tool_calls" and r == pytest.approx(0.4)  # 0.6 * 2/3: main.py's own tier
    short.close()
    exec_env = CodeExecEnv(executor=sb, log_dir=str(d))
    exec_env.reset(options={"problem_id": PID})
    assert exec_env.step("def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n")[1] == 1.0
    exec_env.close()
    return d


def tampered(log: Path, dest: Path, match: Callable[[dict[str, Any]], bool], change: Callable[[dict[str, Any]], None]) -> str:
    """A copy of the log with ``change`` applied to the one record ``match`` picks; its file:line."""
    shutil.copytree(log, dest)
    hits = []
    for f in sorted(dest.glob("*.jsonl")):
        lines = f.read_text(encoding="utf-8").splitlines(keepends=True)
        for i, line in enumerate(lines):
            rec = json.loads(line)
            if match(rec):
                change(rec)
                lines[i] = json.dumps(rec) + "\n"
                hits.append(f"{f}:{i + 1}")
        f.write_text("".join(lines), encoding="utf-8")
    assert len(hits) == 1, hits
    return hits[0]


def is_call(name: str, turn: int | None = None) -> Callable[[dict[str, Any]], bool]:
    return lambda r: (is_agent(r) and r["config"]["max_calls"] == 30 and r["call"] is not None and r["call"]["name"] == name
                      and (turn is None or r["turn"] == turn))  # fmt: skip


# ---------------------------------------------------------------------------------- records


def test_every_call_is_a_record_with_its_call_result_reward_and_diff(log: Path) -> None:
    recs = [r for r in records(log) if is_agent(r) and r["config"]["max_calls"] == 30]
    assert [r["turn"] for r in recs] == list(range(11))
    assert all(r["env"] == AGENT_ENV and r["trace_id"] == f"{PID}/0/{r['turn']}/0" and r["seed"] == 0 for r in recs)
    names = [r["call"]["name"] if r["call"] else None for r in recs]
    assert names == ["list_files", "read_file", "write_file", "run", "run_tests", "edit_file", None, "write_file", "run",
                     "run_tests", "submit"]  # fmt: skip
    by_turn = {r["turn"]: r for r in recs}
    # the call: the action as given (an object as its JSON), parsed
    assert by_turn[2]["action_format"] == "json" and json.loads(by_turn[2]["action"])["name"] == "write_file"
    assert by_turn[2]["call"]["arguments"] == {"path": "main.py", "content": WRONG}
    assert by_turn[5]["action_format"] == "text" and by_turn[5]["action"].startswith("Let me fix")
    assert by_turn[5]["call"]["arguments"] == RIGHT_EDIT
    assert by_turn[6]["call"] is None and "no tool call" in by_turn[6]["tool_error"]
    assert by_turn[6]["observation"]["tool_result"] == by_turn[6]["tool_error"]
    # the result, the run's structured result, the grade
    assert "sum_of_evens" in by_turn[1]["observation"]["tool_result"]
    (run,) = by_turn[3]["executions"]
    assert run["exit_code"] == 0 and "test 1: FAIL" in run["stdout"] and "files" not in run and run["fetched_files"] >= 4
    assert by_turn[3]["observation"]["stdout"] == run["stdout"] and by_turn[3]["execution_time_ms"] == run["execution_time_ms"]
    assert by_turn[0]["executions"] == [] and by_turn[0]["execution_time_ms"] is None
    assert by_turn[4]["reward"] == 0.05 and by_turn[4]["reward_breakdown"]["tier"] == "partial"
    assert [c["status"] for c in by_turn[4]["public_cases"]] == ["failed", "passed", "failed"]
    assert by_turn[4]["graded_program"] == WRONG and by_turn[4]["observation"]["public_passed"] == 1
    last = by_turn[10]
    assert by_turn[9]["reward"] == 0.05 and by_turn[9]["observation"]["public_passed"] == 3  # progress again: the cap
    assert (last["reward"], last["terminated"], last["truncated"], last["budget"]) == (0.9, True, False, None)
    assert last["reward_breakdown"]["tier"] == "all_tests" and last["bonus_paid"] == 0.1
    assert last["config"]["tasks"] == "builtin" and last["config"]["max_calls"] == 30 and "task" not in last
    # the workspace: its digest and the diff against the step before
    assert by_turn[0]["workspace_diff"] == "" and by_turn[1]["workspace_diff"] == ""
    assert "+    return sum(n for n in nums if n % 2)\n" in by_turn[2]["workspace_diff"]
    assert by_turn[5]["workspace_diff"].splitlines()[-2:] == ["-    return sum(n for n in nums if n % 2)",
                                                             "+    return sum(n for n in nums if n % 2 == 0)"]  # fmt: skip
    made = by_turn[8]["workspace_diff"]
    assert "Binary files /dev/null and b/blob.bin differ (0 -> 256 bytes)\n" in made
    assert "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n" in made
    assert "\\x" not in made and "\x00" not in made  # named, not dumped
    assert by_turn[8]["workspace"]["files"] == 6 and last["workspace"] == by_turn[9]["workspace"]
    # the other episodes: out of tool calls (its own label), and CodeExec-v0's record unchanged
    short = [r for r in records(log) if is_agent(r) and r["config"]["max_calls"] == 2]
    assert short[-1]["budget"] == "tool_calls" and short[-1]["graded_program"] == "def sum_of_evens(nums):\n    return 0\n"
    (exec_rec,) = [r for r in records(log) if not is_agent(r)]
    assert "env" not in exec_rec and exec_rec["config"]["max_turns"] == 1


def test_records_are_bounded(tmp_path: Path) -> None:
    """A run that floods its output, a long write and a long file: every text of the record beyond
    the call itself keeps its head and tail, with the whole's size and SHA-256."""
    import hashlib

    env = CodeAgentEnv("builtin", executor=get_sandbox("process"), log_dir=tmp_path, log_text_bytes=1024,
                       max_call_chars=1 << 20)  # fmt: skip
    env.reset(options={"problem_id": PID})
    big = "".join(f"line {i}\n" for i in range(5_000))  # 48 KB: diffed (at most 64 KiB)
    call(env, "write_file", path="big.txt", content=big)
    call(env, "write_file", path="flood.py", content="import sys\nprint('o' * 3_000_000)\nsys.stderr.write('e' * 50_000)\n")
    obs, *_ = call(env, "run", path="flood.py")
    env.close()
    write, _, run = records(tmp_path)
    assert json.loads(write["action"])["arguments"] == json.dumps({"path": "big.txt", "content": big})  # whole: replay needs it
    assert len(json.dumps({k: v for k, v in write.items() if k != "action"})) < 16 << 10  # the rest bounded
    content = clipped(write["call"]["arguments"]["content"])
    assert content is not None and content.bytes == len(big) and content.sha256 == hashlib.sha256(big.encode()).hexdigest()
    diff = clipped(write["workspace_diff"])
    assert diff is not None and diff.bytes > len(big) and len(diff.head.encode()) <= 2048  # 4 x log_text_bytes, halved
    assert len(json.dumps(run)) < 16 << 10
    stdout, stderr = clipped(run["executions"][0]["stdout"]), clipped(run["executions"][0]["stderr"])
    whole = obs["stdout"].encode()  # what the sandbox kept of it: its max_output_bytes
    assert stdout is not None and (stdout.bytes, stdout.sha256) == (len(whole), hashlib.sha256(whole).hexdigest())
    assert stdout.head.startswith("ooo") and run["executions"][0]["stdout_truncated"] and len(whole) < 3_000_000
    assert stderr is not None and stderr.bytes == 50_000
    assert clipped(run["observation"]["stdout"]) == stdout and clipped(run["observation"]["tool_result"]) is not None


def test_workspace_diff() -> None:
    before = {"a.py": b"x = 1\n", "gone.txt": b"bye\n", "img": b"\x89PNG\x00", "same": b"s"}
    after = {"a.py": b"x = 2", "new.txt": b"hi\n", "img": b"\x89PNG\x01", "same": b"s", "big": b"y\n" * 40_000}
    assert workspace_diff(before, after) == (
        "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n\\ No newline at end of file\n"
        "Files /dev/null and b/big differ (0 -> 80000 bytes: too large to diff)\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "Binary files a/img and b/img differ (5 -> 5 bytes)\n"
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hi\n"
    )  # fmt: skip
    assert workspace_diff(after, after) == "" and workspace_diff({}, {"e": b""}) == "Files /dev/null and b/e differ (0 -> 0 bytes)\n"
    assert workspace_digest(before) != workspace_digest({**before, "same": b"t"}) and workspace_digest({}) == workspace_digest({})


def test_log_every_settings_and_copies(tmp_path: Path) -> None:
    env = CodeAgentEnv("builtin", executor="local", log_dir=tmp_path / "log", log_every=2)
    for _ in range(3):
        env.reset(options={"problem_id": PID})
        call(env, "list_files")
    twin = copy.deepcopy(env)  # a copy (a vector env's worker) logs too, into a file of its own
    assert twin.logger is not None and env.logger is not None and twin.logger.path != env.logger.path
    for _ in range(2):
        twin.reset(options={"problem_id": PID})
        call(twin, "list_files")
    env.close()
    twin.close()
    assert sorted(r["episode"] for r in records(tmp_path / "log")) == [0, 2, 4]
    with pytest.raises(ValueError, match="CodeAgent-v0: log_text_bytes: Input should be greater than or equal to 64"):
        CodeAgentEnv("builtin", log_dir=tmp_path, log_text_bytes=10)
    no_log = CodeAgentEnv("builtin")
    assert no_log.logger is None
    no_log.close()


# ----------------------------------------------------------------------------------- replay


@pytest.mark.parametrize("backend", ["process", pytest.param("nsjail", marks=pytest.mark.nsjail)])
def test_a_logged_scripted_episode_replays_with_no_difference(backend: str, tmp_path: Path) -> None:
    sb = get_sandbox(backend)
    env = CodeAgentEnv("builtin", executor=sb, log_dir=tmp_path)
    rewards = scripted(env)
    env.close()
    report = replay(tmp_path, executor=sb)
    assert (report.episodes, report.steps, report.agent_steps) == (1, len(rewards), len(rewards)), report.summary()
    assert report.differences == [] and report.timing_dependent == 0 and report.ok, report.summary()


def test_replay_of_the_mixed_log_matches(log: Path) -> None:
    report = replay(log, executor=get_sandbox("process"))
    assert (report.episodes, report.steps, report.agent_steps) == (3, 14, 13) and report.ok, report.summary()
    assert "of them 13 calls of CodeAgent-v0 episodes" in report.summary()


def test_replay_reports_a_tampered_reward(log: Path, tmp_path: Path) -> None:
    where = tampered(log, tmp_path / "copy", is_call("run_tests", 4), lambda r: r.update(reward=0.0))
    report = replay(tmp_path / "copy", executor=get_sandbox("process"))
    (d,) = report.differences
    assert (d.where, d.logged_reward, d.new_reward, d.logged_tier, d.new_tier, d.note) == (where, 0.0, 0.05, "partial", "partial", "")
    out = cli("replay", str(tmp_path / "copy"))
    assert out.returncode == 1, out.stderr
    assert [x for x in out.stdout.splitlines() if x.startswith("DIFF")] == [f"DIFF {d}"] and "Traceback" not in out.stderr


def test_replay_reports_a_tampered_result_and_workspace(log: Path, tmp_path: Path) -> None:
    def forge(rec: dict[str, Any]) -> None:
        rec["observation"]["tool_result"] = "nothing here"
        rec["workspace"]["sha256"] = "0" * 64

    where = tampered(log, tmp_path / "copy", is_call("read_file"), forge)
    (d,) = replay(tmp_path / "copy", executor=get_sandbox("process")).differences
    assert d.where == where and d.logged_reward == d.new_reward == 0.0 and d.logged_tier == "read_file"
    assert d.note.startswith("tool_result: logged 'nothing here', replayed 'Write `sum_of_evens") and "the workspace after" in d.note
    # a call the log says was another: the replayed episode diverges from there
    where = tampered(log, tmp_path / "other", is_call("edit_file"), lambda r: r.update(action='{"name": "list_files"}'))
    report = replay(tmp_path / "other", executor=get_sandbox("process"))
    assert report.differences[0].where == where and "workspace" in report.differences[0].note
    assert any(d.logged_tier == "all_tests" and d.new_tier == "partial" for d in report.differences)  # submitted unfixed


def test_timing_dependent_steps_are_counted_apart(tmp_path: Path) -> None:
    """The episode's clock (here past at once) and a run past its time limit: counted, not differences."""
    sb = get_sandbox("process")
    clock = CodeAgentEnv("builtin", executor=sb, log_dir=tmp_path / "log", episode_time_s=1e-9)
    clock.reset(options={"problem_id": PID})
    _, r, _, truncated, info = call(clock, "list_files")
    assert (r, truncated, info["budget"]) == (-0.1, True, "episode_time")
    clock.close()
    slow = CodeAgentEnv("builtin", executor=sb, log_dir=tmp_path / "log", call_time_s=1.0)
    slow.reset(options={"problem_id": PID})
    call(slow, "write_file", path="loop.py", content="while True:\n    pass\n")
    assert int(call(slow, "run", path="loop.py")[0]["timeout"]) == 1
    slow.close()
    recs = records(tmp_path / "log")
    assert [outcome(r) for r in recs if r["budget"]] == ["budget_exhausted"]
    assert [agent_label(r) for r in recs if r["observation"]["timeout"]] == ["run"]
    report = replay(tmp_path / "log", executor=sb)
    assert report.timing_dependent == 2 and report.ok and not report.timing_differences, report.summary()
    tampered(tmp_path / "log", tmp_path / "copy", lambda r: r["budget"] == "episode_time", lambda r: r.update(reward=1.0))
    report = replay(tmp_path / "copy", executor=sb)
    assert report.ok and len(report.timing_differences) == 1 and "1 of them differ (not counted)" in report.summary()


def test_a_log_that_cannot_be_replayed_says_where(log: Path, tmp_path: Path) -> None:
    where = tampered(log, tmp_path / "copy", is_call("list_files", 0), lambda r: r["config"].update(max_calls=0))
    with pytest.raises(LogFileError, match=f"{where}: config.max_calls: Input should be greater than or equal to 1"):
        replay(tmp_path / "copy", executor=get_sandbox("process"))
    where = tampered(log, tmp_path / "pid", is_call("list_files", 0), lambda r: r.update(problem_id="builtin/nope"))
    with pytest.raises(LogFileError, match=f"{where}: cannot replay: CodeAgent-v0: unknown problem_id 'builtin/nope'"):
        replay(tmp_path / "pid", executor=get_sandbox("process"))
    out = cli("replay", str(tmp_path / "pid"))
    assert out.returncode == 2 and f"{where}: cannot replay" in out.stderr and "Traceback" not in out.stderr


def test_an_inline_task_set_is_replayed_from_the_records(tmp_path: Path) -> None:
    from registry import load

    (task,) = [t for t in load("builtin") if t.problem_id == PID]
    sb = get_sandbox("process")
    env = CodeAgentEnv([task], executor=sb, log_dir=tmp_path)
    env.reset()
    call(env, "edit_file", path="main.py", old="raise NotImplementedError", new="return sum(n for n in args[0] if n % 2 == 0)")
    assert call(env, "submit")[1] == 1.0
    env.close()
    assert all(r["config"]["tasks"] == "<inline>" and r["task"]["problem_id"] == PID for r in records(tmp_path))
    report = replay(tmp_path, executor=sb)
    assert (report.steps, report.differences) == (2, []), report.summary()


# ------------------------------------------------------------------------------ audit, stats


def test_audit_lists_the_calls(log: Path) -> None:
    entries = audit(log, top=3)
    assert sorted((e.ret, e.steps) for e in entries) == [(0.4, 2), (1.0, 1), (1.0, 11)]
    agent = next(e for e in entries if e.steps == 11)
    assert [r["turn"] for r in agent.calls] == list(range(11))
    text = agent.render()
    assert text.startswith(f"{PID} (CodeAgent-v0, episode 0)  return 1 over 11 tool calls\n  all_tests: every public")
    for line in ("[0] list_files()  reward 0.0", "[1] read_file(path='PROMPT.md')  reward 0.0",
                 "[4] run_tests()  reward 0.05", "    1/3 public tests passed (partial)",
                 "[5] edit_file(path='main.py', old='n % 2', new='n % 2 == 0')  reward 0.0",
                 "    +    return sum(n for n in nums if n % 2 == 0)", "[6] (unreadable call) I think I am done?  reward 0.0",
                 "    Binary files /dev/null and b/blob.bin differ (0 -> 256 bytes)", "[10] submit()  reward 0.9",
                 "--- main.py as graded (call 10) ---", "--- public tests: 3/3 passed ---", "--- hidden tests: 5/5 passed ---"):  # fmt: skip
        assert line in text.splitlines(), (line, text)
    short = next(e for e in entries if e.steps == 2).render()
    assert "partial (the tool calls ran out): " in short and "budget tool_calls" in short
    assert "--- main.py as graded (call 1) ---\ndef sum_of_evens(nums):\n    return 0" in short
    exec_entry = next(e for e in entries if e.steps == 1).render()  # CodeExec-v0's entry as before
    assert "--- code ---" in exec_entry and "--- calls ---" not in exec_entry
    out = cli("audit", str(log), "--top", "3")
    assert out.returncode == 0 and out.stdout == format_audit(entries) + "\n", out.stderr


def test_stats_count_agent_episodes_and_their_calls(log: Path) -> None:
    st = stats(log)
    assert (st.episodes, st.steps, st.agent_episodes, st.tool_errors) == (3, 14, 2, 1)
    assert dict(st.outcomes) == {"all_tests": 2, "partial": 1} and st.turns_exhausted == 1
    assert st.tools == {"list_files": 2, "read_file": 1, "write_file": 3, "run": 2, "run_tests": 2, "edit_file": 1,
                        "unreadable call": 1, "submit": 1}  # fmt: skip
    assert sorted(st.returns) == [0.4, 1.0, 1.0]
    assert all(turns_exhausted(e.last.rec) == (e.last.rec.get("budget") == "tool_calls") for e in episodes(log))
    out = cli("stats", str(log))
    assert out.returncode == 0, out.stderr
    assert "tool calls of CodeAgent-v0 episodes (2 finished): 13, 1 answered with an error" in out.stdout
    assert "write_file 3" in out.stdout and "pass rate: 66.7% all tests (2/3)" in out.stdout
    assert "(the turns or tool calls ran out in 1 of them: each scored its last program's tier" in out.stdout
