"""This checkout's sandbox against another commit's, on the same machine at the same time: the
check behind the rule that a change may cost ``run_many`` of trivial programs at most 5%.

    python scripts/throughput_vs.py REV                 # as root: as root, then as uid 65534
    python scripts/throughput_vs.py REV --users root    # one side only
    python scripts/throughput_vs.py REV --backend nsjail --rounds 21

REV is checked out with ``git worktree add --detach`` into a temporary directory (removed after).
Two long-lived processes, one per tree, each import their own tree's ``sandbox`` (asserted), hold one
``Sandbox(workers=2)`` each and run ``run_many`` of ``--programs`` copies of ``print(1)`` per
round; the rounds alternate (old new, new old, ...) so that a drift of the machine's load hits both
alike. Per round: the wall time of the batch and the CPU time (user + system, reaped children
included) of the process's whole tree (host process, workers, their runs; nsjail's processes)
read from the host's /proc before and after. Reported: the medians of the per-round ratios
new/old of wall time and of CPU time, with their interquartile ranges, and each tree's median CPU
per run, as root and (when started as root) as uid 65534 (``tests._nobody``, the user-namespace
path); the load average before and after. Writes ``benchmarks/results/throughput_vs_<rev>.md``.

The machine may be shared: read the spread and the load before the median. An IQR that holds 1.05
is no evidence either way; run more rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._nobody import NOBODY, nobody_argv  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

# Run by each tree's process (``python -c WORKER TREE BACKEND WORKERS PROGRAMS``): one JSON line per
# "go" on stdin, {"wall_s", "cpu_s"}; "ready" once warm.
WORKER = r"""
import json, os, sys, time
tree, backend, workers, programs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, tree)
import sandbox
from sandbox import Limits, Sandbox
assert os.path.realpath(sandbox.__file__).startswith(os.path.realpath(tree) + os.sep), sandbox.__file__
TICK = os.sysconf("SC_CLK_TCK")

def tree_cpu_s():
    # utime + stime + cutime + cstime of this process and all its descendants (host /proc)
    total, todo, seen = 0, [os.getpid()], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo += [int(x) for x in fh.read().split()]
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return total / TICK

requests = [{"code": "print(1)", "limits": Limits(timeout_s=10)} for _ in range(programs)]
with Sandbox(backend, workers=workers) as sb:
    sb.run_many(requests)  # warm: workers started, first forks done
    print("ready", flush=True)
    for line in sys.stdin:
        cpu0, t0 = tree_cpu_s(), time.perf_counter()
        results = sb.run_many(requests)
        wall = time.perf_counter() - t0
        cpu = tree_cpu_s() - cpu0
        bad = [r for r in results if r.exit_code != 0 or r.stdout != "1\n"]
        assert not bad, bad[0]
        print(json.dumps({"wall_s": wall, "cpu_s": cpu}), flush=True)
"""


@dataclass
class Side:
    """One tree's long-lived process and what its rounds measured."""

    name: str
    proc: subprocess.Popen[str]
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def round(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} tree's process died (exit {self.proc.wait()})")
        got = json.loads(line)
        self.wall_s.append(got["wall_s"])
        self.cpu_s.append(got["cpu_s"])


@dataclass
class Outcome:
    user: str
    rounds: int
    programs: int
    ratio_median: float
    ratio_q1: float
    ratio_q3: float
    cpu_ratio_median: float
    cpu_ratio_q1: float
    cpu_ratio_q3: float
    wall_ms_old: float
    wall_ms_new: float
    cpu_ms_old: float
    cpu_ms_new: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]


@contextmanager
def worktree(rev: str) -> Iterator[tuple[Path, str]]:
    """``rev`` checked out (detached) in a temporary directory others may read; its short hash."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="code-env-vs-"))
    tmp.chmod(0o755)  # uid 65534 runs from it too
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield tree, sha
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                       capture_output=True)  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


def start(name: str, tree: Path, args: argparse.Namespace, user: str, home: Path, log: IO[str]) -> Side:
    argv = [sys.executable, "-c", WORKER, str(tree), args.backend, str(args.workers), str(args.programs)]
    env: dict[str, str] | None = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if user == "nobody":
        argv = nobody_argv(argv, tmp=home, cwd=tree)
        env = None  # nobody_argv fixes the environment
    proc = subprocess.Popen(argv, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                            env=env)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the {name} tree's process did not start ({line!r}); see its stderr above")
    return Side(name, proc)


def compare(old_tree: Path, args: argparse.Namespace, user: str) -> Outcome:
    from tqdm import tqdm

    home = Path(tempfile.mkdtemp(prefix="code-env-vs-home-"))
    if user == "nobody":
        os.chown(home, NOBODY, NOBODY)
    sides: list[Side] = []
    try:
        sides = [start("old", old_tree, args, user, home, sys.stderr), start("new", ROOT, args, user, home, sys.stderr)]
        old, new = sides
        load_before = os.getloadavg()
        for i in tqdm(range(args.rounds), desc=f"{user}: old vs new", file=sys.stderr):
            for side in (old, new) if i % 2 == 0 else (new, old):
                side.round()
        load_after = os.getloadavg()
    finally:
        for side in sides:
            assert side.proc.stdin is not None
            side.proc.stdin.close()
        for side in sides:
            try:
                side.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                side.proc.kill()
        shutil.rmtree(home, ignore_errors=True)
    label = user if user == "nobody" or os.geteuid() == 0 else f"uid {os.geteuid()}"
    ratios = [n / o for n, o in zip(new.wall_s, old.wall_s, strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    cpu_ratios = [n / o for n, o in zip(new.cpu_s, old.cpu_s, strict=True) if o > 0]
    c1, _, c3 = statistics.quantiles(cpu_ratios, n=4)
    per_run = 1000 / args.programs
    return Outcome(
        user=label, rounds=args.rounds, programs=args.programs, ratio_median=statistics.median(ratios), ratio_q1=q1,
        ratio_q3=q3, cpu_ratio_median=statistics.median(cpu_ratios), cpu_ratio_q1=c1, cpu_ratio_q3=c3, wall_ms_old=statistics.median(old.wall_s) * per_run, wall_ms_new=statistics.median(new.wall_s) * per_run,
        cpu_ms_old=statistics.median(old.cpu_s) * per_run, cpu_ms_new=statistics.median(new.cpu_s) * per_run,
        load_before=load_before, load_after=load_after,
    )  # fmt: skip


def describe_new() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return head + ("+uncommitted changes" if dirty else "")


def table(rev: str, new: str, args: argparse.Namespace, outcomes: list[Outcome]) -> str:
    lines = [
        f"`run_many` of {args.programs} × `print(1)`, `Sandbox({args.backend!r}, workers={args.workers})`, "
        f"{args.rounds} alternating rounds; old = `{rev}`, new = `{new}`; {os.cpu_count()} CPUs. "
        "Ratios: new/old per round (median, IQR) of the wall time and of the CPU time of each tree's whole "
        "process tree (user + system); per run: medians over rounds.",
        "",
        "| user | new/old wall (median) | IQR | new/old CPU (median) | IQR | wall/run old → new | CPU/run old → new | load before → after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.user} | {o.ratio_median:.3f} | {o.ratio_q1:.3f}–{o.ratio_q3:.3f} | "
            f"{o.cpu_ratio_median:.3f} | {o.cpu_ratio_q1:.3f}–{o.cpu_ratio_q3:.3f} | "
            f"{o.wall_ms_old:.2f} → {o.wall_ms_new:.2f} ms | {o.cpu_ms_old:.2f} → {o.cpu_ms_new:.2f} ms | "
            f"{' '.join(f'{x:.2f}' for x in o.load_before)} → {' '.join(f'{x:.2f}' for x in o.load_after)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the commit to compare this checkout against (old)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="process", choices=["process", "nsjail"])
    parser.add_argument("--users", nargs="+", choices=["root", "nobody"],
                        default=["root", "nobody"] if os.geteuid() == 0 and shutil.which("setpriv") else ["root"])  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="markdown file (default benchmarks/results/throughput_vs_<rev>.md)")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the IQR needs them)")
    if "nobody" in args.users and os.geteuid() != 0:
        parser.error("--users nobody needs root (as a normal user, --users root runs as you)")
    new = describe_new()
    with worktree(args.rev) as (old_tree, sha):
        outcomes = [compare(old_tree, args, user) for user in args.users]
    text = table(sha, new, args, outcomes)
    out = args.out or RESULTS / f"throughput_vs_{sha}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
