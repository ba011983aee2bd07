"""The rollout of a GRPO step, in one run, side by side:

* graded samples per second for a group of 8 programs on each of 8 tasks through the batched API
  (one ``code_env.evaluate`` call: one ``run_many`` for every public and hidden run) against
  ``code_env.grade`` called one sample at a time, as a ratio of times: on 64 distinct programs
  (no duplicate to answer from the in-batch cache: the gain of batching alone), and on 64 programs
  sampled from the default run's policy after 100 steps (as GRPO sends them, duplicates included);
* the default GRPO run (``baselines/configs/grpo.toml``, its first steps): the fraction of the
  learner's time spent waiting on the sandbox with rollouts overlapping the update, against the
  same steps without overlap, and the ratio of their step times.

No assertion on speed: only that both sides agree."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import code_env
import registry
from baselines.common import Run, load_config
from baselines.grpo import GRPOSettings, train
from code_env.grading import shared_sandbox

from .conftest import Side, Target, Timed, paired, record_paired

ROUNDS = 3


def _group() -> list[tuple[Any, str]]:
    """8 tasks x 8 distinct programs: the right one, wrong ones, a syntax error, a crash."""
    tasks = registry.load("synthetic:arith", n=8, seed=77, difficulty=1)
    items = []
    for t in tasks:
        body = t.reference_solution.split("return", 1)[1].strip()
        for expr in (body, "x", "x + 1", "x * 3", "0", f"({body}) + 1", "x +", "1 // 0"):
            items.append((t, f"def {t.entry_point}(x):\n    return {expr}\n"))
    return items


def _batched_vs_single(benchmark: Any, items: list[tuple[Any, str]], what: str) -> None:
    """Alternating rounds of one ``code_env.evaluate`` call on ``items`` and ``code_env.grade`` on
    each in turn, same sandbox, same rewards required; recorded as a ratio of times."""
    sandbox = shared_sandbox("auto")
    batched, single = "code_env.evaluate (one call)", "code_env.grade (one at a time)"

    def check(out: dict[str, object]) -> None:
        assert out[batched] == out[single]

    sides = {batched: Side(lambda: [e.reward for e in code_env.evaluate(items, executor=sandbox)], len(items)),
             single: Side(lambda: [code_env.grade(t, c, sandbox=sandbox).reward for t, c in items], len(items))}  # fmt: skip
    result = paired(benchmark, sides, rounds=ROUNDS if benchmark.enabled else 1, warmup_rounds=0, check=check)
    record_paired(benchmark, result, title=f"{what}: batched against one at a time", program=what, mode="one GRPO group",
                  unit="samples", targets=[Target(f"{what}: `evaluate` ≤ 1× the time of `grade` one at a time", batched,
                                                  "time", vs=single, op="<=", bound=1.0)])  # fmt: skip


def test_grpo_group_batched_vs_one_at_a_time(benchmark: Any) -> None:
    items = _group()
    code_env.evaluate(items[:8], executor=shared_sandbox("auto"))  # warm
    _batched_vs_single(benchmark, items, f"GRPO rollout: {len(items)} samples (8 tasks x 8 programs)")


def test_grpo_sampled_group_batched_vs_one_at_a_time(benchmark: Any, tmp_path: Path) -> None:
    """The same comparison on what GRPO really sends: 8 x 8 programs sampled (temperature 1) from
    the default run's policy after its first 100 steps, on 8 fresh tasks: a group repeats itself
    once the policy has learnt something, and the batched API judges each distinct pair once."""
    import torch

    from baselines.grpo import make_policy

    steps = 100 if benchmark.enabled else 2
    cfg = load_config("grpo", GRPOSettings, overrides=["grpo.eval_interval=0", "grpo.checkpoint_interval=0"])
    with Run.create("grpo", cfg, out=tmp_path / "run") as run:
        train(cfg, run, progress=False, max_steps=steps)
    policy = make_policy(cfg)
    policy.module.load_state_dict(torch.load(tmp_path / "run" / "checkpoints" / "grpo_final.pt"))
    tasks = [t for t in registry.load("synthetic:arith", n=8, seed=77, difficulty=1) for _ in range(8)]
    programs = policy.sample(tasks, 1.0, torch.Generator().manual_seed(0)).programs
    items = list(zip(tasks, programs, strict=True))
    distinct = len(set((t.problem_id, p) for t, p in items))
    benchmark.extra_info["distinct_pairs"] = distinct
    _batched_vs_single(benchmark, items, f"GRPO rollout as sampled: {len(items)} programs from the default run's policy "
                       f"after {steps} steps (8 tasks x 8, {distinct} distinct)")  # fmt: skip


def _wait(run_dir: Path, skip: int = 0) -> tuple[float, float]:
    """The learner's total wait and total step time of a run (timing.csv), its first ``skip``
    steps left out."""
    with open(run_dir / "timing.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))[skip:]
    step = sum(float(r["step_s"]) for r in rows)
    return sum(float(r["learner_wait_fraction"]) * float(r["step_s"]) for r in rows), step


def test_grpo_learner_wait_with_and_without_overlap(benchmark: Any, tmp_path: Path) -> None:
    steps = 12 if benchmark.enabled else 2
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}

    def train_once(overlap: bool) -> Timed:
        cfg = load_config("grpo", GRPOSettings, overrides=[f"grpo.overlap={str(overlap).lower()}", "grpo.eval_interval=0"])
        out = tmp_path / f"{overlap}-{len(results[overlap])}"
        with Run.create("grpo", cfg, out=out) as run:
            train(cfg, run, progress=False, max_steps=steps)
        results[overlap].append(_wait(out))
        return Timed(results[overlap][-1][1])  # the run's step times (timing.csv), its set-up left out

    with_, without = "rollouts overlapping the update", "no overlap"
    sides = {with_: Side(lambda: train_once(True), steps), without: Side(lambda: train_once(False), steps)}  # (per step)
    result = paired(benchmark, sides, rounds=2 if benchmark.enabled else 1, warmup_rounds=0)
    wait = {k: sum(w for w, _ in v) / sum(s for _, s in v) for k, v in results.items()}
    step = {k: sum(s for _, s in v) / (len(v) * steps) for k, v in results.items()}
    benchmark.extra_info.update({"wait_fraction_overlap": wait[True], "wait_fraction_serial": wait[False],
                                 "step_s_overlap": step[True], "step_s_serial": step[False]})  # fmt: skip
    print(f"\nGRPO default run, {steps} steps: learner waits {wait[True]:.0%} of its time with overlap "
          f"({step[True]:.2f} s/step), {wait[False]:.0%} without ({step[False]:.2f} s/step)")
    record_paired(benchmark, result, title=f"GRPO default run ({steps} steps, eval off): rollouts overlapping the update against none",
                  program="GRPO default config", mode=f"{steps} training steps a round", unit="steps",
                  targets=[Target("GRPO: step time with overlap ≤ 1× without", with_, "time", vs=without, op="<=", bound=1.0)],
                  note=f"A round is a whole run; its time is the sum of its step times (timing.csv), its set-up left out; "
                  f"its CPU is the whole run's, set-up included. The learner waits on the sandbox {wait[True]:.0%} of its "
                  f"step time with overlap, {wait[False]:.0%} without (timing.csv: {step[True]:.2f} vs {step[False]:.2f} s "
                  "per step).")  # fmt: skip


def test_grpo_learner_wait_thread_vs_redis_topology(benchmark: Any, tmp_path: Path) -> None:
    """The default GRPO run's first steps in the two topologies, alternating: rollouts on a thread
    of the learner (the sandbox in its process) against the learner, a rollout actor and 2
    executors (1 worker each: executors at 2x the inference workers, as the seeds advise) as
    processes joined by Redis (``baselines/topology.py``), on the same 2 cores.
    Their curves must be equal; the learner's wait fraction and the step time of each are recorded."""
    import shutil

    import pytest

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/bootstrap.sh installs Debian's as root)")
    steps = 16 if benchmark.enabled else 2
    results: dict[str, list[tuple[float, float]]] = {"thread": [], "redis": []}
    curves: dict[str, list[str]] = {}

    def train_once(topology: str) -> Timed:
        cfg = load_config("grpo", GRPOSettings, overrides=[f"grpo.topology={topology}", "grpo.eval_interval=0",
                                                           "grpo.checkpoint_interval=0"])  # (1 actor, 2 executors)
        out = tmp_path / f"{topology}-{len(results[topology])}"
        with Run.create("grpo", cfg, out=out) as run:
            train(cfg, run, progress=False, max_steps=steps)
        results[topology].append(_wait(out, skip=1))  # step 1 waits for the processes to start: set-up
        curves[topology] = (out / "curve.csv").read_text().splitlines()
        return Timed(results[topology][-1][1])

    thread, redis = "thread topology (rollouts on a thread of the learner)", "Redis topology (1 actor, 2 executors of 1 worker)"

    def check(out: dict[str, object]) -> None:
        assert curves["thread"] == curves["redis"]

    sides = {thread: Side(lambda: train_once("thread"), steps - 1), redis: Side(lambda: train_once("redis"), steps - 1)}
    result = paired(benchmark, sides, rounds=2 if benchmark.enabled else 1, warmup_rounds=0, check=check)
    wait = {k: sum(w for w, _ in v) / sum(s for _, s in v) for k, v in results.items()}
    step = {k: sum(s for _, s in v) / (len(v) * (steps - 1)) for k, v in results.items()}
    benchmark.extra_info.update({"wait_fraction_thread": wait["thread"], "wait_fraction_redis": wait["redis"],
                                 "step_s_thread": step["thread"], "step_s_redis": step["redis"]})  # fmt: skip
    print(f"\nGRPO default run, {steps} steps: the learner waits {wait['redis']:.0%} of its time in the Redis topology "
          f"({step['redis']:.2f} s/step), {wait['thread']:.0%} in the thread topology ({step['thread']:.2f} s/step)")
    record_paired(benchmark, result, title=f"GRPO default run ({steps} steps, eval off): the Redis topology against the thread topology",
                  program="GRPO default config", mode=f"{steps} training steps a round", unit="steps",
                  targets=[Target("GRPO: step time in the Redis topology ≤ 1× the thread topology's", redis, "time",
                                  vs=thread, op="<=", bound=1.0)],
                  note=f"Same curve in both (checked). The learner waits on its batches {wait['redis']:.0%} of its step time in "
                  f"the Redis topology ({step['redis']:.2f} s per step), {wait['thread']:.0%} in the thread topology "
                  f"({step['thread']:.2f} s per step); a round is a whole run, its time the sum of its step times after the "
                  "first (timing.csv): the first waits for the processes to start, set-up left out.")  # fmt: skip
