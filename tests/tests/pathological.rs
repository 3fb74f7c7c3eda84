//! Pathological requests: each is bounded by a limit and answered honestly,
//! and while one runs (its stream held open, unread) another session is
//! still served. No timings: responsiveness is a call that completes.

use futures::StreamExt;
use std::collections::HashMap;
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, grep_response::Payload};
use wsfs_tests::harness::TestServer;

async fn session(
    sessions: &mut SessionsClient<Channel>,
    seeds: HashMap<String, Vec<u8>>,
    max_path_depth: u32,
) -> String {
    sessions
        .create_session(proto::CreateSessionRequest {
            seed_files: seeds.into_iter().map(|(k, v)| (k, v.into())).collect(),
            limits: Some(proto::SessionLimits {
                max_path_depth,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("create a session")
        .into_inner()
        .session_id
}

/// A Stat on a bystander session completes.
async fn bystander_is_served(fs: &mut FilesystemClient<Channel>, bystander: &str) {
    fs.stat(proto::StatRequest {
        session_id: bystander.to_string(),
        path: "hello.txt".into(),
    })
    .await
    .expect("the bystander session is served");
}

struct World {
    _server: TestServer,
    fs: FilesystemClient<Channel>,
    sessions: SessionsClient<Channel>,
    bystander: String,
}

async fn world() -> World {
    let server = TestServer::start().await;
    let channel = server.channel().await;
    let mut sessions = SessionsClient::new(channel.clone());
    let fs = FilesystemClient::new(channel).max_decoding_message_size(64 << 20);
    let seeds = HashMap::from([("hello.txt".to_string(), b"hi\n".to_vec())]);
    let bystander = session(&mut sessions, seeds, 0).await;
    World {
        _server: server,
        fs,
        sessions,
        bystander,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_regex_over_the_size_limit_is_invalid_pattern() {
    let mut w = world().await;

    let err =
        w.fs.grep(proto::GrepRequest {
            session_id: w.bystander.clone(),
            pattern: "(?:a{1000}){1000}".into(),
            ..Default::default()
        })
        .await
        .expect_err("a regex too large to compile");

    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.get_details_error_info()
            .map(|i| i.reason)
            .unwrap_or_default(),
        "INVALID_PATTERN"
    );
    let b = w.bystander.clone();
    bystander_is_served(&mut w.fs, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grep_with_a_million_matches_stops_at_max_matches() {
    let mut w = world().await;
    let seeds = HashMap::from([("many.txt".to_string(), b"x\n".repeat(1_000_000))]);
    let heavy = session(&mut w.sessions, seeds, 0).await;

    let mut stream =
        w.fs.grep(proto::GrepRequest {
            session_id: heavy,
            pattern: "x".into(),
            max_matches: 5000,
            ..Default::default()
        })
        .await
        .expect("grep starts")
        .into_inner();
    // The stream is open and unread: the server must still serve others.
    let first = stream.next().await.expect("a first message").unwrap();
    let b = w.bystander.clone();
    bystander_is_served(&mut w.fs, &b).await;

    let mut matches = u64::from(matches!(first.payload, Some(Payload::Match(_))));
    let mut summary = None;
    while let Some(msg) = stream.next().await {
        match msg.expect("grep message").payload {
            Some(Payload::Match(_)) => matches += 1,
            Some(Payload::Summary(s)) => summary = Some(s),
            None => {}
        }
    }
    let summary = summary.expect("a summary");
    assert_eq!(matches, 5000);
    assert_eq!(summary.matches, 5000);
    assert!(summary.truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_glob_over_100_000_files_is_bounded_and_says_truncated() {
    let mut w = world().await;
    let seeds: HashMap<String, Vec<u8>> = (0..100_000)
        .map(|i| (format!("d{:03}/f{i:06}.rs", i / 1000), Vec::new()))
        .collect();
    let heavy = session(&mut w.sessions, seeds, 0).await;

    let answer =
        w.fs.glob(proto::GlobRequest {
            session_id: heavy.clone(),
            pattern: "**/*.rs".into(),
            max_results: 1000,
            ..Default::default()
        })
        .await
        .expect("glob")
        .into_inner();

    assert_eq!(answer.paths.len(), 1000);
    assert!(answer.truncated);
    assert_eq!(answer.paths[0], "d000/f000000.rs");
    let b = w.bystander.clone();
    bystander_is_served(&mut w.fs, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_64_level_tree_lists_at_any_depth() {
    let mut w = world().await;
    let deep: Vec<String> = (0..63).map(|i| format!("l{i}")).collect();
    let file = format!("{}/leaf.txt", deep.join("/"));
    let seeds = HashMap::from([(file.clone(), b"deep\n".to_vec())]);
    let heavy = session(&mut w.sessions, seeds, 64).await;

    let listing =
        w.fs.list(proto::ListRequest {
            session_id: heavy.clone(),
            path: String::new(),
            depth: u32::MAX,
            ..Default::default()
        })
        .await
        .expect("list everything")
        .into_inner();

    assert_eq!(listing.entries.len(), 64, "63 directories and the leaf");
    assert!(listing.entries.iter().any(|e| e.path == file));
    let b = w.bystander.clone();
    bystander_is_served(&mut w.fs, &b).await;
    let too_deep = format!("{file}/x");
    let err =
        w.fs.stat(proto::StatRequest {
            session_id: heavy,
            path: too_deep,
        })
        .await
        .expect_err("65 levels");
    assert_eq!(err.code(), Code::InvalidArgument);
}
