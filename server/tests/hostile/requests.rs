//! One request's own cost: Edit, Grep, paths and patterns.

use super::harness::{reason, Server, DEFAULT_ADDRESS_SPACE, MIB};
use std::time::Duration;
use tonic::Code;
use wsfs::proto;
use wsfs_client::{Client, EditSpec, Filesystem, Layout, SessionOptions};

/// What the server may grow by, above its state before the attack, while
/// it refuses a request whose cost is bounded before the work starts.
const REFUSAL_GROWTH: u64 = 48 * MIB;

fn assert_refused(status: &tonic::Status, code: Code, why: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(reason(status), why, "{status:?}");
    assert!(
        status.message().len() < 1024,
        "the message echoes {} bytes",
        status.message().len()
    );
}

async fn stat(client: &Client, session_id: &str, path: &str) -> (u64, i64) {
    let s = client
        .raw_filesystem()
        .stat(proto::StatRequest {
            session_id: session_id.into(),
            path: path.into(),
        })
        .await
        .unwrap()
        .into_inner();
    (s.version, s.size_bytes)
}

/// 100 KB of `a` with every `a` replaced by 100 KB asks for a 10 GB result:
/// it used to be built (and abort the process) before the per-write limit
/// was checked; a dry run did the same. Now its size is computed from the
/// match count and refused with nothing allocated.
#[tokio::test]
async fn an_edit_whose_result_would_pass_the_limit_is_too_large_before_it_is_built() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    let original = "a".repeat(100_000);
    session.write_str("a.txt", &original).await.unwrap();
    let before = stat(&client, &info.id, "a.txt").await;
    let baseline = server.peak_rss();

    let mut raw = client.raw_filesystem();
    for (size, dry_run) in [(100_000, false), (100_000, true), (20_000, false)] {
        let status = raw
            .edit(proto::EditRequest {
                session_id: info.id.clone(),
                path: "a.txt".into(),
                old_text: "a".into(),
                new_text: "b".repeat(size),
                replace_all: true,
                dry_run,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_refused(&status, Code::InvalidArgument, "TOO_LARGE");
    }

    let peak = server.peak_rss();
    eprintln!(
        "Edit asking for 10 GB: peak {} MiB from {} MiB",
        peak / MIB,
        baseline / MIB
    );
    assert!(
        peak < baseline + REFUSAL_GROWTH,
        "peak {} MiB from {} MiB",
        peak / MIB,
        baseline / MIB
    );
    assert_eq!(stat(&client, &info.id, "a.txt").await, before);
    assert_eq!(session.read_to_string("a.txt").await.unwrap(), original);
    server.assert_serves_bystander().await;
}

/// A dry run reveals the edit's diff at the edit's cost, so a caller who
/// may not edit a file may not preview an edit of it either.
#[tokio::test]
async fn a_dry_run_edit_is_refused_where_the_edit_is() {
    let mut server = Server::start(&[]);
    let system = server.client().await;
    let (_, info) = system
        .create(
            SessionOptions::memory()
                .layout(Layout::Swarm)
                .seed_file("sys/rules.md", "rules\n"),
        )
        .await
        .unwrap();
    let reader = system.clone().with_caller("reader").unwrap();
    let error = reader
        .session(&info.id)
        .edit(
            &wsfs_client::parse_path("sys/rules.md").unwrap(),
            EditSpec {
                old_text: "rules".into(),
                new_text: "mine".into(),
                dry_run: true,
                ..EditSpec::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::PermissionDenied, "{error}");
    assert_eq!(error.reason(), "PERMISSION_DENIED", "{error}");
    let session = system.session(&info.id);
    assert_eq!(
        session.read_to_string("sys/rules.md").await.unwrap(),
        "rules\n"
    );
    server.assert_serves_bystander().await;
}

fn grep_request(session_id: &str, pattern: &str, context: u32, max: u32) -> proto::GrepRequest {
    proto::GrepRequest {
        session_id: session_id.into(),
        pattern: pattern.into(),
        context_lines: context,
        max_matches: max,
        ..Default::default()
    }
}

/// Every line of a 1 MB file matches; with context_lines 1000 each match
/// cloned 2001 lines (1 GB peak). Context above 100 lines is refused, and
/// at 100 lines the matches stream with a bounded amount in flight.
#[tokio::test]
async fn grep_context_is_capped_and_matches_are_built_one_at_a_time() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    let line = format!("{}\n", "a".repeat(99));
    session
        .write_str("big.txt", &line.repeat(10_000))
        .await
        .unwrap();
    let baseline = server.peak_rss();
    let mut raw = client.raw_filesystem();

    for context in [101, 1000, 100_000] {
        let status = raw
            .grep(grep_request(&info.id, "a", context, 0))
            .await
            .unwrap_err();
        assert_refused(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert!(status.message().contains("at most 100"), "{status:?}");
    }

    let mut stream = raw
        .grep(grep_request(&info.id, "a", 100, 10_000))
        .await
        .unwrap()
        .into_inner();
    let (mut matches, mut summary) = (0u64, None);
    while let Some(m) = stream.message().await.unwrap() {
        match m.payload.unwrap() {
            proto::grep_response::Payload::Match(m) => {
                assert!(m.before.len() <= 100 && m.after.len() <= 100);
                matches += 1;
            }
            proto::grep_response::Payload::Summary(s) => summary = Some(s),
        }
    }
    assert_eq!(matches, 10_000);
    assert_eq!(summary.unwrap().matches, 10_000);
    let peak = server.peak_rss();
    eprintln!(
        "Grep of 10,000 matches with 100 lines of context: peak {} MiB from {} MiB",
        peak / MIB,
        baseline / MIB
    );
    assert!(
        peak < baseline + REFUSAL_GROWTH,
        "peak {} MiB from {} MiB",
        peak / MIB,
        baseline / MIB
    );
    server.assert_serves_bystander().await;
}

/// Builds a tree of `files` files of about `file_bytes` each, every line a
/// match for `needle`.
fn build_tree(root: &std::path::Path, files: usize, file_bytes: usize) -> u64 {
    let line = "needle in a haystack, a line long enough to matter\n";
    let content = line.repeat(file_bytes / line.len());
    for i in 0..files {
        let dir = root.join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:04}.txt")), &content).unwrap();
    }
    (content.len() * files) as u64
}

/// Streams that read one message and stop: whole batches of results used
/// to be materialised ahead of them (11 GB for 32 such streams over an
/// 80 MB tree). Each now holds at most its batches' buffers and no thread;
/// the memory is given back when they go away, and reused.
#[tokio::test]
async fn stalled_grep_readers_hold_a_bounded_amount_each() {
    const STREAMS: usize = 32;
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().join("tree");
    let bytes = build_tree(&root, 256, 128 * 1024);
    let (mut server, _, id, baseline) = rooted_session(tree.path(), &root).await;

    // Twice: the second round must reuse what the first one freed.
    let mut peaks = Vec::new();
    for _ in 0..2 {
        let stalled = stalled_greps(&server, &id, STREAMS, 2).await;
        // Long enough for every search to run as far ahead as it may.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let peak = server.peak_rss();
        let per_stream = peak.saturating_sub(baseline) / STREAMS as u64;
        eprintln!(
            "{STREAMS} stalled Grep streams over {} MB: peak {} MiB from {} MiB, {} KiB each",
            bytes / 1_000_000,
            peak / MIB,
            baseline / MIB,
            per_stream / 1024
        );
        assert!(per_stream < 8 * MIB, "{} KiB per stream", per_stream / 1024);
        server.assert_serves_bystander().await;
        if peaks.is_empty() {
            // No thread waits on a stalled reader: once the blocking pool's
            // idle threads have retired (10 s), few are left, not one or
            // more per stream.
            tokio::time::sleep(Duration::from_secs(11)).await;
            let threads = threads_of(server.pid());
            eprintln!("{threads} server threads with {STREAMS} stalled streams");
            assert!(
                threads < STREAMS / 2,
                "{threads} threads for {STREAMS} stalled streams"
            );
        }

        drop(stalled);
        wait_for_streams_to_close(&server, &id, "Grep").await;
        peaks.push(peak);
    }
    assert!(
        peaks[1] < peaks[0] + 8 * MIB,
        "the second round grew the peak from {} to {} MiB",
        peaks[0] / MIB,
        peaks[1] / MIB
    );
    server.assert_serves_bystander().await;
}

/// Threads of a process.
/// A Grep keeps open the directories of the files it has listed and not
/// searched yet: a tree with a directory per file, each file with enough
/// matches to pause its batch, must not make a stalled reader cost a
/// descriptor per file in flight. At most 8 batches are walked or in
/// flight per stream, each with at most 32 directories; without that cap
/// a batch of 128 files here would hold 128.
#[tokio::test]
async fn stalled_greps_over_a_directory_per_file_hold_a_bounded_number_of_descriptors() {
    const STREAMS: usize = 8;
    const DIRS: usize = 1_200;
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().join("tree");
    // About 80 KiB of results per file: more than a unit's budget, so a
    // search pauses in the first file of its batch, holding the rest.
    let content = "needle\n".repeat(1_000);
    for i in 0..DIRS {
        let dir = root.join(format!("d{i:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f.txt"), &content).unwrap();
    }
    let (mut server, _, id, _) = rooted_session(tree.path(), &root).await;
    let before = server.open_fds();
    let stalled = stalled_greps(&server, &id, STREAMS, 0).await;
    // Long enough for every search to run as far ahead as it may.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = server.open_fds();
    let per_stream = during.saturating_sub(before) / STREAMS;
    eprintln!("{STREAMS} stalled Grep streams over {DIRS} directories: {before} descriptors before, {during} during, {per_stream} each");
    // 8 batches of 32 directories, the file being searched, the
    // connection, the walk's two levels.
    assert!(
        per_stream <= 8 * 32 + 8,
        "{per_stream} descriptors per stream"
    );
    drop(stalled);
    wait_for_streams_to_close(&server, &id, "Grep").await;
    let after = server.open_fds();
    assert!(
        after <= before + 2,
        "{after} descriptors after, {before} before"
    );
    server.assert_serves_bystander().await;
}

/// `streams` Greps for "needle" that read their first message and stop,
/// each kept with its client.
async fn stalled_greps(
    server: &Server,
    id: &str,
    streams: usize,
    context: u32,
) -> Vec<(
    wsfs::proto::filesystem_client::FilesystemClient<tonic::transport::Channel>,
    tonic::Streaming<proto::GrepResponse>,
)> {
    let mut stalled = Vec::new();
    for _ in 0..streams {
        // A connection each: streams on one connection would share its
        // flow-control window and stall each other before the server.
        let mut raw = Client::connect(&server.url).await.unwrap().raw_filesystem();
        let mut stream = raw
            .grep(grep_request(id, "needle", context, 100_000))
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().is_some());
        stalled.push((raw, stream));
    }
    stalled
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A 40 MiB path, session id, pattern or glob used to be written to the
/// log twice and echoed into the error (which then failed as "metadata
/// too large"). Each is refused by length first, with its contract
/// reason, and echoed by a short prefix.
#[tokio::test]
async fn huge_inputs_are_refused_by_length_and_echoed_briefly() {
    let host = tempfile::tempdir().unwrap();
    let allow = host.path().to_str().unwrap().to_string();
    let mut server = Server::start_limited(
        DEFAULT_ADDRESS_SPACE,
        &["--allow-root", &allow],
        &[("RUST_LOG", "info")],
    );
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    session.write_str("f.txt", "needle\n").await.unwrap();
    let huge = "x/".repeat(20 * 1024 * 1024);
    let log_before = server.log().len();
    let mut raw = client.raw_filesystem();
    let id = info.id.clone();

    let overlong_group = format!("({}", "a".repeat(60_000));
    let answers = [
        (
            "path",
            "INVALID_PATH",
            raw.stat(proto::StatRequest {
                session_id: id.clone(),
                path: huge.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "session id",
            "SESSION_NOT_FOUND",
            raw.stat(proto::StatRequest {
                session_id: huge.clone(),
                path: "f.txt".into(),
            })
            .await
            .map(drop),
        ),
        (
            "grep pattern",
            "INVALID_PATTERN",
            raw.grep(grep_request(&id, &huge, 0, 0)).await.map(drop),
        ),
        (
            "grep glob",
            "INVALID_PATTERN",
            raw.grep(proto::GrepRequest {
                glob: huge.clone(),
                ..grep_request(&id, "needle", 0, 0)
            })
            .await
            .map(drop),
        ),
        (
            "glob pattern",
            "INVALID_PATTERN",
            raw.glob(proto::GlobRequest {
                session_id: id.clone(),
                pattern: huge.clone(),
                ..Default::default()
            })
            .await
            .map(drop),
        ),
        (
            "watch glob",
            "INVALID_PATTERN",
            raw.watch(proto::WatchRequest {
                session_id: id.clone(),
                glob: huge.clone(),
                ..Default::default()
            })
            .await
            .map(drop),
        ),
        // Within the bound, but the parser complains: the complaint does
        // not repeat the pattern.
        (
            "unclosed group",
            "INVALID_PATTERN",
            raw.grep(grep_request(&id, &overlong_group, 0, 0))
                .await
                .map(drop),
        ),
    ];
    let import = futures::stream::iter([proto::ImportArchiveRequest {
        payload: Some(proto::import_archive_request::Payload::SessionId(
            huge.clone(),
        )),
    }]);
    let mount = proto::HostMount {
        host_path: allow.clone(),
        mount_path: "m".into(),
        include_glob: vec![huge.clone()],
        ..Default::default()
    };
    let mut sessions = client.raw_sessions();
    let more = [
        (
            "import session id",
            "SESSION_NOT_FOUND",
            sessions.import_archive(import).await.map(drop),
        ),
        (
            "mount glob",
            "INVALID_PATTERN",
            sessions
                .create_session(proto::CreateSessionRequest {
                    mounts: vec![mount],
                    ..Default::default()
                })
                .await
                .map(drop),
        ),
    ];
    for (input, why, answer) in answers.into_iter().chain(more) {
        let status = answer.expect_err(input);
        let code = if why == "SESSION_NOT_FOUND" {
            Code::NotFound
        } else {
            Code::InvalidArgument
        };
        assert_refused(&status, code, why);
    }

    let grown = server.log().len() - log_before;
    eprintln!("9 refused 40 MiB inputs grew the log by {grown} bytes");
    assert!(grown < 8 * 1024, "the log grew by {grown} bytes");
    assert_eq!(session.read_to_string("f.txt").await.unwrap(), "needle\n");
    server.assert_serves_bystander().await;
}

/// Bytes that are not a valid message of the call's type: tonic's codec
/// answered INTERNAL without an ErrorInfo; the contract's answer is
/// INVALID_ARGUMENT, reason INVALID_ARGUMENT.
#[tokio::test]
async fn an_undecodable_request_is_invalid_argument() {
    let mut server = Server::start(&[]);
    let channel = tonic::transport::Endpoint::from_shared(server.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    // Field 1 (session_id, a string) carrying bytes that are not UTF-8.
    let not_utf8: Vec<u8> = vec![0xff, 0xfe, 0xfd];
    let codec = tonic_prost::ProstCodec::<Vec<u8>, proto::StatResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/wsfs.v1.Filesystem/Stat");
    let status = grpc
        .unary(tonic::Request::new(not_utf8.clone()), path, codec)
        .await
        .unwrap_err();
    assert_refused(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert!(
        status.message().contains("not a valid message"),
        "{status:?}"
    );

    // A server-streaming call decodes its request the same way.
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Vec<u8>, proto::GrepResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/wsfs.v1.Filesystem/Grep");
    let status = grpc
        .server_streaming(tonic::Request::new(not_utf8.clone()), path, codec)
        .await
        .unwrap_err();
    assert_refused(&status, Code::InvalidArgument, "INVALID_ARGUMENT");

    // An upload whose second message is not a message: refused, nothing
    // written. A `Vec<u8>` is encoded as field 1, which is WriteBytes'
    // header, so the first message is a valid header.
    let client = server.client().await;
    let (session, info) = client.create(SessionOptions::memory()).await.unwrap();
    let header = prost::Message::encode_to_vec(&proto::WriteBytesHeader {
        session_id: info.id.clone(),
        path: "up.bin".into(),
        ..Default::default()
    });
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Vec<u8>, proto::WriteResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/wsfs.v1.Filesystem/WriteBytes");
    let messages = futures::stream::iter([header, not_utf8]);
    let status = grpc
        .client_streaming(tonic::Request::new(messages), path, codec)
        .await
        .unwrap_err();
    assert_refused(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
    let up = wsfs_client::parse_path("up.bin").unwrap();
    assert_eq!(session.exists(&up).await.unwrap(), None);
    server.assert_serves_bystander().await;
}

/// A Glob asking for `u32::MAX` results over a tree larger than the cap
/// answers the cap and `truncated`, as List and Grep do; a Write whose
/// text is over the per-write limit is refused before it is copied.
#[tokio::test]
async fn glob_results_and_write_sizes_are_bounded_by_the_server() {
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().join("tree");
    for d in 0..101 {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            std::fs::File::create(dir.join(format!("f{f:04}"))).unwrap();
        }
    }
    let allow = tree.path().to_str().unwrap().to_string();
    let mut server = Server::start(&["--allow-root", &allow]);
    let client = server.client().await;
    let (_, info) = client
        .create(SessionOptions::directory().root(&root))
        .await
        .unwrap();
    let mut raw = client.raw_filesystem();
    let globbed = raw
        .glob(proto::GlobRequest {
            session_id: info.id.clone(),
            pattern: "**".into(),
            max_results: u32::MAX,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(globbed.paths.len(), 100_000);
    assert!(globbed.truncated);

    let (session, small) = client
        .create(SessionOptions::memory().max_write_bytes(MIB))
        .await
        .unwrap();
    let status = raw
        .write(proto::WriteRequest {
            session_id: small.id.clone(),
            path: "big.txt".into(),
            content: "x".repeat(40 * MIB as usize),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_refused(&status, Code::InvalidArgument, "TOO_LARGE");
    let big = wsfs_client::parse_path("big.txt").unwrap();
    assert_eq!(session.exists(&big).await.unwrap(), None);
    server.assert_serves_bystander().await;
}

/// The "slow clients" scenario for every other stream kind: ReadBytes of a
/// large file in the largest chunks, ExportArchive of a tree,
/// ReadSnapshotFile of the large file from a snapshot, and Watch
/// under a flood of changes, each opened by clients that read one message
/// and stop. Each stalled stream holds a bounded amount (its channel's few
/// messages and the transport's window), the server keeps serving, and
/// the memory returns when the clients go away.
#[tokio::test]
async fn stalled_readers_of_every_stream_kind_hold_a_bounded_amount_each() {
    const STREAMS: usize = 16;
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().join("tree");
    build_tree(&root, 64, 128 * 1024);
    let big = vec![b'z'; 64 * MIB as usize];
    std::fs::write(root.join("big.bin"), &big).unwrap();
    drop(big);
    // A server each, so that each kind's peak is its own.
    for kind in ["ReadBytes", "ExportArchive", "ReadSnapshotFile", "Watch"] {
        let (mut server, session, id, mut baseline) = rooted_session(tree.path(), &root).await;
        let snapshot = if kind == "ReadSnapshotFile" {
            let client = server.client().await;
            let taken = client.snapshot(&id, "stalled").await.unwrap().id;
            baseline = server.rss();
            taken
        } else {
            String::new()
        };
        // Two rounds: the second must fit in the memory the first gave
        // back. (Resident memory itself need not fall: the allocator may
        // keep freed pages; a leak would show as a second peak.)
        let mut first_peak = 0;
        for round in 0..2 {
            let mut stalled: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
            for _ in 0..STREAMS {
                // A connection each, as in the Grep test.
                let own = Client::connect(&server.url).await.unwrap();
                match kind {
                    "ReadBytes" => {
                        let mut raw = own.raw_filesystem();
                        let mut stream = raw
                            .read_bytes(proto::ReadBytesRequest {
                                session_id: id.clone(),
                                path: "big.bin".into(),
                                offset: 0,
                                limit: 0,
                                chunk_size: wsfs::MAX_CHUNK_SIZE as u32,
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        assert!(stream.message().await.unwrap().is_some());
                        stalled.push(Box::new((raw, stream)));
                    }
                    "ReadSnapshotFile" => {
                        let mut raw = own.raw_sessions();
                        let mut stream = raw
                            .read_snapshot_file(proto::ReadSnapshotFileRequest {
                                session_id: id.clone(),
                                snapshot_id: snapshot.clone(),
                                path: "big.bin".into(),
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        assert!(stream.message().await.unwrap().is_some());
                        stalled.push(Box::new((raw, stream)));
                    }
                    "ExportArchive" => {
                        let mut raw = own.raw_sessions();
                        let mut stream = raw
                            .export_archive(proto::ExportArchiveRequest {
                                session_id: id.clone(),
                                snapshot_id: String::new(),
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        assert!(stream.message().await.unwrap().is_some());
                        stalled.push(Box::new((raw, stream)));
                    }
                    _ => {
                        let mut raw = own.raw_filesystem();
                        let stream = raw
                            .watch(proto::WatchRequest {
                                session_id: id.clone(),
                                path: String::new(),
                                recursive: true,
                                glob: String::new(),
                                since_seq: 0,
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        stalled.push(Box::new((raw, stream)));
                    }
                }
            }
            if kind == "Watch" {
                // A flood the stalled watchers never read.
                for i in 0..2_000 {
                    session
                        .write_str(&format!("flood/f{i:04}.txt"), "changed\n")
                        .await
                        .unwrap();
                }
            }
            // Long enough for every producer to run as far ahead as it may.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let peak = server.peak_rss();
            let per_stream = peak.saturating_sub(baseline) / STREAMS as u64;
            eprintln!(
                "{STREAMS} stalled {kind} streams: peak {} MiB from {} MiB, {} KiB each",
                peak / MIB,
                baseline / MIB,
                per_stream / 1024
            );
            assert!(
                per_stream < 8 * MIB,
                "{kind}: {} KiB per stream",
                per_stream / 1024
            );
            server.assert_serves_bystander().await;
            drop(stalled);
            wait_for_streams_to_close(&server, &id, kind).await;
            if round == 0 {
                first_peak = peak;
            } else {
                assert!(
                    peak < first_peak + 24 * MIB,
                    "{kind}: a second round of stalled streams took the peak from {} to {} MiB: the first round's memory was not given back",
                    first_peak / MIB,
                    peak / MIB
                );
            }
        }
        server.assert_serves_bystander().await;
    }
}

/// Waits (up to 30 s: closed connections are noticed slowly under load)
/// until the server counts no open stream on session `id`.
async fn wait_for_streams_to_close(server: &Server, id: &str, kind: &str) {
    let client = server.client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let open = client.get_session(id).await.unwrap().open_streams;
        if open == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}: {open} streams still open 30 s after their clients went"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A server that may root sessions under `allow`, a DIRECTORY session
/// rooted at `root` and its id, and the server's resident memory then.
async fn rooted_session(
    allow: &std::path::Path,
    root: &std::path::Path,
) -> (Server, wsfs_client::Session, String, u64) {
    let server = Server::start(&["--allow-root", allow.to_str().unwrap()]);
    let client = server.client().await;
    let (session, info) = client
        .create(SessionOptions::directory().root(root))
        .await
        .unwrap();
    let baseline = server.rss();
    (server, session, info.id, baseline)
}
