"""The compiled languages, paired (alternating rounds in one run, see ``conftest.paired``), one
trivial program per language (it prints a line):

* per compiled language (C, C++, Rust, Go, Java, TypeScript): ``Sandbox.run(code, language=...)`` of a new source each
  time (compile and run), of the same source again (a compile-cache hit: the run alone), and the
  anchors on this machine: the table's own compile command and the program, bare on the host
  (``subprocess``: no jail, no limits), and the compiled program alone in the same jail (the
  process backend's run of the artefacts, without the compile layer: what a run of the binary
  costs in this sandbox, carrying it into the run's own work dir included), and the floor of an
  exec'd run in that jail: ``/bin/true``, which the jail's system view holds (nothing carried).
  Target: a cached C++ run within 1.3x of the binary alone in the same jail.
* a GRPO-style batch of C++ programs: 8 programs x 8 identical samples in one ``run_many`` (one
  compile per program: the compile cache, one compile per key at a time) against the same 64
  runs with every sample's source made distinct (a compile each).

No assertion on speed: only that every side prints what the program prints."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, Sandbox
from sandbox.languages import JAIL_PATH, LANGUAGES, compile_command, discover_cached, run_command

from .conftest import CORES, Side, Target, paired, record_paired

PROGRAMS = {
    "c": '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n',
    "cpp": '#include <iostream>\nint main() { std::cout << "ok" << std::endl; }\n',
    "rust": 'fn main() { println!("ok"); }\n',
    "go": 'package main\nimport "fmt"\nfunc main() { fmt.Println("ok") }\n',
    "java": 'public class Main { public static void main(String[] a) { System.out.println("ok"); } }\n',
    "typescript": 'const word: string = "ok";\nconsole.log(word);\n',
}  # fmt: skip
COMMENT = dict.fromkeys(PROGRAMS, "//")
LIMITS = Limits(timeout_s=10.0, compile_timeout_s=60.0)
ROUNDS = 5
COMPILES = 2  # compile-and-run executions per round and side
RUNS = 8  # run-only executions per round and side
_fresh = itertools.count()


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    with Sandbox(workers=CORES) as s:
        s.run_many(["pass"] * 20)
        yield s


def fresh(language: str) -> str:
    """The program, made a source the compile cache has never seen."""
    return PROGRAMS[language] + f"{COMMENT[language]} {time.time_ns()} {next(_fresh)}\n"


class Host:
    """The table's compile command and the program, bare on this machine, in a directory of its own."""

    def __init__(self, language: str) -> None:
        self.language = language
        self.dir = Path(tempfile.mkdtemp(prefix=f"code-env-bench-{language}-"))
        source, *self.compile_argv = compile_command(language)
        self.source = self.dir / source
        _, *run = run_command(language)
        self.run_argv = [str(self.dir / run[0]) if not run[0].startswith("/") else run[0], *run[1:]]

    def compile(self, code: str) -> None:
        shutil.rmtree(self.dir / "out", ignore_errors=True)
        (self.dir / "out").mkdir()
        self.source.write_text(code)
        subprocess.run(self.compile_argv, cwd=self.dir, check=True, capture_output=True, stdin=subprocess.DEVNULL)

    def run(self) -> str:
        return subprocess.run(self.run_argv, cwd=self.dir, check=True, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL).stdout  # fmt: skip

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def in_jail(sb: Sandbox, language: str, code: str) -> Side:
    """The compiled program alone in the same jail: the backend's run of its artefacts."""
    compiled, _ = sb._compile(code, language, LIMITS, "bench/compile", {})
    assert compiled.status == "ok", compiled.stderr
    backend, command = sb._live(), run_command(language)

    def round_() -> list[str]:
        return [backend.run("", "", LIMITS, "bench/jail", command=command, files=compiled.files).stdout  # type: ignore[call-arg]
                for _ in range(RUNS)]  # fmt: skip

    return Side(round_, RUNS)


def true_in_jail(sb: Sandbox) -> Side:
    """An exec'd run of a binary the jail's system view holds: nothing is carried into the run."""
    backend, command = sb._live(), ("main.sh", shutil.which("true", path=JAIL_PATH) or "/bin/true")

    def round_() -> list[str]:
        return [backend.run("", "", LIMITS, "bench/true", command=command).stdout for _ in range(RUNS)]  # type: ignore[call-arg]

    return Side(round_, RUNS)


def shown_command(language: str) -> str:
    """The compile command as the results show it: the virtual environment as ``.venv`` (no path
    of this machine goes into the project)."""
    return " ".join(compile_command(language)[1:]).replace(os.path.realpath(sys.prefix), ".venv")


@pytest.mark.parametrize("language", [pytest.param(n, marks=pytest.mark.skipif(
    not discover_cached(n).found, reason=f"no {n} toolchain a jail shows")) for n in PROGRAMS])  # fmt: skip
def test_compile_and_run(benchmark: Any, sb: Sandbox, language: str) -> None:
    host = Host(language)
    cached = PROGRAMS[language]
    sb.run(cached, limits=LIMITS, language=language)  # compiled once: the cached side's runs hit
    host.compile(cached)
    title = LANGUAGES[language].title
    sides = {
        f"{title}: sandbox, compile + run": Side(lambda: [sb.run(fresh(language), limits=LIMITS, language=language).stdout
                                                          for _ in range(COMPILES)], COMPILES),
        f"{title}: host, compile + run (bare)": Side(lambda: [(host.compile(fresh(language)), host.run())[1]
                                                              for _ in range(COMPILES)], COMPILES),
        f"{title}: sandbox, cached run": Side(lambda: [sb.run(cached, limits=LIMITS, language=language).stdout
                                                       for _ in range(RUNS)], RUNS),
        f"{title}: the program alone in the same jail": in_jail(sb, language, cached),
        f"{title}: host, the program (bare)": Side(lambda: [host.run() for _ in range(RUNS)], RUNS),
        f"{title}: /bin/true in the same jail (floor)": true_in_jail(sb),
    }  # fmt: skip
    names = list(sides)

    def check(outs: dict[str, object]) -> None:
        for name, out in outs.items():
            if "floor" not in name:
                assert out == ["ok\n"] * (COMPILES if "compile" in name else RUNS), (name, out)

    try:
        result = paired(benchmark, sides, rounds=ROUNDS, check=check)
    finally:
        host.close()
    targets = [Target(f"{title}: cached run ÷ the program alone in the same jail (time per run)", names[2], "time", vs=names[3],
                      **({"op": "<=", "bound": 1.3} if language == "cpp" else {})),  # type: ignore[arg-type]
               Target(f"{title}: sandbox ÷ host, compile + run (time per program)", names[0], "time", vs=names[1]),
               Target(f"{title}: cached run ÷ the program bare on the host (time per run)", names[2], "time", vs=names[4]),
               Target(f"{title}: the program alone in the same jail ÷ /bin/true there (time per run)", names[3], "time", vs=names[5]),
               Target(f"{title}: CPU per cached run", names[2], "cpu")]  # fmt: skip
    record_paired(benchmark, result, title=f"{title}: compile and run a trivial program, against the bare compiler and binary",
                  program=f"{title}, hello world", mode="one call at a time", unit="runs", targets=targets,
                  note=f"Compile command: `{shown_command(language)}`; toolchain "
                       f"{discover_cached(language).version}. A compile-and-run side compiles a new source "
                       "every time (a comment makes it one).", rank=30)  # fmt: skip


def test_grpo_batch_of_cpp_programs(benchmark: Any, sb: Sandbox) -> None:
    if not discover_cached("cpp").found:
        pytest.skip("no C++ toolchain")
    programs, samples = (8, 8) if benchmark.enabled else (2, 2)
    body = "#include <iostream>\nint main() {{ long long s = 0; for (int i = 0; i < {k}; i++) s += i; std::cout << s << std::endl; }}\n"

    def batch(distinct: bool) -> list[dict[str, Any]]:
        tag = f"// {time.time_ns()} {next(_fresh)}"
        return [{"code": body.format(k=1000 + p) + tag + (f" {s}" if distinct else "") + "\n", "language": "cpp", "limits": LIMITS}
                for p in range(programs) for s in range(samples)]  # fmt: skip

    want = [f"{sum(range(1000 + p))}\n" for p in range(programs) for _ in range(samples)]
    n = programs * samples
    sides = {
        f"{programs} C++ programs x {samples} samples, one compile each program": Side(
            lambda: [r.stdout for r in sb.run_many(batch(distinct=False))], n),
        f"the same {n} samples, a compile each": Side(lambda: [r.stdout for r in sb.run_many(batch(distinct=True))], n),
    }  # fmt: skip

    def check(outs: dict[str, object]) -> None:
        for name, out in outs.items():
            assert out == want, (name, out)

    result = paired(benchmark, sides, rounds=3, check=check)
    names = list(sides)
    record_paired(benchmark, result, title=f"GRPO-style batch: {programs} C++ programs x {samples} identical samples in one run_many",
                  program=f"C++ programs ({programs} x {samples})", mode=f"all cores ({CORES})", unit="samples",
                  targets=[Target("C++ GRPO batch: with duplicates ÷ a compile each (throughput)", names[0], "speed", vs=names[1])],
                  rank=31)  # fmt: skip
