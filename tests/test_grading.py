"""Verification and reward: references score 1.0, the reward tiers, and reward hacking — none of
the tricks earns more than an empty solution, except hard-coding the public outputs (<= 0.8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import registry
from code_env.grading import Grade, aggregate, grade
from code_env.reward import RewardConfig
from registry import Task
from registry.verify import Verification

from .conftest import get_sandbox

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


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.problem_id)
def test_every_reference_solution_scores_1(task: Task) -> None:
    res = g(task, task.reference_solution)
    assert res.reward == 1.0, res.breakdown
    assert res.breakdown.tier == "all_tests"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.problem_id)
def test_hard_coding_the_public_outputs_stays_at_or_below_08(task: Task) -> None:
    if task.kind == "function":
        table = {json.dumps([c.args, c.kwargs]): c.expected for c in task.public_tests}
        code = (
            f"import json\nTABLE = {json.dumps(table)!r}\nTABLE = json.loads(TABLE)\n"
            f"def {task.entry_point}(*args, **kwargs):\n    return TABLE[json.dumps([list(args), kwargs])]\n"
        )
    else:
        table = {c.stdin: c.expected_stdout for c in task.public_tests}
        code = f"import sys, json\nTABLE = json.loads({json.dumps(table)!r})\nsys.stdout.write(TABLE[sys.stdin.read()])\n"
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
def test_reward_hacks_earn_no_more_than_an_empty_solution(problem_id: str, hack: str) -> None:
    task = BY_ID[problem_id]
    honest_floor = g(task, empty_solution(task)).reward
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
