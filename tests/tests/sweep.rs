//! The sweep of the object store (`--sweep-interval`): real `wsfs-server`
//! replicas on one real S3 API (`moto_server`). Deleted sessions and
//! snapshots have their unique contents freed; what a live snapshot
//! references stays, and the session comes back whole elsewhere.
//!
//! The S3 tests need `moto_server`; without it they say so and pass,
//! unless `WSFS_REQUIRE_TOOLS=1`.

use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, Replica, ReplicaSetup};
use wsfs_tests::forwarder::{Action, Forwarder, Link};
use wsfs_tests::kit::{workspace_state, WorkspaceState};
use wsfs_tests::moto::{Moto, BUCKET, PREFIX};

const LEASE_TTL: Duration = Duration::from_secs(3);
/// Generous: a loaded machine delays sweeps and calls.
const PATIENCE: Duration = Duration::from_secs(60);

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Replica `index` on `moto`, sweeping every second with no grace period
/// when `sweeps`.
fn replica(moto: &Moto, dir: &std::path::Path, index: usize, sweeps: bool) -> Replica {
    let mut setup = ReplicaSetup::mirrored(
        &format!("s3://{BUCKET}/{PREFIX}"),
        index,
        LEASE_TTL,
        moto.envs(),
    );
    let interval = if sweeps { "1s" } else { "0" };
    setup.args.extend(
        ["--sweep-interval", interval, "--sweep-grace", "0s"]
            .into_iter()
            .map(String::from),
    );
    Replica::start(dir, index, &setup)
}

/// Recovers session `id` on `replica` (its holder is gone) and checks
/// that it holds `state`.
async fn assert_recovers(replica: &Replica, id: &str, state: &WorkspaceState) {
    let client = Client::connect(&replica.url()).await.unwrap();
    client.recover_session(id, None, true).await.unwrap();
    assert_eq!(&workspace_state(&client.session(id)).await, state);
}

/// Waits until the bucket's contents are `wanted`, or fails with what it
/// holds.
async fn contents_become(moto: &Moto, wanted: &BTreeSet<String>) {
    let started = Instant::now();
    loop {
        let held = moto.objects();
        if &held == wanted {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the bucket's contents never became {wanted:?}: it holds {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_sweep_frees_deleted_sessions_and_snapshots_and_keeps_what_live_ones_reference() {
    let Some(moto) = Moto::start() else { return };
    let dir = fresh_dir();
    let mut r0 = replica(&moto, &dir, 0, true);
    let c0 = Client::connect(&r0.url()).await.unwrap();

    // Session A shares one content with B and has one of its own.
    let (a, a_info) = c0.create(SessionOptions::directory()).await.unwrap();
    a.write_str("shared.txt", "shared by A and B\n")
        .await
        .unwrap();
    a.write_str("a.txt", "only in A\n").await.unwrap();
    c0.snapshot(&a_info.id, "a").await.unwrap();
    // Session B: a first snapshot whose `old.txt` the second one lacks.
    let (b, b_info) = c0.create(SessionOptions::directory()).await.unwrap();
    b.write_str("shared.txt", "shared by A and B\n")
        .await
        .unwrap();
    b.write_str("old.txt", "only in B's first snapshot\n")
        .await
        .unwrap();
    let first = c0.snapshot(&b_info.id, "first").await.unwrap();
    b.write_str("old.txt", "rewritten for B's second snapshot\n")
        .await
        .unwrap();
    b.write_str("dir/kept.txt", "in B's second snapshot\n")
        .await
        .unwrap();
    c0.snapshot(&b_info.id, "second").await.unwrap();
    let b_state = workspace_state(&b).await;
    let all: BTreeSet<String> = [
        "shared by A and B\n",
        "only in A\n",
        "only in B's first snapshot\n",
        "in B's second snapshot\n",
        "rewritten for B's second snapshot\n",
    ]
    .into_iter()
    .map(sha256_hex)
    .collect();
    // Everything referenced stays, sweep after sweep.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(moto.objects(), all, "a sweep removed referenced contents");
    let trees_before = moto.keys("trees/").len();

    c0.delete_snapshot(&b_info.id, &first.id).await.unwrap();
    c0.delete_session(&a_info.id).await.unwrap();
    let live: BTreeSet<String> = [
        "shared by A and B\n",
        "in B's second snapshot\n",
        "rewritten for B's second snapshot\n",
    ]
    .into_iter()
    .map(sha256_hex)
    .collect();
    contents_become(&moto, &live).await;
    let trees_after = moto.keys("trees/").len();
    assert!(
        trees_after < trees_before,
        "the unreferenced manifests stay: {trees_after} of {trees_before}"
    );
    assert!(moto
        .keys("sessions/")
        .iter()
        .all(|k| !k.starts_with(&a_info.id)));

    // B comes back whole on another replica from what is left.
    r0.kill();
    let r1 = replica(&moto, &dir, 1, false);
    assert_recovers(&r1, &b_info.id, &b_state).await;
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica remembers what it verified in the bucket; a sweep that
/// freed one of those contents (its only snapshot was deleted) makes the
/// next Snapshot naming it again send it again, and that snapshot is
/// recoverable.
#[tokio::test]
async fn a_snapshot_after_a_sweep_freed_what_its_replica_remembered_sends_it_again() {
    let Some(moto) = Moto::start() else { return };
    let dir = fresh_dir();
    let mut r0 = replica(&moto, &dir, 0, true);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (s, info) = c0.create(SessionOptions::directory()).await.unwrap();
    s.write_str("f.txt", "freed, then named again\n")
        .await
        .unwrap();
    let first = c0.snapshot(&info.id, "first").await.unwrap();
    let key = sha256_hex("freed, then named again\n");
    assert!(moto.objects().contains(&key));
    c0.delete_snapshot(&info.id, &first.id).await.unwrap();
    contents_become(&moto, &BTreeSet::new()).await;

    c0.snapshot(&info.id, "second").await.unwrap();
    assert_eq!(moto.objects(), BTreeSet::from([key]), "sent again");
    let state = workspace_state(&s).await;
    r0.kill();
    let r1 = replica(&moto, &dir, 1, false);
    assert_recovers(&r1, &info.id, &state).await;
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweeper killed while it deletes (its bulk deletes refused, so that it
/// is caught in the middle) leaves its marker behind: uploads wait for it
/// to expire and then go on, the next sweep removes it, and every live
/// snapshot is recoverable.
#[tokio::test]
async fn a_sweeper_killed_midway_leaves_every_live_snapshot_recoverable() {
    let Some(moto) = Moto::start() else { return };
    let forwarder = Forwarder::start(moto.addr);
    let dir = fresh_dir();
    let r0 = replica(&moto, &dir, 0, false);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (live, live_info) = c0.create(SessionOptions::directory()).await.unwrap();
    live.write_str("a.txt", "live\n").await.unwrap();
    c0.snapshot(&live_info.id, "live").await.unwrap();
    let (gone, gone_info) = c0.create(SessionOptions::directory()).await.unwrap();
    gone.write_str("a.txt", "garbage\n").await.unwrap();
    c0.snapshot(&gone_info.id, "gone").await.unwrap();
    c0.delete_session(&gone_info.id).await.unwrap();

    forwarder.add_rule("POST", "delete", Action::Status(503), usize::MAX);
    let mut setup = ReplicaSetup::mirrored(
        &format!("s3://{BUCKET}/{PREFIX}"),
        2,
        LEASE_TTL,
        moto.envs_via(&forwarder.url()),
    );
    setup.args.extend(
        ["--sweep-interval", "1s", "--sweep-grace", "0s"]
            .into_iter()
            .map(String::from),
    );
    let mut sweeper = Replica::start(&dir, 2, &setup);
    let started = Instant::now();
    while !forwarder
        .seen()
        .iter()
        .any(|s| s.action == Some(Action::Status(503)))
    {
        assert!(started.elapsed() < PATIENCE, "the sweeper never deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sweeper.kill();
    assert!(
        moto.keys("markers/")
            .iter()
            .any(|k| k.starts_with("sweep-")),
        "killed mid-sweep, its marker stays"
    );

    // Uploads wait out the dead sweeper's marker, then go on.
    live.write_str("b.txt", "after the sweeper died\n")
        .await
        .unwrap();
    c0.snapshot(&live_info.id, "after").await.unwrap();
    let state = workspace_state(&live).await;
    // The next sweep removes the dead marker and the garbage.
    let r1 = replica(&moto, &dir, 1, true);
    let wanted: BTreeSet<String> = ["live\n", "after the sweeper died\n"]
        .into_iter()
        .map(sha256_hex)
        .collect();
    contents_become(&moto, &wanted).await;
    let started = Instant::now();
    while !moto.keys("markers/").is_empty() {
        assert!(started.elapsed() < PATIENCE, "the dead marker stays");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(r0);
    assert_recovers(&r1, &live_info.id, &state).await;
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upload stalled between looking its contents up and writing its
/// snapshot record (its marker no longer rewritten), while another
/// replica's sweep frees a content the upload relied on: the Snapshot
/// fails UNAVAILABLE and leaves no record, never OK with a content
/// missing; the next one sends it again. (The stalled request is now given
/// up at the bucket's silence bound, before the marker lapses: the marker
/// and lease checks stay behind it.)
#[tokio::test]
async fn an_upload_stalled_past_its_marker_while_a_sweep_frees_its_content_fails() {
    let Some(moto) = Moto::start() else { return };
    let forwarder = Forwarder::start(moto.addr);
    let dir = fresh_dir();
    let mut setup = ReplicaSetup::mirrored(
        &format!("s3://{BUCKET}/{PREFIX}"),
        0,
        LEASE_TTL,
        moto.envs_via(&forwarder.url()),
    );
    setup
        .args
        .extend(["--sweep-interval", "0"].map(String::from));
    let r0 = Replica::start(&dir, 0, &setup);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (s, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let text = "relied on, then freed\n";
    s.write_str("f.txt", text).await.unwrap();
    let first = c0.snapshot(&info.id, "first").await.unwrap();
    // Unreferenced from now on, but still in the bucket: r0 remembers it.
    c0.delete_snapshot(&info.id, &first.id).await.unwrap();
    let key = sha256_hex(text);
    assert!(moto.objects().contains(&key));

    // The session record's answer is lost; the link stalls before the
    // retry, so the snapshot record waits.
    forwarder.add_rule("PUT", "session.json", Action::DropAnswer, 1);
    let snapshot = tokio::spawn({
        let c0 = c0.clone();
        let id = info.id.clone();
        async move { c0.snapshot(&id, "second").await }
    });
    let started = Instant::now();
    while !forwarder
        .seen()
        .iter()
        .any(|s| s.action == Some(Action::DropAnswer))
    {
        assert!(
            started.elapsed() < PATIENCE,
            "the upload never wrote its session record"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    forwarder.set_link(Link::Stalled);
    // Another replica sweeps once the stalled upload's marker expired.
    let r1 = replica(&moto, &dir, 1, true);
    contents_become(&moto, &BTreeSet::new()).await;
    forwarder.set_link(Link::Up);

    let err = snapshot
        .await
        .unwrap()
        .expect_err("a Snapshot OK although the bucket lost a content it names");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    // The stalled request was given up at the bucket's silence bound, or
    // (whichever came first) the marker lapsed, or the lease renewed for
    // the records no longer covered them.
    let text = err.to_string();
    assert!(
        text.contains("stalled") || text.contains("marker") || text.contains("lease"),
        "{err}"
    );
    assert!(
        moto.keys(&format!("sessions/{}/snapshots/", info.id))
            .is_empty(),
        "the failed snapshot's record stays"
    );
    drop(r1);
    // Once r0 renewed its lease (the stall kept it from it).
    let started = Instant::now();
    while let Err(e) = c0.snapshot(&info.id, "third").await {
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
        assert!(started.elapsed() < PATIENCE, "{e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(moto.objects(), BTreeSet::from([key]), "sent again");
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a SIGKILLed replica loses with `--autosnapshot 1`: a client
/// writes a counter every 20 ms; the session recovered elsewhere holds a
/// value acknowledged at most the interval plus one round of uploads
/// before the kill (printed; the bound asserted is generous for a loaded
/// machine).
#[tokio::test]
async fn a_killed_replica_with_autosnapshot_loses_only_the_last_interval() {
    let Some(moto) = Moto::start() else { return };
    let dir = fresh_dir();
    let mut setup = ReplicaSetup::mirrored(
        &format!("s3://{BUCKET}/{PREFIX}"),
        0,
        LEASE_TTL,
        moto.envs(),
    );
    setup.args.extend(["--autosnapshot", "1"].map(String::from));
    let mut r0 = Replica::start(&dir, 0, &setup);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (s, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let mut acknowledged = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let n = acknowledged.len();
        s.write_str("counter.txt", &n.to_string()).await.unwrap();
        acknowledged.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    r0.kill();
    let killed = Instant::now();
    let r1 = replica(&moto, &dir, 1, false);
    let c1 = Client::connect(&r1.url()).await.unwrap();
    c1.recover_session(&info.id, None, true).await.unwrap();
    let held: usize = c1
        .session(&info.id)
        .read_to_string("counter.txt")
        .await
        .unwrap()
        .parse()
        .unwrap();
    let lost = acknowledged.len() - 1 - held;
    let window = killed - acknowledged[held];
    println!(
        "--autosnapshot 1: {lost} of {} acknowledged writes lost, the last {} ms before the kill",
        acknowledged.len(),
        window.as_millis()
    );
    assert!(
        window < Duration::from_secs(1) + PATIENCE / 6,
        "lost the last {window:?} of writes"
    );
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}
