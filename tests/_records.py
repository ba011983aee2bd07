"""What every trainer's trajectory record must hold (``code_env.records``): the completeness
check of the record tests of each trainer path."""

from __future__ import annotations

from typing import Any

from code_env.tracing import STATES, TraceId, check_transitions, trace_key
from code_env.trajectory import clipped


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
            # a run of the hidden tests: its own, or a single-turn grade's joint run (``.../public+hidden``)
            assert any("/hidden" in r["trace_id"] or r["trace_id"].endswith("/public+hidden") or "/public+hidden/" in r["trace_id"]
                       for r in runs), f"{where}: no hidden run"  # fmt: skip
        assert all(isinstance(r["stdout"], str) or clipped(r["stdout"]) for r in runs), where
        states = [s for s, _ in rec["transitions"]]
        overflow = ["context_window_overflow"] if rec["completion_truncated"] else []
        start = ["generating", *overflow, "queued"] if generation_timed else ["queued"]
        assert states[: len(start)] == start and states[-1] == "judged", f"{where}: {states}"
        assert all(s in STATES for s in states), states
        assert not check_transitions(rec["transitions"]), f"{where}: {check_transitions(rec['transitions'])}"
    # one key joins the record, its runs and its retried runs (code_env.tracing)
    tid = TraceId.parse(rec["trace_id"])
    assert tid is not None and str(tid) == rec["trace_id"] and tid.problem_id == rec["problem_id"], where
    if not rec.get("cached") and rec["ran_as"] == rec["trace_id"]:
        runs = [*rec["executions"], *rec.get("retried_executions", [])]
        assert all(trace_key(r["trace_id"]) == tid.key for r in runs), f"{where}: a run of another key"
