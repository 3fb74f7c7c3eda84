//! WriteBytes: a streamed upload that lands whole or not at all.

use super::support::*;
use bytes::Bytes;
use futures::{stream, StreamExt};
use wsfs::{ByteChunks, Error, FileKind, Filesystem, WriteMode, WriteOptions};

/// An upload that sends `good` chunks and then fails the way a client that
/// breaks off does.
fn breaking_upload(good: Vec<&'static [u8]>) -> ByteChunks {
    let parts = good
        .into_iter()
        .map(|c| Ok(Bytes::from_static(c)))
        .chain([Err(Error::Cancelled {
            message: "the client went away mid-upload".into(),
        })]);
    stream::iter(parts.collect::<Vec<_>>()).boxed()
}

/// `total` bytes of zeros in 1 MiB chunks, produced lazily.
fn zeros(total: u64) -> ByteChunks {
    const CHUNK: u64 = 1024 * 1024;
    let block = Bytes::from(vec![0u8; CHUNK as usize]);
    let count = total.div_ceil(CHUNK);
    stream::iter(0..count)
        .map(move |i| {
            let len = CHUNK.min(total - i * CHUNK) as usize;
            Ok(block.slice(..len))
        })
        .boxed()
}

pub async fn chunks_are_joined_in_order(fs: &dyn Filesystem) {
    let parts = [&b"hello "[..], b"wide ", b"world"].map(Bytes::from_static);

    let outcome = fs
        .write_bytes(&p("f.txt"), WriteOptions::default(), chunks(parts))
        .await
        .unwrap();

    assert_eq!(outcome.path, p("f.txt"));
    assert!(outcome.created);
    assert_eq!(outcome.bytes_written, 16);
    assert_eq!(outcome.size, 16);
    assert_eq!(read_all(fs, "f.txt").await, b"hello wide world");
}

pub async fn empty_upload_creates_an_empty_file(fs: &dyn Filesystem) {
    let outcome = fs
        .write_bytes(&p("empty.bin"), WriteOptions::default(), chunks([]))
        .await
        .unwrap();

    assert!(outcome.created);
    assert_eq!(outcome.size, 0);
    assert_eq!(kind(fs, "empty.bin").await, Some(FileKind::File));
    assert!(read_all(fs, "empty.bin").await.is_empty());
}

pub async fn append_mode_adds_to_the_end(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"\x00\x01").await;
    let options = WriteOptions {
        mode: WriteMode::Append,
        ..WriteOptions::default()
    };

    let outcome = fs
        .write_bytes(
            &p("f.bin"),
            options,
            chunks([Bytes::from_static(b"\x02\x03")]),
        )
        .await
        .unwrap();

    assert_eq!(outcome.bytes_written, 2);
    assert_eq!(outcome.size, 4);
    assert_eq!(read_all(fs, "f.bin").await, b"\x00\x01\x02\x03");
}

pub async fn broken_upload_leaves_the_old_content(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"old content").await;
    let before = snapshot(fs).await;

    let result = fs
        .write_bytes(
            &p("f.bin"),
            WriteOptions::default(),
            breaking_upload(vec![b"new ", b"partial "]),
        )
        .await;

    assert!(result.is_err(), "a broken upload succeeded: {result:?}");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn broken_upload_creates_nothing(fs: &dyn Filesystem) {
    let result = fs
        .write_bytes(
            &p("new/dir/f.bin"),
            WriteOptions::default(),
            breaking_upload(vec![b"partial"]),
        )
        .await;

    assert!(result.is_err(), "a broken upload succeeded: {result:?}");
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put_bytes(fs, "f.bin", b"one").await.version;
    put_bytes(fs, "f.bin", b"two").await;
    let before = snapshot(fs).await;
    let options = WriteOptions {
        if_version: Some(v1),
        ..WriteOptions::default()
    };

    let result = fs
        .write_bytes(&p("f.bin"), options, chunks([Bytes::from_static(b"three")]))
        .await;

    expect_err(result, "VERSION_MISMATCH");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn matching_if_version_writes(fs: &dyn Filesystem) {
    let v1 = put_bytes(fs, "f.bin", b"one").await.version;
    let options = WriteOptions {
        if_version: Some(v1),
        ..WriteOptions::default()
    };

    let outcome = fs
        .write_bytes(&p("f.bin"), options, chunks([Bytes::from_static(b"two")]))
        .await
        .unwrap();

    assert!(outcome.version > v1);
    assert_eq!(read_all(fs, "f.bin").await, b"two");
}

pub async fn create_mode_over_an_existing_file_is_already_exists(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"keep").await;
    let before = snapshot(fs).await;
    let options = WriteOptions {
        mode: WriteMode::Create,
        ..WriteOptions::default()
    };

    let result = fs
        .write_bytes(&p("f.bin"), options, chunks([Bytes::from_static(b"lose")]))
        .await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

/// The default per-write limit is 32 MiB; one byte more is refused and the
/// file keeps its old content.
pub async fn upload_over_the_write_limit_is_too_large(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"old").await;
    let before = snapshot(fs).await;

    let result = fs
        .write_bytes(
            &p("f.bin"),
            WriteOptions::default(),
            zeros(DEFAULT_MAX_WRITE_BYTES + 1),
        )
        .await;

    expect_err(result, "TOO_LARGE");
    assert_eq!(snapshot(fs).await, before);
}
