//! `wsfs-server --stdio DIR`: the inner end of a CONTAINER session.
//!
//! A container runtime starts this inside the container; it serves one
//! DIRECTORY session rooted at DIR (created by the outer server's
//! CreateSession, with the outer session's limits) over the one HTTP/2
//! connection made of its stdin and stdout, with tokens off, and exits
//! when that connection ends. Its own state (the session record, the
//! staging directory, import spools) lives in a private temporary
//! directory that is removed on exit; commits land in DIR with the
//! backend's reserved temporary names when that directory is on another
//! filesystem, so DIR's listings never show the server's work.

use crate::config::ServerConfig;
use crate::registry::SessionRegistry;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wsfs::proto::{filesystem_server::FilesystemServer, sessions_server::SessionsServer};
use wsfs::{Error, Result};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout as one connection; `closed` fires when stdin ends.
struct StdioConnection {
    io: tokio::io::Join<Reader, Writer>,
    closed: Arc<tokio::sync::Notify>,
}

/// stdin, read through the reactor when it is a pipe (what an exec
/// gives): tokio's own stdin hands every read to a blocking thread, which
/// costs each small call a thread hop each way.
fn stdin_reader() -> Reader {
    use std::os::fd::AsFd;
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Receiver::from_file);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

/// stdout, as [`stdin_reader`] reads stdin.
fn stdout_writer() -> Writer {
    use std::os::fd::AsFd;
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Sender::from_file);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}

impl tonic::transport::server::Connected for StdioConnection {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for StdioConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() == before
            || matches!(polled, Poll::Ready(Err(_)))
        {
            self.closed.notify_one();
        }
        polled
    }
}

impl AsyncWrite for StdioConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The configuration the inner server runs with: `dir` the only allowed
/// root, its state under `state`, tokens off, the operator's limits kept.
fn inner_config(mut config: ServerConfig, dir: &Path, state: &Path) -> ServerConfig {
    config.data_dir = state.to_path_buf();
    config.allow_roots = vec![dir.to_path_buf()];
    config.admin_token = None;
    config.container_runtimes = Vec::new();
    config.stdio = None;
    config.metrics_listen = None;
    config
}

/// Serves `dir` on stdin/stdout until the connection ends.
pub async fn serve_stdio(config: ServerConfig, dir: PathBuf) -> Result<()> {
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| Error::invalid_argument(format!("--stdio '{}': {e}", dir.display())))?;
    if !dir.is_dir() {
        return Err(Error::invalid_argument(format!(
            "--stdio '{}' is not a directory",
            dir.display()
        )));
    }
    let state = tempfile::Builder::new()
        .prefix("wsfs-stdio-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot make a private state directory: {e}")))?;
    let config = inner_config(config, &dir, state.path());
    let registry = Arc::new(SessionRegistry::new(Arc::new(config)));
    let auth = Arc::new(crate::auth::Auth::new(None));
    let filesystem = FilesystemServer::new(crate::service::FilesystemService::new(
        registry.clone(),
        auth.clone(),
    ))
    .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
    .max_encoding_message_size(crate::MAX_MESSAGE_BYTES);
    let sessions = SessionsServer::new(crate::service::SessionsService::new(registry, auth))
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(crate::MAX_MESSAGE_BYTES);

    let closed = Arc::new(tokio::sync::Notify::new());
    let connection = StdioConnection {
        io: tokio::io::join(stdin_reader(), stdout_writer()),
        closed: closed.clone(),
    };
    // The one connection, then nothing: the server must not stop accepting
    // (and return) while that connection is still being served.
    let incoming = futures::stream::StreamExt::chain(
        futures::stream::once(async { Ok::<_, std::io::Error>(connection) }),
        futures::stream::pending(),
    );
    tracing::info!(dir = %dir.display(), "serving one directory on stdin/stdout");
    tonic::transport::Server::builder()
        .max_frame_size(wsfs::HTTP2_MAX_FRAME_BYTES)
        .initial_stream_window_size(crate::UPLOAD_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(crate::UPLOAD_CONNECTION_WINDOW_BYTES)
        .add_service(filesystem)
        .add_service(sessions)
        .serve_with_incoming_shutdown(incoming, async move { closed.notified().await })
        .await
        .map_err(|e| Error::internal(format!("serving stdin/stdout failed: {e}")))?;
    drop(state);
    Ok(())
}

/// `wsfs-server --stdio DIR` as a program: serves, then exits 0, or says
/// why not on stderr and exits 1.
pub async fn run_stdio(config: ServerConfig, dir: PathBuf) -> std::process::ExitCode {
    match serve_stdio(config, dir).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wsfs-server: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
