//! Hand-back requests: a replica that gets calls for a session another
//! replica holds asks that holder for it, with a small object under the
//! holder's own prefix:
//!
//! ```text
//! handback/<holder replica id>/<session id>   {"from": ..., "at_ms": ...}
//! ```
//!
//! The holder lists its prefix once per renewal round, whatever the number
//! of sessions it serves, and honours a fresh request on a session it has
//! held for long enough (`crate::registry` does: it stops admitting calls,
//! snapshots the session, and gives the lease back). A request is only a
//! hint: who serves a session is still decided by the lease alone
//! ([`super::lease`]), so a forged, stale or duplicated request can at
//! most make a holder hand a session over, losing nothing, never make two
//! replicas serve it.

use super::{keys, Bucket};
use crate::clock::now_ms;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use wsfs::Result;

/// The largest request read back.
const MAX_REQUEST_BYTES: u64 = 4 * 1024;
/// Most requests read in one round (more wait for the next rounds).
const MAX_REQUESTS_PER_ROUND: usize = 1_000;

/// How long a request stands: two lease lengths. The asking replica
/// writes it again (once per renewal interval) while calls keep coming.
pub fn fresh_for(ttl: Duration) -> Duration {
    ttl * 2
}

/// How old a request (by the bucket's clock) is when a sweep removes it,
/// whoever it is addressed to: [`fresh_for`] and one lease length more
/// for clocks. An asker writes its request again every renewal interval
/// while calls keep coming, so only a request nobody renews gets this
/// old: one addressed to a replica that never came back, or for a
/// session that failed over elsewhere meanwhile.
pub fn abandoned_after(ttl: Duration) -> Duration {
    fresh_for(ttl) + ttl
}

/// How long a holder keeps a session before it hands it back: one lease
/// length, so that two replicas that both get calls for it (a flapping
/// proxy) move it at most once per lease length.
pub fn min_hold(ttl: Duration) -> Duration {
    ttl
}

/// A request for a session, as its holder reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    #[serde(skip)]
    pub session: String,
    /// The replica that asks.
    pub from: String,
    /// When it asked (ms since the epoch, by its clock).
    pub at_ms: u64,
}

impl Request {
    /// Whether it still stands at `now_ms`: neither older than
    /// [`fresh_for`] nor dated ahead by more than a lease (a clock
    /// further off than the skew margin, or a forgery).
    pub fn is_fresh(&self, ttl: Duration, now_ms: u64) -> bool {
        let (fresh, ahead) = (fresh_for(ttl).as_millis() as u64, ttl.as_millis() as u64);
        now_ms.saturating_sub(self.at_ms) < fresh && self.at_ms <= now_ms + ahead
    }
}

impl Bucket {
    /// Asks replica `holder` to hand session `id` over to this one.
    pub async fn ask_handback(&self, holder: &str, id: &str) -> Result<()> {
        let key = keys::handback(holder, id);
        let request = Request {
            session: id.to_string(),
            from: self.replica.clone(),
            at_ms: now_ms(),
        };
        let json = serde_json::to_vec(&request)
            .map_err(|e| wsfs::Error::internal(format!("cannot encode a request: {e}")))?;
        self.store
            .put(&key, json.into())
            .await
            .map(|_| ())
            .map_err(|e| self.failed("write", &key, e))
    }

    /// The requests addressed to this replica: one listing of its prefix.
    /// One that does not name a session as servers write ids, or that
    /// names no replica asking, is removed.
    pub async fn handback_requests(&self) -> Result<Vec<Request>> {
        let listed = self.list(&keys::handbacks(&self.replica)).await?;
        let mut requests = Vec::new();
        for meta in listed.into_iter().take(MAX_REQUESTS_PER_ROUND) {
            let session = meta
                .location
                .filename()
                .filter(|id| wsfs::token::is_session_id(id))
                .map(str::to_string);
            let read = match &session {
                Some(_) => self.get_small(&meta.location, MAX_REQUEST_BYTES).await,
                None => Ok(None),
            };
            let parsed = match read {
                Ok(raw) => raw
                    .and_then(|raw| serde_json::from_slice::<Request>(&raw).ok())
                    .filter(|request| !request.from.is_empty()),
                // Read again next round.
                Err(_) => continue,
            };
            match (session, parsed) {
                (Some(session), Some(request)) => requests.push(Request { session, ..request }),
                _ => {
                    tracing::warn!(key = %meta.location, "a malformed hand-back request: removed");
                    let _ = self.store.delete(&meta.location).await;
                }
            }
        }
        Ok(requests)
    }

    /// Removes every hand-back request, to any replica, written
    /// [`abandoned_after`] or longer before `now` (an object just written,
    /// dated by the bucket's clock, so that no replica's clock counts):
    /// one listing of `handback/`. How many were removed.
    pub(super) async fn drop_abandoned_handbacks(
        &self,
        now: &object_store::ObjectMeta,
    ) -> Result<usize> {
        let abandoned = abandoned_after(self.lease_ttl);
        let mut removed = 0;
        for meta in self.list(&keys::all_handbacks()).await? {
            if super::sweep::age(now, &meta) < abandoned {
                continue;
            }
            match self.store.delete(&meta.location).await {
                Ok(()) => removed += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.failed("delete", &meta.location, e)),
            }
        }
        Ok(removed)
    }

    /// Removes the request for session `id` addressed to replica `holder`
    /// (best effort: a leftover is removed at that holder's next round,
    /// or goes stale).
    pub async fn drop_handback(&self, holder: &str, id: &str) {
        match self.store.delete(&keys::handback(holder, id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(session = %id, %holder, error = %e, "a hand-back request could not be removed")
            }
        }
    }
}
