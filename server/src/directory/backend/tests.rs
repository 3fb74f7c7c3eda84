const DIR: wsfs::Permissions = wsfs::Permissions::DIRECTORY_DEFAULT;
use super::*;
use crate::backend::contract_tests::{commit, names, p, paths, read, read_content, walk, write};
use crate::backend::StagedFile;
use rustix::fs::RenameFlags;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{symlink, FileExt, PermissionsExt};
use std::path::PathBuf;

const SECRET: &[u8] = b"SECRET outside the workspace";

/// `base/ws` is the workspace, `base/staging` its staging directory,
/// `base/outside` and `base/sibling` must never be touched.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    staging: PathBuf,
    outside: PathBuf,
    sibling: PathBuf,
    backend: DirectoryBackend,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    let (root, staging) = (base.join("ws"), base.join("staging"));
    let (outside, sibling) = (base.join("outside"), base.join("sibling"));
    for d in [&root, &staging, &outside, &sibling] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(outside.join("only-outside.txt"), SECRET).unwrap();
    std::fs::write(sibling.join("other.txt"), b"sibling workspace").unwrap();
    let backend = DirectoryBackend::open(&root, &staging).unwrap();
    Fixture {
        _tmp: tmp,
        base,
        root,
        staging,
        outside,
        sibling,
        backend,
    }
}

impl Fixture {
    /// Everything outside the workspace and staging directories, by
    /// path, with file contents (links read as their targets).
    fn outside_state(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    out.insert(path.clone(), b"<dir>".to_vec());
                    walk(&path, out);
                } else if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).unwrap();
                    out.insert(path, target.into_os_string().into_encoded_bytes());
                } else {
                    out.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(&self.base).unwrap() {
            let path = entry.unwrap().path();
            if path != self.root && path != self.staging {
                out.insert(path.clone(), Vec::new());
                walk(&path, &mut out);
            }
        }
        out
    }

    fn staging_entries(&self) -> Vec<String> {
        names(&self.staging)
    }
}

#[track_caller]
fn assert_denied<T>(r: Result<T>) {
    match r.map(|_| ()) {
        Err(Error::PermissionDenied { .. }) => {}
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

#[test]
fn a_committed_file_is_a_file_in_the_workspace_directory() {
    let fx = fixture();
    write(&fx.backend, "src/a.rs", b"fn main() {}\n").unwrap();
    assert_eq!(
        std::fs::read(fx.root.join("src/a.rs")).unwrap(),
        b"fn main() {}\n"
    );
}

#[test]
fn overwrite_keeps_the_file_permissions() {
    let fx = fixture();
    write(&fx.backend, "run.sh", b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        fx.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    write(&fx.backend, "run.sh", b"#!/bin/sh\necho hi\n").unwrap();
    commit(&fx.backend, "run.sh", b"echo bye\n", true).unwrap();
    let mode = std::fs::metadata(fx.root.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
}

#[test]
fn walk_skips_symlinks() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "z", b"x").unwrap();
    symlink(fx.root.join("z"), fx.root.join("link")).unwrap();
    assert_eq!(walk(b, ""), ["z"]);
    assert!(walk(b, "link").is_empty());
}

#[test]
fn versions_grow_with_changes_made_outside_the_service() {
    let fx = fixture();
    let b = &fx.backend;
    let v1 = write(b, "f", b"one").unwrap().version;
    std::fs::write(fx.root.join("f"), b"changed outside").unwrap();
    let v2 = b.metadata(&p("f")).unwrap().unwrap().version;
    assert!(v2 > v1);
    let (listed, _) = b.list(&CanonicalPath::root(), 1, None, 10).unwrap();
    assert_eq!(listed[0].version, v2);

    b.mkdir(&p("d"), false, DIR).unwrap();
    let d1 = b.metadata(&p("d")).unwrap().unwrap().version;
    std::fs::write(fx.root.join("d/new"), b"x").unwrap();
    let d2 = b.metadata(&p("d")).unwrap().unwrap().version;
    assert!(d2 > d1);
    let created = b.metadata(&p("d/new")).unwrap().unwrap().version;
    assert!(created > d2);
}

#[test]
fn commit_aside_swaps_the_old_file_out_and_frees_it_when_dropped() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "a.txt", b"old").unwrap();
    // Someone else holds the old file open: it must stay whole.
    let mut reader = std::fs::File::open(fx.root.join("a.txt")).unwrap();
    let put = CommitMode {
        append: false,
        create_parents: true,
        ..CommitMode::default()
    };
    let mut staged = b.stage().unwrap();
    staged.write_chunk(b"new").unwrap();
    staged.finish().unwrap();

    let (meta, displaced) = b.commit_aside(staged, &p("a.txt"), put).unwrap();

    assert_eq!(meta.size, 3);
    assert_eq!(std::fs::read(fx.root.join("a.txt")).unwrap(), b"new");
    assert_eq!(names(&fx.root), ["a.txt"]);
    let displaced = displaced.expect("the old file is kept aside");
    assert_eq!(fx.staging_entries().len(), 1);
    let mut old = String::new();
    reader.read_to_string(&mut old).unwrap();
    assert_eq!(old, "old");
    drop(displaced);
    assert!(fx.staging_entries().is_empty());

    // Nothing to displace: a plain create.
    let staged = b.stage().unwrap();
    let (_, displaced) = b.commit_aside(staged, &p("d/b.txt"), put).unwrap();
    assert!(displaced.is_none());
    assert_eq!(std::fs::read(fx.root.join("d/b.txt")).unwrap(), b"");
    // A directory is never swapped out.
    let staged = b.stage().unwrap();
    assert!(matches!(
        b.commit_aside(staged, &p("d"), put),
        Err(Error::IsADirectory { .. })
    ));
    assert!(fx.root.join("d/b.txt").is_file());
    assert!(fx.staging_entries().is_empty());
}

#[test]
fn a_swapped_commit_replaces_the_file_and_leaves_nothing_aside() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "a.txt", b"old").unwrap();
    // A second name for the old file: a replacement leaves it whole.
    std::fs::hard_link(fx.root.join("a.txt"), fx.outside.join("old-link")).unwrap();
    // No intent record names the staged file: the old file is swapped out.
    let swap = CommitMode::default();
    for content in [&b"new"[..], b"newer"] {
        let mut staged = b.stage().unwrap();
        staged.write_chunk(content).unwrap();
        staged.finish().unwrap();
        let meta = b.commit(staged, &p("a.txt"), swap).unwrap();
        assert_eq!(meta.size, content.len() as u64);
        assert_eq!(std::fs::read(fx.root.join("a.txt")).unwrap(), content);
        assert_eq!(names(&fx.root), ["a.txt"]);
        // The old file went with the commit, not later.
        assert!(fx.staging_entries().is_empty());
    }
    assert_eq!(std::fs::read(fx.outside.join("old-link")).unwrap(), b"old");
    // Nothing there: a plain create; a directory is never swapped out.
    let staged = b.stage().unwrap();
    b.commit(
        staged,
        &p("d/b.txt"),
        CommitMode {
            create_parents: true,
            ..swap
        },
    )
    .unwrap();
    let staged = b.stage().unwrap();
    assert!(matches!(
        b.commit(staged, &p("d"), swap),
        Err(Error::IsADirectory { .. })
    ));
    assert!(fx.root.join("d/b.txt").is_file());
    assert!(fx.staging_entries().is_empty());
}

#[test]
fn a_listed_file_replaced_before_it_is_opened_is_refused_for_what_it_became() {
    let fx = fixture();
    let b = &fx.backend;
    for name in ["link", "fifo", "dir", "gone", "file"] {
        write(b, &format!("d/{name}"), b"listed").unwrap();
    }
    let listed: Vec<Listed> = b
        .walk_listed(&CanonicalPath::root())
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert!(listed
        .iter()
        .all(|f| f.found_at::<rustix::fd::OwnedFd>().is_some()));
    // Each swapped after the walk listed it as a regular file.
    let d = fx.root.join("d");
    for name in ["link", "fifo", "dir", "gone"] {
        std::fs::remove_file(d.join(name)).unwrap();
    }
    symlink(fx.outside.join("secret.txt"), d.join("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        d.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
    std::fs::create_dir(d.join("dir")).unwrap();
    let before = fx.outside_state();
    let open = |name: &str| {
        let file = listed
            .iter()
            .find(|f| f.path.as_str() == format!("d/{name}"));
        b.open_listed(file.unwrap())
            .map(|(content, size)| (read_content(content), size))
    };
    assert!(matches!(open("link"), Err(Error::PermissionDenied { path, .. }) if path == "d/link"));
    // Opened without blocking, and refused before a byte is read.
    assert!(matches!(open("fifo"), Err(Error::PermissionDenied { path, .. }) if path == "d/fifo"));
    assert!(matches!(open("dir"), Err(Error::IsADirectory { path }) if path == "d/dir"));
    assert!(matches!(open("gone"), Err(Error::FileNotFound { .. })));
    assert_eq!(open("file").unwrap(), (b"listed".to_vec(), 6));
    assert_eq!(fx.outside_state(), before);
}

#[test]
fn reserved_temp_names_in_the_workspace_are_hidden() {
    let fx = fixture();
    let b = &fx.backend;
    std::fs::write(fx.root.join(".wsfs-tmp-leftover"), b"x").unwrap();
    write(b, "visible", b"x").unwrap();
    assert_eq!(
        paths(&b.list(&CanonicalPath::root(), 1, None, 10).unwrap().0),
        ["visible"]
    );
    assert_eq!(walk(b, ""), ["visible"]);
    assert_eq!(
        b.remove(&CanonicalPath::root(), false)
            .unwrap_err()
            .reason(),
        "DIRECTORY_NOT_EMPTY"
    );
    b.remove(&p("visible"), false).unwrap();
    assert_eq!(b.remove(&CanonicalPath::root(), false).unwrap(), 0);
}

#[test]
fn a_staging_directory_on_another_filesystem_still_commits_atomically() {
    let fx = fixture();
    let b = &fx.backend;
    b.cross_device.store(true, Ordering::Relaxed);
    write(b, "d/f", b"one").unwrap();
    commit(b, "d/f", b"+two", true).unwrap();
    assert_eq!(read(b, "d/f").unwrap(), b"one+two");
    write(b, "e/g", b"g").unwrap();
    assert_eq!(b.copy(&p("d"), &p("e"), true, false).unwrap(), 2);
    assert_eq!(b.rename(&p("e"), &p("d"), true, false).unwrap(), 2);
    assert_eq!(walk(b, ""), ["d/f"]);
    assert_eq!(names(&fx.root), ["d"]);
    assert_eq!(names(&fx.root.join("d")), ["f"]);
    assert!(fx.staging_entries().is_empty());
}

#[test]
fn names_that_are_not_utf8_are_skipped_but_removed_with_their_directory() {
    use std::os::unix::ffi::OsStrExt;
    let fx = fixture();
    let b = &fx.backend;
    write(b, "d/ok", b"x").unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"bad\xff");
    std::fs::write(fx.root.join("d").join(odd), b"x").unwrap();
    assert_eq!(paths(&b.list(&p("d"), 1, None, 10).unwrap().0), ["d/ok"]);
    assert_eq!(walk(b, ""), ["d/ok"]);
    assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 2);
    assert_eq!(b.remove(&p("d"), true).unwrap(), 3);
    assert_eq!(names(&fx.root), ["e"]);
}

#[test]
fn a_staging_directory_inside_the_root_is_refused() {
    let fx = fixture();
    let inner = fx.root.join("staging");
    std::fs::create_dir(&inner).unwrap();
    let opened = DirectoryBackend::open(&fx.root, &inner);
    assert!(matches!(opened, Err(Error::InvalidArgument { .. })));
}

#[test]
fn a_pipe_is_listed_but_never_opened_or_written() {
    let fx = fixture();
    let b = &fx.backend;
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        fx.root.join("pipe"),
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    assert_eq!(
        b.metadata(&p("pipe")).unwrap().unwrap().kind,
        FileKind::File
    );
    assert_denied(b.open(&p("pipe")));
    assert_denied(write(b, "pipe", b"x"));
    assert!(walk(b, "").is_empty());
    assert_eq!(b.remove(&p("pipe"), false).unwrap(), 1);
}

#[test]
fn a_symlink_to_an_outside_file_is_never_followed() {
    let fx = fixture();
    let b = &fx.backend;
    let before = fx.outside_state();
    symlink(fx.outside.join("secret.txt"), fx.root.join("link")).unwrap();

    assert_eq!(
        b.metadata(&p("link")).unwrap().unwrap().kind,
        FileKind::Symlink
    );
    let (listed, _) = b.list(&CanonicalPath::root(), 3, None, 10).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, FileKind::Symlink);
    assert_denied(b.open(&p("link")));
    assert_denied(write(b, "link", b"pwned"));
    assert_denied(commit(b, "link", b"pwned", true));
    assert!(walk(b, "").is_empty());

    // Copy and move work on the link itself.
    assert_eq!(b.copy(&p("link"), &p("copy"), false, false).unwrap(), 1);
    assert_eq!(
        b.metadata(&p("copy")).unwrap().unwrap().kind,
        FileKind::Symlink
    );
    assert_denied(b.open(&p("copy")));
    assert_eq!(b.rename(&p("copy"), &p("moved"), false, false).unwrap(), 1);
    assert_eq!(b.remove(&p("moved"), true).unwrap(), 1);
    assert_eq!(b.remove(&p("link"), true).unwrap(), 1);
    assert!(names(&fx.root).is_empty());
    assert_eq!(fx.outside_state(), before);
}

/// Links to an outside directory, to `..`, to a sibling workspace and
/// to `/etc`, used as a path component: every operation is refused.
#[test]
fn a_symlink_in_the_middle_of_a_path_is_permission_denied() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "f", b"inside").unwrap();
    let before = fx.outside_state();
    symlink(&fx.outside, fx.root.join("out")).unwrap();
    symlink("..", fx.root.join("up")).unwrap();
    symlink(&fx.sibling, fx.root.join("sib")).unwrap();
    symlink("/etc", fx.root.join("etc")).unwrap();
    for (link, inner) in [
        ("out", "secret.txt"),
        ("up", "outside/secret.txt"),
        ("sib", "other.txt"),
        ("etc", "passwd"),
    ] {
        let target = format!("{link}/{inner}");
        assert_denied(b.metadata(&p(&target)));
        assert_denied(b.open(&p(&target)));
        assert_denied(write(b, &target, b"pwned"));
        assert_denied(commit(b, &target, b"pwned", true));
        assert_denied(write(b, &format!("{link}/new.txt"), b"pwned"));
        assert_denied(b.list(&p(link), 1, None, 10));
        assert_denied(b.list(&p(&format!("{link}/{inner}")), 1, None, 10));
        assert_denied(b.mkdir(&p(&format!("{link}/d")), true, DIR));
        assert_denied(b.remove(&p(&target), true));
        assert_denied(b.rename(&p(&target), &p("stolen"), false, false));
        assert_denied(b.copy(&p(&target), &p("stolen"), false, false));
        assert_denied(b.rename(&p("f"), &p(&format!("{link}/f")), true, true));
        assert_denied(b.copy(&p("f"), &p(&format!("{link}/f")), true, true));
        assert_denied(b.walk_files(&p(&target)));
        assert!(walk(b, link).is_empty());
    }
    assert_eq!(walk(b, ""), ["f"]);
    let (listed, _) = b.list(&CanonicalPath::root(), 10, None, 100).unwrap();
    assert_eq!(paths(&listed), ["etc", "f", "out", "sib", "up"]);
    // Removing the links removes the links.
    for link in ["out", "up", "sib", "etc"] {
        assert_eq!(b.remove(&p(link), true).unwrap(), 1);
    }
    assert_eq!(names(&fx.root), ["f"]);
    assert_eq!(fx.outside_state(), before);
    assert!(fx.staging_entries().is_empty());
}

#[test]
fn a_path_refused_in_one_call_is_answered_by_the_walk_naming_the_culprit() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "a/b/c/f.txt", b"deep").unwrap();
    write(b, "a/file", b"x").unwrap();
    symlink("c", fx.root.join("a/b/in")).unwrap();
    symlink(&fx.outside, fx.root.join("a/b/out")).unwrap();
    let before = fx.outside_state();
    // Nothing in the way: found in one call, same bytes either way.
    assert_eq!(
        read_content(b.open_content(&p("a/b/c/f.txt")).unwrap()),
        b"deep"
    );
    assert_eq!(read(b, "a/b/c/f.txt").unwrap(), b"deep");
    // A link inside the root or out of it, at any depth: the walk
    // names it (as it always did), for a versioned open and a search.
    let deep = "goes through a symbolic link";
    let named = "is a symbolic link";
    for (path, culprit, said) in [
        ("a/b/in/f.txt", "a/b/in", named),
        ("a/b/in/x/f.txt", "a/b/in", deep),
        ("a/b/out/secret.txt", "a/b/out", named),
        ("a/b/out/d/secret.txt", "a/b/out", deep),
        ("a/b/in", "a/b/in", named),
    ] {
        let check = |r: Result<()>| match r {
            Err(Error::PermissionDenied {
                path: reported,
                message,
            }) => {
                assert_eq!(reported, culprit, "{path}");
                assert!(message.contains(said), "{path}: {message}");
            }
            other => panic!("{path}: expected PermissionDenied, got {other:?}"),
        };
        check(b.open(&p(path)).map(|_| ()));
        check(b.open_content(&p(path)).map(|_| ()));
    }
    for open in [
        |b: &DirectoryBackend, s: &str| b.open(&p(s)).map(|_| ()),
        |b: &DirectoryBackend, s: &str| b.open_content(&p(s)).map(|_| ()),
    ] {
        assert!(
            matches!(open(b, "a/file/x"), Err(Error::NotADirectory { path }) if path == "a/file")
        );
        assert!(
            matches!(open(b, "a/nope/f"), Err(Error::FileNotFound { path }) if path == "a/nope/f")
        );
        assert!(matches!(open(b, "a/b"), Err(Error::IsADirectory { path }) if path == "a/b"));
        assert!(matches!(open(b, ""), Err(Error::IsADirectory { .. })));
    }
    assert_eq!(fx.outside_state(), before);
}

#[test]
fn recursive_copy_and_remove_never_go_through_links() {
    let fx = fixture();
    let b = &fx.backend;
    write(b, "d/f", b"inside").unwrap();
    symlink(&fx.outside, fx.root.join("d/out")).unwrap();
    symlink("..", fx.root.join("d/up")).unwrap();
    let before = fx.outside_state();

    assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 4);
    assert_eq!(
        std::fs::read_link(fx.root.join("e/out")).unwrap(),
        fx.outside
    );
    assert_eq!(walk(b, ""), ["d/f", "e/f"]);
    let (listed, _) = b.list(&CanonicalPath::root(), 10, None, 100).unwrap();
    assert_eq!(
        paths(&listed),
        ["d", "d/f", "d/out", "d/up", "e", "e/f", "e/out", "e/up"]
    );
    assert_eq!(b.rename(&p("e"), &p("d"), true, false).unwrap(), 4);
    assert_eq!(b.remove(&p("d"), true).unwrap(), 4);
    assert_eq!(b.remove(&CanonicalPath::root(), true).unwrap(), 0);
    assert_eq!(fx.outside_state(), before);
    assert!(fx.staging_entries().is_empty());
}

/// Kind of what is at `path` in a test: Some(true) for a symlink.
fn is_link(path: &Path) -> Option<bool> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| m.file_type().is_symlink())
}

/// Writes "inside" to the file `path` (or to `path/name`, `path` being a
/// directory) without following a link at either step. The swapping
/// thread below must not escape by itself: the backend may put back,
/// unchanged, a link it moved aside, between the thread's removal of
/// that name and its write.
fn write_without_following(path: &Path, name: Option<&str>) {
    use rustix::fs::{Mode, OFlags};
    let file_flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW;
    let mode = Mode::from_raw_mode(0o644);
    let file = match name {
        None => rustix::fs::open(path, file_flags, mode),
        Some(name) => rustix::fs::open(path, OFlags::DIRECTORY | OFlags::NOFOLLOW, Mode::empty())
            .and_then(|dir| rustix::fs::openat(&dir, name, file_flags, mode)),
    };
    if let Ok(fd) = file {
        let _ = rustix::io::write(&fd, b"inside");
    }
}

/// Makes `real` a real entry (made by `make`) and `link` a symlink to
/// `target`, whatever is there now.
fn reset_pair(real: &Path, link: &Path, target: &Path, make: impl Fn(&Path)) {
    if matches!(
        (is_link(real), is_link(link)),
        (Some(false), Some(true)) | (Some(true), Some(false))
    ) {
        return;
    }
    for path in [real, link] {
        match is_link(path) {
            Some(true) => drop(std::fs::remove_file(path)),
            Some(false) if path.is_dir() => drop(std::fs::remove_dir_all(path)),
            Some(false) => drop(std::fs::remove_file(path)),
            None => {}
        }
    }
    make(real);
    let _ = symlink(target, link);
}

/// Another process keeps exchanging (`RENAME_EXCHANGE`) a directory
/// with a symlink to the outside directory, and a file with a symlink
/// to an outside file, while every kind of operation runs on and under
/// them. Nothing outside is ever read, listed, copied or changed.
#[test]
fn swapping_entries_for_symlinks_never_lets_an_operation_escape() {
    use std::sync::atomic::AtomicBool;
    let fx = fixture();
    let b = &fx.backend;
    let before = fx.outside_state();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (root, outside, stop) = (fx.root.clone(), fx.outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let boxed = root.join("box");
            let (sub, sub_link) = (boxed.join("sub"), boxed.join("sub-swap"));
            let (file, file_link) = (boxed.join("file"), boxed.join("file-swap"));
            let secret = outside.join("secret.txt");
            let mut swaps = 0u64;
            let exchange = |a: &Path, b: &Path| {
                let cwd = rustix::fs::CWD;
                rustix::fs::renameat_with(cwd, a, cwd, b, RenameFlags::EXCHANGE).is_ok()
            };
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if i.is_multiple_of(64) {
                    let _ = std::fs::create_dir(&boxed);
                    reset_pair(&sub, &sub_link, &outside, |p| {
                        let _ = std::fs::create_dir(p);
                        write_without_following(p, Some("f"));
                    });
                    reset_pair(&file, &file_link, &secret, |p| {
                        write_without_following(p, None);
                    });
                }
                i += 1;
                swaps += u64::from(exchange(&sub, &sub_link));
                swaps += u64::from(exchange(&file, &file_link));
            }
            swaps
        })
    };
    let leaked = |path: &str| path.contains("only-outside");
    let assert_inside = |r: Result<Vec<u8>>| {
        if let Ok(bytes) = r {
            let text = String::from_utf8_lossy(&bytes).to_string();
            assert!(!text.contains("SECRET"), "read through a link: {text}");
        }
    };
    for round in 0..400 {
        assert_inside(read(b, "box/file"));
        assert_inside(read(b, "box/sub/secret.txt"));
        assert_inside(read(b, "box/sub/f"));
        let _ = commit(b, "box/file", b"+appended", true);
        assert_inside(read(b, "box/file"));
        let _ = write(b, "box/sub/secret.txt", b"overwritten");
        let _ = commit(b, "box/sub/secret.txt", b"+appended", true);
        let _ = write(b, "box/sub/deep/new.txt", b"new");
        let _ = b.mkdir(&p("box/sub/made"), true, DIR);
        let _ = b.rename(&p("box/sub/f"), &p("box/sub/g"), true, false);
        let _ = b.copy(&p("box/file"), &p("copied-file"), true, false);
        assert_inside(read(b, "copied-file"));
        let _ = b.copy(&p("box"), &p("copy"), true, false);
        if let Ok(files) = b.walk_files(&CanonicalPath::root()) {
            for path in files.flatten() {
                assert!(!leaked(path.as_str()), "walked through a link: {path}");
                assert_inside(read(b, path.as_str()));
            }
        }
        if let Ok((listed, _)) = b.list(&CanonicalPath::root(), 10, None, 1000) {
            assert!(
                !listed.iter().any(|m| leaked(m.path.as_str())),
                "listed through a link"
            );
        }
        let _ = b.remove(&p("box/sub/secret.txt"), false);
        let _ = b.remove(&p("copy"), true);
        match round % 3 {
            0 => drop(b.remove(&p("box/sub"), true)),
            1 => drop(b.remove(&p("box"), true)),
            _ => drop(b.remove(&p("box/file"), false)),
        }
        assert_eq!(fx.outside_state(), before, "round {round}");
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 1000, "the race barely ran ({swaps} swaps)");
    assert_eq!(fx.outside_state(), before);
    assert!(fx.staging_entries().is_empty());
}

/// A sparse file of 256 MiB with 4 bytes of data in its middle, copied
/// alone and inside a directory, then appended to: every copy has its
/// holes and its data where they were.
#[test]
fn copies_and_appends_keep_a_sparse_file_s_holes() {
    use std::os::unix::fs::MetadataExt;
    let fx = fixture();
    let b = &fx.backend;
    let (len, at) = (256u64 << 20, 128u64 << 20);
    std::fs::create_dir(fx.root.join("d")).unwrap();
    let f = std::fs::File::create(fx.root.join("d/sparse.bin")).unwrap();
    f.set_len(len).unwrap();
    f.write_all_at(b"data", at).unwrap();
    b.copy(&p("d/sparse.bin"), &p("copy.bin"), false, false)
        .unwrap();
    b.copy(&p("d"), &p("e"), false, false).unwrap();
    commit(b, "copy.bin", b"+tail", true).unwrap();
    for (name, want_len) in [("copy.bin", len + 5), ("e/sparse.bin", len)] {
        let path = fx.root.join(name);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), want_len, "{name}");
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{name}: {} blocks",
            meta.blocks()
        );
        let mut data = [0u8; 4];
        File::open(&path)
            .unwrap()
            .read_exact_at(&mut data, at)
            .unwrap();
        assert_eq!(&data, b"data", "{name}");
    }
    let mut tail = [0u8; 5];
    File::open(fx.root.join("copy.bin"))
        .unwrap()
        .read_exact_at(&mut tail, len)
        .unwrap();
    assert_eq!(&tail, b"+tail");
}

/// Another process keeps exchanging a directory with a symlink (and a
/// file with a symlink) inside a directory being copied: every copy
/// either succeeds or fails with a contract reason, never INTERNAL.
#[test]
fn copying_a_directory_under_a_swap_race_answers_a_contract_reason() {
    use std::sync::atomic::AtomicBool;
    let fx = fixture();
    let b = &fx.backend;
    let boxed = fx.root.join("box");
    std::fs::create_dir(&boxed).unwrap();
    let (sub, sub_link) = (boxed.join("sub"), boxed.join("sub-swap"));
    let (file, file_link) = (boxed.join("file"), boxed.join("file-swap"));
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("f"), b"inside").unwrap();
    std::fs::write(&file, b"inside").unwrap();
    symlink(&fx.outside, &sub_link).unwrap();
    symlink(fx.outside.join("secret.txt"), &file_link).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let cwd = rustix::fs::CWD;
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in [(&sub, &sub_link), (&file, &file_link)] {
                    swaps += u64::from(
                        rustix::fs::renameat_with(cwd, a, cwd, b, RenameFlags::EXCHANGE).is_ok(),
                    );
                }
            }
            swaps
        })
    };
    let mut internal = Vec::new();
    for _ in 0..800 {
        if let Err(e @ Error::Internal { .. }) = b.copy(&p("box"), &p("copy"), true, false) {
            internal.push(e.to_string());
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 1000, "the race barely ran ({swaps} swaps)");
    assert!(
        internal.is_empty(),
        "{} INTERNAL answers: {:?}",
        internal.len(),
        &internal[..internal.len().min(5)]
    );
    assert!(fx.staging_entries().is_empty());
}

/// Waits (bounded) for the remover thread to empty `dir`.
fn emptied(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !names(dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "'{}' still holds {:?} after 60 s",
            dir.display(),
            names(dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_recursive_remove_takes_the_tree_out_at_once_and_removes_it_after() {
    let fx = fixture();
    let b = DirectoryBackend::open(&fx.root, &fx.staging)
        .unwrap()
        .removing_later();
    for f in ["d/a", "d/e/b", "d/e/c", "keep"] {
        write(&b, f, b"x").unwrap();
    }
    assert_eq!(b.remove(&p("d"), true).unwrap(), 5);
    assert_eq!(names(&fx.root), ["keep"]);
    assert_eq!(walk(&b, ""), ["keep"]);
    assert_eq!(
        crate::quota::usage(&b, &CanonicalPath::root())
            .unwrap()
            .files,
        1
    );
    emptied(&fx.staging);
    // Emptying the root keeps nothing but the root.
    write(&b, "d/a", b"x").unwrap();
    assert_eq!(b.remove(&CanonicalPath::root(), true).unwrap(), 3);
    assert!(names(&fx.root).is_empty());
    emptied(&fx.staging);
}

/// With the staging directory on another filesystem, a removed tree waits
/// in the root's hidden [`REMOVING_DIR`]: no listing, walk or quota count
/// sees it, and [`DirectoryBackend::finish_removals`] (at start) removes
/// what a stop left there.
#[test]
fn across_filesystems_a_removed_tree_waits_in_a_hidden_directory_of_the_root() {
    let fx = fixture();
    let b = &fx.backend;
    b.cross_device.store(true, Ordering::Relaxed);
    write(b, "d/a", b"x").unwrap();
    write(b, "d/e/b", b"x").unwrap();
    write(b, "keep", b"x").unwrap();
    assert_eq!(b.remove(&p("d"), true).unwrap(), 4);
    assert_eq!(names(&fx.root), [REMOVING_DIR, "keep"]);
    assert!(fx.staging_entries().is_empty());
    // What a stop left half removed there.
    let left = fx.root.join(REMOVING_DIR).join(".wsfs-tmp-left");
    std::fs::create_dir_all(left.join("deep")).unwrap();
    std::fs::write(left.join("deep/file"), b"x").unwrap();
    assert_eq!(
        paths(&b.list(&CanonicalPath::root(), 8, None, 100).unwrap().0),
        ["keep"]
    );
    assert_eq!(walk(b, ""), ["keep"]);
    assert_eq!(
        crate::quota::usage(b, &CanonicalPath::root())
            .unwrap()
            .files,
        1
    );
    let snapshotted: Vec<String> = crate::directory::snapshots::tree(b)
        .unwrap()
        .into_iter()
        .map(|e| e.path.as_str().to_string())
        .collect();
    assert_eq!(snapshotted, ["keep"]);
    assert!(DirectoryBackend::removals_left(&fx.root));
    b.finish_removals().unwrap();
    assert_eq!(names(&fx.root), ["keep"]);
    assert!(!DirectoryBackend::removals_left(&fx.root));
    b.finish_removals().unwrap();
}

#[test]
fn a_patch_copies_the_file_with_its_holes_and_leaves_the_old_inode_whole() {
    use std::os::unix::fs::MetadataExt;
    let fx = fixture();
    let b = &fx.backend;
    let size = 8u64 << 20;
    let file = File::create(fx.root.join("sparse.bin")).unwrap();
    file.write_all_at(b"head", 0).unwrap();
    file.write_all_at(b"tail", size - 4).unwrap();
    drop(file);
    let sparse = std::fs::metadata(fx.root.join("sparse.bin"))
        .unwrap()
        .blocks()
        * 512
        < size;
    std::fs::hard_link(fx.root.join("sparse.bin"), fx.outside.join("old")).unwrap();
    let patch = crate::backend::Patch {
        ranges: vec![crate::backend::PatchRange { offset: 4, len: 4 }],
        ..Default::default()
    };
    for cross_device in [false, true] {
        b.cross_device.store(cross_device, Ordering::Relaxed);
        let mut staged = b.stage().unwrap();
        staged.write_chunk(b"BODY").unwrap();
        let mode = CommitMode::default();

        let meta = b
            .commit_patch(staged, &p("sparse.bin"), &patch, mode)
            .unwrap();

        assert_eq!(meta.size, size);
        let now = std::fs::read(fx.root.join("sparse.bin")).unwrap();
        assert_eq!(&now[..8], b"headBODY");
        assert_eq!(&now[now.len() - 4..], b"tail");
        assert!(now[8..now.len() - 4].iter().all(|&byte| byte == 0));
        if sparse {
            let blocks = std::fs::metadata(fx.root.join("sparse.bin"))
                .unwrap()
                .blocks();
            assert!(blocks * 512 < size, "the hole was filled: {blocks} blocks");
        }
        assert_eq!(names(&fx.root), ["sparse.bin"]);
        assert!(fx.staging_entries().is_empty());
    }
    let old = std::fs::read(fx.outside.join("old")).unwrap();
    assert_eq!(&old[..8], b"head\0\0\0\0", "the old inode was written to");
}

#[test]
fn a_small_write_makes_no_staged_file_until_its_commit_and_leaves_none() {
    let fx = fixture();
    let b = &fx.backend;
    std::fs::create_dir(fx.root.join("d")).unwrap();
    let small = vec![b's'; staging::SMALL_STAGE_BYTES as usize];
    let mut staged = b.stage().unwrap();
    staged.write_chunk(&small[..10]).unwrap();
    staged.write_chunk(&small[10..]).unwrap();
    assert!(
        fx.staging_entries().is_empty(),
        "{} bytes wait in memory",
        small.len()
    );
    let meta = b
        .commit(staged, &p("d/small.bin"), CommitMode::default())
        .unwrap();
    assert_eq!(meta.size, small.len() as u64);
    assert_eq!(std::fs::read(fx.root.join("d/small.bin")).unwrap(), small);
    assert_eq!(
        names(&fx.root.join("d")),
        ["small.bin"],
        "no temporary name is left"
    );
    assert!(fx.staging_entries().is_empty());

    // One byte more and the bytes are in a staged file, renamed into place.
    let mut staged = b.stage().unwrap();
    staged.write_chunk(&small).unwrap();
    staged.write_chunk(b"!").unwrap();
    assert_eq!(fx.staging_entries().len(), 1);
    b.commit(staged, &p("d/large.bin"), CommitMode::default())
        .unwrap();
    let large = std::fs::read(fx.root.join("d/large.bin")).unwrap();
    assert_eq!((large.len(), large.last()), (small.len() + 1, Some(&b'!')));
    assert!(fx.staging_entries().is_empty());

    // A small patch of a small file, from memory.
    let mut staged = b.stage().unwrap();
    staged.write_chunk(b"PP").unwrap();
    let patch = Patch {
        truncate_to: None,
        ranges: vec![crate::backend::PatchRange { offset: 1, len: 2 }],
        create_missing: false,
    };
    b.commit_patch(staged, &p("d/small.bin"), &patch, CommitMode::default())
        .unwrap();
    let patched = std::fs::read(fx.root.join("d/small.bin")).unwrap();
    assert_eq!(&patched[..4], b"sPPs");
    assert_eq!(patched.len(), small.len());
    assert_eq!(names(&fx.root.join("d")), ["large.bin", "small.bin"]);
    assert!(fx.staging_entries().is_empty());

    // Bytes an intent record names are put in a staged file first.
    let mut staged = b.stage().unwrap();
    staged.write_chunk(b"named").unwrap();
    assert_eq!(staged.journal_name(), None);
    staged.finish().unwrap();
    let name = staged.journal_name().expect("a staged file now");
    assert_eq!(fx.staging_entries(), [name]);
}

#[test]
fn a_directory_holding_only_temporary_files_a_crash_left_is_removed_as_empty() {
    let fx = fixture();
    let b = &fx.backend;
    for dir in ["left", "kept"] {
        std::fs::create_dir(fx.root.join(dir)).unwrap();
        std::fs::write(fx.root.join(dir).join(format!("{TEMP_PREFIX}x")), b"half").unwrap();
    }
    std::fs::write(fx.root.join("kept/real.txt"), b"real").unwrap();
    let (listed, _) = b.list(&p("left"), 1, None, 100).unwrap();
    assert!(listed.is_empty(), "listings never show it");

    assert_eq!(b.remove(&p("left"), false).unwrap(), 1);
    assert!(!fx.root.join("left").exists());

    // Beside a real file: not empty, and nothing in it is touched.
    assert!(matches!(
        b.remove(&p("kept"), false),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    assert_eq!(
        names(&fx.root.join("kept")),
        [format!("{TEMP_PREFIX}x"), "real.txt".to_string()]
    );
}
