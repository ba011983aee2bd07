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

# The host's side: every name in the host's /proc that is not a process (cpuinfo, meminfo, stat,
# cmdline, uptime, loadavg, version, mounts, locks, sys/, pressure/, net/...), plus files below
# them that told a run the host's identity or moved with other runs. A run must find none.
NESTED_GLOBALS = ("/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname", "/proc/sys/fs/file-nr",
                  "/proc/sys/fs/inode-nr", "/proc/sys/fs/dentry-state", "/proc/pressure/cpu",
                  "/proc/pressure/memory", "/proc/pressure/io", "/proc/net/dev", "/proc/1/cmdline",
                  "/proc/1/environ", "/proc/1/status")  # fmt: skip

# In the jail: list /proc, try each path of stdin (open, else stat), and check that what a program
# needs of its own /proc still works.
PROC_PROBE = r"""
import json, os, sys
out = {"pid": os.getpid(), "listing": sorted(os.listdir("/proc")), "paths": {}}
for path in sys.stdin.read().split():
    try:
        with open(path, "rb") as fh:
            out["paths"][path] = "READ " + fh.read(200).decode(errors="replace")
    except IsADirectoryError:
        out["paths"][path] = "DIR " + " ".join(sorted(os.listdir(path))[:20])
    except OSError as exc:
        out["paths"][path] = type(exc).__name__
with open("/proc/self/status") as fh:
    status = dict(line.split(":", 1) for line in fh)
out["own"] = {
    "status_pid": int(status["Pid"]),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "dev_fd": sorted(int(fd) for fd in os.listdir("/dev/fd")),
    "stdout_link": os.readlink("/dev/stdout"),
    "maps": sum(1 for _ in open("/proc/self/maps")) > 5,
    "cgroup": sorted({line.strip().split(":", 2)[2] for line in open("/proc/self/cgroup")}),
    "thread_self": os.path.exists("/proc/thread-self/status"),
    "cpus": os.cpu_count(),
}
print(json.dumps(out))
"""


def _host_globals() -> list[str]:
    """Every non-process entry of the host's /proc, and ``NESTED_GLOBALS``."""
    names = [n for n in os.listdir("/proc") if not n.isdigit() and n not in ("self", "thread-self")]
    assert {"cpuinfo", "meminfo", "stat", "cmdline", "uptime", "loadavg", "version", "sys"} <= set(names), names
    return sorted({f"/proc/{n}" for n in names} | set(NESTED_GLOBALS))


@pytest.mark.parametrize("fork", [False, True], ids=["nofork", "fork"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jails_proc_holds_only_the_runs_own_processes(backend: str, fork: bool) -> None:
    """The jail's /proc lists the run's own pid directory, ``self`` and ``thread-self``, nothing
    else (an allowlist, not a few names tried), and none of the host's global files (every name in
    the host's /proc that is not a process: cpuinfo, meminfo, stat, cmdline, uptime, loadavg,
    version, mounts, locks, sys/, pressure/..., boot_id, sys/fs/*) can be opened: each is absent
    (ENOENT), where the host reads it. What a program uses of its own /proc still works: its
    status, fd table, maps and cgroup (``/``), ``/dev/fd`` and ``/dev/stdout``."""
    paths = _host_globals()
    with open("/proc/cmdline") as fh:
        assert fh.read().strip()  # the host's own is there to leak
    res = get_sandbox(backend).run(PROC_PROBE, stdin=" ".join(paths), limits=Limits(max_processes=4 if fork else 1))
    assert res.exit_code == 0 and res.sandbox_error is None, res
    seen = json.loads(res.stdout)
    assert seen["listing"] == sorted([str(seen["pid"]), "self", "thread-self"]), seen["listing"]
    assert seen["paths"] == dict.fromkeys(paths, "FileNotFoundError"), {
        p: v for p, v in seen["paths"].items() if v != "FileNotFoundError"
    }
    own = seen["own"]
    assert own["status_pid"] == seen["pid"] and own["maps"] and own["thread_self"], own
    assert own["fds"][:3] == [0, 1, 2] and own["dev_fd"][:3] == [0, 1, 2], own
    assert own["stdout_link"] == "/proc/self/fd/1" and own["cgroup"] == ["/"], own


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_counts_the_cpus_it_may_use(backend: str) -> None:
    """``os.cpu_count()`` and ``multiprocessing.cpu_count()`` in a jail are the CPUs the run may use
    (the jail has neither /proc/stat nor /sys: glibc counts the affinity mask), not the machine's:
    a sandbox started from a process pinned to one CPU gives its runs one, where the host counts
    them all (on a machine of two or more); numpy still imports."""
    pinned = min(os.sched_getaffinity(0))
    script = (
        "import json, os, sys\n"
        f"os.sched_setaffinity(0, {{{pinned}}})\n"
        "from sandbox import Sandbox\n"
        f"with Sandbox({backend!r}, workers=1) as sb:\n"
        "    res = sb.run('import json, multiprocessing, os, numpy\\n'\n"
        "                 'print(json.dumps([os.cpu_count(), multiprocessing.cpu_count(), len(os.sched_getaffinity(0)), '\n"
        "                 'os.sysconf(\"SC_PHYS_PAGES\") > 0, float(numpy.arange(4).sum())]))')\n"
        "print(json.dumps([res.model_dump(mode='json'), os.cpu_count()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False,
                         cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    res, pinned_host_count = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["exit_code"] == 0 and res["sandbox_error"] is None, res
    assert json.loads(res["stdout"]) == [1, 1, 1, True, 6.0], res["stdout"]
    assert pinned_host_count == os.cpu_count()  # the pinned host process still counts the machine's (from /sys)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_that_refuses_the_jails_proc_fails_closed(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel before Linux 5.8 refuses ``subset=pid`` (EINVAL): the sandbox must not start, never
    run with the host's /proc. The kernel here refuses an unknown subset the same way; the error
    names the kernel version needed and ``isolation='weak'``."""
    from sandbox import Sandbox, _paths
    from sandbox.errors import IsolationUnavailableError

    monkeypatch.setattr(_paths, "PROC_OPTIONS", "hidepid=2,subset=no-such-subset")
    with pytest.raises(IsolationUnavailableError) as info:
        Sandbox(backend, workers=1).close()
    msg = str(info.value)
    assert "subset=no-such-subset" in msg and "Linux >= 5.8" in msg and "isolation='weak'" in msg, msg
    assert "user namespaces" not in msg, msg  # not the advice for another cause


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
