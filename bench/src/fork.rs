//! Forking a DIRECTORY session's snapshot into a new DIRECTORY session,
//! beside `cp -r` of the same tree (10,000 incompressible files of 20 KiB
//! by default).
//!
//! The origin is snapshotted once; each round forks that snapshot (one
//! CreateSession, timed to its answer) and then copies the origin's root
//! with `cp -r`, `sync` before each, and removes both copies before the
//! next round. How the fork's workspace is made depends on the
//! filesystem (blocks shared with `FICLONE` where it can, else a copy of
//! the data), so the notes say which filesystem the data is on, and how
//! many bytes the fork's store took beside the snapshot's.

use crate::report::{Row, Samples, Target};
use crate::{failed, machine, trees};
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use wsfs_client::{Client, SessionOptions};

/// The fork figure; `server_data` is the server's `--data-dir`, `work` a
/// scratch directory on the same filesystem.
pub async fn run(
    client: &Client,
    server_data: &Path,
    work: &Path,
    files: usize,
    file_bytes: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let (info, root) =
        crate::snapshot::incompressible_session(client, "fork", files, file_bytes).await?;
    let shape = format!("{files} files, {:.0} MB", (files * file_bytes) as f64 / 1e6);
    let snapshot = client
        .snapshot(&info.id, "fork point")
        .await
        .map_err(failed("snapshot"))?;
    let copied = work.join("fork-cp");
    let (mut fork, mut cp) = (Samples::default(), Samples::default());
    let mut store_bytes = 0;
    // One untimed warm-up round, then the timed ones.
    for run in 0..=runs {
        eprintln!("fork: run {run}/{runs}");
        trees::settle();
        let t = Instant::now();
        let made = client
            .create_session(SessionOptions::directory().from_snapshot(&info.id, &snapshot.id))
            .await
            .map_err(failed("fork"))?;
        let fork_s = t.elapsed().as_secs_f64();
        if (made.forked_from.as_ref()).is_none_or(|f| f.snapshot_id != snapshot.id) {
            return Err("the fork does not name its snapshot".into());
        }
        let made_dir = server_data.join("sessions").join(&made.id);
        store_bytes = trees::bytes_under(&made_dir.join("objects"));
        let cp_s = crate::archive::timed(Command::new("cp").arg("-r").arg(&root).arg(&copied))?;
        client
            .delete_session(&made.id)
            .await
            .map_err(failed("delete the fork"))?;
        let _ = std::fs::remove_dir_all(&copied);
        if run > 0 {
            fork.push(fork_s);
            cp.push(cp_s);
        }
    }
    let _ = client.delete_session(&info.id).await;
    notes.push(format!(
        "Fork: the data is on {}; the fork's store lists {:.1} MB of contents, hard links \
         to the origin's (no new blocks).",
        machine::filesystem_of(server_data),
        store_bytes as f64 / 1e6
    ));
    Ok(vec![Row::new(
        format!("Fork of a snapshot, DIRECTORY to DIRECTORY ({shape}), wall time"),
        "s",
        fork,
    )
    .baseline("cp -r", cp)
    .target(Target::AtMostTimes(0.5))])
}
