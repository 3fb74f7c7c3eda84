//! The mount's large reads and writes: a file read in order is read ahead
//! (by the kernel a block at a time, and by the mount with several ranged
//! reads in flight, answered to the kernel from memory), and what is read
//! ahead is always the file as it is: whole and in order for readers of
//! any request size, several files at once, and never the old bytes once
//! another client has changed the file. A file rewritten whole through
//! the mount is committed as one patch that keeps a patch's rules: one
//! removed meanwhile by another client does not come back.
//!
//! Runs the real `wsfs mount` (tests/src/mounted.rs) over a live server;
//! needs /dev/fuse (and root or fusermount3): without them each test says
//! "skipping" and passes, unless WSFS_REQUIRE_TOOLS=1.

use std::fs;
use std::io::Write;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use wsfs_client::{parse_path, Filesystem, WriteOptions};
use wsfs_tests::mounted::{eventually, Backend, MountedSession};

const MIB: usize = 1 << 20;

/// The byte at `at` of file `seed`: differs between files and between
/// every block, so that a block served at the wrong place shows.
fn byte_at(seed: u8, at: usize) -> u8 {
    (at.wrapping_mul(31) ^ (at >> 20).wrapping_mul(97) ^ (at >> 13) ^ (usize::from(seed) * 53))
        as u8
}

fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|at| byte_at(seed, at)).collect()
}

fn upload(m: &MountedSession, path: &str, data: Vec<u8>) {
    m.block_on(
        m.session
            .upload(path, std::io::Cursor::new(data), WriteOptions::default()),
    )
    .unwrap_or_else(|e| panic!("upload of {path}: {e}"));
}

/// Files read through the mount in order, in request sizes that straddle
/// the read-ahead blocks, more files at once than are read ahead, and read
/// back at random places: every byte is the file's own.
#[test]
fn files_read_in_order_and_at_random_come_back_whole() {
    let Some(m) = MountedSession::start(Backend::Directory, 1) else {
        return;
    };
    // Not a whole number of blocks: the last one is short.
    const LEN: usize = 9 * MIB + 12_345;
    const FILES: u8 = 6;
    for seed in 0..FILES {
        upload(&m, &format!("big{seed}.bin"), content(seed, LEN));
    }
    let mut files: Vec<fs::File> = (0..FILES)
        .map(|seed| fs::File::open(m.mount(0).join(format!("big{seed}.bin"))).unwrap())
        .collect();
    let mut read: Vec<Vec<u8>> = vec![Vec::new(); usize::from(FILES)];
    // Each file in turn, each request a different size.
    let sizes = [4096, 200_000, MIB, 3 * MIB / 2, 77_777];
    let mut turn = 0;
    while read.iter().any(|r| r.len() < LEN) {
        for (seed, file) in files.iter_mut().enumerate() {
            let mut buf = vec![0; sizes[turn % sizes.len()]];
            turn += 1;
            let n = file.read(&mut buf).unwrap();
            read[seed].extend_from_slice(&buf[..n]);
        }
    }
    for (seed, got) in read.iter().enumerate() {
        assert_eq!(got.len(), LEN, "file {seed}'s length");
        let first_wrong = (0..LEN).find(|&at| got[at] != byte_at(seed as u8, at));
        assert_eq!(first_wrong, None, "file {seed} read in order");
    }
    // At random places, across block edges and to the end.
    let file = &files[0];
    for at in [5 * MIB - 10, 123, 8 * MIB + 1, MIB, LEN - 100, 2 * MIB + 7] {
        let mut buf = vec![0; 300_000];
        let n = file.read_at(&mut buf, at as u64).unwrap();
        assert_eq!(n, (LEN - at).min(buf.len()), "read at {at}");
        let want: Vec<u8> = (at..at + n).map(|i| byte_at(0, i)).collect();
        assert!(buf[..n] == want[..], "the bytes at {at}");
    }
    let mut rest = Vec::new();
    files[1].seek(SeekFrom::Start(0)).unwrap();
    files[1].read_to_end(&mut rest).unwrap();
    assert!(rest == content(1, LEN), "file 1 read again from the start");
}

/// A reader in the middle of a large file, with blocks read ahead of it,
/// sees another client's rewrite of the file within the deadline: the
/// Watch stream's event drops what was read ahead, and no block of the old
/// version answers a later read.
#[test]
fn read_ahead_blocks_never_answer_after_another_clients_write() {
    let Some(m) = MountedSession::start(Backend::Directory, 1) else {
        return;
    };
    const LEN: usize = 8 * MIB;
    upload(&m, "f.bin", content(1, LEN));
    let mut file = fs::File::open(m.mount(0).join("f.bin")).unwrap();
    // The first block, in order: the blocks after it are read ahead.
    let mut first = vec![0; MIB];
    file.read_exact(&mut first).unwrap();
    assert!(first == content(1, MIB), "the first block");

    upload(&m, "f.bin", content(2, LEN));
    // The same handle, reading on in order from where it was: the new
    // bytes, once the change has reached the mount.
    let at = 3 * MIB;
    eventually("the rewritten bytes through the open handle", || {
        let mut buf = vec![0; MIB];
        file.read_exact_at(&mut buf, at as u64)
            .map_err(|e| e.to_string())?;
        let old = (0..MIB).filter(|&i| buf[i] == byte_at(1, at + i)).count();
        let new = (0..MIB).filter(|&i| buf[i] == byte_at(2, at + i)).count();
        if new == MIB {
            Ok(())
        } else {
            Err(format!("{old} bytes as before, {new} as rewritten"))
        }
    });
    // And a fresh open reads the new file whole.
    let again = fs::read(m.mount(0).join("f.bin")).unwrap();
    assert!(again == content(2, LEN), "the rewritten file, reopened");
}

/// The kernel reads a block ahead on the mount, not the 128 KiB FUSE
/// starts every mount at: it asks for the next block while a reader copies
/// the one before. Setting it takes root; elsewhere this test says so and
/// passes.
#[test]
fn the_kernel_reads_a_block_ahead_on_the_mount() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: only root may set a mount's read-ahead");
        return;
    }
    let Some(m) = MountedSession::start(Backend::Directory, 1) else {
        return;
    };
    let dev = fs::metadata(m.mount(0)).unwrap().dev();
    let knob = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    eventually("the mount's read-ahead at 1024 KiB", || {
        let kib = fs::read_to_string(&knob).map_err(|e| format!("{knob}: {e}"))?;
        match kib.trim() {
            "1024" => Ok(()),
            other => Err(format!("{other} KiB")),
        }
    });
}

/// A file being rewritten whole through the mount (opened with O_TRUNC,
/// written from its start) that another client removes before the commit:
/// the commit does not make it again, and the file stays gone.
#[test]
fn a_whole_rewrite_of_a_file_removed_meanwhile_does_not_bring_it_back() {
    let Some(mut m) = MountedSession::start(Backend::Directory, 1) else {
        return;
    };
    upload(&m, "f.bin", content(1, 2 * MIB));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.mount(0).join("f.bin"))
        .unwrap();
    file.write_all(&content(2, 3 * MIB)).unwrap();

    m.block_on(
        m.session
            .delete(&parse_path("f.bin").unwrap(), Default::default()),
    )
    .unwrap();
    let synced = file.sync_all();
    drop(file);

    if let Err(e) = &synced {
        let errno = e.raw_os_error().unwrap_or(0);
        assert!(
            [libc::ENOENT, libc::ESTALE, libc::EIO].contains(&errno),
            "fsync of the removed file: {e}"
        );
    }
    // Whatever the mount learned first (the removal's event or the commit's
    // refusal), nothing it commits later, up to its unmount, makes the file
    // again.
    m.unmount_all();
    let after = m.block_on(m.session.stat(&parse_path("f.bin").unwrap()));
    assert!(
        matches!(after, Err(wsfs_client::Error::FileNotFound { .. })),
        "the removed file: {after:?}"
    );
}

/// The file at `path` as the API reads it.
fn fetch(m: &MountedSession, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    m.block_on(m.session.download(path, &mut out))
        .unwrap_or_else(|e| panic!("download of {path}: {e}"));
    out
}

/// `data` written at `offset` of `file` in writes of a MiB.
fn write_in_mibs(file: &fs::File, offset: usize, data: &[u8]) {
    for (i, piece) in data.chunks(MIB).enumerate() {
        file.write_all_at(piece, (offset + i * MIB) as u64).unwrap();
    }
}

/// Files written in long runs start their commit's upload while they are
/// being written (the upload ahead), and it stays the commit the mount
/// makes without it: nothing lands before fsync (another client reads the
/// old file whole), everything lands at fsync as one new version, and a
/// cut, a chmod, a time set or a removal by another client in the
/// meantime has the effect it has on any commit.
#[test]
fn a_file_uploaded_ahead_of_its_commit_lands_whole_at_fsync_and_not_before() {
    for backend in [Backend::Directory, Backend::Memory, Backend::Container] {
        uploaded_ahead(backend);
    }
}

fn uploaded_ahead(backend: Backend) {
    use std::os::unix::fs::PermissionsExt;
    let Some(mut m) = MountedSession::start(backend, 1) else {
        return;
    };
    let stat =
        |m: &MountedSession, path: &str| m.block_on(m.session.stat(&parse_path(path).unwrap()));
    const LEN: usize = 20 * MIB + 777;

    // A rewrite: the old file until fsync, then the new one whole.
    upload(&m, "f.bin", content(1, 2 * MIB));
    let before = stat(&m, "f.bin").unwrap();
    let file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.mount(0).join("f.bin"))
        .unwrap();
    write_in_mibs(&file, 0, &content(2, LEN));
    let unsynced = stat(&m, "f.bin").unwrap();
    assert_eq!(
        (unsynced.version, unsynced.size),
        (before.version, before.size),
        "nothing lands before fsync"
    );
    assert!(
        fetch(&m, "f.bin") == content(1, 2 * MIB),
        "the old file, whole"
    );
    file.sync_all().unwrap();
    let synced = stat(&m, "f.bin").unwrap();
    assert_eq!(synced.size, LEN as u64);
    assert!(synced.version > before.version);
    assert!(fetch(&m, "f.bin") == content(2, LEN), "the new file, whole");
    drop(file);

    // A cut after much was sent, then more writes: the file as the
    // program left it.
    let file = fs::File::create(m.mount(0).join("cut.bin")).unwrap();
    write_in_mibs(&file, 0, &content(3, LEN));
    let keep = 5 * MIB + 3;
    file.set_len(keep as u64).unwrap();
    write_in_mibs(&file, keep, &content(4, 2 * MIB));
    file.sync_all().unwrap();
    let mut want = content(3, keep);
    want.extend(content(4, 2 * MIB));
    assert!(fetch(&m, "cut.bin") == want, "the cut file");
    drop(file);

    // A chmod half-way: the bits and every byte.
    let file = fs::File::create(m.mount(0).join("mode.bin")).unwrap();
    write_in_mibs(&file, 0, &content(5, LEN / 2));
    fs::set_permissions(
        m.mount(0).join("mode.bin"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    write_in_mibs(&file, LEN / 2, &content(6, LEN / 2));
    file.sync_all().unwrap();
    let mut want = content(5, LEN / 2);
    want.extend(content(6, LEN / 2));
    assert!(fetch(&m, "mode.bin") == want, "the chmodded file");
    assert_eq!(stat(&m, "mode.bin").unwrap().permissions.bits(), 0o600);
    drop(file);

    // A time set before the close, as `cp -p` and `tar` set one: the
    // bytes and the time.
    let set = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    let file = fs::File::create(m.mount(0).join("timed.bin")).unwrap();
    write_in_mibs(&file, 0, &content(9, LEN));
    file.set_modified(set).unwrap();
    file.sync_all().unwrap();
    assert!(fetch(&m, "timed.bin") == content(9, LEN), "the timed file");
    assert_eq!(stat(&m, "timed.bin").unwrap().modified, set);
    drop(file);

    // Removed by another client while written: not made again.
    upload(&m, "gone.bin", content(7, MIB));
    let file = fs::OpenOptions::new()
        .write(true)
        .open(m.mount(0).join("gone.bin"))
        .unwrap();
    write_in_mibs(&file, 0, &content(8, LEN));
    m.block_on(
        m.session
            .delete(&parse_path("gone.bin").unwrap(), Default::default()),
    )
    .unwrap();
    if let Err(e) = file.sync_all() {
        let errno = e.raw_os_error().unwrap_or(0);
        assert!(
            [libc::ENOENT, libc::ESTALE, libc::EIO].contains(&errno),
            "fsync of the removed file: {e}"
        );
    }
    drop(file);
    m.unmount_all();
    assert!(
        matches!(
            stat(&m, "gone.bin"),
            Err(wsfs_client::Error::FileNotFound { .. })
        ),
        "the removed file stays removed"
    );
}

/// The upload ahead keeps the mount's memory bounded: held to 256 MiB of
/// address space, the mount writes a 600 MiB file in a session whose
/// per-write limit takes it whole, so that one upload ahead carries all
/// of it, and the API reads back every byte.
#[test]
fn a_file_uploaded_ahead_whole_stays_within_the_mounts_address_space() {
    use sha2::{Digest, Sha256};
    const LIMIT: u64 = 256 << 20;
    const CHUNKS: usize = 600;
    let Some(m) = MountedSession::start_limited_writing(Backend::Directory, LIMIT, 1 << 30) else {
        return;
    };
    let file = fs::File::create(m.mount(0).join("big.bin")).unwrap();
    let mut written = Sha256::new();
    for i in 0..CHUNKS {
        let chunk = content(i as u8, MIB);
        file.write_all_at(&chunk, (i * MIB) as u64)
            .unwrap_or_else(|e| panic!("write of chunk {i} through the limited mount: {e}"));
        written.update(&chunk);
    }
    file.sync_all()
        .expect("fsync commits the whole file under the limit");
    drop(file);
    let fetched = fetch(&m, "big.bin");
    assert_eq!(fetched.len(), CHUNKS * MIB, "every byte committed");
    assert_eq!(
        Sha256::digest(&fetched),
        written.finalize(),
        "the API holds the bytes written"
    );
}

/// A directory over the server's page of one listing (100,000 entries),
/// its files made straight in a DIRECTORY session's root as a program
/// there would: listed whole through the mount (readdir pages through
/// List's `start_after`) and by `wsfs ls`'s client, never cut at the
/// page, and a name past the first page is found.
#[test]
fn a_directory_over_one_listing_page_is_listed_whole() {
    let Some(m) = MountedSession::start(Backend::Directory, 1) else {
        return;
    };
    const FILES: usize = 100_123;
    let root = m
        .info
        .root_path
        .clone()
        .expect("a DIRECTORY session's root");
    let dir = root.join("many");
    fs::create_dir(&dir).unwrap();
    for i in 0..FILES {
        fs::File::create(dir.join(format!("f{i:06}"))).unwrap();
    }
    let first = m
        .block_on(m.session.list(&parse_path("many").unwrap(), 1))
        .unwrap();
    assert!(first.truncated, "one page holds fewer: the test needs more");
    let all = m
        .block_on(m.session.list_all(&parse_path("many").unwrap(), 1))
        .unwrap();
    assert_eq!(all.len(), FILES);
    assert_eq!(
        all.last().unwrap().path.as_str(),
        format!("many/f{:06}", FILES - 1)
    );

    let mounted = m.mount(0).join("many");
    let names: std::collections::BTreeSet<String> = fs::read_dir(&mounted)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), FILES, "every entry listed through the mount");
    assert!(names.contains(&format!("f{:06}", FILES - 1)));
    assert!(mounted.join(format!("f{:06}", FILES - 1)).exists());
}
