//! Who is calling, and what they may do.
//!
//! - [`Caller`]: a session's system caller, or a named caller
//!   (`[a-z0-9_-]{1,64}`, never `system` or `external` in any case);
//! - [`tokens::TokenStore`]: bearer tokens, kept only as SHA-256 hashes,
//!   each naming one session and one caller;
//! - [`Auth`]: the server's policy, and the one place where a request's
//!   metadata becomes a caller. Tokens are on when the server has an admin
//!   token (`--admin-token`), off otherwise (then only on loopback, or with
//!   `--insecure`; see [`crate::config::ServerConfig::validate`]);
//! - [`zones`]: the SWARM layout's one permission function, which the
//!   zones layer ([`crate::layers::Guarded`]) applies in front of every
//!   backend.
//!
//! With tokens on, a Filesystem call opens exactly the session its token
//! belongs to: a token of session A naming session B is refused with
//! PERMISSION_DENIED before B is looked up, whether B exists or not, so it
//! learns nothing about B. The admin token is the system caller of every
//! session (it can create sessions and read their system tokens anyway).
//!
//! The token hashes of a session whose kind outlives a restart (DIRECTORY)
//! are kept in its directory, beside its `session.json`, in `tokens.json`,
//! so its tokens survive a restart and go with the session's directory
//! when it is deleted. With an object store, the lease holder also mirrors
//! that list to the bucket before a new token is handed out, and a replica
//! that takes the session over loads it: its clients' tokens keep working
//! there. Only hashes are ever stored, never a token.

pub mod tokens;
pub mod zones;

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;
use wsfs::{Error, Result};

pub use tokens::TokenStore;
pub use zones::Layout;

/// The metadata key naming the caller when tokens are off.
pub const CALLER_HEADER: &str = "x-wsfs-caller";

/// The caller of changes made to a DIRECTORY session's root from outside
/// the service.
pub const EXTERNAL_CALLER: &str = "external";

/// Names no client may take.
pub const RESERVED_CALLERS: [&str; 2] = ["system", EXTERNAL_CALLER];

/// Who a call speaks for, inside one session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The session's own system caller: writes everywhere.
    System,
    /// A named member of the swarm.
    Named(String),
}

impl Caller {
    /// A named caller; the name must be `[a-z0-9_-]{1,64}` and not one of
    /// [`RESERVED_CALLERS`] in any case: neither the system caller nor the
    /// outside world (events made from outside carry `external`) can be
    /// impersonated.
    pub fn named(name: &str) -> Result<Caller> {
        let valid_chars = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if name.is_empty() || name.len() > 64 || !valid_chars {
            return Err(Error::invalid_argument(format!(
                "caller name '{name}' is invalid: use 1 to 64 of a-z, 0-9, '_' and '-'"
            )));
        }
        if let Some(reserved) = RESERVED_CALLERS
            .iter()
            .find(|r| name.eq_ignore_ascii_case(r))
        {
            return Err(Error::invalid_argument(format!(
                "caller name '{reserved}' is reserved: 'system' is the session's system caller, 'external' marks changes made from outside the service"
            )));
        }
        Ok(Caller::Named(name.to_string()))
    }

    /// The name shown in errors and events (`system` for the system caller).
    pub fn name(&self) -> &str {
        match self {
            Caller::System => "system",
            Caller::Named(n) => n,
        }
    }

    pub fn is_system(&self) -> bool {
        matches!(self, Caller::System)
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The server's access policy and its tokens.
pub struct Auth {
    /// SHA-256 of the admin token; `None`: tokens are off.
    admin: Option<[u8; 32]>,
    tokens: TokenStore,
    /// Whether sessions that outlive a restart keep their token hashes
    /// in `tokens.json` ([`Auth::persisted_under`]).
    persisted: bool,
    /// Serializes rewrites of `tokens.json`.
    persisting: Mutex<()>,
}

/// The file, in a mirrored session's directory, that holds its token hashes.
const TOKENS_FILE: &str = "tokens.json";

/// A session as its tokens see it.
pub trait TokenHolder {
    fn session_id(&self) -> &str;
    /// The directory that keeps its token hashes across a restart, when
    /// its kind outlives one.
    fn tokens_dir(&self) -> Option<&Path>;
}

impl<T: TokenHolder + ?Sized> TokenHolder for std::sync::Arc<T> {
    fn session_id(&self) -> &str {
        (**self).session_id()
    }

    fn tokens_dir(&self) -> Option<&Path> {
        (**self).tokens_dir()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PersistedToken {
    /// Hex SHA-256 of the token.
    sha256: String,
    /// `system` or the caller's name.
    caller: String,
}

fn unauthenticated(message: &str) -> Error {
    Error::Unauthenticated {
        message: message.to_string(),
    }
}

impl Auth {
    /// Tokens on when `admin_token` is set.
    pub fn new(admin_token: Option<&str>) -> Auth {
        Auth {
            admin: admin_token.map(tokens::hash),
            tokens: TokenStore::default(),
            persisted: false,
            persisting: Mutex::new(()),
        }
    }

    /// Keeps the token hashes of the sessions that outlive a restart in
    /// their directories, and loads those of `sessions` (each id with its
    /// directory: those a restart reopened or is recovering).
    pub fn persisted_under(mut self, sessions: Vec<(String, PathBuf)>) -> Auth {
        for (id, dir) in sessions {
            self.load_session(&id, &dir);
        }
        self.persisted = true;
        self
    }

    /// Loads the token hashes kept in `dir` (a mirrored session's
    /// directory) as session `id`'s: at a start, and when a session is
    /// recovered from the object store with its token list.
    pub fn load_session(&self, id: &str, dir: &Path) {
        let file = tokens_file(dir);
        let Ok(raw) = std::fs::read(&file) else {
            return;
        };
        match saved_tokens(&raw) {
            Ok(saved) => {
                for (hash, caller) in saved {
                    let session_id = id.to_string();
                    self.tokens
                        .insert(hash, tokens::TokenGrant { session_id, caller });
                }
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "unreadable token file skipped")
            }
        }
    }

    /// The SHA-256 of the call's bearer token, when tokens are on and it
    /// is not the admin token: what a replica looks for in the token list
    /// of a session it does not serve yet.
    pub fn bearer_hash(&self, metadata: &MetadataMap) -> Option<[u8; 32]> {
        let token = bearer(metadata).ok()?;
        (self.tokens_on() && !self.is_admin(token)).then(|| tokens::hash(token))
    }

    /// The session the call's bearer token names by its shape
    /// ([`wsfs::token::session_of`]); `None` for the admin token, a token
    /// of the older shape, or none. Only a routing hint: the token is
    /// still looked up whole.
    pub fn bearer_session(&self, metadata: &MetadataMap) -> Option<String> {
        let token = bearer(metadata).ok()?;
        if !self.tokens_on() || self.is_admin(token) {
            return None;
        }
        wsfs::token::session_of(token).map(str::to_string)
    }

    /// A new token for `caller` in `session`; the token hashes of a
    /// session that outlives a restart are written down before the token
    /// is handed out.
    pub fn issue(&self, session: &impl TokenHolder, caller: Caller) -> Result<String> {
        let id = session.session_id();
        let token = self.tokens.issue(id, caller)?;
        if let (true, Some(dir)) = (self.persisted, session.tokens_dir()) {
            let _one_writer = self.persisting.lock().unwrap_or_else(|e| e.into_inner());
            let saved: Vec<PersistedToken> = self
                .tokens
                .of_session(id)
                .into_iter()
                .map(|(hash, caller)| PersistedToken {
                    sha256: hex::encode(hash),
                    caller: caller.name().to_string(),
                })
                .collect();
            let file = tokens_file(dir);
            let written = serde_json::to_vec_pretty(&saved)
                .map_err(std::io::Error::other)
                .and_then(|json| {
                    let tmp = file.with_extension("json.tmp");
                    std::fs::write(&tmp, json)?;
                    std::fs::rename(&tmp, &file)
                });
            if let Err(e) = written {
                self.tokens.revoke(&token);
                return Err(Error::internal(format!(
                    "cannot record the token in '{}': {e}",
                    file.display()
                )));
            }
        }
        Ok(token)
    }

    pub fn tokens_on(&self) -> bool {
        self.admin.is_some()
    }

    pub fn tokens(&self) -> &TokenStore {
        &self.tokens
    }

    fn is_admin(&self, token: &str) -> bool {
        self.admin
            .is_some_and(|admin| bool::from(admin.ct_eq(&tokens::hash(token))))
    }

    /// The caller of a Filesystem call on `session_id`.
    ///
    /// Tokens off: `x-wsfs-caller` names it (the system caller when absent).
    /// Tokens on: the bearer token decides; missing or unknown is
    /// UNAUTHENTICATED, a token of another session PERMISSION_DENIED.
    pub fn filesystem_caller(&self, metadata: &MetadataMap, session_id: &str) -> Result<Caller> {
        if !self.tokens_on() {
            return header_caller(metadata);
        }
        let token = bearer(metadata)?;
        if self.is_admin(token) {
            return Ok(Caller::System);
        }
        let grant = self.tokens.resolve(token).ok_or_else(|| {
            unauthenticated("the token is not valid: it is unknown, or its session is gone")
        })?;
        if grant.session_id != session_id {
            return Err(Error::PermissionDenied {
                path: String::new(),
                message: format!(
                    "this token does not open session '{session_id}': a token opens only its own session"
                ),
            });
        }
        Ok(grant.caller)
    }

    /// Guards the Sessions service: the admin token, when tokens are on.
    /// With tokens off the same rule holds: the Sessions service is the
    /// system caller's, so a call that names another caller with
    /// `x-wsfs-caller` is refused, as that caller's token would be.
    pub fn require_admin(&self, metadata: &MetadataMap) -> Result<()> {
        if !self.tokens_on() {
            return only_system_without_tokens(metadata);
        }
        if self.is_admin(bearer(metadata)?) {
            Ok(())
        } else {
            Err(unauthenticated(
                "this call needs the server's admin token (authorization: Bearer <admin token>)",
            ))
        }
    }

    /// Guards GetSession and says which session it answers: the admin token
    /// (or, tokens off, the system caller) for any named session; a
    /// session's own token for that session, which an empty `session_id`
    /// then names (how a client holding only a token learns its session).
    /// A token of another session is PERMISSION_DENIED, as on the
    /// Filesystem service; an empty `session_id` without a session's token
    /// is INVALID_ARGUMENT.
    pub fn session_to_get(&self, metadata: &MetadataMap, session_id: &str) -> Result<String> {
        let named = || {
            match session_id {
            "" => Err(Error::invalid_argument(
                "session_id is empty: name a session (only a session's own token names its session by itself)",
            )),
            id => Ok(id.to_string()),
        }
        };
        if !self.tokens_on() {
            only_system_without_tokens(metadata)?;
            return named();
        }
        let token = bearer(metadata)?;
        if self.is_admin(token) {
            return named();
        }
        let grant = self.tokens.resolve(token).ok_or_else(|| {
            unauthenticated("the token is not valid: it is unknown, or its session is gone")
        })?;
        if !session_id.is_empty() && grant.session_id != session_id {
            return Err(Error::PermissionDenied {
                path: String::new(),
                message: format!(
                    "this token does not open session '{session_id}': a token opens only its own session"
                ),
            });
        }
        Ok(grant.session_id)
    }

    /// Guards IssueToken: the admin token, or `session_id`'s system token.
    pub fn require_admin_or_system(&self, metadata: &MetadataMap, session_id: &str) -> Result<()> {
        if !self.tokens_on() {
            return only_system_without_tokens(metadata);
        }
        let token = bearer(metadata)?;
        if self.is_admin(token) {
            return Ok(());
        }
        match self.tokens.resolve(token) {
            Some(g) if g.session_id == session_id && g.caller.is_system() => Ok(()),
            _ => Err(unauthenticated(
                "issuing a token needs the admin token or the session's system token",
            )),
        }
    }
}

/// The caller `x-wsfs-caller` names (tokens off): the system caller when
/// absent.
fn header_caller(metadata: &MetadataMap) -> Result<Caller> {
    match metadata.get(CALLER_HEADER) {
        None => Ok(Caller::System),
        Some(v) => Caller::named(
            v.to_str()
                .map_err(|_| Error::invalid_argument(format!("{CALLER_HEADER} must be ASCII")))?,
        ),
    }
}

/// Tokens off: only the system caller (no `x-wsfs-caller`) manages sessions.
fn only_system_without_tokens(metadata: &MetadataMap) -> Result<()> {
    match header_caller(metadata)? {
        Caller::System => Ok(()),
        Caller::Named(name) => Err(Error::PermissionDenied {
            path: String::new(),
            message: format!(
                "caller '{name}' may not use the Sessions service: it is the system caller's (send no {CALLER_HEADER})"
            ),
        }),
    }
}

/// The token of `authorization: Bearer <token>`.
fn bearer(metadata: &MetadataMap) -> Result<&str> {
    let missing =
        || unauthenticated("this server requires a token: send 'authorization: Bearer <token>'");
    let value = metadata.get("authorization").ok_or_else(missing)?;
    let value = value.to_str().map_err(|_| missing())?.trim();
    let (scheme, token) = value.split_once(' ').ok_or_else(missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(missing());
    }
    Ok(token.trim())
}

/// The token hashes and callers a token list (`tokens.json`, here or in
/// the object store) holds; entries it cannot read are skipped.
fn saved_tokens(raw: &[u8]) -> serde_json::Result<Vec<([u8; 32], Caller)>> {
    let saved: Vec<PersistedToken> = serde_json::from_slice(raw)?;
    Ok(saved
        .into_iter()
        .filter_map(|t| {
            let caller = match t.caller.as_str() {
                "system" => Caller::System,
                name => Caller::named(name).ok()?,
            };
            Some((from_hex(&t.sha256)?, caller))
        })
        .collect())
}

/// Whether the token list `raw` (a `tokens.json`) holds the token whose
/// SHA-256 is `hash`.
pub fn list_holds(raw: &[u8], hash: &[u8; 32]) -> bool {
    saved_tokens(raw).is_ok_and(|saved| saved.iter().any(|(h, _)| h == hash))
}

/// The name of the file holding a mirrored session's token hashes.
pub fn tokens_file(dir: &Path) -> PathBuf {
    dir.join(TOKENS_FILE)
}

fn from_hex(text: &str) -> Option<[u8; 32]> {
    hex::FromHex::from_hex(text).ok()
}

/// SHA-256, the one hash of secrets.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn caller_names_follow_the_contract() {
        assert!(Caller::named("agent-1_b").is_ok());
        for bad in [
            "",
            "Agent",
            "a b",
            "a/b",
            &"x".repeat(65),
            "system",
            "SYSTEM",
            "System",
            "external",
            "EXTERNAL",
        ] {
            let err = Caller::named(bad).unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
        }
    }

    fn with_bearer(token: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", format!("Bearer {token}").parse().unwrap());
        m
    }

    #[test]
    fn tokens_off_takes_the_caller_header() {
        let auth = Auth::new(None);
        assert_eq!(
            auth.filesystem_caller(&MetadataMap::new(), "s").unwrap(),
            Caller::System
        );
        let mut m = MetadataMap::new();
        m.insert(CALLER_HEADER, "alice".parse().unwrap());
        assert_eq!(
            auth.filesystem_caller(&m, "s").unwrap(),
            Caller::Named("alice".into())
        );
    }

    #[test]
    fn token_opens_only_its_session() {
        let auth = Auth::new(Some("admin-secret-123456"));
        let t = auth
            .tokens()
            .issue("a", Caller::Named("bob".into()))
            .unwrap();
        assert_eq!(
            auth.filesystem_caller(&with_bearer(&t), "a").unwrap(),
            Caller::Named("bob".into())
        );
        let err = auth.filesystem_caller(&with_bearer(&t), "b").unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied);
        let err = auth
            .filesystem_caller(&MetadataMap::new(), "a")
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
        auth.tokens().forget_session("a");
        let err = auth.filesystem_caller(&with_bearer(&t), "a").unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }
}
