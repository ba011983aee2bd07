"""One LLM channel (``code_env.llm``) and ``code-env check-llm``, with the real ``openai`` client
against the loopback OpenAI-compatible server: each failure's one line and exit status, the
``[llm]`` table shared by the judge and the LLM agent (their older options as aliases), and every
call logged under the channel's name without the key."""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import registry
from baselines.common import ConfigError
from baselines.llm_agent import LiveTransport, LLMAgentSettings, ReplayTransport, resolve_endpoint
from code_env.cli import main
from code_env.judge import JudgeConfig, LLMJudge
from code_env.llm import LLMConfig, LLMConfigError, check_llm, load_llm_config

from ._openai_server import KEY, OpenAIServer, Reply

VAR = "LLM_CHANNEL_TEST_KEY"
EVENS = registry.get(registry.load("builtin"), "builtin/sum-of-evens")


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(VAR, KEY)
    monkeypatch.setenv("WRONG_TEST_KEY", "sk-not-the-right-one-42")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return "${" + VAR + "}"


def _replying(content: str | None, *, choices: bool = True) -> OpenAIServer:
    return OpenAIServer(lambda body, attempt: Reply(content=content, choices=choices), models=["coder-7b"])


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with _replying("4") as s:
        yield s


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["check-llm", "--max-retries", "0", *args])
    out, err = capsys.readouterr()
    return status, out.strip(), err.strip()


# ------------------------------------------------------------------------------ check-llm


def test_ok_names_the_model_and_latency(server: OpenAIServer, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _check(capsys, "--base-url", server.url, "--model", "coder-7b", "--api-key", key)
    assert status == 0
    assert out.startswith(f"OK: model 'coder-7b' at {server.url} answered 4 in ") and out.endswith(" s")
    assert server.requests[0]["messages"][0]["content"] == "Reply with the number 4 and nothing else."


@pytest.mark.parametrize(
    ("reply", "choices", "problem", "line"),
    [
        ("four", True, "not_a_number", r"answered 'four' when asked for the number 4"),
        ("", True, "not_a_number", r"answered an empty reply when asked for the number 4"),
        ("5", True, "wrong_number", r"answered 5 when asked for the number 4"),
        ("x", False, "empty", r"answered with an empty 'choices' list for model 'coder-7b'"),
        ("<think>easy</think> **4**", True, "ok", r"^OK: "),
    ],
    ids=["not-a-number", "empty-text", "wrong-number", "empty-choices", "reasoning-then-bold-number"],
)
def test_what_the_reply_says(reply: str, choices: bool, problem: str, line: str, key: str,
                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with _replying(reply, choices=choices) as s:
        result = check_llm(LLMConfig(base_url=s.url, model="coder-7b", api_key=key, max_retries=0))
        assert (result.problem, result.ok) == (problem, problem == "ok")
        assert result.line == result.line.strip() and "\n" not in result.line
        assert re.search(line, result.line), result.line
        status, out, _ = _check(capsys, "--base-url", s.url, "--model", "coder-7b", "--api-key", key)
        assert status == (0 if result.ok else 1)
        assert out == (out if result.ok else f"FAIL: {result.line}") and re.search(line, out)  # (an OK line's latency differs)


def test_refused_key_names_its_variable_never_the_key(server: OpenAIServer, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _check(capsys, "--base-url", server.url, "--model", "coder-7b", "--api-key", "${WRONG_TEST_KEY}")
    assert status == 1
    assert out == f"FAIL: {server.url} refused the API key (HTTP 401): the key from $WRONG_TEST_KEY is refused"
    status, out, _ = _check(capsys, "--base-url", server.url, "--model", "coder-7b")  # none given, none in the environment
    assert status == 1 and out.endswith("no key was sent (no api_key given and OPENAI_API_KEY is not set)")


def test_404_tells_a_wrong_model_from_a_wrong_path(server: OpenAIServer, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _check(capsys, "--base-url", server.url, "--model", "coder-7", "--api-key", key)
    assert status == 1
    assert out == (f"FAIL: {server.url} answered HTTP 404 for model 'coder-7': no such model id (it serves 'coder-7b'); "
                   "did you mean 'coder-7b'?")  # fmt: skip
    wrong = server.url.removesuffix("/v1") + "/api"
    status, out, _ = _check(capsys, "--base-url", wrong, "--model", "coder-7b", "--api-key", key)
    assert status == 1
    assert out == (f"FAIL: {wrong} answered HTTP 404 and so does {wrong}/models: check the URL's path (an OpenAI-compatible "
                   "API usually ends in /v1)")  # fmt: skip


def test_unreachable_and_silent_urls(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    status, out, _ = _check(capsys, "--base-url", url, "--model", "coder-7b", "--api-key", key)
    assert status == 1
    assert out.startswith(f"FAIL: could not connect to {url} (") and "Connection refused" in out and "check the URL" in out
    with OpenAIServer(lambda body, attempt: Reply(content="4", delay_s=1.0)) as slow:
        url = slow.url
        status, out, _ = _check(capsys, "--base-url", url, "--model", "coder-7b", "--api-key", key, "--timeout-s", "0.2")
    assert status == 1
    assert out == f"FAIL: {url} did not answer within 0.2 s (after 0 retries): check the URL (is the server up and reachable?) or raise the timeout"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], r"no endpoint: give --base-url \(or \$OPENAI_BASE_URL\) and --model \(or \$OPENAI_MODEL\)"),
        (["--base-url", "127.0.0.1:8000", "--model", "m"], r"base_url: expected an http\(s\) URL"),
        (["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--api-key", "sk-literal-secret-77"], r"a literal API key is refused"),
        (["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--api-key", "${NOT_SET_ANYWHERE_25}"],
         r"names \$\{NOT_SET_ANYWHERE_25\}, which is not set"),
        (["--config", "no-such-file.toml"], r"no-such-file\.toml: cannot read"),
    ],
    ids=["no-endpoint", "not-a-url", "literal-key", "unset-variable", "missing-config"],
)
def test_bad_usage_is_exit_2_and_one_line(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL", "NOT_SET_ANYWHERE_25"):
        monkeypatch.delenv(var, raising=False)
    status, out, err = _check(capsys, *args)
    assert (status, out) == (2, "")
    assert err.startswith("code-env check-llm: error: ") and "\n" not in err
    assert "sk-literal-secret-77" not in err
    assert re.search(message, err), err


def test_config_file_and_flags_on_top(server: OpenAIServer, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "llm.toml"
    cfg.write_text(f'[llm]\nname = "shared"\nbase_url = "{server.url}"\nmodel = "nope"\napi_key = "{key}"\ntimeout_s = 5\n')
    status, out, _ = _check(capsys, "--config", str(cfg))
    assert status == 1 and "for model 'nope'" in out
    status, out, _ = _check(capsys, "--config", str(cfg), "--model", "coder-7b")
    assert status == 0 and out.startswith("OK: model 'coder-7b'")
    reward = tmp_path / "reward.toml"  # the judge's endpoint, as the judge reads it (aliases; its other settings aside)
    reward.write_text(f'[reward.judge]\nbase_url = "{server.url}"\nmodel = "coder-7b"\napi_key = "{key}"\nweight = 0.2\nmode = "live"\n')
    status, out, _ = _check(capsys, "--config", str(reward), "--table", "reward.judge")
    assert status == 0 and out.startswith("OK: model 'coder-7b'")
    reward.write_text(f'[reward.judge]\nllm = "{cfg}"\nweight = 0.2\nmode = "live"\n')  # or its llm, a shared file
    assert load_llm_config(reward, "reward.judge") == load_llm_config(cfg)
    (tmp_path / "bad.toml").write_text("[judge]\nmodel = 'm'\n")
    with pytest.raises(LLMConfigError, match=r"bad\.toml: no \[llm\] table \(found: \[judge\]\)"):
        load_llm_config(tmp_path / "bad.toml")


# ------------------------------------------------------------------ the one channel, shared


def test_judge_and_agent_share_one_llm_file(server: OpenAIServer, key: str, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    shared = tmp_path / "llm.toml"
    shared.write_text(f'[llm]\nbase_url = "{server.url}"\nmodel = "coder-7b"\napi_key = "{key}"\nmax_retries = 0\ntimeout_s = 30\n')
    judge_cfg = JudgeConfig(llm=str(shared), weight=0.3, mode="live")
    agent = LLMAgentSettings(llm=str(shared))
    assert judge_cfg.channel.name == "judge" and agent.llm is not None and agent.llm.name == "agent"
    assert judge_cfg.channel.model_dump(exclude={"name"}) == agent.llm.model_dump(exclude={"name"})
    # the older options are aliases that build the same channel
    alias = JudgeConfig(base_url=server.url, model="coder-7b", api_key=key, max_retries=0, weight=0.3, mode="live")
    assert alias.channel == judge_cfg.channel
    # a dumped config (aliases at their defaults beside llm) validates again
    assert JudgeConfig.model_validate(judge_cfg.model_dump()) == judge_cfg
    assert LLMAgentSettings.model_validate(agent.model_dump()) == agent

    with caplog.at_level(logging.INFO, logger="code_env.llm"):
        verdict = LLMJudge(judge_cfg).score(EVENS.prompt, EVENS.reference_solution)
        endpoint = resolve_endpoint(agent)
        with open(tmp_path / "record.jsonl", "w", encoding="utf-8") as rec:
            live = LiveTransport(endpoint, agent, rec)
            reply = live.call("p/1", 0, 1, {"model": "coder-7b", "messages": [{"role": "user", "content": "hi"}]}, trace_id="p/1/0/0")
            live.close()
    assert verdict.neutral and verdict.error is None  # the server's "4" is no SCORE in 0..1: neutral, not an outage
    assert reply.status == "ok" and reply.content == "4"
    assert endpoint.name == "agent" and endpoint.key_source == f"${VAR}"
    lines = [r.getMessage() for r in caplog.records if r.name == "code_env.llm"]
    assert [line.split(" ", 2)[:2] for line in lines] == [["llm[judge]", "call"], ["llm[agent]", "call"]]
    judged, asked = (json.loads(line.split(" ", 2)[2]) for line in lines)
    assert judged["model"] == "coder-7b" and judged["status"] == "ok" and len(judged["key"]) == 64
    assert asked["trace_id"] == "p/1/0/0" and asked["status"] == "ok" and not asked["replayed"]
    assert KEY not in caplog.text

    # the agent's replay logs each answered call under the same name
    header = {"endpoint": {"base_url": endpoint.base_url, "model": endpoint.model, "key_source": endpoint.key_source, "name": "agent"}}
    entry = json.loads((tmp_path / "record.jsonl").read_text(encoding="utf-8"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="code_env.llm"):
        ReplayTransport(tmp_path / "record.jsonl", header, {entry["key"]: entry}).call(
            "p/1", 0, 1, {"model": "coder-7b", "messages": [{"role": "user", "content": "hi"}]})
    assert "llm[agent] call" in caplog.text and '"replayed": true' in caplog.text


def test_the_endpoint_is_given_once(tmp_path: Path) -> None:
    table = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(ValueError, match=r"the judge's endpoint is given twice: llm and model"):
        JudgeConfig(llm=table, model="other", mode="live")
    with pytest.raises(ValueError, match=r"the endpoint is given twice: llm and timeout_s"):
        LLMAgentSettings(llm=table, timeout_s=5)
    with pytest.raises(ValueError, match=r"the judge needs an endpoint: llm .*, or base_url and model"):
        JudgeConfig(mode="live")
    with pytest.raises(ValueError, match=r"llm: .*nowhere\.toml: cannot read"):
        JudgeConfig(llm=str(tmp_path / "nowhere.toml"), mode="live")
    with pytest.raises(ValueError, match="a literal API key is refused") as err:
        LLMConfig(**table, api_key="sk-literal-secret-77")
    assert "sk-literal-secret-77" not in str(err.value)
    with pytest.raises(ConfigError, match=r"llm_agent\.llm: llm\[agent\]\.api_key names \$\{NOT_SET_ANYWHERE_25\}"):
        resolve_endpoint(LLMAgentSettings(llm={**table, "api_key": "${NOT_SET_ANYWHERE_25}"}), {})
