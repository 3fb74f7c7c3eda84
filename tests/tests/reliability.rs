//! Reliability under faults and at capacity: a panicking request fails
//! alone, the server refuses sessions beyond `--max-sessions`, and an
//! oversized message is refused without changing anything. Each refusal
//! leaves the server serving everyone else. This file is its own test
//! binary, so the fault it arms touches no other test.

use tonic::transport::Channel;
use tonic::Code;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{raw_write as write, reason};

/// The path that makes a request panic in this test binary.
const PANIC_PATH: &str = "faults/panic-here.txt";

async fn create(sessions: &mut SessionsClient<Channel>, backend: Backend) -> String {
    sessions
        .create_session(proto::CreateSessionRequest {
            backend: backend as i32,
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner()
        .session_id
}

async fn exists(fs: &mut FilesystemClient<Channel>, session: &str, path: &str) -> bool {
    fs.exists(proto::ExistsRequest {
        session_id: session.to_string(),
        path: path.to_string(),
    })
    .await
    .expect("exists")
    .into_inner()
    .exists
}

#[tokio::test]
async fn a_panicking_request_fails_with_internal_and_the_server_keeps_serving() {
    wsfs_server::faults::panic_on_path(PANIC_PATH);
    let server = TestServer::start().await;
    // One channel for everything: a panic that escaped the handler would
    // break the shared HTTP/2 connection and fail the calls after it.
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let mut fs = FilesystemClient::new(channel);
    let memory = create(&mut sessions, Backend::Memory).await;
    let directory = create(&mut sessions, Backend::Directory).await;
    write(&mut fs, &directory, "kept.txt", "before".into())
        .await
        .expect("write before the fault");

    let err = write(&mut fs, &memory, PANIC_PATH, "x".into())
        .await
        .expect_err("the armed path panics");

    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert_eq!(reason(&err), "INTERNAL");
    assert!(
        err.message().contains("Write failed on a server bug"),
        "{err:?}"
    );
    // The same connection, the same session and another session all work.
    write(&mut fs, &memory, "after.txt", "fine".into())
        .await
        .expect("the panicking session still serves");
    let stat = fs
        .stat(proto::StatRequest {
            session_id: directory.clone(),
            path: "kept.txt".into(),
        })
        .await
        .expect("another session still serves")
        .into_inner();
    assert_eq!(stat.size_bytes, 6);
    // A fresh connection is accepted too.
    let mut other = FilesystemClient::new(server.channel().await);
    assert!(exists(&mut other, &memory, "after.txt").await);
}

#[tokio::test]
async fn sessions_beyond_max_sessions_are_refused_with_quota_exceeded() {
    let server = TestServer::start_with(|c| c.max_sessions = 2).await;
    let mut sessions = SessionsClient::new(server.channel().await);
    let first = create(&mut sessions, Backend::Memory).await;
    create(&mut sessions, Backend::Directory).await;

    let err = sessions
        .create_session(proto::CreateSessionRequest {
            backend: Backend::Directory as i32,
            ..Default::default()
        })
        .await
        .expect_err("a third session is over the limit");

    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(reason(&err), "QUOTA_EXCEEDED");
    let listed = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(listed.len(), 2, "the refused session left nothing behind");
    let dirs = std::fs::read_dir(server.data_dir().join("sessions"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(dirs, 1, "only the one DIRECTORY session has a directory");
    // Deleting one frees its place.
    sessions
        .delete_session(proto::DeleteSessionRequest { session_id: first })
        .await
        .unwrap();
    create(&mut sessions, Backend::Memory).await;
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let session = create(&mut sessions, Backend::Memory).await;
    let mut fs = FilesystemClient::new(channel).max_encoding_message_size(usize::MAX);
    let content = "a".repeat(wsfs_server::MAX_MESSAGE_BYTES + 1);

    let err = write(&mut fs, &session, "big.txt", content)
        .await
        .expect_err("a message over the server's limit");

    assert!(
        matches!(err.code(), Code::ResourceExhausted | Code::OutOfRange),
        "{err:?}"
    );
    assert!(!exists(&mut fs, &session, "big.txt").await);
    write(&mut fs, &session, "small.txt", "ok".into())
        .await
        .expect("the server still serves this client");
}

async fn quota_session(sessions: &mut SessionsClient<Channel>, backend: Backend) -> String {
    sessions
        .create_session(proto::CreateSessionRequest {
            backend: backend as i32,
            limits: Some(proto::SessionLimits {
                max_files: 2,
                max_total_bytes: 10,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create a session with quotas")
        .into_inner()
        .session_id
}

async fn read(fs: &mut FilesystemClient<Channel>, session: &str, path: &str) -> String {
    fs.read(proto::ReadRequest {
        session_id: session.to_string(),
        path: path.to_string(),
        limit: Some(-1),
        ..Default::default()
    })
    .await
    .expect("read")
    .into_inner()
    .content
}

fn assert_quota(result: Result<impl std::fmt::Debug, tonic::Status>, what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.code(), Code::ResourceExhausted, "{what}: {err:?}");
    assert_eq!(reason(&err), "QUOTA_EXCEEDED", "{what}");
}

#[tokio::test]
async fn writes_edits_and_copies_over_a_session_quota_fail_and_change_nothing() {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let mut fs = FilesystemClient::new(channel);
    for backend in [Backend::Memory, Backend::Directory] {
        let s = quota_session(&mut sessions, backend).await;
        write(&mut fs, &s, "a.txt", "12345".into()).await.unwrap();
        write(&mut fs, &s, "b.txt", "123".into()).await.unwrap();

        assert_quota(
            write(&mut fs, &s, "c.txt", "1".into()).await,
            "a third file",
        );
        assert_quota(
            write(&mut fs, &s, "b.txt", "123456".into()).await,
            "11 bytes",
        );
        let append = fs
            .write(proto::WriteRequest {
                session_id: s.clone(),
                path: "a.txt".into(),
                content: "123".into(),
                mode: proto::WriteMode::Append as i32,
                ..Default::default()
            })
            .await;
        assert_quota(append, "an append to 11 bytes");
        let edit = fs
            .edit(proto::EditRequest {
                session_id: s.clone(),
                path: "b.txt".into(),
                old_text: "123".into(),
                new_text: "1234567".into(),
                ..Default::default()
            })
            .await;
        assert_quota(edit, "an edit to 14 bytes");
        let copy = fs
            .copy(proto::TransferRequest {
                session_id: s.clone(),
                source: "b.txt".into(),
                destination: "d.txt".into(),
                ..Default::default()
            })
            .await;
        assert_quota(copy, "a copy to a third file");

        assert_eq!(read(&mut fs, &s, "a.txt").await, "12345", "{backend:?}");
        assert_eq!(read(&mut fs, &s, "b.txt").await, "123", "{backend:?}");
        assert!(!exists(&mut fs, &s, "c.txt").await);
        assert!(!exists(&mut fs, &s, "d.txt").await);
        // Within the quota, changes still go through: shrinking, then
        // replacing a file with one of the same count.
        write(&mut fs, &s, "b.txt", "1".into()).await.unwrap();
        write(&mut fs, &s, "b.txt", "12345".into()).await.unwrap();
    }
}

#[tokio::test]
async fn streams_beyond_max_streams_per_session_are_refused_with_quota_exceeded() {
    use futures::StreamExt;
    let server = TestServer::start_with(|c| c.max_streams_per_session = 2).await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let mut fs = FilesystemClient::new(channel);
    let s = create(&mut sessions, Backend::Memory).await;
    let other = create(&mut sessions, Backend::Memory).await;
    // Bigger than HTTP/2's flow-control windows: a stream left unread
    // stays open on the server.
    let big = "x\n".repeat(8 << 20);
    write(&mut fs, &s, "big.txt", big.clone()).await.unwrap();
    write(&mut fs, &other, "big.txt", big).await.unwrap();
    let read_bytes = |session: &str| proto::ReadBytesRequest {
        session_id: session.to_string(),
        path: "big.txt".into(),
        chunk_size: 1024,
        ..Default::default()
    };
    // Two streams held open, unread past their first message.
    let mut first = fs.read_bytes(read_bytes(&s)).await.unwrap().into_inner();
    first.next().await.unwrap().unwrap();
    let mut second = fs
        .grep(proto::GrepRequest {
            session_id: s.clone(),
            pattern: "x".into(),
            max_matches: 1_000_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    second.next().await.unwrap().unwrap();

    let third = fs.read_bytes(read_bytes(&s)).await.map(|_| ());

    assert_quota(third, "a third stream on the session");
    // Another session is not affected, and unary calls still work.
    let mut elsewhere = fs
        .read_bytes(read_bytes(&other))
        .await
        .unwrap()
        .into_inner();
    elsewhere.next().await.unwrap().unwrap();
    assert!(exists(&mut fs, &s, "big.txt").await);
    // Closing a stream frees its place.
    drop(first);
    let mut admitted = None;
    for _ in 0..100 {
        if let Ok(r) = fs.read_bytes(read_bytes(&s)).await {
            admitted = Some(r.into_inner());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    admitted
        .expect("a place frees when a stream closes")
        .next()
        .await
        .unwrap()
        .unwrap();
}
