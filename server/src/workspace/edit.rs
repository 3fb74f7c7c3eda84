//! Edit's pieces: the whole text it rewrites, the size it comes to, and
//! the bounded diff it answers with.

use crate::backend::{Backend, Content};
use std::io::Read;
use wsfs::{CanonicalPath, Error, Metadata, Result};

/// Reads a whole text file that an edit may rewrite.
pub(super) fn read_text_for_edit<B: Backend>(
    b: &B,
    path: &CanonicalPath,
    limit: u64,
) -> Result<(String, Metadata)> {
    let file = b.open(path)?;
    if file.meta.size > limit {
        return Err(Error::TooLarge {
            path: path.as_str().to_string(),
            size: file.meta.size,
            limit,
        });
    }
    let bytes = match file.content {
        Content::Memory(b) => b.to_vec(),
        Content::Disk(f) => {
            let mut v = Vec::with_capacity(file.meta.size as usize);
            f.take(limit + 1)
                .read_to_end(&mut v)
                .map_err(|e| Error::from_io(e, path))?;
            v
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| Error::NotText {
        path: path.as_str().to_string(),
    })?;
    Ok((text, file.meta))
}

/// The size of a text of `len` bytes after `count` replacements of
/// `old` bytes by `new` bytes; `u64::MAX` when it does not fit.
pub(super) fn edited_size(len: u64, count: u64, old: u64, new: u64) -> u64 {
    count
        .checked_mul(old)
        .and_then(|removed| len.checked_sub(removed))
        .and_then(|kept| {
            count
                .checked_mul(new)
                .and_then(|added| kept.checked_add(added))
        })
        .unwrap_or(u64::MAX)
}

/// Longest an Edit's diff may search for a minimal answer; past it the
/// diff is coarser (whole blocks replaced) but still correct.
pub const EDIT_DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// Most bytes of unified diff an Edit returns; a longer diff is cut at a
/// line boundary and ends with a line saying so.
pub const MAX_EDIT_DIFF_BYTES: usize = 1024 * 1024;

/// The unified diff from `old` to `new`, within [`EDIT_DIFF_DEADLINE`] and
/// [`MAX_EDIT_DIFF_BYTES`]: an edit that rewrites a large file costs a
/// bounded diff, not one as large as the file twice over.
pub(super) fn bounded_diff(path: &CanonicalPath, old: &str, new: &str) -> String {
    use std::fmt::Write;
    let diff = similar::TextDiff::configure()
        .deadline(std::time::Instant::now() + EDIT_DIFF_DEADLINE)
        .diff_lines(old, new);
    let mut out = Capped {
        text: String::new(),
        cap: MAX_EDIT_DIFF_BYTES,
    };
    let written = write!(
        out,
        "{}",
        diff.unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
    );
    let mut text = out.text;
    if written.is_err() {
        text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        let _ = writeln!(
            text,
            "\\ diff cut here: it is longer than {MAX_EDIT_DIFF_BYTES} bytes"
        );
    }
    text
}

/// A string that refuses writes past `cap` bytes.
struct Capped {
    text: String,
    cap: usize,
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > self.cap {
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}
