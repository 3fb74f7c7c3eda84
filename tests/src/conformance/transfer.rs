//! Move (`rename`) and Copy: files and whole directories.

use super::support::*;
use wsfs::{Error, FileKind, Filesystem, TransferOptions};

fn overwrite() -> TransferOptions {
    TransferOptions {
        overwrite: true,
        ..TransferOptions::default()
    }
}

/// A small tree with binary content: `src/a.txt`, `src/bin.dat`,
/// `src/sub/b.txt`, `src/sub/empty/`.
async fn seed_tree(fs: &dyn Filesystem) {
    put(fs, "src/a.txt", "alpha\n").await;
    put_bytes(fs, "src/bin.dat", &[0, 1, 2, 254, 255]).await;
    put(fs, "src/sub/b.txt", "beta\n").await;
    mkdir(fs, "src/sub/empty").await;
}

/// The entries under `prefix/`, with the prefix cut off and versions
/// dropped: what must be identical after a directory is moved or copied.
async fn subtree(fs: &dyn Filesystem, prefix: &str) -> Vec<(String, FileKind, Option<Vec<u8>>)> {
    let lead = format!("{prefix}/");
    snapshot(fs)
        .await
        .into_iter()
        .filter_map(|e| {
            let rel = e.path.strip_prefix(&lead)?.to_string();
            Some((rel, e.kind, e.content))
        })
        .collect()
}

pub async fn move_file(fs: &dyn Filesystem) {
    let written = put_bytes(fs, "a.bin", b"\x00payload\xff").await;

    let moved = fs
        .rename(&p("a.bin"), &p("b.bin"), TransferOptions::default())
        .await
        .unwrap();

    assert_eq!(moved.entries, 1);
    // The answer names the version the moved file got: the one a Stat
    // shows, newer than the one it had.
    assert_eq!(moved.version, Some(version(fs, "b.bin").await));
    assert!(moved.version > Some(written.version), "{moved:?}");
    assert_eq!(kind(fs, "a.bin").await, None);
    assert_eq!(read_all(fs, "b.bin").await, b"\x00payload\xff");
}

pub async fn move_directory_with_its_contents(fs: &dyn Filesystem) {
    seed_tree(fs).await;
    let original = subtree(fs, "src").await;

    let moved = fs
        .rename(&p("src"), &p("dst"), TransferOptions::default())
        .await
        .unwrap();

    // src, a.txt, bin.dat, sub, sub/b.txt, sub/empty
    assert_eq!(moved.entries, 6);
    assert_eq!(moved.version, Some(version(fs, "dst").await));
    assert_eq!(kind(fs, "src").await, None);
    assert_eq!(subtree(fs, "dst").await, original);
}

pub async fn copy_file(fs: &dyn Filesystem) {
    put_bytes(fs, "a.bin", b"\x00payload\xff").await;
    let before = snapshot(fs).await;

    let copied = fs
        .copy(&p("a.bin"), &p("b.bin"), TransferOptions::default())
        .await
        .unwrap();

    assert_eq!(copied.entries, 1);
    assert_eq!(copied.version, Some(version(fs, "b.bin").await));
    assert_eq!(read_all(fs, "b.bin").await, b"\x00payload\xff");
    let after = snapshot(fs).await;
    assert_eq!(after[0], before[0], "the source changed");
}

pub async fn copy_directory_with_its_contents(fs: &dyn Filesystem) {
    seed_tree(fs).await;
    let original = subtree(fs, "src").await;
    let before = snapshot(fs).await;

    let copied = fs
        .copy(&p("src"), &p("dst"), TransferOptions::default())
        .await
        .unwrap();

    assert_eq!(copied.entries, 6);
    assert_eq!(copied.version, Some(version(fs, "dst").await));
    assert_eq!(subtree(fs, "dst").await, original);
    let source_after: Vec<_> = snapshot(fs)
        .await
        .into_iter()
        .filter(|e| e.path.starts_with("src"))
        .collect();
    assert_eq!(source_after, before, "the source changed");
}

pub async fn move_onto_an_existing_file_is_already_exists(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    put(fs, "b.txt", "b").await;
    let before = snapshot(fs).await;

    let result = fs
        .rename(&p("a.txt"), &p("b.txt"), TransferOptions::default())
        .await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn copy_onto_an_existing_file_is_already_exists(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    put(fs, "b.txt", "b").await;
    let before = snapshot(fs).await;

    let result = fs
        .copy(&p("a.txt"), &p("b.txt"), TransferOptions::default())
        .await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn move_with_overwrite_replaces_the_destination(fs: &dyn Filesystem) {
    put(fs, "a.txt", "new").await;
    let old_version = put(fs, "b.txt", "old").await.version;

    fs.rename(&p("a.txt"), &p("b.txt"), overwrite())
        .await
        .unwrap();

    assert_eq!(paths(&snapshot(fs).await), ["b.txt"]);
    assert_eq!(read_text(fs, "b.txt").await, "new");
    assert!(version(fs, "b.txt").await > old_version);
}

pub async fn copy_with_overwrite_replaces_the_destination(fs: &dyn Filesystem) {
    put(fs, "a.txt", "new").await;
    let old_version = put(fs, "b.txt", "old").await.version;

    fs.copy(&p("a.txt"), &p("b.txt"), overwrite())
        .await
        .unwrap();

    assert_eq!(read_text(fs, "a.txt").await, "new");
    assert_eq!(read_text(fs, "b.txt").await, "new");
    assert!(version(fs, "b.txt").await > old_version);
}

pub async fn move_into_itself_is_invalid_argument(fs: &dyn Filesystem) {
    seed_tree(fs).await;
    let before = snapshot(fs).await;

    let result = fs
        .rename(&p("src"), &p("src/sub/inner"), TransferOptions::default())
        .await;

    expect_err(result, "INVALID_ARGUMENT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn copy_into_itself_is_invalid_argument(fs: &dyn Filesystem) {
    seed_tree(fs).await;
    let before = snapshot(fs).await;

    let result = fs
        .copy(&p("src"), &p("src/sub/inner"), TransferOptions::default())
        .await;

    expect_err(result, "INVALID_ARGUMENT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn overwriting_an_ancestor_of_the_source_is_invalid_argument(fs: &dyn Filesystem) {
    seed_tree(fs).await;
    let before = snapshot(fs).await;
    let overwrite = TransferOptions {
        overwrite: true,
        ..TransferOptions::default()
    };

    let moved = fs.rename(&p("src/sub"), &p("src"), overwrite).await;
    let copied = fs.copy(&p("src/sub"), &p("src"), overwrite).await;

    expect_err(moved, "INVALID_ARGUMENT");
    expect_err(copied, "INVALID_ARGUMENT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn move_of_a_missing_source_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs
        .rename(&p("nope"), &p("x/dest"), TransferOptions::default())
        .await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn copy_of_a_missing_source_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs
        .copy(&p("nope"), &p("x/dest"), TransferOptions::default())
        .await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn destination_parents_are_created_by_default(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    put(fs, "c.txt", "c").await;

    fs.rename(&p("a.txt"), &p("x/y/a.txt"), TransferOptions::default())
        .await
        .unwrap();
    fs.copy(&p("c.txt"), &p("z/c.txt"), TransferOptions::default())
        .await
        .unwrap();

    assert_eq!(read_text(fs, "x/y/a.txt").await, "a");
    assert_eq!(read_text(fs, "z/c.txt").await, "c");
}

pub async fn without_create_parents_a_missing_parent_is_file_not_found(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    let before = snapshot(fs).await;
    let options = TransferOptions {
        create_parents: false,
        ..TransferOptions::default()
    };

    let moved = fs.rename(&p("a.txt"), &p("x/a.txt"), options).await;
    let copied = fs.copy(&p("a.txt"), &p("x/a.txt"), options).await;

    expect_err(moved, "FILE_NOT_FOUND");
    expect_err(copied, "FILE_NOT_FOUND");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn move_with_matching_if_version_moves(fs: &dyn Filesystem) {
    let v1 = put(fs, "a.txt", "a").await.version;
    let options = TransferOptions {
        if_version: Some(v1),
        ..TransferOptions::default()
    };

    fs.rename(&p("a.txt"), &p("b.txt"), options).await.unwrap();

    assert_eq!(paths(&snapshot(fs).await), ["b.txt"]);
}

pub async fn move_with_stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put(fs, "a.txt", "one").await.version;
    let v2 = put(fs, "a.txt", "two").await.version;
    let before = snapshot(fs).await;
    let options = TransferOptions {
        if_version: Some(v1),
        ..TransferOptions::default()
    };

    let result = fs.rename(&p("a.txt"), &p("b.txt"), options).await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, Error::VersionMismatch { current, .. } if current == v2),
        "{e:?}"
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn moved_file_is_newer_than_anything_once_at_the_destination(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    let old_destination = put(fs, "b.txt", "b").await.version;
    fs.delete(&p("b.txt"), Default::default()).await.unwrap();

    fs.rename(&p("a.txt"), &p("b.txt"), TransferOptions::default())
        .await
        .unwrap();

    assert!(version(fs, "b.txt").await > old_destination);
}
