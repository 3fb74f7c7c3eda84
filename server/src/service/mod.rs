//! The gRPC edge: requests are parsed here into canonical Rust values, the
//! session is looked up, the `Filesystem` call is made, and the answer is
//! translated back. No filesystem logic lives here.
//!
//! Every call runs inside [`traced`], which logs one structured line per RPC
//! (method, session, path, outcome, duration; never payload bytes) and turns
//! `wsfs::Error` into a `Status` with its `ErrorInfo`.

mod archive;
pub(crate) mod filesystem;
pub(crate) mod resets;
mod sessions;

pub use filesystem::FilesystemService;
pub use sessions::SessionsService;

use crate::auth::Auth;
use crate::registry::SessionRegistry;
use crate::workspace::Commitment;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Response, Status};
use wsfs::path::quote;

/// Session ids are UUIDs; a longer one names no session, and is refused
/// before anything looks it up or repeats it.
const MAX_SESSION_ID_CHARS: usize = wsfs::path::QUOTE_CHARS;

/// `raw` unless it is longer than any session id: those are refused
/// before anything looks them up or repeats them.
pub(crate) fn session_id(raw: &str) -> wsfs::Result<&str> {
    if raw.len() > MAX_SESSION_ID_CHARS {
        return Err(wsfs::Error::SessionNotFound {
            session_id: quote(raw).into_owned(),
        });
    }
    Ok(raw)
}

/// Refuses a call whose [`wsfs::SESSION_HEADER`] metadata names another
/// session than its body (or names one twice): a proxy routed the call by
/// the metadata, so acting on the body's session would act on whatever this
/// server happens to hold under that id. A call without the metadata (a
/// client talking to one server directly) passes.
pub(crate) fn check_route(metadata: &MetadataMap, session_id: &str) -> wsfs::Result<()> {
    let header = wsfs::SESSION_HEADER;
    let mut named = metadata.get_all(header).iter();
    match (named.next(), named.next()) {
        (None, _) => Ok(()),
        (Some(routed), None) if routed.as_bytes() == session_id.as_bytes() => Ok(()),
        (Some(routed), None) => Err(wsfs::Error::invalid_argument(format!(
            "the {header} metadata names session '{}' but the request is for session '{}': a proxy routes by the metadata, so both must name the same session",
            quote(&String::from_utf8_lossy(routed.as_bytes())),
            quote(session_id),
        ))),
        (Some(_), Some(_)) => Err(wsfs::Error::invalid_argument(format!(
            "the {header} metadata is sent more than once: send it once, naming the call's session"
        ))),
    }
}

/// Authorizes a call on session `id` with `check`, once more after failing
/// the session over to this server when the call's token is unknown here
/// (`UNAUTHENTICATED`) but the bucket's token list of `id` holds it: its
/// last holder is gone and a proxy now routes its calls here. A token the
/// bucket does not list for `id` is refused as before, having recovered
/// nothing.
pub(crate) async fn authorized<T>(
    registry: &Arc<SessionRegistry>,
    auth: &Auth,
    metadata: &MetadataMap,
    id: &str,
    check: impl Fn() -> wsfs::Result<T>,
) -> wsfs::Result<T> {
    match check() {
        Err(wsfs::Error::Unauthenticated { message }) => match auth.bearer_hash(metadata) {
            Some(hash) if !id.is_empty() && registry.fail_over_for_token(id, &hash).await? => {
                check()
            }
            _ => Err(wsfs::Error::Unauthenticated { message }),
        },
        checked => checked,
    }
}

/// Runs a change to its end whether or not its caller is still there, once
/// it has begun. The work runs as a task of its own within a
/// [`Commitment`]: a caller that goes away before the work takes the
/// session's write lock abandons it (nothing changes, as when the work ran
/// in the caller's future); after that, the work (the change, then its
/// event or barrier) completes without the caller, so a change that
/// happened is always reported, once. A panic in the work is a panic of
/// the call, as if it ran in place.
pub(crate) async fn to_the_end<T, F>(work: F) -> wsfs::Result<T>
where
    F: Future<Output = wsfs::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    use tracing::Instrument;
    let commitment = Arc::new(Commitment::default());
    let task = tokio::spawn(commitment.scope(work.in_current_span()));
    let _left = Abandon {
        commitment,
        task: task.abort_handle(),
    };
    match task.await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(wsfs::Error::internal(format!("the change stopped: {e}"))),
    }
}

/// Abandons the work of a caller that went away before it committed, and
/// stops it where it waits.
struct Abandon {
    commitment: Arc<Commitment>,
    task: tokio::task::AbortHandle,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if self.commitment.abandon() {
            self.task.abort();
        }
    }
}

/// Runs one RPC body with a tracing span and its outcome logged.
pub(crate) async fn traced<T, F>(
    method: &'static str,
    session: &str,
    path: &str,
    body: F,
) -> Result<Response<T>, Status>
where
    F: Future<Output = wsfs::Result<T>>,
{
    logged(method, session, path, body)
        .await
        .map(Response::new)
        .map_err(|e| e.to_status())
}

/// [`traced`] for any face: the span, the log line, the metrics and the
/// panic guard, with the outcome left as a `wsfs::Result` for the face to
/// translate (the gRPC status, or the HTTP face's JSON).
pub(crate) async fn logged<T, F>(
    method: &'static str,
    session: &str,
    path: &str,
    body: F,
) -> wsfs::Result<T>
where
    F: Future<Output = wsfs::Result<T>>,
{
    use futures::FutureExt;
    let started = Instant::now();
    // Inputs are logged and echoed by a bounded prefix: a request cannot
    // make its log line, or its error, as large as itself.
    let (session_shown, path_shown) = (quote(session), quote(path));
    // At WARN, the span's level: its fields (method, session, caller) must
    // reach the warnings of a server run at `warn` too.
    let span = tracing::warn_span!(
        "rpc",
        method,
        session = &*session_shown,
        path = &*path_shown,
        caller = tracing::field::Empty,
    );
    if let Err(e) = session_id(session) {
        let _enter = span.enter();
        log_failure(&e, 0);
        crate::exporter::rpc_done(method, e.reason(), started.elapsed());
        return Err(e);
    }
    // A panic fails this request alone: without the catch it would unwind
    // through the connection's task and break every call multiplexed on it.
    let guarded = std::panic::AssertUnwindSafe(async {
        crate::faults::check(path);
        body.await
    })
    .catch_unwind();
    let result = match tracing::Instrument::instrument(guarded, span.clone()).await {
        Ok(result) => result,
        Err(panic) => Err(crate::producer::panicked(method, &*panic)),
    };
    let elapsed = started.elapsed();
    let elapsed_us = elapsed.as_micros() as u64;
    let outcome = result.as_ref().map_or_else(|e| e.reason(), |_| "OK");
    crate::exporter::rpc_done(method, outcome, elapsed);
    let _enter = span.enter();
    match &result {
        Ok(_) => tracing::info!(outcome = "OK", elapsed_us, "rpc done"),
        Err(e) => log_failure(e, elapsed_us),
    }
    result
}

/// A failed call's line: WARN when an operator should look (refused
/// credentials or permissions, exhausted limits, the server's own faults),
/// INFO for the outcomes a client expects to meet (a missing file, a
/// version mismatch, an invalid argument), so that a server at `warn`
/// shows what matters. The error is always one line.
fn log_failure(e: &wsfs::Error, elapsed_us: u64) {
    use tonic::Code;
    let text = e.to_string();
    let error = one_line(&text);
    match e.code() {
        Code::PermissionDenied
        | Code::Unauthenticated
        | Code::ResourceExhausted
        | Code::Internal
        | Code::Unknown
        | Code::DataLoss
        | Code::Unavailable
        | Code::Unimplemented => {
            tracing::warn!(outcome = e.reason(), elapsed_us, error = %error, "rpc failed");
        }
        _ => tracing::info!(outcome = e.reason(), elapsed_us, error = %error, "rpc failed"),
    }
}

/// `text` on one line: line breaks (a regex parser's caret diagram, say)
/// shown as `\n`, so that one log record stays one line.
pub(crate) fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(['\n', '\r']) {
        text.replace('\r', "").replace('\n', "\\n").into()
    } else {
        text.into()
    }
}

/// A response stream that logs, when it is dropped, how many messages and
/// payload bytes it carried, how long it lived, and whether it ran to its
/// end or its client went away first. A panic while producing an item ends
/// the stream with INTERNAL instead of unwinding into the connection.
pub(crate) struct LoggedStream<T> {
    inner: futures::stream::BoxStream<'static, Result<T, Status>>,
    method: &'static str,
    session: String,
    path: String,
    size_of: fn(&T) -> usize,
    started: Instant,
    messages: u64,
    bytes: u64,
    finished: bool,
}

impl<T> LoggedStream<T> {
    pub(crate) fn new(
        inner: futures::stream::BoxStream<'static, Result<T, Status>>,
        method: &'static str,
        session: &str,
        path: &str,
        size_of: fn(&T) -> usize,
    ) -> Self {
        LoggedStream {
            inner,
            method,
            session: quote(session).into_owned(),
            path: quote(path).into_owned(),
            size_of,
            started: Instant::now(),
            messages: 0,
            bytes: 0,
            finished: false,
        }
    }
}

impl<T> futures::Stream for LoggedStream<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use futures::StreamExt;
        if self.finished {
            return std::task::Poll::Ready(None);
        }
        let polled = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.inner.poll_next_unpin(cx)
        })) {
            Ok(polled) => polled,
            Err(panic) => {
                let error = crate::producer::panicked(self.method, &*panic);
                tracing::error!(method = self.method, error = %error, "stream producer panicked");
                std::task::Poll::Ready(Some(Err(error.to_status())))
            }
        };
        match &polled {
            std::task::Poll::Ready(Some(Ok(item))) => {
                self.messages += 1;
                self.bytes += (self.size_of)(item) as u64;
            }
            std::task::Poll::Ready(Some(Err(_))) | std::task::Poll::Ready(None) => {
                self.finished = true
            }
            std::task::Poll::Pending => {}
        }
        polled
    }
}

impl<T> Drop for LoggedStream<T> {
    fn drop(&mut self) {
        tracing::info!(
            method = self.method,
            session = %self.session,
            path = %self.path,
            messages = self.messages,
            bytes = self.bytes,
            elapsed_us = self.started.elapsed().as_micros() as u64,
            completed = self.finished,
            "stream closed"
        );
    }
}
