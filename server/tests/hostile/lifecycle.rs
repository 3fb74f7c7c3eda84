//! Connections, Watch streams, idle expiry, shutdown and filesystem watchers.

use crate::harness::{
    closed_within, error_reason, reason, Events, Server, EMPTY_SETTINGS, MIB, PREFACE,
};
use futures::StreamExt;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;
use wsfs::proto;
use wsfs_client::{ChangeKind, SessionOptions};

#[tokio::test]
async fn silent_connections_are_capped_and_closed_while_a_bystander_is_served() {
    const CAP: usize = 40;
    let mut server = Server::start(&[
        "--max-connections",
        &CAP.to_string(),
        "--handshake-timeout",
        "300ms",
        "--idle-timeout",
        "2s",
    ]);
    server.assert_serves_bystander().await;
    let baseline = server.open_fds();

    // 600 connections that never open HTTP/2: half say nothing, half send
    // the preface alone.
    let mut silent = Vec::new();
    for i in 0..600 {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        if i % 2 == 1 {
            s.write_all(PREFACE).await.unwrap();
        }
        silent.push(s);
    }
    let mut most_fds = 0;
    for _ in 0..10 {
        most_fds = most_fds.max(server.open_fds());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        most_fds <= baseline + CAP + 4,
        "the server held {most_fds} descriptors with a cap of {CAP} connections (idle: {baseline})"
    );
    let started = Instant::now();
    server.assert_serves_bystander().await;
    let bystander = started.elapsed();

    // Every silent one is closed by the server, none left behind.
    for s in &mut silent {
        assert!(
            closed_within(s, Duration::from_secs(20)).await.is_some(),
            "a silent connection was never closed"
        );
    }
    drop(silent);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        server.open_fds() <= baseline + 2,
        "descriptors after the silent connections closed: {} (idle: {baseline})",
        server.open_fds()
    );
    eprintln!("600 silent connections: most fds {most_fds} (idle {baseline}), bystander {bystander:?}, peak rss {} MiB", server.peak_rss() / MIB);
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_a_long_watch_keeps_its_own() {
    let mut server = Server::start(&["--handshake-timeout", "1s", "--idle-timeout", "2s"]);
    // Opens HTTP/2 properly, then never calls anything.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(PREFACE).await.unwrap();
    idle.write_all(&EMPTY_SETTINGS).await.unwrap();

    // A Watch runs longer than the idle timeout on its own connection.
    let client = server.client().await;
    let (session, _) = client.create(SessionOptions::memory()).await.unwrap();
    let mut events = session.watch("").recursive().stream().await.unwrap();
    let ready = events.next().await.unwrap().unwrap();
    assert_eq!(ready.kind(), ChangeKind::Ready);

    let closed = closed_within(&mut idle, Duration::from_secs(10))
        .await
        .expect("the idle connection was never closed");
    assert!(
        closed >= Duration::from_millis(1900),
        "closed after {closed:?}, before its idle timeout"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writer = server.client().await.session(session.id());
    writer.write_str("late.txt", "x").await.unwrap();
    let event = loop {
        let e = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("the Watch went quiet")
            .expect("the Watch ended")
            .expect("the Watch failed");
        if e.kind() != ChangeKind::Keepalive {
            break e;
        }
    };
    assert_eq!(
        (event.kind(), event.path.as_str()),
        (ChangeKind::Created, "late.txt")
    );
    server.assert_serves_bystander().await;
}

/// The next event that is not a keep-alive, or the error that ended the
/// stream, within `within`.
async fn next_event(
    events: &mut Events,
    within: Duration,
) -> Option<wsfs::Result<proto::ChangeEvent>> {
    tokio::time::timeout(within, async {
        loop {
            match events.next().await {
                Some(Ok(e)) if e.kind() == ChangeKind::Keepalive => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the Watch neither ended nor said anything")
}

/// A recursive Watch of the whole session, past its READY.
async fn watch_everything(session: &wsfs_client::Session) -> Events {
    let mut events = session.watch("").recursive().stream().await.unwrap();
    let ready = next_event(&mut events, Duration::from_secs(5)).await;
    assert_eq!(ready.unwrap().unwrap().kind(), ChangeKind::Ready);
    events
}

/// Panics unless `err` carries `code` and the contract `reason`.
fn assert_refused(err: &wsfs::Error, code: Code, reason: &str) {
    assert_eq!((err.code(), error_reason(err)), (code, reason), "{err:?}");
}

#[tokio::test]
async fn a_watch_ends_when_its_session_is_deleted_and_releases_it() {
    let mut server = Server::start(&["--watch-keepalive-ms", "100"]);
    let client = server.client().await;
    let baseline = server.open_fds();
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    session.write_str("a.txt", "a").await.unwrap();
    let mut events = watch_everything(&session).await;
    let held = server.open_fds();
    assert!(held > baseline, "a DIRECTORY session holds descriptors");

    client.delete_session(&info.id).await.unwrap();
    let ended = next_event(&mut events, Duration::from_secs(5)).await;
    let err = ended
        .expect("the stream ended without an error")
        .unwrap_err();
    assert_refused(&err, Code::NotFound, "SESSION_NOT_FOUND");
    assert!(
        events.next().await.is_none(),
        "the stream goes on after its error"
    );
    // The session's root directory and its watcher are let go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        server.open_fds() <= baseline + 1,
        "descriptors after the delete: {} (before the session: {baseline}, with it: {held})",
        server.open_fds()
    );
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn a_watch_does_not_keep_its_session_alive_and_ends_when_it_expires() {
    let mut server = Server::start(&["--watch-keepalive-ms", "100"]);
    let client = server.client().await;
    let (session, info) = client
        .create(SessionOptions::memory().idle_ttl(Duration::from_secs(1)))
        .await
        .unwrap();
    let mut events = watch_everything(&session).await;
    let err = next_event(&mut events, Duration::from_secs(6))
        .await
        .expect("the stream ended without an error")
        .unwrap_err();
    assert_refused(&err, Code::NotFound, "SESSION_NOT_FOUND");
    let gone = client.get_session(&info.id).await.unwrap_err();
    assert_eq!(error_reason(&gone), "SESSION_NOT_FOUND");
    server.assert_serves_bystander().await;
}

/// A raw ReadBytes stream of `path`, `chunk_size` bytes a message.
async fn read_bytes(
    client: &wsfs_client::Client,
    session_id: &str,
    path: &str,
    chunk_size: u32,
) -> tonic::Streaming<proto::ReadBytesResponse> {
    let request = proto::ReadBytesRequest {
        session_id: session_id.to_string(),
        path: path.to_string(),
        chunk_size,
        ..Default::default()
    };
    let response = client.raw_filesystem().read_bytes(request).await;
    response.expect("ReadBytes").into_inner()
}

fn data_len(m: proto::ReadBytesResponse) -> usize {
    match m.payload {
        Some(proto::read_bytes_response::Payload::Data(d)) => d.len(),
        _ => 0,
    }
}

#[tokio::test]
async fn a_slow_read_keeps_its_session_from_expiring_until_it_ends() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client
        .create(SessionOptions::memory().idle_ttl(Duration::from_secs(1)))
        .await
        .unwrap();
    let data = vec![7u8; 8 * MIB as usize];
    session
        .upload(
            "big.bin",
            std::io::Cursor::new(data.clone()),
            Default::default(),
        )
        .await
        .unwrap();
    let mut reads = read_bytes(&client, &info.id, "big.bin", 4096).await;
    // Three idle TTLs of a slow reader: the session stays.
    let started = Instant::now();
    let mut got = 0usize;
    while started.elapsed() < Duration::from_secs(3) {
        got += data_len(reads.message().await.unwrap().expect("data"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while let Some(m) = reads.message().await.expect("the read broke off") {
        got += data_len(m);
    }
    assert_eq!(got, data.len());
    client
        .get_session(&info.id)
        .await
        .expect("expired under a running read");
    // Its clock restarts when the read ends: idle now, it goes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let err = client.get_session(&info.id).await.unwrap_err();
    assert_eq!(error_reason(&err), "SESSION_NOT_FOUND");
    server.assert_serves_bystander().await;
}

/// Whether ListSessions, which does not count as use, lists `id`.
async fn listed(client: &wsfs_client::Client, id: &str) -> bool {
    let all = client.list_sessions().await.expect("ListSessions");
    all.iter().any(|s| s.id == id)
}

#[tokio::test]
async fn the_idle_clock_restarts_when_a_watch_ends() {
    const TTL: Duration = Duration::from_secs(2);
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client
        .create(SessionOptions::memory().idle_ttl(TTL))
        .await
        .unwrap();
    // Most of a TTL with only a Watch open, which does not keep the
    // session alive; then the watcher hangs up.
    let events = watch_everything(&session).await;
    tokio::time::sleep(TTL * 3 / 4).await;
    drop(events);
    let ended = Instant::now();
    // Idle from the Watch's end on: gone about one TTL later, not before.
    // (ListSessions does not count as use.)
    while listed(&client, &info.id).await {
        assert!(
            ended.elapsed() < TTL + Duration::from_secs(5),
            "still there {:?} after its Watch ended, with a TTL of {TTL:?}",
            ended.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone_after = ended.elapsed();
    assert!(
        gone_after >= TTL - Duration::from_millis(300),
        "expired {gone_after:?} after its Watch ended, with a TTL of {TTL:?}"
    );
    let err = client.get_session(&info.id).await.unwrap_err();
    assert_eq!(error_reason(&err), "SESSION_NOT_FOUND");
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn sigterm_ends_watches_and_a_stalled_call_within_the_grace() {
    let mut server = Server::start(&["--shutdown-grace", "1s"]);
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    session
        .upload(
            "big.bin",
            std::io::Cursor::new(vec![1u8; 16 * MIB as usize]),
            Default::default(),
        )
        .await
        .unwrap();
    let mut watch = watch_everything(&session).await;
    // A download whose client stops reading: it cannot finish by itself.
    let mut stalled = read_bytes(&server.client().await, &info.id, "big.bin", 0).await;
    stalled.message().await.unwrap();

    let started = Instant::now();
    let status = server
        .terminate(Duration::from_secs(10))
        .expect("the server did not exit after SIGTERM");
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert!(took < Duration::from_secs(4), "exit took {took:?}");
    let err = next_event(&mut watch, Duration::from_secs(5))
        .await
        .expect("the Watch ended without a word")
        .unwrap_err();
    assert_refused(&err, Code::Unavailable, "UNAVAILABLE");
    assert!(err.to_string().contains("shutting down"), "{err}");
    eprintln!("SIGTERM with a Watch and a stalled read: exited in {took:?}");
}

#[tokio::test]
async fn reserved_caller_names_are_refused_and_named_callers_do_not_manage_sessions() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client
        .create(SessionOptions::memory().seed_file("keep.txt", "kept\n"))
        .await
        .unwrap();
    for reserved in ["external", "EXTERNAL", "system"] {
        let err = session
            .clone()
            .with_caller(reserved)
            .unwrap()
            .write_str("keep.txt", "forged\n")
            .await
            .unwrap_err();
        assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
    let snapshot = client.snapshot(&info.id, "before").await.unwrap();
    session.write_str("keep.txt", "kept\n").await.unwrap();

    let bob = server.client().await.with_caller("bob").unwrap();
    let denied = |err: wsfs::Error| {
        assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    };
    denied(bob.delete_session(&info.id).await.unwrap_err());
    denied(bob.restore(&info.id, &snapshot.id).await.unwrap_err());
    denied(bob.snapshot(&info.id, "mine").await.unwrap_err());
    let archive = server.scratch().join("a.zip");
    session.export_to(&archive).await.unwrap();
    denied(
        bob.session(&info.id)
            .import_from(&archive)
            .await
            .unwrap_err(),
    );
    // Nothing changed.
    assert_eq!(session.read_to_string("keep.txt").await.unwrap(), "kept\n");
    assert_eq!(client.list_snapshots(&info.id).await.unwrap().len(), 1);

    // Raw: the refusal carries the contract reason in ErrorInfo.
    let mut raw = server.client().await.raw_sessions();
    let mut request = tonic::Request::new(proto::DeleteSessionRequest {
        session_id: info.id.clone(),
    });
    request
        .metadata_mut()
        .insert("x-wsfs-caller", "external".parse().unwrap());
    let status = raw.delete_session(request).await.unwrap_err();
    assert_eq!(
        (status.code(), reason(&status).as_str()),
        (Code::InvalidArgument, "INVALID_ARGUMENT")
    );
    client.get_session(&info.id).await.unwrap();
    server.assert_serves_bystander().await;
}

/// Every event (keep-alives aside) that arrives within `quiet` of the last.
async fn drain_events(events: &mut Events, quiet: Duration) -> Vec<proto::ChangeEvent> {
    let mut got = Vec::new();
    let mut deadline = tokio::time::Instant::now() + quiet;
    while let Ok(Some(e)) = tokio::time::timeout_at(deadline, events.next()).await {
        let e = e.expect("the Watch failed");
        if e.kind() != ChangeKind::Keepalive {
            got.push(e);
            deadline = tokio::time::Instant::now() + quiet;
        }
    }
    got
}

/// Panics unless the events that arrive until a quiet second are exactly
/// `want`: (kind, path, caller).
async fn expect_only(events: &mut Events, want: &[(ChangeKind, &str, &str)], after: &str) {
    // Longer than a polling session's scan interval.
    let got = drain_events(events, Duration::from_millis(2500)).await;
    let got: Vec<_> = got
        .iter()
        .map(|e| (e.kind(), e.path.as_str(), e.caller.as_str()))
        .collect();
    assert_eq!(got, want, "events after {after}");
}

#[tokio::test]
async fn the_services_own_tree_changes_are_reported_once_and_never_as_external() {
    use wsfs::{DeleteOptions, Filesystem, TransferOptions};
    const FILES: usize = 60;
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    for i in 0..FILES {
        session
            .write_str(&format!("crate/src/m{}/f{i}.rs", i % 6), "fn f() {}\n")
            .await
            .unwrap();
    }
    let snapshot = client.snapshot(&info.id, "full").await.unwrap();
    let archive = server.scratch().join("crate.zip");
    session.export_to(&archive).await.unwrap();
    // The writes' own filesystem events settle first.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut events = watch_everything(&session).await;
    let p = |s: &str| wsfs_client::parse_path(s).unwrap();

    let options = TransferOptions::default();
    session
        .copy(&p("crate"), &p("copy"), options)
        .await
        .unwrap();
    expect_only(
        &mut events,
        &[(ChangeKind::Created, "copy", "system")],
        "Copy",
    )
    .await;
    session
        .rename(&p("copy"), &p("moved"), options)
        .await
        .unwrap();
    expect_only(
        &mut events,
        &[(ChangeKind::Moved, "copy", "system")],
        "Move",
    )
    .await;
    let recursive = DeleteOptions {
        recursive: true,
        ..Default::default()
    };
    for dir in ["moved", "crate"] {
        assert!(session.delete(&p(dir), recursive).await.unwrap() > 0);
        let want = [(ChangeKind::Deleted, dir, "system")];
        expect_only(&mut events, &want, "a recursive Delete").await;
    }
    // Restore and ImportArchive replace the whole tree: a RESYNC, nothing else.
    let resync = [(ChangeKind::Resync, "", "")];
    client.restore(&info.id, &snapshot.id).await.unwrap();
    expect_only(&mut events, &resync, "Restore").await;
    session.import_from(&archive).await.unwrap();
    expect_only(&mut events, &resync, "ImportArchive").await;

    // A change from outside is still reported, once, as external.
    let root = info.root_path.expect("a DIRECTORY session has a root");
    std::fs::write(root.join("crate/outside.txt"), "from a container\n").unwrap();
    let want = [(ChangeKind::Created, "crate/outside.txt", "external")];
    expect_only(&mut events, &want, "a write from outside").await;
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn a_session_without_a_filesystem_watcher_still_reports_outside_changes_by_polling() {
    // As if the inotify instances were used up by earlier sessions.
    let mut server = Server::start_limited(
        crate::harness::DEFAULT_ADDRESS_SPACE,
        &[],
        &[("WSFS_TEST_FORCE_POLL_WATCHER", "1")],
    );
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    session.write_str("mine.txt", "service\n").await.unwrap();
    let mut events = watch_everything(&session).await;
    let root = info.root_path.expect("a DIRECTORY session has a root");
    std::fs::write(root.join("outside.txt"), "from a container\n").unwrap();
    let want = [(ChangeKind::Created, "outside.txt", "external")];
    expect_only(&mut events, &want, "a write from outside, polled").await;
    std::fs::remove_file(root.join("mine.txt")).unwrap();
    let want = [(ChangeKind::Deleted, "mine.txt", "external")];
    expect_only(&mut events, &want, "a delete from outside, polled").await;
    assert!(
        server
            .log()
            .contains("scanning its root for outside changes"),
        "the fallback was not logged: {}",
        server.log_tail()
    );
    server.assert_serves_bystander().await;
}

/// Every file under `dir` with its contents, for "nothing changed".
fn tree(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            found.extend(tree(&path));
        } else {
            found.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn a_nested_root_swapped_for_a_link_outside_is_never_followed_before_or_after_a_restart() {
    use wsfs::{DeleteOptions, Filesystem};
    let mut server = Server::start(&[]);
    let allowed = server.scratch().join("allowed");
    let outside = server.scratch().join("outside");
    std::fs::create_dir_all(allowed.join("a/b")).unwrap();
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("secret.txt"), "canary\n").unwrap();
    std::fs::write(outside.join("deep/keep.txt"), "canary\n").unwrap();
    let canary = tree(&outside);
    let allow = [
        "--allow-root",
        allowed.to_str().unwrap(),
        "--shutdown-grace",
        "1s",
    ];
    server.restart(&allow);

    let client = server.client().await;
    let (a, a_info) = client
        .create(SessionOptions::directory().root(allowed.join("a")))
        .await
        .unwrap();
    let (b, b_info) = client
        .create(SessionOptions::directory().root(allowed.join("a/b")))
        .await
        .unwrap();
    b.write_str("mine.txt", "b\n").await.unwrap();

    // A's container swaps B's root for a link to a directory outside.
    let p = |s: &str| wsfs_client::parse_path(s).unwrap();
    a.rename(&p("b"), &p("b-old"), Default::default())
        .await
        .unwrap();
    std::os::unix::fs::symlink(&outside, allowed.join("a/b")).unwrap();

    // While running, B keeps its own directory: nothing outside is read.
    let err = b.read_to_string("secret.txt").await.unwrap_err();
    assert_refused(&err, Code::NotFound, "FILE_NOT_FOUND");
    assert_eq!(b.read_to_string("mine.txt").await.unwrap(), "b\n");

    // After a restart B is not reopened through the link.
    server.restart(&allow);
    let client = server.client().await;
    let b = client.session(&b_info.id);
    let err = b.read_to_string("secret.txt").await.unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    assert!(err.to_string().contains("unavailable"), "{err}");
    let err = b.write_str("planted.txt", "x").await.unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    let recursive = DeleteOptions {
        recursive: true,
        ..Default::default()
    };
    let err = b.delete(&p("deep"), recursive).await.unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    let err = client.snapshot(&b_info.id, "x").await.unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");

    // GetSession and ListSessions show it, and why.
    let shown = client.get_session(&b_info.id).await.unwrap();
    let why = shown
        .labels
        .get("wsfs.unavailable")
        .expect("marked unavailable");
    assert!(why.contains("link") || why.contains("replaced"), "{why}");
    let listed = client.list_sessions().await.unwrap();
    assert!(listed
        .iter()
        .any(|s| s.id == b_info.id && s.labels.contains_key("wsfs.unavailable")));
    assert_eq!(tree(&outside), canary, "the directory outside changed");

    // Deleting it removes the record only.
    client.delete_session(&b_info.id).await.unwrap();
    let err = client.get_session(&b_info.id).await.unwrap_err();
    assert_refused(&err, Code::NotFound, "SESSION_NOT_FOUND");
    assert_eq!(tree(&outside), canary, "the directory outside changed");
    assert_eq!(
        std::fs::read_to_string(allowed.join("a/b-old/mine.txt")).unwrap(),
        "b\n"
    );

    // A root replaced by another directory of the same name is not the
    // session's root any more; one outside the allowed roots is refused.
    let a = client.session(&a_info.id);
    a.write_str("a.txt", "a\n").await.unwrap();
    drop(client);
    std::fs::rename(allowed.join("a"), allowed.join("a-old")).unwrap();
    std::fs::create_dir(allowed.join("a")).unwrap();
    server.restart(&allow);
    let client = server.client().await;
    let err = client
        .session(&a_info.id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    assert!(err.to_string().contains("replaced"), "{err}");
    drop(client);
    std::fs::remove_dir(allowed.join("a")).unwrap();
    std::fs::rename(allowed.join("a-old"), allowed.join("a")).unwrap();
    server.restart(&[]);
    let client = server.client().await;
    let err = client
        .session(&a_info.id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--allow-root"), "{err}");
    // Back in the allowed roots and the same directory: served again.
    drop(client);
    server.restart(&allow);
    let client = server.client().await;
    assert_eq!(
        client
            .session(&a_info.id)
            .read_to_string("a.txt")
            .await
            .unwrap(),
        "a\n"
    );
    server.assert_serves_bystander().await;
}

/// An operator running at `warn` sees refused credentials with who sent
/// them, not the misses clients expect; every record is one line.
#[tokio::test]
async fn failures_that_need_an_operator_are_logged_at_warn_with_the_peer_on_one_line() {
    const ADMIN: &str = "an-admin-token-long-enough-for-the-server";
    let server = Server::start_limited(
        crate::harness::DEFAULT_ADDRESS_SPACE,
        &["--admin-token", ADMIN],
        &[("RUST_LOG", "warn")],
    );
    let anonymous = server.client().await;
    let err = anonymous
        .create(SessionOptions::memory())
        .await
        .unwrap_err();
    assert_eq!(error_reason(&err), "UNAUTHENTICATED");
    let admin = server.client().await.with_token(ADMIN).unwrap();
    let (session, _) = admin.create(SessionOptions::memory()).await.unwrap();
    let missing = session
        .read_to_string("no-such-file.txt")
        .await
        .unwrap_err();
    assert_eq!(error_reason(&missing), "FILE_NOT_FOUND");
    // A regex error is several lines long from the parser.
    let bad = session.grep_query("(unclosed").stream().await;
    assert!(bad.is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let log = server.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("UNAUTHENTICATED"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert!(refused[0].contains("WARN"), "{}", refused[0]);
    assert!(refused[0].contains("peer=127.0.0.1:"), "{}", refused[0]);
    assert!(
        !log.contains("FILE_NOT_FOUND"),
        "a miss is not a warning: {log}"
    );
    assert!(!log.contains("INVALID_PATTERN"), "{log}");
    assert!(!log.contains('\x1b'), "no colours in a log file: {log}");
    // Every record starts with its timestamp: no error spilled onto
    // lines of its own.
    for line in log.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.as_bytes()[0].is_ascii_digit(),
            "a line that is not a record: {line:?}"
        );
    }
}

/// `GET PATH` over plain HTTP/1.1 to `addr`: the status line and the body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: wsfs\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The value of the series `name{labels}` in an exposition text.
fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

/// An operator's dashboard: sessions by backend, running streams by kind,
/// and every call counted by method and outcome with its latency.
#[tokio::test]
async fn the_metrics_endpoint_shows_sessions_streams_and_calls_by_outcome() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let mut server = Server::start(&["--metrics-listen", &metrics]);
    let addr: std::net::SocketAddr = metrics.parse().unwrap();
    let client = server.client().await;
    let (memory, _) = client.create(SessionOptions::memory()).await.unwrap();
    client.create(SessionOptions::directory()).await.unwrap();
    client.create(SessionOptions::directory()).await.unwrap();
    memory
        .write_str("big.bin", &"x".repeat(8 << 20))
        .await
        .unwrap();
    memory.read_to_string("missing.txt").await.unwrap_err();
    memory.read_to_string("missing.txt").await.unwrap_err();
    // A ReadBytes left open, unread.
    let mut raw = wsfs_client::Client::connect(&server.url)
        .await
        .unwrap()
        .raw_filesystem();
    let mut open = raw
        .read_bytes(proto::ReadBytesRequest {
            session_id: memory.id().to_string(),
            path: "big.bin".into(),
            offset: 0,
            limit: 0,
            chunk_size: 65536,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(open.message().await.unwrap().is_some());

    let (status, text) = http_get(addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(
        series(&text, "wsfs_sessions{backend=\"memory\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "wsfs_sessions{backend=\"directory\"}"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "wsfs_active_streams{kind=\"read_bytes\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "wsfs_rpc_total{method=\"Read\",outcome=\"FILE_NOT_FOUND\"}"
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "wsfs_rpc_total{method=\"CreateSession\",outcome=\"OK\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "wsfs_rpc_duration_seconds_count{method=\"Read\"}"),
        Some(2.0),
        "{text}"
    );
    drop(open);
    drop(raw);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, text) = http_get(addr, "/metrics").await;
    assert_eq!(
        series(&text, "wsfs_active_streams{kind=\"read_bytes\"}"),
        Some(0.0),
        "{text}"
    );

    let (status, _) = http_get(addr, "/secrets").await;
    assert!(status.contains("404"), "{status}");
    server.assert_serves_bystander().await;
}
