//! Archive and host-mount speed beside `zip -qr` / `unzip -q`.
//!
//! `cargo run --release -p wsfs-tests --example archive_bench -- [FILES] [MB]`
//! (default 10,000 files, 200 MB). Builds a tree of source-like text files,
//! mounts it into a DIRECTORY session (timed), exports that session
//! (ExportArchive through the client, to a file) and imports the archive
//! into a fresh DIRECTORY session, then runs `zip -qr` and `unzip -q` on
//! the same tree and archive. Prints seconds, MB/s and archive sizes.

use std::path::Path;
use std::process::Command;
use std::time::Instant;
use wsfs_client::{Client, HostMount, SessionOptions};
use wsfs_tests::harness::TestServer;

/// Text that compresses like source code (about 3-4:1 with deflate).
fn file_content(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "fn",
        "let",
        "mut",
        "self",
        "impl",
        "pub",
        "struct",
        "return",
        "match",
        "Some",
        "None",
        "Ok(",
        "Err(",
        "=>",
        "{",
        "}",
        "(",
        ")",
        ";",
        "::",
        "&",
        "async",
        "await",
        "String",
        "Vec<u8>",
        "Result",
        "path",
        "bytes",
        "session",
        "workspace",
        "len",
        "0",
        "1",
        "64",
    ];
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = WORDS[(x % WORDS.len() as u64) as usize];
        out.extend_from_slice(w.as_bytes());
        out.push(if x.is_multiple_of(11) { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

fn make_tree(root: &Path, files: usize, total: usize) {
    let per = total / files;
    for i in 0..files {
        let dir = root.join(format!("d{:02}/s{:02}", i % 50, (i / 50) % 20));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.rs")), file_content(i as u64, per)).unwrap();
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn timed<T>(what: &str, bytes: u64, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let s = start.elapsed().as_secs_f64();
    println!("{what:<44} {s:>7.2} s  {:>7.1} MB/s", mb(bytes) / s);
    out
}

async fn timed_async<T>(what: &str, bytes: u64, f: impl std::future::Future<Output = T>) -> T {
    let start = Instant::now();
    let out = f.await;
    let s = start.elapsed().as_secs_f64();
    println!("{what:<44} {s:>7.2} s  {:>7.1} MB/s", mb(bytes) / s);
    out
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let total_mb: usize = args.next().map_or(200, |a| a.parse().unwrap());
    let total = (total_mb * 1_000_000) as u64;

    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("tree");
    make_tree(&tree, files, total as usize);
    println!("tree: {files} files, {:.0} MB", mb(total));

    let tree_for_server = work.path().to_path_buf();
    let server = TestServer::start_with(|c| c.allow_roots = vec![tree_for_server]).await;
    let client = Client::connect(&server.url()).await.unwrap();

    let (source, info) = timed_async(
        "host mount at CreateSession (DIRECTORY)",
        total,
        client.create(SessionOptions::directory().mount(HostMount::new(&tree, ""))),
    )
    .await
    .unwrap();
    let root = info.root_path.unwrap();

    let archive = work.path().join("wsfs.zip");
    let size = timed_async("ExportArchive (DIRECTORY, to a file)", total, async {
        source.export_to(&archive).await.unwrap()
    })
    .await;
    let zip_out = work.path().join("zip.zip");
    timed("zip -qr (same tree)", total, || {
        let ok = Command::new("zip")
            .arg("-qr")
            .arg(&zip_out)
            .arg(".")
            .current_dir(&root)
            .status()
            .unwrap();
        assert!(ok.success());
    });
    let zip_size = std::fs::metadata(&zip_out).unwrap().len();
    println!(
        "archive sizes: wsfs {:.1} MB, zip -qr {:.1} MB",
        mb(size),
        mb(zip_size)
    );

    let (target, _) = client.create(SessionOptions::directory()).await.unwrap();
    let (n, bytes) = timed_async("ImportArchive (into DIRECTORY)", total, async {
        target.import_from(&archive).await.unwrap()
    })
    .await;
    assert_eq!(
        (n, bytes),
        (files as u64, total / files as u64 * files as u64)
    );
    let unzip_dir = work.path().join("unzipped");
    timed("unzip -q (same archive)", total, || {
        let ok = Command::new("unzip")
            .arg("-q")
            .arg(&archive)
            .arg("-d")
            .arg(&unzip_dir)
            .status()
            .unwrap();
        assert!(ok.success());
    });

    let (memory, _) = client.create(SessionOptions::memory()).await.unwrap();
    timed_async("ImportArchive (into MEMORY)", total, async {
        memory.import_from(&archive).await.unwrap()
    })
    .await;
    let mem_archive = work.path().join("mem.zip");
    timed_async("ExportArchive (MEMORY, to a file)", total, async {
        memory.export_to(&mem_archive).await.unwrap()
    })
    .await;
}
