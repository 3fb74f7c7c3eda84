//! DeepFabric's session ids (free-form names such as `sample-001`) and the
//! wsfs sessions they name.
//!
//! A name's session id is derived from the name ([`session_id`]: a UUID of
//! its SHA-256), so that finding a session costs one lookup, survives a
//! restart (a DIRECTORY session is reopened under the same id), and any
//! client can compute it. The session also carries the name in its
//! [`SESSION_LABEL`] label, so `ListSessions` with that label finds it.
//! Two first uses of one name make one session: creation is serialized,
//! and the registry refuses a second session under the id.

use super::Face;
use crate::registry::{SessionSpec, MAX_LABEL_BYTES};
use crate::service::filesystem::{open, Opened};
use tonic::metadata::MetadataMap;
use wsfs::{Error, Result};

/// The label that holds a session's DeepFabric name.
pub const SESSION_LABEL: &str = "deepfabric.session_id";

/// What the name is hashed with, so that these ids stay apart from any
/// other derived UUIDs.
const ID_NAMESPACE: &[u8] = b"wsfs deepfabric session\0";

/// The wsfs session id of DeepFabric session `name`.
pub fn session_id(name: &str) -> String {
    let digest = crate::auth::sha256(&[ID_NAMESPACE, name.as_bytes()].concat());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Refuses a name the label could not hold: empty, or longer than a label.
pub(super) fn check(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_LABEL_BYTES {
        return Err(Error::invalid_argument(format!(
            "session_id must be 1 to {MAX_LABEL_BYTES} bytes long (got {})",
            name.len()
        )));
    }
    Ok(())
}

/// Refuses a session under `id` that was not made for `name` (a client
/// that created one under that id over gRPC): it is not this name's.
fn check_owner(session: &crate::registry::Session, name: &str) -> Result<()> {
    match session.record.labels.get(SESSION_LABEL) {
        Some(label) if label == name => Ok(()),
        _ => Err(Error::FailedPrecondition {
            message: format!(
                "session '{}' was not made for DeepFabric session '{}' (its {SESSION_LABEL} label differs)",
                session.record.id,
                wsfs::path::quote(name)
            ),
        }),
    }
}

/// Opens `name`'s session as the request's caller, creating it first when
/// it does not exist yet (which, like CreateSession, takes the admin).
pub(super) async fn open_or_create(
    face: &Face,
    metadata: &MetadataMap,
    name: &str,
    id: &str,
) -> Result<Opened> {
    match open(&face.registry, &face.auth, metadata, id).await {
        Ok(opened) => {
            check_owner(&opened.session, name)?;
            return Ok(opened);
        }
        Err(Error::SessionNotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    face.auth.require_admin(metadata)?;
    {
        let _one_creator = face.creating.lock().await;
        match face.registry.get(id).await {
            Ok(_) => {}
            Err(Error::SessionNotFound { .. }) => {
                let created = face.registry.create(spec(face, name, id)).await;
                match created {
                    Ok(_) => {
                        tracing::info!(session = %id, name = %wsfs::path::quote(name), "DeepFabric session created")
                    }
                    // Made over gRPC meanwhile: the owner check decides.
                    Err(Error::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    let opened = open(&face.registry, &face.auth, metadata, id).await?;
    check_owner(&opened.session, name)?;
    Ok(opened)
}

/// A new session for `name` as the flags ask.
fn spec(face: &Face, name: &str, id: &str) -> SessionSpec {
    let c = &face.config;
    SessionSpec {
        id: Some(id.to_string()),
        backend: Some(c.http_session_backend.into()),
        limits: wsfs::RequestedLimits {
            max_files: c.http_session_max_files,
            max_total_bytes: c.http_session_max_total_bytes,
            ..Default::default()
        },
        labels: [(SESSION_LABEL.to_string(), name.to_string())].into(),
        idle_ttl_seconds: c.http_session_idle_ttl.as_secs(),
        ..SessionSpec::default()
    }
}

/// Removes `name`'s session; how many files it held (0 when there was
/// none, as the tools-sdk component answers).
pub(super) async fn delete(face: &Face, name: &str, id: &str) -> Result<u64> {
    match face.registry.get(id).await {
        Ok(session) => check_owner(&session, name)?,
        Err(Error::SessionNotFound { .. }) => return Ok(0),
        Err(e) => return Err(e),
    }
    match face.registry.delete(id).await {
        Ok(files) => {
            face.auth.tokens().forget_session(id);
            Ok(files)
        }
        Err(Error::SessionNotFound { .. }) => Ok(0),
        Err(e) => Err(e),
    }
}
