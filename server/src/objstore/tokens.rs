//! The token hashes of a session, mirrored to the bucket
//! (`sessions/<id>/tokens.json`) so that a replica that takes the session
//! over accepts the tokens its clients already hold. Only the SHA-256 of a
//! token is ever stored; the file's shape is [`crate::auth`]'s.

use super::{keys, Bucket};
use object_store::ObjectStoreExt;
use wsfs::Result;

/// The largest token list read back (some 10,000 tokens).
const MAX_TOKENS_BYTES: u64 = 1024 * 1024;

impl Bucket {
    /// Replaces session `id`'s token list with `raw`; only while this
    /// replica's lease on it is good, so that a stale holder never
    /// overwrites what a newer one wrote.
    pub async fn put_tokens(&self, id: &str, raw: Vec<u8>) -> Result<()> {
        self.check_holding(id)?;
        let key = keys::tokens(id);
        self.store
            .put(&key, raw.into())
            .await
            .map(|_| ())
            .map_err(|e| self.failed("write", &key, e))
    }

    /// Session `id`'s token list as written, if it has one.
    pub async fn tokens(&self, id: &str) -> Result<Option<bytes::Bytes>> {
        self.get_small(&keys::tokens(id), MAX_TOKENS_BYTES).await
    }
}
