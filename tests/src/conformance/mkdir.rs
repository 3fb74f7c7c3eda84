//! Mkdir: parents and exist_ok both default to true.

use super::support::*;
use wsfs::{FileKind, Filesystem, MkdirOptions};

pub async fn parents_are_created_by_default(fs: &dyn Filesystem) {
    let created = fs
        .mkdir(&p("a/b/c"), MkdirOptions::default())
        .await
        .unwrap();

    assert!(created);
    for dir in ["a", "a/b", "a/b/c"] {
        assert_eq!(kind(fs, dir).await, Some(FileKind::Directory), "{dir}");
    }
}

pub async fn existing_directory_is_fine_by_default(fs: &dyn Filesystem) {
    put(fs, "d/f.txt", "x").await;
    let before = snapshot(fs).await;

    let created = fs.mkdir(&p("d"), MkdirOptions::default()).await.unwrap();

    assert!(!created);
    assert_eq!(snapshot(fs).await, before);
}

pub async fn existing_directory_without_exist_ok_is_already_exists(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;
    let before = snapshot(fs).await;
    let options = MkdirOptions {
        exist_ok: false,
        ..MkdirOptions::default()
    };

    let result = fs.mkdir(&p("d"), options).await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn file_in_the_way_is_already_exists(fs: &dyn Filesystem) {
    put(fs, "f", "a file").await;
    let before = snapshot(fs).await;

    let result = fs.mkdir(&p("f"), MkdirOptions::default()).await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn missing_parent_without_parents_is_file_not_found(fs: &dyn Filesystem) {
    let options = MkdirOptions {
        parents: false,
        ..MkdirOptions::default()
    };

    let result = fs.mkdir(&p("a/b"), options).await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn file_as_parent_is_not_a_directory(fs: &dyn Filesystem) {
    put(fs, "f", "a file").await;
    let before = snapshot(fs).await;

    let result = fs.mkdir(&p("f/sub"), MkdirOptions::default()).await;

    expect_err(result, "NOT_A_DIRECTORY");
    assert_eq!(snapshot(fs).await, before);
}
