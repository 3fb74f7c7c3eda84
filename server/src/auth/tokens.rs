//! Bearer tokens: 256 random bits, shown once, stored only as SHA-256.
//! Each names its session for routing (`wsfs_<session id>_<64 hex>`, see
//! [`wsfs::token`]); the lookup is by the hash of the whole string, so the
//! session a token names is always the one it was issued for.
//!
//! A token is looked up by the hash of what the client sent. Because the
//! token is a high-entropy secret, a hash-map lookup by its hash leaks
//! nothing useful through timing: learning a prefix of a hash does not help
//! guess a token. Tokens die with their session ([`TokenStore::forget_session`]).

use super::{sha256, Caller};
use std::collections::HashMap;
use std::sync::RwLock;
use wsfs::{Error, Result};

/// What a token grants: one caller in one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub session_id: String,
    pub caller: Caller,
}

/// The SHA-256 of a token.
pub fn hash(token: &str) -> [u8; 32] {
    sha256(token.as_bytes())
}

/// A fresh token of session `session_id`: `wsfs_`, the session's id, `_`
/// and 64 hex digits (256 bits from the OS).
pub fn new_token(session_id: &str) -> Result<String> {
    let mut secret = [0u8; wsfs::token::SECRET_BYTES];
    getrandom::fill(&mut secret)
        .map_err(|e| Error::internal(format!("no randomness for a token: {e}")))?;
    Ok(wsfs::token::session_token(session_id, &secret))
}

/// The most tokens one session may hold. Its token list, about 200 bytes
/// a token, then stays well under the size the bucket's copy is read back
/// with (`objstore::tokens`), and issuing a token (which rewrites the
/// list) stays cheap.
pub const MAX_TOKENS_PER_SESSION: usize = 4096;

/// Every live token, by hash.
#[derive(Default)]
pub struct TokenStore {
    by_hash: RwLock<HashMap<[u8; 32], TokenGrant>>,
}

impl TokenStore {
    /// A new token for `caller` in `session_id`. Earlier tokens stay
    /// valid; a session that holds [`MAX_TOKENS_PER_SESSION`] already is
    /// refused (`QUOTA_EXCEEDED`), and nothing changes.
    pub fn issue(&self, session_id: &str, caller: Caller) -> Result<String> {
        let token = new_token(session_id)?;
        let mut by_hash = self.by_hash.write().unwrap_or_else(|e| e.into_inner());
        let held = by_hash
            .values()
            .filter(|g| g.session_id == session_id)
            .count();
        if held >= MAX_TOKENS_PER_SESSION {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "session {session_id} holds {held} tokens, the most one session may hold; tokens live as long as their session, so give callers that need their own token a session of their own"
                ),
            });
        }
        let grant = TokenGrant {
            session_id: session_id.to_string(),
            caller,
        };
        by_hash.insert(hash(&token), grant);
        Ok(token)
    }

    /// Adds a token known by its hash (a session reopened after a restart).
    pub fn insert(&self, hash: [u8; 32], grant: TokenGrant) {
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hash, grant);
    }

    pub fn resolve(&self, token: &str) -> Option<TokenGrant> {
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash(token))
            .cloned()
    }

    /// The hashes and callers of a session's tokens, to persist them.
    pub fn of_session(&self, session_id: &str) -> Vec<([u8; 32], Caller)> {
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, g)| g.session_id == session_id)
            .map(|(h, g)| (*h, g.caller.clone()))
            .collect()
    }

    /// Revokes one token.
    pub fn revoke(&self, token: &str) {
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&hash(token));
    }

    /// Revokes every token of a session (it was deleted or expired).
    pub fn forget_session(&self, session_id: &str) {
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, g| g.session_id != session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

    #[test]
    fn a_session_holds_at_most_its_share_of_tokens_and_a_refusal_changes_nothing() {
        let store = TokenStore::default();
        let caller = || Caller::named("agent").unwrap();
        for _ in 0..MAX_TOKENS_PER_SESSION {
            store.issue(ID, caller()).unwrap();
        }
        let err = store.issue(ID, caller()).unwrap_err();
        assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
        assert!(err.to_string().contains("4096 tokens"), "{err}");
        assert_eq!(store.of_session(ID).len(), MAX_TOKENS_PER_SESSION);
        // Another session is not held back.
        let other = "00000000-0000-4000-8000-000000000001";
        assert!(store.issue(other, caller()).is_ok());
    }

    #[test]
    fn tokens_are_long_random_distinct_and_name_their_session() {
        let (a, b) = (new_token(ID).unwrap(), new_token(ID).unwrap());
        assert_eq!(a.len(), 5 + 36 + 1 + 64);
        assert_ne!(a, b);
        assert_eq!(wsfs::token::session_of(&a), Some(ID));
    }

    #[test]
    fn a_token_edited_to_name_another_session_is_unknown() {
        let store = TokenStore::default();
        let issued = store.issue(ID, Caller::System).unwrap();
        let other = "0f9e8d7c-6b5a-4c3d-8e1f-a0b1c2d3e4f5";
        let forged = issued.replace(ID, other);
        assert_eq!(wsfs::token::session_of(&forged), Some(other));
        assert!(store.resolve(&forged).is_none());
        assert_eq!(store.resolve(&issued).unwrap().session_id, ID);
    }

    #[test]
    fn tokens_of_the_older_shape_still_resolve() {
        let store = TokenStore::default();
        let old = format!("wsfs_{}", "5a".repeat(32));
        store.insert(
            hash(&old),
            TokenGrant {
                session_id: ID.to_string(),
                caller: Caller::System,
            },
        );
        assert_eq!(store.resolve(&old).unwrap().session_id, ID);
    }

    #[test]
    fn only_the_hash_is_kept() {
        let store = TokenStore::default();
        let t = store.issue("s", Caller::System).unwrap();
        let kept = store.of_session("s");
        assert_eq!(kept, vec![(hash(&t), Caller::System)]);
        assert!(store.resolve("wsfs_guess").is_none());
    }
}
