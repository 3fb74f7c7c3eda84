//! Sessions of a kind whose snapshots live only in the object store
//! (MEMORY) come back from it through that kind's own code; a kind that
//! keeps its snapshots on disk (DIRECTORY) is fetched by the registry.
//! The trait lives here, not on [`crate::kind::BackendProvider`], so that
//! the generic kind module does not depend on the object store (which
//! depends on the bucket layout the DIRECTORY kind defines).

use super::download::BucketSnapshot;
use super::Bucket;
use crate::kind::{Context, Handles, SessionRecord};
use std::path::Path;
use std::sync::Arc;
use wsfs::Result;

#[async_trait::async_trait]
pub(crate) trait RecoversFromBucket: Send + Sync {
    /// Recreates from the object store the workspace of session `record`
    /// as snapshot `chosen` holds it (`None`: empty), with every one of
    /// its `snapshots` (oldest first) listed, recording the session in
    /// `session_dir`; only `chosen` is fetched now, and nothing past
    /// `budget` bytes (0: no limit).
    #[allow(clippy::too_many_arguments)]
    async fn recover(
        &self,
        cx: &Context<'_>,
        bucket: &Arc<Bucket>,
        record: &SessionRecord,
        session_dir: &Path,
        snapshots: &[BucketSnapshot],
        chosen: Option<&BucketSnapshot>,
        budget: u64,
    ) -> Result<Handles>;
}
