//! Server configuration: flags, each also an environment variable.

pub mod http;
pub mod runtime;

pub use crate::durability::Durability;

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The server maximum for one write, unless `--max-write-bytes` says otherwise.
pub const DEFAULT_SERVER_MAX_WRITE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// wsfs-server: session workspaces served over gRPC.
#[derive(Debug, Clone, Parser)]
#[command(name = "wsfs-server", version, about)]
pub struct ServerConfig {
    /// Address to listen on: `IP:PORT` or `HOST:PORT` (a host name is
    /// resolved at start: `localhost:50051` listens on 127.0.0.1).
    #[arg(long, env = "WSFS_LISTEN", default_value = "127.0.0.1:50051", value_parser = parse_listen)]
    pub listen: SocketAddr,

    /// Serve Prometheus metrics (`GET /metrics`, plain HTTP) on this
    /// address (`IP:PORT` or `HOST:PORT`); off unless given.
    #[arg(long, env = "WSFS_METRICS_LISTEN", value_parser = parse_listen)]
    pub metrics_listen: Option<SocketAddr>,

    /// Where DIRECTORY sessions live (default: the user's data directory, or
    /// the temp directory, under `wsfs/`).
    #[arg(long, env = "WSFS_DATA_DIR", default_value_os_t = default_data_dir())]
    pub data_dir: PathBuf,

    /// An existing directory that sessions may be rooted in (repeatable;
    /// the env var takes a comma-separated list).
    #[arg(long = "allow-root", env = "WSFS_ALLOW_ROOT", value_delimiter = ',')]
    pub allow_roots: Vec<PathBuf>,

    /// The most bytes any one write may carry; a session's own per-write
    /// limit (default 32 MiB) never exceeds it.
    #[arg(long, env = "WSFS_MAX_WRITE_BYTES", default_value_t = DEFAULT_SERVER_MAX_WRITE_BYTES)]
    pub max_write_bytes: u64,

    /// The most sessions the server holds at once; CreateSession beyond it
    /// fails with RESOURCE_EXHAUSTED `QUOTA_EXCEEDED`. 0: no limit.
    #[arg(long, env = "WSFS_MAX_SESSIONS", default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,

    /// The most streams (ReadBytes, WriteBytes, Grep, Watch, Export) one
    /// session may have open at once; more fail with RESOURCE_EXHAUSTED
    /// `QUOTA_EXCEEDED`. 0: no limit.
    #[arg(long, env = "WSFS_MAX_STREAMS_PER_SESSION", default_value_t = DEFAULT_MAX_STREAMS_PER_SESSION)]
    pub max_streams_per_session: usize,

    /// Log format.
    #[arg(long, env = "WSFS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Turns tokens on: the Sessions service then needs this token
    /// (`authorization: Bearer <token>`), and every Filesystem call a
    /// session token. At least 16 characters. Without it, tokens are off,
    /// which only a loopback listener (or `--insecure`) allows.
    #[arg(long, env = "WSFS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<Secret>,

    /// Serve without tokens on a non-loopback address: anyone who reaches
    /// the port reads and writes every session.
    #[arg(long, env = "WSFS_INSECURE")]
    pub insecure: bool,

    /// TLS certificate chain (PEM); with `--tls-key`, the server speaks
    /// only TLS (`https://`).
    #[arg(long, env = "WSFS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM) for `--tls-cert`.
    #[arg(long, env = "WSFS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Change events each session holds for Watch and Changes; a reader
    /// further behind gets RESYNC.
    #[arg(long, env = "WSFS_WATCH_RING_EVENTS", default_value_t = crate::events::DEFAULT_RING_EVENTS)]
    pub watch_ring_events: usize,

    /// Milliseconds an idle Watch stream waits before a KEEPALIVE.
    #[arg(long, env = "WSFS_WATCH_KEEPALIVE_MS", default_value_t = 15_000)]
    pub watch_keepalive_ms: u64,

    /// The most bytes an archive import may expand to, and a snapshot may
    /// hold (apparent sizes), in a session that sets no `max_total_bytes`
    /// of its own; over it: RESOURCE_EXHAUSTED `QUOTA_EXCEEDED`. 0: no
    /// limit.
    #[arg(long, env = "WSFS_DEFAULT_MAX_TOTAL_BYTES", default_value_t = crate::quota::DEFAULT_MAX_TOTAL_BYTES)]
    pub default_max_total_bytes: u64,

    // Connections and shutdown (durations: `500ms`, `10s`, `2m`).
    /// The most client connections held at once. A newcomer beyond it is
    /// admitted by closing the connection that has done the least (one
    /// still handshaking, oldest first, else the one idle longest); one
    /// with a call running is never closed, and when every one has a call
    /// running the newcomer is closed at once. 0: half the open-file limit
    /// (raised to its hard maximum at start), at least 16.
    #[arg(long, env = "WSFS_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,

    /// The most connections one peer IP address may hold; a newcomer beyond
    /// it replaces that address's least active connection, as at
    /// --max-connections, and is closed at once when all of them have a
    /// call running. Default: half of --max-connections. 0: no per-peer
    /// cap (for a proxy on the same machine, whose address every client
    /// then shares).
    #[arg(long, env = "WSFS_MAX_CONNECTIONS_PER_PEER")]
    pub max_connections_per_peer: Option<usize>,

    /// The most calls one connection may run at once (HTTP/2
    /// `MAX_CONCURRENT_STREAMS`).
    #[arg(long, env = "WSFS_MAX_STREAMS_PER_CONNECTION", default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION)]
    pub max_streams_per_connection: u32,

    /// A connection that has not sent its HTTP/2 preface and settings (or,
    /// with TLS, its hello) within this time is closed.
    #[arg(long, env = "WSFS_HANDSHAKE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    pub handshake_timeout: Duration,

    /// A connection with no call running for this long is closed; a client
    /// reconnects on its next call.
    #[arg(long, env = "WSFS_IDLE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5m")]
    pub idle_timeout: Duration,

    /// How often the server pings each connection (HTTP/2 PING); a peer
    /// that does not answer within `--keepalive-timeout` is dropped.
    #[arg(long, env = "WSFS_KEEPALIVE_INTERVAL", value_parser = humantime::parse_duration, default_value = "30s")]
    pub keepalive_interval: Duration,

    /// How long a ping may go unanswered.
    #[arg(long, env = "WSFS_KEEPALIVE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "20s")]
    pub keepalive_timeout: Duration,

    /// On SIGTERM or SIGINT: Watch streams end at once (UNAVAILABLE), other
    /// calls get this long to finish, then the server exits.
    #[arg(long, env = "WSFS_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, default_value = "10s")]
    pub shutdown_grace: Duration,

    /// What an answered change survives: `none` (a crash of the server;
    /// nothing is fsynced) or `fsync` (a power loss too: data, directory
    /// entries, snapshots and session records are fsynced before the
    /// answer). See RELIABILITY.md.
    #[arg(long, env = "WSFS_DURABILITY", value_enum, default_value_t = Durability::None)]
    pub durability: Durability,

    /// A container runtime CONTAINER sessions may use, as
    /// `NAME=TEMPLATE` (repeatable; the env var separates them with `;`).
    /// TEMPLATE is the argv that runs `wsfs-server --stdio` inside a
    /// container, split on whitespace and never given to a shell, with
    /// `{name}`, `{workdir}` and `{wsfs}` (this executable) filled in.
    #[arg(
        long = "container-runtime",
        env = "WSFS_CONTAINER_RUNTIME",
        value_delimiter = ';'
    )]
    pub container_runtimes: Vec<runtime::ContainerRuntime>,

    /// Mirror every DIRECTORY snapshot to this object store, shared by
    /// every replica: `s3://bucket/prefix` (credentials and endpoint from
    /// the usual `AWS_*` variables, `AWS_ENDPOINT_URL` and
    /// `AWS_ALLOW_HTTP=true` for a local S3 API) or `file:///dir`. Any
    /// replica can then bring a session back with RecoverSession. The
    /// bucket must exist: the server lists it at start and refuses to
    /// start when it cannot.
    #[arg(long, env = "WSFS_OBJECT_STORE", value_name = "URL")]
    pub object_store: Option<String>,

    /// This server's name in the object store's session leases (default:
    /// the host name and a random suffix, drawn on the first start and kept
    /// in the data directory's `replica-id`). Two live servers must never
    /// share one.
    #[arg(long, env = "WSFS_REPLICA_ID")]
    pub replica_id: Option<String>,

    /// How long a session lease in the object store lasts unless renewed;
    /// the holder renews it every third of this, and stops serving a
    /// session a quarter of this before its lease runs out (the margin for
    /// the replicas' clocks) until a renewal succeeds. A lost replica's
    /// sessions can be recovered elsewhere once it ran out.
    #[arg(long, env = "WSFS_LEASE_TTL", value_parser = humantime::parse_duration, default_value = "30s")]
    pub lease_ttl: Duration,

    /// Snapshot (tag `auto`) every session changed since its last snapshot
    /// every SECS seconds, upload included; 0: off.
    #[arg(
        long,
        env = "WSFS_AUTOSNAPSHOT",
        value_name = "SECS",
        default_value_t = 0
    )]
    pub autosnapshot: u64,

    /// How often this replica sweeps the object store: removes the
    /// contents and manifests no snapshot record references (what deleted
    /// sessions and snapshots left), one replica at a time and never what
    /// an upload in flight relies on; 0: never.
    #[arg(long, env = "WSFS_SWEEP_INTERVAL", value_parser = humantime::parse_duration, default_value = "1h")]
    pub sweep_interval: Duration,

    /// The sweep keeps unreferenced contents and manifests younger than
    /// this (by the bucket's clock), whatever the markers say.
    #[arg(long, env = "WSFS_SWEEP_GRACE", value_parser = humantime::parse_duration, default_value = "1h")]
    pub sweep_grace: Duration,

    /// DeepFabric's VFS API over HTTP (`--http-listen` and the sessions it
    /// creates); see [`crate::http`].
    #[command(flatten)]
    pub http: http::HttpConfig,

    /// Serve the one directory DIR over stdin and stdout instead of
    /// listening (what a container runtime starts inside a container):
    /// tokens off, logs on stderr.
    #[arg(long, value_name = "DIR")]
    pub stdio: Option<PathBuf>,
}

/// A secret from the command line: shown as `<redacted>` by `{:?}`, so a
/// logged configuration does not leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_string())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Sessions a server holds at most unless `--max-sessions` says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// Streams one session may hold open unless `--max-streams-per-session`
/// says otherwise.
pub const DEFAULT_MAX_STREAMS_PER_SESSION: usize = 256;

/// Calls one connection may run at once unless
/// `--max-streams-per-connection` says otherwise.
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// The shortest admin token accepted.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// A listening address from the command line: `IP:PORT`, or `HOST:PORT`
/// with the host name resolved here, once, at start (an IPv4 address
/// first when the name has both kinds, so `localhost` is 127.0.0.1). The
/// result is the address bound, so the loopback rule
/// ([`ServerConfig::validate`]) judges what actually listens.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let example = "e.g. 127.0.0.1:50051 or localhost:50051";
    let (host, port) = s
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .ok_or_else(|| format!("'{s}' is not HOST:PORT ({example})"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("'{port}' is not a port number (0 to 65535) in '{s}' ({example})"))?;
    let unresolved = |why: String| {
        format!(
            "the host name '{host}' does not resolve ({why}): give an IP address \
             (127.0.0.1:{port} for this machine only) or a name this machine resolves"
        )
    };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| unresolved(e.to_string()))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| unresolved("no address".to_string()))
}

pub fn default_data_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("wsfs")
}

impl ServerConfig {
    /// A loopback configuration on an ephemeral port with its data under
    /// `data_dir`, for tests and benchmarks.
    pub fn for_tests(data_dir: PathBuf) -> Self {
        ServerConfig {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            metrics_listen: None,
            data_dir,
            allow_roots: Vec::new(),
            max_write_bytes: DEFAULT_SERVER_MAX_WRITE_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_streams_per_session: DEFAULT_MAX_STREAMS_PER_SESSION,
            log_format: LogFormat::Text,
            admin_token: None,
            insecure: false,
            tls_cert: None,
            tls_key: None,
            watch_ring_events: crate::events::DEFAULT_RING_EVENTS,
            watch_keepalive_ms: 15_000,
            default_max_total_bytes: crate::quota::DEFAULT_MAX_TOTAL_BYTES,
            max_connections: 0,
            max_connections_per_peer: None,
            max_streams_per_connection: DEFAULT_MAX_STREAMS_PER_CONNECTION,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(10),
            durability: Durability::None,
            container_runtimes: Vec::new(),
            stdio: None,
            object_store: None,
            replica_id: None,
            lease_ttl: Duration::from_secs(30),
            autosnapshot: 0,
            sweep_interval: Duration::from_secs(3600),
            sweep_grace: Duration::from_secs(3600),
            http: http::HttpConfig::default(),
        }
    }

    /// Refuses configurations that would expose the filesystem: tokens off
    /// on a listener other than loopback (unless `--insecure`), a short
    /// admin token, half a TLS identity. `listen` is the address actually
    /// bound. The error says why and what to pass instead.
    pub fn validate(&self, listen: SocketAddr) -> Result<(), String> {
        if let Some(t) = &self.admin_token {
            if t.expose().chars().count() < MIN_ADMIN_TOKEN_CHARS {
                return Err(format!(
                    "--admin-token must be at least {MIN_ADMIN_TOKEN_CHARS} characters long"
                ));
            }
        }
        self.exposure(listen, "")?;
        if let Some(http) = self.http.http_listen {
            self.exposure(http, " (--http-listen)")?;
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("--tls-cert and --tls-key go together".to_string());
        }
        self.http.validate()?;
        self.validate_connections()
    }

    /// The one rule for every listener: tokens off only on loopback, or
    /// with `--insecure`. `which` names the listener in the refusal.
    fn exposure(&self, addr: SocketAddr, which: &str) -> Result<(), String> {
        if self.admin_token.is_some() || addr.ip().is_loopback() || self.insecure {
            return Ok(());
        }
        Err(format!(
            "refusing to listen on {addr}{which} without tokens: anyone who reaches it could read and write every session. \
             Set --admin-token (WSFS_ADMIN_TOKEN), listen on loopback (127.0.0.1 or ::1), \
             or pass --insecure to serve an open filesystem on purpose"
        ))
    }

    fn validate_connections(&self) -> Result<(), String> {
        if self.max_streams_per_connection == 0 {
            return Err("--max-streams-per-connection must be at least 1".to_string());
        }
        for (flag, d) in [
            ("--handshake-timeout", self.handshake_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--keepalive-interval", self.keepalive_interval),
            ("--keepalive-timeout", self.keepalive_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be longer than zero"));
            }
        }
        if self.lease_ttl < Duration::from_secs(1) {
            return Err("--lease-ttl must be at least 1s".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ServerConfig {
        ServerConfig::for_tests(std::env::temp_dir())
    }

    #[test]
    fn tokens_off_is_fine_on_loopback_only() {
        assert!(config().validate("127.0.0.1:1".parse().unwrap()).is_ok());
        assert!(config().validate("[::1]:1".parse().unwrap()).is_ok());
        let err = config().validate("0.0.0.0:1".parse().unwrap()).unwrap_err();
        assert!(
            err.contains("--admin-token") && err.contains("--insecure"),
            "{err}"
        );
    }

    #[test]
    fn the_http_listener_follows_the_same_loopback_rule() {
        let mut c = config();
        c.http.http_listen = Some("127.0.0.1:0".parse().unwrap());
        assert!(c.validate("127.0.0.1:1".parse().unwrap()).is_ok());
        c.http.http_listen = Some("0.0.0.0:8080".parse().unwrap());
        let err = c.validate("127.0.0.1:1".parse().unwrap()).unwrap_err();
        assert!(
            err.contains("--http-listen") && err.contains("--admin-token"),
            "{err}"
        );
        c.admin_token = Some("0123456789abcdef".into());
        assert!(c.validate("127.0.0.1:1".parse().unwrap()).is_ok());
        let mut c = config();
        c.http.http_listen = Some("0.0.0.0:8080".parse().unwrap());
        c.insecure = true;
        assert!(c.validate("127.0.0.1:1".parse().unwrap()).is_ok());
    }

    #[test]
    fn http_flags_are_checked() {
        let parse = |args: &[&str]| ServerConfig::try_parse_from([&["wsfs-server"], args].concat());
        let c = parse(&["--http-listen", "127.0.0.1:3000"]).unwrap();
        assert_eq!(c.http.http_listen, Some("127.0.0.1:3000".parse().unwrap()));
        assert_eq!(
            c.http,
            http::HttpConfig {
                http_listen: c.http.http_listen,
                ..Default::default()
            }
        );
        let loopback = "127.0.0.1:1".parse().unwrap();
        for (flag, value, refusal) in [
            ("--http-request-timeout", "0s", "longer than zero"),
            ("--http-session-idle-ttl", "500ms", "at least 1s"),
        ] {
            let err = parse(&[flag, value])
                .unwrap()
                .validate(loopback)
                .unwrap_err();
            assert!(err.contains(flag) && err.contains(refusal), "{err}");
        }
        assert!(parse(&["--http-session-idle-ttl", "0s"])
            .unwrap()
            .validate(loopback)
            .is_ok());
        let err = parse(&["--http-session-backend", "container"]).unwrap_err();
        assert!(err.to_string().contains("memory"), "{err}");
    }

    #[test]
    fn insecure_or_a_token_opens_other_addresses() {
        let mut c = config();
        c.insecure = true;
        assert!(c.validate("0.0.0.0:1".parse().unwrap()).is_ok());
        let mut c = config();
        c.admin_token = Some("0123456789abcdef".into());
        assert!(c.validate("0.0.0.0:1".parse().unwrap()).is_ok());
        c.admin_token = Some("short".into());
        assert!(c.validate("127.0.0.1:1".parse().unwrap()).is_err());
    }

    #[test]
    fn durability_is_none_unless_fsync_is_asked_for() {
        let parse = |args: &[&str]| ServerConfig::try_parse_from([&["wsfs-server"], args].concat());
        assert_eq!(parse(&[]).unwrap().durability, Durability::None);
        let fsync = parse(&["--durability", "fsync"]).unwrap();
        assert_eq!(fsync.durability, Durability::Fsync);
        let err = parse(&["--durability", "sometimes"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("none") && err.contains("fsync"), "{err}");
    }

    #[test]
    fn listen_takes_a_host_name_and_the_rule_judges_what_it_resolves_to() {
        let parse = |args: &[&str]| ServerConfig::try_parse_from([&["wsfs-server"], args].concat());
        let c = parse(&[
            "--listen",
            "localhost:50051",
            "--metrics-listen",
            "localhost:9090",
            "--http-listen",
            "localhost:3000",
        ])
        .unwrap();
        let http = c.http.http_listen.unwrap();
        assert!(http.ip().is_loopback() && http.port() == 3000, "{http}");
        assert!(c.listen.ip().is_loopback(), "{}", c.listen);
        assert_eq!(c.listen.port(), 50051);
        let metrics = c.metrics_listen.unwrap();
        assert!(
            metrics.ip().is_loopback() && metrics.port() == 9090,
            "{metrics}"
        );
        assert!(c.validate(c.listen).is_ok(), "loopback: tokens may be off");
        let literal = parse(&["--listen", "[::1]:7"]).unwrap();
        assert_eq!(literal.listen, "[::1]:7".parse().unwrap());
    }

    #[test]
    fn a_listen_address_that_does_not_resolve_is_refused_with_what_to_give() {
        let parse = |args: &[&str]| ServerConfig::try_parse_from([&["wsfs-server"], args].concat());
        // Not a valid host name: refused without asking any name server.
        let err = parse(&["--listen", "no such host:50051"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'no such host' does not resolve") && err.contains("127.0.0.1:50051"),
            "{err}"
        );
        let err = parse(&["--listen", "localhost"]).unwrap_err().to_string();
        assert!(err.contains("not HOST:PORT"), "{err}");
        let err = parse(&["--metrics-listen", "localhost:http"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a port number"), "{err}");
    }

    #[test]
    fn debug_output_hides_the_admin_token() {
        let mut c = config();
        c.admin_token = Some("0123456789abcdef-secret".into());
        assert!(!format!("{c:?}").contains("secret"));
    }
}
