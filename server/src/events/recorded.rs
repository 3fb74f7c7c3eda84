//! [`Recorded`]: the `Filesystem` view the service opens for one call,
//! which appends each change the call made to the session's [`EventLog`]
//! in the caller's name. It wraps the zones' [`Guarded`], so a refused
//! call records nothing; reads pass straight through.

use super::{ChangeKind, EventLog};
use crate::auth::Guarded;
use futures::stream::BoxStream;
use std::sync::Arc;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, ByteRange, ByteStream, CanonicalPath, DeleteOptions,
    EditOutcome, EditSpec, FileKind, Filesystem, GlobOutcome, GlobQuery, GrepEvent, GrepQuery,
    LineRange, Listing, Metadata, MkdirOptions, PatchChunks, PatchOptions, Result, SymlinkOptions,
    TextPage, TransferOptions, WriteOptions, WriteOutcome,
};

/// A caller's view of a session's workspace that records its changes.
pub struct Recorded {
    inner: Guarded,
    events: Arc<EventLog>,
}

impl Recorded {
    pub fn new(inner: Guarded, events: Arc<EventLog>) -> Recorded {
        Recorded { inner, events }
    }

    /// Records a change this call made, in the caller's name.
    fn record(
        &self,
        kind: ChangeKind,
        path: &CanonicalPath,
        to: Option<&CanonicalPath>,
        version: u64,
    ) {
        let caller = self.inner.caller().name();
        self.events.append(kind, path, to, version, caller);
    }

    /// Records a write: a new file is created, an old one modified.
    fn record_write(&self, w: &WriteOutcome) {
        let kind = if w.created {
            ChangeKind::Created
        } else {
            ChangeKind::Modified
        };
        self.record(kind, &w.path, None, w.version);
    }

    /// Runs a move (`moved`) or copy with both ends marked as the
    /// service's own change, then records it with the destination's
    /// version, which the call does not return.
    async fn transfer(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        moved: bool,
        work: impl std::future::Future<Output = Result<u64>>,
    ) -> Result<u64> {
        let own = (
            self.events.own_change(Some(source)),
            self.events.own_change(Some(destination)),
        );
        let entries = work.await?;
        drop(own);
        let version = self.inner.stat(destination).await.map_or(0, |m| m.version);
        if moved {
            self.record(ChangeKind::Moved, source, Some(destination), version);
        } else {
            self.record(ChangeKind::Created, destination, None, version);
        }
        Ok(entries)
    }
}

#[async_trait::async_trait]
impl Filesystem for Recorded {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        self.inner.read(path, range).await
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        self.inner.read_bytes(path, range, chunk_size).await
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        let w = self.inner.write(path, content, options).await?;
        self.record_write(&w);
        Ok(w)
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        let w = self.inner.write_bytes(path, options, data).await?;
        self.record_write(&w);
        Ok(w)
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        let e = self.inner.edit(path, edit).await?;
        if !e.dry_run && e.replacements > 0 {
            self.record(ChangeKind::Modified, &e.path, None, e.version);
        }
        Ok(e)
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        let own = self.events.own_change(Some(path));
        let deleted = self.inner.delete(path, options).await?;
        drop(own);
        if deleted > 0 {
            self.record(ChangeKind::Deleted, path, None, 0);
        }
        Ok(deleted)
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        let created = self.inner.mkdir(path, options).await?;
        if created {
            self.record(ChangeKind::Created, path, None, 0);
        }
        Ok(created)
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<u64> {
        let work = self.inner.rename(source, destination, options);
        self.transfer(source, destination, true, work).await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<u64> {
        let work = self.inner.copy(source, destination, options);
        self.transfer(source, destination, false, work).await
    }

    async fn list(&self, path: &CanonicalPath, depth: u32) -> Result<Listing> {
        self.inner.list(path, depth).await
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        self.inner.glob(query).await
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        self.inner.grep(query).await
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        self.inner.stat(path).await
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        self.inner.exists(path).await
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        let m = self.inner.set_attributes(path, attributes).await?;
        self.record(ChangeKind::Modified, path, None, m.version);
        Ok(m)
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        let w = self.inner.patch_bytes(path, options, data).await?;
        self.record_write(&w);
        Ok(w)
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        let m = self.inner.symlink(path, target, options).await?;
        self.record(ChangeKind::Created, path, None, m.version);
        Ok(m)
    }
}
