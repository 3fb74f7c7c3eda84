//! What only the wire can express, checked with the generated clients on a
//! live server: raw path strings (the trait only ever sees canonical
//! paths), unknown sessions, negative offsets, per-session limits, and
//! streams a client drops half-way.

use bytes::Bytes;
use std::fmt::Debug;
use tonic::transport::Channel;
use tonic::{Code, Response, Status, Streaming};
use tonic_types::StatusExt;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::*;
use wsfs_tests::harness::TestServer;

/// A UUID no server has handed out.
const UNKNOWN_SESSION: &str = "00000000-0000-4000-8000-000000000000";

/// A live server, raw clients, and one session on it.
struct Wire {
    _server: TestServer,
    fs: FilesystemClient<Channel>,
    sessions: SessionsClient<Channel>,
    session: String,
}

async fn wire() -> Wire {
    wire_with(session::Backend::Memory, None).await
}

async fn wire_with(backend: session::Backend, limits: Option<SessionLimits>) -> Wire {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let session = sessions
        .create_session(CreateSessionRequest {
            backend: backend as i32,
            limits,
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner()
        .session_id;
    Wire {
        _server: server,
        fs: FilesystemClient::new(channel),
        sessions,
        session,
    }
}

/// Both backends, for the checks whose outcome must not depend on one.
const BACKENDS: [session::Backend; 2] = [session::Backend::Memory, session::Backend::Directory];

impl Wire {
    async fn write(&mut self, path: &str, content: &str) -> Result<WriteResponse, Status> {
        self.fs
            .write(WriteRequest {
                session_id: self.session.clone(),
                path: path.into(),
                content: content.into(),
                ..Default::default()
            })
            .await
            .map(Response::into_inner)
    }

    async fn read(&mut self, path: &str) -> Result<ReadResponse, Status> {
        self.fs
            .read(ReadRequest {
                session_id: self.session.clone(),
                path: path.into(),
                limit: Some(-1),
                ..Default::default()
            })
            .await
            .map(Response::into_inner)
    }

    async fn exists(&mut self, path: &str) -> Result<bool, Status> {
        self.fs
            .exists(ExistsRequest {
                session_id: self.session.clone(),
                path: path.into(),
            })
            .await
            .map(|r| r.into_inner().exists)
    }

    async fn stat(&mut self, path: &str) -> Result<StatResponse, Status> {
        self.fs
            .stat(StatRequest {
                session_id: self.session.clone(),
                path: path.into(),
            })
            .await
            .map(Response::into_inner)
    }

    async fn list(&mut self, path: &str) -> Result<ListResponse, Status> {
        self.fs
            .list(ListRequest {
                session_id: self.session.clone(),
                path: path.into(),
                depth: 1,
                ..Default::default()
            })
            .await
            .map(Response::into_inner)
    }

    /// Paths of the whole workspace, depth-first is fine: for "nothing
    /// was created" checks.
    async fn everything(&mut self) -> Vec<String> {
        let response = self
            .fs
            .list(ListRequest {
                session_id: self.session.clone(),
                path: String::new(),
                depth: 64,
                ..Default::default()
            })
            .await
            .expect("list the workspace")
            .into_inner();
        response.entries.into_iter().map(|e| e.path).collect()
    }

    async fn read_bytes(
        &mut self,
        request: ReadBytesRequest,
    ) -> Result<Streaming<ReadBytesResponse>, Status> {
        let request = ReadBytesRequest {
            session_id: self.session.clone(),
            ..request
        };
        self.fs.read_bytes(request).await.map(Response::into_inner)
    }

    /// The whole file through ReadBytes.
    async fn read_all(&mut self, path: &str) -> Vec<u8> {
        let mut stream = self
            .read_bytes(ReadBytesRequest {
                path: path.into(),
                ..Default::default()
            })
            .await
            .expect("open ReadBytes");
        let mut data = Vec::new();
        while let Some(message) = stream.message().await.expect("ReadBytes message") {
            if let Some(read_bytes_response::Payload::Data(chunk)) = message.payload {
                data.extend_from_slice(&chunk);
            }
        }
        data
    }

    async fn grep(&mut self, request: GrepRequest) -> Result<Streaming<GrepResponse>, Status> {
        let request = GrepRequest {
            session_id: self.session.clone(),
            ..request
        };
        self.fs.grep(request).await.map(Response::into_inner)
    }

    async fn write_bytes(
        &mut self,
        header: WriteBytesHeader,
        chunks: Vec<Bytes>,
    ) -> Result<WriteResponse, Status> {
        let header = WriteBytesHeader {
            session_id: self.session.clone(),
            ..header
        };
        let messages = std::iter::once(write_bytes_request::Payload::Header(header))
            .chain(chunks.into_iter().map(write_bytes_request::Payload::Data))
            .map(|payload| WriteBytesRequest {
                payload: Some(payload),
            })
            .collect::<Vec<_>>();
        self.fs
            .write_bytes(tokio_stream::iter(messages))
            .await
            .map(Response::into_inner)
    }
}

/// Asserts the status code and the `ErrorInfo` reason; returns the status.
#[track_caller]
fn expect_status<T: Debug>(result: Result<T, Status>, code: Code, reason: &str) -> Status {
    let status = match result {
        Ok(value) => panic!("expected {code:?} {reason}, got Ok({value:?})"),
        Err(status) => status,
    };
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(
        (status.code(), info.reason.as_str()),
        (code, reason),
        "{status:?}"
    );
    status
}

/// The error a server stream reports, whether it fails the call or arrives
/// as the stream's first item.
async fn stream_error<T: Debug>(opened: Result<Streaming<T>, Status>) -> Result<T, Status> {
    match opened {
        Err(status) => Err(status),
        Ok(mut stream) => match stream.message().await {
            Err(status) => Err(status),
            Ok(message) => Ok(message.expect("a message or an error")),
        },
    }
}

fn metadata_path(status: &Status) -> Option<String> {
    status
        .get_details_error_info()
        .and_then(|info| info.metadata.get("path").cloned())
}

// ---- paths ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_slash_names_the_same_file() {
    let mut w = wire().await;

    let written = w.write("/src/a.rs", "fn main() {}\n").await.unwrap();

    assert_eq!(written.path, "src/a.rs");
    assert_eq!(w.read("src/a.rs").await.unwrap().content, "fn main() {}\n");
    assert_eq!(w.read("/src/a.rs").await.unwrap().path, "src/a.rs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dot_and_slash_all_name_the_root() {
    let mut w = wire().await;
    w.write("f.txt", "x").await.unwrap();

    for root in ["", ".", "/", "//", "./", "a/..", "/./"] {
        let listing = w.list(root).await.unwrap();
        assert_eq!(listing.path, "", "{root:?}");
        let names: Vec<_> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["f.txt"], "{root:?}");
        let stat = w.stat(root).await.unwrap();
        assert_eq!(stat.path, "", "{root:?}");
        assert_eq!(stat.kind, FileKind::Directory as i32, "{root:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_dot_resolves_lexically() {
    let mut w = wire().await;

    let written = w.write("a/b/../c", "text").await.unwrap();

    assert_eq!(written.path, "a/c");
    assert!(!w.exists("a/b").await.unwrap(), "a/b was created");
    // `x` need not exist: `..` is resolved on the string, not the disk.
    assert_eq!(w.read("a/x/../c").await.unwrap().content, "text");
    assert_eq!(w.read("./a//c/").await.unwrap().path, "a/c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_climbing_above_the_root_are_refused() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, None).await;
        for raw in [
            "..",
            "../x",
            "a/../../x",
            "/../etc/passwd",
            "a/b/../../../c",
        ] {
            let reason = "PATH_ESCAPES_ROOT";
            let code = Code::InvalidArgument;
            let s = expect_status(w.write(raw, "x").await, code, reason);
            assert_eq!(metadata_path(&s).as_deref(), Some(raw), "{s:?}");
            expect_status(w.read(raw).await, code, reason);
            expect_status(w.exists(raw).await, code, reason);
            expect_status(w.stat(raw).await, code, reason);
            expect_status(w.list(raw).await, code, reason);
            let session_id = w.session.clone();
            let mkdir =
                w.fs.mkdir(MkdirRequest {
                    session_id: session_id.clone(),
                    path: raw.into(),
                    ..Default::default()
                })
                .await;
            expect_status(mkdir, code, reason);
            let delete =
                w.fs.delete(DeleteRequest {
                    session_id: session_id.clone(),
                    path: raw.into(),
                    recursive: true,
                    ..Default::default()
                })
                .await;
            expect_status(delete, code, reason);
            w.write("inside.txt", "x").await.unwrap();
            let moved =
                w.fs.r#move(TransferRequest {
                    session_id,
                    source: "inside.txt".into(),
                    destination: raw.into(),
                    ..Default::default()
                })
                .await;
            expect_status(moved, code, reason);
            let read_bytes = w
                .read_bytes(ReadBytesRequest {
                    path: raw.into(),
                    ..Default::default()
                })
                .await;
            expect_status(stream_error(read_bytes).await, code, reason);
        }
        assert_eq!(w.everything().await, ["inside.txt"], "{backend:?}");
    }
}

/// A DeleteMany holding one entry whose path does not parse is refused
/// whole before anything runs: the valid entries before it are not
/// deleted, and the error names the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_many_with_one_bad_path_deletes_nothing() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, None).await;
        w.write("a.txt", "x").await.unwrap();
        w.write("b.txt", "y").await.unwrap();
        let entry = |path: &str| DeleteEntry {
            path: path.into(),
            ..Default::default()
        };
        for (bad, reason) in [("../x", "PATH_ESCAPES_ROOT"), ("a\0b", "INVALID_PATH")] {
            let answer =
                w.fs.delete_many(DeleteManyRequest {
                    session_id: w.session.clone(),
                    entries: vec![entry("a.txt"), entry(bad), entry("b.txt")],
                })
                .await;
            let s = expect_status(answer, Code::InvalidArgument, reason);
            if reason == "INVALID_PATH" {
                assert!(s.message().contains("entry 1"), "{s:?}");
            }
            assert_eq!(w.everything().await, ["a.txt", "b.txt"], "{backend:?}");
        }
        // Well formed, it runs: one result per entry, in order.
        let answer =
            w.fs.delete_many(DeleteManyRequest {
                session_id: w.session.clone(),
                entries: vec![entry("a.txt"), entry("a.txt")],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.results.len(), 2);
        assert_eq!(answer.results[0].deleted, 1);
        assert!(answer.results[0].error.is_none());
        let missing = answer.results[1]
            .error
            .as_ref()
            .expect("the second finds nothing");
        assert_eq!(missing.code, Code::NotFound as i32);
        assert_eq!(missing.reason, "FILE_NOT_FOUND");
        assert_eq!(
            missing.metadata.get("path").map(String::as_str),
            Some("a.txt")
        );
        assert_eq!(w.everything().await, ["b.txt"], "{backend:?}");
    }
}

/// The server's own entry limit (the Rust client checks it before
/// sending, so only a raw request reaches it): refused whole, nothing
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_many_over_the_entry_limit_is_refused_by_the_server() {
    let mut w = wire().await;
    w.write("a.txt", "x").await.unwrap();
    let entries = vec![
        DeleteEntry {
            path: "a.txt".into(),
            allow_missing: true,
            ..Default::default()
        };
        wsfs::MAX_DELETE_ENTRIES + 1
    ];

    let answer =
        w.fs.delete_many(DeleteManyRequest {
            session_id: w.session.clone(),
            entries,
        })
        .await;

    let s = expect_status(answer, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert!(s.message().contains("at most 1024"), "{s:?}");
    assert_eq!(w.everything().await, ["a.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_in_a_path_is_invalid_path() {
    let mut w = wire().await;

    let write = w.write("a\0b", "x").await;
    let read = w.read("dir/\0").await;
    let exists = w.exists("\0").await;

    expect_status(write, Code::InvalidArgument, "INVALID_PATH");
    expect_status(read, Code::InvalidArgument, "INVALID_PATH");
    expect_status(exists, Code::InvalidArgument, "INVALID_PATH");
    assert!(w.everything().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depth_over_sixteen_is_invalid_path() {
    let mut w = wire().await;
    let depth16 = vec!["d"; 16].join("/");
    let depth17 = vec!["e"; 17].join("/");

    let ok = w.write(&depth16, "x").await;
    let refused = w.write(&depth17, "x").await;

    assert_eq!(ok.unwrap().path, depth16);
    expect_status(refused, Code::InvalidArgument, "INVALID_PATH");
    assert!(!w.exists("e").await.unwrap(), "a parent was created");
    // The limit applies to the canonical path, after `..` resolves.
    assert!(w.write(&format!("{depth17}/.."), "x").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_over_eighty_characters_is_invalid_path() {
    let mut w = wire().await;

    let ok = w.write(&format!("dir/{}", "é".repeat(80)), "x").await;
    let refused = w.write(&format!("other/{}", "x".repeat(81)), "x").await;

    assert!(ok.is_ok(), "{ok:?}");
    expect_status(refused, Code::InvalidArgument, "INVALID_PATH");
    assert!(!w.exists("other").await.unwrap(), "a parent was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_limits_are_per_session() {
    let limits = SessionLimits {
        max_path_depth: 3,
        max_segment_length: 8,
        ..Default::default()
    };
    let mut w = wire_with(session::Backend::Memory, Some(limits)).await;

    assert!(w.write("a/b/c", "x").await.is_ok());
    let deep = w.write("a/b/c/d", "x").await;
    let long = w.write("abcdefghi", "x").await;

    expect_status(deep, Code::InvalidArgument, "INVALID_PATH");
    expect_status(long, Code::InvalidArgument, "INVALID_PATH");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_name_canonical_paths() {
    let mut w = wire().await;
    let id = w.session.clone();

    assert_eq!(w.write("//x//./y/", "needle\n").await.unwrap().path, "x/y");
    assert_eq!(w.stat("/x/y/").await.unwrap().path, "x/y");
    assert_eq!(w.read("x/./y").await.unwrap().path, "x/y");
    let listing = w.list("/x/").await.unwrap();
    assert_eq!(listing.path, "x");
    assert_eq!(listing.entries[0].path, "x/y");
    assert_eq!(listing.entries[0].name, "y");
    let glob =
        w.fs.glob(GlobRequest {
            session_id: id.clone(),
            pattern: "*".into(),
            path: "/x/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(glob.paths, ["x/y"]);
    let grep = w
        .grep(GrepRequest {
            pattern: "needle".into(),
            path: "./x".into(),
            ..Default::default()
        })
        .await;
    match stream_error(grep).await.unwrap().payload {
        Some(grep_response::Payload::Match(m)) => assert_eq!(m.path, "x/y"),
        other => panic!("{other:?}"),
    }
    let header = w
        .read_bytes(ReadBytesRequest {
            path: "/x//y".into(),
            ..Default::default()
        })
        .await;
    match stream_error(header).await.unwrap().payload {
        Some(read_bytes_response::Payload::Header(h)) => assert_eq!(h.path, "x/y"),
        other => panic!("{other:?}"),
    }
    let edit =
        w.fs.edit(EditRequest {
            session_id: id.clone(),
            path: "/x/y".into(),
            old_text: "needle".into(),
            new_text: "pin".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(edit.path, "x/y");
    let mkdir =
        w.fs.mkdir(MkdirRequest {
            session_id: id.clone(),
            path: "/m//n/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mkdir.path, "m/n");
    let moved =
        w.fs.r#move(TransferRequest {
            session_id: id.clone(),
            source: "/x/y".into(),
            destination: "./x/z/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (moved.source.as_str(), moved.destination.as_str()),
        ("x/y", "x/z")
    );
    let missing = w.read("/missing//m.txt").await;
    let s = expect_status(missing, Code::NotFound, "FILE_NOT_FOUND");
    assert_eq!(metadata_path(&s).as_deref(), Some("missing/m.txt"));
}

// ---- sessions and arguments ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_is_session_not_found() {
    let mut w = wire().await;
    w.session = UNKNOWN_SESSION.into();
    let (code, reason) = (Code::NotFound, "SESSION_NOT_FOUND");

    expect_status(w.write("f.txt", "x").await, code, reason);
    expect_status(w.read("f.txt").await, code, reason);
    expect_status(w.exists("f.txt").await, code, reason);
    expect_status(w.list("").await, code, reason);
    let read_bytes = w
        .read_bytes(ReadBytesRequest {
            path: "f.txt".into(),
            ..Default::default()
        })
        .await;
    expect_status(stream_error(read_bytes).await, code, reason);
    let grep = w
        .grep(GrepRequest {
            pattern: "x".into(),
            ..Default::default()
        })
        .await;
    expect_status(stream_error(grep).await, code, reason);
    let upload = w
        .write_bytes(
            WriteBytesHeader {
                path: "f.bin".into(),
                ..Default::default()
            },
            vec![Bytes::from_static(b"data")],
        )
        .await;
    expect_status(upload, code, reason);
    let get = w
        .sessions
        .get_session(GetSessionRequest {
            session_id: UNKNOWN_SESSION.into(),
        })
        .await;
    expect_status(get, code, reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_bytes_negative_offset_or_limit_is_invalid_argument() {
    let mut w = wire().await;
    w.write("f.bin", "0123456789").await.unwrap();

    for (offset, limit) in [(-1, 0), (0, -1), (-5, -5)] {
        let opened = w
            .read_bytes(ReadBytesRequest {
                path: "f.bin".into(),
                offset,
                limit,
                ..Default::default()
            })
            .await;
        expect_status(
            stream_error(opened).await,
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_bytes_past_the_end_is_out_of_range() {
    let mut w = wire().await;
    w.write("f.bin", "0123456789").await.unwrap();

    let opened = w
        .read_bytes(ReadBytesRequest {
            path: "f.bin".into(),
            offset: 11,
            ..Default::default()
        })
        .await;

    expect_status(stream_error(opened).await, Code::OutOfRange, "OUT_OF_RANGE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_limit_unset_is_2000_lines_and_minus_one_is_all() {
    let mut w = wire().await;
    let text: String = (0..2001).map(|i| format!("{i}\n")).collect();
    w.write("f.txt", &text).await.unwrap();
    let request = |limit| ReadRequest {
        session_id: w.session.clone(),
        path: "f.txt".into(),
        offset: 0,
        limit,
    };
    let (unset, all) = (request(None), request(Some(-1)));

    let unset = w.fs.read(unset).await.unwrap().into_inner();
    let all = w.fs.read(all).await.unwrap().into_inner();

    assert_eq!((unset.limit, unset.truncated), (2000, true));
    assert_eq!((all.limit, all.truncated), (2001, false));
    assert_eq!(all.content, text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_negative_offset_or_limit_below_minus_one_is_invalid_argument() {
    let mut w = wire().await;
    w.write("f.txt", "a\nb\n").await.unwrap();

    for (offset, limit) in [(-1, None), (0, Some(-2))] {
        let result =
            w.fs.read(ReadRequest {
                session_id: w.session.clone(),
                path: "f.txt".into(),
                offset,
                limit,
            })
            .await;
        expect_status(result, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_the_root_is_invalid_argument() {
    let mut w = wire().await;

    for root in ["", "/", "."] {
        let write = w.write(root, "x").await;
        expect_status(write, Code::InvalidArgument, "INVALID_ARGUMENT");
        let upload = w
            .write_bytes(
                WriteBytesHeader {
                    path: root.into(),
                    ..Default::default()
                },
                vec![Bytes::from_static(b"x")],
            )
            .await;
        expect_status(upload, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
    assert!(w.everything().await.is_empty());
}

// ---- the per-write limit ----

fn small_write_limit() -> Option<SessionLimits> {
    Some(SessionLimits {
        max_write_bytes: 1024,
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_over_the_session_limit_is_too_large_and_writes_nothing() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, small_write_limit()).await;
        let at_limit = "a".repeat(1024);
        w.write("f.txt", &at_limit).await.unwrap();

        let over = w.write("f.txt", &"b".repeat(1025)).await;
        let new_over = w.write("new/g.txt", &"b".repeat(1025)).await;

        expect_status(over, Code::InvalidArgument, "TOO_LARGE");
        expect_status(new_over, Code::InvalidArgument, "TOO_LARGE");
        assert_eq!(w.read("f.txt").await.unwrap().content, at_limit);
        assert_eq!(w.everything().await, ["f.txt"], "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_write_limit_counts_the_bytes_of_one_call() {
    let mut w = wire_with(session::Backend::Memory, small_write_limit()).await;
    w.write("log.txt", &"a".repeat(1000)).await.unwrap();

    let appended =
        w.fs.write(WriteRequest {
            session_id: w.session.clone(),
            path: "log.txt".into(),
            content: "b".repeat(1000),
            mode: WriteMode::Append as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    assert_eq!((appended.bytes_written, appended.size_bytes), (1000, 2000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_bytes_over_the_session_limit_is_too_large_and_writes_nothing() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, small_write_limit()).await;
        w.write("f.bin", "old").await.unwrap();
        let chunks = || vec![Bytes::from(vec![7u8; 600]), Bytes::from(vec![8u8; 600])];
        let header = |path: &str| WriteBytesHeader {
            path: path.into(),
            ..Default::default()
        };

        let over = w.write_bytes(header("f.bin"), chunks()).await;
        let new_over = w.write_bytes(header("new/g.bin"), chunks()).await;

        expect_status(over, Code::InvalidArgument, "TOO_LARGE");
        expect_status(new_over, Code::InvalidArgument, "TOO_LARGE");
        assert_eq!(w.read_all("f.bin").await, b"old");
        assert_eq!(w.everything().await, ["f.bin"], "{backend:?}");
    }
}

// ---- directory sessions ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_session_files_live_under_root_path() {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let created = SessionsClient::new(channel.clone())
        .create_session(CreateSessionRequest {
            backend: session::Backend::Directory as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let root = std::path::PathBuf::from(&created.root_path);
    let mut fs = FilesystemClient::new(channel);

    fs.write(WriteRequest {
        session_id: created.session_id.clone(),
        path: "/a/b.txt".into(),
        content: "on disk".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    assert!(root.is_absolute(), "{root:?}");
    assert!(
        root.starts_with(server.data_dir()),
        "{root:?} is not under the data directory {:?}",
        server.data_dir()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a/b.txt")).unwrap(),
        "on disk"
    );
}

// ---- clients that go away ----

/// Enough matching lines that a search cannot finish before the client
/// drops the stream after the first message.
async fn seed_many_matches(w: &mut Wire) {
    let line = "needle in a haystack\n".repeat(200);
    for i in 0..200 {
        w.write(&format!("dir{}/f{i:03}.txt", i % 10), &line)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_grep_stream_leaves_the_server_responsive() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, None).await;
        seed_many_matches(&mut w).await;

        for _ in 0..20 {
            let mut stream = w
                .grep(GrepRequest {
                    pattern: "needle".into(),
                    max_matches: u32::MAX,
                    ..Default::default()
                })
                .await
                .unwrap();
            let first = stream.message().await.unwrap().unwrap();
            assert!(matches!(
                first.payload,
                Some(grep_response::Payload::Match(_))
            ));
            drop(stream);
        }

        assert!(w.stat("dir0/f000.txt").await.is_ok());
        let mut full = w
            .grep(GrepRequest {
                pattern: "needle".into(),
                max_matches: 5,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut last = None;
        while let Some(message) = full.message().await.unwrap() {
            last = message.payload;
        }
        match last {
            Some(grep_response::Payload::Summary(s)) => {
                assert_eq!((s.matches, s.truncated), (5, true), "{backend:?}")
            }
            other => panic!("no summary at the end: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_read_bytes_stream_leaves_the_server_responsive() {
    for backend in BACKENDS {
        let mut w = wire_with(backend, None).await;
        let big = vec![b'a'; 8 * 1024 * 1024];
        w.write_bytes(
            WriteBytesHeader {
                path: "big.bin".into(),
                ..Default::default()
            },
            big.chunks(1024 * 1024)
                .map(Bytes::copy_from_slice)
                .collect(),
        )
        .await
        .unwrap();

        for _ in 0..20 {
            let mut stream = w
                .read_bytes(ReadBytesRequest {
                    path: "big.bin".into(),
                    chunk_size: 64 * 1024,
                    ..Default::default()
                })
                .await
                .unwrap();
            let header = stream.message().await.unwrap().unwrap();
            assert!(matches!(
                header.payload,
                Some(read_bytes_response::Payload::Header(_))
            ));
            let first = stream.message().await.unwrap().unwrap();
            assert!(matches!(
                first.payload,
                Some(read_bytes_response::Payload::Data(_))
            ));
            drop(stream);
        }

        w.write_bytes(
            WriteBytesHeader {
                path: "big.bin".into(),
                ..Default::default()
            },
            vec![Bytes::from_static(b"replaced")],
        )
        .await
        .unwrap();
        assert_eq!(w.read_all("big.bin").await, b"replaced", "{backend:?}");
    }
}
