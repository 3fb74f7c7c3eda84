//! How the registry makes CONTAINER sessions.

use crate::kind::{BackendProvider, Context, Made, NewSession, Reopened, SessionRecord};
use crate::snapshots::fork::Origin;
use std::sync::Arc;
use wsfs::{Error, Result};

/// Makes CONTAINER sessions: their files are the container's, their
/// snapshots kept under the data directory until the server stops.
pub(crate) struct ContainerProvider;

fn no_fork() -> Error {
    Error::invalid_argument(
        "a fork is made as a MEMORY or DIRECTORY session; a CONTAINER session's files belong to its container (import an archive of the snapshot into it instead)",
    )
}

#[async_trait::async_trait]
impl BackendProvider for ContainerProvider {
    fn name(&self) -> &'static str {
        "container"
    }

    async fn create(&self, cx: &Context<'_>, new: NewSession<'_>) -> Result<Made> {
        let (handles, dir, container) =
            super::open(cx.config, &new.id, new.spec, new.limits, &new.seeds).await?;
        Ok(Made {
            handles,
            root_path: None,
            owned_dir: Some(dir),
            persist: None,
            on_listed: Some(Box::new(move |events| {
                Box::pin(async move { container.0.relay_external(events).await })
            })),
        })
    }

    fn check_fork(&self) -> Result<()> {
        Err(no_fork())
    }

    async fn fork(
        &self,
        _cx: &Context<'_>,
        _record: &mut SessionRecord,
        _origin: Arc<Origin>,
        _budget: u64,
    ) -> Result<Made> {
        Err(no_fork())
    }

    /// None: a CONTAINER session does not outlive the server, and what a
    /// stopped server left of them is removed.
    fn reopen(&self, cx: &Context<'_>) -> Result<Vec<Reopened>> {
        super::clear_abandoned(&cx.config.data_dir);
        Ok(Vec::new())
    }

    /// `--autosnapshot` leaves CONTAINER sessions alone.
    fn autosnapshots(&self) -> bool {
        false
    }
}
