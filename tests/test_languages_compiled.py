"""The compiled languages (C, C++, Rust, Go, Java; TypeScript, transpiled by esbuild) on both backends (conftest's ``sb``): the compile
phase in the jail, its verdicts (a compile error with the compiler's message, a compile that explodes is the
program's failure, never a ``sandbox_error``), the compile cache (identical programs compile once;
a run cannot change another's artefact), and the attacks of the Python suites in these languages,
checked from the host side: a fork bomb in C, a memory bomb, a connect() to a loopback listener
this test started from C and Java, the parent's secret and the host's files from Rust and C, at
compile time too. As a normal user too (``test_unprivileged``)."""

from __future__ import annotations

import os
import textwrap

import pytest

from sandbox import ExecutionResult, Limits, Sandbox
from sandbox._child import pack_files, unpack_files
from sandbox.languages import _esbuild_dir, discover_cached

from .conftest import REPO, SECRET_NAME, SECRET_VALUE, loopback_listener
from .test_languages_run import run as _run

pytestmark = pytest.mark.slow  # compilers take seconds

FAST = Limits(timeout_s=3.0, memory_mb=256)


def run(sb: Sandbox, language: str, code: str, limits: Limits = FAST, stdin: str = "") -> ExecutionResult:
    return _run(sb, language, code, limits, stdin)


def have(name: str) -> bool:
    return discover_cached(name).found


def lang(name: str) -> object:
    return pytest.param(name, marks=pytest.mark.skipif(not have(name), reason=f"no {name} toolchain a jail shows"))


# (doubles its input; fails with status 3 and a message on stderr; does not compile: line 2)
PROGRAMS = {
    "c": ('#include <stdio.h>\nint main(void) { long n; scanf("%ld", &n); printf("%ld\\n", 2 * n); return 0; }\n',
          '#include <stdio.h>\nint main(void) { fputs("bad input\\n", stderr); return 3; }\n',
          "int main(void) {\n  return undefined_name;\n}\n"),
    "cpp": ("#include <iostream>\nint main() { long long n; std::cin >> n; std::cout << 2 * n << '\\n'; }\n",
            "#include <iostream>\nint main() { std::cerr << \"bad input\\n\"; return 3; }\n",
            "int main() {\n  return undefined_name;\n}\n"),
    "rust": ("use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap();\n"
             "    let n: i64 = s.trim().parse().unwrap(); println!(\"{}\", 2 * n); }\n",
             "fn main() { eprintln!(\"bad input\"); std::process::exit(3); }\n",
             "fn main() {\n    let x: i32 = undefined_name;\n}\n"),
    "java": ("import java.util.Scanner;\npublic class Main { public static void main(String[] a) {\n"
             "    long n = new Scanner(System.in).nextLong(); System.out.println(2 * n); } }\n",
             "public class Main { public static void main(String[] a) { System.err.println(\"bad input\"); System.exit(3); } }\n",
             "public class Main { public static void main(String[] a) {\n    int x = undefinedName; } }\n"),
    "go": ('package main\nimport "fmt"\nfunc main() { var n int64; fmt.Scan(&n); fmt.Println(2 * n) }\n',
           'package main\nimport ("fmt"; "os")\nfunc main() { fmt.Fprintln(os.Stderr, "bad input"); os.Exit(3) }\n',
           "package main\nfunc main() {\n\tx := undefinedName\n}\n"),
    "typescript": ("const n: number = Number(require('fs').readFileSync(0, 'utf8').trim());\nconsole.log(String(2 * n));\n",
                   "console.error('bad input');\nprocess.exit(3);\n",
                   "const n: number = 1;\nlet x: number = ;\n"),
}  # fmt: skip
SOURCE = {"c": "main.c", "cpp": "main.cpp", "rust": "main.rs", "go": "main.go", "java": "Main.java", "typescript": "main.ts"}


@pytest.mark.parametrize("language", [lang(n) for n in PROGRAMS])
def test_a_program_compiles_runs_and_fails_like_the_language_does(sb: Sandbox, language: str) -> None:
    ok, failing, broken = PROGRAMS[language]
    res = run(sb, language, ok, stdin="21\n")
    assert (res.compile_status, res.compile_exit_code, res.exit_code, res.stdout, res.stderr) == ("ok", 0, 0, "42\n", "")
    assert not res.timeout_hit and not res.oom and res.compile_time_ms > 0
    res = run(sb, language, failing)
    assert (res.compile_status, res.exit_code, res.stdout, res.stderr) == ("ok", 3, "", "bad input\n")
    res = run(sb, language, broken)
    assert res.compile_status == "error" and res.compile_failed and res.compile_exit_code not in (None, 0)
    assert (res.exit_code, res.stdout, res.stderr, res.ok) == (None, "", "", False)  # it never ran
    # the compiler's message (Go's compile tool writes it on stdout), its line numbers those of the
    # candidate's file, and no host path
    message = res.compile_stderr + res.compile_stdout
    assert f"{SOURCE[language]}:2" in message or f"{SOURCE[language]}:3" in message, message
    assert str(REPO) not in message and "/tmp" not in message


def test_identical_programs_compile_once_and_a_run_cannot_change_anothers_artefact(sb: Sandbox) -> None:
    if not have("cpp"):
        pytest.skip("no C++ toolchain")
    # the program tries to replace its own artefact (and anything else it can reach) with another
    # program; every later run of the same source still runs the original
    code = textwrap.dedent("""
        #include <cstdio>
        #include <cstdlib>
        int main() {
            FILE *f = fopen("out/prog", "wb");
            if (f) { fputs("#!/bin/sh\\necho poisoned\\n", f); fclose(f); }
            std::system("echo poisoned > /proc/self/cwd/out/prog");
            std::puts("original");
        }
    """)  # fmt: skip
    before = sb.compiles.misses
    got = sb.run_many([{"code": code, "language": "cpp", "limits": FAST} for _ in range(8)])
    assert [r.stdout for r in got] == ["original\n"] * 8, [(r.stdout, r.stderr, r.compile_stderr) for r in got]
    assert sb.compiles.misses == before + 1 and sum(r.compile_cached for r in got) == 7
    assert run(sb, "cpp", code).stdout == "original\n"


def test_the_compile_phase_files_pack_and_unpack_and_refuse_what_could_escape() -> None:
    files = [("out/prog", True, b"\x7fELF..."), ("out/a/B.class", False, b"")]
    assert unpack_files(pack_files(files)) == files
    for name in ("/etc/passwd", "out/../../x", "out//x", "./x", "a\0b", ""):
        with pytest.raises(ValueError):
            unpack_files(pack_files([(name, False, b"x")]))
    with pytest.raises(ValueError, match="truncated"):
        unpack_files(pack_files(files)[:-1])


@pytest.mark.parametrize(("language", "code"), [
    # a template instantiation that doubles at every level: the compiler's time and memory explode
    pytest.param("cpp", """
        template <int N> struct B { using T = typename B<N - 1>::T; static const long v = B<N - 1>::v + B<N - 1>::v; };
        template <> struct B<0> { using T = int; static const long v = 1; };
        template <int N, int M> struct W { static const long v = W<N - 1, M>::v + W<N - 1, M + 1>::v; };
        template <int M> struct W<0, M> { static const long v = B<M>::v; };
        int main() { return W<40, 0>::v; }
        """, id="cpp-template-bomb"),
    # ten million lines of errors
    pytest.param("c", "#define A x x x x x x x x x x\n#define B A A A A A A A A A A\n#define C B B B B B B B B B B\n"
                      "#define D C C C C C C C C C C\n#define E D D D D D D D D D D\nint main(void) { E E E E E E E E E E }\n",
                 id="c-error-flood"),
])  # fmt: skip
def test_a_compile_that_explodes_is_the_programs_failure(sb: Sandbox, language: str, code: str) -> None:
    if not have(language):
        pytest.skip(f"no {language} toolchain")
    res = run(sb, language, code, Limits(timeout_s=2.0, compile_timeout_s=4.0, compile_memory_mb=512))
    assert res.compile_failed and res.exit_code is None, (res.compile_status, res.compile_stderr[-500:])
    assert len(res.compile_stderr) < 300_000


@pytest.mark.parametrize("language", [lang("c"), lang("java")])
def test_a_runaway_program_times_out(sb: Sandbox, language: str) -> None:
    code = {"c": "int main(void) { volatile long i = 0; for (;;) i++; }\n",
            "java": "public class Main { public static void main(String[] a) { long i = 0; while (true) i++; } }\n"}[language]  # fmt: skip
    res = run(sb, language, code, Limits(timeout_s=1.5))
    assert res.compile_status == "ok" and res.timeout_hit and res.exit_code is None


@pytest.mark.parametrize("language", [lang("c")])
def test_fork_is_refused_and_a_fork_bomb_is_contained(sb: Sandbox, language: str) -> None:
    once = '#include <stdio.h>\n#include <unistd.h>\nint main(void) { pid_t p = fork(); if (p == 0) { puts("child"); return 0; }\n' \
           '  printf("%s\\n", p < 0 ? "refused" : "forked"); return 0; }\n'  # fmt: skip
    res = run(sb, language, once)
    assert res.stdout == "refused\n", res.stdout
    bomb = "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n"
    res = run(sb, language, bomb, Limits(timeout_s=1.5, max_processes=8, max_threads=16))
    assert res.timeout_hit  # and the fixture: no process of the run outlived it


@pytest.mark.parametrize("language", [lang("c"), lang("java")])
def test_a_memory_bomb_is_oom(sb: Sandbox, language: str) -> None:
    code = {"c": "#include <stdlib.h>\n#include <string.h>\nint main(void) { for (;;) { char *p = malloc(16 << 20); "
                 "if (p) memset(p, 1, 16 << 20); } }\n",
            "java": "import java.util.*;\npublic class Main { public static void main(String[] a) { List<long[]> k = new ArrayList<>();\n"
                    "  while (true) k.add(new long[2 << 20]); } }\n"}[language]  # fmt: skip
    res = run(sb, language, code, Limits(timeout_s=10.0, memory_mb=128))
    # (the JVM sizes its heap to the run's memory and may say so itself: an OutOfMemoryError, exit 1)
    assert res.oom or (language == "java" and "OutOfMemoryError" in res.stderr), (res.exit_code, res.stderr[-300:])
    assert not res.timeout_hit


@pytest.mark.parametrize("language", [lang("c"), lang("java")])
def test_no_connection_reaches_a_loopback_listener(sb: Sandbox, language: str) -> None:
    with loopback_listener() as port:
        code = {"c": f"""
                    #include <stdio.h>
                    #include <string.h>
                    #include <unistd.h>
                    #include <arpa/inet.h>
                    #include <sys/socket.h>
                    int main(void) {{
                        int s = socket(AF_INET, SOCK_STREAM, 0);
                        if (s < 0) {{ perror("refused"); return 0; }}
                        struct sockaddr_in a; memset(&a, 0, sizeof a); a.sin_family = AF_INET; a.sin_port = htons({port});
                        a.sin_addr.s_addr = htonl(0x7f000001);
                        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {{ write(s, "leak", 4); puts("connected"); }}
                        else perror("refused");
                        return 0;
                    }}
                """,
                "java": f"""
                    public class Main {{ public static void main(String[] a) {{
                        try (java.net.Socket s = new java.net.Socket("127.0.0.1", {port})) {{
                            s.getOutputStream().write("leak".getBytes()); System.out.println("connected");
                        }} catch (Exception e) {{ System.out.println("refused " + e); }}
                    }} }}
                """}[language]  # fmt: skip
        res = run(sb, language, code, Limits(timeout_s=5.0))
        assert res.compile_status == "ok" and "connected" not in res.stdout, res.stdout


@pytest.mark.parametrize("language", [lang("rust"), lang("go"), lang("c")])
def test_the_parents_secret_and_the_hosts_files_are_not_reachable(sb: Sandbox, language: str) -> None:
    paths = ["/root", "/home", str(REPO), str(REPO / "tests" / "conftest.py"), "/etc/shadow", "/proc/1/environ"]
    code = {"rust": f"""
                fn main() {{
                    for (k, v) in std::env::vars() {{ println!("env {{}}={{}}", k, v); }}
                    for p in {str(paths).replace("'", '"').replace("[", "[").replace("]", "]")} {{
                        match std::fs::read_dir(p) {{
                            Ok(d) => println!("{{}} read {{}}", p, d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")),
                            Err(_) => match std::fs::read_to_string(p) {{
                                Ok(s) => println!("{{}} read {{}}", p, s.chars().take(200).collect::<String>()),
                                Err(e) => println!("{{}} refused {{}}", p, e),
                            }},
                        }}
                    }}
                }}
            """,
            "go": """
                package main
                import ("fmt"; "os"; "strings")
                func main() {
                    for _, kv := range os.Environ() { fmt.Println("env " + kv) }
                    for _, p := range []string{""" + ", ".join(f'"{p}"' for p in paths) + """} {
                        if d, err := os.ReadDir(p); err == nil {
                            names := []string{}
                            for _, e := range d { names = append(names, e.Name()) }
                            fmt.Println(p, "read", strings.Join(names, " "))
                        } else if b, err := os.ReadFile(p); err == nil {
                            fmt.Println(p, "read", string(b[:min(len(b), 200)]))
                        } else {
                            fmt.Println(p, "refused", err)
                        }
                    }
                }
            """,
            # at compile time: the preprocessor reads what the compiler can
            "c": "#include <stdio.h>\nint main(void) { return 0; }\n#include \"" + str(REPO / "tests" / "conftest.py") + "\"\n"
                 "#include \"/proc/1/environ\"\n"}[language]  # fmt: skip
    res = run(sb, language, code)
    blob = res.model_dump_json()
    assert SECRET_VALUE not in blob and SECRET_NAME not in blob
    if language == "c":  # neither file is in the compiler's view
        assert res.compile_status == "error" and "No such file" in res.compile_stderr, res.compile_stderr
        assert "SECRET" not in res.compile_stderr
        return
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines() if not line.startswith("env "))
    assert lines[str(REPO / "tests" / "conftest.py")].startswith("refused") and lines["/etc/shadow"].startswith("refused")
    listed = lines[str(REPO)].split() if lines[str(REPO)].startswith("read") else []
    assert not {"tests", "registry", "sandbox", "code_env", "README.md"} & set(listed), res.stdout


# Each toolchain's own trees (sandbox.languages.TOOLCHAIN_TREES), as a run of each kind sees them:
# (entries of /usr/lib/jvm, of /usr/lib/gcc, of /usr/include), -1 where the directory is not there.
TREES = ("/usr/lib/jvm", "/usr/lib/gcc", "/usr/include")
COUNT_BASH = "for d in " + " ".join(TREES) + ' ; do n=0; for f in "$d"/*; do [ -e "$f" ] && n=$((n+1)); done; echo "$d $n"; done\n'
COUNT_JAVA = ("import java.io.File;\npublic class Main { public static void main(String[] a) { for (String d : new String[]{"
              + ", ".join(f'"{t}"' for t in TREES) + '}) { String[] l = new File(d).list(); System.out.println(d + " " + '
              "(l == null ? -1 : l.length)); } } }\n")  # fmt: skip
COUNT_PYTHON = "import os\nfor d in " + repr(TREES) + ":\n    print(d, len(os.listdir(d)) if os.path.isdir(d) else -1)\n"


def host_count(d: str) -> int:
    return len(os.listdir(d)) if os.path.isdir(d) else -1


@pytest.mark.skipif(not (have("java") and have("bash") and have("c")), reason="needs Java, Bash and C")
def test_a_run_that_may_exec_sees_its_own_toolchain_and_not_the_others(sb: Sandbox) -> None:
    host = {d: host_count(d) for d in TREES}
    assert host["/usr/lib/jvm"] > 0 and host["/usr/lib/gcc"] > 0
    seen = {lang: dict((line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1])) for line in run(sb, lang, code).stdout.splitlines())
            for lang, code in (("bash", COUNT_BASH), ("java", COUNT_JAVA), ("python", COUNT_PYTHON))}  # fmt: skip
    # Bash needs no tree; Java its JVM alone; a Python run (its filter refuses exec) the whole view
    assert seen["bash"] == dict.fromkeys(TREES, 0), seen
    assert seen["java"] == {"/usr/lib/jvm": host["/usr/lib/jvm"], "/usr/lib/gcc": 0, "/usr/include": 0}, seen
    assert seen["python"] == host, seen
    # a C compile sees gcc's trees and not the JVM's: an #include of a JVM file finds nothing
    jvm_file = next(os.path.join(r, f) for r, _, fs in os.walk("/usr/lib/jvm") for f in fs if f == "release")
    res = run(sb, "c", f'#include "{jvm_file}"\nint main(void) {{ return 0; }}\n')
    assert res.compile_status == "error" and "No such file or directory" in res.compile_stderr, res.compile_stderr
    assert run(sb, "c", "#include <stdio.h>\nint main(void) { puts(\"ok\"); }\n").stdout == "ok\n"


@pytest.mark.skipif(not (have("typescript") and have("bash") and _esbuild_dir() is not None), reason="needs npm's esbuild and Bash")
def test_typescripts_compiler_is_in_its_compile_phase_alone(sb: Sandbox) -> None:
    esbuild = _esbuild_dir()
    assert esbuild is not None and os.listdir(esbuild) == ["esbuild"]
    probe = f'for f in {esbuild}/*; do [ -e "$f" ] && echo "seen $f"; done; echo done\n'
    assert run(sb, "bash", probe).stdout == "done\n"  # a Bash run (one that may exec) sees no esbuild
    ts_run = run(sb, "typescript", f"const fs = require('fs');\nconsole.log(fs.readdirSync('{esbuild}').length);\n")
    assert ts_run.compile_status == "ok" and ts_run.stdout == "0\n", ts_run  # compiled by it, run without it
