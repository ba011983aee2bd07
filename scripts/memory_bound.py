"""Measure, per sandbox mode, what a run holds on the host outside its processes' resident memory
(tests/test_memory_outside_rss.py's attacks, each aiming at 16x its limit), and write the README's
table (benchmarks/results/memory.md, .json).

    python scripts/memory_bound.py            # as root: root modes, weak mode, and a normal user's
                                              # (re-run as uid 65534)
    python scripts/memory_bound.py --as-is    # only the modes of the user running it (JSON on stdout)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_memory_outside_rss import (  # noqa: E402
    ATTACKS,
    LIMIT_MB,
    LIMITS,
    TARGET_MB,
    held_on_the_host,
    program,
)

RESULTS = ROOT / "benchmarks" / "results"


def measure(mode: str) -> dict[str, dict[str, object]]:
    """Every attack once in ``mode`` (``process``, ``nsjail`` or ``weak``)."""
    from tqdm import tqdm

    from sandbox import Sandbox

    sb = Sandbox(backend="nsjail") if mode == "nsjail" else Sandbox(isolation="weak") if mode == "weak" else Sandbox()
    out: dict[str, dict[str, object]] = {}
    try:
        memory = str(sb.isolation.get("memory", ""))
        for name in tqdm(ATTACKS, desc=f"{mode} ({'root' if os.geteuid() == 0 else 'normal user'})", file=sys.stderr):
            counter = ATTACKS[name][0]
            moved, r = held_on_the_host(counter, lambda n=name: sb.run(program(n), limits=LIMITS))
            verdict = "oom" if r.oom else "refused" if "EPERM" in r.stdout else f"exit {r.exit_code}"
            out[name] = {"counter": counter, "held_mb": moved, "verdict": verdict, "memory": memory}
    finally:
        sb.close()
    return out


def own_modes() -> dict[str, dict[str, dict[str, object]]]:
    who = "root" if os.geteuid() == 0 else "normal user"
    modes = {f"process, {who}": measure("process")}
    try:
        modes[f"nsjail, {who}"] = measure("nsjail")
    except Exception as exc:  # no nsjail here: the table has no column for it
        print(f"nsjail: {type(exc).__name__}: {exc}", file=sys.stderr)
    if os.geteuid() == 0:
        modes["weak"] = measure("weak")
    return modes


def table(modes: dict[str, dict[str, dict[str, object]]]) -> str:
    names = list(ATTACKS)
    rows = [f"| attack (aims at {TARGET_MB} MiB; `memory_mb={LIMIT_MB}`) | " + " | ".join(modes) + " |",
            "|---|" + "---:|" * len(modes)]  # fmt: skip
    for name in names:
        cells = []
        for mode in modes.values():
            m = mode.get(name)
            cells.append("-" if m is None else f"{m['held_mb']} MiB ({m['verdict']})")
        rows.append(f"| {name} (host counter: {ATTACKS[name][0]}) | " + " | ".join(cells) + " |")
    worst = {mode: max(int(str(m["held_mb"])) for n, m in v.items() if ATTACKS[n][0] != "MemAvailable") for mode, v in modes.items()}
    rows.append("| largest move of a specific counter (Shmem, PageTables) | " + " | ".join(f"{w} MiB" for w in worst.values()) + " |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--as-is", action="store_true", help="only this user's modes, JSON on stdout")
    args = ap.parse_args()
    modes = own_modes()
    if args.as_is:
        print(json.dumps(modes))
        return 0
    if os.geteuid() == 0:
        from tests._nobody import NOBODY, as_nobody

        tmp = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
        os.chown(tmp, NOBODY, NOBODY)
        try:
            done = as_nobody([sys.executable, str(Path(__file__).resolve()), "--as-is"], tmp=tmp, timeout=1800)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        modes |= json.loads(done.stdout.strip().splitlines()[-1])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory.json").write_text(json.dumps(modes, indent=1) + "\n")
    (RESULTS / "memory.md").write_text(table(modes))
    print(table(modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
