"""GRPO on a pool of every difficulty, with and without the curriculum, side by side.

    python scripts/curriculum_compare.py [--steps 300] [--out runs/curriculum] [--results benchmarks/results/curriculum]

Two runs of ``baselines.grpo`` with the shipped defaults, the same seed and the same pool: 2,000
``synthetic:arith`` tasks of difficulties 1-5 (``env.difficulty=null``). One draws each step's
tasks from the whole pool (``uniform``); the other from ``registry.sampling.AddingCurriculum``'s
growing set (``grpo.curriculum=true``: start with band 1, add tasks to keep the rolling public pass
rate in 20-40 %). Then each final policy, greedy, is measured on 200 held-out tasks of every
difficulty (seed 10000, never trained on) with ``code-env tasks pass-rate``'s machinery, by band.

Writes ``RESULTS/curriculum.md`` (the table the README shows), ``RESULTS/curriculum.json`` and
``RESULTS/curriculum.png`` (each run's training public pass rate, and the band the curriculum drew
from, per step). Each run takes about a quarter of an hour of two cores at 300 steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = {"uniform": [], "curriculum": ["grpo.curriculum=true"]}
POOL = ["env.difficulty=null", "env.eval_difficulty=null"]
HELD_OUT = {"n": 200, "seed": 10000}


def run_arm(name: str, extra: list[str], steps: int, out: Path) -> dict[str, Any]:
    """One GRPO run as its CLI makes it; its wall time and CPU (children's) beside its outputs."""
    argv = [sys.executable, "-m", "baselines.grpo", "--quiet", "--out", str(out), "--set", f"grpo.steps={steps}"]
    for pair in [*POOL, *extra]:
        argv += ["--set", pair]
    print(f"[{name}] {' '.join(argv[1:])}", flush=True)
    before = _children_cpu()
    started = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, stdin=subprocess.DEVNULL)
    return {"wall_s": round(time.monotonic() - started, 1), "cpu_s": round(_children_cpu() - before, 1)}


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def curve(run: Path) -> list[dict[str, str]]:
    with open(run / "curve.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def held_out(run: Path) -> Any:
    """The final policy's greedy public pass@1 on the held-out tasks, by difficulty."""
    import registry
    from code_env.passrate import make_agent, measure

    tasks = registry.load("synthetic:arith", n=HELD_OUT["n"], seed=HELD_OUT["seed"], difficulty=None)
    agent = make_agent(f"policy:{run}", temperature=0.0)
    return measure(agent, tasks, k=1, samples=1, task_set=f"synthetic:arith (n={HELD_OUT['n']}, seed {HELD_OUT['seed']}, 1-5)")


def rolling(xs: list[float], w: int = 20) -> list[float]:
    return [sum(xs[max(0, i - w + 1) : i + 1]) / len(xs[max(0, i - w + 1) : i + 1]) for i in range(len(xs))]


def table(steps: int, arms: dict[str, dict[str, Any]]) -> str:
    bands = sorted({e["difficulty"] for a in arms.values() for e in a["by_difficulty"]})
    head = "| run | " + " | ".join(f"band {b}" for b in bands) + " | all | training public pass rate, last 20 steps | wall | CPU |"
    lines = [
        f"GRPO for {steps} steps on 2,000 `synthetic:arith` tasks of difficulties 1-5 (seed 0), then the final "
        f"policy, greedy, on {HELD_OUT['n']} held-out tasks of difficulties 1-5 (seed {HELD_OUT['seed']}): public pass@1 by band.",
        "",
        head,
        "|---|" + "---:|" * (len(bands) + 4),
    ]
    for name, a in arms.items():
        by = {e["difficulty"]: e["public"] for e in a["by_difficulty"]}
        cells = [f"{by[b]:.1%}" if by.get(b) is not None else "-" for b in bands]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | **{a['held_out']:.1%}** | {a['train_tail']:.1%} | "
                     f"{a['wall_s']:.0f} s | {a['cpu_s']:.0f} s |")  # fmt: skip
    c = arms.get("curriculum")
    if c is not None:
        lines += ["", f"The curriculum's set grew from {c['set_start']} to {c['set_end']} tasks; the mean band it drew from "
                  f"went from {c['band_start']:.2f} (first 20 steps) to {c['band_end']:.2f} (last 20)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "curriculum")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "curriculum")
    args = ap.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    arms: dict[str, dict[str, Any]] = {}
    for name, extra in ARMS.items():
        out = args.out / name
        arms[name] = run_arm(name, extra, args.steps, out)
        rows = curve(out)
        result = held_out(out)
        judged = [r for r in result.rows if r.public_pass_at_k is not None]
        public = [float(r["public_pass_rate"]) for r in rows]
        arms[name] |= {"by_difficulty": result.by_difficulty(), "held_out": sum(r.public_pass_at_k or 0.0 for r in judged) / len(judged),
                       "train_public": public, "train_tail": sum(public[-20:]) / len(public[-20:])}  # fmt: skip
        if "band" in rows[0]:
            band = [float(r["band"]) for r in rows]
            sizes = [int(r["curriculum_tasks"]) for r in rows]
            arms[name] |= {"band": band, "set_start": sizes[0], "set_end": sizes[-1],
                           "band_start": sum(band[:20]) / len(band[:20]), "band_end": sum(band[-20:]) / len(band[-20:])}  # fmt: skip
        print(f"[{name}] held-out public pass@1 {arms[name]['held_out']:.1%} ({arms[name]['wall_s']:.0f} s)", flush=True)
    (args.results / "curriculum.md").write_text(table(args.steps, arms), encoding="utf-8")
    (args.results / "curriculum.json").write_text(json.dumps({"steps": args.steps, "arms": arms}, indent=1), encoding="utf-8")
    plot(arms, args.results / "curriculum.png")
    print((args.results / "curriculum.md").read_text(), end="")
    return 0


def plot(arms: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, a in arms.items():
        top.plot(range(1, len(a["train_public"]) + 1), rolling(a["train_public"]), label=f"{name} (held-out {a['held_out']:.0%})")
    top.axhspan(0.2, 0.4, color="green", alpha=0.1, label="target band 20-40 %")
    top.set_ylabel("training public pass rate\n(rolling 20 steps)")
    top.legend(loc="upper left", fontsize=8)
    if "band" in arms.get("curriculum", {}):
        bottom.plot(range(1, len(arms["curriculum"]["band"]) + 1), arms["curriculum"]["band"], color="tab:orange")
    bottom.axhline(3.0, color="tab:blue", linestyle="--", label="uniform: every band (mean 3)")
    bottom.set_ylabel("mean difficulty drawn")
    bottom.set_xlabel("step")
    bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
