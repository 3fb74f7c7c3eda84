//! Archive and host-mount speed beside `zip -qr` / `unzip -q`.
//!
//! `cargo run --release -p wsfs-tests --example archive_bench -- [FILES] [MB]`
//! (default 10,000 files, 200 MB). Builds a tree of source-like text files,
//! mounts it into a DIRECTORY session (timed), exports that session
//! (ExportArchive through the client, to a file) and imports the archive
//! into a fresh DIRECTORY session, with `zip -qr` of the same tree and
//! `unzip -q` of the same archive into an empty directory interleaved, run
//! by run (`RUNS`, default 5). Prints min / median / max seconds beside the
//! baseline, the ratio of the medians, and the archive sizes.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
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

async fn timed_async<T>(what: &str, bytes: u64, f: impl std::future::Future<Output = T>) -> T {
    let start = Instant::now();
    let out = f.await;
    let s = start.elapsed().as_secs_f64();
    println!("{what:<44} {s:>7.2} s  {:>7.1} MB/s", mb(bytes) / s);
    out
}

/// Flushes dirty pages first, so that one step's writeback does not slow
/// the next one down.
fn settle() {
    let _ = Command::new("sync").status();
}

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap();
    assert!(status.success(), "{cmd:?}");
}

/// min / median / max in seconds.
fn spread(times: &[Duration]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (s[0], median, s[s.len() - 1])
}

fn row(what: &str, wsfs: &[Duration], baseline: &[Duration]) {
    let (a, b) = (spread(wsfs), spread(baseline));
    println!(
        "{what:<14} {:>6.2} / {:>6.2} / {:>6.2}   {:>6.2} / {:>6.2} / {:>6.2}   {:>5.2}x",
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
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let total_mb: usize = args.next().map_or(200, |a| a.parse().unwrap());
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let total = (total_mb * 1_000_000) as u64;

    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("tree");
    make_tree(&tree, files, total as usize);
    println!(
        "tree: {files} files, {:.0} MB; {runs} timed runs per figure",
        mb(total)
    );

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

    // Each round times wsfs and then the baseline on the same input, so
    // that both run under the same load.
    let archive = work.path().join("wsfs.zip");
    let zip_out = work.path().join("zip.zip");
    let unzip_dir = work.path().join("unzipped");
    let (mut export, mut zip, mut import, mut unzip) = (vec![], vec![], vec![], vec![]);
    let (mut size, mut zip_size) = (0, 0);
    for _ in 0..runs {
        let _ = std::fs::remove_file(&archive);
        settle();
        let t = Instant::now();
        size = source.export_to(&archive).await.unwrap();
        export.push(t.elapsed());

        // zip updates an existing archive: start from none.
        let _ = std::fs::remove_file(&zip_out);
        settle();
        let t = Instant::now();
        run(Command::new("zip")
            .arg("-qr")
            .arg(&zip_out)
            .arg(".")
            .current_dir(&root));
        zip.push(t.elapsed());
        zip_size = std::fs::metadata(&zip_out).unwrap().len();

        let (target, target_info) = client.create(SessionOptions::directory()).await.unwrap();
        settle();
        let t = Instant::now();
        let (n, bytes) = target.import_from(&archive).await.unwrap();
        import.push(t.elapsed());
        assert_eq!(
            (n, bytes),
            (files as u64, total / files as u64 * files as u64)
        );
        client.delete_session(&target_info.id).await.unwrap();

        let _ = std::fs::remove_dir_all(&unzip_dir);
        settle();
        let t = Instant::now();
        run(Command::new("unzip")
            .arg("-q")
            .arg(&archive)
            .arg("-d")
            .arg(&unzip_dir));
        unzip.push(t.elapsed());
    }
    println!(
        "{:<14} {:>22}   {:>22}   ratio of medians",
        "(s: min / median / max)", "wsfs", "baseline"
    );
    row("ExportArchive", &export, &zip);
    println!("{:<14} (baseline: zip -qr of the session's root)", "");
    row("ImportArchive", &import, &unzip);
    println!(
        "{:<14} (baseline: unzip -q of wsfs's archive into an empty directory)",
        ""
    );
    println!(
        "archive sizes: wsfs {:.1} MB, zip -qr {:.1} MB",
        mb(size),
        mb(zip_size)
    );

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
