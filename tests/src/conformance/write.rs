//! Write: UTF-8 text, three modes, parents, versions.

use super::support::*;
use wsfs::{CanonicalPath, DeleteOptions, EditSpec, FileKind, Filesystem, WriteMode, WriteOptions};

fn mode(mode: WriteMode) -> WriteOptions {
    WriteOptions {
        mode,
        ..WriteOptions::default()
    }
}

fn if_version(version: u64) -> WriteOptions {
    WriteOptions {
        if_version: Some(version),
        ..WriteOptions::default()
    }
}

pub async fn overwrite_creates_a_missing_file(fs: &dyn Filesystem) {
    let outcome = fs
        .write(&p("new.txt"), "hello", WriteOptions::default())
        .await
        .unwrap();

    assert_eq!(outcome.path, p("new.txt"));
    assert!(outcome.created);
    assert_eq!(outcome.bytes_written, 5);
    assert_eq!(outcome.size, 5);
    assert_eq!(read_text(fs, "new.txt").await, "hello");
}

pub async fn overwrite_replaces_the_content(fs: &dyn Filesystem) {
    put(fs, "f.txt", "a much longer original text").await;

    let outcome = fs
        .write(&p("f.txt"), "short", mode(WriteMode::Overwrite))
        .await
        .unwrap();

    assert!(!outcome.created);
    assert_eq!(outcome.bytes_written, 5);
    assert_eq!(outcome.size, 5);
    assert_eq!(read_text(fs, "f.txt").await, "short");
}

pub async fn create_writes_a_missing_file(fs: &dyn Filesystem) {
    let outcome = fs
        .write(&p("f.txt"), "fresh", mode(WriteMode::Create))
        .await
        .unwrap();

    assert!(outcome.created);
    assert_eq!(read_text(fs, "f.txt").await, "fresh");
}

pub async fn create_over_an_existing_file_is_already_exists(fs: &dyn Filesystem) {
    put(fs, "f.txt", "original").await;
    let before = snapshot(fs).await;

    let result = fs
        .write(&p("f.txt"), "replacement", mode(WriteMode::Create))
        .await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn append_adds_to_the_end(fs: &dyn Filesystem) {
    put(fs, "log.txt", "one\n").await;

    let outcome = fs
        .write(&p("log.txt"), "two\n", mode(WriteMode::Append))
        .await
        .unwrap();

    assert!(!outcome.created);
    assert_eq!(outcome.bytes_written, 4);
    assert_eq!(outcome.size, 8);
    assert_eq!(read_text(fs, "log.txt").await, "one\ntwo\n");
}

pub async fn append_creates_a_missing_file(fs: &dyn Filesystem) {
    let outcome = fs
        .write(&p("log.txt"), "first\n", mode(WriteMode::Append))
        .await
        .unwrap();

    assert!(outcome.created);
    assert_eq!(outcome.size, 6);
    assert_eq!(read_text(fs, "log.txt").await, "first\n");
}

pub async fn parents_are_created_by_default(fs: &dyn Filesystem) {
    fs.write(&p("a/b/c.txt"), "deep", WriteOptions::default())
        .await
        .unwrap();

    assert_eq!(kind(fs, "a").await, Some(FileKind::Directory));
    assert_eq!(kind(fs, "a/b").await, Some(FileKind::Directory));
    assert_eq!(read_text(fs, "a/b/c.txt").await, "deep");
}

pub async fn without_create_parents_a_missing_parent_is_file_not_found(fs: &dyn Filesystem) {
    let options = WriteOptions {
        create_parents: false,
        ..WriteOptions::default()
    };

    let result = fs.write(&p("a/b/c.txt"), "deep", options).await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn parent_that_is_a_file_is_not_a_directory(fs: &dyn Filesystem) {
    put(fs, "f", "a file").await;
    let before = snapshot(fs).await;

    let result = fs
        .write(&p("f/child.txt"), "x", WriteOptions::default())
        .await;

    expect_err(result, "NOT_A_DIRECTORY");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn writing_over_a_directory_is_is_a_directory(fs: &dyn Filesystem) {
    put(fs, "d/inside.txt", "x").await;
    let before = snapshot(fs).await;

    let result = fs.write(&p("d"), "text", WriteOptions::default()).await;

    expect_err(result, "IS_A_DIRECTORY");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn writing_the_root_is_invalid_argument(fs: &dyn Filesystem) {
    put(fs, "keep.txt", "x").await;
    let before = snapshot(fs).await;

    let result = fs
        .write(&CanonicalPath::root(), "text", WriteOptions::default())
        .await;

    expect_err(result, "INVALID_ARGUMENT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn version_grows_with_every_change(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    let v2 = put(fs, "f.txt", "two").await.version;
    let v3 = fs
        .write(&p("f.txt"), "+", mode(WriteMode::Append))
        .await
        .unwrap()
        .version;
    let v4 = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                old_text: "two".into(),
                new_text: "deux".into(),
                ..EditSpec::default()
            },
        )
        .await
        .unwrap()
        .version;

    assert!(v1 > 0);
    assert!(v1 < v2 && v2 < v3 && v3 < v4, "{v1} {v2} {v3} {v4}");
    assert_eq!(version(fs, "f.txt").await, v4);
}

pub async fn version_grows_across_delete_and_recreate(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "first life").await.version;
    fs.delete(&p("f.txt"), DeleteOptions::default())
        .await
        .unwrap();

    let v2 = put(fs, "f.txt", "second life").await.version;

    assert!(v2 > v1, "{v1} then {v2}");
}

pub async fn matching_if_version_writes(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;

    let outcome = fs.write(&p("f.txt"), "two", if_version(v1)).await.unwrap();

    assert!(outcome.version > v1);
    assert_eq!(read_text(fs, "f.txt").await, "two");
}

pub async fn stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    let v2 = put(fs, "f.txt", "two").await.version;
    let before = snapshot(fs).await;

    let result = fs.write(&p("f.txt"), "three", if_version(v1)).await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, wsfs::Error::VersionMismatch { current, .. } if current == v2),
        "{e:?}"
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn if_version_zero_creates_a_missing_file(fs: &dyn Filesystem) {
    let outcome = fs.write(&p("f.txt"), "new", if_version(0)).await.unwrap();

    assert!(outcome.created);
    assert_eq!(read_text(fs, "f.txt").await, "new");
}

pub async fn if_version_zero_on_an_existing_file_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "old").await.version;
    let before = snapshot(fs).await;

    let result = fs.write(&p("f.txt"), "new", if_version(0)).await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, wsfs::Error::VersionMismatch { current, .. } if current == v1),
        "{e:?}"
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn nonzero_if_version_on_a_missing_file_is_version_mismatch(fs: &dyn Filesystem) {
    let result = fs.write(&p("f.txt"), "new", if_version(7)).await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, wsfs::Error::VersionMismatch { current: 0, .. }),
        "{e:?}"
    );
    assert!(snapshot(fs).await.is_empty(), "something was created");
}
