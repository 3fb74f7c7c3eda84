"""Every error arrives as the exception class of its contract reason, with
its code, reason, message, path and metadata."""

from __future__ import annotations

import grpc
import pytest
from conftest import ADMIN_TOKEN, Server
from google.rpc import error_details_pb2, status_pb2

import wsfs
from wsfs.errors import from_rpc_error

MISSING_SESSION = "00000000-0000-4000-8000-000000000000"


def test_file_not_found(session: wsfs.Session) -> None:
    with pytest.raises(wsfs.FileNotFound) as caught:
        session.read_text("missing.txt")
    e = caught.value
    assert e.code is grpc.StatusCode.NOT_FOUND and e.reason == "FILE_NOT_FOUND"
    assert e.path == "missing.txt" and e.metadata["path"] == "missing.txt"
    assert "does not exist" in e.message and isinstance(e, wsfs.WsfsError)
    assert str(e) == f"FILE_NOT_FOUND: {e.message}"
    # Streams raise the same way.
    with pytest.raises(wsfs.FileNotFound):
        session.read_bytes("missing.bin")
    with pytest.raises(wsfs.FileNotFound):
        session.stat("missing")


def test_version_mismatch_carries_current_version(session: wsfs.Session) -> None:
    v = session.write("f.txt", "1").version
    with pytest.raises(wsfs.VersionMismatch) as caught:
        session.write("f.txt", "2", if_version=v + 5)
    e = caught.value
    assert e.code is grpc.StatusCode.ABORTED and e.path == "f.txt"
    assert (e.current_version, e.expected_version) == (v, v + 5)
    with pytest.raises(wsfs.VersionMismatch) as caught:
        session.write("new.txt", "x", if_version=3)
    assert caught.value.current_version == 0  # does not exist


def test_already_exists(session: wsfs.Session) -> None:
    session.write("f.txt", "1")
    with pytest.raises(wsfs.AlreadyExists) as caught:
        session.write("f.txt", b"2", mode="create")
    assert caught.value.code is grpc.StatusCode.ALREADY_EXISTS and caught.value.path == "f.txt"


def test_invalid_path_and_escape(session: wsfs.Session) -> None:
    with pytest.raises(wsfs.PathEscapesRoot) as caught:
        session.read_text("a/../../etc/passwd")
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.path == "a/../../etc/passwd"
    with pytest.raises(wsfs.InvalidPath) as invalid:
        session.write("/".join(["d"] * 17), "too deep")
    assert invalid.value.code is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(wsfs.InvalidPath):
        session.write("nul\0byte", "x")
    with pytest.raises(TypeError):
        session.read_text(b"bytes path")  # type: ignore[arg-type]


def test_too_large_and_quota(client: wsfs.Client) -> None:
    limits = wsfs.SessionLimits(max_write_bytes=1000, max_files=2)
    with client.create_session(limits=limits) as session:
        with pytest.raises(wsfs.TooLarge) as caught:
            session.write("big.bin", b"x" * 5000)
        e = caught.value
        assert (
            e.code is grpc.StatusCode.INVALID_ARGUMENT and e.limit == 1000 and e.path == "big.bin"
        )
        assert not session.exists("big.bin")
        with pytest.raises(wsfs.TooLarge):
            session.write("big.txt", "x" * 5000)
        session.write("1.txt", "1")
        session.write("2.txt", "2")
        with pytest.raises(wsfs.QuotaExceeded) as quota:
            session.write("3.txt", "3")
        assert quota.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_session_and_snapshot_not_found(client: wsfs.Client, session: wsfs.Session) -> None:
    with pytest.raises(wsfs.SessionNotFound) as caught:
        client.session(MISSING_SESSION).read_text("a.txt")
    assert caught.value.session_id == MISSING_SESSION and caught.value.path is None
    with pytest.raises(wsfs.SessionNotFound):
        client.delete_session(MISSING_SESSION)
    with pytest.raises(wsfs.SnapshotNotFound) as snap:
        session.restore(MISSING_SESSION)
    assert snap.value.snapshot_id == MISSING_SESSION


def test_failed_precondition_reasons(session: wsfs.Session) -> None:
    session.write("dir/f.txt", "one one\n")
    session.write("bin.dat", b"\xff\xfe\x00")
    with pytest.raises(wsfs.NotADirectory):
        session.list("dir/f.txt")
    with pytest.raises(wsfs.IsADirectory):
        session.read_text("dir")
    with pytest.raises(wsfs.DirectoryNotEmpty):
        session.delete("dir")
    with pytest.raises(wsfs.NotText) as not_text:
        session.read_text("bin.dat")
    assert "ReadBytes" in not_text.value.message
    with pytest.raises(wsfs.NoMatch):
        session.edit("dir/f.txt", "two", "three")
    with pytest.raises(wsfs.AmbiguousMatch) as ambiguous:
        session.edit("dir/f.txt", "one", "two")
    assert ambiguous.value.count == 2
    for e in (not_text.value, ambiguous.value):
        assert e.code is grpc.StatusCode.FAILED_PRECONDITION


def test_recover_session_without_an_object_store_is_failed_precondition(
    client: wsfs.Client,
) -> None:
    with pytest.raises(wsfs.FailedPrecondition) as caught:
        client.recover_session(MISSING_SESSION)
    assert "object store" in caught.value.message
    with pytest.raises(wsfs.SessionNotFound):
        client.get_session(MISSING_SESSION)


def test_session_leased_names_its_holder() -> None:
    e = from_rpc_error(
        _rpc_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "held",
            "SESSION_LEASED",
            session_id=MISSING_SESSION,
            holder="replica-1",
        )
    )
    assert type(e) is wsfs.SessionLeased
    assert (e.holder, e.session_id) == ("replica-1", MISSING_SESSION)


def test_pattern_range_and_read_only(client: wsfs.Client, session: wsfs.Session) -> None:
    session.write("f.txt", "abc\n")
    with pytest.raises(wsfs.InvalidPattern) as pattern:
        list(session.grep("(unclosed"))
    assert pattern.value.pattern == "(unclosed"
    with pytest.raises(wsfs.InvalidPattern):
        session.glob("[")
    with pytest.raises(wsfs.OutOfRange) as out:
        session.read_bytes("f.txt", offset=100)
    assert out.value.code is grpc.StatusCode.OUT_OF_RANGE
    with pytest.raises(wsfs.InvalidArgument):
        session.read_bytes("f.txt", offset=-1)
    with client.create_session(read_only=True, seed_files={"a.txt": "a"}) as ro:
        with pytest.raises(wsfs.ReadOnly) as read_only:
            ro.write("a.txt", "b")
        assert read_only.value.code is grpc.StatusCode.PERMISSION_DENIED
        assert ro.read_text("a.txt") == "a"


def test_caller_names_travel_with_tokens_off(server: Server, client: wsfs.Client) -> None:
    with client.create_session() as session:
        client.session(session.id, caller="agent-7").write("a.txt", "a")
        with wsfs.Client(server.url, caller="agent-8") as named:
            named.session(session.id).write("b.txt", "b")
        assert [e.caller for e in session.changes()] == ["agent-7", "agent-8"]


def test_unreachable_server_is_unavailable() -> None:
    with wsfs.Client("127.0.0.1:9") as client:
        with pytest.raises(wsfs.Unavailable) as caught:
            client.list_sessions()
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE and caught.value.reason == ""


def test_bad_urls() -> None:
    with pytest.raises(ValueError):
        wsfs.Client("ftp://host:1")
    with pytest.raises(ValueError):
        wsfs.Client("http://host:1/path")
    with pytest.raises(ValueError):
        wsfs.Client("http://h:1", token="t", caller="c")


def test_tokens_and_unauthenticated(token_server: Server) -> None:
    with wsfs.Client(token_server.url) as anonymous:
        with pytest.raises(wsfs.Unauthenticated) as caught:
            anonymous.list_sessions()
        assert caught.value.code is grpc.StatusCode.UNAUTHENTICATED
    with wsfs.Client(token_server.url, token=ADMIN_TOKEN) as admin:
        with admin.create_session(layout="swarm") as session:
            assert session.info is not None and session.info.token
            session.write("sys/config", "system writes sys/")
            issued = admin.issue_token(session.id, "agent-1")
            assert issued.caller == "agent-1" and issued.token not in repr(issued)
            snap = session.snapshot("by the system caller")
            assert session.list_snapshots() == [snap]
            assert session.export_archive()[:2] == b"PK"
            agent = admin.session(session.id, token=issued.token)
            agent.write("home/agent-1/notes.md", "mine")
            with pytest.raises(wsfs.PermissionDenied) as denied:
                agent.write("sys/config", "not mine")
            assert denied.value.path == "sys/config"
            assert agent.read_text("sys/config") == "system writes sys/"
            with pytest.raises(wsfs.Unauthenticated):
                admin.session(session.id, token="wrong").read_text("sys/config")


def _rpc_error(code: grpc.StatusCode, message: str, reason: str | None, **metadata: str):
    trailers = ()
    if reason is not None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain="wsfs", metadata=metadata)
        status = status_pb2.Status(code=code.value[0], message=message)
        status.details.add().Pack(info)
        trailers = (("grpc-status-details-bin", status.SerializeToString()),)

    class Fake(grpc.RpcError):
        def code(self):
            return code

        def details(self):
            return message

        def trailing_metadata(self):
            return trailers

    return Fake()


def test_every_reason_maps_to_its_class() -> None:
    for name in wsfs.errors.__all__:
        cls = getattr(wsfs, name)
        if not (isinstance(cls, type) and issubclass(cls, wsfs.WsfsError)) or cls is wsfs.WsfsError:
            continue
        e = from_rpc_error(_rpc_error(cls.CODE, "m", cls.REASON, path="p"))
        assert type(e) is cls and e.reason == cls.REASON and e.code is cls.CODE and e.path == "p"


def test_unknown_reason_and_bare_codes() -> None:
    e = from_rpc_error(_rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "new", "SOMETHING_NEW"))
    assert type(e) is wsfs.WsfsError and e.reason == "SOMETHING_NEW"
    assert e.code is grpc.StatusCode.FAILED_PRECONDITION and e.message == "new"
    bare = from_rpc_error(_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "late", None))
    assert (
        type(bare) is wsfs.WsfsError
        and bare.reason == ""
        and str(bare) == "DEADLINE_EXCEEDED: late"
    )
    assert type(from_rpc_error(_rpc_error(grpc.StatusCode.INTERNAL, "x", None))) is wsfs.Internal
