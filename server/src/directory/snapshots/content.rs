//! Files named by their SHA-256, written through `tmp/`: contents and
//! manifests; sparse files read and hashed run by run.

use super::*;

/// A directory of files named by hash: `<aa>/<62 hex>`, written through
/// `tmp/`.
#[derive(Clone)]
pub(super) struct ContentStore {
    pub(super) dir: PathBuf,
}

impl ContentStore {
    pub(super) fn path(&self, hash: &Hash) -> PathBuf {
        let hex = hex(hash);
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    pub(super) fn open(&self, hash: &Hash) -> Result<std::fs::File> {
        std::fs::File::open(self.path(hash)).map_err(|e| {
            Error::internal(format!(
                "a snapshot's stored content {} cannot be read: {e}",
                hex(hash)
            ))
        })
    }

    pub(super) fn temp_file(&self) -> Result<(PathBuf, std::fs::File)> {
        let tmp_dir = self.dir.join("tmp");
        std::fs::create_dir_all(&tmp_dir).map_err(storage_error)?;
        let tmp = tmp_dir.join(new_id());
        let file = std::fs::File::create_new(&tmp).map_err(storage_error)?;
        Ok((tmp, file))
    }

    /// Moves the finished temporary file `tmp` to `hash`'s name, unless
    /// that is already stored; returns the new object's path when it was
    /// not.
    pub(super) fn publish(&self, tmp: &Path, hash: &Hash) -> Result<Option<PathBuf>> {
        let target = self.path(hash);
        if target.exists() {
            return Ok(None);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(storage_error)?;
        }
        std::fs::rename(tmp, &target).map_err(storage_error)?;
        Ok(Some(target))
    }

    /// Copies the file `content` into the store while hashing it, keeping
    /// its holes (a sparse file costs the store its data only); returns the
    /// hash, the bytes (apparent size) and the new object's path when it
    /// was not stored yet. Refuses a file that grows past `limit` bytes
    /// (`QuotaExceeded`), and stops when `cancel` is set.
    pub(super) fn store_file(
        &self,
        content: &std::fs::File,
        path: &CanonicalPath,
        buf: &mut [u8],
        limit: u64,
        cancel: &AtomicBool,
    ) -> Result<(Hash, u64, Option<PathBuf>)> {
        let (tmp, out) = self.temp_file()?;
        let result = (|| {
            let size = content
                .metadata()
                .map_err(|e| Error::from_io(e, path))?
                .len();
            if size > limit {
                return Err(Error::QuotaExceeded {
                    message: format!(
                        "cannot snapshot '{path}': the snapshot would hold more than its budget of {limit} bytes"
                    ),
                });
            }
            let (hash, end) = read_sparse(
                content,
                size,
                buf,
                cancel,
                |e| Error::from_io(e, path),
                |piece| match piece {
                    Piece::Data(offset, data) => {
                        out.write_all_at(data, offset).map_err(storage_error)
                    }
                    Piece::Hole(_) => Ok(()),
                },
            )?;
            out.set_len(end).map_err(storage_error)?;
            let created = self.publish(&tmp, &hash)?;
            Ok((hash, end, created))
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Stores `bytes` under their hash, unless already stored; returns the
    /// new object's path when it was not.
    pub(super) fn store_bytes(&self, hash: &Hash, bytes: &[u8]) -> Result<Option<PathBuf>> {
        if self.path(hash).exists() {
            return Ok(None);
        }
        let (tmp, mut out) = self.temp_file()?;
        let result = out
            .write_all(bytes)
            .map_err(storage_error)
            .and_then(|()| self.publish(&tmp, hash));
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Removes every stored file not in `live`, and anything half written.
    pub(super) fn sweep(&self, live: &HashSet<Hash>) -> Result<()> {
        let _ = std::fs::remove_dir_all(self.dir.join("tmp"));
        let heads = match std::fs::read_dir(&self.dir) {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(storage_error(e)),
        };
        for head in heads {
            let head = head.map_err(storage_error)?;
            let head_name = head.file_name().to_string_lossy().into_owned();
            for object in std::fs::read_dir(head.path()).map_err(storage_error)? {
                let object = object.map_err(storage_error)?;
                let name = format!("{head_name}{}", object.file_name().to_string_lossy());
                if !parse_hash(&name).is_some_and(|h| live.contains(&h)) {
                    std::fs::remove_file(object.path()).map_err(storage_error)?;
                }
            }
            // Only succeeds once empty.
            let _ = std::fs::remove_dir(head.path());
        }
        Ok(())
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

pub(super) fn parse_hash(s: &str) -> Option<Hash> {
    hex::FromHex::from_hex(s).ok()
}

pub(super) fn storage_error(e: std::io::Error) -> Error {
    Error::io_while(e, "working in the snapshot store")
}

/// What [`read_sparse`] hands on, in file order.
pub(super) enum Piece<'a> {
    /// Bytes at an offset.
    Data(u64, &'a [u8]),
    /// This many zero bytes that the file does not store.
    Hole(u64),
}

/// Reads the first `size` bytes of `file` run by run (`SEEK_DATA` /
/// `SEEK_HOLE`), hashing every byte (a hole as zeros, without reading it)
/// and handing each data run and hole to `sink`. Returns the hash and the
/// bytes covered: fewer than `size` when the file was truncated meanwhile.
/// Stops with `Cancelled` once `cancel` is set.
pub(super) fn read_sparse(
    file: &std::fs::File,
    size: u64,
    buf: &mut [u8],
    cancel: &AtomicBool,
    read_error: impl Fn(std::io::Error) -> Error,
    mut sink: impl FnMut(Piece) -> Result<()>,
) -> Result<(Hash, u64)> {
    let mut hasher = Sha256::new();
    let stop_if_cancelled = || {
        if cancel.load(Ordering::Relaxed) {
            Err(cancelled())
        } else {
            Ok(())
        }
    };
    // Zeros are hashed a buffer at a time, so a long hole can be cancelled.
    let hole = |len: u64, hasher: &mut Sha256| -> Result<Option<Piece<'static>>> {
        let mut left = len;
        while left > 0 {
            stop_if_cancelled()?;
            let n = left.min(ZEROS.len() as u64) as usize;
            hasher.update(&ZEROS[..n]);
            left -= n as u64;
        }
        Ok((len > 0).then_some(Piece::Hole(len)))
    };
    let (mut offset, mut end) = (0u64, size);
    while let Some((start, stop)) = next_data(file, offset, end).map_err(&read_error)? {
        if let Some(piece) = hole(start - offset, &mut hasher)? {
            sink(piece)?;
        }
        offset = start;
        while offset < stop {
            stop_if_cancelled()?;
            let want = usize::try_from(stop - offset).map_or(buf.len(), |w| w.min(buf.len()));
            let n = match file.read_at(&mut buf[..want], offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(e)),
            };
            hasher.update(&buf[..n]);
            sink(Piece::Data(offset, &buf[..n]))?;
            offset += n as u64;
        }
        if offset < stop {
            // Truncated meanwhile: what was read is what there is.
            end = offset;
            break;
        }
    }
    if let Some(piece) = hole(end.saturating_sub(offset), &mut hasher)? {
        sink(piece)?;
    }
    Ok((hasher.finalize().into(), end))
}

/// Writes `bytes` to `path`, replacing it atomically.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        // A full disk leaves no half-written record behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(storage_error)
}

/// Writes `value` as JSON to `path`, replacing it atomically.
pub(super) fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec(value)
        .map_err(|e| Error::internal(format!("cannot encode a snapshot record: {e}")))?;
    write_atomic(path, &json)
}
