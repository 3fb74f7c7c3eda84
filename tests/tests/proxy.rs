//! Routing by a standard proxy: three real `wsfs-server` processes behind a
//! real nginx running the shipped `deploy/nginx/wsfs.conf` (ports and file
//! paths substituted), and clients that know only the proxy's address.
//! Without nginx on PATH each test says so and passes, unless
//! `WSFS_REQUIRE_TOOLS=1`.

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::Duration;
use tonic::{Code, Request};
use wsfs::proto;
use wsfs_client::{ChangeKind, Client, Session, SessionOptions, WriteOptions};
use wsfs_tests::cluster::{binary, Cluster};
use wsfs_tests::kit::{reason, Rng};

const REPLICAS: usize = 3;

/// One set of replicas and one nginx for the whole test binary: the
/// processes outlive each test's runtime and die with the test process.
fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(REPLICAS)).as_ref()
}

async fn through_proxy(cluster: &Cluster) -> Client {
    Client::connect(&cluster.url()).await.unwrap()
}

/// Which replica holds each session carrying `label`, asking every replica
/// directly (ListSessions through the proxy sees one replica only).
async fn placement(cluster: &Cluster, label: &str) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for (index, replica) in cluster.replicas.iter().enumerate() {
        let direct = Client::connect(&replica.url()).await.unwrap();
        for s in direct
            .list_sessions_labelled(&labels(label), false)
            .await
            .unwrap()
        {
            let before = held.insert(s.id.clone(), index);
            assert_eq!(before, None, "session {} is on two replicas", s.id);
        }
    }
    held
}

fn labels(test: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("test".to_string(), test.to_string())])
}

/// Creates sessions labelled `label` through the proxy until every replica
/// holds one; returns one per replica.
async fn one_session_per_replica(
    client: &Client,
    cluster: &Cluster,
    label: &str,
) -> Vec<(Session, usize)> {
    let mut created = Vec::new();
    for _ in 0..60 {
        let (session, _) = client
            .create(SessionOptions::memory().label("test", label))
            .await
            .unwrap();
        created.push(session);
        let held = placement(cluster, label).await;
        let replicas: BTreeSet<usize> = held.values().copied().collect();
        if replicas.len() == REPLICAS {
            let mut one_each: BTreeMap<usize, Session> = BTreeMap::new();
            for session in created {
                one_each.entry(held[session.id()]).or_insert(session);
            }
            return one_each.into_iter().map(|(r, s)| (s, r)).collect();
        }
    }
    panic!("60 sessions never reached all {REPLICAS} replicas");
}

#[tokio::test]
async fn sessions_created_through_the_proxy_spread_over_the_replicas_each_on_one() {
    let Some(cluster) = cluster() else { return };
    let client = through_proxy(cluster).await;
    let mut ids = BTreeSet::new();
    for _ in 0..30 {
        let info = client
            .create_session(SessionOptions::memory().label("test", "spread"))
            .await
            .unwrap();
        ids.insert(info.id);
    }
    let held = placement(cluster, "spread").await;
    assert_eq!(held.keys().cloned().collect::<BTreeSet<_>>(), ids);
    let used: BTreeSet<usize> = held.values().copied().collect();
    assert!(used.len() >= 2, "30 sessions all on one replica: {held:?}");
    // Every later call of a session reaches the replica that created it.
    for id in &ids {
        assert_eq!(&client.get_session(id).await.unwrap().id, id);
        client.session(id).write_str("a.txt", id).await.unwrap();
        assert_eq!(
            client.session(id).read_to_string("a.txt").await.unwrap(),
            *id
        );
    }
}

#[tokio::test]
async fn every_kind_of_call_works_through_the_proxy_on_every_replica() {
    let Some(cluster) = cluster() else { return };
    let client = through_proxy(cluster).await;
    for (session, replica) in one_session_per_replica(&client, cluster, "every-call").await {
        let on = format!("session {} on replica {replica}", session.id());
        unary_calls(&session).await;
        byte_streams(&session, replica as u64).await;
        grep_stream(&session).await;
        watch_stream(&session).await;
        archives(&client, &session).await;
        snapshots(&client, &session).await;
        let deleted = client.delete_session(session.id()).await;
        assert!(deleted.is_ok(), "{on}: {deleted:?}");
        let gone = client.get_session(session.id()).await.unwrap_err();
        assert_eq!(gone.reason(), "SESSION_NOT_FOUND", "{on}");
    }
}

async fn unary_calls(session: &Session) {
    session
        .write_str("src/main.rs", "fn main() {}\n")
        .await
        .unwrap();
    let edited = wsfs::EditSpec {
        old_text: "{}".into(),
        new_text: "{ run() }".into(),
        replace_all: false,
        if_version: None,
        dry_run: false,
    };
    wsfs::Filesystem::edit(session, &wsfs_tests::kit::p("src/main.rs"), edited)
        .await
        .unwrap();
    assert_eq!(
        session.read_to_string("src/main.rs").await.unwrap(),
        "fn main() { run() }\n"
    );
    let found = session.glob_query("**/*.rs").run().await.unwrap();
    assert_eq!(found.paths.len(), 1);
}

async fn byte_streams(session: &Session, seed: u64) {
    let data = Rng(seed).bytes(4 * 1024 * 1024 + 17);
    let written = session
        .upload(
            "data/blob.bin",
            std::io::Cursor::new(data.clone()),
            WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(written.size, data.len() as u64);
    let mut back = Vec::new();
    session.download("data/blob.bin", &mut back).await.unwrap();
    assert!(back == data, "the download differs from the upload");
}

async fn grep_stream(session: &Session) {
    let (matches, summary) = session.grep_query("run").collect().await.unwrap();
    assert_eq!(matches.len(), 1);
    assert_eq!(matches[0].path.as_str(), "src/main.rs");
    assert!(summary.files_searched >= 1);
}

async fn watch_stream(session: &Session) {
    let mut events = session.watch("").recursive().stream().await.unwrap();
    let ready = events.next().await.unwrap().unwrap();
    assert_eq!(ready.kind(), ChangeKind::Ready);
    session.write_str("watched.txt", "hello").await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = events.next().await.unwrap().unwrap();
            if event.kind() != ChangeKind::Keepalive {
                return event;
            }
        }
    })
    .await
    .expect("an event through the proxy within 10 s");
    assert_eq!(event.kind(), ChangeKind::Created);
    assert_eq!(event.path, "watched.txt");
}

async fn archives(client: &Client, session: &Session) {
    let mut archive = Vec::new();
    session.export_to_writer(&mut archive, None).await.unwrap();
    let (copy, info) = client.create(SessionOptions::memory()).await.unwrap();
    copy.import_from_reader(std::io::Cursor::new(archive))
        .await
        .unwrap();
    assert_eq!(
        copy.read_to_string("src/main.rs").await.unwrap(),
        "fn main() { run() }\n"
    );
    client.delete_session(&info.id).await.unwrap();
}

async fn snapshots(client: &Client, session: &Session) {
    let snapshot = client.snapshot(session.id(), "before").await.unwrap();
    session.write_str("src/main.rs", "changed\n").await.unwrap();
    client.restore(session.id(), &snapshot.id).await.unwrap();
    assert_eq!(
        session.read_to_string("src/main.rs").await.unwrap(),
        "fn main() { run() }\n"
    );
    assert_eq!(client.list_snapshots(session.id()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_call_routed_by_another_session_is_refused_through_the_proxy() {
    let Some(cluster) = cluster() else { return };
    let client = through_proxy(cluster).await;
    let sessions = one_session_per_replica(&client, cluster, "misrouted").await;
    let (a, b) = (&sessions[0].0, &sessions[1].0);
    let mut request = Request::new(proto::WriteRequest {
        session_id: a.id().to_string(),
        path: "a.txt".into(),
        content: "misrouted".into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert(wsfs::SESSION_HEADER, b.id().parse().unwrap());
    let status = client.raw_filesystem().write(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "INVALID_ARGUMENT");
    assert!(status.message().contains(wsfs::SESSION_HEADER));
    for (session, _) in &sessions {
        let exists = wsfs::Filesystem::exists(session, &wsfs_tests::kit::p("a.txt")).await;
        assert_eq!(exists.unwrap(), None);
    }
}

#[tokio::test]
async fn a_lost_replica_fails_its_own_sessions_and_spares_the_others() {
    // A cluster of its own: this test kills one of its replicas.
    let Some(mut cluster) = Cluster::start(REPLICAS) else {
        return;
    };
    let client = through_proxy(&cluster).await;
    let sessions: Vec<(String, usize)> = one_session_per_replica(&client, &cluster, "lost")
        .await
        .into_iter()
        .map(|(s, r)| (s.id().to_string(), r))
        .collect();
    for (id, _) in &sessions {
        client.session(id).write_str("a.txt", id).await.unwrap();
    }
    cluster.kill_replica(0);
    for (id, replica) in &sessions {
        let read = client.session(id).read_to_string("a.txt").await;
        if *replica == 0 {
            // Without an object store nothing can bring it back: the proxy
            // answers UNAVAILABLE, or sends the call to the next replica in
            // the ring, which does not know the session.
            let err = read.unwrap_err();
            assert!(
                matches!(err.code(), Code::Unavailable | Code::NotFound),
                "{err}"
            );
        } else {
            assert_eq!(read.unwrap(), *id, "{}", cluster.proxy_log());
        }
    }
}

#[tokio::test]
async fn list_sessions_through_the_proxy_lists_one_replica_every_time() {
    let Some(cluster) = cluster() else { return };
    let client = through_proxy(cluster).await;
    one_session_per_replica(&client, cluster, "listed").await;
    let held = placement(cluster, "listed").await;
    let listed = |c: Client| async move {
        c.list_sessions_labelled(&labels("listed"), false)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect::<BTreeSet<_>>()
    };
    let first = listed(client.clone()).await;
    let replica = held[first.iter().next().expect("one replica's sessions")];
    let on_that_replica: BTreeSet<String> = held
        .iter()
        .filter(|(_, r)| **r == replica)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(first, on_that_replica);
    assert!(first.len() < held.len(), "the proxy listed every replica");
    for _ in 0..5 {
        assert_eq!(listed(through_proxy(cluster).await).await, first);
    }
}

#[tokio::test]
async fn the_cli_works_through_the_proxy() {
    let Some(cluster) = cluster() else { return };
    let home = tempfile::tempdir().unwrap();
    let wsfs = |args: &[&str], session: Option<&str>, stdin: Option<Vec<u8>>| {
        let mut command = std::process::Command::new(binary("wsfs"));
        command
            .args(args)
            .env_remove("WSFS_TOKEN")
            .env_remove("WSFS_CA")
            .env("WSFS_SERVER", cluster.url())
            .env("WSFS_CONFIG", home.path().join("context.json"))
            .env("HOME", home.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        match session {
            Some(id) => command.env("WSFS_SESSION", id),
            None => command.env_remove("WSFS_SESSION"),
        };
        let mut child = command.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = input.write_all(&stdin.unwrap_or_default());
        });
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "wsfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let mut ids = Vec::new();
    for _ in 0..5 {
        let created = wsfs(&["session", "create", "--label", "test=cli"], None, None);
        ids.push(String::from_utf8(created).unwrap().trim().to_string());
    }
    let chosen = "0d4f6a1e-57b2-4c3e-9a61-2f0c8b7d9e15";
    let created = wsfs(
        &["session", "create", "--label", "test=cli", "--id", chosen],
        None,
        None,
    );
    assert_eq!(String::from_utf8(created).unwrap().trim(), chosen);
    ids.push(chosen.to_string());
    let data = Rng(9).bytes(2 * 1024 * 1024);
    for id in &ids {
        wsfs(&["write", "notes.md", id], Some(id), None);
        assert_eq!(
            wsfs(&["cat", "notes.md"], Some(id), None),
            format!("{id}\n").into_bytes()
        );
        wsfs(&["put", "-", "blob.bin"], Some(id), Some(data.clone()));
        assert!(wsfs(&["get", "blob.bin", "-"], Some(id), None) == data);
    }
    let held = placement(cluster, "cli").await;
    assert_eq!(
        held.keys().cloned().collect::<BTreeSet<_>>(),
        ids.iter().cloned().collect()
    );
    for id in &ids {
        wsfs(&["session", "rm", id], None, None);
    }
    assert!(placement(cluster, "cli").await.is_empty());
}

/// A gateway may forbid ListSessions (it would list one replica's sessions
/// only). `wsfs session list` through it says so in one line, with what to
/// do, whether the gateway refuses with a bare HTTP status or a gRPC one;
/// the advice works: the replica itself lists.
#[test]
fn session_list_through_a_proxy_that_forbids_it_says_so_in_one_line() {
    let refusals = [
        "return 403;",
        "default_type application/grpc;\n\
         add_header grpc-status 7 always;\n\
         add_header grpc-message \"listing is not allowed here\" always;\n\
         return 204;",
    ];
    let home = tempfile::tempdir().unwrap();
    for refusal in refusals {
        let locations = format!("location = /wsfs.v1.Sessions/ListSessions {{\n{refusal}\n}}\n");
        let Some(cluster) = Cluster::start_with_locations(1, &locations) else {
            return;
        };
        let list = |server: &str| {
            std::process::Command::new(binary("wsfs"))
                .args(["session", "list"])
                .env_remove("WSFS_TOKEN")
                .env_remove("WSFS_SESSION")
                .env_remove("WSFS_CA")
                .env("WSFS_SERVER", server)
                .env("WSFS_CONFIG", home.path().join("context.json"))
                .output()
                .expect("wsfs runs")
        };
        let refused = list(&cluster.url());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{refusal}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "wsfs: PERMISSION_DENIED: a proxy or gateway at {} refused to list sessions",
                cluster.url()
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("wsfs session list --server http://HOST:PORT"),
            "{stderr}"
        );
        let direct = list(&cluster.replicas[0].url());
        assert!(
            direct.status.success(),
            "{}",
            String::from_utf8_lossy(&direct.stderr)
        );
    }
}

/// The Kubernetes sketch is not run, but its proxy configuration must stay
/// the tested one: the same directives as `deploy/nginx/wsfs.conf`, but for
/// the replicas' addresses, the listening address and the access log's
/// path.
#[test]
fn the_kubernetes_proxy_config_is_the_shipped_one_but_for_addresses() {
    let manifest = include_str!("../../deploy/kubernetes/proxy.yaml");
    let embedded: String = manifest
        .lines()
        .skip_while(|l| l.trim() != "nginx.conf: |")
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        embedded.contains("grpc_pass"),
        "no nginx.conf in the ConfigMap"
    );
    let shipped = directives(wsfs_tests::cluster::SHIPPED_NGINX_CONF);
    assert_eq!(directives(&embedded), shipped);
    assert_eq!(
        shipped
            .iter()
            .filter(|d| d.starts_with("server <replica>"))
            .count(),
        3
    );
}

/// A configuration's directives, one a line, without comments, with each
/// replica's address, the listening address and the access log's path
/// replaced by a placeholder.
fn directives(conf: &str) -> Vec<String> {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                ["server", _address, rest @ ..]
                    if rest.iter().any(|w| w.starts_with("max_fails=")) =>
                {
                    format!("server <replica> {}", rest.join(" "))
                }
                ["access_log", _path, rest @ ..] => format!("access_log <path> {}", rest.join(" ")),
                ["listen", _address, rest @ ..] => format!("listen <address> {}", rest.join(" ")),
                _ => words.join(" "),
            }
        })
        .collect()
}
