//! Server configuration: flags, each also an environment variable.

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

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
    /// Address to listen on.
    #[arg(long, env = "WSFS_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

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

    /// Log format.
    #[arg(long, env = "WSFS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
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
            data_dir,
            allow_roots: Vec::new(),
            max_write_bytes: DEFAULT_SERVER_MAX_WRITE_BYTES,
            log_format: LogFormat::Text,
        }
    }
}
