//! Snapshot and Restore of a DIRECTORY session beside git, on a workspace
//! of 10,000 files / 200 MB (override with `FILES`, `FILE_KB`, and `RUNS`
//! for the timed runs of each figure, default 7).
//!
//! `cargo run --release -p wsfs-tests --example snapshot_speed`
//!
//! Prints min / median / max for wsfs and for git (a separate git dir,
//! `--work-tree` the session's root): a snapshot after 1 changed file
//! (`git add -A && git commit -q`), and a restore after 100 changed files
//! (`git reset --hard -q && git clean -fdxq`), with the ratio of the
//! medians. Then the storage after 100 one-file-changed snapshots, beside
//! the workspace's size.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::harness::TestServer;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn file_name(i: usize) -> String {
    format!("d{:03}/f{:05}.dat", i / 100, i)
}

fn fill(root: &Path, files: usize, size: usize) {
    for i in 0..files {
        let path = root.join(file_name(i));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Distinct, incompressible content per file (xorshift).
        let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut data = Vec::with_capacity(size + 8);
        while data.len() < size {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        data.truncate(size);
        std::fs::write(path, data).unwrap();
    }
}

/// Rewrites `count` files spread through the tree (the first at `offset`).
fn touch(root: &Path, files: usize, count: usize, offset: usize, round: usize) {
    for i in 0..count {
        let path = root.join(file_name((offset + i * 97) % files));
        std::fs::write(path, format!("changed in round {round}\n")).unwrap();
    }
}

fn git(git_dir: &Path, root: &Path, script: &str) -> Duration {
    settle();
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
        .unwrap();
    assert!(status.success(), "{script}");
    started.elapsed()
}

fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => bytes_under(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Flushes dirty pages first, so that one step's writeback does not slow
/// the next one down.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Waits (up to a minute) until `dir` holds nothing.
fn wait_until_empty(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// min / median / max in milliseconds.
fn spread(times: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let median = if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    (ms[0], median, ms[ms.len() - 1])
}

fn row(what: &str, wsfs: &[Duration], git: &[Duration]) {
    let (a, b) = (spread(wsfs), spread(git));
    println!(
        "{what:<28} {:>7.1} / {:>7.1} / {:>7.1}   {:>7.1} / {:>7.1} / {:>7.1}   {:>5.2}x",
        a.0,
        a.1,
        a.2,
        b.0,
        b.1,
        b.2,
        a.1 / b.1
    );
}

#[tokio::main]
async fn main() {
    let files = env("FILES", 10_000);
    let size = env("FILE_KB", 20) * 1024;
    let runs = env("RUNS", 7).max(1);
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .unwrap();
    let root = info.root_path.clone().unwrap();
    fill(&root, files, size);
    let workspace_bytes = (files * size) as u64;
    println!(
        "workspace: {files} files, {:.1} MB; {runs} timed runs per figure",
        workspace_bytes as f64 / 1e6
    );

    // Each round changes the tree once and times both tools on that same
    // change, one after the other, so that both run under the same load.
    settle();
    let t = Instant::now();
    client.snapshot(&info.id, "first").await.unwrap();
    let wsfs_first = t.elapsed();
    let git_dir = tempfile::tempdir().unwrap();
    let g = git_dir.path().join("repo.git");
    // No automatic gc: it would pack in the background, in the middle of
    // the next measurement of either tool.
    git(
        &g,
        &root,
        "git init -q && git config gc.auto 0 && git config maintenance.auto false",
    );
    let git_first = git(&g, &root, "git add -A && git commit -q -m first");

    let mut round = 0;
    let (mut wsfs_snapshot, mut git_snapshot) = (Vec::new(), Vec::new());
    let mut last = None;
    for run in 0..runs {
        round += 1;
        touch(&root, files, 1, 1 + run * 13, round);
        settle();
        let t = Instant::now();
        last = Some(client.snapshot(&info.id, "one changed").await.unwrap());
        wsfs_snapshot.push(t.elapsed());
        git_snapshot.push(git(&g, &root, "git add -A && git commit -q -m one"));
    }
    let staging = server
        .data_dir()
        .join("sessions")
        .join(&info.id)
        .join("staging");
    // Both now hold the same tree: the last snapshot, git's HEAD.
    let target = last.unwrap();
    let (mut wsfs_restore, mut git_restore) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        // The same 100 files each time, so that neither tool also meets
        // the files the other one rewrote.
        round += 1;
        touch(&root, files, 100, 0, round);
        settle();
        let t = Instant::now();
        client.restore(&info.id, &target.id).await.unwrap();
        wsfs_restore.push(t.elapsed());
        // The server frees the replaced files after it answers; let it
        // finish before git runs, so that git does not pay for it.
        wait_until_empty(&staging);
        round += 1;
        touch(&root, files, 100, 0, round);
        git_restore.push(git(&g, &root, "git reset --hard -q && git clean -fdxq"));
    }
    // Both restores are exact: the tree holds the snapshot's bytes again.
    let check = client.snapshot(&info.id, "after restore").await.unwrap();
    assert_eq!(
        (check.file_count, check.total_bytes),
        (target.file_count, target.total_bytes)
    );

    println!(
        "{:<28} {:>29}   {:>29}   ratio of medians",
        "(ms: min / median / max)", "wsfs", "git"
    );
    row("first snapshot / commit", &[wsfs_first], &[git_first]);
    row("snapshot, 1 file changed", &wsfs_snapshot, &git_snapshot);
    row("restore, 100 files changed", &wsfs_restore, &git_restore);

    // Storage: 100 snapshots, each after one small file changed, in a
    // fresh session over the same tree.
    let store_info = client
        .create_session(SessionOptions::directory())
        .await
        .unwrap();
    let store_root = store_info.root_path.clone().unwrap();
    fill(&store_root, files, size);
    let sid = store_info.id.clone();
    for i in 0..100 {
        std::fs::write(store_root.join("small.txt"), format!("revision {i:03}\n")).unwrap();
        client.snapshot(&sid, &format!("r{i}")).await.unwrap();
    }
    let session_dir = server.data_dir().join("sessions").join(&sid);
    let part = |name: &str| bytes_under(&session_dir.join(name));
    let (objects, trees, records) = (part("objects"), part("trees"), part("snapshots"));
    let index = std::fs::metadata(session_dir.join("head"))
        .or_else(|_| std::fs::metadata(session_dir.join("snapshot-index.json")))
        .map_or(0, |m| m.len());
    let total = objects + trees + records + index;
    println!(
        "storage after 100 one-file-changed snapshots: {:.1} MB ({:.3}x the {:.1} MB workspace): \
         contents {:.1} MB, directory manifests {:.2} MB, snapshot records {:.2} MB, index {:.2} MB",
        total as f64 / 1e6,
        total as f64 / workspace_bytes as f64,
        workspace_bytes as f64 / 1e6,
        objects as f64 / 1e6,
        trees as f64 / 1e6,
        records as f64 / 1e6,
        index as f64 / 1e6
    );
}
