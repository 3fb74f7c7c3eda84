"""DeepFabric's own Spin client against the real server's HTTP face.

DeepFabric (``pip install deepfabric``) runs its agents' builtin file tools
through ``SpinClient``/``SpinSession``, which speak the VFS API that
``wsfs-server --http-listen`` serves. These tests drive that client
unchanged: seed files, every builtin tool from DeepFabric's own registry,
isolation between sessions, cleanup; and they check the same files through
gRPC. Skipped where deepfabric is not installed, unless
``WSFS_REQUIRE_SEED_CLIENTS=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest

import wsfs

if os.environ.get("WSFS_REQUIRE_SEED_CLIENTS") == "1":
    import deepfabric.spin  # noqa: F401
deepfabric_spin = pytest.importorskip("deepfabric.spin")
deepfabric_tools = pytest.importorskip("deepfabric.tools.defaults")

SpinClient = deepfabric_spin.SpinClient
SpinSession = deepfabric_spin.SpinSession

#: The label that names a DeepFabric session on the wsfs side.
LABEL = "deepfabric.session_id"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def session_of(client: wsfs.Client, name: str) -> wsfs.Session:
    """The one wsfs session that holds DeepFabric session ``name``."""
    found = client.list_sessions(labels={LABEL: name})
    assert len(found) == 1, found
    return client.session(found[0].id)


@pytest.fixture
def endpoint(http_server: Any) -> str:
    return http_server.http_url


@pytest.fixture
def grpc_client(http_server: Any):
    with wsfs.Client(http_server.url) as c:
        yield c


def test_health_and_components(endpoint: str) -> None:
    async def scenario() -> None:
        spin = SpinClient(endpoint=endpoint)
        try:
            health = await spin.health_check()
            assert health.status == "healthy"
            assert health.components == ["vfs"]
            assert await spin.get_components() == ["vfs"]
        finally:
            await spin.close()

    run(scenario())


def test_seeded_files_and_every_builtin_tool(endpoint: str, grpc_client: wsfs.Client) -> None:
    name = f"sample-{uuid.uuid4().hex[:8]}"
    seeds = {"main.py": "def greet(name):\n    return f'Hello, {name}!'\n", "docs/a.md": "# A\n"}
    tools = {t.name: t for t in deepfabric_tools.BUILTIN_TOOL_REGISTRY.tools}
    assert set(tools) == {"read_file", "write_file", "list_files", "delete_file"}

    async def scenario() -> None:
        spin = SpinClient(endpoint=endpoint)
        session = SpinSession(spin, name)
        try:
            assert await session.seed_files(seeds) is True

            async def call(tool: str, **args: str) -> Any:
                # Routed as DeepFabric routes its builtin tools (component "vfs").
                return await session.execute_tool(tool, args, component=tools[tool].component)

            read = await call("read_file", file_path="main.py")
            assert (read.success, read.result, read.error_type) == (True, seeds["main.py"], None)
            listed = await call("list_files")
            assert listed.success
            assert json.loads(listed.result) == ["docs/a.md", "main.py"]
            wrote = await call("write_file", file_path="/out/result.txt", content="done ✓")
            assert wrote.success
            assert wrote.result == "Successfully wrote 8 bytes to /out/result.txt"
            deleted = await call("delete_file", file_path="docs/a.md")
            assert (deleted.success, deleted.result) == (True, "Successfully deleted docs/a.md")
            gone = await call("read_file", file_path="docs/a.md")
            assert (gone.success, gone.error_type) == (False, "FileNotFound")
            assert gone.result == "File not found: docs/a.md"
            missing_arg = await call("write_file", file_path="x.txt")
            assert (missing_arg.success, missing_arg.error_type) == (False, "InvalidArguments")
            unknown = await session.execute_tool("format_disk", {}, component="vfs")
            assert (unknown.success, unknown.error_type) == (False, "UnknownTool")

            # The same files over gRPC, both ways.
            over_grpc = session_of(grpc_client, name)
            assert over_grpc.read_text("out/result.txt") == "done ✓"
            assert not over_grpc.exists("docs/a.md")
            over_grpc.write("from-grpc.txt", "written by an agent on gRPC")
            read = await call("read_file", file_path="from-grpc.txt")
            assert read.result == "written by an agent on gRPC"
        finally:
            await session.cleanup()
            await spin.close()

    run(scenario())
    assert grpc_client.list_sessions(labels={LABEL: name}) == []


def test_sessions_are_isolated_and_cleaned_up(endpoint: str, grpc_client: wsfs.Client) -> None:
    async def scenario() -> tuple[str, str]:
        spin = SpinClient(endpoint=endpoint)
        try:
            async with SpinSession(spin) as first, SpinSession(spin) as second:
                await first.seed_files({"isolated.txt": "first"})
                await second.seed_files({"isolated.txt": "second", "only-second.txt": "2"})
                a = await first.execute_tool("read_file", {"file_path": "isolated.txt"}, "vfs")
                b = await second.execute_tool("read_file", {"file_path": "isolated.txt"}, "vfs")
                assert (a.result, b.result) == ("first", "second")
                nope = await first.execute_tool(
                    "read_file", {"file_path": "only-second.txt"}, "vfs"
                )
                assert (nope.success, nope.error_type) == (False, "FileNotFound")
                assert len(grpc_client.list_sessions(labels={LABEL: first.session_id})) == 1
                return first.session_id, second.session_id
        finally:
            await spin.close()

    first, second = run(scenario())
    # Leaving the `async with` blocks deleted both sessions on the server.
    for name in (first, second):
        assert grpc_client.list_sessions(labels={LABEL: name}) == []


def test_cleanup_reports_the_deleted_files(endpoint: str, grpc_client: wsfs.Client) -> None:
    name = f"cleanup-{uuid.uuid4().hex[:8]}"

    async def scenario() -> bool:
        spin = SpinClient(endpoint=endpoint)
        try:
            session = SpinSession(spin, name)
            await session.seed_files({"a": "1", "b/c": "2"})
            return await session.cleanup()
        finally:
            await spin.close()

    assert run(scenario()) is True
    assert grpc_client.list_sessions(labels={LABEL: name}) == []
