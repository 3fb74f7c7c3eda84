"""The package names each call's session in ``x-wsfs-session``, so that a
standard proxy routes it: three real servers behind a real nginx running the
repository's ``deploy/nginx/wsfs.conf`` (only its ports and file paths
changed, as the Rust proxy test does). Without nginx these tests are
skipped, unless ``WSFS_REQUIRE_TOOLS=1``."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Iterator, Optional

import grpc
import pytest

import wsfs
from wsfs import _common as c
from wsfs.v1 import filesystem_pb2, filesystem_pb2_grpc, sessions_pb2

from conftest import REPO, Server, server_binary

SHIPPED = os.path.join(REPO, "deploy", "nginx", "wsfs.conf")


def nginx_binary() -> Optional[str]:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found is None and os.environ.get("WSFS_REQUIRE_TOOLS") == "1":
        pytest.fail("WSFS_REQUIRE_TOOLS=1 and nginx is not installed")
    return found


def render(listen: int, replicas: list[str], tmp: str) -> str:
    """The shipped configuration with its replicas, port and paths replaced."""
    out: list[str] = []
    counts = [0, 0, 0]
    for line in open(SHIPPED).read().splitlines():
        if line.strip().startswith("server 127.0.0.1:"):
            if "127.0.0.1:50051" in line:
                out += [line.replace("127.0.0.1:50051", r) for r in replicas]
                counts[0] += 1
            continue
        if "listen 127.0.0.1:8080 " in line:
            line = line.replace("127.0.0.1:8080", f"127.0.0.1:{listen}")
            counts[1] += 1
        if "/var/log/nginx/wsfs-access.log" in line:
            line = line.replace("/var/log/nginx/wsfs-access.log", os.path.join(tmp, "access.log"))
            counts[2] += 1
        out.append(line)
        if line.strip() == "http {":
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
                out.append(f"    {kind}_temp_path {os.path.join(tmp, kind)};")
    assert counts == [1, 1, 1], "the shipped nginx configuration changed shape"
    return "\n".join(out) + "\n"


class Proxied:
    def __init__(self, nginx: str) -> None:
        self.replicas = [Server(server_binary()) for _ in range(3)]
        self.tmp = tempfile.TemporaryDirectory(prefix="wsfs-py-nginx-")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        conf = os.path.join(self.tmp.name, "nginx.conf")
        with open(conf, "w") as f:
            f.write(render(port, [r.address for r in self.replicas], self.tmp.name))
        pid = os.path.join(self.tmp.name, "nginx.pid")
        self.nginx = subprocess.Popen(
            [nginx, "-p", self.tmp.name, "-e", os.path.join(self.tmp.name, "error.log")]
            + ["-c", conf, "-g", f"daemon off; master_process off; pid {pid};"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.nginx.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start")
                time.sleep(0.02)

    def holder(self, session_id: str) -> list[int]:
        """The replicas that hold the session, asked directly."""
        held = []
        for index, replica in enumerate(self.replicas):
            with wsfs.Client(replica.url) as direct:
                if session_id in [s.id for s in direct.list_sessions()]:
                    held.append(index)
        return held

    def stop(self) -> None:
        self.nginx.kill()
        self.nginx.wait()
        for replica in self.replicas:
            replica.stop()
        self.tmp.cleanup()


@pytest.fixture(scope="module")
def proxied() -> Iterator[Proxied]:
    nginx = nginx_binary()
    if nginx is None:
        pytest.skip("nginx is not installed (set WSFS_REQUIRE_TOOLS=1 to make this a failure)")
    p = Proxied(nginx)
    yield p
    p.stop()


def test_the_creation_chooses_a_fresh_uuid_for_the_session() -> None:
    def request() -> sessions_pb2.CreateSessionRequest:
        return c.create_session_request(
            backend="memory",
            root=None,
            mounts=None,
            seed_files=None,
            read_only=False,
            limits=None,
            layout="flat",
            labels=None,
            idle_ttl=None,
        )

    first, second = request(), request()
    assert first.session_id != second.session_id
    assert str(uuid.UUID(first.session_id)) == first.session_id
    assert uuid.UUID(first.session_id).version == 4
    assert c.routed((("x-wsfs-caller", "a"),), "s") == (
        ("x-wsfs-caller", "a"),
        (c.SESSION_HEADER, "s"),
    )


def test_a_chosen_session_id_is_the_sessions_id(client: wsfs.Client) -> None:
    chosen = str(uuid.uuid4())
    with client.create_session(session_id=chosen) as session:
        assert session.id == chosen and session.info is not None and session.info.id == chosen
        with pytest.raises(wsfs.AlreadyExists):
            client.create_session(session_id=chosen)


def test_every_call_reaches_the_replica_holding_its_session(proxied: Proxied) -> None:
    with wsfs.Client(proxied.url) as client:
        sessions = [client.create_session(labels={"test": "routing"}) for _ in range(12)]
        placed = {s.id: proxied.holder(s.id) for s in sessions}
        assert all(len(h) == 1 for h in placed.values()), placed
        assert len({h[0] for h in placed.values()}) >= 2, placed
        for session in sessions:
            session.write("a.txt", session.id)
            assert session.read_text("a.txt") == session.id
            session.write("b.bin", b"\x00" * (3 * 1024 * 1024))
            assert len(session.read_bytes("b.bin")) == 3 * 1024 * 1024
            snapshot = session.snapshot("t")
            session.write("a.txt", "changed")
            session.restore(snapshot.id)
            assert session.read_text("a.txt") == session.id
            assert client.get_session(session.id).id == session.id
            client.delete_session(session.id)
            assert proxied.holder(session.id) == []


def test_the_asyncio_client_is_routed_too(proxied: Proxied) -> None:
    async def run() -> set[int]:
        used = set()
        async with wsfs.AsyncClient(proxied.url) as client:
            for _ in range(9):
                async with client.create_session() as session:
                    await session.write("a.txt", session.id)
                    assert await session.read_text("a.txt") == session.id
                    used.update(proxied.holder(session.id))
        return used

    assert len(asyncio.run(run())) >= 2


def test_a_call_whose_metadata_names_another_session_is_refused(proxied: Proxied) -> None:
    with wsfs.Client(proxied.url) as client:
        a = client.create_session()
        b = client.create_session()
        stub = filesystem_pb2_grpc.FilesystemStub(client.channel)
        request = filesystem_pb2.WriteRequest(session_id=a.id, path="a.txt", content="x")
        with pytest.raises(grpc.RpcError) as refused:
            stub.Write(request, metadata=((c.SESSION_HEADER, b.id),))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert c.SESSION_HEADER in (refused.value.details() or "")
        assert not a.exists("a.txt") and not b.exists("a.txt")
        a.delete_session()
        b.delete_session()


def test_a_call_naming_no_session_is_routed_by_the_session_its_token_names() -> None:
    session = "67e55044-10b1-426f-9247-bb680e5fe0c8"
    token = f"wsfs_{session}_{'ab' * 32}"
    assert c.token_session(token) == session
    assert c.routed(c.credentials(token, None), "") == (
        ("authorization", f"Bearer {token}"),
        (c.SESSION_HEADER, session),
    )
    other = "0f9e8d7c-6b5a-4c3d-8e1f-a0b1c2d3e4f5"
    assert c.routed(c.credentials(token, None), other)[-1] == (c.SESSION_HEADER, other)
    for unrouted in (f"wsfs_{'ab' * 32}", "an-admin-token", f"wsfs_{session.upper()}_{'ab' * 32}"):
        assert c.token_session(unrouted) is None
        assert c.routed(c.credentials(unrouted, None), "") == c.credentials(unrouted, None)
