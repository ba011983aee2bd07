"""The ``sysinfo`` system call answers the run's own view, not the host's: the seccomp filter sends
it to a listener the sandbox's monitor holds (``sandbox._seccomp``, ``sandbox._monitor``), which
writes a ``struct sysinfo`` made of the run's limits alone. Attacked from the host side, on both
backends, as root and as a normal user (``tests._nobody.as_user``): the view is the limit, a host
that allocates and forks between two readings moves nothing in them (and moves the host's own, so
the test could fail), a program cannot use or make a listener, threads and forked children all get
their answer, and a run that ends with a call pending leaves a working slot.
"""

from __future__ import annotations

import ast
import ctypes
import json
import mmap
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, Sandbox

from ._nobody import ROOT, as_user, can_drop

# conftest's, spelled here: a normal user's run imports this file alone (``as_user``)
BACKENDS = [pytest.param("process", id="process"), pytest.param("nsjail", id="nsjail", marks=pytest.mark.nsjail)]

MEMORY_MB = 300

# What a program reads: the raw struct (hex) and glibc's figures that come from it.
READ = r'''
import ctypes, os
class S(ctypes.Structure):
    _fields_ = [("uptime", ctypes.c_long), ("loads", ctypes.c_ulong * 3), ("totalram", ctypes.c_ulong),
                ("freeram", ctypes.c_ulong), ("sharedram", ctypes.c_ulong), ("bufferram", ctypes.c_ulong),
                ("totalswap", ctypes.c_ulong), ("freeswap", ctypes.c_ulong), ("procs", ctypes.c_ushort),
                ("pad", ctypes.c_ushort), ("totalhigh", ctypes.c_ulong), ("freehigh", ctypes.c_ulong),
                ("mem_unit", ctypes.c_uint), ("_f", ctypes.c_char * (20 - 2 * ctypes.sizeof(ctypes.c_long) - 4))]
libc = ctypes.CDLL(None, use_errno=True)
def reading():
    s = S()
    if libc.sysinfo(ctypes.byref(s)) != 0:
        return {"errno": ctypes.get_errno()}
    return {"raw": bytes(s).hex(), "fields": {n: (list(getattr(s, n)) if n == "loads" else getattr(s, n))
            for n, _ in S._fields_ if n not in ("pad", "_f")}}
'''

# (printed as a Python literal: in weak mode, with an interpreter under a home others may not read,
# a run imports only what the worker preloaded, and json is not among it)
VIEW = READ + r'''
print(repr({"reading": reading(), "bytes": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
            "avail": os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")}))
'''

# Two readings with the host's allocations and forks in between (the host starts them when it sees
# the first line).
CHANNEL = READ + r'''
import json, sys, time
first = reading()
print(json.dumps(first), flush=True)
time.sleep(2.5)
print(json.dumps(reading()), flush=True)
'''

# Every fd the program has, with the listener's RECV: refused, never a notification; its own
# listener (the kernel allows one per filter tree) and its own filter that allows everything (it
# cannot turn the notification into the host's answer).
LISTENER = READ + r'''
import ctypes, errno, fcntl, json, os
RECV = 3 << 30 | 80 << 16 | 0x21 << 8
SEND = 3 << 30 | 24 << 16 | 0x21 << 8 | 1
got = {}
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        buf = bytearray(80)
        fcntl.ioctl(fd, RECV, buf, True)
        got[name] = "notification " + buf.hex()
    except OSError as exc:
        got[name] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    fcntl.ioctl(0, SEND, bytes(24))
    send = "sent"
except OSError as exc:
    send = errno.errorcode.get(exc.errno, str(exc.errno))
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
allow = (F * 1)(F(0x06, 0, 0, 0x7FFF0000))  # BPF_RET|BPF_K SECCOMP_RET_ALLOW
prog = P(1, allow)
nr = {"x86_64": 317, "aarch64": 277}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
own = libc.syscall(ctypes.c_long(nr), 1, 8, ctypes.byref(prog))  # SECCOMP_FILTER_FLAG_NEW_LISTENER
own_listener = errno.errorcode.get(ctypes.get_errno(), "?") if own < 0 else "fd %d" % own
plain = libc.syscall(ctypes.c_long(nr), 1, 0, ctypes.byref(prog))
print(json.dumps({"fds": got, "send": send, "own_listener": own_listener, "own_filter": plain,
                  "after": reading()}))
'''

# Threads and forked children, all calling at once.
MANY = READ + r'''
import json, os, threading
seen = []
def calls():
    for _ in range(20):
        seen.append(reading().get("raw"))
threads = [threading.Thread(target=calls) for _ in range(8)]
for t in threads:
    t.start()
kids = []
for _ in range(3):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps([reading().get("raw") for _ in range(20)]).encode())
        os._exit(0)
    os.close(w)
    kids.append((pid, r))
for t in threads:
    t.join()
for pid, r in kids:
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    seen += json.loads(data)
print(json.dumps(seen))
'''

# Ends while its threads are in (or about to be in) the call.
PENDING = READ + r'''
import os, threading
for _ in range(4):
    threading.Thread(target=lambda: [reading() for _ in range(1000)], daemon=True).start()
os._exit(0)
'''


def attack(backend: str, isolation: str = "strong") -> dict[str, Any]:
    """Every attack of this file on one sandbox, from the host side; the observations (as JSON, so a
    normal user's run can hand them back). Run by the tests below in this process (root, or a
    normal user's pytest) and through ``as_user`` (root's run of the normal user's case)."""
    obs: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"isolation": "weak"} if isolation == "weak" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # weak mode's, asked for
        sb = Sandbox(backend=backend, workers=1, **kwargs)
    with sb:
        obs["info"] = sb.isolation.get("sysinfo")
        limits = Limits(memory_mb=MEMORY_MB, timeout_s=10)
        obs["view"] = _result(sb.run(VIEW, limits=limits))
        if isolation == "weak":
            return obs
        obs["channel"] = _channel(sb, limits)
        obs["listener"] = _result(sb.run(LISTENER, limits=limits))
        many = sb.run(MANY, limits=Limits(memory_mb=MEMORY_MB, timeout_s=20, max_processes=4))
        obs["many"] = _result(many)
        obs["pending"] = [_result(sb.run(PENDING, limits=Limits(memory_mb=MEMORY_MB, timeout_s=5, max_processes=mp)))
                          for mp in (1, 4) for _ in range(5)]  # fmt: skip
        obs["after_pending"] = _result(sb.run(VIEW, limits=limits))
    return obs


def _result(res: Any) -> dict[str, Any]:
    return {"exit_code": res.exit_code, "sandbox_error": res.sandbox_error, "stdout": res.stdout,
            "stderr": res.stderr[-2000:], "timeout_hit": res.timeout_hit}  # fmt: skip


def _host_reading() -> bytes:
    buf = ctypes.create_string_buffer(256)
    assert ctypes.CDLL(None).sysinfo(buf) == 0
    return buf.raw[:112]


def _channel(sb: Sandbox, limits: Limits) -> dict[str, Any]:
    """The run reads twice; in between the host touches 1 GiB and forks 50 sleepers."""
    box: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: box.update(res=sb.run(CHANNEL, limits=limits)))
    host_before = _host_reading()
    runner.start()
    time.sleep(0.8)  # the run's first reading is done by now (its start takes ~50 ms)
    mem = mmap.mmap(-1, 1 << 30)
    sleepers: list[int] = []
    try:
        for off in range(0, 1 << 30, mmap.PAGESIZE):
            mem[off] = 1
        for _ in range(50):
            pid = os.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            sleepers.append(pid)
        host_during = _host_reading()
        runner.join(30)
    finally:
        for pid in sleepers:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        mem.close()
    res = box["res"]
    return {"run": _result(res), "host_moved": host_before != host_during}


def check(obs: dict[str, Any], isolation: str = "strong") -> None:
    """What the observations of ``attack`` must show."""
    assert obs["info"] == "the run's own view (answered by the monitor)", obs["info"]
    limit = MEMORY_MB << 20
    view = obs["view"]
    assert view["exit_code"] == 0 and view["sandbox_error"] is None, view
    seen = ast.literal_eval(view["stdout"])
    assert seen["bytes"] == seen["avail"] == limit, seen
    assert seen["reading"]["fields"] == {
        "uptime": 0, "loads": [0, 0, 0], "totalram": limit, "freeram": limit, "sharedram": 0, "bufferram": 0,
        "totalswap": 0, "freeswap": 0, "procs": 1, "totalhigh": 0, "freehigh": 0, "mem_unit": 1,
    }, seen  # fmt: skip
    if isolation == "weak":
        return
    raw = seen["reading"]["raw"]

    channel = obs["channel"]
    assert channel["host_moved"], "the host's own readings did not move: this test could not fail"
    run = channel["run"]
    assert run["exit_code"] == 0 and run["sandbox_error"] is None, run
    first, second = (json.loads(line) for line in run["stdout"].splitlines())
    assert first["raw"] == second["raw"] == raw, (first, second)

    lst = obs["listener"]
    assert lst["exit_code"] == 0 and lst["sandbox_error"] is None, lst
    got = json.loads(lst["stdout"])
    assert got["fds"] and all(v in ("EPERM", "EBADF") for v in got["fds"].values()), got
    assert got["send"] == "EPERM", got
    assert got["own_listener"] in ("EBUSY", "EPERM"), got
    assert got["own_filter"] == 0, got  # its own filter loads, and allows everything...
    assert got["after"]["raw"] == raw, got  # ...but cannot turn the notification into the host's answer

    many = obs["many"]
    assert many["exit_code"] == 0 and many["sandbox_error"] is None and not many["timeout_hit"], many
    answers = json.loads(many["stdout"])
    assert len(answers) == 8 * 20 + 3 * 20 and set(answers) == {raw}, set(answers)

    for res in obs["pending"]:
        assert res["exit_code"] == 0 and res["sandbox_error"] is None and not res["timeout_hit"], res
    after = obs["after_pending"]
    assert after["exit_code"] == 0 and ast.literal_eval(after["stdout"])["reading"]["raw"] == raw, after


@pytest.mark.parametrize("backend", BACKENDS)
def test_sysinfo_is_the_runs_own_view(backend: str) -> None:
    check(attack(backend))


def test_weak_mode_answers_sysinfo_too() -> None:
    check(attack("process", "weak"), "weak")


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="already a normal user: the test above runs as this user")
@pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))
@pytest.mark.parametrize(("backend", "isolation"), [
    pytest.param("process", "strong", id="process"),
    pytest.param("process", "weak", id="process-weak"),
    pytest.param("nsjail", "strong", id="nsjail", marks=pytest.mark.nsjail),
])  # fmt: skip
def test_sysinfo_is_the_runs_own_view_as_a_normal_user(backend: str, isolation: str, nobody_tmp: Path) -> None:
    code = ("import json\nfrom tests.test_sysinfo import attack\n"
            f"print(json.dumps(attack({backend!r}, {isolation!r})))")  # fmt: skip
    out = as_user([sys.executable, "-c", code], tmp=nobody_tmp, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    check(json.loads(out.stdout.strip().splitlines()[-1]), isolation)


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_the_kernel_cannot_sysinfo_is_the_hosts_and_nothing_waits(backend: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without seccomp user notification (or, for nsjail, ``pidfd_getfd``): no layer, the
    call is the host's, ``isolation`` says so, and a program calling it gets its answer."""
    from sandbox import _monitor, _process, _seccomp

    if backend == "process":
        filters = _process.seccomp_filters
        monkeypatch.setattr(_process, "seccomp_filters",
                            lambda: {k: v for k, v in filters().items() if k != _seccomp.LISTENER_VARIANT})  # fmt: skip
    else:
        monkeypatch.setattr(_monitor, "listener_available", lambda: "no seccomp user notification (a test)")
    with Sandbox(backend=backend, workers=1) as sb:
        assert str(sb.isolation.get("sysinfo")).startswith("the host's ("), sb.isolation.get("sysinfo")
        res = sb.run(VIEW, limits=Limits(memory_mb=MEMORY_MB, timeout_s=10))
    assert res.exit_code == 0 and res.sandbox_error is None, res
    assert ast.literal_eval(res.stdout)["bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_with_many_files_open_still_gets_its_runs_sysinfo(backend: str) -> None:
    """The host's fds can be numbered above a jail's RLIMIT_NOFILE (``max_open_files``: 16 here; a
    pytest-xdist worker holds dozens): nsjail passes them in at their own numbers, and the init
    once moved its listener onto the code's fd number, where ``dup2`` fails (EBADF: every run a
    sandbox error). Here the code's fd is numbered above 100."""
    held = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(100)]
    try:
        with Sandbox(backend, workers=1) as sb:
            res = sb.run("import os\nprint(os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'))",
                         limits=Limits(memory_mb=128, max_open_files=16))
    finally:
        for fd in held:
            os.close(fd)
    assert res.sandbox_error is None and res.exit_code == 0, res
    assert int(res.stdout) == 128 << 20, res.stdout
