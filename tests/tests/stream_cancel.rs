//! A client that goes away stops the server's work: a dropped Grep stream
//! stops the search, a dropped ReadBytes stream stops the reads, a dropped
//! ExportArchive stream stops the archive, a dropped Watch ends its task. Proven with
//! the server's own counters (this file is its own test binary, so no other
//! test moves them), never with timings.

use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::time::Duration;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_server::metrics;
use wsfs_tests::harness::TestServer;

async fn session(url: &str, backend: Backend) -> String {
    let mut sessions = SessionsClient::connect(url.to_string()).await.unwrap();
    sessions
        .create_session(proto::CreateSessionRequest {
            backend: backend as i32,
            limits: Some(proto::SessionLimits {
                max_write_bytes: 1 << 30,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id
}

/// Waits until `counter` drops to zero; fails the test if it never does.
async fn until_zero(counter: &std::sync::atomic::AtomicU64, what: &str) {
    for _ in 0..600 {
        if counter.load(Ordering::SeqCst) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} still running long after its client went away");
}

async fn dropped_grep_stops_the_search(backend: Backend) {
    let server = TestServer::start().await;
    let url = server.url();
    let id = session(&url, backend).await;
    let mut fs = FilesystemClient::connect(url.clone()).await.unwrap();
    const FILES: u64 = 1500;
    let body = "needle in a haystack\n".repeat(50);
    for i in 0..FILES {
        fs.write(proto::WriteRequest {
            session_id: id.clone(),
            path: format!("d{}/f{i:05}.txt", i % 10),
            content: body.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let before = metrics::FILES_SEARCHED.load(Ordering::SeqCst);
    let mut stream = fs
        .grep(proto::GrepRequest {
            session_id: id.clone(),
            pattern: "needle".into(),
            max_matches: 100_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(
        first.payload,
        Some(proto::grep_response::Payload::Match(_))
    ));
    drop(stream);
    until_zero(&metrics::ACTIVE_GREPS, "grep").await;
    let searched = metrics::FILES_SEARCHED.load(Ordering::SeqCst) - before;
    assert!(
        searched < FILES,
        "searched {searched} of {FILES} files after the client left"
    );

    // The server still answers.
    let stat = fs
        .stat(proto::StatRequest {
            session_id: id,
            path: "d0".into(),
        })
        .await
        .unwrap();
    assert_eq!(stat.into_inner().kind, proto::FileKind::Directory as i32);
}

async fn dropped_read_bytes_stops_the_reads(backend: Backend) {
    let server = TestServer::start().await;
    let url = server.url();
    let id = session(&url, backend).await;
    let mut fs = FilesystemClient::connect(url.clone()).await.unwrap();
    const SIZE: usize = 64 << 20;
    let header = proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Header(
            proto::WriteBytesHeader {
                session_id: id.clone(),
                path: "big.bin".into(),
                ..Default::default()
            },
        )),
    };
    let chunks = (0..SIZE / (1 << 20)).map(|i| proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Data(
            vec![i as u8; 1 << 20].into(),
        )),
    });
    fs.write_bytes(futures::stream::iter(std::iter::once(header).chain(chunks)))
        .await
        .unwrap();

    let before = metrics::BYTES_STREAMED.load(Ordering::SeqCst);
    let mut stream = fs
        .read_bytes(proto::ReadBytesRequest {
            session_id: id.clone(),
            path: "big.bin".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let _header = stream.next().await.unwrap().unwrap();
    let _chunk = stream.next().await.unwrap().unwrap();
    drop(stream);
    until_zero(&metrics::ACTIVE_BYTE_STREAMS, "ReadBytes").await;
    let streamed = metrics::BYTES_STREAMED.load(Ordering::SeqCst) - before;
    assert!(
        streamed < SIZE as u64 / 2,
        "produced {streamed} of {SIZE} bytes after the client left"
    );
}

async fn dropped_export_stops_the_archive(backend: Backend) {
    const FILES: u64 = 16;
    const SIZE: u64 = 1 << 20;
    let server = TestServer::start().await;
    let url = server.url();
    let id = session(&url, backend).await;
    let mut fs = FilesystemClient::connect(url.clone()).await.unwrap();
    for f in 0..FILES {
        // Incompressible, so the archive is as large as the files.
        let mut x = f + 1;
        let data: Vec<u8> = (0..SIZE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let header = proto::WriteBytesRequest {
            payload: Some(proto::write_bytes_request::Payload::Header(
                proto::WriteBytesHeader {
                    session_id: id.clone(),
                    path: format!("f{f:02}.bin"),
                    ..Default::default()
                },
            )),
        };
        let chunk = proto::WriteBytesRequest {
            payload: Some(proto::write_bytes_request::Payload::Data(data.into())),
        };
        fs.write_bytes(futures::stream::iter([header, chunk]))
            .await
            .unwrap();
    }

    let before = metrics::BYTES_STREAMED.load(Ordering::SeqCst);
    let mut sessions = SessionsClient::connect(url.clone()).await.unwrap();
    let mut stream = sessions
        .export_archive(proto::ExportArchiveRequest {
            session_id: id.clone(),
            snapshot_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let _chunk = stream.next().await.unwrap().unwrap();
    assert_eq!(metrics::ACTIVE_EXPORTS.load(Ordering::SeqCst), 1);
    drop(stream);
    until_zero(&metrics::ACTIVE_EXPORTS, "ExportArchive").await;
    until_zero(&metrics::ACTIVE_BYTE_STREAMS, "ExportArchive's reads").await;
    let read = metrics::BYTES_STREAMED.load(Ordering::SeqCst) - before;
    assert!(
        read < FILES * SIZE / 2,
        "read {read} of {} bytes after the client left",
        FILES * SIZE
    );
}

async fn dropped_watch_ends_its_task(backend: Backend) {
    let server = TestServer::start().await;
    let url = server.url();
    let id = session(&url, backend).await;
    let mut fs = FilesystemClient::connect(url).await.unwrap();
    let mut events = fs
        .watch(proto::WatchRequest {
            session_id: id,
            recursive: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ready = events.next().await.unwrap().unwrap();
    assert_eq!(ready.kind(), proto::ChangeKind::Ready);
    assert_eq!(metrics::ACTIVE_WATCHES.load(Ordering::SeqCst), 1);
    drop(events);
    until_zero(&metrics::ACTIVE_WATCHES, "Watch").await;
}

// One test function per file keeps the process-wide counters unshared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_streams_stop_the_server_work() {
    for backend in [Backend::Memory, Backend::Directory] {
        dropped_grep_stops_the_search(backend).await;
        dropped_read_bytes_stops_the_reads(backend).await;
        dropped_export_stops_the_archive(backend).await;
        dropped_watch_ends_its_task(backend).await;
    }
}
