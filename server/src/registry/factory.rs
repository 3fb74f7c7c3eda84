//! The one place that names every backend kind: a new kind is one folder
//! with a [`BackendProvider`], and one arm here.

use crate::container::ContainerProvider;
use crate::directory::DirectoryProvider;
use crate::kind::BackendProvider;
use crate::memory::MemoryProvider;
use wsfs::BackendKind;

/// The provider of `kind`'s sessions.
pub(crate) fn provider(kind: BackendKind) -> &'static dyn BackendProvider {
    match kind {
        BackendKind::Memory => &MemoryProvider,
        BackendKind::Directory => &DirectoryProvider,
        BackendKind::Container => &ContainerProvider,
    }
}

/// How `kind`'s sessions come back from the object store when its
/// snapshots live only there; `None`: the registry fetches them itself
/// (DIRECTORY, whose snapshots are kept on disk).
pub(crate) fn bucket_recovery(
    kind: BackendKind,
) -> Option<&'static dyn crate::objstore::recovers::RecoversFromBucket> {
    match kind {
        BackendKind::Memory => Some(&MemoryProvider),
        BackendKind::Directory | BackendKind::Container => None,
    }
}
