"""The languages table (``sandbox.languages``): names and aliases, extensions, what this machine has
of each toolchain, and commands that really compile and run a program with each toolchain found."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox import languages
from sandbox.languages import LANGUAGES, UnknownLanguageError, discover, language_for_file, resolve

# Reads a number, prints twice it: the same program in every language of the table.
DOUBLER = {
    "python": "print(2 * int(input()))\n",
    "c": '#include <stdio.h>\nint main(void) { long n; if (scanf("%ld", &n) != 1) return 1; printf("%ld\\n", 2 * n); return 0; }\n',
    "cpp": "#include <iostream>\nint main() { long long n; std::cin >> n; std::cout << 2 * n << '\\n'; }\n",
    "rust": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap();\n"
            "    let n: i64 = s.trim().parse().unwrap(); println!(\"{}\", 2 * n); }\n",
    "go": 'package main\nimport "fmt"\nfunc main() { var n int64; fmt.Scan(&n); fmt.Println(2 * n) }\n',
    "java": "import java.util.Scanner;\npublic class Main { public static void main(String[] a) {\n"
            "    long n = new Scanner(System.in).nextLong(); System.out.println(2 * n); } }\n",
    "javascript": "const n = Number(require('fs').readFileSync(0, 'utf8').trim());\nconsole.log(String(2 * n));\n",
    "typescript": "const n: number = Number(require('fs').readFileSync(0, 'utf8').trim());\nconsole.log(String(2 * n));\n",
    "bash": "read n\necho $((2 * n))\n",
}  # fmt: skip


def test_every_language_has_a_doubler() -> None:
    assert set(DOUBLER) == set(LANGUAGES)


@pytest.mark.parametrize(("name", "expected"), [
    ("python", "python"), ("Python3", "python"), ("cpp", "cpp"), ("C++", "cpp"), ("nodejs", "javascript"),
    ("js", "javascript"), ("typescript", "typescript"), ("ts", "typescript"), ("go", "go"), ("golang", "go"),
    ("java", "java"), ("rust", "rust"), ("bash", "bash"), ("sh", "bash"), (" c ", "c"),
])  # fmt: skip
def test_names_and_aliases(name: str, expected: str) -> None:
    """SandboxFusion's names (``nodejs``, ``cpp``, ``go``, ``typescript``, ...) are aliases."""
    assert resolve(name).name == expected


def test_an_unknown_language_is_a_clear_error() -> None:
    with pytest.raises(UnknownLanguageError, match=r"unknown language 'pyhton'; did you mean 'python'\? \(known: python, c, cpp"):
        resolve("pyhton")
    with pytest.raises(ValueError, match="unknown language 'go_test'"):  # a way to judge, not a language
        resolve("go_test")
    with pytest.raises(TypeError, match="language: expected str, got int"):
        resolve(3)  # type: ignore[arg-type]


def test_the_extension_names_the_language() -> None:
    assert [language_for_file(p).name for p in ("a.py", "x/y.CPP", "m.cc", "main.rs", "Main.java", "s.mjs", "t.ts", "r.sh")] == [
        "python", "cpp", "cpp", "rust", "java", "javascript", "typescript", "bash"]  # fmt: skip
    with pytest.raises(ValueError, match=r"'notes\.txt': no language has the extension '\.txt' \(known: \.py, \.c, \.cpp"):
        language_for_file("notes.txt")


def test_a_missing_toolchain_names_the_package_that_brings_it() -> None:
    for name, lang in LANGUAGES.items():
        got = discover(name, path="")
        if name == "python":  # the sandbox's own interpreter
            assert got.found and got.runs_in_sandbox and got.version
            continue
        assert not got.found and not got.runs_in_sandbox and got.version is None
        assert got.missing == list(lang.binaries) and got.install == lang.install
        assert got.install.startswith(("Debian: apt-get install ", "PyPI: pip install ", "npm: npm install"))


def test_a_failing_version_command_is_a_missing_toolchain(tmp_path: Path) -> None:
    fake = tmp_path / "node"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    got = discover("javascript", path=str(tmp_path))
    assert not got.found and got.missing == ["node (`node --version` failed: exit status 3)"]


def test_what_runs_in_the_sandbox() -> None:
    """Python, the interpreted languages whose interpreter the jail shows and the compiled ones
    whose compiler it shows; a toolchain counts where the jail's PATH finds it (rustup's, in a home
    directory, is not the jail's)."""
    assert languages.RUNNABLE == tuple(LANGUAGES)  # every language of the table
    assert [t.language for t in languages.toolchains() if t.runs_in_sandbox] == [
        n for n in languages.RUNNABLE if languages.discover_cached(n).found]  # fmt: skip
    # of the toolchains in the virtual environment the jail shows npm's esbuild (the directory where
    # it is alone, else the file), Go's tools and its compiled standard library; nothing else of it
    go_tools = os.path.realpath(languages.discover_cached("go").vars.get("gotool", "-"))
    for path in languages.toolchain_paths():
        esbuild = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) and path == languages._esbuild_dir() else [path]
        assert all(os.path.isfile(p) and os.access(p, os.X_OK) for p in esbuild) or path in (languages.GO_STD, go_tools), path


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in LANGUAGES if n != "python"])
def test_the_tables_commands_compile_and_run_a_program(name: str, tmp_path: Path) -> None:
    """Each toolchain this machine has, with the table's own commands and flags, on the host (a
    program of ours: the table is checked here, not the sandbox): compiles the doubler, runs it."""
    found = discover(name)
    if not found.found:
        pytest.skip(f"{name}: no toolchain here ({', '.join(found.missing)}; {found.install})")
    lang = LANGUAGES[name]
    (tmp_path / lang.source).write_text(DOUBLER[name])
    (tmp_path / languages.OUTPUT_DIR).mkdir()

    def argv(template: tuple[str, ...]) -> list[str]:  # as the sandbox fills them, in tmp_path as the work dir
        words = [languages.substitute(w.replace("{src}", lang.source).replace("{out}", lang.output), found.vars) for w in template]
        first = str(tmp_path / words[0]) if words[0] == lang.output else found.binaries.get(words[0], words[0])
        return [first, *words[1:]]

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if lang.compiled:
        done = subprocess.run(argv(lang.compile), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
    ran = subprocess.run(argv(lang.run), cwd=tmp_path, input="21\n", capture_output=True, text=True, timeout=120, env=env)
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr
