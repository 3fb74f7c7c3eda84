//! Read: text by lines.

use super::support::*;
use wsfs::{Filesystem, LineRange};

fn numbered_lines(n: u64) -> String {
    (0..n).map(|i| format!("line {i}\n")).collect()
}

pub async fn final_newline_does_not_start_a_line(fs: &dyn Filesystem) {
    put(fs, "f.txt", "a\nb\n").await;

    let page = fs.read(&p("f.txt"), LineRange::default()).await.unwrap();

    assert_eq!(page.total_lines, 2);
    assert_eq!(page.lines, 2);
    assert_eq!(page.content, "a\nb\n");
    assert!(!page.truncated);
}

pub async fn empty_file_has_no_lines(fs: &dyn Filesystem) {
    put(fs, "empty.txt", "").await;

    let page = fs
        .read(&p("empty.txt"), LineRange::default())
        .await
        .unwrap();

    assert_eq!(page.total_lines, 0);
    assert_eq!(page.lines, 0);
    assert_eq!(page.offset, 0);
    assert_eq!(page.content, "");
    assert!(!page.truncated);
    assert_eq!(page.size, 0);
}

pub async fn last_line_without_newline_counts(fs: &dyn Filesystem) {
    put(fs, "f.txt", "a\nb").await;

    let page = fs.read(&p("f.txt"), LineRange::default()).await.unwrap();

    assert_eq!(page.total_lines, 2);
    assert_eq!(page.content, "a\nb");
}

pub async fn crlf_line_endings_are_kept(fs: &dyn Filesystem) {
    put(fs, "dos.txt", "one\r\ntwo\r\nthree\r\n").await;

    let page = fs
        .read(
            &p("dos.txt"),
            LineRange {
                offset: 1,
                limit: Some(1),
            },
        )
        .await
        .unwrap();

    assert_eq!(page.total_lines, 3);
    assert_eq!(page.content, "two\r\n");
}

pub async fn default_limit_is_2000_lines(fs: &dyn Filesystem) {
    let text = numbered_lines(2500);
    put(fs, "long.txt", &text).await;

    let page = fs.read(&p("long.txt"), LineRange::default()).await.unwrap();

    assert_eq!(page.total_lines, 2500);
    assert_eq!(page.lines, 2000);
    assert_eq!(page.content, numbered_lines(2000));
    assert!(page.truncated);
}

pub async fn no_limit_reads_the_whole_file(fs: &dyn Filesystem) {
    let text = numbered_lines(2500);
    put(fs, "long.txt", &text).await;

    let page = fs.read(&p("long.txt"), LineRange::all()).await.unwrap();

    assert_eq!(page.lines, 2500);
    assert_eq!(page.content, text);
    assert!(!page.truncated);
}

pub async fn offset_and_limit_select_lines(fs: &dyn Filesystem) {
    put(fs, "f.txt", "l0\nl1\nl2\nl3\nl4\n").await;

    let page = fs
        .read(
            &p("f.txt"),
            LineRange {
                offset: 1,
                limit: Some(2),
            },
        )
        .await
        .unwrap();

    assert_eq!(page.offset, 1);
    assert_eq!(page.lines, 2);
    assert_eq!(page.content, "l1\nl2\n");
    assert!(page.truncated);
}

pub async fn offset_past_the_end_is_clamped(fs: &dyn Filesystem) {
    put(fs, "f.txt", "a\nb\nc\n").await;

    let page = fs
        .read(
            &p("f.txt"),
            LineRange {
                offset: 10,
                limit: Some(5),
            },
        )
        .await
        .unwrap();

    assert_eq!(page.offset, 3);
    assert_eq!(page.lines, 0);
    assert_eq!(page.content, "");
    assert!(!page.truncated);
    assert_eq!(page.total_lines, 3);
}

pub async fn pages_concatenate_to_the_file(fs: &dyn Filesystem) {
    // Mixed endings, an empty line, multibyte text and no final newline.
    let text = "alpha\r\n\nbeta γ\ngamma\r\n\r\ndelta\nε\nlast line";
    put(fs, "mixed.txt", text).await;

    for page_size in 1..=9u64 {
        let mut rebuilt = String::new();
        let mut offset = 0;
        loop {
            let page = fs
                .read(
                    &p("mixed.txt"),
                    LineRange {
                        offset,
                        limit: Some(page_size),
                    },
                )
                .await
                .unwrap();
            assert_eq!(page.offset, offset, "page size {page_size}");
            assert!(page.lines <= page_size, "page size {page_size}");
            rebuilt.push_str(&page.content);
            offset += page.lines;
            if !page.truncated {
                assert_eq!(offset, page.total_lines, "page size {page_size}");
                break;
            }
            assert!(page.lines > 0, "a truncated page returned no lines");
        }
        assert_eq!(rebuilt, text, "page size {page_size}");
    }
}

pub async fn invalid_utf8_is_not_text(fs: &dyn Filesystem) {
    put_bytes(fs, "bin.dat", b"ok\n\xff\xfe\n").await;
    let before = snapshot(fs).await;

    let result = fs.read(&p("bin.dat"), LineRange::default()).await;

    expect_err(result, "NOT_TEXT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn reading_a_directory_is_is_a_directory(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;

    let result = fs.read(&p("d"), LineRange::default()).await;

    expect_err(result, "IS_A_DIRECTORY");
}

pub async fn reading_a_missing_file_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs.read(&p("missing.txt"), LineRange::default()).await;

    let e = expect_err(result, "FILE_NOT_FOUND");
    assert_eq!(e.path(), Some("missing.txt"));
}

pub async fn page_carries_path_size_and_version(fs: &dyn Filesystem) {
    let written = put(fs, "dir/f.txt", "hello\n").await;

    let page = fs
        .read(&p("dir/f.txt"), LineRange::default())
        .await
        .unwrap();

    assert_eq!(page.path, p("dir/f.txt"));
    assert_eq!(page.size, 6);
    assert!(page.version > 0);
    assert_eq!(page.version, written.version);
    assert_eq!(page.version, version(fs, "dir/f.txt").await);
}

/// Larger than gRPC's default 4 MiB message, smaller than the per-write
/// limit: a whole-file Read and a text Write of it must both go through.
pub async fn whole_file_larger_than_four_mib_round_trips(fs: &dyn Filesystem) {
    let line = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\n";
    let text = line.repeat(5 * 1024 * 1024 / line.len() + 1);
    put(fs, "big.txt", &text).await;

    let page = fs.read(&p("big.txt"), LineRange::all()).await.unwrap();

    assert_eq!(page.content.len(), text.len());
    assert!(page.content == text, "content differs");
    assert!(!page.truncated);
}
