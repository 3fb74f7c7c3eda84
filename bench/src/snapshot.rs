//! Snapshot and Restore of a DIRECTORY session beside git, on a workspace
//! of incompressible files (10,000 of 20 KiB by default).
//!
//! Each round changes the tree once and times both tools on that same
//! change, one after the other, so both run under the same load; `sync`
//! runs before every timed step. git keeps a separate git dir whose work
//! tree is the session's root, with automatic gc off (it would otherwise
//! pack in the background in the middle of the next measurement).
//!
//! - Snapshot after 1 changed file, beside `git add -A && git commit -q`;
//! - Restore of the last snapshot after the same 100 files changed, beside
//!   `git reset --hard -q && git clean -fdxq`; Restore frees the replaced
//!   files just after it answers, and the round waits for that before git
//!   runs, so git does not pay for it;
//! - the first snapshot beside the first commit (one sample each);
//! - storage after 100 snapshots, one small file changed before each, as
//!   a note beside the workspace's size.

use crate::report::{Row, Samples, Target};
use crate::{failed, trees};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use wsfs_client::{Client, SessionOptions};

/// How many files Restore finds changed.
const RESTORE_CHANGED: usize = 100;

/// Snapshots taken for the storage note.
const STORAGE_SNAPSHOTS: usize = 100;

/// Rewrites `count` files spread through the tree (the first at `offset`).
fn touch(
    root: &Path,
    files: usize,
    count: usize,
    offset: usize,
    round: usize,
) -> Result<(), String> {
    for i in 0..count {
        let path = root.join(trees::incompressible_name((offset + i * 97) % files));
        std::fs::write(&path, format!("changed in round {round}\n"))
            .map_err(|e| format!("cannot rewrite '{}': {e}", path.display()))?;
    }
    Ok(())
}

/// Runs a git script on the session's root; its wall time.
fn git(git_dir: &Path, root: &Path, script: &str) -> Result<Duration, String> {
    trees::settle();
    let started = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("GIT_DIR", git_dir)
        .env("GIT_WORK_TREE", root)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !status.success() {
        return Err(format!("`{script}` failed: {status}"));
    }
    Ok(started.elapsed())
}

/// Waits (up to a minute) until `dir` holds nothing.
fn wait_until_empty(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A DIRECTORY session holding `files` incompressible files of
/// `file_bytes` each, and its root; `figure` names it in the progress.
pub async fn incompressible_session(
    client: &Client,
    figure: &str,
    files: usize,
    file_bytes: usize,
) -> Result<(wsfs_client::SessionInfo, std::path::PathBuf), String> {
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .map_err(failed("cannot create a DIRECTORY session"))?;
    let root = info
        .root_path
        .clone()
        .ok_or("the server did not say where the session's root is")?;
    eprintln!("{figure}: writing {files} files of {file_bytes} bytes...");
    trees::incompressible(&root, files, file_bytes)?;
    Ok((info, root))
}

/// The snapshot figures; `server_data` is the server's `--data-dir`.
pub async fn run(
    client: &Client,
    server_data: &Path,
    work: &Path,
    files: usize,
    file_bytes: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let (info, root) = incompressible_session(client, "snapshot", files, file_bytes).await?;
    let workspace_bytes = (files * file_bytes) as u64;
    let shape = format!("{files} files, {:.0} MB", workspace_bytes as f64 / 1e6);

    trees::settle();
    let t = Instant::now();
    client
        .snapshot(&info.id, "first")
        .await
        .map_err(failed("first snapshot"))?;
    let wsfs_first = t.elapsed();
    let git_dir = tempfile::tempdir_in(work).map_err(|e| e.to_string())?;
    let g = git_dir.path().join("repo.git");
    git(
        &g,
        &root,
        "git init -q && git config gc.auto 0 && git config maintenance.auto false",
    )?;
    let git_first = git(&g, &root, "git add -A && git commit -q -m first")?;

    let mut round = 0;
    let (mut wsfs_snapshot, mut git_snapshot) = (Samples::default(), Samples::default());
    let mut last = None;
    for run in 0..runs {
        eprintln!("snapshot: run {}/{runs}", run + 1);
        round += 1;
        touch(&root, files, 1, 1 + run * 13, round)?;
        trees::settle();
        let t = Instant::now();
        last = Some(
            client
                .snapshot(&info.id, "one changed")
                .await
                .map_err(failed("snapshot"))?,
        );
        wsfs_snapshot.push(ms(t.elapsed()));
        git_snapshot.push(ms(git(&g, &root, "git add -A && git commit -q -m one")?));
    }
    let staging = server_data.join("sessions").join(&info.id).join("staging");
    // Both now hold the same tree: the last snapshot, git's HEAD.
    let target = last.ok_or("no snapshot was taken")?;
    let (mut wsfs_restore, mut git_restore) = (Samples::default(), Samples::default());
    for run in 0..runs {
        eprintln!("restore: run {}/{runs}", run + 1);
        // The same files each time, so that neither tool also meets the
        // files the other one rewrote.
        round += 1;
        touch(&root, files, RESTORE_CHANGED, 0, round)?;
        trees::settle();
        let t = Instant::now();
        client
            .restore(&info.id, &target.id)
            .await
            .map_err(failed("restore"))?;
        wsfs_restore.push(ms(t.elapsed()));
        wait_until_empty(&staging);
        round += 1;
        touch(&root, files, RESTORE_CHANGED, 0, round)?;
        git_restore.push(ms(git(
            &g,
            &root,
            "git reset --hard -q && git clean -fdxq",
        )?));
    }
    // The restores were exact: the tree holds the snapshot's bytes again.
    let check = client
        .snapshot(&info.id, "after restore")
        .await
        .map_err(failed("snapshot after restore"))?;
    if (check.file_count, check.total_bytes) != (target.file_count, target.total_bytes) {
        return Err(format!(
            "restore was not exact: {} files / {} bytes, the snapshot holds {} / {}",
            check.file_count, check.total_bytes, target.file_count, target.total_bytes
        ));
    }
    let _ = client.delete_session(&info.id).await;

    notes.push(storage_note(client, server_data, files, file_bytes).await?);
    Ok(vec![
        Row::new(
            format!("First snapshot, everything hashed ({shape})"),
            "ms",
            Samples::single(ms(wsfs_first)),
        )
        .baseline("first git commit", Samples::single(ms(git_first))),
        Row::new(
            format!("Snapshot after 1 changed file ({shape})"),
            "ms",
            wsfs_snapshot,
        )
        .baseline("git add + commit", git_snapshot)
        .target(Target::AtMostTimes(0.5)),
        Row::new(
            format!("Restore after {RESTORE_CHANGED} changed files ({shape})"),
            "ms",
            wsfs_restore,
        )
        .baseline("git reset --hard + clean", git_restore)
        .target(Target::AtMostTimes(0.5)),
    ])
}

/// The store's size after [`STORAGE_SNAPSHOTS`] snapshots of a fresh
/// session, one small file changed before each.
async fn storage_note(
    client: &Client,
    server_data: &Path,
    files: usize,
    file_bytes: usize,
) -> Result<String, String> {
    eprintln!("snapshot: {STORAGE_SNAPSHOTS} snapshots for the storage figure...");
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .map_err(failed("cannot create a DIRECTORY session"))?;
    let root = info.root_path.clone().ok_or("no root path")?;
    trees::incompressible(&root, files, file_bytes)?;
    for i in 0..STORAGE_SNAPSHOTS {
        std::fs::write(root.join("small.txt"), format!("revision {i:03}\n"))
            .map_err(|e| e.to_string())?;
        client
            .snapshot(&info.id, &format!("r{i}"))
            .await
            .map_err(failed("snapshot"))?;
    }
    let session_dir = server_data.join("sessions").join(&info.id);
    let part = |name: &str| trees::bytes_under(&session_dir.join(name));
    let (objects, manifests, records) = (part("objects"), part("trees"), part("snapshots"));
    let index = std::fs::metadata(session_dir.join("head")).map_or(0, |m| m.len());
    let total = objects + manifests + records + index;
    let workspace = (files * file_bytes) as u64;
    let _ = client.delete_session(&info.id).await;
    Ok(format!(
        "Snapshot storage after {STORAGE_SNAPSHOTS} one-file-changed snapshots: {:.1} MB, {:.3}x \
         the {:.1} MB workspace (contents {:.1} MB, directory manifests {:.2} MB, snapshot \
         records {:.2} MB, head {:.2} MB).",
        total as f64 / 1e6,
        total as f64 / workspace as f64,
        workspace as f64 / 1e6,
        objects as f64 / 1e6,
        manifests as f64 / 1e6,
        records as f64 / 1e6,
        index as f64 / 1e6
    ))
}
