//! CONTAINER sessions beside DIRECTORY ones: small calls from one caller
//! (Stat, a small Read) and a Grep over a tree of source-like files, the
//! same tree served both ways. The container runtime here runs
//! `wsfs-server --stdio` directly on the tree (no sandbox): what is
//! measured is the forwarding, one more gRPC hop over the exec's pipes.

use crate::report::{Row, Samples, Target};
use std::path::Path;
use std::time::Instant;
use wsfs_client::{Client, Filesystem, Session, SessionOptions};

/// The literal planted in every 50th file.
const NEEDLE: &str = "container_bench_needle";

/// Lines of each tree file.
const FILE_LINES: usize = 120;

fn make_tree(dir: &Path, files: usize) -> Result<(), String> {
    for i in 0..files {
        let sub = dir.join(format!("d{:02}", i % 20));
        std::fs::create_dir_all(&sub).map_err(|e| e.to_string())?;
        let mut text = String::new();
        for line in 0..FILE_LINES {
            text.push_str(&format!(
                "fn item_{i}_{line}(x: u64) -> u64 {{ x.wrapping_mul({line}) + {i} }}\n"
            ));
        }
        if i % 50 == 0 {
            text.push_str(&format!("// {NEEDLE}\n"));
        }
        std::fs::write(sub.join(format!("f{i:05}.rs")), text).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Mean microseconds per call over `ops` sequential calls.
async fn small_calls(session: &Session, ops: usize, read: bool) -> Result<f64, String> {
    let path = wsfs_client::parse_path("d00/f00000.rs").map_err(|e| e.to_string())?;
    let started = Instant::now();
    for _ in 0..ops {
        if read {
            session
                .read(&path, wsfs::LineRange::default())
                .await
                .map_err(|e| e.to_string())?;
        } else {
            session.stat(&path).await.map_err(|e| e.to_string())?;
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / ops as f64)
}

async fn grep(session: &Session, expected: usize) -> Result<f64, String> {
    let started = Instant::now();
    let (matches, _) = session
        .grep_query(NEEDLE)
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    if matches.len() != expected {
        return Err(format!(
            "grep found {} matches, not {expected}",
            matches.len()
        ));
    }
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

pub async fn run(
    work: &Path,
    inner: &Path,
    files: usize,
    ops: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree).map_err(|e| e.to_string())?;
    eprintln!("container: writing {files} files...");
    make_tree(&tree, files)?;
    let tree = std::fs::canonicalize(&tree).map_err(|e| e.to_string())?;

    let mut config = wsfs_server::ServerConfig::for_tests(work.join("data"));
    config.allow_roots = vec![tree.clone()];
    config.container_runtimes = vec![format!("direct={} --stdio {{workdir}}", inner.display())
        .parse()
        .map_err(|e: String| e)?];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let url = format!(
        "http://{}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(wsfs_server::serve(config, listener, async {
        let _ = stopped.await;
    }));

    let client = Client::connect(&url).await.map_err(|e| e.to_string())?;
    let workdir = tree.display().to_string();
    let directory = client
        .create_session(SessionOptions::directory().root(&tree))
        .await
        .map_err(|e| e.to_string())?;
    let container = client
        .create_session(SessionOptions::container("direct", "bench", &workdir))
        .await
        .map_err(|e| e.to_string())?;
    let (directory, container) = (client.session(&directory.id), client.session(&container.id));
    let expected = files.div_ceil(50);

    let mut figures: Vec<(String, &'static str, Samples, Samples)> = vec![
        (
            format!("Stat, 1 caller, {ops} calls: mean latency"),
            "µs",
            Samples::default(),
            Samples::default(),
        ),
        (
            format!("Read (120 lines), 1 caller, {ops} calls: mean latency"),
            "µs",
            Samples::default(),
            Samples::default(),
        ),
        (
            format!("Grep, literal, {files} files"),
            "ms",
            Samples::default(),
            Samples::default(),
        ),
    ];
    eprintln!("container: warm-up...");
    for session in [&directory, &container] {
        small_calls(session, ops.min(100), false).await?;
        grep(session, expected).await?;
    }
    for run in 0..runs {
        eprintln!("container: run {}/{runs}", run + 1);
        for (which, session) in [(0, &container), (1, &directory)] {
            let values = [
                small_calls(session, ops, false).await?,
                small_calls(session, ops, true).await?,
                grep(session, expected).await?,
            ];
            for (figure, value) in figures.iter_mut().zip(values) {
                if which == 0 {
                    figure.2.push(value);
                } else {
                    figure.3.push(value);
                }
            }
        }
    }
    let _ = stop.send(());
    let _ = server.await;
    notes.push(
        "container: CONTAINER session through a runtime that runs wsfs-server --stdio directly \
         on the tree (no sandbox), beside a DIRECTORY session rooted at the same tree; target \
         within 2x"
            .to_string(),
    );
    Ok(figures
        .into_iter()
        .map(|(figure, unit, ctr, dir)| {
            Row::new(format!("CONTAINER {figure}"), unit, ctr)
                .baseline("DIRECTORY", dir)
                .target(Target::AtMostTimes(2.0))
        })
        .collect())
}
