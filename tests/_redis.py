"""A real ``redis-server`` of a test's own (Debian's, which scripts/bootstrap.sh installs) on a free
loopback port, in a directory of its own: persistence off (no RDB, no AOF) or on (AOF, fsync
always), stopped and started again on the same port and directory by ``restart``."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``url`` for clients."""

    def __init__(self, directory: Path, *, persistent: bool = False, port: int | None = None) -> None:
        if REDIS_SERVER is None:
            pytest.skip("redis-server is not installed (scripts/bootstrap.sh installs Debian's as root)")
        self.dir, self.persistent = directory, persistent
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning",
                "--logfile", str(self.dir / "redis.log")]  # fmt: skip
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited ({self.proc.returncode}): {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 20 s: {self.log()}")

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: ``kill`` is SIGKILL (what was not yet on disk is lost), else SIGTERM."""
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"


@contextmanager
def redis_server(directory: Path, *, persistent: bool = False) -> Iterator[RedisServer]:
    server = RedisServer(directory, persistent=persistent)
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)
