//! Hand-back between replicas: real `wsfs-server` replicas sharing one
//! real S3 API (`moto_server`), behind the shipped nginx configuration. A
//! replica that comes back at its address after its sessions failed over
//! gets their calls from the proxy again; the replica that took them over
//! hands them back (a snapshot first, so nothing acknowledged is lost),
//! without an operator. A hand-back whose snapshot the bucket refuses
//! changes nothing and is tried again; a stale or forged request changes
//! nothing.
//!
//! These tests need `moto_server` (and nginx for the proxy one); without
//! them they say so and pass, unless `WSFS_REQUIRE_TOOLS=1`.

use std::future::Future;
use std::time::{Duration, Instant};
use tonic::Code;
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, holder, once_answered, Cluster, Replica};
use wsfs_tests::forwarder::{Action, Forwarder};
use wsfs_tests::moto::Moto;

/// Short, so that a lost replica's lease runs out within a test.
const LEASE_TTL: Duration = Duration::from_secs(4);
/// Beyond the lease: generous, since a loaded machine delays renewals,
/// the proxy (which tries a failed replica again after 10 s) and the
/// recoveries.
const PATIENCE: Duration = Duration::from_secs(90);
const ADMIN: &str = "admin-token-for-handback-0123456789";

async fn admin(url: &str) -> Client {
    Client::connect(url)
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap()
}

/// `call`'s answer once it succeeds and `done` holds of it, retrying
/// while it is UNAVAILABLE for [`PATIENCE`].
async fn once<T: std::fmt::Debug, F, Fut>(what: &str, call: F, done: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = wsfs::Result<T>>,
{
    once_answered(what, PATIENCE, call, done).await
}

/// The headline: a session written through the proxy; its replica is
/// SIGKILLed and the session fails over to the next one in the ring,
/// where the client writes more (no snapshot after). The killed replica
/// comes back with its disk and address: through the proxy, with no
/// admin call, the session is served by it again within a bounded time,
/// with every write, those after the failover too; the replica that had
/// taken it over serves it no more.
#[tokio::test]
async fn a_replica_back_at_its_address_gets_its_sessions_back_with_every_write() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let Some(mut cluster) =
        Cluster::start_configured(3, |i| moto.replica(i, LEASE_TTL).with_admin(ADMIN))
    else {
        eprintln!("skipping: nginx is not installed");
        return;
    };
    let client = admin(&cluster.url()).await;
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    let id = info.id;
    let first = holder(&cluster.replicas, &id).expect("created on a replica");
    session
        .write_str("a.txt", "before the kill\n")
        .await
        .unwrap();
    client.snapshot(&id, "kept").await.unwrap();

    cluster.kill_replica(first);
    once(
        "the first write after the kill",
        || session.write_str("b.txt", "after the failover\n"),
        |_| true,
    )
    .await;
    // (While nginx has not yet marked the killed replica down, a retry
    // may reach either survivor: a caller retries UNAVAILABLE.)
    once(
        "a second write after the failover",
        || session.write_str("c.txt", "acknowledged, never snapshotted by hand\n"),
        |_| true,
    )
    .await;
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    assert!(
        others
            .iter()
            .any(|&i| holder(&cluster.replicas[i..=i], &id).is_some()),
        "failed over to a surviving replica"
    );

    cluster.restart_replica(first, &moto.replica(first, LEASE_TTL).with_admin(ADMIN));
    let restarted = Instant::now();
    let back = format!("replica-{first}");
    once(
        "served by the returning replica",
        || client.get_session(&id),
        |info| info.served_by.as_deref() == Some(back.as_str()),
    )
    .await;
    let handed_back_in = restarted.elapsed();
    for (path, text) in [
        ("a.txt", "before the kill\n"),
        ("b.txt", "after the failover\n"),
        ("c.txt", "acknowledged, never snapshotted by hand\n"),
    ] {
        assert_eq!(session.read_to_string(path).await.unwrap(), text, "{path}");
    }
    session.write_str("d.txt", "back home\n").await.unwrap();

    // The replica that gave it back keeps no copy, and no other serves
    // it.
    for &other in &others {
        assert_eq!(holder(&cluster.replicas[other..=other], &id), None);
        let direct = admin(&cluster.replicas[other].url()).await;
        let err = direct
            .session(&id)
            .read_to_string("d.txt")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
        assert!(err.to_string().contains(&back), "{err}");
    }
    eprintln!("handed back {handed_back_in:?} after the restart, with a {LEASE_TTL:?} lease");
}

/// Two replicas on one bucket, replica 0 through the fault-injecting
/// forwarder. Requests that are stale, for a session replica 0 does not
/// hold, from nobody, or not naming a session, are removed and change
/// nothing. Then replica 1 gets calls for replica 0's session while the
/// bucket refuses replica 0's snapshot records: replica 0 keeps serving
/// (a write there succeeds), the request stays; once the bucket takes
/// them again the session moves to replica 1 with every write.
#[tokio::test]
async fn a_handback_whose_snapshot_fails_keeps_serving_and_bad_requests_change_nothing() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let forwarder = Forwarder::start(moto.addr);
    let dir = fresh_dir();
    let r0 = Replica::start(
        &dir,
        0,
        &moto
            .replica_via(0, LEASE_TTL, &forwarder.url())
            .with_admin(ADMIN),
    );
    let r1 = Replica::start(&dir, 1, &moto.replica(1, LEASE_TTL).with_admin(ADMIN));
    let (c0, c1) = (admin(&r0.url()).await, admin(&r1.url()).await);
    let (s0, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let id = info.id;
    s0.write_str("a.txt", "first\n").await.unwrap();
    c0.snapshot(&id, "kept").await.unwrap();
    let snapshots = c0.list_snapshots(&id).await.unwrap().len();

    // Bad requests, replica 0 having held the session longer than a
    // hand-back needs.
    tokio::time::sleep(LEASE_TTL).await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let unknown = "00000000-0000-4000-8000-000000000000";
    let bad = [
        (
            id.clone(),
            format!(r#"{{"from":"replica-1","at_ms":{}}}"#, now_ms - 3_600_000),
        ),
        (id.clone(), format!(r#"{{"from":"","at_ms":{now_ms}}}"#)),
        (
            unknown.to_string(),
            format!(r#"{{"from":"replica-1","at_ms":{now_ms}}}"#),
        ),
        (
            "not-a-session".to_string(),
            format!(r#"{{"from":"replica-1","at_ms":{now_ms}}}"#),
        ),
    ];
    for (session, body) in &bad {
        moto.put(&format!("handback/replica-0/{session}"), body.as_bytes());
        let started = Instant::now();
        while !moto.keys("handback/replica-0/").is_empty() {
            assert!(started.elapsed() < PATIENCE, "{body} never removed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(
        c0.get_session(&id).await.unwrap().served_by.as_deref(),
        Some("replica-0")
    );
    s0.write_str("b.txt", "still here\n").await.unwrap();
    assert_eq!(c0.list_snapshots(&id).await.unwrap().len(), snapshots);

    // Replica 1 asks while replica 0's snapshot records are refused.
    forwarder.add_rule("PUT", "/snapshots/", Action::Status(503), usize::MAX);
    let refused = || {
        forwarder
            .seen()
            .iter()
            .filter(|s| s.action == Some(Action::Status(503)))
            .count()
    };
    let started = Instant::now();
    while refused() == 0 {
        let err = c1.session(&id).read_to_string("a.txt").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
        assert!(err.to_string().contains("replica-0"), "{err}");
        assert!(started.elapsed() < PATIENCE, "no hand-back was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The failed hand-back changed nothing: replica 0 serves, the
    // request waits; replica 1's client keeps calling meanwhile (so its
    // request stays fresh) and is refused.
    let started = Instant::now();
    loop {
        let err = c1.session(&id).read_to_string("a.txt").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
        match s0.write_str("c.txt", "during the refusals\n").await {
            Ok(_) => break,
            Err(e) if e.code() == Code::Unavailable && started.elapsed() < PATIENCE => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("replica 0 after the failed hand-back: {e}"),
        }
    }
    assert!(
        moto.keys("handback/replica-0/").contains(&id),
        "the request stays for the next round"
    );
    assert_eq!(
        c0.get_session(&id).await.unwrap().served_by.as_deref(),
        Some("replica-0")
    );

    forwarder.clear_rules();
    let s1 = c1.session(&id);
    once(
        "the session on replica 1",
        || c1.get_session(&id),
        |info| info.served_by.as_deref() == Some("replica-1"),
    )
    .await;
    for (path, text) in [
        ("a.txt", "first\n"),
        ("b.txt", "still here\n"),
        ("c.txt", "during the refusals\n"),
    ] {
        assert_eq!(s1.read_to_string(path).await.unwrap(), text, "{path}");
    }
    assert!(moto.keys("handback/replica-0/").is_empty());
    let err = s0.read_to_string("a.txt").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    drop((r0, r1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ping-pong is bounded: two replicas both getting calls for one session
/// (a flapping proxy) move it at most once per lease length, the
/// shortest time a replica holds a session before it hands it on; each
/// move is a snapshot in the bucket, so they are counted there.
#[tokio::test]
async fn two_replicas_both_getting_calls_move_a_session_at_most_once_per_lease() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let dir = fresh_dir();
    let r0 = Replica::start(&dir, 0, &moto.replica(0, LEASE_TTL).with_admin(ADMIN));
    let r1 = Replica::start(&dir, 1, &moto.replica(1, LEASE_TTL).with_admin(ADMIN));
    let (c0, c1) = (admin(&r0.url()).await, admin(&r1.url()).await);
    let (s0, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let id = info.id;
    s0.write_str("a.txt", "kept\n").await.unwrap();
    c0.snapshot(&id, "kept").await.unwrap();
    let snapshots = || moto.keys(&format!("sessions/{id}/snapshots/")).len();
    let before = snapshots();

    let window = LEASE_TTL * 4;
    let started = Instant::now();
    let mut served = 0;
    while started.elapsed() < window {
        for client in [&c0, &c1] {
            match client.session(&id).read_to_string("a.txt").await {
                Ok(text) => {
                    assert_eq!(text, "kept\n");
                    served += 1;
                }
                Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let moves = snapshots() - before;
    let bound = 1 + (window.as_millis() / LEASE_TTL.as_millis()) as usize;
    eprintln!("{moves} moves in {window:?} with a {LEASE_TTL:?} lease, {served} calls served");
    assert!(moves >= 1, "the session never moved");
    assert!(
        moves <= bound,
        "{moves} moves in {window:?}: more than {bound}"
    );
    assert!(served > 0);
    drop((r0, r1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hand-back requests addressed to a replica that never comes back: a
/// replica sweeping every second removes one nobody wrote again for three
/// lease lengths (two for a request to stand, one more for clocks), while
/// one its asker keeps writing again (once a second, as an asker does while
/// calls come) stays; the sweeper's own session is served throughout.
#[tokio::test]
async fn handback_requests_to_a_replica_that_never_returns_are_swept() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let dir = fresh_dir();
    let mut sweeping = moto.replica(0, LEASE_TTL);
    sweeping
        .args
        .extend(["--sweep-interval", "1s"].into_iter().map(String::from));
    let r0 = Replica::start(&dir, 0, &sweeping);
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let (s0, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let asked = |at_ms: u128| format!(r#"{{"from":"replica-1","at_ms":{at_ms}}}"#);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let abandoned = format!("handback/replica-gone/{}", info.id);
    let renewed = "handback/replica-gone/00000000-0000-4000-8000-000000000000";
    moto.put(&abandoned, asked(now_ms()).as_bytes());

    let started = Instant::now();
    while moto.get(&abandoned).is_some() {
        assert!(
            started.elapsed() < PATIENCE,
            "the abandoned request was never removed"
        );
        moto.put(renewed, asked(now_ms()).as_bytes());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        started.elapsed() >= LEASE_TTL * 3 - Duration::from_secs(1),
        "removed after {:?}, before it was abandoned",
        started.elapsed()
    );
    assert!(
        moto.get(renewed).is_some(),
        "a request its asker keeps writing was removed"
    );
    s0.write_str("a.txt", "served\n").await.unwrap();
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}
