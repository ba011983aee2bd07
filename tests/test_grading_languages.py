"""Grading programs in other languages than Python: a stdio task's tests judge a C++ (or Java,
Rust, JavaScript...) program as they judge Python; a compile error is the syntax-error tier with
the compiler's message; a program's public and hidden runs compile once; a function task refuses
another language before anything runs. The same through ``CodeExec-v0``, ``evaluate``, the TRL and
verl adapters, ``Task.solutions`` and ``registry.validate``."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import code_env  # noqa: F401  (registers the environments)
import registry
from code_env.adapters import extract_code, program_of
from code_env.env import evaluate
from code_env.grading import grade, grade_many
from code_env.trl import TRLReward, trl_rows
from code_env.verl import compute_score
from registry.validate import validate
from sandbox import LanguageUnavailableError, Sandbox
from sandbox.languages import discover_cached

from .conftest import get_sandbox

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not discover_cached("cpp").found, reason="no C++ toolchain")]

FIZZ = registry.resolve("builtin/fizzbuzz-line")
FIZZ_CPP = r"""#include <iostream>
int main() {
    int n; std::cin >> n;
    for (int i = 1; i <= n; i++) {
        if (i % 15 == 0) std::cout << "FizzBuzz\n";
        else if (i % 3 == 0) std::cout << "Fizz\n";
        else if (i % 5 == 0) std::cout << "Buzz\n";
        else std::cout << i << "\n";
    }
}
"""
# right on the public tests (n <= 15), wrong past 15 (the hidden tests go further)
FIZZ_CPP_PUBLIC_ONLY = FIZZ_CPP.replace("int n; std::cin >> n;", "int n; std::cin >> n; if (n > 15) n = 15;")


@pytest.fixture
def sb() -> Sandbox:
    return get_sandbox("process")


def test_a_cpp_program_gets_the_reward_ladder_and_compiles_once(sb: Sandbox) -> None:
    assert max(len(c.stdin or "") for c in FIZZ.hidden_tests) and any(int(c.stdin or "0") > 15 for c in FIZZ.hidden_tests)
    before = sb.compiles.misses
    g = grade(FIZZ, FIZZ_CPP + "// once\n", sandbox=sb, language="c++")
    assert (g.reward, g.breakdown.tier) == (1.0, "all_tests")
    assert sb.compiles.misses == before + 1  # every public and hidden run of it: one compile
    g = grade(FIZZ, FIZZ_CPP_PUBLIC_ONLY, sandbox=sb, language="cpp")
    assert g.breakdown.tier == "all_public" and g.reward == pytest.approx(0.8)
    g = grade(FIZZ, "int main( {\n", sandbox=sb, language="cpp")
    assert (g.reward, g.breakdown.tier) == (-1.0, "syntax_error")
    assert "main.cpp:1" in (g.run.stderr if g.run else ""), g.run


def test_a_function_task_refuses_another_language_before_anything_runs(sb: Sandbox) -> None:
    task = registry.resolve("builtin/sum-of-evens")
    with pytest.raises(LanguageUnavailableError, match="builtin/sum-of-evens: a function task's tests call the program's "
                       "function through a driver, which exists for python, javascript and typescript; a cpp program can answer stdio"):
        grade_many([(FIZZ, FIZZ_CPP), (task, "int main() {}")], sandbox=sb, language="cpp")
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        grade(FIZZ, "x", sandbox=sb, language="cobol")


def test_codeexec_in_cpp_serves_stdio_tasks_and_says_the_language(sb: Sandbox) -> None:
    env = gym.make("CodeExec-v0", language="cpp", executor=sb)
    assert {t.kind for t in env.unwrapped.tasks} == {"stdio"}
    obs, _ = env.reset(seed=0, options={"problem_id": FIZZ.problem_id})
    assert "Write the solution in C++" in obs["prompt"]
    _, reward, terminated, _, info = env.step(FIZZ_CPP)
    assert (reward, terminated, info["reward_breakdown"]["tier"]) == (1.0, True, "all_tests")
    with pytest.raises(ValueError, match="CodeExec-v0: language: unknown language 'klingon'"):
        gym.make("CodeExec-v0", language="klingon")
    with pytest.raises(ValueError, match="has no stdio task"):
        gym.make("CodeExec-v0", language="cpp", tasks="synthetic:arith", task_params={"n": 3})
    [e] = evaluate([(FIZZ, FIZZ_CPP)], executor=sb, language="cpp")
    assert e.reward == 1.0 and "in C++" in e.observation["prompt"]


def test_the_trl_and_verl_adapters_carry_the_language(sb: Sandbox) -> None:
    rows = trl_rows("builtin", language="cpp")
    assert rows and all(registry.resolve(r["problem_id"]).kind == "stdio" for r in rows)
    assert "```cpp block" in rows[0]["prompt"][0]["content"]
    plain = trl_rows([FIZZ], format="plain", language="cpp")[0]["prompt"]
    assert plain.endswith("```cpp\n")
    reply = f"Here it is:\n```cpp\n{FIZZ_CPP}```\nand in Python:\n```python\nprint(1)\n```\n"
    assert extract_code(reply, "cpp") == FIZZ_CPP and extract_code(reply) == "print(1)\n"
    assert program_of(FIZZ, FIZZ_CPP + "```\nDone.", plain, language="cpp") == FIZZ_CPP  # a base model's continuation
    reward = TRLReward("builtin", sandbox=sb, language="cpp", log=False)
    assert reward(prompts=[rows[0]["prompt"]], completions=[reply], problem_id=[FIZZ.problem_id]) == [1.0]
    score = compute_score("builtin", reply, FIZZ.problem_id, {"language": "cpp"}, sandbox=sb)
    assert score == 1.0


def test_other_languages_solutions_are_validated_as_the_reference_is(sb: Sandbox) -> None:
    good = FIZZ.model_copy(update={"solutions": {"cpp": FIZZ_CPP}})
    bad = FIZZ.model_copy(update={"problem_id": "x/bad", "solutions": {"cpp": FIZZ_CPP_PUBLIC_ONLY}})
    ok, refused = validate([good, bad], sb)
    assert ok.ok, ok.problems
    assert not refused.ok and any(p.startswith("cpp hidden test") for p in refused.problems), refused.problems
    # the schema: a language's name, stdio tasks only, Python's is the reference
    assert FIZZ.solutions.keys() == {"cpp", "java", "rust"}  # the builtin set's
    row = json.loads(FIZZ.model_copy(update={"solutions": {}}).model_dump_json())
    assert "solutions" not in row  # (a task without them dumps as before they existed)
    for solutions, message in [({"c++": "x"}, "use the language's name ('cpp')"), ({"cobol": "x"}, "unknown language"),
                               ({"python": "x"}, "Python's is reference_solution")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            registry.Task.model_validate({**row, "solutions": solutions})
    with pytest.raises(ValueError, match="solutions: a function task is graded in Python only"):
        registry.Task.model_validate({**json.loads(registry.resolve("builtin/sum-of-evens").model_dump_json()),
                                      "solutions": {"cpp": "x"}})  # fmt: skip


EVENS = registry.resolve("builtin/sum-of-evens")
EVENS_JS = "function sum_of_evens(nums) { return nums.filter((n) => n % 2 === 0).reduce((a, b) => a + b, 0); }\n"


@pytest.mark.parametrize("language", [pytest.param(n, marks=pytest.mark.skipif(not discover_cached(n).found, reason=f"no {n}"))
                                      for n in ("javascript", "typescript")])  # fmt: skip
@pytest.mark.parametrize(("code", "tier", "reward"), [
    pytest.param(EVENS_JS, "all_tests", 1.0, id="right"),
    pytest.param("const sum_of_evens = (nums) => { console.log('seen', nums); process.stdout.write('more'); return "
                 "nums.filter((n) => n % 2 === 0).reduce((a, b) => a + b, 0); };\n", "all_tests", 1.0, id="arrow-that-prints"),
    pytest.param("function sum_of_evens(nums) { return 0; }\n", "partial", None, id="wrong"),
    pytest.param("function sum_of_evens(nums) { return ; ]\n", "syntax_error", -1.0, id="syntax-error"),
    pytest.param("function other() { return 1; }\n", "no_attempt", -0.5, id="no-entry-point"),
    # the channel is the driver's: a line without its nonce is tampering, never an answer
    pytest.param("require('fs').writeSync(1, 'x {\"k\":\"loaded\"}\\n');\n" + EVENS_JS, "tampered|no_attempt", -0.5, id="forged-line"),
])  # fmt: skip
def test_a_javascript_program_answers_function_tasks_through_its_driver(sb: Sandbox, language: str, code: str, tier: str,
                                                                         reward: float | None) -> None:  # fmt: skip
    # (TypeScript: the driver goes into the program's source, which is compiled; a parse error is a compile error)
    g = grade(EVENS, code, sandbox=sb, language=language)
    assert g.breakdown.tier in tier.split("|"), (g.breakdown, g.run)
    if reward is not None:
        assert g.reward == reward
    if tier == "all_tests" and "seen" in code:  # what it printed is on stderr, for the public tests only
        assert g.run is not None and "seen" in g.run.stderr and "more" in g.run.stderr
    if tier == "syntax_error":
        said = (g.breakdown.explanation or "") + (g.run.stderr if g.run else "") + str(g.feedback)
        assert ("SyntaxError" if language == "javascript" else "main.ts:1:") in said, said


@pytest.mark.skipif(not discover_cached("javascript").found, reason="no Node.js")
def test_codeexec_in_javascript_serves_function_tasks_too(sb: Sandbox) -> None:
    env = gym.make("CodeExec-v0", language="js", executor=sb)
    assert {t.kind for t in env.unwrapped.tasks} == {"function", "stdio"}
    obs, _ = env.reset(seed=0, options={"problem_id": EVENS.problem_id})
    assert "Write the solution in JavaScript (Node.js): a function `sum_of_evens`" in obs["prompt"]
    _, reward, _, _, info = env.step(EVENS_JS)
    assert (reward, info["reward_breakdown"]["tier"]) == (1.0, "all_tests")
