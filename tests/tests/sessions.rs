//! The Sessions service over real gRPC: backends, roots inside allowed
//! roots, seed files, read-only sessions, limits, idle expiry, deletion, and
//! DIRECTORY sessions that survive a restart of the server.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::reason;

struct Server(TestServer);

impl Server {
    async fn start(data: &Path, allow_roots: Vec<PathBuf>, max_write_bytes: u64) -> Server {
        Server(
            TestServer::start_at(data, |c| {
                c.allow_roots = allow_roots;
                c.max_write_bytes = max_write_bytes;
            })
            .await,
        )
    }

    async fn stop(self) {
        self.0.stop().await.unwrap();
    }

    async fn sessions(&self) -> SessionsClient<tonic::transport::Channel> {
        SessionsClient::new(self.0.channel().await)
    }

    /// A new DIRECTORY session of its own directory.
    async fn directory_session(&self) -> proto::Session {
        self.sessions()
            .await
            .create_session(directory())
            .await
            .unwrap()
            .into_inner()
    }

    async fn fs(&self) -> FilesystemClient<tonic::transport::Channel> {
        FilesystemClient::new(self.0.channel().await)
    }
}

async fn write(
    fs: &mut FilesystemClient<tonic::transport::Channel>,
    id: &str,
    path: &str,
    content: &str,
) -> Result<proto::WriteResponse, tonic::Status> {
    fs.write(proto::WriteRequest {
        session_id: id.into(),
        path: path.into(),
        content: content.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

async fn read(
    fs: &mut FilesystemClient<tonic::transport::Channel>,
    id: &str,
    path: &str,
) -> Result<String, tonic::Status> {
    fs.read(proto::ReadRequest {
        session_id: id.into(),
        path: path.into(),
        limit: Some(-1),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().content)
}

fn directory() -> proto::CreateSessionRequest {
    proto::CreateSessionRequest {
        backend: Backend::Directory as i32,
        ..Default::default()
    }
}

const MAX: u64 = 4 << 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_the_default_backend() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let s = server
        .sessions()
        .await
        .create_session(proto::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.backend, Backend::Memory as i32);
    assert!(s.root_path.is_empty());
    assert!(uuid_like(&s.session_id), "{}", s.session_id);
    let limits = s.limits.unwrap();
    assert_eq!(limits.max_write_bytes, 32 << 20);
    assert_eq!(limits.max_path_depth, 16);
    assert_eq!(limits.max_segment_length, 80);
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_session_gets_a_fresh_directory_under_the_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let s = server.directory_session().await;
    let root = PathBuf::from(&s.root_path);
    assert!(root.is_absolute());
    assert!(root.starts_with(data.path()), "{root:?}");
    write(
        &mut server.fs().await,
        &s.session_id,
        "src/a.txt",
        "hello\n",
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_write_limit_never_exceeds_the_server_maximum() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], 1000).await;
    let req = proto::CreateSessionRequest {
        limits: Some(proto::SessionLimits {
            max_write_bytes: 1 << 40,
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = server
        .sessions()
        .await
        .create_session(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.limits.unwrap().max_write_bytes, 1000);
    let mut fs = server.fs().await;
    let err = write(&mut fs, &s.session_id, "big.txt", &"x".repeat(1001))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(reason(&err), "TOO_LARGE");
    let exists = fs
        .exists(proto::ExistsRequest {
            session_id: s.session_id.clone(),
            path: "big.txt".into(),
        })
        .await
        .unwrap();
    assert!(!exists.into_inner().exists);
    write(&mut fs, &s.session_id, "ok.txt", &"x".repeat(1000))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_inside_an_allowed_root_is_used_in_place() {
    let data = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    let project = allowed.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("README"), "existing\n").unwrap();
    let server = Server::start(data.path(), vec![allowed.path().to_path_buf()], MAX).await;
    let mut req = directory();
    req.root = project.display().to_string();
    let s = server
        .sessions()
        .await
        .create_session(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        PathBuf::from(&s.root_path),
        std::fs::canonicalize(&project).unwrap()
    );
    let mut fs = server.fs().await;
    assert_eq!(
        read(&mut fs, &s.session_id, "README").await.unwrap(),
        "existing\n"
    );
    write(&mut fs, &s.session_id, "new.txt", "n\n")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(project.join("new.txt")).unwrap(),
        "n\n"
    );

    // Deleting the session keeps a directory it did not create.
    server
        .sessions()
        .await
        .delete_session(proto::DeleteSessionRequest {
            session_id: s.session_id,
        })
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(project.join("README")).unwrap(),
        "existing\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_outside_the_allowed_roots_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), allowed.path().join("link")).unwrap();
    std::fs::create_dir(allowed.path().join("inner")).unwrap();
    let server = Server::start(data.path(), vec![allowed.path().to_path_buf()], MAX).await;
    let mut sessions = server.sessions().await;
    for root in [
        outside.path().display().to_string(),
        allowed.path().join("link").display().to_string(),
        allowed.path().join("inner/../..").display().to_string(),
        allowed.path().join("missing").display().to_string(),
    ] {
        let mut req = directory();
        req.root = root.clone();
        let err = sessions.create_session(req).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{root}: {err:?}");
        assert_eq!(reason(&err), "PERMISSION_DENIED");
    }
    let list = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.sessions.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_files_are_there_when_the_session_opens() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    for backend in [Backend::Memory, Backend::Directory] {
        let mut req = proto::CreateSessionRequest {
            backend: backend as i32,
            ..Default::default()
        };
        req.seed_files.insert(
            "/config/app.json".into(),
            b"{\"debug\": true}".to_vec().into(),
        );
        req.seed_files
            .insert("bin/blob".into(), vec![0u8, 255, 1, 254].into());
        let s = server
            .sessions()
            .await
            .create_session(req)
            .await
            .unwrap()
            .into_inner();
        let mut fs = server.fs().await;
        assert_eq!(
            read(&mut fs, &s.session_id, "config/app.json")
                .await
                .unwrap(),
            "{\"debug\": true}"
        );
        let stat = fs
            .stat(proto::StatRequest {
                session_id: s.session_id.clone(),
                path: "bin/blob".into(),
            })
            .await
            .unwrap();
        assert_eq!(stat.into_inner().size_bytes, 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_seed_path_fails_creation_and_leaves_nothing() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let mut sessions = server.sessions().await;
    for backend in [Backend::Memory, Backend::Directory] {
        let mut req = proto::CreateSessionRequest {
            backend: backend as i32,
            ..Default::default()
        };
        req.seed_files
            .insert("ok.txt".into(), b"fine".to_vec().into());
        req.seed_files
            .insert("../escape.txt".into(), b"no".to_vec().into());
        let err = sessions.create_session(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(reason(&err), "PATH_ESCAPES_ROOT");
    }
    assert!(sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions
        .is_empty());
    let leftovers = std::fs::read_dir(data.path().join("sessions"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0);
    assert!(!data.path().parent().unwrap().join("escape.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_session_refuses_every_change() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let mut req = proto::CreateSessionRequest {
        read_only: true,
        ..Default::default()
    };
    req.seed_files
        .insert("a.txt".into(), b"seeded\n".to_vec().into());
    let s = server
        .sessions()
        .await
        .create_session(req)
        .await
        .unwrap()
        .into_inner();
    assert!(s.read_only);
    let id = s.session_id;
    let mut fs = server.fs().await;
    let err = write(&mut fs, &id, "a.txt", "changed\n").await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(reason(&err), "READ_ONLY");
    let err = fs
        .delete(proto::DeleteRequest {
            session_id: id.clone(),
            path: "a.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "READ_ONLY");
    let err = fs
        .mkdir(proto::MkdirRequest {
            session_id: id.clone(),
            path: "d".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "READ_ONLY");
    let err = fs
        .edit(proto::EditRequest {
            session_id: id.clone(),
            path: "a.txt".into(),
            old_text: "seeded".into(),
            new_text: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "READ_ONLY");
    assert_eq!(read(&mut fs, &id, "a.txt").await.unwrap(), "seeded\n");
    let list = fs
        .list(proto::ListRequest {
            session_id: id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.entries.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_is_session_not_found() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let err = server
        .sessions()
        .await
        .get_session(proto::GetSessionRequest {
            session_id: "00000000-0000-0000-0000-000000000000".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    let err = read(&mut server.fs().await, "nope", "a").await.unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_session_counts_files_and_removes_its_directory() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let mut sessions = server.sessions().await;
    let s = sessions
        .create_session(directory())
        .await
        .unwrap()
        .into_inner();
    let mut fs = server.fs().await;
    for p in ["a", "b/c", "b/d/e"] {
        write(&mut fs, &s.session_id, p, "x").await.unwrap();
    }
    let deleted = sessions
        .delete_session(proto::DeleteSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap();
    assert_eq!(deleted.into_inner().files_deleted, 3);
    assert!(!Path::new(&s.root_path).exists());
    let err = sessions
        .get_session(proto::GetSessionRequest {
            session_id: s.session_id,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_expires_after_its_ttl() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let mut sessions = server.sessions().await;
    let short = sessions
        .create_session(proto::CreateSessionRequest {
            idle_ttl_seconds: 1,
            ..directory()
        })
        .await
        .unwrap()
        .into_inner();
    let forever = sessions
        .create_session(proto::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let list = sessions
            .list_sessions(proto::ListSessionsRequest::default())
            .await
            .unwrap()
            .into_inner();
        // The registry forgets the session before its directory is removed:
        // wait for both.
        if !list
            .sessions
            .iter()
            .any(|s| s.session_id == short.session_id)
            && !Path::new(&short.root_path).exists()
        {
            gone = true;
            break;
        }
    }
    assert!(gone, "the idle session was never expired");
    assert!(
        !Path::new(&short.root_path).exists(),
        "its directory was left behind"
    );
    sessions
        .get_session(proto::GetSessionRequest {
            session_id: forever.session_id,
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_sessions_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let s = server.directory_session().await;
    let memory = server
        .sessions()
        .await
        .create_session(proto::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    write(
        &mut server.fs().await,
        &s.session_id,
        "keep/me.txt",
        "still here\n",
    )
    .await
    .unwrap();
    server.stop().await;

    let server = Server::start(data.path(), vec![], MAX).await;
    let mut sessions = server.sessions().await;
    let again = sessions
        .get_session(proto::GetSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.root_path, s.root_path);
    assert_eq!(again.backend, Backend::Directory as i32);
    assert_eq!(
        read(&mut server.fs().await, &s.session_id, "keep/me.txt")
            .await
            .unwrap(),
        "still here\n"
    );
    // A memory session dies with the process.
    let err = sessions
        .get_session(proto::GetSessionRequest {
            session_id: memory.session_id,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
}

#[tokio::test]
async fn list_sessions_filters_by_labels_pages_in_id_order_and_shows_activity() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), Vec::new(), 1 << 20).await;
    let mut sessions = server.sessions().await;
    let mut ci = Vec::new();
    for i in 0..5 {
        let team = if i % 2 == 0 { "ci" } else { "dev" };
        let created = sessions
            .create_session(proto::CreateSessionRequest {
                labels: [
                    ("team".to_string(), team.to_string()),
                    ("n".to_string(), i.to_string()),
                ]
                .into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if team == "ci" {
            ci.push(created.session_id);
        }
    }
    ci.sort();

    // Two labels: all of them must match.
    let one = sessions
        .list_sessions(proto::ListSessionsRequest {
            labels: [("team".into(), "ci".into()), ("n".into(), "2".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.sessions.len(), 1);
    assert_eq!(one.sessions[0].labels["n"], "2");
    assert!(one.next_page_token.is_empty());

    // Pages of two, in id order, until the token runs out.
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = sessions
            .list_sessions(proto::ListSessionsRequest {
                labels: [("team".into(), "ci".into())].into(),
                page_size: 2,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(page.sessions.len() <= 2);
        seen.extend(page.sessions.into_iter().map(|s| s.session_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ci);
    assert_eq!(pages, 2);

    // Activity: a listed session says when it was last used and what
    // streams it has open.
    let listed = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.sessions.len(), 5);
    for s in &listed.sessions {
        assert!(s.last_active_at.is_some(), "{s:?}");
        assert_eq!(s.open_streams, 0);
    }
    let none = sessions
        .list_sessions(proto::ListSessionsRequest {
            labels: [("team".into(), "nobody".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(none.sessions.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn labels_past_their_limits_are_refused_before_anything_is_made_or_matched() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), Vec::new(), 1 << 20).await;
    let mut sessions = server.sessions().await;
    let many: std::collections::HashMap<String, String> = (0..65)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect();
    let long: std::collections::HashMap<String, String> =
        [("k".to_string(), "v".repeat(257))].into();
    for labels in [many.clone(), long.clone()] {
        let err = sessions
            .create_session(proto::CreateSessionRequest {
                labels,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert_eq!(reason(&err), "INVALID_ARGUMENT");
    }
    for labels in [many, long] {
        let err = sessions
            .list_sessions(proto::ListSessionsRequest {
                labels,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(reason(&err), "INVALID_ARGUMENT");
    }
    // Nothing was created; 64 labels of 256 bytes are fine.
    let at_limit: std::collections::HashMap<String, String> = (0..64)
        .map(|i| (format!("{i:0>256}"), "v".repeat(256)))
        .collect();
    let listed = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty());
    sessions
        .create_session(proto::CreateSessionRequest {
            labels: at_limit,
            ..Default::default()
        })
        .await
        .unwrap();
    server.stop().await;
}

/// GetSession counts what the workspace holds, on both backends and for
/// files written from outside; ListSessions counts only when asked, and
/// only for a bounded page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_report_their_files_and_bytes() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), Vec::new(), 1 << 20).await;
    let mut sessions = server.sessions().await;
    let mut fs = server.fs().await;
    let memory = sessions
        .create_session(proto::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let dir = sessions
        .create_session(directory())
        .await
        .unwrap()
        .into_inner();
    for id in [&memory.session_id, &dir.session_id] {
        write(&mut fs, id, "a.txt", "hello").await.unwrap();
        write(&mut fs, id, "src/b.txt", "hello, world")
            .await
            .unwrap();
    }
    // A container adds a file beside the service: it counts too.
    std::fs::write(Path::new(&dir.root_path).join("c.bin"), [7u8; 100]).unwrap();

    let get = |id: String| {
        let mut sessions = sessions.clone();
        async move {
            sessions
                .get_session(proto::GetSessionRequest { session_id: id })
                .await
                .unwrap()
                .into_inner()
                .usage
                .expect("GetSession counts the workspace")
        }
    };
    let m = get(memory.session_id.clone()).await;
    assert_eq!((m.files, m.bytes), (2, 17));
    let d = get(dir.session_id.clone()).await;
    assert_eq!((d.files, d.bytes), (3, 117));

    // Not asked: not counted.
    let plain = sessions
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(plain.sessions.iter().all(|s| s.usage.is_none()));

    let counted = sessions
        .list_sessions(proto::ListSessionsRequest {
            include_usage: true,
            page_size: wsfs::MAX_USAGE_PAGE,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let by_id = |id: &str| {
        counted
            .sessions
            .iter()
            .find(|s| s.session_id == id)
            .and_then(|s| s.usage)
            .map(|u| (u.files, u.bytes))
    };
    assert_eq!(by_id(&memory.session_id), Some((2, 17)));
    assert_eq!(by_id(&dir.session_id), Some((3, 117)));

    // Counting walks every listed workspace: the page must be bounded.
    for page_size in [0, wsfs::MAX_USAGE_PAGE + 1] {
        let err = sessions
            .list_sessions(proto::ListSessionsRequest {
                include_usage: true,
                page_size,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert_eq!(reason(&err), "INVALID_ARGUMENT", "{err:?}");
        assert!(err.message().contains("page_size"), "{err:?}");
    }
    server.stop().await;
}

/// A session whose recovery after a restart fails (its intent record is
/// corrupt) is listed with the reason, refused, and deletable; the record
/// and its workspace stay as they were until it is deleted.
#[tokio::test]
async fn a_session_whose_recovery_fails_is_listed_refused_and_deletable() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), vec![], MAX).await;
    let s = server.directory_session().await;
    write(&mut server.fs().await, &s.session_id, "a.txt", "a\n")
        .await
        .unwrap();
    server.stop().await;
    let session_dir = data.path().join("sessions").join(&s.session_id);
    std::fs::write(session_dir.join("staging/intent.json"), "{ not json").unwrap();

    let server = Server::start(data.path(), vec![], MAX).await;
    let mut sessions = server.sessions().await;
    let get = proto::GetSessionRequest {
        session_id: s.session_id.clone(),
    };
    // Refused UNAVAILABLE while it recovers, then for good with the reason.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let why = loop {
        let shown = sessions
            .get_session(get.clone())
            .await
            .unwrap()
            .into_inner();
        let why = shown.labels["wsfs.unavailable"].clone();
        if why.contains("recovery failed") {
            break why;
        }
        let err = read(&mut server.fs().await, &s.session_id, "a.txt")
            .await
            .unwrap_err();
        assert!(
            err.code() == Code::Unavailable || err.message().contains("recovery failed"),
            "{err:?}"
        );
        assert!(std::time::Instant::now() < deadline, "still: {why}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(why.contains("intent record is corrupt"), "{why}");
    let err = read(&mut server.fs().await, &s.session_id, "a.txt")
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PERMISSION_DENIED", "{err:?}");
    assert!(err.message().contains("recovery failed"), "{err:?}");
    assert!(session_dir.join("staging/intent.json").exists());
    assert_eq!(
        std::fs::read_to_string(session_dir.join("root/a.txt")).unwrap(),
        "a\n"
    );
    sessions
        .delete_session(proto::DeleteSessionRequest {
            session_id: s.session_id.clone(),
        })
        .await
        .unwrap();
    assert!(!session_dir.exists());
}
