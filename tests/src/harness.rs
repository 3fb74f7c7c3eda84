//! Workspace factories and the in-process server: the only code here that
//! names the server and client crates.
//!
//! Each factory returns a fresh, empty workspace as a [`Fixture`]:
//!
//! | factory | what the suite talks to |
//! | --- | --- |
//! | [`memory`] | `Workspace<MemoryBackend>`, in-process |
//! | [`directory`] | `Workspace<DirectoryBackend>` over a temporary directory |
//! | [`grpc_memory`] | the client's session handle, MEMORY session on a live server |
//! | [`grpc_directory`] | the same, DIRECTORY session |
//! | [`grpc_container`] | the same, CONTAINER session in a [`Sandbox`] |
//! | [`grpc_proxy`] | the same, MEMORY session on one of three server processes behind nginx |

use crate::fixture::Fixture;
use std::net::SocketAddr;
use std::path::Path;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};
use wsfs_client::{Client, SessionOptions};
use wsfs_server::directory::DirectoryBackend;
use wsfs_server::memory::MemoryBackend;
use wsfs_server::workspace::Workspace;
use wsfs_server::{ServerConfig, SessionLimits};

/// The memory backend, in-process.
pub async fn memory() -> Fixture {
    let workspace = Workspace::new(MemoryBackend::new(), SessionLimits::default());
    Fixture::new(workspace, ())
}

/// The directory backend over a fresh temporary directory, in-process.
pub async fn directory() -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().join("root");
    let staging = dir.path().join("staging");
    std::fs::create_dir(&root).expect("workspace root");
    std::fs::create_dir(&staging).expect("staging directory");
    let backend = DirectoryBackend::open(&root, &staging).expect("open the directory backend");
    let workspace = Workspace::new(backend, SessionLimits::default());
    Fixture::new(workspace, dir)
}

/// A MEMORY session on a live server, through the typed client.
pub async fn grpc_memory() -> Fixture {
    through_client(SessionOptions::memory()).await
}

/// A DIRECTORY session on a live server, through the typed client.
pub async fn grpc_directory() -> Fixture {
    through_client(SessionOptions::directory()).await
}

/// A MEMORY session through nginx (running the shipped configuration) in
/// front of three real server processes, through the typed client: every
/// call must reach the replica that holds its session. One set of
/// processes serves the whole test binary (they outlive each test's
/// runtime and die with the process); each test makes its own session and
/// deletes it when done. Without nginx (and not required) the suite runs
/// against one in-process server instead, and says so.
pub async fn grpc_proxy() -> Fixture {
    static CLUSTER: std::sync::OnceLock<Option<crate::cluster::Cluster>> =
        std::sync::OnceLock::new();
    let Some(cluster) = CLUSTER.get_or_init(|| crate::cluster::Cluster::start(3)) else {
        eprintln!("no nginx: the grpc_proxy suite runs against one server directly");
        return grpc_memory().await;
    };
    let url = cluster.url();
    let client = Client::connect(&url).await.expect("connect to the proxy");
    let info = client
        .create_session(SessionOptions::memory())
        .await
        .expect("create a session through the proxy");
    let session = client.session(&info.id);
    Fixture::new(session, ProxiedSession { url, id: info.id })
}

/// Deletes its session, through the proxy, when the test is done with it,
/// so that the shared replicas do not accumulate every test's files.
struct ProxiedSession {
    url: String,
    id: String,
}

impl Drop for ProxiedSession {
    fn drop(&mut self) {
        let (url, id) = (self.url.clone(), self.id.clone());
        // Dropped inside the test's runtime, which cannot be blocked on:
        // the deletion runs on a thread and runtime of its own.
        let deleted = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the deletion")
                .block_on(async { Client::connect(&url).await?.delete_session(&id).await })
        })
        .join();
        if !matches!(deleted, Ok(Ok(_))) && !std::thread::panicking() {
            panic!("the test's session could not be deleted: {deleted:?}");
        }
    }
}

async fn through_client(options: SessionOptions) -> Fixture {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url())
        .await
        .expect("connect to the test server");
    let info = client
        .create_session(options)
        .await
        .expect("create a session");
    let session = client.session(&info.id);
    Fixture::new(session, (client, server))
}

/// A CONTAINER session on a live server, through the typed client: its
/// container is a [`Sandbox`] and `inner` the `wsfs-server --stdio`
/// binary run inside it.
pub async fn grpc_container(inner: &str) -> Fixture {
    let sandbox = Sandbox::new(inner, "box");
    let runtime = sandbox.runtime();
    let server = TestServer::start_with(|c| c.container_runtimes = vec![runtime]).await;
    let client = Client::connect(&server.url())
        .await
        .expect("connect to the test server");
    let info = client
        .create_session(sandbox.options())
        .await
        .expect("create a CONTAINER session");
    let session = client.session(&info.id);
    Fixture::new(session, (client, server, sandbox))
}

/// The test's stand-in for a container: a directory holding the
/// container's files, entered with `bwrap` (its own mount namespace, no
/// network, the files at `/workspace`, dying with its parent). Without
/// bwrap (and without `WSFS_REQUIRE_TOOLS=1`) the runtime runs the inner
/// server directly on the directory: the forwarding path is the same.
pub struct Sandbox {
    _dir: TempDir,
    /// Where containers' directories live: `<containers>/<name>`.
    containers: std::path::PathBuf,
    name: String,
    inner: String,
    bwrap: Option<std::path::PathBuf>,
}

/// The runtime's name in the test servers' configuration.
pub const SANDBOX_RUNTIME: &str = "sandbox";

impl Sandbox {
    /// A fresh, empty container `name`; `inner` is the stdio server binary.
    pub fn new(inner: &str, name: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("temporary directory");
        let containers = dir.path().join("containers");
        std::fs::create_dir_all(containers.join(name)).expect("the container's directory");
        Sandbox {
            _dir: dir,
            containers,
            name: name.to_string(),
            inner: inner.to_string(),
            bwrap: crate::kit::system_tool("bwrap"),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The container's files, as the host sees them.
    pub fn files(&self) -> std::path::PathBuf {
        self.containers.join(&self.name)
    }

    /// The words that enter container `{name}` (a directory under
    /// `containers`), before the program to run there.
    fn enter(&self, bwrap: &Path) -> String {
        format!(
            "{} --unshare-all --die-with-parent --new-session \
             --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
             --symlink usr/bin /bin --proc /proc --dev /dev --tmpfs /tmp \
             --bind {}/{{name}} /workspace --chdir /workspace",
            bwrap.display(),
            self.containers.display()
        )
    }

    /// `sandbox=TEMPLATE` for `--container-runtime`.
    pub fn runtime(&self) -> wsfs_server::container::ContainerRuntime {
        let template = match &self.bwrap {
            Some(bwrap) => format!(
                "{} --ro-bind {} /wsfs /wsfs --stdio {{workdir}}",
                self.enter(bwrap),
                self.inner
            ),
            None => format!("{} --stdio {{workdir}}", self.inner),
        };
        format!("{SANDBOX_RUNTIME}={template}")
            .parse()
            .expect("the sandbox's runtime template")
    }

    /// The workdir a session names: `/workspace` inside bwrap, the
    /// directory itself without it.
    pub fn workdir(&self) -> String {
        match &self.bwrap {
            Some(_) => "/workspace".to_string(),
            None => self.files().display().to_string(),
        }
    }

    /// What CreateSession asks for this container.
    pub fn options(&self) -> SessionOptions {
        SessionOptions::container(SANDBOX_RUNTIME, &self.name, self.workdir())
    }

    /// Stops the container: every process running in it is killed and its
    /// directory moved away, so that entering it fails until [`start`].
    ///
    /// [`start`]: Sandbox::start
    pub fn stop(&self) {
        let files = self.files();
        std::fs::rename(&files, files.with_extension("stopped")).expect("move the container away");
        let marker = files.display().to_string();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&marker) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }

    /// Starts the container [`stop`](Sandbox::stop) stopped.
    pub fn start(&self) {
        let files = self.files();
        std::fs::rename(files.with_extension("stopped"), &files).expect("move the container back");
    }

    /// Runs `script` with `sh` inside the container, in its workdir.
    pub fn run(&self, script: &str) -> std::process::Output {
        let mut command = match &self.bwrap {
            Some(bwrap) => {
                let words = self.enter(bwrap).replace("{name}", &self.name);
                let mut words = words.split_whitespace();
                let mut c = std::process::Command::new(words.next().expect("bwrap"));
                c.args(words);
                c.arg("sh");
                c
            }
            None => {
                let mut c = std::process::Command::new("sh");
                c.current_dir(self.files());
                c
            }
        };
        command
            .arg("-c")
            .arg(script)
            .output()
            .expect("run a program in the container")
    }
}

/// A wsfs server on a loopback port with a temporary data directory,
/// running on the test's runtime until dropped.
pub struct TestServer {
    addr: SocketAddr,
    /// The temporary data directory, when the server owns it.
    _owned_dir: Option<TempDir>,
    data_dir: std::path::PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<wsfs::Result<()>>>,
}

impl TestServer {
    /// Starts a server with [`ServerConfig::for_tests`].
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// Starts a server after `configure` has adjusted its configuration.
    /// The port is bound before `serve` runs, so clients may connect at
    /// once.
    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("temporary data directory");
        let mut server = TestServer::start_at(dir.path(), configure).await;
        server._owned_dir = Some(dir);
        server
    }

    /// Starts a server on an existing data directory that outlives it (to
    /// restart a server on the same data, say).
    pub async fn start_at(
        data_dir: &Path,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        TestServer::serve_on(listener, data_dir, configure)
    }

    /// Starts a server on `data_dir` at `addr`, where a stopped server
    /// listened (to restart it where its clients left it). The port may
    /// take a moment to be free again; binding is retried for a while.
    pub async fn start_on(
        addr: SocketAddr,
        data_dir: &Path,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let started = std::time::Instant::now();
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => break listener,
                Err(e) if started.elapsed() < std::time::Duration::from_secs(30) => {
                    eprintln!("binding {addr} again: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot bind {addr} again: {e}"),
            }
        };
        TestServer::serve_on(listener, data_dir, configure)
    }

    fn serve_on(
        listener: TcpListener,
        data_dir: &Path,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let addr = listener.local_addr().expect("bound address");
        let mut config = ServerConfig::for_tests(data_dir.to_path_buf());
        config.listen = addr;
        configure(&mut config);
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(wsfs_server::serve(config, listener, async move {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            _owned_dir: None,
            data_dir: data_dir.to_path_buf(),
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A channel for raw generated clients.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.url())
            .expect("valid URL")
            .connect()
            .await
            .expect("connect to the test server")
    }

    /// Asks the server to stop and waits until `serve` returns.
    pub async fn stop(mut self) -> wsfs::Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let task = self
            .task
            .take()
            .expect("the server task is held until stop");
        task.await.expect("the server task did not panic")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
