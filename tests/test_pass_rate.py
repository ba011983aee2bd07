"""Measured difficulty (``code_env.passrate``, ``code-env tasks pass-rate``) and the band filter
(``registry.filter_by_pass_rate``): the estimator against hand-computed values; public and hidden
rates from real grades; the command with a GRU policy from a 3-step GRPO run (the same csv twice),
with the openai agent against the loopback server (recorded, then replayed with the server
stopped: the same csv) and with a tiny local Hugging Face model; the filter on a crafted csv."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import registry
from baselines.grpo import main as grpo_main
from code_env.cli import main as cli_main
from code_env.passrate import PassRateResult, TaskRate, measure, pass_at_k, rates_of, write
from registry import Task, UnknownTaskError, filter_by_pass_rate

from ._openai_server import KEY, OpenAIServer, Reply, fenced, task_of
from .conftest import get_sandbox
from .test_grpo import SHORT

ARITH = registry.load("synthetic:arith", n=10, seed=3)  # difficulties 1-5 in turn


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------------ estimator


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, Fraction(2, 5)),  # pass@1 is c / n
        (5, 2, 2, 1 - Fraction(3, 10)),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - Fraction(21, 252)),  # 1 - C(7,5)/C(10,5)
        (4, 0, 2, Fraction(0)),  # nothing correct
        (3, 2, 2, Fraction(1)),  # n - c < k: every draw of 2 holds a correct one
        (1, 1, 1, Fraction(1)),
    ],
    ids=["pass@1", "5-2-2", "10-3-5", "none", "n-c<k", "one"],
)
def test_the_estimator_gives_the_hand_computed_values(n: int, c: int, k: int, expected: Fraction) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


def test_measure_refuses_fewer_samples_than_k() -> None:
    with pytest.raises(ValueError, match=r"1 <= k <= samples .* k=3, samples=2"):
        measure(Scripted({}), ARITH[:1], k=3, samples=2)


# ------------------------------------------------------------------------ public and hidden rates


class Scripted:
    """A real (if simple-minded) agent: for task i, sample j, the program ``plan[pid][j]``."""

    name = "scripted"

    def __init__(self, plan: dict[str, list[str]]) -> None:
        self.plan = plan

    def programs(self, tasks: Sequence[Task], n: int) -> list[list[str]]:
        return [self.plan[t.problem_id][:n] for t in tasks]

    def close(self) -> None:
        pass


def _copier(task: Task) -> str:
    """A program that answers the public examples from a table and nothing else: public yes, hidden no."""
    table = {c.args[0]: c.expected for c in task.public_tests}
    return f"def {task.entry_point}(x):\n    return {table!r}.get(x, 987654321)\n"


def test_public_and_hidden_rates_come_from_the_real_grades() -> None:
    a, b = ARITH[0], ARITH[1]
    assert not {c.args[0] for c in a.hidden_tests} <= {c.args[0] for c in a.public_tests}
    wrong = f"def {a.entry_point}(x):\n    return 987654321\n"
    plan = {a.problem_id: [a.reference_solution, _copier(a), _copier(a), wrong],  # public 3/4, every test 1/4
            b.problem_id: [wrong, wrong, b.reference_solution, "def broken(:\n"]}  # public 1/4 (syntax error counted)
    result = measure(Scripted(plan), [a, b], k=2, samples=4, sandbox=get_sandbox("process"), task_set="synthetic:arith")
    ra, rb = result.rows
    assert (ra.n, ra.public_passed, ra.hidden_passed) == (4, 3, 1)
    assert ra.public_pass_at_k == pytest.approx(1.0)  # n - c = 1 < k
    assert ra.hidden_pass_at_k == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert (rb.n, rb.public_passed, rb.hidden_passed) == (4, 1, 1)
    assert rb.public_pass_at_k == rb.hidden_pass_at_k == pytest.approx(0.5)
    assert result.dropped == 0
    assert rates_of(result, "hidden") == {a.problem_id: 0.5, b.problem_id: 0.5}


def test_the_table_groups_by_difficulty_and_counts_the_band(tmp_path: Path) -> None:
    rows = [TaskRate(problem_id=f"t{i}", difficulty=d, n=4, k=1, public_passed=p, hidden_passed=h,
                     public_pass_at_k=p / 4, hidden_pass_at_k=h / 4)
            for i, (d, p, h) in enumerate([(1, 4, 4), (1, 1, 0), (2, 2, 1), (2, 0, 0)])]  # fmt: skip
    result = PassRateResult(agent="scripted", task_set="crafted", k=1, samples=4, rows=rows)
    table = result.table()
    assert "| 1 | 2 | 8 | 62.5% | 50.0% | 1 |" in table  # 0.25 is in the band
    assert "| 2 | 2 | 8 | 25.0% | 12.5% | 0 |" in table  # 0.5 and 0: outside
    assert "| all | 4 | 16 | 43.8% | 31.2% | 1 |" in table
    paths = write(result, tmp_path / "out")
    assert [r["public_pass_at_k"] for r in _rows(paths["csv"])] == ["1.000000", "0.250000", "0.500000", "0.000000"]
    assert paths["md"].read_text().endswith(table)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------- the command: policy


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GRPO baseline run of 3 steps (tests/test_grpo.py's short settings)."""
    out = tmp_path_factory.mktemp("pass-rate") / "grpo"
    settings = [s for s in SHORT if not s.startswith(("grpo.steps=", "grpo.eval_interval=", "grpo.checkpoint_interval="))]
    argv = ["--quiet", "--out", str(out)]
    for s in [*settings, "grpo.steps=3", "grpo.eval_interval=0", "grpo.checkpoint_interval=0"]:
        argv += ["--set", s]
    assert grpo_main(argv) == 0
    return out


def _pass_rate(*argv: str) -> int:
    return cli_main(["tasks", "pass-rate", *argv, "--backend", "process"])


def test_the_command_measures_a_policy_and_the_same_seed_gives_the_same_csv(grpo_run: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    common = ["synthetic:arith", "--agent", f"policy:{grpo_run}", "--n", "10", "--samples", "3", "--k", "2"]
    assert _pass_rate(*common, "--out", str(tmp_path / "a")) == 0
    printed = capsys.readouterr().out
    assert _pass_rate(*common, "--out", str(tmp_path / "b")) == 0
    rows = _rows(tmp_path / "a" / "pass_rate.csv")
    assert [r["problem_id"] for r in rows] == [t.problem_id for t in registry.load("synthetic:arith", n=10, seed=0)]
    assert {r["difficulty"] for r in rows} == {"1", "2", "3", "4", "5"}
    assert all(r["n"] == "3" and r["k"] == "2" and 0 <= float(r["public_pass_at_k"]) <= 1 for r in rows)
    assert all(int(r["hidden_passed"]) <= int(r["public_passed"]) for r in rows)
    assert (tmp_path / "a" / "pass_rate.csv").read_bytes() == (tmp_path / "b" / "pass_rate.csv").read_bytes()
    for name in ("pass_rate.md", "pass_rate.png"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    assert "| difficulty | tasks | samples | public pass@2 |" in printed and "| all | 10 | 30 |" in printed
    # a checkpoint file names its run too; another seed draws other samples
    assert _pass_rate(*common, "--agent", f"policy:{grpo_run / 'checkpoints' / 'grpo_final.pt'}",
                      "--out", str(tmp_path / "c")) == 0  # fmt: skip
    assert (tmp_path / "c" / "pass_rate.csv").read_bytes() == (tmp_path / "a" / "pass_rate.csv").read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["builtin", "--agent", "policy:{run}"], r"writes f\(x\) from numeric examples .* task builtin/\S+ "),
        (["synthetic:arith", "--agent", "policy:{run}/nowhere"], r"no checkpoint .*grpo_final\.pt"),
        (["synthetic:arith", "--agent", "gpt:x"], r"expected policy:PATH .* openai:MODEL@BASE_URL .* hf:PATH"),
        (["synthetic:arith", "--agent", "openai:no-url"], r"expected openai:MODEL@BASE_URL"),
        (["synthetic:arith", "--agent", "policy:{run}", "--samples", "1", "--k", "2"], r"--samples 1 is below --k 2"),
        (["synthetic:arith", "--agent", "policy:{run}", "--record", "x.jsonl"], r"--record is the openai agent's"),
        (["synthetic:arth", "--agent", "policy:{run}"], r"did you mean 'synthetic:arith'"),
    ],
    ids=["not-arith", "no-checkpoint", "unknown-agent", "openai-no-url", "samples-below-k", "record-policy", "unknown-set"],
)
def test_a_bad_invocation_is_one_line_naming_what_is_wrong(argv: list[str], message: str, grpo_run: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import re

    argv = [a.replace("{run}", str(grpo_run)) for a in argv]
    assert _pass_rate(*argv, "--n", "3", "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


# ------------------------------------------------------------------------- the command: openai


def test_the_openai_agent_is_recorded_then_replayed_with_the_server_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    tasks = registry.load("builtin")[:3]

    def script(body: dict[str, Any], attempt: int) -> Reply:  # samples with an even seed get it right
        task = task_of(body, tasks)
        return Reply(content=fenced(task.reference_solution if body["seed"] % 2 == 0 else "print(1)"))

    record = tmp_path / "calls.jsonl"
    common = ["builtin", "--n", "3", "--samples", "4", "--k", "2"]
    with OpenAIServer(script) as server:
        assert _pass_rate(*common, "--agent", f"openai:test-model@{server.url}", "--record", str(record),
                          "--out", str(tmp_path / "live")) == 0  # fmt: skip
        assert len(server.requests) == 3 * 4
        assert sorted(r["seed"] for r in server.requests) == sorted([0, 1, 2, 3] * 3)
    rows = _rows(tmp_path / "live" / "pass_rate.csv")
    assert [(r["n"], r["public_passed"], r["hidden_passed"]) for r in rows] == [("4", "2", "2")] * 3
    assert {r["public_pass_at_k"] for r in rows} == {f"{5 / 6:.6f}"}  # 1 - C(2,2)/C(4,2)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines[0]["type"] == "header" and len(lines) == 1 + 12
    assert KEY not in record.read_text()
    # the server is gone: every reply comes from the record
    monkeypatch.delenv("OPENAI_API_KEY")
    assert _pass_rate(*common, "--agent", "openai", "--replay", str(record), "--out", str(tmp_path / "replayed")) == 0
    assert (tmp_path / "replayed" / "pass_rate.csv").read_bytes() == (tmp_path / "live" / "pass_rate.csv").read_bytes()
    # another sampling setting asks requests the record does not hold
    assert _pass_rate(*common, "--agent", "openai", "--replay", str(record), "--seed", "7",
                      "--out", str(tmp_path / "other")) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "no recorded reply for builtin/" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- the command: hf


def test_a_tiny_local_model_runs_through_the_plumbing(tmp_path: Path) -> None:
    from baselines.tiny_lm import build_tiny_lm

    path = build_tiny_lm(tmp_path / "model", seed=0, n_positions=512)
    assert _pass_rate("builtin", "--n", "2", "--agent", f"hf:{path}", "--samples", "1", "--max-tokens", "4",
                      "--temperature", "0", "--out", str(tmp_path / "out")) == 0  # fmt: skip
    rows = _rows(tmp_path / "out" / "pass_rate.csv")
    assert [(r["n"], r["public_pass_at_k"]) for r in rows] == [("1", "0.000000")] * 2  # noise scores 0


# --------------------------------------------------------------------------------- the filter


def test_the_filter_docstring_example_runs() -> None:
    import doctest

    import registry._passrate

    assert doctest.testmod(registry._passrate).failed == 0


@pytest.fixture
def crafted(tmp_path: Path) -> tuple[list[Task], Path]:
    tasks = registry.load("builtin")[:5]
    path = tmp_path / "pass_rate.csv"
    public = ["0.100000", "0.200000", "0.300000", "0.400000", ""]
    hidden = ["0.000000", "0.200000", "0.100000", "0.300000", ""]
    lines = ["problem_id,difficulty,n,k,public_passed,hidden_passed,public_pass_at_k,hidden_pass_at_k"]
    lines += [f"{t.problem_id},1,10,1,0,0,{p},{h}" for t, p, h in zip(tasks, public, hidden, strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tasks, path


def test_the_filter_keeps_the_band_both_ends_included(crafted: tuple[list[Task], Path]) -> None:
    tasks, path = crafted
    with pytest.warns(UserWarning, match=r"1 task\(s\) have no public rate .* left out"):
        kept = filter_by_pass_rate(tasks, path)
    assert kept == tasks[1:4]
    with pytest.warns(UserWarning):
        assert filter_by_pass_rate(tasks, path, which="hidden") == [tasks[1], tasks[3]]
    with pytest.warns(UserWarning):
        assert filter_by_pass_rate(tasks, str(path), band=(0.0, 0.15)) == [tasks[0]]
    mapping = {t.problem_id: 0.3 for t in tasks}
    assert filter_by_pass_rate(tasks, mapping, band=(0.3, 0.3)) == tasks


@pytest.mark.parametrize(
    ("band", "message"),
    [((0.4, 0.2), r"0 <= low <= high <= 1, got \(0\.4, 0\.2\)"), ((0.2, 1.5), r"got \(0\.2, 1\.5\)"),
     ((0.2,), r"expected two numbers"), (("a", "b"), r"expected two numbers"), ((float("nan"), 0.4), r"low <= high")],
    ids=["reversed", "above-one", "one-number", "strings", "nan"],
)
def test_a_bad_band_is_refused(band: Any, message: str, crafted: tuple[list[Task], Path]) -> None:
    tasks, path = crafted
    with pytest.raises(ValueError, match=message):
        filter_by_pass_rate(tasks, path, band=band)


def test_unknown_ids_unmeasured_tasks_and_bad_files_are_clear_errors(crafted: tuple[list[Task], Path], tmp_path: Path) -> None:
    tasks, path = crafted
    rates = {t.problem_id: 0.3 for t in tasks}
    with pytest.raises(UnknownTaskError, match=r"no task 'builtin/sum-of-evns' .* did you mean 'builtin/sum-of-evens'"):
        filter_by_pass_rate(tasks, {**rates, "builtin/sum-of-evns": 0.3})
    with pytest.raises(UnknownTaskError, match=r"not among the 5 tasks given"):
        filter_by_pass_rate(tasks, {**rates, "HumanEval/0": 0.3})
    with pytest.raises(ValueError, match=rf"1 of 6 tasks have no measured rate: {registry.load('builtin')[5].problem_id}"):
        filter_by_pass_rate(registry.load("builtin")[:6], path)
    with pytest.raises(ValueError, match=r"which: expected 'public' or 'hidden', got 'private'"):
        filter_by_pass_rate(tasks, path, which="private")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expected a number in \[0, 1\] or None, got 1\.5"):
        filter_by_pass_rate(tasks, {**rates, tasks[0].problem_id: 1.5})
    bad = tmp_path / "bad.csv"
    bad.write_text("problem_id,score\nx,1\n")
    with pytest.raises(ValueError, match=r"bad\.csv: not a pass_rate\.csv \(no column public_pass_at_k"):
        filter_by_pass_rate(tasks, bad)
    with pytest.raises(ValueError, match=r"cannot read pass rates from .*missing\.csv"):
        filter_by_pass_rate(tasks, tmp_path / "missing.csv")
    path.write_text(path.read_text().replace(",0.300000,", ",0.3x,"))
    with pytest.raises(ValueError, match=r"pass_rate\.csv:4: public_pass_at_k of '\S+' is not a number: '0\.3x'"):
        filter_by_pass_rate(tasks, path)
