//! The POSIX behaviour suite: what programs expect of a directory, written
//! once against plain system calls on a [`Subject`] (an empty directory and
//! what it is known to accept), and run against a local temporary directory
//! as the reference and against `wsfs mount` of each backend
//! (`tests/posix.rs`). A case that passes on the local directory states
//! POSIX (Linux) behaviour, not an assumption about wsfs.
//!
//! Every case works inside `subject.root`, which is empty when it starts;
//! errors are compared by errno.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Deref;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

/// The directory a case runs in, and what it accepts.
#[derive(Debug, Clone)]
pub struct Subject {
    /// An empty directory for the case.
    pub root: PathBuf,
    /// The longest name (in ASCII characters) a file may have there.
    pub name_max: usize,
    /// Whether hard links are made; where they are not, `link` must fail
    /// with EPERM or ENOTSUP and leave no name behind.
    pub hard_links: bool,
    /// Whether extended attributes are kept; where they are not, setting
    /// one must fail with ENOTSUP and change nothing.
    pub xattrs: bool,
}

impl Subject {
    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// A [`Subject`] plus what must outlive it (a temporary directory, a
/// server and a mount); the guards go after the subject.
pub struct Tree {
    subject: Subject,
    _guards: Box<dyn std::any::Any>,
}

impl Tree {
    pub fn new(subject: Subject, guards: impl std::any::Any) -> Tree {
        Tree {
            subject,
            _guards: Box::new(guards),
        }
    }
}

impl Deref for Tree {
    type Target = Subject;

    fn deref(&self) -> &Subject {
        &self.subject
    }
}

/// The reference: a fresh directory on the local disk (Linux allows names
/// of 255 bytes, makes hard links and keeps `user.` attributes).
pub fn local() -> Tree {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let subject = Subject {
        root: dir.path().to_path_buf(),
        name_max: 255,
        hard_links: true,
        xattrs: true,
    };
    Tree::new(subject, dir)
}

/// The errno of a call that must fail; a success fails the case with what
/// was being done.
#[track_caller]
fn errno<T: std::fmt::Debug>(result: io::Result<T>, doing: &str) -> i32 {
    match result {
        Ok(v) => panic!("{doing}: succeeded ({v:?}) where it must fail"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("{doing}: failed without an errno: {e}")),
    }
}

#[track_caller]
fn assert_errno<T: std::fmt::Debug>(result: io::Result<T>, expected: i32, doing: &str) {
    let got = errno(result, doing);
    assert_eq!(
        got,
        expected,
        "{doing}: errno {got} ({}), expected {expected} ({})",
        io::Error::from_raw_os_error(got),
        io::Error::from_raw_os_error(expected)
    );
}

fn rustix_io<T>(r: rustix::io::Result<T>) -> io::Result<T> {
    r.map_err(io::Error::from)
}

#[track_caller]
fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[track_caller]
fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
}

/// Whether `path` names nothing (not even a dangling link).
fn absent(path: &Path) -> bool {
    matches!(fs::symlink_metadata(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// Every entry of `dir` by name, with its kind as readdir reports it.
pub fn listing(dir: &Path) -> BTreeMap<String, &'static str> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("a directory entry");
            let kind = entry.file_type().expect("the entry's type");
            let kind = if kind.is_dir() {
                "dir"
            } else if kind.is_symlink() {
                "symlink"
            } else if kind.is_file() {
                "file"
            } else {
                "other"
            };
            (entry.file_name().to_string_lossy().into_owned(), kind)
        })
        .collect()
}

/// Threads and rounds of the exclusive-create race.
const RACERS: usize = 8;
const RACE_ROUNDS: usize = 10;

/// `open(O_CREAT | O_EXCL)` of an existing name is EEXIST and leaves it;
/// several threads racing to create one name: exactly one wins, the
/// others get EEXIST, and the file holds what the winner wrote.
pub fn exclusive_create_has_exactly_one_winner(s: &Subject) {
    let taken = s.path("taken");
    write(&taken, b"first");
    let exclusive = || OpenOptions::new().write(true).create_new(true).clone();
    assert_errno(exclusive().open(&taken), libc::EEXIST, "O_EXCL over a file");
    assert_eq!(read(&taken), b"first", "a refused O_EXCL changes nothing");

    for round in 0..RACE_ROUNDS {
        let name = s.path(&format!("race-{round}"));
        let barrier = Arc::new(Barrier::new(RACERS));
        let outcomes: Vec<io::Result<usize>> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..RACERS)
                .map(|racer| {
                    let (barrier, name, open) = (barrier.clone(), &name, exclusive());
                    scope.spawn(move || -> io::Result<usize> {
                        barrier.wait();
                        let mut file = open.open(name)?;
                        file.write_all(format!("racer {racer}").as_bytes())?;
                        Ok(racer)
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|r| r.join().expect("a racer"))
                .collect()
        });
        let winners: Vec<usize> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok())
            .copied()
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: winners {winners:?} of {outcomes:?}"
        );
        for outcome in outcomes.into_iter().filter(Result::is_err) {
            assert_errno(outcome, libc::EEXIST, "a losing O_EXCL");
        }
        assert_eq!(
            read(&name),
            format!("racer {}", winners[0]).into_bytes(),
            "round {round}: the file holds the winner's bytes"
        );
    }
}

/// `pwrite` at any offset, past the end (the gap reads as zeros), over the
/// middle, and `O_APPEND`; the same handle and a later open read the same.
pub fn writes_land_at_their_offsets(s: &Subject) {
    let path = s.path("offsets.bin");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("create");
    file.write_all_at(b"hello", 0).unwrap();
    file.write_all_at(b"tail", 100).unwrap();
    file.write_all_at(b"J", 0).unwrap();
    file.write_all_at(b"--", 2).unwrap();
    let mut expected = b"Je--o".to_vec();
    expected.resize(100, 0);
    expected.extend_from_slice(b"tail");
    let mut through_handle = vec![0; expected.len()];
    file.read_exact_at(&mut through_handle, 0).unwrap();
    assert_eq!(
        through_handle, expected,
        "read back through the writing handle"
    );
    assert_eq!(file.metadata().unwrap().len(), 104, "fstat size");
    file.sync_all().expect("fsync");
    drop(file);
    assert_eq!(read(&path), expected, "a later open sees the writes");
    assert_eq!(fs::metadata(&path).unwrap().len(), 104, "stat size");

    let mut appender = OpenOptions::new().append(true).open(&path).unwrap();
    appender.write_all(b"+more").unwrap();
    drop(appender);
    expected.extend_from_slice(b"+more");
    assert_eq!(read(&path), expected, "O_APPEND writes at the end");

    // Reading at and past the end gives nothing.
    let file = File::open(&path).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(file.read_at(&mut buf, expected.len() as u64).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, 1 << 20).unwrap(), 0);
}

/// `ftruncate` and `truncate` shrink a file and grow it with zeros;
/// `O_TRUNC` empties it.
pub fn truncate_shrinks_and_grows_with_zeros(s: &Subject) {
    let path = s.path("cut.txt");
    write(&path, b"0123456789");
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(4).expect("ftruncate down");
    drop(file);
    assert_eq!(read(&path), b"0123");

    rustix_io(rustix::fs::open(
        &path,
        rustix::fs::OFlags::WRONLY,
        rustix::fs::Mode::empty(),
    ))
    .and_then(|fd| rustix_io(rustix::fs::ftruncate(&fd, 4096)))
    .expect("ftruncate up");
    let mut grown = b"0123".to_vec();
    grown.resize(4096, 0);
    assert_eq!(read(&path), grown, "growing fills with zeros");

    truncate_path(&path, 2).expect("truncate by path");
    assert_eq!(read(&path), b"01");
    assert_eq!(fs::metadata(&path).unwrap().len(), 2);

    // A write after a shrink beyond the new end leaves zeros, not the old bytes.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"X", 6).unwrap();
    drop(file);
    assert_eq!(read(&path), b"01\0\0\0\0X");

    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("O_TRUNC");
    assert_eq!(read(&path), b"", "O_TRUNC empties the file");
}

fn truncate_path(path: &Path, len: u64) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a valid NUL-terminated path; truncate(2) keeps no pointer.
    match unsafe { libc::truncate(c.as_ptr(), len as libc::off_t) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Renaming a file over one that is open (an editor's save): the open
/// handle keeps reading the old bytes; a new open reads the new ones.
pub fn rename_over_an_open_file_keeps_the_old_bytes_for_its_handle(s: &Subject) {
    let (target, temp) = (s.path("config.toml"), s.path(".config.toml.swp"));
    write(&target, b"old contents\n");
    let mut old = File::open(&target).unwrap();
    let mut first = [0u8; 4];
    old.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"old ");

    write(&temp, b"new contents, longer\n");
    fs::rename(&temp, &target).expect("rename over the open file");
    assert!(absent(&temp), "the temporary name is gone");
    assert_eq!(read(&target), b"new contents, longer\n");

    let mut rest = Vec::new();
    old.read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest, b"contents\n",
        "the old handle reads on in the old bytes"
    );
    old.seek(SeekFrom::Start(0)).unwrap();
    let mut whole = Vec::new();
    old.read_to_end(&mut whole).unwrap();
    assert_eq!(whole, b"old contents\n", "and from the start again");
    assert_eq!(
        listing(&s.root).into_keys().collect::<Vec<_>>(),
        ["config.toml"]
    );
}

/// `renameat2(RENAME_NOREPLACE)` onto an existing name is EEXIST and
/// changes neither file; onto a free name it renames.
pub fn rename_noreplace_refuses_an_existing_name(s: &Subject) {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let (a, b, c) = (s.path("a"), s.path("b"), s.path("c"));
    write(&a, b"from a");
    write(&b, b"from b");
    assert_errno(
        rustix_io(renameat_with(CWD, &a, CWD, &b, RenameFlags::NOREPLACE)),
        libc::EEXIST,
        "RENAME_NOREPLACE onto a file",
    );
    assert_eq!(read(&a), b"from a");
    assert_eq!(read(&b), b"from b");

    fs::create_dir(s.path("d")).unwrap();
    assert_errno(
        rustix_io(renameat_with(
            CWD,
            &a,
            CWD,
            s.path("d"),
            RenameFlags::NOREPLACE,
        )),
        libc::EEXIST,
        "RENAME_NOREPLACE onto a directory",
    );

    renameat_with(CWD, &a, CWD, &c, RenameFlags::NOREPLACE).expect("NOREPLACE onto a free name");
    assert!(absent(&a));
    assert_eq!(read(&c), b"from a");
}

/// A directory renames with everything in it; over an empty directory it
/// replaces it, over a non-empty one it is ENOTEMPTY; into itself EINVAL;
/// a file over a directory EISDIR and a directory over a file ENOTDIR.
pub fn directories_rename_with_their_contents(s: &Subject) {
    let src = s.path("src");
    fs::create_dir_all(src.join("deep/er")).unwrap();
    write(&src.join("top.txt"), b"top");
    write(&src.join("deep/er/leaf.txt"), b"leaf");

    let moved = s.path("moved");
    fs::rename(&src, &moved).expect("rename a directory");
    assert!(absent(&src), "the old name is gone");
    assert!(
        absent(&src.join("top.txt")),
        "and nothing is reachable under it"
    );
    assert_eq!(read(&moved.join("top.txt")), b"top");
    assert_eq!(read(&moved.join("deep/er/leaf.txt")), b"leaf");

    // Into a subdirectory of another directory, and back.
    fs::create_dir(s.path("parent")).unwrap();
    let nested = s.path("parent/moved");
    fs::rename(&moved, &nested).expect("rename into another directory");
    assert_eq!(read(&nested.join("deep/er/leaf.txt")), b"leaf");
    fs::rename(&nested, &moved).expect("and back");

    let empty = s.path("empty");
    fs::create_dir(&empty).unwrap();
    fs::rename(&moved, &empty).expect("a directory over an empty directory");
    assert!(absent(&moved));
    assert_eq!(read(&empty.join("top.txt")), b"top");

    let full = s.path("full");
    fs::create_dir(&full).unwrap();
    write(&full.join("keep.txt"), b"keep");
    let over_full = errno(
        fs::rename(&empty, &full),
        "a directory over a non-empty one",
    );
    assert!(
        over_full == libc::ENOTEMPTY || over_full == libc::EEXIST,
        "a directory over a non-empty one: errno {over_full}, expected ENOTEMPTY or EEXIST"
    );
    assert_eq!(read(&full.join("keep.txt")), b"keep");
    assert_eq!(read(&empty.join("top.txt")), b"top");

    assert_errno(
        fs::rename(&empty, empty.join("deep/inside")),
        libc::EINVAL,
        "a directory into itself",
    );
    let file = s.path("file.txt");
    write(&file, b"file");
    assert_errno(
        fs::rename(&file, &full),
        libc::EISDIR,
        "a file over a directory",
    );
    assert_errno(
        fs::rename(&full, &file),
        libc::ENOTDIR,
        "a directory over a file",
    );
    assert_eq!(read(&file), b"file");
    assert_eq!(read(&full.join("keep.txt")), b"keep");
}

/// A file unlinked while open: its name is gone at once, the open handle
/// still reads and writes it, and closing the handle does not bring the
/// name back.
pub fn an_unlinked_open_file_stays_readable_and_writable(s: &Subject) {
    let path = s.path("scratch.db");
    write(&path, b"journal");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    fs::remove_file(&path).expect("unlink an open file");
    assert!(absent(&path), "the name is gone");
    assert!(
        !listing(&s.root).contains_key("scratch.db"),
        "and not listed"
    );

    let mut content = String::new();
    file.read_to_string(&mut content).unwrap();
    assert_eq!(content, "journal", "the handle reads the unlinked file");
    file.write_all_at(b" entry", 7).unwrap();
    let mut again = vec![0; 13];
    file.read_exact_at(&mut again, 0).unwrap();
    assert_eq!(again, b"journal entry", "and writes into it");
    file.sync_all().expect("fsync of an unlinked file");
    drop(file);
    assert!(absent(&path), "closing does not bring the name back");

    // The name is free for a new file, unrelated to the old one.
    write(&path, b"new");
    assert_eq!(read(&path), b"new");
}

/// `rmdir` of a directory that holds a file is ENOTEMPTY and keeps it;
/// `rmdir` of a file is ENOTDIR; `unlink` of a directory is EISDIR; an
/// emptied directory then goes.
pub fn rmdir_of_a_non_empty_directory_is_enotempty(s: &Subject) {
    let dir = s.path("full");
    fs::create_dir(&dir).unwrap();
    write(&dir.join("inside.txt"), b"inside");
    assert_errno(
        fs::remove_dir(&dir),
        libc::ENOTEMPTY,
        "rmdir of a non-empty dir",
    );
    assert_eq!(read(&dir.join("inside.txt")), b"inside");

    fs::create_dir(dir.join("sub")).unwrap();
    fs::remove_file(dir.join("inside.txt")).unwrap();
    assert_errno(
        fs::remove_dir(&dir),
        libc::ENOTEMPTY,
        "rmdir of a dir holding a dir",
    );

    assert_errno(
        fs::remove_dir(s.path("full/sub/../../missing")),
        libc::ENOENT,
        "rmdir of a missing name",
    );
    let file = s.path("plain.txt");
    write(&file, b"plain");
    assert_errno(fs::remove_dir(&file), libc::ENOTDIR, "rmdir of a file");
    assert_errno(fs::remove_file(&dir), libc::EISDIR, "unlink of a directory");

    fs::remove_dir(dir.join("sub")).unwrap();
    fs::remove_dir(&dir).expect("rmdir of the emptied dir");
    assert!(absent(&dir));
    assert_eq!(read(&file), b"plain");
}

/// Opening a directory for writing is EISDIR, with or without O_CREAT.
pub fn opening_a_directory_for_writing_is_eisdir(s: &Subject) {
    let dir = s.path("d");
    fs::create_dir(&dir).unwrap();
    assert_errno(
        OpenOptions::new().write(true).open(&dir),
        libc::EISDIR,
        "open(O_WRONLY) of a directory",
    );
    assert_errno(
        OpenOptions::new().read(true).write(true).open(&dir),
        libc::EISDIR,
        "open(O_RDWR) of a directory",
    );
    assert_errno(
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&dir),
        libc::EISDIR,
        "open(O_CREAT | O_WRONLY) of a directory",
    );
    assert!(fs::metadata(&dir).unwrap().is_dir(), "the directory stays");
    File::open(&dir).expect("a directory opens for reading");
}

/// A name at the limit is accepted; one character more is ENAMETOOLONG
/// for a file, a directory and a rename target, and creates nothing.
pub fn a_name_over_the_limit_is_enametoolong(s: &Subject) {
    let longest = "n".repeat(s.name_max);
    let over = "n".repeat(s.name_max + 1);
    write(&s.path(&longest), b"fits");
    assert_eq!(read(&s.path(&longest)), b"fits");
    fs::create_dir(s.path(&format!("d{}", &longest[1..]))).expect("a directory at the limit");

    assert_errno(
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(s.path(&over)),
        libc::ENAMETOOLONG,
        "create a file with a name over the limit",
    );
    assert_errno(
        fs::create_dir(s.path(&format!("d{over}"))),
        libc::ENAMETOOLONG,
        "mkdir with a name over the limit",
    );
    assert_errno(
        fs::rename(s.path(&longest), s.path(&over)),
        libc::ENAMETOOLONG,
        "rename to a name over the limit",
    );
    assert_errno(
        fs::metadata(s.path(&over)),
        libc::ENAMETOOLONG,
        "stat of a name over the limit",
    );
    assert_eq!(
        listing(&s.root).len(),
        2,
        "only the two names at the limit exist"
    );
}

/// Permission bits set with chmod are what stat reports, after a reopen
/// too; a new file's mode follows the creating call's mode.
pub fn chmod_bits_are_kept(s: &Subject) {
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    let script = s.path("run.sh");
    write(&script, b"#!/bin/sh\necho hi\n");
    for bits in [0o755, 0o640, 0o600, 0o700, 0o644] {
        fs::set_permissions(&script, fs::Permissions::from_mode(bits)).expect("chmod");
        assert_eq!(mode(&script), bits, "chmod {bits:o} of a file");
    }
    let fd_set = File::open(&script).unwrap();
    fd_set
        .set_permissions(fs::Permissions::from_mode(0o750))
        .expect("fchmod");
    drop(fd_set);
    assert_eq!(mode(&script), 0o750, "fchmod of a file");
    assert_eq!(
        read(&script),
        b"#!/bin/sh\necho hi\n",
        "chmod keeps the bytes"
    );

    let dir = s.path("private");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod a dir");
    assert_eq!(mode(&dir), 0o700, "chmod of a directory");
    write(&dir.join("still-usable"), b"yes");

    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(s.path("secret"))
        .unwrap();
    drop(created);
    assert_eq!(
        mode(&s.path("secret")) & 0o077,
        0,
        "a file created with mode 0600 is not readable by others"
    );
}

/// The times set with utimensat (by path) and futimens (by handle) are
/// what stat reports; a write afterwards moves mtime forward again.
pub fn utimens_times_are_kept(s: &Subject) {
    use rustix::fs::{utimensat, AtFlags, Timespec, Timestamps, CWD};
    const SET: i64 = 1_600_000_000;
    let path = s.path("dated.txt");
    write(&path, b"dated");
    let at = |sec: i64| Timespec {
        tv_sec: sec,
        tv_nsec: 0,
    };
    utimensat(
        CWD,
        &path,
        &Timestamps {
            last_access: at(SET),
            last_modification: at(SET),
        },
        AtFlags::empty(),
    )
    .expect("utimensat");
    let meta = fs::metadata(&path).unwrap();
    assert_eq!((meta.mtime(), meta.mtime_nsec()), (SET, 0), "mtime by path");

    let file = File::open(&path).unwrap();
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(SET as u64 + 86_400);
    file.set_times(fs::FileTimes::new().set_modified(modified))
        .expect("futimens");
    drop(file);
    assert_eq!(
        fs::metadata(&path).unwrap().modified().unwrap(),
        modified,
        "mtime by handle"
    );
    assert_eq!(read(&path), b"dated", "setting times keeps the bytes");

    let dir = s.path("dated-dir");
    fs::create_dir(&dir).unwrap();
    utimensat(
        CWD,
        &dir,
        &Timestamps {
            last_access: at(SET),
            last_modification: at(SET),
        },
        AtFlags::empty(),
    )
    .expect("utimensat of a directory");
    assert_eq!(
        fs::metadata(&dir).unwrap().mtime(),
        SET,
        "a directory's mtime"
    );

    let before = SystemTime::now() - Duration::from_secs(60);
    fs::write(&path, b"rewritten").unwrap();
    assert!(
        fs::metadata(&path).unwrap().modified().unwrap() >= before,
        "a write moves mtime to now"
    );
}

/// A symbolic link is made and read as a link: readlink gives the target
/// as written, lstat says link, open follows it (the kernel resolves it),
/// a dangling one reads as a link and opens as ENOENT, and unlinking the
/// link leaves its target.
pub fn symlinks_are_created_and_read_as_links(s: &Subject) {
    use std::os::unix::fs::symlink;
    fs::create_dir(s.path("dir")).unwrap();
    write(&s.path("dir/target.txt"), b"pointed at");
    symlink("dir/target.txt", s.path("link")).expect("symlink");
    symlink("../dir/target.txt", s.path("dir/up-link")).expect("a link with ..");
    symlink("nowhere/at/all", s.path("dangling")).expect("a dangling link");
    symlink("dir", s.path("dir-link")).expect("a link to a directory");

    assert_eq!(
        fs::read_link(s.path("link")).unwrap(),
        Path::new("dir/target.txt")
    );
    assert_eq!(
        fs::read_link(s.path("dir/up-link")).unwrap(),
        Path::new("../dir/target.txt"),
        "the target is kept as written"
    );
    assert_eq!(
        read(&s.path("dir/up-link")),
        b"pointed at",
        "resolved from its directory"
    );
    assert!(fs::symlink_metadata(s.path("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        read(&s.path("link")),
        b"pointed at",
        "open follows the link"
    );
    assert_eq!(read(&s.path("dir-link/target.txt")), b"pointed at");

    assert_eq!(
        fs::read_link(s.path("dangling")).unwrap(),
        Path::new("nowhere/at/all")
    );
    assert_errno(
        File::open(s.path("dangling")),
        libc::ENOENT,
        "open of a dangling link",
    );
    assert_errno(
        std::os::unix::fs::symlink("elsewhere", s.path("link")),
        libc::EEXIST,
        "symlink over an existing name",
    );
    assert_errno(
        fs::read_link(s.path("dir/target.txt")),
        libc::EINVAL,
        "readlink of a file",
    );

    let kinds = listing(&s.root);
    assert_eq!(kinds.get("link"), Some(&"symlink"));
    assert_eq!(kinds.get("dir-link"), Some(&"symlink"));
    fs::remove_file(s.path("link")).expect("unlink a link");
    assert!(absent(&s.path("link")));
    assert_eq!(
        read(&s.path("dir/target.txt")),
        b"pointed at",
        "the target stays"
    );
}

/// readdir lists exactly what was created, minus what was deleted or
/// renamed away, each with its kind, after every change.
pub fn readdir_follows_creates_and_deletes(s: &Subject) {
    let mut expected: BTreeMap<String, &str> = BTreeMap::new();
    assert_eq!(listing(&s.root), expected, "an empty directory");
    for i in 0..40 {
        let name = format!("f{i:02}.txt");
        write(&s.path(&name), name.as_bytes());
        expected.insert(name, "file");
    }
    for d in ["alpha", "beta", "gamma"] {
        fs::create_dir(s.path(d)).unwrap();
        expected.insert(d.to_string(), "dir");
    }
    assert_eq!(listing(&s.root), expected, "after creates");

    for i in (0..40).step_by(3) {
        let name = format!("f{i:02}.txt");
        fs::remove_file(s.path(&name)).unwrap();
        expected.remove(&name);
    }
    fs::remove_dir(s.path("beta")).unwrap();
    expected.remove("beta");
    fs::rename(s.path("f01.txt"), s.path("alpha/f01.txt")).unwrap();
    expected.remove("f01.txt");
    fs::rename(s.path("f02.txt"), s.path("renamed.txt")).unwrap();
    expected.remove("f02.txt");
    expected.insert("renamed.txt".into(), "file");
    write(&s.path("late.txt"), b"late");
    expected.insert("late.txt".into(), "file");
    assert_eq!(
        listing(&s.root),
        expected,
        "after deletes, renames and creates"
    );
    assert_eq!(
        listing(&s.path("alpha")),
        BTreeMap::from([("f01.txt".to_string(), "file")]),
        "the renamed file is listed in its new directory"
    );

    // Many entries: a listing that takes more than one readdir buffer.
    let many = s.path("many");
    fs::create_dir(&many).unwrap();
    let names: Vec<String> = (0..600)
        .map(|i| format!("entry-with-a-longish-name-{i:04}"))
        .collect();
    for name in &names {
        File::create(many.join(name)).unwrap();
    }
    let listed: Vec<String> = listing(&many).into_keys().collect();
    assert_eq!(listed, names, "every one of 600 entries, once");
}

/// A hard link either works fully (both names one file: a write through
/// one is read through the other, nlink 2) or is refused with EPERM or
/// ENOTSUP and leaves no second name: never a success that later breaks.
pub fn hard_links_work_fully_or_fail_cleanly(s: &Subject) {
    let (first, second) = (s.path("first.txt"), s.path("second.txt"));
    write(&first, b"shared");
    let linked = fs::hard_link(&first, &second);
    if s.hard_links {
        linked.expect("a hard link");
        assert_eq!(fs::metadata(&first).unwrap().nlink(), 2);
        let file = OpenOptions::new().write(true).open(&second).unwrap();
        file.write_all_at(b"SH", 0).unwrap();
        drop(file);
        assert_eq!(
            read(&first),
            b"SHared",
            "a write through one name is read through the other"
        );
        fs::remove_file(&first).unwrap();
        assert_eq!(read(&second), b"SHared", "the other name keeps the file");
    } else {
        let got = errno(linked, "link");
        assert!(
            got == libc::EPERM || got == libc::ENOTSUP || got == libc::EOPNOTSUPP,
            "link: errno {got} ({}), expected EPERM or ENOTSUP",
            io::Error::from_raw_os_error(got)
        );
        assert!(absent(&second), "a refused link leaves no name");
        assert_eq!(read(&first), b"shared", "nor changes the file");
        assert_eq!(fs::metadata(&first).unwrap().nlink(), 1);
    }
}

/// An extended attribute is either kept (set, read back, listed,
/// removed) or refused with ENOTSUP, leaving the file as it was; reading
/// or listing attributes never fails any other way.
pub fn extended_attributes_work_fully_or_fail_cleanly(s: &Subject) {
    use rustix::fs::{getxattr, listxattr, removexattr, setxattr, XattrFlags};
    const NAME: &str = "user.wsfs.test";
    let path = s.path("tagged.txt");
    write(&path, b"tagged");
    let set = rustix_io(setxattr(&path, NAME, b"value", XattrFlags::empty()));
    let mut buf = [0u8; 256];
    if s.xattrs {
        set.expect("setxattr");
        let n = getxattr(&path, NAME, &mut buf[..]).expect("getxattr");
        assert_eq!(&buf[..n], b"value");
        let n = listxattr(&path, &mut buf[..]).expect("listxattr");
        assert!(
            buf[..n]
                .split(|&b| b == 0)
                .any(|name| name == NAME.as_bytes()),
            "listed: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        removexattr(&path, NAME).expect("removexattr");
    } else {
        assert_errno(set, libc::ENOTSUP, "setxattr");
    }
    let got = errno(
        rustix_io(getxattr(&path, NAME, &mut buf[..])),
        "getxattr of an attribute that is not there",
    );
    assert!(
        got == libc::ENODATA || got == libc::ENOTSUP,
        "getxattr of a missing attribute: errno {got}, expected ENODATA or ENOTSUP"
    );
    match rustix_io(listxattr(&path, &mut buf[..])) {
        Ok(n) => assert!(
            !buf[..n]
                .split(|&b| b == 0)
                .any(|name| name == NAME.as_bytes()),
            "no attribute is left listed"
        ),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTSUP), "listxattr: {e}"),
    }
    assert_eq!(read(&path), b"tagged", "attributes never touch the bytes");
}

/// statfs answers for the directory and for a file in it, with sizes that
/// add up and a positive block size.
pub fn statfs_answers(s: &Subject) {
    write(&s.path("f"), b"x");
    for path in [s.root.clone(), s.path("f")] {
        let st = rustix::fs::statvfs(&path)
            .unwrap_or_else(|e| panic!("statvfs {}: {e}", path.display()));
        let shown = format!(
            "bsize {} blocks {} bfree {} bavail {} files {} ffree {} namemax {}",
            st.f_bsize, st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree, st.f_namemax
        );
        assert!(st.f_bsize > 0, "a block size: {shown}");
        assert!(
            st.f_blocks >= st.f_bfree && st.f_bfree >= st.f_bavail,
            "blocks >= free >= available: {shown}"
        );
        assert!(st.f_files >= st.f_ffree, "inodes >= free inodes: {shown}");
        assert!(st.f_namemax > 0, "a name limit: {shown}");
    }
}

/// Expands the suite into one `#[test]` per case for `$tree`, an
/// expression of type `Option<Tree>` (`None`: the subject is unavailable
/// here and the test passes, having said so).
#[macro_export]
macro_rules! posix_suite {
    ($tree:expr) => {
        $crate::posix_suite!(@cases $tree;
            exclusive_create_has_exactly_one_winner,
            writes_land_at_their_offsets,
            truncate_shrinks_and_grows_with_zeros,
            rename_over_an_open_file_keeps_the_old_bytes_for_its_handle,
            rename_noreplace_refuses_an_existing_name,
            directories_rename_with_their_contents,
            an_unlinked_open_file_stays_readable_and_writable,
            rmdir_of_a_non_empty_directory_is_enotempty,
            opening_a_directory_for_writing_is_eisdir,
            a_name_over_the_limit_is_enametoolong,
            chmod_bits_are_kept,
            utimens_times_are_kept,
            symlinks_are_created_and_read_as_links,
            readdir_follows_creates_and_deletes,
            hard_links_work_fully_or_fail_cleanly,
            extended_attributes_work_fully_or_fail_cleanly,
            statfs_answers,
        );
    };
    (@cases $tree:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let tree: Option<$crate::posix::Tree> = $tree;
                if let Some(tree) = tree {
                    $crate::posix::$case(&tree);
                }
            }
        )*
    };
}
