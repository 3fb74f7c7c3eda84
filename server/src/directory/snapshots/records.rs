//! What the store keeps for each snapshot: its info file, and its
//! entries flattened out of its manifests (or, for snapshots written by
//! earlier versions, listed in its entries file).

use super::*;

/// A snapshot's info file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct InfoFile {
    pub(super) id: String,
    pub(super) tag: String,
    pub(super) created_at: SystemTime,
    pub(super) file_count: u64,
    pub(super) total_bytes: u64,
    /// The root directory's manifest, in hex; absent in snapshots written
    /// by earlier versions, which list their entries in a separate file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) root: Option<String>,
}

impl InfoFile {
    pub(super) fn info(self) -> SnapshotInfo {
        SnapshotInfo {
            id: self.id,
            tag: self.tag,
            created_at: self.created_at,
            file_count: self.file_count,
            total_bytes: self.total_bytes,
        }
    }
}

/// One entry of a snapshot written by an earlier version: a directory when
/// `hash` is absent.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct LegacyEntry {
    pub(super) path: String,
    #[serde(default)]
    pub(super) hash: Option<String>,
    #[serde(default)]
    pub(super) size: u64,
}

/// One entry of a snapshot, flattened out of its manifests.
pub(super) struct FlatEntry {
    pub(super) path: CanonicalPath,
    /// `None` for a directory.
    pub(super) file: Option<FlatFile>,
    pub(super) permissions: Permissions,
}

pub(super) struct FlatFile {
    pub(super) size: u64,
    pub(super) hash: Hash,
    /// Unknown in snapshots written by earlier versions.
    pub(super) identity: Option<FileIdentity>,
}

impl FlatFile {
    /// The file's modification time when it was taken; `None` when the
    /// snapshot does not know it (the time of the restore then).
    pub(super) fn modified_at(&self) -> Option<SystemTime> {
        self.identity.map(|i| i.modified())
    }

    /// [`Self::modified_at`], the epoch ("unknown") when not known.
    pub(super) fn modified(&self) -> SystemTime {
        self.modified_at().unwrap_or(std::time::UNIX_EPOCH)
    }
}

impl FlatEntry {
    pub(super) fn open(self, objects: &ContentStore) -> Result<SnapshotEntry> {
        Ok(match self.file {
            None => SnapshotEntry::Directory {
                path: self.path,
                permissions: self.permissions,
            },
            Some(file) => SnapshotEntry::File {
                path: self.path,
                size: file.size,
                permissions: self.permissions,
                modified: file.modified(),
                content: Content::Disk(objects.open(&file.hash)?),
            },
        })
    }
}
