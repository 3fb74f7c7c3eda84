//! The server under test: a child `wsfs-server` process (preferred: its
//! memory is its own), the server library in this process (the fallback),
//! or an external server given by URL. Also the RSS probe that watches the
//! server's memory during a transfer.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wsfs_server::durability::Durability;

/// The largest write the server accepts; sessions ask for what they need.
const SERVER_MAX_WRITE_BYTES: u64 = 64 * 1024 * 1024 * 1024;

/// How the server under test runs.
enum Running {
    Child {
        child: Child,
        // Held open so the server's stdout never sees a closed pipe.
        _stdout: BufReader<ChildStdout>,
    },
    InProcess {
        shutdown: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    },
    External,
}

/// The lease of a server with an object store: a recovery round waits
/// for the previous holder's to run out, untimed.
pub const BENCH_LEASE_TTL: Duration = Duration::from_secs(1);

/// `--lease-ttl`'s value for `d`: whole seconds.
fn humantime_secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// A started server and what is known about it.
pub struct Server {
    pub url: String,
    /// One line for the results: how the server ran.
    pub description: String,
    /// The process whose memory is the server's, when it can be watched.
    pub rss: Option<RssProbe>,
    running: Running,
}

/// The `--durability` value naming `mode`.
fn durability_arg(mode: Durability) -> String {
    clap::ValueEnum::to_possible_value(&mode)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// The child server's `RUST_LOG`: warnings, unless `WSFS_BENCH_SERVER_LOG`
/// asks for more (`warn,wsfs_server::registry=info` shows where each
/// recovery's time went).
fn server_log_level() -> String {
    std::env::var("WSFS_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".to_string())
}

/// Where the server binary is expected: next to this program.
pub fn sibling_server_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.join("wsfs-server");
    bin.is_file().then_some(bin)
}

impl Server {
    /// Spawns `bin` listening on an ephemeral loopback port, with its data
    /// under `data_dir` and sessions allowed to root anywhere under the
    /// `allow_roots`, mirroring snapshots to `object_store` when given.
    /// Per-call logging is turned down to warnings so the figures measure
    /// the data path, not the log writer.
    pub fn spawn(
        bin: &Path,
        data_dir: &Path,
        allow_roots: &[PathBuf],
        durability: Durability,
        object_store: Option<&str>,
    ) -> Result<Server, String> {
        let mut command = Command::new(bin);
        for root in allow_roots {
            command.arg("--allow-root").arg(root);
        }
        if let Some(url) = object_store {
            command
                .arg("--object-store")
                .arg(url)
                .arg("--lease-ttl")
                .arg(humantime_secs(BENCH_LEASE_TTL));
        }
        let mut child = command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--max-write-bytes")
            .arg(SERVER_MAX_WRITE_BYTES.to_string())
            .arg("--durability")
            .arg(durability_arg(durability))
            .env("RUST_LOG", server_log_level())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        // The server announces itself as "wsfs-server listening on ADDR (...)".
        let addr = line
            .split_once("listening on ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(str::to_string);
        let Some(addr) = addr.filter(|_| read.is_ok()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{} did not announce its address (said: {:?})",
                bin.display(),
                line.trim()
            ));
        };
        let pid = child.id();
        eprintln!("server: started {} as pid {pid} on {addr}", bin.display());
        Ok(Server {
            url: format!("http://{addr}"),
            description: "a child `wsfs-server` process on loopback, log level warn".to_string(),
            rss: Some(RssProbe::for_pid(pid.to_string())),
            running: Running::Child {
                child,
                _stdout: stdout,
            },
        })
    }

    /// Runs the server library on its own runtime and threads inside this
    /// process. Its memory cannot be told apart from the client's.
    pub fn in_process(
        data_dir: &Path,
        allow_roots: &[PathBuf],
        durability: Durability,
        object_store: Option<&str>,
    ) -> Result<Server, String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot make the listener non-blocking: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("no local address: {e}"))?;
        let mut config = wsfs_server::ServerConfig::for_tests(data_dir.to_path_buf());
        config.allow_roots = allow_roots.to_vec();
        config.max_write_bytes = SERVER_MAX_WRITE_BYTES;
        config.durability = durability;
        config.object_store = object_store.map(str::to_string);
        if object_store.is_some() {
            // A recovery serves only once the previous holder's lease ran
            // out: short, so that the rounds wait little for it.
            config.lease_ttl = BENCH_LEASE_TTL;
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("wsfs-server".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .thread_name("wsfs-server-worker")
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("in-process server: cannot build a runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("in-process server: {e}");
                            return;
                        }
                    };
                    let shutdown = async {
                        let _ = rx.await;
                    };
                    if let Err(e) = wsfs_server::serve(config, listener, shutdown).await {
                        eprintln!("in-process server: {e}");
                    }
                });
            })
            .map_err(|e| format!("cannot start the server thread: {e}"))?;
        Ok(Server {
            url: format!("http://{addr}"),
            description: "the server library in the benchmark's process on loopback (its memory \
                          includes the client's)"
                .to_string(),
            rss: Some(RssProbe::for_pid("self".to_string())),
            running: Running::InProcess {
                shutdown: Some(tx),
                thread: Some(thread),
            },
        })
    }

    pub fn external(url: String) -> Server {
        Server {
            description: "an external server given with --server (its memory is not watched)"
                .to_string(),
            url,
            rss: None,
            running: Running::External,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        match &mut self.running {
            Running::Child { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::InProcess { shutdown, thread } => {
                if let Some(tx) = shutdown.take() {
                    let _ = tx.send(());
                }
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
            Running::External => {}
        }
    }
}

/// Reads a process's resident memory from `/proc/<pid>/status`.
#[derive(Debug, Clone)]
pub struct RssProbe {
    pid: String,
}

/// What one watched transfer cost in memory.
#[derive(Debug, Clone, Copy)]
pub struct MemoryGrowth {
    /// Highest resident size seen during the transfer minus the size before.
    pub peak_growth_bytes: u64,
    /// Whether the kernel's own peak (VmHWM, reset before the transfer)
    /// backed the figure, rather than sampling alone.
    pub kernel_peak: bool,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(2);

impl RssProbe {
    fn for_pid(pid: String) -> Self {
        RssProbe { pid }
    }

    fn status_field(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kib = status
            .lines()
            .find(|l| l.starts_with(field))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()?;
        Some(kib * 1024)
    }

    /// Current resident size in bytes.
    pub fn rss(&self) -> Option<u64> {
        self.status_field("VmRSS:")
    }

    /// Resets the kernel's peak-RSS counter to the current size.
    fn reset_peak(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").is_ok()
    }

    /// Runs `work` while a thread samples the resident size every 2 ms, and
    /// returns the work's output with the peak growth over the size before.
    pub async fn watch<F: Future>(&self, work: F) -> (F::Output, Option<MemoryGrowth>) {
        let Some(before) = self.rss() else {
            return (work.await, None);
        };
        let kernel_peak = self.reset_peak();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let probe = self.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(probe.rss().unwrap_or(0));
                    std::thread::sleep(SAMPLE_EVERY);
                }
                peak
            })
        };
        let output = work.await;
        stop.store(true, Ordering::Relaxed);
        let sampled = sampler.join().unwrap_or(0);
        let hwm = if kernel_peak {
            self.status_field("VmHWM:").unwrap_or(0)
        } else {
            0
        };
        let peak = sampled.max(hwm).max(self.rss().unwrap_or(0));
        (
            output,
            Some(MemoryGrowth {
                peak_growth_bytes: peak.saturating_sub(before),
                kernel_peak,
            }),
        )
    }
}
