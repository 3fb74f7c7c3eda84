//! Which replica serves a session: a lease in the bucket.
//!
//! A lease is a sequence of objects `sessions/<id>/lease/<generation>`,
//! each naming a holder and when it expires; the highest generation is in
//! force. Taking or renewing the lease creates the next generation with
//! `PutMode::Create`, which the bucket grants to exactly one writer: the
//! holder renewing and a replica taking over cannot both win. (S3's
//! `If-Match` update would do with one object, but a local directory
//! store supports only the conditional create, and this works on both.)
//! The writer removes the generations below its own.

use super::{keys, Bucket};
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsfs::{Error, Result};

/// One generation of a session's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    #[serde(skip)]
    pub generation: u64,
    pub holder: String,
    /// Milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

impl Lease {
    pub fn is_live(&self) -> bool {
        self.expires_at_ms > now_ms()
    }

    fn expires_at(&self) -> String {
        let at = UNIX_EPOCH + Duration::from_millis(self.expires_at_ms);
        humantime::format_rfc3339_seconds(at).to_string()
    }
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The largest lease object read back.
const MAX_LEASE_BYTES: u64 = 64 * 1024;

impl Bucket {
    /// The lease in force on session `id`, if any.
    pub async fn lease(&self, id: &str) -> Result<Option<Lease>> {
        let generations = self.list(&keys::leases(id)).await?;
        let Some((generation, key)) = generations
            .into_iter()
            .filter_map(|m| {
                let g = m.location.filename()?.parse::<u64>().ok()?;
                Some((g, m.location))
            })
            .max_by_key(|(g, _)| *g)
        else {
            return Ok(None);
        };
        let Some(raw) = self.get_small(&key, MAX_LEASE_BYTES).await? else {
            // Removed by a newer writer since the listing: look again.
            return Box::pin(self.lease(id)).await;
        };
        let mut lease: Lease = serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("the lease '{key}' is corrupt: {e}")))?;
        lease.generation = generation;
        Ok(Some(lease))
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
    /// `force`; a lease of this very replica (a restart) is simply taken.
    /// `may_take_others`: whether an expired lease of another replica may
    /// be taken (a recovery) or not (a session reopened at start-up, which
    /// another replica may have recovered since).
    pub async fn acquire(&self, id: &str, force: bool, may_take_others: bool) -> Result<()> {
        let current = self.lease(id).await?;
        if let Some(lease) = &current {
            let others = lease.holder != self.replica;
            if others && !force && (lease.is_live() || !may_take_others) {
                return Err(self.leased_error(id, lease));
            }
        }
        let generation = current.as_ref().map_or(1, |l| l.generation + 1);
        match self.create_generation(id, generation).await? {
            None => {
                self.hold(id, generation);
                self.drop_generations_below(id, generation).await;
                Ok(())
            }
            Some(winner) => Err(self.leased_error(id, &winner)),
        }
    }

    /// Extends this server's lease on `id` by one TTL.
    pub async fn renew(&self, id: &str) -> Result<Renewal> {
        let Some(held) = self.held(id) else {
            // Given back since the caller looked (the session was deleted).
            return Ok(Renewal::NotHeld);
        };
        match self.create_generation(id, held + 1).await? {
            None => {
                self.hold(id, held + 1);
                self.drop_generations_below(id, held + 1).await;
                Ok(Renewal::Renewed)
            }
            Some(winner) => {
                self.leases
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(id);
                Ok(Renewal::Lost {
                    holder: winner.holder,
                })
            }
        }
    }

    /// Gives back this server's lease on `id` (best effort: otherwise it
    /// runs out).
    pub async fn release(&self, id: &str) {
        let held = self
            .leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(generation) = held {
            let _ = self.store.delete(&keys::lease(id, generation)).await;
        }
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

    fn held(&self, id: &str) -> Option<u64> {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
    }

    fn hold(&self, id: &str, generation: u64) {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), generation);
    }

    /// Creates generation `generation` naming this server; `Some` with
    /// the lease that got there first when another writer did.
    async fn create_generation(&self, id: &str, generation: u64) -> Result<Option<Lease>> {
        let key = keys::lease(id, generation);
        let lease = Lease {
            generation,
            holder: self.replica.clone(),
            expires_at_ms: now_ms() + self.lease_ttl.as_millis() as u64,
        };
        let json = serde_json::to_vec(&lease)
            .map_err(|e| Error::internal(format!("cannot encode a lease: {e}")))?;
        let create = PutOptions::from(PutMode::Create);
        match self.store.put_opts(&key, json.into(), create).await {
            Ok(_) => Ok(None),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let winner = self.lease(id).await?.unwrap_or(Lease {
                    generation,
                    holder: "another replica".to_string(),
                    expires_at_ms: now_ms(),
                });
                Ok(Some(winner))
            }
            Err(e) => Err(self.failed("write", &key, e)),
        }
    }

    /// Removes the generations before `generation` (best effort: a
    /// leftover is harmless, the highest one rules).
    async fn drop_generations_below(&self, id: &str, generation: u64) {
        let Ok(all) = self.list(&keys::leases(id)).await else {
            return;
        };
        for meta in all {
            let older = meta
                .location
                .filename()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|g| g < generation);
            if older {
                let _ = self.store.delete(&meta.location).await;
            }
        }
    }
}
