//! The server binary under an address-space limit, its peak memory, and a
//! bystander that proves it still serves everyone else.

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use wsfs_client::{Client, SessionOptions};

/// The address space the server is given unless a test says otherwise. A
/// request that tried to allocate past its bound would abort the process
/// instead of merely growing it, so the test sees the failure.
pub const DEFAULT_ADDRESS_SPACE: u64 = 2 * 1024 * 1024 * 1024;

/// How long the bystander's write and read may take, together.
pub const BYSTANDER_DEADLINE: Duration = Duration::from_secs(10);

pub const MIB: u64 = 1024 * 1024;

/// A `wsfs-server` process on a loopback port with its own data directory.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    pub addr: std::net::SocketAddr,
    data: TempDir,
    log: PathBuf,
    /// Held so the server's stdout stays open; its later lines name the
    /// other listeners.
    stdout: std::io::BufReader<ChildStdout>,
}

impl Server {
    /// The binary with `args` under [`DEFAULT_ADDRESS_SPACE`].
    pub fn start(args: &[&str]) -> Server {
        Server::start_limited(DEFAULT_ADDRESS_SPACE, args, &[])
    }

    /// The binary with `args` and extra environment under `address_space`
    /// bytes of `RLIMIT_AS`. Glibc's per-thread malloc arenas each reserve
    /// 64 MiB of address space; they are held to two (`MALLOC_ARENA_MAX`),
    /// as an operator who sets an address-space limit would, so the limit
    /// bounds what the server allocates rather than what it reserves.
    pub fn start_limited(address_space: u64, args: &[&str], env: &[(&str, &str)]) -> Server {
        let data = tempfile::tempdir().expect("temporary data directory");
        let log = data.path().join("server.log");
        let (child, addr, stdout) = spawn(data.path(), &log, address_space, args, env, &[]);
        Server {
            child,
            url: format!("http://{addr}"),
            addr,
            data,
            log,
            stdout,
        }
    }

    /// The binary with `args` in a user namespace of its own whose
    /// inotify watch limit is `watches` (`max_inotify_watches`, which the
    /// namespace's root may lower for itself alone); `None` when `unshare`
    /// is not installed.
    pub fn start_with_watch_limit(watches: u32, args: &[&str]) -> Option<Server> {
        let unshare = wsfs_tests::kit::system_tool("unshare")?;
        let wrapper = [
            unshare.display().to_string(),
            "--user".into(),
            "--map-root-user".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!("echo {watches} > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\""),
        ];
        let data = tempfile::tempdir().expect("temporary data directory");
        let log = data.path().join("server.log");
        let (child, addr, stdout) = spawn(
            data.path(),
            &log,
            DEFAULT_ADDRESS_SPACE,
            args,
            &[],
            &wrapper,
        );
        Some(Server {
            child,
            url: format!("http://{addr}"),
            addr,
            data,
            log,
            stdout,
        })
    }

    /// The server's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.data.path().join("data")
    }

    /// A scratch directory beside the data directory, removed with the
    /// server (for allowed roots, archives, canaries).
    pub fn scratch(&self) -> &Path {
        self.data.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.url)
            .await
            .expect("connect to the server")
    }

    /// Peak resident memory of the server so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.status_kib("VmHWM:") * 1024
    }

    /// Resident memory now (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        self.status_kib("VmRSS:") * 1024
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_else(|e| panic!("the server is gone ({e}); log: {}", self.log()));
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Open file descriptors of the server process.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// The address of the HTTP face (`--http-listen`), from the line the
    /// server prints after the one naming its gRPC address.
    pub fn http_addr(&mut self) -> std::net::SocketAddr {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read the server's second line");
        line.split("on http://")
            .nth(1)
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!("the server did not say where its HTTP face listens: {line:?}")
            })
    }

    /// Whether the process is still running (not exited, not killed).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Panics unless the server still runs and serves a fresh session: a
    /// write and a read back within [`BYSTANDER_DEADLINE`].
    pub async fn assert_serves_bystander(&mut self) {
        assert!(
            self.is_running(),
            "the server died; log tail: {}",
            self.log_tail()
        );
        let url = self.url.clone();
        let served: Result<wsfs::Result<String>, _> =
            tokio::time::timeout(BYSTANDER_DEADLINE, async move {
                let client = Client::connect(&url).await?;
                let (session, info) = client.create(SessionOptions::memory()).await?;
                session.write_str("bystander.txt", "still here\n").await?;
                let text = session.read_to_string("bystander.txt").await?;
                client.delete_session(&info.id).await?;
                Ok(text)
            })
            .await;
        match served {
            Ok(Ok(text)) => assert_eq!(text, "still here\n"),
            Ok(Err(e)) => panic!("the bystander was refused: {e:?}"),
            Err(_) => panic!(
                "the bystander was not served within {BYSTANDER_DEADLINE:?}; log tail: {}",
                self.log_tail()
            ),
        }
    }

    /// Everything the server has logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 4 KiB of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let start = log.len().saturating_sub(4096);
        let start = (start..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(log.len());
        log[start..].to_string()
    }

    /// Sends SIGTERM and waits up to `within` for the process to exit;
    /// `Some(status)` when it did.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        wsfs_tests::cluster::terminate(&mut self.child, within)
    }
}

/// Starts the binary on `data`'s `data/` directory, logging to `log`.
fn spawn(
    data: &Path,
    log: &Path,
    address_space: u64,
    args: &[&str],
    env: &[(&str, &str)],
    wrapper: &[String],
) -> (Child, std::net::SocketAddr, std::io::BufReader<ChildStdout>) {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("server log");
    let binary = env!("CARGO_BIN_EXE_wsfs-server");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut c = Command::new(program);
            c.args(wrapper_args).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    command
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.join("data"))
        .args(args)
        .env_remove("WSFS_ADMIN_TOKEN")
        .env("RUST_LOG", "warn")
        .env("MALLOC_ARENA_MAX", "2")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: address_space,
                rlim_max: address_space,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("start wsfs-server");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the server's first line");
    let addr: std::net::SocketAddr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the server did not say where it listens: {line:?}; log: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    (child, addr, stdout)
}

/// A failing test must not leave its server running.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The contract reason of a status (`ErrorInfo.reason`), or "" without one.
pub use wsfs_tests::kit::reason;

/// The contract reason of a client error.
pub fn error_reason(error: &wsfs::Error) -> &'static str {
    error.reason()
}

impl Server {
    /// Stops the server (SIGTERM, then SIGKILL) and starts it again on the
    /// same data directory with `args`: what a restart finds on disk.
    pub fn restart(&mut self, args: &[&str]) {
        if self.terminate(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let (child, addr, stdout) = spawn(
            self.data.path(),
            &self.log,
            DEFAULT_ADDRESS_SPACE,
            args,
            &[],
            &[],
        );
        self.child = child;
        self.addr = addr;
        self.url = format!("http://{addr}");
        self.stdout = stdout;
    }
}

/// The HTTP/2 client preface, and an empty SETTINGS frame after it.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const EMPTY_SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];

/// Reads until the server closes the connection; the time it took, or
/// `None` when it was still open after `within`.
pub async fn closed_within(
    stream: &mut tokio::net::TcpStream,
    within: Duration,
) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

impl Server {
    /// Threads of the server process now.
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// The server's inotify instances and the watches they hold in all.
    pub fn inotify(&self) -> (usize, usize) {
        let pid = self.pid();
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return (0, 0);
        };
        let (mut instances, mut watches) = (0, 0);
        for fd in fds.flatten() {
            let is_inotify = std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy() == "anon_inode:inotify");
            if !is_inotify {
                continue;
            }
            instances += 1;
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            watches += std::fs::read_to_string(info)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count();
        }
        (instances, watches)
    }
}

/// A Watch stream as the client gives it.
pub type Events = futures::stream::BoxStream<'static, wsfs::Result<wsfs::proto::ChangeEvent>>;

/// The next event that is not a keep-alive, within 10 s; panics when the
/// Watch ends or stays quiet.
pub async fn next_change(events: &mut Events) -> wsfs::proto::ChangeEvent {
    use futures::StreamExt;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.next().await {
                Some(Ok(e)) if e.kind() == wsfs_client::ChangeKind::Keepalive => continue,
                Some(Ok(e)) => return e,
                other => panic!("the Watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("the Watch went quiet")
}
