"""Starts the real wsfs server once per test session.

The binary is `$WSFS_SERVER_BIN`, else `target/debug/wsfs-server` under the
repository root. It listens on a free loopback port with a temporary data
directory, and stops when the tests end.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from typing import Iterator, Optional

import pytest

import wsfs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def server_binary() -> str:
    path = os.environ.get("WSFS_SERVER_BIN") or os.path.join(REPO, "target", "debug", "wsfs-server")
    if not os.path.isfile(path):
        pytest.exit(
            f"no wsfs server binary at '{path}': run `cargo build -p wsfs-server` "
            "or set WSFS_SERVER_BIN",
            returncode=2,
        )
    return path


class Server:
    def __init__(self, binary: str, *args: str) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="wsfs-py-")
        self.data_dir = os.path.join(self.tmp.name, "data")
        self.allowed = os.path.join(self.tmp.name, "allowed")
        os.makedirs(self.allowed)
        self.process = subprocess.Popen(
            [
                binary,
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                self.data_dir,
                "--allow-root",
                self.allowed,
                "--watch-keepalive-ms",
                "200",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        match = re.match(r"wsfs-server listening on (\S+)", first)
        if not match:
            self.process.kill()
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"the server did not start: {first!r} {err}")
        self.address = match.group(1)
        self.url = f"http://{self.address}"
        #: DeepFabric's VFS API, when started with ``--http-listen``.
        self.http_url: Optional[str] = None
        if "--http-listen" in args:
            line = self.process.stdout.readline()
            served = re.match(r"wsfs-server serving DeepFabric's VFS API on (\S+)", line)
            if not served:
                self.process.kill()
                raise RuntimeError(f"the server did not start its HTTP face: {line!r}")
            self.http_url = served.group(1)
        # Keep the pipes drained so the server never blocks on its logs.
        for pipe in (self.process.stdout, self.process.stderr):
            threading.Thread(target=pipe.read, daemon=True).start()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.tmp.cleanup()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server(server_binary())
    yield s
    s.stop()


#: The admin token of :func:`token_server`.
ADMIN_TOKEN = "admin-token-0123456789"


@pytest.fixture(scope="session")
def token_server() -> Iterator[Server]:
    """A second server, with tokens on (started only by the tests that use it)."""
    s = Server(server_binary(), "--admin-token", ADMIN_TOKEN)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def http_server() -> Iterator[Server]:
    """A server that also serves DeepFabric's VFS API on a loopback port."""
    s = Server(server_binary(), "--http-listen", "127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[wsfs.Client]:
    with wsfs.Client(server.url) as c:
        yield c


@pytest.fixture
def session(client: wsfs.Client) -> Iterator[wsfs.Session]:
    with client.create_session(labels={"test": "python"}) as s:
        yield s
