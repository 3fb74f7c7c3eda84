//! TLS: a server given `--tls-cert` and `--tls-key` speaks only TLS, and
//! the client reaches it over `https://` trusting the certificate's CA. The
//! certificate is made here, in the test.

use wsfs_client::{Client, SessionOptions};
use wsfs_tests::harness::TestServer;

struct Identity {
    _dir: tempfile::TempDir,
    cert_pem: String,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

fn self_signed() -> Identity {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    Identity {
        _dir: dir,
        cert_pem: made.cert.pem(),
        cert,
        key,
    }
}

async fn tls_server(id: &Identity, admin_token: Option<&str>) -> TestServer {
    TestServer::start_with(|c| {
        c.tls_cert = Some(id.cert.clone());
        c.tls_key = Some(id.key.clone());
        c.admin_token = admin_token.map(Into::into);
    })
    .await
}

#[tokio::test]
async fn client_talks_to_a_tls_server_over_https() {
    let id = self_signed();
    let server = tls_server(&id, None).await;
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("https://{host}:{}", server.addr().port());
        let client = Client::connect_with_tls(&url, id.cert_pem.as_bytes())
            .await
            .unwrap();
        let (session, _) = client.create(SessionOptions::memory()).await.unwrap();
        session.write_str("a.txt", "over tls\n").await.unwrap();
        assert_eq!(session.read_to_string("a.txt").await.unwrap(), "over tls\n");
    }
}

#[tokio::test]
async fn tokens_travel_over_tls() {
    let id = self_signed();
    let admin_token = "admin-token-for-tests-0123456789";
    let server = tls_server(&id, Some(admin_token)).await;
    let url = format!("https://localhost:{}", server.addr().port());
    let client = Client::connect_with_tls(&url, id.cert_pem.as_bytes())
        .await
        .unwrap()
        .with_token(admin_token)
        .unwrap();
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    assert!(info.token.is_some());
    session.write_str("a.txt", "secret\n").await.unwrap();
}

#[tokio::test]
async fn plaintext_client_cannot_talk_to_a_tls_server() {
    let id = self_signed();
    let server = tls_server(&id, None).await;
    let result = async {
        let client = Client::connect(&server.url()).await?;
        client.list_sessions().await
    }
    .await;
    assert!(result.is_err());
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let id = self_signed();
    let stranger = self_signed();
    let server = tls_server(&id, None).await;
    let url = format!("https://localhost:{}", server.addr().port());
    let result = async {
        let client = Client::connect_with_tls(&url, stranger.cert_pem.as_bytes()).await?;
        client.list_sessions().await
    }
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
}
