//! The HTTP face's flags (`--http-*`); the face itself is [`crate::http`].

use clap::ValueEnum;
use std::net::SocketAddr;
use std::time::Duration;

/// The backends a DeepFabric session may live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum HttpBackend {
    #[default]
    Memory,
    Directory,
}

/// Flags of the HTTP face.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "DeepFabric VFS API over HTTP")]
pub struct HttpConfig {
    /// Serve DeepFabric's VFS API (`/vfs/execute`, `/health`, ...) over
    /// plain HTTP on this address; off unless given. Without tokens only a
    /// loopback address is allowed (or `--insecure`); with tokens, requests
    /// need `authorization: Bearer <token>`.
    #[arg(long, env = "WSFS_HTTP_LISTEN", value_parser = super::parse_listen)]
    pub http_listen: Option<SocketAddr>,

    /// Where the sessions the HTTP face creates keep their files.
    #[arg(long, env = "WSFS_HTTP_SESSION_BACKEND", value_enum, default_value_t = HttpBackend::Memory)]
    pub http_session_backend: HttpBackend,

    /// A session the HTTP face created is removed after this long without
    /// a call (from any client); `0s`: never.
    #[arg(long, env = "WSFS_HTTP_SESSION_IDLE_TTL", value_parser = humantime::parse_duration, default_value = "1h")]
    pub http_session_idle_ttl: Duration,

    /// The most files one such session may hold; 0: no limit.
    #[arg(long, env = "WSFS_HTTP_SESSION_MAX_FILES", default_value_t = 0)]
    pub http_session_max_files: u64,

    /// The most bytes one such session may hold; 0: no limit.
    #[arg(long, env = "WSFS_HTTP_SESSION_MAX_TOTAL_BYTES", default_value_t = 0)]
    pub http_session_max_total_bytes: u64,

    /// The longest one HTTP request may take, its body included; past it
    /// the answer is 503 (a change already under way still completes).
    #[arg(long, env = "WSFS_HTTP_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    pub http_request_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            http_listen: None,
            http_session_backend: HttpBackend::Memory,
            http_session_idle_ttl: Duration::from_secs(3600),
            http_session_max_files: 0,
            http_session_max_total_bytes: 0,
            http_request_timeout: Duration::from_secs(30),
        }
    }
}

impl HttpConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.http_request_timeout.is_zero() {
            return Err("--http-request-timeout must be longer than zero".to_string());
        }
        // Session TTLs are whole seconds: a shorter one would mean never.
        let ttl = self.http_session_idle_ttl;
        if !ttl.is_zero() && ttl < Duration::from_secs(1) {
            return Err("--http-session-idle-ttl must be 0s (never) or at least 1s".to_string());
        }
        Ok(())
    }
}
