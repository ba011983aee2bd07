"""``CodeAgent-v0``: tool calls over a private workspace, on the real sandbox (both backends). The
scripted agent lists, reads, writes a wrong program, runs the tests, fixes it and submits; the
calls come in every format models emit; paths that leave the workspace, links, special files and
oversized writes are refused or never come back; two episodes never see each other's files; the
hidden tests never enter the workspace; the budgets end the episode by the ladder's rules."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import code_env  # noqa: F401  (registers the envs)
from code_env.agent import CodeAgentEnv, ToolError, parse_tool_call
from sandbox import Sandbox

from ._nobody import ROOT, as_user, can_drop
from .conftest import BACKENDS, get_sandbox, watched

PID = "builtin/sum-of-evens"
WRONG = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2)\n"


@pytest.fixture(params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    yield from watched(get_sandbox(request.param))


def make(sb: Sandbox, **kw: Any) -> CodeAgentEnv:
    env = CodeAgentEnv("builtin", executor=sb, **kw)
    env.reset(seed=0, options={"problem_id": PID})
    return env


def call(env: CodeAgentEnv, name: str, **args: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
    return env.step({"name": name, "arguments": json.dumps(args)})


def test_a_scripted_agent_reads_edits_tests_fixes_and_submits(sb: Sandbox) -> None:
    env = make(sb)
    rewards = []
    obs, r, *_ = call(env, "list_files")
    assert obs["tool_result"].splitlines()[1].startswith("main.py") and "test_public.py" in obs["tool_result"]
    obs, r, *_ = call(env, "read_file", path="PROMPT.md")
    assert "sum_of_evens" in obs["tool_result"]
    obs, r, *_ = call(env, "write_file", path="main.py", content=WRONG)
    obs, r, _, _, info = call(env, "run", path="test_public.py")
    assert info["tool_error"] is None and "test 1: FAIL" in obs["stdout"] and int(obs["exit_code"]) == 0, obs
    obs, r, _, _, info = call(env, "run_tests")
    rewards.append(r)
    assert "1/3 public tests passed" in obs["tool_result"] and int(obs["public_passed"]) == 1
    obs, r, *_ = call(env, "edit_file", path="main.py", old="n % 2", new="n % 2 == 0")
    obs, r, _, _, info = call(env, "run_tests")
    rewards.append(r)
    assert int(obs["public_passed"]) == 3 and r == 0.05  # progress: the process bonus, an advance
    obs, r, terminated, truncated, info = call(env, "submit")
    rewards.append(r)
    assert (terminated, truncated, info["reward_breakdown"]["tier"]) == (True, False, "all_tests")
    assert sum(rewards) == pytest.approx(1.0)  # the advance is taken back: a solved episode returns its tier
    with pytest.raises(gym.error.ResetNeeded):
        call(env, "list_files")


@pytest.mark.parametrize("action", [
    {"name": "list_files", "arguments": "{}"},
    {"name": "list_files", "arguments": {}},
    {"name": "list_files"},
    {"type": "function", "function": {"name": "list_files", "arguments": "{}"}},
    '{"name": "list_files", "arguments": {}}',
    'I will look around.\n<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
    '```json\n{"name": "list_files", "arguments": {}}\n```',
])  # fmt: skip
def test_a_call_in_any_format_models_emit_is_read(action: Any) -> None:
    assert parse_tool_call(action) == ("list_files", {})


@pytest.mark.parametrize(("action", "message"), [
    ("just text", "no tool call"),
    ("<tool_call>{not json}</tool_call>", "no tool call"),
    ({"name": "rm_rf", "arguments": {}}, "unknown tool 'rm_rf'"),
    ({"arguments": {}}, "no name"),
    ({"name": "read_file", "arguments": "{"}, "not JSON"),
    ({"name": "read_file", "arguments": "[1]"}, "must be a JSON object"),
    (42, "got int"),
])  # fmt: skip
def test_a_malformed_call_is_an_error_observation_never_an_exception(sb: Sandbox, action: Any, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        parse_tool_call(action)
    env = make(sb)
    obs, r, terminated, truncated, info = env.step(action)
    assert message in info["tool_error"] and message in obs["tool_result"] and (r, terminated, truncated) == (0.0, False, False)


@pytest.mark.parametrize(("args", "message"), [
    ({"path": "../x", "content": "a"}, "'..'"),
    ({"path": "/etc/passwd", "content": "a"}, "relative path"),
    ({"path": "a//b", "content": "a"}, "empty step"),
    ({"path": "a\0b", "content": "a"}, "printable"),
    ({"path": "solution.py", "content": "a"}, "reserved"),
    ({"path": "big.txt", "content": "x" * 5000}, "over the 4096 a file may hold"),
    ({"path": "main.py/x", "content": "a"}, "both a file and a directory"),
    ({"path": "x"}, "missing argument 'content'"),
    ({"path": 3, "content": "a"}, "argument 'path' must be a string"),
])  # fmt: skip
def test_writes_outside_the_workspace_or_past_its_limits_are_refused(sb: Sandbox, args: dict[str, Any], message: str) -> None:
    env = make(sb, max_file_bytes=4096)
    before = dict(env.workspace)
    _obs, _, _, _, info = env.step({"name": "write_file", "arguments": args})
    assert info["tool_error"] is not None and message in info["tool_error"], info
    assert env.workspace == before


def test_a_run_brings_back_regular_files_only_and_within_the_limits(sb: Sandbox) -> None:
    env = make(sb, max_files=8)
    code = ("import os\nopen('made.txt', 'w').write('made')\nos.symlink('/etc/passwd', 'passwd')\n"
            "os.symlink('/', 'root')\nos.mkfifo('fifo')\nos.link('made.txt', 'hard.txt')\n")  # fmt: skip
    call(env, "write_file", path="make.py", content=code)
    obs, *_ = call(env, "run", path="make.py")
    assert int(obs["exit_code"]) == 0, obs["stderr"]
    # the hard link is a regular file of the run's own: its bytes come back, as a copy
    assert set(env.workspace) == {"PROMPT.md", "main.py", "test_public.py", "make.py", "made.txt", "hard.txt"}
    assert env.workspace["made.txt"] == env.workspace["hard.txt"] == b"made"
    many = "for i in range(20):\n    open(f'f{i}', 'w').write('x')\nprint('ok')"
    call(env, "write_file", path="many.py", content=many)
    obs, _, _, _, _info = call(env, "run", path="many.py")
    assert obs["stdout"] == "ok\n" and "over its 8: the run's changes to the workspace were dropped" in obs["tool_result"]
    assert "f0" not in env.workspace


def test_a_run_of_other_languages_and_commands(sb: Sandbox) -> None:
    env = make(sb)
    call(env, "write_file", path="hello.sh", content="echo hi > from_bash.txt\ncat main.py | head -c 3\n")
    obs, _, _, _, info = call(env, "run", command="bash hello.sh")
    if info["tool_error"] and "cannot run" in info["tool_error"]:
        pytest.skip(info["tool_error"])
    assert info["tool_error"] is None and int(obs["exit_code"]) == 0, obs["tool_result"]
    assert env.workspace["from_bash.txt"] == b"hi\n" and "hello.sh" in env.workspace and "main.sh" not in env.workspace
    obs, _, _, _, info = call(env, "run", command="python test_public.py")
    assert "test 1:" in obs["stdout"], obs["tool_result"]
    for args, message in (({"command": "rm -rf ."}, "a runtime and a file"), ({"command": "cobol x.cob"}, "unknown language"),
                          ({"path": "PROMPT.md"}, "no extension of a language"), ({"path": "nope.py"}, "no file")):  # fmt: skip
        obs, _, _, _, info = call(env, "run", **args)
        assert info["tool_error"] is not None and message in info["tool_error"], info


def test_a_compiled_program_runs_and_a_failed_compile_keeps_the_workspace(sb: Sandbox) -> None:
    env = make(sb)
    call(env, "write_file", path="prog.cpp", content='#include <cstdio>\nint main() { std::puts("cpp"); }\n')
    obs, _, _, _, info = call(env, "run", path="prog.cpp")
    if info["tool_error"] and "cannot run" in info["tool_error"]:
        pytest.skip(info["tool_error"])
    assert obs["stdout"] == "cpp\n" and not any(p.startswith("out/") for p in env.workspace), obs["tool_result"]
    before = dict(env.workspace)
    call(env, "write_file", path="bad.cpp", content="int main( {")
    obs, _, _, _, info = call(env, "run", path="bad.cpp")
    assert "compile failed" in obs["tool_result"] and "bad.cpp" in env.workspace
    assert {k: v for k, v in env.workspace.items() if k != "bad.cpp"} == before


def test_the_hidden_tests_never_enter_the_workspace(sb: Sandbox) -> None:
    env = make(sb)
    task = env.task
    assert task is not None and task.hidden_tests
    blob = b"\n".join(env.workspace.values()).decode()
    for t in task.hidden_tests:
        assert json.dumps(t.args) not in blob
    listing = "import os\nfor d, _, fs in os.walk('.'):\n    print(d, sorted(fs))"
    call(env, "write_file", path="ls.py", content=listing)
    obs, *_ = call(env, "run", path="ls.py")
    assert obs["stdout"].splitlines() == [". ['PROMPT.md', 'ls.py', 'main.py', 'solution.py', 'test_public.py']"]


def test_two_episodes_never_see_each_others_workspace(sb: Sandbox) -> None:
    a, b = make(sb), make(sb)
    call(a, "write_file", path="secret.txt", content="a's secret")
    probe = "import os\nprint(sorted(os.listdir('.')))\nprint(os.path.exists('secret.txt'))"
    call(b, "write_file", path="probe.py", content=probe)
    obs, *_ = call(b, "run", path="probe.py")
    assert obs["stdout"].splitlines()[1] == "False" and "secret.txt" not in b.workspace
    call(a, "write_file", path="probe.py", content=probe)
    assert call(a, "run", path="probe.py")[0]["stdout"].splitlines()[1] == "True"
    a.close()
    assert a.workspace == {}  # gone with the episode


def test_the_calls_budget_grades_main_as_submitted(sb: Sandbox) -> None:
    env = make(sb, max_calls=2)
    call(env, "write_file", path="main.py", content=WRONG)
    _obs, r, terminated, truncated, info = call(env, "list_files")
    assert (terminated, truncated, info["budget"]) == (False, True, "tool_calls")
    assert info["reward_breakdown"]["tier"] == "partial" and r == pytest.approx(0.2)  # 0.6 * 1/3: its tier


def test_a_call_too_long_ends_the_episode_below_a_failure(sb: Sandbox) -> None:
    env = make(sb, max_call_chars=100)
    _obs, r, terminated, truncated, info = call(env, "write_file", path="x.txt", content="x" * 200)
    assert (terminated, truncated, info["budget"], r) == (False, True, "call_chars", -0.1)


def test_a_run_with_stdin_no_sandbox_takes_is_an_error_observation(sb: Sandbox) -> None:
    env = make(sb)
    _obs, _r, terminated, truncated, info = call(env, "run", path="main.py", stdin="\udc80")
    assert "cannot be encoded as UTF-8" in info["tool_error"] and not (terminated or truncated)


def test_a_run_past_its_time_is_that_calls_timeout(sb: Sandbox) -> None:
    env = make(sb, call_time_s=1.0)
    call(env, "write_file", path="loop.py", content="while True:\n    pass\n")
    obs, _r, terminated, truncated, _info = call(env, "run", path="loop.py")
    assert int(obs["timeout"]) == 1 and "timed out" in obs["tool_result"] and not (terminated or truncated)


def test_the_python_tool_keeps_its_variables_through_the_episode_and_not_past_it(sb: Sandbox) -> None:
    env = make(sb, interpreter=True)
    assert [t["function"]["name"] for t in env.tools][-1] == "python"
    obs, *_ = call(env, "python", code="x = 6 * 7")
    obs, _, _, _, info = call(env, "python", code="x + 1")
    assert info["tool_error"] is None and "43" in obs["tool_result"], obs["tool_result"]
    env.reset(seed=0, options={"problem_id": PID})
    obs, *_ = call(env, "python", code="x")
    assert "NameError" in obs["tool_result"]
    plain = make(sb)
    assert "no interpreter" in call(plain, "python", code="1")[4]["tool_error"]
    env.close()


def scripted_episode(backend: str) -> dict[str, Any]:
    """The scripted agent's episode on a sandbox of ``backend`` of its own, and what a run of
    another episode saw of the first's workspace (as a normal user: ``as_user``)."""
    with Sandbox(backend=backend, workers=1) as box:  # type: ignore[arg-type]
        env, other = CodeAgentEnv("builtin", executor=box), CodeAgentEnv("builtin", executor=box)
        env.reset(seed=0, options={"problem_id": PID})
        other.reset(seed=0, options={"problem_id": PID})
        rewards = [call(env, "write_file", path="main.py", content=WRONG)[1], call(env, "run_tests")[1],
                   call(env, "edit_file", path="main.py", old="n % 2", new="n % 2 == 0")[1], call(env, "run_tests")[1]]  # fmt: skip
        call(env, "write_file", path="mine.txt", content="first episode's")
        call(other, "write_file", path="probe.py", content="import os\nprint(os.path.exists('mine.txt'))")
        seen = call(other, "run", path="probe.py")[0]["stdout"]
        _, r, terminated, _, info = call(env, "submit")
    return {"rewards": [*rewards, r], "terminated": terminated, "tier": info["reward_breakdown"]["tier"], "seen": seen}


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="already a normal user: the tests above run as this user")
@pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_scripted_episode_as_a_normal_user(backend: str, nobody_tmp: Path) -> None:
    code = f"import json\nfrom tests.test_agent import scripted_episode\nprint(json.dumps(scripted_episode({backend!r})))"
    out = as_user([sys.executable, "-c", code], tmp=nobody_tmp, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["terminated"], got["tier"], got["seen"]) == (True, "all_tests", "False\n"), got
    assert sum(got["rewards"]) == pytest.approx(1.0)


def test_it_passes_gymnasiums_env_checker() -> None:
    env = gym.make("CodeAgent-v0")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
