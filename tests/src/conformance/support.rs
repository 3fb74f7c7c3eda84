//! Small helpers the cases share: building paths, seeding files, reading
//! them back, and taking a snapshot of the whole workspace so a failure case
//! can assert that nothing changed.

use bytes::Bytes;
use futures::{stream, StreamExt, TryStreamExt};
use std::fmt::Debug;
use wsfs::{
    ByteChunks, ByteRange, CanonicalPath, Error, FileKind, Filesystem, GrepEvent, GrepMatch,
    GrepQuery, GrepSummary, Result, WriteOptions, WriteOutcome, DEFAULT_CHUNK_SIZE,
};

/// The contract's default per-write limit (`SessionLimits.max_write_bytes`).
pub use wsfs::DEFAULT_MAX_WRITE_BYTES;

/// A canonical path from a literal the test knows to be valid.
pub use crate::kit::p;

/// Writes text with the default options.
pub async fn put(fs: &dyn Filesystem, path: &str, content: &str) -> WriteOutcome {
    fs.write(&p(path), content, WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("seeding {path}: {e}"))
}

/// Writes bytes with the default options, in one chunk.
pub async fn put_bytes(fs: &dyn Filesystem, path: &str, content: &[u8]) -> WriteOutcome {
    fs.write_bytes(
        &p(path),
        WriteOptions::default(),
        chunks([Bytes::copy_from_slice(content)]),
    )
    .await
    .unwrap_or_else(|e| panic!("seeding {path}: {e}"))
}

/// Creates a directory (and its parents).
pub async fn mkdir(fs: &dyn Filesystem, path: &str) {
    fs.mkdir(&p(path), Default::default())
        .await
        .unwrap_or_else(|e| panic!("mkdir {path}: {e}"));
}

/// An upload stream of the given chunks.
pub fn chunks(parts: impl IntoIterator<Item = Bytes>) -> ByteChunks {
    stream::iter(parts.into_iter().map(Ok).collect::<Vec<_>>()).boxed()
}

/// The whole file, through ReadBytes.
pub async fn read_all(fs: &dyn Filesystem, path: &str) -> Vec<u8> {
    let stream = fs
        .read_bytes(&p(path), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    concat(stream.chunks)
        .await
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// All the bytes of a stream of chunks.
pub async fn concat(chunks: ByteChunks) -> Result<Vec<u8>> {
    chunks
        .try_fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            Ok(all)
        })
        .await
}

/// The whole file as text.
pub async fn read_text(fs: &dyn Filesystem, path: &str) -> String {
    String::from_utf8(read_all(fs, path).await).expect("file is UTF-8")
}

/// Opens a ReadBytes of `path` in 1,000-byte chunks, takes one chunk, runs
/// `change`, then reads the rest: the version the stream announced and
/// every byte it carried.
pub async fn read_across<F: std::future::Future>(
    fs: &dyn Filesystem,
    path: &str,
    change: F,
) -> (u64, Vec<u8>, F::Output) {
    let mut stream = fs
        .read_bytes(&p(path), ByteRange::default(), 1000)
        .await
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let first = stream.chunks.next().await.expect("a first chunk");
    let mut received = first
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
        .to_vec();
    let changed = change.await;
    while let Some(chunk) = stream.chunks.next().await {
        received.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("reading {path}: {e}")));
    }
    (stream.version, received, changed)
}

/// The file's current version.
pub async fn version(fs: &dyn Filesystem, path: &str) -> u64 {
    fs.stat(&p(path))
        .await
        .unwrap_or_else(|e| panic!("stat {path}: {e}"))
        .version
}

/// The kind of what `path` names, `None` when nothing is there.
pub async fn kind(fs: &dyn Filesystem, path: &str) -> Option<FileKind> {
    fs.exists(&p(path))
        .await
        .unwrap_or_else(|e| panic!("exists {path}: {e}"))
}

/// Asserts that `result` failed with `reason` and returns the error.
#[track_caller]
pub fn expect_err<T: Debug>(result: Result<T>, reason: &str) -> Error {
    match result {
        Ok(value) => panic!("expected {reason}, got Ok({value:?})"),
        Err(e) => {
            assert_eq!(e.reason(), reason, "unexpected error: {e}");
            e
        }
    }
}

/// One entry of a [`snapshot`]: path, kind, size, version, permission bits,
/// the bytes of a file and the target of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub version: u64,
    pub permissions: u32,
    pub content: Option<Vec<u8>>,
    pub symlink_target: Option<String>,
}

/// Everything in the workspace, sorted by path: what "changes nothing" is
/// checked against. Timestamps are left out on purpose.
pub async fn snapshot(fs: &dyn Filesystem) -> Vec<SnapshotEntry> {
    let mut out = Vec::new();
    let mut pending = vec![CanonicalPath::root()];
    while let Some(dir) = pending.pop() {
        let listing = fs
            .list(&dir, 1)
            .await
            .unwrap_or_else(|e| panic!("listing {dir}: {e}"));
        for entry in listing.entries {
            let content = match entry.kind {
                FileKind::File => Some(read_all(fs, entry.path.as_str()).await),
                FileKind::Directory => {
                    pending.push(entry.path.clone());
                    None
                }
                FileKind::Symlink => None,
            };
            out.push(SnapshotEntry {
                path: entry.path.as_str().to_string(),
                kind: entry.kind,
                size: entry.size,
                version: entry.version,
                permissions: entry.permissions.bits(),
                content,
                symlink_target: entry.symlink_target,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Paths of a snapshot, for compact assertions.
pub fn paths(entries: &[SnapshotEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.path.as_str()).collect()
}

/// Runs a Grep to the end: the matches, then the one summary. An error
/// either when the stream opens or from inside it is returned as is.
pub async fn grep_all(
    fs: &dyn Filesystem,
    query: GrepQuery,
) -> Result<(Vec<GrepMatch>, GrepSummary)> {
    let mut events = fs.grep(query).await?;
    let mut matches = Vec::new();
    let mut summary = None;
    while let Some(event) = events.next().await {
        match event? {
            GrepEvent::Match(m) => {
                assert!(summary.is_none(), "a match arrived after the summary");
                matches.push(m);
            }
            GrepEvent::Summary(s) => {
                assert!(summary.is_none(), "two summaries");
                summary = Some(s);
            }
        }
    }
    Ok((matches, summary.expect("the stream ends with a summary")))
}

/// `(path, line_number)` of each match.
pub fn locations(matches: &[GrepMatch]) -> Vec<(&str, u64)> {
    matches
        .iter()
        .map(|m| (m.path.as_str(), m.line_number))
        .collect()
}
