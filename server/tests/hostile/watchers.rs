//! Outside changes at scale: every DIRECTORY session shares the server's
//! one filesystem watcher, so threads stay flat as sessions grow, an
//! outside change is reported within a second, and a deleted session gives
//! its watches back.

use crate::harness::{next_change, Server};
use futures::StreamExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wsfs_client::{ChangeKind, Client, Session, SessionOptions};

/// How soon an outside change must be reported while the session has a
/// native watch.
const REPORTED_WITHIN: Duration = Duration::from_secs(1);

/// The most threads the server may add between 10 sessions and many.
const THREAD_SLACK: usize = 4;

/// Creates DIRECTORY sessions until there are `total`; their roots.
async fn grow(client: &Client, sessions: &mut Vec<(Session, PathBuf)>, total: usize) {
    while sessions.len() < total {
        let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
        let root = info.root_path.expect("a DIRECTORY session has a root");
        sessions.push((session, root));
    }
}

/// Writes a file into `root` from outside the service and returns how long
/// the session's Watch took to report it.
async fn outside_change_reported_after(session: &Session, root: &Path, name: &str) -> Duration {
    let mut events = session.watch("").recursive().stream().await.unwrap();
    let ready = events.next().await.unwrap().unwrap();
    assert_eq!(ready.kind(), ChangeKind::Ready);
    let written = Instant::now();
    std::fs::write(root.join(name), "from a container\n").unwrap();
    let event = next_change(&mut events).await;
    let took = written.elapsed();
    assert_eq!(
        (event.kind(), event.path.as_str(), event.caller.as_str()),
        (ChangeKind::Created, name, "external")
    );
    took
}

/// Waits (at most 10 s) until the server holds at most `most` inotify
/// watches; what it holds then.
async fn watches_fall_to(server: &Server, most: usize) -> usize {
    let started = Instant::now();
    loop {
        let (_, watches) = server.inotify();
        if watches <= most || started.elapsed() > Duration::from_secs(10) {
            return watches;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_thousand_directory_sessions_share_one_watcher_and_no_thread_each() {
    const MANY: usize = 1_000;
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let mut sessions = Vec::new();
    grow(&client, &mut sessions, 10).await;
    let threads_at_10 = server.threads();
    let (_, watches_at_10) = server.inotify();

    grow(&client, &mut sessions, MANY).await;
    let threads_at_many = server.threads();
    let (instances, watches_at_many) = server.inotify();
    assert!(
        threads_at_many <= threads_at_10 + THREAD_SLACK,
        "{threads_at_many} server threads with {MANY} sessions, {threads_at_10} with 10"
    );
    assert_eq!(instances, 1, "one inotify instance for the whole server");
    assert!(
        watches_at_many >= MANY,
        "only {watches_at_many} inotify watches for {MANY} session roots: some are polled"
    );

    let mut latencies = Vec::new();
    for i in [0, MANY / 2, MANY - 1] {
        let (session, root) = &sessions[i];
        let took = outside_change_reported_after(session, root, &format!("outside-{i}.txt")).await;
        assert!(
            took < REPORTED_WITHIN,
            "an outside change in session {i} of {MANY} was reported after {took:?}"
        );
        latencies.push(took);
    }

    // Deleted sessions give their watches back.
    for (session, _) in sessions.drain(10..) {
        client.delete_session(session.id()).await.unwrap();
    }
    let watches_after = watches_fall_to(&server, watches_at_10 + 2).await;
    assert!(
        watches_after <= watches_at_10 + 2,
        "{watches_after} inotify watches after deleting back to 10 sessions ({watches_at_10} at first)"
    );
    eprintln!(
        "{MANY} DIRECTORY sessions: threads {threads_at_10} at 10, {threads_at_many} at {MANY}; \
         inotify watches {watches_at_10} at 10, {watches_at_many} at {MANY}, {watches_after} after deleting; \
         outside change reported after {latencies:?}"
    );
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn past_the_watch_limit_sessions_are_scanned_by_one_thread() {
    // As if the kernel's watch limit were reached: every root is polled.
    const MANY: usize = 200;
    let mut server = Server::start_limited(
        crate::harness::DEFAULT_ADDRESS_SPACE,
        &[],
        &[("WSFS_TEST_FORCE_POLL_WATCHER", "1")],
    );
    let client = server.client().await;
    let mut sessions = Vec::new();
    grow(&client, &mut sessions, 10).await;
    let threads_at_10 = server.threads();
    grow(&client, &mut sessions, MANY).await;
    let threads_at_many = server.threads();
    assert!(
        threads_at_many <= threads_at_10 + THREAD_SLACK,
        "{threads_at_many} server threads with {MANY} polled sessions, {threads_at_10} with 10"
    );
    let mut latencies = Vec::new();
    for i in [0, MANY - 1] {
        let (session, root) = &sessions[i];
        latencies
            .push(outside_change_reported_after(session, root, &format!("polled-{i}.txt")).await);
    }
    eprintln!(
        "{MANY} polled DIRECTORY sessions: threads {threads_at_10} at 10, {threads_at_many} at {MANY}; \
         outside change reported after {latencies:?}"
    );
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn past_the_kernels_watch_limit_a_root_is_scanned_and_gives_its_watches_back() {
    const LIMIT: usize = 20;
    // The kernel's own limit, lowered for this server alone.
    let Some(mut server) = Server::start_with_watch_limit(LIMIT as u32, &[]) else {
        return;
    };
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    let root = info.root_path.expect("a DIRECTORY session has a root");
    let mut events = session.watch("").recursive().stream().await.unwrap();
    assert_eq!(next_change(&mut events).await.kind(), ChangeKind::Ready);

    // More directories than the kernel will watch, made from outside.
    for i in 0..LIMIT + 10 {
        std::fs::create_dir(root.join(format!("d{i}"))).unwrap();
    }
    let started = Instant::now();
    while !server.log().contains("scanning its root") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the root did not fall back to scanning: {}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A file in a directory the kernel would not watch is still reported.
    let late = format!("d{}/late.txt", LIMIT + 9);
    let written = Instant::now();
    std::fs::write(root.join(&late), "from a container\n").unwrap();
    // What changed while the root moved from the kernel's watch to the
    // scan is in neither: the watcher is told to resync first.
    let mut resynced = false;
    let event = loop {
        let e = next_change(&mut events).await;
        resynced |= e.kind() == ChangeKind::Resync;
        if e.path == late {
            break e;
        }
    };
    assert!(resynced, "no RESYNC when the root moved to scanning");
    let scanned_after = written.elapsed();
    assert_eq!(
        (event.kind(), event.caller.as_str()),
        (ChangeKind::Created, "external")
    );

    // The scanned root gave its watches back: a new session is watched by
    // the kernel again.
    let (_, watches) = server.inotify();
    assert!(
        watches < LIMIT,
        "{watches} watches held after the fall-back"
    );
    let (other, info) = client.create(SessionOptions::directory()).await.unwrap();
    let other_root = info.root_path.expect("a DIRECTORY session has a root");
    let native_after = outside_change_reported_after(&other, &other_root, "outside.txt").await;
    assert!(
        native_after < REPORTED_WITHIN,
        "a session under the limit again was reported after {native_after:?}"
    );
    eprintln!(
        "watch limit {LIMIT}: a root past it scanned, its change reported after {scanned_after:?}; \
         {watches} watches left; a new session reported natively after {native_after:?}"
    );
    server.assert_serves_bystander().await;
}
