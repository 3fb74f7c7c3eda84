//! ExportArchive and ImportArchive over real gRPC, through the typed
//! client: the layout, round trips between backends, and every hostile
//! archive the import refuses without changing the workspace.

use std::io::Write;
use tonic::Code;
use wsfs_client::{
    parse_path, Client, Error, FileKind, Filesystem, Session, SessionLimits, SessionOptions,
};
use wsfs_tests::harness::TestServer;
use zip::write::SimpleFileOptions;

struct World {
    client: Client,
    server: TestServer,
}

async fn world() -> World {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    World { client, server }
}

impl World {
    async fn session(&self, options: SessionOptions) -> Session {
        self.client.create(options).await.unwrap().0
    }
}

/// Every byte value, then some more: not UTF-8.
fn binary() -> Vec<u8> {
    (0..=255u8).cycle().take(70_000).collect()
}

async fn fill(s: &Session) {
    s.write_str("README.md", "# hello\n").await.unwrap();
    s.write_str("src/lib.rs", "pub fn f() {}\n").await.unwrap();
    s.upload(
        "assets/blob.bin",
        std::io::Cursor::new(binary()),
        Default::default(),
    )
    .await
    .unwrap();
    s.mkdir(&parse_path("empty/inner").unwrap(), Default::default())
        .await
        .unwrap();
}

/// Every entry of the workspace: (path, kind, content of files).
async fn tree(s: &Session) -> Vec<(String, FileKind, Vec<u8>)> {
    let listing = s.list(&parse_path("").unwrap(), 64).await.unwrap();
    let mut out = Vec::new();
    for e in listing.entries {
        let content = if e.kind == FileKind::File {
            let mut v = Vec::new();
            s.download(e.path.as_str(), &mut v).await.unwrap();
            v
        } else {
            Vec::new()
        };
        out.push((e.path.as_str().to_string(), e.kind, content));
    }
    out
}

async fn export(s: &Session) -> Vec<u8> {
    let mut out = Vec::new();
    s.export_to_writer(&mut out, None).await.unwrap();
    out
}

async fn round_trip(from: SessionOptions, to: SessionOptions) {
    let w = world().await;
    let (a, b) = (w.session(from).await, w.session(to).await);
    fill(&a).await;
    b.write_str("old.txt", "replaced by the import\n")
        .await
        .unwrap();
    let bytes = export(&a).await;
    let (files, total) = b
        .import_from_reader(std::io::Cursor::new(bytes))
        .await
        .unwrap();
    assert_eq!((files, total), (3, 8 + 14 + 70_000));
    assert_eq!(tree(&a).await, tree(&b).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_export_imports_into_directory_byte_for_byte() {
    round_trip(SessionOptions::memory(), SessionOptions::directory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_export_imports_into_memory_byte_for_byte() {
    round_trip(SessionOptions::directory(), SessionOptions::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_holds_files_directories_and_a_manifest() {
    let w = world().await;
    let s = w.session(SessionOptions::memory()).await;
    fill(&s).await;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(export(&s).await)).unwrap();
    let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "files/README.md",
            "files/assets/",
            "files/assets/blob.bin",
            "files/empty/",
            "files/empty/inner/",
            "files/src/",
            "files/src/lib.rs",
            "manifest.json"
        ]
    );
    let manifest: serde_json::Value = {
        let mut raw = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("manifest.json").unwrap(), &mut raw)
            .unwrap();
        serde_json::from_str(&raw).unwrap()
    };
    assert_eq!(manifest["version"], "1");
    assert_eq!(manifest["file_count"], 3);
    assert_eq!(manifest["total_bytes"], 8 + 14 + 70_000);
    assert!(manifest["created_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_to_file_and_import_from_file() {
    let w = world().await;
    let (a, b) = (
        w.session(SessionOptions::directory()).await,
        w.session(SessionOptions::memory()).await,
    );
    fill(&a).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ws.zip");
    let size = a.export_to(&path).await.unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    b.import_from(&path).await.unwrap();
    assert_eq!(tree(&a).await, tree(&b).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_are_not_exported() {
    let w = world().await;
    let (s, info) = w.client.create(SessionOptions::directory()).await.unwrap();
    s.write_str("a.txt", "a\n").await.unwrap();
    let root = info.root_path.unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
    let zip = zip::ZipArchive::new(std::io::Cursor::new(export(&s).await)).unwrap();
    let names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    assert!(names.iter().any(|n| n == "files/a.txt"));
    assert!(!names.iter().any(|n| n.contains("link")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_megabyte_binary_file_survives_the_export() {
    let w = world().await;
    let s = w.session(SessionOptions::memory()).await;
    let big: Vec<u8> = (0..8_000_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) as u8)
        .collect();
    s.upload(
        "big.bin",
        std::io::Cursor::new(big.clone()),
        Default::default(),
    )
    .await
    .unwrap();
    let bytes = export(&s).await;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut zip.by_name("files/big.bin").unwrap(), &mut back).unwrap();
    assert_eq!(back, big);
}

async fn snapshot_exports_as_it_was_taken(backend: SessionOptions) {
    let w = world().await;
    let a = w.session(backend).await;
    fill(&a).await;
    let before = tree(&a).await;
    let snap = w.client.snapshot(a.id(), "before").await.unwrap();
    a.write_str("README.md", "# changed\n").await.unwrap();
    a.write_str("later.txt", "after the snapshot\n")
        .await
        .unwrap();

    let mut bytes = Vec::new();
    a.export_to_writer(&mut bytes, Some(&snap.id))
        .await
        .unwrap();
    let b = w.session(SessionOptions::memory()).await;
    let (files, total) = b
        .import_from_reader(std::io::Cursor::new(bytes))
        .await
        .unwrap();

    assert_eq!((files, total), (3, 8 + 14 + 70_000));
    assert_eq!(tree(&b).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_snapshot_exports_as_it_was_taken() {
    snapshot_exports_as_it_was_taken(SessionOptions::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_snapshot_exports_as_it_was_taken() {
    snapshot_exports_as_it_was_taken(SessionOptions::directory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporting_an_unknown_snapshot_is_snapshot_not_found() {
    let w = world().await;
    let s = w.session(SessionOptions::memory()).await;
    let err = s
        .export_to_writer(Vec::new(), Some("0b6f0e0e-0000-4000-8000-000000000000"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    assert_eq!(err.reason(), "SNAPSHOT_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_into_a_read_only_session_is_read_only() {
    let w = world().await;
    let s = w
        .session(
            SessionOptions::memory()
                .seed_file("keep.txt", "k")
                .read_only(true),
        )
        .await;
    let archive = Archive::new().file("files/a.txt", b"a").build();
    refused(&s, archive, Code::PermissionDenied, "READ_ONLY").await;
}

// ---- hostile archives -------------------------------------------------

/// Builds archives entry by entry; `build` adds a manifest with the right
/// counts unless told otherwise.
struct Archive {
    zip: zip::ZipWriter<std::io::Cursor<Vec<u8>>>,
    files: u64,
    bytes: u64,
    manifest: Option<String>,
}

impl Archive {
    fn new() -> Self {
        Archive {
            zip: zip::ZipWriter::new(std::io::Cursor::new(Vec::new())),
            files: 0,
            bytes: 0,
            manifest: None,
        }
    }

    fn options() -> SimpleFileOptions {
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored)
    }

    fn file(self, name: &str, data: &[u8]) -> Self {
        self.file_with(name, data, Self::options())
    }

    fn file_with(mut self, name: &str, data: &[u8], options: SimpleFileOptions) -> Self {
        self.zip.start_file(name, options).unwrap();
        self.zip.write_all(data).unwrap();
        self.files += 1;
        self.bytes += data.len() as u64;
        self
    }

    fn symlink(mut self, name: &str, target: &str) -> Self {
        self.zip.add_symlink(name, target, Self::options()).unwrap();
        self
    }

    fn manifest(mut self, json: &str) -> Self {
        self.manifest = Some(json.to_string());
        self
    }

    fn no_manifest(mut self) -> Self {
        self.manifest = Some(String::new());
        self
    }

    fn build(mut self) -> Vec<u8> {
        let json = self.manifest.take().unwrap_or_else(|| {
            format!(
                r#"{{"version": "1", "created_at": "2026-01-01T00:00:00Z", "file_count": {}, "total_bytes": {}}}"#,
                self.files, self.bytes
            )
        });
        if !json.is_empty() {
            self.zip
                .start_file("manifest.json", Self::options())
                .unwrap();
            self.zip.write_all(json.as_bytes()).unwrap();
        }
        self.zip.finish().unwrap().into_inner()
    }
}

/// A session holding one known file, to prove a refused import changed
/// nothing.
async fn victim(w: &World, limits: SessionLimits) -> Session {
    w.session(
        SessionOptions::memory()
            .limits(limits)
            .seed_file("keep.txt", "still here\n"),
    )
    .await
}

async fn refused(s: &Session, archive: Vec<u8>, code: Code, reason: &str) -> Error {
    let before = tree(s).await;
    let version = s
        .stat(&parse_path("keep.txt").unwrap())
        .await
        .unwrap()
        .version;
    let err = s
        .import_from_reader(std::io::Cursor::new(archive))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (code, reason), "{err}");
    assert_eq!(
        tree(s).await,
        before,
        "a refused import changed the workspace"
    );
    let after = s
        .stat(&parse_path("keep.txt").unwrap())
        .await
        .unwrap()
        .version;
    assert_eq!(after, version);
    err
}

async fn refuse(archive: Vec<u8>, code: Code, reason: &str) -> Error {
    refuse_with(SessionLimits::default(), archive, code, reason).await
}

async fn refuse_with(limits: SessionLimits, archive: Vec<u8>, code: Code, reason: &str) -> Error {
    let w = world().await;
    let s = victim(&w, limits).await;
    refused(&s, archive, code, reason).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_entry_is_refused() {
    let a = Archive::new().file("/etc/passwd", b"x").build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_PATH").await;
    assert!(err.to_string().contains("absolute"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_dot_entry_is_refused() {
    let a = Archive::new().file("files/../../evil.txt", b"x").build();
    refuse(a, Code::InvalidArgument, "PATH_ESCAPES_ROOT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_dot_that_stays_inside_is_refused_too() {
    let a = Archive::new().file("files/a/../b.txt", b"x").build();
    refuse(a, Code::InvalidArgument, "PATH_ESCAPES_ROOT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_entry_is_refused() {
    let a = Archive::new()
        .file("files/a.txt", b"a")
        .symlink("files/link", "/etc/passwd")
        .build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_after_canonicalisation_is_refused() {
    let a = Archive::new()
        .file("files/dir/a.txt", b"1")
        .file("files/dir//./a.txt", b"2")
        .build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("another entry"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_where_a_directory_is_needed_is_refused() {
    let a = Archive::new()
        .file("files/a", b"1")
        .file("files/a/b", b"2")
        .build();
    refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_over_the_session_depth_limit_is_refused() {
    let limits = SessionLimits {
        max_path_depth: 3,
        ..Default::default()
    };
    let a = Archive::new().file("files/a/b/c/d.txt", b"x").build();
    refuse_with(limits, a, Code::InvalidArgument, "INVALID_PATH").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_over_the_session_length_limit_is_refused() {
    let name = format!("files/{}", "n".repeat(81));
    let a = Archive::new().file(&name, b"x").build();
    refuse(a, Code::InvalidArgument, "INVALID_PATH").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_outside_files_is_refused() {
    let a = Archive::new().file("etc/passwd", b"x").build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("outside"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_manifest_is_refused() {
    let a = Archive::new()
        .file("files/a.txt", b"a")
        .no_manifest()
        .build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("manifest.json"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_that_is_not_json_is_refused() {
    let a = Archive::new()
        .file("files/a.txt", b"a")
        .manifest("not json")
        .build();
    refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_of_another_version_is_refused() {
    let a = Archive::new()
        .file("files/a.txt", b"a")
        .manifest(r#"{"version": "2", "created_at": "x", "file_count": 1, "total_bytes": 1}"#)
        .build();
    refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_with_wrong_counts_is_refused() {
    let a = Archive::new()
        .file("files/a.txt", b"a")
        .manifest(r#"{"version": "1", "created_at": "x", "file_count": 2, "total_bytes": 1}"#)
        .build();
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("counts"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_over_the_byte_limit_is_refused() {
    // The seeded keep.txt (11 bytes) fits; the archive's 12 bytes do not.
    let limits = SessionLimits {
        max_total_bytes: 11,
        ..Default::default()
    };
    let a = Archive::new()
        .file("files/a.txt", b"123456")
        .file("files/b.txt", b"123456")
        .build();
    refuse_with(limits, a, Code::ResourceExhausted, "QUOTA_EXCEEDED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_over_the_file_limit_is_refused() {
    let limits = SessionLimits {
        max_files: 2,
        ..Default::default()
    };
    let a = Archive::new()
        .file("files/a", b"1")
        .file("files/b", b"2")
        .file("files/c", b"3")
        .build();
    refuse_with(limits, a, Code::ResourceExhausted, "QUOTA_EXCEEDED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_over_the_per_write_limit_is_too_large() {
    let limits = SessionLimits {
        max_write_bytes: 100,
        ..Default::default()
    };
    let a = Archive::new().file("files/big.bin", &[7u8; 101]).build();
    let err = refuse_with(limits, a, Code::InvalidArgument, "TOO_LARGE").await;
    assert_eq!(err.path(), Some("big.bin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_highly_compressible_file_is_not_taken_for_a_bomb() {
    // 8 MiB of zeros compresses about 1000:1; the byte budget, not the
    // ratio, is what bounds an import.
    let deflated =
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let a = Archive::new()
        .file_with("files/zeros.bin", &vec![0u8; 8 << 20], deflated)
        .build();
    assert!(
        a.len() < 100_000,
        "the archive should be small: {}",
        a.len()
    );
    let w = world().await;
    let s = w.session(SessionOptions::memory()).await;
    let path = w.server.data_dir().join("zeros.zip");
    std::fs::write(&path, &a).unwrap();
    assert_eq!(s.import_from(&path).await.unwrap(), (1, 8 << 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_that_add_up_past_the_byte_limit_are_refused_before_inflating() {
    let limits = SessionLimits {
        max_total_bytes: 3 << 20,
        ..Default::default()
    };
    let deflated =
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let mut archive = Archive::new();
    for i in 0..4 {
        archive = archive.file_with(&format!("files/{i}.bin"), &vec![0u8; 1 << 20], deflated);
    }
    let err = refuse_with(
        limits,
        archive.build(),
        Code::ResourceExhausted,
        "QUOTA_EXCEEDED",
    )
    .await;
    assert!(err.to_string().contains("4194304 bytes"), "{err}");
}

/// Finds `needle` in `hay`, from the end.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .rposition(|w| w == needle)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_that_inflates_past_its_declared_size_is_refused_at_the_first_byte_over() {
    // A deflated megabyte of zeros whose central directory and local
    // header claim 1,000 bytes: the budget sees 1,000, and inflating stops
    // past it.
    let deflated =
        SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let mut a = Archive::new()
        .file_with("files/liar.bin", &vec![0u8; 1 << 20], deflated)
        .manifest(r#"{"version": "1", "created_at": "x", "file_count": 1, "total_bytes": 1000}"#)
        .build();
    for (signature, size_at) in [(b"PK\x01\x02", 24), (b"PK\x03\x04", 22)] {
        let name_at = if signature == b"PK\x01\x02" { 46 } else { 30 };
        let header = (0..a.len())
            .find(|&p| {
                a[p..].starts_with(signature) && a[p + name_at..].starts_with(b"files/liar.bin")
            })
            .unwrap();
        a[header + size_at..header + size_at + 4].copy_from_slice(&1000u32.to_le_bytes());
    }
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    // Caught by the ZIP reader's own size check or by the importer's cap.
    let message = err.to_string();
    assert!(message.contains("liar.bin"), "{message}");
    assert!(
        message.contains("larger than its declared") || message.contains("holds more"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_whose_real_size_differs_from_its_declared_size_is_refused() {
    let mut a = Archive::new()
        .file("files/a.txt", b"0123456789")
        .manifest(r#"{"version": "1", "created_at": "x", "file_count": 1, "total_bytes": 20}"#)
        .build();
    // Stored entry: declare 20 bytes in the central directory where there are 10.
    let central = (0..a.len())
        .find(|&p| a[p..].starts_with(b"PK\x01\x02") && a[p + 46..].starts_with(b"files/a.txt"))
        .unwrap();
    a[central + 24..central + 28].copy_from_slice(&20u32.to_le_bytes());
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("declares 20 bytes"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_data_is_refused() {
    let mut a = Archive::new().file("files/a.txt", b"0123456789").build();
    let at = find(&a, b"0123456789");
    a[at] = b'X';
    let err = refuse(a, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("corrupt"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_cut_short_is_refused() {
    let a = Archive::new().file("files/a.txt", &[1u8; 5000]).build();
    let half = a[..a.len() / 2].to_vec();
    let err = refuse(half, Code::InvalidArgument, "INVALID_ARGUMENT").await;
    assert!(err.to_string().contains("not a readable ZIP"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_fails_midway_changes_nothing() {
    struct Failing(usize);
    impl tokio::io::AsyncRead for Failing {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other("disk gone")));
            }
            self.0 -= 1;
            buf.put_slice(b"PK\x03\x04");
            std::task::Poll::Ready(Ok(()))
        }
    }
    let w = world().await;
    let s = victim(&w, SessionLimits::default()).await;
    let before = tree(&s).await;
    let err = s.import_from_reader(Failing(3)).await.unwrap_err();
    assert!(err.to_string().contains("disk gone"), "{err}");
    assert_eq!(tree(&s).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_replaces_everything_with_new_versions() {
    let w = world().await;
    let s = victim(&w, SessionLimits::default()).await;
    let old = s
        .stat(&parse_path("keep.txt").unwrap())
        .await
        .unwrap()
        .version;
    let a = Archive::new()
        .file("files/keep.txt", b"new content\n")
        .file("files/dir/x.bin", &[0, 159, 146, 150])
        .build();
    assert_eq!(
        s.import_from_reader(std::io::Cursor::new(a)).await.unwrap(),
        (2, 16)
    );
    let keep = s.stat(&parse_path("keep.txt").unwrap()).await.unwrap();
    assert!(keep.version > old);
    assert_eq!(s.read_to_string("keep.txt").await.unwrap(), "new content\n");
    let mut x = Vec::new();
    s.download("dir/x.bin", &mut x).await.unwrap();
    assert_eq!(x, [0, 159, 146, 150]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_leave_no_spooled_upload_behind() {
    let w = world().await;
    let s = victim(&w, SessionLimits::default()).await;
    let good = Archive::new().file("files/a.txt", b"a").build();
    s.import_from_reader(std::io::Cursor::new(good))
        .await
        .unwrap();
    let bad = Archive::new().file("files/../a.txt", b"a").build();
    s.import_from_reader(std::io::Cursor::new(bad))
        .await
        .unwrap_err();
    let spool = w.server.data_dir().join("imports");
    let left: Vec<_> = std::fs::read_dir(&spool).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A DIRECTORY session whose import fails on its 40th of 50 files (its
/// stored data does not match its CRC), after the 39 before it inflated
/// fine: every path, byte and version is as before, and no staged file is
/// left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_import_that_fails_late_changes_nothing() {
    let w = world().await;
    let (s, info) = w
        .client
        .create(SessionOptions::directory().seed_file("keep.txt", "still here\n"))
        .await
        .unwrap();
    fill(&s).await;
    let mut archive = Archive::new();
    for i in 0..50 {
        archive = archive.file(
            &format!("files/n/{i:02}.txt"),
            format!("entry number {i:02}\n").as_bytes(),
        );
    }
    let mut a = archive.build();
    let at = find(&a, b"entry number 39\n");
    a[at] = b'E';
    let before = tree(&s).await;
    let listing = s.list(&parse_path("").unwrap(), 64).await.unwrap();

    let err = s
        .import_from_reader(std::io::Cursor::new(a))
        .await
        .unwrap_err();

    assert_eq!(
        (err.code(), err.reason()),
        (Code::InvalidArgument, "INVALID_ARGUMENT"),
        "{err}"
    );
    assert!(err.to_string().contains("n/39.txt"), "{err}");
    assert_eq!(
        tree(&s).await,
        before,
        "a failed import changed the workspace"
    );
    let after = s.list(&parse_path("").unwrap(), 64).await.unwrap();
    let versions = |l: &wsfs_client::Listing| {
        l.entries
            .iter()
            .map(|e| (e.path.as_str().to_string(), e.version))
            .collect::<Vec<_>>()
    };
    assert_eq!(versions(&after), versions(&listing));
    let staging = w
        .server
        .data_dir()
        .join("sessions")
        .join(&info.id)
        .join("staging");
    assert_eq!(
        std::fs::read_dir(&staging).map_or(0, |d| d.count()),
        0,
        "a failed import left staged files"
    );
}
