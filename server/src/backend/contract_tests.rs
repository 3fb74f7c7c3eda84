//! The [`Backend`] contract, written once against the trait and run
//! unchanged on every backend (`memory::*` and `directory::*` tests): a
//! backend keeps the rules of [`super`] when it passes this suite, not
//! when it compiles. What only one backend can show (files changed behind
//! its back, symlinks, its staging directory) is tested beside it.

use super::{Backend, CommitMode, Content, OpenFile, Patch, PatchRange, StagedFile};
use crate::directory::DirectoryBackend;
use crate::memory::MemoryBackend;
use std::io::Read;
use wsfs::{CanonicalPath, Error, FileKind, Metadata, PathLimits, Permissions, Result};

const DIR: Permissions = Permissions::DIRECTORY_DEFAULT;

/// A backend under test, with what it keeps outside the workspace.
trait Subject {
    type B: Backend;
    fn new() -> Self;
    fn backend(&self) -> &Self::B;
    /// Temporary entries the backend still holds (DIRECTORY: anything in
    /// its staging directory, and reserved names in the workspace): none
    /// once a staged file is dropped or a change has failed or finished.
    fn leftovers(&self) -> Vec<String>;
}

struct Memory(MemoryBackend);

impl Subject for Memory {
    type B = MemoryBackend;

    fn new() -> Self {
        Memory(MemoryBackend::new())
    }

    fn backend(&self) -> &MemoryBackend {
        &self.0
    }

    /// Staged bytes live in the staged value itself: nothing is left once
    /// it is dropped.
    fn leftovers(&self) -> Vec<String> {
        Vec::new()
    }
}

struct Directory {
    tmp: tempfile::TempDir,
    backend: DirectoryBackend,
}

impl Subject for Directory {
    type B = DirectoryBackend;

    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (root, staging) = (tmp.path().join("ws"), tmp.path().join("staging"));
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&staging).unwrap();
        let backend = DirectoryBackend::open(&root, &staging).unwrap();
        Directory { tmp, backend }
    }

    fn backend(&self) -> &DirectoryBackend {
        &self.backend
    }

    fn leftovers(&self) -> Vec<String> {
        let staged = names(&self.tmp.path().join("staging"));
        let mut workspace = Vec::new();
        collect_reserved(&self.tmp.path().join("ws"), &mut workspace);
        staged.into_iter().chain(workspace).collect()
    }
}

/// The names in `dir`, sorted.
pub(crate) fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn collect_reserved(dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with(super::TEMP_PREFIX) {
            out.push(entry.path().display().to_string());
        } else if entry.file_type().unwrap().is_dir() {
            collect_reserved(&entry.path(), out);
        }
    }
}

pub(crate) fn p(s: &str) -> CanonicalPath {
    CanonicalPath::parse(s, &PathLimits::default()).unwrap()
}

pub(crate) fn commit<B: Backend>(
    b: &B,
    path: &str,
    bytes: &[u8],
    append: bool,
) -> Result<Metadata> {
    let mut staged = b.stage()?;
    staged.write_chunk(bytes)?;
    let mode = CommitMode {
        append,
        create_parents: true,
        ..CommitMode::default()
    };
    b.commit(staged, &p(path), mode)
}

pub(crate) fn write<B: Backend>(b: &B, path: &str, bytes: &[u8]) -> Result<Metadata> {
    commit(b, path, bytes, false)
}

pub(crate) fn read<B: Backend>(b: &B, path: &str) -> Result<Vec<u8>> {
    read_open(b.open(&p(path))?)
}

pub(crate) fn read_open(open: OpenFile) -> Result<Vec<u8>> {
    Ok(read_content(open.content))
}

pub(crate) fn read_content(content: Content) -> Vec<u8> {
    match content {
        Content::Disk(mut file) => {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).unwrap();
            bytes
        }
        Content::Memory(bytes) => bytes.to_vec(),
    }
}

pub(crate) fn paths(list: &[Metadata]) -> Vec<&str> {
    list.iter().map(|m| m.path.as_str()).collect()
}

pub(crate) fn walk<B: Backend>(b: &B, base: &str) -> Vec<String> {
    b.walk_files(&p(base))
        .unwrap()
        .map(|r| r.unwrap().as_str().to_string())
        .collect()
}

/// The paths of the workspace's top level.
fn top<B: Backend>(b: &B) -> Vec<String> {
    let (listed, _) = b.list(&CanonicalPath::root(), 1, None, 1000).unwrap();
    paths(&listed).into_iter().map(str::to_string).collect()
}

/// Every contract test below, once per backend.
macro_rules! contract_suite {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[test]
                fn $test() {
                    super::$test(&<super::Memory as super::Subject>::new());
                }
            )*
        }
        mod directory {
            $(
                #[test]
                fn $test() {
                    super::$test(&<super::Directory as super::Subject>::new());
                }
            )*
        }
    };
}

contract_suite!(
    commit_then_open_round_trips,
    append_adds_to_existing_content_and_creates_missing_file,
    an_open_file_keeps_reading_the_version_it_opened,
    overwrite_and_append_keep_the_file_permissions,
    commit_errors_name_the_problem_and_change_nothing,
    list_is_in_full_path_byte_order,
    list_of_a_file_or_a_missing_path_fails,
    walk_yields_regular_files_in_path_order,
    versions_grow_with_every_change_even_across_delete,
    remove_follows_the_rules,
    mkdir_follows_the_rules,
    rename_moves_files_and_whole_directories,
    copy_copies_files_and_whole_directories,
    a_file_in_the_middle_of_a_path_is_not_a_directory,
    staged_files_are_never_listed_and_dropped_ones_leave_nothing,
    reserved_temp_names_are_refused,
    a_patch_commits_whole_and_a_refused_one_leaves_nothing,
    links_are_made_listed_and_never_followed,
);

fn commit_then_open_round_trips<S: Subject>(s: &S) {
    let b = s.backend();
    let meta = write(b, "src/a.rs", b"fn main() {}\n").unwrap();
    assert_eq!(meta.kind, FileKind::File);
    assert_eq!(meta.size, 13);
    assert_eq!(read(b, "src/a.rs").unwrap(), b"fn main() {}\n");
}

fn append_adds_to_existing_content_and_creates_missing_file<S: Subject>(s: &S) {
    let b = s.backend();
    commit(b, "log", b"one\n", true).unwrap();
    let meta = commit(b, "log", b"two\n", true).unwrap();
    assert_eq!(meta.size, 8);
    assert_eq!(read(b, "log").unwrap(), b"one\ntwo\n");
}

fn an_open_file_keeps_reading_the_version_it_opened<S: Subject>(s: &S) {
    let b = s.backend();
    write(b, "f", b"old").unwrap();
    let open = b.open(&p("f")).unwrap();
    write(b, "f", b"new content").unwrap();
    assert_eq!(read_open(open).unwrap(), b"old");
    assert_eq!(read(b, "f").unwrap(), b"new content");
}

fn overwrite_and_append_keep_the_file_permissions<S: Subject>(s: &S) {
    let b = s.backend();
    let bits = Permissions::new(0o751).unwrap();
    write(b, "run.sh", b"#!/bin/sh\n").unwrap();
    b.set_attributes(&p("run.sh"), Some(bits), None).unwrap();
    write(b, "run.sh", b"#!/bin/sh\necho hi\n").unwrap();
    let meta = commit(b, "run.sh", b"echo bye\n", true).unwrap();
    assert_eq!(meta.permissions, bits);
    assert_eq!(b.metadata(&p("run.sh")).unwrap().unwrap().permissions, bits);
}

fn commit_errors_name_the_problem_and_change_nothing<S: Subject>(s: &S) {
    let b = s.backend();
    write(b, "file", b"x").unwrap();
    b.mkdir(&p("dir"), false, DIR).unwrap();
    let mut staged = b.stage().unwrap();
    staged.write_chunk(b"data").unwrap();
    let no_parents = CommitMode {
        append: false,
        create_parents: false,
        ..CommitMode::default()
    };
    match b.commit(staged, &p("missing/deeper/f"), no_parents) {
        Err(Error::FileNotFound { path }) => assert_eq!(path, "missing/deeper"),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(write(b, "file/f", b"x"), Err(Error::NotADirectory { path }) if path == "file")
    );
    assert!(matches!(
        write(b, "dir", b"x"),
        Err(Error::IsADirectory { .. })
    ));
    assert!(matches!(
        write(b, "", b"x"),
        Err(Error::IsADirectory { .. })
    ));
    assert_eq!(top(b), ["dir", "file"]);
    assert_eq!(read(b, "file").unwrap(), b"x");
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

fn list_is_in_full_path_byte_order<S: Subject>(s: &S) {
    let b = s.backend();
    for f in ["a/b", "a/c/d", "a.txt", "a-b", "b", "A"] {
        write(b, f, b"x").unwrap();
    }
    let (all, truncated) = b.list(&CanonicalPath::root(), 10, None, 100).unwrap();
    assert!(!truncated);
    assert_eq!(
        paths(&all),
        ["A", "a", "a-b", "a.txt", "a/b", "a/c", "a/c/d", "b"]
    );
    assert_eq!(all[1].kind, FileKind::Directory);

    let (shallow, _) = b.list(&CanonicalPath::root(), 1, None, 100).unwrap();
    assert_eq!(paths(&shallow), ["A", "a", "a-b", "a.txt", "b"]);
    let (sub, _) = b.list(&p("a"), 1, None, 100).unwrap();
    assert_eq!(paths(&sub), ["a/b", "a/c"]);

    let (first, truncated) = b.list(&CanonicalPath::root(), 10, None, 5).unwrap();
    assert!(truncated);
    assert_eq!(paths(&first), ["A", "a", "a-b", "a.txt", "a/b"]);
    let (exact, truncated) = b.list(&CanonicalPath::root(), 10, None, 8).unwrap();
    assert!(!truncated);
    assert_eq!(exact.len(), 8);

    // Paged: each page starts after the last entry of the one before.
    let (second, truncated) = b
        .list(&CanonicalPath::root(), 10, Some(&p("a/b")), 5)
        .unwrap();
    assert!(!truncated);
    assert_eq!(paths(&second), ["a/c", "a/c/d", "b"]);
    let after = |cursor: &str, depth: u32| {
        let (page, _) = b
            .list(&CanonicalPath::root(), depth, Some(&p(cursor)), 100)
            .unwrap();
        paths(&page)
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(after("a-b", 10), ["a.txt", "a/b", "a/c", "a/c/d", "b"]);
    // A subtree wholly before the cursor is skipped, one it starts in is
    // entered; a cursor need not name an entry.
    assert_eq!(after("a/c/d", 10), ["b"]);
    assert_eq!(after("a/bz", 10), ["a/c", "a/c/d", "b"]);
    assert_eq!(after("a", 1), ["a-b", "a.txt", "b"]);
    assert_eq!(after("b", 10), Vec::<String>::new());
    let (sub, _) = b.list(&p("a"), 1, Some(&p("a/b")), 100).unwrap();
    assert_eq!(paths(&sub), ["a/c"]);
}

fn list_of_a_file_or_a_missing_path_fails<S: Subject>(s: &S) {
    let b = s.backend();
    write(b, "f", b"x").unwrap();
    assert!(matches!(
        b.list(&p("f"), 1, None, 10),
        Err(Error::NotADirectory { .. })
    ));
    assert!(matches!(
        b.list(&p("nope"), 1, None, 10),
        Err(Error::FileNotFound { .. })
    ));
}

fn walk_yields_regular_files_in_path_order<S: Subject>(s: &S) {
    let b = s.backend();
    for f in ["a/b", "a/c/d", "a.txt", "a-b", "z"] {
        write(b, f, b"x").unwrap();
    }
    b.mkdir(&p("empty"), false, DIR).unwrap();
    assert_eq!(walk(b, ""), ["a-b", "a.txt", "a/b", "a/c/d", "z"]);
    assert_eq!(walk(b, "a"), ["a/b", "a/c/d"]);
    assert_eq!(walk(b, "a.txt"), ["a.txt"]);
    assert!(walk(b, "missing").is_empty());
    assert!(walk(b, "empty").is_empty());
}

fn versions_grow_with_every_change_even_across_delete<S: Subject>(s: &S) {
    let b = s.backend();
    let v1 = write(b, "f", b"one").unwrap().version;
    assert_eq!(b.metadata(&p("f")).unwrap().unwrap().version, v1);
    assert_eq!(b.open(&p("f")).unwrap().meta.version, v1);
    let (listed, _) = b.list(&CanonicalPath::root(), 1, None, 10).unwrap();
    assert_eq!(listed[0].version, v1);

    let v2 = write(b, "f", b"two").unwrap().version;
    assert!(v2 > v1);
    let v3 = commit(b, "f", b"+three", true).unwrap().version;
    assert!(v3 > v2);
    b.remove(&p("f"), false).unwrap();
    let v4 = write(b, "f", b"again").unwrap().version;
    assert!(v4 > v3);
    let bits = Permissions::new(0o600).unwrap();
    let v5 = b.set_attributes(&p("f"), Some(bits), None).unwrap().version;
    assert!(v5 > v4);
}

fn remove_follows_the_rules<S: Subject>(s: &S) {
    let b = s.backend();
    for f in ["f", "d/x", "d/e/y"] {
        write(b, f, b"x").unwrap();
    }
    b.mkdir(&p("empty"), false, DIR).unwrap();
    assert_eq!(b.remove(&p("f"), false).unwrap(), 1);
    assert_eq!(b.remove(&p("empty"), false).unwrap(), 1);
    assert!(matches!(
        b.remove(&p("d"), false),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    assert!(matches!(
        b.remove(&p("f"), false),
        Err(Error::FileNotFound { .. })
    ));
    assert!(matches!(
        b.remove(&CanonicalPath::root(), false),
        Err(Error::DirectoryNotEmpty { .. })
    ));
    assert_eq!(b.remove(&p("d"), true).unwrap(), 4);
    write(b, "g", b"x").unwrap();
    write(b, "h/i", b"x").unwrap();
    assert_eq!(b.remove(&CanonicalPath::root(), true).unwrap(), 3);
    assert_eq!(
        b.metadata(&CanonicalPath::root()).unwrap().unwrap().kind,
        FileKind::Directory
    );
    assert!(top(b).is_empty());
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    assert_eq!(b.remove(&CanonicalPath::root(), false).unwrap(), 0);
}

fn mkdir_follows_the_rules<S: Subject>(s: &S) {
    let b = s.backend();
    assert!(b.mkdir(&p("d"), false, DIR).unwrap());
    assert!(!b.mkdir(&p("d"), false, DIR).unwrap());
    assert!(!b.mkdir(&CanonicalPath::root(), false, DIR).unwrap());
    write(b, "f", b"x").unwrap();
    assert!(matches!(
        b.mkdir(&p("f"), false, DIR),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(
        matches!(b.mkdir(&p("x/y"), false, DIR), Err(Error::FileNotFound { path }) if path == "x")
    );
    assert!(b.mkdir(&p("x/y/z"), true, DIR).unwrap());
    assert_eq!(
        b.metadata(&p("x/y")).unwrap().unwrap().kind,
        FileKind::Directory
    );
}

fn rename_moves_files_and_whole_directories<S: Subject>(s: &S) {
    let b = s.backend();
    for f in ["d/a", "d/sub/b", "f", "g", "other/old"] {
        write(b, f, f.as_bytes()).unwrap();
    }
    assert_eq!(b.rename(&p("f"), &p("moved/f"), false, true).unwrap(), 1);
    assert_eq!(read(b, "moved/f").unwrap(), b"f");
    assert!(b.metadata(&p("f")).unwrap().is_none());
    assert!(matches!(
        b.rename(&p("g"), &p("nope/g"), false, false),
        Err(Error::FileNotFound { .. })
    ));
    assert!(matches!(
        b.rename(&p("g"), &p("moved/f"), false, false),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        b.rename(&p("g"), &p("d"), true, false),
        Err(Error::IsADirectory { .. })
    ));
    assert!(matches!(
        b.rename(&p("d"), &p("d/sub/x"), false, false),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        b.rename(&p("d/sub"), &p("d"), true, false),
        Err(Error::InvalidArgument { .. })
    ));

    assert_eq!(b.rename(&p("g"), &p("moved/f"), true, false).unwrap(), 1);
    assert_eq!(read(b, "moved/f").unwrap(), b"g");
    // A directory replaces a directory whole: `other/old` goes.
    assert_eq!(b.rename(&p("d"), &p("other"), true, false).unwrap(), 4);
    assert_eq!(walk(b, ""), ["moved/f", "other/a", "other/sub/b"]);
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

fn copy_copies_files_and_whole_directories<S: Subject>(s: &S) {
    let b = s.backend();
    for f in ["d/a", "d/sub/b", "f", "other/old"] {
        write(b, f, f.as_bytes()).unwrap();
    }
    assert_eq!(b.copy(&p("f"), &p("c/f"), false, true).unwrap(), 1);
    assert_eq!(read(b, "c/f").unwrap(), b"f");
    assert_eq!(read(b, "f").unwrap(), b"f");
    assert!(matches!(
        b.copy(&p("f"), &p("c/f"), false, false),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 4);
    assert_eq!(b.copy(&p("d"), &p("other"), true, false).unwrap(), 4);
    assert_eq!(
        walk(b, ""),
        [
            "c/f",
            "d/a",
            "d/sub/b",
            "e/a",
            "e/sub/b",
            "f",
            "other/a",
            "other/sub/b"
        ]
    );
    assert_eq!(read(b, "e/sub/b").unwrap(), b"d/sub/b");
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

fn a_file_in_the_middle_of_a_path_is_not_a_directory<S: Subject>(s: &S) {
    let b = s.backend();
    write(b, "f", b"x").unwrap();
    assert!(matches!(b.metadata(&p("f/x")), Err(Error::NotADirectory { path }) if path == "f"));
    assert!(matches!(
        b.open(&p("f/x")),
        Err(Error::NotADirectory { .. })
    ));
    assert!(matches!(
        b.mkdir(&p("f/x"), true, DIR),
        Err(Error::NotADirectory { .. })
    ));
}

fn staged_files_are_never_listed_and_dropped_ones_leave_nothing<S: Subject>(s: &S) {
    let b = s.backend();
    let mut staged = b.stage().unwrap();
    staged.write_chunk(b"pending").unwrap();
    assert_eq!(staged.len(), 7);
    assert!(b
        .list(&CanonicalPath::root(), 5, None, 100)
        .unwrap()
        .0
        .is_empty());
    assert!(walk(b, "").is_empty());
    drop(staged);
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    assert!(top(b).is_empty());
}

fn reserved_temp_names_are_refused<S: Subject>(s: &S) {
    let b = s.backend();
    let reserved = format!("{}leftover", super::TEMP_PREFIX);
    let nested = format!("d/{}x", super::TEMP_PREFIX);
    assert!(matches!(
        b.metadata(&p(&reserved)),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        write(b, &nested, b"x"),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        b.mkdir(&p(&reserved), true, DIR),
        Err(Error::InvalidPath { .. })
    ));
    assert!(top(b).is_empty());
}

/// Commits a patch of `path` whose ranges are `(offset, bytes)`.
fn patch<B: Backend>(
    b: &B,
    path: &str,
    truncate_to: Option<u64>,
    ranges: &[(u64, &[u8])],
    create_missing: bool,
) -> Result<Metadata> {
    let mut staged = b.stage()?;
    let mut patch = Patch {
        truncate_to,
        create_missing,
        ..Patch::default()
    };
    for (offset, bytes) in ranges {
        staged.write_chunk(bytes)?;
        patch.ranges.push(PatchRange {
            offset: *offset,
            len: bytes.len() as u64,
        });
    }
    let mode = CommitMode {
        create_parents: true,
        ..CommitMode::default()
    };
    b.commit_patch(staged, &p(path), &patch, mode)
}

fn a_patch_commits_whole_and_a_refused_one_leaves_nothing<S: Subject>(s: &S) {
    let b = s.backend();
    let old = write(b, "f.bin", b"0123456789").unwrap();
    let reader = b.open(&p("f.bin")).unwrap();

    let meta = patch(b, "f.bin", Some(4), &[(6, b"xy"), (1, b"A")], false).unwrap();

    assert_eq!(meta.size, 8);
    assert!(meta.version > old.version);
    assert_eq!(read(b, "f.bin").unwrap(), b"0A23\0\0xy");
    assert_eq!(read_open(reader).unwrap(), b"0123456789", "the old version");
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
    let made = patch(b, "new/g.bin", None, &[(1, b"g")], true).unwrap();
    assert_eq!(
        (made.size, read(b, "new/g.bin").unwrap()),
        (2, b"\0g".to_vec())
    );

    b.mkdir(&p("d"), true, DIR).unwrap();
    b.symlink(&p("l"), "f.bin", false).unwrap();
    let before = read(b, "f.bin").unwrap();
    let refusals = [
        ("missing", patch(b, "missing", None, &[(0, b"x")], false)),
        ("d", patch(b, "d", None, &[(0, b"x")], true)),
        ("l", patch(b, "l", None, &[(0, b"x")], true)),
    ];
    for (path, refused) in refusals {
        let reason = refused.unwrap_err().reason();
        let expected = match path {
            "missing" => "FILE_NOT_FOUND",
            "d" => "IS_A_DIRECTORY",
            _ => "PERMISSION_DENIED",
        };
        assert_eq!(reason, expected, "{path}");
    }
    assert!(b.metadata(&p("missing")).unwrap().is_none());
    assert_eq!(read(b, "f.bin").unwrap(), before);
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}

fn links_are_made_listed_and_never_followed<S: Subject>(s: &S) {
    let b = s.backend();
    write(b, "f.txt", b"target").unwrap();

    let made = b.symlink(&p("d/l"), "../f.txt", true).unwrap();

    assert_eq!(made.kind, FileKind::Symlink);
    assert_eq!(made.symlink_target.as_deref(), Some("../f.txt"));
    assert_eq!(made.size, 8);
    let listed = b.list(&p("d"), 1, None, 10).unwrap().0;
    assert_eq!(listed[0].symlink_target.as_deref(), Some("../f.txt"));
    assert!(matches!(
        b.symlink(&p("d/l"), "x", true),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        b.open(&p("d/l")),
        Err(Error::PermissionDenied { .. })
    ));
    assert!(matches!(
        b.set_attributes(&p("d/l"), Some(DIR), None),
        Err(Error::PermissionDenied { .. })
    ));
    assert_eq!(walk(b, ""), ["f.txt"]);
    assert_eq!(b.remove(&p("d/l"), true).unwrap(), 1);
    assert_eq!(read(b, "f.txt").unwrap(), b"target");
    assert!(s.leftovers().is_empty(), "{:?}", s.leftovers());
}
