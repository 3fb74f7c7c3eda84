"""Interop from Python: stubs generated from proto/ with grpcio-tools drive a
live wsfs server.

Usage: python3 tests/python/interop.py ADDRESS   (e.g. 127.0.0.1:50051)

Generates the wsfs.v1 and google.rpc stubs into a temporary directory,
then checks: create a session, Write, Read, a ReadBytes stream, a
WriteBytes stream, Grep, and that an error carries its google.rpc.ErrorInfo
reason in the `grpc-status-details-bin` trailer. Ends with
`python interop: N passed, M failed`; exits 1 when anything failed.
"""

import importlib
import os
import sys
import tempfile
import traceback

import grpc
from grpc_tools import protoc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(REPO, "proto")
PROTOS = [
    "wsfs/v1/filesystem.proto",
    "wsfs/v1/sessions.proto",
    "google/rpc/status.proto",
    "google/rpc/error_details.proto",
]


def generate_stubs(out_dir):
    """protoc, as a person would run it: `python3 -m grpc_tools.protoc`."""
    # grpc_tools ships the well-known types (timestamp, any, duration).
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
    ] + PROTOS
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed to generate the stubs")
    sys.path.insert(0, out_dir)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    address = sys.argv[1]
    with tempfile.TemporaryDirectory() as out_dir:
        generate_stubs(out_dir)
        fs = importlib.import_module("wsfs.v1.filesystem_pb2")
        fs_grpc = importlib.import_module("wsfs.v1.filesystem_pb2_grpc")
        sessions = importlib.import_module("wsfs.v1.sessions_pb2")
        sessions_grpc = importlib.import_module("wsfs.v1.sessions_pb2_grpc")
        status_pb2 = importlib.import_module("google.rpc.status_pb2")
        details_pb2 = importlib.import_module("google.rpc.error_details_pb2")

        channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(channel).result(timeout=10)
        sessions_stub = sessions_grpc.SessionsStub(channel)
        files = fs_grpc.FilesystemStub(channel)

        passed, failed = 0, 0
        state = {}

        def check(name, fn):
            nonlocal passed, failed
            try:
                fn()
                passed += 1
                print(f"ok   {name}")
            except Exception:  # noqa: BLE001 - report every failure and go on
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()

        def create_session():
            session = sessions_stub.CreateSession(
                sessions.CreateSessionRequest(labels={"client": "python"})
            )
            assert len(session.session_id) == 36, session
            assert session.labels["client"] == "python"
            state["sid"] = session.session_id

        def write_and_read():
            sid = state["sid"]
            written = files.Write(
                fs.WriteRequest(session_id=sid, path="/notes//todo.md", content="- a\n- b\n- c\n")
            )
            assert written.path == "notes/todo.md", written
            assert written.size_bytes == 12 and written.created
            page = files.Read(fs.ReadRequest(session_id=sid, path="notes/todo.md", offset=1, limit=1))
            assert page.content == "- b\n", page
            assert page.total_lines == 3 and page.truncated
            assert page.version == written.version

        def read_bytes_stream():
            sid = state["sid"]
            data = bytes(range(256)) * 1024  # 256 KiB, not UTF-8
            files.WriteBytes(
                iter(
                    [fs.WriteBytesRequest(header=fs.WriteBytesHeader(session_id=sid, path="blob.bin"))]
                    + [fs.WriteBytesRequest(data=data)]
                )
            )
            responses = list(
                files.ReadBytes(fs.ReadBytesRequest(session_id=sid, path="blob.bin", chunk_size=65536))
            )
            header = responses[0]
            assert header.WhichOneof("payload") == "header", header
            assert header.header.size_bytes == len(data)
            chunks = [r.data for r in responses[1:]]
            assert all(r.WhichOneof("payload") == "data" for r in responses[1:])
            assert len(chunks) == 4, len(chunks)
            assert b"".join(chunks) == data

        def write_bytes_stream():
            sid = state["sid"]

            def requests():
                yield fs.WriteBytesRequest(
                    header=fs.WriteBytesHeader(session_id=sid, path="up/three.txt", mode=fs.CREATE)
                )
                for part in (b"one\n", b"two\n", b"three\n"):
                    yield fs.WriteBytesRequest(data=part)

            written = files.WriteBytes(requests())
            assert written.path == "up/three.txt" and written.size_bytes == 14, written
            read = files.Read(fs.ReadRequest(session_id=sid, path="up/three.txt"))
            assert read.content == "one\ntwo\nthree\n", read

        def grep():
            sid = state["sid"]
            responses = list(files.Grep(fs.GrepRequest(session_id=sid, pattern="t[wh]", path="")))
            matches = [r.match for r in responses if r.WhichOneof("payload") == "match"]
            summary = responses[-1]
            assert summary.WhichOneof("payload") == "summary", summary
            found = [(m.path, m.line_number, m.line) for m in matches]
            assert found == [("up/three.txt", 2, "two"), ("up/three.txt", 3, "three")], found
            assert summary.summary.matches == 2
            m = matches[0]
            assert m.line[m.match_start : m.match_end] == "tw"

        def error_reason():
            sid = state["sid"]
            try:
                files.Read(fs.ReadRequest(session_id=sid, path="missing.txt"))
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.NOT_FOUND, err.code()
                trailers = dict(err.trailing_metadata())
                status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
                assert status.code == grpc.StatusCode.NOT_FOUND.value[0]
                infos = []
                for detail in status.details:
                    info = details_pb2.ErrorInfo()
                    if detail.Unpack(info):
                        infos.append(info)
                assert len(infos) == 1, status
                assert infos[0].reason == "FILE_NOT_FOUND", infos[0]
                assert infos[0].metadata["path"] == "missing.txt", infos[0]
                return
            raise AssertionError("reading a missing file succeeded")

        def delete_session():
            removed = sessions_stub.DeleteSession(sessions.DeleteSessionRequest(session_id=state["sid"]))
            assert removed.files_deleted == 3, removed

        check("create a session", create_session)
        check("write, then read a page of lines", write_and_read)
        check("ReadBytes stream: header, then 64 KiB chunks", read_bytes_stream)
        check("WriteBytes stream: header, then data", write_bytes_stream)
        check("Grep stream: matches in order, then the summary", grep)
        check("an error carries google.rpc.ErrorInfo with its reason", error_reason)
        check("delete the session", delete_session)
        channel.close()

    print(f"python interop: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
