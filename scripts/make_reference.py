"""Make the reference run of a learning baseline with its shipped config and seed, and write
``baselines/reference/<algo>.csv`` (the curve, exactly as the run wrote it), ``<algo>.png``,
``<algo>.json`` (the run's summary), ``<algo>.meta.json`` (the run's ``meta.json``: the CPU, the
CPU pin in force, the torch/BLAS build) and ``<algo>.md`` (the table the README shows); then refresh
the README's generated tables.

    python scripts/make_reference.py grpo              # train now (GRPO ~10 min, PPO ~15 min)
    python scripts/make_reference.py ppo --from DIR    # take a finished run of the default config

A run given with ``--from`` must have been made with the shipped defaults (its ``config.json`` is
compared with them), so the reference is always what ``python -m baselines.<module>`` gives.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from baselines.common import Run, load_config, plot_curves  # noqa: E402

REFERENCE = ROOT / "baselines" / "reference"
MODULES = {"ppo": "baselines.sb3_ppo", "grpo": "baselines.grpo"}
COLUMNS = {"ppo": ["reward_mean", "pass_rate", "eval_pass_rate"], "grpo": ["reward_mean", "pass_rate", "eval_pass_rate"]}


def _settings(algo: str) -> Any:
    if algo == "ppo":
        from baselines.sb3_ppo import PPOSettings

        return PPOSettings
    from baselines.grpo import GRPOSettings

    return GRPOSettings


def _run(algo: str, out: Path) -> None:
    cfg = load_config(algo, _settings(algo))
    with Run.create(algo, cfg, out=out) as run:
        if algo == "ppo":
            from baselines.sb3_ppo import train as train_ppo

            train_ppo(cfg, run)
        else:
            from baselines.grpo import train as train_grpo

            train_grpo(cfg, run)


def _table(algo: str, s: dict[str, Any], cfg: dict[str, Any]) -> str:
    env = cfg["env"]
    pct = "{:.1%}".format
    if algo == "ppo":
        rows = [(e["policy"], e["episodes"], f"{e['reward_mean']:.3f}", pct(e["pass_rate"]), pct(e["syntax_error_rate"]))
                for e in (s["random"], s["start"], s["trained"])]  # fmt: skip
        head = ["policy (held-out tasks)", "episodes", "mean reward", "hidden-test pass rate", "syntax errors"]
        gap = s["trained"]["reward_mean"] - s["random"]["reward_mean"]
        tail = (f"Trained minus random mean reward: **{gap:+.3f}** (target +0.5); pass rate **{pct(s['trained']['pass_rate'])}** "
                f"(target 30%): target {'met' if s['target_met'] else '**not met**'}. {s['timesteps']:,} steps, "
                f"{s['episodes']:,} episodes, {s['wall_s']:.0f} s wall and {s['cpu_s']:.0f} s CPU on this machine "
                f"(2 cores, shared).")  # fmt: skip
    else:
        rows = [(e["policy"], e["tasks"], f"{e['reward_mean']:.3f}", pct(e["pass_rate"]), pct(e["public_pass_rate"]))
                for e in (s["random"], s["start"], s["end"])]  # fmt: skip
        head = ["policy (greedy, held-out tasks)", "tasks", "mean reward", "hidden-test pass rate", "public pass rate"]
        tail = (f"Held-out pass rate **{pct(s['start']['pass_rate'])} -> {pct(s['end']['pass_rate'])}** (best periodic "
                f"evaluation {pct(s['best_eval_pass_rate'])}; target 50%: {'met' if s['target_met'] else '**not met**'}). "
                f"{s['steps']} steps, {s['samples']:,} samples ({s['dropped']} dropped), {s['wall_s']:.0f} s wall on this "
                f"machine (2 cores, shared); the learner waited on the sandbox {s['learner_wait_fraction']:.0%} of its time.")  # fmt: skip
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    where = (f"{env['n_eval_tasks']} fresh tasks of `{env['task_set']}` (difficulty {env['eval_difficulty']}, seed "
             f"{env['eval_task_seed']}), never trained on; training pool: {env['n_tasks']} tasks (seed {env['task_seed']}), "
             f"`max_tokens` {env['max_tokens']}.")  # fmt: skip
    return "\n".join(md) + "\n\n" + where + " " + tail + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("algo", choices=sorted(MODULES))
    ap.add_argument("--from", dest="source", type=Path, default=None, help="a finished run directory of the default config")
    args = ap.parse_args()
    algo = args.algo
    expected = load_config(algo, _settings(algo)).as_dict()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.source or Path(tmp) / algo
        if args.source is None:
            _run(algo, run_dir)
        made = json.loads((run_dir / "config.json").read_text())
        if made != expected:
            print(f"error: {run_dir} was not made with the shipped {algo} config", file=sys.stderr)
            return 2
        meta = json.loads((run_dir / "meta.json").read_text())
        if not (meta.get("numerics") or {}).get("pin", {}).get("pinned"):
            print(f"error: {run_dir} did not run under the CPU pin (baselines.determinism): its curve would hold on "
                  "its own kind of CPU only", file=sys.stderr)  # fmt: skip
            return 2
        summary = json.loads((run_dir / "summary.json").read_text())
        for key in ("run_dir", "model_path"):
            summary.pop(key, None)
        REFERENCE.mkdir(exist_ok=True)
        shutil.copyfile(run_dir / "curve.csv", REFERENCE / f"{algo}.csv")
        (REFERENCE / f"{algo}.json").write_text(json.dumps(summary, indent=2) + "\n")
        # the machine, the pin and the builds it ran on: what "the same curve on any machine" rests on
        (REFERENCE / f"{algo}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        (REFERENCE / f"{algo}.md").write_text(_table(algo, summary, made))
        plot_curves(REFERENCE / f"{algo}.csv", REFERENCE / f"{algo}.png", COLUMNS[algo],
                    title=f"{algo}: reference run ({MODULES[algo]}, default config)")  # fmt: skip
    subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_tables.py")], check=True)
    print(f"wrote {', '.join(str((REFERENCE / f'{algo}.{e}').relative_to(ROOT)) for e in ('csv', 'png', 'json', 'meta.json', 'md'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
