"""The optional LLM summary in ``CodeExec-v0``'s observation (``include_llm_summary``), with the real
``openai`` client against a loopback OpenAI-compatible server this test starts: off by default;
what the model is asked (the agent's own view: never a hidden test); the summary in the
observation, ``render`` and the log; its own model id and token budget; record, then replay
offline bit for bit; an outage, a refused key, an unknown model; a copy of the env."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import code_env  # noqa: F401 - registers CodeExec-v0
import registry
from code_env.summary import SummaryError

from ._openai_server import OpenAIServer, Reply

HIDDEN_IN, HIDDEN_OUT = "hidden-sentinel-5161", "HIDDEN-SENTINEL-5161"
TASK = registry.Task(
    problem_id="inline/shout",
    prompt="Write shout(s) that returns s upper-cased.",
    kind="function",
    entry_point="shout",
    reference_solution="def shout(s):\n    return s.upper()\n",
    public_tests=[registry.TestCase(args=["abc"], expected="ABC"), registry.TestCase(args=["x y"], expected="X Y")],
    hidden_tests=[registry.TestCase(args=[HIDDEN_IN], expected=HIDDEN_OUT)],
)
WRONG = "def shout(s):\n    print('trying', s)\n    return s.lower()\n"
RIGHT = TASK.reference_solution
SAID = "The function returns lower case; both public tests failed."


def summary_options(server: OpenAIServer | str, tmp_path: Path, **kw: Any) -> dict[str, Any]:
    llm = {"base_url": server if isinstance(server, str) else server.url, "model": "agent-model", "api_key": "${SUMMARY_TEST_KEY}", "max_retries": 0, "timeout_s": 10}
    cfg = {"llm": llm, "model": "summary-model", "max_tokens": 48, "cache_path": str(tmp_path / "summary.jsonl")} | kw
    return {"include_llm_summary": True, "llm_summary": cfg, "max_turns": 3}


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    from ._openai_server import KEY

    monkeypatch.setenv("SUMMARY_TEST_KEY", KEY)


@pytest.fixture
def server() -> Any:
    with OpenAIServer(lambda body, attempt: Reply(content=SAID)) as srv:
        yield srv


def test_off_by_default_and_refused_without_its_config() -> None:
    env = gym.make("CodeExec-v0", tasks=[TASK])
    obs, _ = env.reset(seed=0)
    assert "llm_summary" not in obs and "llm_summary" not in env.observation_space.spaces
    obs, *_, info = env.step(WRONG)
    assert "llm_summary" not in obs and "llm_summary_error" not in info
    env.close()
    with pytest.raises(ValueError, match="include_llm_summary needs llm_summary: its \\[llm\\] channel"):
        gym.make("CodeExec-v0", tasks=[TASK], include_llm_summary=True)
    with pytest.raises(ValueError, match="needs a cache_path"):
        gym.make("CodeExec-v0", tasks=[TASK], include_llm_summary=True,
                 llm_summary={"llm": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}})  # fmt: skip


def test_the_summary_of_a_run_in_the_observation_render_and_log(server: OpenAIServer, tmp_path: Path) -> None:
    env = gym.make("CodeExec-v0", tasks=[TASK], render_mode="ansi", log_dir=str(tmp_path / "log"), **summary_options(server, tmp_path))
    obs, _ = env.reset(seed=0)
    assert obs["llm_summary"] == "" and env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step(WRONG)
    assert not (terminated or truncated) and obs["llm_summary"] == SAID and info["llm_summary_error"] is None
    assert env.observation_space.contains(obs)
    assert "summary:" in env.render() and SAID in env.render()
    (req,) = server.requests
    assert req["model"] == "summary-model" and req["max_tokens"] == 48 and req["temperature"] == 0
    user = req["messages"][1]["content"]
    # the agent's own view: its program, its output, the public tests' feedback ...
    assert WRONG.strip() in user and "trying abc" in user and "0 of 2 public tests passed" in user and 'ABC' in user
    # ... and nothing of the hidden test, whose run the grader keeps to itself
    obs, reward, terminated, truncated, info = env.step(RIGHT)
    assert terminated and reward == 1.0
    assert obs["llm_summary"] == "" and len(server.requests) == 1  # the last step: nobody would read it
    for body in server.requests:
        assert HIDDEN_IN not in json.dumps(body) and HIDDEN_OUT not in json.dumps(body)
    env.close()
    records = [json.loads(line) for p in sorted((tmp_path / "log").glob("*.jsonl")) for line in p.read_text().splitlines()]
    assert [r["llm_summary"]["text"] for r in records] == [SAID, ""]
    assert records[0]["llm_summary"]["key"] and records[0]["llm_summary"]["replayed"] is False


def test_recorded_then_replayed_offline_bit_for_bit(server: OpenAIServer, tmp_path: Path) -> None:
    url = server.url

    def episode(**kw: Any) -> list[str]:
        env = gym.make("CodeExec-v0", tasks=[TASK], **summary_options(url, tmp_path, **kw))
        env.reset(seed=0)
        said = [env.step(WRONG)[0]["llm_summary"], env.step("def shout(s):\n    return s\n")[0]["llm_summary"]]
        env.close()
        return said

    recorded = episode()
    assert recorded == [SAID, SAID] and len(server.requests) == 2
    recording = (tmp_path / "summary.jsonl").read_text()
    server.stop()
    assert episode(mode="replay") == recorded  # the server is gone: answered from the recording
    assert (tmp_path / "summary.jsonl").read_text() == recording  # replay writes nothing
    env = gym.make("CodeExec-v0", tasks=[TASK], **summary_options(url, tmp_path, mode="replay"))
    env.reset(seed=0)
    with pytest.raises(SummaryError, match="replay mode: no recorded summary for request"):
        env.step("def shout(s):\n    return 'never recorded'\n")
    with pytest.raises(SummaryError, match="replay mode: no recording at"):
        gym.make("CodeExec-v0", tasks=[TASK], **summary_options(url, tmp_path, mode="replay", cache_path=str(tmp_path / "none.jsonl")))


def test_an_outage_leaves_the_summary_empty_and_says_why(tmp_path: Path) -> None:
    with OpenAIServer(lambda body, attempt: Reply(status=503)) as srv:
        env = gym.make("CodeExec-v0", tasks=[TASK], **summary_options(srv, tmp_path))
        env.reset(seed=0)
        obs, _, terminated, truncated, info = env.step(WRONG)
    assert obs["llm_summary"] == "" and "HTTP 503" in info["llm_summary_error"]
    assert int(obs["public_total"]) == 2 and not (terminated or truncated)  # the step itself is whole
    assert not (tmp_path / "summary.jsonl").exists()  # an outage is not recorded
    env.close()


@pytest.mark.parametrize(("key_var", "models", "match"), [
    ("NO_SUCH_KEY_VAR_FOR_SUMMARY", None, r"refused the key \(HTTP 401\): check \$NO_SUCH_KEY_VAR_FOR_SUMMARY"),
    ("SUMMARY_TEST_KEY", ["agent-model"], r"HTTP 404 for model 'summary-model'.*check llm_summary\.model"),
])  # fmt: skip
def test_a_refused_key_or_unknown_model_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_var: str,
                                                         models: list[str] | None, match: str) -> None:  # fmt: skip
    monkeypatch.setenv("NO_SUCH_KEY_VAR_FOR_SUMMARY", "sk-wrong")
    with OpenAIServer(lambda body, attempt: Reply(content=SAID), models=models) as srv:
        opts = summary_options(srv, tmp_path)
        opts["llm_summary"]["llm"]["api_key"] = "${" + key_var + "}"
        env = gym.make("CodeExec-v0", tasks=[TASK], **opts)
        env.reset(seed=0)
        with pytest.raises(SummaryError, match=match):
            env.step(WRONG)
    env.close()


def test_a_flood_of_output_is_cut_before_the_model_reads_it(server: OpenAIServer, tmp_path: Path) -> None:
    env = gym.make("CodeExec-v0", tasks=[TASK], **summary_options(server, tmp_path, max_input_chars=2000))
    env.reset(seed=0)
    env.step("def shout(s):\n    print('z' * 500_000)\n    return s\n")
    user = server.requests[0]["messages"][1]["content"]
    assert len(user) < 3000 and "characters left out" in user
    env.close()


def test_a_copy_of_the_env_summarizes_through_its_own_client(server: OpenAIServer, tmp_path: Path) -> None:
    env = gym.make("CodeExec-v0", tasks=[TASK], **summary_options(server, tmp_path, mode="live", cache_path=None))
    twin = copy.deepcopy(env)
    for e in (env, twin):
        e.reset(seed=0)
        assert e.step(WRONG)[0]["llm_summary"] == SAID
        e.close()
    assert len(server.requests) == 2  # live: never answered from a recording


def test_the_llm_agent_reads_the_summary_in_its_next_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``llm_agent.llm_summary``: the agent's second message holds the summary of its first run,
    asked of the summary's own model on the same endpoint."""
    from ._openai_server import KEY, fenced
    from .test_llm_agent import KEY_VAR, run

    monkeypatch.setenv(KEY_VAR, KEY)
    wrong = "def sum_of_evens(nums):\n    return -1\n"

    def script(body: dict[str, Any], attempt: int) -> Reply:
        return Reply(content=SAID if body["model"] == "summary-model" else fenced(wrong))

    with OpenAIServer(script) as srv:
        summary = {"llm": {"base_url": srv.url, "model": "summary-model", "api_key": "${" + KEY_VAR + "}"},
                   "cache_path": str(tmp_path / "summary.jsonl")}  # fmt: skip
        assert run(tmp_path / "run", srv.url, task_set="builtin", n_tasks=1, n_samples=1, k=[1], max_turns=2, llm_summary=summary) == 0
    asked = [b for b in srv.requests if b["model"] == "test-model"]
    summaries = [b for b in srv.requests if b["model"] == "summary-model"]
    assert len(asked) == 2 and len(summaries) == 1  # the second run ends the episode: no summary of it
    assert SAID in asked[1]["messages"][-1]["content"]
