//! Leases and snapshots when the way to the bucket fails: real
//! `wsfs-server` replicas on one real S3 API (`moto_server`), a
//! fault-injecting forwarder ([`wsfs_tests::forwarder`]) between a replica
//! and the bucket that cuts the link, answers 503 or drops one answer after
//! the bucket acted on the request; and a `file://` bucket whose objects a
//! test removes or damages.
//!
//! The S3 tests need `moto_server`; without it they say so and pass,
//! unless `WSFS_REQUIRE_TOOLS=1`.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::Code;
use wsfs_client::{Client, Session, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, Replica, ReplicaSetup};
use wsfs_tests::forwarder::{Action, Forwarder, Link};
use wsfs_tests::kit::workspace_state;
use wsfs_tests::moto::{Moto, BUCKET, PREFIX};

/// Short, so that a lost replica's lease runs out within a test; the
/// holder renews every third of it and stops serving a quarter of it
/// before it runs out.
const LEASE_TTL: Duration = Duration::from_secs(3);
/// Generous: a loaded machine delays renewals and calls.
const PATIENCE: Duration = Duration::from_secs(40);
/// The admin token of the [`Pair`]'s replicas, which its clients carry.
const ADMIN: &str = "admin-token-for-lease-faults-0123456789";
/// Far above the bounds a stalled bucket may cost a call (a lease
/// length), far below the 30 s the store's client waits for a stalled
/// request before giving up.
const BOUNDED: Duration = Duration::from_secs(15);

fn setup(bucket: &str, index: usize, envs: Vec<(String, String)>) -> ReplicaSetup {
    ReplicaSetup::mirrored(bucket, index, LEASE_TTL, envs)
}

fn s3_url() -> String {
    format!("s3://{BUCKET}/{PREFIX}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Replica 0 reaching the bucket through a forwarder, replica 1 directly;
/// a client of each carrying the admin token.
struct Pair {
    moto: Moto,
    forwarder: Forwarder,
    r0: Replica,
    r1: Replica,
    c0: Client,
    c1: Client,
    dir: std::path::PathBuf,
}

impl Pair {
    async fn start() -> Option<Pair> {
        let moto = Moto::start()?;
        let forwarder = Forwarder::start(moto.addr);
        let dir = fresh_dir();
        let r0 = Replica::start(
            &dir,
            0,
            &setup(&s3_url(), 0, moto.envs_via(&forwarder.url())).with_admin(ADMIN),
        );
        let r1 = Replica::start(&dir, 1, &setup(&s3_url(), 1, moto.envs()).with_admin(ADMIN));
        let admin = |url: String| async move {
            Client::connect(&url)
                .await
                .unwrap()
                .with_token(ADMIN)
                .unwrap()
        };
        let c0 = admin(r0.url()).await;
        let c1 = admin(r1.url()).await;
        Some(Pair {
            moto,
            forwarder,
            r0,
            r1,
            c0,
            c1,
            dir,
        })
    }

    /// The lease generations of session `id` in the bucket, with their
    /// holder and expiry, lowest first.
    fn leases(&self, id: &str) -> Vec<(String, serde_json::Value)> {
        let under = format!("sessions/{id}/lease/");
        self.moto
            .keys(&under)
            .into_iter()
            .filter_map(|g| {
                let body = self.moto.get(&format!("{under}{g}"))?;
                Some((g, serde_json::from_slice(&body).ok()?))
            })
            .collect()
    }

    /// Whether every lease generation of session `id` in the bucket names
    /// `holder`.
    fn all_leases_held_by(&self, id: &str, holder: &str) -> bool {
        self.holders(id).iter().all(|h| h == holder)
    }

    /// The holder each lease generation of session `id` names, lowest
    /// first.
    fn holders(&self, id: &str) -> Vec<serde_json::Value> {
        self.leases(id)
            .into_iter()
            .map(|(_, lease)| lease["holder"].clone())
            .collect()
    }

    /// The snapshot records of session `id` in the bucket.
    fn snapshot_records(&self, id: &str) -> std::collections::BTreeSet<String> {
        self.moto.keys(&format!("sessions/{id}/snapshots/"))
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.r0.kill();
        self.r1.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn session_on(client: &Client, text: &str) -> (Session, String) {
    session_of(client, SessionOptions::directory(), text).await
}

/// A session made with `options`, its `a.txt` holding `text`.
async fn session_of(client: &Client, options: SessionOptions, text: &str) -> (Session, String) {
    let (session, info) = client.create(options).await.unwrap();
    session.write_str("a.txt", text).await.unwrap();
    (session, info.id)
}

/// Writes `text` to `a.txt` as soon as the replica serves the session
/// again (it answers UNAVAILABLE, and nothing else, until then), reads it
/// back, and returns when the write was acknowledged (ms since the
/// epoch); `what` names the case in a failure.
async fn write_once_served(session: &Session, text: &str, what: &str) -> u64 {
    let started = Instant::now();
    let acknowledged = loop {
        match session.write_str("a.txt", text).await {
            Ok(_) => break now_ms(),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{what}: {e}");
                assert!(
                    started.elapsed() < PATIENCE,
                    "{what}: never served again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(
        session.read_to_string("a.txt").await.unwrap(),
        text,
        "{what}"
    );
    acknowledged
}

fn assert_leased_to(err: &wsfs::Error, holder: &str) {
    match err {
        wsfs::Error::SessionLeased { holder: h, .. } => assert_eq!(h, holder, "{err}"),
        other => panic!("not SESSION_LEASED naming '{holder}': {other:?}"),
    }
}

/// Finding 1: replica 0 is cut off from the bucket until its lease runs
/// out, replica 1 recovers the session (no force) and writes, renewing
/// meanwhile (which removes the old generations); the link comes back.
/// Replica 0 never acknowledges a write again, and soon refuses with
/// SESSION_LEASED naming replica 1; the session holds replica 1's write.
#[tokio::test]
async fn a_holder_cut_off_while_its_session_is_recovered_elsewhere_never_writes_again() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "before\n").await;
    pair.c0.snapshot(&id, "kept").await.unwrap();

    pair.forwarder.set_link(Link::Cut);
    let started = Instant::now();
    loop {
        match pair.c1.recover_session(&id, None, false).await {
            Ok(_) => break,
            Err(e) if started.elapsed() < PATIENCE => {
                assert_leased_to(&e, "replica-0");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the session was never recovered on replica 1: {e}"),
        }
    }
    let s1 = pair.c1.session(&id);
    s1.write_str("a.txt", "written on r1\n").await.unwrap();
    // Replica 1 renews a few times: the generations replica 0 built on
    // are removed.
    let first = pair.leases(&id).last().map(|(g, _)| g.clone());
    let started = Instant::now();
    while pair.leases(&id).last().map(|(g, _)| g.clone()) <= first {
        assert!(started.elapsed() < PATIENCE, "replica 1 never renewed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(LEASE_TTL).await;

    pair.forwarder.set_link(Link::Up);
    let started = Instant::now();
    let refusal = loop {
        match s0.write_str("a.txt", "written on r0\n").await {
            Ok(_) => panic!(
                "replica 0 acknowledged a write to a session replica 1 holds (leases: {:?})",
                pair.leases(&id)
            ),
            Err(e) if e.reason() == "SESSION_LEASED" => break e,
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e}");
                assert!(
                    started.elapsed() < PATIENCE,
                    "replica 0 never learnt it lost the session: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_leased_to(&refusal, "replica-1");
    // A few renewal periods more: replica 0 still refuses.
    for _ in 0..10 {
        tokio::time::sleep(LEASE_TTL / 5).await;
        let err = s0.write_str("a.txt", "written on r0\n").await.unwrap_err();
        assert_leased_to(&err, "replica-1");
    }
    assert_eq!(s1.read_to_string("a.txt").await.unwrap(), "written on r1\n");
}

/// A holder cut off from the bucket (every connection closed, then, the
/// second time, every request held without an answer) stops
/// acknowledging writes before the lease it last wrote runs out (with a
/// quarter of the lease to spare for clocks), refusing UNAVAILABLE (not
/// SESSION_LEASED: nobody else holds it); once the bucket is back and a
/// renewal succeeds, it serves again.
#[tokio::test]
async fn a_partitioned_holder_stops_accepting_writes_before_its_lease_runs_out() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let kinds = [
        ("DIRECTORY", SessionOptions::directory()),
        ("MEMORY", SessionOptions::memory()),
    ];
    for (kind, options) in kinds {
        a_partitioned_holder_stops(&pair, kind, options).await;
    }
}

/// [`a_partitioned_holder_stops_accepting_writes_before_its_lease_runs_out`]
/// for a session of one kind.
async fn a_partitioned_holder_stops(pair: &Pair, kind: &str, options: SessionOptions) {
    let (s0, id) = session_of(&pair.c0, options, "before\n").await;
    for fault in [Link::Cut, Link::Stalled] {
        let fault_name = format!("{kind} {fault:?}");
        pair.forwarder.set_link(fault);
        let cut_at = Instant::now();
        let mut last_acknowledged_ms = now_ms();
        let refusal = loop {
            match s0.write_str("a.txt", "during the fault\n").await {
                Ok(_) => last_acknowledged_ms = now_ms(),
                Err(e) => break e,
            }
            assert!(
                cut_at.elapsed() < PATIENCE,
                "{fault_name}: replica 0 kept acknowledging writes without reaching the bucket"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(refusal.code(), Code::Unavailable, "{fault_name}: {refusal}");
        assert_eq!(refusal.reason(), "UNAVAILABLE", "{fault_name}: {refusal}");
        // Whatever lease reached the bucket last, the last write came
        // before it ran out.
        let expiry = pair
            .leases(&id)
            .iter()
            .filter_map(|(_, lease)| lease["expires_at_ms"].as_u64())
            .max()
            .expect("a lease in the bucket");
        assert!(
            last_acknowledged_ms < expiry,
            "{fault_name}: a write was acknowledged at {last_acknowledged_ms}, after the lease ran out at {expiry}"
        );
        eprintln!(
            "{fault_name}: the last write was acknowledged {} ms before the lease ran out",
            expiry - last_acknowledged_ms
        );

        pair.forwarder.set_link(Link::Up);
        write_once_served(&s0, "after the fault\n", &fault_name).await;
    }
}

/// Finding 2: a lease renewal reaches the bucket and its answer is lost;
/// the next renewal finds that generation there, written by this very
/// process, and goes on: the replica keeps serving the session.
#[tokio::test]
async fn a_renewal_whose_answer_was_lost_is_recognised_as_the_replicas_own() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "before\n").await;
    pair.forwarder
        .add_rule("PUT", "/lease/", Action::DropAnswer, 1);
    let lease_puts_after_the_drop = || {
        let seen = pair.forwarder.seen();
        let dropped = seen
            .iter()
            .position(|s| s.action == Some(Action::DropAnswer));
        dropped.map_or(0, |at| {
            seen[at + 1..]
                .iter()
                .filter(|s| s.method == "PUT" && s.path.contains("/lease/"))
                .count()
        })
    };
    let started = Instant::now();
    while lease_puts_after_the_drop() < 2 && started.elapsed() < PATIENCE {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Served through it all: a write now, and one after more renewals.
    for text in ["after the lost answer\n", "later still\n"] {
        // UNAVAILABLE at most (a renewal late on a loaded machine), never
        // SESSION_LEASED.
        write_once_served(&s0, text, "after the lost answer").await;
        tokio::time::sleep(LEASE_TTL).await;
    }
    assert!(
        lease_puts_after_the_drop() >= 2,
        "the replica stopped renewing: {:?}",
        pair.forwarder.seen()
    );
    let holders = pair.holders(&id);
    assert!(
        !holders.is_empty() && holders.iter().all(|h| h == "replica-0"),
        "{holders:?}"
    );
}

/// Finding 3: a Snapshot whose session record (then, another time, whose
/// own record) the bucket refuses (503, every try) fails UNAVAILABLE and
/// leaves no snapshot record in the bucket, nor on the replica; the next
/// one goes through and is the only one there.
#[tokio::test]
async fn a_snapshot_whose_records_the_bucket_refuses_leaves_no_record_there() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (_s0, id) = session_on(&pair.c0, "before\n").await;
    for refused in ["/session.json", "/snapshots/"] {
        pair.forwarder
            .add_rule("PUT", refused, Action::Status(503), usize::MAX);
        let err = pair.c0.snapshot(&id, "doomed").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{refused}: {err}");
        pair.forwarder.clear_rules();
        assert_eq!(
            pair.snapshot_records(&id),
            Default::default(),
            "{refused} refused: a record was left in the bucket"
        );
        assert_eq!(pair.c0.list_snapshots(&id).await.unwrap(), vec![]);
    }
    let kept = pair.c0.snapshot(&id, "kept").await.unwrap();
    assert_eq!(
        pair.snapshot_records(&id),
        [format!("{}.json", kept.id)].into_iter().collect()
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh directory for replicas, a `file://` bucket in it, and its URL.
fn file_bucket() -> (std::path::PathBuf, std::path::PathBuf, String) {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let url = format!("file://{}", bucket.display());
    (dir, bucket, url)
}

/// Replica 0 on the `file://` bucket `url`, and a client of it.
async fn file_replica(dir: &Path, url: &str) -> (Replica, Client) {
    let replica = Replica::start(dir, 0, &setup(url, 0, vec![]));
    let client = Client::connect(&replica.url()).await.unwrap();
    (replica, client)
}

/// The name and bytes of every file in `dir`.
fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let bytes = std::fs::read(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), bytes))
        })
        .collect()
}

/// Every file of a `file://` bucket's `dir` whose bytes do not hash to
/// its name.
fn misnamed(dir: &Path) -> Vec<String> {
    files_in(dir)
        .into_iter()
        .filter(|(name, bytes)| sha256_hex(bytes) != *name)
        .map(|(name, _)| name)
        .collect()
}

/// Finding 4: contents and manifests that vanished from the bucket, or
/// were damaged there, after a first Snapshot are sent again by the first
/// one after a sweep noticed the loss (which makes every replica forget
/// what it knew to be in the bucket), before it answers OK; the second
/// snapshot is then recoverable on another replica, byte for byte.
#[tokio::test]
async fn a_snapshot_repairs_what_the_bucket_lost_or_damaged_before_answering() {
    let (dir, bucket, url) = file_bucket();
    let mut sweeping = setup(&url, 0, vec![]);
    sweeping
        .args
        .extend(["--sweep-interval", "1s"].into_iter().map(String::from));
    let mut r0 = Replica::start(&dir, 0, &sweeping);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (session, id) = session_on(&c0, "alpha\n").await;
    session.write_str("dir/b.txt", "beta\n").await.unwrap();
    session.write_str("c.txt", "gamma\n").await.unwrap();
    c0.snapshot(&id, "first").await.unwrap();
    let state = workspace_state(&session).await;

    let objects = bucket.join("objects");
    std::fs::write(objects.join(sha256_hex(b"alpha\n")), b"damaged").unwrap();
    std::fs::remove_file(objects.join(sha256_hex(b"beta\n"))).unwrap();
    std::fs::remove_dir_all(bucket.join("trees")).unwrap();
    let noticed = Instant::now();
    while !bucket.join("sweep").join("epoch").is_file() {
        assert!(noticed.elapsed() < PATIENCE, "no sweep noticed the loss");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let second = c0.snapshot(&id, "second").await.unwrap();
    for text in ["alpha\n", "beta\n", "gamma\n"] {
        let held = std::fs::read(objects.join(sha256_hex(text.as_bytes())));
        assert_eq!(
            held.ok().as_deref(),
            Some(text.as_bytes()),
            "the content of {text:?} in the bucket"
        );
    }
    assert_eq!(misnamed(&objects), Vec::<String>::new());
    assert_eq!(misnamed(&bucket.join("trees")), Vec::<String>::new());
    assert!(
        std::fs::read_dir(bucket.join("trees")).is_ok_and(|d| d.count() >= 2),
        "the root and dir/ manifests are back"
    );

    r0.kill();
    let r1 = Replica::start(&dir, 1, &setup(&url, 1, vec![]));
    let c1 = Client::connect(&r1.url()).await.unwrap();
    c1.recover_session(&id, Some(&second.id), true)
        .await
        .unwrap();
    assert_eq!(workspace_state(&c1.session(&id)).await, state);
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The expiries of every lease generation of session `id` in a `file://`
/// bucket.
fn file_lease_expiries(bucket: &Path, id: &str) -> Vec<u64> {
    files_in(&bucket.join("sessions").join(id).join("lease"))
        .into_iter()
        .filter_map(|(_, bytes)| {
            let lease: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            lease["expires_at_ms"].as_u64()
        })
        .collect()
}

/// A replica killed and restarted at once, same id and data directory, is
/// another incarnation: it serves its session again only once the lease
/// its previous run wrote has run out (that run might still be serving,
/// for all the new one knows), answering UNAVAILABLE until then.
#[tokio::test]
async fn a_restarted_replica_serves_its_sessions_once_its_previous_runs_lease_ran_out() {
    let (dir, bucket, url) = file_bucket();
    let (mut r0, c0) = file_replica(&dir, &url).await;
    let (_session, id) = session_on(&c0, "before\n").await;
    r0.kill();
    let previous_expiry = file_lease_expiries(&bucket, &id)
        .into_iter()
        .max()
        .expect("a lease");

    let (r0, c0) = file_replica(&dir, &url).await;
    let served_at = write_once_served(&c0.session(&id), "after the restart\n", "restart").await;
    assert!(
        served_at >= previous_expiry,
        "served at {served_at}, before the previous run's lease ran out at {previous_expiry}"
    );
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica stopped gracefully (SIGTERM) gives back its leases: another
/// replica recovers its session at once, without force, long before the
/// lease would have run out, and serves it.
#[tokio::test]
async fn a_replica_stopped_gracefully_gives_back_its_leases() {
    // The default: far longer than the test takes once the lease is back.
    const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    let (dir, bucket, url) = file_bucket();
    let mirrored = |index| ReplicaSetup::mirrored(&url, index, DEFAULT_LEASE, vec![]);
    let mut r0 = Replica::start(&dir, 0, &mirrored(0));
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (session, id) = session_on(&c0, "saved\n").await;
    c0.snapshot(&id, "before the stop").await.unwrap();
    let state = workspace_state(&session).await;
    let held_until = file_lease_expiries(&bucket, &id)
        .into_iter()
        .max()
        .expect("a lease");
    drop((session, c0));

    // Waited for off the runtime, which meanwhile closes the client's
    // connection as the stopping server asks.
    let stopping = Instant::now();
    let (status, _r0) = tokio::task::spawn_blocking(move || (r0.terminate(PATIENCE), r0))
        .await
        .unwrap();
    let status = status.expect("replica 0 stops on SIGTERM");
    let stopped_in = stopping.elapsed();
    assert!(status.success(), "replica 0 exited with {status}");

    let r1 = Replica::start(&dir, 1, &mirrored(1));
    let c1 = Client::connect(&r1.url()).await.unwrap();
    let recovering = Instant::now();
    let recovered = c1.recover_session(&id, None, false).await;
    let recovered_at = now_ms();
    eprintln!(
        "stopped in {stopped_in:?}, recovered elsewhere in {:?}",
        recovering.elapsed()
    );
    assert_eq!(recovered.expect("recovered without force").id, id);
    assert!(
        recovered_at < held_until,
        "recovered at {recovered_at}, not before the old lease ran out at {held_until}"
    );
    let on_r1 = c1.session(&id);
    assert_eq!(workspace_state(&on_r1).await, state);
    on_r1.write_str("a.txt", "after\n").await.unwrap();
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `call`'s first answer, retrying while it is UNAVAILABLE for
/// [`PATIENCE`].
async fn once_served<T: std::fmt::Debug, Fut>(what: &str, call: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = wsfs::Result<T>>,
{
    wsfs_tests::cluster::once_answered(what, PATIENCE, call, |_| true).await
}

/// The ids of `sessions`, sorted.
fn ids_of(sessions: Vec<wsfs_client::SessionInfo>) -> Vec<String> {
    let mut ids: Vec<String> = sessions.into_iter().map(|s| s.id).collect();
    ids.sort();
    ids
}

/// Whether the forwarder applied `action` to some request.
fn acted(forwarder: &Forwarder, action: Action) -> bool {
    forwarder.seen().iter().any(|s| s.action == Some(action))
}

/// Waits until the forwarder has held a request with [`Action::Stall`].
async fn until_stalled(forwarder: &Forwarder, what: &str) {
    let stalled =
        wsfs_tests::forwarder::eventually(PATIENCE, || acted(forwarder, Action::Stall)).await;
    assert!(stalled, "{what} was never sent: {:?}", forwarder.seen());
}

/// Recovers session `id` on replica 1 (no force) once replica 0's lease
/// ran out (refused SESSION_LEASED naming replica 0 until then).
async fn recover_on_r1(pair: &Pair, id: &str) {
    let started = Instant::now();
    loop {
        match pair.c1.recover_session(id, None, false).await {
            Ok(_) => return,
            Err(e) if started.elapsed() < PATIENCE => {
                assert_leased_to(&e, "replica-0");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the session was never recovered on replica 1: {e}"),
        }
    }
}

/// An upload that outlasts its lease: replica 0's Snapshot has checked its
/// lease and sent the session record, whose PUT the link holds; then every
/// renewal is held too, the lease runs out, and replica 1 recovers the
/// session (no force). The link comes back (the held requests are tried
/// again). The Snapshot never answers OK for a session replica 0 no longer
/// holds (`UNAVAILABLE` or `SESSION_LEASED`); the bucket lists no record of
/// it and its session record still names the snapshot replica 1 recovered
/// from, the only one replica 1 lists; replica 0 then refuses every write
/// with SESSION_LEASED naming replica 1.
#[tokio::test]
async fn a_snapshot_whose_upload_outlasts_its_lease_is_not_kept() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "before\n").await;
    let kept = pair.c0.snapshot(&id, "kept").await.unwrap();
    pair.forwarder
        .add_rule("PUT", "/session.json", Action::Stall, 1);
    let snapshotting = {
        let (c0, id) = (pair.c0.clone(), id.clone());
        tokio::spawn(async move { c0.snapshot(&id, "doomed").await })
    };
    until_stalled(&pair.forwarder, "the session record").await;
    // Replica 0 can no longer renew: its lease runs out.
    pair.forwarder
        .add_rule("PUT", "/lease/", Action::Stall, usize::MAX);
    recover_on_r1(&pair, &id).await;
    pair.forwarder.clear_rules();
    // Closes the held requests: the store's client tries them again.
    pair.forwarder.set_link(Link::Up);

    match snapshotting.await.unwrap() {
        Ok(info) => panic!(
            "replica 0 answered OK for a snapshot of a session replica 1 holds: {info:?} (records: {:?})",
            pair.snapshot_records(&id)
        ),
        Err(e) => assert!(
            e.code() == Code::Unavailable || e.reason() == "SESSION_LEASED",
            "{e}"
        ),
    }
    let only_kept: std::collections::BTreeSet<String> =
        [format!("{}.json", kept.id)].into_iter().collect();
    assert_eq!(pair.snapshot_records(&id), only_kept);
    let record: serde_json::Value = serde_json::from_slice(
        &pair
            .moto
            .get(&format!("sessions/{id}/session.json"))
            .expect("the session record"),
    )
    .unwrap();
    assert_eq!(record["latest_snapshot"], kept.id.as_str(), "{record}");
    let listed: Vec<String> = pair
        .c1
        .list_snapshots(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec![kept.id.clone()]);

    let started = Instant::now();
    let refusal = loop {
        match s0.write_str("a.txt", "written on r0\n").await {
            Ok(_) => panic!("replica 0 acknowledged a write to a session replica 1 holds"),
            Err(e) if e.reason() == "SESSION_LEASED" => break e,
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e}");
                assert!(started.elapsed() < PATIENCE, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_leased_to(&refusal, "replica-1");
    assert_eq!(
        pair.c1.session(&id).read_to_string("a.txt").await.unwrap(),
        "before\n"
    );
}

/// Failover's own lookups stalled: replica 1 held a session and is
/// SIGKILLed; replica 0 gets a call for it while every read of the
/// session's lease is held by the link. The call waits a bounded time
/// (well within the store client's own 30 s request timeout) and is
/// refused UNAVAILABLE (retryable), serving nothing and taking no lease;
/// once the link is back the session fails over to replica 0 with its
/// snapshot, and replica 0 holds the lease.
#[tokio::test]
async fn a_failover_whose_lease_read_stalls_waits_bounded_and_serves_nothing() {
    let Some(mut pair) = Pair::start().await else {
        return;
    };
    let (_s1, id) = session_on(&pair.c1, "saved\n").await;
    pair.c1.snapshot(&id, "kept").await.unwrap();
    pair.r1.kill();
    pair.forwarder
        .add_rule("GET", "lease", Action::Stall, usize::MAX);

    let on_r0 = pair.c0.session(&id);
    let asked = Instant::now();
    let refusal = on_r0.read_to_string("a.txt").await.unwrap_err();
    let waited = asked.elapsed();
    assert_eq!(refusal.code(), Code::Unavailable, "{refusal}");
    assert!(
        refusal.to_string().contains(&s3_url()),
        "the refusal names the bucket: {refusal}"
    );
    assert!(
        waited < BOUNDED,
        "the call waited {waited:?} for a stalled lease read"
    );
    assert!(
        pair.all_leases_held_by(&id, "replica-1"),
        "replica 0 took a lease without reading the one in force: {:?}",
        pair.leases(&id)
    );

    pair.forwarder.clear_rules();
    pair.forwarder.set_link(Link::Up);
    let text = once_served("the failover once the link is back", || {
        on_r0.read_to_string("a.txt")
    })
    .await;
    assert_eq!(text, "saved\n");
    let holders = pair.holders(&id);
    assert_eq!(holders.last(), Some(&serde_json::json!("replica-0")));
}

/// ListSessions with the bucket out of reach (the link cut, then
/// stalled): the full listing is refused UNAVAILABLE, in bounded time,
/// naming the bucket and the way out (`local_only`), which lists this
/// replica's own sessions meanwhile; nothing changes: once the link is
/// back the full listing has both replicas' sessions and replica 0 serves
/// its own again.
#[tokio::test]
async fn list_sessions_with_the_bucket_cut_off_is_clear_and_changes_nothing() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id0) = session_on(&pair.c0, "r0\n").await;
    let (_s1, id1) = session_on(&pair.c1, "r1\n").await;
    let own = wsfs_client::SessionQuery {
        local_only: true,
        ..Default::default()
    };

    for fault in [Link::Cut, Link::Stalled] {
        pair.forwarder.set_link(fault);
        let asked = Instant::now();
        let refusal = pair.c0.list_sessions().await.unwrap_err();
        let waited = asked.elapsed();
        assert_eq!(refusal.code(), Code::Unavailable, "{fault:?}: {refusal}");
        let text = refusal.to_string();
        assert!(
            text.contains(&s3_url()),
            "{fault:?}: names the bucket: {text}"
        );
        assert!(
            text.contains("local"),
            "{fault:?}: names the way out: {text}"
        );
        assert!(
            waited < BOUNDED,
            "{fault:?}: ListSessions waited {waited:?}"
        );
        let listed = ids_of(pair.c0.query_sessions(&own).await.unwrap());
        assert_eq!(listed, vec![id0.clone()], "{fault:?}");

        pair.forwarder.set_link(Link::Up);
        write_once_served(&s0, "after the fault\n", "ListSessions").await;
    }
    let all = ids_of(pair.c0.list_sessions().await.unwrap());
    let mut expected = vec![id0, id1];
    expected.sort();
    assert_eq!(all, expected);
}

/// The token list's write whose answer is lost (the PUT reached the
/// bucket): IssueToken answers with a token that works (the store's
/// client tries the write again, or the caller IssueToken after
/// `UNAVAILABLE`); the bucket's list names each token once and none that
/// was refused; after replica 0 is SIGKILLed the token opens its session
/// on replica 1, which fails it over for that token.
#[tokio::test]
async fn a_token_list_write_whose_answer_was_lost_loses_no_token() {
    let Some(mut pair) = Pair::start().await else {
        return;
    };
    let (_s0, id) = session_on(&pair.c0, "before\n").await;
    pair.c0.snapshot(&id, "kept").await.unwrap();
    pair.forwarder
        .add_rule("PUT", "/tokens.json", Action::DropAnswer, 1);
    let mut refused = 0;
    let token = loop {
        match pair.c0.issue_token(&id, "agent").await {
            Ok(issued) => break issued.token,
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e}");
                refused += 1;
                assert!(refused < 5, "IssueToken kept failing: {e}");
            }
        }
    };
    assert!(
        acted(&pair.forwarder, Action::DropAnswer),
        "the answer was never dropped: {:?}",
        pair.forwarder.seen()
    );
    let agent = |url: String| {
        let token = token.clone();
        async move {
            Client::connect(&url)
                .await
                .unwrap()
                .with_token(&token)
                .unwrap()
        }
    };
    let on_r0 = agent(pair.r0.url()).await.session(&id);
    assert_eq!(on_r0.read_to_string("a.txt").await.unwrap(), "before\n");

    let listed: Vec<serde_json::Value> = serde_json::from_slice(
        &pair
            .moto
            .get(&format!("sessions/{id}/tokens.json"))
            .expect("the token list"),
    )
    .unwrap();
    let hashes: Vec<&str> = listed.iter().filter_map(|t| t["sha256"].as_str()).collect();
    let distinct: std::collections::BTreeSet<&str> = hashes.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        hashes.len(),
        "a token listed twice: {listed:?}"
    );
    assert!(
        hashes.contains(&sha256_hex(token.as_bytes()).as_str()),
        "the token is not in the bucket's list: {listed:?}"
    );
    let agents = listed.iter().filter(|t| t["caller"] == "agent").count();
    assert_eq!(agents, 1, "{refused} refused, listed: {listed:?}");

    pair.r0.kill();
    let on_r1 = agent(pair.r1.url()).await.session(&id);
    let text = once_served("the token on replica 1", || on_r1.read_to_string("a.txt")).await;
    assert_eq!(text, "before\n");
}

/// A hand-back whose snapshot stalls: replica 1 gets calls for a session
/// replica 0 holds and asks for it; replica 0's hand-back snapshot sends
/// its session record into a link that holds it. Replica 0 refuses calls
/// meanwhile (`UNAVAILABLE`), but for a bounded time: the snapshot fails
/// once the lease no longer covers its records, and replica 0 serves the
/// session again, its lease its own, no record of that snapshot in the
/// bucket. Once the link is back the session moves to replica 1 with
/// every write, the one acknowledged after the stall too.
#[tokio::test]
async fn a_handback_whose_snapshot_stalls_serves_again_in_bounded_time_and_loses_nothing() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "first\n").await;
    // Held long enough to be handed back.
    tokio::time::sleep(LEASE_TTL).await;
    pair.forwarder
        .add_rule("PUT", "/session.json", Action::Stall, 1);
    let on_r1 = pair.c1.session(&id);
    let asking = Instant::now();
    while !acted(&pair.forwarder, Action::Stall) {
        let err = on_r1.read_to_string("a.txt").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
        assert!(
            asking.elapsed() < PATIENCE,
            "replica 0 never began the hand-back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let stalled = Instant::now();
    let after_stall = loop {
        match s0.write_str("b.txt", "during\n").await {
            Ok(_) => break stalled.elapsed(),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e}");
                assert!(
                    stalled.elapsed() < BOUNDED,
                    "replica 0 refused calls for {:?} behind a stalled hand-back: {e}",
                    stalled.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    eprintln!("served again {after_stall:?} after the hand-back's snapshot stalled");
    assert_eq!(pair.snapshot_records(&id), Default::default());
    assert!(
        pair.all_leases_held_by(&id, "replica-0"),
        "{:?}",
        pair.leases(&id)
    );

    pair.forwarder.set_link(Link::Up);
    let moved = once_served("the session on replica 1", || on_r1.read_to_string("b.txt")).await;
    assert_eq!(moved, "during\n");
    assert_eq!(on_r1.read_to_string("a.txt").await.unwrap(), "first\n");
}

/// A hand-back whose give-back loses its answer: replica 1 asks for a
/// session replica 0 holds; replica 0 snapshots it and gives its lease
/// back (a generation already expired), and that PUT's answer is dropped
/// after it landed. The session moves once, with every write: replica 1
/// serves it and holds the lease, and replica 0 acknowledges no write on
/// it any more.
#[tokio::test]
async fn a_handback_whose_give_back_loses_its_answer_moves_the_session_once() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "first\n").await;
    s0.write_str("b.txt", "second\n").await.unwrap();
    // Held long enough to be handed back.
    tokio::time::sleep(LEASE_TTL).await;
    pair.forwarder.add_body_rule(
        "PUT",
        "/lease/",
        r#""expires_at_ms":0"#,
        Action::DropAnswer,
        1,
    );
    let on_r1 = pair.c1.session(&id);
    let moved = once_served("the session on replica 1", || on_r1.read_to_string("b.txt")).await;
    assert_eq!(moved, "second\n");
    assert_eq!(on_r1.read_to_string("a.txt").await.unwrap(), "first\n");
    assert!(
        acted(&pair.forwarder, Action::DropAnswer),
        "the give-back's answer was never dropped: {:?}",
        pair.forwarder.seen()
    );
    let holders = pair.holders(&id);
    assert_eq!(holders.last(), Some(&serde_json::json!("replica-1")));
    let refused = s0.write_str("a.txt", "written on r0\n").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused}");
    on_r1.write_str("a.txt", "written on r1\n").await.unwrap();
    assert_eq!(
        on_r1.read_to_string("a.txt").await.unwrap(),
        "written on r1\n"
    );
}

/// DeleteSession while the bucket stalls, then while it is cut off:
/// refused UNAVAILABLE naming the bucket within a bounded wait (not the
/// store client's 30 s), and nothing is lost: the session is still
/// served, its lease still renewed across two lease lengths, its record
/// and snapshot still in the bucket. Then once more with the answer to
/// the removal of its record lost: the session is removed here and in
/// the bucket, asked again at most a few times.
#[tokio::test]
async fn a_session_delete_the_bucket_fails_is_bounded_and_loses_nothing() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let (s0, id) = session_on(&pair.c0, "before\n").await;
    pair.c0.snapshot(&id, "kept").await.unwrap();
    let records = pair.moto.keys(&format!("sessions/{id}/"));
    assert!(records.contains("session.json"), "{records:?}");

    for fault in [Link::Stalled, Link::Cut] {
        pair.forwarder.set_link(fault);
        let asked = Instant::now();
        let refusal = pair.c0.delete_session(&id).await.unwrap_err();
        let waited = asked.elapsed();
        assert_eq!(refusal.code(), Code::Unavailable, "{fault:?}: {refusal}");
        assert!(
            refusal.to_string().contains(&s3_url()),
            "{fault:?}: names the bucket: {refusal}"
        );
        assert!(
            waited < BOUNDED,
            "{fault:?}: DeleteSession waited {waited:?}"
        );
        pair.forwarder.set_link(Link::Up);

        write_once_served(&s0, &format!("after {fault:?}\n"), "DeleteSession").await;
        // Still leased: served on after two lease lengths, no other holder.
        tokio::time::sleep(LEASE_TTL * 2).await;
        write_once_served(&s0, &format!("later {fault:?}\n"), "DeleteSession").await;
        assert!(
            pair.all_leases_held_by(&id, "replica-0"),
            "{fault:?}: {:?}",
            pair.holders(&id)
        );
        assert!(
            pair.moto
                .keys(&format!("sessions/{id}/"))
                .contains("session.json"),
            "{fault:?}: the session's record stays in the bucket"
        );
        assert_eq!(pair.snapshot_records(&id).len(), 1, "{fault:?}");
    }

    // The bulk delete of the session's record reaches the bucket, its
    // answer is lost: the delete ends, at once (the store's client asks
    // again) or when the caller asks again.
    pair.forwarder
        .add_body_rule("POST", "delete", "session.json", Action::DropAnswer, 1);
    let mut refused = 0;
    while let Err(e) = pair.c0.delete_session(&id).await {
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        refused += 1;
        assert!(refused < 5, "DeleteSession kept failing: {e}");
    }
    assert!(
        acted(&pair.forwarder, Action::DropAnswer),
        "the answer was never dropped: {:?}",
        pair.forwarder.seen()
    );
    match pair.c0.get_session(&id).await {
        Err(wsfs::Error::SessionNotFound { .. }) => {}
        other => panic!("after DeleteSession: {other:?}"),
    }
    assert_eq!(
        pair.moto.keys(&format!("sessions/{id}/")),
        Default::default(),
        "nothing of the session stays in the bucket"
    );
}

/// Every request to a stalled bucket is given up at the bucket's silence
/// bound (one renewal interval, at least 2 s), not after the store
/// client's 30 s: a Snapshot whose content PUT the link holds, and a
/// RecoverSession whose content GET it holds, each answer within a
/// bounded wait: `UNAVAILABLE` naming the bucket, having changed nothing
/// (no snapshot listed, no session directory made), and the next try
/// succeeds with the session's files.
#[tokio::test]
async fn requests_to_a_stalled_bucket_are_given_up_in_bounded_time() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    // A session of replica 1's, snapshotted, which replica 0 recovers.
    let (s1, id) = session_on(&pair.c1, "on r1\n").await;
    pair.c1.snapshot(&id, "kept").await.unwrap();
    let kept = workspace_state(&s1).await;
    let (_s0, own) = session_on(&pair.c0, "a content of r0's own\n").await;

    pair.forwarder
        .add_rule("PUT", "/objects/", Action::Stall, 1);
    let asked = Instant::now();
    let refusal = pair.c0.snapshot(&own, "stalled").await.unwrap_err();
    let waited = asked.elapsed();
    assert_eq!(refusal.code(), Code::Unavailable, "Snapshot: {refusal}");
    assert!(refusal.to_string().contains(&s3_url()), "{refusal}");
    assert!(waited < BOUNDED, "Snapshot waited {waited:?}");
    assert!(acted(&pair.forwarder, Action::Stall));
    assert_eq!(pair.c0.list_snapshots(&own).await.unwrap(), vec![]);
    once_served("Snapshot after the stall", || {
        pair.c0.snapshot(&own, "after")
    })
    .await;

    pair.forwarder.clear_rules();
    pair.forwarder
        .add_rule("GET", "/objects/", Action::Stall, 1);
    let asked = Instant::now();
    let refusal = pair.c0.recover_session(&id, None, true).await.unwrap_err();
    let waited = asked.elapsed();
    assert_eq!(
        refusal.code(),
        Code::Unavailable,
        "RecoverSession: {refusal}"
    );
    assert!(refusal.to_string().contains(&s3_url()), "{refusal}");
    assert!(waited < BOUNDED, "RecoverSession waited {waited:?}");
    assert!(
        !pair.r0.data_dir.join("sessions").join(&id).exists(),
        "nothing made on replica 0"
    );
    once_served("RecoverSession after the stall", || {
        pair.c0.recover_session(&id, None, true)
    })
    .await;
    assert_eq!(workspace_state(&pair.c0.session(&id)).await, kept);
}
