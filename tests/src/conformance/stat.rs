//! Stat and Exists.

use super::support::*;
use std::time::{Duration, SystemTime};
use wsfs::{CanonicalPath, FileKind, Filesystem};

/// File timestamps come from clocks coarser than `SystemTime::now`; this
/// margin only keeps "sane" from failing on that, it measures nothing.
const CLOCK_SLACK: Duration = Duration::from_secs(5);

pub async fn file_metadata(fs: &dyn Filesystem) {
    let before = SystemTime::now() - CLOCK_SLACK;
    let written = put(fs, "d/f.txt", "hello").await;
    let after = SystemTime::now() + CLOCK_SLACK;

    let meta = fs.stat(&p("d/f.txt")).await.unwrap();

    assert_eq!(meta.path, p("d/f.txt"));
    assert_eq!(meta.name(), "f.txt");
    assert_eq!(meta.kind, FileKind::File);
    assert_eq!(meta.size, 5);
    assert_eq!(meta.version, written.version);
    assert!(
        before <= meta.modified && meta.modified <= after,
        "{meta:?}"
    );
    assert!(before <= meta.created && meta.created <= after, "{meta:?}");
    assert!(meta.created <= meta.modified, "{meta:?}");
}

pub async fn directory_metadata(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;

    let meta = fs.stat(&p("d")).await.unwrap();

    assert_eq!(meta.path, p("d"));
    assert_eq!(meta.kind, FileKind::Directory);
}

pub async fn root_is_a_directory(fs: &dyn Filesystem) {
    let meta = fs.stat(&CanonicalPath::root()).await.unwrap();

    assert_eq!(meta.path, CanonicalPath::root());
    assert_eq!(meta.kind, FileKind::Directory);
}

pub async fn rewrite_updates_size_version_and_keeps_time_order(fs: &dyn Filesystem) {
    put(fs, "f.txt", "short").await;
    let first = fs.stat(&p("f.txt")).await.unwrap();

    put(fs, "f.txt", "a longer text").await;
    let second = fs.stat(&p("f.txt")).await.unwrap();

    assert_eq!(second.size, 13);
    assert!(second.version > first.version);
    assert!(second.modified >= first.modified);
}

pub async fn missing_path_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs.stat(&p("nope")).await;

    let e = expect_err(result, "FILE_NOT_FOUND");
    assert_eq!(e.path(), Some("nope"));
}

pub async fn exists_names_the_kind(fs: &dyn Filesystem) {
    put(fs, "d/f.txt", "x").await;

    assert_eq!(kind(fs, "d/f.txt").await, Some(FileKind::File));
    assert_eq!(kind(fs, "d").await, Some(FileKind::Directory));
    assert_eq!(
        fs.exists(&CanonicalPath::root()).await.unwrap(),
        Some(FileKind::Directory)
    );
}

pub async fn exists_of_a_missing_path_is_none(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;

    assert_eq!(fs.exists(&p("nope")).await.unwrap(), None);
    assert_eq!(fs.exists(&p("no/such/dir")).await.unwrap(), None);
    // Nothing can be under a file, so that path is missing too.
    assert_eq!(fs.exists(&p("f.txt/child")).await.unwrap(), None);
}
