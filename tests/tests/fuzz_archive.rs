//! Hostile archives for ImportArchive: valid archives of random trees, then
//! bit flips, truncations and splices of them; random `manifest.json`
//! contents; entries named with `..`, absolute paths, backslashes, NUL and
//! over-long segments; entries that declare far more bytes than they hold;
//! random bytes, bare or behind a ZIP end record. Each goes through the
//! importer (`archive::import::check`, then `import_checked`) into a
//! workspace on the memory and the directory backend that already holds
//! files. Every archive is either refused cleanly (INVALID_ARGUMENT or
//! RESOURCE_EXHAUSTED with a reason and a message; the workspace is as it
//! was) or imported, and then the workspace is exactly what the archive
//! declares: its entries as the ZIP reader reads them, and the manifest's
//! counts. Nothing appears beside the directory workspace's root, nothing
//! is left in its staging directory, nothing panics, and the largest single
//! allocation made while checking stays far below the sizes the archive
//! declares. A smaller run sends the same archives over gRPC.
//!
//! `PROPTEST_CASES` sets the number of archives (default 256 in-process,
//! 24 over gRPC).

use bytes::Bytes;
use futures::TryStreamExt;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use tonic::Code;
use wsfs::{ByteRange, CanonicalPath, Error, FileKind, Filesystem, PathLimits, WriteOptions};
use wsfs_server::archive::import::{check, ArchiveTarget};
use wsfs_server::backend::Backend;
use wsfs_server::directory::DirectoryBackend;
use wsfs_server::memory::MemoryBackend;
use wsfs_server::{SessionLimits, Workspace};
use zip::write::SimpleFileOptions;

// ---------------------------------------------------------------------------
// The largest single allocation a thread makes, to bound what an archive's
// declared sizes can make the importer allocate.

struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|m| {
        if m.get() < size {
            m.set(size)
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping touches only a const-initialised thread-local `Cell`, which
// never allocates.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Runs `f` and returns its result with the largest single allocation this
/// thread made meanwhile.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    let out = f();
    (out, LARGEST.with(|m| m.get()))
}

/// The most one allocation may take while an archive is checked: the
/// importer's buffers and the ZIP reader's tables, nowhere near the
/// hundreds of MiB the lying archives declare.
const MAX_CHECK_ALLOCATION: usize = 1024 * 1024;

/// Declared sizes of the lying entries: under [`limits`]'s per-write limit,
/// so that only the real data can refuse them.
const LIE_BYTES: u64 = 512 * 1024 * 1024;

fn limits() -> SessionLimits {
    SessionLimits {
        max_write_bytes: 1024 * 1024 * 1024,
        ..SessionLimits::default()
    }
}

// ---------------------------------------------------------------------------
// Archives

/// A tree to archive: path -> `Some(bytes)` for a file, `None` for a
/// directory.
type Tree = BTreeMap<String, Option<Vec<u8>>>;

fn tree() -> impl Strategy<Value = Tree> {
    let path = prop::collection::vec(prop::sample::select(&["a", "b", "c.txt"][..]), 1..=3)
        .prop_map(|s| s.join("/"));
    let entry = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Some),
        1 => Just(None),
    ];
    prop::collection::btree_map(path, entry, 0..6).prop_map(|mut t| {
        // A file cannot also be a directory.
        let keys: Vec<String> = t.keys().cloned().collect();
        for k in &keys {
            let nested = keys.iter().any(|o| o.starts_with(&format!("{k}/")));
            if nested {
                t.insert(k.clone(), None);
            }
        }
        t
    })
}

fn options(deflate: bool) -> SimpleFileOptions {
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    SimpleFileOptions::default().compression_method(method)
}

fn manifest_for(files: u64, bytes: u64) -> String {
    format!(
        r#"{{"version": "1", "created_at": "2026-01-01T00:00:00Z", "file_count": {files}, "total_bytes": {bytes}}}"#
    )
}

/// The archive of `tree` as ExportArchive lays it out, with `manifest`
/// (or the right one).
fn archive_of(tree: &Tree, deflate: bool, manifest: Option<&[u8]>) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let (mut files, mut bytes) = (0, 0);
    for (path, entry) in tree {
        match entry {
            None => zip
                .add_directory(format!("files/{path}/"), options(deflate))
                .unwrap(),
            Some(data) => {
                zip.start_file(format!("files/{path}"), options(deflate))
                    .unwrap();
                zip.write_all(data).unwrap();
                files += 1;
                bytes += data.len() as u64;
            }
        }
    }
    let right = manifest_for(files, bytes);
    zip.start_file("manifest.json", options(deflate)).unwrap();
    zip.write_all(manifest.unwrap_or(right.as_bytes())).unwrap();
    zip.finish().unwrap().into_inner()
}

/// Entry names that try to leave `files/` or the workspace.
const HOSTILE_NAMES: &[&str] = &[
    "files/../escape",
    "files/a/../../escape",
    "../escape",
    "/etc/passwd",
    "files//abs",
    "\\files\\escape",
    "files\\..\\..\\escape",
    "files/a\\..\\..\\b",
    "files/C:\\evil",
    "files/a\0b",
    "files/./a",
    "files/a/./b/",
    "files/",
    "files",
    "files/..",
    "manifest.json/x",
    "other/a",
    "files/é/日本",
];

fn hostile_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(HOSTILE_NAMES).prop_map(str::to_string),
        1 => (1..40usize).prop_map(|n| format!("files/{}", "d/".repeat(n))),
        1 => (70..300usize).prop_map(|n| format!("files/{}", "x".repeat(n))),
        1 => any::<String>().prop_map(|s| format!("files/{s}")),
    ]
}

/// An archive of a random tree plus entries with hostile names, its
/// manifest counting them in.
fn hostile_archive() -> impl Strategy<Value = Vec<u8>> {
    (
        tree(),
        prop::collection::vec((hostile_name(), any::<bool>()), 1..4),
    )
        .prop_map(|(tree, names)| {
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let (mut files, mut bytes) = (0, 0);
            for (path, entry) in &tree {
                if let Some(data) = entry {
                    zip.start_file(format!("files/{path}"), options(false))
                        .unwrap();
                    zip.write_all(data).unwrap();
                    files += 1;
                    bytes += data.len() as u64;
                }
            }
            for (name, dir) in names {
                let added = if dir {
                    zip.add_directory(name, options(false))
                } else {
                    zip.start_file(name, options(false))
                        .and_then(|()| zip.write_all(b"evil").map_err(Into::into))
                };
                if added.is_ok() && !dir {
                    files += 1;
                    bytes += 4;
                }
            }
            zip.start_file("manifest.json", options(false)).unwrap();
            zip.write_all(manifest_for(files, bytes).as_bytes())
                .unwrap();
            zip.finish().unwrap().into_inner()
        })
}

fn manifest_json() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..100),
        any::<String>().prop_map(String::into_bytes),
        (any::<String>(), any::<u64>(), any::<u64>()).prop_map(|(version, files, bytes)| {
            format!(
                r#"{{"version": {version:?}, "created_at": "x", "file_count": {files}, "total_bytes": {bytes}}}"#
            )
            .into_bytes()
        }),
        Just(b"{}".to_vec()),
        Just(b"null".to_vec()),
        Just(br#"{"version": "1", "file_count": -1, "total_bytes": 1e999}"#.to_vec()),
        Just(format!("[{}]", "[".repeat(10_000)).into_bytes()),
    ]
}

/// Offsets of every record with `signature` in `zip`.
fn records(zip: &[u8], signature: &[u8; 4]) -> Vec<usize> {
    zip.windows(4)
        .enumerate()
        .filter(|(_, w)| w == signature)
        .map(|(i, _)| i)
        .collect()
}

/// Makes every stored file entry of `zip` declare `declared` bytes (and as
/// many compressed, with `compressed_too`, so the ratio check passes) while
/// holding its few real ones.
fn lie_about_sizes(mut zip: Vec<u8>, declared: u64, compressed_too: bool) -> Vec<u8> {
    let size = (declared.min(u32::MAX as u64 - 1) as u32).to_le_bytes();
    let u16_at = |zip: &[u8], at: usize| u16::from_le_bytes([zip[at], zip[at + 1]]) as usize;
    let is_file = |zip: &[u8], name_at: usize, len: usize| {
        let name = &zip[name_at..(name_at + len).min(zip.len())];
        name.starts_with(b"files/") && !name.ends_with(b"/")
    };
    // Local headers: sizes at 18 and 22, name length at 26, name at 30.
    for at in records(&zip, b"PK\x03\x04") {
        if at + 30 <= zip.len() && is_file(&zip, at + 30, u16_at(&zip, at + 26)) {
            if compressed_too {
                zip[at + 18..at + 22].copy_from_slice(&size);
            }
            zip[at + 22..at + 26].copy_from_slice(&size);
        }
    }
    // Central headers: sizes at 20 and 24, name length at 28, name at 46.
    for at in records(&zip, b"PK\x01\x02") {
        if at + 46 <= zip.len() && is_file(&zip, at + 46, u16_at(&zip, at + 28)) {
            if compressed_too {
                zip[at + 20..at + 24].copy_from_slice(&size);
            }
            zip[at + 24..at + 28].copy_from_slice(&size);
        }
    }
    zip
}

/// An archive of `tree` whose files each declare [`LIE_BYTES`], with a
/// manifest that agrees with the lie, so only the data can give it away.
fn lying_archive(tree: &Tree, compressed_too: bool) -> Vec<u8> {
    let files = tree.values().flatten().count() as u64;
    let manifest = manifest_for(files, files * LIE_BYTES);
    let honest = archive_of(tree, false, Some(manifest.as_bytes()));
    lie_about_sizes(honest, LIE_BYTES, compressed_too)
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Flip(Vec<(usize, u8)>),
    Truncate(usize),
    Splice { at: usize, from: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => Just(Mutation::None),
        4 => prop::collection::vec((any::<usize>(), 0..8u8), 1..8).prop_map(Mutation::Flip),
        2 => any::<usize>().prop_map(Mutation::Truncate),
        2 => (any::<usize>(), any::<usize>(), 1..200usize)
            .prop_map(|(at, from, len)| Mutation::Splice { at, from, len }),
    ]
}

fn mutate(mut zip: Vec<u8>, other: &[u8], m: &Mutation) -> Vec<u8> {
    if zip.is_empty() {
        return zip;
    }
    match m {
        Mutation::None => {}
        Mutation::Flip(flips) => {
            for (at, bit) in flips {
                let i = at % zip.len();
                zip[i] ^= 1 << bit;
            }
        }
        Mutation::Truncate(at) => zip.truncate(at % zip.len()),
        Mutation::Splice { at, from, len } => {
            let from = from % other.len();
            let piece = other[from..(from + len).min(other.len())].to_vec();
            let at = at % zip.len();
            zip.splice(at..at, piece);
        }
    }
    zip
}

/// What an archive may be, and a name for the report.
fn archive() -> impl Strategy<Value = (&'static str, Vec<u8>)> {
    prop_oneof![
        3 => (tree(), any::<bool>(), tree(), mutation()).prop_map(|(t, deflate, other, m)| {
            let base = archive_of(&t, deflate, None);
            let other = archive_of(&other, !deflate, None);
            ("mutated", mutate(base, &other, &m))
        }),
        1 => (tree(), manifest_json())
            .prop_map(|(t, json)| ("manifest", archive_of(&t, false, Some(&json)))),
        2 => hostile_archive().prop_map(|a| ("hostile names", a)),
        1 => (tree(), any::<bool>()).prop_map(|(t, compressed_too)| {
            ("lying sizes", lying_archive(&t, compressed_too))
        }),
        1 => prop::collection::vec(any::<u8>(), 0..2000).prop_map(|b| ("random bytes", b)),
        1 => (prop::collection::vec(any::<u8>(), 0..200), any::<[u8; 18]>())
            .prop_map(|(mut b, end)| {
                // A ZIP end record with random counts, sizes and offsets.
                b.extend_from_slice(b"PK\x05\x06");
                b.extend_from_slice(&end);
                ("random end record", b)
            }),
    ]
}

// ---------------------------------------------------------------------------
// What the archive declares, read independently with the ZIP reader.

/// The tree an accepted archive must leave: every entry under `files/` and
/// the directories above them; and the manifest's (file_count, total_bytes).
fn declared(zip: &[u8]) -> Result<(Tree, (u64, u64)), String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map_err(|e| format!("the importer accepted what the reader cannot open: {e}"))?;
    let mut tree = Tree::new();
    let mut counts = None;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| e.to_string())?;
        let name = String::from_utf8(entry.name_raw().to_vec()).map_err(|e| e.to_string())?;
        // A directory entry's data means nothing, so the importer does not
        // read it (nor its checksum), and neither does this.
        let mut data = Vec::new();
        if !entry.is_dir() {
            entry.read_to_end(&mut data).map_err(|e| e.to_string())?;
        }
        if name == "manifest.json" {
            let json: serde_json::Value =
                serde_json::from_slice(&data).map_err(|e| e.to_string())?;
            counts = Some((
                json["file_count"].as_u64().unwrap_or(u64::MAX),
                json["total_bytes"].as_u64().unwrap_or(u64::MAX),
            ));
            continue;
        }
        let rest = name
            .strip_prefix("files/")
            .ok_or_else(|| format!("the importer accepted entry '{name}'"))?;
        let path = CanonicalPath::parse(rest, &PathLimits::default())
            .map_err(|e| format!("the importer accepted entry '{name}': {e}"))?;
        if path.is_root() {
            continue;
        }
        let mut parent = path.parent();
        while let Some(p) = parent.filter(|p| !p.is_root()) {
            tree.entry(p.as_str().to_string()).or_insert(None);
            parent = p.parent();
        }
        let value = if entry.is_dir() { None } else { Some(data) };
        tree.insert(path.as_str().to_string(), value);
    }
    let counts = counts.ok_or("the importer accepted an archive without a manifest")?;
    Ok((tree, counts))
}

async fn tree_of(fs: &dyn Filesystem) -> Result<Tree, String> {
    let listing = fs
        .list(&CanonicalPath::root(), u32::MAX)
        .await
        .map_err(|e| format!("listing the workspace: {e}"))?;
    let mut out = Tree::new();
    for m in listing.entries {
        let data = if m.kind == FileKind::Directory {
            None
        } else {
            let stream = fs
                .read_bytes(&m.path, ByteRange::default(), 0)
                .await
                .map_err(|e| format!("reading {}: {e}", m.path))?;
            let chunks: Vec<Bytes> = stream
                .chunks
                .try_collect()
                .await
                .map_err(|e| format!("reading {}: {e}", m.path))?;
            Some(chunks.concat())
        };
        out.insert(m.path.as_str().to_string(), data);
    }
    Ok(out)
}

/// Files already in every workspace, which a refused import must keep.
async fn seed(fs: &dyn Filesystem) {
    for (path, content) in [("keep.txt", "before\n"), ("dir/inner.txt", "x")] {
        let path = CanonicalPath::parse(path, &PathLimits::default()).unwrap();
        fs.write(&path, content, WriteOptions::default())
            .await
            .unwrap();
    }
}

/// Checks, then imports `spooled` into `ws`, and holds the outcome to the
/// rules in the module's comment.
async fn import_into<B: Backend>(
    ws: &Workspace<B>,
    spooled: &Path,
    bytes: &[u8],
) -> Result<(), String> {
    let before = tree_of(ws).await?;
    let (checked, largest) = largest_allocation(|| check(spooled, &limits()));
    if largest > MAX_CHECK_ALLOCATION {
        return Err(format!(
            "checking the archive allocated {largest} bytes at once (limit {MAX_CHECK_ALLOCATION})"
        ));
    }
    let plan = match checked {
        Err(e) => return clean_refusal(&e, &before, &tree_of(ws).await?),
        Ok(plan) => plan,
    };
    // Sizes and checksums are verified while entries are staged, before
    // the workspace changes: a refusal there must change nothing either.
    // The import owns (and removes) its spool: hand it a copy.
    let owned = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    std::fs::copy(spooled, owned.path()).map_err(|e| e.to_string())?;
    if let Err(e) = ws.import_checked(owned.into_temp_path(), plan).await {
        return clean_refusal(&e, &before, &tree_of(ws).await?);
    }
    let (expected, (files, total)) = declared(bytes)?;
    let now = tree_of(ws).await?;
    if now != expected {
        return Err(format!(
            "the import left {now:?}\n but the archive declares {expected:?}"
        ));
    }
    let real = now
        .values()
        .flatten()
        .fold((0, 0), |(n, b), d| (n + 1, b + d.len() as u64));
    if real != (files, total) {
        return Err(format!(
            "the manifest counts {:?}, the import holds {real:?}",
            (files, total)
        ));
    }
    Ok(())
}

fn clean_refusal(e: &Error, before: &Tree, after: &Tree) -> Result<(), String> {
    if !matches!(e.code(), Code::InvalidArgument | Code::ResourceExhausted) {
        return Err(format!("refused with {:?} {}: {e}", e.code(), e.reason()));
    }
    if e.to_string().trim().is_empty() {
        return Err(format!("refused without a message: {e:?}"));
    }
    if before != after {
        return Err(format!("a refused import changed the workspace: {after:?}"));
    }
    Ok(())
}

/// Only `root/` and an empty `staging/` in the directory workspace's base.
fn nothing_beside(base: &Path) -> Result<(), String> {
    let mut names: Vec<String> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names != ["root", "staging"] {
        return Err(format!(
            "entries appeared beside the workspace root: {names:?}"
        ));
    }
    let staged = std::fs::read_dir(base.join("staging")).unwrap().count();
    if staged != 0 {
        return Err(format!(
            "{staged} entries were left in the staging directory"
        ));
    }
    Ok(())
}

async fn run_case(bytes: &[u8]) -> Result<(), String> {
    let spool = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(spool.path(), bytes).unwrap();

    let memory = Workspace::new(MemoryBackend::new(), limits());
    seed(&memory).await;
    import_into(&memory, spool.path(), bytes)
        .await
        .map_err(|e| format!("memory: {e}"))?;

    let base = tempfile::tempdir().unwrap();
    let (root, staging) = (base.path().join("root"), base.path().join("staging"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&staging).unwrap();
    let directory = Workspace::new(DirectoryBackend::open(&root, &staging).unwrap(), limits());
    seed(&directory).await;
    import_into(&directory, spool.path(), bytes)
        .await
        .map_err(|e| format!("directory: {e}"))?;
    nothing_beside(base.path()).map_err(|e| format!("directory: {e}"))
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: wsfs_tests::kit::env("PROPTEST_CASES", default_cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `check` runs on the test's own thread, where allocations are counted.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn hostile_archives_are_refused_cleanly_or_imported_exactly((kind, bytes) in archive()) {
        runtime()
            .block_on(run_case(&bytes))
            .map_err(|e| {
                TestCaseError::fail(format!("{kind} archive of {} bytes: {e}", bytes.len()))
            })?;
    }
}

/// The cases above are not vacuous: an unmutated archive imports, and a
/// lying one is refused, each within the allocation bound.
#[test]
fn a_valid_archive_imports_and_a_lying_one_is_refused() {
    let tree: Tree = [
        ("a".to_string(), None),
        ("a/b".to_string(), Some(b"hello".to_vec())),
        ("c.txt".to_string(), Some(vec![0, 159, 146, 150])),
    ]
    .into();
    let valid = archive_of(&tree, true, None);
    runtime().block_on(run_case(&valid)).unwrap();
    let (expected, counts) = declared(&valid).unwrap();
    assert_eq!((expected, counts), (tree.clone(), (2, 9)));

    let lying = lying_archive(&tree, true);
    let spool = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(spool.path(), &lying).unwrap();
    let (_, largest) = largest_allocation(|| check(spool.path(), &limits()));
    assert!(largest < MAX_CHECK_ALLOCATION, "{largest}");
    // Refused cleanly (at the check or while staging), never imported.
    runtime().block_on(run_case(&lying)).unwrap();
    // The counter sees allocations at all.
    let (_, seen) = largest_allocation(|| vec![0u8; 1 << 20]);
    assert!(seen >= 1 << 20);
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn hostile_archives_over_grpc_are_refused_cleanly_or_imported((kind, bytes) in archive()) {
        let result: Result<(), String> = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let server = wsfs_tests::harness::TestServer::start().await;
                let client = wsfs_client::Client::connect(&server.url()).await.unwrap();
                let (session, _) = client
                    .create(wsfs_client::SessionOptions::directory())
                    .await
                    .unwrap();
                seed(&session).await;
                let before = tree_of(&session).await?;
                match session.import_from_reader(std::io::Cursor::new(bytes.clone())).await {
                    Err(e) => {
                        if e.reason().is_empty() {
                            return Err(format!("refused without a reason: {e:?}"));
                        }
                        clean_refusal(&e, &before, &tree_of(&session).await?)
                    }
                    Ok(_) => {
                        let (expected, _) = declared(&bytes)?;
                        let now = tree_of(&session).await?;
                        if now != expected {
                            return Err(format!("imported {now:?}, declared {expected:?}"));
                        }
                        Ok(())
                    }
                }
            });
        result.map_err(|e| TestCaseError::fail(format!("{kind} archive: {e}")))?;
    }
}
