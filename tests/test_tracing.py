"""The per-sample state machine (``code_env.tracing``): trace ids ``problem_id/sample/turn/retry``
that join every log line about a sample, a sandbox retry under its own id, each state's deadline
enforced by its owner (the executor's queue, a test's time limit, the LLM judge, the agent's
request), and ``context_window_overflow`` for a reply cut at the model's limit. Every deadline
here really passes: a real sandbox with one worker, a real loopback endpoint that answers late."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import code_env
import registry
from code_env import RewardConfig, grade_many
from code_env.judge import JudgeConfig
from code_env.logtools import replay
from code_env.tracing import (
    STATES,
    TraceId,
    check_transitions,
    retried,
    run_marks,
    trace_id,
    trace_key,
)
from code_env.trajectory import read_log
from registry import Task, TestCase
from sandbox import QUEUE_TIMEOUT, ExecutionResult, Sandbox

from ._openai_server import KEY, OpenAIServer, Reply, fenced, task_of
from .conftest import get_sandbox

BUILTIN = registry.load("builtin")
EVENS = next(t for t in BUILTIN if t.problem_id == "builtin/sum-of-evens")
# a stdio task whose every test sleeps: with one worker, the later runs of a batch wait in the queue
SLOW = Task(problem_id="t/slow-echo", kind="stdio", prompt="Echo the line, slowly.",
            reference_solution="import time\ntime.sleep(0.4)\nprint(input())\n",
            public_tests=[TestCase(stdin=f"{i}\n", expected_stdout=f"{i}\n") for i in range(3)],
            hidden_tests=[TestCase(stdin="h\n", expected_stdout="h\n")], timeout_s=5.0)  # fmt: skip


def states(transitions: list[Any]) -> list[str]:
    return [s for s, _ in transitions]


# ------------------------------------------------------------------------------------ trace ids


def test_a_trace_id_parses_back_whatever_the_problem_id_and_the_run_suffix() -> None:
    assert trace_id("HumanEval/0", 3, 1) == "HumanEval/0/3/1/0"
    for text, want in [("HumanEval/0/3/1/0", ("HumanEval/0", 3, 1, 0)),
                       ("builtin/fizzbuzz-line/7/0/2/public/3", ("builtin/fizzbuzz-line", 7, 0, 2)),
                       ("a/b/c/12/0/1/public/checker/0/reference", ("a/b/c", 12, 0, 1)),
                       ("p/1/2/3/hidden/from/4", ("p", 1, 2, 3)),
                       ("HumanEval/7/5/0/1/public+hidden/from/3", ("HumanEval/7", 5, 0, 1)),
                       ("p/1/2/3/public/syntax", ("p", 1, 2, 3)),
                       ("9/1/2/3", ("9", 1, 2, 3))]:  # fmt: skip
        t = TraceId.parse(text)
        assert t == TraceId(*want), text
        assert text.startswith(str(t)) and trace_key(text) == f"{want[0]}/{want[1]}/{want[2]}"
    for foreign in ("run/3", "mine", "p/x/0/0", "p/1/2/public", "", "1/2/3"):
        assert TraceId.parse(foreign) is None, foreign
    # a retry moves the counter and keeps the run's part; a user's own id gets a suffix
    assert retried("p/q/3/0/0/public/2") == "p/q/3/0/1/public/2"
    assert trace_key(retried("p/q/3/0/0/public/2")) == trace_key("p/q/3/0/0/public/2") == "p/q/3/0"
    assert retried("mine/public") == "mine/public/retry1" and retried("x", 0) == "x"


def test_run_marks_follow_the_runs_that_came_back() -> None:
    ran = ExecutionResult(trace_id="p/0/0/0/public", queued_ms=250.0, exit_code=0)
    late = ExecutionResult(trace_id="p/0/0/0/public", timeout_hit=True, queued_ms=0.0)
    stuck = ExecutionResult(trace_id="p/0/0/0/public", sandbox_error=f"{QUEUE_TIMEOUT} (1 s)", queued_ms=1500.0)
    assert run_marks(100.0, [ran], 101.0) == [("queued", 100.0), ("running", 100.25), ("executed", 101.0)]
    assert states(run_marks(100.0, [late], 101.0)) == ["queued", "running", "timed-out", "executed"]
    assert run_marks(100.0, [stuck], 102.0) == [("queued", 100.0), ("timed-out", 101.5), ("executed", 102.0)]
    assert states(run_marks(100.0, [ran, stuck], 102.0)) == ["queued", "running", "timed-out", "executed"]
    assert check_transitions([("queued", 1.0), ("nap", 2.0), ("judged", 0.5)]) == [
        "unknown state 'nap'", "the states' times go backwards"]  # fmt: skip


def test_reset_takes_the_agents_sample_number_and_refuses_a_bad_one() -> None:
    env = gym.make("CodeExec-v0", backend="process")
    _, info = env.reset(seed=0, options={"problem_id": EVENS.problem_id, "sample": 7})
    assert info["trace_id"] == f"{EVENS.problem_id}/7/0/0" == env.unwrapped.trace_id  # type: ignore[attr-defined]
    _, info = env.reset(options={"problem_id": EVENS.problem_id})
    assert info["trace_id"] == f"{EVENS.problem_id}/8/0/0"  # the env counts on from the agent's number
    for bad in (-1, "3", True, 1.5):
        with pytest.raises(ValueError, match="reset options: sample: expected an int >= 0"):
            env.reset(options={"sample": bad})
    with pytest.raises(ValueError, match=r"unknown \['nope'\] \(known: \['problem_id', 'sample'\]\)"):
        env.reset(options={"nope": 1})
    env.close()


# --------------------------------------------------------------------- the executor's deadlines


def test_a_run_past_the_queue_deadline_is_ours_retried_under_its_own_id_and_never_scored(tmp_path: Path) -> None:
    """One worker, three tests of 0.4 s each in one batch, a queue deadline of 0.15 s: the later
    runs really wait past it. The grader asks again under retry 1 (it fails the same way), the
    sample gets no reward, and its record holds both tries, every run joined on one key."""
    with Sandbox("process", workers=1, queue_timeout_s=0.15) as sb:
        env = gym.make("CodeExec-v0", tasks=[SLOW], executor=sb, log_dir=str(tmp_path))
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(SLOW.reference_solution)
        env.close()
    assert info["sandbox_error"].startswith(QUEUE_TIMEOUT) and reward == 0.0 and truncated and not terminated
    assert info["reward_breakdown"]["tier"] == "sandbox_error" and "reward" not in info["reward_breakdown"]
    (rec,) = read_log(tmp_path)
    assert rec["trace_id"] == "t/slow-echo/0/0/0" and rec["ran_as"] == "t/slow-echo/0/0/1"
    first, again = rec["retried_executions"], rec["executions"]
    assert first and again
    assert {TraceId.parse(r["trace_id"]).retry for r in first} == {0}  # type: ignore[union-attr]
    assert {TraceId.parse(r["trace_id"]).retry for r in again} == {1}  # type: ignore[union-attr]
    assert {trace_key(r["trace_id"]) for r in first + again} == {"t/slow-echo/0/0"}
    assert any(r["sandbox_error"] and r["sandbox_error"].startswith(QUEUE_TIMEOUT) for r in first)
    assert all(r["queued_ms"] > 150 for r in first + again if r["sandbox_error"])  # the deadline did pass
    seen = states(rec["transitions"])
    assert seen[:2] == ["generating", "queued"] and seen[-1] == "judged" and seen.count("queued") == 2  # two tries
    assert seen.count("timed-out") == 2 and all(seen[i - 1] in ("queued", "running") for i, s in enumerate(seen) if s == "timed-out")
    assert not check_transitions(rec["transitions"])
    # the replay of a sandbox failure has nothing to re-judge: it says so rather than scoring it
    assert replay(tmp_path).differences == []


def test_a_generous_queue_deadline_changes_nothing_and_the_waits_are_measured() -> None:
    with Sandbox("process", workers=1, queue_timeout_s=60) as sb:
        (g,) = grade_many([(SLOW, SLOW.reference_solution)], sandbox=sb)
        res = sb.run_many([SLOW.reference_solution] * 2)
    assert g.reward == 1.0 and g.breakdown.tier == "all_tests"
    assert res[0].queued_ms < 300 < res[1].queued_ms  # the second waited for the one worker
    with pytest.raises(ValueError, match=r"queue_timeout_s: expected seconds in \(0, 86400\] or None, got 0"):
        Sandbox("process", queue_timeout_s=0)


def test_a_test_past_its_time_limit_shows_timed_out_after_running() -> None:
    env = gym.make("CodeExec-v0", backend="process", timeout_s=0.3)
    env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    *_, info = env.step("import time\ndef sum_of_evens(nums):\n    time.sleep(5)\n")
    seen = states(env.unwrapped.last_timing["transitions"])  # type: ignore[attr-defined]
    env.close()
    assert info["reward_breakdown"]["tier"] == "timeout"
    assert seen == ["generating", "queued", "running", "timed-out", "executed", "judged"]


# ------------------------------------------------------------------------- the grader's deadline


def test_a_judge_that_answers_late_times_out_and_the_sample_is_a_judge_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACING_JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, attempt: Reply(content="0.9", delay_s=3.0)) as server:
        judge = JudgeConfig(base_url=server.url, model="slow", api_key="${TRACING_JUDGE_KEY}", weight=0.3,
                            timeout_s=0.5, max_retries=0, mode="live")  # fmt: skip
        env = gym.make("CodeExec-v0", backend="process", reward=RewardConfig(judge=judge), log_dir=str(tmp_path))
        env.reset(seed=0, options={"problem_id": EVENS.problem_id})
        _, reward, terminated, truncated, info = env.step(EVENS.reference_solution)
        env.close()
    b = info["reward_breakdown"]
    assert b["tier"] == "judge_error" and "reward" not in b and not b["judge_neutral"]  # an outage: no verdict, not scored
    assert "did not answer within 0.5 s" in info["judge_error"] and info["sandbox_error"] is None
    assert reward == 0.0 and truncated and not terminated  # as for a sandbox error: drop the sample
    (rec,) = read_log(tmp_path)
    assert rec["judge_error"] == info["judge_error"]
    assert states(rec["transitions"])[-3:] == ["judging", "timed-out", "judged"]


# ------------------------------------------------------------------- the agent's generation


def test_an_overflowed_reply_is_judged_as_it_is_by_default_and_unrun_when_the_reward_says_so(tmp_path: Path) -> None:
    env = gym.make("CodeExec-v0", backend="process", log_dir=str(tmp_path / "a"))
    env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    env.unwrapped.end_generation("context_window_overflow")  # type: ignore[attr-defined]
    _, reward, terminated, _, info = env.step(EVENS.reference_solution)
    assert reward == 1.0 and terminated  # the default: the reply's program is judged as it is
    seen = states(env.unwrapped.last_timing["transitions"])  # type: ignore[attr-defined]
    assert seen == ["generating", "context_window_overflow", "queued", "running", "executed", "judged"]
    with pytest.raises(ValueError, match="end_generation: expected one of"):
        env.reset(seed=0)
        env.unwrapped.end_generation("late")  # type: ignore[attr-defined]
    env.close()

    cfg = RewardConfig(context_window_overflow=-0.7)
    env = gym.make("CodeExec-v0", backend="process", reward=cfg, log_dir=str(tmp_path / "b"), max_turns=3)
    env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    env.unwrapped.end_generation("context_window_overflow")  # type: ignore[attr-defined]
    _, reward, terminated, truncated, info = env.step(EVENS.reference_solution)
    env.close()
    assert (reward, terminated, truncated) == (-0.7, True, False)  # ends the episode, even a multi-turn one
    assert info["reward_breakdown"]["tier"] == "context_window_overflow"
    (rec,) = read_log(tmp_path / "b")
    assert states(rec["transitions"]) == ["generating", "context_window_overflow"] and rec["executions"] == []
    for log in ("a", "b"):  # the replay tells the env how the generation ended, as the agent did
        report = replay(tmp_path / log)
        assert report.steps == 1 and report.differences == [], report.summary()
    # grade_many's path (the trainers') does the same
    over, fine = code_env.grading.judge_many([(EVENS, EVENS.reference_solution)] * 2, config=cfg,
                                              overflowed=[True, False])  # fmt: skip
    assert over.grade.reward == -0.7 and over.public.executions == [] and fine.grade.reward == 1.0


def test_the_token_env_ends_in_context_window_overflow_at_its_length_budget(tmp_path: Path) -> None:
    env = gym.make("CodeExecTokens-v0", backend="process", max_tokens=2, log_dir=str(tmp_path),
                   reward=RewardConfig(context_window_overflow=-0.3))  # fmt: skip
    env.reset(seed=0)
    done = False
    while not done:
        _, reward, terminated, truncated, info = env.step(0)  # never <end>
        done = terminated or truncated
    env.close()
    assert reward == -0.3 and info["reward_breakdown"]["tier"] == "context_window_overflow"
    (rec,) = read_log(tmp_path)
    assert rec["completion_truncated"] and states(rec["transitions"]) == ["generating", "context_window_overflow"]
    report = replay(tmp_path)
    assert report.steps == 1 and report.differences == [], report.summary()


def test_an_llm_agents_request_lines_and_the_envs_records_join_on_one_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The real agent against a loopback endpoint: sample 0 is cut at max_tokens, sample 1
    answers late (past the agent's timeout). Each request line of ``llm_record.jsonl`` carries
    the trace id of the env step it fed, distinct per sample, and the steps' states say how each
    generation ended."""
    from baselines.llm_agent import RECORD_NAME
    from baselines.llm_agent import main as agent_main

    monkeypatch.setenv("TRACING_AGENT_KEY", KEY)
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)

    def script(body: dict[str, Any], attempt: int) -> Reply:
        code = fenced(task_of(body, BUILTIN).reference_solution)
        return Reply(content=code, finish_reason="length") if body["seed"] == 0 else Reply(content=code, delay_s=3.0)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(EVENS.model_dump_json() + "\n", encoding="utf-8")
    with OpenAIServer(script) as server:
        argv = ["--out", str(tmp_path / "run"), "--set", "env.backend=process", "--set", "env.log_every=1"]
        for k, v in {"base_url": server.url, "model": "m", "api_key": "${TRACING_AGENT_KEY}", "n_samples": 2, "k": [1],
                     "timeout_s": 1, "max_retries": 0, "concurrency": 1, "task_set": str(tasks), "seed": 0}.items():  # fmt: skip
            argv += ["--set", f"llm_agent.{k}={v if isinstance(v, str) else json.dumps(v)}"]
        assert agent_main(argv) == 0
    calls = [json.loads(x) for x in (tmp_path / "run" / RECORD_NAME).read_text(encoding="utf-8").splitlines()]
    calls = [c for c in calls if c.get("type") == "call"]
    steps = {r["trace_id"]: r for r in read_log(tmp_path / "run" / "trajectories")}
    assert sorted(c["trace_id"] for c in calls) == sorted(steps) == [f"{EVENS.problem_id}/0/0/0", f"{EVENS.problem_id}/1/0/0"]
    cut, late = steps[f"{EVENS.problem_id}/0/0/0"], steps[f"{EVENS.problem_id}/1/0/0"]
    assert states(cut["transitions"])[:3] == ["generating", "context_window_overflow", "queued"]
    assert states(late["transitions"])[:3] == ["generating", "timed-out", "queued"]
    assert late["reward_breakdown"]["tier"] == "no_attempt"  # nothing came: the empty program is judged
    assert all(s in STATES for r in steps.values() for s in states(r["transitions"]))
    # `code-env trace` finds all of it from the key alone: the agent's request line, the step, its runs
    from code_env.cli import main as cli_main

    for key, want in ((f"{EVENS.problem_id}/0/0", "request turn 1: answered"), (f"{EVENS.problem_id}/1/0/0", "APITimeoutError")):
        capsys.readouterr()
        assert cli_main(["trace", str(tmp_path / "run"), key]) == 0
        out = capsys.readouterr().out
        assert want in out and "llm_record.jsonl" in out and "step: reward" in out and "  run: exit 0" in out, out
        assert all(line.split()[0].startswith(key.rsplit("/", 1)[0] if key.count("/") == 4 else key) for line in out.splitlines())
    assert cli_main(["trace", str(tmp_path / "run"), f"{EVENS.problem_id}/9/0"]) == 1
    assert cli_main(["trace", str(tmp_path / "run"), "nonsense"]) == 2
    assert "not a trace id" in capsys.readouterr().err


@pytest.mark.slow
def test_grpo_model_generation_past_its_deadline_is_marked_timed_out(tmp_path: Path) -> None:
    """GRPO ``--model`` owns its generation's deadline (transformers' ``max_time``): a deadline that
    passes during the first token stops the batch short of ``max_new_tokens``, and each reply it
    cut says so, distinct from a cut by the token budget."""
    import torch

    from baselines.grpo import Judge, LMPolicy
    from baselines.tiny_lm import build_tiny_lm

    path = build_tiny_lm(tmp_path / "model", seed=0, n_positions=512)
    tasks = [EVENS] * 2
    late = LMPolicy(str(path), max_new_tokens=64, generation_timeout_s=1e-6).sample(tasks, 1.0, torch.Generator().manual_seed(0))
    assert late.texts is not None and late.tokens.shape[1] < 64
    assert late.texts.timed_out == [True, True] and late.texts.cut == [False, False]
    full = LMPolicy(str(path), max_new_tokens=3).sample(tasks, 1.0, torch.Generator().manual_seed(0))
    assert full.texts is not None and full.texts.timed_out == [False, False] and all(full.texts.cut)
    judge = Judge(get_sandbox("process"), RewardConfig(), use_cache=False, log_dir=tmp_path / "log")
    _, _, verdicts = judge.verdicts(tasks, late.programs, late.texts, generating=1.0, generated=2.0)
    judge.write(verdicts, step=1)
    judge.close()
    recs = list(read_log(tmp_path / "log"))
    assert [states(r["transitions"])[:3] for r in recs] == [["generating", "timed-out", "queued"]] * 2
