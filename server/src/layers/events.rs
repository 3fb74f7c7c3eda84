//! The events layer: appends each change a call made to the session's
//! [`EventLog`] in the caller's name, once the call has succeeded. It sits
//! outside the zones layer, so a refused call records nothing; reads pass
//! straight through.

use crate::events::{ChangeKind, EventLog};
use std::sync::Arc;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, CanonicalPath, DeleteOptions, EditOutcome, EditSpec,
    Filesystem, FilesystemLayer, Metadata, MkdirOptions, PatchChunks, PatchOptions, Result,
    SymlinkOptions, TransferOptions, Transferred, WriteOptions, WriteOutcome,
};

/// A caller's view of a session's workspace that records its changes.
pub struct Recorded {
    inner: Arc<dyn Filesystem>,
    events: Arc<EventLog>,
    /// The name the events carry: `system` or a swarm member.
    caller: String,
}

impl Recorded {
    pub fn new(inner: Arc<dyn Filesystem>, events: Arc<EventLog>, caller: String) -> Recorded {
        Recorded {
            inner,
            events,
            caller,
        }
    }

    /// Records a change this call made, in the caller's name.
    fn record(
        &self,
        kind: ChangeKind,
        path: &CanonicalPath,
        to: Option<&CanonicalPath>,
        version: u64,
    ) {
        self.events.append(kind, path, to, version, &self.caller);
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
        work: impl std::future::Future<Output = Result<Transferred>>,
    ) -> Result<Transferred> {
        let own = (
            self.events.own_change(Some(source)),
            self.events.own_change(Some(destination)),
        );
        let done = work.await?;
        drop(own);
        // The version the change made, not a Stat's after it (which could
        // name a later change).
        let version = done.version.unwrap_or(0);
        if moved {
            self.record(ChangeKind::Moved, source, Some(destination), version);
        } else {
            self.record(ChangeKind::Created, destination, None, version);
        }
        Ok(done)
    }
}

#[async_trait::async_trait]
impl FilesystemLayer for Recorded {
    fn inner(&self) -> &dyn Filesystem {
        &*self.inner
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
    ) -> Result<Transferred> {
        let work = self.inner.rename(source, destination, options);
        self.transfer(source, destination, true, work).await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        let work = self.inner.copy(source, destination, options);
        self.transfer(source, destination, false, work).await
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
