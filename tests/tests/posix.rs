//! The POSIX behaviour suite ([`wsfs_tests::posix`]) on a local directory,
//! the reference that validates it, and on `wsfs mount` of a MEMORY, a
//! DIRECTORY and a CONTAINER session; then what only a mount has: a change made over
//! gRPC appears in the mount, two mounts of one session see each other's
//! closed files (and the API sees them at close), O_EXCL races between two
//! mounts have one winner, many writes to an open file make one version
//! (and one event) at fsync and one at close, and modes and times set in the mount are what
//! the API reports.
//!
//! Mount tests skip (saying so) without `/dev/fuse` or a `wsfs` binary
//! with the `mount` command, unless `WSFS_REQUIRE_TOOLS=1`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::sync::{Arc, Barrier};
use wsfs::Filesystem as _;
use wsfs_tests::kit::p;
use wsfs_tests::mounted::{eventually, Backend, MountedSession};
use wsfs_tests::posix::listing;

mod local {
    wsfs_tests::posix_suite!(Some(wsfs_tests::posix::local()));
}

mod mount_memory {
    use wsfs_tests::mounted::{Backend, MountedSession};
    wsfs_tests::posix_suite!(MountedSession::start(Backend::Memory, 1).map(MountedSession::subject));
}

mod mount_directory {
    use wsfs_tests::mounted::{Backend, MountedSession};
    wsfs_tests::posix_suite!(
        MountedSession::start(Backend::Directory, 1).map(MountedSession::subject)
    );
}

mod mount_container {
    use wsfs_tests::mounted::{Backend, MountedSession};
    wsfs_tests::posix_suite!(
        MountedSession::start(Backend::Container, 1).map(MountedSession::subject)
    );
}

/// Expands a test body taking a [`Backend`] into one test per backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $name() { super::$name(super::Backend::Memory) })*
        }
        mod directory {
            $(#[test] fn $name() { super::$name(super::Backend::Directory) })*
        }
        mod container {
            $(#[test] fn $name() { super::$name(super::Backend::Container) })*
        }
    };
}

on_both_backends!(
    a_grpc_change_appears_in_the_mount,
    a_file_closed_in_one_mount_is_read_soon_through_the_api_and_in_the_other,
    exclusive_creates_racing_from_two_mounts_have_one_winner,
    modes_and_times_set_in_the_mount_are_what_the_api_reports,
    writes_to_an_open_file_commit_once_at_fsync_and_once_after_close,
);

fn read_text(path: &std::path::Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| e.to_string())
}

/// Content, a listing and a name the mount has already read (so the
/// kernel holds them) change over gRPC; each change shows in the mount.
fn a_grpc_change_appears_in_the_mount(backend: Backend) {
    let Some(m) = MountedSession::start(backend, 1) else {
        return;
    };
    let root = m.mount(0).to_path_buf();
    m.block_on(async {
        m.session.write_str("cached.txt", "version one\n").await?;
        m.session.write_str("listed/a.txt", "a\n").await
    })
    .expect("seed over gRPC");
    eventually("the seeded file in the mount", || {
        read_text(&root.join("cached.txt"))
            .and_then(|t| (t == "version one\n").then_some(()).ok_or(t))
    });
    assert_eq!(
        listing(&root.join("listed")),
        BTreeMap::from([("a.txt".to_string(), "file")])
    );
    assert!(fs::metadata(root.join("listed/a.txt")).is_ok());

    // The same length, so that only an invalidation can show it.
    m.block_on(m.session.write_str("cached.txt", "version two\n"))
        .expect("overwrite over gRPC");
    eventually("an overwrite over gRPC in the mount", || {
        read_text(&root.join("cached.txt"))
            .and_then(|t| (t == "version two\n").then_some(()).ok_or(t))
    });

    m.block_on(async {
        m.session.write_str("listed/b.txt", "b\n").await?;
        m.session
            .delete(&p("listed/a.txt"), wsfs::DeleteOptions::default())
            .await
    })
    .expect("create and delete over gRPC");
    let want = BTreeMap::from([("b.txt".to_string(), "file")]);
    eventually("a create and a delete over gRPC in the listing", || {
        let now = listing(&root.join("listed"));
        (now == want).then_some(()).ok_or(format!("{now:?}"))
    });
    eventually("a deleted name gone from the mount", || match fs::metadata(
        root.join("listed/a.txt"),
    ) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(read_text(&root.join("listed/b.txt")).unwrap(), "b\n");
}

/// A file written and closed in one mount is in the session soon after
/// close returns (its commit is queued), and the other mount (which had
/// already looked for it) reads it soon after; the same the other way,
/// and for a delete.
fn a_file_closed_in_one_mount_is_read_soon_through_the_api_and_in_the_other(backend: Backend) {
    let Some(m) = MountedSession::start(backend, 2) else {
        return;
    };
    let (a, b) = (m.mount(0).join("shared.txt"), m.mount(1).join("shared.txt"));
    assert!(
        fs::metadata(&b).is_err(),
        "nothing there yet (and B has looked)"
    );
    assert!(listing(m.mount(1)).is_empty());

    let mut file = fs::File::create(&a).unwrap();
    file.write_all(b"written in A\n").unwrap();
    drop(file);
    eventually("A's closed file through the API", || {
        let text = m
            .block_on(m.session.read_to_string("shared.txt"))
            .map_err(|e| e.to_string())?;
        (text == "written in A\n").then_some(()).ok_or(text)
    });
    eventually("A's closed file in B", || {
        read_text(&b).and_then(|t| (t == "written in A\n").then_some(()).ok_or(t))
    });
    assert_eq!(
        listing(m.mount(1)),
        BTreeMap::from([("shared.txt".to_string(), "file")])
    );

    let mut file = fs::OpenOptions::new().write(true).open(&b).unwrap();
    file.write_all(b"WRITTEN").unwrap();
    drop(file);
    eventually("B's overwrite in A", || {
        read_text(&a).and_then(|t| (t == "WRITTEN in A\n").then_some(()).ok_or(t))
    });

    fs::remove_file(&b).unwrap();
    eventually("B's delete in A", || match fs::metadata(&a) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(listing(m.mount(0)).is_empty());
}

/// Threads on two mounts of one session race to create one name with
/// O_EXCL: exactly one wins in each round, and the session holds what it
/// wrote.
fn exclusive_creates_racing_from_two_mounts_have_one_winner(backend: Backend) {
    const RACERS_PER_MOUNT: usize = 3;
    let Some(m) = MountedSession::start(backend, 2) else {
        return;
    };
    for round in 0..10 {
        let name = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(2 * RACERS_PER_MOUNT));
        let outcomes: Vec<std::io::Result<String>> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..2 * RACERS_PER_MOUNT)
                .map(|racer| {
                    let path = m.mount(racer % 2).join(&name);
                    let barrier = barrier.clone();
                    scope.spawn(move || -> std::io::Result<String> {
                        barrier.wait();
                        let mut file = fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&path)?;
                        let mine = format!("racer {racer} on mount {}", racer % 2);
                        file.write_all(mine.as_bytes())?;
                        file.sync_all()?;
                        Ok(mine)
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|r| r.join().expect("a racer"))
                .collect()
        });
        let winners: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: one winner of two mounts, got {outcomes:?}"
        );
        for lost in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert_eq!(
                lost.raw_os_error(),
                Some(libc::EEXIST),
                "round {round}: a loser gets EEXIST: {lost}"
            );
        }
        assert_eq!(
            &m.block_on(m.session.read_to_string(&name))
                .expect("the winner's file"),
            winners[0],
            "round {round}: the session holds the winner's bytes"
        );
    }
}

/// chmod and utimensat in the mount change what Stat over gRPC reports.
fn modes_and_times_set_in_the_mount_are_what_the_api_reports(backend: Backend) {
    use rustix::fs::{utimensat, AtFlags, Timespec, Timestamps, CWD};
    use std::os::unix::fs::PermissionsExt;
    const SET: i64 = 1_600_000_000;
    let Some(m) = MountedSession::start(backend, 1) else {
        return;
    };
    let file = m.mount(0).join("tool.sh");
    fs::write(&file, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o750)).unwrap();
    let at = Timespec {
        tv_sec: SET,
        tv_nsec: 0,
    };
    utimensat(
        CWD,
        &file,
        &Timestamps {
            last_access: at,
            last_modification: at,
        },
        AtFlags::empty(),
    )
    .unwrap();
    let dir = m.mount(0).join("private");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

    // The file's chmod and utimensat came after its close: they go with
    // its queued commit, soon after.
    let set = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(SET as u64);
    eventually("the file's mode and mtime through the API", || {
        let meta = m
            .block_on(m.session.stat(&p("tool.sh")))
            .map_err(|e| e.to_string())?;
        let seen = (meta.permissions.bits(), meta.modified);
        (seen == (0o750, set))
            .then_some(())
            .ok_or(format!("{seen:?}"))
    });
    // The directory's chmod goes behind too (the mount made it): soon after.
    eventually("the directory's mode through the API", || {
        let bits = m
            .block_on(m.session.stat(&p("private")))
            .map_err(|e| e.to_string())?
            .permissions
            .bits();
        (bits == 0o700).then_some(()).ok_or(format!("{bits:o}"))
    });
}

/// The events the session logged for `path` after `since`.
fn events_for(m: &MountedSession, path: &str, since: u64) -> Vec<wsfs::proto::ChangeEvent> {
    let changes = m
        .block_on(m.session.changes(since, 0))
        .expect("the session's changes");
    assert!(!changes.resync, "the log holds every event of the test");
    changes
        .events
        .into_iter()
        .filter(|e| e.path == path)
        .collect()
}

/// Counted: 200 writes to an open file, with an fsync after the first
/// 100, reach the session as two commits: the first 100 lines when fsync
/// returns, all of them soon after close returns (its commit is queued);
/// one event each, never one per write.
fn writes_to_an_open_file_commit_once_at_fsync_and_once_after_close(backend: Backend) {
    let Some(m) = MountedSession::start(backend, 1) else {
        return;
    };
    let written = m
        .block_on(m.session.write_str("log.txt", "start\n"))
        .expect("seed over gRPC");
    let since = m
        .block_on(m.session.changes(0, 0))
        .expect("the session's changes")
        .next_seq;
    let path = m.mount(0).join("log.txt");
    eventually("the seeded file in the mount", || {
        read_text(&path).and_then(|t| (t == "start\n").then_some(()).ok_or(t))
    });
    let lines = |range: std::ops::Range<usize>| -> String {
        range.map(|i| format!("line {i}\n")).collect()
    };
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    for i in 0..100 {
        file.write_all(lines(i..i + 1).as_bytes()).unwrap();
    }
    file.sync_all().expect("fsync");
    let after_fsync = format!("start\n{}", lines(0..100));
    assert_eq!(
        m.block_on(m.session.read_to_string("log.txt")).unwrap(),
        after_fsync,
        "committed when fsync returned"
    );
    for i in 100..200 {
        file.write_all(lines(i..i + 1).as_bytes()).unwrap();
    }
    drop(file);
    let all = format!("start\n{}", lines(0..200));
    eventually("the closed file's second commit through the API", || {
        let text = m
            .block_on(m.session.read_to_string("log.txt"))
            .map_err(|e| e.to_string())?;
        (text == all).then_some(()).ok_or(text)
    });
    // A commit's event is recorded just after its bytes can be read.
    let events = eventually("the second commit's event", || {
        let events = events_for(&m, "log.txt", since);
        match events.len() {
            0 | 1 => Err(format!("{events:?}")),
            _ => Ok(events),
        }
    });
    assert_eq!(
        events.len(),
        2,
        "one event at fsync and one at close, got {events:?}"
    );
    let version = m.block_on(m.session.stat(&p("log.txt"))).unwrap().version;
    assert!(
        version > written.version,
        "the version grew from {} to {version}",
        written.version
    );
}

/// The mount process's memory is bounded whatever the size of a file:
/// held to 256 MiB of address space (`RLIMIT_AS`), it writes a 600 MiB
/// file (committed at fsync in parts within the session's per-write
/// limit), the API reads back every byte, and reading it through the
/// mount gives the same bytes. A mount that held a whole file in memory
/// could not: its allocations would fail past the limit.
#[test]
fn a_file_over_twice_the_mounts_address_space_is_written_and_read_back() {
    use sha2::{Digest, Sha256};
    const LIMIT: u64 = 256 << 20;
    const CHUNK: usize = 1 << 20;
    const CHUNKS: usize = 600;
    let Some(m) = MountedSession::start_limited(Backend::Directory, LIMIT) else {
        return;
    };
    let path = m.mount(0).join("big.bin");
    let mut chunk = vec![0u8; CHUNK];
    let mut written = Sha256::new();
    let mut file = fs::File::create(&path).expect("create in the limited mount");
    for i in 0..CHUNKS {
        for (j, byte) in chunk.iter_mut().enumerate() {
            *byte = (i.wrapping_mul(31) ^ j.wrapping_mul(7) ^ (j >> 11)) as u8;
        }
        file.write_all(&chunk)
            .unwrap_or_else(|e| panic!("write of chunk {i} through the limited mount: {e}"));
        written.update(&chunk);
    }
    file.sync_all()
        .expect("fsync commits the whole file under the limit");
    drop(file);
    let written = written.finalize();

    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("copy");
    let fetched = m
        .block_on(async {
            let out = tokio::fs::File::create(&copy).await.unwrap();
            m.session.download("big.bin", out).await
        })
        .expect("the API reads the file back");
    assert_eq!(fetched, (CHUNK * CHUNKS) as u64, "every byte committed");
    let hash = |path: &std::path::Path| {
        let mut hasher = Sha256::new();
        std::io::copy(&mut fs::File::open(path).unwrap(), &mut hasher).unwrap();
        hasher.finalize()
    };
    assert_eq!(hash(&copy), written, "the API holds the bytes written");
    assert_eq!(
        hash(&path),
        written,
        "the limited mount reads the bytes back"
    );
}
