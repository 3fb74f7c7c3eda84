//! Patches (WriteBytes in mode PATCH) and Symlink on sessions the
//! conformance suite's empty workspaces cannot stand for, on every backend
//! over gRPC: read-only sessions, quotas and lowered per-write limits
//! refuse them with their code, reason and message and change nothing; a
//! patch is one change event and a link one more; snapshots and archives
//! leave links out; and the wire refuses PATCH's fields and messages in
//! the other modes.

use bytes::Bytes;
use futures::StreamExt;
use tonic::Code;
use wsfs::proto::{self, write_bytes_request::Payload};
use wsfs_client::{Client, Error, Filesystem, Session, SessionLimits, SessionOptions};
use wsfs_tests::harness::{Sandbox, TestServer};
use wsfs_tests::kit::{p, reason};

const INNER: &str = env!("CARGO_BIN_EXE_wsfs-stdio");

/// A session of each backend made with `configure`, and what keeps it up.
struct Subject {
    name: &'static str,
    session: Session,
    client: Client,
    _guards: (TestServer, Option<Sandbox>),
}

async fn subjects(configure: impl Fn(SessionOptions) -> SessionOptions) -> Vec<Subject> {
    let mut out = Vec::new();
    for name in ["memory", "directory", "container"] {
        let (sandbox, options) = match name {
            "memory" => (None, SessionOptions::memory()),
            "directory" => (None, SessionOptions::directory()),
            _ => {
                let sandbox = Sandbox::new(INNER, "box");
                let options = sandbox.options();
                (Some(sandbox), options)
            }
        };
        let runtimes = sandbox.iter().map(Sandbox::runtime).collect();
        let server = TestServer::start_with(|c| c.container_runtimes = runtimes).await;
        let client = Client::connect(&server.url()).await.unwrap();
        let info = client.create_session(configure(options)).await.unwrap();
        out.push(Subject {
            name,
            session: client.session(&info.id),
            client,
            _guards: (server, sandbox),
        });
    }
    out
}

/// Every path with its kind, size and version, and a file's bytes.
async fn state(s: &Session) -> Vec<(String, wsfs::FileKind, u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for e in s.list(&p(""), 16).await.unwrap().entries {
        let bytes = match e.kind {
            wsfs::FileKind::File => {
                let mut bytes = Vec::new();
                s.download(e.path.as_str(), &mut bytes).await.unwrap();
                bytes
            }
            _ => e.symlink_target.unwrap_or_default().into_bytes(),
        };
        out.push((
            e.path.as_str().to_string(),
            e.kind,
            e.size,
            e.version,
            bytes,
        ));
    }
    out
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: wsfs::Result<T>, code: Code, why: &str) -> Error {
    let err = result.expect_err("the call was refused");
    assert_eq!(err.code(), code, "{err}");
    let expected = match code {
        Code::PermissionDenied => "READ_ONLY",
        Code::ResourceExhausted => "QUOTA_EXCEEDED",
        _ => "TOO_LARGE",
    };
    assert_eq!(err.reason(), expected, "{err}");
    assert!(err.to_string().contains(why), "{err}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_refuses_patches_and_links_and_changes_nothing() {
    let configure = |o: SessionOptions| o.seed_file("f.txt", "hello").read_only(true);
    for s in subjects(configure).await {
        let before = state(&s.session).await;
        assert_eq!(before.len(), 1, "{}", s.name);

        let patched = s.session.write_at("f.txt", 0, "J").await;
        let truncated = s.session.truncate("f.txt", 1).await;
        let linked = s.session.create_symlink("l", "f.txt").await;

        let message = "cannot change 'f.txt': this session is read-only";
        assert_refused(patched, Code::PermissionDenied, message);
        assert_refused(truncated, Code::PermissionDenied, message);
        assert_refused(
            linked,
            Code::PermissionDenied,
            "cannot change 'l': this session is read-only",
        );
        assert_eq!(state(&s.session).await, before, "{}", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_that_takes_the_session_over_its_byte_quota_is_refused() {
    let limits = SessionLimits {
        max_total_bytes: 100,
        ..SessionLimits::default()
    };
    let configure = |o: SessionOptions| o.limits(limits).seed_file("f.bin", vec![7u8; 90]);
    for s in subjects(configure).await {
        let before = state(&s.session).await;

        let over = s.session.write_at("f.bin", 95, vec![1u8; 6]).await;
        let extended = s.session.truncate("f.bin", 101).await;

        for result in [over, extended] {
            assert_refused(
                result,
                Code::ResourceExhausted,
                "cannot change 'f.bin': the session would hold 101 bytes; this session allows at most 100",
            );
        }
        assert_eq!(state(&s.session).await, before, "{}", s.name);
        let fits = s.session.write_at("f.bin", 95, vec![1u8; 5]).await.unwrap();
        assert_eq!(fits.size, 100, "{}", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_write_limit_bounds_the_bytes_sent_and_the_growth() {
    let limits = SessionLimits {
        max_write_bytes: 8,
        ..SessionLimits::default()
    };
    let configure = |o: SessionOptions| o.limits(limits).seed_file("f.bin", "abcdefgh");
    for s in subjects(configure).await {
        // Appends grow a file past the limit, each within it.
        let append = wsfs::WriteOptions {
            mode: wsfs::WriteMode::Append,
            ..wsfs::WriteOptions::default()
        };
        s.session
            .write(&p("f.bin"), "ijklmnopqrst", append)
            .await
            .expect_err("an append over the limit is refused too");
        s.session
            .write(&p("f.bin"), "ijklmnop", append)
            .await
            .unwrap();
        s.session.write(&p("f.bin"), "qrst", append).await.unwrap();
        let before = state(&s.session).await;

        let sent = s.session.write_at("f.bin", 0, vec![1u8; 9]).await;
        let grown = s.session.truncate("f.bin", 29).await;

        for (result, size) in [(sent, 9), (grown, 9)] {
            assert_refused(
                result,
                Code::InvalidArgument,
                &format!(
                    "writing {size} bytes to 'f.bin' exceeds this session's per-write limit of 8 bytes"
                ),
            );
        }
        assert_eq!(state(&s.session).await, before, "{}", s.name);
        // A patch of a file larger than the limit is fine: it costs what it
        // sends and adds.
        let kept = s.session.write_at("f.bin", 19, vec![1u8; 8]).await.unwrap();
        assert_eq!(kept.size, 27, "{}", s.name);
        assert_eq!(kept.bytes_written, 8, "{}", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_is_one_modified_event_and_a_link_one_created_event() {
    for s in subjects(|o| o.seed_file("f.txt", "hello world")).await {
        let since = s.session.changes(0, 1000).await.unwrap().next_seq;

        let patched = s
            .session
            .patch(
                "f.txt",
                [
                    (0, Bytes::from("H")),
                    (6, Bytes::from("W")),
                    (20, Bytes::from("!")),
                ],
                Some(5),
            )
            .await
            .unwrap();
        let linked = s.session.create_symlink("l", "f.txt").await.unwrap();

        let events = s.session.changes(since, 1000).await.unwrap().events;
        let seen: Vec<_> = events
            .iter()
            .map(|e| (e.kind(), e.path.as_str(), e.version))
            .collect();
        assert_eq!(
            seen,
            [
                (proto::ChangeKind::Modified, "f.txt", patched.version),
                (proto::ChangeKind::Created, "l", linked.version),
            ],
            "{}",
            s.name
        );
        let mut bytes = Vec::new();
        s.session.download("f.txt", &mut bytes).await.unwrap();
        assert_eq!(bytes, b"Hello\0W\0\0\0\0\0\0\0\0\0\0\0\0\0!", "{}", s.name);
    }
}

/// A raw WriteBytes call: `messages` after a header with `header`'s fields.
async fn raw_upload(
    s: &Subject,
    header: proto::WriteBytesHeader,
    messages: Vec<Payload>,
) -> Result<proto::WriteResponse, tonic::Status> {
    let header = proto::WriteBytesHeader {
        session_id: s.session.id().to_string(),
        ..header
    };
    let all = std::iter::once(Payload::Header(header))
        .chain(messages)
        .map(|payload| proto::WriteBytesRequest {
            payload: Some(payload),
        })
        .collect::<Vec<_>>();
    s.client
        .raw_filesystem()
        .write_bytes(futures::stream::iter(all).boxed())
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_refuses_patch_fields_and_offsets_outside_mode_patch() {
    for s in subjects(|o| o.seed_file("f.txt", "keep")).await {
        let before = state(&s.session).await;
        let overwrite = |extra: fn(&mut proto::WriteBytesHeader)| {
            let mut h = proto::WriteBytesHeader {
                path: "f.txt".into(),
                ..Default::default()
            };
            extra(&mut h);
            h
        };
        let refusals = [
            (
                raw_upload(&s, overwrite(|_| {}), vec![Payload::Offset(2)]).await,
                "offset messages belong to mode PATCH",
            ),
            (
                raw_upload(&s, overwrite(|h| h.truncate_to = Some(1)), vec![]).await,
                "truncate_to and create_missing apply to mode PATCH only",
            ),
            (
                raw_upload(&s, overwrite(|h| h.create_missing = true), vec![]).await,
                "truncate_to and create_missing apply to mode PATCH only",
            ),
        ];
        for (result, message) in refusals {
            let status = result.expect_err("refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            assert_eq!(reason(&status), "INVALID_ARGUMENT");
            assert!(status.message().contains(message), "{status:?}");
        }
        let text = s
            .client
            .raw_filesystem()
            .write(proto::WriteRequest {
                session_id: s.session.id().to_string(),
                path: "f.txt".into(),
                content: "lost".into(),
                mode: proto::WriteMode::Patch as i32,
                ..Default::default()
            })
            .await
            .expect_err("Write in mode PATCH is refused");
        assert_eq!(reason(&text), "INVALID_ARGUMENT");
        assert!(text.message().contains("mode PATCH is for WriteBytes"));
        assert_eq!(state(&s.session).await, before, "{}", s.name);

        // In mode PATCH an offset moves the position; data moves it on.
        let patch = proto::WriteBytesHeader {
            path: "f.txt".into(),
            mode: proto::WriteMode::Patch as i32,
            ..Default::default()
        };
        let data = |d: &'static [u8]| Payload::Data(Bytes::from_static(d));
        let done = raw_upload(
            &s,
            patch,
            vec![data(b"K"), data(b"E"), Payload::Offset(6), data(b"!")],
        )
        .await
        .unwrap();
        assert_eq!((done.bytes_written, done.size_bytes), (3, 7), "{}", s.name);
        let mut bytes = Vec::new();
        s.session.download("f.txt", &mut bytes).await.unwrap();
        assert_eq!(bytes, b"KEep\0\0!", "{}", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_archives_leave_links_out_and_restores_remove_them() {
    for s in subjects(|o| o.seed_file("f.txt", "kept")).await {
        let id = s.session.id().to_string();
        s.session.create_symlink("l", "f.txt").await.unwrap();

        let taken = s.client.snapshot(&id, "with a link").await.unwrap();
        let mut archive = Vec::new();
        s.session
            .export_to_writer(&mut archive, None)
            .await
            .unwrap();
        s.client.restore(&id, &taken.id).await.unwrap();

        assert_eq!(taken.file_count, 1, "{}", s.name);
        let after_restore: Vec<_> = state(&s.session).await.into_iter().map(|e| e.0).collect();
        assert_eq!(after_restore, ["f.txt"], "{}", s.name);
        s.session.create_symlink("l2", "f.txt").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.zip");
        std::fs::write(&file, &archive).unwrap();
        s.session.import_from(&file).await.unwrap();
        let after_import: Vec<_> = state(&s.session).await.into_iter().map(|e| e.0).collect();
        assert_eq!(after_import, ["f.txt"], "{}", s.name);
    }
}
