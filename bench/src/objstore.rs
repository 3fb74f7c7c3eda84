//! Snapshots mirrored to an object store, and recovery from it, beside
//! `rsync -a` (the `rclone sync` / `aws s3 sync` kind of incremental copy)
//! of the same tree (10,000 incompressible files of 20 KiB by default).
//!
//! The bucket is the shared-directory kind (`file://` on a scratch
//! directory), so no S3 server is needed and the figures measure wsfs's
//! side of the mirror, not a network.
//!
//! - Snapshot after one changed file, and again with nothing changed, on
//!   a server started with `--object-store`: the Snapshot answers once
//!   the change is in the bucket. Beside each, `rsync -a` of the workspace
//!   into a plain mirror directory after the same change (or none). The
//!   first snapshot and the first copy (every byte) are untimed.
//! - RecoverSession of that workspace on a second server from the bucket,
//!   each round on a fresh server and data directory, once the previous
//!   holder is gone and its (short) lease ran out: waiting out the lease
//!   is not what is measured. Beside it, `rsync -a` of the mirror into an
//!   empty directory. The data directory and the copy each get a new
//!   filesystem of their own ([`crate::scratch`]).
//! - The sweep (`wsfs_server::objstore::Bucket::sweep`, in this process)
//!   of that bucket filled up to [`SWEEP_KEYS`] keys with unreferenced
//!   contents (written untimed before each run), beside a plain listing
//!   of every key of the same bucket.

use crate::report::{Row, Samples, Target};
use crate::scratch::{self, Scratch};
use crate::server::Server;
use crate::{failed, machine, trees};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use wsfs_client::Client;

/// The file rewritten before each timed snapshot.
const CHANGED_FILE: usize = 0;
/// The keys in the bucket the sweep is timed over.
pub const SWEEP_KEYS: usize = 100_000;

/// `rsync -a SRC/ DEST` (the contents of `src` into `dest`); seconds.
fn rsync(src: &Path, dest: &Path) -> Result<f64, String> {
    let mut source = src.as_os_str().to_owned();
    source.push("/");
    crate::archive::timed(Command::new("rsync").arg("-a").arg(source).arg(dest))
}

/// The object-store figures. `start(data_dir, bucket_url)` starts a
/// server with that data directory and `--object-store bucket_url`;
/// `work` is a scratch directory for the bucket, the servers' data and
/// the baseline's copies.
pub async fn run<F>(
    start: F,
    work: &Path,
    files: usize,
    file_bytes: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String>
where
    F: Fn(&Path, &str) -> Result<Server, String>,
{
    let bucket = work.join("objstore-bucket");
    std::fs::create_dir_all(&bucket).map_err(|e| format!("cannot create the bucket: {e}"))?;
    let url = format!("file://{}", bucket.display());
    let shape = format!("{files} files, {:.0} MB", (files * file_bytes) as f64 / 1e6);

    let first = start(&work.join("objstore-first"), &url)?;
    let client = Client::connect(&first.url)
        .await
        .map_err(|e| e.to_string())?;
    let (info, root) =
        crate::snapshot::incompressible_session(&client, "objstore", files, file_bytes).await?;
    eprintln!("objstore: first snapshot (every byte to the bucket) and first rsync, untimed");
    client
        .snapshot(&info.id, "first")
        .await
        .map_err(failed("first snapshot"))?;
    let mirror = work.join("objstore-mirror");
    rsync(&root, &mirror)?;

    let changed = root.join(trees::incompressible_name(CHANGED_FILE));
    let (mut snapshot, mut sync) = (Samples::default(), Samples::default());
    let (mut unchanged, mut unchanged_sync) = (Samples::default(), Samples::default());
    let mut last_change = String::new();
    for run in 0..=runs {
        eprintln!("objstore: snapshot after one change, run {run}/{runs}");
        last_change = format!("changed before snapshot round {run}\n");
        std::fs::write(&changed, &last_change)
            .map_err(|e| format!("cannot rewrite '{}': {e}", changed.display()))?;
        trees::settle();
        let snapshot_s = timed_snapshot(&client, &info.id, &format!("round {run}")).await?;
        let sync_s = rsync(&root, &mirror)?;
        let unchanged_s =
            timed_snapshot(&client, &info.id, &format!("round {run}, unchanged")).await?;
        let unchanged_sync_s = rsync(&root, &mirror)?;
        if run > 0 {
            snapshot.push(snapshot_s);
            sync.push(sync_s);
            unchanged.push(unchanged_s);
            unchanged_sync.push(unchanged_sync_s);
        }
    }
    drop(client);
    drop(first);
    let bucket_bytes = trees::bytes_under(&bucket);

    let (mut recover, mut copy) = (Samples::default(), Samples::default());
    let holds = (files * file_bytes.next_multiple_of(4096)) as u64;
    let mut kind = scratch::kind(false);
    for run in 0..=runs {
        eprintln!("objstore: recovery on a second server, run {run}/{runs}");
        let round = Scratch::fresh(&work.join("objstore-second"), holds, &mut kind)?;
        let second = start(&round.path().join("data"), &url)?;
        let client = Client::connect(&second.url)
            .await
            .map_err(|e| e.to_string())?;
        trees::settle();
        // The previous holder's lease runs out, untimed.
        std::thread::sleep(crate::server::BENCH_LEASE_TTL * 2);
        let t = Instant::now();
        let made = client
            .recover_session(&info.id, None, true)
            .await
            .map_err(failed("recover"))?;
        let recover_s = t.elapsed().as_secs_f64();
        check_recovered(made.root_path, &last_change)?;
        drop(client);
        drop(second);
        drop(round);
        let copied = Scratch::fresh(&work.join("objstore-copy"), holds, &mut kind)?;
        trees::settle();
        let copy_s = rsync(&mirror, &copied.path().join("copy"))?;
        drop(copied);
        if run > 0 {
            recover.push(recover_s);
            copy.push(copy_s);
        }
    }
    let (sweep, listing) = sweep(&bucket, &url, runs).await?;
    let _ = std::fs::remove_dir_all(work.join("objstore-first"));
    let _ = std::fs::remove_dir_all(&mirror);
    let _ = std::fs::remove_dir_all(&bucket);

    notes.push(format!(
        "Object storage: a `file://` bucket (the shared-directory kind) on {}; after {} \
         snapshots it holds {:.1} MB. RecoverSession and its `rsync -a`: {}.",
        machine::filesystem_of(work),
        runs + 2,
        bucket_bytes as f64 / 1e6,
        kind.describe()
    ));
    Ok(vec![
        Row::new(
            format!("Snapshot to the object store after 1 changed file ({shape}), wall time"),
            "s",
            snapshot,
        )
        .baseline("rsync -a", sync)
        .target(Target::None),
        Row::new(
            format!("Snapshot to the object store with nothing changed ({shape}), wall time"),
            "s",
            unchanged,
        )
        .baseline("rsync -a", unchanged_sync)
        .target(Target::None),
        Row::new(
            format!("RecoverSession from the object store ({shape}), wall time"),
            "s",
            recover,
        )
        .baseline("rsync -a into an empty dir", copy)
        .target(Target::AtMostTimes(1.0)),
        Row::new(
            format!("Sweep of a bucket of {SWEEP_KEYS} keys, most unreferenced, wall time"),
            "s",
            sweep,
        )
        .baseline("listing every key", listing)
        .target(Target::None),
    ])
}

/// Seconds one Snapshot of session `id` takes, upload included.
async fn timed_snapshot(client: &Client, id: &str, tag: &str) -> Result<f64, String> {
    let t = Instant::now();
    client.snapshot(id, tag).await.map_err(failed("snapshot"))?;
    Ok(t.elapsed().as_secs_f64())
}

/// Times the sweep of `bucket` (at `url`, no server on it) and a plain
/// listing of it, each run over [`SWEEP_KEYS`] keys: what the snapshots
/// left, and unreferenced contents written (untimed) up to that count.
async fn sweep(bucket: &Path, url: &str, runs: usize) -> Result<(Samples, Samples), String> {
    use wsfs_server::objstore::Bucket;
    let store = Bucket::open(url, "bench-sweeper".into(), crate::server::BENCH_LEASE_TTL)
        .map_err(|e| e.to_string())?;
    let (mut sweep, mut listing) = (Samples::default(), Samples::default());
    for run in 0..=runs {
        eprintln!("objstore: sweep of {SWEEP_KEYS} keys, run {run}/{runs}");
        let held = store.count_keys().await.map_err(|e| e.to_string())?;
        let objects = bucket.join("objects");
        for n in held..SWEEP_KEYS {
            let name = format!("{:064x}", 0xface_0000_0000u64 + n as u64);
            std::fs::write(objects.join(name), n.to_string())
                .map_err(|e| format!("cannot fill the bucket: {e}"))?;
        }
        trees::settle();
        let t = Instant::now();
        let listed = store.count_keys().await.map_err(|e| e.to_string())?;
        let listing_s = t.elapsed().as_secs_f64();
        if listed < SWEEP_KEYS {
            return Err(format!("the bucket lists {listed} keys, not {SWEEP_KEYS}"));
        }
        let t = Instant::now();
        let report = store
            .sweep(std::time::Duration::ZERO)
            .await
            .map_err(|e| e.to_string())?;
        let sweep_s = t.elapsed().as_secs_f64();
        if report.yielded.is_some() || report.deleted < SWEEP_KEYS - held {
            return Err(format!(
                "the sweep did not free the unreferenced keys: {report:?}"
            ));
        }
        if run > 0 {
            sweep.push(sweep_s);
            listing.push(listing_s);
        }
    }
    Ok((sweep, listing))
}

/// Fails unless the recovered workspace holds the last change.
fn check_recovered(root: Option<PathBuf>, last_change: &str) -> Result<(), String> {
    let root = root.ok_or("the recovered session has no root on this server")?;
    let path = root.join(trees::incompressible_name(CHANGED_FILE));
    let held = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the recovered '{}': {e}", path.display()))?;
    if held != last_change {
        return Err("the recovered workspace does not hold the last snapshot".into());
    }
    Ok(())
}
