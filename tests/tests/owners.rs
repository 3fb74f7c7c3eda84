//! Owners of a DIRECTORY session's files: everything the service creates
//! (writes, parents, Mkdir, Copy, Restore, Import, seeds, the session root)
//! belongs to the session's uid:gid with the owner's default bits, so a
//! program running as that user edits what an agent wrote; an owner on
//! another backend, or one the server cannot chown to, is refused before
//! anything is made. These tests run as root (they need CAP_CHOWN) and
//! return early otherwise.

use futures::StreamExt;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tonic::Code;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::*;
use wsfs::{Filesystem, MkdirOptions, Permissions, TransferOptions, WriteOptions};
use wsfs_client::{Client, FileOwner, HostMount, SessionInfo, SessionOptions};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, reason};

const UID: u32 = 1000;
const GID: u32 = 1000;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether this test process may give files away; says so when not.
fn can_chown() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipping: changing owners needs root");
    }
    root
}

fn root_of(info: &SessionInfo) -> PathBuf {
    info.root_path
        .clone()
        .expect("a DIRECTORY session has a root")
}

/// Every entry under `root` (and `root` itself) with its uid, gid and bits.
fn owners_under(root: &Path) -> Vec<(PathBuf, u32, u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
        out.push((path, meta.uid(), meta.gid(), meta.mode() & 0o777));
    }
    out.sort();
    out
}

#[track_caller]
fn assert_all_owned(root: &Path, when: &str) {
    let entries = owners_under(root);
    assert!(
        entries.len() > 1,
        "{when}: nothing under {}",
        root.display()
    );
    for (path, uid, gid, _) in &entries {
        assert_eq!(
            (*uid, *gid),
            (UID, GID),
            "{when}: {} is not owned by {UID}:{GID}",
            path.display()
        );
    }
}

fn bits(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_the_service_creates_belongs_to_the_owner_through_copy_restore_and_import() {
    if !can_chown() {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(host.path().join("lib/deep")).unwrap();
    std::fs::write(host.path().join("lib/deep/m.txt"), "mounted\n").unwrap();
    let allowed = host.path().to_path_buf();
    let server = TestServer::start_with(|c| c.allow_roots = vec![allowed]).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let owner = FileOwner {
        file_permissions: Some(Permissions::new(0o640).unwrap()),
        directory_permissions: Some(Permissions::new(0o750).unwrap()),
        ..FileOwner::new(UID, GID)
    };
    let (s, info) = client
        .create(
            SessionOptions::directory()
                .owner(owner)
                .mount(HostMount::new(host.path().join("lib"), "mounted"))
                .seed_file("seeded/s.txt", "seed\n"),
        )
        .await
        .unwrap();
    // GetSession echoes the owner with its bits.
    let got = client.get_session(&info.id).await.unwrap();
    assert_eq!(got.owner, Some(owner));
    let root = root_of(&info);
    assert!(root.join("mounted/deep/m.txt").is_file());
    assert!(root.join("seeded/s.txt").is_file());
    assert_all_owned(&root, "after mounts and seeds");
    let root_meta = std::fs::metadata(&root).unwrap();
    assert_eq!((root_meta.uid(), root_meta.gid()), (UID, GID));

    let recursive = wsfs::DeleteOptions {
        recursive: true,
        ..Default::default()
    };
    let parents = WriteOptions {
        create_parents: true,
        ..WriteOptions::default()
    };
    s.write(&p("a/b/c.txt"), "one\n", parents).await.unwrap();
    s.mkdir(&p("made"), MkdirOptions::default()).await.unwrap();
    let explicit = MkdirOptions {
        permissions: Some(Permissions::new(0o700).unwrap()),
        ..MkdirOptions::default()
    };
    s.mkdir(&p("private"), explicit).await.unwrap();
    let data = futures::stream::iter(vec![Ok(bytes::Bytes::from_static(b"bytes"))]).boxed();
    s.write_bytes(&p("bin/data"), parents, data).await.unwrap();
    // The owner's defaults, where the call named no bits; asked bits win.
    assert_eq!(bits(&root.join("a/b/c.txt")), 0o640);
    assert_eq!(bits(&root.join("a")), 0o750);
    assert_eq!(bits(&root.join("a/b")), 0o750);
    assert_eq!(bits(&root.join("made")), 0o750);
    assert_eq!(bits(&root.join("private")), 0o700);
    assert_eq!(bits(&root.join("bin/data")), 0o640);
    assert_all_owned(&root, "after writes");

    // A file the container made as someone else: overwriting it over gRPC
    // gives the new file to the owner and keeps its bits.
    std::fs::write(root.join("theirs.txt"), "x").unwrap();
    std::fs::set_permissions(
        root.join("theirs.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    s.write(&p("theirs.txt"), "y", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(bits(&root.join("theirs.txt")), 0o600);

    s.copy(&p("a"), &p("copied"), TransferOptions::default())
        .await
        .unwrap();
    s.copy(
        &p("a/b/c.txt"),
        &p("copied.txt"),
        TransferOptions::default(),
    )
    .await
    .unwrap();
    // A link a program made: the service's copies of it are the owner's.
    std::fs::create_dir(root.join("links")).unwrap();
    std::os::unix::fs::symlink("../a/b/c.txt", root.join("links/l")).unwrap();
    s.copy(&p("links"), &p("links-copy"), TransferOptions::default())
        .await
        .unwrap();
    s.copy(&p("links/l"), &p("l-copy"), TransferOptions::default())
        .await
        .unwrap();
    s.delete(&p("links"), recursive).await.unwrap();
    assert!(std::fs::symlink_metadata(root.join("l-copy"))
        .unwrap()
        .is_symlink());
    assert_all_owned(&root, "after copies");

    let snap = client.snapshot(&info.id, "before").await.unwrap();
    let mut zip = Vec::new();
    s.export_to_writer(&mut zip, None).await.unwrap();
    s.delete(&p("a"), recursive).await.unwrap();
    client.restore(&info.id, &snap.id).await.unwrap();
    assert!(root.join("a/b/c.txt").is_file());
    assert_all_owned(&root, "after restore");

    s.delete(&p("copied"), recursive).await.unwrap();
    s.import_from_reader(std::io::Cursor::new(zip))
        .await
        .unwrap();
    assert!(root.join("copied/b/c.txt").is_file());
    assert_all_owned(&root, "after import");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_survives_a_restart() {
    if !can_chown() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (_, info) = client
        .create(SessionOptions::directory().owner(FileOwner::new(UID, GID)))
        .await
        .unwrap();
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |_| {}).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let got = client.get_session(&info.id).await.unwrap();
    let owner = got.owner.expect("the owner is kept");
    assert_eq!((owner.uid, owner.gid), (UID, GID));
    assert_eq!(owner.file_permissions, Some(Permissions::FILE_DEFAULT));
    client
        .session(&info.id)
        .write(
            &p("later/x.txt"),
            "x",
            WriteOptions {
                create_parents: true,
                ..WriteOptions::default()
            },
        )
        .await
        .unwrap();
    let root = root_of(&info);
    assert_eq!(bits(&root.join("later/x.txt")), 0o644);
    assert_eq!(bits(&root.join("later")), 0o755);
    assert_all_owned(&root, "after a restart");
}

/// Appends a line to `file` as uid:gid 1000 with no supplementary groups
/// and no capabilities; the status says whether the kernel let it.
fn append_as_owner(setpriv: &Path, file: &Path) -> std::process::Output {
    Command::new(setpriv)
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
        .args([
            "--inh-caps=-all",
            "--",
            "sh",
            "-c",
            "echo edited >> \"$1\"",
            "sh",
        ])
        .arg(file)
        .output()
        .expect("setpriv runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_running_as_the_owner_edits_a_file_the_service_wrote_with_0644() {
    let Some(setpriv) = wsfs_tests::kit::system_tool("setpriv") else {
        return;
    };
    if !can_chown() {
        return;
    }
    let server = TestServer::start().await;
    // The owner must be able to reach the session's root.
    std::fs::set_permissions(server.data_dir(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let (owned, owned_info) = client
        .create(SessionOptions::directory().owner(FileOwner::new(UID, GID)))
        .await
        .unwrap();
    let (plain, plain_info) = client.create(SessionOptions::directory()).await.unwrap();
    for s in [&owned, &plain] {
        s.write_str("notes.txt", "written over gRPC\n")
            .await
            .unwrap();
    }
    let owned_file = root_of(&owned_info).join("notes.txt");
    let plain_file = root_of(&plain_info).join("notes.txt");
    assert_eq!(bits(&owned_file), 0o644);

    let out = append_as_owner(&setpriv, &owned_file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        owned.read_to_string("notes.txt").await.unwrap(),
        "written over gRPC\nedited\n"
    );
    // Without an owner the same program is refused: ownership is what let it.
    let out = append_as_owner(&setpriv, &plain_file);
    assert!(!out.status.success());
    assert_eq!(
        plain.read_to_string("notes.txt").await.unwrap(),
        "written over gRPC\n"
    );
}

fn owner(uid: u32, file: u32, dir: u32) -> Option<wsfs::proto::FileOwner> {
    Some(wsfs::proto::FileOwner {
        uid,
        gid: uid,
        file_permissions: file,
        directory_permissions: dir,
    })
}

fn uuid_like() -> String {
    "67e55044-10b1-426f-9247-bb680e5fe0c8".to_string()
}

/// The sessions the server lists and the entries of its sessions directory.
async fn sessions_and_dirs(
    sessions: &mut SessionsClient<tonic::transport::Channel>,
    data_dir: &Path,
) -> (usize, Vec<PathBuf>) {
    let listed = sessions
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions
        .len();
    let dirs = std::fs::read_dir(data_dir.join("sessions"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    (listed, dirs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_off_a_directory_session_or_with_bits_above_0777_is_refused_and_nothing_is_made() {
    let server = TestServer::start().await;
    let mut sessions = SessionsClient::new(server.channel().await);
    let before = sessions_and_dirs(&mut sessions, server.data_dir()).await;
    let asking = |backend: session::Backend, owner| CreateSessionRequest {
        backend: backend as i32,
        owner,
        ..Default::default()
    };
    let cases = [
        (
            asking(session::Backend::Memory, owner(UID, 0, 0)),
            "only to DIRECTORY",
        ),
        (
            CreateSessionRequest {
                container: Some(ContainerSpec {
                    runtime: "bwrap".into(),
                    name: "box".into(),
                    workdir: "/work".into(),
                }),
                ..asking(session::Backend::Container, owner(UID, 0, 0))
            },
            "only to DIRECTORY",
        ),
        (
            asking(session::Backend::Directory, owner(UID, 0o4644, 0)),
            "out of range",
        ),
        (
            asking(session::Backend::Directory, owner(UID, 0, 0o1777)),
            "out of range",
        ),
        (
            // A fork keeps its snapshot's files: never with an owner.
            CreateSessionRequest {
                from_snapshot: Some(SnapshotRef {
                    session_id: uuid_like(),
                    snapshot_id: uuid_like(),
                }),
                ..asking(session::Backend::Directory, owner(UID, 0, 0))
            },
            "from_snapshot",
        ),
    ];
    for (request, says) in cases {
        let asked = format!("{request:?}");
        let err = sessions.create_session(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{asked}");
        assert_eq!(reason(&err), "INVALID_ARGUMENT");
        assert!(err.message().contains(says), "{}", err.message());
        assert_eq!(
            sessions_and_dirs(&mut sessions, server.data_dir()).await,
            before
        );
    }
}

/// The real server binary, started without CAP_CHOWN (root without it, as
/// in a container that dropped it).
struct Unprivileged {
    child: Child,
    addr: String,
    data: tempfile::TempDir,
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_without_chown(setpriv: &Path) -> Unprivileged {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(setpriv)
        .args(["--inh-caps=-chown", "--bounding-set=-chown", "--"])
        .arg(wsfs_tests::cluster::binary("wsfs-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env_remove("WSFS_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv starts the server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "wsfs-server listening on 127.0.0.1:PORT (...)"
    let addr = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("the server did not say where it listens: {line:?}"))
        .to_string();
    Unprivileged { child, addr, data }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_chown_refuses_an_owner_naming_cap_chown_and_leaves_nothing() {
    let Some(setpriv) = wsfs_tests::kit::system_tool("setpriv") else {
        return;
    };
    if !is_root() {
        eprintln!("skipping: the refusal is tested by dropping CAP_CHOWN from root");
        return;
    }
    let server = start_without_chown(&setpriv);
    let client = Client::connect(&format!("http://{}", server.addr))
        .await
        .unwrap();
    let err = client
        .create(SessionOptions::directory().owner(wsfs_client::FileOwner::new(UID, GID)))
        .await
        .unwrap_err();
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(reason(&status), "PERMISSION_DENIED");
    assert!(
        status.message().contains("CAP_CHOWN"),
        "{}",
        status.message()
    );
    assert!(client.list_sessions().await.unwrap().is_empty());
    let left: Vec<_> = std::fs::read_dir(server.data.path().join("sessions"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
    // The same server still makes sessions without an owner.
    client.create(SessionOptions::directory()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_an_owned_session_with_its_modes_and_refuses_a_malformed_owner() {
    if !can_chown() {
        return;
    }
    let server = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    let wsfs = |args: &[&str]| {
        Command::new(wsfs_tests::cluster::binary("wsfs"))
            .args(["--server", &server.url()])
            .args(args)
            .env("WSFS_CONFIG", local.path().join("config.json"))
            .env_remove("WSFS_SESSION")
            .output()
            .expect("wsfs runs")
    };
    let create = ["session", "create", "--directory", "--owner"];
    let out = wsfs(
        &[
            &create[..],
            &["1000:1001", "--file-mode", "640", "--dir-mode", "750"],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client.get_session(&id).await.unwrap();
    let owner = info.owner.expect("the owner was sent");
    assert_eq!((owner.uid, owner.gid), (1000, 1001));
    assert_eq!(owner.file_permissions.map(Permissions::bits), Some(0o640));
    assert_eq!(
        owner.directory_permissions.map(Permissions::bits),
        Some(0o750)
    );
    let root = root_of(&info);
    let meta = std::fs::metadata(&root).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1000, 1001));

    let shown = wsfs(&["session", "show", &id]);
    assert!(
        String::from_utf8_lossy(&shown.stdout)
            .contains("owner:     1000:1001 (files 640, directories 750)"),
        "{}",
        String::from_utf8_lossy(&shown.stdout)
    );

    // Refused by the CLI before any call: nothing is made.
    for bad in [
        &["1000"][..],
        &["x:1"],
        &["1000:1000", "--file-mode", "4755"],
    ] {
        let out = wsfs(&[&create[..], bad].concat());
        assert!(!out.status.success(), "{bad:?} was accepted");
    }
    let out = wsfs(&["session", "create", "--owner", "1000:1000"]);
    assert!(
        !out.status.success(),
        "an owner without --directory was accepted"
    );
    assert_eq!(client.list_sessions().await.unwrap().len(), 1);
}
