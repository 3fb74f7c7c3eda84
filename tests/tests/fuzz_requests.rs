//! Hostile requests over real gRPC: random messages for every Filesystem
//! RPC and most Sessions RPCs (paths and patterns from the pieces that
//! break parsers, any unicode, huge and negative numbers, enum values no
//! proto names, uploads whose header is missing, repeated or late), sent
//! with the generated clients to one live server. No answer may be
//! INTERNAL or UNKNOWN, none may break the connection (UNAVAILABLE), every
//! error carries a `google.rpc.ErrorInfo` with a reason, every call ends in
//! bounded time, and after every sequence a bystander session on the same
//! channel is still served.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 256).

use bytes::Bytes;
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tonic_types::StatusExt;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::*;
use wsfs_tests::harness::TestServer;

/// Stands for the case's own session id; replaced before sending.
const SESSION: &str = "\u{1}the-session";

/// How long one call may take, streams included.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// At most this many messages are read from a response stream.
const STREAM_MESSAGES: usize = 64;

const PIECES: &[&str] = &[
    "",
    "/",
    "//",
    ".",
    "..",
    "a",
    "b",
    "dir",
    "f.txt",
    "\0",
    "\\",
    "é",
    "日本",
    "*",
    "**",
    "?",
    "[",
    "]",
    "{",
    "}",
    ",",
    "(",
    ")",
    "+",
    "|",
    "^",
    "$",
    "\n",
    " ",
    "~",
    "%00",
    "C:",
    "\u{202e}",
    "\u{feff}",
    "\\x",
    "(?i)",
    ".*",
    "a{1000}{1000}",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::collection::vec(prop::sample::select(PIECES), 0..8).prop_map(|p| p.concat()),
        2 => any::<String>(),
        1 => (1..200usize).prop_map(|n| "a/".repeat(n)),
        1 => (70..400usize).prop_map(|n| "x".repeat(n)),
    ]
}

fn session() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => Just(SESSION.to_string()),
        1 => text(),
        1 => Just("00000000-0000-4000-8000-000000000000".to_string()),
    ]
}

fn int64() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -3..12i64,
        1 => any::<i64>(),
        1 => prop::sample::select(vec![i64::MIN, i64::MAX, i64::MAX - 1, -1]),
    ]
}

fn uint32() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0..12u32, 1 => any::<u32>(), 1 => Just(u32::MAX)]
}

fn uint64() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0..12u64, 1 => any::<u64>(), 1 => Just(u64::MAX)]
}

/// Known values, and values the proto does not name.
fn enum_value() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..4i32, 1 => any::<i32>()]
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..64)
}

/// One call, as the generated clients send it. (Sizes differ by variant;
/// a test's few hundred calls do not make boxing worth it.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
enum Call {
    Read(ReadRequest),
    ReadBytes(ReadBytesRequest),
    Write(WriteRequest),
    WriteBytes(Vec<WriteBytesRequest>),
    Edit(EditRequest),
    Delete(DeleteRequest),
    Mkdir(MkdirRequest),
    Move(TransferRequest),
    Copy(TransferRequest),
    List(ListRequest),
    Glob(GlobRequest),
    Grep(GrepRequest),
    Stat(StatRequest),
    Exists(ExistsRequest),
    Watch(WatchRequest),
    Changes(ChangesRequest),
    CreateSession(CreateSessionRequest),
    GetSession(GetSessionRequest),
    Snapshot(SnapshotRequest),
    Restore(RestoreRequest),
    ListSnapshots(ListSnapshotsRequest),
    DeleteSnapshot(DeleteSnapshotRequest),
    Export(ExportArchiveRequest),
    Import(Vec<ImportArchiveRequest>),
    IssueToken(IssueTokenRequest),
    RecoverSession(RecoverSessionRequest),
}

fn upload() -> impl Strategy<Value = Vec<WriteBytesRequest>> {
    let header = (
        session(),
        text(),
        enum_value(),
        any::<Option<bool>>(),
        prop::option::of(uint64()),
    )
        .prop_map(
            |(session_id, path, mode, create_parents, if_version)| WriteBytesRequest {
                payload: Some(write_bytes_request::Payload::Header(WriteBytesHeader {
                    session_id,
                    path,
                    mode,
                    create_parents,
                    if_version,
                    ..Default::default()
                })),
            },
        )
        .boxed();
    let data = content().prop_map(|d| WriteBytesRequest {
        payload: Some(write_bytes_request::Payload::Data(d.into())),
    });
    let empty = Just(WriteBytesRequest { payload: None });
    (
        // Mostly a header first, as the contract asks; sometimes not.
        prop::option::weighted(0.8, header.clone()),
        prop::collection::vec(prop_oneof![3 => header, 5 => data, 1 => empty], 0..5),
    )
        .prop_map(|(first, rest)| first.into_iter().chain(rest).collect())
}

fn import() -> impl Strategy<Value = Vec<ImportArchiveRequest>> {
    let id = session().prop_map(|s| ImportArchiveRequest {
        payload: Some(import_archive_request::Payload::SessionId(s)),
    });
    let data = prop::collection::vec(any::<u8>(), 0..300).prop_map(|d| ImportArchiveRequest {
        payload: Some(import_archive_request::Payload::Data(d.into())),
    });
    (
        prop::option::weighted(0.8, id),
        prop::collection::vec(data, 0..3),
    )
        .prop_map(|(first, rest)| first.into_iter().chain(rest).collect())
}

fn create_session() -> impl Strategy<Value = CreateSessionRequest> {
    let limits = (uint64(), uint32(), uint32(), uint64(), uint64()).prop_map(
        |(max_write_bytes, max_path_depth, max_segment_length, max_files, max_total_bytes)| {
            SessionLimits {
                max_write_bytes,
                max_path_depth,
                max_segment_length,
                max_files,
                max_total_bytes,
            }
        },
    );
    let mount = (
        text(),
        text(),
        prop::collection::vec(text(), 0..2),
        uint64(),
    )
        .prop_map(
            |(host_path, mount_path, include_glob, max_bytes)| HostMount {
                host_path,
                mount_path,
                include_glob,
                max_bytes,
                ..HostMount::default()
            },
        );
    (
        enum_value(),
        prop_oneof![3 => Just(String::new()), 1 => text()],
        prop::collection::vec(mount, 0..2),
        prop::collection::hash_map(text(), content(), 0..3),
        prop::option::of(limits),
        enum_value(),
        any::<bool>(),
        uint64(),
        prop_oneof![3 => Just(String::new()), 1 => text()],
    )
        .prop_map(
            |(
                backend,
                root,
                mounts,
                seeds,
                limits,
                layout,
                read_only,
                idle_ttl_seconds,
                session_id,
            )| {
                CreateSessionRequest {
                    backend,
                    root,
                    mounts,
                    seed_files: seeds.into_iter().map(|(k, v)| (k, v.into())).collect(),
                    read_only,
                    limits,
                    layout,
                    labels: Default::default(),
                    // Never 1 s or less: a bystander must not expire mid-test.
                    idle_ttl_seconds: idle_ttl_seconds.max(3600),
                    container: None,
                    session_id,
                    from_snapshot: None,
                    owner: None,
                }
            },
        )
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (session(), text(), int64(), prop::option::of(int64())).prop_map(
            |(session_id, path, offset, limit)| Call::Read(ReadRequest {
                session_id,
                path,
                offset,
                limit
            })
        ),
        (session(), text(), int64(), int64(), uint32()).prop_map(
            |(session_id, path, offset, limit, chunk_size)| Call::ReadBytes(ReadBytesRequest {
                session_id,
                path,
                offset,
                limit,
                chunk_size
            })
        ),
        (
            session(),
            text(),
            text(),
            enum_value(),
            any::<Option<bool>>(),
            prop::option::of(uint64())
        )
            .prop_map(
                |(session_id, path, content, mode, create_parents, if_version)| {
                    Call::Write(WriteRequest {
                        session_id,
                        path,
                        content,
                        mode,
                        create_parents,
                        if_version,
                        ..Default::default()
                    })
                }
            ),
        upload().prop_map(Call::WriteBytes),
        (
            session(),
            text(),
            text(),
            text(),
            any::<(bool, bool)>(),
            prop::option::of(uint64())
        )
            .prop_map(
                |(session_id, path, old_text, new_text, (replace_all, dry_run), if_version)| {
                    Call::Edit(EditRequest {
                        session_id,
                        path,
                        old_text,
                        new_text,
                        replace_all,
                        if_version,
                        dry_run,
                    })
                }
            ),
        (
            session(),
            text(),
            any::<(bool, bool)>(),
            prop::option::of(uint64())
        )
            .prop_map(
                |(session_id, path, (recursive, allow_missing), if_version)| {
                    Call::Delete(DeleteRequest {
                        session_id,
                        path,
                        recursive,
                        allow_missing,
                        if_version,
                    })
                }
            ),
        (session(), text(), any::<(Option<bool>, Option<bool>)>()).prop_map(
            |(session_id, path, (parents, exist_ok))| Call::Mkdir(MkdirRequest {
                session_id,
                path,
                parents,
                exist_ok,
                ..Default::default()
            })
        ),
        (
            session(),
            text(),
            text(),
            any::<(bool, Option<bool>, bool)>(),
            prop::option::of(uint64())
        )
            .prop_map(
                |(
                    session_id,
                    source,
                    destination,
                    (overwrite, create_parents, copy),
                    if_version,
                )| {
                    let request = TransferRequest {
                        session_id,
                        source,
                        destination,
                        overwrite,
                        create_parents,
                        if_version,
                    };
                    if copy {
                        Call::Copy(request)
                    } else {
                        Call::Move(request)
                    }
                }
            ),
        (session(), text(), uint32(), text()).prop_map(|(session_id, path, depth, start_after)| {
            Call::List(ListRequest {
                session_id,
                path,
                depth,
                start_after,
            })
        }),
        (session(), text(), text(), uint32()).prop_map(
            |(session_id, pattern, path, max_results)| Call::Glob(GlobRequest {
                session_id,
                pattern,
                path,
                max_results
            })
        ),
        (
            session(),
            text(),
            text(),
            text(),
            any::<(bool, bool)>(),
            uint32(),
            uint32()
        )
            .prop_map(
                |(
                    session_id,
                    pattern,
                    path,
                    glob,
                    (case_insensitive, fixed_string),
                    max_matches,
                    context_lines,
                )| {
                    Call::Grep(GrepRequest {
                        session_id,
                        pattern,
                        path,
                        glob,
                        case_insensitive,
                        fixed_string,
                        max_matches,
                        context_lines,
                    })
                }
            ),
        (session(), text(), any::<bool>()).prop_map(|(session_id, path, stat)| if stat {
            Call::Stat(StatRequest { session_id, path })
        } else {
            Call::Exists(ExistsRequest { session_id, path })
        }),
        (session(), text(), any::<bool>(), text(), uint64()).prop_map(
            |(session_id, path, recursive, glob, since_seq)| Call::Watch(WatchRequest {
                session_id,
                path,
                recursive,
                glob,
                since_seq
            })
        ),
        (session(), uint64(), uint32()).prop_map(|(session_id, since_seq, max)| {
            Call::Changes(ChangesRequest {
                session_id,
                since_seq,
                max,
            })
        }),
        create_session().prop_map(Call::CreateSession),
        session().prop_map(|session_id| Call::GetSession(GetSessionRequest { session_id })),
        (session(), text(), 0..5u8).prop_map(|(session_id, other, which)| match which {
            0 => Call::Snapshot(SnapshotRequest {
                session_id,
                tag: other
            }),
            1 => Call::Restore(RestoreRequest {
                session_id,
                path: other.clone(),
                snapshot_id: other,
            }),
            2 => Call::ListSnapshots(ListSnapshotsRequest { session_id }),
            3 => Call::DeleteSnapshot(DeleteSnapshotRequest {
                session_id,
                snapshot_id: other
            }),
            _ => Call::Export(ExportArchiveRequest {
                session_id,
                snapshot_id: other
            }),
        }),
        import().prop_map(Call::Import),
        (session(), text()).prop_map(|(session_id, caller)| Call::IssueToken(IssueTokenRequest {
            session_id,
            caller
        })),
        (session(), text(), any::<bool>()).prop_map(|(session_id, snapshot_id, force)| {
            Call::RecoverSession(RecoverSessionRequest {
                session_id,
                snapshot_id,
                force,
            })
        }),
    ]
}

/// Puts the case's session id where the strategy left [`SESSION`].
fn fill(s: &mut String, id: &str) {
    if s == SESSION {
        *s = id.to_string();
    }
}

fn fill_call(call: &mut Call, id: &str) {
    match call {
        Call::Read(r) => fill(&mut r.session_id, id),
        Call::ReadBytes(r) => fill(&mut r.session_id, id),
        Call::Write(r) => fill(&mut r.session_id, id),
        Call::WriteBytes(msgs) => {
            for m in msgs {
                if let Some(write_bytes_request::Payload::Header(h)) = &mut m.payload {
                    fill(&mut h.session_id, id);
                }
            }
        }
        Call::Edit(r) => fill(&mut r.session_id, id),
        Call::Delete(r) => fill(&mut r.session_id, id),
        Call::Mkdir(r) => fill(&mut r.session_id, id),
        Call::Move(r) | Call::Copy(r) => fill(&mut r.session_id, id),
        Call::List(r) => fill(&mut r.session_id, id),
        Call::Glob(r) => fill(&mut r.session_id, id),
        Call::Grep(r) => fill(&mut r.session_id, id),
        Call::Stat(r) => fill(&mut r.session_id, id),
        Call::Exists(r) => fill(&mut r.session_id, id),
        Call::Watch(r) => fill(&mut r.session_id, id),
        Call::Changes(r) => fill(&mut r.session_id, id),
        Call::CreateSession(_) => {}
        Call::GetSession(r) => fill(&mut r.session_id, id),
        Call::Snapshot(r) => fill(&mut r.session_id, id),
        Call::Restore(r) => fill(&mut r.session_id, id),
        Call::ListSnapshots(r) => fill(&mut r.session_id, id),
        Call::DeleteSnapshot(r) => fill(&mut r.session_id, id),
        Call::Export(r) => fill(&mut r.session_id, id),
        Call::Import(msgs) => {
            for m in msgs {
                if let Some(import_archive_request::Payload::SessionId(s)) = &mut m.payload {
                    fill(s, id);
                }
            }
        }
        Call::IssueToken(r) => fill(&mut r.session_id, id),
        Call::RecoverSession(r) => fill(&mut r.session_id, id),
    }
}

/// What a well-behaved refusal looks like.
fn check_status(status: &Status) -> Result<(), String> {
    if matches!(
        status.code(),
        Code::Internal | Code::Unknown | Code::Unavailable | Code::DataLoss
    ) {
        return Err(format!(
            "answered {:?}: {}",
            status.code(),
            status.message()
        ));
    }
    match status.get_error_details().error_info() {
        Some(info) if !info.reason.is_empty() => Ok(()),
        Some(_) => Err(format!("an ErrorInfo without a reason: {status:?}")),
        None => Err(format!("no ErrorInfo: {status:?}")),
    }
}

fn unary<T>(result: Result<tonic::Response<T>, Status>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(status) => check_status(&status),
    }
}

/// Reads a response stream, at most [`STREAM_MESSAGES`] messages, or its
/// first message only (`first_only`, for Watch, which never ends).
async fn drain<T>(
    result: Result<tonic::Response<Streaming<T>>, Status>,
    first_only: bool,
) -> Result<(), String> {
    let mut stream = match result {
        Ok(response) => response.into_inner(),
        Err(status) => return check_status(&status),
    };
    let most = if first_only { 1 } else { STREAM_MESSAGES };
    for _ in 0..most {
        match stream.next().await {
            None => break,
            Some(Ok(_)) => {}
            Some(Err(status)) => return check_status(&status),
        }
    }
    Ok(())
}

struct Wire {
    fs: FilesystemClient<Channel>,
    sessions: SessionsClient<Channel>,
}

impl Wire {
    async fn send(&mut self, call: Call) -> Result<(), String> {
        let fs = &mut self.fs;
        let sessions = &mut self.sessions;
        match call {
            Call::Read(r) => unary(fs.read(r).await),
            Call::ReadBytes(r) => drain(fs.read_bytes(r).await, false).await,
            Call::Write(r) => unary(fs.write(r).await),
            Call::WriteBytes(msgs) => unary(fs.write_bytes(futures::stream::iter(msgs)).await),
            Call::Edit(r) => unary(fs.edit(r).await),
            Call::Delete(r) => unary(fs.delete(r).await),
            Call::Mkdir(r) => unary(fs.mkdir(r).await),
            Call::Move(r) => unary(fs.r#move(r).await),
            Call::Copy(r) => unary(fs.copy(r).await),
            Call::List(r) => unary(fs.list(r).await),
            Call::Glob(r) => unary(fs.glob(r).await),
            Call::Grep(r) => drain(fs.grep(r).await, false).await,
            Call::Stat(r) => unary(fs.stat(r).await),
            Call::Exists(r) => unary(fs.exists(r).await),
            Call::Watch(r) => drain(fs.watch(r).await, true).await,
            Call::Changes(r) => unary(fs.changes(r).await),
            Call::CreateSession(r) => unary(sessions.create_session(r).await),
            Call::GetSession(r) => unary(sessions.get_session(r).await),
            Call::Snapshot(r) => unary(sessions.snapshot(r).await),
            Call::Restore(r) => unary(sessions.restore(r).await),
            Call::ListSnapshots(r) => unary(sessions.list_snapshots(r).await),
            Call::DeleteSnapshot(r) => unary(sessions.delete_snapshot(r).await),
            Call::Export(r) => drain(sessions.export_archive(r).await, false).await,
            Call::Import(msgs) => unary(sessions.import_archive(futures::stream::iter(msgs)).await),
            Call::IssueToken(r) => unary(sessions.issue_token(r).await),
            Call::RecoverSession(r) => unary(sessions.recover_session(r).await),
        }
    }

    async fn create(&mut self, backend: session::Backend) -> String {
        let mut seed_files = std::collections::HashMap::new();
        seed_files.insert("dir/f.txt".to_string(), Bytes::from_static(b"a\nb\n"));
        seed_files.insert("a".to_string(), Bytes::from_static(b"x"));
        self.sessions
            .create_session(CreateSessionRequest {
                backend: backend as i32,
                seed_files,
                ..Default::default()
            })
            .await
            .expect("create a session")
            .into_inner()
            .session_id
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[test]
fn random_requests_are_refused_cleanly_and_the_server_keeps_serving() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = rt.block_on(TestServer::start());
    let channel = rt.block_on(server.channel());
    // Every case talks over this one connection.
    let wire = || Wire {
        fs: FilesystemClient::new(channel.clone()),
        sessions: SessionsClient::new(channel.clone()),
    };
    let bystander = rt.block_on(wire().create(session::Backend::Memory));
    let mut runner = TestRunner::new(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (any::<bool>(), prop::collection::vec(call(), 1..24));
    runner
        .run(&strategy, |(directory, calls)| {
            let mut wire = wire();
            rt.block_on(async {
                let backend = if directory {
                    session::Backend::Directory
                } else {
                    session::Backend::Memory
                };
                let id = wire.create(backend).await;
                for (i, mut call) in calls.into_iter().enumerate() {
                    fill_call(&mut call, &id);
                    let shown = format!("{call:?}");
                    match tokio::time::timeout(CALL_TIMEOUT, wire.send(call)).await {
                        Err(_) => return Err(format!("call {i} {shown} did not end in time")),
                        Ok(Err(e)) => return Err(format!("call {i} {shown}: {e}")),
                        Ok(Ok(())) => {}
                    }
                }
                // The bystander is served on the same channel.
                let stat = wire
                    .fs
                    .stat(StatRequest {
                        session_id: bystander.clone(),
                        path: "dir/f.txt".into(),
                    })
                    .await
                    .map_err(|s| format!("the bystander is no longer served: {s:?}"))?
                    .into_inner();
                if stat.size_bytes != 4 {
                    return Err(format!("the bystander's file changed: {stat:?}"));
                }
                Ok(())
            })
            .map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    drop(server);
}
