//! Vanishing clients: 1,000 clients, each on its own connection, walk away
//! in the middle of a ReadBytes, a Grep or an ExportArchive. Afterwards the
//! server's gauges are back to zero, nothing is left staged, and the
//! session serves as before. (A broken upload is the conformance suite's
//! `a_reader_that_fails_midway_changes_nothing`; over gRPC it is not yet
//! here: a test client that drops its call still half-closes the body
//! cleanly, which the server rightly takes as a finished upload.) This
//! file is its own test binary, so no other test moves the gauges.
//! `VANISHING_CLIENTS=10000 cargo test --release -p wsfs-tests --test
//! vanishing` runs the harness size.

use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::time::Duration;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_server::metrics;
use wsfs_tests::harness::TestServer;

const CONCURRENT: usize = 32;

async fn until_zero(counter: &std::sync::atomic::AtomicU64, what: &str) {
    for _ in 0..600 {
        if counter.load(Ordering::SeqCst) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} gauge never returned to zero");
}

fn upload_header(session: &str, path: String) -> proto::WriteBytesRequest {
    proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Header(
            proto::WriteBytesHeader {
                session_id: session.to_string(),
                path,
                ..Default::default()
            },
        )),
    }
}

/// One client: connects, starts a call of kind `i % 3`, takes one message
/// and goes away.
async fn vanish(url: String, session: String, i: usize) {
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let mut fs = FilesystemClient::new(channel.clone());
    match i % 3 {
        0 => {
            let mut s = fs
                .read_bytes(proto::ReadBytesRequest {
                    session_id: session,
                    path: "big.bin".into(),
                    chunk_size: 4096,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            s.next().await.unwrap().unwrap();
        }
        1 => {
            let mut s = fs
                .grep(proto::GrepRequest {
                    session_id: session,
                    pattern: "needle".into(),
                    max_matches: 1_000_000,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            s.next().await.unwrap().unwrap();
        }
        _ => {
            let mut s = SessionsClient::new(channel)
                .export_archive(proto::ExportArchiveRequest {
                    session_id: session,
                    snapshot_id: String::new(),
                })
                .await
                .unwrap()
                .into_inner();
            s.next().await.unwrap().unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_vanishing_clients_leave_nothing_running_or_behind() {
    let clients: usize = std::env::var("VANISHING_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let server = TestServer::start().await;
    let url = server.url();
    let mut sessions = SessionsClient::new(server.channel().await);
    let session = sessions
        .create_session(proto::CreateSessionRequest {
            backend: Backend::Directory as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut fs = FilesystemClient::new(server.channel().await);
    let upload = |path: &str, data: Vec<u8>| {
        futures::stream::iter([
            upload_header(&session, path.to_string()),
            proto::WriteBytesRequest {
                payload: Some(proto::write_bytes_request::Payload::Data(data.into())),
            },
        ])
    };
    fs.write_bytes(upload("big.bin", vec![1u8; 4 << 20]))
        .await
        .unwrap();
    for f in 0..50 {
        fs.write_bytes(upload(
            &format!("text/f{f:02}.txt"),
            "a needle in a haystack\n".repeat(2000).into_bytes(),
        ))
        .await
        .unwrap();
    }

    futures::stream::iter(0..clients)
        .for_each_concurrent(CONCURRENT, |i| vanish(url.clone(), session.clone(), i))
        .await;

    until_zero(&metrics::ACTIVE_BYTE_STREAMS, "ReadBytes").await;
    until_zero(&metrics::ACTIVE_GREPS, "Grep").await;
    until_zero(&metrics::ACTIVE_EXPORTS, "ExportArchive").await;
    let staging = server
        .data_dir()
        .join("sessions")
        .join(&session)
        .join("staging");
    for _ in 0..100 {
        if std::fs::read_dir(&staging).unwrap().count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_dir(&staging).unwrap().count(),
        0,
        "a broken upload left a staged temp behind"
    );
    let stat = fs
        .stat(proto::StatRequest {
            session_id: session,
            path: "big.bin".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stat.size_bytes, 4 << 20);
}
