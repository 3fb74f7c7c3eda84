//! Text Read's pages: lines selected from a file checked whole for UTF-8,
//! at most one page held in memory.

use crate::backend::{Content, OpenFile};
use std::io::{BufRead, BufReader, Read};
use wsfs::{CanonicalPath, Error, LineRange, Result, TextPage};

/// Most bytes one text Read page carries; longer pages are cut at a line
/// boundary and marked `truncated`.
pub const MAX_READ_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// Selects a page of lines from a reader, validating that the whole file is
/// UTF-8 and counting all its lines, holding at most one page in memory.
fn read_page<R: BufRead>(
    mut reader: R,
    path: &CanonicalPath,
    range: LineRange,
) -> Result<(String, u64, u64, bool)> {
    let io = |e| Error::from_io(e, path);
    let end = range.limit.map(|l| range.offset.saturating_add(l));
    let mut line = Vec::new();
    let mut page = Vec::new();
    let (mut index, mut taken, mut cut) = (0u64, 0u64, false);
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_READ_PAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_READ_PAGE_BYTES {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size: line.len() as u64,
                limit: MAX_READ_PAGE_BYTES as u64,
            });
        }
        if std::str::from_utf8(&line).is_err() {
            return Err(Error::NotText {
                path: path.as_str().to_string(),
            });
        }
        let selected = index >= range.offset && end.is_none_or(|e| index < e);
        if selected && !cut {
            if page.len() + line.len() > MAX_READ_PAGE_BYTES {
                cut = true;
            } else {
                page.extend_from_slice(&line);
                taken += 1;
            }
        }
        index += 1;
    }
    let offset = range.offset.min(index);
    let truncated = offset + taken < index;
    let content = String::from_utf8(page).map_err(|_| Error::NotText {
        path: path.as_str().to_string(),
    })?;
    Ok((content, index, taken, truncated))
}

/// The page of `file` that `range` selects.
pub(super) fn text_page(file: OpenFile, path: CanonicalPath, range: LineRange) -> Result<TextPage> {
    let (content, total, lines, truncated) = match file.content {
        Content::Memory(data) => read_page(&data[..], &path, range)?,
        Content::Disk(f) => {
            // One read for a small file, not a 256 KiB buffer.
            let capacity = file.meta.size.saturating_add(1).min(256 * 1024) as usize;
            read_page(BufReader::with_capacity(capacity, f), &path, range)?
        }
    };
    Ok(TextPage {
        offset: range.offset.min(total),
        path,
        content,
        total_lines: total,
        lines,
        truncated,
        version: file.meta.version,
        size: file.meta.size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str, offset: u64, limit: Option<u64>) -> (String, u64, u64, bool) {
        let p = CanonicalPath::from_canonical("f");
        read_page(text.as_bytes(), &p, LineRange { offset, limit }).unwrap()
    }

    #[test]
    fn final_newline_does_not_start_a_line() {
        assert_eq!(page("a\nb\n", 0, None).1, 2);
        assert_eq!(page("a\nb", 0, None).1, 2);
        assert_eq!(page("", 0, None).1, 0);
    }

    #[test]
    fn pages_rebuild_the_file() {
        let text = "one\r\ntwo\n\nfour";
        for size in 1..5 {
            let mut rebuilt = String::new();
            let mut offset = 0;
            loop {
                let (content, total, taken, truncated) = page(text, offset, Some(size));
                rebuilt.push_str(&content);
                offset += taken;
                if !truncated {
                    assert_eq!(offset, total);
                    break;
                }
            }
            assert_eq!(rebuilt, text);
        }
    }

    #[test]
    fn invalid_utf8_anywhere_is_not_text() {
        let p = CanonicalPath::from_canonical("f");
        let data = b"ok\n\xff\xfe\n";
        let r = read_page(
            &data[..],
            &p,
            LineRange {
                offset: 0,
                limit: Some(1),
            },
        );
        assert!(matches!(r, Err(Error::NotText { .. })));
    }
}
