"""A real ``redis-server`` for the fleet tests: on a loopback port, with its own data folder.

Where the binary is missing the tests that need it skip, saying how to install it. The server
is started and stopped by the test (``kill`` and ``restart`` for the fault tests); readiness
is its answer to PING, never a fixed wait.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL = (
    "redis-server is not installed: apt-get install -y redis-server (Debian/Ubuntu), "
    "brew install redis (macOS); .ci/run installs it"
)


def needs_redis() -> None:
    """Skip the calling test when there is no ``redis-server`` (or no ``redis`` client)."""
    if shutil.which("redis-server") is None:
        pytest.skip(INSTALL)
    pytest.importorskip("redis", reason='the redis client: pip install "tileauto[fleet]"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``url`` names database 0."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.data_dir / "redis.log", "ab")  # noqa: SIM115 - the server's own log
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data_dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                *self.extra,
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()  # never left running behind a failed start
            raise

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until the server answers PING (it binds its port within milliseconds)."""
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=1)
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.proc.returncode}: "
                    + (self.data_dir / "redis.log").read_text()[-2000:]
                )
            try:
                if client.ping():
                    client.close()
                    return
            except (redis.AuthenticationError, redis.ResponseError):
                return  # it answered: it wants a password (--requirepass)
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)  # polling the port's answer, not standing in for it

    def kill(self) -> None:
        """SIGKILL: the server dies as in a crash (its data is lost: no persistence)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self) -> object:
        import redis

        return redis.Redis(port=self.port, socket_timeout=5)


@contextlib.contextmanager
def redis_server(data_dir: Path, *extra: str) -> Iterator[RedisServer]:
    """A started server, stopped at the end (skips the test when there is none)."""
    needs_redis()
    server = RedisServer(data_dir, *extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()
