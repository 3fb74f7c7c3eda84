//! Which replica serves a session: a lease in the bucket.
//!
//! A lease is a sequence of objects `sessions/<id>/lease/<generation>`,
//! each naming a holder (its replica id and the incarnation of the
//! process, a random nonce drawn at start) and when it expires; the
//! highest generation is in force. S3's `If-Match` update would do with
//! one object, but a local directory store (`file://`) supports only the
//! conditional create, so the lease is built on that alone.
//!
//! # The rules
//!
//! 1. Taking or renewing creates generation `g + 1` with `PutMode::Create`
//!    after `g`, the highest this replica saw (a renewal: the one it
//!    holds). A create refused because the key exists is a lost race,
//!    unless the object found is this very process's own (same replica
//!    id *and* incarnation): a create whose answer was lost after it
//!    landed, which then counts as made.
//! 2. Then the writer lists the generations and *confirms*: nothing above
//!    `g + 1`, and `g` still there. Otherwise the claim is lost, and the
//!    writer removes its `g + 1` again.
//! 3. Only a confirmed holder removes generations, and only those below
//!    its own.
//! 4. A replica takes over another's lease only once its highest
//!    generation expired (by its own clock), or with `force`; the new
//!    holder serves only from that expiry on (a forced takeover waits it
//!    out). A confirmed holder serves until its expiry less
//!    [`skew_margin`], the expiry counted from when the create was sent.
//! 5. A holder gives a lease back ([`Bucket::release`]: a graceful stop,
//!    or a hand-back to a replica that asked for the session, see
//!    [`super::handback`]) by creating the next generation already
//!    expired, once it has stopped serving the session. A hand-back
//!    request is only a hint: the lease stays the one decision, taken
//!    by rule 4 like any other.
//! 6. A write that makes something visible as the session's (a
//!    snapshot's records) follows a renewal made for it
//!    ([`Bucket::renew_for_commit`]) and must be acknowledged before that
//!    renewal's expiry less [`skew_margin`]: by rule 4 no other replica
//!    serves the session before then, however long the work before the
//!    write took. Claims on one session are serialized in this process,
//!    so that such a renewal and the background one never build on the
//!    same generation.
//!
//! # Why two replicas never both serve
//!
//! Deletion is what lets a number be created twice (a stale holder
//! re-creating a generation its successor removed), so the argument is
//! about confirmed generations. Say `X` confirmed `g` and `Y` confirmed
//! `h > g`, and `X` is not `Y`'s process. `Y` created `h` after reading
//! `h - 1` as the highest; `X` listed after creating `g` and saw nothing
//! above `g`, so `h` did not yet exist then (a generation disappears only
//! when a confirmed holder of a higher one removes it, which leaves that
//! higher one, or when the whole session is forgotten, which rule 2's
//! "`g` still there" catches). So `Y`'s claim chain from `g` up to `h`
//! was built after `X` confirmed, each link by a replica that read the
//! previous generation's expiry and (rule 4) serves only after it; and a
//! holder's own renewals only move its expiry later. Hence `Y` serves
//! only after `X`'s last confirmed expiry (by `Y`'s clock), and `X` stops
//! `skew_margin` before it (by `X`'s clock): as long as the two clocks
//! differ by less than the margin, their serving times never overlap. A
//! stale `X` that comes back can create a generation below `h` (its
//! successor removed it), but never confirm it: `h`, or a higher one, is
//! listed above it.

use super::{keys, Bucket};
use crate::clock::now_ms;
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};
use wsfs::{Error, Result};

/// How many leases a shutdown gives back at once.
const RELEASES_AT_ONCE: usize = 16;
/// Locks that serialize the claims on one session (a renewal round's and
/// a Snapshot's commit), shared by sessions whose ids hash alike.
pub(super) const CLAIM_LOCKS: usize = 64;

/// How long before its lease expires a holder stops serving: a quarter
/// of the lease's length (7.5 s of the default 30 s). Replicas' clocks
/// must differ by less than this.
pub fn skew_margin(ttl: Duration) -> Duration {
    ttl / 4
}

/// How often a holder renews: every third of the lease, so that two
/// renewals in a row may fail before it stops serving.
pub fn renewal_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// The least time a call waits for the bucket to answer a lookup.
const MIN_LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// How long a call waits for the bucket to answer the lookups it makes on
/// its way (whether a session may fail over here, what ListSessions
/// shows): a renewal interval, at least [`MIN_LOOKUP_WAIT`]; then it is
/// refused `UNAVAILABLE` (retryable), having changed nothing, rather than
/// waiting out the store client's own timeouts (30 s per request).
pub fn lookup_wait(ttl: Duration) -> Duration {
    renewal_interval(ttl).max(MIN_LOOKUP_WAIT)
}

/// One generation of a session's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    #[serde(skip)]
    pub generation: u64,
    pub holder: String,
    /// The holder process's nonce: a restart of the same replica id is
    /// another incarnation.
    #[serde(default)]
    pub incarnation: String,
    /// Milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

impl Lease {
    pub fn is_live(&self) -> bool {
        self.expires_at_ms > now_ms()
    }

    fn expires_at(&self) -> String {
        format_ms(self.expires_at_ms)
    }
}

/// A confirmed generation this process holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    generation: u64,
    /// Before this (ms since the epoch) the previous holder may still
    /// serve: this replica does not.
    serves_from_ms: u64,
    /// The lease's expiry less the skew margin: from this on this
    /// replica no longer serves, until a renewal succeeds.
    good_until_ms: u64,
    /// When this process took the lease (its renewals keep it): how long
    /// it has held the session, which a hand-back asks.
    since_ms: u64,
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// Another replica took the session over.
    Lost {
        holder: String,
    },
    /// This server no longer holds a lease on it: nothing was done.
    NotHeld,
}

/// What claiming a generation came to.
enum Claim {
    /// Confirmed; the lease as written, and the generations listed then.
    Won(Lease, Vec<u64>),
    /// Another writer holds the session (its lease, as far as it could be
    /// read).
    Lost(Lease),
}

fn format_ms(ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// The largest lease object read back.
const MAX_LEASE_BYTES: u64 = 64 * 1024;

fn generation_of(key: &object_store::path::Path) -> Option<u64> {
    key.filename()?.parse().ok()
}

impl Bucket {
    /// The lease in force on session `id`, if any.
    pub async fn lease(&self, id: &str) -> Result<Option<Lease>> {
        loop {
            let Some(generation) = self.generations(id).await?.into_iter().max() else {
                return Ok(None);
            };
            if let Some(lease) = self.read_generation(id, generation).await? {
                return Ok(Some(lease));
            }
            // Removed by a newer writer since the listing: look again.
        }
    }

    /// The generations of session `id`'s lease in the bucket.
    async fn generations(&self, id: &str) -> Result<Vec<u64>> {
        Ok(self
            .list(&keys::leases(id))
            .await?
            .iter()
            .filter_map(|m| generation_of(&m.location))
            .collect())
    }

    async fn read_generation(&self, id: &str, generation: u64) -> Result<Option<Lease>> {
        let key = keys::lease(id, generation);
        let Some(raw) = self.get_small(&key, MAX_LEASE_BYTES).await? else {
            return Ok(None);
        };
        let mut lease: Lease = serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("the lease '{key}' is corrupt: {e}")))?;
        lease.generation = generation;
        Ok(Some(lease))
    }

    fn is_mine(&self, lease: &Lease) -> bool {
        lease.holder == self.replica && lease.incarnation == self.incarnation
    }

    /// The refusal naming who holds session `id`'s lease.
    pub fn leased_error(&self, id: &str, lease: &Lease) -> Error {
        Error::SessionLeased {
            session_id: id.to_string(),
            holder: lease.holder.clone(),
            message: format!(
                "session '{id}' is served by replica '{}' (its lease runs until {}); recover it elsewhere only once that replica is gone and the lease ran out, or with force",
                lease.holder,
                lease.expires_at()
            ),
        }
    }

    /// Takes session `id`'s lease for this server. Refused
    /// (`SessionLeased`) while another replica holds a live one, unless
    /// `force`. `may_take_others`: whether an expired lease of another
    /// replica may be taken (a recovery) or not (a session reopened at
    /// start-up, which another replica may have recovered since). A lease
    /// of an earlier run of this replica id is taken, but, like a forced
    /// takeover, served only once it has run out. Returns when this
    /// replica may begin serving the session (ms since the epoch).
    pub async fn acquire(&self, id: &str, force: bool, may_take_others: bool) -> Result<u64> {
        let _one = self.claim_lock(id).lock().await;
        let current = self.lease(id).await?;
        let mut serves_from_ms = 0;
        if let Some(lease) = &current {
            let others = lease.holder != self.replica;
            if others && !force && (lease.is_live() || !may_take_others) {
                return Err(self.leased_error(id, lease));
            }
            if !self.is_mine(lease) && lease.is_live() {
                serves_from_ms = lease.expires_at_ms;
            }
        }
        let previous = current.as_ref().map(|l| l.generation);
        match self.claim(id, previous).await? {
            Claim::Won(lease, listed) => {
                self.leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        id.to_string(),
                        self.held_by(&lease, serves_from_ms, now_ms().max(serves_from_ms)),
                    );
                self.lost
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(id);
                self.drop_generations_below(id, lease.generation, listed)
                    .await;
                Ok(serves_from_ms)
            }
            Claim::Lost(winner) => Err(self.leased_error(id, &winner)),
        }
    }

    /// Extends this server's lease on `id` by one TTL.
    pub async fn renew(&self, id: &str) -> Result<Renewal> {
        // One claim on a session at a time: two from the same generation
        // would each take the other's confirmed generation for a stale one.
        let _one = self.claim_lock(id).lock().await;
        let Some(held) = self.held(id) else {
            // Given back since the caller looked (the session was deleted).
            return Ok(Renewal::NotHeld);
        };
        match self.claim(id, Some(held.generation)).await? {
            Claim::Won(lease, listed) => {
                let generation = lease.generation;
                let renewed = self.held_by(&lease, held.serves_from_ms, held.since_ms);
                // Not brought back when given back meanwhile.
                let still_held = match self
                    .leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(id)
                {
                    Some(slot) => {
                        *slot = renewed;
                        true
                    }
                    None => false,
                };
                if !still_held {
                    return Ok(Renewal::NotHeld);
                }
                self.drop_generations_below(id, generation, listed).await;
                Ok(Renewal::Renewed)
            }
            Claim::Lost(winner) => {
                self.leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(id);
                self.lost
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.to_string(), winner.holder.clone());
                Ok(Renewal::Lost {
                    holder: winner.holder,
                })
            }
        }
    }

    /// The lock serializing the claims on session `id`.
    pub(super) fn claim_lock(&self, id: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut hasher);
        &self.claiming[(hasher.finish() % CLAIM_LOCKS as u64) as usize]
    }

    /// Renews this replica's lease on `id` right before a write that may
    /// only land while the session is still this replica's (the records
    /// that make a snapshot visible): the renewal is the bucket's
    /// compare-and-swap, so a replica that took the session over since
    /// makes it fail (`SESSION_LEASED` naming that replica). Returns how
    /// long the write has: until the renewed lease's expiry less the skew
    /// margin, before any other replica may take the session over.
    pub(super) async fn renew_for_commit(&self, id: &str) -> Result<Duration> {
        match self.renew(id).await? {
            Renewal::Renewed | Renewal::NotHeld => {}
            Renewal::Lost { holder } => return Err(self.taken_over(id, &holder)),
        }
        let held = self.check_holding(id)?;
        Ok(Duration::from_millis(
            held.good_until_ms.saturating_sub(now_ms()),
        ))
    }

    /// The refusal of a write on session `id`, which replica `holder`
    /// took over while this one held it.
    fn taken_over(&self, id: &str, holder: &str) -> Error {
        Error::SessionLeased {
            session_id: id.to_string(),
            holder: holder.to_string(),
            message: format!(
                "session '{id}' was taken over by replica '{holder}' (this replica's lease in the object store {} ran out); nothing more is written here for it",
                self.url
            ),
        }
    }

    /// `lookups`, given at most [`lookup_wait`]: `UNAVAILABLE` naming the
    /// bucket and `what` was asked after that.
    pub async fn within_lookup_wait<T>(
        &self,
        what: &str,
        lookups: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let wait = lookup_wait(self.lease_ttl);
        tokio::time::timeout(wait, lookups)
            .await
            .unwrap_or_else(|_| Err(self.unanswered(&format!("within {wait:?}"), what)))
    }

    /// The refusal of a call the bucket did not answer `when` (a bound);
    /// `what` says what was asked and what became of the call.
    pub(super) fn unanswered(&self, when: &str, what: &str) -> Error {
        Error::Unavailable {
            message: format!(
                "the object store {} did not answer {when} ({what}): try again",
                self.url
            ),
        }
    }

    /// The sessions a renewal found taken over by another replica since
    /// the last call, each with its new holder: for the registry to stop
    /// serving them.
    pub fn take_lost(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.lost.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .collect()
    }

    fn held_by(&self, lease: &Lease, serves_from_ms: u64, since_ms: u64) -> Held {
        let margin = skew_margin(self.lease_ttl).as_millis() as u64;
        Held {
            generation: lease.generation,
            serves_from_ms,
            good_until_ms: lease.expires_at_ms.saturating_sub(margin),
            since_ms,
        }
    }

    /// When this process took its lease on session `id` (ms since the
    /// epoch); `None` when it holds none.
    pub fn held_since_ms(&self, id: &str) -> Option<u64> {
        self.held(id).map(|held| held.since_ms)
    }

    /// Whether this replica may serve a call on session `id` now: it holds
    /// a confirmed lease, its previous holder's has run out, and its own
    /// is good for longer than the skew margin. `Unavailable` otherwise:
    /// a later call may find the lease renewed.
    pub fn check_serving(&self, id: &str) -> Result<()> {
        let held = self.check_holding(id)?;
        if now_ms() < held.serves_from_ms {
            return Err(Error::Unavailable {
                message: format!(
                    "session '{id}' is served here from {}, when the lease of its previous holder runs out; try again then",
                    format_ms(held.serves_from_ms)
                ),
            });
        }
        Ok(())
    }

    /// Whether this replica holds a lease on `id` that is good for longer
    /// than the skew margin: what writing the session's records to the
    /// bucket needs.
    pub(super) fn check_holding(&self, id: &str) -> Result<Held> {
        let Some(held) = self.held(id) else {
            let lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(holder) = lost.get(id) {
                return Err(self.taken_over(id, holder));
            }
            return Err(Error::Unavailable {
                message: format!(
                    "this replica holds no lease on session '{id}' in the object store {} (it is taken when the store can be reached); try again",
                    self.url
                ),
            });
        };
        if now_ms() >= held.good_until_ms {
            return Err(Error::Unavailable {
                message: format!(
                    "this replica could not renew its lease on session '{id}' in the object store {} since before {}; try again (once the lease runs out another replica may take the session over)",
                    self.url,
                    format_ms(held.good_until_ms)
                ),
            });
        }
        Ok(held)
    }

    /// Gives back this server's lease on `id` (best effort: otherwise it
    /// runs out): a new generation that has already expired, so that the
    /// generations keep growing.
    pub async fn release(&self, id: &str) {
        let _one = self.claim_lock(id).lock().await;
        let held = self
            .leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(held) = held {
            let released = Lease {
                generation: held.generation + 1,
                holder: self.replica.clone(),
                incarnation: self.incarnation.clone(),
                expires_at_ms: 0,
            };
            if let Ok(json) = serde_json::to_vec(&released) {
                let key = keys::lease(id, released.generation);
                let create = PutOptions::from(PutMode::Create);
                let _ = self.store.put_opts(&key, json.into(), create).await;
            }
        }
    }

    /// Gives back every lease this server holds, as a graceful shutdown
    /// does, so that another replica may recover the sessions at once
    /// rather than when the leases run out. Best effort within `within`:
    /// the leases the bucket has not taken back by then run out on their
    /// own. How many were given back.
    pub async fn release_all(&self, within: Duration) -> usize {
        use futures::StreamExt;
        let held = self.held_sessions();
        let released = std::sync::atomic::AtomicUsize::new(0);
        let releasing = futures::stream::iter(&held).for_each_concurrent(RELEASES_AT_ONCE, |id| {
            let released = &released;
            async move {
                self.release(id).await;
                released.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        if tokio::time::timeout(within, releasing).await.is_err() {
            tracing::warn!(
                held = held.len(),
                released = released.load(std::sync::atomic::Ordering::SeqCst),
                ?within,
                "the object store did not take back every lease in time: the others run out on their own"
            );
        }
        released.into_inner()
    }

    /// Every session this server holds a lease on.
    pub fn held_sessions(&self) -> Vec<String> {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    fn held(&self, id: &str) -> Option<Held> {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
    }

    /// Creates and confirms the generation after `previous` (rules 1 and
    /// 2 of the module's comment).
    async fn claim(&self, id: &str, previous: Option<u64>) -> Result<Claim> {
        let generation = previous.map_or(1, |g| g + 1);
        let key = keys::lease(id, generation);
        let mut lease = Lease {
            generation,
            holder: self.replica.clone(),
            incarnation: self.incarnation.clone(),
            // Counted from before the request is sent.
            expires_at_ms: now_ms() + self.lease_ttl.as_millis() as u64,
        };
        let json = serde_json::to_vec(&lease)
            .map_err(|e| Error::internal(format!("cannot encode a lease: {e}")))?;
        let create = PutOptions::from(PutMode::Create);
        match self.store.put_opts(&key, json.into(), create).await {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                match self.read_generation(id, generation).await? {
                    // An earlier try of ours whose answer was lost: it
                    // stands, with the expiry it was sent with.
                    Some(found) if self.is_mine(&found) => lease = found,
                    Some(found) => return Ok(Claim::Lost(found)),
                    None => return Ok(Claim::Lost(self.current_or_unknown(id).await)),
                }
            }
            Err(e) => return Err(self.failed("write", &key, e)),
        }
        let listed = self.generations(id).await?;
        let above = listed.iter().any(|&g| g > generation);
        let mine_there = listed.contains(&generation);
        let previous_there = previous.is_none_or(|p| listed.contains(&p));
        if above || !mine_there || !previous_there {
            // A stale claim: a newer holder removed what it built on.
            let _ = self.store.delete(&key).await;
            return Ok(Claim::Lost(self.current_or_unknown(id).await));
        }
        Ok(Claim::Won(lease, listed))
    }

    /// The lease in force, or a stand-in when it cannot be read or there
    /// is none (the session was removed from the bucket).
    async fn current_or_unknown(&self, id: &str) -> Lease {
        match self.lease(id).await {
            Ok(Some(lease)) => lease,
            _ => Lease {
                generation: 0,
                holder: "another replica".to_string(),
                incarnation: String::new(),
                expires_at_ms: now_ms(),
            },
        }
    }

    /// Removes the generations of `listed` before `generation` (best
    /// effort: a leftover is harmless, the highest one rules).
    async fn drop_generations_below(&self, id: &str, generation: u64, listed: Vec<u64>) {
        for older in listed.into_iter().filter(|&g| g < generation) {
            let _ = self.store.delete(&keys::lease(id, older)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A Snapshot's renewal ([`Bucket::renew_for_commit`]) runs beside
    /// the background one: renewals of one session at once, on a real
    /// (`file://`) bucket, each build on the generation the one before
    /// confirmed, so that none takes the other's for a stale claim and
    /// gives the session up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_renewals_of_one_session_never_give_it_up() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let bucket = Arc::new(Bucket::open(&url, "r0".into(), Duration::from_secs(30)).unwrap());
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        bucket.acquire(id, false, false).await.unwrap();
        for _ in 0..10 {
            let renewals: Vec<_> = (0..8)
                .map(|_| {
                    let bucket = bucket.clone();
                    tokio::spawn(async move { bucket.renew(id).await })
                })
                .collect();
            for renewal in renewals {
                assert_eq!(renewal.await.unwrap().unwrap(), Renewal::Renewed);
            }
        }
        bucket.check_holding(id).unwrap();
        assert!(bucket.take_lost().is_empty());
    }
}
