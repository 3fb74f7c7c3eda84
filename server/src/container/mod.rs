//! CONTAINER sessions: the files live in a running container, served by a
//! wsfs inside it.
//!
//! The outer session's [`ContainerFs`] forwards every call over one HTTP/2
//! connection whose two ends are the stdin and stdout of a child process:
//! the operator's runtime template ([`runtime`]) filled in with the
//! container's name and workdir, which runs `wsfs-server --stdio WORKDIR`
//! ([`stdio`]) in the container. Everything the service does on top of a
//! session's `Filesystem` (events for Watch, Export, Grep streaming, the
//! session's limits at the edge) works unchanged; the inner server enforces
//! the same limits again, and its DIRECTORY backend keeps symlinks from
//! leading out of the workdir.
//!
//! One child per session, started on first use and again on the first call
//! after it died (a stopped container): calls meanwhile fail with
//! UNAVAILABLE naming the runtime, the container and the child's last
//! words on stderr. Dropping the session kills the child and never touches
//! the container or its files.

mod provider;
pub mod runtime;
mod snapshots;

pub(crate) use provider::ContainerProvider;
pub use runtime::{ContainerRuntime, ContainerTarget};
pub use snapshots::ContainerSnapshots;

use crate::archive::import::{ArchiveTarget, ImportPlan};
use crate::limits::SessionLimits;
use futures::stream::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use wsfs::{CanonicalPath, Error, Filesystem, MkdirOptions, Result, WriteOptions};

/// How long starting the runtime and the inner server's handshake may take
/// before the call fails with UNAVAILABLE.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of the child's stderr kept to explain a failure (the rest goes
/// to the server log as it comes, a bounded chunk at a time).
const STDERR_TAIL_BYTES: usize = 2048;

/// Bytes of the child's stderr read (and logged) at a time.
const STDERR_CHUNK_BYTES: usize = 4096;

/// One running child and the inner session it serves.
pub struct Link {
    session: wsfs_client::Session,
    child: Mutex<tokio::process::Child>,
}

impl Link {
    fn alive(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        matches!(child.try_wait(), Ok(None))
    }
}

/// A CONTAINER session's files, reached through its runtime.
pub struct ContainerFs {
    runtime: ContainerRuntime,
    target: ContainerTarget,
    limits: SessionLimits,
    read_only: bool,
    link: tokio::sync::Mutex<Option<Arc<Link>>>,
    /// The end of the child's stderr, for error messages.
    stderr_tail: Arc<Mutex<String>>,
    /// The session's change log, once it has one: changes made inside the
    /// container by other programs are relayed into it ([`ContainerFs::relay_external`]).
    relay: Mutex<Option<Arc<crate::events::EventLog>>>,
}

impl ContainerFs {
    /// A session in `target`, through `runtime`; nothing starts until
    /// [`ContainerFs::connect`] or the first call.
    pub fn new(
        runtime: ContainerRuntime,
        target: ContainerTarget,
        limits: SessionLimits,
        read_only: bool,
    ) -> Self {
        ContainerFs {
            runtime,
            target,
            limits,
            read_only,
            link: tokio::sync::Mutex::new(None),
            stderr_tail: Arc::new(Mutex::new(String::new())),
            relay: Mutex::new(None),
        }
    }

    /// From now on, changes that programs inside the container make to the
    /// workdir reach `events` as `external` changes, as they do for a
    /// DIRECTORY session's bind-mounted root: the inner server's own
    /// watcher sees them, and each link relays its inner session's
    /// `external` events (changes made through this session are recorded
    /// by the service already, under their callers). Changes made while no
    /// child runs (the container stopped) are not seen.
    pub async fn relay_external(&self, events: Arc<crate::events::EventLog>) {
        *self.relay.lock().unwrap_or_else(|e| e.into_inner()) = Some(events);
        let slot = self.link.lock().await;
        if let Some(link) = slot.as_ref().filter(|l| l.alive()) {
            self.start_relay(link);
        }
    }

    /// Relays `link`'s external changes into the session's change log, for
    /// as long as the link lives (its Watch ends with its child).
    fn start_relay(&self, link: &Link) {
        let Some(events) = self.relay.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        let session = link.session.clone();
        let path_limits = self.limits.path;
        tokio::spawn(async move {
            let Ok(mut stream) = session.watch("").recursive().stream().await else {
                return;
            };
            while let Some(Ok(event)) = stream.next().await {
                if event.caller != crate::auth::EXTERNAL_CALLER {
                    continue;
                }
                let kind = match event.kind() {
                    wsfs_client::ChangeKind::Created => crate::events::ChangeKind::Created,
                    wsfs_client::ChangeKind::Modified => crate::events::ChangeKind::Modified,
                    wsfs_client::ChangeKind::Deleted => crate::events::ChangeKind::Deleted,
                    wsfs_client::ChangeKind::Moved => crate::events::ChangeKind::Moved,
                    _ => continue,
                };
                let Ok(path) = CanonicalPath::parse(&event.path, &path_limits) else {
                    continue;
                };
                let to = CanonicalPath::parse(&event.to_path, &path_limits).ok();
                let to = to.filter(|_| !event.to_path.is_empty());
                events.append(
                    kind,
                    &path,
                    to.as_ref(),
                    event.version,
                    crate::auth::EXTERNAL_CALLER,
                );
            }
        });
    }

    pub fn target(&self) -> &ContainerTarget {
        &self.target
    }

    /// Starts the child now, so that CreateSession fails when the
    /// container cannot be reached.
    pub async fn connect(&self) -> Result<()> {
        self.link().await.map(drop)
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> Error {
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .trim()
            .to_string();
        let said = if tail.is_empty() {
            String::new()
        } else {
            format!(" (its stderr: {tail})")
        };
        Error::Unavailable {
            message: format!(
                "container '{}' (runtime '{}') is unavailable: {why}{said}; the next call starts the runtime again",
                self.target.name, self.runtime.name
            ),
        }
    }

    /// The live link, or a new one when there is none or its child died.
    async fn link(&self) -> Result<Arc<Link>> {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_ref().filter(|l| l.alive()) {
            return Ok(link.clone());
        }
        *slot = None;
        let link = Arc::new(self.spawn().await?);
        self.start_relay(&link);
        *slot = Some(link.clone());
        Ok(link)
    }

    async fn spawn(&self) -> Result<Link> {
        let wsfs = runtime::own_executable()?;
        let argv = self
            .runtime
            .argv(&self.target.name, &self.target.workdir, &wsfs);
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        self.stderr_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut child = command
            .spawn()
            .map_err(|e| self.unavailable(format!("cannot run '{}': {e}", argv[0])))?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(log_stderr(
                stderr,
                self.stderr_tail.clone(),
                self.runtime.name.clone(),
                self.target.name.clone(),
            ));
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(Error::internal("the runtime's stdio was not piped"));
        };
        let io = Mutex::new(Some(tokio::io::join(stdout, stdin)));
        // One connection per child: when it breaks, the channel may not
        // make another to the same (dead) child; the next call starts one.
        let connector = tower::service_fn(move |_: http::Uri| {
            let io = io.lock().unwrap_or_else(|e| e.into_inner()).take();
            async move {
                io.map(hyper_util::rt::TokioIo::new).ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "the container's exec has ended",
                    )
                })
            }
        });
        let endpoint = wsfs_client::endpoint("http://container.invalid")?;
        let handshake = async {
            let channel = endpoint
                .connect_with_connector(connector)
                .await
                .map_err(|e| self.unavailable(format!("no answer from inside: {e}")))?;
            let client = wsfs_client::Client::from_channel(channel.clone());
            let mut options = wsfs_client::SessionOptions::directory()
                .root(&self.target.workdir)
                .read_only(self.read_only)
                .limits(client_limits(self.limits));
            options = options.label("wsfs.container", &self.target.name);
            let info = client.create_session(options).await?;
            Ok::<_, Error>(Link {
                session: client.session(&info.id),
                child: Mutex::new(child),
            })
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
            Ok(Ok(link)) => Ok(link),
            // A runtime that exits during the handshake breaks the
            // connection; the client sees that as unavailable, internal or
            // cancelled ("operation was canceled"), depending on when.
            Ok(Err(e)) => Err(match e {
                Error::Unavailable { .. } | Error::Internal { .. } | Error::Cancelled { .. } => {
                    self.unavailable(e.to_string())
                }
                other => other,
            }),
            Err(_) => Err(self.unavailable(format!(
                "the runtime did not answer within {CONNECT_TIMEOUT:?}"
            ))),
        }
    }

    /// Runs `call` on the live link. A failure with the child gone (or a
    /// transport failure) drops the link and becomes UNAVAILABLE with the
    /// runtime's account of it.
    async fn forward<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(Arc<Link>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let link = self.link().await?;
        match call(link.clone()).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.failed(&link, e).await),
        }
    }

    async fn failed(&self, link: &Arc<Link>, e: Error) -> Error {
        let broken = matches!(e, Error::Unavailable { .. }) || !link.alive();
        if !broken {
            return e;
        }
        let mut slot = self.link.lock().await;
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            *slot = None;
        }
        self.unavailable(e.to_string())
    }

    /// Replaces the inner workspace with the archive at `path`.
    pub(crate) async fn import_file(&self, path: &std::path::Path) -> Result<(u64, u64)> {
        self.forward(|l| async move { l.session.import_from(path).await })
            .await
    }

    /// Streams the inner workspace's archive into `writer`.
    pub(crate) async fn export_into<W>(&self, writer: W) -> Result<u64>
    where
        W: tokio::io::AsyncWrite + Unpin + Send,
    {
        self.forward(|l| async move { l.session.export_to_writer(writer, None).await })
            .await
    }
}

fn client_limits(l: SessionLimits) -> wsfs_client::SessionLimits {
    wsfs_client::SessionLimits {
        max_write_bytes: l.max_write_bytes,
        max_path_depth: u32::try_from(l.path.max_depth).unwrap_or(u32::MAX),
        max_segment_length: u32::try_from(l.path.max_segment_chars).unwrap_or(u32::MAX),
        max_files: l.max_files,
        max_total_bytes: l.max_total_bytes,
    }
}

/// Logs the child's stderr a bounded chunk at a time and keeps its end.
async fn log_stderr(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<String>>,
    runtime: String,
    container: String,
) {
    let mut buf = vec![0u8; STDERR_CHUNK_BYTES];
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::warn!(%runtime, %container, "{line}");
        }
        let mut kept = tail.lock().unwrap_or_else(|e| e.into_inner());
        kept.push_str(&text);
        if kept.len() > STDERR_TAIL_BYTES {
            let mut cut = kept.len() - STDERR_TAIL_BYTES;
            while !kept.is_char_boundary(cut) {
                cut += 1;
            }
            kept.drain(..cut);
        }
    }
}

/// The forwarding handle the registry keeps: every call runs on the live
/// link ([`wsfs::Forwarded`]).
pub type Container = wsfs::Forwarded<ContainerFs>;

#[async_trait::async_trait]
impl wsfs::Remote for ContainerFs {
    type Link = Arc<Link>;

    async fn link(&self) -> Result<Arc<Link>> {
        ContainerFs::link(self).await
    }

    fn far(link: &Arc<Link>) -> &dyn Filesystem {
        &link.session
    }

    async fn failed(&self, link: &Arc<Link>, error: Error) -> Error {
        ContainerFs::failed(self, link, error).await
    }
}

#[async_trait::async_trait]
impl ArchiveTarget for Container {
    async fn import_checked(&self, archive: tempfile::TempPath, _plan: ImportPlan) -> Result<()> {
        // Checked here already; the inner server checks it again against
        // the same limits and applies it under its session's write lock.
        self.importable()?;
        self.0.import_file(&archive).await.map(drop)
    }

    fn importable(&self) -> Result<()> {
        if self.0.read_only {
            return Err(Error::ReadOnly {
                path: String::new(),
                message: "this session is read-only: it takes no archive import".to_string(),
            });
        }
        Ok(())
    }
}

/// Where CONTAINER sessions keep their snapshots, under the data directory.
fn sessions_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("containers")
}

/// Removes what the CONTAINER sessions of a stopped server left: they do
/// not outlive it, and neither do their snapshots.
pub(crate) fn clear_abandoned(data_dir: &std::path::Path) {
    let dir = sessions_dir(data_dir);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot clear abandoned container sessions");
        }
    }
}

/// Opens CONTAINER session `id` as `spec` asks: picks the runtime, starts
/// it (a container that cannot be reached fails the creation with
/// UNAVAILABLE), and writes the seed files. Returns its handles and the
/// directory under the data directory that holds its snapshots (the
/// session's own, removed with it; the container's files are never).
pub(crate) async fn open(
    config: &crate::config::ServerConfig,
    id: &str,
    spec: &crate::kind::SessionSpec,
    limits: SessionLimits,
    seeds: &[(CanonicalPath, bytes::Bytes)],
) -> Result<(crate::kind::Handles, std::path::PathBuf, Arc<Container>)> {
    let Some(target) = spec.container.clone() else {
        return Err(Error::invalid_argument(
            "a CONTAINER session needs container {runtime, name, workdir}",
        ));
    };
    if spec.root.is_some() || !spec.mounts.is_empty() {
        return Err(Error::invalid_argument(
            "a CONTAINER session takes neither root nor mounts: its files are the container's workdir",
        ));
    }
    let runtime = runtime::lookup(&config.container_runtimes, &target.runtime)?.clone();
    let fs = Arc::new(ContainerFs::new(runtime, target, limits, false));
    fs.connect().await?;
    let handle = wsfs::Forwarded(fs.clone());
    if spec.layout == crate::auth::Layout::Swarm {
        for zone in crate::auth::zones::ZONE_DIRS {
            let zone = CanonicalPath::from_canonical(zone);
            handle.mkdir(&zone, MkdirOptions::default()).await?;
        }
    }
    for (path, data) in seeds {
        let chunks = futures::stream::iter([Ok(data.clone())]).boxed();
        handle
            .write_bytes(path, WriteOptions::default(), chunks)
            .await?;
    }
    let fs = if spec.read_only {
        // The seeds are in: from now on the inner session refuses writes.
        let ro = Arc::new(ContainerFs::new(
            fs.runtime.clone(),
            fs.target.clone(),
            limits,
            true,
        ));
        drop(handle);
        drop(fs);
        ro.connect().await?;
        ro
    } else {
        fs
    };
    let dir = sessions_dir(&config.data_dir).join(id);
    let budget = crate::quota::with_budget(&limits, config.default_max_total_bytes);
    let snapshots = Arc::new(ContainerSnapshots::new(
        fs.clone(),
        dir.join("snapshots"),
        &budget,
    ));
    let handle = Arc::new(wsfs::Forwarded(fs));
    Ok(((handle.clone(), handle.clone(), snapshots), dir, handle))
}
