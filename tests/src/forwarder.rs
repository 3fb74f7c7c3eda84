//! A fault-injecting TCP forwarder for HTTP/1.1, put between a server and
//! its bucket (a real S3 API): it passes requests on, or cuts every
//! connection, stalls them, answers chosen requests with an error status,
//! stalls chosen requests, or forwards a chosen request and drops its
//! answer (the request took effect; the client never learns it).
//!
//! Each request is sent upstream on a connection of its own
//! (`Connection: close` is set both ways), so that faults apply to one
//! request, never to a connection that happens to carry several. Only the
//! request's head is parsed; bodies pass as bytes. It runs on a thread and
//! runtime of its own, so a test's runtime being busy never stalls it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest request or response head read.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// What the forwarder does with every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Requests pass (but for the rules).
    Up,
    /// Every connection, new or open, is closed at once.
    Cut,
    /// Connections are accepted and held without an answer until the
    /// link is up again (then closed).
    Stalled,
}

/// What a rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Answered with this status by the forwarder; never sent upstream.
    Status(u16),
    /// Sent upstream, and the answer dropped: the connection is closed
    /// once the bucket has answered.
    DropAnswer,
    /// Held, never sent upstream, until the link changes (then closed),
    /// as [`Link::Stalled`] holds every request.
    Stall,
}

#[derive(Debug, Clone)]
struct Rule {
    method: String,
    path_contains: String,
    /// When set, the request's body must contain it too (the body is then
    /// read whole, up to [`MAX_MATCHED_BODY_BYTES`], before the rule is
    /// judged).
    body_contains: Option<String>,
    action: Action,
    remaining: usize,
}

/// The largest body a rule with `body_contains` reads to judge a request.
const MAX_MATCHED_BODY_BYTES: usize = 64 * 1024;

/// One request as the forwarder saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The rule's action applied to it, if any.
    pub action: Option<Action>,
}

#[derive(Default)]
struct State {
    link: Option<Link>,
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    /// Bumped on every change of link: connections opened before a cut
    /// see it and close.
    epoch: u64,
}

/// A forwarder on a loopback port, to one upstream address.
pub struct Forwarder {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Forwarder {
    /// Starts forwarding a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> Forwarder {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let addr = std_listener.local_addr().expect("its address");
        let state = Arc::new(Mutex::new(State {
            link: Some(Link::Up),
            ..State::default()
        }));
        let (changed, _) = tokio::sync::watch::channel(0u64);
        let changed = Arc::new(changed);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (state2, changed2) = (state.clone(), changed.clone());
        std::thread::Builder::new()
            .name("forwarder".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the forwarder's runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("a tokio listener");
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept_loop(listener, upstream, state2, changed2) => {}
                    }
                });
            })
            .expect("the forwarder's thread");
        Forwarder {
            addr,
            state,
            changed,
            stop: Some(stop),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts, stalls or restores the link.
    pub fn set_link(&self, link: Link) {
        let epoch = {
            let mut state = self.lock();
            state.link = Some(link);
            state.epoch += 1;
            state.epoch
        };
        self.changed.send_replace(epoch);
    }

    /// The next `times` requests whose method is `method` and whose path
    /// contains `path_contains` get `action`.
    pub fn add_rule(&self, method: &str, path_contains: &str, action: Action, times: usize) {
        self.push_rule(method, path_contains, None, action, times);
    }

    /// [`Forwarder::add_rule`] for requests whose body also contains
    /// `body_contains` (a lease's expiry, say).
    pub fn add_body_rule(
        &self,
        method: &str,
        path_contains: &str,
        body_contains: &str,
        action: Action,
        times: usize,
    ) {
        self.push_rule(
            method,
            path_contains,
            Some(body_contains.to_string()),
            action,
            times,
        );
    }

    fn push_rule(
        &self,
        method: &str,
        path_contains: &str,
        body_contains: Option<String>,
        action: Action,
        times: usize,
    ) {
        self.lock().rules.push(Rule {
            method: method.to_string(),
            path_contains: path_contains.to_string(),
            body_contains,
            action,
            remaining: times,
        });
    }

    /// Drops every rule not yet used up.
    pub fn clear_rules(&self) {
        self.lock().rules.clear();
    }

    /// Every request seen so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (state, changed) = (state.clone(), changed.clone());
        tokio::spawn(async move {
            let epoch = state.lock().unwrap_or_else(|e| e.into_inner()).epoch;
            let mut watch = changed.subscribe();
            tokio::select! {
                _ = serve(client, upstream, &state) => {}
                // The link changed while this request was under way: it
                // is cut off, as a real partition would.
                _ = watch.wait_for(|e| *e != epoch) => {}
            }
        });
    }
}

fn link(state: &Mutex<State>) -> Link {
    state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .link
        .unwrap_or(Link::Up)
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, state: &Mutex<State>) {
    match link(state) {
        Link::Up => {}
        Link::Cut => return,
        // Held until the link changes (the caller's select then ends it).
        Link::Stalled => return std::future::pending().await,
    }
    let Some((head, rest)) = read_head(&mut client).await else {
        return;
    };
    let Some((method, path)) = request_line(&head) else {
        return;
    };
    let head_matches =
        |r: &Rule| r.remaining > 0 && r.method == method && path.contains(r.path_contains.as_str());
    let judges_body = state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .rules
        .iter()
        .any(|r| head_matches(r) && r.body_contains.is_some());
    let mut rest = rest;
    if judges_body {
        let length = content_length(&head).min(MAX_MATCHED_BODY_BYTES);
        if read_to(&mut client, &mut rest, length).await.is_err() {
            return;
        }
    }
    let action = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let rule = state.rules.iter_mut().find(|r| {
            head_matches(r)
                && r.body_contains
                    .as_ref()
                    .is_none_or(|wanted| rest.windows(wanted.len()).any(|w| w == wanted.as_bytes()))
        });
        let action = rule.map(|r| {
            r.remaining -= 1;
            r.action
        });
        state.seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            action,
        });
        action
    };
    if action == Some(Action::Stall) {
        // Held until the link changes (the caller's select then ends it).
        return std::future::pending().await;
    }
    if let Some(Action::Status(status)) = action {
        // The body is read first, so that the client reads the answer
        // rather than a reset.
        let length = content_length(&head);
        let _ = drain(&mut client, length.saturating_sub(rest.len())).await;
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>injected {status}</Message></Error>"
        );
        let answer = format!(
            "HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = client.write_all(answer.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    let Ok(mut bucket) = TcpStream::connect(upstream).await else {
        return;
    };
    if bucket.write_all(&closing(&head)).await.is_err() || bucket.write_all(&rest).await.is_err() {
        return;
    }
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_bucket, mut to_bucket) = bucket.into_split();
    // The rest of the body, as it comes.
    let body = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_client, &mut to_bucket).await;
    });
    if action == Some(Action::DropAnswer) {
        // The bucket answers (and so has done the request); the client
        // hears nothing of it.
        let _ = drain(&mut from_bucket, usize::MAX).await;
        body.abort();
        return;
    }
    if let Some((head, rest)) = read_head(&mut from_bucket).await {
        if to_client.write_all(&closing(&head)).await.is_ok()
            && to_client.write_all(&rest).await.is_ok()
        {
            let _ = tokio::io::copy(&mut from_bucket, &mut to_client).await;
        }
    }
    let _ = to_client.shutdown().await;
    body.abort();
}

/// Reads up to the end of an HTTP head; the head (through its blank line)
/// and whatever came after it.
async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((buf, rest));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads from `stream` into `buf` until it holds `length` bytes or the
/// stream ends.
async fn read_to(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    length: usize,
) -> std::io::Result<()> {
    let mut chunk = [0u8; 8192];
    while buf.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

async fn drain(stream: &mut (impl AsyncRead + Unpin), mut left: usize) -> std::io::Result<()> {
    let mut chunk = [0u8; 8192];
    while left > 0 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        left = left.saturating_sub(n);
    }
    Ok(())
}

fn request_line(head: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut words = text.lines().next()?.split_whitespace();
    Some((words.next()?.to_string(), words.next()?.to_string()))
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `head` with its `Connection` header replaced by `Connection: close`.
fn closing(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len() + 20);
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let is_connection = line
            .split_once(':')
            .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("connection"));
        if !is_connection {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

/// Waits up to `within` for `done` to hold, checking every 50 ms.
pub async fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
