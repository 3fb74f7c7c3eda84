//! Faults inside running streams, over real gRPC: a panic in a stream's
//! producer ends that stream with INTERNAL (never a clean end that would
//! pass for a complete answer), a Watch holds a stream permit like every
//! other stream, and an upload that breaks off (the client resets the
//! HTTP/2 stream) leaves nothing behind. This file is its own test binary,
//! so the fault it arms touches no other test.

use futures::StreamExt;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Code;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{raw_write, reason};

/// Any stream that reaches this path panics (after its first chunk, for a
/// ReadBytes).
const STREAM_PANIC_PATH: &str = "faults/stream-panic.bin";

async fn create(channel: &Channel, backend: Backend, limits: proto::SessionLimits) -> String {
    SessionsClient::new(channel.clone())
        .create_session(proto::CreateSessionRequest {
            backend: backend as i32,
            limits: Some(limits),
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner()
        .session_id
}

async fn write(fs: &mut FilesystemClient<Channel>, session: &str, path: &str, content: String) {
    raw_write(fs, session, path, content)
        .await
        .unwrap_or_else(|e| panic!("write {path}: {e:?}"));
}

async fn size_of(fs: &mut FilesystemClient<Channel>, session: &str, path: &str) -> Option<i64> {
    match fs
        .stat(proto::StatRequest {
            session_id: session.to_string(),
            path: path.to_string(),
        })
        .await
    {
        Ok(r) => Some(r.into_inner().size_bytes),
        Err(e) if e.code() == Code::NotFound => None,
        Err(e) => panic!("stat {path}: {e:?}"),
    }
}

/// Reads `stream` to its end and returns the items before the error, and
/// the error; a clean end fails the test.
async fn until_error<T>(mut stream: tonic::Streaming<T>) -> (usize, tonic::Status) {
    let mut items = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("the stream neither ended nor failed")
        {
            Some(Ok(_)) => items += 1,
            Some(Err(status)) => return (items, status),
            None => panic!("the stream ended cleanly after {items} items, hiding the panic"),
        }
    }
}

fn assert_internal(status: &tonic::Status, method: &str) {
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(reason(status), "INTERNAL", "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("{method} failed on a server bug")),
        "{status:?}"
    );
}

async fn panics_end_each_stream_with_internal(server: &TestServer, backend: Backend) {
    // One channel for everything: a panic that escaped into the connection
    // would fail the calls after it.
    let channel = server.channel().await;
    let mut fs = FilesystemClient::new(channel.clone());
    let id = create(&channel, backend, proto::SessionLimits::default()).await;
    // 1 MiB, read in 64 KiB chunks: the header and first chunk go out, the
    // producer panics on the second.
    write(&mut fs, &id, STREAM_PANIC_PATH, "p".repeat(1 << 20)).await;
    write(&mut fs, &id, "a.txt", "needle\n".into()).await;

    let read = fs
        .read_bytes(proto::ReadBytesRequest {
            session_id: id.clone(),
            path: STREAM_PANIC_PATH.into(),
            chunk_size: 64 * 1024,
            ..Default::default()
        })
        .await
        .expect("the ReadBytes starts")
        .into_inner();
    let (items, status) = until_error(read).await;
    assert_internal(&status, "ReadBytes");
    assert!(
        (1..16).contains(&items),
        "header and part of the data, then the error: {items}"
    );

    let grep = fs
        .grep(proto::GrepRequest {
            session_id: id.clone(),
            pattern: "needle".into(),
            ..Default::default()
        })
        .await
        .expect("the Grep starts")
        .into_inner();
    let (_, status) = until_error(grep).await;
    assert_internal(&status, "Grep");

    let export = SessionsClient::new(channel.clone())
        .export_archive(proto::ExportArchiveRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("the export starts")
        .into_inner();
    let (_, status) = until_error(export).await;
    assert_internal(&status, "ExportArchive");

    let mut watch = fs
        .watch(proto::WatchRequest {
            session_id: id.clone(),
            recursive: true,
            ..Default::default()
        })
        .await
        .expect("the Watch starts")
        .into_inner();
    let ready = watch.next().await.expect("READY").expect("READY");
    assert_eq!(ready.kind(), proto::ChangeKind::Ready);
    write(&mut fs, &id, STREAM_PANIC_PATH, "again".into()).await;
    let (_, status) = until_error(watch).await;
    assert_internal(&status, "Watch");

    // The same connection and session still serve, streams included.
    assert_eq!(size_of(&mut fs, &id, "a.txt").await, Some(7));
    let mut read = fs
        .read_bytes(proto::ReadBytesRequest {
            session_id: id.clone(),
            path: "a.txt".into(),
            ..Default::default()
        })
        .await
        .expect("another ReadBytes")
        .into_inner();
    let mut bytes = 0;
    while let Some(m) = read.next().await {
        if let Some(proto::read_bytes_response::Payload::Data(d)) = m.expect("clean").payload {
            bytes += d.len();
        }
    }
    assert_eq!(bytes, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_a_running_stream_ends_it_with_internal() {
    wsfs_server::faults::panic_in_stream_on_path(STREAM_PANIC_PATH);
    let server = TestServer::start().await;
    panics_end_each_stream_with_internal(&server, Backend::Memory).await;
    panics_end_each_stream_with_internal(&server, Backend::Directory).await;
}

#[tokio::test]
async fn a_watch_holds_a_stream_permit_until_it_is_dropped() {
    let server = TestServer::start_with(|c| c.max_streams_per_session = 1).await;
    let channel = server.channel().await;
    let mut fs = FilesystemClient::new(channel.clone());
    let id = create(&channel, Backend::Memory, proto::SessionLimits::default()).await;
    write(&mut fs, &id, "a.txt", "abc".into()).await;
    async fn read(
        fs: &mut FilesystemClient<Channel>,
        id: &str,
    ) -> Result<tonic::Response<tonic::Streaming<proto::ReadBytesResponse>>, tonic::Status> {
        fs.read_bytes(proto::ReadBytesRequest {
            session_id: id.to_string(),
            path: "a.txt".into(),
            ..Default::default()
        })
        .await
    }

    let mut watch = fs
        .watch(proto::WatchRequest {
            session_id: id.clone(),
            recursive: true,
            ..Default::default()
        })
        .await
        .expect("the first stream is within the limit")
        .into_inner();
    assert_eq!(
        watch.next().await.unwrap().unwrap().kind(),
        proto::ChangeKind::Ready
    );
    let err = read(&mut fs, &id)
        .await
        .expect_err("a second stream is over the limit");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(reason(&err), "QUOTA_EXCEEDED");
    let err = fs
        .watch(proto::WatchRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a second Watch is over the limit too");
    assert_eq!(reason(&err), "QUOTA_EXCEEDED");

    drop(watch);
    for attempt in 0.. {
        match read(&mut fs, &id).await {
            Ok(_) => break,
            Err(e) if reason(&e) == "QUOTA_EXCEEDED" && attempt < 100 => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("the dropped Watch never gave its permit back: {e:?}"),
        }
    }
}

fn upload_message(payload: proto::write_bytes_request::Payload) -> proto::WriteBytesRequest {
    proto::WriteBytesRequest {
        payload: Some(payload),
    }
}

/// Starts an upload of `path` that sends its header and `sent` bytes and
/// then waits, never half-closing; the returned task is the call.
fn stalled_upload(
    channel: Channel,
    session: String,
    path: &str,
    sent: usize,
) -> tokio::task::JoinHandle<Result<tonic::Response<proto::WriteResponse>, tonic::Status>> {
    use proto::write_bytes_request::Payload;
    let header = upload_message(Payload::Header(proto::WriteBytesHeader {
        session_id: session,
        path: path.to_string(),
        ..Default::default()
    }));
    let data = (0..sent.div_ceil(64 * 1024))
        .map(|_| upload_message(Payload::Data(vec![b'n'; 64 * 1024].into())));
    let body = futures::stream::iter(std::iter::once(header).chain(data))
        .chain(futures::stream::pending());
    tokio::spawn(async move { FilesystemClient::new(channel).write_bytes(body).await })
}

async fn a_broken_upload_leaves_nothing(server: &TestServer, backend: Backend) {
    let channel = server.channel().await;
    let mut fs = FilesystemClient::new(channel.clone());
    let id = create(
        &channel,
        backend,
        proto::SessionLimits {
            max_write_bytes: 64 << 20,
            ..Default::default()
        },
    )
    .await;
    write(&mut fs, &id, "kept.txt", "old content".into()).await;
    let staging = server.data_dir().join("sessions").join(&id).join("staging");
    let staged = || std::fs::read_dir(&staging).map_or(0, |d| d.count());

    // Over its own connection, so the reset is the only way it ends.
    let upload_channel = server.channel().await;
    let fresh = stalled_upload(upload_channel.clone(), id.clone(), "new.bin", 8 << 20);
    let over = stalled_upload(upload_channel, id.clone(), "kept.txt", 8 << 20);
    if backend == Backend::Directory {
        // Wait until the server has staged part of both uploads.
        for _ in 0..200 {
            if staged() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(staged(), 2, "both uploads are being staged");
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(!fresh.is_finished() && !over.is_finished());
    // Aborting the call drops it mid-body: the client resets the stream.
    fresh.abort();
    over.abort();
    let _ = fresh.await;
    let _ = over.await;

    for _ in 0..200 {
        if staged() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(staged(), 0, "a broken upload left a staged file");
    assert_eq!(size_of(&mut fs, &id, "new.bin").await, None);
    let kept = fs
        .read(proto::ReadRequest {
            session_id: id.clone(),
            path: "kept.txt".into(),
            ..Default::default()
        })
        .await
        .expect("read the old file")
        .into_inner();
    assert_eq!(kept.content, "old content");
    let list = fs
        .list(proto::ListRequest {
            session_id: id,
            depth: 8,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let names: Vec<_> = list.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["kept.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_reset_by_its_client_leaves_nothing_behind() {
    let server = TestServer::start().await;
    a_broken_upload_leaves_nothing(&server, Backend::Memory).await;
    a_broken_upload_leaves_nothing(&server, Backend::Directory).await;
}
