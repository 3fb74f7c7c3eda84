//! Sessions mounted with the real `wsfs mount` command (the CLI built
//! beside the test binaries, run as a child process) over a live
//! in-process server: what the POSIX suite and the mount tests run
//! against.
//!
//! A mount needs `/dev/fuse` and a `wsfs` binary with the `mount` command;
//! without them [`MountedSession::start`] says "skipping" and returns
//! `None`, unless `WSFS_REQUIRE_TOOLS=1`, which makes that a failure.
//! Every mount is unmounted when its guard drops: SIGTERM to the mount
//! process (which unmounts cleanly), then, should it not have gone within a
//! deadline, SIGKILL and a lazy unmount, so that a broken mount never
//! hangs the test run.

use crate::harness::{Sandbox, TestServer};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use wsfs_client::{Client, Session, SessionInfo, SessionOptions};

/// How long a mount may take to appear, and its process to exit after
/// SIGTERM: generous, for a loaded machine; both end at the first sign.
const MOUNT_DEADLINE: Duration = Duration::from_secs(60);

/// How long a change made elsewhere may take to show in a mount. The
/// mount promises about a second (it invalidates the kernel's caches from
/// the Watch stream); this allows for a loaded machine.
pub const VISIBLE_WITHIN: Duration = Duration::from_secs(20);

/// The kind of session to mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Directory,
    /// A container of the tests' runtime ([`Sandbox`]), its inner server
    /// the `wsfs-stdio` binary built beside the tests.
    Container,
}

/// The `wsfs-stdio` binary built beside the test binaries (the inner
/// server a [`Sandbox`] runs).
fn stdio_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary sits in target/<profile>/deps")
        .join("wsfs-stdio")
}

/// The `wsfs` binary, when a session can be mounted here; otherwise says
/// why on stderr and returns `None` (or fails with `WSFS_REQUIRE_TOOLS=1`).
pub fn mount_command() -> Option<PathBuf> {
    let missing = |why: String| {
        crate::kit::unavailable(&why);
        None
    };
    if let Some(why) = crate::kit::fuse_missing() {
        return missing(why.into());
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let wsfs = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in target/<profile>/deps")
        .join("wsfs");
    if !wsfs.is_file() {
        return missing(format!(
            "the wsfs binary is not built at {} (cargo build -p wsfs-client)",
            wsfs.display()
        ));
    }
    let help = Command::new(&wsfs)
        .args(["mount", "--help"])
        .stdin(Stdio::null())
        .output()
        .expect("run wsfs mount --help");
    if !help.status.success() {
        return missing(format!(
            "{} has no `mount` command: {}",
            wsfs.display(),
            String::from_utf8_lossy(&help.stderr).trim()
        ));
    }
    Some(wsfs)
}

/// One `wsfs mount` process and its mount point; unmounted on drop.
pub struct Mount {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    _scratch: TempDir,
}

impl Mount {
    /// Runs `wsfs --server URL mount --session ID [extra...] DIR` on a fresh
    /// directory and waits until the kernel lists the mount.
    pub fn start(wsfs: &Path, url: &str, session: &str, extra: &[&str]) -> Mount {
        Mount::spawn(wsfs, url, session, extra, None)
    }

    /// [`Mount::start`] with the mount process held to `address_space`
    /// bytes of `RLIMIT_AS`. Glibc's malloc arenas are held to two
    /// (`MALLOC_ARENA_MAX`), as an operator setting such a limit would,
    /// so the limit bounds what the mount allocates rather than the 64 MiB
    /// each arena reserves.
    pub fn start_limited(wsfs: &Path, url: &str, session: &str, address_space: u64) -> Mount {
        Mount::spawn(wsfs, url, session, &[], Some(address_space))
    }

    fn spawn(
        wsfs: &Path,
        url: &str,
        session: &str,
        extra: &[&str],
        address_space: Option<u64>,
    ) -> Mount {
        let scratch = tempfile::tempdir().expect("a directory for the mount");
        let dir = scratch.path().join("mnt");
        std::fs::create_dir(&dir).expect("the mount point");
        let log = scratch.path().join("mount.log");
        let out = std::fs::File::create(&log).expect("the mount's log");
        let mut command = Command::new(wsfs);
        command
            .args(["--server", url, "mount", "--session", session])
            .args(extra)
            .arg(&dir)
            .env("WSFS_CONFIG", scratch.path().join("no-saved-context.json"))
            .env_remove("WSFS_TOKEN")
            .env_remove("WSFS_SESSION")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the log, twice"))
            .stderr(out);
        if let Some(limit) = address_space {
            command.env("MALLOC_ARENA_MAX", "2");
            // SAFETY: setrlimit is async-signal-safe; nothing else runs
            // between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                    let limit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = crate::cluster::spawn_tied(command);
        let mut mount = Mount {
            child,
            dir,
            log,
            _scratch: scratch,
        };
        let started = Instant::now();
        while !is_mounted(&mount.dir) {
            if let Ok(Some(status)) = mount.child.try_wait() {
                panic!(
                    "wsfs mount exited ({status}) before mounting: {}",
                    mount.log_text()
                );
            }
            assert!(
                started.elapsed() < MOUNT_DEADLINE,
                "wsfs mount did not mount within {MOUNT_DEADLINE:?}: {}",
                mount.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        mount
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// What the mount process has printed so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let exited = crate::cluster::terminate(&mut self.child, MOUNT_DEADLINE);
        if exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let still_mounted = is_mounted(&self.dir);
        if still_mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .status();
        }
        if !std::thread::panicking() {
            assert!(
                exited.is_some() && !still_mounted,
                "SIGTERM must unmount cleanly (exit {exited:?}, still mounted: {still_mounted}): {}",
                self.log_text()
            );
        }
    }
}

/// Whether the kernel lists a mount at `dir` (its absolute path).
pub fn is_mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // Field 5 is the mount point, with space, tab, newline and backslash
    // escaped as octal.
    let want = dir
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(want.as_str()))
}

/// A live server, one session on it, and that session mounted `mounts`
/// times. Fields drop in order: the mounts before the server they talk to,
/// the runtime last.
pub struct MountedSession {
    mounts: Vec<Mount>,
    pub session: Session,
    pub info: SessionInfo,
    pub client: Client,
    server: TestServer,
    /// A CONTAINER session's container, removed after its server stops.
    _sandbox: Option<Sandbox>,
    runtime: tokio::runtime::Runtime,
}

impl MountedSession {
    /// `None` (having said why) when mounts cannot run here.
    pub fn start(backend: Backend, mounts: usize) -> Option<MountedSession> {
        MountedSession::spawn(backend, mounts, None, None)
    }

    /// One mount whose process is held to `address_space` bytes of
    /// `RLIMIT_AS` ([`Mount::start_limited`]).
    pub fn start_limited(backend: Backend, address_space: u64) -> Option<MountedSession> {
        MountedSession::spawn(backend, 1, Some(address_space), None)
    }

    /// [`Self::start_limited`], the session allowing writes of up to
    /// `max_write_bytes`.
    pub fn start_limited_writing(
        backend: Backend,
        address_space: u64,
        max_write_bytes: u64,
    ) -> Option<MountedSession> {
        MountedSession::spawn(backend, 1, Some(address_space), Some(max_write_bytes))
    }

    fn spawn(
        backend: Backend,
        mounts: usize,
        address_space: Option<u64>,
        max_write_bytes: Option<u64>,
    ) -> Option<MountedSession> {
        let wsfs = mount_command()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        let sandbox = (backend == Backend::Container)
            .then(|| Sandbox::new(&stdio_binary().display().to_string(), "box"));
        let server = match &sandbox {
            Some(sandbox) => {
                let inner = sandbox.runtime();
                runtime.block_on(TestServer::start_with(|c| {
                    c.container_runtimes = vec![inner]
                }))
            }
            None => runtime.block_on(TestServer::start()),
        };
        let options = match (backend, &sandbox) {
            (Backend::Memory, _) => SessionOptions::memory(),
            (_, Some(sandbox)) => sandbox.options(),
            _ => SessionOptions::directory(),
        };
        let options = match max_write_bytes {
            Some(bytes) => options.max_write_bytes(bytes),
            None => options,
        };
        let (client, session, info) = runtime.block_on(async {
            let client = Client::connect(&server.url())
                .await
                .expect("connect to the test server");
            let (session, info) = client.create(options).await.expect("create a session");
            (client, session, info)
        });
        let mounts = (0..mounts)
            .map(|_| match address_space {
                Some(limit) => Mount::start_limited(&wsfs, &server.url(), &info.id, limit),
                None => Mount::start(&wsfs, &server.url(), &info.id, &[]),
            })
            .collect();
        Some(MountedSession {
            mounts,
            session,
            info,
            client,
            server,
            _sandbox: sandbox,
            runtime,
        })
    }

    /// The `i`th mount point.
    pub fn mount(&self, i: usize) -> &Path {
        self.mounts[i].path()
    }

    /// Unmounts every mount (SIGTERM, as a user would): what they had
    /// queued is committed, or refused, once this returns.
    pub fn unmount_all(&mut self) {
        self.mounts.clear();
    }

    /// Runs a client call on the server's runtime.
    pub fn block_on<F: std::future::Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    pub fn server(&self) -> &TestServer {
        &self.server
    }

    /// The POSIX suite's view of the first mount: the session's name limit
    /// and neither hard links nor extended attributes.
    pub fn subject(self) -> crate::posix::Tree {
        let subject = crate::posix::Subject {
            root: self.mount(0).to_path_buf(),
            name_max: self.info.limits.max_segment_length as usize,
            hard_links: false,
            xattrs: false,
        };
        crate::posix::Tree::new(subject, self)
    }
}

/// Polls `probe` until it returns `Some`, or fails after [`VISIBLE_WITHIN`]
/// with `what` and the last value seen.
#[track_caller]
pub fn eventually<T>(what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let started = Instant::now();
    loop {
        match probe() {
            Ok(v) => {
                eprintln!("{what}: after {:?}", started.elapsed());
                return v;
            }
            Err(last) if started.elapsed() > VISIBLE_WITHIN => {
                panic!("{what}: not within {VISIBLE_WITHIN:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
