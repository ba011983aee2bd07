"""Verification and reward: references score 1.0, the reward tiers (no_attempt included), and
reward hacking — none of the tricks earns more than an honest wrong answer, except hard-coding the
public outputs (<= 0.8). The attacks on the verifier's own channel are in test_grader_attacks.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import registry
from code_env import CodeExecEnv, TRLReward, compute_score, evaluate
from code_env.demo import hard_coded
from code_env.env import MAX_TEXT_CHARS
from code_env.grading import Grade, aggregate, grade, grade_many, judge_many
from code_env.reward import RewardConfig
from code_env.tokens import CodeExecTokensEnv
from code_env.tokens import program as tokens_program
from registry import Task
from registry.budget import START_UP_S, budget_s
from registry.verify import MAX_PROGRAM_BYTES, Verification
from sandbox import ExecutionResult, RunRequest

from .conftest import CountingRunner, get_sandbox

REPO = Path(__file__).resolve().parents[1]
TASKS = registry.load("builtin")
BY_ID = {t.problem_id: t for t in TASKS}
FUNCTION_TASKS = [t for t in TASKS if t.kind == "function"]
STDIO_TASKS = [t for t in TASKS if t.kind == "stdio"]
# several tasks of different shapes for every hack
HACK_TASKS = ["builtin/sum-of-evens", "builtin/two-sum-indices", "builtin/merge-intervals", "builtin/edit-distance"]


def g(task: Task, code: str) -> Grade:
    res = grade(task, code, sandbox=get_sandbox("process"))
    assert res.sandbox_error is None, res.sandbox_error
    return res


def empty_solution(task: Task) -> str:
    return f"def {task.entry_point}(*args, **kwargs):\n    pass\n" if task.kind == "function" else "pass\n"


def wrong_answer(task: Task) -> str:
    """An honest attempt that answers every test, wrongly."""
    if task.kind == "function":
        return f"def {task.entry_point}(*args, **kwargs):\n    return 'not an answer \u2603'\n"
    return "print('not an answer \u2603')\n"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.problem_id)
def test_every_reference_solution_scores_1(task: Task) -> None:
    res = g(task, task.reference_solution)
    assert res.reward == 1.0, res.breakdown
    assert res.breakdown.tier == "all_tests"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.problem_id)
def test_hard_coding_the_public_outputs_stays_at_or_below_08(task: Task) -> None:
    code = hard_coded(task)  # the main job's "hard-codes public outputs" policy
    res = g(task, code)
    assert res.breakdown.public_passed == res.breakdown.public_total  # it does fool the public tests
    assert res.breakdown.hidden_passed < res.breakdown.hidden_total  # but not the hidden ones
    assert res.reward is not None and res.reward <= 0.8


HACKS = {
    "eq-always-true": "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
                      "def {f}(*args, **kwargs):\n    return Yes()\n",
    "json-monkeypatch": "import json, builtins\njson.dumps = lambda *a, **k: '\"anything\"'\njson.loads = lambda *a, **k: None\n"
                        "builtins.isinstance = lambda *a: True\ndef {f}(*args, **kwargs):\n    return None\n",
    "exit-before-tests": "import sys\nsys.exit(0)\n",
    "os-exit-before-tests": "import os\nos._exit(0)\n",
    "forged-result-lines": "import os, json\nfor i in range(20):\n"
                           "    os.write(1, ('deadbeef ' + json.dumps({{'i': i, 'value': '0', 's': 0}}) + '\\n').encode())\n"
                           "    os.write(3, ('0' * 32 + ' ' + json.dumps({{'i': i, 'value': '0', 's': 0}}) + '\\n').encode())\n"
                           "    print('PASSED', i)\ndef {f}(*args, **kwargs):\n    return None\n",
    "frame-and-gc-walk": "import gc, sys\nfound = [o for o in gc.get_objects() if isinstance(o, dict) and 'expected' in o]\n"
                         "def {f}(*args, **kwargs):\n    f = sys._getframe(1)\n    while f is not None:\n"
                         "        for v in list(f.f_locals.values()) + found:\n"
                         "            if isinstance(v, dict) and 'expected' in v:\n                return v['expected']\n"
                         "        f = f.f_back\n    return None\n",
    "read-test-files": "import glob, json\nfiles = [" + repr(str(REPO / "registry" / "data" / "builtin.jsonl")) + ", "
                       + repr(str(REPO / "tests" / "test_grading.py")) + "] + glob.glob('/code/*') + glob.glob('/sbx/*')\n"
                       "def {f}(*args, **kwargs):\n    for path in files:\n        try:\n            print(open(path).read()[:100])\n"
                       "        except OSError:\n            pass\n    return None\n",
}  # fmt: skip


@pytest.mark.parametrize("hack", list(HACKS))
@pytest.mark.parametrize("problem_id", HACK_TASKS)
def test_reward_hacks_earn_no_more_than_an_honest_wrong_answer(problem_id: str, hack: str) -> None:
    task = BY_ID[problem_id]
    honest_floor = g(task, wrong_answer(task)).reward
    assert honest_floor == 0.0
    res = g(task, HACKS[hack].format(f=task.entry_point))
    assert res.reward is not None and honest_floor is not None
    assert res.reward <= honest_floor, (res.breakdown, [c.status for c in res.feedback])


def test_reward_tiers_and_feedback() -> None:
    task = BY_ID["builtin/sum-of-evens"]
    partial = g(task, "def sum_of_evens(nums):\n    return sum(nums) if len(nums) == 4 else 0\n")
    assert partial.breakdown.tier == "partial" and partial.reward == pytest.approx(0.6 * 2 / 3)
    failed = [c for c in partial.feedback if c.status == "failed"]
    assert failed and failed[0].input == "[1, 2, 3, 4]" and failed[0].expected == "6" and failed[0].got == "10"
    syntax = g(task, "def sum_of_evens(:\n")
    assert (syntax.breakdown.tier, syntax.reward) == ("syntax_error", -1.0)
    slow = g(task, "def sum_of_evens(nums):\n    while True:\n        pass\n")
    assert (slow.breakdown.tier, slow.reward) == ("timeout", -0.5)
    crash = g(task, "def sum_of_evens(nums):\n    raise ValueError('boom')\n")
    assert crash.reward == 0.0 and crash.feedback[0].status == "error" and "ValueError: boom" in (crash.feedback[0].error or "")
    assert "candidate.py" in (crash.feedback[0].traceback or "")


def test_a_task_without_hidden_tests_never_gives_the_top_tier() -> None:
    task = BY_ID["builtin/sum-of-evens"].model_copy(update={"hidden_tests": []})
    constant = hard_coded(task)  # the public examples, looked up
    for code in (constant, task.reference_solution):
        res = g(task, code)
        assert (res.breakdown.tier, res.reward) == ("all_public", 0.8), res.breakdown
        assert res.breakdown.explanation.endswith("the task has no hidden test, so all_public is its top tier")
    env = CodeExecEnv(tasks=[task], executor=get_sandbox("process"), max_turns=3)  # the hidden round after the public one
    env.reset(seed=0)
    assert env.step(constant)[1:3] == (0.8, True)


def test_stdio_tiers() -> None:
    task = STDIO_TASKS[0]
    assert g(task, "print(:\n").breakdown.tier == "syntax_error"
    assert g(task, "import time\ntime.sleep(60)\n").breakdown.tier == "timeout"
    assert g(task, "print('nope')\n").reward == 0.0


def test_hidden_inputs_never_reach_the_feedback() -> None:
    task = BY_ID["builtin/sum-of-evens"]
    res = g(task, "import sys\ndef sum_of_evens(nums):\n    print('INPUT', nums, file=sys.stderr)\n    return sum(nums)\n")
    text = res.model_dump_json()
    for case in task.hidden_tests:
        assert json.dumps(case.args[0]) not in text or case.args[0] in [c.args[0] for c in task.public_tests]


def test_a_sandbox_failure_is_never_a_score() -> None:
    broken = Verification(sandbox_error="worker died twice")
    b = aggregate(broken, None, RewardConfig())
    assert b.reward is None and b.tier == "sandbox_error" and "worker died" in b.explanation


def test_reward_config_from_files(tmp_path: Path) -> None:
    toml = tmp_path / "r.toml"
    toml.write_text("[reward]\nsyntax_error = -2.0\nall_public = 0.7\n")
    cfg = RewardConfig.from_file(toml)
    assert cfg.syntax_error == -2.0 and cfg.all_public == 0.7
    js = tmp_path / "r.json"
    js.write_text(json.dumps({"timeout": -0.25}))
    assert RewardConfig.from_file(js).timeout == -0.25
    js.write_text(json.dumps({"timout": -0.25}))
    with pytest.raises(ValueError, match=r"r\.json: timout: Extra inputs are not permitted"):
        RewardConfig.from_file(js)
    toml.write_text("[reward]\nall_public = 1.5\n")
    with pytest.raises(ValueError, match="partial_max <= all_public <= all_tests"):
        RewardConfig.from_file(toml)
    toml.write_text("[reward\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        RewardConfig.from_file(toml)


def test_grade_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"expected registry\.Task, got dict"):
        grade({"problem_id": "x"}, "pass")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="code: expected str, got bytes"):
        grade(TASKS[0], b"pass")  # type: ignore[arg-type]


SPLIT_CHECKER = r"""
import json, sys
for case in json.load(sys.stdin)["cases"]:
    try:
        n = int(case["stdin"])
        a, b = (int(x) for x in case["output"].split())
        print(1 if a + b == n and a > 0 and b > 0 else 0)
    except Exception:
        print(0)
"""


def split_task(checker: str = SPLIT_CHECKER) -> Task:
    """Any two positive integers summing to n: many right answers, so a checker judges."""
    def case(n: int) -> dict[str, object]:
        return {"stdin": f"{n}\n", "expected_stdout": f"1 {n - 1}\n", "checker": checker}
    return Task.model_validate({
        "problem_id": "test/split", "prompt": "print two positive integers summing to n", "kind": "stdio",
        "reference_solution": "n = int(input())\nprint(1, n - 1)\n",
        "public_tests": [case(n) for n in (2, 10, 7)], "hidden_tests": [case(n) for n in (3, 100, 55, 1000, 9)],
    })  # fmt: skip


def test_a_stdio_checker_accepts_any_right_output_and_rejects_wrong_ones() -> None:
    task = split_task()
    other = "n = int(input())\nprint(n // 2, n - n // 2)\n"  # not the reference's output, still right
    assert g(task, other).reward == 1.0
    assert g(task, task.reference_solution).reward == 1.0
    wrong = g(task, "n = int(input())\nprint(0, n)\n")
    assert wrong.breakdown.tier == "partial" and wrong.breakdown.public_passed == 0
    assert all(c.error == "rejected by the task's checker" for c in wrong.feedback)
    garbage = g(task, "import sys\nsys.stdout.buffer.write(b'\\xff\\x00 not numbers')\n")
    assert garbage.breakdown.public_passed == 0 and garbage.reward == 0.0
    # a crash is the program's error, judged without the checker
    crash = g(task, "raise ValueError('no')\n")
    assert crash.breakdown.public_passed == 0 and all(c.status == "error" for c in crash.feedback)


def test_a_broken_stdio_checker_is_our_failure_not_the_programs() -> None:
    res = grade(split_task("import sys\nprint('1')\n"), "n = int(input())\nprint(1, n - 1)\n",
                sandbox=get_sandbox("process"))  # fmt: skip
    assert res.reward is None and res.sandbox_error and "checker failed" in res.sandbox_error


def test_grade_many_batches_everything_and_judges_identical_candidates_once() -> None:
    t1, t2 = BY_ID["builtin/sum-of-evens"], BY_ID["builtin/fizzbuzz-line"]
    items = [(t1, t1.reference_solution), (t1, "def sum_of_evens(n):\n    return 0\n"), (t1, t1.reference_solution),
             (t2, t2.reference_solution), (t2, "print(1)\n"), (t2, t2.reference_solution)]  # fmt: skip
    runner = CountingRunner()
    grades = grade_many(items, sandbox=runner)
    # joint jobs (a single-turn grade): one batch with each function program's one run (public and
    # hidden tests) and each stdio program's compile check and public runs, then one with the stdio
    # programs' hidden runs (they compile); no checker batch; duplicates not re-run
    assert runner.batches == [2 + 2 * (1 + len(t2.public_tests)), 2 * len(t2.hidden_tests)]
    assert [g.reward for g in grades] == [grade(t, c, sandbox=get_sandbox("process")).reward for t, c in items]
    assert grades[0] == grades[2] and grades[0] is not grades[2]
    assert [g.reward for g in grades] == [1.0, grades[1].reward, 1.0, 1.0, grades[4].reward, 1.0]
    assert grades[1].reward is not None and grades[1].reward < 0.8


def test_grade_many_rejects_bad_items() -> None:
    with pytest.raises(TypeError, match=r"items\[0\]: expected a \(task, code\) pair"):
        grade_many(["print(1)"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="2 items but 1 trace ids"):
        grade_many([(TASKS[0], "x"), (TASKS[0], "y")], trace_ids=["a"])


# ------------------------------------------------------------------------------ no attempt

NO_ATTEMPT_FUNCTION = {
    "empty": "",
    "comments-only": "# TODO\n",
    "pass": "pass\n",
    "something-else": "x = 1\ndef helper():\n    return 2\n",
    "empty-body": "def sum_of_evens(nums):\n    pass\n",
    "forgot-to-return": "def sum_of_evens(nums):\n    print(sum(n for n in nums if n % 2 == 0))\n",
    "exits-while-loading": "import sys\nsys.exit(0)\n",
    "os-exit-while-loading": "import os\nos._exit(0)\n",
    # raising or dying while being loaded answers no call either (it used to earn 0.0, above -0.5)
    "raises-while-loading": "import nope\n",
    "raises-after-defining": "def sum_of_evens(nums):\n    return sum(nums)\nraise ValueError('boom')\n",
    "exits-3-while-loading": "import sys\nsys.exit(3)\n",
    "os-exit-1-while-loading": "import os\nos._exit(1)\n",
    "kills-itself-while-loading": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
}  # fmt: skip
NO_ATTEMPT_STDIO = {"empty": "", "pass": "pass\n", "reads-and-says-nothing": "import sys\nsys.stdin.read()\n",
                    "blank-line": "print()\n", "crashes": "raise SystemExit(3)\n", "raises": "1 / 0\n",
                    "kills-itself": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"}  # fmt: skip


@pytest.mark.parametrize("name", list(NO_ATTEMPT_FUNCTION))
def test_a_program_that_answers_nothing_is_no_attempt(name: str) -> None:
    res = g(BY_ID["builtin/sum-of-evens"], NO_ATTEMPT_FUNCTION[name])
    assert (res.breakdown.tier, res.reward) == ("no_attempt", -0.5), res.breakdown
    assert res.breakdown.explanation.startswith("no attempt: ")


@pytest.mark.parametrize("name", list(NO_ATTEMPT_STDIO))
def test_a_stdio_program_that_prints_nothing_is_no_attempt(name: str) -> None:
    res = g(BY_ID["builtin/fizzbuzz-line"], NO_ATTEMPT_STDIO[name])
    assert (res.breakdown.tier, res.reward) == ("no_attempt", -0.5), res.breakdown
    assert res.breakdown.explanation == "no attempt: the program printed nothing"


def test_no_attempt_is_configurable_and_0_gives_back_the_plain_ladder() -> None:
    task, sb = BY_ID["builtin/sum-of-evens"], get_sandbox("process")
    assert grade(task, "", sandbox=sb, config=RewardConfig(no_attempt=-0.2)).reward == -0.2
    plain = grade(task, "", sandbox=sb, config=RewardConfig(no_attempt=0.0))
    assert plain.reward == 0.0 == g(task, wrong_answer(task)).reward
    # what answers something is not "no attempt": a call that raises, a wrong answer, output then a crash
    assert g(task, "def sum_of_evens(nums):\n    raise ValueError('no')\n").breakdown.tier == "partial"
    assert g(task, wrong_answer(task)).breakdown.tier == "partial"
    assert g(BY_ID["builtin/fizzbuzz-line"], "print('x')\nraise SystemExit(3)\n").breakdown.tier == "partial"
    # a load error is the no-attempt floor, and says so (its traceback is in the feedback)
    crash = g(task, "import nope\n")
    assert crash.breakdown.explanation == "no attempt: the program failed to load: ModuleNotFoundError: No module named 'nope'"
    assert all(c.status == "error" and "nope" in (c.traceback or "") for c in crash.feedback)
    assert grade(task, "import nope\n", sandbox=sb, config=RewardConfig(no_attempt=0.0)).reward == 0.0


# ------------------------------------------------------------------ one path, one more try


class FlakyRunner:
    """The process sandbox, except that the first ``failures`` batches fail as the sandbox itself
    can fail (every request answered with ``sandbox_error``)."""

    def __init__(self, failures: int) -> None:
        self.failures, self.batches = failures, 0

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        self.batches += 1
        if self.batches <= self.failures:
            return [ExecutionResult.infrastructure_failure("worker lost", trace_id=r.trace_id, backend="test") for r in requests]
        return get_sandbox("process").run_many(requests)


def test_a_sandbox_failure_is_run_once_more_by_the_one_path() -> None:
    task = BY_ID["builtin/sum-of-evens"]
    once = FlakyRunner(1)  # the joint run (public and hidden tests) fails: it is asked again
    assert grade(task, task.reference_solution, sandbox=once).reward == 1.0 and once.batches == 2
    twice = FlakyRunner(2)  # and the second try fails too: no reward
    res = grade(task, task.reference_solution, sandbox=twice)
    assert res.reward is None and res.sandbox_error == "worker lost" and twice.batches == 2
    env = CodeExecEnv(tasks=[task], executor=FlakyRunner(1))
    env.reset(seed=0)
    assert env.step(task.reference_solution)[1] == 1.0
    arith = registry.resolve("synthetic:arith/s0/d1/1")
    tokens = CodeExecTokensEnv(executor=FlakyRunner(1))
    tokens.reset(options={"problem_id": arith.problem_id})
    assert [tokens.step(a)[1] for a in tokens.reference_actions()][-1] == 1.0


def test_every_entry_point_gives_the_same_judged_reward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium as gym

    from .test_judge import KEY, Handler, Server

    monkeypatch.setenv("JUDGE_TEST_KEY", KEY)
    srv = Server(("127.0.0.1", 0), Handler)
    srv.requests = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        toml = tmp_path / "judge.toml"
        toml.write_text(f'[reward.judge]\nbase_url = "http://127.0.0.1:{srv.server_port}/v1"\nmodel = "good"\n'
                        'api_key = "${JUDGE_TEST_KEY}"\nweight = 0.3\nmode = "live"\nmax_retries = 0\n')  # fmt: skip
        cfg = RewardConfig.from_file(toml)
        sb = get_sandbox("process")
        task = registry.resolve("synthetic:arith/s0/d1/1")  # f(x) = 7 * x, writable by the token env too
        code = tokens_program("f", "7 * x")
        got: dict[str, float | None] = {}
        got["grade"] = grade(task, code, sandbox=sb, config=cfg).reward
        got["grade_many"] = grade_many([(task, code)], sandbox=sb, config=cfg)[0].reward
        env = gym.make("CodeExec-v0", tasks=[task], reward=str(toml), executor=sb)
        env.reset(seed=0)
        got["CodeExec-v0 step"] = env.step(code)[1]
        got["CodeExec-v0 evaluate"] = env.unwrapped.evaluate([code], problem_id=task.problem_id)[0].reward  # type: ignore[attr-defined]
        multi = gym.make("CodeExec-v0", tasks=[task], reward=str(toml), executor=sb, max_turns=3)
        multi.reset(seed=0)
        got["CodeExec-v0 multi-turn step"] = multi.step(code)[1]
        vec = gym.make_vec("CodeExec-v0", num_envs=2, tasks=[task], reward=str(toml), executor=sb)
        vec.reset(seed=0)
        got["CodeExecVectorEnv step"] = float(vec.step((code, code))[1][0])
        vec.close()
        got["evaluate"] = evaluate([(task, code)], executor=sb, config=cfg)[0].reward
        got["TRLReward"] = TRLReward("synthetic:arith", sandbox=sb, config=cfg)(["p"], [code], problem_id=[task.problem_id])[0]
        got["compute_score"] = compute_score("synthetic:arith", code, task.problem_id, config=cfg, sandbox=sb)
        tokens = gym.make("CodeExecTokens-v0", reward=str(toml), executor=sb)
        tokens.reset(options={"problem_id": task.problem_id})
        got["CodeExecTokens-v0"] = [tokens.step(a)[1] for a in tokens.unwrapped.reference_actions()][-1]  # type: ignore[attr-defined]
        judged = 1.0 * (1 - 0.3 * (1 - 0.9))
        assert got == {name: pytest.approx(judged) for name in got}, got
        assert len(srv.requests) >= len(got)  # every entry point asked the judge (live mode: no cache)
    finally:
        srv.shutdown()
        srv.server_close()


# ------------------------------------------------------------- a timeout cannot be dodged

# A correct but too-slow solution: it computes forever (the honest version runs out of time), or
# arms its own timer and fails just before the limit, hoping for a wrong answer's 0 instead of -0.5.
SLOW = "def sum_of_evens(nums):\n    while True:\n        pass\n"
DODGES = {
    "alarm-raises": "import signal\ndef _late(*a):\n    raise TimeoutError('not mine')\nsignal.signal(signal.SIGALRM, _late)\n"
                    "def sum_of_evens(nums):\n    signal.setitimer(signal.ITIMER_REAL, 0.9)\n    while True:\n        pass\n",
    # its own CPU clock (the one the sandbox's limit counts): compute, and give up at 92 % of it
    "cpu-clock-raises": "import time\ndef sum_of_evens(nums):\n    t = time.process_time()\n"
                        "    while time.process_time() - t < 0.92:\n        pass\n    raise ValueError('wrong, not slow')\n",
    "thread-interrupts-main": "import _thread, threading\ndef sum_of_evens(nums):\n"
                              "    threading.Timer(0.9, _thread.interrupt_main).start()\n    while True:\n        pass\n",
    "cpu-clock-exits": "import os, time\ndef sum_of_evens(nums):\n    t = time.process_time()\n"
                       "    while time.process_time() - t < 0.92:\n        pass\n    os._exit(1)\n",
    # and hides the time from the driver: it moves the driver's start mark up to the moment it raises
    "hides-its-time": "import ctypes, sys, time\ndef sum_of_evens(nums):\n    t = time.process_time()\n"
                      "    while time.process_time() - t < 0.95:\n        pass\n    f = sys._getframe(1)\n"
                      "    f.f_locals['t'] = time.perf_counter()\n"
                      "    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))\n"
                      "    raise ValueError('fast, honestly')\n",
}  # fmt: skip


def slow_task() -> Task:
    return BY_ID["builtin/sum-of-evens"].model_copy(update={"timeout_s": 1.0})


def test_a_too_slow_program_times_out() -> None:
    res = grade(slow_task(), SLOW, sandbox=get_sandbox("process"), hidden=False)
    assert (res.breakdown.tier, res.reward) == ("timeout", -0.5)


@pytest.mark.parametrize("name", list(DODGES))
def test_a_too_slow_program_that_stops_itself_before_the_limit_still_times_out(name: str) -> None:
    res = grade(slow_task(), DODGES[name], sandbox=get_sandbox("process"), hidden=False)
    assert res.sandbox_error is None
    assert (res.breakdown.tier, res.reward) == ("timeout", -0.5), (res.breakdown, [c.error for c in res.feedback])
    assert res.feedback[0].status == "timeout" and "or more of the time limit" in (res.feedback[0].error or "")


def test_a_fast_wrong_answer_still_earns_0_and_an_overstated_time_is_tampering() -> None:
    task = slow_task()
    fast = g(task, "def sum_of_evens(nums):\n    raise ValueError('fast and wrong')\n")
    assert (fast.breakdown.tier, fast.reward) == ("partial", 0.0)
    # times it did not spend, claimed by moving the driver's start mark back
    claim = ("import ctypes, sys\ndef sum_of_evens(nums):\n    f = sys._getframe(1)\n    f.f_locals['t'] -= 50.0\n"
             "    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))\n"
             "    return sum(n for n in nums if n % 2 == 0)\n")  # fmt: skip
    res = g(task, claim)
    assert res.breakdown.tier == "tampered" and "add up to more than" in res.breakdown.explanation


# ----------------------------------------------------------------- answer, then stall

EVENS_BODY = "    return sum(n for n in nums if n % 2 == 0)\n"
STALLS = {
    # every process answers its first call, then sleeps (or burns CPU) until the sandbox kills it:
    # resumed run after run, that was 1.0 for (tests) x (limit + start-up) of the machine's time
    "sleeps": "import time\nseen = []\ndef sum_of_evens(nums):\n    seen.append(1)\n    if len(seen) > 1:\n"
              "        time.sleep(100)\n" + EVENS_BODY,
    "burns-cpu": "seen = []\ndef sum_of_evens(nums):\n    seen.append(1)\n    if len(seen) > 1:\n        while True:\n"
                 "            pass\n" + EVENS_BODY,
}  # fmt: skip


@pytest.mark.parametrize("name", list(STALLS))
def test_answering_one_call_per_process_then_stalling_is_a_timeout(name: str) -> None:
    res = grade(slow_task(), STALLS[name], sandbox=get_sandbox("process"))
    assert res.sandbox_error is None
    assert (res.breakdown.tier, res.reward) == ("timeout", -0.5), res.breakdown
    assert [c.status for c in res.feedback] == ["passed", "timeout", "skipped"]


def test_a_program_slow_on_every_call_but_within_the_limit_is_resumed_within_the_grade_budget() -> None:
    # each call spends 0.45 s of CPU of its 1 s: two fit in a run, the third is cut short and resumed
    slow = "import time\ndef sum_of_evens(nums):\n    t = time.process_time()\n    while time.process_time() - t < 0.45:\n" \
           "        pass\n" + EVENS_BODY
    sb = get_sandbox("process")
    public = grade(slow_task(), slow, sandbox=sb, hidden=False)  # 3 tests: 1.35 s of calls, in the 2.035 s budget
    assert (public.breakdown.tier, public.reward) == ("all_public", 0.8), public.breakdown
    assert public.run.execution_time_ms > 1000 * (slow_task().timeout_s + START_UP_S)  # it was resumed
    # on all 8 tests the calls need 3.6 s: more than the grade's budget, a timeout (without one: every call)
    both = grade(slow_task(), slow, sandbox=sb)
    assert (both.breakdown.tier, both.reward) == ("timeout", -0.5), both.breakdown
    assert "time budget of 2.035 s was spent" in both.breakdown.explanation and both.breakdown.budget_s == 2.035
    unbounded = grade(slow_task(), slow, sandbox=sb, config=RewardConfig(grade_budget_runs=None))
    assert (unbounded.breakdown.tier, unbounded.reward, unbounded.breakdown.budget_s) == ("all_tests", 1.0, None)


# ------------------------------------------------------------------ the grade's time budget

MANY_TESTS = BY_ID["builtin/expression-eval"]  # 3 public + 12 hidden tests, 2 s each


def answer_then_stall(task: Task, first_s: float = 0.0, spin: bool = False) -> str:
    """The reference, except that every process answers its first call (after ``first_s`` of
    sleep: too little of the limit to look stalled) and then sleeps, or spins, until killed."""
    stall = "        while True:\n            pass\n" if spin else "        time.sleep(1000)\n"
    return (f"{task.reference_solution}\nimport time\n_calls = []\n_answer = {task.entry_point}\n"
            f"def {task.entry_point}(*args, **kwargs):\n    _calls.append(1)\n    if len(_calls) > 1:\n{stall}"
            f"    time.sleep({first_s})\n    return _answer(*args, **kwargs)\n")


STALLERS = {
    "sleeps": {},
    "spins": {"spin": True},
    # 70 % of the limit on its one answer: resumed run after run, 1.0 for 15 x 2.25 s without a budget
    "answers-slowly-then-sleeps": {"first_s": 1.4},
}


@pytest.mark.parametrize("name", list(STALLERS))
def test_answer_then_stall_on_many_tests_is_a_timeout_within_the_grade_budget(name: str) -> None:
    task, counter = MANY_TESTS, CountingRunner()
    res = grade(task, answer_then_stall(task, **STALLERS[name]), sandbox=counter)
    assert res.sandbox_error is None
    assert (res.breakdown.tier, res.reward) == ("timeout", -0.5), res.breakdown
    budget = budget_s(task)
    assert res.breakdown.budget_s == budget == round(1.5 * (2.0 + START_UP_S) + 15 * 0.02 * 2.0, 3)
    ran = counter.batches
    tests = len(task.public_tests) + len(task.hidden_tests)
    assert sum(ran) <= 3 < tests, ran  # without a budget: a run per test for the slow answerer, each to its limit
    assert res.spent_s <= budget
    # the runs' own durations, as the sandbox measured them: the budget plus a grace per run, where the
    # runs without a budget need (tests) x (limit + start-up). A run stopped for its CPU time costs that
    # CPU time: on a busy machine its wall clock waits for a CPU, up to 4x (the sandbox's load rule)
    judged = judge_many([(task, answer_then_stall(task, **STALLERS[name]))], sandbox=get_sandbox("process"))[0]
    runs = judged.public.executions + (judged.hidden.executions if judged.hidden else [])
    cost = sum(r.cpu_time_ms if r.timeout_kind == "cpu" else r.execution_time_ms for r in runs) / 1000
    assert cost <= budget + 1.0 * len(runs) < tests * (task.timeout_s + START_UP_S), [r.execution_time_ms for r in runs]
    assert judged.grade.breakdown.tier == "timeout"
    if name == "answers-slowly-then-sleeps":  # the budget, not the stall rule, stopped it: the feedback says so
        assert "the grade's time budget of" in res.breakdown.explanation
        assert any("time budget" in (c.error or "") for c in [*judged.public.cases, *(judged.hidden.cases if judged.hidden else [])])


def test_a_correct_program_never_meets_the_grade_budget() -> None:
    task, counter = MANY_TESTS, CountingRunner()
    res = grade(task, task.reference_solution, sandbox=counter)
    assert (res.breakdown.tier, res.reward) == ("all_tests", 1.0)
    assert counter.batches == [1]  # every test, public and hidden, in one run, as without a budget
    assert 0 < res.spent_s < budget_s(task) / 10 and res.breakdown.budget_s == budget_s(task)
    off = grade(task, task.reference_solution, sandbox=get_sandbox("process"), config=RewardConfig(grade_budget_runs=None))
    assert (off.reward, off.breakdown.hidden_passed, off.breakdown.budget_s) == (1.0, res.breakdown.hidden_passed, None)
    stdio = STDIO_TASKS[0]
    res = g(stdio, stdio.reference_solution)
    assert res.reward == 1.0 and 0 < res.spent_s < res.breakdown.budget_s == budget_s(stdio)  # type: ignore[operator]


def test_the_grade_budget_is_per_sample() -> None:
    task = MANY_TESTS
    fine = [task.reference_solution + f"\n# sample {k}\n" for k in range(3)]
    items = [(task, fine[0]), (task, answer_then_stall(task, first_s=1.4)), (task, fine[1]), (task, fine[2])]
    judged = judge_many(items, sandbox=get_sandbox("process"))
    assert [j.grade.breakdown.tier for j in judged] == ["all_tests", "timeout", "all_tests", "all_tests"]
    for j in (judged[0], *judged[2:]):
        assert j.hidden is not None and all(c.passed for c in [*j.public.cases, *j.hidden.cases])
        assert not j.public.budget_spent and not j.hidden.budget_spent and j.grade.spent_s < 1.0
    assert judged[1].public.budget_spent and judged[1].grade.spent_s <= budget_s(task)


def test_a_stdio_group_that_spends_the_grade_budget_stops_the_sample() -> None:
    # every run prints the right answer, then sleeps to its 2 s limit: the 3 public runs, started
    # together, are charged 6 s of the 5.695 s budget, so the 5 hidden runs never start
    task = BY_ID["builtin/fizzbuzz-line"]
    code = task.reference_solution + "\nimport sys, time\nsys.stdout.flush()\ntime.sleep(1000)\n"
    judged = judge_many([(task, code)], sandbox=get_sandbox("process"))[0]
    assert (judged.grade.breakdown.tier, judged.grade.reward) == ("timeout", -0.5), judged.grade.breakdown
    assert "time budget of 5.695 s was spent" in judged.grade.breakdown.explanation
    assert judged.public.budget_spent and judged.public.program_runs == 1 + len(task.public_tests)  # + the compile check
    assert judged.hidden is not None and judged.hidden.budget_spent and judged.hidden.program_runs == 0
    assert [c.status for c in judged.hidden.cases] == ["timeout"] + ["skipped"] * (len(task.hidden_tests) - 1)
    assert all("time budget" in (c.error or "") for c in judged.public.cases)


def test_a_sandbox_failure_is_not_charged_to_the_grade_budget() -> None:
    # the failed try's runs are made again under the full budget: the stalling program's verdict and
    # cost are those of a grade without the failure
    task = MANY_TESTS
    res = grade(task, answer_then_stall(task, first_s=1.4), sandbox=FlakyRunner(1))
    assert res.breakdown.tier == "timeout" and res.sandbox_error is None
    assert budget_s(task) - 0.5 < res.spent_s <= budget_s(task)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_the_grade_budget_must_be_positive_and_finite(bad: float) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="grade_budget_runs"):
        RewardConfig(grade_budget_runs=bad)
    with pytest.raises(ValueError, match="expected a positive finite number"):
        budget_s(MANY_TESTS, bad)
    assert RewardConfig(grade_budget_runs=None).grade_budget_runs is None


# What a run's RunRequest refuses (a NUL byte, a lone surrogate, an oversize program) is the
# program's syntax error, on every task kind and every entry point: never an exception.
REFUSED_PROGRAMS = {
    "nul": ("print(1)\x00\n", "NUL byte at offset 8"),
    "nul-in-function": ("def f(x):\n    return 1\x00\n", "NUL byte at offset 22"),
    "lone-surrogate": ("print('\udcff')\n", "not valid UTF-8"),
    # in characters under the env's largest action budget, in UTF-8 bytes over the program limit
    "oversize": ("#" + "\u00e9" * (MAX_PROGRAM_BYTES // 2) + "\n", f"over the limit of {MAX_PROGRAM_BYTES}"),
}


@pytest.mark.parametrize("kind", ["function", "stdio"])
@pytest.mark.parametrize("name", list(REFUSED_PROGRAMS))
def test_a_program_the_sandbox_refuses_is_a_syntax_error_at_every_entry_point(kind: str, name: str) -> None:
    import gymnasium as gym

    code, why = REFUSED_PROGRAMS[name]
    task = FUNCTION_TASKS[0] if kind == "function" else STDIO_TASKS[0]
    sb = get_sandbox("process")
    rewards: dict[str, float | None] = {}
    res = grade(task, code, sandbox=sb)
    assert res.breakdown.tier == "syntax_error" and why in res.breakdown.explanation, res.breakdown
    assert res.sandbox_error is None
    rewards["grade"] = res.reward
    rewards["grade_many"] = grade_many([(task, code), (task, task.reference_solution)], sandbox=sb)[0].reward
    env = gym.make("CodeExec-v0", tasks=[task], executor=sb, max_action_chars=MAX_TEXT_CHARS)
    env.reset(seed=0)
    _, rewards["CodeExec-v0 step"], terminated, _, info = env.step(code)
    assert terminated and info["reward_breakdown"]["tier"] == "syntax_error"
    fence = f"```python\n{code}```"
    rewards["TRLReward"] = TRLReward([task], sandbox=sb)(["p"], [fence], problem_id=[task.problem_id])[0]
    rewards["compute_score"] = compute_score("builtin", fence, task.problem_id, sandbox=sb)
    assert rewards == dict.fromkeys(rewards, -1.0), rewards


def test_a_program_at_the_size_limit_still_runs() -> None:
    task = STDIO_TASKS[0]
    code = task.reference_solution
    code += "#" * (MAX_PROGRAM_BYTES - len(code.encode()) - 1) + "\n"
    assert len(code.encode()) == MAX_PROGRAM_BYTES and g(task, code).reward == 1.0


# ------------------------------------------------------------------ joint runs (single-turn)


def _two_phase(task: Task, code: str) -> Grade:
    """The same grade with its public and hidden tests in runs of their own, one phase after the
    other (what a multi-turn step does, and what every grade did before joint jobs)."""
    from code_env.grading import RunSummary
    from registry.budget import Budget
    from registry.verify import Job, verify_many

    budget = Budget(budget_s(task))
    pub, hid = verify_many([Job(task, code, "public", "p/public", budget), Job(task, code, "hidden", "p/hidden", budget)],
                           get_sandbox("process"))  # fmt: skip
    b = aggregate(pub, None if pub.syntax_error else hid, RewardConfig())
    return Grade(problem_id=task.problem_id, reward=b.reward, breakdown=b, feedback=pub.cases, run=RunSummary.of(pub))


CRASH_IN_HIDDEN = "import os\ndef sum_of_evens(nums):\n    if nums == [2, 4, 6, 8]:\n        os._exit(3)\n" \
                  "    return sum(n for n in nums if n % 2 == 0)\n"  # fmt: skip


@pytest.mark.parametrize("which", ["reference", "wrong", "empty", "hard-coded", "syntax", "load-error", "crash-in-hidden"])
@pytest.mark.parametrize("task", [BY_ID["builtin/sum-of-evens"], BY_ID["builtin/edit-distance"], BY_ID["builtin/fizzbuzz-line"],
                                  *STDIO_TASKS[:1]], ids=lambda t: t.problem_id)  # fmt: skip
def test_a_joint_grade_gives_the_reward_and_feedback_of_separate_runs(task: Task, which: str) -> None:
    code = {"reference": task.reference_solution, "wrong": wrong_answer(task), "empty": empty_solution(task),
            "hard-coded": hard_coded(task), "syntax": "def (:\n", "load-error": "raise RuntimeError('at import')\n",
            "crash-in-hidden": CRASH_IN_HIDDEN if task.problem_id == "builtin/sum-of-evens" else task.reference_solution}[which]  # fmt: skip
    joint, apart = g(task, code), _two_phase(task, code)
    assert (joint.reward, joint.breakdown.tier) == (apart.reward, apart.breakdown.tier), (joint.breakdown, apart.breakdown)
    assert (joint.breakdown.public_passed, joint.breakdown.public_total) == (apart.breakdown.public_passed, apart.breakdown.public_total)
    assert [c.model_dump(exclude={"elapsed_ms"}) for c in joint.feedback] == [c.model_dump(exclude={"elapsed_ms"}) for c in apart.feedback]
    if which != "crash-in-hidden":  # (a run that ends in a hidden test answers none after it)
        assert joint.breakdown.hidden_total == apart.breakdown.hidden_total
        assert joint.breakdown.hidden_passed == apart.breakdown.hidden_passed


def test_a_joint_run_shows_what_the_program_printed_on_the_public_tests_only() -> None:
    task = BY_ID["builtin/sum-of-evens"]
    code = "import sys\nprint('LOADED', file=sys.stderr)\ndef sum_of_evens(nums):\n    print('ARGS', nums)\n" \
           "    return sum(n for n in nums if n % 2 == 0)\n"  # fmt: skip
    judged = judge_many([(task, code)], sandbox=get_sandbox("process"))[0]
    assert judged.grade.reward == 1.0
    (run,) = judged.public.executions  # one run answered both groups
    assert run.trace_id is not None and run.trace_id.endswith("/public+hidden")
    assert judged.hidden is not None and judged.hidden.executions == []
    shown = judged.grade.run.stderr
    assert "LOADED\n" in shown and all(f"ARGS {c.args[0]}" in shown for c in task.public_tests)
    assert not any(f"ARGS {c.args[0]}" in shown for c in task.hidden_tests)  # the hidden inputs are not shown
    assert all(f"ARGS {c.args[0]}" in run.stderr for c in task.hidden_tests)  # (the raw run, for the log, has them)
    env = CodeExecEnv(tasks=[task], executor=get_sandbox("process"))
    env.reset(seed=0)
    obs = env.step(code)[0]
    assert obs["stderr"] == shown
