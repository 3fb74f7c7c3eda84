//! The FUSE mount (`wsfs_client::mount`, what `wsfs mount` runs) on a real
//! server and a real kernel mount, on MEMORY, DIRECTORY and CONTAINER
//! sessions (the container one of the tests' runtime, bwrap): files
//! written by programs in the mount reach the API when closed, API changes
//! reach the mount within a deadline, real programs (git, tar, rm, python,
//! sqlite3, pytest, cargo) work in it, and refusals arrive as the errno
//! programs expect.
//!
//! Needs /dev/fuse (and root or fusermount3): without them each test says
//! "skipping" and passes, unless WSFS_REQUIRE_TOOLS=1.
//!
//! Everything that touches the mount runs on a blocking thread: the mount's
//! own work runs on this test's runtime.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};
use wsfs_client::mount::{MountHandle, MountOptions};
use wsfs_client::{Client, FileKind, Filesystem, Session, SessionLimits, SessionOptions};
use wsfs_tests::harness::{Sandbox, TestServer};
use wsfs_tests::kit::{fuse_missing, p, system_tool, unavailable};

/// A session mounted at a temporary directory; unmounted when dropped,
/// before the directory goes.
struct Mounted {
    handle: Option<MountHandle>,
    dir: tempfile::TempDir,
    session: Session,
    backend: &'static str,
    _client: Client,
    server: Option<TestServer>,
    /// A CONTAINER session's container (dropped after the server).
    _sandbox: Option<Sandbox>,
}

impl Mounted {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn root(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Waits for the mount's queued commits (a close returns before its
    /// commit lands): after this the API sees every closed file.
    async fn synced(&self) {
        self.handle
            .as_ref()
            .expect("mounted")
            .sync()
            .await
            .expect("every queued commit lands");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = handle.unmount();
        }
    }
}

/// Whether this machine can mount: /dev/fuse, and root or fusermount3.
fn can_mount() -> bool {
    let Some(why) = fuse_missing() else {
        return true;
    };
    unavailable(&format!("{why}: the mount tests need FUSE (see .ci/run)"));
    false
}

async fn mounted(backend: &'static str, options: MountOptions) -> Mounted {
    mounted_with_limits(backend, SessionLimits::default(), options).await
}

/// A session with `limits` (zero: the default), mounted.
async fn mounted_with_limits(
    backend: &'static str,
    limits: SessionLimits,
    options: MountOptions,
) -> Mounted {
    let sandbox =
        (backend == "container").then(|| Sandbox::new(env!("CARGO_BIN_EXE_wsfs-stdio"), "box"));
    let server = match &sandbox {
        Some(sandbox) => {
            let runtime = sandbox.runtime();
            TestServer::start_with(|c| c.container_runtimes = vec![runtime]).await
        }
        None => TestServer::start().await,
    };
    let client = Client::connect(&server.url()).await.unwrap();
    let session_options = match (backend, &sandbox) {
        ("memory", _) => SessionOptions::memory(),
        (_, Some(sandbox)) => sandbox.options(),
        _ => SessionOptions::directory(),
    }
    .limits(limits);
    let info = client.create_session(session_options).await.unwrap();
    let session = client.session(&info.id);
    let dir = tempfile::tempdir().unwrap();
    let handle = wsfs_client::mount::mount(session.clone(), dir.path(), options)
        .await
        .expect("mount the session");
    Mounted {
        handle: Some(handle),
        dir,
        session,
        backend,
        _client: client,
        server: Some(server),
        _sandbox: sandbox,
    }
}

/// Every backend (MEMORY, DIRECTORY, and CONTAINER on a container of
/// the tests' runtime), mounted with the default options.
async fn every_backend() -> Vec<Mounted> {
    vec![
        mounted("memory", MountOptions::default()).await,
        mounted("directory", MountOptions::default()).await,
        mounted("container", MountOptions::default()).await,
    ]
}

/// Runs `work` on a blocking thread (it touches the mount).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .expect("the blocking work panicked")
}

/// Runs a program in `dir`; panics with its output when it fails.
fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn bytes_of(session: &Session, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    session.download(path, &mut out).await.unwrap();
    out
}

/// Polls the API with `check` until it holds or a generous deadline passes.
async fn api_eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not seen within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` until it holds or a generous deadline passes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool + Send + 'static) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, back) = blocking(move || {
            let ok = check();
            (ok, check)
        })
        .await;
        if ok {
            return;
        }
        check = back;
        assert!(Instant::now() < deadline, "{what}: not seen within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without any sync: the commits a close queued land by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_written_in_the_mount_reach_the_api_soon_after_close() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        blocking(move || {
            std::fs::create_dir_all(root.join("src/bin")).unwrap();
            std::fs::write(root.join("src/bin/main.rs"), "fn main() {}\n").unwrap();
            let mut f = std::fs::File::create(root.join("notes.txt")).unwrap();
            f.write_all(b"one\n").unwrap();
            f.write_all(b"two\n").unwrap();
            drop(f);
            std::fs::set_permissions(
                root.join("src/bin/main.rs"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        })
        .await;
        let s = &m.session;
        api_eventually("the closed files through the API", || async {
            s.read_to_string("notes.txt").await.ok().as_deref() == Some("one\ntwo\n")
                && s.stat(&p("src/bin/main.rs"))
                    .await
                    .is_ok_and(|meta| meta.permissions.bits() == 0o755)
        })
        .await;
        assert_eq!(
            s.read_to_string("src/bin/main.rs").await.unwrap(),
            "fn main() {}\n",
            "{}",
            m.backend
        );
        assert_eq!(s.read_to_string("notes.txt").await.unwrap(), "one\ntwo\n");
        let meta = s.stat(&p("src/bin/main.rs")).await.unwrap();
        assert_eq!(
            meta.permissions.bits(),
            0o755,
            "{}: chmod reached the API",
            m.backend
        );
        assert_eq!(
            s.stat(&p("src/bin")).await.unwrap().kind,
            FileKind::Directory
        );
        // And the mount reads back what it wrote, with its size.
        let root = m.root();
        let (text, size) = blocking(move || {
            let text = std::fs::read_to_string(root.join("notes.txt")).unwrap();
            (
                text,
                std::fs::metadata(root.join("notes.txt")).unwrap().len(),
            )
        })
        .await;
        assert_eq!((text.as_str(), size), ("one\ntwo\n", 8));
    }
}

/// A mode and a modification time set on a file still open for writing
/// (fchmod and futimens, as `cp -p` does) are what Stat over gRPC reports
/// once it is closed, and what the mount reports before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mode_and_mtime_set_while_writing_are_kept_after_close() {
    if !can_mount() {
        return;
    }
    let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for m in every_backend().await {
        let root = m.root();
        let seen = blocking(move || {
            let mut f = std::fs::File::create(root.join("run.sh")).unwrap();
            f.write_all(b"#!/bin/sh\n").unwrap();
            f.set_permissions(std::fs::Permissions::from_mode(0o750))
                .unwrap();
            f.set_modified(then).unwrap();
            let meta = f.metadata().unwrap();
            (meta.permissions().mode() & 0o777, meta.modified().unwrap())
        })
        .await;
        assert_eq!(seen, (0o750, then), "{}: the mount's own view", m.backend);
        m.synced().await;
        let meta = m.session.stat(&p("run.sh")).await.unwrap();
        assert_eq!(
            (meta.permissions.bits(), meta.modified, meta.size),
            (0o750, then, 10),
            "{}: what the API reports after close",
            m.backend
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_made_through_the_api_appear_in_the_mount() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        m.session.write_str("doc.txt", "first\n").await.unwrap();
        let file = m.path("doc.txt");
        let seen = file.clone();
        // Read once through the mount, so the kernel caches it.
        assert_eq!(
            blocking(move || std::fs::read_to_string(seen).unwrap()).await,
            "first\n"
        );
        m.session
            .write_str("doc.txt", "second, longer\n")
            .await
            .unwrap();
        let f = file.clone();
        eventually("the API's rewrite in the mount", move || {
            std::fs::read_to_string(&f).is_ok_and(|t| t == "second, longer\n")
        })
        .await;
        // A new file appears in the listing, a deleted one goes.
        let root = m.root();
        let listed = root.clone();
        // Listed once, so the kernel keeps the listing.
        let names = blocking(move || {
            assert!(!listed.join("new.txt").exists());
            names_in(&listed)
        })
        .await;
        assert!(names.contains(&"doc.txt".to_string()), "{names:?}");
        m.session.write_str("new.txt", "hi").await.unwrap();
        let r = root.clone();
        eventually("a file made through the API", move || {
            // Looked up (its absence was cached just now) and listed.
            r.join("new.txt").exists()
                && std::fs::read_dir(&r)
                    .unwrap()
                    .any(|e| e.unwrap().file_name() == "new.txt")
        })
        .await;
        m.session
            .delete(&p("doc.txt"), Default::default())
            .await
            .unwrap();
        let f = file.clone();
        eventually("a file deleted through the API", move || !f.exists()).await;
        let r = root.clone();
        eventually("a deleted file leaves the listing", move || {
            !names_in(&r).contains(&"doc.txt".to_string())
        })
        .await;
    }
}

/// The names `dir` lists in the mount.
fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_init_add_commit_status_and_checkout_work_in_the_mount() {
    if !can_mount() {
        return;
    }
    if system_tool("git").is_none() {
        assert!(
            std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "git is missing"
        );
        eprintln!("skipping: `git` is not on PATH");
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let status = blocking(move || {
            let repo = root.join("repo");
            std::fs::create_dir(&repo).unwrap();
            run(&repo, "git", &["init", "-q", "-b", "main"]);
            std::fs::write(repo.join("a.txt"), "alpha\n").unwrap();
            std::fs::create_dir(repo.join("dir")).unwrap();
            std::fs::write(repo.join("dir/b.txt"), "beta\n").unwrap();
            run(&repo, "git", &["add", "-A"]);
            run(&repo, "git", &["commit", "-q", "-m", "first"]);
            run(&repo, "git", &["checkout", "-q", "-b", "topic"]);
            std::fs::write(repo.join("a.txt"), "alpha on topic\n").unwrap();
            run(&repo, "git", &["commit", "-q", "-am", "second"]);
            run(&repo, "git", &["checkout", "-q", "main"]);
            assert_eq!(
                std::fs::read_to_string(repo.join("a.txt")).unwrap(),
                "alpha\n"
            );
            run(&repo, "git", &["status", "--porcelain"])
        })
        .await;
        assert_eq!(status, "", "{}: a clean tree after checkout", m.backend);
        m.synced().await;
        let s = &m.session;
        assert_eq!(
            s.read_to_string("repo/a.txt").await.unwrap(),
            "alpha\n",
            "{}",
            m.backend
        );
        assert_eq!(
            s.read_to_string("repo/.git/HEAD").await.unwrap(),
            "ref: refs/heads/main\n"
        );
        assert!(s.stat(&p("repo/.git/refs/heads/topic")).await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tar_extracts_a_tree_and_rm_removes_it() {
    if !can_mount() {
        return;
    }
    let source = tempfile::tempdir().unwrap();
    let tree = source.path().join("tree");
    for d in 0..8 {
        let dir = tree.join(format!("d{d}/sub"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..12 {
            std::fs::write(dir.join(format!("f{f}.txt")), format!("file {d}/{f}\n")).unwrap();
        }
    }
    std::fs::write(tree.join("big.bin"), vec![7u8; 3 << 20]).unwrap();
    let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let tool = tree.join("d3/sub/f4.txt");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&tool)
        .unwrap()
        .set_modified(then)
        .unwrap();
    std::os::unix::fs::symlink("d0/sub/f0.txt", tree.join("link")).unwrap();
    let archive = source.path().join("tree.tar");
    run(
        source.path(),
        "tar",
        &["cf", archive.to_str().unwrap(), "tree"],
    );
    for m in every_backend().await {
        let root = m.root();
        let archive = archive.clone();
        blocking(move || run(&root, "tar", &["xf", archive.to_str().unwrap()])).await;
        m.synced().await;
        let s = &m.session;
        let listing = s.list(&p("tree"), 8).await.unwrap();
        let files = listing
            .entries
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .count();
        assert_eq!(files, 8 * 12 + 1, "{}: every file arrived", m.backend);
        assert_eq!(
            s.read_to_string("tree/d5/sub/f11.txt").await.unwrap(),
            "file 5/11\n"
        );
        assert_eq!(bytes_of(s, "tree/big.bin").await, vec![7u8; 3 << 20]);
        let tool = s.stat(&p("tree/d3/sub/f4.txt")).await.unwrap();
        assert_eq!(
            (tool.permissions.bits(), tool.modified),
            (0o750, then),
            "{}: tar kept the file's mode and mtime",
            m.backend
        );
        let link = s.stat(&p("tree/link")).await.unwrap();
        assert_eq!(link.kind, FileKind::Symlink);
        assert_eq!(link.symlink_target.as_deref(), Some("d0/sub/f0.txt"));
        // The kernel follows the link on its side.
        let root = m.root();
        let through =
            blocking(move || std::fs::read_to_string(root.join("tree/link")).unwrap()).await;
        assert_eq!(through, "file 0/0\n");
        let root = m.root();
        blocking(move || run(&root, "rm", &["-rf", "tree"])).await;
        // Its unlinks and rmdirs went behind: landed once synced.
        m.synced().await;
        assert!(
            s.exists(&p("tree")).await.unwrap().is_none(),
            "{}: rm -rf removed it",
            m.backend
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_editor_style_save_replaces_the_file() {
    if !can_mount() {
        return;
    }
    let Some(python) = system_tool("python3") else {
        eprintln!("skipping: `python3` is not on PATH");
        return;
    };
    for m in every_backend().await {
        m.session
            .write_str("config.toml", "old = 1\n")
            .await
            .unwrap();
        let root = m.root();
        let python = python.clone();
        blocking(move || {
            let script = "import os\n\
                with open('.config.toml.swp', 'w') as f:\n    f.write('new = 2\\n')\n    f.flush()\n    os.fsync(f.fileno())\n\
                os.replace('.config.toml.swp', 'config.toml')\n\
                print(open('config.toml').read(), end='')\n";
            let printed = run(&root, python.to_str().unwrap(), &["-c", script]);
            assert_eq!(printed, "new = 2\n");
        })
        .await;
        assert_eq!(
            m.session.read_to_string("config.toml").await.unwrap(),
            "new = 2\n",
            "{}",
            m.backend
        );
        assert!(m
            .session
            .exists(&p(".config.toml.swp"))
            .await
            .unwrap()
            .is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_file_stays_readable_after_unlink() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        m.session
            .upload(
                "held.bin",
                std::io::Cursor::new(content.clone()),
                Default::default(),
            )
            .await
            .unwrap();
        let file = m.path("held.bin");
        let (read, exists_after) = blocking(move || {
            let mut f = std::fs::File::open(&file).unwrap();
            std::fs::remove_file(&file).unwrap();
            let exists = file.exists();
            let mut read = Vec::new();
            f.read_to_end(&mut read).unwrap();
            (read, exists)
        })
        .await;
        assert!(!exists_after, "{}: the name is gone", m.backend);
        assert_eq!(
            read, content,
            "{}: the open handle still reads it",
            m.backend
        );
        assert!(m.session.exists(&p("held.bin")).await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_small_write_into_a_big_file_changes_only_those_bytes() {
    if !can_mount() {
        return;
    }
    const SIZE: usize = 24 << 20;
    let content: Vec<u8> = (0..SIZE).map(|i| (i % 253) as u8).collect();
    for m in every_backend().await {
        m.session
            .upload(
                "big.bin",
                std::io::Cursor::new(content.clone()),
                Default::default(),
            )
            .await
            .unwrap();
        let before = m.session.stat(&p("big.bin")).await.unwrap().version;
        let file = m.path("big.bin");
        blocking(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.seek(SeekFrom::Start(10 << 20)).unwrap();
            f.write_all(b"patched").unwrap();
            f.seek(SeekFrom::Start(SIZE as u64 + 100)).unwrap();
            f.write_all(b"tail").unwrap();
        })
        .await;
        m.synced().await;
        let after = bytes_of(&m.session, "big.bin").await;
        let mut expected = content.clone();
        expected[(10 << 20)..(10 << 20) + 7].copy_from_slice(b"patched");
        expected.resize(SIZE + 100, 0);
        expected.extend_from_slice(b"tail");
        assert_eq!(after.len(), expected.len(), "{}", m.backend);
        assert!(
            after == expected,
            "{}: only the written bytes changed",
            m.backend
        );
        let version = m.session.stat(&p("big.bin")).await.unwrap().version;
        assert!(version > before, "{}: one commit at close", m.backend);
        // A truncate through the mount cuts it on the server.
        let file = m.path("big.bin");
        blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(1000)
                .unwrap()
        })
        .await;
        m.synced().await;
        assert_eq!(
            bytes_of(&m.session, "big.bin").await,
            content[..1000].to_vec()
        );
    }
}

/// The errno an operation failed with.
fn errno_of<T: std::fmt::Debug>(result: std::io::Result<T>) -> i32 {
    result
        .expect_err("the operation must fail")
        .raw_os_error()
        .expect("an errno")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_arrive_as_the_errno_programs_expect() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let backend = m.backend;
        blocking(move || {
            std::fs::create_dir(root.join("d")).unwrap();
            std::fs::write(root.join("d/f"), "x").unwrap();
            assert_eq!(
                errno_of(std::fs::remove_dir(root.join("d"))),
                libc::ENOTEMPTY,
                "{backend}"
            );
            assert_eq!(
                errno_of(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(root.join("d/f"))
                ),
                libc::EEXIST
            );
            assert_eq!(errno_of(std::fs::create_dir(root.join("d"))), libc::EEXIST);
            assert_eq!(errno_of(std::fs::remove_file(root.join("d"))), libc::EISDIR);
            assert_eq!(
                errno_of(std::fs::remove_dir(root.join("d/f"))),
                libc::ENOTDIR
            );
            assert_eq!(
                errno_of(std::fs::read_to_string(root.join("missing"))),
                libc::ENOENT
            );
            assert_eq!(
                errno_of(std::fs::hard_link(root.join("d/f"), root.join("h"))),
                libc::EPERM
            );
            let long = "n".repeat(300);
            assert_eq!(
                errno_of(std::fs::write(root.join(long), "x")),
                libc::ENAMETOOLONG
            );
            // A directory replaces only an empty one.
            std::fs::create_dir(root.join("e")).unwrap();
            assert_eq!(
                errno_of(std::fs::rename(root.join("e"), root.join("d"))),
                libc::ENOTEMPTY
            );
            std::fs::remove_file(root.join("d/f")).unwrap();
            std::fs::rename(root.join("e"), root.join("d")).unwrap();
            assert!(!root.join("e").exists());
        })
        .await;
        // The failed calls changed nothing they should not have.
        assert!(m.session.exists(&p("h")).await.unwrap().is_none());
        assert_eq!(
            m.session.stat(&p("d")).await.unwrap().kind,
            FileKind::Directory
        );
        assert!(m.session.exists(&p("e")).await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_mount_refuses_changes_with_erofs() {
    if !can_mount() {
        return;
    }
    let options = MountOptions {
        read_only: true,
        ..MountOptions::default()
    };
    let m = mounted("memory", options).await;
    m.session.write_str("kept.txt", "kept\n").await.unwrap();
    let root = m.root();
    blocking(move || {
        assert_eq!(
            std::fs::read_to_string(root.join("kept.txt")).unwrap(),
            "kept\n"
        );
        assert_eq!(
            errno_of(std::fs::write(root.join("kept.txt"), "x")),
            libc::EROFS
        );
        assert_eq!(
            errno_of(std::fs::write(root.join("new.txt"), "x")),
            libc::EROFS
        );
        assert_eq!(errno_of(std::fs::create_dir(root.join("d"))), libc::EROFS);
        assert_eq!(
            errno_of(std::fs::remove_file(root.join("kept.txt"))),
            libc::EROFS
        );
    })
    .await;
    assert_eq!(
        m.session.read_to_string("kept.txt").await.unwrap(),
        "kept\n"
    );
    assert!(m.session.exists(&p("new.txt")).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn symlinks_are_made_and_read_as_links() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let (target, mode) = blocking(move || {
            std::fs::write(root.join("real.txt"), "real\n").unwrap();
            std::os::unix::fs::symlink("real.txt", root.join("ln")).unwrap();
            let meta = std::fs::symlink_metadata(root.join("ln")).unwrap();
            (
                std::fs::read_link(root.join("ln")).unwrap(),
                meta.mode() & libc::S_IFMT,
            )
        })
        .await;
        assert_eq!(target, PathBuf::from("real.txt"));
        assert_eq!(mode, libc::S_IFLNK);
        let link = m.session.stat(&p("ln")).await.unwrap();
        assert_eq!(
            link.symlink_target.as_deref(),
            Some("real.txt"),
            "{}",
            m.backend
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_server_fails_calls_with_eio_after_the_wait() {
    if !can_mount() {
        return;
    }
    let options = giving_up_soon();
    let mut m = mounted("memory", options).await;
    m.session.write_str("a.txt", "a").await.unwrap();
    let root = m.root();
    let listed = blocking(move || std::fs::read_dir(root).unwrap().count()).await;
    assert_eq!(listed, 1);
    m.server.take().unwrap().stop().await.unwrap();
    let root = m.root();
    let failed = blocking(move || errno_of(std::fs::metadata(root.join("never-seen.txt")))).await;
    assert_eq!(failed, libc::EIO, "a lookup the server cannot answer");
    let root = m.root();
    let failed = blocking(move || errno_of(std::fs::write(root.join("new.txt"), "x"))).await;
    assert_eq!(failed, libc::EIO, "a create the server cannot answer");
}

/// A DIRECTORY session on a server whose data directory outlives it (to
/// stop it and start it again at the same address), mounted.
struct Restartable {
    data: tempfile::TempDir,
    server: TestServer,
    session: Session,
    dir: tempfile::TempDir,
    handle: MountHandle,
    _client: Client,
}

async fn restartable(options: MountOptions) -> Restartable {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .unwrap();
    let session = client.session(&info.id);
    let dir = tempfile::tempdir().unwrap();
    let handle = wsfs_client::mount::mount(session.clone(), dir.path(), options)
        .await
        .expect("mount the session");
    Restartable {
        data,
        server,
        session,
        dir,
        handle,
        _client: client,
    }
}

/// Mount options whose calls wait for an absent server one second only.
fn giving_up_soon() -> MountOptions {
    MountOptions {
        server_wait: Duration::from_secs(1),
        ..MountOptions::default()
    }
}

/// A server that restarts (same address, same data) while the mount is
/// up: a call made while it is down waits and is then answered right;
/// files committed before stay readable; new files written in the mount
/// reach the restarted server; a change made over gRPC after the restart
/// to a file the mount has cached appears in the mount (the Watch stream
/// reconnected by itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_mount_carries_on_when_its_server_restarts() {
    if !can_mount() {
        return;
    }
    let Restartable {
        data,
        server,
        session,
        dir,
        handle,
        _client,
    } = restartable(MountOptions::default()).await;
    let addr = server.addr();
    let root = dir.path().to_path_buf();

    let written = root.clone();
    blocking(move || std::fs::write(written.join("before.txt"), "committed before\n").unwrap())
        .await;
    handle.sync().await.expect("the first file lands");
    session
        .write_str("unseen.txt", "never looked up before the stop\n")
        .await
        .unwrap();

    server.stop().await.unwrap();
    let looked_up = root.clone();
    let waiting =
        tokio::task::spawn_blocking(move || std::fs::read_to_string(looked_up.join("unseen.txt")));
    // The lookup waits for the server (MountOptions::server_wait, 15 s);
    // the server comes back well within that.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the call waits for the server");
    let server = TestServer::start_on(addr, data.path(), |_| {}).await;
    let text = waiting
        .await
        .unwrap()
        .expect("answered once the server is back");
    assert_eq!(text, "never looked up before the stop\n");

    let files = root.clone();
    let before = blocking(move || {
        std::fs::write(files.join("after.txt"), "written after the restart\n").unwrap();
        std::fs::read_to_string(files.join("before.txt")).unwrap()
    })
    .await;
    assert_eq!(before, "committed before\n");
    handle.sync().await.expect("the new file lands");
    assert_eq!(
        session.read_to_string("after.txt").await.unwrap(),
        "written after the restart\n",
        "the restarted server holds the file written in the mount"
    );

    // The kernel keeps the root's listing and before.txt's attributes
    // (long TTLs, and an open would ask the server anyway): only the
    // Watch stream, reconnected, can tell the mount of these changes.
    let listed = root.clone();
    let names = blocking(move || {
        let size = std::fs::metadata(listed.join("before.txt")).unwrap().len();
        (names_in(&listed), size)
    })
    .await;
    assert!(!names.0.contains(&"from-grpc.txt".to_string()), "{names:?}");
    session
        .write_str("from-grpc.txt", "made after the restart\n")
        .await
        .unwrap();
    session
        .write_str("before.txt", "changed over gRPC after the restart\n")
        .await
        .unwrap();
    let seen = root.clone();
    eventually("changes made after the restart, in the mount", move || {
        names_in(&seen).contains(&"from-grpc.txt".to_string())
            && std::fs::metadata(seen.join("before.txt"))
                .is_ok_and(|m| m.len() == "changed over gRPC after the restart\n".len() as u64)
    })
    .await;
    handle.unmount().expect("a clean unmount");
    server.stop().await.unwrap();
}

/// A CONTAINER session mounted elsewhere: a file closed in the mount is
/// what a program in the container reads, and what a program in the
/// container writes appears in the mount (its cached listing dropped from
/// the Watch stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_program_in_the_container_and_the_mount_see_each_others_files() {
    if !can_mount() {
        return;
    }
    let m = mounted("container", MountOptions::default()).await;
    let sandbox = m._sandbox.as_ref().expect("a container");
    let root = m.root();
    let names = blocking(move || {
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.txt"), "written in the mount\n").unwrap();
        names_in(&root)
    })
    .await;
    assert_eq!(names, ["src"], "the mount lists what it made");
    m.synced().await;
    let inside = sandbox.run("cat src/main.txt && echo made inside > inside.txt");
    assert!(
        inside.status.success(),
        "{}",
        String::from_utf8_lossy(&inside.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&inside.stdout),
        "written in the mount\n",
        "the container reads the mount's file"
    );
    let root = m.root();
    eventually(
        "a file a program in the container wrote, in the mount",
        move || {
            names_in(&root).contains(&"inside.txt".to_string())
                && std::fs::read_to_string(root.join("inside.txt"))
                    .is_ok_and(|t| t == "made inside\n")
        },
    )
    .await;
}

/// A directory the mount made answers lookups of names it does not hold
/// without asking the server, yet a name made in it elsewhere — created,
/// moved in, or made in a new subdirectory — is found as soon as its
/// event arrives, and an exclusive create of a name made elsewhere is
/// still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_made_elsewhere_in_a_directory_the_mount_made_are_found() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let absent = blocking(move || {
            std::fs::create_dir(root.join("made")).unwrap();
            std::fs::write(root.join("made/own.txt"), "own\n").unwrap();
            [
                root.join("made/own.txt").exists(),
                root.join("made/x.txt").exists(),
                root.join("made/moved.txt").exists(),
                root.join("made/sub").exists(),
            ]
        })
        .await;
        assert_eq!(absent, [true, false, false, false], "{}", m.backend);
        m.synced().await;
        let s = &m.session;
        s.write_str("made/x.txt", "made over gRPC\n").await.unwrap();
        s.write_str("elsewhere.txt", "moved in\n").await.unwrap();
        s.rename(
            &p("elsewhere.txt"),
            &p("made/moved.txt"),
            Default::default(),
        )
        .await
        .unwrap();
        s.write_str("made/sub/deep.txt", "deep\n").await.unwrap();
        let root = m.root();
        eventually("names made elsewhere, found in the mount", move || {
            ["made/x.txt", "made/moved.txt", "made/sub/deep.txt"]
                .iter()
                .all(|name| root.join(name).exists())
        })
        .await;
        s.write_str("made/late.txt", "late\n").await.unwrap();
        let root = m.root();
        let exclusive = blocking(move || {
            errno_of(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(root.join("made/late.txt")),
            )
        })
        .await;
        assert_eq!(
            exclusive,
            libc::EEXIST,
            "{}: an exclusive create of a name made elsewhere is refused, whenever its event arrives",
            m.backend
        );
        assert_eq!(
            s.read_to_string("made/late.txt").await.unwrap(),
            "late\n",
            "{}: and changes nothing",
            m.backend
        );
    }
}

/// renameat2(2) with `flags`, as an io::Result.
fn rename_with(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(from.as_os_str().as_bytes()).unwrap();
    let to = std::ffi::CString::new(to.as_os_str().as_bytes()).unwrap();
    // SAFETY: two valid NUL-terminated paths, read only during the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rename_replaces_an_open_file_and_noreplace_refuses() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        m.session
            .write_str("target.txt", "old target\n")
            .await
            .unwrap();
        m.session
            .write_str("source.txt", "new content\n")
            .await
            .unwrap();
        let root = m.root();
        let backend = m.backend;
        let held = blocking(move || {
            let noreplace = rename_with(
                &root.join("source.txt"),
                &root.join("target.txt"),
                libc::RENAME_NOREPLACE,
            );
            assert_eq!(errno_of(noreplace), libc::EEXIST, "{backend}");
            let mut open = std::fs::File::open(root.join("target.txt")).unwrap();
            std::fs::rename(root.join("source.txt"), root.join("target.txt")).unwrap();
            let mut held = String::new();
            open.read_to_string(&mut held).unwrap();
            let now = std::fs::read_to_string(root.join("target.txt")).unwrap();
            assert_eq!(
                now, "new content\n",
                "{backend}: the name holds the new file"
            );
            held
        })
        .await;
        assert_eq!(
            held, "old target\n",
            "{}: the open handle keeps the replaced file",
            m.backend
        );
        assert_eq!(
            m.session.read_to_string("target.txt").await.unwrap(),
            "new content\n"
        );
        assert!(m.session.exists(&p("source.txt")).await.unwrap().is_none());
    }
}

/// Close returns before the commit lands (the write-behind); unmounting
/// right after many closes still commits every file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unmount_commits_every_queued_file() {
    if !can_mount() {
        return;
    }
    const FILES: usize = 300;
    for mut m in every_backend().await {
        let root = m.root();
        blocking(move || {
            std::fs::create_dir(root.join("many")).unwrap();
            for i in 0..FILES {
                std::fs::write(root.join(format!("many/f{i}.txt")), format!("file {i}\n")).unwrap();
            }
        })
        .await;
        m.handle.take().unwrap().unmount().unwrap();
        let listing = m.session.list(&p("many"), 1).await.unwrap();
        assert_eq!(listing.entries.len(), FILES, "{}", m.backend);
        for i in [0, FILES / 2, FILES - 1] {
            assert_eq!(
                m.session
                    .read_to_string(&format!("many/f{i}.txt"))
                    .await
                    .unwrap(),
                format!("file {i}\n"),
                "{}: committed before the unmount returned",
                m.backend
            );
        }
    }
}

/// A queued commit the server refuses (the session's quota) is not
/// dropped: the bytes stay staged and the file's next fsync reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_queued_commit_is_reported_at_the_next_fsync() {
    if !can_mount() {
        return;
    }
    let limits = SessionLimits {
        max_total_bytes: 64 * 1024,
        ..SessionLimits::default()
    };
    let m = mounted_with_limits("memory", limits, MountOptions::default()).await;
    let file = m.path("big.bin");
    let failed = blocking(move || {
        // The close may already see the refusal or not: the commit is queued.
        let _ = std::fs::write(&file, vec![1u8; 256 * 1024]);
        let reopened = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        errno_of(reopened.sync_all())
    })
    .await;
    assert_eq!(failed, libc::ENOSPC, "the quota's refusal, at fsync");
    let size = m.session.stat(&p("big.bin")).await.unwrap().size;
    assert_eq!(size, 0, "nothing of the refused commit landed");
}

/// A file with more bytes written between two commits than the session's
/// per-write limit is committed in parts, each within the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_larger_than_the_write_limit_is_committed_in_parts() {
    if !can_mount() {
        return;
    }
    const LIMIT: u64 = 1 << 20;
    let limits = SessionLimits {
        max_write_bytes: LIMIT,
        ..SessionLimits::default()
    };
    let content: Vec<u8> = (0..(5 * LIMIT + 12345)).map(|i| (i % 241) as u8).collect();
    for backend in ["memory", "directory"] {
        let m = mounted_with_limits(backend, limits, MountOptions::default()).await;
        // In the root, made on the server at open; in a directory the
        // mount made, made by the first of the commit's parts.
        for name in ["large.bin", "made/large.bin"] {
            let root = m.root();
            let written = content.clone();
            blocking(move || {
                std::fs::create_dir_all(root.join("made")).unwrap();
                let mut f = std::fs::File::create(root.join(name)).unwrap();
                f.write_all(&written).unwrap();
                f.sync_all().expect("fsync commits it in parts");
            })
            .await;
            assert!(
                bytes_of(&m.session, name).await == content,
                "{backend}: every byte of {name} landed"
            );
        }
    }
}

/// Skips (or fails under WSFS_REQUIRE_TOOLS=1) when `program` is missing.
fn tool(program: &str) -> Option<PathBuf> {
    let found = system_tool(program);
    if found.is_none() {
        eprintln!("skipping: `{program}` is not on PATH");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite3_creates_and_queries_a_database_in_the_mount() {
    if !can_mount() {
        return;
    }
    let Some(sqlite3) = tool("sqlite3") else {
        return;
    };
    let sqlite3 = sqlite3.to_str().unwrap().to_string();
    for m in every_backend().await {
        let root = m.root();
        let program = sqlite3.clone();
        let counted = blocking(move || {
            run(
                &root,
                &program,
                &[
                    "app.db",
                    "create table notes(id integer primary key, body text); \
                     insert into notes(body) values ('one'), ('two'), ('three'); \
                     update notes set body = 'TWO' where id = 2;",
                ],
            );
            run(
                &root,
                &program,
                &["app.db", "select count(*), group_concat(body) from notes;"],
            )
        })
        .await;
        assert_eq!(counted, "3|one,TWO,three\n", "{}", m.backend);
        m.synced().await;
        // The database as the API has it, queried on local disk.
        let copy = tempfile::tempdir().unwrap();
        let local = copy.path().join("app.db");
        std::fs::write(&local, bytes_of(&m.session, "app.db").await).unwrap();
        let queried = run(
            copy.path(),
            &sqlite3,
            &["app.db", "select body from notes where id = 2;"],
        );
        assert_eq!(queried, "TWO\n", "{}: the committed database", m.backend);
        assert!(m
            .session
            .exists(&p("app.db-journal"))
            .await
            .unwrap()
            .is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pytest_runs_a_small_project_in_the_mount() {
    if !can_mount() {
        return;
    }
    let Some(python) = tool("python3") else {
        return;
    };
    let has_pytest = Command::new(&python)
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_pytest {
        // pip's, not the system's: CI installs it in a later step.
        eprintln!("skipping: pytest is not installed for python3 (pip install pytest)");
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let python = python.clone();
        blocking(move || {
            let project = root.join("proj");
            std::fs::create_dir_all(project.join("tests")).unwrap();
            std::fs::write(
                project.join("calc.py"),
                "def add(a, b):\n    return a + b\n",
            )
            .unwrap();
            std::fs::write(
                project.join("tests/test_calc.py"),
                "import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n\n\
                 def test_add_negative():\n    assert calc.add(-1, 1) == 0\n",
            )
            .unwrap();
            run(
                &project,
                python.to_str().unwrap(),
                &[
                    "-m",
                    "pytest",
                    "-q",
                    "--rootdir",
                    ".",
                    "--junitxml",
                    "report.xml",
                ],
            )
        })
        .await;
        m.synced().await;
        let report = m.session.read_to_string("proj/report.xml").await.unwrap();
        assert!(
            report.contains(r#"tests="2""#) && report.contains(r#"failures="0""#),
            "{}: {report}",
            m.backend
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cargo_builds_and_runs_a_small_crate_in_the_mount() {
    if !can_mount() {
        return;
    }
    let Some(cargo) = tool("cargo") else {
        return;
    };
    for m in every_backend().await {
        let root = m.root();
        let cargo = cargo.clone();
        let printed = blocking(move || {
            let krate = root.join("hello");
            std::fs::create_dir_all(krate.join("src")).unwrap();
            std::fs::write(
                krate.join("Cargo.toml"),
                "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            )
            .unwrap();
            std::fs::write(
                krate.join("src/main.rs"),
                "fn main() {\n    println!(\"hello from the mount\");\n}\n",
            )
            .unwrap();
            let out = Command::new(&cargo)
                .args(["build", "--offline", "--quiet"])
                .current_dir(&krate)
                .env("CARGO_TARGET_DIR", krate.join("target"))
                .env_remove("RUSTFLAGS")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cargo build failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            run(&krate, "./target/debug/hello", &[])
        })
        .await;
        assert_eq!(printed, "hello from the mount\n", "{}", m.backend);
        m.synced().await;
        let binary = m
            .session
            .stat(&p("hello/target/debug/hello"))
            .await
            .unwrap();
        assert!(
            binary.size > 0 && binary.permissions.bits() & 0o100 != 0,
            "{}: the built program, executable, through the API",
            m.backend
        );
    }
}

/// A create in a directory the mount made is answered by the mount and
/// made on the server by the file's first commit, exclusively: a file
/// made over gRPC in between wins, nothing of it is overwritten, and the
/// loser hears EEXIST at fsync (or, after a close, on the mount's stderr)
/// while the name shows the winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_create_losing_to_a_grpc_create_fails_and_overwrites_nothing() {
    if !can_mount() {
        return;
    }
    for backend in ["memory", "directory"] {
        let m = mounted(backend, MountOptions::default()).await;
        let root = m.root();
        // Open, not yet written: the mount answered the create itself.
        let (synced, closed) = blocking(move || {
            std::fs::create_dir(root.join("d")).unwrap();
            let synced = std::fs::File::create(root.join("d/synced.txt")).unwrap();
            let closed = std::fs::File::create(root.join("d/closed.txt")).unwrap();
            (synced, closed)
        })
        .await;
        let s = &m.session;
        for name in ["d/synced.txt", "d/closed.txt"] {
            s.write_str(name, "theirs\n").await.unwrap();
        }
        let fsynced = blocking(move || {
            let (mut synced, mut closed) = (synced, closed);
            synced.write_all(b"mine\n").unwrap();
            let fsynced = errno_of(synced.sync_all());
            closed.write_all(b"mine\n").unwrap();
            drop(closed);
            fsynced
        })
        .await;
        assert_eq!(fsynced, libc::EEXIST, "{backend}: the loser's fsync");
        m.synced().await;
        for name in ["d/synced.txt", "d/closed.txt"] {
            assert_eq!(
                s.read_to_string(name).await.unwrap(),
                "theirs\n",
                "{backend}: {name} is the file made over gRPC"
            );
            let path = m.path(name);
            eventually("the mount shows the winner", move || {
                std::fs::read_to_string(&path).is_ok_and(|text| text == "theirs\n")
            })
            .await;
        }
    }
}

/// A create answered by the mount is on the server before anything that
/// needs it there: a listing, a rename, an open from another client
/// after close (close-to-open), an exclusive create of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_create_reaches_the_server_before_what_depends_on_it() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let root = m.root();
        let backend = m.backend;
        blocking(move || {
            std::fs::create_dir(root.join("d")).unwrap();
            let mut open = std::fs::File::create(root.join("d/open.txt")).unwrap();
            open.write_all(b"open\n").unwrap();
            // Listed while still open: made on the server first.
            assert!(names_in(&root.join("d")).contains(&"open.txt".to_string()));
            std::fs::write(root.join("d/empty.txt"), "").unwrap();
            std::fs::rename(root.join("d/empty.txt"), root.join("d/renamed.txt")).unwrap();
            assert_eq!(
                errno_of(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(root.join("d/renamed.txt"))
                ),
                libc::EEXIST,
                "{backend}"
            );
            std::fs::write(root.join("d/gone.txt"), "never sent\n").unwrap();
            std::fs::remove_file(root.join("d/gone.txt")).unwrap();
            drop(open);
        })
        .await;
        m.synced().await;
        let s = &m.session;
        assert_eq!(s.read_to_string("d/open.txt").await.unwrap(), "open\n");
        assert_eq!(s.read_to_string("d/renamed.txt").await.unwrap(), "");
        assert!(s.exists(&p("d/empty.txt")).await.unwrap().is_none());
        assert!(s.exists(&p("d/gone.txt")).await.unwrap().is_none());
    }
}

/// Unlinks go behind (answered once the Delete is on its way), ordered
/// before whatever depends on the name: a file deleted over gRPC first is
/// not an error, a name made again at once is the new file, and an rm -rf
/// leaves nothing once it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_unlinks_are_ordered_before_what_depends_on_them() {
    if !can_mount() {
        return;
    }
    for m in every_backend().await {
        let s = &m.session;
        for i in 0..40 {
            s.write_str(&format!("t/sub/f{i}.txt"), "x\n")
                .await
                .unwrap();
        }
        s.write_str("t/raced.txt", "x\n").await.unwrap();
        s.write_str("t/again.txt", "old\n").await.unwrap();
        let root = m.root();
        blocking(move || {
            // The mount learns every name and kind.
            assert_eq!(names_in(&root.join("t/sub")).len(), 40);
            assert!(root.join("t/raced.txt").exists());
            assert!(root.join("t/again.txt").exists());
        })
        .await;
        s.delete(&p("t/raced.txt"), Default::default())
            .await
            .unwrap();
        let root = m.root();
        let backend = m.backend;
        blocking(move || {
            // The Watch stream may or may not have told the mount yet:
            // either way the file is gone, as asked, and nothing fails.
            let raced = std::fs::remove_file(root.join("t/raced.txt"));
            let raced = raced.map_err(|e| e.raw_os_error());
            assert!(
                matches!(raced, Ok(()) | Err(Some(libc::ENOENT))),
                "{backend}: {raced:?}"
            );
            std::fs::remove_file(root.join("t/again.txt")).unwrap();
            std::fs::write(root.join("t/again.txt"), "new\n").unwrap();
            run(&root, "rm", &["-rf", "t/sub"]);
            assert!(!root.join("t/sub").exists(), "{backend}");
            let dir = std::fs::File::open(root.join("t")).unwrap();
            dir.sync_all().expect("no Delete in it was refused");
        })
        .await;
        assert!(
            s.exists(&p("t/sub")).await.unwrap().is_none(),
            "{}",
            m.backend
        );
        m.synced().await;
        assert_eq!(s.read_to_string("t/again.txt").await.unwrap(), "new\n");
    }
}

/// An unlink refused by a zone (a swarm session mounted by one caller,
/// removing another's file) was answered before the refusal came: the
/// refusal is the error of the directory's next fsync (and rmdir), the
/// file stays on the server and shows in the mount again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unlink_refused_by_a_zone_is_reported_and_the_file_stays() {
    if !can_mount() {
        return;
    }
    const ADMIN: &str = "admin-token-for-tests-0123456789";
    let server = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let admin = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let options = SessionOptions::memory()
        .layout(wsfs_client::Layout::Swarm)
        .seed_file("home/bob/plan.md", "bob's plan\n");
    let (system, info) = admin.create(options).await.unwrap();
    let alice = admin.issue_token(&info.id, "alice").await.unwrap().token;
    let session = admin.session(&info.id).with_token(&alice).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handle = wsfs_client::mount::mount(session, dir.path(), MountOptions::default())
        .await
        .expect("mount the session as alice");
    let root = dir.path().to_path_buf();
    let (removed, fsynced) = blocking(move || {
        let plan = root.join("home/bob/plan.md");
        assert!(plan.exists(), "alice may read bob's plan");
        let removed = std::fs::remove_file(&plan).map_err(|e| e.raw_os_error());
        let dir = std::fs::File::open(root.join("home/bob")).unwrap();
        (removed, errno_of(dir.sync_all()))
    })
    .await;
    assert_eq!(removed, Ok(()), "answered before the refusal came");
    assert_eq!(
        fsynced,
        libc::EACCES,
        "the zone's refusal, at the directory's fsync"
    );
    assert_eq!(
        system.read_to_string("home/bob/plan.md").await.unwrap(),
        "bob's plan\n",
        "nothing changed"
    );
    let plan = dir.path().join("home/bob/plan.md");
    eventually("the file shows in the mount again", move || {
        std::fs::read_to_string(&plan).is_ok_and(|text| text == "bob's plan\n")
    })
    .await;
    handle.unmount().unwrap();
}

/// The unmount waits for the unlinks on their way: every one has landed
/// when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unmount_waits_for_queued_unlinks() {
    if !can_mount() {
        return;
    }
    const FILES: usize = 200;
    for backend in ["memory", "directory"] {
        let mut m = mounted(backend, MountOptions::default()).await;
        for i in 0..FILES {
            m.session
                .write_str(&format!("many/f{i}.txt"), "x\n")
                .await
                .unwrap();
        }
        let root = m.root();
        blocking(move || {
            for name in names_in(&root.join("many")) {
                std::fs::remove_file(root.join("many").join(name)).unwrap();
            }
        })
        .await;
        m.handle.take().unwrap().unmount().unwrap();
        let listing = m.session.list(&p("many"), 1).await.unwrap();
        assert!(
            listing.entries.is_empty(),
            "{backend}: {:?}",
            listing.entries
        );
    }
}

/// A directory's mode and modification time set in the mount (as `tar x`
/// sets them after its files) and an rmdir of a directory the mount made
/// are answered at once and sent behind: the mount shows them at once,
/// the API once the parent directory's fsync returns, and whatever
/// depends on the path (a mkdir of the same name, a file in it) waits for
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn directory_changes_behind_are_ordered_before_what_depends_on_them() {
    if !can_mount() {
        return;
    }
    let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    for m in every_backend().await {
        let root = m.root();
        let seen = blocking(move || {
            std::fs::create_dir_all(root.join("t/a/b")).unwrap();
            std::fs::create_dir_all(root.join("t/gone/deeper")).unwrap();
            std::fs::write(root.join("t/a/b/f.txt"), "f\n").unwrap();
            std::fs::set_permissions(root.join("t/a/b"), std::fs::Permissions::from_mode(0o700))
                .unwrap();
            let a = std::fs::File::open(root.join("t/a")).unwrap();
            a.set_modified(then).unwrap();
            let b = std::fs::metadata(root.join("t/a/b")).unwrap();
            let a = a.metadata().unwrap();
            run(&root, "rm", &["-rf", "t/gone"]);
            let gone = root.join("t/gone").exists();
            // The same name again at once, and a file in it.
            std::fs::create_dir(root.join("t/gone")).unwrap();
            std::fs::write(root.join("t/gone/new.txt"), "new\n").unwrap();
            let t = std::fs::File::open(root.join("t")).unwrap();
            t.sync_all().expect("no change in it was refused");
            std::fs::File::open(root.join("t/a"))
                .unwrap()
                .sync_all()
                .unwrap();
            (b.permissions().mode() & 0o777, a.modified().unwrap(), gone)
        })
        .await;
        assert_eq!(
            seen,
            (0o700, then, false),
            "{}: the mount's view",
            m.backend
        );
        let s = &m.session;
        let b = s.stat(&p("t/a/b")).await.unwrap();
        assert_eq!(b.permissions.bits(), 0o700, "{}: after fsync", m.backend);
        assert_eq!(
            s.stat(&p("t/a")).await.unwrap().modified,
            then,
            "{}",
            m.backend
        );
        assert!(
            s.exists(&p("t/gone/deeper")).await.unwrap().is_none(),
            "{}: removed before the new directory was made",
            m.backend
        );
        m.synced().await;
        assert_eq!(s.read_to_string("t/gone/new.txt").await.unwrap(), "new\n");
        assert_eq!(s.read_to_string("t/a/b/f.txt").await.unwrap(), "f\n");
    }
}

/// Directory changes sent behind that the server never takes (it is down
/// for longer than the mount waits) were answered already: the refusal is
/// the error of the parent directory's next fsync, and once the server is
/// back the mount shows the directory as the server holds it (the removed
/// one there again, the mode unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_directory_changes_are_reported_and_undone() {
    if !can_mount() {
        return;
    }
    let options = giving_up_soon();
    let Restartable {
        data,
        server,
        session,
        dir,
        handle,
        _client,
    } = restartable(options).await;
    let addr = server.addr();
    let root = dir.path().to_path_buf();
    let made = root.clone();
    blocking(move || {
        std::fs::create_dir_all(made.join("t/gone")).unwrap();
        std::fs::create_dir_all(made.join("t/kept")).unwrap();
        std::fs::set_permissions(made.join("t/kept"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::File::open(made.join("t"))
            .unwrap()
            .sync_all()
            .unwrap();
    })
    .await;
    // A directory made elsewhere: the mount knows its names once it
    // lists it.
    session.write_str("t/listed/f.txt", "f\n").await.unwrap();
    // The events of those calls have reached the mount (they come in
    // order) and the kernel holds the attributes it checks permissions
    // with: nothing below needs the server before the changes are sent.
    session.write_str("marker.txt", "x").await.unwrap();
    let seen = root.clone();
    eventually("the marker's event", move || {
        seen.join("marker.txt").exists()
    })
    .await;
    let looked = root.clone();
    blocking(move || {
        for dir in ["t", "t/gone", "t/kept", "t/listed"] {
            std::fs::metadata(looked.join(dir)).unwrap();
        }
        assert_eq!(names_in(&looked.join("t/listed")), ["f.txt"]);
    })
    .await;
    server.stop().await.unwrap();
    let changed = root.clone();
    let (removed, moded, fsynced) = blocking(move || {
        let emptied = std::fs::remove_file(changed.join("t/listed/f.txt"))
            .and_then(|()| std::fs::remove_dir(changed.join("t/listed")));
        assert!(emptied.is_ok(), "a listed directory emptied: {emptied:?}");
        let removed = std::fs::remove_dir(changed.join("t/gone")).map_err(|e| e.raw_os_error());
        let moded = std::fs::set_permissions(
            changed.join("t/kept"),
            std::fs::Permissions::from_mode(0o700),
        )
        .map_err(|e| e.raw_os_error());
        let t = std::fs::File::open(changed.join("t")).unwrap();
        (removed, moded, errno_of(t.sync_all()))
    })
    .await;
    assert_eq!(removed, Ok(()), "the rmdir was answered before it was sent");
    assert_eq!(moded, Ok(()), "the chmod was answered before it was sent");
    assert_eq!(fsynced, libc::EIO, "the refusal, at the parent's fsync");
    let server = TestServer::start_on(addr, data.path(), |_| {}).await;
    let shown = root.clone();
    eventually(
        "the mount shows the server's directories again",
        move || {
            std::fs::metadata(shown.join("t/gone")).is_ok_and(|m| m.is_dir())
                && std::fs::read_to_string(shown.join("t/listed/f.txt"))
                    .is_ok_and(|text| text == "f\n")
                && std::fs::metadata(shown.join("t/kept"))
                    .is_ok_and(|m| m.permissions().mode() & 0o777 == 0o755)
        },
    )
    .await;
    assert!(session.exists(&p("t/gone")).await.unwrap().is_some());
    let kept = session.stat(&p("t/kept")).await.unwrap();
    assert_eq!(kept.permissions.bits(), 0o755, "nothing changed");
    let t = root.clone();
    blocking(move || {
        let t = std::fs::File::open(t.join("t")).unwrap();
        t.sync_all().expect("a refusal is reported once");
    })
    .await;
    handle.unmount().expect("a clean unmount");
    server.stop().await.unwrap();
}

/// The unmount waits for the directory changes on their way: every rmdir
/// and chmod has landed when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unmount_waits_for_queued_directory_changes() {
    if !can_mount() {
        return;
    }
    const DIRS: usize = 150;
    for backend in ["memory", "directory"] {
        let mut m = mounted(backend, MountOptions::default()).await;
        let root = m.root();
        blocking(move || {
            for i in 0..DIRS {
                std::fs::create_dir_all(root.join(format!("many/d{i}/sub"))).unwrap();
            }
            std::fs::create_dir(root.join("many/kept")).unwrap();
            for i in 0..DIRS {
                std::fs::remove_dir(root.join(format!("many/d{i}/sub"))).unwrap();
                std::fs::remove_dir(root.join(format!("many/d{i}"))).unwrap();
            }
            std::fs::set_permissions(
                root.join("many/kept"),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
        })
        .await;
        m.handle.take().unwrap().unmount().unwrap();
        let listing = m.session.list(&p("many"), 1).await.unwrap();
        let names: Vec<&str> = listing.entries.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["kept"], "{backend}");
        assert_eq!(listing.entries[0].permissions.bits(), 0o700, "{backend}");
    }
}

/// Opens `dir` and reads its first entry only, as `rm` does to see
/// whether a directory is empty: the kernel keeps no listing read in part,
/// and the mount keeps it for the directory's next opens.
fn glance(dir: &Path) {
    let mut entries = std::fs::read_dir(dir).unwrap();
    assert!(entries.next().is_some(), "'{}' is empty", dir.display());
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names = names_in(dir);
    names.sort();
    names
}

/// The kernel opens directories by itself and reads a listing in pieces,
/// each from the mount's listing of the directory as the read from its
/// first entry found it: a large directory (some forty pieces) read by
/// two readers in turn, and one read while a name is made in it through
/// the mount, shows every name once, and the next read the new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_read_in_pieces_shows_every_name_once() {
    use futures::StreamExt as _;
    if !can_mount() {
        return;
    }
    const FILES: usize = 1_500;
    for backend in ["memory", "directory"] {
        let m = mounted(backend, MountOptions::default()).await;
        let long = "x".repeat(70);
        let names: Vec<String> = (0..FILES).map(|i| format!("f{i:05}-{long}")).collect();
        futures::stream::iter(names.clone())
            .for_each_concurrent(16, |name| {
                let s = m.session.clone();
                async move {
                    s.write_str(&format!("big/{name}"), "").await.unwrap();
                }
            })
            .await;
        let dir = m.path("big");
        blocking(move || {
            let expected: std::collections::BTreeSet<String> = names.into_iter().collect();
            let name = |e: std::io::Result<std::fs::DirEntry>| {
                e.unwrap().file_name().to_string_lossy().into_owned()
            };
            let every_name_once = |who: &str, seen: &[String]| {
                assert_eq!(
                    seen.len(),
                    FILES,
                    "{backend}: {who} read {} names",
                    seen.len()
                );
                let set: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
                assert!(set == expected, "{backend}: {who} read other names");
            };
            let mut first = std::fs::read_dir(&dir).unwrap();
            let mut seen_first: Vec<String> = (&mut first).take(100).map(name).collect();
            let second: Vec<String> = std::fs::read_dir(&dir).unwrap().map(name).collect();
            seen_first.extend(first.map(name));
            every_name_once("the first reader", &seen_first);
            every_name_once("the second reader", &second);

            let mut third = std::fs::read_dir(&dir).unwrap();
            let mut seen: Vec<String> = (&mut third).take(100).map(name).collect();
            std::fs::write(dir.join("zz-new"), "").unwrap();
            seen.extend(third.map(name));
            seen.retain(|n| n != "zz-new");
            every_name_once("a reader while a name was made", &seen);
            assert!(
                names_in(&dir).contains(&"zz-new".to_string()),
                "{backend}: the next read shows the new name"
            );
        })
        .await;
    }
}

/// A directory the mount made is listed from what the mount knows (no
/// List): its entries with their kinds, lengths and bits, a file still
/// being written among them; a name made or removed through the API
/// shows in the next listing once the mount has heard of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_made_here_lists_what_it_holds_and_changes_made_elsewhere() {
    if !can_mount() {
        return;
    }
    for backend in ["memory", "directory"] {
        let m = mounted(backend, MountOptions::default()).await;
        let dir = m.path("made");
        let d = dir.clone();
        let open = blocking(move || {
            std::fs::create_dir(&d).unwrap();
            std::fs::create_dir(d.join("sub")).unwrap();
            std::fs::write(d.join("a.txt"), "aaa").unwrap();
            std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
            std::fs::set_permissions(d.join("a.txt"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            let mut open = std::fs::File::create(d.join("open.txt")).unwrap();
            open.write_all(b"12345").unwrap();
            let mut seen: Vec<(String, &str, u64, u32)> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let meta = std::fs::symlink_metadata(e.path()).unwrap();
                    let kind = if meta.is_dir() {
                        "dir"
                    } else if meta.is_symlink() {
                        "link"
                    } else {
                        "file"
                    };
                    let len = if meta.is_dir() { 0 } else { meta.len() };
                    let mode = meta.permissions().mode() & 0o777;
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        kind,
                        len,
                        mode,
                    )
                })
                .collect();
            seen.sort();
            assert_eq!(
                seen.iter()
                    .map(|(n, k, l, _)| (n.as_str(), *k, *l))
                    .collect::<Vec<_>>(),
                [
                    ("a.txt", "file", 3),
                    ("link", "link", 5),
                    ("open.txt", "file", 5),
                    ("sub", "dir", 0)
                ],
                "{backend}"
            );
            assert_eq!(seen[0].3, 0o600, "{backend}: a.txt's bits");
            open
        })
        .await;
        drop(open);
        m.synced().await;
        m.session.write_str("made/api.txt", "x").await.unwrap();
        m.session
            .delete(&p("made/a.txt"), Default::default())
            .await
            .unwrap();
        let d = dir.clone();
        eventually("the API's create and delete in the listing", move || {
            let names = sorted_names(&d);
            names == ["api.txt", "link", "open.txt", "sub"]
        })
        .await;
    }
}

/// The listing of a directory the mount made needs no server: read for
/// the first time while the server is stopped, it shows what the mount
/// made there; a directory the mount did not make is listed by the
/// server, and fails with EIO.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directory_made_here_is_listed_without_the_server() {
    if !can_mount() {
        return;
    }
    let mut m = mounted("memory", giving_up_soon()).await;
    m.session.write_str("elsewhere/x.txt", "x").await.unwrap();
    let root = m.root();
    blocking(move || {
        std::fs::create_dir_all(root.join("made/sub")).unwrap();
        std::fs::write(root.join("made/a.txt"), "a").unwrap();
        // Looked up, not listed: the kernel holds no listing of either.
        assert!(root.join("elsewhere").is_dir());
    })
    .await;
    m.synced().await;
    m.server.take().unwrap().stop().await.unwrap();
    let root = m.root();
    let (made, elsewhere) = blocking(move || {
        (
            sorted_names(&root.join("made")),
            errno_of(
                std::fs::read_dir(root.join("elsewhere"))
                    .and_then(|entries| entries.collect::<std::io::Result<Vec<_>>>()),
            ),
        )
    })
    .await;
    assert_eq!(made, ["a.txt", "sub"]);
    assert_eq!(elsewhere, libc::EIO, "a directory the server must list");
}

/// `rm -rf` opens each directory twice in a row and the mount lists it
/// once; a listing kept so never outlives a change in its directory: one
/// made through the mount (a name removed, made or renamed, an entry's
/// mode) or elsewhere, once the mount has heard of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listing_kept_for_the_next_open_shows_every_change_since() {
    if !can_mount() {
        return;
    }
    for backend in ["memory", "directory"] {
        let m = mounted(backend, MountOptions::default()).await;
        let s = &m.session;
        for name in ["a", "b", "c", "d"] {
            s.write_str(&format!("l/{name}.txt"), "x\n").await.unwrap();
        }
        s.write_str("marker.txt", "1\n").await.unwrap();
        let root = m.root();
        blocking(move || {
            let l = root.join("l");
            let names =
                |names: &[&str]| names.iter().map(|n| format!("{n}.txt")).collect::<Vec<_>>();
            // First, while the kernel has read the directory in part only
            // (a change of a name drops what it read; a chmod does not).
            glance(&l);
            std::fs::set_permissions(l.join("c.txt"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            assert_eq!(sorted_names(&l).len(), 4);
            let mode = std::fs::metadata(l.join("c.txt"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{backend}: chmod");
            glance(&l);
            std::fs::remove_file(l.join("a.txt")).unwrap();
            assert_eq!(
                sorted_names(&l),
                names(&["b", "c", "d"]),
                "{backend}: unlink"
            );
            glance(&l);
            std::fs::write(l.join("e.txt"), "e\n").unwrap();
            assert_eq!(
                sorted_names(&l),
                names(&["b", "c", "d", "e"]),
                "{backend}: create"
            );
            glance(&l);
            std::fs::rename(l.join("b.txt"), l.join("f.txt")).unwrap();
            assert_eq!(
                sorted_names(&l),
                names(&["c", "d", "e", "f"]),
                "{backend}: rename"
            );
        })
        .await;
        // The marker's length is the kernel's until its change event drops
        // it, and events arrive in order: once the mount shows the new
        // length, every event before it (the mount's own changes above)
        // has arrived.
        let marked = |len: u64| {
            let marker = m.path("marker.txt");
            eventually("the marker's change", move || {
                std::fs::metadata(&marker).unwrap().len() == len
            })
        };
        // The commits of the files written above land first.
        m.synced().await;
        s.write_str("marker.txt", "22\n").await.unwrap();
        marked(3).await;
        let l = m.path("l");
        blocking(move || glance(&l)).await;
        s.delete(&p("l/d.txt"), Default::default()).await.unwrap();
        s.write_str("marker.txt", "333\n").await.unwrap();
        marked(4).await;
        let l = m.path("l");
        let names = blocking(move || sorted_names(&l)).await;
        assert_eq!(names, ["c.txt", "e.txt", "f.txt"], "{backend}: elsewhere");
    }
}

/// Extended attributes are refused with `ENOTSUP`, the first time (the
/// mount answers) and after (the kernel stops asking and answers itself),
/// and files are still written once it does: the kernel's own getxattr of
/// `security.capability` before each write is refused so too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extended_attributes_are_refused_with_enotsup_every_time() {
    if !can_mount() {
        return;
    }
    let m = mounted("memory", MountOptions::default()).await;
    let file = m.path("x.txt");
    blocking(move || {
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(file.as_os_str().as_bytes()).unwrap();
        let name = c"user.wsfs";
        for round in 0..2 {
            std::fs::write(&file, format!("round {round}\n")).unwrap();
            let mut buf = [0u8; 64];
            let refused = |result: isize| {
                let errno = std::io::Error::last_os_error().raw_os_error();
                (result == -1).then_some(errno).flatten()
            };
            // SAFETY (each call): a valid NUL-terminated path and name, and
            // a buffer of the length given.
            let errnos = [
                refused(unsafe {
                    libc::getxattr(c_path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64)
                }),
                refused(unsafe {
                    libc::setxattr(c_path.as_ptr(), name.as_ptr(), buf.as_ptr().cast(), 1, 0)
                        as isize
                }),
                refused(unsafe { libc::listxattr(c_path.as_ptr(), buf.as_mut_ptr().cast(), 64) }),
                refused(unsafe { libc::removexattr(c_path.as_ptr(), name.as_ptr()) as isize }),
            ];
            assert_eq!(errnos, [Some(libc::ENOTSUP); 4], "round {round}");
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                format!("round {round}\n")
            );
        }
    })
    .await;
}

/// The mount's own creates, commits and mkdirs come back to it as change
/// events, often before their answers: none of them drops
/// what the kernel was told (that cost a Stat per file afterwards, and
/// made git read back every file it had just checked out). With the server
/// gone, the kernel still answers `stat` of every file and directory the
/// mount wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_mounts_own_changes_keep_what_the_kernel_was_told() {
    if !can_mount() {
        return;
    }
    let options = giving_up_soon();
    let Restartable {
        data: _data,
        server,
        session,
        dir,
        handle,
        _client,
    } = restartable(options).await;
    let root = dir.path().to_path_buf();
    session.write_str("m/marker.txt", "1\n").await.unwrap();
    let files = root.clone();
    blocking(move || {
        assert_eq!(
            std::fs::metadata(files.join("m/marker.txt")).unwrap().len(),
            2
        );
        for d in 0..10 {
            let sub = files.join(format!("d{d}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..10 {
                // Half made with O_EXCL (decided by the server), half
                // answered by the mount and made by their first commit.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(f % 2 == 0)
                    .create_new(f % 2 == 1)
                    .truncate(f % 2 == 0)
                    .open(sub.join(format!("f{f}.txt")))
                    .unwrap();
                file.write_all("x".repeat(f + 1).as_bytes()).unwrap();
            }
        }
    })
    .await;
    handle.sync().await.expect("every file lands");
    // Events arrive in order: once the marker's change shows, every event
    // of the mount's own changes above has arrived.
    session.write_str("m/marker.txt", "22\n").await.unwrap();
    // (In a directory of its own: a change in a directory makes the kernel
    // look up that directory's other entries again.)
    let marker = root.join("m/marker.txt");
    eventually("the marker's change", move || {
        std::fs::metadata(&marker).unwrap().len() == 3
    })
    .await;
    server.stop().await.unwrap();
    let files = root.clone();
    let seen = blocking(move || {
        let mut wrong = Vec::new();
        for d in 0..10 {
            let sub = files.join(format!("d{d}"));
            match std::fs::metadata(&sub) {
                Ok(m) if m.is_dir() => {}
                other => wrong.push(format!("d{d}: {other:?}")),
            }
            for f in 0..10 {
                match std::fs::metadata(sub.join(format!("f{f}.txt"))) {
                    Ok(m) if m.len() == f + 1 => {}
                    other => wrong.push(format!("d{d}/f{f}.txt: {other:?}")),
                }
            }
        }
        wrong
    })
    .await;
    assert!(seen.is_empty(), "asked the server again: {seen:#?}");
    drop(handle);
}

/// How many of the pages of the file at `path` the kernel holds, of how
/// many it has (`mincore` on a mapping of it; opening it is an open the
/// mount answers).
fn resident_pages(path: &Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let page = 4096;
    let pages = len.div_ceil(page);
    // SAFETY: a read-only shared mapping of an open file, unmapped below;
    // mincore writes one byte per page into `held`, which has them all.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED, "mmap {}", path.display());
        let mut held = vec![0u8; pages];
        assert_eq!(libc::mincore(at, len, held.as_mut_ptr()), 0);
        libc::munmap(at, len);
        (held.iter().filter(|b| *b & 1 == 1).count(), pages)
    }
}

/// A file the mount renames keeps the pages the kernel holds of it: its
/// next open (which asks the server for the file's version) keeps them,
/// a handle opened before reads on from them with the server gone, and
/// the rename's own event drops nothing. A file changed elsewhere and
/// then renamed by the mount shows the change, whichever comes first at
/// the mount, the rename or the change's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_renamed_in_the_mount_keeps_its_cached_pages() {
    if !can_mount() {
        return;
    }
    let Restartable {
        data: _data,
        server,
        session,
        dir,
        handle,
        _client,
    } = restartable(giving_up_soon()).await;
    let root = dir.path().to_path_buf();
    let body: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
    let (files, written) = (root.clone(), body.clone());
    let mut kept = blocking(move || {
        std::fs::write(files.join("a.bin"), &written).unwrap();
        let mut kept = std::fs::File::open(files.join("a.bin")).unwrap();
        let mut read = Vec::new();
        kept.read_to_end(&mut read).unwrap();
        assert_eq!(read, written);
        std::fs::rename(files.join("a.bin"), files.join("b.bin")).unwrap();
        kept
    })
    .await;
    handle.sync().await.expect("every change lands");
    // Events arrive in order: once the marker's change shows, the
    // rename's event has been judged.
    session.write_str("m/marker.txt", "22\n").await.unwrap();
    let marker = root.join("m/marker.txt");
    eventually("the marker's change", move || {
        std::fs::metadata(&marker).is_ok_and(|m| m.len() == 3)
    })
    .await;
    let moved = root.join("b.bin");
    let (held, pages) = blocking(move || resident_pages(&moved)).await;
    assert_eq!(held, pages, "pages of the renamed file dropped");

    // Changed over gRPC, then renamed in the mount: the new bytes, never
    // the pages of the old ones.
    for round in 0..5 {
        let (from, to) = (format!("c{round}.bin"), format!("d{round}.bin"));
        session.write_str(&from, "old\n").await.unwrap();
        let (files, name) = (root.clone(), from.clone());
        blocking(move || assert_eq!(std::fs::read(files.join(name)).unwrap(), b"old\n")).await;
        session.write_str(&from, "new bytes\n").await.unwrap();
        let files = root.clone();
        let read = blocking(move || {
            std::fs::rename(files.join(&from), files.join(&to)).unwrap();
            std::fs::read(files.join(&to)).unwrap()
        })
        .await;
        assert_eq!(read, b"new bytes\n", "round {round}");
    }

    server.stop().await.unwrap();
    let read = blocking(move || {
        let mut read = Vec::new();
        kept.seek(SeekFrom::Start(0)).unwrap();
        kept.read_to_end(&mut read).map(|_| read)
    })
    .await;
    assert_eq!(
        read.expect("read from the kept pages with the server gone"),
        body
    );
    drop(handle);
}

/// Files written through the mount are read back from the kernel's page
/// cache, every byte, even the last short page that no write filled whole
/// (the mount gives it to the kernel when the file's staging ends): with
/// the server gone, they still read in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_written_in_the_mount_reads_back_without_the_server() {
    if !can_mount() {
        return;
    }
    let Restartable {
        data: _data,
        server,
        session: _session,
        dir,
        handle,
        _client,
    } = restartable(giving_up_soon()).await;
    let root = dir.path().to_path_buf();
    let body = |len: usize| -> Vec<u8> { (0..len).map(|i| (i % 253) as u8).collect() };
    // One write each, but for the last: short pieces, none a whole page.
    let files: Vec<(String, Vec<u8>)> = [100, 10_000, 8192, 70_000, 200_000]
        .into_iter()
        .map(|len| (format!("w{len}.bin"), body(len)))
        .chain(std::iter::once(("pieces.bin".to_string(), body(9_999))))
        .collect();
    let (at, written) = (root.clone(), files.clone());
    blocking(move || {
        for (name, bytes) in &written {
            let mut file = std::fs::File::create(at.join(name)).unwrap();
            if name == "pieces.bin" {
                for piece in bytes.chunks(33) {
                    file.write_all(piece).unwrap();
                }
            } else {
                file.write_all(bytes).unwrap();
            }
        }
    })
    .await;
    handle.sync().await.expect("every change lands");
    // Opened once the files' stagings are gone: read from nothing else.
    let (at, names) = (root.clone(), files.clone());
    let kept = blocking(move || {
        names
            .iter()
            .map(|(name, _)| std::fs::File::open(at.join(name)).unwrap())
            .collect::<Vec<_>>()
    })
    .await;
    server.stop().await.unwrap();
    let read = blocking(move || {
        kept.into_iter()
            .map(|mut file| {
                let mut read = Vec::new();
                file.read_to_end(&mut read).map(|_| read)
            })
            .collect::<Vec<_>>()
    })
    .await;
    for ((name, bytes), read) in files.iter().zip(read) {
        let read = read.unwrap_or_else(|e| panic!("{name} read from the server: {e}"));
        assert!(read == *bytes, "{name}: other bytes read back");
    }
    drop(handle);
}

/// A file whose pages the mount holds, changed where the mount cannot hear
/// of it (on the server's disk while the server is down), then renamed in
/// the mount before its Watch stream is back: the rename's version check
/// fails, the file is renamed all the same, and its new name reads the
/// new bytes, not the pages of the old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_changed_unseen_then_renamed_in_the_mount_reads_its_new_bytes() {
    if !can_mount() {
        return;
    }
    let Restartable {
        data,
        server,
        session,
        dir,
        handle,
        _client,
    } = restartable(MountOptions::default()).await;
    let addr = server.addr();
    let root = dir.path().to_path_buf();
    session.write_str("held.txt", "old\n").await.unwrap();
    let files = root.clone();
    blocking(move || assert_eq!(std::fs::read(files.join("held.txt")).unwrap(), b"old\n")).await;

    server.stop().await.unwrap();
    let on_disk = (data.path().join("sessions"))
        .join(session.id())
        .join("root/held.txt");
    std::fs::write(&on_disk, "new bytes\n").unwrap();
    let server = TestServer::start_on(addr, data.path(), |_| {}).await;

    let files = root.clone();
    let read = blocking(move || {
        std::fs::rename(files.join("held.txt"), files.join("moved.txt")).unwrap();
        std::fs::read(files.join("moved.txt")).unwrap()
    })
    .await;
    assert_eq!(read, b"new bytes\n");
    assert_eq!(
        session.read_to_string("moved.txt").await.unwrap(),
        "new bytes\n"
    );
    handle.unmount().expect("a clean unmount");
    server.stop().await.unwrap();
}
