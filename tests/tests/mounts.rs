//! Host mounts at CreateSession over real gRPC: what is copied, where,
//! through which filters, and what is refused (leaving no session behind).

use std::path::{Path, PathBuf};
use tonic::Code;
use wsfs_client::{
    parse_path, Client, Error, FileKind, Filesystem, HostMount, Session, SessionLimits,
    SessionOptions,
};
use wsfs_tests::harness::TestServer;

/// A server allowed to mount `allowed/`, and `outside/` next to it.
struct World {
    client: Client,
    server: TestServer,
    base: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("allowed")).unwrap();
        std::fs::create_dir(base.path().join("outside")).unwrap();
        let allowed = base.path().join("allowed");
        let server = TestServer::start_with(|c| c.allow_roots = vec![allowed]).await;
        let client = Client::connect(&server.url()).await.unwrap();
        World {
            client,
            server,
            base,
        }
    }

    fn allowed(&self) -> PathBuf {
        self.base.path().join("allowed")
    }

    fn outside(&self) -> PathBuf {
        self.base.path().join("outside")
    }

    async fn create(&self, options: SessionOptions) -> Result<Session, Error> {
        self.client.create(options).await.map(|(s, _)| s)
    }
}

fn put(path: &Path, content: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Every file of the workspace and its bytes, sorted by path.
async fn files(s: &Session) -> Vec<(String, Vec<u8>)> {
    let listing = s.list(&parse_path("").unwrap(), 64).await.unwrap();
    let mut out = Vec::new();
    for e in listing.entries {
        if e.kind == FileKind::File {
            let mut v = Vec::new();
            s.download(e.path.as_str(), &mut v).await.unwrap();
            out.push((e.path.as_str().to_string(), v));
        }
    }
    out
}

fn names(files: &[(String, Vec<u8>)]) -> Vec<&str> {
    files.iter().map(|(p, _)| p.as_str()).collect()
}

fn binary() -> Vec<u8> {
    (0..=255u8).cycle().take(100_000).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_copies_the_tree_byte_for_byte() {
    let w = World::new().await;
    let src = w.allowed().join("project");
    put(&src.join("README.md"), b"# hi\n");
    put(&src.join("assets/logo.bin"), &binary());
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let s = w
            .create(options.mount(HostMount::new(&src, "")))
            .await
            .unwrap();
        assert_eq!(
            files(&s).await,
            [
                ("README.md".to_string(), b"# hi\n".to_vec()),
                ("assets/logo.bin".to_string(), binary()),
            ]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_keeps_each_files_bits_and_time_but_never_setuid() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new().await;
    let src = w.allowed().join("project");
    let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
    for (name, mode) in [("run.sh", 0o755), ("secret", 0o600), ("suid", 0o4750)] {
        let path = src.join(name);
        put(&path, b"x");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(then)
            .unwrap();
    }
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let s = w
            .create(options.mount(HostMount::new(&src, "")))
            .await
            .unwrap();
        for (name, want) in [("run.sh", 0o755), ("secret", 0o600), ("suid", 0o750)] {
            let stat = s.stat(&parse_path(name).unwrap()).await.unwrap();
            assert_eq!(stat.permissions.bits(), want, "{name}");
            assert_eq!(stat.modified, then, "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_path_places_the_files_under_it() {
    let w = World::new().await;
    put(&w.allowed().join("lib/a.rs"), b"a");
    let s = w
        .create(
            SessionOptions::memory().mount(HostMount::new(w.allowed().join("lib"), "/vendor/lib")),
        )
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["vendor/lib/a.rs"]);
}

async fn denied(w: &World, host_path: PathBuf) {
    let err = w
        .create(SessionOptions::memory().mount(HostMount::new(host_path, "")))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        (Code::PermissionDenied, "PERMISSION_DENIED"),
        "{err}"
    );
    assert!(w.client.list_sessions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_outside_the_allowed_roots_is_denied() {
    let w = World::new().await;
    put(&w.outside().join("secret"), b"s");
    denied(&w, w.outside()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_climbing_out_with_dot_dot_is_denied() {
    let w = World::new().await;
    put(&w.outside().join("secret"), b"s");
    denied(&w, w.allowed().join("../outside")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_through_a_symlink_to_outside_is_denied() {
    let w = World::new().await;
    put(&w.outside().join("secret"), b"s");
    std::os::unix::fs::symlink(w.outside(), w.allowed().join("door")).unwrap();
    denied(&w, w.allowed().join("door")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_globs_keep_only_matching_files() {
    let w = World::new().await;
    put(&w.allowed().join("src/a.rs"), b"a");
    put(&w.allowed().join("src/deep/b.rs"), b"b");
    put(&w.allowed().join("src/c.txt"), b"c");
    put(&w.allowed().join("Cargo.toml"), b"t");
    let mount = HostMount::new(w.allowed(), "")
        .include("**/*.rs")
        .include("Cargo.toml");
    let s = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap();
    assert_eq!(
        names(&files(&s).await),
        ["Cargo.toml", "src/a.rs", "src/deep/b.rs"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_globs_drop_files_and_whole_directories() {
    let w = World::new().await;
    put(&w.allowed().join("src/a.rs"), b"a");
    put(&w.allowed().join("src/a.log"), b"l");
    put(&w.allowed().join("target/debug/big"), b"x");
    put(&w.allowed().join("web/node_modules/m/index.js"), b"m");
    let mount = HostMount::new(w.allowed(), "")
        .exclude("*.log")
        .exclude("**/*.log")
        .exclude("target")
        .exclude("**/node_modules");
    let s = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["src/a.rs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_applies_after_include() {
    let w = World::new().await;
    put(&w.allowed().join("a.rs"), b"a");
    put(&w.allowed().join("a_test.rs"), b"t");
    let mount = HostMount::new(w.allowed(), "")
        .include("*.rs")
        .exclude("*_test.rs");
    let s = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["a.rs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_glob_is_invalid_pattern() {
    let w = World::new().await;
    let mount = HostMount::new(w.allowed(), "").include("src/[");
    let err = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        (Code::InvalidArgument, "INVALID_PATTERN")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_over_max_bytes_fails_and_leaves_no_session_and_no_directory() {
    let w = World::new().await;
    put(&w.allowed().join("a.bin"), &[1u8; 600]);
    put(&w.allowed().join("b.bin"), &[2u8; 600]);
    let mount = HostMount::new(w.allowed(), "").max_bytes(1000);
    let err = w
        .create(SessionOptions::directory().mount(mount))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        (Code::ResourceExhausted, "QUOTA_EXCEEDED"),
        "{err}"
    );
    assert!(w.client.list_sessions().await.unwrap().is_empty());
    let sessions = w.server.data_dir().join("sessions");
    let left = std::fs::read_dir(&sessions).map_or(0, |d| d.count());
    assert_eq!(left, 0, "a session directory was left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_that_fits_copies_everything() {
    let w = World::new().await;
    put(&w.allowed().join("a.bin"), &[1u8; 600]);
    put(&w.allowed().join("b.bin"), &[2u8; 400]);
    let mount = HostMount::new(w.allowed(), "").max_bytes(1000);
    let s = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["a.bin", "b.bin"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_are_skipped_unless_followed() {
    let w = World::new().await;
    put(&w.allowed().join("real/a.txt"), b"a");
    std::os::unix::fs::symlink(w.allowed().join("real/a.txt"), w.allowed().join("link.txt"))
        .unwrap();
    std::os::unix::fs::symlink(w.allowed().join("real"), w.allowed().join("linkdir")).unwrap();
    let s = w
        .create(SessionOptions::memory().mount(HostMount::new(w.allowed(), "")))
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["real/a.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followed_symlinks_copy_their_targets_inside_the_allowed_root() {
    let w = World::new().await;
    put(&w.allowed().join("real/a.txt"), b"a");
    std::os::unix::fs::symlink(w.allowed().join("real/a.txt"), w.allowed().join("link.txt"))
        .unwrap();
    std::os::unix::fs::symlink(w.allowed().join("real"), w.allowed().join("linkdir")).unwrap();
    // A cycle: followed once, never forever.
    std::os::unix::fs::symlink(w.allowed(), w.allowed().join("real/loop")).unwrap();
    let mount = HostMount::new(w.allowed(), "").follow_symlinks(true);
    let s = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap();
    let got = files(&s).await;
    assert!(names(&got).contains(&"link.txt"), "{:?}", names(&got));
    assert!(names(&got).contains(&"linkdir/a.txt"), "{:?}", names(&got));
    assert!(got.iter().all(|(_, c)| c == b"a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_symlink_out_of_the_allowed_root_is_denied() {
    let w = World::new().await;
    put(&w.allowed().join("a.txt"), b"a");
    put(&w.outside().join("secret"), b"s");
    std::os::unix::fs::symlink(w.outside().join("secret"), w.allowed().join("secret")).unwrap();
    let mount = HostMount::new(w.allowed(), "").follow_symlinks(true);
    let err = w
        .create(SessionOptions::memory().mount(mount))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        (Code::PermissionDenied, "PERMISSION_DENIED")
    );
    assert!(w.client.list_sessions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_mounts_overwrite_earlier_ones_and_seed_files_come_last() {
    let w = World::new().await;
    put(&w.allowed().join("one/config.toml"), b"one");
    put(&w.allowed().join("one/only_one.txt"), b"1");
    put(&w.allowed().join("two/config.toml"), b"two");
    put(&w.allowed().join("two/seeded.txt"), b"from the mount");
    let s = w
        .create(
            SessionOptions::memory()
                .mount(HostMount::new(w.allowed().join("one"), ""))
                .mount(HostMount::new(w.allowed().join("two"), ""))
                .seed_file("seeded.txt", "from the seed"),
        )
        .await
        .unwrap();
    assert_eq!(
        files(&s).await,
        [
            ("config.toml".to_string(), b"two".to_vec()),
            ("only_one.txt".to_string(), b"1".to_vec()),
            ("seeded.txt".to_string(), b"from the seed".to_vec()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_are_not_copied() {
    let w = World::new().await;
    put(&w.allowed().join("a.txt"), b"a");
    let fifo = std::ffi::CString::new(w.allowed().join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid, NUL-terminated path.
    assert_eq!(unsafe { libc_mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let s = w
        .create(SessionOptions::memory().mount(HostMount::new(w.allowed(), "")))
        .await
        .unwrap();
    assert_eq!(names(&files(&s).await), ["a.txt"]);
}

extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

/// Asserts that creation failed with QUOTA_EXCEEDED, decided up front from
/// the scan (the message counts mounts and seeds), and left no session and
/// no session directory.
async fn refused_over_quota(w: &World, options: SessionOptions) {
    let err = w.create(options).await.unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        (Code::ResourceExhausted, "QUOTA_EXCEEDED"),
        "{err}"
    );
    assert!(err.to_string().contains("mounts and seed files"), "{err}");
    assert!(w.client.list_sessions().await.unwrap().is_empty());
    let sessions = w.server.data_dir().join("sessions");
    let left = std::fs::read_dir(&sessions).map_or(0, |d| d.count());
    assert_eq!(left, 0, "a session directory was left behind");
}

fn quota(max_files: u64, max_total_bytes: u64) -> SessionLimits {
    SessionLimits {
        max_files,
        max_total_bytes,
        ..SessionLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_over_the_session_file_quota_fail_and_leave_nothing() {
    let w = World::new().await;
    for name in ["a", "b", "c"] {
        put(&w.allowed().join("src").join(name), b"x");
    }
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let mount = HostMount::new(w.allowed().join("src"), "");
        refused_over_quota(&w, options.mount(mount).limits(quota(2, 0))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_plus_seed_files_over_the_byte_quota_fail_and_leave_nothing() {
    let w = World::new().await;
    put(&w.allowed().join("src/a.bin"), &[1u8; 600]);
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let options = options
            .mount(HostMount::new(w.allowed().join("src"), ""))
            .seed_file("notes.txt", vec![b'n'; 500])
            .limits(quota(0, 1000));
        refused_over_quota(&w, options).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_over_the_quota_copy_nothing_into_an_existing_root() {
    let w = World::new().await;
    for name in ["a", "b", "c"] {
        put(&w.allowed().join("src").join(name), b"x");
    }
    let root = w.allowed().join("workspace");
    std::fs::create_dir(&root).unwrap();
    let options = SessionOptions::directory()
        .root(&root)
        .mount(HostMount::new(w.allowed().join("src"), ""))
        .limits(quota(2, 0));
    refused_over_quota(&w, options).await;
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_within_the_quota_count_a_replaced_file_once() {
    let w = World::new().await;
    put(&w.allowed().join("one/same.txt"), b"12345");
    put(&w.allowed().join("two/same.txt"), b"abcde");
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        // Two mounts and a seed land on one path: one file of 5 bytes.
        let options = options
            .mount(HostMount::new(w.allowed().join("one"), ""))
            .mount(HostMount::new(w.allowed().join("two"), ""))
            .seed_file("same.txt", b"SEED!".to_vec())
            .limits(quota(1, 5));
        let s = w.create(options).await.unwrap();
        assert_eq!(
            files(&s).await,
            [("same.txt".to_string(), b"SEED!".to_vec())]
        );
    }
}
