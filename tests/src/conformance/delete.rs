//! Delete: files, directories, the root.

use super::support::*;
use wsfs::{CanonicalPath, DeleteOptions, Error, FileKind, Filesystem};

fn recursive() -> DeleteOptions {
    DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    }
}

pub async fn file_is_removed(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;
    put(fs, "keep.txt", "y").await;

    let deleted = fs
        .delete(&p("f.txt"), DeleteOptions::default())
        .await
        .unwrap();

    assert_eq!(deleted, 1);
    assert_eq!(kind(fs, "f.txt").await, None);
    assert_eq!(paths(&snapshot(fs).await), ["keep.txt"]);
}

pub async fn empty_directory_is_removed(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;

    let deleted = fs.delete(&p("d"), DeleteOptions::default()).await.unwrap();

    assert_eq!(deleted, 1);
    assert_eq!(kind(fs, "d").await, None);
}

pub async fn non_empty_directory_without_recursive_is_directory_not_empty(fs: &dyn Filesystem) {
    put(fs, "d/f.txt", "x").await;
    let before = snapshot(fs).await;

    let result = fs.delete(&p("d"), DeleteOptions::default()).await;

    expect_err(result, "DIRECTORY_NOT_EMPTY");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn recursive_counts_files_and_directories(fs: &dyn Filesystem) {
    put(fs, "d/a.txt", "a").await;
    put(fs, "d/b.txt", "b").await;
    put(fs, "d/sub/c.txt", "c").await;
    mkdir(fs, "d/empty").await;
    put(fs, "other.txt", "o").await;

    let deleted = fs.delete(&p("d"), recursive()).await.unwrap();

    // d, d/a.txt, d/b.txt, d/sub, d/sub/c.txt, d/empty
    assert_eq!(deleted, 6);
    assert_eq!(paths(&snapshot(fs).await), ["other.txt"]);
}

pub async fn recursive_delete_of_the_root_empties_it_and_keeps_it(fs: &dyn Filesystem) {
    put(fs, "a.txt", "a").await;
    put(fs, "d/b.txt", "b").await;

    let deleted = fs
        .delete(&CanonicalPath::root(), recursive())
        .await
        .unwrap();

    // a.txt, d, d/b.txt; the root itself stays.
    assert_eq!(deleted, 3);
    assert!(snapshot(fs).await.is_empty());
    assert_eq!(
        fs.exists(&CanonicalPath::root()).await.unwrap(),
        Some(FileKind::Directory)
    );
    put(fs, "after.txt", "still usable").await;
    assert_eq!(read_text(fs, "after.txt").await, "still usable");
}

pub async fn allow_missing_makes_a_missing_path_a_no_op(fs: &dyn Filesystem) {
    put(fs, "keep.txt", "x").await;
    let before = snapshot(fs).await;
    let options = DeleteOptions {
        allow_missing: true,
        ..DeleteOptions::default()
    };

    let deleted = fs.delete(&p("nope.txt"), options).await.unwrap();

    assert_eq!(deleted, 0);
    assert_eq!(snapshot(fs).await, before);
}

pub async fn missing_path_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs.delete(&p("nope.txt"), DeleteOptions::default()).await;

    let e = expect_err(result, "FILE_NOT_FOUND");
    assert_eq!(e.path(), Some("nope.txt"));
}

pub async fn stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    let v2 = put(fs, "f.txt", "two").await.version;
    let before = snapshot(fs).await;
    let options = DeleteOptions {
        if_version: Some(v1),
        ..DeleteOptions::default()
    };

    let result = fs.delete(&p("f.txt"), options).await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, Error::VersionMismatch { current, .. } if current == v2),
        "{e:?}"
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn matching_if_version_deletes(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one").await.version;
    let options = DeleteOptions {
        if_version: Some(v1),
        ..DeleteOptions::default()
    };

    let deleted = fs.delete(&p("f.txt"), options).await.unwrap();

    assert_eq!(deleted, 1);
    assert_eq!(kind(fs, "f.txt").await, None);
}

/// DeleteMany runs its entries in order, each as Delete would, and one
/// that fails leaves the others done and itself changing nothing.
pub async fn delete_many_runs_each_entry_in_order_and_reports_each(fs: &dyn Filesystem) {
    put(fs, "d/a.txt", "a").await;
    put(fs, "d/b.txt", "b").await;
    put(fs, "full/c.txt", "c").await;
    put(fs, "keep.txt", "k").await;
    let b = fs.stat(&p("d/b.txt")).await.unwrap();
    let stale = DeleteOptions {
        if_version: Some(b.version + 1_000),
        ..DeleteOptions::default()
    };

    let results = fs
        .delete_many(vec![
            (p("d/a.txt"), DeleteOptions::default()),
            (p("d/b.txt"), stale),
            (p("missing.txt"), DeleteOptions::default()),
            (
                p("gone-already.txt"),
                DeleteOptions {
                    allow_missing: true,
                    ..DeleteOptions::default()
                },
            ),
            (p("full"), DeleteOptions::default()),
            (p("full/c.txt"), DeleteOptions::default()),
            // Empty now: the entry before it removed its file.
            (p("full"), DeleteOptions::default()),
        ])
        .await
        .unwrap();

    assert_eq!(results.len(), 7);
    assert_eq!(results[0].as_ref().ok(), Some(&1));
    expect_err(results[1].clone(), "VERSION_MISMATCH");
    let missing = expect_err(results[2].clone(), "FILE_NOT_FOUND");
    assert!(missing.to_string().contains("missing.txt"), "{missing}");
    assert_eq!(results[3].as_ref().ok(), Some(&0));
    expect_err(results[4].clone(), "DIRECTORY_NOT_EMPTY");
    assert_eq!(results[5].as_ref().ok(), Some(&1));
    assert_eq!(results[6].as_ref().ok(), Some(&1));
    assert_eq!(paths(&snapshot(fs).await), ["d", "d/b.txt", "keep.txt"]);
    assert_eq!(fs.stat(&p("d/b.txt")).await.unwrap().version, b.version);
}

pub async fn delete_many_of_nothing_is_nothing(fs: &dyn Filesystem) {
    put(fs, "keep.txt", "k").await;
    let before = snapshot(fs).await;

    let results = fs.delete_many(Vec::new()).await.unwrap();

    assert!(results.is_empty());
    assert_eq!(snapshot(fs).await, before);
}

pub async fn delete_many_over_the_entry_limit_deletes_nothing(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;
    let before = snapshot(fs).await;
    let entries = vec![(p("f.txt"), DeleteOptions::default()); wsfs::MAX_DELETE_ENTRIES + 1];

    let e = expect_err(fs.delete_many(entries).await, "INVALID_ARGUMENT");

    assert!(e.to_string().contains("at most 1024"), "{e}");
    assert_eq!(snapshot(fs).await, before);
}
