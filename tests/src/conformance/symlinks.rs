//! Symbolic links made and read as links: Symlink stores its target as
//! given, Stat and List report it, and nothing follows a link: reading,
//! writing or going through one is PERMISSION_DENIED, while Delete, Move
//! and Copy act on the link itself.

use super::support::*;
use bytes::Bytes;
use futures::{stream, StreamExt};
use wsfs::{
    Attributes, ByteRange, DeleteOptions, EditSpec, FileKind, Filesystem, GlobQuery, GrepQuery,
    LineRange, Metadata, MkdirOptions, PatchChunk, PatchOptions, Permissions, SymlinkOptions,
    TransferOptions, WriteOptions, MAX_SYMLINK_TARGET_BYTES,
};

async fn link(fs: &dyn Filesystem, path: &str, target: &str) -> Metadata {
    fs.symlink(&p(path), target, SymlinkOptions::default())
        .await
        .unwrap_or_else(|e| panic!("symlink {path} -> {target}: {e}"))
}

/// Asserts a refusal for going through a link, naming `path`.
#[track_caller]
fn denied<T: std::fmt::Debug>(result: wsfs::Result<T>, path: &str) {
    let err = expect_err(result, "PERMISSION_DENIED");
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert_eq!(err.path(), Some(path), "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

pub async fn a_link_is_made_and_read_as_a_link(fs: &dyn Filesystem) {
    let before = put(fs, "f.txt", "x").await.version;

    let made = link(fs, "dir/l", "../some/target").await;

    assert_eq!(made.path, p("dir/l"));
    assert_eq!(made.kind, FileKind::Symlink);
    assert_eq!(made.symlink_target.as_deref(), Some("../some/target"));
    assert_eq!(made.size, "../some/target".len() as u64);
    assert!(made.version > before);
    let stat = fs.stat(&p("dir/l")).await.unwrap();
    assert_eq!(stat.kind, FileKind::Symlink);
    assert_eq!(stat.symlink_target.as_deref(), Some("../some/target"));
    assert_eq!(stat.version, made.version);
    assert_eq!(kind(fs, "dir/l").await, Some(FileKind::Symlink));
    let listed = fs.list(&p("dir"), 1).await.unwrap().entries;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, FileKind::Symlink);
    assert_eq!(listed[0].symlink_target.as_deref(), Some("../some/target"));
}

pub async fn files_and_directories_have_no_target(fs: &dyn Filesystem) {
    put(fs, "d/f.txt", "x").await;

    let listed = fs.list(&p(""), 2).await.unwrap().entries;

    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|e| e.symlink_target.is_none()));
    assert_eq!(fs.stat(&p("d/f.txt")).await.unwrap().symlink_target, None);
}

/// The target is data: absolute, climbing out, dangling, or naming a file
/// of the workspace, it is stored and reported exactly as given.
pub async fn any_target_is_stored_verbatim(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;
    let targets = [
        "/etc/passwd",
        "../../../outside",
        "does/not/exist",
        "f.txt",
        "a//b/./c/",
        "ünïcödé target with spaces",
    ];

    for (i, target) in targets.iter().enumerate() {
        link(fs, &format!("l{i}"), target).await;
    }

    for (i, target) in targets.iter().enumerate() {
        let stat = fs.stat(&p(&format!("l{i}"))).await.unwrap();
        assert_eq!(stat.symlink_target.as_deref(), Some(*target));
    }
}

pub async fn a_target_of_the_longest_length_is_kept(fs: &dyn Filesystem) {
    let target = "t".repeat(MAX_SYMLINK_TARGET_BYTES);

    link(fs, "l", &target).await;

    let stat = fs.stat(&p("l")).await.unwrap();
    assert_eq!(stat.symlink_target, Some(target));
}

pub async fn bad_targets_are_invalid_argument_and_make_nothing(fs: &dyn Filesystem) {
    let long = "t".repeat(MAX_SYMLINK_TARGET_BYTES + 1);
    for (target, why) in [
        ("", "is empty"),
        ("a\0b", "NUL"),
        (long.as_str(), "at most 4095"),
    ] {
        let result = fs.symlink(&p("l"), target, SymlinkOptions::default()).await;

        let err = expect_err(result, "INVALID_ARGUMENT");
        assert!(err.to_string().contains(why), "{err}");
    }
    assert!(snapshot(fs).await.is_empty(), "something was created");
}

pub async fn anything_already_there_is_already_exists(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;
    mkdir(fs, "d").await;
    link(fs, "l", "f.txt").await;
    let before = snapshot(fs).await;

    for path in ["f.txt", "d", "l", ""] {
        let result = fs.symlink(&p(path), "t", SymlinkOptions::default()).await;

        let err = expect_err(result, "ALREADY_EXISTS");
        assert_eq!(err.code(), tonic::Code::AlreadyExists);
    }
    assert_eq!(snapshot(fs).await, before);
}

pub async fn without_create_parents_a_missing_parent_is_file_not_found(fs: &dyn Filesystem) {
    let options = SymlinkOptions {
        create_parents: false,
    };

    let err = expect_err(fs.symlink(&p("no/l"), "t", options).await, "FILE_NOT_FOUND");

    assert_eq!(err.path(), Some("no"));
    assert!(snapshot(fs).await.is_empty());
}

pub async fn reading_a_link_is_permission_denied(fs: &dyn Filesystem) {
    put(fs, "f.txt", "secret\n").await;
    link(fs, "l", "f.txt").await;

    denied(fs.read(&p("l"), LineRange::default()).await, "l");
    denied(
        fs.read_bytes(&p("l"), ByteRange::default(), 1024)
            .await
            .map(|s| s.size),
        "l",
    );
}

pub async fn writing_to_a_link_is_permission_denied_and_changes_nothing(fs: &dyn Filesystem) {
    put(fs, "f.txt", "keep\n").await;
    link(fs, "l", "f.txt").await;
    let before = snapshot(fs).await;
    let chunk = || {
        stream::iter([Ok(PatchChunk {
            offset: 0,
            data: Bytes::from_static(b"X"),
        })])
        .boxed()
    };
    let bits = Attributes {
        permissions: Some(Permissions::new(0o600).unwrap()),
        ..Attributes::default()
    };
    let edit = EditSpec {
        old_text: "keep".into(),
        new_text: "lost".into(),
        ..EditSpec::default()
    };

    denied(
        fs.write(&p("l"), "lost", WriteOptions::default()).await,
        "l",
    );
    denied(
        fs.write_bytes(
            &p("l"),
            WriteOptions::default(),
            chunks([b"lost"[..].into()]),
        )
        .await,
        "l",
    );
    denied(
        fs.patch_bytes(&p("l"), PatchOptions::default(), chunk())
            .await,
        "l",
    );
    denied(fs.edit(&p("l"), edit).await, "l");
    denied(fs.set_attributes(&p("l"), bits).await, "l");

    assert_eq!(snapshot(fs).await, before);
}

pub async fn a_path_through_a_link_is_permission_denied(fs: &dyn Filesystem) {
    put(fs, "real/f.txt", "inside\n").await;
    link(fs, "d", "real").await;
    let before = snapshot(fs).await;

    denied(fs.stat(&p("d/f.txt")).await, "d");
    denied(fs.read(&p("d/f.txt"), LineRange::default()).await, "d");
    denied(
        fs.write(&p("d/new.txt"), "x", WriteOptions::default())
            .await,
        "d",
    );
    denied(fs.mkdir(&p("d/sub"), MkdirOptions::default()).await, "d");
    denied(
        fs.symlink(&p("d/l2"), "t", SymlinkOptions::default()).await,
        "d",
    );

    assert_eq!(snapshot(fs).await, before);
}

pub async fn deleting_a_link_removes_the_link_only(fs: &dyn Filesystem) {
    put(fs, "real/f.txt", "kept\n").await;
    link(fs, "to_file", "real/f.txt").await;
    link(fs, "to_dir", "real").await;

    let deleted_file_link = fs
        .delete(&p("to_file"), DeleteOptions::default())
        .await
        .unwrap();
    let deleted_dir_link = fs
        .delete(
            &p("to_dir"),
            DeleteOptions {
                recursive: true,
                ..DeleteOptions::default()
            },
        )
        .await
        .unwrap();

    assert_eq!((deleted_file_link, deleted_dir_link), (1, 1));
    assert_eq!(paths(&snapshot(fs).await), ["real", "real/f.txt"]);
    assert_eq!(read_text(fs, "real/f.txt").await, "kept\n");
}

pub async fn move_and_copy_carry_the_link_itself(fs: &dyn Filesystem) {
    put(fs, "f.txt", "x").await;
    link(fs, "l", "f.txt").await;

    fs.rename(&p("l"), &p("moved/l"), TransferOptions::default())
        .await
        .unwrap();
    fs.copy(&p("moved/l"), &p("copied"), TransferOptions::default())
        .await
        .unwrap();

    assert_eq!(kind(fs, "l").await, None);
    for path in ["moved/l", "copied"] {
        let stat = fs.stat(&p(path)).await.unwrap();
        assert_eq!(stat.kind, FileKind::Symlink, "{path}");
        assert_eq!(stat.symlink_target.as_deref(), Some("f.txt"), "{path}");
    }
    assert_eq!(read_text(fs, "f.txt").await, "x");
}

pub async fn mkdir_over_a_link_is_already_exists(fs: &dyn Filesystem) {
    link(fs, "l", "somewhere").await;
    let before = snapshot(fs).await;

    let result = fs
        .mkdir(
            &p("l"),
            MkdirOptions {
                exist_ok: true,
                ..MkdirOptions::default()
            },
        )
        .await;

    expect_err(result, "ALREADY_EXISTS");
    assert_eq!(snapshot(fs).await, before);
}

pub async fn glob_and_grep_skip_links(fs: &dyn Filesystem) {
    put(fs, "real/f.txt", "needle\n").await;
    link(fs, "l", "real/f.txt").await;
    link(fs, "d", "real").await;

    let globbed = fs.glob(GlobQuery::new("**")).await.unwrap();
    let (matches, _) = grep_all(fs, GrepQuery::new("needle")).await.unwrap();

    assert_eq!(globbed.paths, [p("real/f.txt")]);
    assert_eq!(locations(&matches), [("real/f.txt", 1)]);
}
