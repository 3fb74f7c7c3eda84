//! Writes to different files of one session run in parallel, over real
//! gRPC on both backends, and keep every property of the session-wide
//! lock they replaced: writes to one file stay one after another with
//! `if_version` exact, a change to a directory excludes writes beneath it,
//! parallel writers never take a session past its quota together, and a
//! Snapshot (a claim on the whole tree) is not starved by a stream of
//! writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use wsfs::proto::{self, filesystem_client::FilesystemClient};
use wsfs_client::{
    Client, Filesystem, LineRange, Session, SessionLimits, SessionOptions, TransferOptions,
    WriteMode, WriteOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, reason, try_increment};

/// Callers writing at once, as the benchmark's.
const CALLERS: usize = 16;

async fn session(server: &TestServer, options: SessionOptions) -> (Client, Session) {
    let client = Client::connect(&server.url()).await.unwrap();
    let (session, _) = client.create(options).await.unwrap();
    (client, session)
}

fn backends() -> [(&'static str, SessionOptions); 2] {
    [
        ("MEMORY", SessionOptions::memory()),
        ("DIRECTORY", SessionOptions::directory()),
    ]
}

/// Eight callers increment one counter with `if_version` while eight
/// others each rewrite a file of their own, in a directory they all
/// create: no increment is lost, and no own-file write ever meets a
/// version it did not make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_one_file_stay_serialised_beside_writes_to_others() {
    let server = TestServer::start().await;
    for (name, options) in backends() {
        let (_client, s) = session(&server, options).await;
        let counter = p("counter");
        s.write(&counter, "0", WriteOptions::default())
            .await
            .unwrap();
        let mut incrementers = Vec::new();
        for _ in 0..8 {
            let (s, counter) = (s.clone(), counter.clone());
            incrementers.push(tokio::spawn(async move {
                let mut landed = 0u64;
                while landed < 25 {
                    landed += u64::from(try_increment(&s, &counter).await.unwrap());
                }
            }));
        }
        let mut owners = Vec::new();
        for i in 0..8 {
            let s = s.clone();
            owners.push(tokio::spawn(async move {
                let path = p(&format!("own/deep/{i}.txt"));
                let mut version = 0;
                for round in 0..25 {
                    let options = WriteOptions {
                        if_version: Some(version),
                        ..WriteOptions::default()
                    };
                    let w = s.write(&path, &format!("{round}"), options).await;
                    version = w.expect("an own file changes only by its owner").version;
                }
            }));
        }
        for task in incrementers.into_iter().chain(owners) {
            task.await.unwrap();
        }
        let page = s.read(&counter, LineRange::default()).await.unwrap();
        assert_eq!(page.content, "200", "{name}: an increment was lost");
        for i in 0..8 {
            let page = s
                .read(&p(&format!("own/deep/{i}.txt")), LineRange::default())
                .await
                .unwrap();
            assert_eq!(page.content, "24", "{name}");
        }
    }
}

/// Entries in the session's staging directory: a Copy of a directory
/// builds it there before it moves it into place.
fn staged(server: &TestServer, session: &str) -> usize {
    let staging = server
        .data_dir()
        .join("sessions")
        .join(session)
        .join("staging");
    std::fs::read_dir(staging).map_or(0, |d| d.count())
}

/// While a Copy of a large directory runs, a Write elsewhere is answered
/// before the Copy, and a Write into the Copy's destination waits for it
/// (had it gone first, the Copy would have found its destination taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_elsewhere_passes_a_running_copy_and_one_beneath_it_waits() {
    const FILES: usize = 3000;
    let server = TestServer::start().await;
    let mut options = SessionOptions::directory();
    for i in 0..FILES {
        options = options.seed_file(format!("bulk/{:02}/{i:05}.txt", i % 30), "x".repeat(64));
    }
    let (_client, s) = session(&server, options).await;
    assert_eq!(staged(&server, s.id()), 0);

    let copy = {
        let s = s.clone();
        tokio::spawn(async move {
            s.copy(&p("bulk"), &p("copy"), TransferOptions::default())
                .await
        })
    };
    while staged(&server, s.id()) == 0 {
        assert!(!copy.is_finished(), "the copy ended before it was seen");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let beneath = {
        let s = s.clone();
        tokio::spawn(async move {
            let options = WriteOptions {
                mode: WriteMode::Create,
                ..WriteOptions::default()
            };
            s.write(&p("copy/late.txt"), "late", options).await
        })
    };
    s.write(&p("elsewhere.txt"), "free", WriteOptions::default())
        .await
        .expect("a write elsewhere");
    assert!(
        !copy.is_finished(),
        "the write elsewhere waited for the copy"
    );
    assert!(
        !beneath.is_finished(),
        "a write beneath the copy went first"
    );

    let copied = copy.await.unwrap().expect("the copy");
    assert_eq!(
        copied.entries,
        FILES as u64 + 31,
        "files and directories copied"
    );
    beneath
        .await
        .unwrap()
        .expect("the write beneath, after the copy");
    assert_eq!(
        s.read(&p("copy/late.txt"), LineRange::default())
            .await
            .unwrap()
            .content,
        "late"
    );
}

/// What one parallel writer got: the path it wrote, and its answer.
type Outcome = (String, Result<proto::WriteResponse, tonic::Status>);

/// `CALLERS` writers at once, each a new file of `len` bytes.
async fn write_at_once(
    fs: &FilesystemClient<tonic::transport::Channel>,
    session: &str,
    len: usize,
) -> Vec<Outcome> {
    let start = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (mut fs, start) = (fs.clone(), start.clone());
            let (session, path) = (session.to_string(), format!("dir/{i:02}.txt"));
            tokio::spawn(async move {
                start.wait().await;
                let answer = fs
                    .write(proto::WriteRequest {
                        session_id: session,
                        path: path.clone(),
                        content: "x".repeat(len),
                        ..Default::default()
                    })
                    .await
                    .map(tonic::Response::into_inner);
                (path, answer)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    outcomes
}

/// Sixteen writers at once, each a new file, in a session whose quota
/// allows four of them: exactly four land (no writer is refused while
/// there is room), every other is QUOTA_EXCEEDED and leaves no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_writers_never_take_a_session_over_its_quota_together() {
    let server = TestServer::start().await;
    let fs = FilesystemClient::new(server.channel().await);
    for (name, options) in backends() {
        for (limits, len) in [
            (
                SessionLimits {
                    max_files: 4,
                    ..SessionLimits::default()
                },
                1,
            ),
            (
                SessionLimits {
                    max_total_bytes: 40,
                    ..SessionLimits::default()
                },
                10,
            ),
        ] {
            let (_client, s) = session(&server, options.clone().limits(limits)).await;
            let outcomes = write_at_once(&fs, s.id(), len).await;
            let mut landed = Vec::new();
            for (path, answer) in outcomes {
                match answer {
                    Ok(_) => landed.push(path),
                    Err(status) => {
                        assert_eq!(status.code(), Code::ResourceExhausted, "{name}: {status:?}");
                        assert_eq!(reason(&status), "QUOTA_EXCEEDED", "{name}");
                        assert!(
                            s.exists(&p(&path)).await.unwrap().is_none(),
                            "{name}: a refused write left '{path}'"
                        );
                    }
                }
            }
            assert_eq!(landed.len(), 4, "{name} {limits:?}: {landed:?}");
            let listed = s.list(&p("dir"), 1).await.unwrap();
            let listed: Vec<String> = listed
                .entries
                .iter()
                .map(|e| e.path.as_str().to_string())
                .collect();
            landed.sort();
            assert_eq!(listed, landed, "{name} {limits:?}");
        }
    }
}

/// A Snapshot asked for while sixteen callers write without pause is
/// answered while they still write, and holds each caller's file once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_not_starved_by_a_stream_of_writes() {
    let server = TestServer::start().await;
    for (name, options) in backends() {
        let (client, s) = session(&server, options).await;
        let (stop, writes) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let writers: Vec<_> = (0..CALLERS)
            .map(|i| {
                let (s, stop, writes) = (s.clone(), stop.clone(), writes.clone());
                tokio::spawn(async move {
                    let path = p(&format!("w/{i:02}.txt"));
                    let mut round = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        s.write(&path, &round.to_string(), WriteOptions::default())
                            .await
                            .unwrap();
                        writes.fetch_add(1, Ordering::SeqCst);
                        round += 1;
                    }
                })
            })
            .collect();
        while writes.load(Ordering::SeqCst) < 4 * CALLERS as u64 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let taken = tokio::time::timeout(Duration::from_secs(30), client.snapshot(s.id(), "busy"))
            .await
            .expect("the snapshot is answered while the writes go on")
            .unwrap();
        let during = writes.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            writes.load(Ordering::SeqCst) > during,
            "{name}: the writes stopped"
        );
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.await.unwrap();
        }
        assert_eq!(taken.file_count, CALLERS as u64, "{name}");
    }
}
