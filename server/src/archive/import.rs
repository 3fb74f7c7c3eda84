//! ImportArchive: check a whole archive, then replace a workspace with it.
//!
//! The service spools the incoming stream to a temporary file in the data
//! directory (memory stays near one message). [`check`] then reads the
//! whole archive before anything changes and refuses, naming the entry:
//!
//! | what | code / reason |
//! | --- | --- |
//! | not a ZIP, cut short, corrupt data (bad CRC), encrypted entries, unknown compression | INVALID_ARGUMENT `INVALID_ARGUMENT` |
//! | an entry outside `files/` other than `manifest.json`; manifest missing, unreadable or wrong | INVALID_ARGUMENT `INVALID_ARGUMENT` |
//! | a symlink entry (unix mode `S_IFLNK`) | INVALID_ARGUMENT `INVALID_ARGUMENT` |
//! | an absolute entry name, one over the session's path limits (depth, characters, 255 bytes a segment), or a reserved name (`.wsfs-tmp-*`, [`crate::backend::check_name`]) | INVALID_ARGUMENT `INVALID_PATH` |
//! | a `..` segment anywhere | INVALID_ARGUMENT `PATH_ESCAPES_ROOT` |
//! | two entries naming one path (after canonicalisation), or a file where another entry needs a directory | INVALID_ARGUMENT `INVALID_ARGUMENT` |
//! | an entry whose real size differs from the size it declares | INVALID_ARGUMENT `INVALID_ARGUMENT` |
//! | a file over the session's per-write limit | INVALID_ARGUMENT `TOO_LARGE` |
//! | more files or bytes than the session's `max_files` / `max_total_bytes` (or, for a session without a byte limit, the server's `--default-max-total-bytes`) | RESOURCE_EXHAUSTED `QUOTA_EXCEEDED` |
//!
//! Decompression is capped at each entry's declared size, and the declared
//! sizes, summed, are checked against the byte budget before any byte is
//! inflated, so a bomb (one entry or many) costs at most the budget; an
//! entry that inflates past its declared size (a lying central directory)
//! is refused at the first byte over. There is no compression-ratio rule:
//! ordinary source trees hold files that compress 150:1, and the budget
//! already bounds what any ratio could cost. [`apply`] then runs
//! under the workspace's write lock: it inflates every file into the
//! backend's staging area (proving each entry's size and CRC: corrupt data
//! is refused there, still with the workspace unchanged), then empties the
//! workspace and commits every directory and file (each file gets a new
//! version).

use super::{Manifest, FILES_PREFIX, MANIFEST_NAME, MANIFEST_VERSION};
use crate::backend::{check_name, Backend, CommitMode, StagedFile};
use crate::limits::SessionLimits;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Permissions, Result};

/// Largest `manifest.json` read.
const MAX_MANIFEST_BYTES: u64 = 64 * 1024;
/// Bytes per read when inflating.
const COPY_BUFFER_BYTES: usize = 64 * 1024;

/// Where uploads are spooled, under the data directory.
pub fn spool_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("imports")
}

/// Removes spooled uploads that a stopped server left behind.
pub fn clear_spool(data_dir: &Path) {
    let dir = spool_dir(data_dir);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot clear abandoned imports");
        }
    }
}

/// What a checked archive holds: apply it with [`apply`].
#[derive(Debug, Clone, Default)]
pub struct ImportPlan {
    /// Directories, parents before children.
    pub dirs: Vec<CanonicalPath>,
    /// Files: (entry index in the archive, path, size).
    pub files: Vec<(usize, CanonicalPath, u64)>,
    /// Each entry's bits and time, as the archive gives them.
    pub attributes: BTreeMap<CanonicalPath, EntryAttributes>,
    pub file_count: u64,
    pub total_bytes: u64,
}

/// The bits an entry gets (the archive's, masked to `0o777`, or the
/// defaults when it has none) and its time (the archive's, when it has one
/// a file can hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryAttributes {
    pub permissions: Permissions,
    pub modified: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Directory,
}

fn refused(message: String) -> Error {
    Error::InvalidArgument { message }
}

fn open(path: &Path) -> Result<zip::ZipArchive<std::fs::File>> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::internal(format!("cannot reopen the spooled archive: {e}")))?;
    zip::ZipArchive::new(file)
        .map_err(|e| refused(format!("the upload is not a readable ZIP archive: {e}")))
}

/// Reads the archive's directory and manifest at `path` and checks them
/// against `limits`; changes nothing. Each entry's data is proven as
/// [`apply`] stages it. Blocking.
pub fn check(path: &Path, limits: &SessionLimits) -> Result<ImportPlan> {
    let mut archive = open(path)?;
    let mut entries: BTreeMap<CanonicalPath, (Kind, usize, u64, EntryAttributes)> = BTreeMap::new();
    let mut manifest_index = None;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| refused(format!("archive entry {index} cannot be read: {e}")))?;
        let name = std::str::from_utf8(entry.name_raw())
            .map_err(|_| {
                refused(format!(
                    "archive entry {index} has a name that is not UTF-8"
                ))
            })?
            .to_string();
        if entry.encrypted() {
            return Err(refused(format!(
                "archive entry '{name}' is encrypted; encrypted archives are not accepted"
            )));
        }
        let mode = entry.unix_mode().unwrap_or(0);
        if entry.is_symlink() || mode & 0o170000 == 0o120000 {
            return Err(refused(format!(
                "archive entry '{name}' is a symbolic link; archives may hold only files and directories"
            )));
        }
        if name.starts_with('/') || name.starts_with('\\') {
            return Err(Error::InvalidPath {
                message: format!("archive entry '{name}' is an absolute path"),
                path: name,
            });
        }
        if name.split(['/', '\\']).any(|s| s == "..") {
            return Err(Error::PathEscapesRoot { path: name });
        }
        if name == MANIFEST_NAME {
            if manifest_index.replace(index).is_some() {
                return Err(refused(format!(
                    "the archive holds '{MANIFEST_NAME}' twice"
                )));
            }
            continue;
        }
        let Some(rest) = name.strip_prefix(FILES_PREFIX) else {
            return Err(refused(format!(
                "archive entry '{name}' is outside '{FILES_PREFIX}'; an archive holds '{MANIFEST_NAME}' and files under '{FILES_PREFIX}' only"
            )));
        };
        let path = CanonicalPath::parse(rest, &limits.path).map_err(|e| match e {
            Error::InvalidPath { message, .. } => Error::InvalidPath {
                message: format!("archive entry '{name}': {message}"),
                path: name.clone(),
            },
            other => other,
        })?;
        // What the backend would refuse once the workspace is emptied is
        // refused now, while it is whole.
        check_name(&path).map_err(|e| match e {
            Error::InvalidPath { message, .. } => Error::InvalidPath {
                message: format!("archive entry '{name}': {message}"),
                path: name.clone(),
            },
            other => other,
        })?;
        let kind = if entry.is_dir() {
            Kind::Directory
        } else {
            Kind::File
        };
        if path.is_root() {
            if kind == Kind::Directory {
                continue;
            }
            return Err(refused(format!("archive entry '{name}' names no file")));
        }
        let size = if kind == Kind::File { entry.size() } else { 0 };
        let attributes = EntryAttributes {
            permissions: match (entry.unix_mode(), kind) {
                (Some(mode), _) => Permissions::masked(mode),
                (None, Kind::Directory) => Permissions::DIRECTORY_DEFAULT,
                (None, Kind::File) => Permissions::FILE_DEFAULT,
            },
            modified: entry.last_modified().and_then(zip_time_to_system),
        };
        if size > limits.max_write_bytes {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size,
                limit: limits.max_write_bytes,
            });
        }
        if entries
            .insert(path.clone(), (kind, index, size, attributes))
            .is_some()
        {
            return Err(refused(format!(
                "archive entry '{name}' names '{path}', which another entry names too"
            )));
        }
    }
    let mut plan = ImportPlan::default();
    for (path, (kind, index, size, attributes)) in &entries {
        plan.attributes.insert(path.clone(), *attributes);
        let mut parent = path.parent();
        while let Some(p) = parent.filter(|p| !p.is_root()) {
            if let Some((Kind::File, ..)) = entries.get(&p) {
                return Err(refused(format!(
                    "archive entry for '{path}' needs '{p}' to be a directory, but the archive holds it as a file"
                )));
            }
            parent = p.parent();
        }
        match kind {
            Kind::Directory => plan.dirs.push(path.clone()),
            Kind::File => {
                plan.files.push((*index, path.clone(), *size));
                plan.file_count += 1;
                plan.total_bytes += size;
            }
        }
    }
    let holds = crate::quota::Usage {
        files: plan.file_count,
        bytes: plan.total_bytes,
    };
    crate::quota::check_usage(limits, holds, "the archive holds")?;

    let Some(manifest_index) = manifest_index else {
        return Err(refused(format!(
            "the archive has no '{MANIFEST_NAME}'; export one with ExportArchive to see the layout"
        )));
    };
    let manifest = read_manifest(&mut archive, manifest_index)?;
    if manifest.version != MANIFEST_VERSION {
        return Err(refused(format!(
            "'{MANIFEST_NAME}' has version '{}'; this server reads version '{MANIFEST_VERSION}'",
            manifest.version
        )));
    }
    if (manifest.file_count, manifest.total_bytes) != (plan.file_count, plan.total_bytes) {
        return Err(refused(format!(
            "'{MANIFEST_NAME}' counts {} files and {} bytes, but the archive holds {} files and {} bytes",
            manifest.file_count, manifest.total_bytes, plan.file_count, plan.total_bytes
        )));
    }
    // Each file's data (its real size and CRC) is proven as `apply` stages
    // it, before the workspace changes.
    Ok(plan)
}

fn read_manifest(archive: &mut zip::ZipArchive<std::fs::File>, index: usize) -> Result<Manifest> {
    let bad = |why: String| refused(format!("'{MANIFEST_NAME}' is not valid: {why}"));
    let mut raw = Vec::new();
    archive
        .by_index(index)
        .map_err(|e| bad(e.to_string()))?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| bad(e.to_string()))?;
    if raw.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(bad(format!("it is larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    serde_json::from_slice(&raw).map_err(|e| bad(e.to_string()))
}

/// Inflates entry `index` into `out`, refusing data that is corrupt or
/// whose size is not `declared`; never inflates more than `declared + 1`
/// bytes. Returns the bytes copied.
fn copy_entry(
    archive: &mut zip::ZipArchive<std::fs::File>,
    index: usize,
    path: &CanonicalPath,
    declared: u64,
    out: &mut dyn EntrySink,
) -> Result<u64> {
    let corrupt =
        |e: &dyn std::fmt::Display| refused(format!("archive entry for '{path}' is corrupt: {e}"));
    let entry = archive.by_index(index).map_err(|e| corrupt(&e))?;
    let mut reader = entry.take(declared + 1);
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    let mut copied = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(&e)),
        };
        copied += n as u64;
        if copied > declared {
            break;
        }
        out.put(&buf[..n])?;
    }
    if copied != declared {
        return Err(refused(format!(
            "archive entry for '{path}' declares {declared} bytes but holds {}{copied}",
            if copied > declared { "more than " } else { "" }
        )));
    }
    Ok(copied)
}

/// Where [`copy_entry`] puts the bytes.
trait EntrySink {
    fn put(&mut self, data: &[u8]) -> Result<()>;
}

struct Staging<'a, S: StagedFile>(&'a mut S);

impl<S: StagedFile> EntrySink for Staging<'_, S> {
    fn put(&mut self, data: &[u8]) -> Result<()> {
        self.0.write_chunk(data)
    }
}

/// Most threads that inflate an archive at once.
const MAX_STAGING_THREADS: usize = 4;

/// Inflates every file of the checked archive at `path` into a staged file
/// of `backend`, proving each entry's size and CRC; the workspace is not
/// touched. The files are shared among a few threads, each reading the
/// archive through its own handle. On error every staged file is dropped
/// (and so removed).
fn stage_all<B: Backend>(backend: &B, path: &Path, plan: &ImportPlan) -> Result<Vec<B::Staged>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_STAGING_THREADS)
        .min(plan.files.len().max(1));
    // Contiguous runs of about equal bytes, so each thread reads its part
    // of the archive in order.
    let share = plan.total_bytes / threads as u64 + 1;
    let mut runs: Vec<&[(usize, CanonicalPath, u64)]> = Vec::with_capacity(threads);
    let (mut start, mut bytes) = (0, 0u64);
    for (i, (_, _, size)) in plan.files.iter().enumerate() {
        bytes += size;
        if bytes >= share && runs.len() + 1 < threads {
            runs.push(&plan.files[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    runs.push(&plan.files[start..]);
    let stage_run = |run: &[(usize, CanonicalPath, u64)]| -> Result<Vec<B::Staged>> {
        let mut archive = open(path)?;
        let mut staged = Vec::with_capacity(run.len());
        for (index, path, size) in run {
            let mut file = backend.stage()?;
            copy_entry(&mut archive, *index, path, *size, &mut Staging(&mut file))?;
            file.finish()?;
            staged.push(file);
        }
        Ok(staged)
    };
    let results: Vec<Result<Vec<B::Staged>>> = if runs.len() == 1 {
        vec![stage_run(runs[0])]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = runs
                .iter()
                .map(|run| scope.spawn(|| stage_run(run)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::internal("an import thread panicked")))
                })
                .collect()
        })
    };
    let mut all = Vec::with_capacity(plan.files.len());
    for result in results {
        all.extend(result?);
    }
    Ok(all)
}

/// Replaces everything in `backend` with the checked archive at `path`.
/// The caller holds the workspace's write lock. Blocking.
///
/// Every file is inflated and staged first; only then is the workspace
/// emptied and filled, so a corrupt entry, or staging that fails (a full
/// disk), leaves the workspace as it was.
pub fn apply<B: Backend>(backend: &B, path: &Path, plan: &ImportPlan) -> Result<()> {
    let staged = stage_all(backend, path, plan)?;
    replace_all(backend, plan, staged)
}

/// The apply step: empties the workspace and fills it with the staged
/// files, as one replacement a crash cannot leave half done (an intent
/// record, [`crate::directory::journal`]: the next start completes it).
fn replace_all<B: Backend>(backend: &B, plan: &ImportPlan, staged: Vec<B::Staged>) -> Result<()> {
    let intent = crate::backend::intent::Intent {
        operation: "import".to_string(),
        prune: crate::backend::intent::Prune::Everything,
        dirs: plan.dirs.iter().map(|d| d.as_str().to_string()).collect(),
        files: plan
            .files
            .iter()
            .zip(&staged)
            .map(|((_, path, _), file)| {
                let modified = plan.attributes.get(path).and_then(|a| a.modified);
                crate::backend::intent::IntentFile::new(path, file, None).modified(modified)
            })
            .collect(),
        permissions: plan
            .attributes
            .iter()
            .map(|(path, a)| (path.as_str().to_string(), a.permissions.bits()))
            .collect(),
    };
    crate::backend::intent::apply(backend, &intent, || {
        backend.remove(&CanonicalPath::root(), true)?;
        let attributes = |path: &CanonicalPath| plan.attributes.get(path).copied();
        for dir in &plan.dirs {
            backend.mkdir(dir, true, Permissions::DIRECTORY_DEFAULT)?;
        }
        for ((_, path, _), file) in plan.files.iter().zip(staged) {
            let put = CommitMode {
                append: false,
                create_parents: true,
                permissions: attributes(path).map(|a| a.permissions),
                modified: attributes(path).and_then(|a| a.modified),
            };
            backend.commit(file, path, put)?;
        }
        let bits = plan.dirs.iter().map(|dir| {
            let bits = attributes(dir).map_or(Permissions::DIRECTORY_DEFAULT, |a| a.permissions);
            (dir, bits)
        });
        crate::backend::finish_directories(backend, bits)?;
        Ok(())
    })
}

/// A ZIP entry's time (the export writes UTC) as a system time; `None`
/// when it names no real day.
pub(crate) fn zip_time_to_system(t: zip::DateTime) -> Option<SystemTime> {
    let t = time::PrimitiveDateTime::try_from(t).ok()?.assume_utc();
    let secs = u64::try_from(t.unix_timestamp()).ok()?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
}

/// A workspace as a whole: what an archive is imported into, and what the
/// session's usage is counted over. Sessions hold their workspace as this
/// too, since `Filesystem` has no whole-workspace operation.
#[async_trait::async_trait]
pub trait ArchiveTarget: Send + Sync {
    /// The regular files and bytes the workspace holds now, counted as the
    /// quotas count them (a walk of the tree, without the write lock: a
    /// report, not a check). `None` when the workspace cannot count them.
    async fn usage(&self) -> Result<Option<crate::quota::Usage>> {
        Ok(None)
    }

    /// Empties the workspace and writes the checked archive at `archive`,
    /// under the workspace's write lock. Read-only: `READ_ONLY`. The work
    /// owns the lock and the spooled archive (removed when it is done): a
    /// caller that goes away does not stop it half way.
    async fn import_checked(&self, archive: tempfile::TempPath, plan: ImportPlan) -> Result<()>;

    /// `READ_ONLY` when the workspace takes no import: asked before the
    /// archive is received, so a refused import reads none of it.
    fn importable(&self) -> Result<()>;
}

#[async_trait::async_trait]
impl<B: Backend> ArchiveTarget for crate::workspace::Workspace<B> {
    async fn import_checked(&self, archive: tempfile::TempPath, plan: ImportPlan) -> Result<()> {
        self.importable()?;
        self.exclusive(move |b| {
            apply(b, &archive, &plan)?;
            b.settle()
        })
        .await
    }

    fn importable(&self) -> Result<()> {
        self.writable_for("", "import an archive")
    }

    async fn usage(&self) -> Result<Option<crate::quota::Usage>> {
        let root = CanonicalPath::root();
        crate::workspace::run_on(self.backend(), move |b| crate::quota::usage(b, &root))
            .await
            .map(Some)
    }
}
