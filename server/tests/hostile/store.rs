//! Sparse files, archives, snapshots and the disk.
//!
//! Disk-filling attacks are reproduced with sparse files (no real blocks)
//! and bounded budgets; each test measures the data directory's allocated
//! size (the sum of `st_blocks`, what `du` reports), not apparent sizes.

use crate::harness::{self, Server, MIB};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::Code;
use wsfs_client::{
    parse_path, Client, Filesystem, Session, SessionInfo, SessionLimits, SessionOptions,
    TransferOptions,
};
use zip::write::SimpleFileOptions;

const GIB: u64 = 1024 * MIB;

/// Bytes allocated on disk beneath `dir` (`du`: `st_blocks` × 512), links
/// not followed.
fn allocated(dir: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            total += allocated(&entry.path());
        }
    }
    total
}

/// Every regular file beneath `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&path)),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
    out
}

/// A DIRECTORY session and its root on the server's disk.
async fn directory_session(client: &Client, options: SessionOptions) -> (Session, SessionInfo) {
    let (session, info) = client.create(options).await.expect("create the session");
    assert!(info.root_path.is_some(), "a directory session has a root");
    (session, info)
}

/// A sparse file of `len` bytes planted in a root as a container would,
/// with `data` written at `data_at`.
fn plant_sparse(root: &Path, name: &str, len: u64, data: &[u8], data_at: u64) -> PathBuf {
    let path = root.join(name);
    let file = std::fs::File::create(&path).expect("plant the sparse file");
    file.set_len(len).expect("set its length");
    file.write_all_at(data, data_at).expect("write its data");
    path
}

/// The store's objects (content and manifests) of a session.
fn stored_objects(server: &Server, session_id: &str) -> Vec<PathBuf> {
    let dir = server.data_dir().join("sessions").join(session_id);
    let mut out = files_under(&dir.join("objects"));
    out.extend(files_under(&dir.join("trees")));
    out
}

/// Every entry of a workspace with the content of its files, in order.
async fn contents(s: &Session) -> Vec<(String, Vec<u8>)> {
    let listing = s.list(&parse_path("").unwrap(), 64).await.unwrap();
    let mut out = Vec::new();
    for e in listing.entries {
        let mut data = Vec::new();
        if e.kind == wsfs_client::FileKind::File {
            s.download(e.path.as_str(), &mut data).await.unwrap();
        }
        out.push((e.path.as_str().to_string(), data));
    }
    out
}

/// Attack 1: a terabyte sparse file (no blocks) planted in a DIRECTORY
/// session's root. Snapshot is refused before it stores a byte (the
/// apparent size is over the server's default budget); Copy keeps the
/// holes, so neither grows the data directory.
#[tokio::test]
async fn a_sparse_terabyte_is_refused_by_snapshot_and_copied_with_its_holes() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = directory_session(&client, SessionOptions::directory()).await;
    let root = info.root_path.clone().unwrap();
    plant_sparse(&root, "huge.bin", 1 << 40, b"tail", (1 << 40) - 4);
    let before = allocated(&server.data_dir());

    let started = Instant::now();
    let err = client
        .snapshot(&info.id, "huge")
        .await
        .expect_err("a terabyte workspace is over the default budget");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(harness::error_reason(&err), "QUOTA_EXCEEDED", "{err}");
    assert!(err.to_string().contains("budget"), "{err}");
    let refused_in = started.elapsed();
    assert!(refused_in < Duration::from_secs(5), "{refused_in:?}");
    assert!(client.list_snapshots(&info.id).await.unwrap().is_empty());
    assert!(stored_objects(&server, &info.id).is_empty());

    let started = Instant::now();
    session
        .copy(
            &parse_path("huge.bin").unwrap(),
            &parse_path("copy/huge.bin").unwrap(),
            TransferOptions {
                create_parents: true,
                ..Default::default()
            },
        )
        .await
        .expect("a sparse file copies with its holes");
    let copied = std::fs::metadata(root.join("copy/huge.bin")).unwrap();
    assert_eq!(copied.len(), 1 << 40);
    let mut tail = [0u8; 4];
    std::fs::File::open(root.join("copy/huge.bin"))
        .unwrap()
        .read_exact_at(&mut tail, (1 << 40) - 4)
        .unwrap();
    assert_eq!(&tail, b"tail");
    let copied_in = started.elapsed();
    assert!(copied_in < Duration::from_secs(5), "{copied_in:?}");

    let grown = allocated(&server.data_dir()).saturating_sub(before);
    assert!(grown < 4 * MIB, "the data directory grew by {grown} bytes");
    let peak = server.peak_rss();
    assert!(peak < 256 * MIB, "peak {peak}");
    println!(
        "sparse 1 TiB: snapshot refused in {refused_in:?}, copied in {copied_in:?}, data directory +{grown} bytes, peak RSS {} MiB",
        peak / MIB
    );
    server.assert_serves_bystander().await;
}

/// Attack 1, within the budget: a sparse file that fits is stored with its
/// holes, and a restore puts it back with them.
#[tokio::test]
async fn a_sparse_file_within_the_budget_is_snapshotted_and_restored_with_its_holes() {
    let mut server = Server::start(&["--default-max-total-bytes", "268435456"]);
    let client = server.client().await;
    let (session, info) = directory_session(&client, SessionOptions::directory()).await;
    let root = info.root_path.clone().unwrap();
    let len = 128 * MIB;
    plant_sparse(&root, "sparse.bin", len, b"middle", 64 * MIB);
    let before = allocated(&server.data_dir());

    let snap = client.snapshot(&info.id, "sparse").await.unwrap();
    assert_eq!((snap.file_count, snap.total_bytes), (1, len));
    std::fs::remove_file(root.join("sparse.bin")).unwrap();
    client.restore(&info.id, &snap.id).await.unwrap();

    let restored = std::fs::File::open(root.join("sparse.bin")).unwrap();
    assert_eq!(restored.metadata().unwrap().len(), len);
    let mut middle = [0u8; 6];
    restored.read_exact_at(&mut middle, 64 * MIB).unwrap();
    assert_eq!(&middle, b"middle");
    let grown = allocated(&server.data_dir()).saturating_sub(before);
    assert!(grown < 4 * MIB, "the data directory grew by {grown} bytes");
    println!("sparse 128 MiB: snapshot + restore, data directory +{grown} bytes");
    drop(session);
    server.assert_serves_bystander().await;
}

/// Attack 1, the long run: a Snapshot whose caller goes away midway stops
/// (the next snapshot gets the store at once) and leaves no object, no
/// temporary file and no snapshot behind.
#[tokio::test]
async fn an_abandoned_snapshot_stops_and_leaves_nothing_in_the_store() {
    let mut server = Server::start(&["--default-max-total-bytes", "68719476736"]);
    let client = server.client().await;
    let (_session, info) = directory_session(&client, SessionOptions::directory()).await;
    let root = info.root_path.clone().unwrap();
    // Hashing 32 GiB of zeros takes minutes: the snapshot is surely
    // midway when its caller gives up.
    plant_sparse(&root, "big.bin", 32 * GIB, b"x", 0);
    let abandoned = tokio::time::timeout(
        Duration::from_millis(500),
        client.snapshot(&info.id, "abandoned"),
    )
    .await;
    assert!(abandoned.is_err(), "the snapshot finished: {abandoned:?}");

    std::fs::remove_file(root.join("big.bin")).unwrap();
    std::fs::write(root.join("small.txt"), b"small\n").unwrap();
    let started = Instant::now();
    let next = client.snapshot(&info.id, "next").await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "the abandoned snapshot kept the store for {waited:?}"
    );
    println!("abandoned snapshot of 32 GiB (sparse): the next snapshot done in {waited:?}");
    assert_eq!((next.file_count, next.total_bytes), (1, 6));
    let snapshots = client.list_snapshots(&info.id).await.unwrap();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    // What is left: the new snapshot's one content and one manifest.
    let session_dir = server.data_dir().join("sessions").join(&info.id);
    let objects = stored_objects(&server, &info.id);
    assert_eq!(objects.len(), 2, "{objects:?}");
    for object in &objects {
        let name = object.strip_prefix(&session_dir).unwrap();
        assert!(
            !name.starts_with("objects/tmp") && !name.starts_with("trees/tmp"),
            "{name:?}"
        );
    }
    server.assert_serves_bystander().await;
}

/// CPU time (user + system) the process `pid` has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server's stat");
    // Fields after the command name, which ends with the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Attack 1, the long run: exporting a workspace with a terabyte sparse
/// file would read and deflate zeros for hours; when the client goes away
/// the export stops (the server's CPU goes quiet).
#[tokio::test]
async fn an_abandoned_export_of_a_sparse_terabyte_stops() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = directory_session(&client, SessionOptions::directory()).await;
    plant_sparse(
        &info.root_path.clone().unwrap(),
        "huge.bin",
        1 << 40,
        b"x",
        0,
    );
    let start = cpu_time(server.pid());
    let abandoned = tokio::time::timeout(
        Duration::from_secs(1),
        session.export_to_writer(tokio::io::sink(), None),
    )
    .await;
    assert!(abandoned.is_err(), "the export finished: {abandoned:?}");
    // The measure sees work: the export kept the server busy meanwhile.
    let busy = cpu_time(server.pid()) - start;
    assert!(
        busy > Duration::from_millis(100),
        "{busy:?} while exporting"
    );
    drop(session);
    drop(client);
    // The producer notices at its next send.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_time(server.pid());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_time(server.pid()) - before;
    assert!(
        used < Duration::from_millis(200),
        "the server used {used:?} of CPU in the second after the export was abandoned"
    );
    println!("abandoned export of 1 TiB (sparse): {busy:?} CPU in its second, {used:?} in the second after");
    server.assert_serves_bystander().await;
}

/// A ZIP archive of `count` entries of `entry_bytes` zeros each (deflated
/// once, then copied raw, so the test stays fast), and a manifest.
fn many_entry_bomb(count: usize, entry_bytes: usize) -> Vec<u8> {
    let deflated =
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let mut one = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    one.start_file("files/0", deflated).unwrap();
    one.write_all(&vec![0u8; entry_bytes]).unwrap();
    let one = one.finish().unwrap().into_inner();
    let mut source = zip::ZipArchive::new(std::io::Cursor::new(one)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..count {
        let entry = source.by_index_raw(0).unwrap();
        out.raw_copy_file_rename(entry, format!("files/d{}/{i}", i % 64))
            .unwrap();
    }
    finish_with_manifest(out, count as u64, (count * entry_bytes) as u64)
}

/// Ends an archive with a manifest counting `files` and `bytes`.
fn finish_with_manifest(
    mut out: zip::ZipWriter<std::io::Cursor<Vec<u8>>>,
    files: u64,
    bytes: u64,
) -> Vec<u8> {
    out.start_file("manifest.json", SimpleFileOptions::default())
        .unwrap();
    write!(
        out,
        r#"{{"version": "1", "created_at": "2026-01-01T00:00:00Z", "file_count": {files}, "total_bytes": {bytes}}}"#
    )
    .unwrap();
    out.finish().unwrap().into_inner()
}

/// Attack 2: 1,200 entries of 1 MiB of zeros, each far under any
/// per-entry rule: a 1.3 MB upload that expands to 1.2 GiB. A MEMORY
/// session without a byte limit is held to the server's default budget,
/// checked from the central directory before a byte is inflated.
#[tokio::test]
async fn a_many_entry_zip_bomb_is_refused_by_the_default_budget_before_inflating() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, _) = client.create(SessionOptions::memory()).await.unwrap();
    session.write_str("kept.txt", "kept\n").await.unwrap();
    let before = contents(&session).await;
    let bomb = many_entry_bomb(1200, MIB as usize);
    assert!(bomb.len() < 2 * MIB as usize, "{} bytes", bomb.len());
    let path = server.scratch().join("bomb.zip");
    std::fs::write(&path, &bomb).unwrap();
    let rss_before = server.rss();
    let disk_before = allocated(&server.data_dir());

    let err = session
        .import_from(&path)
        .await
        .expect_err("the bomb is over the default budget");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(harness::error_reason(&err), "QUOTA_EXCEEDED", "{err}");
    assert_eq!(contents(&session).await, before);
    // The spooled upload is gone with the refusal.
    let grown = allocated(&server.data_dir()).saturating_sub(disk_before);
    assert!(grown < MIB, "the data directory grew by {grown} bytes");
    let peak = server.peak_rss();
    assert!(
        peak < rss_before + 64 * MIB,
        "peak {peak} bytes, {rss_before} before"
    );
    println!(
        "zip bomb of {} bytes declaring 1200 MiB: refused; RSS {} MiB before, peak {} MiB",
        bomb.len(),
        rss_before / MIB,
        peak / MIB
    );
    server.assert_serves_bystander().await;
}

/// Attack 2, the other side: a file of 8 MiB that compresses more than
/// 1000:1 (zeros) is ordinary content under a budget, and round-trips.
#[tokio::test]
async fn a_highly_compressible_file_round_trips_through_an_archive() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, _) = client.create(SessionOptions::memory()).await.unwrap();
    session
        .upload(
            "zeros.bin",
            std::io::Cursor::new(vec![0u8; 8 * MIB as usize]),
            Default::default(),
        )
        .await
        .unwrap();
    let archive = server.scratch().join("zeros.zip");
    session.export_to(&archive).await.unwrap();
    assert!(std::fs::metadata(&archive).unwrap().len() < 64 * 1024);
    let (target, _) = client.create(SessionOptions::directory()).await.unwrap();
    assert_eq!(target.import_from(&archive).await.unwrap(), (1, 8 * MIB));
    assert_eq!(contents(&target).await, contents(&session).await);
    server.assert_serves_bystander().await;
}

/// Builds an archive of `entries` (name, content; a trailing `/` makes a
/// directory) with a manifest that counts them right.
fn archive_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let (mut files, mut bytes) = (0u64, 0u64);
    for (name, data) in entries {
        if name.ends_with('/') {
            out.add_directory(*name, SimpleFileOptions::default())
                .unwrap();
        } else {
            out.start_file(*name, SimpleFileOptions::default()).unwrap();
            out.write_all(data).unwrap();
            files += 1;
            bytes += data.len() as u64;
        }
    }
    finish_with_manifest(out, files, bytes)
}

/// Attack 3 (issue 11): archives whose names or sizes the target would
/// refuse only once the workspace was emptied are refused first, with the
/// workspace byte for byte as it was, on both backends.
#[tokio::test]
async fn an_archive_the_backend_would_refuse_leaves_the_workspace_untouched() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    // 80 characters of 4 bytes each: within the character limit, over
    // 255 bytes.
    let wide = format!("files/{}", "\u{1F600}".repeat(80));
    let big = vec![7u8; 2048];
    let cases: Vec<(&str, Vec<u8>, Code, &str)> = vec![
        (
            "a reserved staging name",
            archive_of(&[("files/ok.txt", b"ok"), ("files/.wsfs-tmp-x", b"x")]),
            Code::InvalidArgument,
            "INVALID_PATH",
        ),
        (
            "a reserved name as a directory",
            archive_of(&[("files/.wsfs-tmp-d/", b""), ("files/a.txt", b"a")]),
            Code::InvalidArgument,
            "INVALID_PATH",
        ),
        (
            "a segment over 255 bytes",
            archive_of(&[("files/ok.txt", b"ok"), (wide.as_str(), b"x")]),
            Code::InvalidArgument,
            "INVALID_PATH",
        ),
        (
            "a file over the per-write limit",
            archive_of(&[("files/big.bin", &big)]),
            Code::InvalidArgument,
            "TOO_LARGE",
        ),
        (
            "more bytes than the session holds",
            archive_of(&[("files/a.bin", &big[..1000]), ("files/b.bin", &big[..1000])]),
            Code::ResourceExhausted,
            "QUOTA_EXCEEDED",
        ),
    ];
    let limits = SessionLimits {
        max_write_bytes: 1024,
        max_total_bytes: 1500,
        ..Default::default()
    };
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let (session, _) = client.create(options.limits(limits)).await.unwrap();
        session
            .write_str("src/main.rs", "fn main() {}\n")
            .await
            .unwrap();
        session.write_str("notes.txt", "notes\n").await.unwrap();
        let before = contents(&session).await;
        for (what, archive, code, reason) in &cases {
            let path = server.scratch().join("refused.zip");
            std::fs::write(&path, archive).unwrap();
            let err = session
                .import_from(&path)
                .await
                .expect_err(&format!("{what} is refused"));
            assert_eq!(err.code(), *code, "{what}: {err}");
            assert_eq!(harness::error_reason(&err), *reason, "{what}: {err}");
            assert_eq!(
                contents(&session).await,
                before,
                "{what} changed the workspace"
            );
        }
    }
    server.assert_serves_bystander().await;
}

/// Attack 3: a MEMORY session refuses the names a DIRECTORY session
/// reserves, so what one backend exports the other imports.
#[tokio::test]
async fn a_memory_session_refuses_the_reserved_names_too() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (memory, _) = client.create(SessionOptions::memory()).await.unwrap();
    let err = memory
        .write_str("dir/.wsfs-tmp-1234", "x")
        .await
        .expect_err("a reserved name");
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert_eq!(harness::error_reason(&err), "INVALID_PATH", "{err}");
    memory.write_str("dir/a.txt", "a\n").await.unwrap();
    let err = memory
        .copy(
            &parse_path("dir").unwrap(),
            &parse_path(".wsfs-tmp-copy").unwrap(),
            TransferOptions::default(),
        )
        .await
        .expect_err("a reserved destination");
    assert_eq!(harness::error_reason(&err), "INVALID_PATH", "{err}");

    let archive = server.scratch().join("memory.zip");
    memory.export_to(&archive).await.unwrap();
    let (directory, _) = client.create(SessionOptions::directory()).await.unwrap();
    directory.import_from(&archive).await.unwrap();
    assert_eq!(contents(&directory).await, contents(&memory).await);
    server.assert_serves_bystander().await;
}

/// Writes `len` bytes no two blocks of which are alike (nothing dedups,
/// nothing compresses) to `path`, as a program in a container would.
fn plant_random(path: &Path, len: usize, seed: u64) {
    let mut state = seed | 1;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut word = [0u8; 8];
    for _ in 0..len / 8 {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        word.copy_from_slice(&state.to_le_bytes());
        out.write_all(&word).unwrap();
    }
    out.flush().unwrap();
}

/// The stated memory bounds of the object-store paths, on the real binary
/// under `RLIMIT_AS`: a DIRECTORY session holding one 128 MiB file, 16 of
/// 8 MiB (as many as a recovery fetches at once) and 2,000 small ones.
/// Its Snapshot upload (16 small contents in flight, large ones in two
/// 8 MiB parts), a fork of it (4 threads copying in the kernel), and its
/// RecoverSession on a second server (16 contents streamed to disk at
/// once) each keep the server's peak resident memory under 96 MiB: an
/// implementation holding whole contents would need 256 MiB. Each copy
/// comes back byte for byte.
#[tokio::test]
async fn snapshot_upload_fork_and_recovery_stream_within_their_memory_bounds() {
    const BOUND: u64 = 96 * MIB;
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}", bucket.path().display());
    let args = |replica: &'static str| {
        vec![
            "--object-store".to_string(),
            url.clone(),
            "--replica-id".to_string(),
            replica.to_string(),
            "--lease-ttl".to_string(),
            "3s".to_string(),
        ]
    };
    let start = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_limited(harness::DEFAULT_ADDRESS_SPACE, &args, &[])
    };
    let first = start(args("r1"));
    let c1 = first.client().await;
    let (session, info) = directory_session(&c1, SessionOptions::directory()).await;
    let root = info.root_path.clone().unwrap();
    plant_random(&root.join("large.bin"), 128 * MIB as usize, 1);
    std::fs::create_dir_all(root.join("medium")).unwrap();
    for i in 0..16u64 {
        plant_random(
            &root.join(format!("medium/{i:02}.bin")),
            8 * MIB as usize,
            i + 2,
        );
    }
    for i in 0..2_000 {
        let dir = root.join(format!("small/{:02}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{i}.txt")), format!("file {i}\n")).unwrap();
    }
    let before = first.peak_rss();
    let snapshot = c1.snapshot(&info.id, "big").await.unwrap();
    let after_upload = first.peak_rss();
    assert!(
        after_upload < BOUND,
        "Snapshot's upload: peak RSS {} MiB (was {} MiB before)",
        after_upload / MIB,
        before / MIB
    );
    drop(session);
    let (_, forked) = c1
        .create(SessionOptions::directory().from_snapshot(info.id.clone(), snapshot.id.clone()))
        .await
        .unwrap();
    let after_fork = first.peak_rss();
    assert!(
        after_fork < BOUND,
        "fork: peak RSS {} MiB",
        after_fork / MIB
    );
    assert_same_tree(&root, &forked.root_path.unwrap());

    let second = start(args("r2"));
    let c2 = second.client().await;
    let before = second.peak_rss();
    c2.recover_session(&info.id, Some(&snapshot.id), true)
        .await
        .unwrap();
    let after_recovery = second.peak_rss();
    assert!(
        after_recovery < BOUND,
        "RecoverSession: peak RSS {} MiB (was {} MiB before)",
        after_recovery / MIB,
        before / MIB
    );
    eprintln!(
        "peak RSS: {} MiB after the upload, {} MiB after the fork, {} MiB after the recovery",
        after_upload / MIB,
        after_fork / MIB,
        after_recovery / MIB
    );
    let recovered = second
        .data_dir()
        .join("sessions")
        .join(&info.id)
        .join("root");
    assert_same_tree(&root, &recovered);
    let mut second = second;
    second.assert_serves_bystander().await;
}

/// `copy` holds exactly the files and directories of `original`, byte for
/// byte.
fn assert_same_tree(original: &Path, copy: &Path) {
    let relative = |dir: &Path| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = files_under(dir)
            .into_iter()
            .map(|f| f.strip_prefix(dir).unwrap().to_path_buf())
            .collect();
        files.sort();
        files
    };
    let files = relative(original);
    assert_eq!(relative(copy), files, "the same files");
    assert!(files.len() > 2_000);
    for file in files {
        let (a, b) = (original.join(&file), copy.join(&file));
        let (mut a, mut b) = (
            std::fs::File::open(a).unwrap(),
            std::fs::File::open(b).unwrap(),
        );
        let (mut x, mut y) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
        loop {
            let n = std::io::Read::read(&mut a, &mut x).unwrap();
            let m = std::io::Read::read_exact(&mut b, &mut y[..n])
                .map(|()| n)
                .unwrap();
            assert_eq!(x[..n], y[..m], "{} differs", file.display());
            if n == 0 {
                assert_eq!(
                    std::io::Read::read(&mut b, &mut y).unwrap(),
                    0,
                    "{} is longer",
                    file.display()
                );
                break;
            }
        }
    }
}

/// A patch's bytes as 1 MiB chunks of `fill` from `offset`, made as they
/// are sent: the test holds a chunk at a time, as the mount does.
fn patch_of(offset: u64, len: u64, fill: u8) -> wsfs_client::PatchChunks {
    use futures::StreamExt;
    let pieces = (0..len.div_ceil(MIB)).map(move |i| {
        let at = i * MIB;
        Ok(wsfs_client::PatchChunk {
            offset: offset + at,
            data: vec![fill; MIB.min(len - at) as usize].into(),
        })
    });
    futures::stream::iter(pieces).boxed()
}

/// A file rewritten whole by a patch (as a mount commits a file written
/// from start to end) and then patched in its middle, larger than the
/// server could hold in memory at once: both are staged and applied on
/// disk, the peak memory stays small, and the bytes are right.
#[tokio::test]
async fn whole_and_partial_patches_of_a_large_file_stay_on_disk() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let len = 384 * MIB;
    let (session, info) =
        directory_session(&client, SessionOptions::directory().max_write_bytes(len)).await;
    let root = info.root_path.clone().unwrap();
    let path = parse_path("big.bin").unwrap();
    session.write_str("big.bin", "old").await.unwrap();
    let whole = wsfs_client::PatchOptions {
        truncate_to: Some(0),
        ..Default::default()
    };

    let rewritten = session
        .patch_bytes(&path, whole, patch_of(0, len, b'w'))
        .await
        .expect("a whole rewrite");
    let middle = session
        .patch_bytes(&path, Default::default(), patch_of(len / 2, 4, b'm'))
        .await
        .expect("a patch of the middle");

    assert_eq!((rewritten.size, middle.size), (len, len));
    let file = std::fs::File::open(root.join("big.bin")).unwrap();
    assert_eq!(file.metadata().unwrap().len(), len);
    for (at, want) in [(0, *b"wwww"), (len / 2 - 2, *b"wwmm"), (len - 4, *b"wwww")] {
        let mut got = [0u8; 4];
        file.read_exact_at(&mut got, at).unwrap();
        assert_eq!(got, want, "at {at}");
    }
    let peak = server.peak_rss();
    assert!(peak < 256 * MIB, "peak {peak}");
    println!("patches of {} MiB: peak RSS {} MiB", len / MIB, peak / MIB);
    server.assert_serves_bystander().await;
}
