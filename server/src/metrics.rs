//! Process-wide counters of streaming work, for logs and for tests that
//! prove a stream stops when its client goes away.

use futures::stream::{BoxStream, Stream, StreamExt};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Grep searches whose producer is still running.
pub static ACTIVE_GREPS: AtomicU64 = AtomicU64::new(0);
/// Files grep has searched, over the process's life.
pub static FILES_SEARCHED: AtomicU64 = AtomicU64::new(0);
/// ReadBytes streams still open on the server.
pub static ACTIVE_BYTE_STREAMS: AtomicU64 = AtomicU64::new(0);
/// Bytes ReadBytes streams have produced, over the process's life.
pub static BYTES_STREAMED: AtomicU64 = AtomicU64::new(0);
/// ExportArchive writers still running.
pub static ACTIVE_EXPORTS: AtomicU64 = AtomicU64::new(0);
/// Watch streams whose producer is still running.
pub static ACTIVE_WATCHES: AtomicU64 = AtomicU64::new(0);

/// Holds one unit of a gauge while alive.
pub struct Gauge(&'static AtomicU64);

impl Gauge {
    pub fn hold(counter: &'static AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Gauge(counter)
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A stream that holds a gauge until it is dropped.
pub struct Gauged<T> {
    inner: BoxStream<'static, T>,
    _gauge: Gauge,
}

impl<T> Gauged<T> {
    pub fn new(inner: BoxStream<'static, T>, counter: &'static AtomicU64) -> Self {
        Gauged {
            inner,
            _gauge: Gauge::hold(counter),
        }
    }
}

impl<T> Stream for Gauged<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.inner.poll_next_unpin(cx)
    }
}
