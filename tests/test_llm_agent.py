"""The LLM agent baseline (``baselines/llm_agent.py``) with the real ``openai`` client against a
loopback OpenAI-compatible server the tests start (``tests/_openai_server.py``), the real sandbox
judging every program through ``CodeExec-v0``, and offline replays with the server stopped."""

from __future__ import annotations

import doctest
import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import registry
from baselines import llm_agent
from baselines.common import ConfigError
from baselines.llm_agent import (
    RECORD_NAME,
    LLMAgentSettings,
    parse_reply,
    pass_at_k,
    resolve_endpoint,
)
from baselines.llm_agent import main as agent_main

from ._openai_server import KEY, OpenAIServer, Reply, fenced, task_of, turn_of

BUILTIN = registry.load("builtin")
EVENS = registry.get(BUILTIN, "builtin/sum-of-evens")
FIZZ = registry.get(BUILTIN, "builtin/fizzbuzz-line")  # a stdin/stdout task
WRONG = {EVENS.problem_id: "def sum_of_evens(nums):\n    return -1\n", FIZZ.problem_id: "print(1)\n"}
KEY_VAR = "LLM_AGENT_TEST_KEY"
NONDETERMINISTIC = ("mode", "record", "timing")  # the summary's fields that may differ between live and replay


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    """A function task and a stdin/stdout task, as a .jsonl task set."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in (EVENS, FIZZ)), encoding="utf-8")
    return path


def reference(body: dict[str, Any], attempt: int) -> Reply:
    return Reply(content=fenced(task_of(body, BUILTIN).reference_solution))


def wrong(body: dict[str, Any], attempt: int) -> Reply:
    return Reply(content=fenced(WRONG[task_of(body, BUILTIN).problem_id]))


def sample_of(body: dict[str, Any]) -> int:
    return int(body["seed"])  # the settings' seed is 0: sample j asks with seed j


def run(out: Path, url: str | None, *extra: str, **settings: Any) -> int:
    """``python -m baselines.llm_agent`` with small defaults; ``settings`` become ``--set llm_agent.K=V``."""
    base: dict[str, Any] = {"model": "test-model", "api_key": "${" + KEY_VAR + "}", "n_samples": 2, "k": [1, 2],
                            "timeout_s": 5, "max_retries": 0, "concurrency": 2, "max_tokens": 256}  # fmt: skip
    if url is not None:
        base["base_url"] = url
    argv = ["--out", str(out), "--set", "env.backend=process"]
    for k, v in (base | settings).items():
        argv += ["--set", f"llm_agent.{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return agent_main([*argv, *extra])


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return data


def record(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / RECORD_NAME).read_text(encoding="utf-8").splitlines()]


def assert_no_key(*dirs: Path) -> None:
    for d in dirs:
        for p in d.rglob("*"):
            if p.is_file():
                assert KEY not in p.read_text(encoding="utf-8", errors="replace"), f"the API key is in {p}"


# ------------------------------------------------------------------------------- pass@k, parsing


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-15), (n, c, k)
    # large n: the product form needs no huge binomials
    exact = 1 - Fraction(math.comb(1000 - 3, 100), math.comb(1000, 100))
    assert pass_at_k(1000, 3, 100) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 1, 5) == 1.0
    for bad in ((3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError, match="expected 0 <= c <= n and 1 <= k <= n"):
            pass_at_k(*bad)
    assert doctest.testmod(llm_agent).failed == 0


@pytest.mark.parametrize(("body", "status"), [
    ('{"choices": [{"message": {"content": "```python\\nx=1\\n```"}, "finish_reason": "stop"}]}', "ok"),
    ('{"choices": []}', "empty"),
    ('{"choices": [{"message": {"content": null}, "finish_reason": "stop"}]}', "empty"),
    ('{"choices": [{"message": {"content": "  "}, "finish_reason": "stop"}]}', "empty"),
    ('{"choices": [{"message": {"content": "```python\\ndef f("}, "finish_reason": "length"}]}', "truncated"),
    ("{not json", "malformed"),
    ("[1, 2]", "malformed"),
    ('{"object": "error"}', "malformed"),
    ('{"choices": [{"text": "old completions API"}]}', "malformed"),
    ('{"choices": [{"message": {"content": ["parts"]}}]}', "malformed"),
], ids=["ok", "no-choices", "null-content", "blank", "length", "not-json", "array", "no-choices-key", "no-message",
        "content-list"])  # fmt: skip
def test_every_reply_body_has_a_status_and_none_raises(body: str, status: str) -> None:
    assert parse_reply(body).status == status


# --------------------------------------------------------------------------------- end to end


def test_reference_solutions_pass_and_everything_is_recorded_without_the_key(tmp_path: Path, task_file: Path) -> None:
    server = OpenAIServer(reference).start()
    try:
        assert run(tmp_path / "run", server.url, task_set=str(task_file)) == 0
    finally:
        server.stop()
    s = summary(tmp_path / "run")
    assert s["pass@1"] == 1.0 and s["pass@2"] == 1.0 and s["reward_mean"] == 1.0
    assert s["tiers"] == {"all_tests": 4} and s["replies"]["ok"] == 4 and s["api_errors"] == 0
    assert s["tokens"] == {"prompt": 40, "completion": 20, "requests_with_usage": 4}  # the server's usage, summed
    assert sorted((task_of(b, BUILTIN).problem_id, b["seed"]) for b in server.requests) == sorted(
        (t.problem_id, j) for t in (EVENS, FIZZ) for j in (0, 1))
    body = server.requests[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.8 and body["max_tokens"] == 256
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    lines = record(tmp_path / "run")
    assert lines[0]["type"] == "header" and lines[0]["endpoint"]["key_source"] == f"${KEY_VAR}"
    calls = lines[1:]
    assert len(calls) == 4 and all(c["body"] and c["error"] is None and c["request"]["messages"] for c in calls)
    assert len((tmp_path / "run" / "samples.jsonl").read_text().splitlines()) == 4
    assert_no_key(tmp_path / "run")


def test_wrong_solutions_never_pass(tmp_path: Path, task_file: Path) -> None:
    with OpenAIServer(wrong) as server:
        assert run(tmp_path / "run", server.url, task_set=str(task_file)) == 0
    s = summary(tmp_path / "run")
    assert s["pass@1"] == 0.0 and s["pass@2"] == 0.0
    assert "all_tests" not in s["tiers"] and sum(s["tiers"].values()) == 4


def test_mixed_replies_give_the_hand_computed_pass_at_k(tmp_path: Path, task_file: Path) -> None:
    """sum-of-evens: 2 of 4 samples correct; fizzbuzz-line: 1 of 4."""
    correct = {EVENS.problem_id: {0, 1}, FIZZ.problem_id: {0}}

    def script(body: dict[str, Any], attempt: int) -> Reply:
        task = task_of(body, BUILTIN)
        ok = sample_of(body) in correct[task.problem_id]
        return Reply(content=fenced(task.reference_solution if ok else WRONG[task.problem_id]))

    with OpenAIServer(script) as server:
        assert run(tmp_path / "run", server.url, task_set=str(task_file), n_samples=4, k=[1, 2, 3, 4]) == 0
    s = summary(tmp_path / "run")
    # pass@k = mean over tasks of 1 - C(n-c, k) / C(n, k), n = 4
    assert s["pass@1"] == pytest.approx((2 / 4 + 1 / 4) / 2, abs=1e-12)  # 0.375
    assert s["pass@2"] == pytest.approx(((1 - 1 / 6) + (1 - 3 / 6)) / 2, abs=1e-12)  # 2/3
    assert s["pass@3"] == pytest.approx((1 + (1 - 1 / 4)) / 2, abs=1e-12)  # 7/8
    assert s["pass@4"] == 1.0
    assert s["tiers"]["all_tests"] == 3


def test_failed_replies_are_failed_attempts_never_a_crash(tmp_path: Path) -> None:
    """One sample per failure: each is recorded and judged by the env; the run goes on."""
    ref = EVENS.reference_solution
    timeout_s = 2.0  # generous: a normal reply must never time out on a busy machine

    def script(body: dict[str, Any], attempt: int) -> Reply:
        j = sample_of(body)
        return [
            Reply(choices=False),  # 0: empty choices
            Reply(content=None),  # 1: no text
            Reply(content="```python\n" + ref.splitlines()[0] + "\n", finish_reason="length"),  # 2: cut off mid-function
            Reply(raw='{"id": "x", "choices": [', usage=None),  # 3: malformed JSON
            Reply(status=500),  # 4: 5xx even after the retry
            Reply(status=500) if attempt == 0 else Reply(content=fenced(ref)),  # 5: 500, then the retry succeeds
            Reply(content=fenced(ref), delay_s=timeout_s * 3),  # 6: slower than the timeout, every time
            Reply(content=fenced(ref), finish_reason="length"),  # 7: cut off, but the code is whole: the env decides
            Reply(status=400),  # 8: a 4xx (say, the context window): not retried, an API error
        ][j]

    with OpenAIServer(script) as server:
        rc = run(tmp_path / "run", server.url, task_set="builtin", n_tasks=1, n_samples=9, k=[1],
                 timeout_s=timeout_s, max_retries=1)  # fmt: skip
        attempts = {j: sum(1 for b in server.requests if sample_of(b) == j) for j in range(9)}
    assert rc == 0
    assert attempts == {0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 1, 8: 1}  # the client retried 5xx and timeouts once
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    got = [(r["replies"], r["tier"], r["passed"]) for r in samples]
    assert got == [
        (["empty"], "no_attempt", False),
        (["empty"], "no_attempt", False),
        (["truncated"], "syntax_error", False),
        (["malformed"], "no_attempt", False),
        (["api_error"], "no_attempt", False),
        (["ok"], "all_tests", True),
        (["api_error"], "no_attempt", False),
        (["truncated"], "all_tests", True),
        (["api_error"], "no_attempt", False),
    ]
    s = summary(tmp_path / "run")
    assert s["pass@1"] == pytest.approx(2 / 9, abs=1e-12) and s["api_errors"] == 3 and s["samples_judged"] == 9
    assert s["replies"] == {"ok": 1, "empty": 2, "truncated": 2, "malformed": 1, "api_error": 3}
    assert s["tokens"]["requests_with_usage"] == 5 and s["tokens"]["prompt"] == 50  # the malformed and failed ones have none
    errors = {c["sample"]: c["error"] for c in record(tmp_path / "run")[1:] if c["error"]}
    assert errors[4]["status_code"] == 500 and "HTTP 500" in errors[4]["message"]
    assert errors[6]["type"] == "APITimeoutError" and errors[8]["status_code"] == 400


def test_a_run_where_every_request_fails_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIServer(lambda body, attempt: Reply(status=503)) as server:
        assert run(tmp_path / "run", server.url, task_set="builtin", n_tasks=1, n_samples=1, k=[1]) == 1
        url = server.url
    assert f"every request failed after the retries: is {url} up?" in capsys.readouterr().err
    assert summary(tmp_path / "run")["api_errors"] == 1


@pytest.mark.parametrize("key", ["sk-wrong-key-000", None], ids=["wrong-key", "no-key"])
def test_a_refused_key_stops_with_a_configuration_error(
    key: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    extra: dict[str, Any] = {}
    if key is None:
        monkeypatch.delenv(KEY_VAR)
        extra["api_key"] = None  # --set llm_agent.api_key=null: no key, and OPENAI_API_KEY is unset
    else:
        monkeypatch.setenv(KEY_VAR, key)
    with OpenAIServer(reference) as server:
        assert run(tmp_path / "run", server.url, task_set="builtin", n_tasks=2, n_samples=3, k=[1], **extra) == 2
        url = server.url
        assert len(server.requests) == 0  # a 401 is answered before the request is read as one
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"llm_agent: error: {url} refused the API key (HTTP 401)")
    assert (f"check the key in ${KEY_VAR}" if key else "no key was sent (llm_agent.api_key is unset and OPENAI_API_KEY is not set)") in lines[0]
    assert "sk-wrong" not in out + err and KEY not in out + err
    assert_no_key(tmp_path / "run")


def test_multi_turn_feeds_the_env_feedback_back_and_passes_on_the_second_turn(tmp_path: Path) -> None:
    def script(body: dict[str, Any], attempt: int) -> Reply:
        task = task_of(body, BUILTIN)
        return Reply(content=fenced(WRONG[task.problem_id] if turn_of(body) == 1 else task.reference_solution))

    with OpenAIServer(script) as server:
        assert run(tmp_path / "one", server.url, task_set="builtin", n_tasks=1, max_turns=1) == 0
        assert run(tmp_path / "two", server.url, task_set="builtin", n_tasks=1, max_turns=2) == 0
        second = [b for b in server.requests if turn_of(b) == 2]
    assert summary(tmp_path / "one")["pass@1"] == 0.0
    s = summary(tmp_path / "two")
    assert s["pass@1"] == 1.0 and s["solved_within_turn"] == [0.0, 1.0] and s["replies"]["ok"] == 4
    assert len(second) == 2
    roles = [m["role"] for m in second[0]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert second[0]["messages"][2]["content"] == fenced(WRONG[EVENS.problem_id])
    feedback = second[0]["messages"][3]["content"]
    assert "0/3 public tests passed" in feedback and "input [1, 2, 3, 4] -> expected 6, got -1" in feedback


def test_an_episode_out_of_turns_is_labelled_by_the_tier_it_scored(tmp_path: Path) -> None:
    """Sample 0 writes a syntax error twice (it returns -1), sample 1 a wrong program twice (0 of 3
    public tests: partial); both run out of turns, which is a flag beside the tier, not a tier."""

    def script(body: dict[str, Any], attempt: int) -> Reply:
        return Reply(content=fenced("def sum_of_evens(:\n" if sample_of(body) == 0 else WRONG[EVENS.problem_id]))

    with OpenAIServer(script) as server:
        assert run(tmp_path / "run", server.url, task_set="builtin", n_tasks=1, k=[1], max_turns=2) == 0
        assert run(tmp_path / "one", server.url, task_set="builtin", n_tasks=1, k=[1], max_turns=1) == 0
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    got = [(r["sample"], r["turns"], r["tier"], r["turns_exhausted"], r["episode_return"]) for r in samples]
    assert sorted(got) == [(0, 2, "syntax_error", True, -1.0), (1, 2, "partial", True, 0.0)]
    s = summary(tmp_path / "run")
    assert s["tiers"] == {"partial": 1, "syntax_error": 1} and s["turns_exhausted"] == 2
    one = summary(tmp_path / "one")  # a single turn ends the episode: no budget ran out
    assert one["tiers"] == {"partial": 1, "syntax_error": 1} and one["turns_exhausted"] == 0


def test_replay_with_the_server_stopped_gives_identical_results(tmp_path: Path, task_file: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Multi-turn, with a retried 500, an API error and a malformed reply in the record."""

    def script(body: dict[str, Any], attempt: int) -> Reply:
        task, j, turn = task_of(body, BUILTIN), sample_of(body), turn_of(body)
        if task is FIZZ and j == 1:
            return Reply(status=500)  # API errors on every turn
        if task is FIZZ and j == 2 and turn == 1:
            return Reply(raw="{oops")
        if task is EVENS and j == 0 and attempt == 0:
            return Reply(status=500)
        right = (j + turn) % 2 == 0
        return Reply(content=fenced(task.reference_solution if right else WRONG[task.problem_id]),
                     usage={"prompt_tokens": 7 * turn, "completion_tokens": j + 1, "total_tokens": 0})  # fmt: skip

    live = tmp_path / "live"
    with OpenAIServer(script) as server:
        assert run(live, server.url, task_set=str(task_file), n_samples=3, k=[1, 3], max_turns=2, max_retries=1) == 0
    monkeypatch.delenv(KEY_VAR)  # replay needs no key and no server
    replay = tmp_path / "replay"
    assert agent_main(["--out", str(replay), "--replay", str(live / RECORD_NAME)]) == 0
    a, b = summary(live), summary(replay)
    assert b["mode"] == "replay" and a["mode"] == "live"
    assert {k: v for k, v in a.items() if k not in NONDETERMINISTIC} == {k: v for k, v in b.items() if k not in NONDETERMINISTIC}
    assert (live / "samples.jsonl").read_text() == (replay / "samples.jsonl").read_text()
    assert a["api_errors"] == 2 and a["replies"]["malformed"] == 1 and 0 < a["pass@1"] < 1
    assert not (replay / RECORD_NAME).exists()
    # --set still applies: another reward ladder re-scores the same replies (a lower top tier)...
    assert agent_main(["--out", str(tmp_path / "rescored"), "--replay", str(live / RECORD_NAME),
                       "--set", "reward.all_tests=0.9"]) == 0  # fmt: skip
    c = summary(tmp_path / "rescored")
    assert c["pass@1"] == a["pass@1"] and c["reward_mean"] < a["reward_mean"]


def test_a_request_missing_from_the_record_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIServer(reference) as server:
        assert run(tmp_path / "live", server.url, task_set="builtin", n_tasks=1) == 0
    capsys.readouterr()
    rec = str(tmp_path / "live" / RECORD_NAME)
    assert agent_main(["--out", str(tmp_path / "r1"), "--replay", rec, "--set", "llm_agent.temperature=0.2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"llm_agent: error: {rec}: no recorded reply for builtin/sum-of-evens sample ")
    assert "the tasks, the prompts or the sampling settings differ" in err and len(err.splitlines()) == 1
    assert agent_main(["--out", str(tmp_path / "r2"), "--replay", rec, "--set", "llm_agent.n_tasks=2"]) == 2
    assert "task builtin/reverse-words is not in the recorded run" in capsys.readouterr().err
    (tmp_path / "junk.jsonl").write_text('{"type": "call"}\n')
    assert agent_main(["--out", str(tmp_path / "r3"), "--replay", str(tmp_path / "junk.jsonl")]) == 2
    assert "not an code-env llm_agent record (expected a header line first)" in capsys.readouterr().err


def test_a_wrong_url_or_model_stops_with_a_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIServer(lambda body, attempt: Reply(status=404)) as server:
        assert run(tmp_path / "run", server.url, task_set="builtin", n_tasks=1, n_samples=1, k=[1]) == 2
        url = server.url
    err = capsys.readouterr().err.strip()
    assert err == (f"llm_agent: error: {url} answered 404 for model 'test-model': check base_url (an OpenAI-compatible "
                   "API usually ends in /v1) and the model id")  # fmt: skip


# -------------------------------------------------------------------------------- configuration


LITERAL = "sk-proj-LiteralKeyInAFile0123"


@pytest.mark.parametrize(("args", "toml", "message"), [
    ([], f'[llm_agent]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key = "{LITERAL}"\n',
     r"llm_agent\.toml: llm_agent\.api_key: a literal API key is refused \(keys do not belong in files"),
    ([f"llm_agent.api_key={LITERAL}"], None, r"\(with --set\): llm_agent\.api_key: a literal API key is refused"),
    (["llm_agent.api_key=${LLM_AGENT_UNSET_VAR}"], None, r"llm_agent\.api_key names \$\{LLM_AGENT_UNSET_VAR\}, which is not set"),
    (["llm_agent.base_url=null", "llm_agent.model=null"], None,
     r"no base_url and no model given: set llm_agent\.base_url \(--set llm_agent\.base_url=\.\.\. or \$OPENAI_BASE_URL\) and llm_agent\.model"),
    (["llm_agent.base_url=localhost:8000"], None, r"llm_agent\.base_url: expected an http\(s\) URL"),
    (["llm_agent.k=[1, 8]"], None, r"llm_agent\.k: pass@8 needs at least 8 samples per task, n_samples is 2"),
    (["llm_agent.modle=x"], None, r"llm_agent\.modle: unknown key \(known keys: base_url, model, api_key"),
    (["env.task_set=humaneval"], None, r"the LLM agent reads only env\.backend, env\.log_every, env\.log_max_bytes, env\.log_text_bytes; its tasks and turns are llm_agent\.task_set"),
    (["llm_agent.task_set=bultin"], None, r"llm_agent\.task_set: unknown task set 'bultin' .*did you mean 'builtin'"),
], ids=["literal-key-in-file", "literal-key-in-set", "unset-placeholder", "no-endpoint", "bad-url", "k-above-n",
        "unknown-key", "env-task-set", "unknown-task-set"])  # fmt: skip
def test_configuration_errors_exit_2_with_one_line(args: list[str], toml: str | None, message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    argv = ["--out", str(tmp_path / "run")]
    if toml is not None:
        (tmp_path / "llm_agent.toml").write_text(toml)
        argv += ["--config", str(tmp_path / "llm_agent.toml")]
    else:
        argv += ["--set", "llm_agent.base_url=http://127.0.0.1:9/v1", "--set", "llm_agent.model=m",
                 "--set", "llm_agent.n_samples=2", "--set", "llm_agent.k=[1]"]  # fmt: skip
    for a in args:
        argv += ["--set", a]
    assert agent_main(argv) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(message, err), err
    assert LITERAL not in out + err  # a refused key is never repeated
    assert not (tmp_path / "run").exists()  # nothing ran


def test_the_shipped_config_loads_and_the_settings_refuse_literal_keys() -> None:
    from baselines.common import load_config

    cfg = load_config("llm_agent", LLMAgentSettings)
    assert cfg.algo == LLMAgentSettings() and cfg.algo.k == [1, 5]
    with pytest.raises(ValueError, match="a literal API key is refused") as info:
        LLMAgentSettings(api_key=LITERAL)
    assert LITERAL not in str(info.value)
    assert LLMAgentSettings(api_key="${SOME_VAR}").api_key == "${SOME_VAR}"


def test_endpoint_precedence_settings_then_environment() -> None:
    env = {"OPENAI_BASE_URL": "http://env-host/v1", "OPENAI_MODEL": "env-model", "OPENAI_API_KEY": "sk-env", "MINE": "sk-mine"}
    e = resolve_endpoint(LLMAgentSettings(), env)
    assert (e.base_url, e.model, e.api_key, e.key_source) == ("http://env-host/v1", "env-model", "sk-env", "$OPENAI_API_KEY")
    e = resolve_endpoint(LLMAgentSettings(base_url="http://cfg/v1", model="cfg-model", api_key="${MINE}"), env)
    assert (e.base_url, e.model, e.api_key, e.key_source) == ("http://cfg/v1", "cfg-model", "sk-mine", "$MINE")
    e = resolve_endpoint(LLMAgentSettings(base_url="http://cfg/v1", model="m"), {})
    assert (e.api_key, e.key_source) == ("EMPTY", "none")
    assert "sk-" not in repr(resolve_endpoint(LLMAgentSettings(), env))  # the key is not in the repr
    with pytest.raises(ConfigError, match=r"no model given: set llm_agent\.model \(--set llm_agent\.model=\.\.\. or \$OPENAI_MODEL\)"):
        resolve_endpoint(LLMAgentSettings(base_url="http://cfg/v1"), {})


def test_the_endpoint_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIServer(reference) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_MODEL", "env-model")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        assert agent_main(["--out", str(tmp_path / "run"), "--set", "env.backend=process", "--set", "llm_agent.n_tasks=1",
                           "--set", "llm_agent.n_samples=1", "--set", "llm_agent.k=[1]"]) == 0  # fmt: skip
        assert {b["model"] for b in server.requests} == {"env-model"}
        url = server.url
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["llm_agent"]["base_url"] == url and config["llm_agent"]["model"] == "env-model"
    assert config["llm_agent"]["api_key"] is None and record(tmp_path / "run")[0]["endpoint"]["key_source"] == "$OPENAI_API_KEY"
    assert summary(tmp_path / "run")["pass@1"] == 1.0
    assert_no_key(tmp_path / "run")


def test_samples_the_judge_failed_on_are_dropped_and_counted_like_sandbox_errors() -> None:
    from baselines.llm_agent import SampleResult, summarize

    def sample(i: int, **kw: Any) -> SampleResult:
        base: dict[str, Any] = {"problem_id": "t", "sample": i, "turns": 1, "replies": ["ok"], "passed": False,
                                "tier": "partial", "episode_return": 0.3}  # fmt: skip
        return SampleResult(**(base | kw))

    results = [sample(0, passed=True, tier="all_tests", episode_return=1.0), sample(1),
               sample(2, tier="judge_error", episode_return=None, judge_error="the endpoint answered HTTP 500"),
               sample(3, tier="sandbox_error", episode_return=None, sandbox_error="boom")]  # fmt: skip
    s = summarize(results, LLMAgentSettings(k=[1], max_turns=1))
    assert s["samples_judged"] == 2 and s["judge_errors"] == 1 and s["sandbox_errors"] == 1
    assert s["pass@1"] == pytest.approx(0.5) and s["reward_mean"] == pytest.approx(0.65)
