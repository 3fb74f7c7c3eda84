//! What each `--durability` mode costs: a server is started in each mode
//! and, on a fresh DIRECTORY session per run, times `writes` small Writes
//! one after another (1 KiB each, each to a new path), a Snapshot of the
//! files they made, and a Restore of that snapshot after a tenth of the
//! files changed. The `fsync` figures are printed beside the `none` ones,
//! measured in the same run.

use crate::report::{Row, Samples, Target};
use crate::server::Server;
use crate::wire;
use std::time::Instant;
use tonic::transport::Channel;
use wsfs::proto::{self, sessions_client::SessionsClient};
use wsfs_server::durability::Durability;

/// Bytes of each small write.
const WRITE_BYTES: usize = 1024;

/// One mode's samples: ms per write, snapshot ms, restore ms.
#[derive(Default)]
struct Figures {
    write_ms: Samples,
    snapshot_ms: Samples,
    restore_ms: Samples,
}

fn failed(what: &str) -> impl Fn(tonic::Status) -> String + '_ {
    move |s| format!("{what} failed: {}", s.message())
}

async fn write(
    fs: &mut wire::Fs,
    session: &str,
    path: String,
    content: &str,
) -> Result<(), String> {
    fs.write(proto::WriteRequest {
        session_id: session.to_string(),
        path,
        content: content.to_string(),
        ..Default::default()
    })
    .await
    .map(drop)
    .map_err(failed("Write"))
}

/// One run on `channel`: the writes, the snapshot, the restore.
async fn once(channel: &Channel, writes: usize, figures: &mut Figures) -> Result<(), String> {
    let id = wire::create_directory_session(channel, None, 1 << 20)
        .await
        .map_err(failed("CreateSession"))?;
    let mut fs = wire::filesystem(channel);
    let mut sessions = SessionsClient::new(channel.clone());
    let content = "x".repeat(WRITE_BYTES - 1) + "\n";
    let path = |i: usize| format!("d{:02}/f{i:05}.txt", i % 32);

    let started = Instant::now();
    for i in 0..writes {
        write(&mut fs, &id, path(i), &content).await?;
    }
    figures
        .write_ms
        .push(started.elapsed().as_secs_f64() * 1e3 / writes as f64);

    let started = Instant::now();
    let snapshot = sessions
        .snapshot(proto::SnapshotRequest {
            session_id: id.clone(),
            tag: "bench".into(),
        })
        .await
        .map_err(failed("Snapshot"))?
        .into_inner()
        .snapshot_id;
    figures
        .snapshot_ms
        .push(started.elapsed().as_secs_f64() * 1e3);

    let changed = "y".repeat(WRITE_BYTES - 1) + "\n";
    for i in (0..writes).step_by(10) {
        write(&mut fs, &id, path(i), &changed).await?;
    }
    let started = Instant::now();
    sessions
        .restore(proto::RestoreRequest {
            session_id: id.clone(),
            snapshot_id: snapshot,
            ..Default::default()
        })
        .await
        .map_err(failed("Restore"))?;
    figures
        .restore_ms
        .push(started.elapsed().as_secs_f64() * 1e3);
    wire::delete_session(channel, &id).await;
    Ok(())
}

/// Runs every mode on a server `start` gives for it (after one untimed
/// warm-up run each) and returns the rows, `fsync` beside `none`.
pub async fn run<F>(start: F, writes: usize, runs: usize) -> Result<Vec<Row>, String>
where
    F: Fn(Durability) -> Result<Server, String>,
{
    let mut by_mode = Vec::new();
    for mode in [Durability::None, Durability::Fsync] {
        let server = start(mode)?;
        let channel = wire::connect(&server.url).await?;
        eprintln!("durability {mode:?}: {writes} writes, a snapshot and a restore, {runs} runs");
        let mut figures = Figures::default();
        once(&channel, writes, &mut Figures::default()).await?;
        for _ in 0..runs {
            once(&channel, writes, &mut figures).await?;
        }
        drop(channel);
        drop(server);
        by_mode.push(figures);
    }
    let fsync = by_mode.pop().unwrap_or_default();
    let none = by_mode.pop().unwrap_or_default();
    let row = |figure: String, unit, fsync: Samples, none: Samples| {
        Row::new(figure, unit, fsync)
            .baseline("--durability none", none)
            .target(Target::None)
    };
    Ok(vec![
        row(
            format!("Write {WRITE_BYTES} B, one after another, per write, --durability fsync"),
            "ms",
            fsync.write_ms,
            none.write_ms,
        ),
        row(
            format!("Snapshot of {writes} new files, --durability fsync"),
            "ms",
            fsync.snapshot_ms,
            none.snapshot_ms,
        ),
        row(
            format!(
                "Restore of {writes} files, {} changed, --durability fsync",
                writes.div_ceil(10)
            ),
            "ms",
            fsync.restore_ms,
            none.restore_ms,
        ),
    ])
}
