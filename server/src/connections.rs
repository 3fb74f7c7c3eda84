//! Client connections: how many the server holds, who goes when a newcomer
//! finds them full, how long one may take to say hello, and how long one
//! may sit without a call. Both listeners, gRPC and the HTTP face, admit
//! their connections by these rules, each into a table of its own; they
//! differ only in what counts as a client's hello ([`Hello`]).
//!
//! The server accepts every connection the kernel queues, and admits it
//! into a table of at most `--max-connections`, of which one peer address
//! may hold at most `--max-connections-per-peer`. A newcomer that finds its
//! peer's share or the table full is admitted by shedding the connection
//! that has done the least there (of its own peer's, when the peer's share
//! is what is full): one still handshaking, oldest first, else the one idle
//! longest with no call running. A connection with a call running is never
//! shed; when nothing can be shed the newcomer is closed at once, so that
//! no client waits in the listen backlog behind silent sockets. Loopback
//! clients all share one address; the rule alone protects a bystander
//! among them, since an attacker's silent sockets are always the ones
//! still handshaking. A hello counts from the moment its bytes are in the
//! socket, read by the connection's task or not: a bystander whose task
//! has not run yet is not shed for being new. The server's descriptors stay bounded: the accept
//! loop waits for a shed connection to close (at most [`SHED_WAIT`])
//! before it goes on.
//!
//! Every connection is a [`Conn`], whose reads carry a clock: a connection
//! that has not said its hello within `--handshake-timeout`, or that
//! has had no call running for `--idle-timeout`, fails its next read and is
//! closed; so does one that was shed. Calls are counted per connection by
//! [`CallsLayer`], which sees each connection's [`ConnInfo`] in the request
//! (the HTTP face opens a [`CallGuard`] per request itself).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, DropGuard, WaitForCancellationFutureOwned};

/// What a client sends first to open HTTP/2: the 24-byte preface and a
/// SETTINGS frame (a 9-byte header at least). With TLS the hello alone is
/// longer, so there the deadline covers the first flight.
pub const HELLO_BYTES: u64 = 24 + 9;

/// What a listener's clients say first; until they have, a connection is
/// handshaking (shed first, and closed at `--handshake-timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hello {
    /// HTTP/2 (gRPC): [`HELLO_BYTES`] bytes.
    Http2,
    /// HTTP/1.1 (the HTTP face): a whole request head, which a call's start
    /// tells, or, for shedding, an empty line ending one in the bytes read
    /// or in the first [`HEAD_PEEK`] waiting ([`HeadScan`]). A count of
    /// bytes alone would let half a request line pass for a hello.
    Request,
}

impl Hello {
    /// What a connection that runs out of `--handshake-timeout` did not send.
    fn missing(self) -> &'static str {
        match self {
            Hello::Http2 => "no HTTP/2 handshake",
            Hello::Request => "no whole HTTP request",
        }
    }
}

/// How many of a connection's unread bytes are looked at for the end of a
/// request head, when deciding whom to shed: a head longer than this
/// counts once the connection's task has read it.
const HEAD_PEEK: usize = 512;

/// How far an HTTP/1.1 byte stream is into its first request head: the
/// last byte other than CR, whether a line with text was seen, and whether
/// an empty line after it ended the head. Packed into one `u16` so that the
/// connection's task can publish it to the admission whole.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct HeadScan {
    last: u8,
    text: bool,
    ended: bool,
}

impl HeadScan {
    fn scan(mut self, bytes: &[u8]) -> HeadScan {
        for &b in bytes {
            if self.ended {
                break;
            }
            match b {
                b'\r' => {}
                b'\n' if self.last == b'\n' && self.text => self.ended = true,
                b'\n' => self.last = b,
                _ => {
                    self.last = b;
                    self.text = true;
                }
            }
        }
        self
    }

    fn pack(self) -> u16 {
        u16::from(self.last) | u16::from(self.text) << 8 | u16::from(self.ended) << 9
    }

    fn unpack(v: u16) -> HeadScan {
        HeadScan {
            last: (v & 0xff) as u8,
            text: v & 1 << 8 != 0,
            ended: v & 1 << 9 != 0,
        }
    }
}

/// The fewest connections a derived `--max-connections` allows.
const MIN_DERIVED_CONNECTIONS: usize = 16;

/// The longest the accept loop waits for a shed connection to close before
/// it hands the newcomer on (a shed connection closes at its task's next
/// poll, within microseconds on an idle machine).
pub const SHED_WAIT: Duration = Duration::from_secs(1);

/// How often, at most, refused newcomers are logged (as one line with their
/// count).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How many connections the kernel may queue for the accept loop (capped by
/// `net.core.somaxconn`). The loop drains the queue as fast as it can, since
/// it never stops accepting; a full queue drops a client's SYN, which it
/// sends again only a second later. The default (128) was kept full by an
/// attacker with more silent sockets than that.
const LISTEN_BACKLOG: u32 = 4096;

/// The server's listening socket on `addr`.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As the standard library's bind does: a restarted server may bind
    // its port while the last one's connections linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

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

/// How many connections the server holds, in all and per peer address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max: usize,
    /// 0: no per-peer cap.
    pub per_peer: usize,
}

impl Limits {
    /// From `--max-connections` (0: half the open-file limit, the other
    /// half left to sessions, their files and the snapshot store; at least
    /// [`MIN_DERIVED_CONNECTIONS`]) and `--max-connections-per-peer` (unset:
    /// half of the cap, so that one address never holds the whole server;
    /// 0: none).
    pub fn new(configured_max: usize, configured_per_peer: Option<usize>) -> Limits {
        let max = if configured_max > 0 {
            configured_max
        } else {
            let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .unwrap_or(u64::MAX);
            usize::try_from(open_files / 2)
                .unwrap_or(usize::MAX)
                .clamp(MIN_DERIVED_CONNECTIONS, 1 << 20)
        };
        let per_peer = configured_per_peer.unwrap_or((max / 2).max(1));
        Limits { max, per_peer }
    }
}

/// The clocks every connection runs under.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub handshake: Duration,
    pub idle: Duration,
}

/// One connection's progress: its hello, its calls, and when the last one
/// ended.
struct Activity {
    opened: Instant,
    hello: Hello,
    /// Whether a call has started on it (a hello of either kind).
    called: std::sync::atomic::AtomicBool,
    /// Bytes read from the peer so far (only compared with [`HELLO_BYTES`]).
    received: AtomicU64,
    /// Odd while the connection's task is inside a read: between taking
    /// bytes out of the socket and adding them to `received` and `head`,
    /// when they are counted in neither.
    reading: AtomicU64,
    /// For [`Hello::Request`]: the bytes read so far, as a [`HeadScan`].
    head: AtomicU16,
    calls: AtomicUsize,
    /// Milliseconds after `opened` when the last call ended.
    last_ms: AtomicU64,
}

impl Activity {
    /// Whether the peer's hello has been read.
    fn greeted(&self) -> bool {
        self.called.load(Ordering::SeqCst)
            || (self.hello == Hello::Http2 && self.received.load(Ordering::SeqCst) >= HELLO_BYTES)
    }

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

/// The connections admitted and not yet closed.
struct Table {
    conns: HashMap<u64, Entry>,
    /// Admitted and not shed, in all and per peer address.
    live: usize,
    per_peer: HashMap<IpAddr, usize>,
    /// Shed and not yet closed.
    shedding: usize,
    next_id: u64,
    refused_unlogged: u64,
    refusal_logged: Option<Instant>,
}

struct Entry {
    peer: Option<IpAddr>,
    /// The socket, to see whether a hello already waits in it unread. Valid
    /// while the entry exists: the entry leaves the table before the socket
    /// closes (see [`Conn`]'s field order).
    fd: RawFd,
    activity: Arc<Activity>,
    shed: CancellationToken,
    closed: CancellationToken,
}

impl Entry {
    fn is_shed(&self) -> bool {
        self.shed.is_cancelled()
    }

    /// Whether the peer has not yet sent its hello, read or not.
    fn handshaking(&self) -> bool {
        let activity = &self.activity;
        if activity.greeted() {
            return false;
        }
        // What was read and what waits add up only when no read ran
        // between the two looks; a connection being read right now is not
        // silent.
        let reads = activity.reading.load(Ordering::SeqCst);
        if reads % 2 == 1 {
            return false;
        }
        // SAFETY: the descriptor stays open while its entry is in the table
        // (the caller holds the table's lock).
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        let silent = match activity.hello {
            Hello::Http2 => {
                let received = activity.received.load(Ordering::SeqCst);
                let waiting = rustix::io::ioctl_fionread(fd).unwrap_or(0);
                received + waiting < HELLO_BYTES
            }
            Hello::Request => {
                let read = HeadScan::unpack(activity.head.load(Ordering::SeqCst));
                let mut peek = [0u8; HEAD_PEEK];
                let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
                let waiting = match rustix::net::recv(fd, &mut peek, flags) {
                    Ok((n, _)) => &peek[..n],
                    Err(_) => &[],
                };
                !read.scan(waiting).ended
            }
        };
        silent && activity.reading.load(Ordering::SeqCst) == reads
    }

    /// The order in which connections are shed, least active first; `None`
    /// for one that must not be (a call running, or shed already).
    fn shed_rank(&self) -> Option<(u8, Instant)> {
        if self.is_shed() || self.activity.calls.load(Ordering::SeqCst) > 0 {
            None
        } else if self.handshaking() {
            Some((0, self.activity.opened))
        } else {
            Some((1, self.activity.last()))
        }
    }
}

/// The connection table under [`Limits`].
pub struct Admission {
    limits: Limits,
    hello: Hello,
    table: Mutex<Table>,
}

/// What becomes of a newcomer.
enum Admitted {
    /// In; when another was shed for it, that one's close.
    In(Slot, Option<CancellationToken>),
    /// Closed at once: every connection it could replace has a call running.
    Refused(&'static str),
}

impl Admission {
    pub fn new(limits: Limits, hello: Hello) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            hello,
            table: Mutex::new(Table {
                conns: HashMap::new(),
                live: 0,
                per_peer: HashMap::new(),
                shedding: 0,
                next_id: 0,
                refused_unlogged: 0,
                refusal_logged: None,
            }),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a socket from `peer`, shedding another when it must.
    fn admit(self: &Arc<Self>, io: &TcpStream, peer: Option<IpAddr>) -> Admitted {
        let mut table = self.table();
        let peer_count = peer.map_or(0, |p| table.per_peer.get(&p).copied().unwrap_or(0));
        let full = if self.limits.per_peer > 0 && peer_count >= self.limits.per_peer {
            Some((peer, "its peer address holds --max-connections-per-peer"))
        } else if table.live >= self.limits.max {
            Some((None, "the server holds --max-connections"))
        } else {
            None
        };
        let mut victim_closed = None;
        if let Some((within, why)) = full {
            // Shed connections not yet closed are bounded too.
            let victim = (table.shedding < self.limits.max)
                .then(|| least_active(&table, within))
                .flatten();
            let Some(victim) = victim else {
                return Admitted::Refused(why);
            };
            victim_closed = Some(shed(&mut table, victim));
        }
        let id = table.next_id;
        table.next_id += 1;
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            hello: self.hello,
            called: std::sync::atomic::AtomicBool::new(false),
            received: AtomicU64::new(0),
            reading: AtomicU64::new(0),
            head: AtomicU16::new(0),
            calls: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        });
        let shed = CancellationToken::new();
        let closed = CancellationToken::new();
        table.conns.insert(
            id,
            Entry {
                peer,
                fd: io.as_raw_fd(),
                activity: activity.clone(),
                shed: shed.clone(),
                closed: closed.clone(),
            },
        );
        table.live += 1;
        if let Some(p) = peer {
            *table.per_peer.entry(p).or_insert(0) += 1;
        }
        let slot = Slot {
            admission: self.clone(),
            id,
            activity,
            shed,
            _closed: closed.drop_guard(),
        };
        Admitted::In(slot, victim_closed)
    }

    /// Logs refused newcomers, at most once every [`REFUSAL_LOG_INTERVAL`].
    fn refused(&self, why: &str) {
        let mut table = self.table();
        table.refused_unlogged += 1;
        let now = Instant::now();
        if table
            .refusal_logged
            .is_some_and(|at| now < at + REFUSAL_LOG_INTERVAL)
        {
            return;
        }
        tracing::warn!(
            refused = table.refused_unlogged,
            max_connections = self.limits.max,
            max_connections_per_peer = self.limits.per_peer,
            "new connections closed at once: {why}, and every connection it could replace has a call running"
        );
        table.refused_unlogged = 0;
        table.refusal_logged = Some(now);
    }
}

/// The least active connection of `peer` (`None`: of all) that may be shed.
fn least_active(table: &Table, peer: Option<IpAddr>) -> Option<u64> {
    table
        .conns
        .iter()
        .filter(|(_, e)| peer.is_none() || e.peer == peer)
        .filter_map(|(id, e)| e.shed_rank().map(|rank| (rank, *id)))
        .min()
        .map(|(_, id)| id)
}

/// Marks connection `id` shed (its next read fails) and returns what
/// resolves when it has closed.
fn shed(table: &mut Table, id: u64) -> CancellationToken {
    let entry = &table.conns[&id];
    entry.shed.cancel();
    let (peer, closed) = (entry.peer, entry.closed.clone());
    table.live -= 1;
    table.shedding += 1;
    if let Some(p) = peer {
        release_peer(table, p);
    }
    closed
}

fn release_peer(table: &mut Table, peer: IpAddr) {
    if let Some(n) = table.per_peer.get_mut(&peer) {
        *n -= 1;
        if *n == 0 {
            table.per_peer.remove(&peer);
        }
    }
}

/// A connection's place in the table, given up when dropped.
struct Slot {
    admission: Arc<Admission>,
    id: u64,
    activity: Arc<Activity>,
    shed: CancellationToken,
    /// Tells the accept loop, when this one was shed, that it has closed.
    _closed: DropGuard,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.admission.table();
        if let Some(entry) = table.conns.remove(&self.id) {
            if entry.is_shed() {
                table.shedding -= 1;
            } else {
                table.live -= 1;
                if let Some(p) = entry.peer {
                    release_peer(&mut table, p);
                }
            }
        }
    }
}

/// An accepted socket in the connection table, under the two clocks.
pub struct Conn {
    /// First, so that the table forgets the socket before it closes.
    slot: Slot,
    io: TcpStream,
    info: ConnInfo,
    timeouts: Timeouts,
    clock: Pin<Box<Sleep>>,
    shed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Conn {
    fn new(io: TcpStream, remote: Option<SocketAddr>, slot: Slot, timeouts: Timeouts) -> Conn {
        let opened = slot.activity.opened;
        Conn {
            info: ConnInfo {
                remote,
                activity: slot.activity.clone(),
            },
            io,
            timeouts,
            clock: Box::pin(tokio::time::sleep_until(opened + timeouts.handshake)),
            shed: Box::pin(slot.shed.clone().cancelled_owned()),
            slot,
        }
    }

    /// Why the connection must close now, if it must; re-arms the clock
    /// when it has not run out.
    fn must_close(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        let activity = &self.info.activity;
        if self.shed.as_mut().poll(cx).is_ready() {
            // Closed with a reset, as are silent peers below: no TIME_WAIT
            // is left on the server for each one, whose 4-tuple a new
            // client reusing the port would otherwise run into (its SYN
            // answered late, after a 1 s retransmission).
            let _ = self.io.set_zero_linger();
            return Some(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "shed to admit a newer connection at the connection cap (--max-connections, --max-connections-per-peer)",
            ));
        }
        while self.clock.as_mut().poll(cx).is_ready() {
            if !activity.greeted() {
                let _ = self.io.set_zero_linger();
                return Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} within {:?} (--handshake-timeout)",
                        activity.hello.missing(),
                        self.timeouts.handshake
                    ),
                ));
            }
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
        // A shed connection stops even while its peer keeps sending.
        if self.slot.shed.is_cancelled() {
            if let Some(e) = self.must_close(cx) {
                return Poll::Ready(Err(e));
            }
        }
        let before = buf.filled().len();
        self.info.activity.reading.fetch_add(1, Ordering::SeqCst);
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let activity = &self.info.activity;
            let read = &buf.filled()[before..];
            activity
                .received
                .fetch_add(read.len() as u64, Ordering::SeqCst);
            if activity.hello == Hello::Request {
                let head = HeadScan::unpack(activity.head.load(Ordering::SeqCst));
                if !head.ended {
                    activity
                        .head
                        .store(head.scan(read).pack(), Ordering::SeqCst);
                }
            }
        }
        self.info.activity.reading.fetch_add(1, Ordering::SeqCst);
        match polled {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The connection's task reads whenever it waits for the peer,
            // so the clock and the shedding are looked at here, and wake
            // the task when due.
            Poll::Pending => match self.must_close(cx) {
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

impl Conn {
    /// What the connection's requests know of it.
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Accepted connections under `limits`, whose clients say `hello` first.
/// Accept errors (a descriptor limit reached, a peer gone before it was
/// accepted) are logged and waited out rather than ending the server.
pub fn incoming(
    listener: TcpListener,
    limits: Limits,
    timeouts: Timeouts,
    hello: Hello,
) -> impl futures::Stream<Item = std::io::Result<Conn>> + Send + 'static {
    let admission = Admission::new(limits, hello);
    futures::stream::unfold(
        (listener, admission),
        move |(listener, admission)| async move {
            loop {
                let (io, remote) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                match admission.admit(&io, Some(remote.ip().to_canonical())) {
                    Admitted::In(slot, victim_closed) => {
                        if let Some(closed) = victim_closed {
                            if tokio::time::timeout(SHED_WAIT, closed.cancelled())
                                .await
                                .is_err()
                            {
                                tracing::warn!(
                                    wait = ?SHED_WAIT,
                                    "a shed connection has not closed yet: admitting the newcomer anyway"
                                );
                            }
                        }
                        // Small frames (a Stat answer, a grep match) must
                        // not wait for Nagle's algorithm: that adds up to
                        // 40 ms.
                        let _ = io.set_nodelay(true);
                        let conn = Conn::new(io, Some(remote), slot, timeouts);
                        return Some((Ok(conn), (listener, admission)));
                    }
                    Admitted::Refused(why) => {
                        let _ = io.set_zero_linger();
                        drop(io);
                        admission.refused(why);
                    }
                }
            }
        },
    )
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
pub struct CallGuard(Option<Arc<Activity>>);

impl CallGuard {
    fn open<B>(request: &http::Request<B>) -> CallGuard {
        CallGuard::on(conn_info(request))
    }

    /// A call on `conn` (`None`: a connection not counted) until dropped.
    pub fn on(conn: Option<&ConnInfo>) -> CallGuard {
        let activity = conn.map(|i| i.activity.clone());
        if let Some(a) = &activity {
            a.called.store(true, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::{HeadScan, Limits};

    /// Scans `parts` one after the other, through the packed form the
    /// admission reads, as reads arriving one at a time.
    fn ended(parts: &[&[u8]]) -> bool {
        let mut packed = HeadScan::default().pack();
        for part in parts {
            packed = HeadScan::unpack(packed).scan(part).pack();
        }
        HeadScan::unpack(packed).ended
    }

    #[test]
    fn a_request_head_ends_at_its_first_empty_line_however_it_is_split() {
        let head: &[u8] = b"GET /vfs/health HTTP/1.1\r\nhost: x\r\n\r\n";
        assert!(ended(&[head]));
        for at in 0..head.len() {
            assert!(ended(&[&head[..at], &head[at..]]), "split at {at}");
        }
        assert!(ended(&[b"GET / HTTP/1.1\n\n"]), "bare newlines");
    }

    #[test]
    fn half_a_head_or_empty_lines_alone_are_not_a_hello() {
        assert!(!ended(&[b"GET /vfs/hea"]));
        assert!(!ended(&[b"GET /vfs/health HTTP/1.1\r\nhost: x\r\n"]));
        assert!(!ended(&[b"\r\n\r\n\r\n"]), "no line with text");
        assert!(!ended(&[b"GET / HTTP/1.1\r", b"\n"]));
        assert!(!ended(&[]));
    }

    #[test]
    fn one_address_gets_half_the_cap_unless_told_otherwise() {
        assert_eq!(
            Limits::new(40, None),
            Limits {
                max: 40,
                per_peer: 20
            }
        );
        assert_eq!(Limits::new(40, Some(0)).per_peer, 0);
        assert_eq!(Limits::new(40, Some(7)).per_peer, 7);
        assert_eq!(Limits::new(1, None).per_peer, 1);
        let derived = Limits::new(0, None);
        assert!(derived.max >= 16 && derived.per_peer == derived.max / 2);
    }
}
