//! Object storage as the durable layer: real `wsfs-server` replicas that
//! mirror their snapshots to one bucket (`--object-store`), a real S3 API
//! (`moto_server`) or a shared directory (`file://`), and sessions that a
//! lost replica held brought back on another (RecoverSession).
//!
//! The `file://` tests always run; the S3 one needs `moto_server` and
//! nginx, and without them says so and passes, unless
//! `WSFS_REQUIRE_TOOLS=1`.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;
use wsfs_client::{Client, Session, SessionLimits, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, Cluster, Replica, ReplicaSetup};
use wsfs_tests::kit::{workspace_state, WorkspaceState};
use wsfs_tests::moto::{Moto, BUCKET, PREFIX};

/// Short, so that a lost replica's lease runs out within a test.
const LEASE_TTL: Duration = Duration::from_secs(3);

fn setup(bucket: &str, index: usize, envs: &[(String, String)]) -> ReplicaSetup {
    ReplicaSetup::mirrored(bucket, index, LEASE_TTL, envs.to_vec())
}

fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

async fn connect(replica: &Replica) -> Client {
    Client::connect(&replica.url()).await.unwrap()
}

/// A DIRECTORY session with `files` written, on the server `client` reaches.
async fn session_with(
    client: &Client,
    options: SessionOptions,
    files: &[(&str, &str)],
) -> (Session, String) {
    let (session, info) = client.create(options).await.unwrap();
    for (path, text) in files {
        session.write_str(path, text).await.unwrap();
    }
    (session, info.id)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The content keys a bucket should hold for these workspace states: one
/// per distinct content.
fn distinct_contents<'a>(states: impl IntoIterator<Item = &'a WorkspaceState>) -> BTreeSet<String> {
    states
        .into_iter()
        .flat_map(|s| s.values().flatten())
        .map(|bytes| sha256_hex(bytes))
        .collect()
}

/// The names under `objects/` of a `file://` bucket.
fn file_bucket_objects(bucket: &Path) -> BTreeSet<String> {
    std::fs::read_dir(bucket.join("objects"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `dir` (a `file://` bucket keeps empty directories).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}

fn local_session_dir(replica: &Replica, id: &str) -> PathBuf {
    replica.data_dir.join("sessions").join(id)
}

fn assert_leased(err: &wsfs::Error, holder: &str) {
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert_eq!(err.reason(), "SESSION_LEASED", "{err}");
    match err {
        wsfs::Error::SessionLeased { holder: h, .. } => assert_eq!(h, holder, "{err}"),
        other => panic!("not SESSION_LEASED: {other:?}"),
    }
}

/// The whole story on a shared directory: two sessions snapshotted on
/// replica 0 share their common content in the bucket; recovery elsewhere
/// is refused while replica 0 holds the lease; once replica 0 is lost and
/// its lease ran out, replica 1 brings the session back byte-identical to
/// its last snapshot, with its id, limits, labels and snapshot history; a
/// third replica is then refused; and replica 0, restarted on its old
/// disk, does not serve the session it lost from that disk.
#[tokio::test]
async fn a_lost_replicas_session_comes_back_on_another_from_a_shared_directory() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let url = file_url(&bucket);
    let mut r0 = Replica::start(&dir, 0, &setup(&url, 0, &[]));
    let r1 = Replica::start(&dir, 1, &setup(&url, 1, &[]));
    let r2 = Replica::start(&dir, 2, &setup(&url, 2, &[]));
    let (c0, c1, c2) = (connect(&r0).await, connect(&r1).await, connect(&r2).await);

    let limits = SessionLimits {
        max_files: 100,
        ..SessionLimits::default()
    };
    let options = SessionOptions::directory()
        .label("team", "blue")
        .limits(limits);
    let (s1, id1) = session_with(
        &c0,
        options,
        &[
            ("a.txt", "alpha\n"),
            ("dir/b.txt", "beta\n"),
            ("same.txt", "shared\n"),
        ],
    )
    .await;
    let first = c0.snapshot(&id1, "first").await.unwrap();
    let first_state = workspace_state(&s1).await;
    s1.write_str("c.txt", "gamma\n").await.unwrap();
    let second = c0.snapshot(&id1, "second").await.unwrap();
    let second_state = workspace_state(&s1).await;
    // Never snapshotted: lost with replica 0.
    s1.write_str("lost.txt", "unsaved\n").await.unwrap();

    let (s2, id2) = session_with(
        &c0,
        SessionOptions::directory(),
        &[("same.txt", "shared\n"), ("other.txt", "other\n")],
    )
    .await;
    c0.snapshot(&id2, "s2").await.unwrap();
    let s2_state = workspace_state(&s2).await;

    assert_eq!(
        file_bucket_objects(&bucket),
        distinct_contents([&first_state, &second_state, &s2_state]),
        "the bucket holds each content once, however many snapshots and sessions hold it"
    );

    // Replica 0 is alive and renews its lease: recovery elsewhere is
    // refused, and makes nothing there.
    let err = c1.recover_session(&id1, None, false).await.unwrap_err();
    assert_leased(&err, "replica-0");
    // A call there is refused too, retryably (a proxy may be routing
    // there because replica 0 is gone), and fails nothing over.
    let err = c1.get_session(&id1).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("replica-0"), "{err}");
    assert!(!local_session_dir(&r1, &id1).exists());

    r0.kill();
    tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await;

    // A snapshot the bucket does not hold is refused before anything is
    // fetched or made.
    let unknown = "00000000-0000-4000-8000-000000000000";
    let err = c1
        .recover_session(&id1, Some(unknown), false)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SNAPSHOT_NOT_FOUND", "{err}");
    let here = wsfs_client::SessionQuery {
        local_only: true,
        ..Default::default()
    };
    assert!(c1.query_sessions(&here).await.unwrap().is_empty());
    assert!(!local_session_dir(&r1, &id1).exists());

    let recovered = c1.recover_session(&id1, None, false).await.unwrap();
    assert_eq!(recovered.id, id1);
    assert_eq!(
        recovered.labels.get("team").map(String::as_str),
        Some("blue")
    );
    assert_eq!(recovered.limits.max_files, 100);
    let s1_on_r1 = c1.session(&id1);
    assert_eq!(
        workspace_state(&s1_on_r1).await,
        second_state,
        "byte-identical to the last snapshot, without what came after it"
    );
    let history: Vec<_> = c1
        .list_snapshots(&id1)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.tag))
        .collect();
    assert_eq!(
        history,
        vec![
            (first.id.clone(), "first".to_string()),
            (second.id.clone(), "second".to_string())
        ]
    );
    c1.restore(&id1, &first.id).await.unwrap();
    assert_eq!(workspace_state(&s1_on_r1).await, first_state);

    // Replica 1 holds the lease now: a third replica is refused, and
    // nothing changes there or in the bucket's lease (replica 1 renews it
    // meanwhile, so its newest generation is read, not the set of files).
    let newest_lease = |b: &Path| -> String {
        let newest = std::fs::read_dir(b.join("sessions").join(&id1).join("lease"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .max()
            .expect("a lease");
        std::fs::read_to_string(newest).unwrap_or_default()
    };
    let err = c2.recover_session(&id1, None, false).await.unwrap_err();
    assert_leased(&err, "replica-1");
    assert!(!local_session_dir(&r2, &id1).exists());
    assert_eq!(c1.list_snapshots(&id1).await.unwrap().len(), 2);
    let lease = newest_lease(&bucket);
    assert!(
        lease.is_empty() || lease.contains("\"replica-1\""),
        "the refused recovery took no lease: {lease}"
    );

    // Replica 0 comes back on its old disk: the session it lost is not
    // served there from its stale copy. The call is refused retryably
    // naming the holder (and asks it to hand the session over: see
    // `tests/tests/handback.rs`).
    let r0 = Replica::start(&dir, 0, &setup(&url, 0, &[]));
    let c0 = connect(&r0).await;
    let err = c0
        .session(&id1)
        .write_str("late.txt", "from the past\n")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("replica-1"), "{err}");
    assert_eq!(workspace_state(&s1_on_r1).await, first_state);
    // Its other session stays its own.
    assert_eq!(workspace_state(&c0.session(&id2)).await, s2_state);
    drop((r0, r1, r2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot that cannot reach the bucket fails UNAVAILABLE and is not
/// kept; once the bucket takes writes again, the next one goes through.
#[tokio::test]
async fn a_snapshot_the_bucket_refuses_fails_unavailable_and_is_not_kept() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let r0 = Replica::start(&dir, 0, &setup(&file_url(&bucket), 0, &[]));
    let c0 = connect(&r0).await;
    let (_session, id) =
        session_with(&c0, SessionOptions::directory(), &[("a.txt", "alpha\n")]).await;
    // Contents cannot be stored: `objects` is a file, not a directory.
    std::fs::write(bucket.join("objects"), b"in the way").unwrap();

    let err = c0.snapshot(&id, "doomed").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert_eq!(err.reason(), "UNAVAILABLE", "{err}");
    assert_eq!(c0.list_snapshots(&id).await.unwrap(), vec![]);
    let records = local_session_dir(&r0, &id).join("snapshots");
    let kept = std::fs::read_dir(&records).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "no snapshot record is left on the replica");
    assert!(!bucket.join("sessions").join(&id).join("snapshots").exists());

    std::fs::remove_file(bucket.join("objects")).unwrap();
    let info = c0.snapshot(&id, "later").await.unwrap();
    assert_eq!(
        c0.list_snapshots(&id).await.unwrap(),
        vec![info.clone()],
        "the retry is the one snapshot"
    );
    assert!(bucket
        .join("sessions")
        .join(&id)
        .join("snapshots")
        .join(format!("{}.json", info.id))
        .is_file());
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A MEMORY session is mirrored like a DIRECTORY one: each content once
/// in the bucket, under its hash. When its replica is lost, another
/// recovers it as a MEMORY session (no disk of its own) from the snapshot
/// RecoverSession names, then a third from its latest, with its labels,
/// limits, every snapshot listed (those not recovered from fetched when
/// restored) and tokens; one over the recovering replica's byte budget is
/// refused before anything is fetched, and nothing is made.
#[tokio::test]
async fn a_lost_replicas_memory_session_comes_back_on_another_as_a_memory_session() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let url = file_url(&bucket);
    const ADMIN: &str = "admin-token-for-tests-0123456789";
    let with_admin = |index: usize, extra: &[&str]| {
        let mut setup = setup(&url, index, &[]);
        setup.args.extend(["--admin-token".into(), ADMIN.into()]);
        setup.args.extend(extra.iter().map(|a| a.to_string()));
        setup
    };
    let admin = |client: Client| client.with_token(ADMIN).unwrap();
    let mut r0 = Replica::start(&dir, 0, &with_admin(0, &[]));
    // Replica 1 gives sessions without a byte limit of their own 64 bytes.
    let mut r1 = Replica::start(
        &dir,
        1,
        &with_admin(1, &["--default-max-total-bytes", "64"]),
    );
    let r2 = Replica::start(&dir, 2, &with_admin(2, &[]));
    let c0 = admin(connect(&r0).await);
    let c1 = admin(connect(&r1).await);
    let c2 = admin(connect(&r2).await);

    let limits = SessionLimits {
        max_total_bytes: 1000,
        ..SessionLimits::default()
    };
    let options = SessionOptions::memory().label("team", "red").limits(limits);
    let (s, id) = session_with(
        &c0,
        options,
        &[("a.txt", "alpha\n"), ("dir/b.txt", "beta\n")],
    )
    .await;
    let first = c0.snapshot(&id, "first").await.unwrap();
    let first_state = workspace_state(&s).await;
    s.write_str("c.txt", "gamma\n").await.unwrap();
    s.write_str("dir/same.txt", "alpha\n").await.unwrap();
    let second = c0.snapshot(&id, "second").await.unwrap();
    let second_state = workspace_state(&s).await;
    s.write_str("lost.txt", "unsaved\n").await.unwrap();
    let token = c0.issue_token(&id, "agent").await.unwrap().token;
    let big_text = "x".repeat(100);
    let (big, big_id) =
        session_with(&c0, SessionOptions::memory(), &[("big.txt", &big_text)]).await;
    c0.snapshot(&big_id, "big").await.unwrap();
    let big_state = workspace_state(&big).await;
    assert_eq!(
        file_bucket_objects(&bucket),
        distinct_contents([&first_state, &second_state, &big_state]),
        "the bucket holds each content once, by its hash"
    );
    let recorded = bucket.join("sessions").join(&id).join("session.json");
    let recorded = std::fs::read_to_string(recorded).unwrap();
    assert!(recorded.contains(r#""backend":"memory""#), "{recorded}");
    // Listed on another replica with its kind.
    let everywhere = c2
        .query_sessions(&wsfs_client::SessionQuery::default())
        .await
        .unwrap();
    let listed = everywhere.iter().find(|s| s.id == id).expect("listed");
    assert_eq!(listed.backend, wsfs_client::Backend::Memory);
    // Forked on another replica, as either kind, from the bucket.
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let options = options.from_snapshot(&id, &second.id);
        let (fork, info) = c2.create(options).await.unwrap();
        assert_eq!(workspace_state(&fork).await, second_state, "{info:?}");
    }

    r0.kill();
    tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await;

    let here = wsfs_client::SessionQuery {
        local_only: true,
        ..Default::default()
    };
    let err = c1.recover_session(&big_id, None, false).await.unwrap_err();
    assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
    assert!(err.to_string().contains("64"), "{err}");
    assert!(c1.query_sessions(&here).await.unwrap().is_empty());
    assert!(!r1.data_dir.join("memory-sessions").join(&big_id).exists());

    let recovered = c1
        .recover_session(&id, Some(&first.id), false)
        .await
        .unwrap();
    assert_eq!(recovered.backend, wsfs_client::Backend::Memory);
    assert_eq!(recovered.root_path, None);
    assert_eq!(
        recovered.labels.get("team").map(String::as_str),
        Some("red")
    );
    assert_eq!(recovered.limits.max_total_bytes, 1000);
    assert!(!local_session_dir(&r1, &id).exists(), "nothing on disk");
    assert_eq!(workspace_state(&c1.session(&id)).await, first_state);
    let listed: Vec<_> = c1
        .list_snapshots(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.tag))
        .collect();
    assert_eq!(
        listed,
        vec![
            (first.id.clone(), "first".to_string()),
            (second.id.clone(), "second".to_string())
        ],
        "every snapshot listed, only the one recovered fetched"
    );
    let agent = Client::connect(&r1.url())
        .await
        .unwrap()
        .with_token(&token)
        .unwrap();
    assert_eq!(
        agent.session(&id).read_to_string("a.txt").await.unwrap(),
        "alpha\n",
        "its tokens work on the replica that took it"
    );

    // Lost again: the next replica recovers the latest snapshot.
    r1.kill();
    tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await;
    let recovered = c2.recover_session(&id, None, false).await.unwrap();
    assert_eq!(recovered.backend, wsfs_client::Backend::Memory);
    assert_eq!(workspace_state(&c2.session(&id)).await, second_state);
    let listed: Vec<_> = c2.list_snapshots(&id).await.unwrap();
    assert_eq!(listed, vec![first.clone(), second], "every snapshot");
    // The older one, fetched from the bucket when restored.
    c2.restore(&id, &first.id).await.unwrap();
    assert_eq!(workspace_state(&c2.session(&id)).await, first_state);
    let third = c2.snapshot(&id, "third").await.unwrap();
    assert!(bucket
        .join("sessions")
        .join(&id)
        .join("snapshots")
        .join(format!("{}.json", third.id))
        .is_file());
    drop((r0, r1, r2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A MEMORY session's Snapshot that the bucket refuses is UNAVAILABLE and
/// is kept nowhere, as a DIRECTORY one's.
#[tokio::test]
async fn a_memory_snapshot_the_bucket_refuses_fails_unavailable_and_is_not_kept() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let r0 = Replica::start(&dir, 0, &setup(&file_url(&bucket), 0, &[]));
    let c0 = connect(&r0).await;
    let (_session, id) = session_with(&c0, SessionOptions::memory(), &[("a.txt", "alpha\n")]).await;
    // Contents cannot be stored: `objects` is a file, not a directory.
    std::fs::write(bucket.join("objects"), b"in the way").unwrap();

    let err = c0.snapshot(&id, "doomed").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert_eq!(err.reason(), "UNAVAILABLE", "{err}");
    assert_eq!(c0.list_snapshots(&id).await.unwrap(), vec![]);
    assert!(!bucket.join("sessions").join(&id).join("snapshots").exists());

    std::fs::remove_file(bucket.join("objects")).unwrap();
    let info = c0.snapshot(&id, "later").await.unwrap();
    assert_eq!(c0.list_snapshots(&id).await.unwrap(), vec![info.clone()]);
    assert!(bucket
        .join("sessions")
        .join(&id)
        .join("snapshots")
        .join(format!("{}.json", info.id))
        .is_file());
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--autosnapshot`: a session changed since its last autosnapshot gets
/// one (tag `auto`, in the bucket too, for a DIRECTORY and a MEMORY
/// session); an unchanged one does not.
#[tokio::test]
async fn autosnapshot_snapshots_changed_sessions_only() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let mut s = setup(&file_url(&bucket), 0, &[]);
    s.args
        .extend(["--autosnapshot".to_string(), "1".to_string()]);
    let r0 = Replica::start(&dir, 0, &s);
    let c0 = connect(&r0).await;
    let (_dirty, dirty_id) =
        session_with(&c0, SessionOptions::directory(), &[("work.txt", "done\n")]).await;
    let (_clean, clean_id) = session_with(&c0, SessionOptions::directory(), &[]).await;
    // A MEMORY session's autosnapshots are mirrored too.
    let (_memory, memory_id) =
        session_with(&c0, SessionOptions::memory(), &[("work.txt", "done\n")]).await;

    let mut all_autos = Vec::new();
    for id in [&dirty_id, &memory_id] {
        let mut autos = Vec::new();
        for _ in 0..200 {
            autos = c0.list_snapshots(id).await.unwrap();
            if !autos.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(autos.len(), 1, "{autos:?}");
        assert_eq!(autos[0].tag, "auto");
        all_autos.push((id, autos));
    }
    // Three more ticks: nothing changed, so nothing more is taken.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    for (id, autos) in &all_autos {
        assert_eq!(&c0.list_snapshots(id).await.unwrap(), autos);
        assert!(bucket
            .join("sessions")
            .join(id)
            .join("snapshots")
            .join(format!("{}.json", autos[0].id))
            .is_file());
    }
    assert_eq!(c0.list_snapshots(&clean_id).await.unwrap(), vec![]);
    drop(r0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Which replica holds each session carrying `label`, asking each directly.
async fn placement(cluster: &Cluster, label: &str) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for (index, replica) in cluster.replicas.iter().enumerate() {
        if let Ok(direct) = Client::connect(&replica.url()).await {
            // Its own only: with the shared bucket, each lists them all.
            let own = wsfs_client::SessionQuery {
                labels: BTreeMap::from([("test".to_string(), label.to_string())]),
                local_only: true,
                ..Default::default()
            };
            if let Ok(sessions) = direct.query_sessions(&own).await {
                for s in sessions {
                    held.insert(s.id, index);
                }
            }
        }
    }
    held
}

/// Three replicas on one S3 bucket behind nginx, a client that knows only
/// the proxy: sessions land on different replicas and share contents in
/// the bucket; a fork on one replica of a session on another reads its
/// snapshot from the bucket; one replica is lost, and a replacement at its address
/// recovers its session through the proxy, byte-identical to its last
/// snapshot, while a second recovery is refused.
#[tokio::test]
async fn replicas_behind_a_proxy_share_one_s3_bucket_and_recover_a_lost_one() {
    let Some(moto) = Moto::start() else {
        eprintln!("skipping: moto_server is not installed");
        return;
    };
    let url = format!("s3://{BUCKET}/{PREFIX}");
    let envs = moto.envs();
    let Some(mut cluster) = Cluster::start_configured(2, |i| setup(&url, i, &envs)) else {
        eprintln!("skipping: nginx is not installed");
        return;
    };
    let client = Client::connect(&cluster.url()).await.unwrap();

    // Sessions until each replica holds one, all with the same file.
    let mut states: BTreeMap<String, WorkspaceState> = BTreeMap::new();
    let mut snapshots: BTreeMap<String, String> = BTreeMap::new();
    let mut one_each: BTreeMap<usize, String> = BTreeMap::new();
    for n in 0..40 {
        let (session, id) = session_with(
            &client,
            SessionOptions::directory().label("test", "s3"),
            &[
                ("same.txt", "shared by all\n"),
                ("own.txt", &format!("session {n}\n")),
            ],
        )
        .await;
        let snapshot = client.snapshot(&id, "work").await.unwrap();
        snapshots.insert(id.clone(), snapshot.id);
        states.insert(id.clone(), workspace_state(&session).await);
        let held = placement(&cluster, "s3").await;
        one_each.entry(held[&id]).or_insert(id);
        if one_each.len() == 2 {
            break;
        }
    }
    assert_eq!(one_each.len(), 2, "sessions never reached both replicas");
    assert_eq!(
        moto.objects(),
        distinct_contents(states.values()),
        "the bucket holds each content once across sessions and replicas"
    );

    // A fork on replica 1 of replica 0's session: its snapshot comes from
    // the bucket, and adds no content there.
    let lost = one_each[&0].clone();
    let other = Client::connect(&cluster.replicas[1].url()).await.unwrap();
    let (fork, _) = other
        .create(SessionOptions::directory().from_snapshot(&lost, &snapshots[&lost]))
        .await
        .unwrap();
    assert_eq!(workspace_state(&fork).await, states[&lost]);
    fork.write_str("own.txt", "the fork's own\n").await.unwrap();
    assert_eq!(
        moto.objects(),
        distinct_contents(states.values()),
        "the fork's first snapshot shares every content"
    );

    // Replica 0 is lost; a replacement takes its address (the proxy's
    // route) with an empty disk.
    // (The proxy now sends replica 0's calls to replica 1, which takes
    // its sessions over by itself once the lease runs out: failover.rs.
    // Here an operator recovers on a replacement, asked directly.)
    let addr = cluster.replicas[0].addr;
    cluster.kill_replica(0);
    let mut replacement = setup(&url, 3, &envs);
    replacement.listen = Some(addr);
    let replacement_dir = fresh_dir();
    let replacement = Replica::start(&replacement_dir, 3, &replacement);
    let client = Client::connect(&replacement.url()).await.unwrap();
    // Until the lost replica's lease runs out, recovery is refused.
    let err = client
        .recover_session(&lost, None, false)
        .await
        .unwrap_err();
    assert_leased(&err, "replica-0");
    tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await;
    let recovered = client.recover_session(&lost, None, false).await.unwrap();
    assert_eq!(recovered.id, lost);
    assert_eq!(
        workspace_state(&client.session(&lost)).await,
        states[&lost],
        "byte-identical to its last snapshot"
    );
    // The survivor cannot take it while the replacement holds it.
    let survivor = Client::connect(&cluster.replicas[1].url()).await.unwrap();
    let err = survivor
        .recover_session(&lost, None, false)
        .await
        .unwrap_err();
    assert_leased(&err, "replica-3");
    let err = survivor.get_session(&lost).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("replica-3"), "{err}");
    let _ = std::fs::remove_dir_all(&replacement_dir);
}

/// `force` takes a session from a replica that is still running, and
/// answers once that replica's lease has run out: by then the old holder
/// refuses every call on it (`UNAVAILABLE` while it has not yet seen the
/// takeover, `SESSION_LEASED` naming the new holder from its next renewal
/// on), and never acknowledges a write again, however the two replicas'
/// renewals interleave. Deleting the session there removes it from the
/// bucket too.
#[tokio::test]
async fn a_forced_recovery_takes_a_live_session_and_its_old_holder_stops_serving_it() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let url = file_url(&bucket);
    let r0 = Replica::start(&dir, 0, &setup(&url, 0, &[]));
    let r1 = Replica::start(&dir, 1, &setup(&url, 1, &[]));
    let (c0, c1) = (connect(&r0).await, connect(&r1).await);
    let (s0, id) = session_with(&c0, SessionOptions::directory(), &[("a.txt", "alpha\n")]).await;
    c0.snapshot(&id, "kept").await.unwrap();
    let state = workspace_state(&s0).await;

    let err = c1.recover_session(&id, None, false).await.unwrap_err();
    assert_leased(&err, "replica-0");
    c1.recover_session(&id, None, true).await.unwrap();
    assert_eq!(workspace_state(&c1.session(&id)).await, state);

    // Renewals come every third of the lease; a loaded machine (CI runs
    // test binaries side by side) may delay one by seconds, so the wait is
    // long, and ends at the first SESSION_LEASED. Not one write is
    // acknowledged meanwhile, nor for a few renewals after.
    let mut leased = None;
    for _ in 0..200 {
        match s0.write_str("late.txt", "too late\n").await {
            Ok(_) => panic!("the old holder acknowledged a write after the forced recovery"),
            Err(e) if e.reason() == "SESSION_LEASED" => {
                leased = Some(e);
                break;
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let err = leased.expect("the old holder learns who holds the session");
    assert_leased(&err, "replica-1");
    for _ in 0..10 {
        tokio::time::sleep(LEASE_TTL / 5).await;
        let err = s0.write_str("late.txt", "too late\n").await.unwrap_err();
        assert_leased(&err, "replica-1");
    }
    assert_eq!(
        workspace_state(&c1.session(&id)).await,
        state,
        "what the old holder took meanwhile never reaches the new one"
    );

    c1.delete_session(&id).await.unwrap();
    assert_eq!(
        files_under(&bucket.join("sessions").join(&id)),
        Vec::<PathBuf>::new(),
        "a deleted session leaves no record in the bucket"
    );
    assert_eq!(
        file_bucket_objects(&bucket),
        distinct_contents([&state]),
        "contents stay: other sessions may share them"
    );
    drop((r0, r1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// RecoverSession is an admin call, and a bad or unknown id changes
/// nothing: no session, no directory, no lease.
#[tokio::test]
async fn recover_session_needs_the_admin_token_and_refuses_unknown_ids_changing_nothing() {
    const ADMIN: &str = "admin-token-for-tests-0123456789";
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let server = wsfs_tests::harness::TestServer::start_with(|c| {
        c.admin_token = Some(ADMIN.into());
        c.object_store = Some(url);
        c.replica_id = Some("solo".into());
    })
    .await;
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let admin = anonymous.clone().with_token(ADMIN).unwrap();
    let unknown = "00000000-0000-4000-8000-000000000000";

    let err = anonymous
        .recover_session(unknown, None, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let err = admin
        .recover_session(unknown, None, false)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SESSION_NOT_FOUND", "{err}");
    let err = admin
        .recover_session("Not-A-UUID", None, false)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "INVALID_ARGUMENT", "{err}");

    // A session this server serves already is not recovered over itself,
    // even with force.
    let (_session, id) =
        session_with(&admin, SessionOptions::directory(), &[("a.txt", "a\n")]).await;
    admin.snapshot(&id, "one").await.unwrap();
    let err = admin
        .recover_session(&id, Some(unknown), true)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ALREADY_EXISTS", "served here already: {err}");

    assert!(!server.data_dir().join("sessions").join(unknown).exists());
    assert!(!bucket.path().join("sessions").join(unknown).exists());
    assert_eq!(admin.list_sessions().await.unwrap().len(), 1);
}

/// The exit status and stderr of `wsfs-server` started with `args` and
/// `envs`; panics when it is still running after a minute (it served
/// instead of refusing).
fn refused_start(args: &[&str], envs: &[(String, String)]) -> String {
    let dir = fresh_dir();
    let mut child = std::process::Command::new(wsfs_tests::cluster::binary("wsfs-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started instead of refusing {args:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    stderr
}

/// A bucket that was never created stops the server at start, naming the
/// bucket and how to create it, rather than failing calls later.
#[test]
fn a_bucket_that_was_never_created_stops_the_server_at_start() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server is not installed: skipped");
        return;
    };
    let stderr = refused_start(&["--object-store", "s3://never-created/wsfs"], &moto.envs());
    assert!(
        stderr.contains("'never-created' does not exist")
            && stderr.contains("aws s3 mb s3://never-created"),
        "{stderr}"
    );
}

/// A `file://` store whose directory cannot be made stops the server at
/// start, naming it.
#[test]
fn a_directory_store_that_cannot_be_made_stops_the_server_at_start() {
    let dir = fresh_dir();
    let in_the_way = dir.join("a-file");
    std::fs::write(&in_the_way, b"not a directory").unwrap();
    let url = file_url(&in_the_way.join("bucket"));
    let stderr = refused_start(&["--object-store", &url], &[]);
    assert!(
        stderr.contains(&url) && stderr.contains("cannot be used"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
