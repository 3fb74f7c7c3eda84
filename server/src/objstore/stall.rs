//! A bucket that stops answering costs a bounded wait: every request to
//! the object store, and every piece of an answer that streams (a
//! content's chunks, a listing's pages, a bulk delete's results), must
//! come within the bucket's *silence* bound ([`super::lease::lookup_wait`]:
//! a renewal interval, at least 2 s), or it fails, and the call that made
//! it answers `UNAVAILABLE` naming the bucket. A request that sends bytes
//! (a PUT, a part of a multipart upload) gets the bound plus the time its
//! bytes take at [`MIN_BYTES_PER_SEC`], so a large body on a slow link is
//! not mistaken for a stall. Without this, a stalled request waits for the
//! store client's own 30 s, tried again within 15 s.
//!
//! The bound wraps the store client's own retries: a request that keeps
//! failing is given up at the bound too.

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use std::sync::Arc;
use std::time::Duration;

/// The slowest a bucket may take a request's body before the request is
/// given up as stalled: 1 MiB a second.
pub const MIN_BYTES_PER_SEC: u64 = 1024 * 1024;

/// `inner`, every request of which must be answered within `silence`.
#[derive(Debug)]
pub struct StallGuard {
    inner: Arc<dyn ObjectStore>,
    silence: Duration,
}

impl StallGuard {
    pub fn new(inner: Arc<dyn ObjectStore>, silence: Duration) -> StallGuard {
        StallGuard { inner, silence }
    }
}

impl std::fmt::Display for StallGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StallGuard({:?}, {})", self.silence, self.inner)
    }
}

/// The failure of a request the bucket did not answer within `bound`.
fn stalled(bound: Duration) -> object_store::Error {
    object_store::Error::Generic {
        store: "object store",
        source: format!("no answer within {bound:?} (the bucket stalled)").into(),
    }
}

/// `request`, given up after `bound`.
async fn within<T>(
    bound: Duration,
    request: impl std::future::Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    tokio::time::timeout(bound, request)
        .await
        .unwrap_or_else(|_| Err(stalled(bound)))
}

/// How long sending `bytes` may take: the silence bound plus the bytes at
/// [`MIN_BYTES_PER_SEC`].
fn sending(silence: Duration, bytes: usize) -> Duration {
    silence + Duration::from_millis(bytes as u64 * 1000 / MIN_BYTES_PER_SEC)
}

/// `stream`, each item of which must come within `silence`; one that does
/// not ends it with an error.
fn each_within<T: Send + 'static>(
    stream: BoxStream<'static, object_store::Result<T>>,
    silence: Duration,
) -> BoxStream<'static, object_store::Result<T>> {
    futures::stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        match tokio::time::timeout(silence, stream.next()).await {
            Ok(Some(item)) => Some((item, Some(stream))),
            Ok(None) => None,
            Err(_) => Some((Err(stalled(silence)), None)),
        }
    })
    .boxed()
}

#[async_trait]
impl ObjectStore for StallGuard {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let bound = sending(self.silence, payload.content_length());
        within(bound, self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let upload = within(self.silence, self.inner.put_multipart_opts(location, opts)).await?;
        Ok(Box::new(GuardedUpload {
            upload,
            silence: self.silence,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let got = within(self.silence, self.inner.get_opts(location, options)).await?;
        let payload = match got.payload {
            GetResultPayload::Stream(stream) => {
                GetResultPayload::Stream(each_within(stream, self.silence))
            }
            // A local file: nothing on the way to stall.
            file => file,
        };
        Ok(GetResult { payload, ..got })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        each_within(self.inner.delete_stream(locations), self.silence)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        each_within(self.inner.list(prefix), self.silence)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        within(self.silence, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        within(self.silence, self.inner.copy_opts(from, to, options)).await
    }
}

/// A multipart upload whose parts and completion are bounded like a PUT.
#[derive(Debug)]
struct GuardedUpload {
    upload: Box<dyn MultipartUpload>,
    silence: Duration,
}

#[async_trait]
impl MultipartUpload for GuardedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let bound = sending(self.silence, data.content_length());
        let part = self.upload.put_part(data);
        Box::pin(within(bound, part))
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        within(self.silence, self.upload.complete()).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        within(self.silence, self.upload.abort()).await
    }
}
