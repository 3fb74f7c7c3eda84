//! Every session the bucket knows, so that ListSessions on any replica
//! lists the sessions of all of them: one listing of `sessions/` for their
//! ids, then the record and lease of each one asked for, a bounded number
//! at a time; each request waits for the bucket at most
//! [`super::lease::lookup_wait`].

use super::lease::Lease;
use super::{keys, Bucket, Key};
use futures::{StreamExt, TryStreamExt};
use wsfs::{Error, Result};

/// Session records (each with its lease) read at once.
pub const READS_AT_ONCE: usize = 16;

/// A session as the bucket records it.
#[derive(Debug)]
pub struct RecordedSession {
    pub id: String,
    /// Its record (what `session.json` keeps of it), or why it cannot be
    /// read.
    pub record: std::result::Result<serde_json::Value, String>,
    /// The lease in force on it, if any (live or not).
    pub lease: Option<Lease>,
}

impl Bucket {
    /// The ids of every session with a place in the bucket, sorted: one
    /// listing of `sessions/` by its first level (with S3, one request per
    /// 1000 sessions). Names that are not session ids are skipped.
    pub async fn session_ids(&self) -> Result<Vec<String>> {
        let prefix = Key::from(keys::SESSIONS);
        let listing = async {
            self.store
                .list_with_delimiter(Some(&prefix))
                .await
                .map_err(|e| self.failed("list", &prefix, e))
        };
        let listed = self
            .within_lookup_wait("listing the sessions", listing)
            .await?;
        let mut ids: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename())
            .filter(|id| wsfs::token::is_session_id(id))
            .map(str::to_string)
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The records and leases of the sessions `ids`, in their order,
    /// [`READS_AT_ONCE`] sessions at a time. A session whose record is gone
    /// (deleted since the listing, or still being created) is left out; a
    /// record or lease that cannot be parsed is reported in its place; a
    /// bucket that fails is UNAVAILABLE.
    pub async fn recorded_sessions(&self, ids: &[String]) -> Result<Vec<RecordedSession>> {
        let found: Vec<Option<RecordedSession>> = futures::stream::iter(ids.to_vec())
            .map(|id| async move {
                let what = format!("reading session '{id}'");
                self.within_lookup_wait(&what, self.recorded_session(&id))
                    .await
            })
            .buffered(READS_AT_ONCE)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    async fn recorded_session(&self, id: &str) -> Result<Option<RecordedSession>> {
        let record = match self.session_record(id).await {
            Ok(Some(recorded)) => Ok(recorded.session),
            Ok(None) => return Ok(None),
            Err(Error::Internal { message }) => Err(message),
            Err(e) => return Err(e),
        };
        let lease = match self.lease(id).await {
            Ok(lease) => lease,
            Err(Error::Internal { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(Some(RecordedSession {
            id: id.to_string(),
            record,
            lease,
        }))
    }
}
