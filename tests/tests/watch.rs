//! Watch and Changes over real gRPC: READY first, every change with its
//! version and caller, scope and glob filters, resume without a gap, RESYNC
//! when the ring has moved on, keep-alives while idle, polling; and the
//! compare-and-swap that `if_version` gives a swarm.

use futures::stream::{BoxStream, StreamExt};
use std::time::Duration;
use wsfs_client::{
    ChangeEvent, ChangeKind, Client, DeleteOptions, Error, Filesystem, Layout, LineRange, Session,
    SessionOptions, TransferOptions, WriteOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, try_increment};

const ADMIN: &str = "admin-token-for-tests-0123456789";

type Events = BoxStream<'static, wsfs_client::Result<ChangeEvent>>;

/// A new DIRECTORY session, its root on disk, and a recursive Watch of
/// it past its READY.
async fn watched_directory_session(server: &TestServer) -> (Session, std::path::PathBuf, Events) {
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, info) = client.create(SessionOptions::directory()).await.unwrap();
    let root = info.root_path.expect("a DIRECTORY session has a root");
    let mut events = s.watch("").recursive().stream().await.unwrap();
    assert_eq!(next(&mut events).await.kind(), ChangeKind::Ready);
    (s, root, events)
}

/// The next event that is not a KEEPALIVE, within five seconds.
async fn next(events: &mut Events) -> ChangeEvent {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event within five seconds")
            .expect("the stream stays open")
            .expect("no error");
        if e.kind() != ChangeKind::Keepalive {
            return e;
        }
    }
}

/// A SWARM session with a named member `alice` next to the system caller.
async fn swarm(server: &TestServer, options: SessionOptions) -> (Session, Session) {
    let admin = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let (system, info) = admin.create(options.layout(Layout::Swarm)).await.unwrap();
    let alice = admin.issue_token(&info.id, "alice").await.unwrap().token;
    (system, admin.session(&info.id).with_token(&alice).unwrap())
}

/// A recursive Watch of the whole workspace from `since`, and its READY.
async fn watch_since(s: &Session, since: u64) -> (Events, ChangeEvent) {
    let mut events = s.watch("").recursive().since(since).stream().await.unwrap();
    let ready = next(&mut events).await;
    assert_eq!(ready.kind(), ChangeKind::Ready);
    (events, ready)
}

/// Writes `x` to `{prefix}0` .. `{prefix}{count - 1}`, one after another.
async fn write_numbered(s: &Session, prefix: &str, count: usize) {
    for i in 0..count {
        s.write(&p(&format!("{prefix}{i}")), "x", WriteOptions::default())
            .await
            .unwrap();
    }
}

async fn tokens_on() -> TestServer {
    TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await
}

async fn plain(configure: impl FnOnce(&mut wsfs_server::ServerConfig)) -> (TestServer, Session) {
    let server = TestServer::start_with(configure).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (session, _) = client.create(SessionOptions::memory()).await.unwrap();
    (server, session)
}

#[tokio::test]
async fn watch_reports_every_change_with_version_and_caller() {
    let server = tokens_on().await;
    let (system, alice) = swarm(&server, SessionOptions::memory()).await;
    system
        .write(&p("shared/old.md"), "x", WriteOptions::default())
        .await
        .unwrap();
    // The seq of the one change so far (a log's numbering starts at the
    // wall clock in microseconds, not at 1).
    let current = system.changes(0, 0).await.unwrap().next_seq;
    let mut events = system.watch("").recursive().stream().await.unwrap();
    let ready = next(&mut events).await;
    assert_eq!(ready.kind(), ChangeKind::Ready);
    assert_eq!(ready.seq, current, "READY carries the current seq");

    let created = alice
        .write(&p("shared/a.md"), "1", WriteOptions::default())
        .await
        .unwrap();
    let modified = alice
        .write(&p("shared/a.md"), "2", WriteOptions::default())
        .await
        .unwrap();
    alice
        .rename(
            &p("shared/a.md"),
            &p("shared/b.md"),
            TransferOptions::default(),
        )
        .await
        .unwrap();
    system
        .delete(&p("shared/old.md"), DeleteOptions::default())
        .await
        .unwrap();

    let e = next(&mut events).await;
    assert_eq!(
        (
            e.seq,
            e.kind(),
            e.path.as_str(),
            e.version,
            e.caller.as_str()
        ),
        (
            current + 1,
            ChangeKind::Created,
            "shared/a.md",
            created.version,
            "alice"
        )
    );
    assert!(e.at.is_some());
    let e = next(&mut events).await;
    assert_eq!(
        (e.kind(), e.version, e.caller.as_str()),
        (ChangeKind::Modified, modified.version, "alice")
    );
    let e = next(&mut events).await;
    assert_eq!(
        (
            e.kind(),
            e.path.as_str(),
            e.to_path.as_str(),
            e.caller.as_str()
        ),
        (ChangeKind::Moved, "shared/a.md", "shared/b.md", "alice")
    );
    let e = next(&mut events).await;
    assert_eq!(
        (e.kind(), e.path.as_str(), e.caller.as_str()),
        (ChangeKind::Deleted, "shared/old.md", "system")
    );
}

#[tokio::test]
async fn watch_keeps_to_its_glob_and_scope() {
    let (_server, s) = plain(|_| {}).await;
    let mut shallow = s.watch("src").glob("*.rs").stream().await.unwrap();
    assert_eq!(next(&mut shallow).await.kind(), ChangeKind::Ready);
    for path in ["src/x/deep.rs", "src/notes.txt", "other/a.rs", "src/a.rs"] {
        s.write(&p(path), "x", WriteOptions::default())
            .await
            .unwrap();
    }
    let e = next(&mut shallow).await;
    assert_eq!(
        e.path, "src/a.rs",
        "only the direct child matching the glob"
    );

    let mut deep = s
        .watch("src")
        .recursive()
        .glob("**/*.rs")
        .since(0)
        .stream()
        .await
        .unwrap();
    next(&mut deep).await;
    s.write(&p("src/x/y/z.rs"), "x", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(next(&mut deep).await.path, "src/x/y/z.rs");
}

/// Watch compiles its glob as Glob does: a backslash escapes a wildcard,
/// so both pick the file literally named `*.md` and not its neighbour, and
/// a pattern neither can parse is refused by both in the same words.
#[tokio::test]
async fn watch_glob_escapes_and_refusals_are_globs() {
    let (_server, s) = plain(|_| {}).await;
    let escaped = r"notes/\*.md";
    let mut events = s
        .watch("")
        .recursive()
        .glob(escaped)
        .stream()
        .await
        .unwrap();
    assert_eq!(next(&mut events).await.kind(), ChangeKind::Ready);
    for path in ["notes/a.md", "notes/*.md"] {
        s.write(&p(path), "x", WriteOptions::default())
            .await
            .unwrap();
    }
    let globbed = s.glob_query(escaped).run().await.unwrap();
    assert_eq!(
        globbed.paths,
        [p("notes/*.md")],
        "Glob takes the star literally"
    );
    assert_eq!(
        next(&mut events).await.path,
        "notes/*.md",
        "and so does Watch: notes/a.md is not reported"
    );

    let glob_refusal = s.glob_query("notes/{a").run().await.unwrap_err();
    let watch_refusal = match s.watch("").glob("notes/{a").stream().await {
        Ok(_) => panic!("Watch took a glob that Glob refuses"),
        Err(e) => e,
    };
    assert!(
        matches!(glob_refusal, Error::InvalidPattern { .. }),
        "{glob_refusal:?}"
    );
    assert_eq!(watch_refusal.to_string(), glob_refusal.to_string());
}

#[tokio::test]
async fn watch_resumes_after_since_seq_without_a_gap() {
    let (_server, s) = plain(|_| {}).await;
    write_numbered(&s, "f", 5).await;
    let base = s.changes(0, 1).await.unwrap().next_seq - 1;
    let (mut events, _) = watch_since(&s, base + 2).await;
    let writer = s.clone();
    let live = tokio::spawn(async move {
        for i in 5..50 {
            writer
                .write(&p(&format!("f{i}")), "x", WriteOptions::default())
                .await
                .unwrap();
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 48 {
        seen.push(next(&mut events).await.seq);
    }
    live.await.unwrap();
    assert_eq!(
        seen,
        (base + 3..=base + 50).collect::<Vec<u64>>(),
        "no loss, no repeat"
    );
}

#[tokio::test]
async fn watch_behind_the_ring_gets_resync() {
    let (_server, s) = plain(|c| c.watch_ring_events = 4).await;
    write_numbered(&s, "f", 10).await;
    // The ring holds the last four: the first change's seq is the fifth
    // held one's less four.
    let base = s.changes(0, 0).await.unwrap().next_seq - 10;
    let (mut events, _) = watch_since(&s, base + 1).await;
    let e = next(&mut events).await;
    assert_eq!((e.kind(), e.seq), (ChangeKind::Resync, base + 10));
    s.write(&p("after"), "x", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        next(&mut events).await.seq,
        base + 11,
        "live again after RESYNC"
    );

    let polled = s.changes(base + 1, 0).await.unwrap();
    assert!(polled.resync);
    assert_eq!(polled.next_seq, base + 11);
}

/// A session's events live in its server's memory: after a restart the
/// log begins again. A watcher resuming with the cursor it kept from
/// before must hear RESYNC at the first answer, before and after the new
/// server has recorded changes of its own, never a stream that silently
/// starts past them; Changes says the same.
#[tokio::test]
async fn a_cursor_kept_across_a_server_restart_gets_resync() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, info) = client.create(SessionOptions::directory()).await.unwrap();
    write_numbered(&s, "old", 3).await;
    let cursor = s.changes(0, 0).await.unwrap().next_seq;
    assert!(cursor > 0);
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let s = client.session(&info.id);
    // Before the restarted server records anything.
    let (mut events, ready) = watch_since(&s, cursor).await;
    let resync = next(&mut events).await;
    assert_eq!(
        (resync.kind(), resync.seq),
        (ChangeKind::Resync, ready.seq),
        "a cursor of the earlier server's log"
    );
    assert!(s.changes(cursor, 0).await.unwrap().resync);

    // After it has recorded more changes than the earlier log had.
    write_numbered(&s, "new", 5).await;
    let new_paths: Vec<String> = (0..5).map(|i| format!("new{i}")).collect();
    let (mut later, _) = watch_since(&s, cursor).await;
    let e = next(&mut later).await;
    assert_eq!(
        e.kind(),
        ChangeKind::Resync,
        "not the new log's events after an old cursor: {e:?}"
    );
    let polled = s.changes(cursor, 0).await.unwrap();
    assert!(polled.resync && polled.events.is_empty(), "{polled:?}");
    // From the new log's start, every change the restarted server made.
    let all = s.changes(0, 0).await.unwrap();
    assert!(!all.resync);
    assert_eq!(
        all.events
            .iter()
            .map(|e| e.path.clone())
            .collect::<Vec<_>>(),
        new_paths
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn idle_watch_sends_keepalives() {
    let (_server, s) = plain(|c| c.watch_keepalive_ms = 50).await;
    let mut events = s.watch("").stream().await.unwrap();
    let ready = events.next().await.unwrap().unwrap();
    assert_eq!(ready.kind(), ChangeKind::Ready);
    let e = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.kind(), ChangeKind::Keepalive);
}

#[tokio::test]
async fn changes_polls_in_pages() {
    let (_server, s) = plain(|_| {}).await;
    write_numbered(&s, "f", 5).await;
    let first = s.changes(0, 3).await.unwrap();
    let base = first.events[0].seq - 1;
    assert_eq!(
        first.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [base + 1, base + 2, base + 3]
    );
    assert_eq!(first.next_seq, base + 3);
    let rest = s.changes(first.next_seq, 0).await.unwrap();
    assert_eq!(
        rest.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [base + 4, base + 5]
    );
    assert!(!rest.resync);
    let none = s.changes(rest.next_seq, 0).await.unwrap();
    assert!(none.events.is_empty());
    assert_eq!(none.next_seq, base + 5);
}

/// Eight clients increment one counter by read-modify-write with
/// `if_version`, retrying on VERSION_MISMATCH: no increment is lost.
async fn counter_loses_no_update(options: SessionOptions) {
    let (_server, s) = {
        let server = TestServer::start().await;
        let client = Client::connect(&server.url()).await.unwrap();
        let (s, _) = client.create(options).await.unwrap();
        (server, s)
    };
    let counter = p("counter");
    s.write(&counter, "0", WriteOptions::default())
        .await
        .unwrap();
    let mut workers = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        let counter = counter.clone();
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while done < 25 {
                match try_increment(&s, &counter).await {
                    Ok(landed) => done += u64::from(landed),
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            done
        }));
    }
    let mut total = 0;
    for w in workers {
        total += w.await.unwrap();
    }
    let page = s.read(&counter, LineRange::default()).await.unwrap();
    assert_eq!(page.content.trim().parse::<u64>().unwrap(), total);
    assert_eq!(total, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_version_counter_loses_no_update_in_memory() {
    counter_loses_no_update(SessionOptions::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_version_counter_loses_no_update_in_a_directory() {
    counter_loses_no_update(SessionOptions::directory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agent_swarm_does_every_task_exactly_once() {
    let server = tokens_on().await;
    let results = wsfs_tests::swarm::run(&server.url(), ADMIN, 12)
        .await
        .unwrap();
    assert_eq!(results.len(), 12);
    for (i, (task, result)) in results.iter().enumerate() {
        assert_eq!(task, &format!("task-{i:03}"));
        let (value, worker) = result.split_once(" by ").unwrap();
        assert_eq!(value, (i * i).to_string());
        assert!(worker == "worker-a" || worker == "worker-b", "{result}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_sessions_report_changes_made_from_outside() {
    let server = TestServer::start().await;
    let (s, root, mut events) = watched_directory_session(&server).await;

    // The service's own write is reported once, in its caller's name.
    let own = s
        .write(&p("own.txt"), "mine", WriteOptions::default())
        .await
        .unwrap();
    let e = next(&mut events).await;
    assert_eq!(
        (e.path.as_str(), e.caller.as_str(), e.version),
        ("own.txt", "system", own.version)
    );

    // Another process writes into the directory.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo hi > outside.txt")
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(status.success());
    let e = next(&mut events).await;
    assert_eq!(
        (e.kind(), e.path.as_str(), e.caller.as_str()),
        (ChangeKind::Created, "outside.txt", "external"),
        "and no second report of own.txt"
    );
    let stat = s.stat(&p("outside.txt")).await.unwrap();
    assert_eq!(e.version, stat.version);
    assert!(e.version > own.version);
}

/// A directory moved in from outside raises one inotify event, for the
/// directory: the files it already holds are reported from a listing of
/// it (the same gap `mkdir -p d && echo > d/f` opens when the file lands
/// before the watcher watches `d`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_inside_a_directory_moved_in_from_outside_are_reported() {
    let server = TestServer::start().await;
    let (s, root, mut events) = watched_directory_session(&server).await;

    // Made beside the root (same filesystem), then renamed in whole.
    let outside = root.with_extension("incoming");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("a.txt"), "a").unwrap();
    std::fs::write(outside.join("deep/b.txt"), "b").unwrap();
    std::fs::rename(&outside, root.join("moved")).unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let e = next(&mut events).await;
        if e.path.starts_with("moved/") {
            assert_eq!(
                (e.kind(), e.caller.as_str()),
                (ChangeKind::Created, "external"),
                "{e:?}"
            );
            let stat = s.stat(&p(&e.path)).await.unwrap();
            assert_eq!(e.version, stat.version);
            seen.push(e.path);
        }
    }
    seen.sort();
    assert_eq!(seen, ["moved/a.txt", "moved/deep/b.txt"]);
}
