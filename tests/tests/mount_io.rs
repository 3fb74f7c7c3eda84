//! The mount's large reads: a file read in order is read ahead (several
//! ranged reads in flight, answered to the kernel from memory), and what is
//! read ahead is always the file as it is: whole and in order for readers
//! of any request size, several files at once, and never the old bytes
//! once another client has changed the file.
//!
//! Runs the real `wsfs mount` (tests/src/mounted.rs) over a live server;
//! needs /dev/fuse (and root or fusermount3): without them each test says
//! "skipping" and passes, unless WSFS_REQUIRE_TOOLS=1.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use wsfs_client::WriteOptions;
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
