"""``wsfs.weakincentives.WsfsFilesystem`` against weakincentives itself.

Every member runs the same script on a wsfs session and on weakincentives'
own reference backend (``HostFilesystem`` on a temporary directory), and
the two must agree: results, exception types and messages. Then
weakincentives' own machinery that takes a ``Filesystem`` runs on a wsfs
session: tool transactions (snapshot, and restore on failure), the
task-completion file checker, the debug bundle's workspace archive.
Skipped where weakincentives is not installed (it needs Python 3.12),
unless ``WSFS_REQUIRE_SEED_CLIENTS=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import zipfile
from typing import Any, Callable, Iterator

import pytest

import wsfs

if os.environ.get("WSFS_REQUIRE_SEED_CLIENTS") == "1":
    import weakincentives  # noqa: F401
wi_fs = pytest.importorskip("weakincentives.filesystem")

from wsfs.weakincentives import WsfsFilesystem  # noqa: E402

Filesystem = wi_fs.Filesystem
SnapshotableFilesystem = wi_fs.SnapshotableFilesystem
HostFilesystem = wi_fs.HostFilesystem


@pytest.fixture
def fs(client: wsfs.Client) -> Iterator[WsfsFilesystem]:
    with client.create_session(labels={"test": "weakincentives"}) as session:
        yield WsfsFilesystem(session)


@pytest.fixture
def host() -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix="wsfs-wi-host-") as root:
        host = HostFilesystem(_root=root)
        yield host
        host.cleanup()


def outcome(op: Callable[[Any], Any], target: Any, messages: bool) -> Any:
    """What ``op`` did on ``target``: its result made comparable, or its
    exception (type, and message unless the backends word it differently
    by design)."""
    try:
        result = op(target)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome
        return ("raised", type(e).__name__, str(e) if messages else "")
    return ("ok", comparable(result))


def comparable(value: Any) -> Any:
    if isinstance(value, wi_fs.FileStat):
        # Times are each backend's own.
        return dataclasses.replace(value, created_at=None, modified_at=None)
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    return value


#: (description, operation, compare messages). Run in order on both.
SCRIPT: list[tuple[str, Callable[[Any], Any], bool]] = [
    ("write", lambda f: f.write("a.txt", "hello\nworld\n"), True),
    ("write nested", lambda f: f.write("dir/sub/b.py", "print(1)\nprint(2)\n"), True),
    ("write md", lambda f: f.write("dir/c.md", "# title\nfoo bar\nbaz foo\n"), True),
    ("write create over a file", lambda f: f.write("a.txt", "x", mode="create"), True),
    ("write create new", lambda f: f.write("created.txt", "new", mode="create"), True),
    ("write append", lambda f: f.write("a.txt", "more\n", mode="append"), True),
    # The host names its own absolute parent directory; the type must agree.
    ("write without parents", lambda f: f.write("np/x.txt", "x", create_parents=False), False),
    ("write to the root", lambda f: f.write("/", "x"), True),
    ("write escaping", lambda f: f.write("../escape.txt", "x"), True),
    ("write long segment", lambda f: f.write("a" * 81 + ".txt", "x"), True),
    ("write deep", lambda f: f.write("/".join("d" * 17), "x"), True),
    ("write bytes", lambda f: f.write_bytes("bin.dat", b"\xff\x00\xfe\x01"), True),
    ("write bytes empty", lambda f: f.write_bytes("empty.bin", b""), True),
    ("read", lambda f: f.read("a.txt"), True),
    ("read window", lambda f: f.read("a.txt", offset=1, limit=1), True),
    ("read past the end", lambda f: f.read("a.txt", offset=10), True),
    ("read entire", lambda f: f.read("a.txt", limit=-1), True),
    ("read zero lines", lambda f: f.read("a.txt", limit=0), True),
    ("read missing", lambda f: f.read("missing.txt"), True),
    ("read directory", lambda f: f.read("dir"), True),
    ("read binary", lambda f: f.read("bin.dat"), True),
    ("read bytes", lambda f: f.read_bytes("bin.dat"), True),
    ("read bytes window", lambda f: f.read_bytes("bin.dat", offset=1, limit=2), True),
    ("read bytes past the end", lambda f: f.read_bytes("bin.dat", offset=10), True),
    ("read bytes negative", lambda f: f.read_bytes("bin.dat", offset=-1), True),
    ("read bytes missing", lambda f: f.read_bytes("missing.bin"), True),
    ("read bytes directory", lambda f: f.read_bytes("dir"), True),
    ("exists file", lambda f: f.exists("a.txt"), True),
    ("exists directory", lambda f: f.exists("dir/sub"), True),
    ("exists missing", lambda f: f.exists("nope"), True),
    ("exists escaping", lambda f: f.exists("../outside"), True),
    ("stat file", lambda f: f.stat("a.txt"), True),
    ("stat directory", lambda f: f.stat("dir/"), True),
    ("stat root", lambda f: f.stat("."), True),
    ("stat missing", lambda f: f.stat("nope"), True),
    ("list root", lambda f: f.list(), True),
    ("list dir", lambda f: f.list("dir"), True),
    ("list file", lambda f: f.list("a.txt"), True),
    ("list missing", lambda f: f.list("nope"), True),
    ("glob top", lambda f: f.glob("*.txt"), True),
    ("glob nested", lambda f: f.glob("**/*.py"), True),
    ("glob any depth", lambda f: f.glob("*.py"), True),
    ("glob under", lambda f: f.glob("*.md", path="dir"), True),
    ("glob missing base", lambda f: f.glob("*", path="nope"), True),
    ("grep", lambda f: f.grep("foo"), True),
    ("grep under", lambda f: f.grep(r"print\(\d\)", path="dir"), True),
    ("grep glob", lambda f: f.grep("o", glob="*.md"), True),
    ("grep max", lambda f: f.grep("o", max_matches=2), True),
    ("grep missing base", lambda f: f.grep("o", path="nope"), True),
    ("grep invalid", lambda f: f.grep("("), True),
    ("mkdir", lambda f: f.mkdir("made/deep"), True),
    ("mkdir again", lambda f: f.mkdir("made/deep"), True),
    ("mkdir exists", lambda f: f.mkdir("made/deep", exist_ok=False), True),
    ("mkdir over a file", lambda f: f.mkdir("a.txt"), True),
    ("mkdir without parents", lambda f: f.mkdir("p/q", parents=False), False),
    ("mkdir root", lambda f: f.mkdir("."), True),
    ("list after mkdir", lambda f: f.list("made"), True),
    ("delete file", lambda f: f.delete("created.txt"), True),
    ("delete non-empty", lambda f: f.delete("dir"), True),
    ("delete missing", lambda f: f.delete("nope"), True),
    ("delete root", lambda f: f.delete("/"), True),
    ("delete empty dir", lambda f: f.delete("made/deep"), True),
    ("delete recursive", lambda f: f.delete("dir", recursive=True), True),
    ("list at the end", lambda f: f.list("."), True),
    ("exists deleted", lambda f: f.exists("dir/c.md"), True),
]


def test_it_is_a_weakincentives_filesystem(fs: WsfsFilesystem) -> None:
    assert isinstance(fs, Filesystem)
    assert isinstance(fs, SnapshotableFilesystem)
    assert fs.root == "/"
    assert fs.read_only is False


def test_every_member_agrees_with_the_reference_backend(fs: WsfsFilesystem, host: Any) -> None:
    for name, op, messages in SCRIPT:
        expected = outcome(op, host, messages)
        got = outcome(op, fs, messages)
        assert got == expected, f"{name}: wsfs {got!r} but HostFilesystem {expected!r}"


def test_a_read_only_session_refuses_every_change(client: wsfs.Client) -> None:
    with client.create_session(read_only=True, seed_files={"a.txt": "a"}) as session:
        fs = WsfsFilesystem(session)
        assert fs.read_only is True
        assert fs.read("a.txt").content == "a"
        for change in (
            lambda: fs.write("b.txt", "b"),
            lambda: fs.write_bytes("b.bin", b"b"),
            lambda: fs.delete("a.txt"),
            lambda: fs.mkdir("d"),
            lambda: fs.open_write("b.txt"),
        ):
            with pytest.raises(PermissionError, match="Filesystem is read-only"):
                change()
        assert session.list("").entries[0].path == "a.txt"


def test_streams_read_seek_and_write_in_chunks(fs: WsfsFilesystem) -> None:
    payload = bytes(range(256)) * 1024  # 256 KiB: several chunks
    with fs.open_write("s/data.bin") as writer:
        for start in range(0, len(payload), 10_000):
            writer.write(payload[start : start + 10_000])
        assert writer.bytes_written == len(payload)
        # Nothing is visible before the writer closes.
        assert not fs.exists("s/data.bin")
    assert writer.closed
    with pytest.raises(ValueError, match="I/O operation on closed file"):
        writer.write(b"x")
    with fs.open_read("s/data.bin") as reader:
        assert (reader.path, reader.size, reader.position) == ("s/data.bin", len(payload), 0)
        assert reader.read(10) == payload[:10]
        assert reader.seek(-5, 2) == len(payload) - 5
        assert reader.read() == payload[-5:]
        assert reader.read(1) == b""
        reader.seek(100_000)
        assert b"".join(reader.chunks(4096)) == payload[100_000:]
        reader.seek(0)
        assert b"".join(reader) == payload
    with pytest.raises(ValueError, match="I/O operation on closed file"):
        reader.read()
    with pytest.raises(FileNotFoundError):
        fs.open_read("s/missing.bin")
    with pytest.raises(IsADirectoryError, match="Is a directory: s"):
        fs.open_read("s")


def test_an_aborted_writer_leaves_the_file_as_it_was(fs: WsfsFilesystem) -> None:
    fs.write("keep.txt", "original\n")
    with pytest.raises(RuntimeError, match="tool failed"):
        with fs.open_write("keep.txt") as writer:
            writer.write(b"half of a new content")
            raise RuntimeError("tool failed")
    assert fs.read("keep.txt").content == "original"
    with pytest.raises(RuntimeError):
        with fs.open_write("fresh.txt", mode="create") as writer:
            writer.write(b"never")
            raise RuntimeError("tool failed")
    assert not fs.exists("fresh.txt")
    with pytest.raises(FileExistsError, match="File already exists: keep.txt"):
        fs.open_write("keep.txt", mode="create")
    with pytest.raises(FileNotFoundError, match="Parent directory does not exist"):
        fs.open_write("no/such/dir.txt", create_parents=False)


def test_text_streams_decode_lazily(fs: WsfsFilesystem) -> None:
    fs.write("log.txt", "ok 1\nERROR two\nok 3\nERROR ✓ four\n")
    with fs.open_text("log.txt") as reader:
        lines = reader.lines(strip=True)
        errors = [(reader.line_number, line) for line in lines if "ERROR" in line]
    assert errors == [(2, "ERROR two"), (4, "ERROR ✓ four")]
    with pytest.raises(ValueError, match="Only 'utf-8' encoding is supported"):
        fs.open_text("log.txt", encoding="latin-1")


def test_snapshot_and_restore(fs: WsfsFilesystem) -> None:
    fs.write("state.txt", "one")
    snap = fs.snapshot(tag="before")
    assert isinstance(snap, wi_fs.FilesystemSnapshot)
    assert (snap.tag, snap.root_path, snap.commit_ref) == ("before", "/", str(snap.snapshot_id))
    fs.write("state.txt", "two")
    fs.write("extra.txt", "x")
    fs.restore(snap)
    assert fs.read("state.txt").content == "one"
    assert not fs.exists("extra.txt")
    unknown = dataclasses.replace(snap, commit_ref="00000000-0000-4000-8000-000000000000")
    from weakincentives.errors import SnapshotRestoreError

    with pytest.raises(SnapshotRestoreError):
        fs.restore(unknown)


def test_a_failed_tool_transaction_rolls_the_session_back(fs: WsfsFilesystem) -> None:
    from weakincentives.resources import ResourceRegistry
    from weakincentives.runtime import Session, tool_transaction

    fs.write("notes.md", "before\n")
    registry = ResourceRegistry.build({Filesystem: fs})
    with registry.open() as ctx:
        assert ctx.get(Filesystem) is fs
        session = Session()
        with pytest.raises(RuntimeError, match="the tool broke"):
            with tool_transaction(session, ctx, tag="edit-notes"):
                ctx.get(Filesystem).write("notes.md", "after\n")
                ctx.get(Filesystem).write("scratch/tmp.txt", "x")
                raise RuntimeError("the tool broke")
        # A transaction that succeeds keeps its changes.
        with tool_transaction(session, ctx, tag="append"):
            ctx.get(Filesystem).write("notes.md", "kept\n", mode="append")
    assert fs.read("notes.md", limit=-1).content == "before\nkept"
    assert not fs.exists("scratch/tmp.txt")


def test_the_task_completion_checker_sees_the_session_files(fs: WsfsFilesystem) -> None:
    from weakincentives.prompt import FileOutputChecker, TaskCompletionContext
    from weakincentives.runtime import Session

    checker = FileOutputChecker(files=("out/report.md", "out/data.json"))
    context = TaskCompletionContext(session=Session(), filesystem=fs)
    first = checker.check(context)
    assert not first.complete
    assert "2 required output file(s) not found" in first.feedback
    fs.write("out/report.md", "# report")
    fs.write_bytes("out/data.json", b"{}")
    assert checker.check(context).complete


def test_the_debug_bundle_archives_the_session_workspace(fs: WsfsFilesystem, tmp_path: Any) -> None:
    from weakincentives.debug import BundleWriter

    fs.write("src/main.py", "print('hi')\n")
    fs.write_bytes("assets/logo.bin", b"\x89PNG\x00")
    with BundleWriter(target=tmp_path) as writer:
        writer.write_filesystem(fs)
    assert writer.path is not None
    with zipfile.ZipFile(writer.path) as bundle:
        files = {
            name.split("/filesystem/", 1)[1]: bundle.read(name)
            for name in bundle.namelist()
            if "/filesystem/" in name
        }
    assert files == {"src/main.py": b"print('hi')\n", "assets/logo.bin": b"\x89PNG\x00"}
