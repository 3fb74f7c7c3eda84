//! Several real `wsfs-server` processes behind a real nginx, configured from
//! the shipped `deploy/nginx/wsfs.conf` with only its ports and file paths
//! changed: what the proxy test and the conformance suite's `grpc_proxy`
//! factory talk to.
//!
//! The binaries are the ones cargo built beside the test binary:
//! `cargo test --workspace` builds them; to run one test binary of this
//! crate alone, `cargo build -p wsfs-server -p wsfs-client --bins` first.
//! Every process dies with the test process (`PR_SET_PDEATHSIG`), so that no
//! replica or proxy outlives a run, even a killed one, and a [`Cluster`]
//! kept in a static for a whole test binary needs no cleanup.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The nginx configuration the repository ships.
pub const SHIPPED_NGINX_CONF: &str = include_str!("../../deploy/nginx/wsfs.conf");

/// How long a process may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One `wsfs-server` process with its own data directory and port.
pub struct Replica {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    child: Child,
    /// Held so that the server never writes into a closed pipe.
    _stdout: std::io::BufReader<ChildStdout>,
}

impl Replica {
    /// `http://127.0.0.1:PORT`: this replica directly, past the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts replica `index` under `dir` (its data in
    /// `dir/replica-<index>/data`, kept across starts) with `setup`'s
    /// flags and environment, without a proxy.
    pub fn start(dir: &Path, index: usize, setup: &ReplicaSetup) -> Replica {
        start_replica(dir, index, setup)
    }

    /// Stops the process as an operator does (SIGTERM) and waits for it
    /// to exit, at most `within`; its exit status, or `None` if it still
    /// runs.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        terminate(&mut self.child, within)
    }

    /// Kills the process at once, as a lost machine would vanish.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What each replica of a [`Cluster`] is started with beyond its port and
/// data directory.
#[derive(Debug, Clone, Default)]
pub struct ReplicaSetup {
    /// Where it listens (default: a free loopback port).
    pub listen: Option<SocketAddr>,
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
}

impl ReplicaSetup {
    /// Replica `index` of several sharing the object store `bucket`,
    /// named `replica-<index>`, with leases of `lease_ttl` (whole seconds)
    /// and `envs` (the store's credentials and endpoint).
    pub fn mirrored(
        bucket: &str,
        index: usize,
        lease_ttl: Duration,
        envs: Vec<(String, String)>,
    ) -> ReplicaSetup {
        ReplicaSetup {
            listen: None,
            args: vec![
                "--object-store".into(),
                bucket.into(),
                "--replica-id".into(),
                format!("replica-{index}"),
                "--lease-ttl".into(),
                format!("{}s", lease_ttl.as_secs()),
            ],
            envs,
        }
    }
}

impl ReplicaSetup {
    /// The same setup with `token` as the admin token.
    pub fn with_admin(mut self, token: &str) -> ReplicaSetup {
        self.args.extend(["--admin-token".into(), token.into()]);
        self
    }
}

/// The index of the replica whose disk holds session `id`, if one does.
pub fn holder(replicas: &[Replica], id: &str) -> Option<usize> {
    replicas.iter().position(|r| {
        r.data_dir
            .join("sessions")
            .join(id)
            .join("session.json")
            .exists()
    })
}

/// `call`'s answer once it succeeds and `done` holds of it, retrying
/// while it is UNAVAILABLE (the proxy found a replica gone, a lease has
/// not run out yet, a session is being handed over) for `patience`; any
/// other error fails the test.
pub async fn once_answered<T, F, Fut>(
    what: &str,
    patience: Duration,
    mut call: F,
    done: impl Fn(&T) -> bool,
) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = wsfs::Result<T>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Ok(answer) if done(&answer) => return answer,
            Ok(answer) => assert!(
                started.elapsed() < patience,
                "{what}: still {answer:?} after {:?}",
                started.elapsed()
            ),
            Err(e) if e.code() == tonic::Code::Unavailable && started.elapsed() < patience => {}
            Err(e) => panic!("{what}: {e} (after {:?})", started.elapsed()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replicas and the nginx in front of them, in a directory of their own.
pub struct Cluster {
    pub replicas: Vec<Replica>,
    /// The proxy's address.
    pub proxy: SocketAddr,
    nginx: Child,
    dir: PathBuf,
}

impl Cluster {
    /// `replicas` servers behind nginx; `None` (the caller returns early)
    /// when nginx is not installed and not required.
    pub fn start(replicas: usize) -> Option<Cluster> {
        Cluster::start_configured(replicas, |_| ReplicaSetup::default())
    }

    /// [`Cluster::start`] with replica `i` started as `setup(i)` says.
    pub fn start_configured(
        replicas: usize,
        setup: impl Fn(usize) -> ReplicaSetup,
    ) -> Option<Cluster> {
        let nginx = crate::kit::system_tool("nginx")?;
        Some(Cluster::start_with(&nginx, replicas, setup, ""))
    }

    /// [`Cluster::start`] with `locations` (nginx `location` blocks) placed
    /// before the shipped file's `location /`: a proxy that answers some
    /// calls itself, as a gateway that forbids a method does.
    pub fn start_with_locations(replicas: usize, locations: &str) -> Option<Cluster> {
        let nginx = crate::kit::system_tool("nginx")?;
        Some(Cluster::start_with(
            &nginx,
            replicas,
            |_| ReplicaSetup::default(),
            locations,
        ))
    }

    fn start_with(
        nginx: &Path,
        replicas: usize,
        setup: impl Fn(usize) -> ReplicaSetup,
        locations: &str,
    ) -> Cluster {
        let dir = fresh_dir();
        let replicas: Vec<Replica> = (0..replicas)
            .map(|i| start_replica(&dir, i, &setup(i)))
            .collect();
        let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
        let (nginx, proxy) = start_nginx(nginx, &dir, &addrs, locations);
        Cluster {
            replicas,
            proxy,
            nginx,
            dir,
        }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.proxy)
    }

    /// Kills replica `index` at once, as a lost machine would vanish.
    pub fn kill_replica(&mut self, index: usize) {
        self.replicas[index].kill();
    }

    /// Starts replica `index` again, after it was killed or stopped, as
    /// `setup` says, with its data directory and at its address: as a
    /// restarted pod comes back.
    pub fn restart_replica(&mut self, index: usize, setup: &ReplicaSetup) {
        let setup = ReplicaSetup {
            listen: Some(self.replicas[index].addr),
            ..setup.clone()
        };
        self.replicas[index] = start_replica(&self.dir, index, &setup);
    }

    /// The proxy's error log, for a failing assertion's message.
    pub fn proxy_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.nginx.kill();
        let _ = self.nginx.wait();
        for replica in &mut self.replicas {
            replica.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `child` SIGTERM and waits up to `within` for it to exit;
/// `Some(status)` when it did.
pub fn terminate(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    // SAFETY: signalling our own child by pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The binary `name` that cargo built beside this test binary.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>: the binaries are in target/<profile>.
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first (cargo build -p wsfs-server -p wsfs-client --bins)",
        path.display()
    );
    path
}

/// A directory for one cluster under the build's temporary directory;
/// those of test processes that are gone are removed first (a static
/// cluster is never dropped).
pub fn fresh_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let base = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("tmp")
        .join("wsfs-clusters");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().unwrap_or_default();
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = base.join(format!("{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the cluster's directory");
    dir
}

fn start_replica(dir: &Path, index: usize, setup: &ReplicaSetup) -> Replica {
    let home = dir.join(format!("replica-{index}"));
    std::fs::create_dir_all(&home).expect("the replica's directory");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("server.log"))
        .expect("the replica's log");
    let data_dir = home.join("data");
    let mut command = Command::new(binary("wsfs-server"));
    command
        .arg("--listen")
        .arg(
            setup
                .listen
                .map_or("127.0.0.1:0".to_string(), |a| a.to_string()),
        )
        .arg("--data-dir")
        .arg(&data_dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    // The test's own WSFS_* settings (a token, a server URL) are not the
    // replica's.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("WSFS_") {
            command.env_remove(key);
        }
    }
    command.args(&setup.args);
    command.envs(setup.envs.iter().map(|(k, v)| (k, v)));
    let mut child = spawn_tied(command);
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("the replica's first line");
    // "wsfs-server listening on 127.0.0.1:PORT (...)"
    let addr = line
        .split_whitespace()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("replica {index} did not say where it listens: {line:?}"));
    Replica {
        addr,
        data_dir,
        child,
        _stdout: stdout,
    }
}

/// The shipped configuration with its replicas, listening port and file
/// paths replaced, and `locations` put before its `location /` (nothing
/// else). Panics when the shipped file no longer has the lines it
/// replaces, so that the two cannot drift apart.
pub fn render_nginx_conf(
    listen: SocketAddr,
    replicas: &[SocketAddr],
    dir: &Path,
    locations: &str,
) -> String {
    const SERVER: &str = "server 127.0.0.1:50051 ";
    const LISTEN: &str = "listen 127.0.0.1:8080 ";
    const ACCESS_LOG: &str = "/var/log/nginx/wsfs-access.log";
    let mut out = String::new();
    let mut replaced = (0, 0, 0, 0);
    for line in SHIPPED_NGINX_CONF.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("server 127.0.0.1:") {
            // The first shipped replica line is the template of every one.
            if line.contains(SERVER) {
                for addr in replicas {
                    out.push_str(&line.replacen("127.0.0.1:50051", &addr.to_string(), 1));
                    out.push('\n');
                }
                replaced.0 += 1;
            }
            continue;
        }
        if trimmed == "location / {" {
            out.push_str(locations);
        }
        if line.contains(LISTEN) {
            out.push_str(&line.replacen("127.0.0.1:8080", &listen.to_string(), 1));
            replaced.1 += 1;
        } else if line.contains(ACCESS_LOG) {
            let path = dir.join("access.log");
            out.push_str(&line.replacen(ACCESS_LOG, &path.display().to_string(), 1));
            replaced.2 += 1;
        } else {
            out.push_str(line);
        }
        out.push('\n');
        if trimmed == "http {" {
            // Where nginx keeps request and response bodies it buffers:
            // inside the cluster's directory rather than the system's.
            for kind in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                let path = dir.join(format!("{kind}_temp"));
                out.push_str(&format!("    {kind}_temp_path {};\n", path.display()));
            }
            replaced.3 += 1;
        }
    }
    assert_eq!(
        replaced,
        (1, 1, 1, 1),
        "the shipped nginx configuration changed shape: one replica line, one listen, one access log and one http block expected"
    );
    out
}

/// nginx on a free loopback port. The port is found free, released, then
/// bound by nginx: another process may take it in between, so a start that
/// fails is tried again on a fresh port.
fn start_nginx(
    nginx: &Path,
    dir: &Path,
    replicas: &[SocketAddr],
    locations: &str,
) -> (Child, SocketAddr) {
    const ATTEMPTS: usize = 3;
    for _ in 0..ATTEMPTS {
        if let Some(started) = try_start_nginx(nginx, dir, replicas, locations) {
            return started;
        }
    }
    let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
    panic!("nginx did not start in {ATTEMPTS} attempts:\n{log}");
}

fn try_start_nginx(
    nginx: &Path,
    dir: &Path,
    replicas: &[SocketAddr],
    locations: &str,
) -> Option<(Child, SocketAddr)> {
    let listen = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        probe.local_addr().expect("its address")
    };
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, render_nginx_conf(listen, replicas, dir, locations)).expect("nginx.conf");
    let mut command = Command::new(nginx);
    command
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(&conf)
        // One process (no master and workers), so that the signal that
        // stops it stops all of nginx.
        .arg("-g")
        .arg(format!(
            "daemon off; master_process off; pid {};",
            dir.join("nginx.pid").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = spawn_tied(command);
    let started = Instant::now();
    loop {
        // Listening, and nginx (not a process that took the port) is the
        // one listening: it is still running.
        if std::net::TcpStream::connect(listen).is_ok() {
            std::thread::sleep(Duration::from_millis(50));
            if matches!(child.try_wait(), Ok(None)) {
                return Some((child, listen));
            }
        }
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "nginx did not listen on {listen} within {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` so that its process is killed when this test process
/// ends. `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
/// ends, and test threads end with their test: every child is therefore
/// forked by one thread that lives as long as the process.
pub fn spawn_tied(mut command: Command) -> Child {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("process-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
                // The sender lives in a static: this loop never ends, and
                // the thread never exits while children depend on it.
            })
            .expect("the spawner thread");
        Mutex::new(requests)
    });
    let program = command.get_program().to_string_lossy().into_owned();
    let (reply, spawned) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, reply))
        .expect("the spawner thread is alive");
    spawned
        .recv()
        .expect("the spawner answers")
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"))
}
