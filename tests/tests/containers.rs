//! CONTAINER sessions against a real sandbox (bwrap when installed): the
//! container and gRPC clients see one workspace; a stopped container is
//! UNAVAILABLE until it is back; bad requests create nothing; deleting the
//! session leaves the container's files; snapshots and archives round trip;
//! only the admin creates one.

use futures::StreamExt;
use tonic::Code;
use wsfs_client::{Backend, Client, Error, Filesystem, SessionInfo, SessionOptions};
use wsfs_tests::harness::{Sandbox, TestServer, SANDBOX_RUNTIME};
use wsfs_tests::kit::p;

const INNER: &str = env!("CARGO_BIN_EXE_wsfs-stdio");
const ADMIN: &str = "admin-token-for-tests-0123456789";

async fn server_for(sandbox: &Sandbox) -> TestServer {
    let runtime = sandbox.runtime();
    TestServer::start_with(|c| c.container_runtimes = vec![runtime]).await
}

async fn open(sandbox: &Sandbox) -> (TestServer, Client, SessionInfo) {
    let server = server_for(sandbox).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client.create_session(sandbox.options()).await.unwrap();
    (server, client, info)
}

fn assert_refused(err: &Error, code: Code, reason: &str) {
    assert_eq!(err.code(), code, "{err}");
    assert_eq!(err.reason(), reason, "{err}");
}

fn stdout(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn files_written_over_grpc_and_inside_the_container_are_one_workspace() {
    let sandbox = Sandbox::new(INNER, "box");
    let (_server, client, info) = open(&sandbox).await;
    assert_eq!(info.backend, Backend::Container);
    let shown = info.container.clone().unwrap();
    assert_eq!(
        (shown.runtime.as_str(), shown.name.as_str()),
        (SANDBOX_RUNTIME, "box")
    );
    let session = client.session(&info.id);

    session
        .write_str("src/run.sh", "echo from-grpc\n")
        .await
        .unwrap();
    assert_eq!(
        stdout(sandbox.run("cat src/run.sh && sh src/run.sh")),
        "echo from-grpc\nfrom-grpc\n"
    );
    assert!(sandbox.files().join("src/run.sh").is_file());

    stdout(sandbox.run("mkdir -p out && echo made-inside > out/result.txt"));
    assert_eq!(
        session.read_to_string("out/result.txt").await.unwrap(),
        "made-inside\n"
    );
    let (matches, _) = session.grep_query("made-inside").collect().await.unwrap();
    assert_eq!(matches.len(), 1);
    assert_eq!(matches[0].path.as_str(), "out/result.txt");
    // The server's own work never shows inside the container.
    let listed = stdout(sandbox.run("ls -A . src out"));
    assert!(!listed.contains(".wsfs"), "{listed}");
}

#[tokio::test]
async fn a_stopped_container_is_unavailable_until_it_is_back() {
    let sandbox = Sandbox::new(INNER, "box");
    let (_server, client, info) = open(&sandbox).await;
    let session = client.session(&info.id);
    session.write_str("kept.txt", "still here\n").await.unwrap();

    sandbox.stop();
    for _ in 0..2 {
        let err = session.read_to_string("kept.txt").await.unwrap_err();
        assert_refused(&err, Code::Unavailable, "UNAVAILABLE");
        let message = err.to_string();
        assert!(
            message.contains(SANDBOX_RUNTIME) && message.contains("'box'"),
            "{message}"
        );
    }

    sandbox.start();
    assert_eq!(
        session.read_to_string("kept.txt").await.unwrap(),
        "still here\n"
    );
    session.write_str("after.txt", "again\n").await.unwrap();
    assert_eq!(stdout(sandbox.run("cat after.txt")), "again\n");
}

#[tokio::test]
async fn bad_container_requests_are_refused_and_create_nothing() {
    let sandbox = Sandbox::new(INNER, "box");
    let server = server_for(&sandbox).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let workdir = sandbox.workdir();
    let cases = [
        (
            SessionOptions::container("docker", "box", &workdir),
            "unknown container runtime",
        ),
        (
            SessionOptions::container(SANDBOX_RUNTIME, "-rm", &workdir),
            "container name",
        ),
        (
            SessionOptions::container(SANDBOX_RUNTIME, "box;rm", &workdir),
            "container name",
        ),
        (
            SessionOptions::container(SANDBOX_RUNTIME, "box", "workspace"),
            "absolute",
        ),
        (
            SessionOptions::container(SANDBOX_RUNTIME, "box", "/workspace/../etc"),
            "canonical",
        ),
        (sandbox.options().root("/srv"), "neither root nor mounts"),
    ];
    for (options, says) in cases {
        let err = client.create_session(options).await.unwrap_err();
        assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert!(err.to_string().contains(says), "{err}");
    }
    let err = client
        .create_session(SessionOptions::container("docker", "box", &workdir))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(SANDBOX_RUNTIME), "{err}");
    // A container that is not there: the creation fails, nothing is left.
    let err = client
        .create_session(SessionOptions::container(
            SANDBOX_RUNTIME,
            "missing",
            &workdir,
        ))
        .await
        .unwrap_err();
    assert_refused(&err, Code::Unavailable, "UNAVAILABLE");
    assert!(client.list_sessions().await.unwrap().is_empty());
    assert!(!server.data_dir().join("containers").exists());
    assert_eq!(std::fs::read_dir(sandbox.files()).unwrap().count(), 0);

    // A server without runtimes offers no CONTAINER sessions at all.
    let bare = TestServer::start().await;
    let bare_client = Client::connect(&bare.url()).await.unwrap();
    let err = bare_client
        .create_session(sandbox.options())
        .await
        .unwrap_err();
    assert_refused(&err, Code::FailedPrecondition, "FAILED_PRECONDITION");
    assert!(err.to_string().contains("--container-runtime"), "{err}");
    assert!(bare_client.list_sessions().await.unwrap().is_empty());
}

#[tokio::test]
async fn deleting_the_session_leaves_the_container_and_its_files() {
    let sandbox = Sandbox::new(INNER, "box");
    let (server, client, info) = open(&sandbox).await;
    let session = client.session(&info.id);
    session.write_str("a/b.txt", "mine\n").await.unwrap();
    client.snapshot(&info.id, "before").await.unwrap();
    assert!(server.data_dir().join("containers").join(&info.id).exists());

    client.delete_session(&info.id).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(sandbox.files().join("a/b.txt")).unwrap(),
        "mine\n"
    );
    assert!(!server.data_dir().join("containers").join(&info.id).exists());
    assert_eq!(stdout(sandbox.run("cat a/b.txt")), "mine\n");
}

#[tokio::test]
async fn snapshots_and_archives_round_trip() {
    let sandbox = Sandbox::new(INNER, "box");
    let (_server, client, info) = open(&sandbox).await;
    let session = client.session(&info.id);
    session.write_str("src/lib.rs", "v1\n").await.unwrap();
    session
        .mkdir(&p("empty"), Default::default())
        .await
        .unwrap();

    let snap = client.snapshot(&info.id, "v1").await.unwrap();
    assert_eq!((snap.file_count, snap.total_bytes), (1, 3));
    assert_eq!(client.list_snapshots(&info.id).await.unwrap().len(), 1);
    let (size, mut chunks) = client
        .read_snapshot_file(&info.id, &snap.id, "src/lib.rs")
        .await
        .unwrap();
    assert_eq!(size, 3);
    assert_eq!(&chunks.next().await.unwrap().unwrap()[..], b"v1\n");

    session.write_str("src/lib.rs", "v2\n").await.unwrap();
    stdout(sandbox.run("echo junk > junk.txt && rmdir empty"));
    let diff = client.diff_snapshot(&info.id, &snap.id).await.unwrap();
    let changed: Vec<(&str, bool)> = diff
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.directory))
        .collect();
    assert_eq!(
        changed,
        [("empty", true), ("junk.txt", false), ("src/lib.rs", false)]
    );
    // A snapshot here is an archive restored whole: one path is refused,
    // with nothing changed.
    let err = client
        .restore_path(&info.id, &snap.id, &p("src"))
        .await
        .unwrap_err();
    assert_refused(&err, Code::Unimplemented, "UNIMPLEMENTED");
    assert_eq!(session.read_to_string("src/lib.rs").await.unwrap(), "v2\n");
    assert!(session.exists(&p("junk.txt")).await.unwrap().is_some());
    client.restore(&info.id, &snap.id).await.unwrap();
    assert_eq!(session.read_to_string("src/lib.rs").await.unwrap(), "v1\n");
    assert_eq!(session.exists(&p("junk.txt")).await.unwrap(), None);
    assert!(sandbox.files().join("empty").is_dir());
    assert_eq!(stdout(sandbox.run("cat src/lib.rs")), "v1\n");

    let archive = tempfile::tempdir().unwrap();
    let zip = archive.path().join("ws.zip");
    session.export_to(&zip).await.unwrap();
    session.write_str("src/lib.rs", "v3\n").await.unwrap();
    session.write_str("extra.txt", "x\n").await.unwrap();
    let (files, bytes) = session.import_from(&zip).await.unwrap();
    assert_eq!((files, bytes), (1, 3));
    assert_eq!(
        stdout(sandbox.run("cat src/lib.rs; ls")),
        "v1\nempty\nsrc\n"
    );

    client.delete_snapshot(&info.id, &snap.id).await.unwrap();
    let err = client.restore(&info.id, &snap.id).await.unwrap_err();
    assert_refused(&err, Code::NotFound, "SNAPSHOT_NOT_FOUND");
}

#[tokio::test]
async fn only_the_admin_creates_container_sessions() {
    let sandbox = Sandbox::new(INNER, "box");
    let runtime = sandbox.runtime();
    let server = TestServer::start_with(|c| {
        c.container_runtimes = vec![runtime];
        c.admin_token = Some(ADMIN.into());
    })
    .await;
    let admin = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let (_, other) = admin.create(SessionOptions::memory()).await.unwrap();
    let session_token = other.token.unwrap();
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let holder = anonymous.clone().with_token(&session_token).unwrap();
    for client in [&anonymous, &holder] {
        let err = client.create_session(sandbox.options()).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    }
    assert_eq!(admin.list_sessions().await.unwrap().len(), 1);
    let info = admin.create_session(sandbox.options()).await.unwrap();
    assert_eq!(info.backend, Backend::Container);
}

#[tokio::test]
async fn a_read_only_container_session_holds_its_seeds_and_refuses_writes() {
    let sandbox = Sandbox::new(INNER, "box");
    let server = server_for(&sandbox).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(
            sandbox
                .options()
                .read_only(true)
                .seed_file("seed.txt", "seeded\n"),
        )
        .await
        .unwrap();
    assert!(info.read_only);
    let session = client.session(&info.id);
    assert_eq!(
        session.read_to_string("seed.txt").await.unwrap(),
        "seeded\n"
    );
    let err = session
        .write_str("seed.txt", "changed\n")
        .await
        .unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "READ_ONLY");
    let archive = tempfile::tempdir().unwrap();
    let zip = archive.path().join("ws.zip");
    session.export_to(&zip).await.unwrap();
    let err = session.import_from(&zip).await.unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "READ_ONLY");
    assert_eq!(
        stdout(sandbox.run("cat seed.txt; ls")),
        "seeded\nseed.txt\n"
    );
}

#[tokio::test]
async fn watch_reports_changes_made_through_a_container_session() {
    let sandbox = Sandbox::new(INNER, "box");
    let (_server, client, info) = open(&sandbox).await;
    let session = client.session(&info.id);
    let mut events = session.watch("").recursive().stream().await.unwrap();
    session.write_str("notes/a.md", "hello\n").await.unwrap();
    let wanted = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            if event.path == "notes/a.md" {
                return event;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("an event for notes/a.md within 5 s");
    assert_eq!(wanted.kind(), wsfs_client::ChangeKind::Created);
}

/// A program inside the container changes the workdir: the session's
/// Watch reports it, caller `external`, as it does for a DIRECTORY
/// session's bind-mounted root; a change made through the session is
/// reported under its caller.
#[tokio::test]
async fn watch_reports_changes_made_inside_the_container_as_external() {
    let sandbox = Sandbox::new(INNER, "box");
    let (_server, client, info) = open(&sandbox).await;
    let session = client.session(&info.id);
    let mut events = session.watch("").recursive().stream().await.unwrap();
    session.write_str("through.txt", "one\n").await.unwrap();
    stdout(sandbox.run("mkdir -p out && echo made-inside > out/inside.txt"));
    let seen = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            if event.path.is_empty() {
                continue; // READY, keep-alives
            }
            let done = event.path == "out/inside.txt";
            seen.push((event.path.clone(), event.caller.clone()));
            if done {
                return seen;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("an event for out/inside.txt within 20 s");
    let inside = seen.iter().find(|(p, _)| p == "out/inside.txt").unwrap();
    assert_eq!(inside.1, "external", "{seen:?}");
    assert!(
        seen.iter()
            .any(|(p, c)| p == "through.txt" && c == "system"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_restarted_server_forgets_container_sessions_but_not_their_files() {
    let sandbox = Sandbox::new(INNER, "box");
    let data = tempfile::tempdir().unwrap();
    let runtime = sandbox.runtime();
    let server = TestServer::start_at(data.path(), |c| {
        c.container_runtimes = vec![runtime.clone()]
    })
    .await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client.create_session(sandbox.options()).await.unwrap();
    client
        .session(&info.id)
        .write_str("kept.txt", "kept\n")
        .await
        .unwrap();
    client.snapshot(&info.id, "t").await.unwrap();
    assert!(data.path().join("containers").join(&info.id).exists());
    drop(client);
    server.stop().await.unwrap();

    let server = TestServer::start_at(data.path(), |c| c.container_runtimes = vec![runtime]).await;
    let client = Client::connect(&server.url()).await.unwrap();
    assert!(client.list_sessions().await.unwrap().is_empty());
    assert!(!data.path().join("containers").exists());
    assert_eq!(stdout(sandbox.run("cat kept.txt")), "kept\n");
}
