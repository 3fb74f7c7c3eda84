//! Intent records: the description of a whole-workspace replacement
//! (Restore, ImportArchive, emptying the root) that a backend records
//! before the replacement's first change ([`super::Backend::replace_whole`]),
//! so that a crash part-way can be completed at the next start. What the
//! record means, and how the DIRECTORY backend replays it, is told in
//! [`crate::directory::journal`].

use super::{Backend, StagedFile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::SystemTime;
use wsfs::{CanonicalPath, Permissions, Result};

/// A whole-workspace replacement, recorded before its first change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// What is being applied ("restore <id>", "import"), for the log.
    pub operation: String,
    pub prune: Prune,
    /// Every directory of the target, parents before children.
    pub dirs: Vec<String>,
    /// Every file the replacement writes.
    pub files: Vec<IntentFile>,
    /// The permission bits of each directory and file of the target that
    /// has them (records written before bits were kept have none: the
    /// defaults).
    #[serde(default)]
    pub permissions: BTreeMap<String, u32>,
}

/// What may have to go for the workspace to become the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prune {
    /// Everything the target does not hold (an import empties the root).
    Everything,
    /// These paths (a restore's planned removals).
    Paths(Vec<String>),
}

/// One file a replacement writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentFile {
    pub path: String,
    /// Its staged copy's name in the staging directory.
    pub staged: Option<String>,
    pub size: u64,
    /// The content's SHA-256 (hex), when a staged name may come to hold an
    /// old file swapped out by the commit.
    pub sha256: Option<String>,
    /// The file's modification time, when the replacement sets one.
    #[serde(default)]
    pub modified: Option<SystemTime>,
}

impl IntentFile {
    pub fn new(path: &CanonicalPath, staged: &impl StagedFile, sha256: Option<&[u8]>) -> Self {
        IntentFile {
            path: path.as_str().to_string(),
            staged: staged.journal_name(),
            size: staged.len(),
            sha256: sha256.map(hex),
            modified: None,
        }
    }

    pub fn modified(self, modified: Option<SystemTime>) -> Self {
        IntentFile { modified, ..self }
    }
}

impl Intent {
    /// A replacement whose target is the empty workspace.
    pub fn emptying(operation: &str) -> Intent {
        Intent {
            operation: operation.to_string(),
            prune: Prune::Everything,
            dirs: Vec::new(),
            files: Vec::new(),
            permissions: BTreeMap::new(),
        }
    }

    /// The bits the record gives `path`, if any.
    pub(crate) fn bits(&self, path: &str) -> Option<Permissions> {
        self.permissions.get(path).map(|&b| Permissions::masked(b))
    }
}

pub(crate) use hex::encode as hex;

/// Runs `changes` (the replacement's steps, on `backend`) as the
/// replacement `intent` describes ([`Backend::replace_whole`]); the caller
/// holds the workspace's write lock.
pub fn apply<B: Backend, T>(
    backend: &B,
    intent: &Intent,
    changes: impl FnOnce() -> Result<T>,
) -> Result<T> {
    backend.replace_whole(intent, changes)
}
