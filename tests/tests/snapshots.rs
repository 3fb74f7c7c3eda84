//! Snapshots over real gRPC, for both backends: Snapshot, Restore,
//! ListSnapshots and DeleteSnapshot; exact restores with growing versions;
//! every failure path; and, for DIRECTORY sessions, copy-on-write storage
//! outside the workspace that survives a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tonic::Code;
use wsfs::proto;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs_client::{
    Client, DeleteOptions, Error, Filesystem, Session, SessionOptions, WriteOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::reason;

type State = wsfs_tests::kit::WorkspaceState;

struct Setup {
    server: TestServer,
    client: Client,
    session: Session,
    root_path: Option<PathBuf>,
}

async fn setup(options: SessionOptions) -> Setup {
    let server = TestServer::start().await;
    setup_on(server, options).await
}

async fn setup_on(server: TestServer, options: SessionOptions) -> Setup {
    let client = Client::connect(&server.url()).await.unwrap();
    let (session, info) = client.create(options).await.unwrap();
    Setup {
        server,
        client,
        session,
        root_path: info.root_path,
    }
}

impl Setup {
    fn id(&self) -> &str {
        self.session.id()
    }

    async fn write(&self, path: &str, data: &[u8]) -> u64 {
        let reader = std::io::Cursor::new(data.to_vec());
        self.session
            .upload(path, reader, WriteOptions::default())
            .await
            .unwrap()
            .version
    }

    async fn delete(&self, path: &str) {
        let options = DeleteOptions {
            recursive: true,
            ..DeleteOptions::default()
        };
        self.session
            .delete(&wsfs_client::parse_path(path).unwrap(), options)
            .await
            .unwrap();
    }

    async fn mkdir(&self, path: &str) {
        self.session
            .mkdir(&wsfs_client::parse_path(path).unwrap(), Default::default())
            .await
            .unwrap();
    }

    async fn state(&self) -> State {
        wsfs_tests::kit::workspace_state(&self.session).await
    }

    async fn versions(&self) -> BTreeMap<String, u64> {
        wsfs_tests::kit::workspace_versions(&self.session).await
    }

    /// The DIRECTORY session's directory under the data directory.
    fn session_dir(&self) -> PathBuf {
        self.server.data_dir().join("sessions").join(self.id())
    }

    async fn raw(&self) -> SessionsClient<tonic::transport::Channel> {
        SessionsClient::new(self.server.channel().await)
    }
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                bytes_under(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

const BINARY: &[u8] = b"\x00\xff\xfe binary \x00 bytes \x80";

/// Runs each scenario against a MEMORY and a DIRECTORY session.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $name() {
                super::$name(wsfs_client::SessionOptions::memory()).await
            })*
        }
        mod directory {
            $(#[tokio::test]
            async fn $name() {
                super::$name(wsfs_client::SessionOptions::directory()).await
            })*
        }
    };
}

both_backends!(
    restore_puts_back_exactly_what_the_snapshot_held,
    restore_gives_changed_paths_new_versions,
    snapshot_info_counts_files_and_lists_oldest_first,
    unknown_snapshot_is_not_found_and_changes_nothing,
    unknown_session_is_session_not_found,
    read_only_session_snapshots_but_refuses_restore,
    deleted_snapshot_is_gone_and_others_stay,
    restore_after_restore_returns_to_either_snapshot,
    writes_land_wholly_before_or_after_a_restore,
    diff_names_what_changed_since_the_snapshot_and_nothing_else,
    a_file_is_read_as_the_snapshot_holds_it,
    restore_of_a_directory_puts_back_that_subtree_and_nothing_else,
    restore_of_a_file_puts_back_that_file_and_nothing_else,
    restore_of_a_path_brings_back_its_missing_parents,
    restore_of_a_path_refuses_what_it_cannot_do_and_changes_nothing,
    restore_of_a_path_over_the_file_quota_changes_nothing,
);

/// The entries of `state` at or beneath `at` (all when `at` is empty), and
/// the others.
fn split_at(state: &State, at: &str) -> (State, State) {
    state
        .clone()
        .into_iter()
        .partition(|(path, _)| path == at || path.starts_with(&format!("{at}/")))
}

async fn restore_of_a_directory_puts_back_that_subtree_and_nothing_else(options: SessionOptions) {
    let s = setup(options).await;
    s.write("src/main.rs", b"fn main() {}\n").await;
    s.write("src/lib/a.rs", b"pub fn a() {}\n").await;
    s.write("src/kept.rs", b"untouched\n").await;
    s.mkdir("src/empty").await;
    s.write("src.txt", b"a sibling whose name starts like it\n")
        .await;
    s.write("docs/readme.md", b"docs\n").await;
    let (src_before, _) = split_at(&s.state().await, "src");
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    let kept_version = s.versions().await["src/kept.rs"];

    s.write("src/main.rs", b"fn main() { changed() }\n").await;
    s.delete("src/lib").await;
    s.delete("src/empty").await;
    s.write("src/new.rs", b"created since\n").await;
    s.mkdir("src/newdir/deeper").await;
    s.write("src.txt", b"changed outside\n").await;
    s.write("docs/later.md", b"made outside\n").await;
    let (_, outside_before) = split_at(&s.state().await, "src");
    let outside_versions: BTreeMap<String, u64> = s
        .versions()
        .await
        .into_iter()
        .filter(|(p, _)| outside_before.contains_key(p))
        .collect();

    let restored = s
        .client
        .restore_path(s.id(), &snap.id, &wsfs_client::parse_path("/src/").unwrap())
        .await
        .unwrap();

    let (src_after, outside_after) = split_at(&s.state().await, "src");
    assert_eq!(src_after, src_before, "src is the snapshot's");
    assert_eq!(outside_after, outside_before, "nothing outside src moved");
    let versions = s.versions().await;
    for (path, version) in &outside_versions {
        assert_eq!(versions[path], *version, "{path} kept its version");
    }
    assert_eq!(
        versions["src/kept.rs"], kept_version,
        "an unchanged file keeps its version"
    );
    assert_eq!(restored.file_count, 3);
    assert_eq!(
        restored.total_bytes,
        (b"fn main() {}\n".len() + b"pub fn a() {}\n".len() + b"untouched\n".len()) as u64
    );
}

async fn restore_of_a_file_puts_back_that_file_and_nothing_else(options: SessionOptions) {
    let s = setup(options).await;
    s.write("dir/a.txt", b"alpha\n").await;
    s.write("dir/b.txt", b"beta\n").await;
    s.write("turns.txt", BINARY).await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    s.write("dir/a.txt", b"changed\n").await;
    s.write("dir/b.txt", b"changed too\n").await;
    // A directory where the file was goes, with what it holds.
    s.delete("turns.txt").await;
    s.write("turns.txt/inner.txt", b"inside\n").await;
    let before = s.state().await;

    for (path, content) in [("dir/a.txt", &b"alpha\n"[..]), ("turns.txt", BINARY)] {
        let restored = s
            .client
            .restore_path(s.id(), &snap.id, &wsfs_client::parse_path(path).unwrap())
            .await
            .unwrap();
        assert_eq!(
            (restored.file_count, restored.total_bytes),
            (1, content.len() as u64)
        );
    }

    let mut expected = before;
    expected.insert("dir/a.txt".into(), Some(b"alpha\n".to_vec()));
    expected.remove("turns.txt/inner.txt");
    expected.insert("turns.txt".into(), Some(BINARY.to_vec()));
    assert_eq!(s.state().await, expected);
}

async fn restore_of_a_path_brings_back_its_missing_parents(options: SessionOptions) {
    let s = setup(options).await;
    s.write("dir/sub/b.bin", BINARY).await;
    s.write("dir/c.txt", b"a sibling, not restored\n").await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    s.delete("dir").await;

    s.client
        .restore_path(
            s.id(),
            &snap.id,
            &wsfs_client::parse_path("dir/sub/b.bin").unwrap(),
        )
        .await
        .unwrap();

    let expected: State = [
        ("dir".to_string(), None),
        ("dir/sub".to_string(), None),
        ("dir/sub/b.bin".to_string(), Some(BINARY.to_vec())),
    ]
    .into_iter()
    .collect();
    assert_eq!(s.state().await, expected);
}

async fn restore_of_a_path_refuses_what_it_cannot_do_and_changes_nothing(options: SessionOptions) {
    let s = setup(options).await;
    s.write("dir/sub/a.txt", b"alpha\n").await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    s.write("dir/sub/a.txt", b"changed\n").await;
    s.write("later.txt", b"made after the snapshot\n").await;
    // A file where the snapshot has a parent directory of the path.
    s.delete("dir").await;
    s.write("dir", b"a file now\n").await;
    let before = s.state().await;
    let versions = s.versions().await;
    let mut raw = s.raw().await;

    for (path, code, wanted) in [
        ("later.txt", Code::NotFound, "FILE_NOT_FOUND"),
        ("no/such/dir", Code::NotFound, "FILE_NOT_FOUND"),
        ("../outside", Code::InvalidArgument, "PATH_ESCAPES_ROOT"),
        ("a\0b", Code::InvalidArgument, "INVALID_PATH"),
        ("dir/sub", Code::FailedPrecondition, "NOT_A_DIRECTORY"),
        ("dir/sub/a.txt", Code::FailedPrecondition, "NOT_A_DIRECTORY"),
    ] {
        let status = raw
            .restore(proto::RestoreRequest {
                session_id: s.id().into(),
                snapshot_id: snap.id.clone(),
                path: path.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), code, "{path}: {status:?}");
        assert_eq!(reason(&status), wanted, "{path}: {status:?}");
    }
    let status = raw
        .restore(proto::RestoreRequest {
            session_id: s.id().into(),
            snapshot_id: "00000000-0000-0000-0000-000000000000".into(),
            path: "dir".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "SNAPSHOT_NOT_FOUND");

    assert_eq!(s.state().await, before);
    assert_eq!(s.versions().await, versions);
}

async fn restore_of_a_path_over_the_file_quota_changes_nothing(options: SessionOptions) {
    let s = setup(options.limits(wsfs_client::SessionLimits {
        max_files: 3,
        ..Default::default()
    }))
    .await;
    s.write("dir/a.txt", b"a\n").await;
    s.write("dir/b.txt", b"b\n").await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    s.delete("dir/b.txt").await;
    s.write("other/c.txt", b"c\n").await;
    s.write("other/d.txt", b"d\n").await;
    let before = s.state().await;

    // dir would hold two files again, beside the two in other/: four.
    let err = s
        .client
        .restore_path(s.id(), &snap.id, &wsfs_client::parse_path("dir").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
    assert_eq!(s.state().await, before);

    // Restoring the one file that is still there is within the quota.
    s.client
        .restore_path(
            s.id(),
            &snap.id,
            &wsfs_client::parse_path("dir/a.txt").unwrap(),
        )
        .await
        .unwrap();
}

async fn a_file_is_read_as_the_snapshot_holds_it(options: SessionOptions) {
    use futures::StreamExt;
    let s = setup(options).await;
    let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    s.write("big.bin", &big).await;
    s.write("dir/b.bin", BINARY).await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    s.write("big.bin", b"changed").await;
    s.delete("dir").await;

    let (size, mut chunks) = s
        .client
        .read_snapshot_file(s.id(), &snap.id, "big.bin")
        .await
        .unwrap();
    assert_eq!(size, big.len() as u64);
    let mut read = Vec::new();
    let mut messages = 0;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.len() <= wsfs::DEFAULT_CHUNK_SIZE);
        read.extend_from_slice(&chunk);
        messages += 1;
    }
    assert_eq!(read, big, "the snapshot's bytes, not today's");
    assert!(messages > 1, "streamed in chunks");

    let (_, chunks) = s
        .client
        .read_snapshot_file(s.id(), &snap.id, "dir/b.bin")
        .await
        .unwrap();
    let got: Vec<u8> = chunks.map(|c| c.unwrap().to_vec()).concat().await;
    assert_eq!(got, BINARY);

    for (path, reason) in [
        ("no-such.txt", "FILE_NOT_FOUND"),
        ("dir", "IS_A_DIRECTORY"),
        ("../escape", "PATH_ESCAPES_ROOT"),
    ] {
        let err = match s.client.read_snapshot_file(s.id(), &snap.id, path).await {
            Ok(_) => panic!("{path} was read"),
            Err(e) => e,
        };
        assert_eq!(err.reason(), reason, "{path}: {err}");
    }
    let err = match s
        .client
        .read_snapshot_file(s.id(), "00000000-0000-0000-0000-000000000000", "big.bin")
        .await
    {
        Ok(_) => panic!("an unknown snapshot was read"),
        Err(e) => e,
    };
    assert_eq!(err.reason(), "SNAPSHOT_NOT_FOUND");
}

async fn diff_names_what_changed_since_the_snapshot_and_nothing_else(options: SessionOptions) {
    use wsfs_client::SnapshotChangeKind::{Added, Deleted, Modified};
    let s = setup(options).await;
    s.write("a.txt", b"alpha\n").await;
    s.write("same-size.txt", b"12345\n").await;
    s.write("dir/sub/b.bin", BINARY).await;
    s.write("kept.txt", b"kept\n").await;
    s.write("turns.txt", b"a file, then a directory\n").await;
    s.mkdir("empty/inner").await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    let unchanged = s.client.diff_snapshot(s.id(), &snap.id).await.unwrap();
    assert_eq!(unchanged.changes, vec![], "nothing changed yet");

    s.write("a.txt", b"alpha, longer now\n").await;
    // Same size, other bytes: found by the contents, not the size.
    s.write("same-size.txt", b"54321\n").await;
    // Rewritten with the same bytes: not a change.
    s.write("kept.txt", b"kept\n").await;
    s.delete("dir").await;
    s.delete("empty/inner").await;
    s.write("new/n.txt", b"new\n").await;
    s.delete("turns.txt").await;
    s.mkdir("turns.txt").await;
    let diff = s.client.diff_snapshot(s.id(), &snap.id).await.unwrap();
    let got: Vec<(wsfs_client::SnapshotChangeKind, &str, bool)> = diff
        .changes
        .iter()
        .map(|c| (c.kind, c.path.as_str(), c.directory))
        .collect();
    assert_eq!(
        got,
        vec![
            (Modified, "a.txt", false),
            (Deleted, "dir", true),
            (Deleted, "dir/sub", true),
            (Deleted, "dir/sub/b.bin", false),
            (Deleted, "empty/inner", true),
            (Added, "new", true),
            (Added, "new/n.txt", false),
            (Modified, "same-size.txt", false),
            (Deleted, "turns.txt", false),
            (Added, "turns.txt", true),
        ]
    );
    assert!(!diff.truncated);

    let err = s
        .client
        .diff_snapshot(s.id(), "00000000-0000-0000-0000-000000000000")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SNAPSHOT_NOT_FOUND");
}

async fn restore_puts_back_exactly_what_the_snapshot_held(options: SessionOptions) {
    let s = setup(options).await;
    s.write("a.txt", b"alpha\n").await;
    s.write("dir/sub/b.bin", BINARY).await;
    s.write("dir/c.txt", b"gamma\n").await;
    s.mkdir("empty/inner").await;
    let before = s.state().await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();

    s.write("a.txt", b"changed\n").await;
    s.delete("dir").await;
    s.delete("empty").await;
    s.write("new.txt", b"created since\n").await;
    s.mkdir("newdir/deeper").await;
    s.write("empty", b"a file where a directory was").await;
    assert_ne!(s.state().await, before);

    let restored = s.client.restore(s.id(), &snap.id).await.unwrap();

    assert_eq!(s.state().await, before);
    assert_eq!(restored.file_count, 3);
    assert_eq!(
        restored.total_bytes,
        (b"alpha\n".len() + BINARY.len() + b"gamma\n".len()) as u64
    );
}

async fn restore_gives_changed_paths_new_versions(options: SessionOptions) {
    let s = setup(options).await;
    s.write("same.txt", b"untouched\n").await;
    s.write("edited.txt", b"one\n").await;
    s.write("deleted.txt", b"gone for a while\n").await;
    let snap = s.client.snapshot(s.id(), "").await.unwrap();
    let v_same = s.versions().await["same.txt"];
    s.write("edited.txt", b"two\n").await;
    s.delete("deleted.txt").await;
    let newest_before = s.write("new.txt", b"x").await;

    s.client.restore(s.id(), &snap.id).await.unwrap();

    let after = s.versions().await;
    assert!(after["edited.txt"] > newest_before, "{after:?}");
    assert!(after["deleted.txt"] > newest_before, "{after:?}");
    assert_eq!(
        after["same.txt"], v_same,
        "an unchanged file keeps its version"
    );
    assert!(!after.contains_key("new.txt"));
    // And writes after the restore keep counting up.
    let next = s.write("edited.txt", b"three\n").await;
    assert!(next > after["edited.txt"]);
}

async fn snapshot_info_counts_files_and_lists_oldest_first(options: SessionOptions) {
    let s = setup(options).await;
    assert!(s.client.list_snapshots(s.id()).await.unwrap().is_empty());
    s.write("a/one.txt", b"12345").await;
    s.mkdir("b").await;
    let first = s.client.snapshot(s.id(), "first").await.unwrap();
    s.write("a/two.txt", b"123").await;
    let second = s.client.snapshot(s.id(), "second").await.unwrap();

    assert!(uuid_like(&first.id), "{}", first.id);
    assert_ne!(first.id, second.id);
    assert_eq!(
        (first.tag.as_str(), first.file_count, first.total_bytes),
        ("first", 1, 5)
    );
    assert_eq!(
        (second.tag.as_str(), second.file_count, second.total_bytes),
        ("second", 2, 8)
    );
    assert!(first.created_at <= second.created_at);
    let listed = s.client.list_snapshots(s.id()).await.unwrap();
    assert_eq!(listed, vec![first, second]);
}

fn uuid_like(id: &str) -> bool {
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    groups == [8, 4, 4, 4, 12] && id.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

async fn unknown_snapshot_is_not_found_and_changes_nothing(options: SessionOptions) {
    let s = setup(options).await;
    s.write("keep.txt", b"kept\n").await;
    let snap = s.client.snapshot(s.id(), "").await.unwrap();
    s.write("later.txt", b"made after the snapshot\n").await;
    let before = s.state().await;
    let versions = s.versions().await;
    let mut raw = s.raw().await;

    for bad in [
        "0b6f6b1e-0000-4000-8000-000000000000",
        "not-a-uuid",
        "../../session.json",
    ] {
        let status = raw
            .restore(proto::RestoreRequest {
                session_id: s.id().into(),
                snapshot_id: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{bad}: {status:?}");
        assert_eq!(reason(&status), "SNAPSHOT_NOT_FOUND");
        let status = raw
            .delete_snapshot(proto::DeleteSnapshotRequest {
                session_id: s.id().into(),
                snapshot_id: bad.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{bad}: {status:?}");
        assert_eq!(reason(&status), "SNAPSHOT_NOT_FOUND");
    }
    let err = s.client.restore(s.id(), "nope").await.unwrap_err();
    assert!(matches!(err, Error::SnapshotNotFound { .. }), "{err:?}");

    assert_eq!(s.state().await, before);
    assert_eq!(s.versions().await, versions);
    let listed = s.client.list_snapshots(s.id()).await.unwrap();
    assert_eq!(listed, vec![snap]);
}

async fn unknown_session_is_session_not_found(options: SessionOptions) {
    let s = setup(options).await;
    let snap = s.client.snapshot(s.id(), "").await.unwrap();
    let ghost = "6a1c1d5e-1111-4111-8111-111111111111".to_string();
    let mut raw = s.raw().await;
    let statuses = [
        raw.snapshot(proto::SnapshotRequest {
            session_id: ghost.clone(),
            tag: String::new(),
        })
        .await
        .unwrap_err(),
        raw.restore(proto::RestoreRequest {
            session_id: ghost.clone(),
            snapshot_id: snap.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err(),
        raw.list_snapshots(proto::ListSnapshotsRequest {
            session_id: ghost.clone(),
        })
        .await
        .unwrap_err(),
        raw.delete_snapshot(proto::DeleteSnapshotRequest {
            session_id: ghost.clone(),
            snapshot_id: snap.id.clone(),
        })
        .await
        .unwrap_err(),
    ];
    for status in statuses {
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        assert_eq!(reason(&status), "SESSION_NOT_FOUND");
    }
    let err = s.client.snapshot(&ghost, "").await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err:?}");
    // The real session's snapshot is untouched.
    assert_eq!(s.client.list_snapshots(s.id()).await.unwrap(), vec![snap]);
}

async fn read_only_session_snapshots_but_refuses_restore(options: SessionOptions) {
    let s = setup(
        options
            .seed_file("seed.txt", "seeded\n")
            .seed_file("bin/x.bin", BINARY)
            .read_only(true),
    )
    .await;
    let before = s.state().await;
    let snap = s.client.snapshot(s.id(), "ro").await.unwrap();
    assert_eq!((snap.file_count, snap.tag.as_str()), (2, "ro"));

    let status = s
        .raw()
        .await
        .restore(proto::RestoreRequest {
            session_id: s.id().into(),
            snapshot_id: snap.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(reason(&status), "READ_ONLY");
    assert_eq!(s.state().await, before);
}

async fn deleted_snapshot_is_gone_and_others_stay(options: SessionOptions) {
    let s = setup(options).await;
    s.write("f.txt", b"one\n").await;
    let first = s.client.snapshot(s.id(), "first").await.unwrap();
    s.write("f.txt", b"two\n").await;
    let second = s.client.snapshot(s.id(), "second").await.unwrap();

    s.client.delete_snapshot(s.id(), &first.id).await.unwrap();

    assert_eq!(
        s.client.list_snapshots(s.id()).await.unwrap(),
        vec![second.clone()]
    );
    let err = s.client.restore(s.id(), &first.id).await.unwrap_err();
    assert!(matches!(err, Error::SnapshotNotFound { .. }), "{err:?}");
    let err = s
        .client
        .delete_snapshot(s.id(), &first.id)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SnapshotNotFound { .. }), "{err:?}");
    s.write("f.txt", b"three\n").await;
    s.client.restore(s.id(), &second.id).await.unwrap();
    assert_eq!(s.session.read_to_string("f.txt").await.unwrap(), "two\n");
}

async fn restore_after_restore_returns_to_either_snapshot(options: SessionOptions) {
    let s = setup(options).await;
    s.write("x/a.txt", b"A1").await;
    let one = s.client.snapshot(s.id(), "1").await.unwrap();
    let state_one = s.state().await;
    s.delete("x").await;
    s.write("x", b"now a file").await;
    s.write("y/b.txt", b"B2").await;
    let two = s.client.snapshot(s.id(), "2").await.unwrap();
    let state_two = s.state().await;

    s.client.restore(s.id(), &one.id).await.unwrap();
    assert_eq!(s.state().await, state_one);
    s.client.restore(s.id(), &two.id).await.unwrap();
    assert_eq!(s.state().await, state_two);
    s.client.restore(s.id(), &one.id).await.unwrap();
    assert_eq!(s.state().await, state_one);
}

async fn writes_land_wholly_before_or_after_a_restore(options: SessionOptions) {
    let s = setup(options).await;
    for i in 0..200 {
        s.write(&format!("t/{i:03}.txt"), b"snapshot\n").await;
    }
    let snap = s.client.snapshot(s.id(), "").await.unwrap();
    for i in 0..200 {
        s.write(&format!("t/{i:03}.txt"), b"changed\n").await;
    }

    let restore = {
        let (client, id, snap) = (s.client.clone(), s.id().to_string(), snap.id.clone());
        tokio::spawn(async move { client.restore(&id, &snap).await })
    };
    let mut writers = Vec::new();
    for i in 0..20 {
        let session = s.session.clone();
        writers.push(tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(i)).await;
            session
                .write_str(&format!("w/{i:02}.txt"), "racing\n")
                .await
        }));
    }
    restore.await.unwrap().unwrap();
    for w in writers {
        w.await.unwrap().unwrap();
    }

    // A write before the restore is undone by it; one after it has a newer
    // version than everything the restore wrote. None lands in between.
    let versions = s.versions().await;
    let newest_restored = (0..200)
        .map(|i| versions[&format!("t/{i:03}.txt")])
        .max()
        .unwrap();
    for (path, version) in &versions {
        if path.starts_with("w/") {
            assert!(
                *version > newest_restored,
                "{path} landed inside the restore"
            );
        }
    }
    for i in 0..200 {
        let text = s
            .session
            .read_to_string(&format!("t/{i:03}.txt"))
            .await
            .unwrap();
        assert_eq!(text, "snapshot\n");
    }
}

#[tokio::test]
async fn directory_snapshots_share_unchanged_files() {
    let s = setup(SessionOptions::directory()).await;
    // About 1 MiB of files that never change, and one small file that does.
    let big: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..16 {
        let mut content = big.clone();
        content[0] = i as u8;
        s.write(&format!("big/{i:02}.bin"), &content).await;
    }
    let workspace_bytes = 16 * big.len() as u64;
    for i in 0..100 {
        s.write("small.txt", format!("revision {i:03}\n").as_bytes())
            .await;
        s.client.snapshot(s.id(), &format!("r{i}")).await.unwrap();
    }
    let objects = bytes_under(&s.session_dir().join("objects"));
    let small = b"revision 000\n".len() as u64;
    assert!(
        objects >= workspace_bytes + 100 * small,
        "every content is stored: {objects}"
    );
    assert!(
        objects <= workspace_bytes + 100 * small + 4096,
        "unchanged files are stored once: {objects} bytes for a {workspace_bytes}-byte workspace"
    );
    assert_eq!(s.client.list_snapshots(s.id()).await.unwrap().len(), 100);
    // The store is outside the workspace: nothing of it shows there.
    let root = s.root_path.clone().unwrap();
    assert!(!s.session_dir().join("objects").starts_with(&root));
    let listed: Vec<String> = s.state().await.into_keys().collect();
    assert!(listed
        .iter()
        .all(|p| p == "big" || p.starts_with("big/") || p == "small.txt"));
}

#[tokio::test]
async fn deleting_a_snapshot_collects_only_its_unique_objects() {
    let s = setup(SessionOptions::directory()).await;
    let shared = vec![b's'; 10_000];
    let unique = vec![b'u'; 30_000];
    s.write("shared.bin", &shared).await;
    s.write("changing.bin", &unique).await;
    let first = s.client.snapshot(s.id(), "first").await.unwrap();
    s.write("changing.bin", b"small now").await;
    let second = s.client.snapshot(s.id(), "second").await.unwrap();
    let objects = s.session_dir().join("objects");
    assert_eq!(bytes_under(&objects), 10_000 + 30_000 + 9);

    s.client.delete_snapshot(s.id(), &first.id).await.unwrap();

    assert_eq!(bytes_under(&objects), 10_000 + 9);
    assert!(!s
        .session_dir()
        .join("snapshots")
        .join(format!("{}.json", first.id))
        .exists());
    s.write("shared.bin", b"overwritten").await;
    s.client.restore(s.id(), &second.id).await.unwrap();
    let mut back = Vec::new();
    s.session.download("shared.bin", &mut back).await.unwrap();
    assert_eq!(back, shared);

    s.client.delete_snapshot(s.id(), &second.id).await.unwrap();
    assert_eq!(bytes_under(&objects), 0);
    // With nothing left in the store, a new snapshot stores everything again.
    let third = s.client.snapshot(s.id(), "third").await.unwrap();
    s.delete("shared.bin").await;
    s.client.restore(s.id(), &third.id).await.unwrap();
    assert!(s.state().await.contains_key("shared.bin"));
}

#[tokio::test]
async fn directory_snapshots_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let s = setup_on(server, SessionOptions::directory()).await;
    s.write("keep/a.txt", b"kept across restarts\n").await;
    s.write("bin.bin", BINARY).await;
    s.mkdir("empty").await;
    let state = s.state().await;
    let snap = s.client.snapshot(s.id(), "durable").await.unwrap();
    let id = s.id().to_string();
    let Setup { server, .. } = s;
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let session = client.session(&id);
    assert_eq!(
        client.list_snapshots(&id).await.unwrap(),
        vec![snap.clone()]
    );
    session.write_str("keep/a.txt", "changed\n").await.unwrap();
    session.write_str("extra.txt", "new\n").await.unwrap();
    client.restore(&id, &snap.id).await.unwrap();
    let s = Setup {
        server,
        client,
        session,
        root_path: None,
    };
    assert_eq!(s.state().await, state);
}

/// A restart with a smaller byte budget: a snapshot that no longer fits
/// is refused before the workspace changes, not found out halfway.
#[tokio::test]
async fn restore_over_a_budget_lowered_since_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let s = setup_on(server, SessionOptions::directory()).await;
    s.write("big.bin", &[7u8; 4096]).await;
    s.write("src/a.rs", b"fn a() {}\n").await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    let id = s.id().to_string();
    let Setup { server, .. } = s;
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |c| c.default_max_total_bytes = 1024).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let session = client.session(&id);
    session.write_str("src/a.rs", "changed\n").await.unwrap();
    let s = Setup {
        server,
        client,
        session,
        root_path: None,
    };
    let state = s.state().await;
    let err = s.client.restore(&id, &snap.id).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
    assert_eq!(s.state().await, state);
}

#[tokio::test]
async fn directory_snapshot_leaves_symlinks_out_and_restore_never_follows_them() {
    let s = setup(SessionOptions::directory()).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), b"outside").unwrap();
    s.write("real.txt", b"real\n").await;
    let root = s.root_path.clone().unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
    let snap = s.client.snapshot(s.id(), "").await.unwrap();
    assert_eq!(snap.file_count, 1);

    s.delete("real.txt").await;
    s.client.restore(s.id(), &snap.id).await.unwrap();

    assert_eq!(
        std::fs::read(outside.path().join("secret.txt")).unwrap(),
        b"outside"
    );
    assert_eq!(std::fs::read(root.join("real.txt")).unwrap(), b"real\n");
    assert!(
        std::fs::symlink_metadata(root.join("link")).is_err(),
        "the restored tree is exactly the snapshot's, which holds no links"
    );
}

/// The file in the session's content store that holds exactly `content`.
fn stored_content(session_dir: &Path, content: &[u8]) -> PathBuf {
    fn find(dir: &Path, content: &[u8]) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if let Some(found) = find(&path, content) {
                    return Some(found);
                }
            } else if std::fs::read(&path).ok().as_deref() == Some(content) {
                return Some(path);
            }
        }
        None
    }
    find(&session_dir.join("objects"), content).expect("the content is stored")
}

/// A restore that must rewrite 20 files, deleting one and bringing one
/// back, after `damage` hit the stored content of the 11th file: it fails
/// and leaves every path, byte and version as it was, and no staged file
/// behind.
async fn restore_from_a_damaged_store_changes_nothing(damage: fn(&Path)) -> Error {
    let s = setup(SessionOptions::directory()).await;
    for i in 0..20 {
        s.write(
            &format!("f/{i:02}.txt"),
            format!("snapshot {i:02}\n").as_bytes(),
        )
        .await;
    }
    s.write("deleted/later.txt", b"deleted after the snapshot\n")
        .await;
    let snap = s.client.snapshot(s.id(), "before").await.unwrap();
    for i in 0..20 {
        s.write(
            &format!("f/{i:02}.txt"),
            format!("changed {i:02}\n").as_bytes(),
        )
        .await;
    }
    s.delete("deleted").await;
    s.write("created.txt", b"created after the snapshot\n")
        .await;
    damage(&stored_content(&s.session_dir(), b"snapshot 10\n"));
    let (before, versions) = (s.state().await, s.versions().await);

    let err = s.client.restore(s.id(), &snap.id).await.unwrap_err();

    assert_eq!(
        s.state().await,
        before,
        "a failed restore changed the workspace"
    );
    assert_eq!(s.versions().await, versions);
    let staging = s.session_dir().join("staging");
    assert_eq!(
        std::fs::read_dir(&staging).map_or(0, |d| d.count()),
        0,
        "a failed restore left staged files"
    );
    err
}

#[tokio::test]
async fn restore_with_a_corrupt_stored_content_fails_and_changes_nothing() {
    let err = restore_from_a_damaged_store_changes_nothing(|object| {
        // Same length, other bytes: only the hash tells.
        std::fs::write(object, b"snapshot 99\n").unwrap();
    })
    .await;
    assert_eq!(err.code(), Code::Internal, "{err}");
    assert!(err.to_string().contains("corrupt"), "{err}");
}

#[tokio::test]
async fn restore_with_a_missing_stored_content_fails_and_changes_nothing() {
    let err = restore_from_a_damaged_store_changes_nothing(|object| {
        std::fs::remove_file(object).unwrap();
    })
    .await;
    assert_eq!(err.code(), Code::Internal, "{err}");
    assert!(err.to_string().contains("f/10.txt"), "{err}");
}

#[tokio::test]
async fn restore_rewrites_only_the_files_that_changed() {
    let s = setup(SessionOptions::directory()).await;
    for i in 0..10 {
        s.write(&format!("f/{i}.txt"), format!("kept {i}\n").as_bytes())
            .await;
    }
    let snap = s.client.snapshot(s.id(), "base").await.unwrap();
    s.write("f/3.txt", b"changed\n").await;
    let before = s.versions().await;

    s.client.restore(s.id(), &snap.id).await.unwrap();

    let after = s.versions().await;
    // Files only: a directory's version moves with its entries.
    for (path, version) in after.iter().filter(|(p, _)| p.ends_with(".txt")) {
        if path == "f/3.txt" {
            assert!(
                version > &before[path],
                "a rewritten file gets a new version"
            );
        } else {
            assert_eq!(version, &before[path], "{path} was rewritten");
        }
    }
    assert_eq!(
        s.state().await["f/3.txt"].as_deref(),
        Some(&b"kept 3\n"[..])
    );
}
