//! Edit: exact-text replacement with a unified diff.

use super::support::*;
use wsfs::{EditSpec, Error, Filesystem};

fn replace(old: &str, new: &str) -> EditSpec {
    EditSpec {
        old_text: old.into(),
        new_text: new.into(),
        ..EditSpec::default()
    }
}

pub async fn single_match_is_replaced(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "hello world\n").await.version;

    let outcome = fs
        .edit(&p("f.txt"), replace("world", "there"))
        .await
        .unwrap();

    assert_eq!(outcome.path, p("f.txt"));
    assert_eq!(outcome.replacements, 1);
    assert!(!outcome.dry_run);
    assert!(outcome.version > v1);
    assert_eq!(outcome.version, version(fs, "f.txt").await);
    assert_eq!(outcome.size, 12);
    assert_eq!(read_text(fs, "f.txt").await, "hello there\n");
}

pub async fn absent_text_is_no_match(fs: &dyn Filesystem) {
    put(fs, "f.txt", "hello world\n").await;
    let before = snapshot(fs).await;

    let result = fs.edit(&p("f.txt"), replace("planet", "moon")).await;

    expect_err(result, "NO_MATCH");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn repeated_text_is_ambiguous_match_with_count(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x = 1\nx = 2\nx = 3\n").await;
    let before = snapshot(fs).await;

    let result = fs.edit(&p("f.txt"), replace("x =", "y =")).await;

    let e = expect_err(result, "AMBIGUOUS_MATCH");
    assert!(matches!(e, Error::AmbiguousMatch { count: 3, .. }), "{e:?}");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn replace_all_replaces_every_match(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x = 1\nx = 2\nx = 3\n").await;

    let outcome = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                replace_all: true,
                ..replace("x =", "y =")
            },
        )
        .await
        .unwrap();

    assert_eq!(outcome.replacements, 3);
    assert_eq!(read_text(fs, "f.txt").await, "y = 1\ny = 2\ny = 3\n");
}

pub async fn dry_run_changes_nothing_but_returns_the_diff(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "one\ntwo\nthree\n").await.version;
    let before = snapshot(fs).await;

    let outcome = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                dry_run: true,
                ..replace("two", "deux")
            },
        )
        .await
        .unwrap();

    assert!(outcome.dry_run);
    assert_eq!(outcome.replacements, 1);
    assert_eq!(outcome.version, v1);
    assert!(
        outcome.diff.lines().any(|l| l == "+deux"),
        "{}",
        outcome.diff
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn diff_is_unified(fs: &dyn Filesystem) {
    put(fs, "f.txt", "one\ntwo\nthree\n").await;

    let outcome = fs.edit(&p("f.txt"), replace("two", "deux")).await.unwrap();

    let lines: Vec<&str> = outcome.diff.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("@@")),
        "{}",
        outcome.diff
    );
    assert!(lines.contains(&"-two"), "{}", outcome.diff);
    assert!(lines.contains(&"+deux"), "{}", outcome.diff);
    assert!(
        lines.contains(&" one"),
        "context line missing: {}",
        outcome.diff
    );
    assert!(!lines.contains(&"-one"), "{}", outcome.diff);
}

pub async fn matching_if_version_edits(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "alpha\n").await.version;

    let outcome = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                if_version: Some(v1),
                ..replace("alpha", "beta")
            },
        )
        .await
        .unwrap();

    assert!(outcome.version > v1);
    assert_eq!(read_text(fs, "f.txt").await, "beta\n");
}

pub async fn stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let v1 = put(fs, "f.txt", "alpha\n").await.version;
    let v2 = put(fs, "f.txt", "alpha alpha\n").await.version;
    let before = snapshot(fs).await;

    let result = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                if_version: Some(v1),
                replace_all: true,
                ..replace("alpha", "beta")
            },
        )
        .await;

    let e = expect_err(result, "VERSION_MISMATCH");
    assert!(
        matches!(e, Error::VersionMismatch { current, .. } if current == v2),
        "{e:?}"
    );
    assert_eq!(snapshot(fs).await, before);
}

pub async fn binary_file_is_not_text(fs: &dyn Filesystem) {
    put_bytes(fs, "bin.dat", b"abc\xff\xfeabc").await;
    let before = snapshot(fs).await;

    let result = fs.edit(&p("bin.dat"), replace("abc", "xyz")).await;

    expect_err(result, "NOT_TEXT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn missing_file_is_file_not_found(fs: &dyn Filesystem) {
    let result = fs.edit(&p("nope.txt"), replace("a", "b")).await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty());
}

pub async fn multibyte_text_is_replaced_exactly(fs: &dyn Filesystem) {
    put(fs, "f.txt", "naïve café\n").await;

    fs.edit(&p("f.txt"), replace("café", "thé")).await.unwrap();

    assert_eq!(read_text(fs, "f.txt").await, "naïve thé\n");
}

pub async fn a_long_diff_is_cut_at_a_line(fs: &dyn Filesystem) {
    // Every one of 200,000 lines changes: the whole diff would be 2.2 MB.
    put(fs, "f.txt", &"aaaa\n".repeat(200_000)).await;

    let outcome = fs
        .edit(
            &p("f.txt"),
            EditSpec {
                replace_all: true,
                ..replace("aaaa", "bbbb")
            },
        )
        .await
        .unwrap();

    assert_eq!(outcome.replacements, 200_000);
    assert!(
        outcome.diff.len() <= 1024 * 1024 + 100,
        "{}",
        outcome.diff.len()
    );
    assert!(outcome.diff.starts_with("--- a/f.txt\n+++ b/f.txt\n"));
    let last = outcome.diff.lines().last().unwrap();
    assert!(last.starts_with("\\ diff cut here"), "{last}");
    assert_eq!(read_text(fs, "f.txt").await, "bbbb\n".repeat(200_000));
}

pub async fn old_or_new_text_over_the_limit_is_too_large(fs: &dyn Filesystem) {
    // The sessions of the suite have the default per-write limit, 32 MiB.
    put(fs, "f.txt", "small\n").await;
    let before = snapshot(fs).await;
    let huge = "x".repeat(32 * 1024 * 1024 + 1);

    for spec in [replace(&huge, "y"), replace("small", &huge)] {
        expect_err(fs.edit(&p("f.txt"), spec).await, "TOO_LARGE");
    }
    assert_eq!(snapshot(fs).await, before);
}
