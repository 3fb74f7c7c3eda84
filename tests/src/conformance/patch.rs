//! Patches (WriteBytes in mode PATCH): byte ranges and a new length
//! applied to a file in one commit, keeping every byte not written, all or
//! nothing. Refusals on a read-only session or over a quota need a
//! configured session and are in `tests/patches_and_links.rs`.

use super::support::*;
use bytes::Bytes;
use futures::{stream, StreamExt};
use std::time::{Duration, UNIX_EPOCH};
use wsfs::{
    Error, FileKind, Filesystem, PatchChunk, PatchChunks, PatchOptions, Permissions, WriteOptions,
    WriteOutcome,
};

/// A patch's chunks, `(offset, bytes)` each.
fn ranges(parts: &[(u64, &[u8])]) -> PatchChunks {
    let chunks: Vec<_> = parts
        .iter()
        .map(|(offset, data)| {
            Ok(PatchChunk {
                offset: *offset,
                data: Bytes::copy_from_slice(data),
            })
        })
        .collect();
    stream::iter(chunks).boxed()
}

/// Patches `path` with `parts` and the default options.
async fn patch(
    fs: &dyn Filesystem,
    path: &str,
    parts: &[(u64, &[u8])],
) -> wsfs::Result<WriteOutcome> {
    fs.patch_bytes(&p(path), PatchOptions::default(), ranges(parts))
        .await
}

fn truncating(len: u64) -> PatchOptions {
    PatchOptions {
        truncate_to: Some(len),
        ..PatchOptions::default()
    }
}

pub async fn a_range_is_written_and_the_rest_kept(fs: &dyn Filesystem) {
    let before = put(fs, "f.txt", "hello world").await;

    let outcome = patch(fs, "f.txt", &[(6, b"WORLD")]).await.unwrap();

    assert_eq!(read_text(fs, "f.txt").await, "hello WORLD");
    assert_eq!(outcome.path, p("f.txt"));
    assert_eq!(outcome.bytes_written, 5);
    assert_eq!(outcome.size, 11);
    assert!(!outcome.created);
    assert!(outcome.version > before.version);
    assert_eq!(version(fs, "f.txt").await, outcome.version);
}

pub async fn ranges_apply_in_order_and_a_later_one_wins(fs: &dyn Filesystem) {
    put(fs, "f.txt", "0123456789").await;

    let outcome = patch(
        fs,
        "f.txt",
        &[(1, b"ab"), (6, b"xyz"), (2, b"Q"), (8, b"!")],
    )
    .await
    .unwrap();

    assert_eq!(read_text(fs, "f.txt").await, "0aQ345xy!9");
    assert_eq!(outcome.bytes_written, 7);
}

pub async fn writing_past_the_end_extends_with_zeros(fs: &dyn Filesystem) {
    put(fs, "f.bin", "ab").await;

    let outcome = patch(fs, "f.bin", &[(5, b"c")]).await.unwrap();

    assert_eq!(outcome.size, 6);
    assert_eq!(read_all(fs, "f.bin").await, b"ab\0\0\0c");
}

pub async fn truncate_to_cuts_the_file(fs: &dyn Filesystem) {
    put(fs, "f.txt", "hello world").await;

    let outcome = fs
        .patch_bytes(&p("f.txt"), truncating(5), ranges(&[]))
        .await
        .unwrap();

    assert_eq!(outcome.size, 5);
    assert_eq!(outcome.bytes_written, 0);
    assert_eq!(read_text(fs, "f.txt").await, "hello");
}

pub async fn truncate_to_extends_with_zeros(fs: &dyn Filesystem) {
    put(fs, "f.bin", "abc").await;

    fs.patch_bytes(&p("f.bin"), truncating(6), ranges(&[]))
        .await
        .unwrap();

    assert_eq!(read_all(fs, "f.bin").await, b"abc\0\0\0");
}

pub async fn truncate_to_applies_before_the_ranges(fs: &dyn Filesystem) {
    put(fs, "f.txt", "hello world").await;

    let outcome = fs
        .patch_bytes(&p("f.txt"), truncating(2), ranges(&[(4, b"z"), (0, b"H")]))
        .await
        .unwrap();

    assert_eq!(outcome.size, 5);
    assert_eq!(read_all(fs, "f.txt").await, b"He\0\0z");
}

pub async fn an_empty_patch_is_a_new_version_of_the_same_bytes(fs: &dyn Filesystem) {
    let before = put(fs, "f.txt", "same").await;

    let outcome = patch(fs, "f.txt", &[]).await.unwrap();

    assert!(outcome.version > before.version);
    assert_eq!(read_text(fs, "f.txt").await, "same");
}

/// A small change in the middle of a file of several MiB: every other
/// byte survives the copy the new version is built from.
pub async fn a_small_change_to_a_large_file_keeps_every_other_byte(fs: &dyn Filesystem) {
    let mut content: Vec<u8> = (0..5 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    put_bytes(fs, "big.bin", &content).await;
    let change = vec![0xEE; 4096];
    let at = 3 * 1024 * 1024 - 100;

    let outcome = patch(fs, "big.bin", &[(at as u64, &change)]).await.unwrap();

    content[at..at + change.len()].copy_from_slice(&change);
    assert_eq!(outcome.bytes_written, 4096);
    assert_eq!(outcome.size, content.len() as u64);
    assert!(
        read_all(fs, "big.bin").await == content,
        "the patched file differs from the expected bytes"
    );
}

pub async fn the_files_bits_are_kept_unless_named(fs: &dyn Filesystem) {
    let private = WriteOptions {
        permissions: Some(Permissions::new(0o600).unwrap()),
        ..WriteOptions::default()
    };
    fs.write(&p("key"), "secret", private).await.unwrap();
    fs.write(&p("run.sh"), "echo hi", WriteOptions::default())
        .await
        .unwrap();
    let executable = PatchOptions {
        permissions: Some(Permissions::new(0o755).unwrap()),
        ..PatchOptions::default()
    };

    patch(fs, "key", &[(0, b"S")]).await.unwrap();
    fs.patch_bytes(&p("run.sh"), executable, ranges(&[(5, b"HI")]))
        .await
        .unwrap();

    let stat = |path: &'static str| async move { fs.stat(&p(path)).await.unwrap() };
    assert_eq!(stat("key").await.permissions.bits(), 0o600);
    assert_eq!(stat("run.sh").await.permissions.bits(), 0o755);
    assert_eq!(read_text(fs, "run.sh").await, "echo HI");
}

pub async fn modified_at_is_set_when_asked(fs: &dyn Filesystem) {
    put(fs, "f.txt", "abc").await;
    let when = UNIX_EPOCH + Duration::from_micros(1_500_000_000_123_456);
    let options = PatchOptions {
        modified: Some(when),
        ..PatchOptions::default()
    };

    fs.patch_bytes(&p("f.txt"), options, ranges(&[(0, b"A")]))
        .await
        .unwrap();

    assert_eq!(fs.stat(&p("f.txt")).await.unwrap().modified, when);
}

/// A patch that writes the whole file from its start (a file rewritten
/// by `cp` or an editor's save through a mount): the server may take its
/// bytes as the new version whole, and everything a patch keeps or checks
/// holds as for any other patch.
pub async fn a_whole_rewrite_replaces_every_byte_and_keeps_the_bits(fs: &dyn Filesystem) {
    let private = WriteOptions {
        permissions: Some(Permissions::new(0o600).unwrap()),
        ..WriteOptions::default()
    };
    let old = vec![b'a'; 40_000];
    let before = fs
        .write_bytes(&p("f.bin"), private, chunks([Bytes::from(old.clone())]))
        .await
        .unwrap();
    let path = p("f.bin");
    let rewrite = fs.patch_bytes(&path, truncating(0), ranges(&[(0, b"new")]));

    let (version, received, outcome) = read_across(fs, "f.bin", rewrite).await;

    let outcome = outcome.unwrap();
    assert_eq!(version, before.version);
    assert_eq!(received, old, "the open stream saw the rewrite");
    assert_eq!(read_all(fs, "f.bin").await, b"new");
    assert_eq!((outcome.size, outcome.bytes_written), (3, 3));
    assert!(!outcome.created);
    assert!(outcome.version > before.version);
    let stat = fs.stat(&p("f.bin")).await.unwrap();
    assert_eq!(stat.permissions.bits(), 0o600);
    assert_eq!(stat.version, outcome.version);
}

/// Without a cut first, a range from offset 0 replaces the file only when
/// it reaches the end: a shorter one keeps the tail.
pub async fn a_range_from_the_start_keeps_the_tail_it_does_not_reach(fs: &dyn Filesystem) {
    put(fs, "short.txt", "hello world").await;
    put(fs, "long.txt", "hello").await;

    patch(fs, "short.txt", &[(0, b"HELLO")]).await.unwrap();
    patch(fs, "long.txt", &[(0, b"HELLO WORLD")]).await.unwrap();

    assert_eq!(read_text(fs, "short.txt").await, "HELLO world");
    assert_eq!(read_text(fs, "long.txt").await, "HELLO WORLD");
}

/// A whole rewrite of a file removed meanwhile does not bring it back.
pub async fn a_whole_rewrite_of_a_removed_file_is_file_not_found(fs: &dyn Filesystem) {
    put(fs, "gone.txt", "old").await;
    fs.delete(&p("gone.txt"), Default::default()).await.unwrap();

    let result = fs
        .patch_bytes(&p("gone.txt"), truncating(0), ranges(&[(0, b"new")]))
        .await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty(), "the file came back");
}

/// A whole rewrite of a file changed meanwhile loses its `if_version`
/// race as any patch does.
pub async fn a_whole_rewrite_over_a_stale_version_changes_nothing(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    put(fs, "f.txt", "two").await;
    let before = snapshot(fs).await;
    let options = PatchOptions {
        if_version: Some(v1),
        ..truncating(0)
    };

    let result = fs
        .patch_bytes(&p("f.txt"), options, ranges(&[(0, b"three")]))
        .await;

    expect_err(result, "VERSION_MISMATCH");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn a_missing_file_is_file_not_found_and_nothing_is_made(fs: &dyn Filesystem) {
    let err = expect_err(
        patch(fs, "dir/missing.txt", &[(0, b"x")]).await,
        "FILE_NOT_FOUND",
    );

    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(err.path(), Some("dir/missing.txt"));
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn create_missing_makes_an_empty_file_and_its_parents(fs: &dyn Filesystem) {
    let options = PatchOptions {
        create_missing: true,
        ..PatchOptions::default()
    };

    let outcome = fs
        .patch_bytes(&p("new/dir/f.bin"), options, ranges(&[(2, b"x")]))
        .await
        .unwrap();

    assert!(outcome.created);
    assert_eq!(outcome.size, 3);
    assert_eq!(read_all(fs, "new/dir/f.bin").await, b"\0\0x");
    assert_eq!(kind(fs, "new/dir").await, Some(FileKind::Directory));
    let stat = fs.stat(&p("new/dir/f.bin")).await.unwrap();
    assert_eq!(stat.permissions.bits(), 0o644);
}

pub async fn create_missing_without_create_parents_needs_the_parent(fs: &dyn Filesystem) {
    let options = PatchOptions {
        create_missing: true,
        create_parents: false,
        ..PatchOptions::default()
    };

    let result = fs
        .patch_bytes(&p("no/f.bin"), options, ranges(&[(0, b"x")]))
        .await;

    let err = expect_err(result, "FILE_NOT_FOUND");
    assert_eq!(err.path(), Some("no"));
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn a_directory_is_is_a_directory(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;
    let before = snapshot(fs).await;

    let err = expect_err(patch(fs, "d", &[(0, b"x")]).await, "IS_A_DIRECTORY");

    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(snapshot(fs).await, before);
}

pub async fn the_root_is_invalid_argument(fs: &dyn Filesystem) {
    let err = expect_err(patch(fs, "", &[(0, b"x")]).await, "INVALID_ARGUMENT");

    assert!(err.to_string().contains("root"), "{err}");
    assert!(snapshot(fs).await.is_empty());
}

pub async fn stale_if_version_is_version_mismatch_and_changes_nothing(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    put(fs, "f.txt", "two").await;
    let before = snapshot(fs).await;
    let options = PatchOptions {
        if_version: Some(v1),
        ..PatchOptions::default()
    };

    let result = fs
        .patch_bytes(&p("f.txt"), options, ranges(&[(0, b"T")]))
        .await;

    let err = expect_err(result, "VERSION_MISMATCH");
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert_eq!(snapshot(fs).await, before);
}

pub async fn matching_if_version_patches(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    let options = PatchOptions {
        if_version: Some(v1),
        ..PatchOptions::default()
    };

    fs.patch_bytes(&p("f.txt"), options, ranges(&[(0, b"O")]))
        .await
        .unwrap();

    assert_eq!(read_text(fs, "f.txt").await, "One");
}

pub async fn if_version_zero_with_create_missing_creates_only_a_new_file(fs: &dyn Filesystem) {
    let options = PatchOptions {
        if_version: Some(0),
        create_missing: true,
        ..PatchOptions::default()
    };

    fs.patch_bytes(&p("f.txt"), options, ranges(&[(0, b"new")]))
        .await
        .unwrap();
    let again = fs
        .patch_bytes(&p("f.txt"), options, ranges(&[(0, b"NEW")]))
        .await;

    expect_err(again, "VERSION_MISMATCH");
    assert_eq!(read_text(fs, "f.txt").await, "new");
}

pub async fn a_broken_stream_leaves_the_file_as_it_was(fs: &dyn Filesystem) {
    put(fs, "f.txt", "original").await;
    let before = snapshot(fs).await;
    let parts = vec![
        Ok(PatchChunk {
            offset: 0,
            data: Bytes::from_static(b"CHANGED"),
        }),
        Err(Error::Cancelled {
            message: "the client went away mid-patch".into(),
        }),
    ];

    let result = fs
        .patch_bytes(
            &p("f.txt"),
            PatchOptions::default(),
            stream::iter(parts).boxed(),
        )
        .await;

    assert!(result.is_err(), "a broken patch succeeded: {result:?}");
    assert_eq!(snapshot(fs).await, before);
}

/// The per-write limit counts the bytes a patch sends.
pub async fn bytes_over_the_write_limit_are_too_large(fs: &dyn Filesystem) {
    put(fs, "f.bin", "old").await;
    let before = snapshot(fs).await;
    let block = Bytes::from(vec![1u8; 1024 * 1024]);
    let count = DEFAULT_MAX_WRITE_BYTES / block.len() as u64 + 1;
    let parts = stream::iter(0..count)
        .map(move |i| {
            Ok(PatchChunk {
                offset: i * block.len() as u64,
                data: block.clone(),
            })
        })
        .boxed();

    let result = fs
        .patch_bytes(&p("f.bin"), PatchOptions::default(), parts)
        .await;

    let err = expect_err(result, "TOO_LARGE");
    assert!(err.to_string().contains("per-write limit"), "{err}");
    assert_eq!(snapshot(fs).await, before);
}

/// ...and it bounds how much a patch grows the file by: an extension is
/// bytes the server makes.
pub async fn growing_the_file_past_the_write_limit_is_too_large(fs: &dyn Filesystem) {
    put(fs, "f.bin", "old").await;
    let before = snapshot(fs).await;

    let by_length = fs
        .patch_bytes(
            &p("f.bin"),
            truncating(3 + DEFAULT_MAX_WRITE_BYTES + 1),
            ranges(&[]),
        )
        .await;
    let by_offset = patch(fs, "f.bin", &[(3 + DEFAULT_MAX_WRITE_BYTES, b"x")]).await;

    for result in [by_length, by_offset] {
        let err = expect_err(result, "TOO_LARGE");
        assert_eq!(
            err,
            Error::TooLarge {
                path: "f.bin".into(),
                size: DEFAULT_MAX_WRITE_BYTES + 1,
                limit: DEFAULT_MAX_WRITE_BYTES,
            }
        );
    }
    assert_eq!(snapshot(fs).await, before);
}

pub async fn a_range_past_the_largest_offset_is_invalid_argument(fs: &dyn Filesystem) {
    put(fs, "f.bin", "old").await;
    let before = snapshot(fs).await;

    let result = patch(fs, "f.bin", &[(u64::MAX - 1, b"xyz")]).await;

    let err = expect_err(result, "INVALID_ARGUMENT");
    assert!(err.to_string().contains("largest file size"), "{err}");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn an_open_stream_keeps_reading_the_old_version(fs: &dyn Filesystem) {
    let old = vec![b'a'; 40_000];
    let old_version = put_bytes(fs, "f.bin", &old).await.version;

    let (version, received, patched) =
        read_across(fs, "f.bin", patch(fs, "f.bin", &[(20_000, b"bbbb")])).await;

    assert_eq!(version, old_version);
    assert_eq!(received, old, "the stream saw the patch");
    assert!(patched.unwrap().version > old_version);
}
