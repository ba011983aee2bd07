"""Attacks on the grader itself: the result channel of a function task's run, the time limits and
the special checkers. The driver shares its process with the candidate, so a candidate can find
the nonce and the channel (the ``FIND`` prelude below does, by walking the garbage collector: a
real attack, checked by ``test_the_channel_can_be_found_and_a_perfect_forgery_is_just_a_solution``).
What it writes there is data to distrust: none of it can raise out of the grader, make a sandbox
error or earn more than an empty solution; per-test time limits rest on the sandbox's clocks, never
on timings the program reports; a checker that fails on a candidate's output fails the candidate.
"""

from __future__ import annotations

import json
import time

import pytest

import registry
from code_env.grading import Grade, grade, grade_many
from code_env.reward import RewardConfig
from registry import Task
from registry.verify import MAX_DEPTH, Channel, parse_value, read_channel

from .conftest import get_sandbox

TASKS = registry.load("builtin")
EVENS = registry.get(TASKS, "builtin/sum-of-evens")  # 3 public tests, 5 hidden
PLAIN = RewardConfig(no_attempt=0.0)  # the plain ladder: an empty solution earns 0.0

# Finds the channel's descriptor and tag in the driver's closures, as any candidate can.
FIND = r'''
import gc, json, os, re, sys, threading, time
def _channel():
    for o in gc.get_objects():
        if type(o).__name__ == "function" and o.__closure__:
            cells = []
            for c in o.__closure__:
                try:
                    cells.append(c.cell_contents)
                except ValueError:
                    pass
            tags = [x for x in cells if isinstance(x, bytes) and re.fullmatch(rb"[0-9a-f]{32} ", x)]
            fds = [x for x in cells if type(x) is int and x >= 3]
            if tags and fds:
                return tags[0], fds[0]
    raise RuntimeError("no channel found")
TAG, FD = _channel()
CASES = sys._getframe(0).f_back.f_locals["cases"]  # this run's inputs, from the driver's frame
def raw(line):
    os.write(FD, TAG + line + b"\n")
def forge(obj):
    raw(json.dumps(obj).encode())
def result(i, value="0", s=0.0):
    return {"k": "result", "i": i, "value": value, "s": s}
def answer(case):
    return json.dumps(sum(n for n in case["args"][0] if n % 2 == 0))
'''


def forged_run(*lines: str) -> str:
    """A program that writes its own transcript (Python expressions of lines) and exits before
    the driver can write anything: the host sees nothing but forged lines."""
    return FIND + "".join(f"{line}\n" for line in lines) + "os._exit(0)\n"


def then(*lines: str) -> str:
    """A program that writes forged lines while loading, then lets the driver run (its entry point
    answers nothing): forged and real lines mix."""
    return FIND + "".join(f"{line}\n" for line in lines) + "def sum_of_evens(nums):\n    return None\n"


ALL_RIGHT = "forge({'k': 'loaded'}); [forge(result(k, answer(c))) for k, c in enumerate(CASES)]; forge({'k': 'end', 'n': len(CASES)})"

# Each attack: the program, and the tier the grader must give it.
CHANNEL_ATTACKS: dict[str, tuple[str, str]] = {
    # the four parser crashers of the issue, each in a forged transcript
    "nesting-200000-deep": (forged_run("raw(b'[' * 200000 + b']' * 200000)"), "tampered"),
    "integer-of-5000-digits": (forged_run("forge({'k': 'loaded'})", "raw(b'{\"k\": \"result\", \"i\": 0, \"value\": \"0\", \"s\": ' + b'9' * 5000 + b'}')"), "tampered"),
    "time-of-400-digits": (forged_run("forge({'k': 'loaded'})", "raw(b'{\"k\": \"result\", \"i\": 0, \"value\": \"6\", \"s\": 1' + b'0' * 400 + b'}')"), "tampered"),
    "list-as-traceback": (forged_run("forge({'k': 'loaded'})", "forge({'k': 'error', 'i': 0, 'error': 'E', 'message': 'm', 'traceback': ['a', 'b'], 's': 0})"), "tampered"),
    # more malformed lines
    "not-json": (forged_run("raw(b'{not json')"), "tampered"),
    "not-an-object": (forged_run("raw(b'[1, 2, 3]')"), "tampered"),
    "unknown-kind": (forged_run("forge({'k': 'passed', 'i': 0})"), "tampered"),
    "extra-field": (forged_run("forge({'k': 'loaded', 'score': 1.0})"), "tampered"),
    "index-as-string": (forged_run("forge({'k': 'loaded'})", "forge({'k': 'result', 'i': '0', 'value': '6', 's': 0})"), "tampered"),
    "index-as-bool": (forged_run("forge({'k': 'loaded'})", "forge({'k': 'result', 'i': False, 'value': '6', 's': 0})"), "tampered"),
    "negative-index": (forged_run("forge({'k': 'loaded'})", "forge(result(-1, '6'))"), "tampered"),
    "value-not-a-string": (forged_run("forge({'k': 'loaded'})", "forge({'k': 'result', 'i': 0, 'value': 6, 's': 0})"), "tampered"),
    "nan-time": (forged_run("forge({'k': 'loaded'})", "raw(b'{\"k\": \"result\", \"i\": 0, \"value\": \"6\", \"s\": NaN}')"), "tampered"),
    "negative-time": (forged_run("forge({'k': 'loaded'})", "forge(result(0, '6', -5.0))"), "tampered"),
    "line-of-3-mib": (forged_run("forge({'k': 'loaded'})", "forge(result(0, '\"' + 'x' * (3 << 20) + '\"'))"), "tampered"),
    "huge-message": (forged_run("forge({'k': 'load_error', 'error': 'E', 'message': 'x' * 100000, 'traceback': None})"), "tampered"),
    "untagged-line": (FIND + "os.write(FD, b'PASSED 3/3\\n')\ndef sum_of_evens(nums):\n    return None\n", "tampered"),
    "wrong-tag": (FIND + "os.write(FD, b'0' * 32 + b' ' + json.dumps({'k': 'loaded'}).encode() + b'\\n')\n"
                  "def sum_of_evens(nums):\n    return None\n", "tampered"),
    "half-a-line-first": (FIND + "os.write(FD, TAG + b'{\"k\": \"res')\ndef sum_of_evens(nums):\n    return None\n", "tampered"),
    "flood-the-channel": (FIND + "os.write(FD, b'x' * (10 << 20))\ndef sum_of_evens(nums):\n    return None\n", "tampered"),
    # forged, duplicate, extra, missing lines, and lines after the end
    "forged-right-answers-beside-the-driver": (then(ALL_RIGHT), "tampered"),
    "duplicate-header": (then("forge({'k': 'loaded'})"), "tampered"),
    "result-before-the-header": (then("forge(result(0, '6'))"), "tampered"),
    "duplicate-result": (forged_run("forge({'k': 'loaded'})", "forge(result(0, answer(CASES[0])))", "forge(result(0, answer(CASES[0])))"), "tampered"),
    "results-out-of-order": (forged_run("forge({'k': 'loaded'})", "forge(result(1, answer(CASES[1])))", "forge(result(0, answer(CASES[0])))"), "tampered"),
    "extra-result": (forged_run(ALL_RIGHT.replace("; forge({'k': 'end'", "; forge(result(len(CASES))); forge({'k': 'end'")), "tampered"),
    "missing-results-then-end": (forged_run("forge({'k': 'loaded'})", "forge(result(0, answer(CASES[0])))", "forge({'k': 'end', 'n': 1})"), "tampered"),
    "early-end": (forged_run("forge({'k': 'loaded'})", "forge({'k': 'end', 'n': 0})"), "tampered"),
    "a-line-after-the-end": (forged_run(ALL_RIGHT, "forge(result(0, answer(CASES[0])))"), "tampered"),
    "header-after-a-load-error": (forged_run("forge({'k': 'load_error', 'error': 'E', 'message': 'm', 'traceback': None})", "forge({'k': 'loaded'})"), "tampered"),
    "after-the-drivers-end": (FIND + "import json.encoder\n_encode, _done = json.JSONEncoder.encode, []\n"
                              "def _hook(self, o):\n    if not _done and isinstance(o, dict) and o.get('k') == 'end':\n"
                              "        _done.append(1)\n        raw(_encode(self, {'k': 'end', 'n': o['n']}).encode())\n"
                              "        raw(_encode(self, result(0, '6')).encode())\n"
                              "    return _encode(self, o)\njson.JSONEncoder.encode = _hook\n"
                              "def sum_of_evens(nums):\n    return None\n", "tampered"),
    "a-thread-writing-all-along": (FIND + "def _spam():\n    for _ in range(200):\n        forge(result(0, answer(CASES[0])))\n"
                                   "        time.sleep(0.001)\nthreading.Thread(target=_spam, daemon=True).start()\ntime.sleep(0.01)\n"
                                   "def sum_of_evens(nums):\n    time.sleep(0.01)\n    return None\n", "tampered"),
    "frame-walk-to-the-emitter": ("import sys, json\ndef sum_of_evens(nums):\n    emit = sys._getframe(1).f_locals['emit']\n"
                                  "    emit({'k': 'result', 'i': 0, 'value': json.dumps(sum(n for n in nums if n % 2 == 0)), 's': 0})\n"
                                  "    return None\n", "tampered"),
    "emitter-with-a-list-traceback": ("import sys\ndef sum_of_evens(nums):\n    sys._getframe(1).f_locals['emit']({'k': 'error', 'i': 0, "
                                      "'error': 'E', 'message': 'm', 'traceback': [1], 's': 0})\n", "tampered"),
    "patched-encoder": (FIND + "import json.encoder\njson.JSONEncoder.encode = lambda self, o: '[\"anything\"]'\n"
                        "def sum_of_evens(nums):\n    return 6\n", "tampered"),
    "close-the-channel": (FIND + "os.close(FD)\ndef sum_of_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n", "tampered"),
    "close-every-descriptor": ("import os\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
                               "def sum_of_evens(nums):\n    return 0\n", "tampered"),
    "redirect-the-channel-to-stderr": (FIND + "os.dup2(2, FD)\ndef sum_of_evens(nums):\n    return None\n", "no_attempt"),
    "write-guesses-to-every-descriptor": ("import os, json\nfor fd in range(3, 64):\n    try:\n"
                                          "        os.write(fd, b'0' * 32 + b' ' + json.dumps({'k': 'result', 'i': 0, 'value': '6', 's': 0}).encode() + b'\\n')\n"
                                          "    except OSError:\n        pass\ndef sum_of_evens(nums):\n    return None\n", "tampered"),
    "lone-surrogates": (forged_run("forge({'k': 'load_error', 'error': 'E\\ud800', 'message': '\\udcff' * 50, 'traceback': '\\ud800'})"), "tampered"),
    "exit-after-a-forged-header": (forged_run("forge({'k': 'loaded'})"), "no_attempt"),
}  # fmt: skip


@pytest.fixture(scope="module")
def empty() -> dict[str, float | None]:
    sb = get_sandbox("process")
    return {"plain": grade(EVENS, "", sandbox=sb, config=PLAIN).reward, "default": grade(EVENS, "", sandbox=sb).reward}


def graded(code: str, task: Task = EVENS, config: RewardConfig | None = None) -> Grade:
    res = grade(task, code, sandbox=get_sandbox("process"), config=config)
    assert res.sandbox_error is None, res.sandbox_error  # nothing a program does is the sandbox's failure
    assert res.model_dump_json()  # everything in a grade serialises (logs, replays)
    return res


@pytest.mark.parametrize("name", list(CHANNEL_ATTACKS))
def test_attacks_on_the_result_channel_never_pay(name: str, empty: dict[str, float | None]) -> None:
    code, tier = CHANNEL_ATTACKS[name]
    plain, default = grade_many([(EVENS, code)], sandbox=get_sandbox("process"), config=PLAIN)[0], graded(code)
    assert plain.sandbox_error is None
    assert default.breakdown.tier == tier, default.breakdown
    assert plain.reward is not None and empty["plain"] == 0.0 and plain.reward <= empty["plain"], plain.breakdown
    assert default.reward is not None and empty["default"] is not None and default.reward <= empty["default"]
    if tier == "tampered":
        assert "tampered with the verifier's result channel" in default.breakdown.explanation
        assert all(c.status == "error" for c in default.feedback)


def test_the_channel_can_be_found_and_a_perfect_forgery_is_just_a_solution() -> None:
    # The attacks above are real: this one finds the channel and writes a transcript the host
    # accepts. It had to compute every right answer to do so, within the run's budget: it is a
    # solution, and earns exactly what returning those answers earns.
    res = graded(forged_run(ALL_RIGHT))
    assert res.breakdown.tier == "all_tests"
    wrong = graded(forged_run(ALL_RIGHT.replace("answer(c)", "'7'")))
    assert wrong.breakdown.tier == "partial" and wrong.reward == 0.0  # the same as returning 7 honestly
    assert wrong.reward == graded("def sum_of_evens(nums):\n    return 7\n").reward


RETURNED_VALUES = {
    "nested-150-deep": "def sum_of_evens(nums):\n    x = 0\n    for _ in range(150):\n        x = [x]\n    return x\n",
    "nested-100000-deep": "def sum_of_evens(nums):\n    x = 0\n    for _ in range(100000):\n        x = [x]\n    return x\n",
    "int-of-5000-digits": "import sys\nsys.set_int_max_str_digits(0)\ndef sum_of_evens(nums):\n    return 10 ** 5000\n",
    "two-mib-of-json": "def sum_of_evens(nums):\n    return 'x' * (2 << 20)\n",
    "eq-always-true": "class Yes:\n    def __eq__(self, other):\n        return True\ndef sum_of_evens(nums):\n    return Yes()\n",
    "nan": "def sum_of_evens(nums):\n    return float('nan')\n",
    "unprintable-exception": "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
                             "def sum_of_evens(nums):\n    raise E()\n",
    "surrogate-exception": "def sum_of_evens(nums):\n    raise ValueError('\\ud800' * 10)\n",
}  # fmt: skip


@pytest.mark.parametrize("name", list(RETURNED_VALUES))
def test_returned_values_outside_the_bounds_fail_their_tests(name: str) -> None:
    res = graded(RETURNED_VALUES[name])
    assert res.reward == 0.0 and res.breakdown.tier == "partial", res.breakdown
    assert all(c.status in ("error", "failed") for c in res.feedback)


HEAVY_VALUES = {
    # every call returns ~1 MiB of nested lists (just under the driver's limit on one value): the
    # host parsed ~1 s of CPU per MiB of them, ~6 s for this program, whatever its own budget
    "nested": "def sum_of_evens(nums):\n    return [[[[0]]]] * 90_000\n",
    "deep-and-wide": "def sum_of_evens(nums):\n    x = []\n    for _ in range(98):\n        x = [x]\n"
                     "    return [x] * 5_000\n",
    # the same through forged lines: their structure (outside strings) is not the driver's
    "forged": FIND + "forge({'k': 'loaded', 'pad': [[[[0]]]] * 150_000})\nos._exit(0)\n",
}


@pytest.mark.parametrize("name", list(HEAVY_VALUES))
def test_the_hosts_parsing_is_bounded_by_the_runs_own_budget(name: str) -> None:
    started = time.process_time()
    res = graded(HEAVY_VALUES[name])
    host_cpu_s = time.process_time() - started
    if name == "forged":
        assert res.breakdown.tier == "tampered" and "outside its strings" in res.breakdown.explanation, res.breakdown
    else:
        assert res.reward == 0.0 and all(c.status == "error" for c in res.feedback), res.feedback
        assert all("the verifier" in (c.error or "") for c in res.feedback), [c.error for c in res.feedback]
    # two runs of 2.25 s of budget each: the host parses at most a small share of that (CPU
    # time, which a busy machine does not inflate; it was ~6 s)
    assert host_cpu_s < 2.0, host_cpu_s


def test_a_runs_parsing_budget_is_shared_by_its_values() -> None:
    # ~120k values per call: the first fits what the verifier parses for a run (225k for this
    # task's budget), so it is judged (wrong); the next calls of the same run are over it
    res = graded("def sum_of_evens(nums):\n    return [[]] * 60_000\n")
    assert [c.status for c in res.feedback] == ["failed", "error", "error"], res.feedback
    assert "over the" in (res.feedback[1].error or "") and "this run" in (res.feedback[1].error or "")


# ------------------------------------------------------------------------------------- time


SLOW = "import time\ndef sum_of_evens(nums):\n    t = time.process_time()\n    while time.process_time() - t < BURN:\n        pass\n" \
       "    return sum(n for n in nums if n % 2 == 0)\n"  # fmt: skip
# the same solution, which also computes every answer while loading and writes its own result
# lines with a zero time, then exits before the driver can call it
SLOW_FORGED = FIND + "start = sys._getframe(0).f_back.f_locals['start']\nforge({'k': 'loaded'})\n" \
    "for k, c in enumerate(CASES):\n    t = time.process_time()\n    while time.process_time() - t < BURN:\n        pass\n" \
    "    forge(result(start + k, answer(c), 0.0))\nforge({'k': 'end', 'n': len(CASES)})\nos._exit(0)\n"  # fmt: skip


@pytest.mark.parametrize("burn", [1.5, 0.3])
def test_a_slow_solution_with_forged_timings_earns_no_more_than_its_honest_twin(burn: float) -> None:
    # per-test limit 1 s: every call takes 1.5 s of CPU (too slow) or 0.3 s (fine, but all of them
    # together are more than one per-test limit)
    task = EVENS.model_copy(update={"timeout_s": 1.0})
    honest = graded(SLOW.replace("BURN", str(burn)), task)
    forged = graded(SLOW_FORGED.replace("BURN", str(burn)), task)
    assert honest.reward is not None and forged.reward is not None
    assert forged.reward <= honest.reward, (forged.breakdown, honest.breakdown)
    if burn > 1:
        assert honest.breakdown.tier == forged.breakdown.tier == "timeout"
        assert honest.feedback[0].status == "timeout" and [c.status for c in honest.feedback[1:]] == ["skipped"] * 2
    else:
        # 8 x 0.3 s is more than the grade's time budget (2.035 s, registry.budget): a timeout
        assert honest.breakdown.tier == "timeout" and "time budget" in honest.breakdown.explanation
        # without the budget every call runs: the forger's zero times hide 0.3 s per answer from the
        # driver, not from the host's CPU clock: its cut-short run looks like a stall (its call in
        # flight had its limit), so it may lose its hidden run, never gain
        off = RewardConfig(grade_budget_runs=None)
        honest = graded(SLOW.replace("BURN", str(burn)), task, off)
        forged = graded(SLOW_FORGED.replace("BURN", str(burn)), task, off)
        assert forged.reward is not None and honest.reward is not None and forged.reward <= honest.reward
        assert honest.breakdown.tier == "all_tests" and forged.breakdown.tier in ("all_tests", "all_public")


def test_an_infinite_loop_costs_one_per_test_limit_not_the_sum() -> None:
    # 3 public and 5 hidden tests of 2 s each: the loop is stopped once per run, in the first
    # call; the rest are skipped (the sandbox's own clock: its CPU time stays near one limit)
    res = graded("def sum_of_evens(nums):\n    while True:\n        pass\n")
    assert res.breakdown.tier == "timeout"
    assert [c.status for c in res.feedback] == ["timeout", "skipped", "skipped"]
    assert "measured by the sandbox" in (res.feedback[0].error or "")


def test_a_run_out_of_budget_after_some_answers_is_resumed_not_failed() -> None:
    # each call takes 0.4 s of CPU, the limit is 0.5 s: two calls never fit in one run's budget,
    # so the verifier resumes from the first unanswered call until every call has run (with no
    # grade budget: 8 x 0.4 s is more than this task's, 1.205 s, a timeout with it)
    task = EVENS.model_copy(update={"timeout_s": 0.5})
    off = RewardConfig(grade_budget_runs=None)
    res = grade_many([(task, SLOW.replace("BURN", "0.4"))], sandbox=get_sandbox("process"), config=off)[0]
    assert res.breakdown.tier == "all_tests", res.breakdown
    bounded = grade_many([(task, SLOW.replace("BURN", "0.4"))], sandbox=get_sandbox("process"))[0]
    assert bounded.breakdown.tier == "timeout" and "time budget of 1.205 s" in bounded.breakdown.explanation


# ---------------------------------------------------------------------------------- checkers

# A naive checker: any list of ints summing to the input, checked by a recursive walk that has
# room for 60 levels. Deeper outputs make it crash, which is the candidate's doing.
NAIVE_CHECKER = r"""
import json, sys
sys.setrecursionlimit(60)
def total(x):
    return x if isinstance(x, int) else sum(total(y) for y in x)
for case in json.load(sys.stdin)["cases"]:
    print(1 if total(case["output"]) == case["args"][0] else 0)
"""


def checker_task(checker: str = NAIVE_CHECKER) -> Task:
    def case(n: int) -> dict[str, object]:
        return {"args": [n], "expected": [n], "checker": checker}
    return Task.model_validate({
        "problem_id": "test/summands", "prompt": "return any list of integers summing to n", "kind": "function",
        "entry_point": "summands", "reference_solution": "def summands(n):\n    return [n]\n",
        "public_tests": [case(n) for n in (3, 10, 7)], "hidden_tests": [case(n) for n in (1, 5, 100)],
    })  # fmt: skip


def test_a_checker_that_fails_on_a_candidates_output_fails_the_candidate() -> None:
    task = checker_task()
    assert graded(task.reference_solution, task).reward == 1.0
    assert graded("def summands(n):\n    return [1] * n\n", task).reward == 1.0  # another right answer
    deep = "def summands(n):\n    x = [n]\n    for _ in range(90):\n        x = [x]\n    return x\n"  # within the host's bounds
    assert 90 < MAX_DEPTH
    res = graded(deep, task)
    assert res.reward == 0.0 and res.breakdown.tier == "partial", res.breakdown
    assert {c.error for c in res.feedback} == {"the task's checker failed on this output"}
    # one bad output does not sink the others judged in the same checker run
    mixed = graded("def summands(n):\n    if n == 10:\n        x = [n]\n        for _ in range(90):\n            x = [x]\n"
                   "        return x\n    return [n]\n", task)  # fmt: skip
    assert [c.status for c in mixed.feedback] == ["passed", "failed", "passed"]
    assert mixed.breakdown.hidden_passed == 3


NAIVE_STDIO_CHECKER = r"""
import json, sys
for case in json.load(sys.stdin)["cases"]:
    a, b = (int(x) for x in case["output"].split())  # crashes on any other output
    print(1 if a + b == int(case["stdin"]) and a > 0 and b > 0 else 0)
"""


def test_a_stdio_checker_that_crashes_on_an_output_fails_that_test_only() -> None:
    def case(n: int) -> dict[str, object]:
        return {"stdin": f"{n}\n", "expected_stdout": f"1 {n - 1}\n", "checker": NAIVE_STDIO_CHECKER}
    task = Task.model_validate({
        "problem_id": "test/split-naive", "prompt": "print two positive integers summing to n", "kind": "stdio",
        "reference_solution": "n = int(input())\nprint(1, n - 1)\n",
        "public_tests": [case(n) for n in (2, 10, 7)], "hidden_tests": [case(n) for n in (3, 100)],
    })  # fmt: skip
    assert graded(task.reference_solution, task).reward == 1.0
    res = graded("n = int(input())\nprint('not numbers' if n == 10 else f'1 {n - 1}')\n", task)
    assert [c.status for c in res.feedback] == ["passed", "failed", "passed"]
    assert res.feedback[1].error == "the task's checker failed on this output" and res.breakdown.hidden_passed == 2


def test_only_a_checker_that_fails_on_the_references_outputs_is_a_task_defect() -> None:
    task = checker_task("import sys\nsys.exit(2)\n")
    res = grade(task, task.reference_solution, sandbox=get_sandbox("process"))
    assert res.reward is None and res.sandbox_error and "checker failed on the reference's outputs too" in res.sandbox_error


# ------------------------------------------------------------------------- the host's parser


def transcript(nonce: str, *bodies: str) -> str:
    return "".join(f"{nonce} {b}\n" for b in bodies)


HOSTILE = [
    "[" * 200_000 + "]" * 200_000,
    '{"k": "result", "i": 0, "value": "0", "s": ' + "9" * 5000 + "}",
    '{"k": "result", "i": 0, "value": "0", "s": 1' + "0" * 400 + "}",
    '{"k": "error", "i": 0, "error": "E", "message": "m", "traceback": ["x"], "s": 0}',
    '{"k": "result", "i": ' + "9" * 5000 + ', "value": "0", "s": 0}',
    '{"k": "result", "i": 0, "value": "0", "s": 1e999}',
    '{"k": "result", "i": 0, "value": "0", "s": Infinity}',
    '{"k": "loaded", "k": "end"}',
    '"loaded"',
    "null",
    "\x00\ud800\udfff",
    "{" * 5000,
]


@pytest.mark.parametrize("body", HOSTILE, ids=range(len(HOSTILE)))
def test_the_parser_never_raises(body: str) -> None:
    nonce = "ab" * 16
    for text in (transcript(nonce, body), transcript(nonce, '{"k": "loaded"}', body), body, body + "\n"):
        ch = read_channel(text, nonce, 0, 3)
        assert isinstance(ch, Channel) and ch.tampered


def test_values_are_parsed_within_bounds() -> None:
    assert parse_value(json.dumps([[1, {"a": [2]}], "x"])) == ([[1, {"a": [2]}], "x"], None)
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert parse_value(deep)[1] is not None and parse_value("[" * 200_000 + "]" * 200_000)[1] is not None
    assert parse_value("9" * 5000)[1] is not None and parse_value("nope")[1] is not None
    nonce = "cd" * 16
    ok = read_channel(transcript(nonce, '{"k": "loaded"}', '{"k": "result", "i": 1, "value": "3", "s": 0.5}',
                                 '{"k": "end", "n": 1}'), nonce, 1, 2)  # fmt: skip
    assert ok.tampered is None and ok.ended and [c.i for c in ok.calls] == [1]
    cut = read_channel(transcript(nonce, '{"k": "loaded"}') + f'{nonce} {{"k": "resu', nonce, 0, 2)
    assert cut.tampered is None and not cut.ended and cut.calls == []  # a line cut short by a kill is not tampering
