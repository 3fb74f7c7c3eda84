//! Whether a file is searched (no NUL byte, no overlong line), and the
//! readers the search reads it through.

use super::MAX_SEARCHED_LINE_BYTES;
use std::io::Read;

/// What [`Scan`] looks at, at a time; less than
/// [`MAX_SEARCHED_LINE_BYTES`].
const SCAN_CHUNK_BYTES: usize = 64 * 1024;

/// Whether a file is searched: no NUL byte (binary) and no line longer
/// than [`MAX_SEARCHED_LINE_BYTES`]. Decided before any match of the file
/// is sent, by the same rule on every backend, on the raw bytes (no
/// byte-order-mark decoding).
#[derive(Default)]
pub(super) struct Scan {
    /// Bytes of the line running out of the last chunk.
    line: usize,
}

impl Scan {
    /// Looks at the next chunk (at most [`SCAN_CHUNK_BYTES`]); `false`
    /// once the file is not searched.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        if memchr::memchr(0, chunk).is_some() {
            return false;
        }
        // A chunk is shorter than the longest searched line, so only the
        // line running into it and the one running out of it can be too
        // long: two searches per chunk, not one per line.
        match (memchr::memchr(b'\n', chunk), memchr::memrchr(b'\n', chunk)) {
            (Some(first), Some(last)) => {
                if self.line + first > MAX_SEARCHED_LINE_BYTES {
                    return false;
                }
                self.line = chunk.len() - last - 1;
            }
            _ => self.line += chunk.len(),
        }
        self.line <= MAX_SEARCHED_LINE_BYTES
    }

    pub(super) fn bytes(data: &[u8]) -> bool {
        let mut scan = Scan::default();
        data.chunks(SCAN_CHUNK_BYTES).all(|c| scan.feed(c))
    }

    pub(super) fn reader(mut reader: impl Read) -> std::io::Result<bool> {
        let mut scan = Scan::default();
        let mut buf = vec![0u8; SCAN_CHUNK_BYTES];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return Ok(true),
                Ok(n) if !scan.feed(&buf[..n]) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads a file from an offset without moving its cursor, so the check
/// and the search each read it from the start.
pub(super) struct ReadAt<'a> {
    pub(super) file: &'a std::fs::File,
    pub(super) at: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Records whether reading failed, to tell an I/O error from the
/// searcher's own buffer limit.
pub(super) struct Watched<R> {
    pub(super) inner: R,
    pub(super) failed: bool,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|_| self.failed = true)
    }
}

/// Files at most this long are read whole in one pass, then checked and
/// searched in memory; longer ones are read twice (checked, then searched)
/// through the searcher's bounded buffer. Most source files are smaller.
const SMALL_FILE_BYTES: usize = 32 * 1024;

/// The whole of `file` when it holds at most [`SMALL_FILE_BYTES`]; `None`
/// as soon as it is longer. `size` is its size when it was opened: a file
/// that size is read in one call, and what is appended after that call is
/// not searched (as if the search had come a moment earlier).
pub(super) fn read_small(file: &std::fs::File, size: u64) -> std::io::Result<Option<bytes::Bytes>> {
    use std::os::unix::fs::FileExt;
    if size > SMALL_FILE_BYTES as u64 {
        return Ok(None);
    }
    // One byte more than the size, to see a file that grew.
    let mut data = vec![0u8; size as usize + 1];
    let mut len = 0;
    loop {
        if len == data.len() {
            if len > SMALL_FILE_BYTES {
                return Ok(None);
            }
            data.resize((len * 2).min(SMALL_FILE_BYTES + 1), 0);
        }
        match file.read_at(&mut data[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len as u64 == size {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if len > SMALL_FILE_BYTES {
        return Ok(None);
    }
    data.truncate(len);
    Ok(Some(data.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[usize]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|&n| std::iter::repeat_n(b'x', n).chain([b'\n']))
            .collect()
    }

    #[test]
    fn the_longest_searched_line_is_searched_one_more_byte_is_not() {
        let most = MAX_SEARCHED_LINE_BYTES;
        // Lines placed so that they start and end inside chunks, and span
        // several of them.
        for before in [0, 1, 1000, SCAN_CHUNK_BYTES - 1, SCAN_CHUNK_BYTES] {
            for (long, searched) in [(most, true), (most + 1, false)] {
                let data = text(&[before, long, 10]);
                assert_eq!(Scan::bytes(&data), searched, "{before} then {long}");
                assert_eq!(Scan::reader(&data[..]).unwrap(), searched);
            }
        }
        // Without a final newline, and many short lines.
        assert!(!Scan::bytes(&vec![b'x'; most + 1]));
        assert!(Scan::bytes(&text(&[100; 10_000])));
    }

    #[test]
    fn a_nul_byte_anywhere_is_binary() {
        let mut data = text(&[100; 5_000]);
        assert!(Scan::bytes(&data));
        let at = data.len() - 3;
        data[at] = 0;
        assert!(!Scan::bytes(&data));
    }
}
