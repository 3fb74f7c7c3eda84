//! Mutations own their lock, over real gRPC: an ImportArchive or Restore
//! whose caller goes away (the client drops the call, or its deadline
//! passes) either completes or changes nothing, and never runs beside,
//! and undoes, writes acknowledged after the cancel.
//!
//! Each case replaces tree A with tree B and cancels the call at a range
//! of moments (before the server has the request, while it stages, while
//! it applies, after it is done), then makes acknowledged writes to paths
//! that both trees hold. Afterwards every acknowledged write must be
//! there, and every other file must be tree A's or tree B's, whole.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncRead;
use wsfs_client::{Client, Filesystem, GlobQuery, Session, SessionOptions};
use wsfs_tests::harness::TestServer;

/// Files of the big tree: enough that staging and applying it take a
/// while, so that cancels land in the middle.
const BULK_FILES: usize = 1500;
/// Paths both trees hold, written (and acknowledged) after the cancel.
const SHARED: usize = 40;
/// When the client gives up on the call.
#[derive(Debug, Clone, Copy)]
enum Cancel {
    /// This many ms after the request is sent (after the upload, for an
    /// import).
    AfterMs(u64),
    /// DIRECTORY sessions: once the server has staged this many files (it
    /// holds the lock by then), watched in the session's staging directory.
    Staged(usize),
}

const MEMORY_CANCELS: [Cancel; 4] = [
    Cancel::AfterMs(0),
    Cancel::AfterMs(20),
    Cancel::AfterMs(100),
    Cancel::AfterMs(400),
];

const DIRECTORY_CANCELS: [Cancel; 5] = [
    Cancel::AfterMs(0),
    Cancel::AfterMs(20),
    Cancel::Staged(1),
    Cancel::Staged(BULK_FILES / 2),
    Cancel::AfterMs(3000),
];

fn cancels(options: &SessionOptions) -> &'static [Cancel] {
    if *options == SessionOptions::memory() {
        &MEMORY_CANCELS
    } else {
        &DIRECTORY_CANCELS
    }
}

/// Resolves when `cancel` says the client gives up; `sent` says when the
/// request is on its way.
async fn cancel_point(cancel: Cancel, server: &TestServer, session_id: &str, sent: &AtomicBool) {
    while !sent.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    match cancel {
        Cancel::AfterMs(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Cancel::Staged(n) => {
            let staging = server
                .data_dir()
                .join("sessions")
                .join(session_id)
                .join("staging");
            loop {
                let staged = std::fs::read_dir(&staging).map_or(0, |d| d.count());
                if staged >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

fn shared(i: usize) -> String {
    format!("shared/{i:03}.txt")
}

/// Tree A: the shared paths and one file of its own.
fn tree_a() -> BTreeMap<String, Vec<u8>> {
    let mut t: BTreeMap<String, Vec<u8>> = (0..SHARED)
        .map(|i| (shared(i), format!("tree A {i}\n").into_bytes()))
        .collect();
    t.insert("a/only-in-a.txt".into(), b"A\n".to_vec());
    t
}

/// Tree B: the shared paths and many files of its own.
fn tree_b() -> BTreeMap<String, Vec<u8>> {
    let mut t: BTreeMap<String, Vec<u8>> = (0..SHARED)
        .map(|i| (shared(i), format!("tree B {i}\n").into_bytes()))
        .collect();
    for i in 0..BULK_FILES {
        t.insert(
            format!("bulk/{:02}/{i:05}.txt", i % 20),
            format!("bulk file {i}\n").repeat(40).into_bytes(),
        );
    }
    t
}

fn seeded(mut options: SessionOptions, tree: &BTreeMap<String, Vec<u8>>) -> SessionOptions {
    for (path, data) in tree {
        options = options.seed_file(path.clone(), data.clone());
    }
    options
}

/// The archive of `tree`, as ExportArchive makes it.
async fn archive_of(client: &Client, tree: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    wsfs_tests::kit::archive_of(client, tree.clone(), &[]).await
}

/// Every file of the workspace with its content.
async fn files(s: &Session) -> BTreeMap<String, Vec<u8>> {
    let mut query = GlobQuery::new("**");
    query.max_results = u64::MAX;
    let mut out = BTreeMap::new();
    for path in s.glob(query).await.unwrap().paths {
        let mut data = Vec::new();
        s.download(path.as_str(), &mut data).await.unwrap();
        out.insert(path.as_str().to_string(), data);
    }
    out
}

fn acked(i: usize) -> Vec<u8> {
    format!("acknowledged after the cancel {i}\n").into_bytes()
}

/// Writes every shared path, one acknowledged write after another.
async fn write_shared(s: &Session) {
    for i in 0..SHARED {
        let text = String::from_utf8(acked(i)).unwrap();
        tokio::time::timeout(Duration::from_secs(60), s.write_str(&shared(i), &text))
            .await
            .expect("a write waited over a minute")
            .unwrap();
    }
}

/// Waits until no work on the session is left anywhere (work that went on
/// without the lock would still be changing the workspace): a DIRECTORY
/// session's staging directory stays empty for a while.
async fn quiesce(server: &TestServer, session_id: &str) {
    let staging = server
        .data_dir()
        .join("sessions")
        .join(session_id)
        .join("staging");
    let mut quiet = 0;
    for _ in 0..600 {
        let busy = std::fs::read_dir(&staging).map_or(0, |d| d.count()) > 0;
        quiet = if busy { 0 } else { quiet + 1 };
        if quiet == 5 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the staging directory of session {session_id} stayed busy for a minute");
}

/// Every acknowledged write is there; everything else is one tree, whole.
/// Returns which tree it is.
async fn assert_old_or_new_then_written(s: &Session, what: &str) -> char {
    let now = files(s).await;
    let (mut a, mut b) = (tree_a(), tree_b());
    for i in 0..SHARED {
        assert_eq!(
            now.get(&shared(i)),
            Some(&acked(i)),
            "{what}: the write to '{}', acknowledged after the cancel, was lost",
            shared(i)
        );
        a.insert(shared(i), acked(i));
        b.insert(shared(i), acked(i));
    }
    if now == a {
        'A'
    } else if now == b {
        'B'
    } else {
        let only: Vec<_> = now.keys().filter(|p| !a.contains_key(*p)).take(5).collect();
        panic!(
            "{what}: the workspace is neither tree A nor tree B after the writes ({} files; first not in A: {only:?})",
            now.len()
        );
    }
}

/// After the cancel: the acknowledged writes, then (once nothing runs any
/// more) the check; a call that answered must have replaced the tree.
async fn write_then_check(
    server: &TestServer,
    s: &Session,
    session_id: &str,
    what: &str,
    answered: bool,
) -> char {
    write_shared(s).await;
    quiesce(server, session_id).await;
    let tree = assert_old_or_new_then_written(s, what).await;
    assert!(
        !answered || tree == 'B',
        "{what}: answered, yet not applied"
    );
    tree
}

/// What Changes reported after a cursor.
#[derive(Default)]
struct Seen {
    resync: bool,
    external: usize,
}

/// Reads Changes from `cursor` to the newest event: the last seq, and
/// whether a barrier (re-read everything) came and how many events were
/// outside changes.
async fn changes_after(s: &Session, mut cursor: u64) -> (u64, Seen) {
    let mut seen = Seen::default();
    loop {
        let page = s.changes(cursor, 0).await.unwrap();
        seen.resync |= page.resync;
        seen.external += page
            .events
            .iter()
            .filter(|e| e.caller == "external")
            .count();
        if !page.resync && page.events.is_empty() {
            return (cursor, seen);
        }
        cursor = page.next_seq;
    }
}

/// A reader that says when the client has read all of it (the upload is
/// on its way).
struct Announcing {
    inner: std::io::Cursor<Vec<u8>>,
    done: Arc<AtomicBool>,
}

impl AsyncRead for Announcing {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() == before {
            self.done.store(true, Ordering::SeqCst);
        }
        polled
    }
}

async fn import_cancelled_then_written(options: SessionOptions, kind: &str) {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let archive_b = archive_of(&client, &tree_b()).await;
    let mut outcomes = Vec::new();
    for &cancel in cancels(&options) {
        let (s, info) = client
            .create(seeded(options.clone(), &tree_a()))
            .await
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader = Announcing {
            inner: std::io::Cursor::new(archive_b.clone()),
            done: done.clone(),
        };
        let import = s.import_from_reader(reader);
        // Dropping the call's future is the client's cancel.
        let finished = tokio::select! {
            r = import => { r.unwrap(); true }
            () = cancel_point(cancel, &server, &info.id, &done) => false,
        };
        let what = format!("{kind}: import cancelled at {cancel:?} after its upload");
        let tree = write_then_check(&server, &s, &info.id, &what, finished).await;
        outcomes.push((cancel, finished, tree));
    }
    println!("{kind}: (cancel, answered, tree) = {outcomes:?}");
}

async fn restore_cancelled_then_written(options: SessionOptions, kind: &str) {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let archive_a = archive_of(&client, &tree_a()).await;
    let mut outcomes = Vec::new();
    for &cancel in cancels(&options) {
        let (s, info) = client
            .create(seeded(options.clone(), &tree_b()))
            .await
            .unwrap();
        let snapshot = client.snapshot(&info.id, "tree B").await.unwrap();
        s.import_from_reader(std::io::Cursor::new(archive_a.clone()))
            .await
            .unwrap();
        // The deadline passes: the client gives up on the call.
        let sent = AtomicBool::new(true);
        let (cursor, _) = changes_after(&s, 0).await;
        let finished = tokio::select! {
            r = client.restore(&info.id, &snapshot.id) => { r.unwrap(); true }
            () = cancel_point(cancel, &server, &info.id, &sent) => false,
        };
        let what = format!("{kind}: restore cancelled at {cancel:?}");
        let tree = write_then_check(&server, &s, &info.id, &what, finished).await;
        // Its caller gone or not, a restore that happened is reported as
        // any other: watchers are told to re-read, and its own changes are
        // never passed off as outside ones.
        let (_, seen) = changes_after(&s, cursor).await;
        assert_eq!(
            seen.resync,
            tree == 'B',
            "{what}: tree {tree}, told to re-read: {}",
            seen.resync
        );
        assert_eq!(seen.external, 0, "{what}: its changes reported as external");
        outcomes.push((cancel, finished, tree));
    }
    println!("{kind}: (cancel, answered, tree) = {outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_import_never_undoes_writes_acknowledged_after_it_directory() {
    import_cancelled_then_written(SessionOptions::directory(), "DIRECTORY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_import_never_undoes_writes_acknowledged_after_it_memory() {
    import_cancelled_then_written(SessionOptions::memory(), "MEMORY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_restore_never_undoes_writes_acknowledged_after_it_directory() {
    restore_cancelled_then_written(SessionOptions::directory(), "DIRECTORY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_restore_never_undoes_writes_acknowledged_after_it_memory() {
    restore_cancelled_then_written(SessionOptions::memory(), "MEMORY").await;
}
