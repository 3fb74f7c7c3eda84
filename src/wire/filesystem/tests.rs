//! Round trips of every Filesystem message, and the refusals of each side.

use super::*;
use crate::wire::{server_kind, server_path, system_time};
use crate::{
    proto, Attributes, AttributesOutcome, ByteRange, ByteStream, DeleteOptions, EditOutcome,
    EditSpec, Error, FileKind, GlobOutcome, GlobQuery, GrepEvent, GrepMatch, GrepQuery,
    GrepSummary, LineRange, Listing, Metadata, MkdirOptions, PatchOptions, Permissions,
    SymlinkOptions, TextPage, TransferOptions, Transferred, WriteMode, WriteOptions, WriteOutcome,
};
use bytes::Bytes;
use futures::StreamExt;
use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Code;

fn path(s: &str) -> CanonicalPath {
    CanonicalPath::parse(s, &PathLimits::UNLIMITED).unwrap()
}

fn sid() -> String {
    "s".to_string()
}

/// What a client sends, the server reads back as it was.
fn round_trip<C: Request + Clone + PartialEq + Debug>(call: C) {
    let message = call.clone().message().unwrap();
    assert_eq!(C::parse(message, &PathLimits::UNLIMITED).unwrap(), call);
}

/// What a server answers, the client reads back as it was.
fn answer_round_trip<T, M>(value: T)
where
    T: Clone + PartialEq + Debug + TryFrom<M, Error = Error>,
    M: From<T>,
{
    assert_eq!(T::try_from(M::from(value.clone())).unwrap(), value);
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn metadata(kind: FileKind, target: Option<&str>) -> Metadata {
    Metadata {
        path: path("src/lib.rs"),
        kind,
        size: 42,
        created: at(1_700_000_000_123),
        modified: at(1_700_000_000_456),
        version: 3,
        permissions: Permissions::new(0o640).unwrap(),
        symlink_target: target.map(str::to_string),
    }
}

#[test]
fn every_request_round_trips() {
    let p = Permissions::new(0o750).unwrap();
    round_trip(Read {
        session_id: sid(),
        path: path("a.txt"),
        range: LineRange {
            offset: 5,
            limit: Some(7),
        },
    });
    round_trip(Read {
        session_id: sid(),
        path: path("a.txt"),
        range: LineRange::all(),
    });
    round_trip(ReadBytes {
        session_id: sid(),
        path: path("b"),
        range: ByteRange {
            offset: 10,
            limit: Some(5),
        },
        chunk_size: 4096,
    });
    round_trip(ReadBytes {
        session_id: sid(),
        path: path("b"),
        range: ByteRange::default(),
        chunk_size: 0,
    });
    round_trip(Write {
        session_id: sid(),
        path: path("x/y.txt"),
        content: "hi".into(),
        options: WriteOptions {
            mode: WriteMode::Append,
            create_parents: false,
            if_version: Some(0),
            permissions: Some(p),
            modified: None,
        },
    });
    round_trip(Upload::Write {
        session_id: sid(),
        path: path("w"),
        options: WriteOptions {
            mode: WriteMode::Create,
            modified: Some(at(1_234)),
            permissions: Some(p),
            ..Default::default()
        },
    });
    round_trip(Upload::Patch {
        session_id: sid(),
        path: path("w"),
        options: PatchOptions {
            truncate_to: Some(9),
            create_missing: true,
            create_parents: false,
            if_version: Some(4),
            permissions: Some(p),
            modified: Some(at(5_678)),
        },
    });
    round_trip(Edit {
        session_id: sid(),
        path: path("e"),
        edit: EditSpec {
            old_text: "a".into(),
            new_text: "b".into(),
            replace_all: true,
            if_version: Some(2),
            dry_run: true,
        },
    });
    round_trip(Delete {
        session_id: sid(),
        path: path("d"),
        options: DeleteOptions {
            recursive: true,
            allow_missing: true,
            if_version: Some(1),
        },
    });
    round_trip(DeleteMany {
        session_id: sid(),
        entries: vec![
            (path("a"), DeleteOptions::default()),
            (
                path("d"),
                DeleteOptions {
                    recursive: true,
                    allow_missing: true,
                    if_version: Some(7),
                },
            ),
        ],
    });
    round_trip(Mkdir {
        session_id: sid(),
        path: path("m"),
        options: MkdirOptions {
            parents: false,
            exist_ok: false,
            permissions: Some(p),
        },
    });
    round_trip(Transfer {
        session_id: sid(),
        source: path("a"),
        destination: path("b/c"),
        options: TransferOptions {
            overwrite: true,
            create_parents: false,
            if_version: Some(3),
        },
    });
    round_trip(List {
        session_id: sid(),
        path: CanonicalPath::root(),
        depth: 2,
        after: None,
    });
    round_trip(List {
        session_id: sid(),
        path: path("s"),
        depth: 1,
        after: Some(path("s/t")),
    });
    round_trip(Stat {
        session_id: sid(),
        path: path("s"),
    });
    round_trip(Exists {
        session_id: sid(),
        path: path("s"),
    });
    let mut glob = GlobQuery::new("**/*.rs");
    glob.base = path("src");
    glob.max_results = 7;
    round_trip(Glob {
        session_id: sid(),
        query: glob,
    });
    let mut grep = GrepQuery::new("fn main");
    grep.base = path("src");
    grep.glob = Some("*.rs".into());
    grep.case_insensitive = true;
    grep.fixed_string = true;
    grep.max_matches = 9;
    grep.context_lines = 2;
    round_trip(Grep {
        session_id: sid(),
        query: grep,
    });
    round_trip(Grep {
        session_id: sid(),
        query: GrepQuery::new("x"),
    });
    round_trip(SetAttributes {
        session_id: sid(),
        path: path("f"),
        attributes: Attributes {
            permissions: Some(p),
            modified: Some(at(99_000)),
            if_version: Some(8),
        },
    });
    round_trip(Symlink {
        session_id: sid(),
        path: path("l"),
        target: "../t".into(),
        options: SymlinkOptions {
            create_parents: false,
        },
    });
}

#[test]
fn every_answer_round_trips() {
    answer_round_trip::<_, proto::ReadResponse>(TextPage {
        path: path("a.txt"),
        content: "b\n".into(),
        total_lines: 3,
        offset: 1,
        lines: 1,
        truncated: true,
        version: 7,
        size: 6,
    });
    let written = WriteOutcome {
        path: path("w"),
        bytes_written: 5,
        size: 9,
        version: 2,
        created: true,
    };
    answer_round_trip::<_, proto::WriteResponse>(written);
    answer_round_trip::<_, proto::EditResponse>(EditOutcome {
        path: path("e"),
        replacements: 2,
        version: 4,
        diff: "-a\n+b\n".into(),
        dry_run: true,
        size: 10,
    });
    for m in [
        metadata(FileKind::File, None),
        metadata(FileKind::Directory, None),
        metadata(FileKind::Symlink, Some("../t")),
    ] {
        answer_round_trip::<_, proto::Entry>(m.clone());
        answer_round_trip::<_, proto::StatResponse>(m.clone());
        answer_round_trip::<_, proto::SymlinkResponse>(m);
    }
    answer_round_trip::<_, proto::ListResponse>(Listing {
        path: path("src"),
        entries: vec![metadata(FileKind::File, None)],
        truncated: true,
    });
    answer_round_trip::<_, proto::GlobResponse>(GlobOutcome {
        paths: vec![path("a.rs"), path("x/y/a.rs")],
        truncated: true,
    });
    for kind in [None, Some(FileKind::File), Some(FileKind::Symlink)] {
        answer_round_trip::<_, proto::ExistsResponse>(kind);
    }
    let summary = GrepEvent::Summary(GrepSummary {
        files_searched: 4,
        matches: 1,
        truncated: false,
    });
    answer_round_trip::<_, proto::GrepResponse>(summary);
}

#[test]
fn answers_that_echo_their_request_round_trip() {
    let mkdir = Mkdir {
        session_id: sid(),
        path: path("m"),
        options: MkdirOptions::default(),
    };
    assert_eq!(mkdir.response(true).path, "m");
    assert!(mkdir.response(true).created);
    assert_eq!(Delete::outcome(Delete::response(12)).unwrap(), 12);
    let transfer = Transfer {
        session_id: sid(),
        source: path("a"),
        destination: path("b"),
        options: TransferOptions::default(),
    };
    let done = Transferred {
        entries: 3,
        version: Some(41),
    };
    let answer = transfer.response(done);
    assert_eq!(
        (answer.source.as_str(), answer.destination.as_str()),
        ("a", "b")
    );
    assert_eq!(Transfer::outcome(answer).unwrap(), done);
    // A server that does not say sends 0: no version, not version 0.
    let unsaid = transfer.response(Transferred {
        entries: 1,
        version: None,
    });
    assert_eq!(unsaid.version, 0);
    assert_eq!(Transfer::outcome(unsaid).unwrap().version, None);
    let set = SetAttributes {
        session_id: sid(),
        path: path("f"),
        attributes: Attributes::default(),
    };
    let outcome = AttributesOutcome {
        permissions: Permissions::new(0o600).unwrap(),
        modified: at(77_000),
        version: 5,
    };
    let answer = set.response(outcome);
    assert_eq!(answer.path, "f");
    assert_eq!(AttributesOutcome::try_from(answer).unwrap(), outcome);
}

#[test]
fn byte_stream_header_round_trips() {
    let stream = ByteStream {
        path: path("b"),
        size: 100,
        version: 3,
        offset: 10,
        length: 20,
        chunks: futures::stream::empty().boxed(),
    };
    let back = byte_stream((&stream).into(), futures::stream::empty().boxed()).unwrap();
    assert_eq!(
        (back.path, back.size, back.version, back.offset, back.length),
        (path("b"), 100, 3, 10, 20)
    );
}

#[test]
fn upload_parts_round_trip_and_a_second_header_is_invalid_argument() {
    for part in [UploadPart::Data(Bytes::from("abc")), UploadPart::Offset(7)] {
        let wire = proto::WriteBytesRequest::from(part.clone());
        assert_eq!(UploadPart::try_from(wire).unwrap(), part);
    }
    let header = proto::WriteBytesRequest::from(proto::WriteBytesHeader::default());
    let err = UploadPart::try_from(header).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[test]
fn requests_are_parsed_under_the_sessions_limits() {
    let shallow = PathLimits {
        max_depth: 2,
        ..PathLimits::default()
    };
    let message = Stat {
        session_id: sid(),
        path: path("a/b/c"),
    }
    .message()
    .unwrap();
    let err = Stat::parse(message, &shallow).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let escape = proto::StatRequest {
        session_id: sid(),
        path: "../etc/passwd".into(),
    };
    assert!(Stat::parse(escape, &PathLimits::default()).is_err());
}

#[test]
fn malformed_requests_are_invalid_argument() {
    let limits = PathLimits::default();
    let read = |offset, limit| proto::ReadRequest {
        session_id: sid(),
        path: "a".into(),
        offset,
        limit,
    };
    for bad in [read(-1, None), read(0, Some(-2))] {
        let err = Read::parse(bad, &limits).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    }
    assert_eq!(
        Read::parse(read(0, None), &limits).unwrap().range,
        LineRange::default()
    );
    let write = proto::WriteRequest {
        path: "a".into(),
        mode: proto::WriteMode::Patch.into(),
        ..Default::default()
    };
    assert_eq!(
        Write::parse(write, &limits).unwrap_err().code(),
        Code::InvalidArgument
    );
    let unknown_mode = proto::WriteRequest {
        path: "a".into(),
        mode: 99,
        ..Default::default()
    };
    assert!(Write::parse(unknown_mode, &limits).is_err());
    let patch_fields = proto::WriteBytesHeader {
        path: "a".into(),
        mode: proto::WriteMode::Overwrite.into(),
        create_missing: true,
        ..Default::default()
    };
    let err = Upload::parse(patch_fields, &limits).unwrap_err();
    assert!(err.to_string().contains("PATCH only"), "{err}");
    let bits = proto::MkdirRequest {
        path: "d".into(),
        permissions: Some(0o4755),
        ..Default::default()
    };
    assert_eq!(
        Mkdir::parse(bits, &limits).unwrap_err().code(),
        Code::InvalidArgument
    );
}

#[test]
fn whole_file_read_sends_limit_minus_one() {
    let r = Read {
        session_id: sid(),
        path: path("a.txt"),
        range: LineRange::all(),
    }
    .message()
    .unwrap();
    assert_eq!(r.limit, Some(-1));
    assert_eq!(r.offset, 0);
    assert_eq!(r.path, "a.txt");
    assert_eq!(r.session_id, "s");
}

#[test]
fn default_read_sends_the_contract_page_size() {
    let r = Read {
        session_id: sid(),
        path: path("a"),
        range: LineRange::default(),
    }
    .message()
    .unwrap();
    assert_eq!(r.limit, Some(2000));
}

#[test]
fn read_offset_beyond_int64_is_invalid_argument() {
    let range = LineRange {
        offset: u64::MAX,
        limit: None,
    };
    let err = Read {
        session_id: sid(),
        path: path("a"),
        range,
    }
    .message()
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

fn read_bytes(range: ByteRange, chunk_size: usize) -> proto::ReadBytesRequest {
    ReadBytes {
        session_id: sid(),
        path: path("a"),
        range,
        chunk_size,
    }
    .message()
    .unwrap()
}

#[test]
fn byte_range_to_the_end_sends_limit_zero() {
    let r = read_bytes(ByteRange::default(), 0);
    assert_eq!((r.offset, r.limit, r.chunk_size), (0, 0, 0));
    let range = ByteRange {
        offset: 10,
        limit: Some(5),
    };
    let r = read_bytes(range, 4096);
    assert_eq!((r.offset, r.limit, r.chunk_size), (10, 5, 4096));
}

#[test]
fn zero_byte_range_is_sent_as_one_byte() {
    let range = ByteRange {
        offset: 3,
        limit: Some(0),
    };
    assert_eq!(read_bytes(range, 0).limit, 1);
}

#[test]
fn write_options_become_explicit_optionals() {
    let options = WriteOptions {
        mode: WriteMode::Append,
        create_parents: false,
        if_version: Some(0),
        ..Default::default()
    };
    let r = Write {
        session_id: sid(),
        path: path("/x//y.txt"),
        content: "hi".into(),
        options,
    }
    .message()
    .unwrap();
    assert_eq!(r.path, "x/y.txt");
    assert_eq!(r.mode, proto::WriteMode::Append as i32);
    assert_eq!(r.create_parents, Some(false));
    assert_eq!(r.if_version, Some(0));
    assert_eq!(r.content, "hi");
}

#[test]
fn write_bytes_header_carries_session_and_options() {
    let h = Upload::Write {
        session_id: sid(),
        path: path("b"),
        options: WriteOptions::default(),
    }
    .message()
    .unwrap();
    assert_eq!(h.session_id, "s");
    assert_eq!(h.mode, proto::WriteMode::Overwrite as i32);
    assert_eq!(h.create_parents, Some(true));
    assert_eq!(h.if_version, None);
}

#[test]
fn mkdir_and_transfer_defaults_are_sent_explicitly() {
    let m = Mkdir {
        session_id: sid(),
        path: path("d"),
        options: MkdirOptions::default(),
    }
    .message()
    .unwrap();
    assert_eq!((m.parents, m.exist_ok), (Some(true), Some(true)));
    let t = Transfer {
        session_id: sid(),
        source: path("a"),
        destination: path("b"),
        options: TransferOptions::default(),
    }
    .message()
    .unwrap();
    assert_eq!((t.source.as_str(), t.destination.as_str()), ("a", "b"));
    assert!(!t.overwrite);
    assert_eq!(t.create_parents, Some(true));
}

#[test]
fn grep_query_maps_every_option() {
    let mut q = GrepQuery::new("fn main");
    q.base = path("src");
    q.glob = Some("*.rs".into());
    q.case_insensitive = true;
    q.fixed_string = true;
    q.max_matches = u64::MAX;
    q.context_lines = 2;
    let r = Grep {
        session_id: sid(),
        query: q,
    }
    .message()
    .unwrap();
    assert_eq!(r.pattern, "fn main");
    assert_eq!(r.path, "src");
    assert_eq!(r.glob, "*.rs");
    assert!(r.case_insensitive && r.fixed_string);
    assert_eq!(r.max_matches, u32::MAX);
    assert_eq!(r.context_lines, 2);
}

#[test]
fn grep_without_glob_sends_empty_glob() {
    let r = Grep {
        session_id: sid(),
        query: GrepQuery::new("x"),
    }
    .message()
    .unwrap();
    assert_eq!(r.glob, "");
}

#[test]
fn negative_size_from_server_is_internal() {
    let err = WriteOutcome::try_from(proto::WriteResponse {
        path: "a".into(),
        size_bytes: -1,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
}

#[test]
fn escaping_path_from_server_is_internal() {
    let err = server_path("../etc/passwd").unwrap_err();
    assert_eq!(err.code(), Code::Internal);
}

#[test]
fn entry_maps_kind_and_times() {
    let at = at(1_700_000_000_123);
    let m = Metadata::try_from(proto::Entry {
        name: "lib.rs".into(),
        path: "src/lib.rs".into(),
        kind: proto::FileKind::File as i32,
        size_bytes: 42,
        modified_at: Some(at.into()),
        created_at: Some(at.into()),
        version: 3,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(m.name(), "lib.rs");
    assert_eq!(m.kind, FileKind::File);
    assert_eq!(m.size, 42);
    assert_eq!(m.modified, at);
    assert_eq!(m.created, at);
    assert_eq!(m.version, 3);
}

#[test]
fn stat_keeps_creation_time() {
    let created = UNIX_EPOCH + Duration::from_secs(100);
    let modified = UNIX_EPOCH + Duration::from_secs(200);
    let m = Metadata::try_from(proto::StatResponse {
        path: "d".into(),
        kind: proto::FileKind::Directory as i32,
        size_bytes: 0,
        created_at: Some(created.into()),
        modified_at: Some(modified.into()),
        version: 1,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        (m.kind, m.created, m.modified),
        (FileKind::Directory, created, modified)
    );
}

#[test]
fn missing_path_exists_as_none() {
    let r = proto::ExistsResponse {
        exists: false,
        kind: 0,
    };
    assert_eq!(Option::<FileKind>::try_from(r).unwrap(), None);
    let r = proto::ExistsResponse {
        exists: true,
        kind: proto::FileKind::File as i32,
    };
    assert_eq!(
        Option::<FileKind>::try_from(r).unwrap(),
        Some(FileKind::File)
    );
}

#[test]
fn listing_of_root_has_root_path() {
    let l = Listing::try_from(proto::ListResponse {
        path: String::new(),
        entries: vec![],
        truncated: false,
    })
    .unwrap();
    assert!(l.path.is_root());
}

#[test]
fn symlink_answer_without_its_entry_is_internal() {
    let err = Metadata::try_from(proto::SymlinkResponse { entry: None }).unwrap_err();
    assert_eq!(err.code(), Code::Internal);
}

#[test]
fn empty_grep_message_is_internal() {
    let err = GrepEvent::try_from(proto::GrepResponse { payload: None }).unwrap_err();
    assert_eq!(err.code(), Code::Internal);
}

#[test]
fn text_page_maps_every_field() {
    let page = TextPage::try_from(proto::ReadResponse {
        path: "a.txt".into(),
        content: "b\n".into(),
        total_lines: 3,
        offset: 1,
        limit: 1,
        truncated: true,
        version: 7,
        size_bytes: 6,
    })
    .unwrap();
    assert_eq!(page.path, path("a.txt"));
    assert_eq!(page.content, "b\n");
    assert_eq!((page.total_lines, page.offset, page.lines), (3, 1, 1));
    assert!(page.truncated);
    assert_eq!((page.version, page.size), (7, 6));
}

#[test]
fn unspecified_kind_is_internal() {
    let err = server_kind(proto::FileKind::Unspecified as i32).unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(server_kind(99).is_err());
    assert_eq!(
        server_kind(proto::FileKind::Symlink as i32).unwrap(),
        FileKind::Symlink
    );
}

#[test]
fn missing_timestamp_is_the_epoch() {
    assert_eq!(system_time(None), UNIX_EPOCH);
}

#[test]
fn glob_paths_are_canonical() {
    let g = GlobOutcome::try_from(proto::GlobResponse {
        paths: vec!["a.rs".into(), "x/y/a.rs".into()],
        truncated: true,
    })
    .unwrap();
    assert_eq!(g.paths, vec![path("a.rs"), path("x/y/a.rs")]);
    assert!(g.truncated);
}

#[test]
fn grep_match_and_summary_map_to_events() {
    let m = GrepEvent::try_from(proto::GrepResponse {
        payload: Some(proto::grep_response::Payload::Match(proto::GrepMatch {
            path: "a.rs".into(),
            line_number: 2,
            line: "fn main() {}".into(),
            match_start: 3,
            match_end: 7,
            before: vec![proto::ContextLine {
                line_number: 1,
                line: "// hi".into(),
            }],
            after: vec![],
        })),
    })
    .unwrap();
    let GrepEvent::Match(GrepMatch {
        line_number,
        match_start,
        match_end,
        before,
        ..
    }) = m
    else {
        panic!("not a match: {m:?}")
    };
    assert_eq!((line_number, match_start, match_end), (2, 3, 7));
    assert_eq!(before[0].line, "// hi");

    let s = GrepEvent::try_from(proto::GrepResponse {
        payload: Some(proto::grep_response::Payload::Summary(proto::GrepSummary {
            files_searched: 4,
            matches: 1,
            truncated: false,
        })),
    })
    .unwrap();
    assert_eq!(
        s,
        GrepEvent::Summary(GrepSummary {
            files_searched: 4,
            matches: 1,
            truncated: false
        })
    );
}

#[test]
fn a_delete_many_answer_reads_back_each_count_and_error() {
    let errors = [
        Error::FileNotFound { path: "a".into() },
        Error::VersionMismatch {
            path: "b".into(),
            expected: 3,
            current: 4,
        },
        Error::DirectoryNotEmpty { path: "d".into() },
        Error::PermissionDenied {
            path: "z".into(),
            message: "zone 'z' is not yours".into(),
        },
    ];
    let mut results: Vec<Result<u64>> = vec![Ok(1), Ok(0)];
    results.extend(errors.iter().cloned().map(Err));
    let sent = results.len();

    let answer = DeleteMany::response(results.clone());

    assert_eq!(DeleteMany::outcome(answer.clone(), sent).unwrap(), results);
    // An answer that does not match the request is refused, not guessed at.
    let short = DeleteMany::outcome(answer, sent + 1).unwrap_err();
    assert_eq!(short.reason(), "INTERNAL");
}
