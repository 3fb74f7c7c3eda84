//! The values the [`Filesystem`](super::Filesystem) trait takes and
//! answers: metadata, ranges, options with the contract's defaults, and the
//! outcomes of each call. A new call's own types go here.

use crate::{CanonicalPath, Permissions, Result};
use bytes::Bytes;
use futures::stream::BoxStream;
use std::time::SystemTime;

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Directory,
    /// Never followed: created by Symlink or found in a directory-backed
    /// workspace, read as a link (its target), never through.
    Symlink,
}

/// What Stat returns, and one entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub path: CanonicalPath,
    pub kind: FileKind,
    pub size: u64,
    pub created: SystemTime,
    pub modified: SystemTime,
    /// Grows with every change to this path in the session.
    pub version: u64,
    /// Symlinks report what the link itself holds (usually `rwxrwxrwx`).
    pub permissions: Permissions,
    /// A symlink's target as stored (never resolved); `None` for files and
    /// directories.
    pub symlink_target: Option<String>,
}

impl Metadata {
    /// The entry's name: the last path segment (empty for the root).
    pub fn name(&self) -> &str {
        self.path.name().unwrap_or("")
    }
}

/// Which lines a text Read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    /// 0-based first line.
    pub offset: u64,
    /// Lines to return; `None` is the whole file.
    pub limit: Option<u64>,
}

impl LineRange {
    pub const DEFAULT_LIMIT: u64 = 2000;

    pub fn all() -> Self {
        LineRange {
            offset: 0,
            limit: None,
        }
    }
}

impl Default for LineRange {
    fn default() -> Self {
        LineRange {
            offset: 0,
            limit: Some(Self::DEFAULT_LIMIT),
        }
    }
}

/// One page of a text Read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPage {
    pub path: CanonicalPath,
    /// The exact bytes of the selected lines; pages concatenate to the file.
    pub content: String,
    pub total_lines: u64,
    /// First line returned, clamped to `total_lines`.
    pub offset: u64,
    /// Lines returned.
    pub lines: u64,
    /// Lines remain after this page.
    pub truncated: bool,
    pub version: u64,
    pub size: u64,
}

/// Which bytes a ReadBytes returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteRange {
    pub offset: u64,
    /// `None` reads to the end.
    pub limit: Option<u64>,
}

/// An open byte stream of one consistent version of a file.
pub struct ByteStream {
    pub path: CanonicalPath,
    /// Size of the whole file.
    pub size: u64,
    pub version: u64,
    /// First byte carried and how many follow.
    pub offset: u64,
    pub length: u64,
    pub chunks: BoxStream<'static, Result<Bytes>>,
}

impl std::fmt::Debug for ByteStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteStream")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("version", &self.version)
            .field("offset", &self.offset)
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

/// Default and bounds of ReadBytes chunks; also the chunk size every
/// stream the project sends by default (uploads, archives).
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;
pub const MAX_CHUNK_SIZE: usize = 1024 * 1024;

/// The per-write limit of a session that asks for none.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 32 * 1024 * 1024;

/// The largest gRPC message either side sends or accepts: a 32 MiB Write
/// or Read page with its framing, and headroom for sessions configured a
/// little higher. Server and clients use this one value, so what one side
/// may send the other accepts.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024 + 64 * 1024;

/// The largest HTTP/2 frame each side asks its peer to send (server and
/// clients advertise the same). At HTTP/2's default of 16 KiB a 64 KiB
/// chunk is cut into five frames, each parsed, woken for and copied on
/// its own: ReadBytes ran at a third to a half of a raw TCP copy. Data
/// frames stay within the flow-control windows, so this adds no memory per
/// stream; a connection's reader may hold one frame of this size.
pub const HTTP2_MAX_FRAME_BYTES: u32 = 1024 * 1024;

/// The most entries one DeleteMany carries: each costs what a Delete
/// costs, run one after another.
pub const MAX_DELETE_ENTRIES: usize = 1024;

/// The most sessions one ListSessions answer counts the files and bytes
/// of (`include_usage`): each costs a walk of its workspace.
pub const MAX_USAGE_PAGE: u32 = 100;

/// The most sessions one ListSessions answer holds when the server lists
/// the other replicas' sessions from its object store (each costs reads
/// of its record and lease there); `next_page_token` continues.
pub const MAX_SESSION_PAGE: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    #[default]
    Overwrite,
    Create,
    Append,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    pub mode: WriteMode,
    pub create_parents: bool,
    /// `Some(0)`: the path must not exist yet.
    pub if_version: Option<u64>,
    /// `None`: a new file gets [`Permissions::FILE_DEFAULT`], an existing
    /// one keeps its bits (overwrite and append alike).
    pub permissions: Option<Permissions>,
    /// The file's modification time once written; `None`: the time of the
    /// write.
    pub modified: Option<SystemTime>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            mode: WriteMode::Overwrite,
            create_parents: true,
            if_version: None,
            permissions: None,
            modified: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    pub path: CanonicalPath,
    pub bytes_written: u64,
    pub size: u64,
    pub version: u64,
    /// The path did not exist before.
    pub created: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EditSpec {
    pub old_text: String,
    pub new_text: String,
    pub replace_all: bool,
    pub if_version: Option<u64>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    pub path: CanonicalPath,
    pub replacements: u64,
    pub version: u64,
    pub diff: String,
    pub dry_run: bool,
    pub size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeleteOptions {
    pub recursive: bool,
    pub allow_missing: bool,
    pub if_version: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MkdirOptions {
    pub parents: bool,
    pub exist_ok: bool,
    /// Bits of the new directory; `None`: [`Permissions::DIRECTORY_DEFAULT`].
    /// Parents made on the way get the default; an existing directory
    /// keeps its bits.
    pub permissions: Option<Permissions>,
}

impl Default for MkdirOptions {
    fn default() -> Self {
        MkdirOptions {
            parents: true,
            exist_ok: true,
            permissions: None,
        }
    }
}

/// What SetAttributes changes: at least one of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attributes {
    pub permissions: Option<Permissions>,
    pub modified: Option<SystemTime>,
    /// The path's expected current version.
    pub if_version: Option<u64>,
}

/// What SetAttributes leaves: the path's bits, time and version after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributesOutcome {
    pub permissions: Permissions,
    pub modified: SystemTime,
    pub version: u64,
}

impl From<&Metadata> for AttributesOutcome {
    fn from(m: &Metadata) -> Self {
        AttributesOutcome {
            permissions: m.permissions,
            modified: m.modified,
            version: m.version,
        }
    }
}

impl Attributes {
    /// Refuses a change that names nothing to change.
    pub fn check(&self) -> Result<()> {
        if self.permissions.is_none() && self.modified.is_none() {
            return Err(crate::Error::invalid_argument(
                "SetAttributes needs permissions, modified_at or both; nothing to change",
            ));
        }
        Ok(())
    }
}

/// How a patch changes a file ([`Filesystem::patch_bytes`]): first its
/// length, then the bytes of each [`PatchChunk`] in order, all in one
/// commit with one new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchOptions {
    /// The length the file is cut or extended (with zeros) to before any
    /// bytes are written; `None` keeps it.
    pub truncate_to: Option<u64>,
    /// A missing file is created empty first, instead of `FILE_NOT_FOUND`.
    pub create_missing: bool,
    /// With `create_missing`: make missing parent directories.
    pub create_parents: bool,
    /// `Some(0)`: the path must not exist yet (with `create_missing`).
    pub if_version: Option<u64>,
    /// As in [`WriteOptions::permissions`].
    pub permissions: Option<Permissions>,
    /// As in [`WriteOptions::modified`].
    pub modified: Option<SystemTime>,
}

impl Default for PatchOptions {
    fn default() -> Self {
        PatchOptions {
            truncate_to: None,
            create_missing: false,
            create_parents: true,
            if_version: None,
            permissions: None,
            modified: None,
        }
    }
}

/// Bytes a patch writes at `offset`. Bytes not written are kept; writing
/// past the end extends the file, a gap reading as zeros. A later chunk
/// overwrites an earlier one where they overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchChunk {
    pub offset: u64,
    pub data: Bytes,
}

/// The chunks of a patch, in the order they apply.
pub type PatchChunks = BoxStream<'static, Result<PatchChunk>>;

/// The longest symlink target, in bytes: Linux's `PATH_MAX` less the NUL,
/// what a DIRECTORY session's filesystem holds.
pub const MAX_SYMLINK_TARGET_BYTES: usize = 4095;

/// Options of Symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymlinkOptions {
    pub create_parents: bool,
}

impl Default for SymlinkOptions {
    fn default() -> Self {
        SymlinkOptions {
            create_parents: true,
        }
    }
}

/// Refuses a symlink target no backend stores: empty, over
/// [`MAX_SYMLINK_TARGET_BYTES`], or holding a NUL. Nothing else is
/// checked: the target is data, never resolved by the server.
pub fn check_symlink_target(path: &CanonicalPath, target: &str) -> Result<()> {
    let refuse = |why: String| {
        Err(crate::Error::invalid_argument(format!(
            "cannot make the symbolic link '{path}': its target {why}"
        )))
    };
    if target.is_empty() {
        return refuse("is empty".to_string());
    }
    if target.len() > MAX_SYMLINK_TARGET_BYTES {
        return refuse(format!(
            "is {} bytes long; at most {MAX_SYMLINK_TARGET_BYTES} are allowed",
            target.len()
        ));
    }
    if target.contains('\0') {
        return refuse("contains a NUL byte".to_string());
    }
    Ok(())
}

/// Options of Move and Copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferOptions {
    pub overwrite: bool,
    pub create_parents: bool,
    /// Move only: the source's expected version.
    pub if_version: Option<u64>,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            overwrite: false,
            create_parents: true,
            if_version: None,
        }
    }
}

/// What a Move or Copy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    /// Files and directories moved or copied.
    pub entries: u64,
    /// The version the destination got, taken where the change was made
    /// (entries beneath a directory get versions of their own). `None`
    /// from a server that does not say.
    pub version: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub path: CanonicalPath,
    /// Sorted by path, bytewise.
    pub entries: Vec<Metadata>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobQuery {
    pub pattern: String,
    pub base: CanonicalPath,
    pub max_results: u64,
}

impl GlobQuery {
    pub const DEFAULT_MAX_RESULTS: u64 = 1000;

    pub fn new(pattern: impl Into<String>) -> Self {
        GlobQuery {
            pattern: pattern.into(),
            base: CanonicalPath::root(),
            max_results: Self::DEFAULT_MAX_RESULTS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobOutcome {
    /// Sorted, bytewise.
    pub paths: Vec<CanonicalPath>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepQuery {
    pub pattern: String,
    pub base: CanonicalPath,
    /// Only files whose path relative to `base` matches.
    pub glob: Option<String>,
    pub case_insensitive: bool,
    pub fixed_string: bool,
    pub max_matches: u64,
    pub context_lines: u32,
}

impl GrepQuery {
    pub const DEFAULT_MAX_MATCHES: u64 = 1000;

    pub fn new(pattern: impl Into<String>) -> Self {
        GrepQuery {
            pattern: pattern.into(),
            base: CanonicalPath::root(),
            glob: None,
            case_insensitive: false,
            fixed_string: false,
            max_matches: Self::DEFAULT_MAX_MATCHES,
            context_lines: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLine {
    pub line_number: u64,
    pub line: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepMatch {
    pub path: CanonicalPath,
    /// 1-based.
    pub line_number: u64,
    /// The line without its terminator.
    pub line: String,
    /// Byte offsets of the first match within `line`.
    pub match_start: u32,
    pub match_end: u32,
    pub before: Vec<ContextLine>,
    pub after: Vec<ContextLine>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrepSummary {
    pub files_searched: u64,
    pub matches: u64,
    pub truncated: bool,
}

/// One message of a Grep stream: matches, then exactly one summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrepEvent {
    Match(GrepMatch),
    Summary(GrepSummary),
}

/// A stream of data chunks for an upload.
pub type ByteChunks = BoxStream<'static, Result<Bytes>>;
