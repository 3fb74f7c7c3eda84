//! Forking a DIRECTORY session's snapshot into a new DIRECTORY session,
//! beside `cp -r` of the same tree (10,000 incompressible files of 20 KiB
//! by default).
//!
//! Each round has a filesystem of its own ([`crate::scratch`]): a server
//! started on it makes the origin session and snapshots it (untimed);
//! then the round forks that snapshot (one CreateSession, timed to its
//! answer) and copies the origin's root with `cp -r`, `sync` before
//! each, the two alternating which goes first. How the fork's workspace
//! is made depends on the filesystem (blocks shared with `FICLONE` where
//! it can, else a copy of the data), so the notes say which filesystem
//! the data is on, and how many bytes the fork's store took beside the
//! snapshot's.

use crate::report::{Row, Samples, Target};
use crate::scratch::{self, Scratch};
use crate::server::Server;
use crate::{failed, machine, trees};
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use wsfs_client::{Client, SessionOptions};

/// The fork figure. `start(data_dir)` starts a server with that data
/// directory; `work` is where each round's filesystem is mounted.
pub async fn run<F>(
    start: F,
    work: &Path,
    files: usize,
    file_bytes: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String>
where
    F: Fn(&Path) -> Result<Server, String>,
{
    let shape = format!("{files} files, {:.0} MB", (files * file_bytes) as f64 / 1e6);
    // The origin, its store, the fork and the copy.
    let holds = 4 * (files * file_bytes.next_multiple_of(4096)) as u64;
    let mut kind = scratch::kind(false);
    let (mut fork, mut cp) = (Samples::default(), Samples::default());
    let (mut store_bytes, mut filesystem) = (0, String::new());
    // One untimed warm-up round, then the timed ones.
    for run in 0..=runs {
        eprintln!("fork: run {run}/{runs}");
        let round = Scratch::fresh(&work.join("fork-round"), holds, &mut kind)?;
        let server_data = round.path().join("server-data");
        let server = start(&server_data)?;
        let client = Client::connect(&server.url)
            .await
            .map_err(|e| e.to_string())?;
        let (info, root) =
            crate::snapshot::incompressible_session(&client, "fork", files, file_bytes).await?;
        let snapshot = client
            .snapshot(&info.id, "fork point")
            .await
            .map_err(failed("fork point"))?;
        let copy = || {
            trees::settle();
            let copied = round.path().join("fork-cp");
            crate::archive::timed(Command::new("cp").arg("-r").arg(&root).arg(copied))
        };
        let cp_first = run % 2 == 1;
        let cp_s = if cp_first { Some(copy()?) } else { None };
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
        let cp_s = match cp_s {
            Some(s) => s,
            None => copy()?,
        };
        store_bytes =
            trees::bytes_under(&server_data.join("sessions").join(&made.id).join("objects"));
        filesystem = machine::filesystem_of(&server_data);
        drop(client);
        drop(server);
        drop(round);
        if run > 0 {
            fork.push(fork_s);
            cp.push(cp_s);
        }
    }
    notes.push(format!(
        "Fork: the data is on {filesystem}; {}; the two sides alternate which goes first; \
         the fork's store lists {:.1} MB of contents, hard links to the origin's (no new blocks).",
        kind.describe(),
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
