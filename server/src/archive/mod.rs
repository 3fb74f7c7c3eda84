//! ZIP archives of a workspace: [`export`] streams one out, [`import`]
//! checks one and replaces a workspace with it.
//!
//! The layout, the same whatever the backend:
//!
//! ```text
//! files/<path>        every regular file, byte for byte (symlinks are left out)
//! files/<path>/       every directory, so empty ones survive the round trip
//! manifest.json       {"version": "1", "created_at", "file_count", "total_bytes"}
//! ```
//!
//! `manifest.json` is the last entry: it is written once every file is in,
//! so its counts are exact even while a live workspace changes under the
//! export. An import requires it and checks its counts.

pub mod export;
pub mod import;

use serde::{Deserialize, Serialize};

/// The archive entry that describes the archive.
pub const MANIFEST_NAME: &str = "manifest.json";
/// Every workspace path lives under this prefix.
pub const FILES_PREFIX: &str = "files/";
/// The only manifest version there is.
pub const MANIFEST_VERSION: &str = "1";

/// What `manifest.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// Regular files under `files/` (directories not counted).
    pub file_count: u64,
    /// Their bytes, uncompressed.
    pub total_bytes: u64,
}
