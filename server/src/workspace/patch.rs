//! PatchBytes' ranges: the chunks of a patch, gathered into the list of
//! byte ranges its commit writes.

use crate::backend::PatchRange;
use bytes::Bytes;
use wsfs::{CanonicalPath, Error, PatchChunk, Result};

/// Most separate ranges one patch writes (touching ranges count as one):
/// the list is held in memory until the commit, 16 bytes a range.
pub const MAX_PATCH_RANGES: usize = 65_536;

/// Adds one chunk of a patch to its list of ranges (a chunk that
/// continues the last range extends it) and hands on its bytes.
pub(super) fn admit_chunk(
    path: &CanonicalPath,
    ranges: &mut Vec<PatchRange>,
    chunk: PatchChunk,
) -> Result<Bytes> {
    let len = chunk.data.len() as u64;
    if len == 0 {
        return Ok(chunk.data);
    }
    if chunk
        .offset
        .checked_add(len)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(Error::invalid_argument(format!(
            "a patch of '{path}' writes {len} bytes at offset {}, past the largest file size",
            chunk.offset
        )));
    }
    if let Some(last) = ranges.last_mut().filter(|last| last.end() == chunk.offset) {
        last.len += len;
        return Ok(chunk.data);
    }
    if ranges.len() == MAX_PATCH_RANGES {
        return Err(Error::invalid_argument(format!(
            "a patch of '{path}' may write at most {MAX_PATCH_RANGES} separate ranges; \
             join neighbouring writes or send several patches"
        )));
    }
    ranges.push(PatchRange {
        offset: chunk.offset,
        len,
    });
    Ok(chunk.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: u64, data: &'static [u8]) -> PatchChunk {
        PatchChunk {
            offset,
            data: Bytes::from_static(data),
        }
    }

    #[test]
    fn touching_patch_chunks_are_one_range_and_empty_ones_none() {
        let path = CanonicalPath::from_canonical("f");
        let mut ranges = Vec::new();
        for c in [
            chunk(0, b"ab"),
            chunk(2, b"c"),
            chunk(9, b""),
            chunk(5, b"x"),
        ] {
            admit_chunk(&path, &mut ranges, c).unwrap();
        }
        assert_eq!(
            ranges,
            [
                PatchRange { offset: 0, len: 3 },
                PatchRange { offset: 5, len: 1 }
            ]
        );
    }

    #[test]
    fn only_bytes_from_the_start_to_the_end_replace_the_file_whole() {
        let patch = |truncate_to, ranges: &[(u64, u64)]| crate::backend::Patch {
            truncate_to,
            ranges: ranges
                .iter()
                .map(|&(offset, len)| PatchRange { offset, len })
                .collect(),
            create_missing: false,
        };
        // A rewrite after a cut, a new file, a file written past its end.
        assert!(patch(Some(0), &[(0, 10)]).replaces_whole(100));
        assert!(patch(None, &[(0, 10)]).replaces_whole(0));
        assert!(patch(None, &[(0, 10)]).replaces_whole(10));
        assert!(patch(Some(0), &[]).replaces_whole(100));
        // Old bytes or an extension's zeros are kept.
        assert!(!patch(None, &[(0, 10)]).replaces_whole(11));
        assert!(!patch(Some(20), &[(0, 10)]).replaces_whole(0));
        assert!(!patch(None, &[]).replaces_whole(1));
        assert!(!patch(Some(0), &[(1, 10)]).replaces_whole(0));
        // Two ranges: the later one may overwrite the earlier.
        assert!(!patch(Some(0), &[(0, 10), (5, 10)]).replaces_whole(0));
    }

    #[test]
    fn a_patch_of_too_many_ranges_is_refused_at_the_first_one_over() {
        let path = CanonicalPath::from_canonical("f");
        let mut ranges = Vec::new();
        for i in 0..MAX_PATCH_RANGES as u64 {
            admit_chunk(&path, &mut ranges, chunk(i * 2, b"x")).unwrap();
        }
        // One that touches the last range still fits.
        admit_chunk(
            &path,
            &mut ranges,
            chunk(MAX_PATCH_RANGES as u64 * 2 - 1, b"y"),
        )
        .unwrap();
        let err = admit_chunk(&path, &mut ranges, chunk(u64::from(u32::MAX), b"z")).unwrap_err();
        assert_eq!(err.reason(), "INVALID_ARGUMENT");
        assert!(
            err.to_string().contains("at most 65536 separate ranges"),
            "{err}"
        );
        assert_eq!(ranges.len(), MAX_PATCH_RANGES);
    }
}
