//! DeepFabric's VFS API (`--http-listen`) over real HTTP against the real
//! server: every tool and its strings, every error_type, the 400s, the
//! routes with and without `/vfs`, the session label, the same files over
//! gRPC, the bounds (body, sessions, request time, idle TTL) and tokens.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wsfs_server::http::{session_id, SESSION_LABEL};
use wsfs_server::ServerConfig;

/// Generous: the machine running the tests may be loaded.
const DEADLINE: Duration = Duration::from_secs(30);

const ADMIN: &str = "admin-token-0123456789";

/// A server with both faces on loopback ports, stopped when dropped.
struct Server {
    http: SocketAddr,
    grpc: String,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<wsfs::Result<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start() -> Server {
        Server::start_with(|_| {}).await
    }

    async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut config = ServerConfig::for_tests(dir.path().to_path_buf());
        config.listen = grpc.local_addr().unwrap();
        configure(&mut config);
        let (http_addr, grpc_addr) = (http.local_addr().unwrap(), grpc.local_addr().unwrap());
        let task = tokio::spawn(wsfs_server::serve_with_http(
            config,
            grpc,
            Some(http),
            std::future::pending(),
        ));
        Server {
            http: http_addr,
            grpc: format!("http://{grpc_addr}"),
            _dir: dir,
            task,
        }
    }

    async fn client(&self) -> wsfs_client::Client {
        wsfs_client::Client::connect(&self.grpc).await.unwrap()
    }

    async fn admin(&self) -> wsfs_client::Client {
        self.client().await.with_token(ADMIN).unwrap()
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        token: Option<&str>,
    ) -> (u16, Value) {
        request(self.http, method, path, body, token).await
    }

    async fn read_file(&self, session: &str, path: &str) -> Value {
        self.execute(session, "read_file", json!({"file_path": path}))
            .await
    }

    async fn write_file(&self, session: &str, path: &str, content: &str) -> Value {
        let args = json!({"file_path": path, "content": content});
        self.execute(session, "write_file", args).await
    }

    /// An execute answered with HTTP 200, as every tool outcome is.
    async fn execute(&self, session: &str, tool: &str, args: Value) -> Value {
        let (status, answer) = self.try_execute(session, tool, args, None).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// An execute with any answer, with `token` as the bearer token.
    async fn try_execute(
        &self,
        session: &str,
        tool: &str,
        args: Value,
        token: Option<&str>,
    ) -> (u16, Value) {
        let body = json!({"session_id": session, "tool": tool, "args": args});
        let body = Some(body.to_string().into_bytes());
        self.send("POST", "/vfs/execute", body, token).await
    }
}

/// One HTTP/1.1 request on a connection of its own; the status and the
/// JSON answer (`Value::Null` for an empty or non-JSON body).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    token: Option<&str>,
) -> (u16, Value) {
    let stream = connect(addr).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let started = Instant::now();
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => return s,
            Err(e) if started.elapsed() > DEADLINE => panic!("cannot connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn ok(answer: &Value) -> &str {
    assert_eq!(answer["success"], true, "{answer}");
    assert!(
        answer.get("error_type").is_none(),
        "no error_type on success: {answer}"
    );
    answer["result"].as_str().expect("a string result")
}

fn failed<'a>(answer: &'a Value, error_type: &str) -> &'a str {
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["error_type"], error_type, "{answer}");
    answer["result"].as_str().expect("a string result")
}

#[tokio::test]
async fn every_tool_answers_with_the_vfs_components_strings() {
    let s = Server::start().await;
    let wrote = s
        .write_file("sample-001", "hello.txt", "Hello, World!")
        .await;
    assert_eq!(ok(&wrote), "Successfully wrote 13 bytes to hello.txt");
    let wrote = s
        .write_file("sample-001", "/src/app.py", "print('héllo')\n")
        .await;
    assert_eq!(ok(&wrote), "Successfully wrote 16 bytes to /src/app.py");
    let read = s.read_file("sample-001", "/hello.txt").await;
    assert_eq!(ok(&read), "Hello, World!");
    let read = s.read_file("sample-001", "src/app.py").await;
    assert_eq!(ok(&read), "print('héllo')\n");
    let listed = s.execute("sample-001", "list_files", json!({})).await;
    let listed: Vec<String> = serde_json::from_str(ok(&listed)).unwrap();
    assert_eq!(listed, ["hello.txt", "src/app.py"]);
    let deleted = s
        .execute(
            "sample-001",
            "delete_file",
            json!({"file_path": "hello.txt"}),
        )
        .await;
    assert_eq!(ok(&deleted), "Successfully deleted hello.txt");
    let listed = s.execute("sample-001", "list_files", json!({})).await;
    assert_eq!(ok(&listed), r#"["src/app.py"]"#);
    // A new session lists nothing (and args are ignored, as DeepFabric
    // sends {"directory": "/"}).
    let empty = s
        .execute("sample-002", "list_files", json!({"directory": "/"}))
        .await;
    assert_eq!(ok(&empty), "[]");
}

#[tokio::test]
async fn a_large_file_is_read_back_whole() {
    let s = Server::start().await;
    // More than one text page (16 MiB) of short lines.
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef012345678\n";
    let content = line.repeat(20 * 1024 * 1024 / line.len());
    let wrote = s.write_file("big", "big.txt", &content).await;
    assert_eq!(
        ok(&wrote),
        format!("Successfully wrote {} bytes to big.txt", content.len())
    );
    let read = s.read_file("big", "big.txt").await;
    assert!(ok(&read) == content, "the whole file, in order");
}

#[tokio::test]
async fn every_error_type_is_reported_with_http_200() {
    let s = Server::start().await;
    let missing = s.read_file("errors", "nope.txt").await;
    assert_eq!(failed(&missing, "FileNotFound"), "File not found: nope.txt");
    let missing = s
        .execute("errors", "delete_file", json!({"file_path": "/nope.txt"}))
        .await;
    assert_eq!(
        failed(&missing, "FileNotFound"),
        "File not found: /nope.txt"
    );
    for (tool, args, message) in [
        (
            "read_file",
            json!({}),
            "Missing required argument: file_path",
        ),
        (
            "read_file",
            json!({"file_path": 7}),
            "Missing required argument: file_path",
        ),
        (
            "write_file",
            json!({"file_path": "a.txt"}),
            "Missing required argument: content",
        ),
        (
            "write_file",
            json!({"content": "x"}),
            "Missing required argument: file_path",
        ),
        (
            "delete_file",
            json!([]),
            "Missing required argument: file_path",
        ),
    ] {
        let answer = s.execute("errors", tool, args).await;
        assert_eq!(failed(&answer, "InvalidArguments"), message, "{tool}");
    }
    let escaped = s.write_file("errors", "../../etc/passwd", "x").await;
    assert!(
        failed(&escaped, "InvalidArguments").contains("climbs above the workspace root"),
        "{escaped}"
    );
    let unknown = s.execute("errors", "rm_rf", json!({})).await;
    assert_eq!(failed(&unknown, "UnknownTool"), "Unknown tool: rm_rf");
    // A file that is not UTF-8 (written over gRPC) is an IOError to read.
    let grpc = s.client().await;
    let session = grpc.session(session_id("errors"));
    session
        .upload(
            "bin.dat",
            &b"\xff\xfe\x00"[..],
            wsfs::WriteOptions::default(),
        )
        .await
        .unwrap();
    let binary = s.read_file("errors", "bin.dat").await;
    assert!(
        failed(&binary, "IOError").starts_with("IO error: "),
        "{binary}"
    );
    // Nothing was written by the refused calls.
    let listed = s.execute("errors", "list_files", json!({})).await;
    assert_eq!(ok(&listed), r#"["bin.dat"]"#);
}

#[tokio::test]
async fn a_body_that_is_not_the_request_gets_400_and_the_server_serves_on() {
    let s = Server::start().await;
    let long = "x".repeat(257);
    for body in [
        b"not json".to_vec(),
        b"{".to_vec(),
        b"{}".to_vec(),
        br#"{"session_id": "a", "tool": "read_file"}"#.to_vec(),
        br#"{"session_id": 5, "tool": "read_file", "args": {}}"#.to_vec(),
        br#"{"session_id": "", "tool": "list_files", "args": {}}"#.to_vec(),
        format!(r#"{{"session_id": "{long}", "tool": "list_files", "args": {{}}}}"#).into_bytes(),
        vec![0xff, 0x00, 0x13, 0x37],
        Vec::new(),
    ] {
        let (status, answer) = s
            .send("POST", "/vfs/execute", Some(body.clone()), None)
            .await;
        assert_eq!(status, 400, "{}: {answer}", String::from_utf8_lossy(&body));
        assert!(
            failed(&answer, "InvalidRequest").starts_with("Invalid request: "),
            "{answer}"
        );
    }
    // A body over the limit is refused before it is read whole.
    let huge = vec![b' '; wsfs_server::http::MAX_BODY_BYTES + 1];
    let (status, answer) = s.send("POST", "/execute", Some(huge), None).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error_type"], "InvalidRequest");
    // Raw garbage instead of HTTP closes that connection only.
    let mut raw = connect(s.http).await;
    raw.write_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, raw.read_to_end(&mut answer)).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let listed = s.execute("still-here", "list_files", json!({})).await;
    assert_eq!(ok(&listed), "[]");
}

#[tokio::test]
async fn every_route_answers_with_and_without_the_vfs_prefix() {
    let s = Server::start().await;
    for prefix in ["", "/vfs"] {
        let (status, health) = s.send("GET", &format!("{prefix}/health"), None, None).await;
        assert_eq!(status, 200);
        assert_eq!(health, json!({"status": "healthy", "components": ["vfs"]}));
        let (status, components) = s
            .send("GET", &format!("{prefix}/components"), None, None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(components, json!({"components": ["vfs"]}));
        let name = format!("route{}", prefix.len());
        let body = json!({"session_id": name, "tool": "write_file",
            "args": {"file_path": "a.txt", "content": "a"}});
        let (status, wrote) = s
            .send(
                "POST",
                &format!("{prefix}/execute"),
                Some(body.to_string().into_bytes()),
                None,
            )
            .await;
        assert_eq!(status, 200);
        ok(&wrote);
        let (status, deleted) = s
            .send("DELETE", &format!("{prefix}/session/{name}"), None, None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(deleted, json!({"success": true, "deleted_files": 1}));
        // A session that is not there: nothing to delete, as the component says.
        let (status, again) = s
            .send("DELETE", &format!("{prefix}/session/{name}"), None, None)
            .await;
        assert_eq!(status, 200);
        assert_eq!(again, json!({"success": true, "deleted_files": 0}));
    }
    let (status, answer) = s.send("GET", "/vfs/nothing", None, None).await;
    assert_eq!(status, 404);
    assert_eq!(answer, json!({"error": "Not found"}));
    let (status, _) = s.send("GET", "/execute", None, None).await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn a_session_is_labelled_and_its_files_are_the_same_over_grpc() {
    let s = Server::start().await;
    ok(&s.write_file("sample-001", "notes/a.md", "from http").await);
    let grpc = s.client().await;
    let labels = BTreeMap::from([(SESSION_LABEL.to_string(), "sample-001".to_string())]);
    let found = grpc.list_sessions_labelled(&labels, false).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, session_id("sample-001"));
    assert_eq!(found[0].idle_ttl, Some(Duration::from_secs(3600)));
    let session = grpc.session(found[0].id.clone());
    assert_eq!(
        session.read_to_string("notes/a.md").await.unwrap(),
        "from http"
    );
    session.write_str("notes/b.md", "from grpc").await.unwrap();
    let read = s.read_file("sample-001", "notes/b.md").await;
    assert_eq!(ok(&read), "from grpc");
    // Another name is another session, which sees none of these files.
    let other = s.read_file("sample-002", "notes/a.md").await;
    failed(&other, "FileNotFound");
    // The DELETE removes the session for every client.
    let (_, deleted) = s.send("DELETE", "/session/sample-001", None, None).await;
    assert_eq!(deleted, json!({"success": true, "deleted_files": 2}));
    let err = grpc
        .get_session(&session_id("sample-001"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SESSION_NOT_FOUND");
}

#[tokio::test]
async fn a_session_made_over_grpc_under_the_same_id_is_not_taken_over() {
    let s = Server::start().await;
    let grpc = s.client().await;
    let options = wsfs_client::SessionOptions::memory().id(session_id("taken"));
    grpc.create_session(options).await.unwrap();
    let (status, answer) = s.try_execute("taken", "list_files", json!({}), None).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        failed(&answer, "IOError").contains("was not made for DeepFabric session 'taken'"),
        "{answer}"
    );
    let (status, _) = s.send("DELETE", "/session/taken", None, None).await;
    assert_eq!(status, 409);
    grpc.get_session(&session_id("taken")).await.unwrap();
}

#[tokio::test]
async fn concurrent_first_uses_of_a_name_make_one_session() {
    let s = Server::start().await;
    let writes = (0..16).map(|i| {
        let body = json!({"session_id": "race", "tool": "write_file",
            "args": {"file_path": format!("f{i:02}.txt"), "content": "x"}});
        request(
            s.http,
            "POST",
            "/vfs/execute",
            Some(body.to_string().into_bytes()),
            None,
        )
    });
    for (status, answer) in futures::future::join_all(writes).await {
        assert_eq!(status, 200);
        ok(&answer);
    }
    let listed = s.execute("race", "list_files", json!({})).await;
    let listed: Vec<String> = serde_json::from_str(ok(&listed)).unwrap();
    assert_eq!(listed.len(), 16);
    let grpc = s.client().await;
    let labels = BTreeMap::from([(SESSION_LABEL.to_string(), "race".to_string())]);
    assert_eq!(
        grpc.list_sessions_labelled(&labels, false)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn sessions_take_the_backend_limits_and_idle_ttl_of_the_flags() {
    let s = Server::start_with(|c| {
        c.http.http_session_backend = wsfs_server::http::HttpBackend::Directory;
        c.http.http_session_max_files = 2;
        c.http.http_session_idle_ttl = Duration::from_secs(1);
    })
    .await;
    for name in ["one.txt", "two.txt"] {
        ok(&s.write_file("limited", name, "x").await);
    }
    let third = s.write_file("limited", "three.txt", "x").await;
    assert!(
        failed(&third, "IOError").contains("this session allows at most 2"),
        "{third}"
    );
    let grpc = s.client().await;
    let info = grpc.get_session(&session_id("limited")).await.unwrap();
    assert_eq!(info.backend, wsfs_client::Backend::Directory);
    assert_eq!(info.limits.max_files, 2);
    // Idle past its TTL, the session goes (the reaper runs every second).
    // Listing does not count as use; GetSession would.
    let labels = BTreeMap::from([(SESSION_LABEL.to_string(), "limited".to_string())]);
    let started = Instant::now();
    while !grpc
        .list_sessions_labelled(&labels, false)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            started.elapsed() < DEADLINE,
            "the idle session was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn new_names_stop_at_the_servers_session_maximum() {
    let s = Server::start_with(|c| c.max_sessions = 2).await;
    for name in ["a", "b"] {
        ok(&s.execute(name, "list_files", json!({})).await);
    }
    let (status, answer) = s.try_execute("c", "list_files", json!({}), None).await;
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("--max-sessions"),
        "{answer}"
    );
    // A name that has its session still works.
    ok(&s.execute("a", "list_files", json!({})).await);
}

#[tokio::test]
async fn a_request_that_does_not_arrive_in_time_gets_503() {
    let s = Server::start_with(|c| c.http.http_request_timeout = Duration::from_secs(1)).await;
    let mut slow = connect(s.http).await;
    // Headers, then a body that never comes.
    slow.write_all(
        b"POST /vfs/execute HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"session_id\"",
    )
    .await
    .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(DEADLINE, slow.read(&mut answer))
        .await
        .expect("an answer within the deadline")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("--http-request-timeout"), "{answer}");
}

#[tokio::test]
async fn with_tokens_every_call_needs_a_bearer_token() {
    let s = Server::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let write = json!({"file_path": "a.txt", "content": "x"});
    let call = |name: &'static str, token: Option<&'static str>| {
        s.try_execute(name, "write_file", write.clone(), token)
    };
    let (status, answer) = call("t1", None).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error_type"], "Unauthenticated");
    let (status, _) = call("t1", Some("not-the-token-at-all")).await;
    assert_eq!(status, 401);
    // Nothing was created by the refused calls.
    let admin = s.admin().await;
    assert_eq!(admin.list_sessions().await.unwrap().len(), 0);
    let (status, answer) = call("t1", Some(ADMIN)).await;
    assert_eq!(status, 200);
    ok(&answer);
    // A session's own token opens that session, and only that one.
    let token = admin
        .issue_token(&session_id("t1"), "agent")
        .await
        .unwrap()
        .token;
    let (status, answer) = s
        .try_execute("t1", "write_file", write.clone(), Some(&token))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = s
        .try_execute("t2", "write_file", write.clone(), Some(&token))
        .await;
    assert_eq!(status, 403, "{answer}");
    // Deleting takes the admin token.
    let (status, _) = s.send("DELETE", "/session/t1", None, Some(&token)).await;
    assert_eq!(status, 401);
    let (status, deleted) = s.send("DELETE", "/session/t1", None, Some(ADMIN)).await;
    assert_eq!(status, 200);
    assert_eq!(deleted["deleted_files"], 1);
    // Health and the component list are open (they name no session).
    let (status, _) = s.send("GET", "/health", None, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_http_listener_is_refused_off_loopback_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = ServerConfig::for_tests(dir.path().to_path_buf());
    config.listen = grpc.local_addr().unwrap();
    // Refused before anything is bound there.
    config.http.http_listen = Some("0.0.0.0:0".parse().unwrap());
    let err = wsfs_server::serve(config, grpc, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--http-listen"), "{err}");
}

#[tokio::test]
async fn a_watcher_on_grpc_sees_the_changes_made_over_http() {
    use futures::StreamExt;
    let s = Server::start().await;
    ok(&s.execute("watched", "list_files", json!({})).await);
    let grpc = s.client().await;
    let session = grpc.session(session_id("watched"));
    let mut events = session.watch("").recursive().stream().await.unwrap();
    ok(&s.write_file("watched", "out/result.txt", "done").await);
    ok(&s
        .execute(
            "watched",
            "delete_file",
            json!({"file_path": "out/result.txt"}),
        )
        .await);
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < 2 {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("the changes arrive")
            .expect("the stream stays open")
            .unwrap();
        if event.path == "out/result.txt" {
            seen.push(event.kind());
        }
    }
    assert_eq!(
        seen,
        [
            wsfs::proto::ChangeKind::Created,
            wsfs::proto::ChangeKind::Deleted
        ]
    );
}
