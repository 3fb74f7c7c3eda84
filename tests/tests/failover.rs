//! Failover without an operator: real `wsfs-server` replicas sharing one
//! real S3 API (`moto_server`), behind the shipped nginx configuration. A
//! replica is SIGKILLed; its sessions' next calls, through the proxy, reach
//! the next replica in the ring, which takes each session over from its
//! latest snapshot once the lost replica's lease runs out, with the tokens
//! its clients hold. Also the refusals that keep that cheap: ids that are
//! not session ids, ids the bucket does not know, a bucket that is down,
//! tokens the bucket does not list.
//!
//! These tests need `moto_server` (and nginx for the proxy one); without
//! them they say so and pass, unless `WSFS_REQUIRE_TOOLS=1`.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};
use tonic::Code;
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, holder, once_answered, Cluster, Replica, ReplicaSetup};
use wsfs_tests::forwarder::{Forwarder, Link};
use wsfs_tests::kit::{workspace_state, WorkspaceState};
use wsfs_tests::moto::{Moto, BUCKET, PREFIX};

/// Short, so that a lost replica's lease runs out within a test.
const LEASE_TTL: Duration = Duration::from_secs(4);
/// Beyond the lease: generous, since a loaded machine delays the killed
/// replica's last renewal's expiry, the proxy and the recovery.
const MARGIN: Duration = Duration::from_secs(60);
const ADMIN: &str = "admin-token-for-failover-0123456789";

fn setup(index: usize, envs: Vec<(String, String)>) -> ReplicaSetup {
    ReplicaSetup::mirrored(&format!("s3://{BUCKET}/{PREFIX}"), index, LEASE_TTL, envs)
        .with_admin(ADMIN)
}

/// A session id no bucket has seen (a UUID as servers write them).
fn fresh_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// Three replicas behind the shipped nginx on one moto bucket, and an
/// admin client through the proxy; `None` (having said why) without moto
/// or nginx. The bucket lives as long as the returned `Moto`.
async fn three_replicas() -> Option<(Moto, Cluster, Client)> {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return None;
    };
    let envs = moto.envs();
    let Some(cluster) = Cluster::start_configured(3, |i| setup(i, envs.clone())) else {
        eprintln!("skipping: nginx is not installed");
        return None;
    };
    let admin = Client::connect(&cluster.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    Some((moto, cluster, admin))
}

/// The replicas (of those not in `gone`) that serve session `id`, as each
/// lists its own sessions.
async fn serving(replicas: &[Replica], gone: &[usize], id: &str) -> Vec<usize> {
    let mut serving = Vec::new();
    let here = wsfs_client::SessionQuery {
        local_only: true,
        ..Default::default()
    };
    for (i, replica) in replicas.iter().enumerate() {
        if gone.contains(&i) {
            continue;
        }
        let client = Client::connect(&replica.url()).await.unwrap();
        let listed = client
            .with_token(ADMIN)
            .unwrap()
            .query_sessions(&here)
            .await;
        if listed.unwrap().iter().any(|s| s.id == id) {
            serving.push(i);
        }
    }
    serving
}

/// `call`'s answer once it succeeds, retrying while it is UNAVAILABLE (the
/// proxy found the replica gone, or the session's lease has not run out
/// yet) for the lease and a margin; any other error fails the test.
async fn once_served<T: std::fmt::Debug, F, Fut>(what: &str, call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = wsfs::Result<T>>,
{
    once_answered(what, LEASE_TTL + MARGIN, call, |_| true).await
}

/// The headline: two sessions of one replica, each written by the admin
/// client and by a caller holding only its own token, snapshotted, then
/// written again; the replica is SIGKILLed. Through the proxy, with no
/// admin call, the first session's next call comes from its token holder
/// (a GetSession naming no session: the token names it)
/// and the second's from the admin client: both succeed within the lease
/// and a margin, on another replica, each with exactly its last snapshot
/// (the write after it is lost, as RELIABILITY.md states), and the tokens
/// keep working.
#[tokio::test]
async fn a_killed_replicas_sessions_fail_over_through_the_proxy_with_their_tokens() {
    let Some((_moto, mut cluster, admin)) = three_replicas().await else {
        return;
    };

    // Sessions until one replica holds two.
    let mut placed: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let (victim, ids) = loop {
        let (_, info) = admin.create(SessionOptions::directory()).await.unwrap();
        let at = holder(&cluster.replicas, &info.id).expect("created on a replica");
        let on = placed.entry(at).or_default();
        on.push(info.id);
        if on.len() == 2 {
            break (at, on.clone());
        }
        assert!(placed.values().map(Vec::len).sum::<usize>() < 30);
    };

    let mut agents = Vec::new();
    let mut kept: Vec<WorkspaceState> = Vec::new();
    for id in &ids {
        let session = admin.session(id);
        session
            .write_str("a.txt", "before the snapshot\n")
            .await
            .unwrap();
        let token = admin.issue_token(id, "agent").await.unwrap().token;
        let agent = Client::connect(&cluster.url())
            .await
            .unwrap()
            .with_token(&token)
            .unwrap();
        agent
            .session(id)
            .write_str("agent.txt", "the agent's\n")
            .await
            .unwrap();
        admin.snapshot(id, "kept").await.unwrap();
        kept.push(workspace_state(&session).await);
        session
            .write_str("after.txt", "after the snapshot\n")
            .await
            .unwrap();
        agents.push(agent);
    }

    cluster.kill_replica(victim);
    let killed = Instant::now();

    // The first session: its token holder calls first, knowing only its
    // token (GetSession naming no session, routed by the session the
    // token names).
    let found = once_served("the token holder's first call", || {
        agents[0].token_session()
    })
    .await;
    assert_eq!(found.id, ids[0], "the token's own session");
    let failed_over_in = killed.elapsed();
    let first = agents[0].session(&ids[0]);
    let read = first.read_to_string("agent.txt").await.unwrap();
    assert_eq!(read, "the agent's\n");
    assert_eq!(
        workspace_state(&agents[0].session(&ids[0])).await,
        kept[0],
        "exactly the last snapshot"
    );
    agents[0]
        .session(&ids[0])
        .write_str("agent.txt", "written after the failover\n")
        .await
        .unwrap();

    // The second: the admin client calls first, then its token holder.
    let second = admin.session(&ids[1]);
    let read = once_served("the admin client's first read", || {
        second.read_to_string("a.txt")
    })
    .await;
    assert_eq!(read, "before the snapshot\n");
    assert_eq!(workspace_state(&admin.session(&ids[1])).await, kept[1]);
    agents[1]
        .session(&ids[1])
        .write_str("agent.txt", "written after the failover\n")
        .await
        .unwrap();

    for id in &ids {
        // (The lost replica's disk still holds its copy.)
        let survivors = cluster
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| *i != victim && holder(std::slice::from_ref(*r), id).is_some())
            .count();
        assert_eq!(survivors, 1, "served by one surviving replica");
        assert_eq!(
            admin.session(id).read_to_string("agent.txt").await.unwrap(),
            "written after the failover\n"
        );
    }
    eprintln!(
        "failed over in {failed_over_in:?} with a {LEASE_TTL:?} lease:\n{}",
        cluster.proxy_log()
    );
}

/// A MEMORY session fails over like a DIRECTORY one: written, snapshotted,
/// written again; its replica SIGKILLed. Through the proxy, the first call
/// (its token holder's, knowing only the token) finds it on another
/// replica, still a MEMORY session, holding exactly its last snapshot (a
/// file over 8 MiB among its files), with its older snapshot listed too
/// (fetched when read or restored), and the token keeps working there.
#[tokio::test]
async fn a_killed_replicas_memory_session_fails_over_as_a_memory_session() {
    let Some((_moto, mut cluster, admin)) = three_replicas().await else {
        return;
    };
    let (session, info) = admin.create(SessionOptions::memory()).await.unwrap();
    let id = info.id;
    let victim = serving(&cluster.replicas, &[], &id).await[0];
    session
        .write_str("dir/a.txt", "before the snapshot\n")
        .await
        .unwrap();
    let older = admin.snapshot(&id, "older").await.unwrap();
    let older_state = workspace_state(&session).await;
    let token = admin.issue_token(&id, "agent").await.unwrap().token;
    let agent = Client::connect(&cluster.url())
        .await
        .unwrap()
        .with_token(&token)
        .unwrap();
    agent
        .session(&id)
        .write_str("agent.txt", "the agent's\n")
        .await
        .unwrap();
    // Over the single-request bound: sent and fetched in parts.
    let large: Vec<u8> = (0..9 * 1024 * 1024 + 7).map(|i| (i % 251) as u8).collect();
    session
        .upload("large.bin", std::io::Cursor::new(large), Default::default())
        .await
        .unwrap();
    let snapshot = admin.snapshot(&id, "kept").await.unwrap();
    let kept = workspace_state(&session).await;
    session
        .write_str("after.txt", "after the snapshot\n")
        .await
        .unwrap();

    cluster.kill_replica(victim);
    let found = once_served("the token holder's first call", || agent.token_session()).await;
    assert_eq!(found.id, id, "the token's own session");
    assert_eq!(found.backend, wsfs_client::Backend::Memory, "still MEMORY");
    assert_eq!(workspace_state(&agent.session(&id)).await, kept);
    let listed = admin.list_snapshots(&id).await.unwrap();
    assert_eq!(
        listed,
        vec![older.clone(), snapshot],
        "every snapshot listed, the older one fetched only when used"
    );
    agent
        .session(&id)
        .write_str("agent.txt", "written after the failover\n")
        .await
        .unwrap();
    let taken_by = serving(&cluster.replicas, &[victim], &id).await;
    assert_eq!(taken_by.len(), 1, "served by one replica: {taken_by:?}");
    assert_eq!(
        admin
            .session(&id)
            .read_to_string("agent.txt")
            .await
            .unwrap(),
        "written after the failover\n"
    );
    // The older snapshot, fetched from the bucket when used: its file
    // read, then the session restored to it.
    let (size, chunks) = admin
        .read_snapshot_file(&id, &older.id, "dir/a.txt")
        .await
        .unwrap();
    let read: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(chunks).await.unwrap();
    assert_eq!(
        (size, read.concat()),
        (20, b"before the snapshot\n".to_vec())
    );
    admin.restore(&id, &older.id).await.unwrap();
    assert_eq!(workspace_state(&admin.session(&id)).await, older_state);
}

/// One replica on the bucket through a forwarder: calls for sessions it
/// does not serve are cheap to refuse. A name that is not a session id
/// asks the bucket nothing; an id the bucket does not know is asked about
/// once, then answered from memory for a few seconds; a bucket that is
/// down is UNAVAILABLE with the reason and leaves nothing on disk; a
/// session another replica holds is UNAVAILABLE naming it, asked about
/// once a second at most; a token the bucket does not list for the
/// session recovers nothing.
/// Then concurrent first calls share one recovery; IssueToken fails
/// UNAVAILABLE when the bucket cannot take the token's hash; and
/// DeleteSession of a session nobody serves removes it from the bucket.
#[tokio::test]
async fn calls_for_sessions_not_served_here_are_refused_cheaply_and_change_nothing() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let forwarder = Forwarder::start(moto.addr);
    let dir = fresh_dir();
    let r0 = Replica::start(&dir, 0, &setup(0, moto.envs_via(&forwarder.url())));
    let admin = Client::connect(&r0.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let asked = |id: &str| {
        forwarder
            .seen()
            .iter()
            .filter(|s| s.path.contains(id))
            .count()
    };
    let sessions_dir = r0.data_dir.join("sessions");
    let local_sessions = || std::fs::read_dir(&sessions_dir).map_or(0, |d| d.count());

    let bad = "not-a-session-id";
    let err = admin
        .session(bad)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SESSION_NOT_FOUND", "{err}");
    assert_eq!(asked(bad), 0, "a name that is no UUID is not looked up");

    let unknown = fresh_session_id();
    let started = Instant::now();
    let err = admin
        .session(&unknown)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SESSION_NOT_FOUND", "{err}");
    let first = asked(&unknown);
    assert!(first >= 1, "the bucket was asked");
    for _ in 0..20 {
        let err = admin.get_session(&unknown).await.unwrap_err();
        assert_eq!(err.reason(), "SESSION_NOT_FOUND", "{err}");
    }
    if started.elapsed() < Duration::from_secs(4) {
        assert_eq!(asked(&unknown), first, "asked again within seconds");
    }

    // A session in the bucket that another (lost) replica held, and a
    // token of it.
    let other_dir = fresh_dir();
    let mut r1 = Replica::start(&other_dir, 1, &setup(1, moto.envs()));
    let direct = Client::connect(&r1.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let (session, info) = direct.create(SessionOptions::directory()).await.unwrap();
    session.write_str("a.txt", "kept\n").await.unwrap();
    direct.snapshot(&info.id, "kept").await.unwrap();
    let token = direct.issue_token(&info.id, "agent").await.unwrap().token;
    let (_, doomed) = direct.create(SessionOptions::directory()).await.unwrap();

    // While replica 1 holds it: UNAVAILABLE naming it (retryable), and
    // the bucket is not asked again within a second.
    let started = Instant::now();
    let err = admin
        .session(&info.id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("replica-1"), "{err}");
    let looked_up = asked(&info.id);
    let err = admin.get_session(&info.id).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(asked(&info.id), looked_up, "asked again within a second");
    }
    assert_eq!(local_sessions(), 0);
    r1.kill();
    let id = info.id;

    // A token the bucket does not list for it recovers nothing.
    let stranger = Client::connect(&r0.url())
        .await
        .unwrap()
        .with_token("wsfs_0000000000000000000000000000000000000000000000000000000000000000")
        .unwrap();
    let started = Instant::now();
    let err = stranger
        .session(&id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let looked_up = asked(&id);
    let err = stranger.get_session(&id).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(
            asked(&id),
            looked_up,
            "the token list fetched again within a second"
        );
    }
    assert_eq!(local_sessions(), 0);

    // The bucket is down: UNAVAILABLE, with the reason, and nothing here.
    forwarder.set_link(Link::Cut);
    let agent = Client::connect(&r0.url())
        .await
        .unwrap()
        .with_token(&token)
        .unwrap();
    // (The admin asks about the other session: what the bucket said of
    // this one is remembered for a second.)
    let err = admin
        .session(&doomed.id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("object store"), "{err}");
    let err = agent
        .session(&id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert_eq!(local_sessions(), 0);
    forwarder.set_link(Link::Up);

    // Back up: concurrent first calls share one recovery once the lost
    // replica's lease runs out; none sees ALREADY_EXISTS.
    let reads = (0..8).map(|_| {
        let agent = agent.clone();
        let id = id.clone();
        async move {
            let session = agent.session(&id);
            once_served("a concurrent first call", || {
                session.read_to_string("a.txt")
            })
            .await
        }
    });
    for read in futures::future::join_all(reads).await {
        assert_eq!(read, "kept\n");
    }
    assert_eq!(local_sessions(), 1);

    // The bucket's token list holds hashes and callers, never a token; a
    // token whose hash cannot reach the bucket is not handed out.
    let callers = || -> Vec<String> {
        let raw = moto
            .get(&format!("sessions/{id}/tokens.json"))
            .expect("a token list");
        let text = String::from_utf8(raw).unwrap();
        assert!(!text.contains(&token), "a token itself in the bucket");
        let listed: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        listed
            .iter()
            .map(|t| t["caller"].as_str().unwrap().to_string())
            .collect()
    };
    let mut listed = callers();
    listed.sort();
    assert_eq!(listed, ["agent", "system"]);
    forwarder.set_link(Link::Cut);
    let err = admin.issue_token(&id, "late").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    forwarder.set_link(Link::Up);
    let issued = admin.issue_token(&id, "later").await.unwrap();
    listed = callers();
    listed.sort();
    assert_eq!(listed, ["agent", "later", "system"], "no 'late'");
    let later = Client::connect(&r0.url())
        .await
        .unwrap()
        .with_token(&issued.token)
        .unwrap();
    assert_eq!(
        later.session(&id).read_to_string("a.txt").await.unwrap(),
        "kept\n"
    );

    // Deleting a session nobody serves any more removes it from the
    // bucket, rather than leaving it to come back at its next call.
    let doomed = doomed.id;
    assert!(!moto.keys(&format!("sessions/{doomed}/")).is_empty());
    once_served("DeleteSession", || admin.delete_session(&doomed)).await;
    assert_eq!(
        moto.keys(&format!("sessions/{doomed}/")),
        Default::default(),
        "the bucket forgot it"
    );
    let err = admin.get_session(&doomed).await.unwrap_err();
    assert_eq!(err.reason(), "SESSION_NOT_FOUND", "{err}");
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other_dir);
}
