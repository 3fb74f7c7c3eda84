//! `wsfs import` of an ordinary archive (zip, tar, gzipped tar): its files
//! are added to the workspace as tar extracts them, one upload each, so
//! each is held to the session's limits like any write; a file refused is
//! reported and the rest still written.
//!
//! The archive is read on a blocking thread with the `zip`, `tar` and
//! `flate2` crates; each file's bytes reach the upload through a small
//! channel, so no file is ever held whole in memory.

use super::files::upload;
use super::output::{self, print_json, println};
use super::{local, Ctx, Failure, Outcome};
use bytes::Bytes;
use serde_json::json;
use std::io::Read;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use wsfs_client::{
    parse_path, CanonicalPath, Error, Filesystem, MkdirOptions, Permissions, Session, WriteOptions,
};

/// What the first bytes of an archive say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Zip,
    Tar,
    TarGz,
}

impl Kind {
    /// From the magic numbers; `None` when it is none of the three.
    pub fn sniff(head: &[u8]) -> Option<Kind> {
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Kind::Zip)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            Some(Kind::TarGz)
        } else if head.len() >= 262 && &head[257..262] == b"ustar" {
            Some(Kind::Tar)
        } else {
            None
        }
    }
}

/// How paths in the archive become workspace paths.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Leading components dropped, as `tar --strip-components`.
    pub strip: usize,
    /// The directory the files go under (the root when empty).
    pub prefix: String,
    /// A wsfs archive read as an ordinary one: its paths start with
    /// `files/`, and `manifest.json` is not a file of the workspace.
    pub wsfs_layout: bool,
}

impl Placement {
    /// The workspace path of an archive entry; `None` for an entry that
    /// has nothing left once stripped (tar skips those too).
    fn place(&self, name: &str) -> Option<Result<String, String>> {
        let name = if self.wsfs_layout {
            name.strip_prefix("files/")?
        } else {
            name
        };
        let parts: Vec<&str> = name
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.contains(&"..") {
            return Some(Err(format!(
                "'{name}' climbs out of the archive with '..': not extracted"
            )));
        }
        let kept = parts.get(self.strip..).filter(|rest| !rest.is_empty())?;
        let rel = kept.join("/");
        Some(Ok(if self.prefix.is_empty() {
            rel
        } else {
            format!("{}/{rel}", self.prefix.trim_end_matches('/'))
        }))
    }
}

/// One entry of the archive, as the reading thread hands it over.
enum Entry {
    Directory {
        name: String,
        mode: Option<u32>,
    },
    File {
        name: String,
        size: u64,
        mode: Option<u32>,
        modified: Option<SystemTime>,
        /// The file's bytes, chunk by chunk.
        data: mpsc::Receiver<std::io::Result<Bytes>>,
    },
    /// A link or special file: not extracted.
    Skipped {
        name: String,
        what: &'static str,
    },
    /// The archive itself could not be read further.
    Broken(String),
}

/// Bytes per chunk handed from the reading thread to the upload.
const CHUNK: usize = 1 << 20;

/// Reads `reader` (a tar, gzipped when `gzip`) on this thread, handing
/// each entry to `tx`.
fn read_tar(reader: impl Read, gzip: bool, tx: mpsc::Sender<Entry>) {
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(reader))
    } else {
        Box::new(reader)
    };
    let mut archive = tar::Archive::new(reader);
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(e) => {
            let _ = tx.blocking_send(Entry::Broken(format!("not a readable tar: {e}")));
            return;
        }
    };
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                let _ = tx.blocking_send(Entry::Broken(format!("the tar is damaged: {e}")));
                return;
            }
        };
        let name = match entry.path() {
            Ok(path) => path.to_string_lossy().into_owned(),
            Err(e) => {
                let _ = tx.blocking_send(Entry::Broken(format!("a tar entry's name: {e}")));
                return;
            }
        };
        let header = entry.header();
        let mode = header.mode().ok();
        let kind = header.entry_type();
        let handed = if kind.is_dir() {
            tx.blocking_send(Entry::Directory { name, mode })
        } else if kind.is_file() {
            let modified = header
                .mtime()
                .ok()
                .map(|secs| UNIX_EPOCH + Duration::from_secs(secs));
            let size = entry.size();
            let (chunks, data) = mpsc::channel(4);
            if tx
                .blocking_send(Entry::File {
                    name,
                    size,
                    mode,
                    modified,
                    data,
                })
                .is_err()
            {
                return;
            }
            send_chunks(&mut entry, &chunks);
            Ok(())
        } else {
            let what = if kind.is_symlink() {
                "symbolic link"
            } else if kind.is_hard_link() {
                "hard link"
            } else {
                "special file"
            };
            tx.blocking_send(Entry::Skipped { name, what })
        };
        if handed.is_err() {
            return;
        }
    }
}

/// Reads a zip file on this thread, handing each entry to `tx`.
fn read_zip(file: std::fs::File, wsfs_layout: bool, tx: mpsc::Sender<Entry>) {
    let mut archive = match zip::ZipArchive::new(std::io::BufReader::new(file)) {
        Ok(archive) => archive,
        Err(e) => {
            let _ = tx.blocking_send(Entry::Broken(format!("not a readable zip: {e}")));
            return;
        }
    };
    for index in 0..archive.len() {
        let mut entry = match archive.by_index(index) {
            Ok(entry) => entry,
            Err(e) => {
                let _ = tx.blocking_send(Entry::Broken(format!("the zip is damaged: {e}")));
                return;
            }
        };
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let mode = entry.unix_mode();
        let handed = if wsfs_layout && name == "manifest.json" {
            Ok(())
        } else if entry.is_dir() {
            tx.blocking_send(Entry::Directory { name, mode })
        } else if entry.is_symlink() {
            tx.blocking_send(Entry::Skipped {
                name,
                what: "symbolic link",
            })
        } else {
            let (chunks, data) = mpsc::channel(4);
            let size = entry.size();
            if tx
                .blocking_send(Entry::File {
                    name,
                    size,
                    mode,
                    modified: None,
                    data,
                })
                .is_err()
            {
                return;
            }
            send_chunks(&mut entry, &chunks);
            Ok(())
        };
        if handed.is_err() {
            return;
        }
    }
}

/// Hands `reader`'s bytes to `chunks` until its end or a read error.
fn send_chunks(reader: &mut impl Read, chunks: &mpsc::Sender<std::io::Result<Bytes>>) {
    loop {
        let mut buf = vec![0; CHUNK];
        let read = match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) => {
                let _ = chunks.blocking_send(Err(e));
                return;
            }
        };
        buf.truncate(read);
        if chunks.blocking_send(Ok(Bytes::from(buf))).is_err() {
            return;
        }
    }
}

/// Where an ordinary archive comes from.
pub enum Source {
    /// A local file of this kind (a zip needs its file: its directory is
    /// at the end).
    File(std::fs::File, Kind),
    /// A tar or gzipped tar streamed from `reader`.
    Stream(Box<dyn Read + Send>, Kind),
}

/// Adds the archive's files to the session; reports what was written and
/// every failure.
pub async fn extract(ctx: &mut Ctx, shown: &str, source: Source, placement: Placement) -> Outcome {
    let session = ctx.session().await?;
    let (tx, mut rx) = mpsc::channel(4);
    let wsfs_layout = placement.wsfs_layout;
    let reader = tokio::task::spawn_blocking(move || match source {
        Source::File(file, Kind::Zip) => read_zip(file, wsfs_layout, tx),
        Source::File(file, kind) => read_tar(file, kind == Kind::TarGz, tx),
        Source::Stream(reader, kind) => read_tar(reader, kind == Kind::TarGz, tx),
    });
    let mut tally = Tally::default();
    while let Some(entry) = rx.recv().await {
        match entry {
            Entry::Broken(why) => {
                tally.broken = Some(why);
                break;
            }
            Entry::Skipped { name, what } => tally.skipped.push((name, what)),
            Entry::Directory { name, mode } => {
                let Some(placed) = placement.place(&name) else {
                    continue;
                };
                if let Err(why) = make_directory(&session, placed, mode).await {
                    tally.failed.push((name, why));
                }
            }
            Entry::File {
                name,
                size,
                mode,
                modified,
                data,
            } => {
                let Some(placed) = placement.place(&name) else {
                    continue;
                };
                match write_file(&session, placed, size, mode, modified, data).await {
                    Ok(()) => {
                        tally.files += 1;
                        tally.bytes += size;
                    }
                    Err(why) => tally.failed.push((name, why)),
                }
            }
        }
    }
    drop(rx);
    reader
        .await
        .map_err(|e| Failure::Local(format!("reading the archive failed: {e}")))?;
    tally.report(ctx, shown)
}

async fn make_directory(
    session: &Session,
    placed: Result<String, String>,
    mode: Option<u32>,
) -> Outcome {
    let path = parse_path(&placed.map_err(Failure::Local)?)?;
    if path.is_root() {
        return Ok(());
    }
    let options = MkdirOptions {
        parents: true,
        exist_ok: true,
        permissions: mode.map(Permissions::masked),
    };
    session.mkdir(&path, options).await?;
    Ok(())
}

async fn write_file(
    session: &Session,
    placed: Result<String, String>,
    size: u64,
    mode: Option<u32>,
    modified: Option<SystemTime>,
    data: mpsc::Receiver<std::io::Result<Bytes>>,
) -> Outcome {
    // Dropping `data` on a refusal lets the reading thread skip the rest
    // of this file.
    let path: CanonicalPath = parse_path(&placed.map_err(Failure::Local)?)?;
    let reader =
        tokio_util::io::StreamReader::new(tokio_stream::wrappers::ReceiverStream::new(data));
    let options = WriteOptions {
        permissions: mode.map(Permissions::masked),
        modified,
        ..WriteOptions::default()
    };
    upload(session, &path, reader, Some(size), options, true).await?;
    Ok(())
}

/// What an extraction did.
#[derive(Default)]
struct Tally {
    files: u64,
    bytes: u64,
    failed: Vec<(String, Failure)>,
    skipped: Vec<(String, &'static str)>,
    /// Why the archive could not be read to its end.
    broken: Option<String>,
}

impl Tally {
    fn report(self, ctx: &Ctx, shown: &str) -> Outcome {
        let failures: Vec<_> = self
            .failed
            .iter()
            .map(|(name, why)| {
                let (reason, message) = why.text();
                (name.as_str(), reason, message)
            })
            .collect();
        if ctx.json {
            print_json(&json!({
                "file": shown,
                "file_count": self.files,
                "total_bytes": self.bytes,
                "failed": failures
                    .iter()
                    .map(|(name, reason, message)| json!({"entry": name, "reason": reason, "message": message}))
                    .collect::<Vec<_>>(),
                "skipped": self.skipped.iter().map(|(name, what)| json!({"entry": name, "kind": what})).collect::<Vec<_>>(),
                "unreadable": self.broken,
            }))?;
        } else {
            for (name, reason, message) in &failures {
                eprintln!("wsfs: {name}: {reason}: {message}");
            }
            if !ctx.quiet {
                for (name, what) in &self.skipped {
                    println(&format!("skipped {what} {name}"))?;
                }
                let mut line = format!(
                    "imported {shown}: {} files, {}",
                    self.files,
                    output::human_size(self.bytes)
                );
                if !failures.is_empty() {
                    line.push_str(&format!(", {} failed", failures.len()));
                }
                println(&line)?;
            }
        }
        if let Some(why) = self.broken {
            return Err(Failure::Local(format!(
                "{shown}: {why} (the files listed as imported were written)"
            )));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Failure::Local(format!(
                "{} of the archive's files were not written (listed above); the rest were",
                failures.len()
            )))
        }
    }
}

/// Whether a zip file is a wsfs archive: `manifest.json` and everything
/// else under `files/`.
pub fn is_wsfs_zip(file: &std::fs::File) -> Outcome<bool> {
    let archive = zip::ZipArchive::new(std::io::BufReader::new(
        file.try_clone().map_err(local("cannot read the archive"))?,
    ))
    .map_err(|e| Failure::Local(format!("not a readable zip: {e}")))?;
    let mut names = archive.file_names_raw();
    let mut manifest = false;
    let layout = names.all(|name| {
        let name = String::from_utf8_lossy(name);
        manifest |= name == "manifest.json";
        name == "manifest.json" || name.starts_with("files/")
    });
    Ok(manifest && layout)
}

/// A wrong archive, named as an error with what to do.
pub fn unknown_kind(shown: &str) -> Failure {
    Failure::Hinted(
        Error::invalid_argument(format!("'{shown}' is not a zip, a tar or a gzipped tar")),
        "wsfs import reads wsfs archives (`wsfs export`), zips, tars and .tar.gz files".into(),
    )
}
