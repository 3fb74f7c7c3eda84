//! What a recovery fetches from the bucket: the contents of the snapshot
//! it restores, streamed into the workspace, and the session's other
//! snapshots' contents only when something needs them. Real `wsfs-server`
//! replicas on one real S3 API (`moto_server`): the session is made on
//! replica 0, which is then killed; replica 1 reaches the bucket through
//! a fault-injecting forwarder ([`wsfs_tests::forwarder`]) that counts
//! its requests and can cut it off.
//!
//! The tests need `moto_server`; without it they say so and pass, unless
//! `WSFS_REQUIRE_TOOLS=1`.

use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;
use tonic::Code;
use wsfs_client::{Client, Session, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, Replica, ReplicaSetup};
use wsfs_tests::forwarder::{Forwarder, Link};
use wsfs_tests::kit::{workspace_state, WorkspaceState};
use wsfs_tests::moto::{Moto, BUCKET, PREFIX};

/// The lost replica's lease: short, so that the recovery (forced) waits
/// little for it to run out.
const LOST_LEASE: Duration = Duration::from_secs(3);
/// The recovering replica's lease: long, so that it keeps serving the
/// session while a test cuts it off from the bucket.
const RECOVERED_LEASE: Duration = Duration::from_secs(60);

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// One snapshot as it was taken: its id, the workspace it holds, and the
/// bytes of `a.txt` in it.
struct Taken {
    id: String,
    state: WorkspaceState,
    a: &'static str,
}

/// A DIRECTORY session with three snapshots (`a.txt` different in each,
/// `shared.txt` in all), made on a replica that was then killed, and
/// recovered (its latest snapshot) on a replica reaching the bucket
/// through a forwarder.
struct Recovered {
    _moto: Moto,
    forwarder: Forwarder,
    lost: Replica,
    replica: Replica,
    client: Client,
    session: Session,
    snapshots: Vec<Taken>,
    dir: PathBuf,
}

impl Recovered {
    async fn start() -> Option<Recovered> {
        let moto = Moto::start()?;
        let forwarder = Forwarder::start(moto.addr);
        let dir = fresh_dir();
        let url = format!("s3://{BUCKET}/{PREFIX}");
        let mut lost = Replica::start(
            &dir,
            0,
            &ReplicaSetup::mirrored(&url, 0, LOST_LEASE, moto.envs()),
        );
        let origin = Client::connect(&lost.url()).await.unwrap();
        let (made, info) = origin.create(SessionOptions::directory()).await.unwrap();
        made.write_str("shared.txt", "in every snapshot\n")
            .await
            .unwrap();
        let mut snapshots = Vec::new();
        for (tag, a) in [
            ("oldest", "a, first\n"),
            ("middle", "a, second\n"),
            ("latest", "a, third\n"),
        ] {
            made.write_str("a.txt", a).await.unwrap();
            made.write_str(&format!("{tag}.txt"), tag).await.unwrap();
            let id = origin.snapshot(&info.id, tag).await.unwrap().id;
            snapshots.push(Taken {
                id,
                state: workspace_state(&made).await,
                a,
            });
        }
        lost.kill();

        let replica = Replica::start(
            &dir,
            1,
            &ReplicaSetup::mirrored(&url, 1, RECOVERED_LEASE, moto.envs_via(&forwarder.url())),
        );
        let client = Client::connect(&replica.url()).await.unwrap();
        client.recover_session(&info.id, None, true).await.unwrap();
        let session = client.session(&info.id);
        Some(Recovered {
            _moto: moto,
            forwarder,
            lost,
            replica,
            client,
            session,
            snapshots,
            dir,
        })
    }

    /// The contents (hex SHA-256) the recovering replica has asked the
    /// bucket for so far.
    fn contents_fetched(&self) -> BTreeSet<String> {
        self.contents_requested("GET")
    }

    /// The contents the recovering replica has sent with `method`.
    fn contents_requested(&self, method: &str) -> BTreeSet<String> {
        self.content_requests(method).into_iter().collect()
    }

    /// Every request with `method` for a content, by its hash, in order.
    fn content_requests(&self, method: &str) -> Vec<String> {
        self.forwarder
            .seen()
            .into_iter()
            .filter(|s| s.method == method)
            .filter_map(|s| {
                let (_, after) = s.path.split_once("/objects/")?;
                Some(after.split(['?', '/']).next()?.to_string())
            })
            .collect()
    }

    /// The contents the recovering replica holds in its local store.
    fn local_contents(&self) -> BTreeSet<String> {
        let objects = self
            .replica
            .data_dir
            .join("sessions")
            .join(self.session.id())
            .join("objects");
        let mut held = BTreeSet::new();
        for head in std::fs::read_dir(&objects).into_iter().flatten() {
            let head = head.unwrap();
            let name = head.file_name().to_string_lossy().into_owned();
            if name == "tmp" {
                continue;
            }
            for object in std::fs::read_dir(head.path()).unwrap() {
                let rest = object.unwrap().file_name().to_string_lossy().into_owned();
                held.insert(format!("{name}{rest}"));
            }
        }
        held
    }

    fn id(&self) -> &str {
        self.session.id()
    }
}

impl Drop for Recovered {
    fn drop(&mut self) {
        self.lost.kill();
        self.replica.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn hashes(texts: &[&str]) -> BTreeSet<String> {
    texts.iter().map(|t| sha256_hex(t.as_bytes())).collect()
}

/// RecoverSession fetches the restored snapshot's contents and no other;
/// Restore of an older snapshot fetches its contents then (and only the
/// ones the store lacks); with the bucket cut off, Restore of a snapshot
/// whose contents are still in the bucket is UNAVAILABLE, naming the
/// object, and leaves the workspace as it was.
#[tokio::test]
async fn recovery_fetches_the_restored_snapshots_contents_and_the_others_on_demand() {
    let Some(r) = Recovered::start().await else {
        return;
    };
    let latest = &r.snapshots[2];
    assert_eq!(workspace_state(&r.session).await, latest.state);
    let listed: Vec<String> = r
        .client
        .list_snapshots(r.id())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    let ids: Vec<String> = r.snapshots.iter().map(|s| s.id.clone()).collect();
    assert_eq!(listed, ids, "every snapshot is listed after the recovery");
    let restored = hashes(&[
        "in every snapshot\n",
        "oldest",
        "middle",
        "latest",
        latest.a,
    ]);
    assert_eq!(r.contents_fetched(), restored, "fetched by the recovery");

    let middle = &r.snapshots[1];
    r.client.restore(r.id(), &middle.id).await.unwrap();
    assert_eq!(workspace_state(&r.session).await, middle.state);
    let mut then = restored.clone();
    then.extend(hashes(&[middle.a]));
    assert_eq!(r.contents_fetched(), then, "fetched by the restore");

    r.forwarder.set_link(Link::Cut);
    let oldest = &r.snapshots[0];
    let err = r
        .client
        .restore(r.id(), &oldest.id)
        .await
        .expect_err("a restore whose contents cannot be fetched");
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(
        err.to_string()
            .contains(&format!("objects/{}", sha256_hex(oldest.a.as_bytes()))),
        "{err}"
    );
    assert_eq!(workspace_state(&r.session).await, middle.state);

    r.forwarder.set_link(Link::Up);
    r.client.restore(r.id(), &oldest.id).await.unwrap();
    assert_eq!(workspace_state(&r.session).await, oldest.state);
}

/// The first Snapshot after a recovery reads and sends no content when
/// nothing changed (the recovered workspace's files are known by their
/// identities, and the local store holds no copy of them), and only the
/// changed file's content otherwise.
#[tokio::test]
async fn the_first_snapshot_after_a_recovery_sends_only_what_changed() {
    let Some(r) = Recovered::start().await else {
        return;
    };
    let sent_before = r.contents_requested("PUT");
    r.client.snapshot(r.id(), "unchanged").await.unwrap();
    assert_eq!(r.contents_requested("PUT"), sent_before, "sent unchanged");
    assert_eq!(
        r.local_contents(),
        BTreeSet::new(),
        "contents read into the local store by a snapshot of an unchanged workspace"
    );

    r.session
        .write_str("changed.txt", "written after the recovery\n")
        .await
        .unwrap();
    r.client.snapshot(r.id(), "changed").await.unwrap();
    let mut sent = sent_before.clone();
    sent.extend(hashes(&["written after the recovery\n"]));
    assert_eq!(r.contents_requested("PUT"), sent);
    assert_eq!(
        r.local_contents(),
        hashes(&["written after the recovery\n"])
    );
}

/// ReadSnapshotFile and ExportArchive of a snapshot whose contents the
/// recovery left in the bucket fetch them then, once, and answer its
/// bytes.
#[tokio::test]
async fn an_unfetched_snapshot_reads_and_exports_its_own_bytes() {
    use futures::TryStreamExt;
    let Some(r) = Recovered::start().await else {
        return;
    };
    let oldest = &r.snapshots[0];
    let wanted = sha256_hex(oldest.a.as_bytes());
    assert!(
        !r.contents_fetched().contains(&wanted),
        "the oldest snapshot's a.txt was fetched by the recovery"
    );

    let (size, chunks) = r
        .client
        .read_snapshot_file(r.id(), &oldest.id, "a.txt")
        .await
        .unwrap();
    let bytes: Vec<u8> = chunks.try_collect::<Vec<_>>().await.unwrap().concat();
    assert_eq!(
        (size, bytes.as_slice()),
        (oldest.a.len() as u64, oldest.a.as_bytes())
    );
    assert!(r.contents_fetched().contains(&wanted));

    let mut archive = Vec::new();
    r.session
        .export_to_writer(&mut archive, Some(&oldest.id))
        .await
        .unwrap();
    let (copy, _) = r.client.create(SessionOptions::memory()).await.unwrap();
    copy.import_from_reader(std::io::Cursor::new(archive))
        .await
        .unwrap();
    assert_eq!(workspace_state(&copy).await, oldest.state);
    let times = r
        .content_requests("GET")
        .into_iter()
        .filter(|hash| *hash == wanted)
        .count();
    assert_eq!(times, 1, "fetched once, then read from the local store");
}
