"""Every call of the asyncio client against the real server. Each test runs
its own event loop (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import io
import os
import time
import zipfile
from typing import Awaitable, Callable

import grpc
import pytest
from conftest import ADMIN_TOKEN, Server

import wsfs
from wsfs import ChangeKind, FileKind

MiB = 1024 * 1024


def run(
    server: Server, test: Callable[[wsfs.AsyncClient, wsfs.AsyncSession], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with wsfs.AsyncClient(server.url) as client:
            async with client.create_session(labels={"test": "async"}) as session:
                await test(client, session)

    asyncio.run(main())


def test_sessions(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        assert session.info is not None and session.info.labels == {"test": "async"}
        assert (await session.get_info()).id == session.id
        assert session.id in [s.id for s in await client.list_sessions()]
        other = await client.create_session(backend="directory", seed_files={"a.txt": b"a"})
        assert other.info is not None and other.info.backend is wsfs.Backend.DIRECTORY
        assert await other.read_text("a.txt") == "a"
        assert (await client.get_session(other.id)).root_path == other.info.root_path
        assert await client.delete_session(other.id) == 1
        with pytest.raises(wsfs.SessionNotFound):
            await other.stat("a.txt")
        assert await other.delete_session(missing_ok=True) == 0

    run(server, test)
    # `async with client.create_session()` deleted the session at the end.


def test_read_write_edit(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        w = await session.write("/notes//todo.md", "- a\n- b\n")
        assert w.path == "notes/todo.md" and w.created
        page = await session.read("notes/todo.md", offset=1, limit=1)
        assert page.content == "- b\n" and page.total_lines == 2 and not page.truncated
        assert await session.read_text("notes/todo.md") == "- a\n- b\n"
        await session.write("notes/todo.md", "- c\n", mode="append")
        with pytest.raises(wsfs.AlreadyExists):
            await session.write("notes/todo.md", "x", mode=wsfs.WriteMode.CREATE)
        with pytest.raises(wsfs.VersionMismatch) as caught:
            await session.write("notes/todo.md", b"x", if_version=w.version)
        assert caught.value.current_version > w.version
        e = await session.edit("notes/todo.md", "- c", "- C", dry_run=True)
        assert e.dry_run and "+- C" in e.diff
        e = await session.edit("notes/todo.md", "- ", "* ", replace_all=True)
        assert e.replacements == 3
        assert await session.read_text("notes/todo.md") == "* a\n* b\n* c\n"
        text = "".join(f"{i}\n" for i in range(22_000))
        await session.write("many.txt", text)
        assert await session.read_text("many.txt") == text

    run(server, test)


def test_big_reads_and_writes(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        text = ("y" * 1023 + "\n") * (5 * 1024)  # one 5 MiB page
        await session.write("big.txt", text)
        assert (await session.read("big.txt", limit=-1)).content == text
        data = os.urandom(MiB) * 11
        assert (await session.write("blob.bin", data)).size == len(data)
        assert await session.read_bytes("blob.bin") == data
        async with await session.stream_bytes("blob.bin", offset=10, limit=200_000) as stream:
            assert (stream.offset, stream.length, stream.size) == (10, 200_000, len(data))
            chunks = [c async for c in stream]
        assert [len(c) for c in chunks] == [65536, 65536, 65536, 3392]
        assert b"".join(chunks) == data[10:200_010]
        assert await session.read_bytes("blob.bin", limit=0) == b""

        async def produce():
            for i in range(3):
                await asyncio.sleep(0)
                yield bytes([i]) * 100_000

        assert (await session.write("agen.bin", produce())).size == 300_000
        await session.write("file.bin", io.BytesIO(b"f" * 70_000))
        assert await session.read_bytes("file.bin", 69_999) == b"f"

        async def broken():
            yield b"a" * 1000
            raise OSError("source failed")

        with pytest.raises(OSError, match="source failed"):
            await session.write("partial.bin", broken())
        assert not await session.exists("partial.bin")

    run(server, test)


def test_files_and_directories(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        assert await session.mkdir("a/b") is True
        assert await session.mkdir("a/b") is False
        await session.write("a/b/f.rs", "fn f() {}\n")
        assert await session.copy("a", "c") == 3
        assert await session.move("c", "d") == 3
        listing = await session.list("", depth=3)
        assert [e.path for e in listing] == ["a", "a/b", "a/b/f.rs", "d", "d/b", "d/b/f.rs"]
        rest = await session.list("", depth=3, start_after="a/b/f.rs")
        assert [e.path for e in rest] == ["d", "d/b", "d/b/f.rs"]
        assert listing.entries[0].kind is FileKind.DIRECTORY
        info = await session.stat("d/b/f.rs")
        assert info.kind is FileKind.FILE and info.size == 10
        assert await session.exists("d/b/f.rs") and not await session.exists("c")
        assert (await session.glob("**/*.rs")).paths == ["a/b/f.rs", "d/b/f.rs"]
        with pytest.raises(wsfs.DirectoryNotEmpty):
            await session.delete("d")
        assert await session.delete("d", recursive=True) == 3
        assert await session.delete("d", allow_missing=True) == 0
        await session.write("m/x.txt", "x")
        results = await session.delete_many(["m/x.txt", "m/nope.txt", "m"])
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], wsfs.FileNotFound) and results[1].path == "m/nope.txt"
        assert not await session.exists("m")

    run(server, test)


def test_grep(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        await session.write("x.txt", "alpha\nbeta\nALPHA\n")
        stream = session.grep("alpha", case_insensitive=True, context_lines=1)
        found = [(m.line_number, m.line) async for m in stream]
        assert found == [(1, "alpha"), (3, "ALPHA")]
        assert stream.summary == wsfs.GrepSummary(1, 2, False)
        matches, summary = await session.grep("beta", glob="*.txt").collect()
        assert matches[0].line == "beta" and matches[0].before == []
        assert summary.matches == 1
        with pytest.raises(wsfs.InvalidPattern):
            await session.grep("(").collect()
        await session.write("many.txt", "hit\n" * 3000)
        async with session.grep("hit") as early:
            async for _ in early:
                break
        assert [m async for m in early] == []

    run(server, test)


def test_watch_and_changes(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        watch = session.watch("src")
        ready = await watch.__anext__()
        assert ready.kind is ChangeKind.READY
        await session.write("src/a.py", "a")
        await session.write("other.txt", "o")
        event = await watch.__anext__()
        assert (event.kind, event.path) == (ChangeKind.CREATED, "src/a.py")

        # close() from another task ends an iteration that is waiting.
        async def consume() -> list[wsfs.ChangeEvent]:
            return [e async for e in watch]

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.2)
        watch.close()
        assert await asyncio.wait_for(task, 5) == []

        started = time.monotonic()
        async with session.watch(since_seq=event.seq, timeout=1.0) as timed:
            events = [e async for e in timed]  # replayed, then idle until the timeout
        assert 0.8 < time.monotonic() - started < 5
        assert ("other.txt", ChangeKind.CREATED) in [(e.path, e.kind) for e in events]
        assert ChangeKind.KEEPALIVE not in [e.kind for e in events]

        page = await session.changes()
        assert [e.path for e in page] == ["src/a.py", "other.txt"]
        assert (await session.changes(since_seq=page.next_seq)).events == []

    run(server, test)


def test_snapshots_archives_and_dirs(server: Server, tmp_path) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        await session.write("keep.txt", "keep")
        snap = await session.snapshot("s1")
        await session.write("later.txt", "later")
        assert await session.restore(snap.id) == wsfs.Restored(1, 4)
        assert not await session.exists("later.txt")
        snap2 = await client.snapshot(session.id, "s2")
        assert [s.tag for s in await client.list_snapshots(session.id)] == ["s1", "s2"]
        await client.restore(session.id, snap2.id)
        await client.delete_snapshot(session.id, snap2.id)
        await session.delete_snapshot(snap)
        assert await session.list_snapshots() == []

        archive = await session.export_archive()
        assert "files/keep.txt" in zipfile.ZipFile(io.BytesIO(archive)).namelist()
        path = tmp_path / "a.zip"
        assert await session.export_archive(path) == path.stat().st_size
        await session.write("keep.txt", "changed")
        assert await session.import_archive(path) == wsfs.Restored(1, 4)
        assert await session.read_text("keep.txt") == "keep"
        assert (await session.import_archive(archive)).file_count == 1
        with pytest.raises(wsfs.WsfsError):
            await session.import_archive(b"not a zip")
        assert await session.read_text("keep.txt") == "keep"

        local = tmp_path / "local"
        (local / "d" / "e").mkdir(parents=True)
        (local / "d" / "x.txt").write_text("x")
        (local / "big.bin").write_bytes(os.urandom(200_000))
        sent = await session.upload_dir(local, "up")
        assert sent == wsfs.Transferred(2, 200_001)
        back = tmp_path / "back"
        assert await session.download_dir("up", back) == sent
        assert (back / "big.bin").read_bytes() == (local / "big.bin").read_bytes()
        assert (back / "d" / "e").is_dir() and (back / "d" / "x.txt").read_text() == "x"
        out = io.BytesIO()
        assert await session.download("up/d/x.txt", out) == 1 and out.getvalue() == b"x"
        assert (await session.upload("up2/x", local / "d" / "x.txt")).size == 1

    run(server, test)


def test_errors(server: Server) -> None:
    async def test(client: wsfs.AsyncClient, session: wsfs.AsyncSession) -> None:
        with pytest.raises(wsfs.FileNotFound) as caught:
            await session.read_text("nope")
        assert caught.value.path == "nope" and caught.value.code is grpc.StatusCode.NOT_FOUND
        with pytest.raises(wsfs.FileNotFound):
            await session.read_bytes("nope")
        with pytest.raises(wsfs.PathEscapesRoot):
            await session.stat("../x")
        with pytest.raises(wsfs.OutOfRange):
            await _past_end(session)
        with pytest.raises(wsfs.SessionNotFound):
            await client.session("00000000-0000-4000-8000-000000000000").exists("a")
        async with client.create_session(
            limits=wsfs.SessionLimits(max_write_bytes=10, max_total_bytes=15)
        ) as small:
            with pytest.raises(wsfs.TooLarge):
                await small.write("a", b"x" * 11)
            await small.write("a", "x" * 10)
            with pytest.raises(wsfs.QuotaExceeded):
                await small.write("b", "x" * 10)

    run(server, test)

    async def unreachable() -> None:
        async with wsfs.AsyncClient("127.0.0.1:9") as client:
            with pytest.raises(wsfs.Unavailable):
                await client.list_sessions()

    asyncio.run(unreachable())


async def _past_end(session: wsfs.AsyncSession) -> bytes:
    await session.write("short.txt", "abc")
    return await session.read_bytes("short.txt", offset=10)


def test_tokens(token_server: Server) -> None:
    async def main() -> None:
        async with wsfs.AsyncClient(token_server.url) as anonymous:
            with pytest.raises(wsfs.Unauthenticated):
                await anonymous.list_sessions()
        async with wsfs.AsyncClient(token_server.url, token=ADMIN_TOKEN) as admin:
            async with admin.create_session(layout=wsfs.Layout.SWARM) as session:
                assert session.info is not None and session.info.token
                issued = await admin.issue_token(session.id, "agent-2")
                agent = admin.session(session.id, token=issued.token)
                await agent.write("home/agent-2/a.txt", "a")
                with pytest.raises(wsfs.PermissionDenied):
                    await agent.write("shared/../sys/x", "x")
                assert [e.caller for e in await session.changes()] == ["agent-2"]
                assert (await session.snapshot()).file_count == 1

    asyncio.run(main())
