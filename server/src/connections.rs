//! Client connections: how many the server holds, how long one may take to
//! say hello, and how long one may sit without a call.
//!
//! Each accepted socket holds one permit of a semaphore sized by
//! `--max-connections`; when none is left the server stops accepting, and
//! new clients wait in the kernel's listen backlog (the server's own
//! descriptors stay bounded) until a connection closes. Every connection is
//! a [`Conn`], whose reads carry a clock: a connection that has not sent
//! [`HELLO_BYTES`] within `--handshake-timeout`, or that has had no call
//! running for `--idle-timeout`, fails its next read and is closed. Calls
//! are counted per connection by [`CallsLayer`], which sees each
//! connection's [`ConnInfo`] in the request.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// What a client sends first to open HTTP/2: the 24-byte preface and a
/// SETTINGS frame (a 9-byte header at least). With TLS the hello alone is
/// longer, so there the deadline covers the first flight.
pub const HELLO_BYTES: u64 = 24 + 9;

/// The fewest connections a derived `--max-connections` allows.
const MIN_DERIVED_CONNECTIONS: usize = 16;

/// Raises the soft open-file limit to the hard one and returns the soft
/// limit now in force (`None`: unlimited or unknown).
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the open-file limit to its hard maximum");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// `--max-connections`, or when it is 0, half the open-file limit: the other
/// half is left to sessions, their files and the snapshot store.
pub fn max_connections(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(open_files / 2)
        .unwrap_or(usize::MAX)
        .clamp(MIN_DERIVED_CONNECTIONS, 1 << 20)
}

/// The clocks every connection runs under.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub handshake: Duration,
    pub idle: Duration,
}

/// One connection's calls: how many run, and when the last one ended.
struct Activity {
    opened: Instant,
    calls: AtomicUsize,
    /// Milliseconds after `opened` when the last call ended.
    last_ms: AtomicU64,
}

impl Activity {
    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_ms.load(Ordering::SeqCst))
    }
}

/// What a request knows of its connection.
#[derive(Clone)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    activity: Arc<Activity>,
}

/// An accepted socket under the connection cap and the two clocks.
pub struct Conn {
    io: TcpStream,
    info: ConnInfo,
    timeouts: Timeouts,
    clock: Pin<Box<Sleep>>,
    received: u64,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    fn new(io: TcpStream, permit: OwnedSemaphorePermit, timeouts: Timeouts) -> Conn {
        let opened = Instant::now();
        Conn {
            info: ConnInfo {
                remote: io.peer_addr().ok(),
                activity: Arc::new(Activity {
                    opened,
                    calls: AtomicUsize::new(0),
                    last_ms: AtomicU64::new(0),
                }),
            },
            io,
            timeouts,
            clock: Box::pin(tokio::time::sleep_until(opened + timeouts.handshake)),
            received: 0,
            _permit: permit,
        }
    }

    /// Whether the clock has run out; re-arms it when it has not.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        while self.clock.as_mut().poll(cx).is_ready() {
            if self.received < HELLO_BYTES {
                return Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no HTTP/2 handshake within {:?} (--handshake-timeout)",
                        self.timeouts.handshake
                    ),
                ));
            }
            let activity = &self.info.activity;
            let now = Instant::now();
            let next = if activity.calls.load(Ordering::SeqCst) > 0 {
                now + self.timeouts.idle
            } else {
                let due = activity.last() + self.timeouts.idle;
                if due <= now {
                    return Some(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no call for {:?} (--idle-timeout)", self.timeouts.idle),
                    ));
                }
                due
            };
            self.clock.as_mut().reset(next);
        }
        None
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                self.received += (buf.filled().len() - before) as u64;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The connection's task reads whenever it waits for the peer,
            // so the clock is looked at here and wakes the task when due.
            Poll::Pending => match self.expired(cx) {
                Some(e) => {
                    tracing::debug!(remote = ?self.info.remote, error = %e, "connection closed");
                    Poll::Ready(Err(e))
                }
                None => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Accepted connections, at most `max` open at once. Accept errors (a
/// descriptor limit reached, a peer gone before it was accepted) are
/// logged and waited out rather than ending the server.
pub fn incoming(
    listener: TcpListener,
    max: usize,
    timeouts: Timeouts,
) -> impl futures::Stream<Item = std::io::Result<Conn>> + Send + 'static {
    let permits = Arc::new(Semaphore::new(max));
    futures::stream::unfold((listener, permits), move |(listener, permits)| async move {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return None;
        };
        loop {
            match listener.accept().await {
                Ok((io, _)) => {
                    // Small frames (a Stat answer, a grep match) must not
                    // wait for Nagle's algorithm: that adds up to 40 ms.
                    let _ = io.set_nodelay(true);
                    let conn = Conn::new(io, permit, timeouts);
                    return Some((Ok(conn), (listener, permits)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}

/// Counts each connection's running calls, for the idle clock. A call runs
/// from its request until its response body is dropped, so a Watch or a
/// long download keeps its connection in use.
#[derive(Clone, Copy, Default)]
pub struct CallsLayer;

impl<S> tower::Layer<S> for CallsLayer {
    type Service = Calls<S>;

    fn layer(&self, inner: S) -> Calls<S> {
        Calls(inner)
    }
}

#[derive(Clone)]
pub struct Calls<S>(S);

/// The connection a request came in on, over TLS or not.
fn conn_info<B>(request: &http::Request<B>) -> Option<&ConnInfo> {
    let ext = request.extensions();
    ext.get::<ConnInfo>().or_else(|| {
        ext.get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>()
            .map(|t| t.get_ref())
    })
}

/// The span every call runs in: the peer's address, so that each log line
/// of the call says who sent it.
pub fn call_span(request: &http::Request<()>) -> tracing::Span {
    // At WARN, so that a server run at `warn` still names the peer.
    match conn_info(request).and_then(|i| i.remote) {
        Some(peer) => tracing::warn_span!("call", %peer),
        None => tracing::warn_span!("call"),
    }
}

/// One running call; ending it restarts its connection's idle clock.
struct CallGuard(Option<Arc<Activity>>);

impl CallGuard {
    fn open<B>(request: &http::Request<B>) -> CallGuard {
        let activity = conn_info(request).map(|i| i.activity.clone());
        if let Some(a) = &activity {
            a.calls.fetch_add(1, Ordering::SeqCst);
        }
        CallGuard(activity)
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(a) = &self.0 {
            let since_open = a.opened.elapsed().as_millis() as u64;
            a.last_ms.store(since_open, Ordering::SeqCst);
            a.calls.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for Calls<S>
where
    S: tower::Service<
        http::Request<tonic::body::Body>,
        Response = http::Response<tonic::body::Body>,
    >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        use http_body_util::BodyExt;
        let guard = CallGuard::open(&request);
        let response = self.0.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                tonic::body::Body::new(body.map_frame(move |frame| {
                    let _held = &guard;
                    frame
                }))
            }))
        })
    }
}
