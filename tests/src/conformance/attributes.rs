//! Permission bits and modification times: defaults, explicit bits on
//! Write, WriteBytes and Mkdir, what overwrites, Copy and Move keep, and
//! SetAttributes. Bits above 0o777 never reach the trait (they are refused
//! where they are parsed); the wire's refusal is in `tests/permissions.rs`.

use super::support::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsfs::{
    Attributes, FileKind, Filesystem, MkdirOptions, Permissions, TransferOptions, WriteMode,
    WriteOptions,
};

fn bits(value: u32) -> Permissions {
    Permissions::new(value).unwrap()
}

async fn permissions(fs: &dyn Filesystem, path: &str) -> u32 {
    fs.stat(&p(path))
        .await
        .unwrap_or_else(|e| panic!("stat {path}: {e}"))
        .permissions
        .bits()
}

fn with_bits(value: u32) -> WriteOptions {
    WriteOptions {
        permissions: Some(bits(value)),
        ..WriteOptions::default()
    }
}

/// A time with whole microseconds, well in the past, that every
/// filesystem and the wire keep exactly.
fn past() -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(1_500_000_000_123_456)
}

pub async fn new_files_and_directories_get_the_defaults(fs: &dyn Filesystem) {
    put(fs, "made/by/write.txt", "x").await;
    mkdir(fs, "dir/sub").await;

    assert_eq!(permissions(fs, "made/by/write.txt").await, 0o644);
    for dir in ["made", "made/by", "dir", "dir/sub"] {
        assert_eq!(permissions(fs, dir).await, 0o755, "{dir}");
    }
}

pub async fn write_write_bytes_and_mkdir_set_the_bits_asked_for(fs: &dyn Filesystem) {
    fs.write(&p("run.sh"), "#!/bin/sh\n", with_bits(0o755))
        .await
        .unwrap();
    fs.write_bytes(&p("key"), with_bits(0o600), chunks([b"k"[..].into()]))
        .await
        .unwrap();
    let private = MkdirOptions {
        permissions: Some(bits(0o700)),
        ..MkdirOptions::default()
    };
    fs.mkdir(&p("a/private"), private).await.unwrap();

    assert_eq!(permissions(fs, "run.sh").await, 0o755);
    assert_eq!(permissions(fs, "key").await, 0o600);
    assert_eq!(permissions(fs, "a/private").await, 0o700);
    assert_eq!(
        permissions(fs, "a").await,
        0o755,
        "a parent gets the default"
    );
}

pub async fn overwrite_append_and_edit_keep_the_bits(fs: &dyn Filesystem) {
    fs.write(&p("run.sh"), "echo one\n", with_bits(0o750))
        .await
        .unwrap();

    put(fs, "run.sh", "echo two\n").await;
    assert_eq!(permissions(fs, "run.sh").await, 0o750, "after overwrite");
    let append = WriteOptions {
        mode: WriteMode::Append,
        ..WriteOptions::default()
    };
    fs.write(&p("run.sh"), "echo three\n", append)
        .await
        .unwrap();
    assert_eq!(permissions(fs, "run.sh").await, 0o750, "after append");
    put_bytes(fs, "run.sh", b"echo four\n").await;
    assert_eq!(permissions(fs, "run.sh").await, 0o750, "after upload");
    fs.edit(
        &p("run.sh"),
        wsfs::EditSpec {
            old_text: "four".into(),
            new_text: "five".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(permissions(fs, "run.sh").await, 0o750, "after edit");
}

pub async fn overwrite_with_bits_changes_them(fs: &dyn Filesystem) {
    put(fs, "f", "a").await;

    fs.write(&p("f"), "b", with_bits(0o700)).await.unwrap();

    assert_eq!(permissions(fs, "f").await, 0o700);
    assert_eq!(read_text(fs, "f").await, "b");
}

pub async fn an_existing_directory_keeps_its_bits(fs: &dyn Filesystem) {
    mkdir(fs, "d").await;
    let before = snapshot(fs).await;
    let other = MkdirOptions {
        permissions: Some(bits(0o700)),
        ..MkdirOptions::default()
    };

    let created = fs.mkdir(&p("d"), other).await.unwrap();

    assert!(!created);
    assert_eq!(permissions(fs, "d").await, 0o755);
    assert_eq!(snapshot(fs).await, before);
}

pub async fn listing_reports_the_bits(fs: &dyn Filesystem) {
    fs.write(&p("x.sh"), "", with_bits(0o755)).await.unwrap();
    put(fs, "y.txt", "").await;
    mkdir(fs, "z").await;

    let listing = fs.list(&p(""), 1).await.unwrap();

    let seen: Vec<(&str, u32)> = listing
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.permissions.bits()))
        .collect();
    assert_eq!(seen, [("x.sh", 0o755), ("y.txt", 0o644), ("z", 0o755)]);
}

pub async fn set_attributes_changes_the_bits_with_a_new_version(fs: &dyn Filesystem) {
    let written = put(fs, "run.sh", "#!/bin/sh\n").await;

    let outcome = fs
        .set_attributes(
            &p("run.sh"),
            Attributes {
                permissions: Some(bits(0o755)),
                ..Attributes::default()
            },
        )
        .await
        .unwrap();

    assert_eq!(outcome.permissions.bits(), 0o755);
    assert!(outcome.version > written.version);
    let stat = fs.stat(&p("run.sh")).await.unwrap();
    assert_eq!(stat.permissions.bits(), 0o755);
    assert_eq!(stat.version, outcome.version);
    assert_eq!(read_text(fs, "run.sh").await, "#!/bin/sh\n");
}

pub async fn set_attributes_sets_the_modification_time(fs: &dyn Filesystem) {
    put(fs, "old.txt", "x").await;

    let outcome = fs
        .set_attributes(
            &p("old.txt"),
            Attributes {
                modified: Some(past()),
                ..Attributes::default()
            },
        )
        .await
        .unwrap();

    assert_eq!(outcome.modified, past());
    assert_eq!(outcome.permissions.bits(), 0o644, "bits untouched");
    assert_eq!(fs.stat(&p("old.txt")).await.unwrap().modified, past());
}

pub async fn set_attributes_works_on_directories(fs: &dyn Filesystem) {
    put(fs, "d/f", "x").await;

    fs.set_attributes(
        &p("d"),
        Attributes {
            permissions: Some(bits(0o700)),
            modified: Some(past()),
            if_version: None,
        },
    )
    .await
    .unwrap();

    let stat = fs.stat(&p("d")).await.unwrap();
    assert_eq!(stat.kind, FileKind::Directory);
    assert_eq!(stat.permissions.bits(), 0o700);
    assert_eq!(stat.modified, past());
    assert_eq!(read_text(fs, "d/f").await, "x");
}

pub async fn set_attributes_with_matching_if_version_applies(fs: &dyn Filesystem) {
    let written = put(fs, "f", "x").await;

    let attributes = Attributes {
        permissions: Some(bits(0o600)),
        if_version: Some(written.version),
        ..Attributes::default()
    };
    fs.set_attributes(&p("f"), attributes).await.unwrap();

    assert_eq!(permissions(fs, "f").await, 0o600);
}

pub async fn set_attributes_with_stale_if_version_is_version_mismatch(fs: &dyn Filesystem) {
    let first = put(fs, "f", "one").await;
    put(fs, "f", "two").await;
    let before = snapshot(fs).await;

    let attributes = Attributes {
        permissions: Some(bits(0o777)),
        if_version: Some(first.version),
        ..Attributes::default()
    };
    let result = fs.set_attributes(&p("f"), attributes).await;

    let err = expect_err(result, "VERSION_MISMATCH");
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert_eq!(snapshot(fs).await, before);
    assert_eq!(permissions(fs, "f").await, 0o644);
}

pub async fn set_attributes_of_a_missing_path_is_file_not_found(fs: &dyn Filesystem) {
    let attributes = Attributes {
        permissions: Some(bits(0o755)),
        ..Attributes::default()
    };

    let result = fs.set_attributes(&p("nope"), attributes).await;

    expect_err(result, "FILE_NOT_FOUND");
    assert!(snapshot(fs).await.is_empty());
}

pub async fn set_attributes_with_nothing_to_set_is_invalid_argument(fs: &dyn Filesystem) {
    put(fs, "f", "x").await;
    let before = snapshot(fs).await;

    let result = fs.set_attributes(&p("f"), Attributes::default()).await;

    expect_err(result, "INVALID_ARGUMENT");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn write_bytes_sets_the_modification_time_asked_for(fs: &dyn Filesystem) {
    let options = WriteOptions {
        modified: Some(past()),
        ..with_bits(0o755)
    };

    fs.write_bytes(&p("tool"), options, chunks([b"bin"[..].into()]))
        .await
        .unwrap();

    let stat = fs.stat(&p("tool")).await.unwrap();
    assert_eq!(stat.modified, past());
    assert_eq!(stat.permissions.bits(), 0o755);
}

pub async fn copy_and_move_keep_the_bits_and_move_keeps_the_time(fs: &dyn Filesystem) {
    fs.write(&p("src/run.sh"), "x", with_bits(0o751))
        .await
        .unwrap();
    fs.write(&p("src/open"), "x", with_bits(0o777))
        .await
        .unwrap();
    let private = Attributes {
        permissions: Some(bits(0o700)),
        modified: Some(past()),
        if_version: None,
    };
    fs.set_attributes(&p("src"), private).await.unwrap();
    let old = Attributes {
        modified: Some(past()),
        ..Attributes::default()
    };
    fs.set_attributes(&p("src/run.sh"), old).await.unwrap();

    let options = TransferOptions::default();
    fs.copy(&p("src/run.sh"), &p("copy.sh"), options)
        .await
        .unwrap();
    fs.copy(&p("src"), &p("tree"), options).await.unwrap();
    fs.rename(&p("src"), &p("moved"), options).await.unwrap();

    for (path, want) in [
        ("copy.sh", 0o751),
        ("tree", 0o700),
        ("tree/run.sh", 0o751),
        ("tree/open", 0o777),
        ("moved", 0o700),
        ("moved/run.sh", 0o751),
    ] {
        assert_eq!(permissions(fs, path).await, want, "{path}");
    }
    let moved = fs.stat(&p("moved/run.sh")).await.unwrap();
    assert_eq!(moved.modified, past(), "a move keeps the time");
}
