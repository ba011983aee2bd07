"""Concurrent runs cannot exchange data (issue 19): every jail shows the same read-only host files,
and the kernel shares what hangs off an inode (``flock`` locks, POSIX and open-file-description
record locks, inotify watches) with everyone who opens it; it also keeps objects by name (SysV IPC
keys, POSIX message queues, keyrings, abstract unix sockets) per namespace.

Each channel is attacked as the policy would: two programs in one ``Sandbox.run_many`` with two
workers (so they run at the same time), a sender that encodes a random 96-bit secret into the
mechanism and a receiver that decodes it and prints what it got. The host asserts the secret never
reaches the receiver's output. Each channel is also shown to work where nothing isolates the two:
the same two programs as two processes on the host decode the secret (so the receiver is a real
decoder, and a pass in the sandbox means the channel is closed, not that the test is blind).
Both backends; as root here, and again as a normal user (``nobody``, user namespaces) by the last
test.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from sandbox import Limits

from ._nobody import as_nobody
from .conftest import BACKENDS, get_sandbox

HOLD_S = 6  # how long a sender keeps its message up
WAIT_S = 8  # how long a receiver looks for it
LIMITS = Limits(timeout_s=20, cpu_time_s=20)

# Both sides: the message as bits, and the shared read-only files both see (the standard library
# is bound into every jail at its host path). stdin: "<tag> [<secret>]", the tag names the
# channel's objects (a key, a queue, a socket), unique per test.
PRELUDE = r'''
import ctypes, errno, fcntl, os, select, socket, struct, sys, time
TAG, *REST = sys.stdin.read().split()
SECRET = int(REST[0], 16) if REST else None
HOLD, WAIT = {hold}, {wait}
STDLIB = os.path.dirname(os.__file__)
DIRS = [STDLIB, os.path.join(STDLIB, "encodings")]
FILES = sorted(os.path.join(d, f) for d in DIRS for f in os.listdir(d) if f.endswith(".py"))
assert len(FILES) > 2 * 96, len(FILES)
BITS = [SECRET >> i & 1 for i in range(96)] if SECRET is not None else None
FLOCK = "hhqqi"  # struct flock (x86_64 / aarch64): l_type, l_whence, l_start, l_len, l_pid
libc = ctypes.CDLL(None, use_errno=True)
def check(ret, what):
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"{{what}}: {{os.strerror(e)}}")
    return ret
def got(bits):
    print("GOT %024x" % sum(b << i for i, b in enumerate(bits)), flush=True)
def receive(probe):
    """Poll the ready mark (bit 96), then read the 96 bits."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if probe(96):
            got([probe(i) for i in range(96)])
            return
        time.sleep(0.01)
    print("NOTHING", flush=True)
def main(fn):
    try:
        fn()
    except OSError as exc:
        print("REFUSED", errno.errorcode.get(exc.errno, exc.errno), exc, flush=True)
'''

def _byte_locks(file: int, set_cmd: str, get_cmd: str) -> tuple[str, str]:
    """Sender and receiver through byte-range locks on FILES[file]: a read lock on byte i for a 1
    (``set_cmd``), probed by the receiver with ``get_cmd``."""
    send = f'''
def send():
    fd = os.open(FILES[{file}], os.O_RDONLY)
    for i in [i for i in range(96) if BITS[i]] + [96]:
        fcntl.fcntl(fd, fcntl.{set_cmd}, struct.pack(FLOCK, fcntl.F_RDLCK, os.SEEK_SET, i, 1, 0) + bytes(4))
    time.sleep(HOLD)
main(send)
'''
    receive = f'''
fd = os.open(FILES[{file}], os.O_RDONLY)
def probe(i):
    ask = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, i, 1, 0) + bytes(4)
    return int(struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.{get_cmd}, ask)[:struct.calcsize(FLOCK)])[0] != fcntl.F_UNLCK)
main(lambda: receive(probe))
'''
    return send, receive


# mechanism -> (sender, receiver), each a body run by main()
CHANNELS: dict[str, tuple[str, str]] = {
    # one file per bit: held with flock(LOCK_EX) for a 1; the receiver's LOCK_SH|LOCK_NB fails there
    "flock": (r'''
def send():
    fds = []
    for i in [i for i in range(96) if BITS[i]] + [96]:
        fd = os.open(FILES[i], os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        fds.append(fd)
    time.sleep(HOLD)
main(send)
''', r'''
def probe(i):
    fd = os.open(FILES[i], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return 0
    except BlockingIOError:
        return 1
    finally:
        os.close(fd)
main(lambda: receive(probe))
'''),
    # one byte of one file per bit: a POSIX read lock (F_SETLKW) for a 1, probed with F_GETLK
    "posix-lock": _byte_locks(0, "F_SETLKW", "F_GETLK"),
    # the same with open-file-description locks (F_OFD_SETLKW / F_OFD_GETLK)
    "ofd-lock": _byte_locks(1, "F_OFD_SETLKW", "F_OFD_GETLK"),
    # the receiver watches two stdlib directories for opens; the sender opens, over and over,
    # FILES[i] for a 1 and FILES[96 + i] for a 0, then FILES[192] as the end of a round
    "inotify": (r'''
def send():
    deadline = time.monotonic() + HOLD
    while time.monotonic() < deadline:
        for i in range(96):
            os.close(os.open(FILES[i if BITS[i] else 96 + i], os.O_RDONLY))
        os.close(os.open(FILES[192], os.O_RDONLY))
        time.sleep(0.02)
main(send)
''', r'''
def watch():
    fd = check(libc.inotify_init1(os.O_NONBLOCK), "inotify_init1")
    wds = {check(libc.inotify_add_watch(fd, d.encode(), 0x20), "inotify_add_watch"): d for d in DIRS}  # IN_OPEN
    seen, deadline = set(), time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.05)[0]:
            continue
        data, pos = os.read(fd, 1 << 16), 0
        while pos < len(data):
            wd, _, _, n = struct.unpack_from("iIII", data, pos)
            seen.add(os.path.join(wds[wd], data[pos + 16 : pos + 16 + n].rstrip(b"\0").decode()))
            pos += 16 + n
        if FILES[192] in seen:
            ones, zeros = [FILES[i] in seen for i in range(96)], [FILES[96 + i] in seen for i in range(96)]
            if all(a != b for a, b in zip(ones, zeros)):
                got([int(a) for a in ones])
                return
            seen.clear()
    print("NOTHING", flush=True)
main(watch)
'''),
    # a SysV shared memory segment under a key both compute
    "sysv-shm": (r'''
def send():
    key = int(TAG, 16) & 0x7FFFFFFF
    shmid = check(libc.shmget(key, 4096, 0o1000 | 0o600), "shmget")  # IPC_CREAT
    libc.shmat.restype = ctypes.c_void_p
    addr = libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, b"%024x" % SECRET, 24)
    time.sleep(HOLD)
    libc.shmctl(shmid, 0, None)  # IPC_RMID
main(send)
''', r'''
def look():
    key, deadline = int(TAG, 16) & 0x7FFFFFFF, time.monotonic() + WAIT
    libc.shmat.restype = ctypes.c_void_p
    while time.monotonic() < deadline:
        shmid = libc.shmget(key, 0, 0)
        if shmid == -1 and ctypes.get_errno() != errno.ENOENT:
            check(-1, "shmget")
        if shmid >= 0:
            text = ctypes.string_at(libc.shmat(shmid, None, 0o10000), 24).decode()
            if text.strip("\0"):
                print("GOT", text, flush=True)
                return
        time.sleep(0.01)
    print("NOTHING", flush=True)
main(look)
'''),
    # a POSIX message queue by name
    "mqueue": (r'''
def send():
    name = b"/code-env-" + TAG.encode()
    q = check(libc.mq_open(name, os.O_CREAT | os.O_WRONLY, 0o600, None), "mq_open")
    check(libc.mq_send(q, b"%024x" % SECRET, 24, 0), "mq_send")
    time.sleep(HOLD)
    libc.mq_unlink(name)
main(send)
''', r'''
def look():
    name, deadline = b"/code-env-" + TAG.encode(), time.monotonic() + WAIT
    while time.monotonic() < deadline:
        q = libc.mq_open(name, os.O_RDONLY | os.O_NONBLOCK)
        if q == -1 and ctypes.get_errno() != errno.ENOENT:
            check(-1, "mq_open")
        if q >= 0:
            buf = ctypes.create_string_buffer(1 << 16)
            n = libc.mq_receive(q, buf, len(buf), None)
            if n > 0:
                print("GOT", buf.raw[:n].decode(), flush=True)
                return
        time.sleep(0.01)
    print("NOTHING", flush=True)
main(look)
'''),
    # an abstract unix socket: a name in the network namespace, no file
    "abstract-unix": (r'''
def send():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(b"\0code-env-" + TAG.encode())
    s.listen(4)
    s.settimeout(HOLD)
    try:
        while True:
            c, _ = s.accept()
            c.sendall(b"%024x" % SECRET)
            c.close()
    except socket.timeout:
        pass
main(send)
''', r'''
def look():
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(b"\0code-env-" + TAG.encode())
            print("GOT", s.recv(64).decode(), flush=True)
            return
        except (ConnectionRefusedError, FileNotFoundError):
            time.sleep(0.01)
        finally:
            s.close()
    print("NOTHING", flush=True)
main(look)
'''),
}

# the keyring calls by number (libc has no wrapper; libkeyutils is not in every jail)
KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}
if platform.machine() in KEY_CALLS:
    _ADD_KEY, _KEYCTL = KEY_CALLS[platform.machine()]
    CHANNELS["keyring"] = (rf'''
def send():
    desc = b"code-env-" + TAG.encode()
    key = check(libc.syscall({_ADD_KEY}, b"user", desc, b"%024x" % SECRET, 24, -4), "add_key")  # the user keyring
    time.sleep(HOLD)
    libc.syscall({_KEYCTL}, 9, key, -4)  # KEYCTL_UNLINK
main(send)
''', rf'''
def look():
    desc, deadline = b"code-env-" + TAG.encode(), time.monotonic() + WAIT
    buf = ctypes.create_string_buffer(64)
    while time.monotonic() < deadline:
        key = libc.syscall({_KEYCTL}, 10, -4, b"user", desc, 0)  # KEYCTL_SEARCH
        if key == -1 and ctypes.get_errno() != errno.ENOKEY:
            check(-1, "keyctl")
        if key >= 0:
            n = check(libc.syscall({_KEYCTL}, 11, key, buf, 64), "keyctl")  # KEYCTL_READ
            print("GOT", buf.raw[:n].decode(), flush=True)
            return
        time.sleep(0.01)
    print("NOTHING", flush=True)
main(look)
''')


def program(body: str) -> str:
    return PRELUDE.format(hold=HOLD_S, wait=WAIT_S) + body


def message() -> tuple[str, str]:
    """A fresh tag (names the channel's objects) and a 96-bit secret, as hex."""
    return secrets.token_hex(4), secrets.token_hex(12)


def on_the_host(sender: str, receiver: str, tag: str, secret: str) -> str:
    """The two programs as two plain processes of the host, at the same time: the receiver's
    output."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    with tempfile.TemporaryDirectory() as cwd:
        outs = []
        procs = []
        for code, stdin in ((sender, f"{tag} {secret}"), (receiver, tag)):
            out = Path(cwd, f"out{len(procs)}")
            with open(out.with_suffix(".in"), "w") as fh:
                fh.write(stdin)
            with open(out.with_suffix(".in")) as i, open(out, "w") as o:  # the child keeps its copies
                procs.append(subprocess.Popen([sys.executable, "-I", "-c", code], stdin=i, stdout=o,
                                              stderr=subprocess.STDOUT, cwd=cwd, env=env))  # fmt: skip
            outs.append(out)
        codes = [p.wait(timeout=60) for p in procs]
        texts = [o.read_text() for o in outs]
    assert codes == [0, 0], texts
    assert "REFUSED" not in texts[0], texts
    return texts[1]


@pytest.mark.parametrize("channel", list(CHANNELS))
def test_the_channel_carries_the_secret_where_nothing_isolates(channel: str) -> None:
    """The control: the receiver decodes the sender's secret when both run on the host."""
    tag, secret = message()
    sender, receiver = (program(p) for p in CHANNELS[channel])
    out = on_the_host(sender, receiver, tag, secret)
    assert f"GOT {secret}" in out, out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channel", list(CHANNELS))
def test_two_concurrent_runs_cannot_exchange_a_secret(backend: str, channel: str) -> None:
    sb = get_sandbox(backend)
    tag, secret = message()
    sender, receiver = (program(p) for p in CHANNELS[channel])
    runs = sb.run_many([{"code": sender, "stdin": f"{tag} {secret}", "limits": LIMITS},
                        {"code": receiver, "stdin": tag, "limits": LIMITS}])  # fmt: skip
    for r in runs:
        assert r.exit_code == 0 and r.sandbox_error is None, r
    assert secret not in runs[1].stdout + runs[1].stderr, runs[1]
    assert "GOT" not in runs[1].stdout, runs[1]  # nor anything else that came through
    assert runs[1].stdout.startswith(("REFUSED", "NOTHING")), runs[1]


# ----------------------------------------------------------------------------- the host's opens

# Watches the standard library's directories and prints the name of every file it sees opened.
WATCHER = PRELUDE.format(hold=HOLD_S, wait=WAIT_S) + r'''
def watch():
    fd = check(libc.inotify_init1(os.O_NONBLOCK), "inotify_init1")
    wds = {check(libc.inotify_add_watch(fd, d.encode(), 0x20), "inotify_add_watch"): d for d in DIRS}
    print("WATCHING", flush=True)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.05)[0]:
            continue
        data, pos = os.read(fd, 1 << 16), 0
        while pos < len(data):
            wd, _, _, n = struct.unpack_from("iIII", data, pos)
            print("SEEN", os.path.join(wds[wd], data[pos + 16 : pos + 16 + n].rstrip(b"\0").decode()), flush=True)
            pos += 16 + n
    print("DONE", flush=True)
main(watch)
'''


def _host_opens(files: list[str], stop: threading.Event) -> None:
    while not stop.wait(0.02):
        for f in files:
            os.close(os.open(f, os.O_RDONLY))


def _watched_files() -> list[str]:
    stdlib = os.path.dirname(os.__file__)
    return sorted(os.path.join(d, f) for d in (stdlib, os.path.join(stdlib, "encodings"))
                  for f in os.listdir(d) if f.endswith(".py"))  # fmt: skip


def test_a_watcher_on_the_host_sees_the_hosts_opens() -> None:
    """The control of the next test: the same watcher, a host process, sees what the host opens."""
    pattern = secrets.SystemRandom().sample(_watched_files(), 12)
    stop = threading.Event()
    opener = threading.Thread(target=_host_opens, args=(pattern, stop))
    opener.start()
    try:
        out = subprocess.run([sys.executable, "-I", "-c", WATCHER], input="host", capture_output=True, text=True,
                             timeout=60, check=True).stdout  # fmt: skip
    finally:
        stop.set()
        opener.join()
    assert set(pattern) <= {line[5:] for line in out.splitlines() if line.startswith("SEEN ")}, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_cannot_watch_the_hosts_opens(backend: str) -> None:
    pattern = secrets.SystemRandom().sample(_watched_files(), 12)
    stop = threading.Event()
    opener = threading.Thread(target=_host_opens, args=(pattern, stop))
    opener.start()
    try:
        res = get_sandbox(backend).run(WATCHER, stdin="host", limits=LIMITS)
    finally:
        stop.set()
        opener.join()
    assert res.exit_code == 0 and res.sandbox_error is None, res
    assert not [f for f in pattern if f in res.stdout], res.stdout
    assert res.stdout.startswith("REFUSED"), res.stdout


# ----------------------------------------------------------------------------- as a normal user


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: this file runs as this user")
@pytest.mark.skipif(not shutil.which("setpriv") or not shutil.which("unshare"), reason="needs util-linux setpriv and unshare")
def test_the_channels_stay_closed_for_a_normal_user(nobody_tmp: Path) -> None:
    """This file's sandbox tests (both backends) again as uid 65534: user namespaces."""
    out = as_nobody([sys.executable, "-m", "pytest", f"tests/{Path(__file__).name}", "-k", "not normal_user",
                     "-q", "-p", "no:cacheprovider"], tmp=nobody_tmp, timeout=1200)  # fmt: skip
    tail = (out.stdout + out.stderr)[-3000:]
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary and "skipped" not in summary, tail


# ----------------------------------------------------------------------------- the host's cgroups


def _host_cgroup_names() -> set[str]:
    """The names in the host's cgroup paths (ours, read here): a machine's service, a container's
    id, the slots' cgroups."""
    with open("/proc/self/cgroup") as fh:
        return {part for line in fh for part in line.strip().split(":", 2)[2].split("/") if part}


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_runs_cgroup_file_names_no_host_cgroup(backend: str, fork: bool) -> None:
    """``/proc/self/cgroup`` shows the run's cgroup as the root of its own cgroup namespace: not
    the host's path, which names the machine's service and the slot's private uid."""
    sb = get_sandbox(backend)
    res = sb.run("print(open('/proc/self/cgroup').read())", limits=Limits(max_processes=4 if fork else 1))
    assert res.exit_code == 0 and res.sandbox_error is None, res
    lines = res.stdout.split()
    assert lines and all(line.split(":", 2)[2] == "/" for line in lines), res.stdout
    for name in _host_cgroup_names() | {str(uid) for uid in sb.uids}:
        assert name not in res.stdout, (name, res.stdout)


# ----------------------------------------------------------------------------- the host's /proc

READ_MASKED = r'''
import json, sys
out = {}
for path in sys.stdin.read().split():
    try:
        with open(path, "rb") as fh:
            out[path] = fh.read().decode(errors="replace")
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
'''


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_proc_files_that_tell_the_host_cannot_be_read(backend: str, fork: bool) -> None:
    """The kernel's command line, the boot id, uptime and load (``sandbox._paths.PROC_MASKS``):
    the host reads each, a run tries to; the run gets none of the host's values."""
    from sandbox._paths import PROC_MASKS

    host: dict[str, str] = {}
    for path in PROC_MASKS:
        with open(path) as fh:
            host[path] = fh.read().strip()
    assert all(host.values()), host  # the host's own are there to leak
    res = get_sandbox(backend).run(READ_MASKED, stdin=" ".join(PROC_MASKS), limits=Limits(max_processes=4 if fork else 1))
    assert res.exit_code == 0 and res.sandbox_error is None, res
    assert json.loads(res.stdout) == dict.fromkeys(PROC_MASKS, "PermissionError"), res.stdout
    for path in ("/proc/cmdline", "/proc/sys/kernel/random/boot_id"):  # the values that do not change
        assert host[path] not in res.stdout, path


# The host's side of the /proc views' test: until its stdin closes, allocate and touch 64 MiB, open
# 1000 files, fork 50 processes that spin for 20 ms, wait for them, free; "ready" after the first round.
DISTURBER = r'''
import os, select, sys, time
ready = False
while True:
    b = bytearray(64 << 20)
    b[::4096] = b"x" * len(b[::4096])
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1000)]
    pids = []
    for _ in range(50):
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + 0.02
            while time.monotonic() < end:
                pass
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    for fd in fds:
        os.close(fd)
    del b
    if not ready:
        print("ready", flush=True)
        ready = True
    if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
        break
'''

# Reads each path (stdin) twice, a second apart, and prints both readings.
READ_TWICE = r'''
import json, sys, time
paths = sys.stdin.read().split()
def read():
    out = {}
    for path in paths:
        try:
            with open(path, "rb") as fh:
                out[path] = fh.read().decode(errors="replace")
        except OSError as exc:
            out[path] = type(exc).__name__
    return out
first = read()
time.sleep(1)
print(json.dumps([first, read()]))
'''

# What the disturber moves on the host, every time: free memory and pages per zone, forks and
# context switches, page faults, timer interrupts and softirqs, CPU pressure. (Buddy lists, disk,
# I/O and memory pressure move with whatever else the machine does; each is checked in the jail
# all the same.)
MOVED_BY_THE_HOST = ("/proc/meminfo", "/proc/zoneinfo", "/proc/stat", "/proc/vmstat", "/proc/interrupts",
                     "/proc/softirqs", "/proc/pressure/cpu")  # fmt: skip


def _read_host(paths: list[str]) -> dict[str, str]:
    out = {}
    for path in paths:
        with open(path, "rb") as fh:
            out[path] = fh.read().decode(errors="replace")
    return out


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_proc_files_with_the_machines_figures_show_the_runs_own_view(backend: str, fork: bool) -> None:
    """/proc/meminfo, /proc/stat and the other files of ``sandbox._paths.PROC_VIEW_PATHS``: a host
    process allocates, touches and frees 64 MiB, opens 1000 files and forks 50 spinning processes, round after round,
    while a run reads each file twice, a second apart. The host's own readings before and after the
    run differ; the run's two are the same, and are the run's view (its limit, its CPUs, counters at
    zero), nothing of the host's."""
    from sandbox._paths import PROC_VIEW_PATHS, proc_views

    paths = [p for p in PROC_VIEW_PATHS if os.path.exists(p)]
    readable = [p for p in paths if os.access(p, os.R_OK)]
    limits = Limits(timeout_s=20, memory_mb=300, max_processes=4 if fork else 1)
    expected = proc_views(limits.memory_mb, os.sched_getaffinity(0))
    disturber = subprocess.Popen([sys.executable, "-c", DISTURBER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)  # fmt: skip
    try:
        assert disturber.stdout is not None and disturber.stdout.readline() == "ready\n"
        before = _read_host(readable)
        res = get_sandbox(backend).run(READ_TWICE, stdin=" ".join(paths), limits=limits)
        after = _read_host(readable)
    finally:
        assert disturber.stdin is not None and disturber.stdout is not None
        disturber.stdin.close()
        disturber.wait(timeout=60)
        disturber.stdout.close()
    moved = [p for p in MOVED_BY_THE_HOST if p in readable]
    assert "/proc/meminfo" in moved and "/proc/stat" in moved, moved
    assert [p for p in moved if before[p] == after[p]] == [], "the host's figures did not move: the test is blind"
    assert res.exit_code == 0 and res.sandbox_error is None, res
    first, second = json.loads(res.stdout)
    assert first == second, [p for p in paths if first[p] != second[p]]
    # (a file we may not read, /proc/slabinfo as a normal user: nsjail cannot bind over it, and the
    # kernel refuses it to the run as it does to us)
    views = {p: expected[p].decode() if p in readable or backend == "process" else "PermissionError" for p in paths}
    assert first == views, first
    for path in readable:
        if before[path].strip():
            assert first[path] not in (before[path], after[path]), path


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_sizes_itself_by_its_own_limit(backend: str) -> None:
    """MemTotal and MemAvailable are the run's memory limit; what programs read to size
    themselves still works: ``os.cpu_count()`` and ``multiprocessing.cpu_count()`` count the CPUs
    the run may use (from /proc/stat: the jail has no /sys), numpy imports, and
    ``sysconf(_SC_PHYS_PAGES)`` is the limit too (glibc asks the ``sysinfo`` call, which the
    monitor answers: tests/test_sysinfo.py)."""
    code = (
        "import json, multiprocessing, os\nimport numpy\n"
        "mem = dict(line.split(':') for line in open('/proc/meminfo'))\n"
        "print(json.dumps({'total': mem['MemTotal'].split(), 'available': mem['MemAvailable'].split(),\n"
        "    'cpus': os.cpu_count(), 'mp': multiprocessing.cpu_count(), 'pages': os.sysconf('SC_PHYS_PAGES'),\n"
        "    'numpy': float(numpy.arange(4).sum())}))\n"
    )  # fmt: skip
    res = get_sandbox(backend).run(code, limits=Limits(memory_mb=200))
    assert res.exit_code == 0 and res.sandbox_error is None, res
    seen = json.loads(res.stdout)
    cpus = len(os.sched_getaffinity(0))
    assert seen == {"total": [str(200 * 1024), "kB"], "available": [str(200 * 1024), "kB"], "cpus": cpus,
                    "mp": cpus, "pages": (200 << 20) // os.sysconf("SC_PAGE_SIZE"), "numpy": 6.0}  # fmt: skip


def test_weak_mode_says_its_proc_is_the_hosts() -> None:
    """Weak isolation has no mount namespace to mask /proc in: its warning and its ``info`` say so,
    and a run there reads the host's MemTotal."""
    from sandbox import Sandbox
    from sandbox._paths import WEAK_PROC_NOTE

    with pytest.warns(RuntimeWarning, match=r"/proc is the host's, unmasked: the machine's memory \(/proc/meminfo"):
        sb = Sandbox(workers=1, isolation="weak")
    try:
        assert sb.isolation["proc"] == WEAK_PROC_NOTE
        res = sb.run("print(open('/proc/meminfo').readline())")
    finally:
        sb.close()
    with open("/proc/meminfo") as fh:
        assert res.exit_code == 0 and res.stdout.strip() == fh.readline().strip(), res
