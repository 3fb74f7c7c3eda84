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
use wsfs_tests::kit::workspace_state;
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
    let c1 = Client::connect(&r1.url()).await.unwrap();
    c1.recover_session(&b_info.id, None, true).await.unwrap();
    assert_eq!(workspace_state(&c1.session(&b_info.id)).await, b_state);
    drop(r1);
    let _ = std::fs::remove_dir_all(&dir);
}
