//! ReadBytes: a header, then chunks of one consistent version.

use super::support::*;
use bytes::Bytes;
use futures::TryStreamExt;
use wsfs::{ByteRange, ByteStream, Filesystem, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE};

/// Deterministic bytes that are not a repeating short pattern.
fn pseudo_random(len: usize) -> Vec<u8> {
    let mut state: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        })
        .collect()
}

async fn chunks_of(stream: ByteStream) -> Vec<Bytes> {
    stream.chunks.try_collect().await.unwrap()
}

async fn range(fs: &dyn Filesystem, path: &str, offset: u64, limit: Option<u64>) -> Vec<u8> {
    let stream = fs
        .read_bytes(&p(path), ByteRange { offset, limit }, DEFAULT_CHUNK_SIZE)
        .await
        .unwrap();
    chunks_of(stream).await.concat()
}

pub async fn header_carries_size_and_version(fs: &dyn Filesystem) {
    let written = put_bytes(fs, "f.bin", b"0123456789").await;

    let stream = fs
        .read_bytes(&p("f.bin"), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await
        .unwrap();

    assert_eq!(stream.path, p("f.bin"));
    assert_eq!(stream.size, 10);
    assert_eq!(stream.version, written.version);
    assert_eq!(stream.offset, 0);
    assert_eq!(stream.length, 10);
    assert_eq!(chunks_of(stream).await.concat(), b"0123456789");
}

pub async fn offset_and_limit_select_a_range(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"0123456789").await;

    let stream = fs
        .read_bytes(
            &p("f.bin"),
            ByteRange {
                offset: 2,
                limit: Some(3),
            },
            DEFAULT_CHUNK_SIZE,
        )
        .await
        .unwrap();

    assert_eq!(stream.size, 10);
    assert_eq!(stream.offset, 2);
    assert_eq!(stream.length, 3);
    assert_eq!(chunks_of(stream).await.concat(), b"234");
}

pub async fn no_limit_reads_to_the_end(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"0123456789").await;

    assert_eq!(range(fs, "f.bin", 7, None).await, b"789");
}

pub async fn limit_past_the_end_stops_at_the_end(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"0123456789").await;

    let stream = fs
        .read_bytes(
            &p("f.bin"),
            ByteRange {
                offset: 8,
                limit: Some(100),
            },
            DEFAULT_CHUNK_SIZE,
        )
        .await
        .unwrap();

    assert_eq!(stream.length, 2);
    assert_eq!(chunks_of(stream).await.concat(), b"89");
}

pub async fn chunks_respect_the_chunk_size(fs: &dyn Filesystem) {
    let data = pseudo_random(10_000);
    put_bytes(fs, "f.bin", &data).await;

    let stream = fs
        .read_bytes(&p("f.bin"), ByteRange::default(), 1000)
        .await
        .unwrap();
    let chunks = chunks_of(stream).await;

    assert!(chunks.len() >= 10, "{} chunks", chunks.len());
    for chunk in &chunks {
        assert!(!chunk.is_empty(), "empty data chunk");
        assert!(chunk.len() <= 1000, "chunk of {} bytes", chunk.len());
    }
    assert_eq!(chunks.concat(), data);
}

pub async fn default_chunk_size_is_64_kib(fs: &dyn Filesystem) {
    let data = pseudo_random(200 * 1024);
    put_bytes(fs, "f.bin", &data).await;

    let stream = fs
        .read_bytes(&p("f.bin"), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await
        .unwrap();
    let chunks = chunks_of(stream).await;

    assert!(chunks.iter().all(|c| c.len() <= 64 * 1024));
    assert_eq!(chunks.concat(), data);
}

pub async fn chunks_concatenate_to_the_file(fs: &dyn Filesystem) {
    let data = pseudo_random(300_001);
    put_bytes(fs, "big.bin", &data).await;

    for chunk_size in [7777, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE] {
        let stream = fs
            .read_bytes(&p("big.bin"), ByteRange::default(), chunk_size)
            .await
            .unwrap();
        let chunks = chunks_of(stream).await;
        assert!(chunks.iter().all(|c| c.len() <= chunk_size));
        assert!(
            chunks.concat() == data,
            "chunk size {chunk_size}: bytes differ"
        );
    }
}

pub async fn one_byte_chunks_cover_a_range(fs: &dyn Filesystem) {
    let data = pseudo_random(4096);
    put_bytes(fs, "f.bin", &data).await;

    let stream = fs
        .read_bytes(
            &p("f.bin"),
            ByteRange {
                offset: 1000,
                limit: Some(64),
            },
            1,
        )
        .await
        .unwrap();
    let chunks = chunks_of(stream).await;

    assert_eq!(chunks.len(), 64);
    assert_eq!(chunks.concat(), &data[1000..1064]);
}

pub async fn offset_at_the_end_yields_no_bytes(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"0123456789").await;

    let stream = fs
        .read_bytes(
            &p("f.bin"),
            ByteRange {
                offset: 10,
                limit: None,
            },
            DEFAULT_CHUNK_SIZE,
        )
        .await
        .unwrap();

    assert_eq!(stream.size, 10);
    assert_eq!(stream.length, 0);
    assert!(chunks_of(stream).await.concat().is_empty());
}

pub async fn empty_file_yields_no_bytes(fs: &dyn Filesystem) {
    put_bytes(fs, "empty.bin", b"").await;

    let stream = fs
        .read_bytes(&p("empty.bin"), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await
        .unwrap();

    assert_eq!(stream.size, 0);
    assert!(chunks_of(stream).await.concat().is_empty());
}

pub async fn offset_past_the_end_is_out_of_range(fs: &dyn Filesystem) {
    put_bytes(fs, "f.bin", b"0123456789").await;

    let result = fs
        .read_bytes(
            &p("f.bin"),
            ByteRange {
                offset: 11,
                limit: None,
            },
            DEFAULT_CHUNK_SIZE,
        )
        .await;

    expect_err(result, "OUT_OF_RANGE");
}

pub async fn every_byte_value_round_trips(fs: &dyn Filesystem) {
    let data: Vec<u8> = (0..=255u8).cycle().take(256 * 9 + 17).collect();
    put_bytes(fs, "all.bin", &data).await;

    assert_eq!(read_all(fs, "all.bin").await, data);
    let meta = fs.stat(&p("all.bin")).await.unwrap();
    assert_eq!(meta.size, data.len() as u64);
}

pub async fn missing_file_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs
        .read_bytes(&p("nope.bin"), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await;

    expect_err(result, "FILE_NOT_FOUND");
}

pub async fn directory_is_is_a_directory(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;

    let result = fs
        .read_bytes(&p("d"), ByteRange::default(), DEFAULT_CHUNK_SIZE)
        .await;

    expect_err(result, "IS_A_DIRECTORY");
}

pub async fn open_stream_keeps_reading_the_old_version(fs: &dyn Filesystem) {
    let old = vec![b'a'; 40_000];
    let old_version = put_bytes(fs, "f.bin", &old).await.version;

    let (version, received, new) =
        read_across(fs, "f.bin", put_bytes(fs, "f.bin", &vec![b'b'; 50_000])).await;

    assert_eq!(version, old_version);
    assert_eq!(received, old, "the stream mixed versions or ended early");
    assert!(new.version > old_version);
    assert_eq!(read_all(fs, "f.bin").await, vec![b'b'; 50_000]);
}
