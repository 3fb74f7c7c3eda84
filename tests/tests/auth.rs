//! Tokens over real gRPC: the admin token guards the Sessions service, a
//! session token opens its own session and nothing else, tokens die with
//! their session, and the loopback rule for servers without tokens.

use tonic::Code;
use wsfs_client::{Client, Error, Filesystem, SessionOptions};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::p;

const ADMIN: &str = "admin-token-for-tests-0123456789";

async fn server_with_tokens() -> TestServer {
    TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await
}

async fn admin(server: &TestServer) -> Client {
    Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap()
}

fn assert_refused(err: &Error, code: Code, reason: &str) {
    assert_eq!(err.code(), code, "{err}");
    assert_eq!(err.reason(), reason, "{err}");
}

#[tokio::test]
async fn sessions_service_needs_the_admin_token() {
    let server = server_with_tokens().await;
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let wrong = anonymous.clone().with_token("not-the-admin-token").unwrap();
    for client in [&anonymous, &wrong] {
        let err = client
            .create_session(SessionOptions::memory())
            .await
            .unwrap_err();
        assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
        let err = client.list_sessions().await.unwrap_err();
        assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    }
    let admin = admin(&server).await;
    let info = admin
        .create_session(SessionOptions::memory())
        .await
        .unwrap();
    assert!(info.token.as_deref().is_some_and(|t| t.len() >= 32));
    let err = anonymous.delete_session(&info.id).await.unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    // Nothing changed: the session is still there, and its token shows
    // only in the CreateSession answer.
    let again = admin.get_session(&info.id).await.unwrap();
    assert_eq!(again.token, None);
}

#[tokio::test]
async fn get_session_answers_a_token_about_its_own_session_and_names_it() {
    let server = server_with_tokens().await;
    let admin = admin(&server).await;
    let a = admin
        .create_session(SessionOptions::memory())
        .await
        .unwrap();
    let b = admin
        .create_session(SessionOptions::memory())
        .await
        .unwrap();
    let system = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(a.token.as_deref().unwrap())
        .unwrap();
    let alice_token = admin.issue_token(&a.id, "alice").await.unwrap().token;
    let alice = system.clone().with_token(&alice_token).unwrap();

    for holder in [&system, &alice] {
        assert_eq!(holder.token_session().await.unwrap().id, a.id);
        assert_eq!(holder.get_session(&a.id).await.unwrap().id, a.id);
        let err = holder.get_session(&b.id).await.unwrap_err();
        assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
        // Still the admin's alone: the rest of the Sessions service.
        let err = holder.list_sessions().await.unwrap_err();
        assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    }
    let err = admin.token_session().await.unwrap_err();
    assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    let unknown = system.clone().with_token("wsfs_0000").unwrap();
    let err = unknown.token_session().await.unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let err = anonymous.token_session().await.unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
}

#[tokio::test]
async fn filesystem_calls_need_a_token_of_their_session() {
    let server = server_with_tokens().await;
    let admin = admin(&server).await;
    let (session, info) = admin
        .create(SessionOptions::memory().seed_file("a.txt", "hello\n"))
        .await
        .unwrap();
    assert_eq!(session.read_to_string("a.txt").await.unwrap(), "hello\n");

    let anonymous = Client::connect(&server.url()).await.unwrap();
    let err = anonymous
        .session(&info.id)
        .read_to_string("a.txt")
        .await
        .unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    let err = anonymous
        .session(&info.id)
        .with_token("wsfs_0000")
        .unwrap()
        .write_str("a.txt", "overwritten")
        .await
        .unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    assert_eq!(session.read_to_string("a.txt").await.unwrap(), "hello\n");
}

#[tokio::test]
async fn a_token_of_one_session_learns_nothing_of_another() {
    let server = server_with_tokens().await;
    let admin = admin(&server).await;
    let (_a, a) = admin.create(SessionOptions::memory()).await.unwrap();
    let (b_system, b) = admin
        .create(SessionOptions::memory().seed_file("secret.txt", "b's data\n"))
        .await
        .unwrap();
    let a_token = a.token.clone().unwrap();
    let anonymous = Client::connect(&server.url()).await.unwrap();
    let a_on_b = anonymous.session(&b.id).with_token(&a_token).unwrap();
    let a_on_nowhere = anonymous
        .session("00000000-0000-4000-8000-000000000000")
        .with_token(&a_token)
        .unwrap();

    // Same answer for a file that exists, one that does not, and a session
    // that does not exist: no existence oracle.
    let mut answers = Vec::new();
    for (handle, path) in [
        (&a_on_b, "secret.txt"),
        (&a_on_b, "missing.txt"),
        (&a_on_nowhere, "secret.txt"),
    ] {
        let exists = handle.exists(&p(path)).await.unwrap_err();
        let stat = handle.stat(&p(path)).await.unwrap_err();
        let read = handle.read_to_string(path).await.unwrap_err();
        for err in [&exists, &stat, &read] {
            assert_refused(err, Code::PermissionDenied, "PERMISSION_DENIED");
        }
        answers.push((
            exists.code(),
            stat.code(),
            read.code(),
            read.path().is_none(),
        ));
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");

    let err = a_on_b
        .write_str("secret.txt", "mine now")
        .await
        .unwrap_err();
    assert_refused(&err, Code::PermissionDenied, "PERMISSION_DENIED");
    assert_eq!(
        b_system.read_to_string("secret.txt").await.unwrap(),
        "b's data\n"
    );
}

#[tokio::test]
async fn issued_tokens_name_callers_and_refuse_impersonation() {
    let server = server_with_tokens().await;
    let admin = admin(&server).await;
    let (_s, info) = admin.create(SessionOptions::memory()).await.unwrap();
    let system = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(info.token.as_deref().unwrap())
        .unwrap();
    // The session's system token may issue tokens for its own session.
    let alice = system.issue_token(&info.id, "alice").await.unwrap().token;
    assert!(alice.len() >= 32);
    for bad in ["system", "System", "SYSTEM", "Alice", "a/b", ""] {
        let err = admin.issue_token(&info.id, bad).await.unwrap_err();
        assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
    // A caller's token cannot mint more tokens.
    let as_alice = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(&alice)
        .unwrap();
    let err = as_alice.issue_token(&info.id, "bob").await.unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    // Nor may another session's system token.
    let (_o, other) = admin.create(SessionOptions::memory()).await.unwrap();
    let other_system = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(other.token.as_deref().unwrap())
        .unwrap();
    let err = other_system.issue_token(&info.id, "bob").await.unwrap_err();
    assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
}

#[tokio::test]
async fn tokens_die_with_their_session() {
    let server = server_with_tokens().await;
    let admin = admin(&server).await;
    let (system, info) = admin.create(SessionOptions::memory()).await.unwrap();
    let alice_token = admin.issue_token(&info.id, "alice").await.unwrap().token;
    let alice = admin.session(&info.id).with_token(&alice_token).unwrap();
    alice.write_str("x.txt", "x").await.unwrap();
    admin.delete_session(&info.id).await.unwrap();
    for handle in [&system, &alice] {
        let err = handle.exists(&p("x.txt")).await.unwrap_err();
        assert_refused(&err, Code::Unauthenticated, "UNAUTHENTICATED");
    }
}

#[tokio::test]
async fn tokens_off_names_the_caller_by_metadata() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(SessionOptions::memory())
        .await
        .unwrap();
    assert_eq!(info.token, None);
    // No token names no session.
    let err = client.token_session().await.unwrap_err();
    assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    let err = client
        .session(&info.id)
        .with_caller("SYSTEM")
        .unwrap()
        .write_str("a.txt", "a")
        .await
        .unwrap_err();
    assert_refused(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    client
        .session(&info.id)
        .with_caller("alice")
        .unwrap()
        .write_str("a.txt", "a")
        .await
        .unwrap();
}

#[tokio::test]
async fn serve_refuses_tokens_off_on_a_public_address() {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = wsfs_server::ServerConfig::for_tests(dir.path().to_path_buf());
    let err = wsfs_server::serve(config, listener, async {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.to_string().contains("--insecure"), "{err}");
}

fn with_tokens(c: &mut wsfs_server::ServerConfig) {
    c.admin_token = Some(ADMIN.into());
}

/// A DIRECTORY session made on a server with tokens over `data`, which is
/// then stopped: the session, and the token issued to alice.
async fn session_with_alice(data: &std::path::Path) -> (wsfs_client::SessionInfo, String) {
    let server = TestServer::start_at(data, with_tokens).await;
    let admin = admin(&server).await;
    let (_, info) = admin.create(SessionOptions::directory()).await.unwrap();
    let alice = admin.issue_token(&info.id, "alice").await.unwrap().token;
    server.stop().await.unwrap();
    (info, alice)
}

#[tokio::test]
async fn directory_session_tokens_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let (info, alice) = session_with_alice(data.path()).await;
    let system = info.token.clone().unwrap();
    // Only hashes are on disk.
    let saved = std::fs::read_to_string(
        data.path()
            .join("sessions")
            .join(&info.id)
            .join("tokens.json"),
    )
    .unwrap();
    assert!(
        !saved.contains(&alice) && !saved.contains(&system),
        "{saved}"
    );

    let server = TestServer::start_at(data.path(), with_tokens).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let as_alice = client.session(&info.id).with_token(&alice).unwrap();
    as_alice.write_str("a.txt", "still me\n").await.unwrap();
    let as_system = client.session(&info.id).with_token(&system).unwrap();
    assert_eq!(
        as_system.read_to_string("a.txt").await.unwrap(),
        "still me\n"
    );
}

/// A session a stop left with work to finish (here an abandoned upload in
/// its staging directory) recovers in the background after the restart:
/// refused UNAVAILABLE until then, and served with its tokens after.
#[tokio::test]
async fn tokens_of_a_session_recovered_at_start_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let (info, alice) = session_with_alice(data.path()).await;
    let staging = data.path().join("sessions").join(&info.id).join("staging");
    std::fs::write(staging.join(".wsfs-tmp-abandoned"), b"an upload cut short").unwrap();

    let server = TestServer::start_at(data.path(), with_tokens).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let as_alice = client.session(&info.id).with_token(&alice).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match as_alice.write_str("a.txt", "still me\n").await {
            Ok(_) => break,
            Err(wsfs::Error::Unavailable { message }) => {
                assert!(message.contains("being recovered"), "{message}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "still recovering after 60 s"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("alice's token after the restart: {e:?}"),
        }
    }
    assert!(!staging.join(".wsfs-tmp-abandoned").exists());
}
