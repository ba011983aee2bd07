"""Hostile programs against both backends. Each asserts the verdict and, on the host side,
containment: this process is alive, no process of the run survives (the ``sb`` fixture checks
that after every test), nothing appeared outside the work dir, and the call came back (a hang
guard far above the limit, not a speed assertion)."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import ExecutionResult, Limits, Sandbox

from .conftest import SECRET_NAME, SECRET_VALUE

REPO = Path(__file__).resolve().parents[1]
FAST = Limits(timeout_s=2.0, memory_mb=256)


def run(sb: Sandbox, code: str, limits: Limits = FAST, stdin: str = "") -> ExecutionResult:
    start = time.monotonic()
    res = sb.run(textwrap.dedent(code), stdin=stdin, limits=limits)
    elapsed = time.monotonic() - start
    hang_guard = 4 * limits.timeout_s + 20  # a starved run's wall clock moves, up to 4x its limit
    assert elapsed < hang_guard, f"call took {elapsed:.1f}s, limit {limits.timeout_s}s"
    assert res.sandbox_error is None, res.sandbox_error
    return res


def no_secret(res: ExecutionResult) -> None:
    blob = res.model_dump_json()
    assert SECRET_VALUE not in blob
    assert SECRET_NAME not in blob


# ----------------------------------------------------------------------------- CPU and time


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("while True:\n    pass\n", id="busy-loop"),
        pytest.param("import time\nwhile True:\n    time.sleep(0.1)\n", id="sleep-loop"),
        pytest.param(
            "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n",
            id="ignores-sigterm",
        ),
    ],
)
def test_runaway_programs_time_out(sb: Sandbox, code: str) -> None:
    res = run(sb, code, Limits(timeout_s=1.0))
    assert res.timeout_hit
    assert res.exit_code is None
    assert res.signal == signal.SIGKILL
    assert res.timeout_kind in ("wall", "cpu")


def test_cpu_budget_decides_too_slow(sb: Sandbox) -> None:
    res = run(sb, "while True:\n    pass\n", Limits(timeout_s=5.0, cpu_time_s=0.5))
    assert res.timeout_hit and res.timeout_kind == "cpu"
    assert res.cpu_time_ms >= 400


def test_sleeping_program_is_a_wall_timeout_not_a_rerun(sb: Sandbox) -> None:
    res = run(sb, "import time\ntime.sleep(60)\n", Limits(timeout_s=0.5))
    assert res.timeout_hit and res.timeout_kind == "wall"
    assert res.reruns == 0  # it slept: the machine was not to blame


@pytest.mark.parametrize("processes", [1, 4], ids=["no-fork", "fork"])
def test_a_limit_shorter_than_the_set_up_is_that_limits_verdict(sb: Sandbox, processes: int) -> None:
    # A wall clock or CPU budget that runs out while the child is still being set up (before its
    # program starts) is the limit the caller chose: a timeout, never a sandbox_error. It used to
    # be "the sandboxed child died before its setup finished" in a fraction of tries (every try
    # on nsjail, whose start-up is longer).
    limits = [Limits(timeout_s=t, max_processes=processes) for t in (0.001, 0.002, 0.005, 0.01)]
    limits += [Limits(timeout_s=5, cpu_time_s=t, max_processes=processes) for t in (0.001, 0.005)]
    requests = [{"code": code, "limits": lim} for lim in limits for code in ("print(1)", "while True: pass")] * 5
    results = sb.run_many(requests)
    for req, res in zip(requests, results, strict=True):
        assert res.sandbox_error is None, (req, res.sandbox_error)
        assert res.timeout_hit or (res.exit_code, res.stdout) == (0, "1\n"), (req, res)
    assert all(r.timeout_hit for req, r in zip(requests, results, strict=True) if "while" in req["code"])


# ----------------------------------------------------------------------------- processes


CHILDREN = 600  # each holding CHILD_MB of its own: 600 MiB in all, over the limit; 256 of them are not
CHILD_MB = 1
SPREAD_OUT = f"""
import os, time
for _ in range({CHILDREN}):
    if os.fork() == 0:
        b = bytearray({CHILD_MB} << 20)
        b[::4096] = b"x" * len(b[::4096])  # resident, and this child's alone
        time.sleep(120)
        os._exit(0)
print("all forked", flush=True)
time.sleep(120)
"""


def test_the_memory_of_every_process_of_a_run_counts(sb: Sandbox) -> None:
    # Where no cgroup holds the run (a normal user's sandbox), the monitor sums the memory of the
    # run's process tree: it used to stop at 256 processes, so memory spread over more of them
    # went unseen (a wall-clock timeout instead of oom).
    limits = Limits(timeout_s=30, memory_mb=450, max_processes=CHILDREN + 8)
    res = run(sb, SPREAD_OUT, limits)
    assert res.oom and not res.timeout_hit, res

def test_fork_is_refused_by_default(sb: Sandbox) -> None:
    res = run(sb, "import os\nos.fork()\n")
    assert res.exit_code == 1
    assert "PermissionError" in res.stderr or "BlockingIOError" in res.stderr


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(
            """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """,
            id="fork-bomb",
        ),
        pytest.param(
            """
            import multiprocessing, time
            def spin():
                while True:
                    pass
            procs = []
            while True:
                try:
                    p = multiprocessing.Process(target=spin)
                    p.start()
                    procs.append(p)
                except OSError:
                    time.sleep(0.01)
            """,
            id="multiprocessing-bomb",
        ),
        pytest.param(
            """
            import threading, time
            threads = []
            while True:
                try:
                    t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
                    t.start()
                    threads.append(t)
                except RuntimeError:
                    time.sleep(0.01)
            """,
            id="thread-bomb",
        ),
    ],
)
def test_process_and_thread_bombs_are_contained(sb: Sandbox, code: str) -> None:
    res = run(sb, code, Limits(timeout_s=1.5, max_processes=8, max_threads=16))
    assert res.timeout_hit


def test_a_fork_bomb_at_its_limit_does_not_fail_the_next_runs_setup(sb: Sandbox) -> None:
    # The next run's process is forked while this one runs (off the critical path). As a normal
    # user both are counted by one RLIMIT_NPROC (one uid in the worker's user namespace): forked
    # under the run's limit, it failed (EAGAIN) whenever the bomb was at its limit first: the
    # next program got a sandbox_error. Small limits: the bomb is at its limit within a millisecond.
    limits = Limits(timeout_s=0.5, max_processes=2, max_threads=1)
    bomb = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    for _ in range(8):
        assert run(sb, bomb, limits).timeout_hit
        res = run(sb, "print(1)", limits)
        assert res.exit_code == 0 and res.stdout == "1\n", res


def test_double_forked_daemon_does_not_outlive_the_run(sb: Sandbox) -> None:
    marker = f"/tmp/code-env-daemon-{os.getpid()}"
    res = run(
        sb,
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(2)
                open({marker!r}, "w").write("I survived")
                while True:
                    time.sleep(1)
            os._exit(0)
        print("parent done")
        """,
        Limits(timeout_s=2.0, max_processes=4),
    )
    assert res.exit_code == 0 and "parent done" in res.stdout
    # the fixture checks that no process of the run's uid is alive; the marker never appears
    time.sleep(2.5)
    assert not os.path.exists(marker)


def test_subprocess_and_os_system_cannot_run_programs(sb: Sandbox) -> None:
    res = run(
        sb,
        """
        import os, subprocess
        try:
            subprocess.run(["echo", "pwned-by-subprocess"])
        except OSError as e:
            print("subprocess refused:", type(e).__name__)
        print("os.system ->", os.system("echo pwned-by-system"))
        """,
        Limits(timeout_s=2.0, max_processes=4),
    )
    assert "pwned-by-subprocess\n" not in res.stdout and "pwned-by-system\n" not in res.stdout
    assert "subprocess refused" in res.stdout


def test_raw_syscalls_through_ctypes_are_refused(sb: Sandbox) -> None:
    res = run(
        sb,
        f"""
        import ctypes, json
        libc = ctypes.CDLL(None, use_errno=True)
        out = {{}}
        out["socket_inet"] = libc.syscall(41, 2, 1, 0)          # socket(AF_INET, SOCK_STREAM)
        out["socket_inet6"] = libc.syscall(41, 10, 2, 0)        # socket(AF_INET6, SOCK_DGRAM)
        out["socket_packet"] = libc.syscall(41, 17, 3, 0)       # socket(AF_PACKET, SOCK_RAW)
        out["fork"] = libc.syscall(57)
        out["kill_parent"] = libc.syscall(62, {os.getpid()}, 9)  # kill(host pid, SIGKILL)
        out["ptrace"] = libc.syscall(101, 16, {os.getpid()}, 0, 0)  # PTRACE_ATTACH
        out["unshare"] = libc.syscall(272, 0x10000000)          # CLONE_NEWUSER
        out["io_uring"] = libc.syscall(425, 8, 0)
        print(json.dumps(out))
        """,
    )
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert all(v == -1 for v in out.values()), out


def test_killing_the_parent_and_everyone_fails(sb: Sandbox) -> None:
    res = run(
        sb,
        f"""
        import os, signal
        for target in ({os.getpid()}, {os.getppid()}, 1):
            try:
                os.kill(target, signal.SIGKILL)
                print("signalled", target)
            except OSError as e:
                print("refused", target, type(e).__name__)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError as e:
            print("kill(-1) refused", type(e).__name__)
        print("still here")
        """,
    )
    assert "still here" in res.stdout or res.signal is not None
    os.kill(os.getpid(), 0)  # we are alive


def test_setrlimit_cannot_raise_limits(sb: Sandbox) -> None:
    res = run(
        sb,
        """
        import resource
        for res in (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE):
            soft, hard = resource.getrlimit(res)
            try:
                resource.setrlimit(res, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                print("raised", res)
            except (ValueError, OSError) as e:
                print("refused", res, type(e).__name__)
        """,
    )
    assert "raised" not in res.stdout
    assert res.stdout.count("refused") == 4


def test_concurrent_runs_cannot_see_or_signal_each_other(sb: Sandbox) -> None:
    killer = """
        import os, signal, time
        time.sleep(0.3)
        seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        print("seen", seen)
        for pid in seen:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        """
    victim = "import time\ntime.sleep(1.0)\nprint('victim alive')\n"
    results = sb.run_many(
        [{"code": textwrap.dedent(killer)}, {"code": victim}],
        limits=Limits(timeout_s=5.0),
    )
    assert results[1].stdout == "victim alive\n", results[1]
    assert results[1].exit_code == 0
    seen = json.loads(results[0].stdout.split("seen", 1)[1])
    assert len(seen) == 1  # only itself


# ----------------------------------------------------------------------------- memory


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("b = b'x' * (1 << 30)\n", id="one-big-bytes"),
        pytest.param("blocks = []\nwhile True:\n    blocks.append(bytearray(32 << 20))\n    blocks[-1][::4096] = b'x' * len(blocks[-1][::4096])\n", id="growing-list"),
        pytest.param("s = 'a'\nwhile True:\n    s = s + s\n", id="doubling-string"),
    ],
)
def test_memory_bombs_are_oom(sb: Sandbox, code: str) -> None:
    res = run(sb, code, Limits(timeout_s=10.0, memory_mb=128))
    assert res.oom, res
    assert not res.timeout_hit


def test_an_allocation_the_machine_refuses_outright_is_the_programs_crash(sb: Sandbox) -> None:
    """80 GB at once: refused before any memory is used, so there is no evidence of the limit
    being reached; the MemoryError is the program's own failure, as it would be outside."""
    res = run(sb, "x = [0] * (10 ** 10)\n", Limits(timeout_s=10.0, memory_mb=128))
    assert (res.exit_code, res.oom, res.sandbox_error) == (1, False, None), res
    assert "MemoryError" in res.stderr


@pytest.mark.parametrize("text", ["MemoryError", "Cannot allocate memory"])
def test_oom_is_never_taken_from_what_the_program_prints(sb: Sandbox, text: str) -> None:
    res = run(sb, f"import sys\nsys.stderr.write('Traceback...\\n{text}\\n')\nsys.exit(1)\n", Limits(memory_mb=128))
    assert (res.exit_code, res.oom) == (1, False), res


def test_numpy_does_real_work_under_256mb(sb: Sandbox) -> None:
    res = run(
        sb,
        """
        import numpy as np
        rng = np.random.default_rng(0)
        a = rng.standard_normal((400, 400))
        b = np.linalg.inv(a @ a.T + np.eye(400))
        print(round(float(np.trace(b @ (a @ a.T + np.eye(400)))), 6))
        """,
        Limits(timeout_s=20.0, memory_mb=256),
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() == "400.0"


# ----------------------------------------------------------------------------- output


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_gigabyte_floods_are_capped(sb: Sandbox, stream: str) -> None:
    cap = 64 * 1024
    res = run(
        sb,
        f"import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.{stream}.write(chunk)\n",
        Limits(timeout_s=2.0, max_output_bytes=cap),
    )
    assert getattr(res, f"{stream}_truncated")
    assert len(getattr(res, stream)) == cap
    assert res.timeout_hit


def test_output_overflow_can_kill(sb: Sandbox) -> None:
    res = run(
        sb,
        "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
        Limits(timeout_s=10.0, max_output_bytes=1000, on_output_overflow="kill"),
    )
    assert res.output_limit_hit and res.stdout_truncated
    assert res.exit_code is None and not res.timeout_hit
    assert res.stdout == "y" * 1000


def test_invalid_utf8_and_nul_bytes_on_stdout(sb: Sandbox) -> None:
    res = run(sb, "import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe\\x00end\\n')\n")
    assert res.exit_code == 0
    assert res.stdout == "ok\ufffd\ufffd\x00end\n"
    assert ExecutionResult.from_wire(json.loads(res.model_dump_json())) == res


# ----------------------------------------------------------------------------- filesystem


def test_disk_fill_is_an_error_not_a_host_problem(sb: Sandbox) -> None:
    for target in ("big.bin", "/tmp/big.bin"):
        res = run(
            sb,
            f"""
            chunk = b"z" * (1 << 20)
            n = 0
            try:
                with open({target!r}, "wb") as fh:
                    while True:
                        fh.write(chunk)
                        fh.flush()
                        n += 1
            except OSError as e:
                print("stopped after", n, "MiB:", type(e).__name__)
            """,
            Limits(timeout_s=10.0, memory_mb=512, max_file_bytes=64 << 20, max_disk_mb=32),
        )
        assert "stopped after" in res.stdout or res.oom, res
    assert not Path("/tmp/big.bin").exists()


WRITE_PROBE = """
import os, resource
print(resource.getrlimit(resource.RLIMIT_FSIZE)[0])
for n in ({n}, {n} + 1):
    try:
        with open("out.bin", "wb") as fh:
            fh.write(b"x" * n)
        print(n, "written", os.path.getsize("out.bin"))
    except OSError as e:
        print(n, "refused", e.errno == 27)  # EFBIG
"""


@pytest.mark.parametrize("max_file_bytes", [0, 1, 100, 5000])
def test_max_file_bytes_limits_the_programs_files_not_its_own_source(sb: Sandbox, max_file_bytes: int) -> None:
    # The sandbox writes the program's source (a few KB here, padded) before the limit applies:
    # a limit below the program's length, or 0, used to make every run a sandbox_error.
    code = WRITE_PROBE.format(n=max_file_bytes) + "#" * 6000 + "\n"
    assert len(code) > max_file_bytes
    res = run(sb, code, Limits(timeout_s=10.0, max_file_bytes=max_file_bytes))
    assert res.exit_code == 0, res
    assert res.stdout.split("\n")[:3] == [str(max_file_bytes), f"{max_file_bytes} written {max_file_bytes}",
                                          f"{max_file_bytes + 1} refused True"], res.stdout  # fmt: skip


def test_a_program_limit_larger_than_its_disk_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_code_bytes=2097152 does not fit in max_disk_mb=1 .*raise max_disk_mb"):
        Limits(max_disk_mb=1, max_code_bytes=2 << 20)
    assert Limits(max_disk_mb=1).max_code_bytes == 1 << 20


@pytest.mark.parametrize(
    "path",
    ["/etc/code-env-pwned", "/root/code-env-pwned", str(REPO / "code-env-pwned"), "/usr/lib/code-env-pwned"],
)
def test_writes_outside_the_work_dir_fail(sb: Sandbox, path: str) -> None:
    res = run(sb, f"open({path!r}, 'w').write('pwned')\nprint('wrote')\n")
    assert res.exit_code == 1 and "wrote" not in res.stdout
    assert not os.path.exists(path)


def test_work_dir_is_private_and_fresh(sb: Sandbox) -> None:
    first = run(sb, "import os\nopen('left-behind.txt', 'w').write('x')\nprint(os.getcwd())\n")
    second = run(sb, "import os\nprint(sorted(os.listdir('.')))\n")
    assert first.exit_code == 0 and second.exit_code == 0
    assert second.stdout.strip() == "['solution.py']"  # its own source, as `python solution.py`
    assert not Path(first.stdout.strip(), "left-behind.txt").exists()  # not on the host either


# ----------------------------------------------------------------------------- secrets


def test_parent_environment_is_not_visible(sb: Sandbox) -> None:
    res = run(
        sb,
        f"""
        import os
        print(dict(os.environ))
        for path in ["/proc/self/environ", "/proc/1/environ", "/proc/{os.getpid()}/environ",
                     "/proc/{os.getpid()}/cmdline", "/proc/{os.getppid()}/environ"]:
            try:
                print(path, open(path, "rb").read())
            except OSError as e:
                print(path, "refused", type(e).__name__)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    print(pid, open(f"/proc/{{pid}}/environ", "rb").read())
                except OSError:
                    pass
        """,
    )
    assert res.exit_code == 0, res.stderr
    no_secret(res)
    assert "PYTHONHASHSEED" in res.stdout


def test_host_files_that_matter_are_not_readable(sb: Sandbox) -> None:
    res = run(
        sb,
        f"""
        import os
        for path in ["/root", "/home", {str(REPO)!r}, {str(REPO / 'tests')!r}, "/etc/shadow", "/etc/passwd"]:
            try:
                print(path, "listed", os.listdir(path) if os.path.isdir(path) else open(path).read()[:50])
            except OSError as e:
                print(path, "refused", type(e).__name__)
        """,
    )
    assert res.exit_code == 0, res.stderr
    assert "test_adversarial.py" not in res.stdout
    assert "conftest.py" not in res.stdout
    assert "/etc/shadow listed" not in res.stdout


# ----------------------------------------------------------------------------- network


def test_no_tcp_connection_reaches_a_loopback_listener(sb: Sandbox) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        res = run(
            sb,
            f"""
            import socket
            for host in ("127.0.0.1", "localhost", "::1"):
                try:
                    s = socket.create_connection((host, {port}), timeout=1)
                    s.sendall(b"leak")
                    print("connected", host)
                except OSError as e:
                    print("refused", host, type(e).__name__)
            """,
        )
        assert "connected" not in res.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_no_udp_packet_reaches_a_loopback_listener(sb: Sandbox) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        res = run(
            sb,
            f"""
            import socket
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b"leak", ("127.0.0.1", {port}))
                print("sent")
            except OSError as e:
                print("refused", type(e).__name__)
            """,
        )
        assert "sent" not in res.stdout
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            listener.recvfrom(100)
    finally:
        listener.close()


def test_dns_does_not_resolve(sb: Sandbox) -> None:
    res = run(
        sb,
        """
        import socket
        try:
            print(socket.getaddrinfo("pypi.org", 443))
        except OSError as e:
            print("refused", type(e).__name__)
        """,
    )
    assert "refused" in res.stdout


# ----------------------------------------------------------------------------- crashes


def test_segfault_via_ctypes(sb: Sandbox) -> None:
    res = run(sb, "import ctypes\nctypes.string_at(0)\n")
    assert res.signal == signal.SIGSEGV and res.exit_code is None
    assert not res.timeout_hit and not res.oom


def test_deep_recursion(sb: Sandbox) -> None:
    res = run(
        sb,
        "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
        Limits(timeout_s=10.0, memory_mb=256),
    )
    assert res.exit_code != 0
    assert res.signal == signal.SIGSEGV or "RecursionError" in res.stderr or res.oom


def test_plain_recursion_error_is_a_traceback(sb: Sandbox) -> None:
    res = run(sb, "def f(n):\n    return f(n + 1)\nf(0)\n")
    assert res.exit_code == 1
    assert "RecursionError" in res.stderr
    assert 'File "solution.py", line 2, in f' in res.stderr
