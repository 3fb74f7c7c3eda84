//! List: entries under a directory, sorted bytewise by path.

use super::support::*;
use std::time::{Duration, SystemTime};
use wsfs::{CanonicalPath, FileKind, Filesystem};

/// Names chosen so that bytewise path order differs from both
/// case-insensitive order and a depth-first walk: `B` < `a` < `a.txt` <
/// `a/b` < `a0`, because `'.'` < `'/'` < `'0'`.
async fn seed_order(fs: &dyn Filesystem) {
    put(fs, "a0", "0").await;
    put(fs, "a/b", "ab").await;
    put(fs, "B", "B").await;
    put(fs, "a.txt", "txt").await;
}

fn listed(listing: &wsfs::Listing) -> Vec<&str> {
    listing.entries.iter().map(|e| e.path.as_str()).collect()
}

pub async fn shallow_listing_is_sorted_bytewise(fs: &dyn Filesystem) {
    seed_order(fs).await;

    let listing = fs.list(&CanonicalPath::root(), 1).await.unwrap();

    assert_eq!(listed(&listing), ["B", "a", "a.txt", "a0"]);
    assert!(!listing.truncated);
}

pub async fn depth_two_includes_grandchildren_in_path_order(fs: &dyn Filesystem) {
    seed_order(fs).await;
    put(fs, "a/c/deeper.txt", "too deep").await;

    let listing = fs.list(&CanonicalPath::root(), 2).await.unwrap();

    assert_eq!(listed(&listing), ["B", "a", "a.txt", "a/b", "a/c", "a0"]);
}

pub async fn a_page_starts_after_its_cursor_in_path_order(fs: &dyn Filesystem) {
    seed_order(fs).await;
    put(fs, "a/c/deeper.txt", "deeper").await;
    let after = |cursor: String, depth: u32| async move {
        let listing = fs
            .list_after(&CanonicalPath::root(), depth, Some(&p(&cursor)))
            .await
            .unwrap();
        assert!(!listing.truncated);
        listed(&listing)
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };

    // The next page after each entry: the rest of the listing, in order.
    let all = fs.list(&CanonicalPath::root(), 3).await.unwrap();
    let all = listed(&all);
    assert_eq!(
        all,
        ["B", "a", "a.txt", "a/b", "a/c", "a/c/deeper.txt", "a0"]
    );
    for (i, cursor) in all.iter().enumerate() {
        assert_eq!(
            after(cursor.to_string(), 3).await,
            all[i + 1..],
            "after {cursor}"
        );
    }
    // A cursor that names no entry, at any depth.
    assert_eq!(
        after("a/bz".into(), 3).await,
        ["a/c", "a/c/deeper.txt", "a0"]
    );
    assert_eq!(after("a".into(), 1).await, ["a.txt", "a0"]);
    let sub = fs.list_after(&p("a"), 1, Some(&p("a/b"))).await.unwrap();
    assert_eq!(listed(&sub), ["a/c"]);
}

pub async fn entries_carry_metadata(fs: &dyn Filesystem) {
    let started = SystemTime::now() - Duration::from_secs(5);
    let written = put(fs, "d/file.txt", "12345").await;
    mkdir(fs, "d/sub").await;

    let listing = fs.list(&p("d"), 1).await.unwrap();

    assert_eq!(listing.path, p("d"));
    let [file, sub] = &listing.entries[..] else {
        panic!("{:?}", listing.entries);
    };
    assert_eq!(file.name(), "file.txt");
    assert_eq!(file.path, p("d/file.txt"));
    assert_eq!(file.kind, FileKind::File);
    assert_eq!(file.size, 5);
    assert_eq!(file.version, written.version);
    assert!(file.modified >= started, "{:?}", file.modified);
    assert_eq!(sub.name(), "sub");
    assert_eq!(sub.path, p("d/sub"));
    assert_eq!(sub.kind, FileKind::Directory);
    // List entries carry no creation time on the wire; the rest is Stat's.
    let stat = fs.stat(&p("d/file.txt")).await.unwrap();
    assert_eq!(
        (file.kind, file.size, file.version, file.modified),
        (stat.kind, stat.size, stat.version, stat.modified)
    );
}

pub async fn empty_root_lists_nothing(fs: &dyn Filesystem) {
    let listing = fs.list(&CanonicalPath::root(), 1).await.unwrap();

    assert_eq!(listing.path, CanonicalPath::root());
    assert!(listing.entries.is_empty());
}

pub async fn missing_directory_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs.list(&p("nope"), 1).await;

    expect_err(result, "FILE_NOT_FOUND");
}

pub async fn listing_a_file_is_not_a_directory(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;

    let result = fs.list(&p("f.txt"), 1).await;

    expect_err(result, "NOT_A_DIRECTORY");
}
