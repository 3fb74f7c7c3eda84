//! Permission bits end to end: the wire refuses bits above 0o777 on every
//! call that takes them, changing nothing; a script written over gRPC with
//! 0o755 into a DIRECTORY session runs in a sandbox that shares the
//! session's directory, and keeps running after the workspace goes through
//! snapshot/restore, export/import and the CLI's push/pull.

use tonic::transport::Channel;
use tonic::Code;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::*;
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::reason;

const BACKENDS: [session::Backend; 2] = [session::Backend::Memory, session::Backend::Directory];

/// setuid, sticky, setgid, and a bit no mode has.
const REFUSED: [u32; 4] = [0o4755, 0o1000, 0o2755, 0o10000];

struct Wire {
    _server: TestServer,
    fs: FilesystemClient<Channel>,
    _sessions: SessionsClient<Channel>,
    session: String,
}

async fn wire(backend: session::Backend) -> Wire {
    wire_with(CreateSessionRequest {
        backend: backend as i32,
        ..Default::default()
    })
    .await
}

async fn wire_with(create: CreateSessionRequest) -> Wire {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let session = sessions
        .create_session(create)
        .await
        .expect("create a session")
        .into_inner()
        .session_id;
    Wire {
        _server: server,
        fs: FilesystemClient::new(channel),
        _sessions: sessions,
        session,
    }
}

impl Wire {
    /// Every entry with its kind, size, version and bits: what "nothing
    /// changed" is checked against.
    async fn state(&mut self) -> Vec<(String, i32, i64, u64, u32)> {
        let listing = self
            .fs
            .list(ListRequest {
                session_id: self.session.clone(),
                path: String::new(),
                depth: 64,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        listing
            .entries
            .into_iter()
            .map(|e| (e.path, e.kind, e.size_bytes, e.version, e.permissions))
            .collect()
    }

    async fn write(
        &mut self,
        path: &str,
        permissions: Option<u32>,
    ) -> Result<WriteResponse, tonic::Status> {
        self.fs
            .write(WriteRequest {
                session_id: self.session.clone(),
                path: path.to_string(),
                content: "#!/bin/sh\necho ok\n".to_string(),
                permissions,
                ..Default::default()
            })
            .await
            .map(tonic::Response::into_inner)
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, tonic::Status>, bits: u32) {
    let status = result.expect_err("bits above 0o777 must be refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{bits:o}: {status:?}");
    assert_eq!(reason(&status), "INVALID_ARGUMENT", "{bits:o}");
    assert!(
        status.message().contains("setuid, setgid and sticky"),
        "{bits:o}: {}",
        status.message()
    );
}

#[tokio::test]
async fn bits_above_0o777_are_refused_by_every_call_and_change_nothing() {
    for backend in BACKENDS {
        let mut w = wire(backend).await;
        w.write("run.sh", Some(0o750)).await.unwrap();
        let before = w.state().await;
        for bits in REFUSED {
            assert_refused(w.write("run.sh", Some(bits)).await, bits);
            assert_refused(w.write("new.sh", Some(bits)).await, bits);

            let header = WriteBytesRequest {
                payload: Some(write_bytes_request::Payload::Header(WriteBytesHeader {
                    session_id: w.session.clone(),
                    path: "run.sh".into(),
                    permissions: Some(bits),
                    ..Default::default()
                })),
            };
            let data = WriteBytesRequest {
                payload: Some(write_bytes_request::Payload::Data(b"x".to_vec().into())),
            };
            let upload = futures::stream::iter([header, data]);
            assert_refused(w.fs.write_bytes(upload).await, bits);

            let mkdir = MkdirRequest {
                session_id: w.session.clone(),
                path: "d".into(),
                permissions: Some(bits),
                ..Default::default()
            };
            assert_refused(w.fs.mkdir(mkdir).await, bits);

            let set = SetAttributesRequest {
                session_id: w.session.clone(),
                path: "run.sh".into(),
                permissions: Some(bits),
                ..Default::default()
            };
            assert_refused(w.fs.set_attributes(set).await, bits);
        }
        assert_eq!(w.state().await, before, "{backend:?}");
    }
}

#[tokio::test]
async fn set_attributes_on_a_read_only_session_is_read_only_and_changes_nothing() {
    for backend in BACKENDS {
        let mut w = wire_with(CreateSessionRequest {
            backend: backend as i32,
            read_only: true,
            seed_files: [(
                "run.sh".to_string(),
                bytes::Bytes::from_static(b"echo ok\n"),
            )]
            .into(),
            ..Default::default()
        })
        .await;
        let before = w.state().await;
        assert_eq!(before.len(), 1);

        let set = SetAttributesRequest {
            session_id: w.session.clone(),
            path: "run.sh".into(),
            permissions: Some(0o755),
            ..Default::default()
        };
        let status = w.fs.set_attributes(set).await.unwrap_err();

        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert_eq!(reason(&status), "READ_ONLY");
        assert_eq!(w.state().await, before, "{backend:?}");
    }
}

#[tokio::test]
async fn set_attributes_is_a_modified_event() {
    let mut w = wire(session::Backend::Directory).await;
    w.write("run.sh", None).await.unwrap();
    let since =
        w.fs.changes(ChangesRequest {
            session_id: w.session.clone(),
            since_seq: 0,
            max: 100,
        })
        .await
        .unwrap()
        .into_inner()
        .next_seq;

    let set = SetAttributesRequest {
        session_id: w.session.clone(),
        path: "run.sh".into(),
        permissions: Some(0o755),
        ..Default::default()
    };
    let done = w.fs.set_attributes(set).await.unwrap().into_inner();

    let events =
        w.fs.changes(ChangesRequest {
            session_id: w.session.clone(),
            since_seq: since,
            max: 100,
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let seen: Vec<(i32, &str, u64)> = events
        .iter()
        .map(|e| (e.kind, e.path.as_str(), e.version))
        .collect();
    assert_eq!(
        seen,
        [(ChangeKind::Modified as i32, "run.sh", done.version)]
    );
    assert_eq!(done.permissions, 0o755);
}

// ------------------------------------------------- snapshots and archives

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsfs::{Attributes, Filesystem, MkdirOptions, Permissions, WriteOptions};
use wsfs_client::{Client, SessionOptions, SnapshotChangeKind};
use wsfs_tests::kit::p;

fn typed_backends() -> [SessionOptions; 2] {
    [SessionOptions::memory(), SessionOptions::directory()]
}

/// A time ZIP entries hold exactly (even seconds, UTC) and files too.
fn an_old_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_600_000_000)
}

/// A script at 0o755 with an old time, a private file, a private directory.
async fn seed(s: &wsfs_client::Session) {
    let script = WriteOptions {
        permissions: Some(Permissions::new(0o755).unwrap()),
        modified: Some(an_old_time()),
        ..WriteOptions::default()
    };
    s.write(&p("bin/run.sh"), "#!/bin/sh\necho ok\n", script)
        .await
        .unwrap();
    let private = WriteOptions {
        permissions: Some(Permissions::new(0o600).unwrap()),
        ..WriteOptions::default()
    };
    s.write(&p("secret"), "k", private).await.unwrap();
    let dir = MkdirOptions {
        permissions: Some(Permissions::new(0o700).unwrap()),
        ..MkdirOptions::default()
    };
    s.mkdir(&p("private"), dir).await.unwrap();
}

async fn bits(s: &wsfs_client::Session, path: &str) -> u32 {
    s.stat(&p(path)).await.unwrap().permissions.bits()
}

async fn assert_seeded(s: &wsfs_client::Session, what: &str) {
    for (path, want) in [
        ("bin", 0o755),
        ("bin/run.sh", 0o755),
        ("secret", 0o600),
        ("private", 0o700),
    ] {
        assert_eq!(bits(s, path).await, want, "{what}: {path}");
    }
    let script = s.stat(&p("bin/run.sh")).await.unwrap();
    assert_eq!(script.modified, an_old_time(), "{what}: the script's time");
}

async fn chmod(s: &wsfs_client::Session, path: &str, value: u32) {
    let attributes = Attributes {
        permissions: Some(Permissions::new(value).unwrap()),
        ..Attributes::default()
    };
    s.set_attributes(&p(path), attributes).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_puts_bits_and_times_back_and_diff_reports_a_bits_only_change() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for options in typed_backends() {
        let (s, info) = client.create(options).await.unwrap();
        seed(&s).await;
        let taken = client.snapshot(&info.id, "seeded").await.unwrap();

        chmod(&s, "bin/run.sh", 0o644).await;
        chmod(&s, "private", 0o755).await;
        let diff = client.diff_snapshot(&info.id, &taken.id).await.unwrap();
        let changed: Vec<(SnapshotChangeKind, &str)> = diff
            .changes
            .iter()
            .map(|c| (c.kind, c.path.as_str()))
            .collect();
        assert_eq!(
            changed,
            [
                (SnapshotChangeKind::Modified, "bin/run.sh"),
                (SnapshotChangeKind::Modified, "private"),
            ],
            "{:?}",
            info.backend
        );

        client.restore(&info.id, &taken.id).await.unwrap();
        assert_seeded(&s, "after restore").await;
        let diff = client.diff_snapshot(&info.id, &taken.id).await.unwrap();
        assert!(diff.changes.is_empty(), "{:?}", diff.changes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_keep_bits_and_times_on_every_backend() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for from in typed_backends() {
        let (source, _) = client.create(from).await.unwrap();
        seed(&source).await;
        let mut zip = Vec::new();
        source.export_to_writer(&mut zip, None).await.unwrap();
        for to in typed_backends() {
            let (target, _) = client.create(to).await.unwrap();
            target
                .import_from_reader(std::io::Cursor::new(zip.clone()))
                .await
                .unwrap();
            assert_seeded(&target, "after import").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_masks_setuid_and_gives_archives_without_bits_the_defaults() {
    use std::io::Write;
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let plain = zip::write::SimpleFileOptions::default();
    zip.add_directory("files/dir/", plain).unwrap();
    zip.start_file("files/dir/plain.txt", plain).unwrap();
    zip.write_all(b"x").unwrap();
    zip.start_file("files/suid", plain.unix_permissions(0o4755))
        .unwrap();
    zip.write_all(b"y").unwrap();
    zip.start_file("manifest.json", plain).unwrap();
    zip.write_all(br#"{"version":"1","created_at":"","file_count":2,"total_bytes":2}"#)
        .unwrap();
    let zip = zip.finish().unwrap().into_inner();
    for options in typed_backends() {
        let (s, _) = client.create(options).await.unwrap();
        s.import_from_reader(std::io::Cursor::new(zip.clone()))
            .await
            .unwrap();
        assert_eq!(bits(&s, "dir").await, 0o755);
        assert_eq!(bits(&s, "dir/plain.txt").await, 0o644);
        assert_eq!(bits(&s, "suid").await, 0o755);
    }
}

// ------------------------------------------------- the proof, in a sandbox

const SCRIPT: &str = "#!/bin/sh\necho \"ran as $(id -u) in $(pwd)\"\n";

/// Runs `/workspace/run.sh` in a bwrap sandbox whose `/workspace` is
/// `root`, with no network and its own namespaces; its stdout, or why it
/// did not run.
fn run_in_sandbox(bwrap: &std::path::Path, root: &std::path::Path) -> Result<String, String> {
    let out = std::process::Command::new(bwrap)
        .args(["--ro-bind", "/usr", "/usr"])
        .args(["--symlink", "usr/bin", "/bin"])
        .args(["--symlink", "usr/lib", "/lib"])
        .args(["--symlink", "usr/lib64", "/lib64"])
        .args(["--proc", "/proc", "--dev", "/dev"])
        .arg("--bind")
        .arg(root)
        .arg("/workspace")
        .args([
            "--chdir",
            "/workspace",
            "--unshare-all",
            "--die-with-parent",
        ])
        .arg("/workspace/run.sh")
        .output()
        .map_err(|e| format!("bwrap did not start: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[track_caller]
fn assert_runs(bwrap: &std::path::Path, root: &std::path::Path, when: &str) {
    let out = run_in_sandbox(bwrap, root).unwrap_or_else(|e| panic!("{when}: {e}"));
    assert!(out.contains("in /workspace"), "{when}: {out}");
}

/// The `wsfs` binary this build made, beside the test binaries; `None`
/// (said on stderr) when only this test target was built.
fn cli_binary() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let found = exe.parent()?.parent()?.join("wsfs");
    if found.is_file() {
        return Some(found);
    }
    assert!(
        std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "WSFS_REQUIRE_TOOLS=1 and the wsfs binary is not built at {}",
        found.display()
    );
    eprintln!("skipping push/pull: build the wsfs binary (cargo build -p wsfs-client)");
    None
}

fn root_of(info: &wsfs_client::SessionInfo) -> std::path::PathBuf {
    info.root_path
        .clone()
        .expect("a DIRECTORY session has a root")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_written_with_0755_runs_in_a_sandbox_and_keeps_running_through_every_round_trip() {
    let Some(bwrap) = wsfs_tests::kit::system_tool("bwrap") else {
        return;
    };
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, info) = client.create(SessionOptions::directory()).await.unwrap();
    let executable = WriteOptions {
        permissions: Some(Permissions::new(0o755).unwrap()),
        ..WriteOptions::default()
    };
    s.write(&p("run.sh"), SCRIPT, executable).await.unwrap();
    assert_runs(&bwrap, &root_of(&info), "written over gRPC");

    // Without the bit the sandbox refuses it: the bit is what runs it.
    let taken = client.snapshot(&info.id, "runnable").await.unwrap();
    chmod(&s, "run.sh", 0o644).await;
    run_in_sandbox(&bwrap, &root_of(&info)).expect_err("a 0644 script must not run");
    client.restore(&info.id, &taken.id).await.unwrap();
    assert_runs(&bwrap, &root_of(&info), "after snapshot and restore");

    let mut zip = Vec::new();
    s.export_to_writer(&mut zip, None).await.unwrap();
    let (imported, imported_info) = client.create(SessionOptions::directory()).await.unwrap();
    imported
        .import_from_reader(std::io::Cursor::new(zip))
        .await
        .unwrap();
    assert_runs(&bwrap, &root_of(&imported_info), "after export and import");

    let Some(wsfs) = cli_binary() else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let cli = |args: &[&str], session: &str| {
        let out = std::process::Command::new(&wsfs)
            .args(["--server", &server.url(), "--session", session])
            .args(args)
            .env("WSFS_CONFIG", local.path().join("config.json"))
            .output()
            .expect("the wsfs binary runs");
        assert!(
            out.status.success(),
            "wsfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let pulled = local.path().join("pulled");
    let pulled_str = pulled.to_str().unwrap().to_string();
    cli(&["pull", "/", &pulled_str], &imported_info.id);
    assert_runs(&bwrap, &pulled, "after pull");
    let (pushed, pushed_info) = client.create(SessionOptions::directory()).await.unwrap();
    cli(&["push", &pulled_str, "/"], &pushed_info.id);
    assert_eq!(bits(&pushed, "run.sh").await, 0o755);
    assert_runs(&bwrap, &root_of(&pushed_info), "after pull and push");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_attributes_never_goes_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, info) = client.create(SessionOptions::directory()).await.unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "x").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let root = root_of(&info);
    std::os::unix::fs::symlink(&secret, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("dirlink")).unwrap();

    for path in ["link", "dirlink", "dirlink/secret"] {
        let attributes = Attributes {
            permissions: Some(Permissions::new(0o777).unwrap()),
            modified: Some(an_old_time()),
            if_version: None,
        };
        let err = s.set_attributes(&p(path), attributes).await.unwrap_err();
        assert_eq!(err.reason(), "PERMISSION_DENIED", "{path}: {err}");
    }
    let meta = std::fs::metadata(&secret).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_ne!(meta.modified().unwrap(), an_old_time());
}

/// A modification time that is no point in time (nanoseconds out of range,
/// before the epoch's representable range) is refused before anything
/// changes; the largest representable one is taken or refused cleanly, and
/// the server goes on serving.
#[tokio::test]
async fn times_at_the_edges_are_refused_or_taken_and_nothing_breaks() {
    for backend in BACKENDS {
        let mut w = wire(backend).await;
        w.write("run.sh", Some(0o750)).await.unwrap();
        let before = w.state().await;
        let session = w.session.clone();
        let set = |seconds: i64, nanos: i32| SetAttributesRequest {
            session_id: session.clone(),
            path: "run.sh".into(),
            modified_at: Some(prost_types::Timestamp { seconds, nanos }),
            ..Default::default()
        };
        let bad = set(0, 2_000_000_000);
        let status = w.fs.set_attributes(bad).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(reason(&status), "INVALID_ARGUMENT", "{status:?}");
        assert!(status.message().contains("modified_at"), "{status:?}");
        assert_eq!(w.state().await, before, "{backend:?}: nothing changed");

        for seconds in [i64::MAX, i64::MIN] {
            let before = w.state().await;
            match w.fs.set_attributes(set(seconds, 0)).await {
                Ok(_) => {}
                Err(status) => {
                    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
                    assert_eq!(w.state().await, before, "{backend:?}: nothing changed");
                }
            }
        }
        // Still serving, and the file still reads.
        w.write("after.sh", None).await.unwrap();
    }
}
