//! The `Filesystem` trait: every operation of the contract in Rust types.
//!
//! The server's workspaces (memory and directory backends) implement it, and
//! so does the client's session handle, which makes the conformance suite in
//! `tests/` one piece of code run against every backend, in-process and over
//! gRPC. Paths arrive already canonical; options arrive with the contract's
//! defaults filled in (see each `Default`; the types are in [`types`]).
//!
//! Two ways to wrap a filesystem, each written once here for every call:
//! a [`FilesystemLayer`] (zones, events, metrics) names the filesystem it
//! wraps and changes only what it is about; a [`Remote`] is reached anew
//! for each call over a link that may break, and [`Forwarded`] makes it a
//! filesystem.

mod types;

pub use types::*;

use crate::{CanonicalPath, Error, Result};
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;

/// Refuses a batch of more than [`MAX_DELETE_ENTRIES`] deletes.
pub fn check_delete_entries(count: usize) -> Result<()> {
    if count > MAX_DELETE_ENTRIES {
        return Err(Error::invalid_argument(format!(
            "a DeleteMany holds {count} entries; at most {MAX_DELETE_ENTRIES} are allowed \
             (send the rest in another call)"
        )));
    }
    Ok(())
}

/// [`Filesystem::delete_many`] as one [`Filesystem::delete`] per entry,
/// in order: its default, and a remote client's way with a server that
/// lacks the batch call.
pub async fn delete_each<F: Filesystem + ?Sized>(
    fs: &F,
    entries: Vec<(CanonicalPath, DeleteOptions)>,
) -> Vec<Result<u64>> {
    let mut results = Vec::with_capacity(entries.len());
    for (path, options) in entries {
        results.push(fs.delete(&path, options).await);
    }
    results
}

/// The contract's file operations on one session's workspace.
#[async_trait::async_trait]
pub trait Filesystem: Send + Sync {
    /// Text read by lines. Not UTF-8: `NOT_TEXT`.
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage>;

    /// Streams raw bytes of one consistent version of a file.
    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream>;

    /// Writes UTF-8 text.
    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome>;

    /// Writes a stream of bytes; the file appears whole or not at all.
    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome>;

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome>;

    /// Returns how many files and directories went.
    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64>;

    /// Several deletes, run in order, each as [`Self::delete`] runs it:
    /// one that fails does not stop the others. At most
    /// [`MAX_DELETE_ENTRIES`]; more is `INVALID_ARGUMENT`, nothing deleted.
    /// A remote filesystem sends them in one call.
    async fn delete_many(
        &self,
        entries: Vec<(CanonicalPath, DeleteOptions)>,
    ) -> Result<Vec<Result<u64>>> {
        check_delete_entries(entries.len())?;
        Ok(delete_each(self, entries).await)
    }

    /// Returns false when the directory already existed.
    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool>;

    /// Returns how many files and directories moved, and the version the
    /// destination got.
    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred>;

    /// Returns how many files and directories were copied, and the
    /// version the destination got.
    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred>;

    /// `depth` 1 is the directory's own entries; sorted by path
    /// (bytewise), at most one page of them (then `truncated`).
    async fn list(&self, path: &CanonicalPath, depth: u32) -> Result<Listing> {
        self.list_after(path, depth, None).await
    }

    /// [`Filesystem::list`] from the entry after `after` on: the next
    /// page after a truncated listing whose last entry was `after`.
    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing>;

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome>;

    /// Matches in (path, line) order, then one summary.
    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>>;

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata>;

    /// The kind of what `path` names, `None` when nothing is there.
    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>>;

    /// Changes the permission bits and/or modification time of a file or
    /// directory (never through a symlink); a change with a new version.
    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome>;

    /// Changes byte ranges and/or the length of a file in one commit: one
    /// new version, all or nothing (see [`PatchOptions`], [`PatchChunk`]).
    /// `bytes_written` counts the bytes the chunks carry.
    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome>;

    /// Creates a symbolic link holding `target`, stored verbatim and never
    /// followed ([`check_symlink_target`]); returns the link's metadata.
    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata>;
}

/// A cross-cutting view over another [`Filesystem`] (zones, events,
/// metrics...): it names the filesystem it wraps ([`Self::inner`]) and
/// changes only what it is about; every type that is a layer is a
/// `Filesystem` through the blanket impl below. Each method is the
/// `Filesystem` method of the same name.
///
/// The reads forward to [`Self::inner`] unless a layer overrides them, so
/// a new read touches no layer. The calls that change the workspace have
/// no default: every layer decides for each of them (a zone check or an
/// event forgotten on a new kind of change would be a silent hole, so it
/// is a compile error instead).
#[async_trait::async_trait]
pub trait FilesystemLayer: Send + Sync {
    /// The filesystem this layer wraps.
    fn inner(&self) -> &dyn Filesystem;

    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        self.inner().read(path, range).await
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        self.inner().read_bytes(path, range, chunk_size).await
    }

    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing> {
        self.inner().list_after(path, depth, after).await
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        self.inner().glob(query).await
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        self.inner().grep(query).await
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        self.inner().stat(path).await
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        self.inner().exists(path).await
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome>;

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome>;

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome>;

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64>;

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool>;

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred>;

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred>;

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome>;

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome>;

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata>;
}

#[async_trait::async_trait]
impl<L: FilesystemLayer> Filesystem for L {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        FilesystemLayer::read(self, path, range).await
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        FilesystemLayer::read_bytes(self, path, range, chunk_size).await
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        FilesystemLayer::write(self, path, content, options).await
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        FilesystemLayer::write_bytes(self, path, options, data).await
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        FilesystemLayer::edit(self, path, edit).await
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        FilesystemLayer::delete(self, path, options).await
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        FilesystemLayer::mkdir(self, path, options).await
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        FilesystemLayer::rename(self, source, destination, options).await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        FilesystemLayer::copy(self, source, destination, options).await
    }

    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing> {
        FilesystemLayer::list_after(self, path, depth, after).await
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        FilesystemLayer::glob(self, query).await
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        FilesystemLayer::grep(self, query).await
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        FilesystemLayer::stat(self, path).await
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        FilesystemLayer::exists(self, path).await
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        FilesystemLayer::set_attributes(self, path, attributes).await
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        FilesystemLayer::patch_bytes(self, path, options, data).await
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        FilesystemLayer::symlink(self, path, target, options).await
    }
}

/// A filesystem reached anew for each call through a link that may break
/// and be made again (a CONTAINER session's child process): [`Forwarded`]
/// makes it a [`Filesystem`], running each call on the live link and
/// handing every failure, of the call or of a stream it answered, to
/// [`Remote::failed`]. Every call is forwarded here once, for every remote.
#[async_trait::async_trait]
pub trait Remote: Send + Sync + 'static {
    /// One live link, kept by the streams it answered.
    type Link: Clone + Send + Sync + 'static;

    /// The live link, made again when there is none or it broke.
    async fn link(&self) -> Result<Self::Link>;

    /// The filesystem at the far end of `link`.
    fn far(link: &Self::Link) -> &dyn Filesystem;

    /// `error` as the caller should see it; drops `link` when it broke.
    async fn failed(&self, link: &Self::Link, error: Error) -> Error;
}

/// A [`Remote`] as a [`Filesystem`] (an `Arc` so that the streams it
/// answers can report a broken link).
pub struct Forwarded<R>(pub Arc<R>);

impl<R> Clone for Forwarded<R> {
    fn clone(&self) -> Self {
        Forwarded(self.0.clone())
    }
}

impl<R: Remote> Forwarded<R> {
    /// `answer` from `link`, its error seen through [`Remote::failed`].
    async fn settle<T>(&self, link: &R::Link, answer: Result<T>) -> Result<T> {
        match answer {
            Ok(v) => Ok(v),
            Err(e) => Err(self.0.failed(link, e).await),
        }
    }

    /// `stream`'s errors seen through [`Remote::failed`] as they come.
    fn guard<T: Send + 'static>(
        &self,
        link: R::Link,
        stream: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        let remote = self.0.clone();
        stream
            .then(move |item| {
                let (remote, link) = (remote.clone(), link.clone());
                async move {
                    match item {
                        Ok(v) => Ok(v),
                        Err(e) => Err(remote.failed(&link, e).await),
                    }
                }
            })
            .boxed()
    }
}

/// Each call: the live link, the call on its far end, the answer settled.
macro_rules! forward {
    ($self:ident, $link:ident => $call:expr) => {{
        let $link = $self.0.link().await?;
        let answer = $call.await;
        $self.settle(&$link, answer).await
    }};
}

#[async_trait::async_trait]
impl<R: Remote> Filesystem for Forwarded<R> {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        forward!(self, l => R::far(&l).read(path, range))
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        let link = self.0.link().await?;
        let answer = R::far(&link).read_bytes(path, range, chunk_size).await;
        let mut stream = self.settle(&link, answer).await?;
        stream.chunks = self.guard(link, stream.chunks);
        Ok(stream)
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        forward!(self, l => R::far(&l).write(path, content, options))
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        forward!(self, l => R::far(&l).write_bytes(path, options, data))
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        forward!(self, l => R::far(&l).edit(path, edit))
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        forward!(self, l => R::far(&l).delete(path, options))
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        forward!(self, l => R::far(&l).mkdir(path, options))
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        forward!(self, l => R::far(&l).rename(source, destination, options))
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        forward!(self, l => R::far(&l).copy(source, destination, options))
    }

    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing> {
        forward!(self, l => R::far(&l).list_after(path, depth, after))
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        forward!(self, l => R::far(&l).glob(query))
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        let link = self.0.link().await?;
        let answer = R::far(&link).grep(query).await;
        let stream = self.settle(&link, answer).await?;
        Ok(self.guard(link, stream))
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        forward!(self, l => R::far(&l).stat(path))
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        forward!(self, l => R::far(&l).exists(path))
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        forward!(self, l => R::far(&l).set_attributes(path, attributes))
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        forward!(self, l => R::far(&l).patch_bytes(path, options, data))
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        forward!(self, l => R::far(&l).symlink(path, target, options))
    }
}
