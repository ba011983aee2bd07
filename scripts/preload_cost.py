"""What each module the process backend's workers preload (``sandbox._process.DEFAULT_PRELOAD``)
costs every run, against what it saves the programs that import it: the measurement behind the list.

    python scripts/preload_cost.py [--forks 400] [--rounds 5]

A run is a fork of the worker's template interpreter, so every page a preloaded module adds to it
is copied into each run's page tables and torn down at its exit, whether the program imports the
module or not; a module not preloaded costs only the programs that import it, its import time.
Leave-one-out, per module: two interpreters like the template (the worker's own imports, ``site``
and the other preloaded modules), with and without it, each forking a child that runs
``print(1)`` and exits, in a loop; the loops alternate in rounds and the CPU time of parent and
children per fork is compared (median of the per-round differences). Beside it, the module's import
time in a fresh ``python -S`` that already holds the others: what a program would pay for it. The
break-even share is their ratio: preloading pays when more runs than that import the module.
Writes ``benchmarks/results/preload_cost.md``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

import registry.verify  # noqa: E402,F401  (registers the verifier's driver)
from sandbox import registered_programs  # noqa: E402
from sandbox._process import DEFAULT_PRELOAD  # noqa: E402
from sandbox._programs import program_imports  # noqa: E402

# Run by each side (``python -S -c FORKER SANDBOX_DIR MODULES FORKS``): the worker's imports, the
# site module, the preloaded MODULES; then one line per "go" on stdin: CPU ms per fork of parent
# and children together, and the interpreter's resident anonymous memory (no json: it is measured).
FORKER = r"""
import gc, os, resource, sys
sys.path.insert(0, sys.argv[1])
import _signal, _socket, marshal, struct, time  # the worker's own imports (sandbox._zygote)
import _child, _linux, _paths, _template
import site
site.main()
for name in filter(None, sys.argv[2].split(",")):
    __import__(name)
gc.collect()
gc.freeze()
forks = int(sys.argv[3])
code = compile("print(1)", "solution.py", "exec")
devnull = os.open(os.devnull, os.O_WRONLY)
anon = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon"))
print("ready", flush=True)
for _ in sys.stdin:
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            os.dup2(devnull, 1)
            exec(code, {"__name__": "__main__"})
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime + c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
    print(cpu / forks * 1000, anon, flush=True)
"""

# ``python -S -c IMPORT_TIME OTHERS MODULE``: seconds of CPU to import MODULE once OTHERS are in
IMPORT_TIME = r"""
import sys, time
for name in filter(None, sys.argv[1].split(",")):
    __import__(name)
t = time.process_time()
__import__(sys.argv[2])
print(time.process_time() - t)
"""


class Side:
    def __init__(self, modules: list[str], forks: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", FORKER, str(ROOT / "sandbox"), ",".join(modules), str(forks)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the forker with {modules} did not start")
        self.cpu_ms: list[float] = []
        self.anon_kb = 0

    def round(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        cpu_ms, anon_kb = self.proc.stdout.readline().split()
        self.cpu_ms.append(float(cpu_ms))
        self.anon_kb = int(anon_kb)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


PULLED = r"""
import sys
sys.path.insert(0, sys.argv[1])
import _signal, _socket, marshal, struct, time
import _child, _linux, _paths, _template
import site
site.main()
for name in filter(None, sys.argv[2].split(",")):
    __import__(name)
print(sys.argv[3] in sys.modules)
"""


def pulled_in(others: list[str], module: str) -> bool:
    """Is ``module`` loaded anyway, by the worker's own imports or the other preloaded modules?"""
    out = subprocess.run([sys.executable, "-S", "-c", PULLED, str(ROOT / "sandbox"), ",".join(others), module],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return out.strip() == "True"


def import_ms(others: list[str], module: str, times: int = 5) -> float:
    out = [float(subprocess.run([sys.executable, "-S", "-c", IMPORT_TIME, ",".join(others), module], capture_output=True,
                                text=True, check=True).stdout) for _ in range(times)]  # fmt: skip
    return 1000 * statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--forks", type=int, default=400, help="forks per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tqdm import tqdm

    every = list(dict.fromkeys((*DEFAULT_PRELOAD, *program_imports(registered_programs()))))
    rows: list[tuple[str, int, float, float, float, float, float] | tuple[str, None]] = []
    for module in tqdm(every, desc="modules"):
        others = [m for m in every if m != module]
        if pulled_in(others, module):
            rows.append((module, None))
            continue
        sides = [Side(every, args.forks), Side(others, args.forks)]
        try:
            for r in range(args.rounds):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    side.round()
        finally:
            for side in sides:
                side.close()
        with_it, without = sides
        diffs = [a - b for a, b in zip(with_it.cpu_ms, without.cpu_ms, strict=True)]
        q1, extra, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
        imp = import_ms(others, module)
        rows.append((module, with_it.anon_kb - without.anon_kb, extra, q1, q3, imp, extra / imp if imp > 0 else float("inf")))
    lines = [
        f"Leave-one-out against the whole preload list ({', '.join(every)}: `DEFAULT_PRELOAD` and what the "
        f"registered programs import): {args.rounds} alternating rounds of "
        f"{args.forks} forks per side (`python scripts/preload_cost.py`). CPU per run: parent and child of a fork "
        "that runs `print(1)`, with the module preloaded minus without (median of the per-round differences; "
        "an interval holding 0 is no evidence of a cost). Import: CPU to import it in a fresh `python -S` holding "
        "the others. Break-even: the share of runs that must import it for the preload to pay.",
        "",
        "| module | resident memory it adds | CPU per run it adds (IQR) | its import, not preloaded | break-even share |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        if len(row) == 2:
            lines.append(f"| `{row[0]}` | – | loaded anyway by the worker or the other modules | – | – |")
            continue
        module, kb, extra, q1, q3, imp, share = row
        lines.append(f"| `{module}` | {kb} kB | {extra:+.3f} ms ({q1:+.3f} to {q3:+.3f}) | {imp:.2f} ms | "
                     f"{'below the noise' if q1 <= 0 <= q3 else f'{max(share, 0.0):.1%}'} |")
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "preload_cost.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
