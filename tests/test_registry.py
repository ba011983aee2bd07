"""The task schema, its JSONL round trip and errors, comparators, and the builtin set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import registry
from registry import (
    Comparator,
    Task,
    TaskFileError,
    TestCase,
    UnknownTaskError,
    UnknownTaskSetError,
)
from registry.comparators import stdout_equal, values_equal


def test_public_api_is_explicit() -> None:
    public = {n for n in dir(registry) if not n.startswith("_")}
    modules = {"builtin_source", "builtin_source_2", "builtin_source_3", "builtin_solutions", "comparators", "errors", "loaders", "schema", "verify", "build_builtin", "humaneval", "validate", "synthetic", "sampling", "timing", "trivial", "phases", "budget"}
    assert set(registry.__all__) == public - modules


def test_builtin_set_loads_and_round_trips(tmp_path: Path) -> None:
    tasks = registry.load("builtin")
    assert registry.list() == ["builtin", "humaneval", "synthetic:arith", "synthetic:list", "synthetic:string"]
    path = tmp_path / "copy.jsonl"
    registry.write_tasks(tasks, path)
    # the round trip, not the admission: tests/test_adapters.py validates the builtin set (as
    # `code-env tasks validate` does), and validating it twice costs the suite a minute and more
    assert registry.load(str(path), validate=False) == tasks


def test_builtin_tasks_have_enough_tests_and_both_kinds() -> None:
    tasks = registry.load("builtin")
    assert len(tasks) >= 60
    assert {t.kind for t in tasks} == {"function", "stdio"}
    for level in range(1, 6):
        assert sum(t.difficulty == level for t in tasks) >= 5, level
    # some tasks have more than one right answer, judged by a checker, of both kinds
    assert {t.kind for t in tasks if any(c.checker for c in t.public_tests + t.hidden_tests)} == {"function", "stdio"}
    for t in tasks:
        assert len(t.public_tests) >= 3 and len(t.hidden_tests) >= 5, t.problem_id
        assert t.reference_solution.strip()


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", r"bad\.jsonl:2: invalid JSON"),
        ("[1, 2]", r"bad\.jsonl:2: expected a JSON object, got list"),
        ('{"problem_id": "x"}', r"bad\.jsonl:2: field 'prompt': Field required"),
        ('{"problem_id": "x", "prompt": "p", "kind": "function", "entry_point": "f", "reference_solution": "",'
         ' "public_tests": [{"args": [], "expected": 1, "comparator": {"kind": "fuzzy"}}]}',
         r"field 'public_tests\.0\.comparator\.kind'"),
        ('{"problem_id": "x", "prompt": "p", "kind": "function", "reference_solution": "",'
         ' "public_tests": [{"args": [], "expected": 1}]}', r"needs an entry_point"),
        ('{"problem_id": "x", "prompt": "p", "kind": "stdio", "reference_solution": "", "colour": "red",'
         ' "public_tests": [{"stdin": "", "expected_stdout": ""}]}', r"field 'colour': Extra inputs are not permitted"),
    ],
    ids=["bad-json", "not-object", "missing-field", "unknown-comparator", "no-entry-point", "unknown-field"],
)
def test_malformed_task_files_name_file_line_and_field(tmp_path: Path, line: str, match: str) -> None:
    good = registry.load("builtin")[0].model_dump_json()
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(TaskFileError, match=match):
        registry.load(str(path))


def test_duplicate_ids_and_missing_files(tmp_path: Path) -> None:
    good = registry.load("builtin")[0].model_dump_json()
    path = tmp_path / "dup.jsonl"
    path.write_text(f"{good}\n\n# a comment\n{good}\n")
    with pytest.raises(TaskFileError, match=r"dup\.jsonl:4: field 'problem_id': duplicate of line 1"):
        registry.load(str(path))
    with pytest.raises(TaskFileError, match="no such file"):
        registry.load(str(tmp_path / "nope.jsonl"))


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(UnknownTaskSetError, match=r"unknown task set 'bultin' \(known: builtin.*did you mean 'builtin'"):
        registry.load("bultin")
    tasks = registry.load("builtin")
    with pytest.raises(UnknownTaskError, match="did you mean 'builtin/run-length'"):
        registry.get(tasks, "builtin/run-lenght")


@pytest.mark.parametrize(
    ("expected", "got", "cmp", "equal"),
    [
        ((1, [2, 3]), [1, [2, 3]], Comparator(), True),
        ([1, 2], [2, 1], Comparator(), False),
        ([1, 2, 2], [2, 1, 2], Comparator(kind="unordered"), True),
        ([1, 2, 2], [2, 1, 1], Comparator(kind="unordered"), False),
        ([0.1 + 0.2, {"a": 1.0}], [0.3, {"a": 1.0000000001}], Comparator(kind="float", abs_tol=1e-6), True),
        ([0.3], [0.31], Comparator(kind="float", abs_tol=1e-6), False),
        ({"a": [1]}, {"a": [1], "b": 2}, Comparator(), False),
        (None, 0, Comparator(), False),
        ("1", 1, Comparator(), False),
    ],
)
def test_value_comparators(expected: object, got: object, cmp: Comparator, equal: bool) -> None:
    assert values_equal(expected, got, cmp) is equal


@pytest.mark.parametrize(
    ("expected", "got", "kind", "equal"),
    [
        ("1 2\n3\n", "1 2\n3\n", "exact", True),
        ("1 2\n3\n", "1 2 3", "exact", False),
        ("1 2\n3\n", " 1   2 3 \n\n", "whitespace", True),
        ("1.0 2\n", "1.0000000001 2", "tokens", True),
        ("a b", "a c", "tokens", False),
        ("x y z", "z x y", "unordered", True),
    ],
)
def test_stdout_comparators(expected: str, got: str, kind: str, equal: bool) -> None:
    assert stdout_equal(expected, got, Comparator(kind=kind)) is equal  # type: ignore[arg-type]


def test_task_rejects_inconsistent_tests() -> None:
    with pytest.raises(ValueError, match="a stdio test needs stdin and expected_stdout"):
        Task(problem_id="x", prompt="", kind="stdio", reference_solution="", public_tests=[TestCase(args=[1], expected=1)])
    with pytest.raises(ValueError, match="expected is not JSON-serialisable"):
        Task(problem_id="x", prompt="", kind="function", entry_point="f", reference_solution="",
             public_tests=[TestCase(args=[], expected=float("nan"))])  # fmt: skip
    with pytest.raises(TypeError, match="takes no parameters"):
        registry.load("builtin", n=3)
    assert json.loads(TestCase(args=[1, "a"], kwargs={"k": None}).model_dump_json())["args"] == [1, "a"]


# every shipped set, and the generated ones with other parameters than their defaults
SHIPPED = [("builtin", {}), ("humaneval", {}), *((f"synthetic:{f}", {}) for f in ("arith", "list", "string")),
           *((f"synthetic:{f}", {"n": 300, "seed": s, "difficulty": d}) for f in ("arith", "list", "string")
             for s in (1, 2) for d in (None, 1, 5))]  # fmt: skip


@pytest.mark.parametrize(("name", "params"), SHIPPED, ids=[f"{n}{p or ''}" for n, p in SHIPPED])
def test_no_trivial_answer_passes_every_public_test(name: str, params: dict[str, object]) -> None:
    from registry.trivial import trivial_passes

    from .conftest import get_sandbox

    tasks = registry.load(name, **params)
    assert trivial_passes(tasks, get_sandbox("process")) == {}


@pytest.mark.parametrize(("name", "params"), SHIPPED, ids=[f"{n}{p or ''}" for n, p in SHIPPED])
def test_every_shipped_task_with_two_tests_keeps_one_hidden(name: str, params: dict[str, object]) -> None:
    from registry.validate import NO_HIDDEN_TEST, warnings_of

    for t in registry.load(name, **params):
        assert t.hidden_tests or len(t.public_tests) == 1, t.problem_id
        assert warnings_of(t) == ([] if t.hidden_tests else [NO_HIDDEN_TEST])


def test_trivial_answers_and_the_choice_of_public_tests() -> None:
    from registry.trivial import choose_public, trivial_answers, trivial_passes

    names = set(trivial_answers("function"))
    assert {"return None", "return True", "return False", "return 0", "return ''", "return []", "return {}",
            "return the first argument"} <= names  # fmt: skip
    # the first tests are the edge cases a constant passes; a later one is chosen instead
    cases = [TestCase(args=[[]], expected=[]), TestCase(args=[[1]], expected=[1]), TestCase(args=[[3, 1]], expected=[1, 3]),
             TestCase(args=[[2, 2]], expected=[2, 2])]  # fmt: skip
    public, hidden = choose_public(cases, 2)
    assert public == [cases[0], cases[2]] and hidden == [cases[1], cases[3]]
    assert choose_public(cases[2:], 1)[0] == [cases[2]]  # the first, when it serves
    # at least one test stays hidden whatever is asked; a single test is public
    for n in (2, 3):
        assert [len(x) for x in choose_public(cases[:n], n)] == [n - 1, 1]
    assert [len(x) for x in choose_public(cases[:1], 3)] == [1, 0]
    task = Task(problem_id="t/sort", prompt="", kind="function", entry_point="f", reference_solution="",
                public_tests=cases[:2], hidden_tests=cases[2:])  # fmt: skip
    assert trivial_passes([task]) == {"t/sort": ["return the first argument"]}
