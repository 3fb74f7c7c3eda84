//! What a user meets behind the shipped nginx (`deploy/nginx/wsfs.conf`)
//! in front of three real `wsfs-server` replicas: a client holding nothing
//! but a session's token reaches its session (the Rust client, the `wsfs`
//! CLI and grpcurl), a forged token fails authentication, ListSessions
//! through the proxy lists every replica's sessions when they share an
//! object store, and a proxy that answers HTTP instead of gRPC is named in
//! one line by every command. Without nginx each test says so and passes,
//! unless `WSFS_REQUIRE_TOOLS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;
use tonic::{Code, Request};
use wsfs::proto;
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::cluster::{binary, fresh_dir, Cluster, ReplicaSetup};
use wsfs_tests::kit::system_tool;

const REPLICAS: usize = 3;
const ADMIN: &str = "proxy-routing-admin-token";

/// Three replicas with tokens on behind the shipped nginx, for the whole
/// test binary.
fn token_cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            Cluster::start_configured(REPLICAS, |_| ReplicaSetup {
                args: vec!["--admin-token".into(), ADMIN.into()],
                ..Default::default()
            })
        })
        .as_ref()
}

/// Which replica holds each session, asking each one directly.
async fn placement(
    cluster: &Cluster,
    client_of: impl Fn(Client) -> Client,
) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for (index, replica) in cluster.replicas.iter().enumerate() {
        let direct = client_of(Client::connect(&replica.url()).await.unwrap());
        for s in direct
            .query_sessions(&wsfs_client::SessionQuery {
                local_only: true,
                ..Default::default()
            })
            .await
            .unwrap()
        {
            held.insert(s.id, index);
        }
    }
    held
}

/// Sessions created through the proxy until every replica holds one: one
/// `(session id, system token, replica)` per replica.
async fn one_token_per_replica(cluster: &Cluster) -> Vec<(String, String, usize)> {
    let admin = Client::connect(&cluster.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let mut tokens = BTreeMap::new();
    for _ in 0..60 {
        let info = admin
            .create_session(SessionOptions::memory())
            .await
            .unwrap();
        tokens.insert(info.id.clone(), info.token.expect("tokens are on"));
        let held = placement(cluster, |c| c.with_token(ADMIN).unwrap()).await;
        let mut one_each: BTreeMap<usize, (String, String)> = BTreeMap::new();
        for (id, token) in &tokens {
            one_each
                .entry(held[id])
                .or_insert((id.clone(), token.clone()));
        }
        if one_each.len() == REPLICAS {
            return one_each
                .into_iter()
                .map(|(replica, (id, token))| (id, token, replica))
                .collect();
        }
    }
    panic!("60 sessions never reached all {REPLICAS} replicas");
}

/// `wsfs ARGS` against `server` with `env` set and nothing else of the
/// caller's WSFS_* settings.
fn wsfs(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary("wsfs"));
    command
        .args(args)
        .env("HOME", home.path())
        .stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("WSFS_") && key != "WSFS_REQUIRE_TOOLS" {
            command.env_remove(key);
        }
    }
    command
        .env("WSFS_SERVER", server)
        .env("WSFS_CONFIG", home.path().join("context.json"));
    command.envs(env.iter().copied());
    command.output().expect("wsfs runs")
}

fn succeeded(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `grpcurl -plaintext -H "authorization: Bearer TOKEN" -d BODY PROXY METHOD`.
fn grpcurl(
    grpcurl: &std::path::Path,
    proxy: &str,
    token: &str,
    body: &str,
    method: &str,
) -> Output {
    Command::new(grpcurl)
        .args([
            "-plaintext",
            "-H",
            &format!("authorization: Bearer {token}"),
        ])
        .args(["-d", body, proxy, method])
        .output()
        .expect("grpcurl runs")
}

/// The whole point of a token that names its session: on every replica,
/// a client that holds only the token finds its session through the
/// proxy and works in it, whether it is the Rust client, the CLI (no
/// --session) or grpcurl with nothing but `authorization: Bearer`.
#[tokio::test]
async fn a_token_only_client_reaches_its_session_through_the_proxy_on_every_replica() {
    let Some(cluster) = token_cluster() else {
        return;
    };
    let grpcurl_tool = system_tool("grpcurl");
    let proxy = cluster.proxy.to_string();
    for (id, token, replica) in one_token_per_replica(cluster).await {
        let on = format!("session {id} on replica {replica}");
        assert_eq!(wsfs::token::session_of(&token), Some(id.as_str()), "{on}");

        let client = Client::connect(&cluster.url())
            .await
            .unwrap()
            .with_token(&token)
            .unwrap();
        let found = client.token_session().await;
        assert_eq!(found.map(|s| s.id).as_deref(), Ok(id.as_str()), "{on}");
        client
            .session(&id)
            .write_str("from-rust.txt", &id)
            .await
            .unwrap();

        let token_only = [("WSFS_TOKEN", token.as_str())];
        let written = wsfs(&cluster.url(), &["write", "from-cli.txt", &id], &token_only);
        succeeded(&written, &on);
        let read = wsfs(&cluster.url(), &["cat", "from-rust.txt"], &token_only);
        assert_eq!(succeeded(&read, &on), id, "{on}");
        let shown = wsfs(&cluster.url(), &["session", "show", "--json"], &token_only);
        assert!(succeeded(&shown, &on).contains(&id), "{on}");

        if let Some(tool) = &grpcurl_tool {
            let got = grpcurl(tool, &proxy, &token, "{}", "wsfs.v1.Sessions/GetSession");
            assert!(succeeded(&got, &on).contains(&id), "{on}");
            let body = format!(r#"{{"session_id": "{id}", "path": "from-cli.txt"}}"#);
            let read = grpcurl(tool, &proxy, &token, &body, "wsfs.v1.Filesystem/Read");
            assert!(succeeded(&read, &on).contains(&id), "{on}");
        }
    }
}

/// Changing the session a token names does not make it that session's:
/// the server looks the whole token up, so the forged one is unknown, on
/// the replica it is routed to as everywhere else; and GetSession routed
/// by a header naming another session than the token's is refused.
#[tokio::test]
async fn a_token_edited_to_name_another_session_fails_authentication() {
    let Some(cluster) = token_cluster() else {
        return;
    };
    let placed = one_token_per_replica(cluster).await;
    let (a, a_token, _) = &placed[0];
    let (b, _, _) = &placed[1];
    let forged = a_token.replace(a.as_str(), b.as_str());
    assert_eq!(wsfs::token::session_of(&forged), Some(b.as_str()));

    let client = Client::connect(&cluster.url())
        .await
        .unwrap()
        .with_token(&forged)
        .unwrap();
    let err = client.token_session().await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let err = client.session(b).read_to_string("a.txt").await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let refused = wsfs(&cluster.url(), &["ls"], &[("WSFS_TOKEN", forged.as_str())]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).starts_with("wsfs: UNAUTHENTICATED: "),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // A's real token, with the route naming B: refused before anything.
    let mut request = Request::new(proto::GetSessionRequest::default());
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {a_token}").parse().unwrap(),
    );
    request
        .metadata_mut()
        .insert(wsfs::SESSION_HEADER, b.parse().unwrap());
    let direct = Client::connect(&cluster.replicas[placed[0].2].url())
        .await
        .unwrap();
    let status = direct
        .raw_sessions()
        .get_session(request)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains(wsfs::SESSION_HEADER),
        "{status:?}"
    );
}

/// Replicas that share a bucket each list every replica's sessions:
/// ListSessions through the proxy (which reaches one of them) shows every
/// session once, each naming the replica that serves it, those of the
/// other replicas marked as served elsewhere; `local_only` lists the
/// reached replica's own; and the CLI shows the replica column.
#[tokio::test]
async fn list_sessions_through_the_proxy_lists_every_replicas_sessions() {
    let dir = fresh_dir();
    let bucket = format!("file://{}", dir.join("bucket").display());
    let Some(cluster) = Cluster::start_configured(REPLICAS, |i| {
        ReplicaSetup::mirrored(&bucket, i, Duration::from_secs(30), vec![])
    }) else {
        return;
    };
    let client = Client::connect(&cluster.url()).await.unwrap();
    let mut created = BTreeSet::new();
    for _ in 0..60 {
        let (session, info) = client
            .create(SessionOptions::directory().label("test", "listing"))
            .await
            .unwrap();
        // A session is in the bucket from its first snapshot.
        client.snapshot(session.id(), "").await.unwrap();
        created.insert(info.id);
        let held = placement(&cluster, |c| c).await;
        let replicas: BTreeSet<usize> = created.iter().map(|id| held[id]).collect();
        if replicas.len() == REPLICAS {
            break;
        }
    }
    let held = placement(&cluster, |c| c).await;
    assert_eq!(
        created
            .iter()
            .map(|id| held[id])
            .collect::<BTreeSet<_>>()
            .len(),
        REPLICAS
    );

    let listed = client.list_sessions().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<_>>(),
        created.iter().map(String::as_str).collect(),
        "every replica's sessions, once each"
    );
    assert_eq!(ids.len(), created.len());
    let answering: BTreeSet<usize> = listed
        .iter()
        .filter(|s| !s.served_elsewhere)
        .map(|s| held[&s.id])
        .collect();
    assert_eq!(answering.len(), 1, "one replica answered: {answering:?}");
    for s in &listed {
        let replica = format!("replica-{}", held[&s.id]);
        assert_eq!(s.served_by.as_deref(), Some(replica.as_str()), "{}", s.id);
        assert_eq!(s.labels.get("test").map(String::as_str), Some("listing"));
    }

    let own = client
        .query_sessions(&wsfs_client::SessionQuery {
            local_only: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(own
        .iter()
        .all(|s| !s.served_elsewhere && answering.contains(&held[&s.id])));
    assert!(own.len() < listed.len());

    let shown = wsfs(&cluster.url(), &["session", "list"], &[]);
    let text = succeeded(&shown, "session list");
    assert!(text.lines().next().unwrap().contains("REPLICA"), "{text}");
    for id in &created {
        let line = text.lines().find(|l| l.starts_with(id.as_str()));
        let line = line.unwrap_or_else(|| panic!("{id} not listed:\n{text}"));
        assert!(line.contains(&format!("replica-{}", held[id])), "{line}");
    }
}

/// A gateway in front of the replicas that answers with HTTP rather than
/// gRPC (a forbidden method, a 502 of its own) is named as such by every
/// command and by the library, never shown as tonic's raw complaint.
#[test]
fn a_proxy_answering_http_is_named_in_one_line_by_every_command() {
    let locations = "location = /wsfs.v1.Filesystem/Read {\nreturn 403;\n}\n\
                     location = /wsfs.v1.Filesystem/List {\nreturn 502;\n}\n";
    let Some(cluster) = Cluster::start_with_locations(1, locations) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let id = runtime.block_on(async {
        let client = Client::connect(&cluster.url()).await.unwrap();
        let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
        session.write_str("a.txt", "a\n").await.unwrap();
        let err = session.read_to_string("a.txt").await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err}");
        assert!(
            err.to_string().starts_with(wsfs::error::PROXY_ANSWERED),
            "{err}"
        );
        info.id
    });
    let session = [("WSFS_SESSION", id.as_str())];

    let cat = wsfs(&cluster.url(), &["cat", "a.txt"], &session);
    let stderr = String::from_utf8_lossy(&cat.stderr);
    assert_eq!(cat.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(
            "wsfs: PERMISSION_DENIED: a proxy or gateway in front of the server answered HTTP \
             403 Forbidden instead of gRPC"
        ),
        "{stderr}"
    );

    let ls = wsfs(&cluster.url(), &["ls"], &session);
    let stderr = String::from_utf8_lossy(&ls.stderr);
    assert_eq!(ls.status.code(), Some(1), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            "wsfs: UNAVAILABLE: a proxy or gateway in front of the server answered HTTP 502 \
             Bad Gateway instead of gRPC: no server behind it answered"
        ),
        "{stderr}"
    );
    for raw in ["compression flag", "protocol error", "h2 protocol"] {
        assert!(!stderr.contains(raw), "{stderr}");
    }
}
