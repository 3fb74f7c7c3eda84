//! What lets a standard proxy route calls between servers, against one real
//! server over gRPC: the `x-wsfs-session` metadata must agree with the
//! session a call's body names (a misrouted call is refused and changes
//! nothing), and a client may choose its new session's id (so that the
//! creation is routed where the session's later calls go).

use tonic::{Code, Request, Status};
use wsfs::proto::{self, sessions_client::SessionsClient};
use wsfs::SESSION_HEADER;
use wsfs_client::{Client, Filesystem, SessionOptions};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, raw_write, reason};

const CHOSEN: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

/// `message` as a request whose routing metadata names `routed`.
fn routed<T>(routed: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert(SESSION_HEADER, routed.parse().unwrap());
    request
}

fn assert_misrouted(status: &Status) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(status), "INVALID_ARGUMENT");
    assert!(status.message().contains(SESSION_HEADER), "{status:?}");
}

async fn session_ids(client: &Client) -> Vec<String> {
    let mut ids: Vec<_> = client
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_session_created_with_a_chosen_id_is_known_by_it() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (session, info) = client
        .create(SessionOptions::memory().id(CHOSEN))
        .await
        .unwrap();
    assert_eq!(info.id, CHOSEN);
    session.write_str("a.txt", "one").await.unwrap();
    assert_eq!(client.get_session(CHOSEN).await.unwrap().id, CHOSEN);
}

#[tokio::test]
async fn a_chosen_id_that_is_not_a_lowercase_hyphenated_uuid_is_refused_and_creates_nothing() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for bad in [
        "not-a-uuid",
        "67E55044-10B1-426F-9247-BB680E5FE0C8",
        "67e5504410b1426f9247bb680e5fe0c8",
        "{67e55044-10b1-426f-9247-bb680e5fe0c8}",
        "../67e55044-10b1-426f-9247-bb680e5fe0c8",
    ] {
        for options in [SessionOptions::memory(), SessionOptions::directory()] {
            let err = client.create_session(options.id(bad)).await.unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{bad}: {err}");
            assert_eq!(err.reason(), "INVALID_ARGUMENT", "{bad}");
        }
    }
    assert!(session_ids(&client).await.is_empty());
    let sessions_dir = server.data_dir().join("sessions");
    let made = std::fs::read_dir(&sessions_dir).map_or(0, |d| d.count());
    assert_eq!(made, 0, "no session directory was made");
}

#[tokio::test]
async fn a_taken_id_is_already_exists_and_leaves_the_session_as_it_was() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    for first in [SessionOptions::memory(), SessionOptions::directory()] {
        let (session, info) = client
            .create(first.id(CHOSEN).seed_file("a.txt", "one"))
            .await
            .unwrap();
        for again in [SessionOptions::memory(), SessionOptions::directory()] {
            let err = client
                .create_session(again.id(CHOSEN).seed_file("a.txt", "two"))
                .await
                .unwrap_err();
            assert_eq!(err.code(), Code::AlreadyExists, "{err}");
            assert_eq!(err.reason(), "ALREADY_EXISTS");
        }
        assert_eq!(session.read_to_string("a.txt").await.unwrap(), "one");
        assert_eq!(session_ids(&client).await, vec![CHOSEN.to_string()]);
        let now = client.get_session(CHOSEN).await.unwrap();
        assert_eq!(
            (now.backend, now.created_at),
            (info.backend, info.created_at)
        );
        client.delete_session(CHOSEN).await.unwrap();
    }
}

#[tokio::test]
async fn a_chosen_id_naming_a_leftover_directory_is_already_exists_and_leaves_it_alone() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let leftover = server.data_dir().join("sessions").join(CHOSEN);
    std::fs::create_dir_all(leftover.join("root")).unwrap();
    std::fs::write(leftover.join("root").join("kept.txt"), "kept").unwrap();
    let err = client
        .create_session(SessionOptions::directory().id(CHOSEN))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    assert_eq!(err.reason(), "ALREADY_EXISTS");
    let kept = std::fs::read_to_string(leftover.join("root").join("kept.txt")).unwrap();
    assert_eq!(kept, "kept");
    assert!(session_ids(&client).await.is_empty());
}

#[tokio::test]
async fn concurrent_creations_under_one_id_make_exactly_one_session() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let attempts = (0..8).map(|i| {
        let client = client.clone();
        let options = if i % 2 == 0 {
            SessionOptions::memory()
        } else {
            SessionOptions::directory()
        };
        tokio::spawn(async move { client.create_session(options.id(CHOSEN)).await })
    });
    let results = futures::future::join_all(attempts).await;
    let created = results
        .iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    assert_eq!(created, 1);
    for result in results {
        if let Err(e) = result.unwrap() {
            assert_eq!(e.code(), Code::AlreadyExists, "{e}");
        }
    }
    assert_eq!(session_ids(&client).await, vec![CHOSEN.to_string()]);
}

#[tokio::test]
async fn a_filesystem_call_routed_by_another_session_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (a, _) = client.create(SessionOptions::memory()).await.unwrap();
    let (b, _) = client.create(SessionOptions::memory()).await.unwrap();
    let mut fs = client.raw_filesystem();

    let write = proto::WriteRequest {
        session_id: a.id().to_string(),
        path: "a.txt".into(),
        content: "misrouted".into(),
        ..Default::default()
    };
    let status = fs.write(routed(b.id(), write.clone())).await.unwrap_err();
    assert_misrouted(&status);

    let header = proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Header(
            proto::WriteBytesHeader {
                session_id: a.id().to_string(),
                path: "b.bin".into(),
                ..Default::default()
            },
        )),
    };
    let data = proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Data(
            vec![7u8; 1024].into(),
        )),
    };
    let upload = futures::stream::iter([header, data]);
    let status = fs.write_bytes(routed(b.id(), upload)).await.unwrap_err();
    assert_misrouted(&status);

    for session in [&a, &b] {
        assert_eq!(session.exists(&p("a.txt")).await.unwrap(), None);
        assert_eq!(session.exists(&p("b.bin")).await.unwrap(), None);
    }
    // Routed by its own session, the same call lands.
    fs.write(routed(a.id(), write)).await.unwrap();
    assert_eq!(a.read_to_string("a.txt").await.unwrap(), "misrouted");
}

#[tokio::test]
async fn a_sessions_call_routed_by_another_session_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (a, info) = client
        .create(SessionOptions::memory().seed_file("a.txt", "one"))
        .await
        .unwrap();
    let (b, _) = client.create(SessionOptions::memory()).await.unwrap();
    let mut sessions: SessionsClient<_> = client.raw_sessions();

    let delete = proto::DeleteSessionRequest {
        session_id: a.id().to_string(),
    };
    assert_misrouted(
        &sessions
            .delete_session(routed(b.id(), delete))
            .await
            .unwrap_err(),
    );
    let snapshot = proto::SnapshotRequest {
        session_id: a.id().to_string(),
        tag: "misrouted".into(),
    };
    assert_misrouted(
        &sessions
            .snapshot(routed(b.id(), snapshot))
            .await
            .unwrap_err(),
    );

    let archive =
        wsfs_tests::kit::archive_of(&client, [("a.txt".into(), b"two".to_vec())], &[]).await;
    let upload = futures::stream::iter([
        proto::ImportArchiveRequest {
            payload: Some(proto::import_archive_request::Payload::SessionId(
                a.id().to_string(),
            )),
        },
        proto::ImportArchiveRequest {
            payload: Some(proto::import_archive_request::Payload::Data(archive.into())),
        },
    ]);
    assert_misrouted(
        &sessions
            .import_archive(routed(b.id(), upload))
            .await
            .unwrap_err(),
    );

    // A creation routed by one id must create that id, not another.
    let create = proto::CreateSessionRequest {
        session_id: CHOSEN.into(),
        ..Default::default()
    };
    assert_misrouted(
        &sessions
            .create_session(routed(b.id(), create.clone()))
            .await
            .unwrap_err(),
    );
    let unnamed = proto::CreateSessionRequest::default();
    assert_misrouted(
        &sessions
            .create_session(routed(CHOSEN, unnamed))
            .await
            .unwrap_err(),
    );

    assert_eq!(a.read_to_string("a.txt").await.unwrap(), "one");
    assert!(client.list_snapshots(a.id()).await.unwrap().is_empty());
    let mut expected = vec![info.id.clone(), b.id().to_string()];
    expected.sort();
    assert_eq!(session_ids(&client).await, expected);
    // Routed by its own id, the creation lands.
    sessions
        .create_session(routed(CHOSEN, create))
        .await
        .unwrap();
}

#[tokio::test]
async fn routing_metadata_sent_twice_is_refused() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (a, _) = client.create(SessionOptions::memory()).await.unwrap();
    let mut request = routed(
        a.id(),
        proto::WriteRequest {
            session_id: a.id().to_string(),
            path: "a.txt".into(),
            content: "twice".into(),
            ..Default::default()
        },
    );
    request
        .metadata_mut()
        .append(SESSION_HEADER, a.id().parse().unwrap());
    let status = client.raw_filesystem().write(request).await.unwrap_err();
    assert_misrouted(&status);
    assert_eq!(a.exists(&p("a.txt")).await.unwrap(), None);
}

#[tokio::test]
async fn calls_without_routing_metadata_still_work_against_one_server() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let created = client
        .raw_sessions()
        .create_session(proto::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut fs = client.raw_filesystem();
    raw_write(&mut fs, &created.session_id, "a.txt", "plain".into())
        .await
        .unwrap();
    let session = client.session(&created.session_id);
    assert_eq!(session.read_to_string("a.txt").await.unwrap(), "plain");
}
