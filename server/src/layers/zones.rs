//! The zones layer: a session's workspace as one caller sees it. Reads
//! pass through; every change is first put to the one permission function
//! ([`zones::check`]), so a refused call reaches no backend.

use crate::auth::zones::{self, Layout, Operation};
use crate::auth::Caller;
use std::sync::Arc;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, CanonicalPath, DeleteOptions, EditOutcome, EditSpec,
    Filesystem, FilesystemLayer, Metadata, MkdirOptions, PatchChunks, PatchOptions, Result,
    SymlinkOptions, TransferOptions, Transferred, WriteOptions, WriteOutcome,
};

/// A caller's view of a session's workspace that refuses what the caller
/// may not change.
pub struct Guarded {
    inner: Arc<dyn Filesystem>,
    caller: Caller,
    layout: Layout,
}

impl Guarded {
    pub fn new(inner: Arc<dyn Filesystem>, caller: Caller, layout: Layout) -> Guarded {
        Guarded {
            inner,
            caller,
            layout,
        }
    }

    fn check(&self, op: Operation, paths: &[&CanonicalPath]) -> Result<()> {
        zones::check(&self.caller, self.layout, op, paths)
    }
}

#[async_trait::async_trait]
impl FilesystemLayer for Guarded {
    fn inner(&self) -> &dyn Filesystem {
        &*self.inner
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        self.check(Operation::Write, &[path])?;
        self.inner.write(path, content, options).await
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        self.check(Operation::Write, &[path])?;
        self.inner.write_bytes(path, options, data).await
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        // A dry run answers with the diff the edit would make, at the
        // edit's cost: it is allowed only where the edit is.
        self.check(Operation::Edit, &[path])?;
        self.inner.edit(path, edit).await
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        self.check(Operation::Delete, &[path])?;
        self.inner.delete(path, options).await
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        self.check(Operation::Mkdir, &[path])?;
        self.inner.mkdir(path, options).await
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        self.check(Operation::Move, &[source, destination])?;
        self.inner.rename(source, destination, options).await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        self.check(Operation::Copy, &[source, destination])?;
        self.inner.copy(source, destination, options).await
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        self.check(Operation::Write, &[path])?;
        self.inner.set_attributes(path, attributes).await
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        self.check(Operation::Write, &[path])?;
        self.inner.patch_bytes(path, options, data).await
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        self.check(Operation::Write, &[path])?;
        self.inner.symlink(path, target, options).await
    }
}
