//! Hand-back between replicas: a session follows its calls when the
//! proxy's ring moves it (a replica back at its old address after its
//! sessions failed over, or a replica added).
//!
//! - The replica that gets a call for a session another replica holds
//!   ([`super::failover`]) asks that holder for it: a request in the
//!   bucket ([`crate::objstore::handback`]), written at most once per
//!   renewal interval per session, within failover's bounded lookups; the
//!   call is refused `UNAVAILABLE` (retryable).
//! - The holder lists the requests addressed to it once per renewal round
//!   (one listing, whatever the number of sessions), in a task of its own
//!   so that renewals never wait for a hand-back. For a fresh request on a
//!   session it has held for at least [`min_hold`] it stops admitting
//!   calls on the session, waits (a renewal interval at most) for the
//!   calls in flight, takes a snapshot (so that every acknowledged write
//!   is in the bucket: a hand-back loses nothing), gives its lease back,
//!   and drops the session here. When the calls do not end in time or
//!   the snapshot fails it keeps serving, and the request is tried again
//!   once [`min_hold`] has passed. A request on a session it does not hold, from itself,
//!   or stale, is removed and changes nothing.
//! - The asking replica's next call finds no live lease and fails the
//!   session over as any failover does, from that snapshot.
//!
//! A restart that finds a session of its disk taken over elsewhere keeps
//! that copy as *superseded*: calls on it take the same path, and once
//! the session comes back the stale copy is replaced by the bucket's
//! (what it held beyond the session's last snapshot was lost at the
//! failover already).

use super::background::{prune, AUTO_TAG};
use super::{Session, SessionRegistry};
use crate::clock::now_ms;
use crate::objstore::handback::{min_hold, Request};
use crate::objstore::lease::{renewal_interval, Lease};
use crate::objstore::Bucket;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsfs::{Error, Result};

/// Hand-backs given at once.
const HANDBACKS_AT_ONCE: usize = 4;

/// The hand-backs a server asked for and those it is giving.
#[derive(Default)]
pub(super) struct Handbacks {
    /// Sessions being handed over, each to the replica that asked: every
    /// call on one is refused meanwhile.
    handing: Mutex<HashMap<String, String>>,
    /// Sessions this server asked for lately: asked again only once the
    /// entry is gone (a renewal interval).
    asked: super::failover::Memo<()>,
    /// Sessions whose hand-back failed lately: served here, and tried
    /// again only once the entry is gone ([`min_hold`]), so that a bucket
    /// that keeps refusing costs the session's callers little.
    failed: super::failover::Memo<()>,
}

impl Handbacks {
    /// `UNAVAILABLE` while session `id` is being handed over.
    pub(super) fn check_not_handing(&self, id: &str) -> Result<()> {
        let handing = self.handing.lock().unwrap_or_else(|e| e.into_inner());
        match handing.get(id) {
            Some(to) => Err(Error::Unavailable {
                message: format!(
                    "session '{id}' is being handed over to replica '{to}', which asked for it: try again in a moment"
                ),
            }),
            None => Ok(()),
        }
    }

    fn set_handing(&self, id: &str, to: Option<&str>) {
        let mut handing = self.handing.lock().unwrap_or_else(|e| e.into_inner());
        match to {
            Some(to) => handing.insert(id.to_string(), to.to_string()),
            None => handing.remove(id),
        };
    }
}

impl SessionRegistry {
    /// Asks `lease`'s holder to hand session `id` over (once per renewal
    /// interval at most); whether the request is in the bucket.
    pub(super) async fn ask_handback(&self, bucket: &Bucket, id: &str, lease: &Lease) -> bool {
        let asked = &self.failovers.handbacks.asked;
        if asked.get(id).is_some() {
            return true;
        }
        // Within the call's bounded lookups.
        let what = format!("the hand-back request for session '{id}'");
        let written = bucket
            .within_lookup_wait(&what, bucket.ask_handback(&lease.holder, id))
            .await;
        match written {
            Ok(()) => {
                asked.remember(id, renewal_interval(bucket.lease_ttl()), ());
                tracing::info!(session = %id, holder = %lease.holder, "asked the session's holder to hand it over");
                true
            }
            Err(e) => {
                tracing::warn!(session = %id, holder = %lease.holder, error = %e, "asking for a hand-back failed");
                false
            }
        }
    }

    /// Whether session `id` is a copy a restart found taken over by
    /// another replica.
    pub(crate) fn superseded(&self, id: &str) -> bool {
        self.unavailable(id).is_some_and(|u| u.superseded)
    }

    /// Removes the superseded copy of session `id`, if there is one, so
    /// that the session can be recovered here from the bucket.
    pub(super) async fn discard_superseded(&self, id: &str) -> Result<()> {
        let copy = {
            let mut unavailable = self.unavailable.write().unwrap_or_else(|e| e.into_inner());
            match unavailable.get(id) {
                Some(u) if u.superseded => unavailable.remove(id),
                _ => None,
            }
        };
        let Some(copy) = copy else {
            return Ok(());
        };
        tracing::warn!(session = %id, dir = %copy.session_dir.display(), "the copy a failover superseded is replaced by the object store's");
        self.remove_session_dir(copy.session_dir, "a superseded copy")
            .await
    }

    /// Honours the hand-back requests addressed to this server: one
    /// listing, then a few hand-backs at once.
    pub(crate) async fn honour_handbacks(&self) {
        use futures::StreamExt;
        let Some(bucket) = self.bucket.clone() else {
            return;
        };
        let requests = match bucket.handback_requests().await {
            Ok(requests) => requests,
            Err(e) => {
                tracing::warn!(error = %e, "listing the hand-back requests failed");
                return;
            }
        };
        futures::stream::iter(requests)
            .for_each_concurrent(HANDBACKS_AT_ONCE, |request| {
                let bucket = &bucket;
                async move { self.honour(bucket, request).await }
            })
            .await;
    }

    /// One request: honoured, kept for a later round (held too briefly,
    /// or the hand-back failed), or removed (stale, or for a session not
    /// held here).
    async fn honour(&self, bucket: &Bucket, request: Request) {
        let ttl = bucket.lease_ttl();
        let id = &request.session;
        let held_since = bucket.held_since_ms(id);
        let session = self.get_quietly(id);
        let stands = request.is_fresh(ttl, now_ms()) && request.from != bucket.replica();
        let (Some(since), Some(session), true) = (held_since, session, stands) else {
            bucket.drop_handback(bucket.replica(), id).await;
            return;
        };
        let failed = &self.failovers.handbacks.failed;
        let held_for = now_ms().saturating_sub(since);
        if held_for < min_hold(ttl).as_millis() as u64 || failed.get(id).is_some() {
            return;
        }
        match self.hand_back(bucket, &session, &request.from).await {
            Ok(()) => bucket.drop_handback(bucket.replica(), id).await,
            Err(e) => {
                failed.remember(id, min_hold(ttl), ());
                tracing::warn!(session = %id, to = %request.from, error = %e, "the session could not be handed over: still served here, tried again next round")
            }
        }
    }

    /// Hands `session` over to replica `to`: refuses new calls, lets those
    /// in flight end, snapshots it, gives the lease back and drops it
    /// here. Until the lease is given back, any failure leaves the session
    /// served here as before.
    async fn hand_back(&self, bucket: &Bucket, session: &Arc<Session>, to: &str) -> Result<()> {
        let id = session.record.id.clone();
        let handbacks = &self.failovers.handbacks;
        handbacks.set_handing(&id, Some(to));
        let started = Instant::now();
        let snapshotted = async {
            calls_ended(session, renewal_interval(bucket.lease_ttl())).await?;
            let info = session.snapshots.snapshot(AUTO_TAG).await?;
            prune(&*session.snapshots, &id, super::background::AUTO_KEEP).await;
            Ok::<_, Error>(info)
        }
        .await;
        let info = match snapshotted {
            Ok(info) => info,
            Err(e) => {
                handbacks.set_handing(&id, None);
                return Err(e);
            }
        };
        bucket.release(&id).await;
        let dropped = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        session.closed.cancel();
        if let Some(auth) = self.auth.get() {
            auth.tokens().forget_session(&id);
        }
        if let Some(dir) = dropped.and_then(|s| s.owned_dir.clone()) {
            // Everything it held is in the bucket.
            if self
                .remove_session_dir(dir, "the handed-over session")
                .await
                .is_err()
            {
                tracing::warn!(session = %id, "the handed-over session's directory could not be removed");
            }
        }
        handbacks.set_handing(&id, None);
        tracing::warn!(session = %id, %to, snapshot = %info.id, elapsed = ?started.elapsed(), "session handed over to the replica that asked for it");
        Ok(())
    }
}

/// Waits, at most `within`, until no call but Watches holds `session`
/// (besides the registry and the caller); `UNAVAILABLE` when some still
/// run then.
async fn calls_ended(session: &Arc<Session>, within: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        let running = Arc::strong_count(session).saturating_sub(2 + session.watches());
        if running == 0 {
            return Ok(());
        }
        if started.elapsed() >= within {
            return Err(Error::Unavailable {
                message: format!(
                    "{running} calls on session '{}' still ran after {within:?}",
                    session.record.id
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
