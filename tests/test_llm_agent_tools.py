"""The LLM agent baseline on ``CodeAgent-v0`` through OpenAI function calling: the real ``openai``
client against the loopback server (``tests/_openai_server.py``) made to emit tool calls, the real
sandbox behind every call, and offline replays with the server stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import code_env  # noqa: F401  (registers the envs)
import registry
from baselines.llm_agent import (
    DEFAULT_AGENT_SYSTEM_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    RECORD_FORMAT,
    RECORD_NAME,
    RECORD_VERSION,
    Endpoint,
    LiveTransport,
    LLMAgentSettings,
    ReplayTransport,
    parse_reply,
    read_record,
    run_sample,
)
from baselines.llm_agent import main as agent_main
from code_env.agent import TOOLS

from ._openai_server import KEY, OpenAIServer, Reply, task_of, tool_call
from .conftest import get_sandbox

BUILTIN = registry.load("builtin")
EVENS = registry.get(BUILTIN, "builtin/sum-of-evens")
FIZZ = registry.get(BUILTIN, "builtin/fizzbuzz-line")  # a stdin/stdout task
KEY_VAR = "LLM_AGENT_TOOLS_TEST_KEY"
NONDETERMINISTIC = ("mode", "record", "timing")
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in (EVENS, FIZZ)), encoding="utf-8")
    return path


def replies_so_far(body: dict[str, Any]) -> int:
    """How many replies of the model the conversation holds (0 for its first request)."""
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def calls(*items: dict[str, Any], content: str | None = None) -> Reply:
    return Reply(content=content, tool_calls=list(items), finish_reason="tool_calls")


def solver(body: dict[str, Any], attempt: int) -> Reply:
    """list_files; write_file of the reference solution and run_tests in one reply; submit."""
    task = task_of(body, BUILTIN)
    n = replies_so_far(body)
    if n == 0:
        return calls(tool_call("list_files", call_id="call_ls"))
    if n == 1:
        return calls(tool_call("write_file", {"path": "main.py", "content": task.reference_solution}, call_id="call_w"),
                     tool_call("run_tests", call_id="call_t"), content="Writing the solution, then testing it.")  # fmt: skip
    return calls(tool_call("submit", call_id="call_s"))


def cli(out: Path, url: str | None, *extra: str, **settings: Any) -> int:
    base: dict[str, Any] = {"model": "test-model", "api_key": "${" + KEY_VAR + "}", "n_samples": 1, "k": [1],
                            "timeout_s": 10, "max_retries": 0, "concurrency": 2, "max_tokens": 256}  # fmt: skip
    if url is not None:
        base["base_url"] = url
    argv = ["--out", str(out), "--set", "env.backend=process", "--env", "CodeAgent-v0"]
    for k, v in (base | settings).items():
        argv += ["--set", f"llm_agent.{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return agent_main([*argv, *extra])


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return data


def samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------- episodes


def test_a_full_episode_of_function_calls_reaches_reward_1(tmp_path: Path, task_file: Path) -> None:
    with OpenAIServer(solver) as server:
        assert cli(tmp_path / "run", server.url, task_set=str(task_file)) == 0
        bodies = list(server.requests)
    s = summary(tmp_path / "run")
    assert s["env"] == "CodeAgent-v0" and s["pass@1"] == 1.0 and s["reward_mean"] == 1.0, s
    assert s["tiers"] == {"all_tests": 2} and s["replies"]["ok"] == 6 and s["tool_calls_mean"] == 4 and s["tool_errors"] == 0
    for r in samples(tmp_path / "run"):
        assert (r["turns"], r["tool_calls"], r["tool_errors"], r["episode_return"], r["solved_turn"]) == (3, 4, 0, 1.0, 3)
    assert len(bodies) == 6 and all(b["tools"] == TOOLS for b in bodies)  # every request offers the env's tools
    last = next(b for b in bodies if task_of(b, BUILTIN) is EVENS and replies_so_far(b) == 2)
    msgs = last["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    assert msgs[0]["content"] == DEFAULT_AGENT_SYSTEM_PROMPT
    assert EVENS.prompt.strip() in msgs[1]["content"] and "Workspace: PROMPT.md, main.py, test_public.py" in msgs[1]["content"]
    assert msgs[2]["tool_calls"] == [tool_call("list_files", call_id="call_ls")] and msgs[2]["content"] is None
    assert msgs[3]["tool_call_id"] == "call_ls" and "main.py (" in msgs[3]["content"] and "test_public.py" in msgs[3]["content"]
    assert [c["id"] for c in msgs[4]["tool_calls"]] == ["call_w", "call_t"]
    assert msgs[4]["content"] == "Writing the solution, then testing it."
    assert (msgs[5]["tool_call_id"], msgs[6]["tool_call_id"]) == ("call_w", "call_t")
    assert msgs[5]["content"].startswith("wrote main.py (") and msgs[6]["content"].startswith("3/3 public tests passed")


def test_a_malformed_call_is_an_error_observation_and_the_episode_goes_on(tmp_path: Path) -> None:
    """Arguments that are not JSON, an unknown tool (with no id), a reply with no call at all and a
    call written in the text: each is one step; the model then solves the task."""

    def script(body: dict[str, Any], attempt: int) -> Reply:
        n = replies_so_far(body)
        if n == 0:
            bad = {"type": "function", "function": {"name": "rm_rf", "arguments": "{}"}}  # no id
            return calls(tool_call("write_file", '{"path": "main.py", "content": ', call_id="call_bad"), bad)
        if n == 1:
            return Reply(content="I believe the task is done.")
        if n == 2:
            text = json.dumps({"name": "write_file", "arguments": {"path": "main.py", "content": EVENS.reference_solution}})
            return Reply(content=f"Let me write it.\n<tool_call>\n{text}\n</tool_call>")
        return calls(tool_call("run_tests", call_id="t"), tool_call("submit", call_id="s"), tool_call("list_files", call_id="x"))

    with OpenAIServer(script) as server:
        assert cli(tmp_path / "run", server.url, task_set="builtin", n_tasks=1) == 0
        bodies = list(server.requests)
    (r,) = samples(tmp_path / "run")
    # 2 calls, a reply with none, a text call, run_tests and submit (the call after submit is not played)
    assert (r["passed"], r["tier"], r["episode_return"], r["tool_calls"], r["tool_errors"]) == (True, "all_tests", 1.0, 6, 3), r
    assert r["replies"] == ["ok"] * 4 and len(bodies) == 4
    msgs = bodies[-1]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant", "user", "assistant", "user"]
    assert msgs[3]["tool_call_id"] == "call_bad" and "write_file: the arguments are not JSON" in msgs[3]["content"]
    assert msgs[4]["tool_call_id"] == "call_1_1" and msgs[2]["tool_calls"][1]["id"] == "call_1_1"  # an id is given
    assert "unknown tool 'rm_rf'" in msgs[4]["content"]
    assert msgs[6]["content"].startswith("Your reply called no tool (the action is no tool call")
    assert all(name in msgs[6]["content"] for name in TOOL_NAMES)
    assert msgs[8]["content"].startswith("Result of write_file:\nwrote main.py (")


def test_replies_without_a_call_count_against_the_budget(tmp_path: Path) -> None:
    """Out of tool calls (text, a failed request, an empty reply): main.py is graded as it stands."""

    def script(body: dict[str, Any], attempt: int) -> Reply:
        n = replies_so_far(body) + sum(1 for m in body["messages"] if m["role"] == "user" and "request failed" in m["content"])
        return [Reply(content="Thinking about it."), Reply(status=500), Reply(content=None)][n]

    with OpenAIServer(script) as server:
        assert cli(tmp_path / "run", server.url, task_set="builtin", n_tasks=1, max_calls=3) == 0
        bodies = list(server.requests)
    (r,) = samples(tmp_path / "run")
    assert r["replies"] == ["ok", "api_error", "empty"] and (r["tool_calls"], r["tool_errors"]) == (3, 3)
    assert r["turns_exhausted"] and not r["passed"] and r["tier"] not in ("budget_exhausted", "unknown", "all_tests"), r
    assert "the request failed: HTTP 500" in bodies[2]["messages"][-1]["content"]
    s = summary(tmp_path / "run")
    assert s["turns_exhausted"] == 1 and s["api_errors"] == 1 and s["requests"] == 3


def test_a_replay_gives_identical_observations_and_rewards(tmp_path: Path) -> None:
    """One episode live (recorded), then from the record with the server stopped: every step's
    observation and reward is the same."""

    def script(body: dict[str, Any], attempt: int) -> Reply:
        n = replies_so_far(body)
        if n == 0:
            return calls(tool_call("list_files", call_id="ls"))
        if n == 1:  # a wrong program, its tests, a malformed call; then the fix, the tests, submit
            return calls(tool_call("write_file", {"path": "main.py", "content": "def sum_of_evens(nums):\n    return -1\n"}, call_id="w"),
                         tool_call("run_tests", call_id="t"), tool_call("read_file", "{oops", call_id="r"))  # fmt: skip
        if n == 2:
            return calls(tool_call("edit_file", {"path": "main.py", "old": "return -1",
                                                 "new": "return sum(n for n in nums if n % 2 == 0)"}, call_id="e"))  # fmt: skip
        return calls(tool_call("run_tests" if n == 3 else "submit", call_id=f"c{n}"))

    settings = LLMAgentSettings(env="CodeAgent-v0", temperature=0.0, max_tokens=64, max_calls=12)
    record = tmp_path / RECORD_NAME

    def episode(transport: Any) -> tuple[list[tuple[dict[str, Any], float]], Any]:
        env = Recorder(gym.make("CodeAgent-v0", tasks=[EVENS], executor=get_sandbox("process"), max_calls=settings.max_calls))
        try:
            result = run_sample(env, EVENS, 0, settings, "test-model", transport)
        finally:
            env.close()
        return env.steps, result

    with OpenAIServer(script) as server, open(record, "w", encoding="utf-8") as f:
        f.write(json.dumps({"type": "header", "format": RECORD_FORMAT, "version": RECORD_VERSION}) + "\n")
        live_transport = LiveTransport(Endpoint(server.url, "test-model", f"${KEY_VAR}", KEY), settings, f)
        try:
            live, live_result = episode(live_transport)
        finally:
            live_transport.close()
        n_requests = len(server.requests)
    header, recorded = read_record(record)
    replayed, replay_result = episode(ReplayTransport(record, header, recorded))
    assert len(recorded) == n_requests == live_result.turns == 5
    assert live_result == replay_result and live_result.passed and live_result.tool_errors == 1
    assert len(live) == len(replayed) == 1 + 7  # the reset, then 7 calls
    for (a, ra), (b, rb) in zip(live, replayed, strict=True):
        assert ra == rb and a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    assert [r for _, r in live] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.95]  # the process bonus, then the rest of the tier
    assert "0/3 public tests passed" in live[3][0]["tool_result"]
    assert "read_file: the arguments are not JSON" in live[4][0]["tool_result"]


class Recorder(gym.Wrapper[dict[str, Any], Any, dict[str, Any], Any]):
    """Keeps every observation and reward (the reset's with reward 0)."""

    def __init__(self, env: gym.Env[dict[str, Any], Any]) -> None:
        super().__init__(env)
        self.steps: list[tuple[dict[str, Any], float]] = []

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.steps.append((obs, 0.0))
        return obs, info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append((obs, float(reward)))
        return obs, float(reward), terminated, truncated, info


def test_the_cli_replay_with_the_server_stopped_gives_identical_results(tmp_path: Path, task_file: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    live = tmp_path / "live"
    with OpenAIServer(solver) as server:
        assert cli(live, server.url, task_set=str(task_file), n_samples=2, k=[1, 2]) == 0
    monkeypatch.delenv(KEY_VAR)
    replay = tmp_path / "replay"
    assert agent_main(["--out", str(replay), "--replay", str(live / RECORD_NAME)]) == 0
    a, b = summary(live), summary(replay)
    assert {k: v for k, v in a.items() if k not in NONDETERMINISTIC} == {k: v for k, v in b.items() if k not in NONDETERMINISTIC}
    assert (live / "samples.jsonl").read_text() == (replay / "samples.jsonl").read_text()
    assert b["env"] == "CodeAgent-v0" and b["pass@2"] == 1.0 and b["tool_calls_mean"] == 4
    # the record's requests are CodeAgent-v0's: replaying them as CodeExec-v0 finds none of them
    assert agent_main(["--out", str(tmp_path / "r2"), "--replay", str(live / RECORD_NAME), "--env", "CodeExec-v0"]) == 2


# ------------------------------------------------------------------------------ replies, settings


@pytest.mark.parametrize(("message", "status", "n_calls"), [
    ({"content": None, "tool_calls": [tool_call("submit")]}, "ok", 1),
    ({"content": "text", "tool_calls": [{"id": "x"}, 3]}, "ok", 2),  # malformed calls are the env's to judge
    ({"content": None, "tool_calls": []}, "empty", 0),
    ({"content": None, "tool_calls": {"name": "submit"}}, "malformed", 0),
], ids=["call", "malformed-calls", "no-calls", "calls-not-a-list"])  # fmt: skip
def test_a_reply_with_function_calls_is_read(message: dict[str, Any], status: str, n_calls: int) -> None:
    reply = parse_reply(json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]}))
    assert (reply.status, len(reply.tool_calls)) == (status, n_calls)


def test_the_agent_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert LLMAgentSettings(env="CodeAgent-v0").system_prompt == DEFAULT_AGENT_SYSTEM_PROMPT
    assert LLMAgentSettings().system_prompt == DEFAULT_SYSTEM_PROMPT
    assert LLMAgentSettings(env="CodeAgent-v0", system_prompt="mine").system_prompt == "mine"
    assert cli(tmp_path / "run", "http://127.0.0.1:9/v1", max_turns=3) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("llm_agent: error: ") and len(err.splitlines()) == 1
    assert "llm_agent.max_turns: max_turns is CodeExec-v0's; a CodeAgent-v0 episode is bounded by llm_agent.max_calls" in err
    assert not (tmp_path / "run").exists()
