//! Failover without an operator: a call for a session this server does
//! not serve, when the bucket has the session and no live lease on it
//! (its holder is gone and its lease ran out), recovers the session here
//! from its latest snapshot, as RecoverSession without force would, then
//! is served.
//!
//! The cost a caller can cause is bounded: only ids written as the server
//! writes them (lowercase hyphenated UUIDs) are looked up; at most
//! [`LOOKUPS_AT_ONCE`] lookups ask the bucket at once; an id the bucket
//! does not know is not asked about again for [`UNKNOWN_FOR`], nor a
//! session another replica holds for [`LEASED_RECHECK`]; concurrent
//! calls for one session wait for its one recovery; the lookups wait for
//! the bucket at most a renewal interval (then `UNAVAILABLE`, retryable); and
//! a recovery is bounded by the session's byte budget, as RecoverSession
//! checks.
//!
//! While another replica holds a live lease, the call asks that replica
//! to hand the session over ([`super::handback`]) and is refused
//! `UNAVAILABLE` (retryable): behind a proxy whose ring moved the session
//! here (a replica back at its address, or one added) the session
//! follows its calls within a renewal round or two.

use super::{Session, SessionRegistry};
use futures::future::{BoxFuture, FutureExt, Shared};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsfs::token::is_session_id;
use wsfs::{Error, Result};

/// Bucket lookups for sessions not served here, at once.
const LOOKUPS_AT_ONCE: usize = 4;
/// How long an id the bucket does not know is answered SESSION_NOT_FOUND
/// without asking the bucket again.
const UNKNOWN_FOR: Duration = Duration::from_secs(5);
/// How long a session another replica holds is refused without asking
/// the bucket again (at most until that replica's lease runs out).
const LEASED_RECHECK: Duration = Duration::from_secs(1);
/// Most answers remembered of each kind (beyond this, new ones are not
/// remembered: each such id is then asked about, a few at a time).
const MAX_REMEMBERED: usize = 10_000;
/// `lookups` deciding whether session `id` may be served here, given at
/// most [`crate::objstore::Bucket::within_lookup_wait`]: a stalled
/// bucket costs a caller a bounded wait, never a call served without the
/// lease.
async fn bounded<T>(
    bucket: &crate::objstore::Bucket,
    id: &str,
    lookups: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let what = format!("whether session '{id}' may be served here; nothing was changed");
    bucket.within_lookup_wait(&what, lookups).await
}

type Flight = Shared<BoxFuture<'static, Result<Arc<Session>>>>;

/// The failovers in flight and what bounds their cost.
pub(super) struct Failovers {
    /// One recovery per session: later callers wait for the same one.
    in_flight: Mutex<HashMap<String, Flight>>,
    lookups: tokio::sync::Semaphore,
    /// Refusals given without asking the bucket again until their time:
    /// ids the bucket did not know (for [`UNKNOWN_FOR`]), and sessions
    /// another replica holds (for [`LEASED_RECHECK`]).
    refused: Memo<Error>,
    /// Sessions' token lists as the bucket gave them (for
    /// [`LEASED_RECHECK`]; `None`: none): tokens a list does not hold
    /// cost no lookup meanwhile.
    token_lists: Memo<Option<bytes::Bytes>>,
    /// The hand-backs this server asked for or is giving ([`super::handback`]).
    pub(super) handbacks: super::handback::Handbacks,
}

impl Failovers {
    pub(super) fn new() -> Self {
        Failovers {
            in_flight: Mutex::new(HashMap::new()),
            lookups: tokio::sync::Semaphore::new(LOOKUPS_AT_ONCE),
            refused: Memo::default(),
            token_lists: Memo::default(),
            handbacks: super::handback::Handbacks::default(),
        }
    }

    fn remember_unknown(&self, id: &str) {
        self.refused.remember(id, UNKNOWN_FOR, not_found(id));
    }
}

/// Answers about sessions, each kept for a while, at most
/// [`MAX_REMEMBERED`] at once.
pub(super) struct Memo<T>(Mutex<HashMap<String, (Instant, T)>>);

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> Memo<T> {
    /// What is remembered about `id`, while it stands.
    pub(super) fn get(&self, id: &str) -> Option<T> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (until, value) = memo.get(id)?;
        (Instant::now() < *until).then(|| value.clone())
    }

    /// Remembers `value` about `id` for `kept`.
    pub(super) fn remember(&self, id: &str, kept: Duration, value: T) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if memo.len() >= MAX_REMEMBERED {
            memo.retain(|_, (until, _)| now < *until);
        }
        if memo.len() < MAX_REMEMBERED {
            memo.insert(id.to_string(), (now + kept, value));
        }
    }

    pub(super) fn forget(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
}

fn not_found(id: &str) -> Error {
    Error::SessionNotFound {
        session_id: id.to_string(),
    }
}

impl SessionRegistry {
    /// The session named `id`, counting as use for its idle TTL; a session
    /// this server does not serve is failed over here first when the
    /// bucket has it and no other replica holds a live lease on it. While
    /// one does, the call is refused `UNAVAILABLE` naming the holder: a
    /// proxy may be routing here because that replica is gone, and its
    /// lease runs out soon.
    pub async fn get(self: &Arc<Self>, id: &str) -> Result<Arc<Session>> {
        match self.get_here(id) {
            Err(Error::SessionNotFound { .. }) if self.bucket.is_some() => self.fail_over(id).await,
            // A copy a restart found taken over elsewhere: the session
            // comes back here as any other does (see `handback`).
            Err(Error::SessionLeased { .. }) if self.superseded(id) => self.fail_over(id).await,
            served => served,
        }
    }

    /// A call whose bearer token (`token_hash`) this server does not know
    /// names session `id`, which it does not serve: fails the session over
    /// here when the bucket's token list of `id` holds that token. Whether
    /// the session is now served here with the token known.
    pub async fn fail_over_for_token(
        self: &Arc<Self>,
        id: &str,
        token_hash: &[u8; 32],
    ) -> Result<bool> {
        let Some(bucket) = self.bucket.clone() else {
            return Ok(false);
        };
        if self.get_quietly(id).is_some() || !is_session_id(id) {
            return Ok(false);
        }
        if let Some(Error::SessionNotFound { .. }) = self.failovers.refused.get(id) {
            return Ok(false);
        }
        let list = match self.failovers.token_lists.get(id) {
            Some(list) => list,
            None => {
                let _lookup = self.failovers.lookups.acquire().await;
                let (list, known) = bounded(&bucket, id, async {
                    let list = bucket.tokens(id).await?;
                    let known = list.is_some() || bucket.session_record(id).await?.is_some();
                    Ok((list, known))
                })
                .await?;
                if !known {
                    self.failovers.remember_unknown(id);
                    return Ok(false);
                }
                self.failovers
                    .token_lists
                    .remember(id, LEASED_RECHECK, list.clone());
                list
            }
        };
        if !list.is_some_and(|raw| crate::auth::list_holds(&raw, token_hash)) {
            return Ok(false);
        }
        self.get(id).await?;
        Ok(true)
    }

    /// Recovers session `id` here unless another replica holds a live
    /// lease on it; one recovery per session however many calls wait.
    async fn fail_over(self: &Arc<Self>, id: &str) -> Result<Arc<Session>> {
        if !is_session_id(id) {
            return Err(not_found(id));
        }
        if let Some(refused) = self.failovers.refused.get(id) {
            return Err(refused);
        }
        let flight = {
            let mut in_flight = self
                .failovers
                .in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            in_flight
                .entry(id.to_string())
                .or_insert_with(|| {
                    let (registry, id) = (self.clone(), id.to_string());
                    // Its own task: a caller that goes away does not cut a
                    // recovery short.
                    let task = tokio::spawn(async move {
                        let taken = registry.take_over(&id).await;
                        registry
                            .failovers
                            .in_flight
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&id);
                        taken
                    });
                    async move {
                        task.await.unwrap_or_else(|e| {
                            Err(Error::internal(format!(
                                "the session's failover stopped: {e}"
                            )))
                        })
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        let session = flight.await?;
        // Checked again, and counted as use, as every call is.
        self.get_here(&session.record.id)
    }

    async fn take_over(self: &Arc<Self>, id: &str) -> Result<Arc<Session>> {
        let bucket = self
            .bucket
            .clone()
            .ok_or_else(|| Error::internal("failover without an object store"))?;
        let previous;
        {
            let _lookup = self.failovers.lookups.acquire().await;
            let looked_up = bounded(&bucket, id, async {
                match bucket.session_record(id).await? {
                    None => Ok(None),
                    Some(_) => Ok(Some(bucket.lease(id).await?)),
                }
            })
            .await?;
            let Some(lease) = looked_up else {
                self.failovers.remember_unknown(id);
                return Err(not_found(id));
            };
            previous = lease;
            if let Some(lease) = &previous {
                if lease.is_live() && lease.holder != bucket.replica() {
                    let asked = self.ask_handback(&bucket, id, lease).await;
                    let refused = retryable(bucket.leased_error(id, lease), asked);
                    // Asked again once a second at most, and not before
                    // the lease could run out: a holder that gives its
                    // lease back (a graceful stop) is noticed at once.
                    let left = lease.expires_at_ms.saturating_sub(crate::clock::now_ms());
                    let kept = Duration::from_millis(left).min(LEASED_RECHECK);
                    self.failovers.refused.remember(id, kept, refused.clone());
                    return Err(refused);
                }
            }
        }
        self.failovers.refused.forget(id);
        self.discard_superseded(id).await?;
        let started = Instant::now();
        match self.recover(id, "", false).await {
            Ok(session) => {
                tracing::warn!(session = %id, elapsed = ?started.elapsed(), "session failed over to this server from its latest snapshot");
                if let Some(lease) = previous.filter(|l| l.holder != bucket.replica()) {
                    // What this server asked of that holder is answered.
                    bucket.drop_handback(&lease.holder, id).await;
                }
                Ok(session)
            }
            Err(e @ Error::SessionLeased { .. }) => Err(retryable(e, false)),
            // Being recovered here by RecoverSession meanwhile.
            Err(Error::AlreadyExists { .. }) => self.get_here(id).map_err(|_| Error::Unavailable {
                message: format!(
                    "session '{id}' is being recovered on this server: try again in a moment"
                ),
            }),
            Err(e) => Err(e),
        }
    }
}

/// The refusal of a call for a session another replica holds, made
/// retryable: behind a proxy that routes here because that replica is
/// gone, the session fails over here once its lease runs out; one that
/// routes here because the ring changed gets it once the holder hands it
/// over (`asked`: this server asked it to).
fn retryable(leased: Error, asked: bool) -> Error {
    let then = match asked {
        true => "this server asked that replica to hand the session over, and takes it once it has (or once that lease runs out without being renewed)",
        false => "this server takes the session over if that lease runs out without being renewed",
    };
    match leased {
        Error::SessionLeased { message, .. } => Error::Unavailable {
            message: format!("{message}; {then}: try again"),
        },
        other => other,
    }
}
