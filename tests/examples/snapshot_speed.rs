//! Snapshot and Restore of a DIRECTORY session beside git, on a workspace
//! of 10,000 files / 200 MB (override with `FILES` and `FILE_KB`).
//!
//! `cargo run --release -p wsfs-tests --example snapshot_speed`
//!
//! Prints, for wsfs and for git (a separate git dir, `--work-tree` the
//! session's root): the first snapshot, a snapshot after 1 changed file,
//! and a restore after 100 changed files (`git reset --hard -q && git clean
//! -fdxq`), plus the snapshot store's size.

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

fn touch(root: &Path, count: usize, round: usize) {
    for i in 0..count {
        let path = root.join(file_name(i * 97));
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

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let files = env("FILES", 10_000);
    let size = env("FILE_KB", 20) * 1024;
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .unwrap();
    let root = info.root_path.clone().unwrap();
    fill(&root, files, size);
    println!("workspace: {files} files, {} MB", files * size / 1_000_000);

    settle();
    let t = Instant::now();
    client.snapshot(&info.id, "first").await.unwrap();
    let wsfs_first = t.elapsed();
    touch(&root, 1, 1);
    settle();
    let t = Instant::now();
    let one_changed = client.snapshot(&info.id, "one changed").await.unwrap();
    let wsfs_one = t.elapsed();
    touch(&root, 100, 2);
    let marker = root
        .join("d000/f00000.dat")
        .metadata()
        .unwrap()
        .modified()
        .unwrap();
    settle();
    let t = Instant::now();
    client.restore(&info.id, &one_changed.id).await.unwrap();
    let wsfs_restore = t.elapsed();
    let rewritten = (0..files)
        .filter(|&i| {
            root.join(file_name(i))
                .metadata()
                .unwrap()
                .modified()
                .unwrap()
                > marker
        })
        .count();
    println!("restore rewrote {rewritten} files");
    let store = bytes_under(
        &server
            .data_dir()
            .join("sessions")
            .join(&info.id)
            .join("objects"),
    );

    let git_dir = tempfile::tempdir().unwrap();
    let g = git_dir.path().join("repo.git");
    git(&g, &root, "git init -q");
    let git_first = git(&g, &root, "git add -A && git commit -q -m first");
    touch(&root, 1, 3);
    let git_one = git(&g, &root, "git add -A && git commit -q -m one");
    touch(&root, 100, 4);
    let git_restore = git(&g, &root, "git reset --hard -q && git clean -fdxq");

    println!("{:<32} {:>12} {:>12}", "", "wsfs", "git");
    println!(
        "{:<32} {:>12} {:>12}",
        "first snapshot / commit",
        ms(wsfs_first),
        ms(git_first)
    );
    println!(
        "{:<32} {:>12} {:>12}",
        "snapshot, 1 file changed",
        ms(wsfs_one),
        ms(git_one)
    );
    println!(
        "{:<32} {:>12} {:>12}",
        "restore, 100 files changed",
        ms(wsfs_restore),
        ms(git_restore)
    );
    println!(
        "store: wsfs objects {} MB, git objects {} MB",
        store / 1_000_000,
        bytes_under(&g.join("objects")) / 1_000_000
    );
}
