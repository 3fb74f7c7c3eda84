//! Forks over real gRPC: CreateSession with `from_snapshot` makes a new,
//! independent session whose workspace is exactly that snapshot, on every
//! pair of backends; DIRECTORY forks share their origin's stored objects;
//! every refusal changes nothing; a fork outlives its origin and a restart.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tonic::Code;
use wsfs::proto;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs_client::{
    Backend, Client, DeleteOptions, Filesystem, Session, SessionLimits, SessionOptions,
    WriteOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, reason};

use wsfs_tests::kit::{
    workspace_state as state, workspace_versions as versions, WorkspaceState as State,
};

async fn write(session: &Session, path: &str, data: &[u8]) {
    let options = WriteOptions {
        create_parents: true,
        ..WriteOptions::default()
    };
    session
        .upload(path, std::io::Cursor::new(data.to_vec()), options)
        .await
        .unwrap();
}

async fn delete(session: &Session, path: &str) {
    let options = DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    };
    session.delete(&p(path), options).await.unwrap();
}

async fn mkdir(session: &Session, path: &str) {
    session.mkdir(&p(path), Default::default()).await.unwrap();
}

fn options(backend: Backend) -> SessionOptions {
    match backend {
        Backend::Memory => SessionOptions::memory(),
        Backend::Directory => SessionOptions::directory(),
        Backend::Container => unreachable!("forks are made as MEMORY or DIRECTORY sessions"),
    }
}

/// An origin with nested files, an empty directory and binary bytes,
/// snapshotted as "base"; returns the session, the snapshot id and what
/// it holds.
async fn origin(client: &Client, backend: Backend) -> (Session, String, State) {
    let (session, _) = client.create(options(backend)).await.unwrap();
    write(&session, "src/main.rs", b"fn main() {}\n").await;
    write(&session, "src/lib/deep.rs", b"pub mod deep;\n").await;
    write(
        &session,
        "a.bin",
        &(0..=255u8).cycle().take(70_000).collect::<Vec<_>>(),
    )
    .await;
    write(&session, "b.txt", b"to be deleted in the fork\n").await;
    write(&session, "empty", b"").await;
    mkdir(&session, "empty-dir").await;
    let snapshot = client.snapshot(session.id(), "base").await.unwrap();
    let held = state(&session).await;
    assert_eq!(held.len(), 8, "{:?}", held.keys());
    (session, snapshot.id, held)
}

#[tokio::test]
async fn a_fork_holds_its_snapshot_exactly_and_diverges_independently_on_every_backend_pair() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for from in [Backend::Memory, Backend::Directory] {
        for to in [Backend::Memory, Backend::Directory] {
            let pair = format!("{from:?} -> {to:?}");
            let (origin, snapshot, base) = origin(&client, from).await;
            // The origin moves on before the fork: the fork is the snapshot,
            // not the live workspace.
            write(&origin, "after-snapshot.txt", b"not in the fork").await;
            let (fork, info) = client
                .create(options(to).from_snapshot(origin.id(), &snapshot))
                .await
                .unwrap();
            assert_eq!(info.backend, to, "{pair}");
            assert_ne!(fork.id(), origin.id());
            let forked_from = info.forked_from.clone().expect("forked_from echoed");
            assert_eq!(forked_from.session_id, origin.id(), "{pair}");
            assert_eq!(forked_from.snapshot_id, snapshot, "{pair}");
            assert_eq!(
                client.get_session(fork.id()).await.unwrap().forked_from,
                Some(forked_from.clone()),
                "{pair}"
            );
            let listed = client.list_sessions().await.unwrap();
            let listed = listed.iter().find(|s| s.id == fork.id()).unwrap();
            assert_eq!(listed.forked_from, Some(forked_from), "{pair}");
            assert_eq!(
                client.get_session(origin.id()).await.unwrap().forked_from,
                None
            );
            assert_eq!(state(&fork).await, base, "{pair}: the fork is the snapshot");
            let first_versions = versions(&fork).await;

            // Its own first snapshot: same tag and contents, its own id.
            let snaps = client.list_snapshots(fork.id()).await.unwrap();
            assert_eq!(snaps.len(), 1, "{pair}");
            assert_eq!(snaps[0].tag, "base", "{pair}");
            assert_ne!(snaps[0].id, snapshot, "{pair}");
            assert_eq!(snaps[0].file_count, 5, "{pair}");
            assert_eq!(snaps[0].total_bytes, 70_000 + 13 + 14 + 26, "{pair}");

            // Both diverge: each keeps only its own changes.
            write(&origin, "src/main.rs", b"fn main() { origin() }\n").await;
            delete(&origin, "a.bin").await;
            mkdir(&origin, "origin-dir").await;
            write(&fork, "src/main.rs", b"fn main() { fork() }\n").await;
            delete(&fork, "b.txt").await;
            mkdir(&fork, "fork-dir").await;

            let mut want_origin = base.clone();
            want_origin.insert(
                "after-snapshot.txt".into(),
                Some(b"not in the fork".to_vec()),
            );
            want_origin.insert(
                "src/main.rs".into(),
                Some(b"fn main() { origin() }\n".to_vec()),
            );
            want_origin.remove("a.bin");
            want_origin.insert("origin-dir".into(), None);
            let mut want_fork = base.clone();
            want_fork.insert(
                "src/main.rs".into(),
                Some(b"fn main() { fork() }\n".to_vec()),
            );
            want_fork.remove("b.txt");
            want_fork.insert("fork-dir".into(), None);
            assert_eq!(state(&origin).await, want_origin, "{pair}: origin");
            assert_eq!(state(&fork).await, want_fork, "{pair}: fork");

            // The fork can go back to where it started.
            client.restore(fork.id(), &snaps[0].id).await.unwrap();
            assert_eq!(state(&fork).await, base, "{pair}: restored fork");
            // What the fork never changed is not rewritten by the restore.
            let restored_versions = versions(&fork).await;
            for untouched in ["a.bin", "src/lib/deep.rs", "empty"] {
                assert_eq!(
                    restored_versions[untouched], first_versions[untouched],
                    "{pair}: {untouched} kept its version"
                );
            }
            assert_ne!(restored_versions["b.txt"], first_versions["b.txt"]);
            assert_eq!(
                state(&origin).await,
                want_origin,
                "{pair}: origin untouched"
            );
            client.delete_session(fork.id()).await.unwrap();
            client.delete_session(origin.id()).await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_fork_outlives_its_origin_session_and_snapshot() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for backend in [Backend::Memory, Backend::Directory] {
        let (origin, snapshot, base) = origin(&client, backend).await;
        let (fork, _) = client
            .create(options(backend).from_snapshot(origin.id(), &snapshot))
            .await
            .unwrap();
        let first = client.list_snapshots(fork.id()).await.unwrap()[0]
            .id
            .clone();
        client
            .delete_snapshot(origin.id(), &snapshot)
            .await
            .unwrap();
        client.delete_session(origin.id()).await.unwrap();
        assert_eq!(state(&fork).await, base, "{backend:?}");
        write(&fork, "src/main.rs", b"changed").await;
        client.restore(fork.id(), &first).await.unwrap();
        assert_eq!(
            state(&fork).await,
            base,
            "{backend:?}: restored after the origin went"
        );
        // And a fork of the fork.
        let (grandchild, info) = client
            .create(options(backend).from_snapshot(fork.id(), &first))
            .await
            .unwrap();
        assert_eq!(info.forked_from.unwrap().session_id, fork.id());
        assert_eq!(
            state(&grandchild).await,
            base,
            "{backend:?}: fork of a fork"
        );
    }
}

/// Regular files under `dir`: each inode once, with its link count and the
/// bytes it occupies on disk.
fn inodes(dir: &Path) -> BTreeMap<(u64, u64), (u64, u64)> {
    let mut out = BTreeMap::new();
    for entry in walk(dir) {
        let meta = std::fs::symlink_metadata(&entry).unwrap();
        if meta.is_file() {
            out.insert(
                (meta.dev(), meta.ino()),
                (meta.nlink(), meta.blocks() * 512),
            );
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

fn disk_bytes(dir: &Path) -> u64 {
    inodes(dir).values().map(|(_, bytes)| bytes).sum()
}

/// Whether files in `dir` can share blocks (`FICLONE`).
fn reflinks_in(dir: &Path) -> bool {
    let (a, b) = (dir.join("reflink-probe-a"), dir.join("reflink-probe-b"));
    std::fs::write(&a, b"probe").unwrap();
    let src = std::fs::File::open(&a).unwrap();
    let dst = std::fs::File::create(&b).unwrap();
    let ok = rustix::fs::ioctl_ficlone(&dst, &src).is_ok();
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    ok
}

#[tokio::test]
async fn a_directory_fork_shares_its_origins_stored_objects() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (origin, _) = client.create(SessionOptions::directory()).await.unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let big: Vec<u8> = (0..16 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    write(&origin, "big.bin", &big).await;
    write(&origin, "dir/small.txt", b"small").await;
    let snapshot = client.snapshot(origin.id(), "big").await.unwrap();
    let sessions = server.data_dir().join("sessions");
    let before = disk_bytes(&sessions);

    let (fork, _) = client
        .create(SessionOptions::directory().from_snapshot(origin.id(), &snapshot.id))
        .await
        .unwrap();
    let grown = disk_bytes(&sessions) - before;
    let fork_objects = sessions.join(fork.id()).join("objects");
    let objects = inodes(&fork_objects);
    assert_eq!(objects.len(), 2, "both contents are in the fork's store");
    for (nlink, _) in objects.values() {
        assert!(
            *nlink >= 2,
            "stored objects are shared, not copied: {nlink} links"
        );
    }
    // The snapshot's manifests too (the fork adds its own, small, that
    // record its files' identities).
    let trees = inodes(&sessions.join(origin.id()).join("trees"));
    assert!(!trees.is_empty() && trees.values().all(|(nlink, _)| *nlink >= 2));
    // The store adds nothing; the workspace is a copy unless the
    // filesystem shares blocks (then it adds almost nothing either).
    let size = big.len() as u64;
    if reflinks_in(&sessions) {
        assert!(
            grown < size / 2,
            "grew {grown} bytes for a {size}-byte snapshot"
        );
    } else {
        assert!(
            grown < size + size / 2,
            "grew {grown} bytes for a {size}-byte snapshot"
        );
    }
    let mut read = Vec::new();
    fork.download("big.bin", &mut read).await.unwrap();
    assert!(read == big, "the fork's bytes are the snapshot's");

    // Deleting the origin keeps the fork's shared objects.
    client.delete_session(origin.id()).await.unwrap();
    for (nlink, _) in inodes(&fork_objects).values() {
        assert_eq!(*nlink, 1);
    }
    write(&fork, "big.bin", b"overwritten").await;
    let first = client.list_snapshots(fork.id()).await.unwrap()[0]
        .id
        .clone();
    client.restore(fork.id(), &first).await.unwrap();
    let mut read = Vec::new();
    fork.download("big.bin", &mut read).await.unwrap();
    assert!(read == big, "restored from the shared objects");
}

fn session_dirs(server: &TestServer) -> HashSet<String> {
    match std::fs::read_dir(server.data_dir().join("sessions")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => HashSet::new(),
    }
}

async fn session_ids(sessions: &mut SessionsClient<tonic::transport::Channel>) -> Vec<String> {
    let mut ids: Vec<String> = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn every_refused_fork_says_why_and_creates_nothing() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let mut sessions = SessionsClient::new(server.channel().await);
    for backend in [Backend::Memory, Backend::Directory] {
        let (origin, snapshot, _) = origin(&client, backend).await;
        let fork = |target: proto::session::Backend, session: &str, snapshot: &str| {
            proto::CreateSessionRequest {
                backend: target as i32,
                from_snapshot: Some(proto::SnapshotRef {
                    session_id: session.to_string(),
                    snapshot_id: snapshot.to_string(),
                }),
                ..Default::default()
            }
        };
        let limits = |l: proto::SessionLimits| Some(l);
        for target in [
            proto::session::Backend::Memory,
            proto::session::Backend::Directory,
        ] {
            let unknown_id = "00000000-0000-4000-8000-000000000000";
            let cases: Vec<(&str, proto::CreateSessionRequest, Code, &str)> = vec![
                (
                    "unknown session",
                    fork(target, unknown_id, &snapshot),
                    Code::NotFound,
                    "SESSION_NOT_FOUND",
                ),
                (
                    "empty session id",
                    fork(target, "", &snapshot),
                    Code::NotFound,
                    "SESSION_NOT_FOUND",
                ),
                (
                    "unknown snapshot",
                    fork(target, origin.id(), unknown_id),
                    Code::NotFound,
                    "SNAPSHOT_NOT_FOUND",
                ),
                (
                    "malformed snapshot id",
                    fork(target, origin.id(), "../../etc"),
                    Code::NotFound,
                    "SNAPSHOT_NOT_FOUND",
                ),
                (
                    "too many files",
                    proto::CreateSessionRequest {
                        limits: limits(proto::SessionLimits {
                            max_files: 4,
                            ..Default::default()
                        }),
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::ResourceExhausted,
                    "QUOTA_EXCEEDED",
                ),
                (
                    "too many bytes",
                    proto::CreateSessionRequest {
                        limits: limits(proto::SessionLimits {
                            max_total_bytes: 70_000,
                            ..Default::default()
                        }),
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::ResourceExhausted,
                    "QUOTA_EXCEEDED",
                ),
                (
                    "paths too deep",
                    proto::CreateSessionRequest {
                        limits: limits(proto::SessionLimits {
                            max_path_depth: 2,
                            ..Default::default()
                        }),
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::InvalidArgument,
                    "INVALID_PATH",
                ),
                (
                    "with seed files",
                    proto::CreateSessionRequest {
                        seed_files: [("x".to_string(), b"x".to_vec().into())].into(),
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::InvalidArgument,
                    "INVALID_ARGUMENT",
                ),
                (
                    "with a root",
                    proto::CreateSessionRequest {
                        root: server.data_dir().display().to_string(),
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::InvalidArgument,
                    "INVALID_ARGUMENT",
                ),
                (
                    "with a mount",
                    proto::CreateSessionRequest {
                        mounts: vec![proto::HostMount {
                            host_path: server.data_dir().display().to_string(),
                            mount_path: "m".into(),
                            ..Default::default()
                        }],
                        ..fork(target, origin.id(), &snapshot)
                    },
                    Code::InvalidArgument,
                    "INVALID_ARGUMENT",
                ),
            ];
            let mut cases = cases;
            if target == proto::session::Backend::Memory {
                // A CONTAINER session's files belong to its container: a
                // fork is never made as one.
                cases.push((
                    "into a container",
                    proto::CreateSessionRequest {
                        container: Some(proto::ContainerSpec {
                            runtime: "bwrap".into(),
                            name: "c1".into(),
                            workdir: "/workspace".into(),
                        }),
                        ..fork(proto::session::Backend::Container, origin.id(), &snapshot)
                    },
                    Code::InvalidArgument,
                    "INVALID_ARGUMENT",
                ));
            }
            for (case, request, code, why) in cases {
                let (ids, dirs) = (session_ids(&mut sessions).await, session_dirs(&server));
                let status = sessions.create_session(request).await.unwrap_err();
                let case = format!("{backend:?} -> {target:?}: {case}");
                assert_eq!(status.code(), code, "{case}: {status:?}");
                assert_eq!(reason(&status), why, "{case}: {status:?}");
                assert_eq!(session_ids(&mut sessions).await, ids, "{case}: no session");
                assert_eq!(session_dirs(&server), dirs, "{case}: no directory");
            }
        }
        // The limits that do fit the snapshot are accepted.
        let fits = SessionLimits {
            max_files: 5,
            max_total_bytes: 70_053,
            ..SessionLimits::default()
        };
        client
            .create(
                options(backend)
                    .limits(fits)
                    .from_snapshot(origin.id(), &snapshot),
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_directory_fork_survives_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (origin, snapshot, base) = origin(&client, Backend::Directory).await;
    let (fork, info) = client
        .create(SessionOptions::directory().from_snapshot(origin.id(), &snapshot))
        .await
        .unwrap();
    let snaps = client.list_snapshots(fork.id()).await.unwrap();
    let fork_id = fork.id().to_string();
    drop((fork, origin, client));
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let again = client.get_session(&fork_id).await.unwrap();
    assert_eq!(again.forked_from, info.forked_from);
    let fork = client.session(&fork_id);
    assert_eq!(state(&fork).await, base);
    assert_eq!(client.list_snapshots(&fork_id).await.unwrap(), snaps);
    write(&fork, "new.txt", b"after the restart").await;
    client.restore(&fork_id, &snaps[0].id).await.unwrap();
    assert_eq!(state(&fork).await, base);
}

#[tokio::test]
async fn a_fork_whose_caller_goes_away_leaves_nothing_behind() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let many = (0..4000).fold(SessionOptions::directory(), |o, i| {
        o.seed_file(format!("d{}/f{i}.txt", i % 40), format!("file {i}\n"))
    });
    let (origin, _) = client.create(many).await.unwrap();
    let snapshot = client.snapshot(origin.id(), "many").await.unwrap();
    let mut sessions = SessionsClient::new(server.channel().await);
    let (ids, dirs) = (session_ids(&mut sessions).await, session_dirs(&server));
    let mut cut_short = 0;
    for wait_ms in [2, 5, 10, 20, 40, 80] {
        let request = proto::CreateSessionRequest {
            backend: proto::session::Backend::Directory as i32,
            from_snapshot: Some(proto::SnapshotRef {
                session_id: origin.id().to_string(),
                snapshot_id: snapshot.id.clone(),
            }),
            ..Default::default()
        };
        let mut caller = sessions.clone();
        let call = caller.create_session(request);
        let made = tokio::time::timeout(std::time::Duration::from_millis(wait_ms), call).await;
        if let Ok(made) = made {
            // Finished before its caller left: a whole fork, kept.
            let id = made.unwrap().into_inner().session_id;
            client.delete_session(&id).await.unwrap();
            continue;
        }
        // Whatever the fork had made goes once its task stops.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let now = (session_ids(&mut sessions).await, session_dirs(&server));
            if now == (ids.clone(), dirs.clone()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {wait_ms} ms: left behind {now:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        cut_short += 1;
    }
    assert!(cut_short > 0, "no fork was cut short by its caller");
    assert_eq!(session_ids(&mut sessions).await, ids);
}

#[tokio::test]
async fn only_the_admin_token_forks_and_the_fork_has_a_token_of_its_own() {
    const ADMIN: &str = "admin-token-for-fork-tests-012345";
    let server = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let admin = anonymous.clone().with_token(ADMIN).unwrap();
    let (origin, info) = admin
        .create(SessionOptions::directory().seed_file("a.txt", "origin\n"))
        .await
        .unwrap();
    let snapshot = admin.snapshot(origin.id(), "base").await.unwrap();
    let origin_token = info.token.clone().expect("a token with tokens on");
    let before = admin.list_sessions().await.unwrap().len();

    // The origin's own token opens the origin, not the Sessions service.
    let with_origin_token = anonymous.clone().with_token(&origin_token).unwrap();
    let fork = SessionOptions::directory().from_snapshot(origin.id(), &snapshot.id);
    for client in [&anonymous, &with_origin_token] {
        let err = client.create_session(fork.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err}");
        assert_eq!(err.reason(), "UNAUTHENTICATED", "{err}");
    }
    assert_eq!(admin.list_sessions().await.unwrap().len(), before);

    let (forked, made) = admin.create(fork).await.unwrap();
    let fork_token = made.token.clone().expect("the fork's own token");
    assert_ne!(fork_token, origin_token);
    let mine = anonymous
        .session(forked.id())
        .with_token(&fork_token)
        .unwrap();
    assert_eq!(mine.read_to_string("a.txt").await.unwrap(), "origin\n");
    let theirs = anonymous
        .session(forked.id())
        .with_token(&origin_token)
        .unwrap();
    assert!(theirs.read_to_string("a.txt").await.is_err());
}

/// A fork keeps every file's and directory's permission bits, and files'
/// modification times, on every backend pair.
#[tokio::test]
async fn a_fork_keeps_bits_and_times_on_every_backend_pair() {
    use wsfs_client::{MkdirOptions, Permissions};
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let bits = |b: u32| Some(Permissions::new(b).unwrap());
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    for from in [Backend::Memory, Backend::Directory] {
        let (origin, _) = client.create(options(from)).await.unwrap();
        let private = MkdirOptions {
            permissions: bits(0o700),
            ..MkdirOptions::default()
        };
        origin.mkdir(&p("bin"), private).await.unwrap();
        let script = WriteOptions {
            permissions: bits(0o755),
            modified: Some(when),
            ..WriteOptions::default()
        };
        origin
            .write(&p("bin/run.sh"), "echo hi\n", script)
            .await
            .unwrap();
        // Bits a usual umask (022) would trim from a new file.
        let shared = WriteOptions {
            permissions: bits(0o666),
            ..WriteOptions::default()
        };
        origin
            .write(&p("bin/shared.txt"), "for all\n", shared)
            .await
            .unwrap();
        let snapshot = client.snapshot(origin.id(), "bits").await.unwrap().id;
        for to in [Backend::Memory, Backend::Directory] {
            let pair = format!("{from:?} -> {to:?}");
            let (fork, _) = client
                .create(options(to).from_snapshot(origin.id(), &snapshot))
                .await
                .unwrap();
            let dir = fork.stat(&p("bin")).await.unwrap();
            assert_eq!(dir.permissions.bits(), 0o700, "{pair}");
            let file = fork.stat(&p("bin/run.sh")).await.unwrap();
            assert_eq!(file.permissions.bits(), 0o755, "{pair}");
            assert_eq!(file.modified, when, "{pair}");
            let shared = fork.stat(&p("bin/shared.txt")).await.unwrap();
            assert_eq!(shared.permissions.bits(), 0o666, "{pair}");
        }
    }
}
