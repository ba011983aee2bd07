"""What every trainer's trajectory record must hold (``code_env.records``): the completeness
check of the record tests of each trainer path."""

from __future__ import annotations

from typing import Any

from code_env.trajectory import clipped

STATES = ("generating", "queued", "running", "executed", "judged")


def assert_complete(rec: dict[str, Any], *, trainer: str | None, step: bool = True, advantage: bool = True,
                    truncation_known: bool = True, generation_timed: bool = True) -> None:  # fmt: skip
    """Every field present, and non-empty where it applies to this trainer path (the flags: what
    the path cannot know — the step, the advantage, the cut, when generation began)."""
    where = rec.get("trace_id")
    for key in ("trace_id", "problem_id", "prompt", "completion", "completion_truncated", "completion_tokens", "action",
                "reward", "reward_breakdown", "advantage", "public_cases", "hidden_cases", "executions", "ran_as",
                "transitions", "trainer", "step", "config"):  # fmt: skip
        assert key in rec, f"{where}: no {key!r}"
    assert rec["prompt"] and isinstance(rec["prompt"], str), f"{where}: the prompt is not expanded: {rec['prompt']!r:.80}"
    assert rec["completion"] and rec["action"], where
    assert rec["trainer"] == trainer, where
    if truncation_known:
        assert isinstance(rec["completion_truncated"], bool) and isinstance(rec["completion_tokens"], int), where
    if step:
        assert isinstance(rec["step"], int) and rec["step"] >= 1, f"{where}: step {rec['step']!r}"
    if advantage:
        assert isinstance(rec["advantage"], float), f"{where}: advantage {rec['advantage']!r}"
    b = rec["reward_breakdown"]
    assert b["tier"] and "explanation" in b, where
    if rec.get("cached"):
        assert rec["executions"] == [] and rec["ran_as"], where
    else:
        runs = rec["executions"]
        assert runs and all(r["trace_id"].startswith(f"{rec['ran_as']}/") for r in runs), f"{where}: executions"
        assert any("/public" in r["trace_id"] for r in runs), where
        if b["tier"] not in ("syntax_error", "sandbox_error") and b.get("hidden_total"):
            assert any("/hidden" in r["trace_id"] for r in runs), f"{where}: no hidden run"
        assert all(isinstance(r["stdout"], str) or clipped(r["stdout"]) for r in runs), where
        states = [s for s, _ in rec["transitions"]]
        start = ["generating", "queued"] if generation_timed else ["queued"]
        assert states[: len(start)] == start and states[-1] == "judged", f"{where}: {states}"
        assert all(s in STATES for s in states), states
        times = [t for _, t in rec["transitions"]]
        assert times == sorted(times), f"{where}: the states' times go backwards"
