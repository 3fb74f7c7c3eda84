"""Every call of the synchronous client against the real server."""

from __future__ import annotations

import io
import os
import time
import zipfile
from datetime import datetime, timezone

import grpc
import pytest

import wsfs
from wsfs import ChangeKind, FileKind, WriteMode

MiB = 1024 * 1024


def test_create_session_options_and_info(client: wsfs.Client) -> None:
    with client.create_session(
        seed_files={"a.txt": "text\n", "b.bin": b"\x00\x01"},
        labels={"owner": "ci"},
        idle_ttl=600,
        limits=wsfs.SessionLimits(max_files=100),
    ) as session:
        info = session.info
        assert info is not None and info.id == session.id and len(info.id) == 36
        assert info.backend is wsfs.Backend.MEMORY and info.layout is wsfs.Layout.FLAT
        assert info.labels == {"owner": "ci"} and info.idle_ttl_seconds == 600
        assert info.limits.max_files == 100 and info.limits.max_write_bytes == 32 * MiB
        assert info.created_at.tzinfo is timezone.utc
        assert abs((datetime.now(timezone.utc) - info.created_at).total_seconds()) < 60
        assert session.read_text("a.txt") == "text\n"
        assert session.read_bytes("b.bin") == b"\x00\x01"
        assert client.get_session(session.id).labels == {"owner": "ci"}
        assert session.id in [s.id for s in client.list_sessions()]
    # The with block deleted it.
    assert session.id not in [s.id for s in client.list_sessions()]
    with pytest.raises(wsfs.SessionNotFound):
        client.get_session(session.id)


def test_directory_session_and_explicit_delete(client: wsfs.Client) -> None:
    session = client.create_session(backend="directory", layout=wsfs.Layout.SWARM)
    assert session.info is not None
    assert session.info.backend is wsfs.Backend.DIRECTORY and session.info.root_path
    assert session.info.layout is wsfs.Layout.SWARM
    session.write("shared/x.txt", "x")
    assert os.path.exists(os.path.join(session.info.root_path, "shared", "x.txt"))
    handle = client.session(session.id)
    assert handle.get_info().id == session.id
    assert client.delete_session(session.id) == 1
    assert session.delete_session(missing_ok=True) == 0


def test_read_pages_and_read_text(session: wsfs.Session) -> None:
    written = session.write("/notes//todo.md", "- a\n- b\n- c\n")
    assert written.path == "notes/todo.md" and written.created and written.size == 12
    page = session.read("notes/todo.md", offset=1, limit=1)
    assert (page.content, page.total_lines, page.offset, page.lines) == ("- b\n", 3, 1, 1)
    assert page.truncated and page.version == written.version and page.size == 12
    assert session.read("notes/todo.md", limit=-1).content == "- a\n- b\n- c\n"
    assert session.read_text("notes/todo.md") == "- a\n- b\n- c\n"


def test_read_text_pages_through_many_lines(session: wsfs.Session) -> None:
    text = "".join(f"line {i}\n" for i in range(25_000))  # three pages
    session.write("many.txt", text)
    assert session.read_text("many.txt") == text


def test_read_over_grpc_default_4_mib_limit(session: wsfs.Session) -> None:
    line = "x" * 1023 + "\n"
    text = line * (5 * 1024)  # 5 MiB in 5120 lines: one page, one 5 MiB message
    session.write("big.txt", text)
    page = session.read("big.txt", limit=-1)
    assert len(page.content) == 5 * MiB and not page.truncated
    assert session.read_text("big.txt") == text


def test_ten_mib_bytes_round_trip(session: wsfs.Session) -> None:
    data = os.urandom(MiB) * 10 + b"tail"
    result = session.write("blob.bin", data)
    assert result.bytes_written == len(data) and result.size == len(data)
    assert session.read_bytes("blob.bin") == data
    with session.stream_bytes("blob.bin", offset=MiB, limit=3 * MiB, chunk_size=MiB) as stream:
        assert (stream.size, stream.offset, stream.length) == (len(data), MiB, 3 * MiB)
        assert stream.version == result.version
        chunks = list(stream)
    assert [len(c) for c in chunks] == [MiB] * 3
    assert b"".join(chunks) == data[MiB : 4 * MiB]
    assert session.read_bytes("blob.bin", offset=len(data) - 4) == b"tail"
    assert session.read_bytes("blob.bin", offset=5, limit=0) == b""


def test_ten_mib_text_write(session: wsfs.Session) -> None:
    text = ("0123456789abcde\n" * 65536) * 10 + "end"
    session.write("big10.txt", text)
    assert session.stat("big10.txt").size == len(text)
    assert session.read_text("big10.txt") == text


def test_stream_chunks_default_64_kib(session: wsfs.Session) -> None:
    data = bytes(range(256)) * 1024
    session.write("blob.bin", data)
    stream = session.stream_bytes("blob.bin")
    chunks = list(stream)
    assert [len(c) for c in chunks] == [65536] * 4 and b"".join(chunks) == data


def test_stream_closed_early(session: wsfs.Session) -> None:
    session.write("blob.bin", b"z" * (4 * MiB))
    stream = session.stream_bytes("blob.bin")
    first = next(iter(stream))
    stream.close()
    assert len(first) == 65536 and list(stream) == []
    assert session.exists("blob.bin")  # the session still works


def test_write_modes_and_inputs(session: wsfs.Session, tmp_path) -> None:
    session.write("log.txt", "a\n", mode=WriteMode.CREATE)
    with pytest.raises(wsfs.AlreadyExists):
        session.write("log.txt", "again\n", mode="create")
    session.write("log.txt", "b\n", mode="append")
    session.write("log.txt", b"c\n", mode=WriteMode.APPEND)
    assert session.read_text("log.txt") == "a\nb\nc\n"
    # File objects: binary and text.
    session.write("from-file.bin", io.BytesIO(b"\x00" * 200_000))
    assert session.stat("from-file.bin").size == 200_000
    session.write("from-text.txt", io.StringIO("é\n" * 3))
    assert session.read_text("from-text.txt") == "é\n" * 3
    # An iterable of chunks.
    session.write("chunks.txt", (p for p in [b"one\n", b"two\n", b"three\n"]))
    assert session.read_text("chunks.txt") == "one\ntwo\nthree\n"
    # create_parents=False needs the parent.
    with pytest.raises(wsfs.FileNotFound):
        session.write("no/such/dir/f.txt", "x", create_parents=False)
    # upload from a local path.
    local = tmp_path / "local.bin"
    local.write_bytes(b"local bytes")
    assert session.upload("up/local.bin", local).size == 11
    assert session.read_bytes("up/local.bin") == b"local bytes"
    out = tmp_path / "down.bin"
    assert session.download("up/local.bin", out) == 11 and out.read_bytes() == b"local bytes"
    sink = io.BytesIO()
    session.download("up/local.bin", sink)
    assert sink.getvalue() == b"local bytes"


def test_if_version(session: wsfs.Session) -> None:
    first = session.write("v.txt", "1", if_version=0)
    second = session.write("v.txt", "2", if_version=first.version)
    assert second.version > first.version
    with pytest.raises(wsfs.VersionMismatch) as caught:
        session.write("v.txt", "3", if_version=first.version)
    assert caught.value.current_version == second.version
    assert caught.value.expected_version == first.version
    assert session.read_text("v.txt") == "2"


def test_failed_upload_source_leaves_nothing(session: wsfs.Session, caplog) -> None:
    def broken():
        yield b"a" * 100_000
        raise OSError("disk on fire")

    caplog.set_level("DEBUG")
    with pytest.raises(OSError, match="disk on fire"):
        session.write("partial.bin", broken())
    assert not session.exists("partial.bin")
    session.write("kept.bin", b"old")
    with pytest.raises(OSError, match="disk on fire"):
        session.write("kept.bin", broken())
    assert session.read_bytes("kept.bin") == b"old"
    # The caller gets the error; grpc's log does not repeat it as a traceback.
    assert "Exception iterating requests" not in caplog.text


def test_edit(session: wsfs.Session) -> None:
    session.write("src/app.py", "x = 1\ny = 1\n")
    dry = session.edit("src/app.py", "x = 1", "x = 2", dry_run=True)
    assert dry.dry_run and dry.replacements == 1 and "+x = 2" in dry.diff
    assert session.read_text("src/app.py") == "x = 1\ny = 1\n"
    done = session.edit("src/app.py", "= 1", "= 3", replace_all=True)
    assert done.replacements == 2 and done.version > dry.version
    assert session.read_text("src/app.py") == "x = 3\ny = 3\n"
    with pytest.raises(wsfs.VersionMismatch):
        session.edit("src/app.py", "x", "z", if_version=dry.version)


def test_delete_many_answers_for_each_path(session: wsfs.Session) -> None:
    session.write("d/a.txt", "a")
    session.write("d/b.txt", "b")
    session.write("keep.txt", "k")

    results = session.delete_many(["d/a.txt", "d", "d/b.txt", "gone.txt", "d"])

    assert results[0] == 1 and results[2] == 1 and results[4] == 1
    assert isinstance(results[1], wsfs.DirectoryNotEmpty) and results[1].path == "d"
    assert isinstance(results[3], wsfs.FileNotFound)
    assert results[3].code is grpc.StatusCode.NOT_FOUND
    assert [e.path for e in session.list("")] == ["keep.txt"]
    assert session.delete_many(["gone.txt"], allow_missing=True) == [0]
    assert session.delete_many([]) == []
    with pytest.raises(ValueError, match="at most 1024"):
        session.delete_many(["keep.txt"] * 1025)
    with pytest.raises(TypeError):
        session.delete_many("keep.txt")  # type: ignore[arg-type]
    assert session.exists("keep.txt")


def test_delete_mkdir_move_copy(session: wsfs.Session) -> None:
    assert session.mkdir("a/b/c") is True
    assert session.mkdir("a/b/c") is False
    with pytest.raises(wsfs.AlreadyExists):
        session.mkdir("a/b/c", exist_ok=False)
    with pytest.raises(wsfs.FileNotFound):
        session.mkdir("x/y", parents=False)
    session.write("a/b/c/f.txt", "f")
    assert session.copy("a", "copy") == 4
    assert session.read_text("copy/b/c/f.txt") == "f"
    with pytest.raises(wsfs.AlreadyExists):
        session.copy("a", "copy")
    assert session.copy("a/b/c/f.txt", "copy/b/c/f.txt", overwrite=True) == 1
    assert session.move("copy", "moved") == 4
    assert not session.exists("copy") and session.exists("moved/b/c/f.txt")
    version = session.stat("moved/b/c/f.txt").version
    with pytest.raises(wsfs.VersionMismatch):
        session.move("moved/b/c/f.txt", "g.txt", if_version=version + 1)
    assert session.move("moved/b/c/f.txt", "g.txt", if_version=version) == 1
    with pytest.raises(wsfs.DirectoryNotEmpty):
        session.delete("a")
    assert session.delete("a", recursive=True) == 4
    assert session.delete("gone", allow_missing=True) == 0
    with pytest.raises(wsfs.VersionMismatch):
        session.delete("g.txt", if_version=1)
    assert session.delete("g.txt") == 1


def test_list_stat_exists_glob(session: wsfs.Session) -> None:
    session.write("src/main.rs", "fn main() {}\n")
    session.write("src/lib/util.rs", "pub fn f() {}\n")
    session.write("README.md", "# hi\n")
    top = session.list()
    assert [(e.name, e.kind) for e in top] == [
        ("README.md", FileKind.FILE),
        ("src", FileKind.DIRECTORY),
    ]
    assert not top.truncated and len(top) == 2
    deep = session.list("src", depth=2)
    assert [e.path for e in deep] == ["src/lib", "src/lib/util.rs", "src/main.rs"]
    rest = session.list("src", depth=2, start_after="src/lib/util.rs")
    assert [e.path for e in rest] == ["src/main.rs"] and not rest.truncated
    entry = deep.entries[2]
    assert entry.size == 13 and entry.version > 0 and isinstance(entry.modified_at, datetime)
    info = session.stat("/src/main.rs")
    assert (info.path, info.kind, info.size) == ("src/main.rs", FileKind.FILE, 13)
    assert info.created_at is not None and info.modified_at is not None
    assert session.stat("src").kind is FileKind.DIRECTORY
    assert session.exists("src/main.rs") and not session.exists("nope.txt")
    found = session.glob("**/*.rs")
    assert list(found) == ["src/lib/util.rs", "src/main.rs"] and not found.truncated
    assert session.glob("*.rs", "src").paths == ["src/main.rs"]
    assert session.glob("{README.md,src/main.rs}").paths == ["README.md", "src/main.rs"]
    assert len(session.glob("**/*", max_results=1)) == 1


def test_grep(session: wsfs.Session) -> None:
    session.write("up/three.txt", "one\ntwo\nthree\n")
    session.write("up/other.md", "Two\n")
    stream = session.grep("t[wh]")
    found = [(m.path, m.line_number, m.line, m.match) for m in stream]
    assert found == [("up/three.txt", 2, "two", "tw"), ("up/three.txt", 3, "three", "th")]
    assert stream.summary == wsfs.GrepSummary(files_searched=2, matches=2, truncated=False)
    matches, summary = session.grep("two", case_insensitive=True, glob="*.md", path="up").collect()
    assert [m.path for m in matches] == ["up/other.md"] and summary.matches == 1
    session.write("dots.txt", "a.b\naxb\n")
    fixed, _ = session.grep("a.b", fixed_string=True).collect()
    assert [m.line for m in fixed] == ["a.b"]
    ctx, _ = session.grep("two", context_lines=1).collect()
    assert [c.line for c in ctx[0].before] == ["one"] and [c.line for c in ctx[0].after] == [
        "three"
    ]
    capped = session.grep("o", max_matches=1)
    assert len(list(capped)) == 1 and capped.summary is not None and capped.summary.truncated


def test_grep_closed_early(session: wsfs.Session) -> None:
    session.write("many.txt", "hit\n" * 5000)
    with session.grep("hit") as stream:
        first = next(stream)
    assert first.line == "hit" and list(stream) == [] and stream.summary is None


def test_watch_stopped_by_close_and_break(session: wsfs.Session) -> None:
    watch = session.watch("notes")
    ready = next(watch)
    assert ready.kind is ChangeKind.READY
    session.write("notes/a.md", "a")
    session.write("elsewhere.txt", "x")
    session.move("notes/a.md", "notes/b.md")
    created, moved = next(watch), next(watch)
    assert (created.kind, created.path, created.caller) == (
        ChangeKind.CREATED,
        "notes/a.md",
        "system",
    )
    assert (moved.kind, moved.path, moved.to_path) == (ChangeKind.MOVED, "notes/a.md", "notes/b.md")
    assert created.at is not None and watch.last_seq == moved.seq
    started = time.monotonic()
    watch.close()
    assert list(watch) == []
    assert time.monotonic() - started < 2
    for event in session.watch():
        assert event.kind is ChangeKind.READY
        break  # leaving the loop drops the stream


def test_watch_timeout_and_resume(session: wsfs.Session) -> None:
    session.write("a.txt", "1")
    session.write("a.txt", "2")
    first = session.changes().events[0].seq
    started = time.monotonic()
    with session.watch(since_seq=first, timeout=1.0) as watch:
        events = list(watch)  # replay, then idle until the timeout ends it
    elapsed = time.monotonic() - started
    assert 0.8 < elapsed < 5, elapsed
    kinds = [e.kind for e in events]
    assert ChangeKind.KEEPALIVE not in kinds
    assert [e.version for e in events if e.kind is ChangeKind.MODIFIED]
    assert events[-1].seq > first


def test_watch_keepalives_on_request(session: wsfs.Session) -> None:
    # The test server sends a keep-alive every 200 ms.
    with session.watch(timeout=1.0, keepalives=True) as watch:
        kinds = [e.kind for e in watch]
    assert ChangeKind.KEEPALIVE in kinds


def test_changes(session: wsfs.Session) -> None:
    session.write("a.txt", "1")
    session.delete("a.txt")
    page = session.changes()
    assert [e.kind for e in page] == [ChangeKind.CREATED, ChangeKind.DELETED]
    assert not page.resync and page.next_seq == page.events[-1].seq
    assert session.changes(since_seq=page.events[0].seq).events == page.events[1:]
    assert len(session.changes(max=1).events) == 1


def test_snapshots(client: wsfs.Client, session: wsfs.Session) -> None:
    session.write("keep.txt", "keep")
    snap = session.snapshot("first")
    assert (snap.tag, snap.file_count, snap.total_bytes) == ("first", 1, 4) and len(snap.id) == 36
    session.write("later.txt", "later")
    session.delete("keep.txt")
    restored = session.restore(snap)
    assert restored == wsfs.Restored(1, 4)
    assert session.exists("keep.txt") and not session.exists("later.txt")
    other = client.snapshot(session.id, "second")
    assert [s.tag for s in session.list_snapshots()] == ["first", "second"]
    client.restore(session.id, other.id)
    assert [s.id for s in client.list_snapshots(session.id)] == [snap.id, other.id]
    client.delete_snapshot(session.id, other.id)
    session.delete_snapshot(snap)
    assert session.list_snapshots() == []


def test_restore_of_one_path_leaves_the_rest(session: wsfs.Session) -> None:
    session.write("src/a.txt", "alpha")
    session.write("notes.txt", "notes")
    snap = session.snapshot("before")
    session.write("src/a.txt", "changed")
    session.write("src/new.txt", "new")
    session.write("notes.txt", "changed too")
    assert session.restore(snap, path="src") == wsfs.Restored(1, 5)
    assert session.read("src/a.txt").content == "alpha"
    assert not session.exists("src/new.txt")
    assert session.read("notes.txt").content == "changed too"
    with pytest.raises(wsfs.FileNotFound):
        session.restore(snap, path="no/such")


def test_an_owner_is_echoed_and_refused_off_directory_sessions(client: wsfs.Client) -> None:
    before = len(client.list_sessions())
    with pytest.raises(wsfs.InvalidArgument) as refused:
        client.create_session(owner=wsfs.FileOwner(1000, 1000))
    assert "only to DIRECTORY" in str(refused.value)
    assert len(client.list_sessions()) == before
    if os.geteuid() != 0:
        return  # giving files away needs root (or CAP_CHOWN)
    owner = wsfs.FileOwner(1000, 1001, file_permissions=0o640)
    with client.create_session(backend="directory", owner=owner) as owned:
        assert owned.info.owner == wsfs.FileOwner(1000, 1001, 0o640, 0o755)
        assert client.get_session(owned.id).owner == owned.info.owner
        owned.write("a.txt", "x")
        stat = os.stat(os.path.join(owned.info.root_path, "a.txt"))
        assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (1000, 1001, 0o640)


def test_fork_holds_the_snapshot_and_diverges(client: wsfs.Client, session: wsfs.Session) -> None:
    session.write("src/a.py", "a = 1\n")
    snap = session.snapshot("base")
    session.write("src/a.py", "a = 2\n")
    with client.create_session(backend="directory", from_snapshot=(session.id, snap.id)) as fork:
        assert fork.info.forked_from == (session.id, snap.id)
        assert client.get_session(fork.id).forked_from == (session.id, snap.id)
        assert fork.read("src/a.py", limit=-1).content == "a = 1\n"
        assert [s.tag for s in fork.list_snapshots()] == ["base"]
        fork.write("src/a.py", "a = 3\n")
        assert session.read("src/a.py", limit=-1).content == "a = 2\n"
    with pytest.raises(wsfs.SnapshotNotFound) as refused:
        client.create_session(from_snapshot=(session.id, "00000000-0000-4000-8000-000000000000"))
    assert refused.value.reason == "SNAPSHOT_NOT_FOUND"


def test_archives(session: wsfs.Session, client: wsfs.Client, tmp_path) -> None:
    session.write("src/a.py", "a = 1\n")
    session.write("data/b.bin", b"\x00" * 300_000)
    archive = session.export_archive()
    names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
    assert "manifest.json" in names and "files/src/a.py" in names
    path = tmp_path / "ws.zip"
    assert session.export_archive(path) == path.stat().st_size > 0
    snap = session.snapshot()
    session.write("src/a.py", "changed\n")
    from_snapshot = io.BytesIO()
    session.export_archive(from_snapshot, snapshot=snap)
    with client.create_session() as other:
        other.write("old.txt", "replaced by the import")
        assert other.import_archive(path) == wsfs.Restored(2, 300_006)
        assert other.read_text("src/a.py") == "a = 1\n" and not other.exists("old.txt")
        assert other.import_archive(from_snapshot.getvalue()).file_count == 2
        with open(path, "rb") as f:
            assert other.import_archive(f).total_bytes == 300_006
        assert other.import_archive(iter([archive[:1000], archive[1000:]])).file_count == 2

        def cut_short():
            yield archive[:1000]
            raise OSError("network gone")

        other.write("src/a.py", "kept\n")
        with pytest.raises(OSError, match="network gone"):
            other.import_archive(cut_short())
        assert other.read_text("src/a.py") == "kept\n"


def test_upload_dir_download_dir_round_trip(session: wsfs.Session, tmp_path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "top.txt").write_text("top\n")
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "pkg" / "sub" / "data.bin").write_bytes(os.urandom(300_000))
    os.symlink("/etc/passwd", src / "link")  # skipped
    sent = session.upload_dir(src, "project")
    assert sent == wsfs.Transferred(files=3, bytes=4 + 6 + 300_000)
    assert session.stat("project/empty").kind is FileKind.DIRECTORY
    assert not session.exists("project/link")
    dest = tmp_path / "dest"
    got = session.download_dir("/project/", dest)
    assert got == sent
    for rel in ["top.txt", "pkg/mod.py", "pkg/sub/data.bin"]:
        assert (dest / rel).read_bytes() == (src / rel).read_bytes()
    assert (dest / "empty").is_dir()
    # The whole workspace, from the root.
    everything = tmp_path / "all"
    assert session.download_dir("", everything).files == 3
    assert (everything / "project" / "top.txt").read_text() == "top\n"


def test_generated_stubs_are_importable(client: wsfs.Client, session: wsfs.Session) -> None:
    from wsfs.v1 import filesystem_pb2, filesystem_pb2_grpc

    stub = filesystem_pb2_grpc.FilesystemStub(client.channel)
    session.write("raw.txt", "raw\n")
    reply = stub.Read(filesystem_pb2.ReadRequest(session_id=session.id, path="raw.txt"))
    assert reply.content == "raw\n"


def test_host_mounts_and_root(server, client: wsfs.Client) -> None:
    project = os.path.join(server.allowed, "project")
    os.makedirs(os.path.join(project, "pkg"), exist_ok=True)
    with open(os.path.join(project, "pkg", "a.py"), "w") as f:
        f.write("a = 1\n")
    with open(os.path.join(project, "notes.txt"), "w") as f:
        f.write("skip me\n")
    mount = wsfs.HostMount(project, "app", include_glob=("**/*.py",), max_bytes=1000)
    with client.create_session(mounts=[mount]) as session:
        assert session.glob("**").paths == ["app/pkg/a.py"]
    rooted = os.path.join(server.allowed, "rooted")
    os.makedirs(rooted, exist_ok=True)
    with client.create_session(backend=wsfs.Backend.DIRECTORY, root=rooted) as session:
        session.write("made-here.txt", "x")
        assert os.path.exists(os.path.join(rooted, "made-here.txt"))
    with pytest.raises(wsfs.PermissionDenied):
        client.create_session(mounts=[wsfs.HostMount(os.path.dirname(server.allowed))])


def test_list_sessions_filters_by_labels_and_reports_activity(client: wsfs.Client) -> None:
    tag = os.urandom(6).hex()
    made = [
        client.create_session(labels={"py-list": tag, "n": str(i)}) for i in range(3)
    ]
    try:
        listed = client.list_sessions(labels={"py-list": tag})
        assert sorted(s.id for s in listed) == sorted(s.id for s in made)
        assert [s.id for s in listed] == sorted(s.id for s in listed)
        one = client.list_sessions(labels={"py-list": tag, "n": "1"})
        assert [s.id for s in one] == [made[1].id]
        assert all(s.last_active_at is not None and s.open_streams == 0 for s in listed)
        assert client.list_sessions(labels={"py-list": "nobody-" + tag}) == []
        assert all(s.usage is None for s in listed)
        client.session(made[0].id).write("a.txt", "hello")
        counted = client.list_sessions(labels={"py-list": tag}, include_usage=True)
        usage = {s.id: s.usage for s in counted}
        assert usage[made[0].id] == wsfs.SessionUsage(files=1, bytes=5)
        assert usage[made[1].id] == wsfs.SessionUsage(files=0, bytes=0)
        assert client.get_session(made[0].id).usage == wsfs.SessionUsage(1, 5)
    finally:
        for s in made:
            client.delete_session(s.id)


def test_diff_snapshot_names_what_changed(session: wsfs.Session) -> None:
    session.write("a.txt", "one\n")
    session.write("gone.txt", "bye\n")
    snap = session.snapshot("base")
    assert session.diff_snapshot(snap).changes == []
    session.write("a.txt", "two\n")
    session.delete("gone.txt")
    session.write("new/x.txt", "x\n")
    diff = session.diff_snapshot(snap.id)
    got = [(c.kind, c.path, c.directory) for c in diff.changes]
    K = wsfs.SnapshotChangeKind
    assert got == [
        (K.MODIFIED, "a.txt", False),
        (K.DELETED, "gone.txt", False),
        (K.ADDED, "new", True),
        (K.ADDED, "new/x.txt", False),
    ]
    assert not diff.truncated
    with pytest.raises(wsfs.SnapshotNotFound):
        session.diff_snapshot("00000000-0000-0000-0000-000000000000")


def test_permissions_on_write_and_mkdir_and_set_attributes(session: wsfs.Session) -> None:
    session.write("run.sh", "#!/bin/sh\n", permissions=0o755)
    session.write("blob", b"\x00\x01", permissions=0o600)
    session.mkdir("private", permissions=0o700)
    assert session.stat("run.sh").permissions == 0o755
    assert session.stat("blob").permissions == 0o600
    listed = {e.path: e.permissions for e in session.list("")}
    assert listed == {"blob": 0o600, "private": 0o700, "run.sh": 0o755}

    before = session.stat("run.sh").version
    then = datetime(2020, 9, 13, 12, 26, 40, tzinfo=timezone.utc)
    done = session.set_attributes("run.sh", permissions=0o700, modified_at=then)
    assert (done.permissions, done.modified_at) == (0o700, then)
    assert done.version > before

    with pytest.raises(wsfs.InvalidArgument):
        session.set_attributes("run.sh", permissions=0o4755)
    with pytest.raises(wsfs.VersionMismatch):
        session.set_attributes("run.sh", permissions=0o755, if_version=before)
    assert session.stat("run.sh").permissions == 0o700
