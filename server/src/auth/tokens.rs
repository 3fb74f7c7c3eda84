//! Bearer tokens: 256 random bits, shown once, stored only as SHA-256.
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

/// A fresh token: `wsfs_` and 64 hex digits (256 bits from the OS).
pub fn new_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::internal(format!("no randomness for a token: {e}")))?;
    Ok(format!("wsfs_{}", hex::encode(bytes)))
}

/// Every live token, by hash.
#[derive(Default)]
pub struct TokenStore {
    by_hash: RwLock<HashMap<[u8; 32], TokenGrant>>,
}

impl TokenStore {
    /// A new token for `caller` in `session_id`. Earlier tokens stay valid.
    pub fn issue(&self, session_id: &str, caller: Caller) -> Result<String> {
        let token = new_token()?;
        self.insert(
            hash(&token),
            TokenGrant {
                session_id: session_id.to_string(),
                caller,
            },
        );
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

    #[test]
    fn tokens_are_long_random_and_distinct() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 69);
        assert_ne!(a, b);
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
