//! Grep: streamed matches in (path, line) order, then a summary.

use super::support::*;
use wsfs::{ContextLine, Filesystem, GrepQuery};

fn query(pattern: &str) -> GrepQuery {
    GrepQuery::new(pattern)
}

fn context(pairs: &[(u64, &str)]) -> Vec<ContextLine> {
    pairs
        .iter()
        .map(|&(line_number, line)| ContextLine {
            line_number,
            line: line.into(),
        })
        .collect()
}

pub async fn matches_come_in_path_then_line_order(fs: &dyn Filesystem) {
    // Written out of order; bytewise path order is a.txt < a/x.txt < b.txt
    // < c/d/e.txt, which is not the order of a depth-first walk.
    put(fs, "c/d/e.txt", "needle\n").await;
    put(fs, "b.txt", "needle one\nhay\nneedle two\n").await;
    put(fs, "a/x.txt", "hay\nneedle\n").await;
    put(fs, "a.txt", "needle\nhay\nhay\nneedle\n").await;

    let (matches, summary) = grep_all(fs, query("needle")).await.unwrap();

    assert_eq!(
        locations(&matches),
        [
            ("a.txt", 1),
            ("a.txt", 4),
            ("a/x.txt", 2),
            ("b.txt", 1),
            ("b.txt", 3),
            ("c/d/e.txt", 1)
        ]
    );
    assert_eq!(summary.matches, 6);
    assert!(!summary.truncated);
}

pub async fn match_carries_line_and_byte_offsets_of_the_first_match(fs: &dyn Filesystem) {
    put(fs, "f.txt", "first\nsay héllo wörld, wörld\nlast\n").await;

    let (matches, _) = grep_all(fs, query("wörld")).await.unwrap();

    let [m] = &matches[..] else {
        panic!("{matches:?}");
    };
    assert_eq!(m.path, p("f.txt"));
    assert_eq!(m.line_number, 2);
    assert_eq!(m.line, "say héllo wörld, wörld");
    // "say héllo " is 11 bytes; "wörld" is 6.
    assert_eq!((m.match_start, m.match_end), (11, 17));
    assert_eq!(
        &m.line[m.match_start as usize..m.match_end as usize],
        "wörld"
    );
}

pub async fn case_insensitive_matches_any_case(fs: &dyn Filesystem) {
    put(fs, "f.txt", "Needle\nneedle\nNEEDLE\nhay\n").await;

    let (sensitive, _) = grep_all(fs, query("needle")).await.unwrap();
    let (insensitive, _) = grep_all(
        fs,
        GrepQuery {
            case_insensitive: true,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    assert_eq!(locations(&sensitive), [("f.txt", 2)]);
    assert_eq!(
        locations(&insensitive),
        [("f.txt", 1), ("f.txt", 2), ("f.txt", 3)]
    );
}

pub async fn fixed_string_treats_metacharacters_literally(fs: &dyn Filesystem) {
    put(fs, "f.txt", "call a.b(c) here\naxbc\n").await;

    let (fixed, _) = grep_all(
        fs,
        GrepQuery {
            fixed_string: true,
            ..query("a.b(c)")
        },
    )
    .await
    .unwrap();
    let (regex, _) = grep_all(fs, query("a.b(c)")).await.unwrap();

    assert_eq!(locations(&fixed), [("f.txt", 1)]);
    assert_eq!((fixed[0].match_start, fixed[0].match_end), (5, 11));
    assert_eq!(locations(&regex), [("f.txt", 2)]);
}

pub async fn glob_filters_files(fs: &dyn Filesystem) {
    put(fs, "main.rs", "needle\n").await;
    put(fs, "src/lib.rs", "needle\n").await;
    put(fs, "notes.txt", "needle\n").await;

    let (matches, summary) = grep_all(
        fs,
        GrepQuery {
            glob: Some("**/*.rs".into()),
            ..query("needle")
        },
    )
    .await
    .unwrap();

    assert_eq!(locations(&matches), [("main.rs", 1), ("src/lib.rs", 1)]);
    assert_eq!(summary.files_searched, 2);
}

pub async fn context_lines_surround_a_match(fs: &dyn Filesystem) {
    put(fs, "f.txt", "l1\nl2\nl3\nneedle\nl5\nl6\nl7\n").await;

    let (matches, _) = grep_all(
        fs,
        GrepQuery {
            context_lines: 2,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    let [m] = &matches[..] else {
        panic!("{matches:?}");
    };
    assert_eq!(m.before, context(&[(2, "l2"), (3, "l3")]));
    assert_eq!(m.after, context(&[(5, "l5"), (6, "l6")]));
}

pub async fn context_lines_stop_at_the_file_edges(fs: &dyn Filesystem) {
    put(fs, "top.txt", "needle\nl2\nl3\nl4\n").await;
    put(fs, "bottom.txt", "l1\nl2\nneedle").await;

    let (matches, _) = grep_all(
        fs,
        GrepQuery {
            context_lines: 3,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    let [bottom, top] = &matches[..] else {
        panic!("{matches:?}");
    };
    assert_eq!(bottom.line, "needle");
    assert_eq!(bottom.before, context(&[(1, "l1"), (2, "l2")]));
    assert!(bottom.after.is_empty());
    assert!(top.before.is_empty());
    assert_eq!(top.after, context(&[(2, "l2"), (3, "l3"), (4, "l4")]));
}

pub async fn no_context_by_default(fs: &dyn Filesystem) {
    put(fs, "f.txt", "l1\nneedle\nl3\n").await;

    let (matches, _) = grep_all(fs, query("needle")).await.unwrap();

    assert!(matches[0].before.is_empty() && matches[0].after.is_empty());
}

pub async fn files_with_a_nul_byte_are_skipped(fs: &dyn Filesystem) {
    put_bytes(fs, "bin.dat", b"needle\n\x00\x01\x02\n").await;
    put(fs, "text.txt", "needle\n").await;

    let (matches, _) = grep_all(fs, query("needle")).await.unwrap();

    assert_eq!(locations(&matches), [("text.txt", 1)]);
}

pub async fn a_nul_byte_far_into_a_file_still_skips_it(fs: &dyn Filesystem) {
    // The NUL sits well past the first read buffer of any search loop.
    let mut data = b"needle early\n".to_vec();
    data.extend(b"hay hay hay\n".repeat(40_000));
    data.extend(b"\x00needle late\n");
    put_bytes(fs, "late.dat", &data).await;
    put(fs, "text.txt", "needle\n").await;

    let (matches, _) = grep_all(fs, query("needle")).await.unwrap();

    assert_eq!(locations(&matches), [("text.txt", 1)]);
}

pub async fn a_utf16_file_with_a_byte_order_mark_is_binary_too(fs: &dyn Filesystem) {
    // UTF-16LE "needle\n" after its byte-order mark: every other byte is
    // NUL. Decoding it would find the needle; the rule skips it unread.
    let mut data = vec![0xff, 0xfe];
    for unit in "needle\n".encode_utf16() {
        data.extend(unit.to_le_bytes());
    }
    put_bytes(fs, "wide.txt", &data).await;
    put(fs, "text.txt", "needle\n").await;

    let (matches, summary) = grep_all(fs, query("needle")).await.unwrap();

    assert_eq!(locations(&matches), [("text.txt", 1)]);
    assert_eq!(summary.files_searched, 2);
}

pub async fn a_file_with_an_overlong_line_is_skipped(fs: &dyn Filesystem) {
    let mut long = "needle ".repeat(40_000);
    long.push('\n');
    put(fs, "long.txt", &format!("needle first\n{long}")).await;
    put(fs, "text.txt", "needle\n").await;

    let (matches, _) = grep_all(fs, query("needle")).await.unwrap();

    assert_eq!(locations(&matches), [("text.txt", 1)]);
}

pub async fn long_lines_are_cut_and_offsets_clamped(fs: &dyn Filesystem) {
    let line = format!("{}needle{}", "x".repeat(3000), "y".repeat(100));
    put(
        fs,
        "f.txt",
        &format!("{line}\nneedle {}\n", "z".repeat(5000)),
    )
    .await;

    let (matches, _) = grep_all(
        fs,
        GrepQuery {
            context_lines: 1,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    let [first, second] = &matches[..] else {
        panic!("{matches:?}");
    };
    assert_eq!(first.line, "x".repeat(2048));
    assert_eq!((first.match_start, first.match_end), (2048, 2048));
    assert_eq!(first.after[0].line.len(), 2048);
    assert_eq!(second.line.len(), 2048);
    assert_eq!((second.match_start, second.match_end), (0, 6));
    assert_eq!(second.before[0].line, "x".repeat(2048));
}

pub async fn context_lines_over_the_cap_are_invalid_argument(fs: &dyn Filesystem) {
    put(fs, "f.txt", "needle\n").await;

    let result = grep_all(
        fs,
        GrepQuery {
            context_lines: 101,
            ..query("needle")
        },
    )
    .await;

    let err = expect_err(result, "INVALID_ARGUMENT");
    assert!(err.to_string().contains("at most 100"), "{err}");
}

pub async fn an_overlong_pattern_is_invalid_pattern(fs: &dyn Filesystem) {
    put(fs, "f.txt", "needle\n").await;

    let result = grep_all(fs, query(&"a".repeat(64 * 1024 + 1))).await;

    let err = expect_err(result, "INVALID_PATTERN");
    assert!(
        err.to_string().len() < 1024,
        "{} bytes",
        err.to_string().len()
    );
}

pub async fn many_matches_keep_their_lines_and_context(fs: &dyn Filesystem) {
    // Far more results than one search step gathers before it pauses, in
    // runs of a thousand lines with and without matches: the numbering and
    // the context must carry across every pause and every change of pace.
    let hit = |k: u64| k.is_multiple_of(3) && (k / 1000).is_multiple_of(2);
    let line = |k: u64| (k, format!("{} {k}", if hit(k) { "hit" } else { "line" }));
    let text: String = (1..=30_000).map(|k| format!("{}\n", line(k).1)).collect();
    put(fs, "a.txt", &text).await;
    put(fs, "b.txt", "hit last\n").await;
    let hits: Vec<u64> = (1..=30_000).filter(|&k| hit(k)).collect();

    for context in [0u64, 2] {
        let (matches, summary) = grep_all(
            fs,
            GrepQuery {
                context_lines: context as u32,
                max_matches: 100_000,
                ..query("hit")
            },
        )
        .await
        .unwrap();

        assert_eq!(summary.matches as usize, hits.len() + 1);
        assert_eq!(matches.len(), hits.len() + 1);
        let shown = |lines: &[ContextLine]| {
            lines
                .iter()
                .map(|l| (l.line_number, l.line.clone()))
                .collect::<Vec<_>>()
        };
        for (m, &n) in matches.iter().zip(&hits) {
            assert_eq!((m.line_number, m.line.clone()), line(n));
            let before: Vec<_> = (n.saturating_sub(context).max(1)..n).map(line).collect();
            let after: Vec<_> = (n + 1..=(n + context).min(30_000)).map(line).collect();
            assert_eq!(shown(&m.before), before, "before {n}");
            assert_eq!(shown(&m.after), after, "after {n}");
        }
        assert_eq!(matches[hits.len()].path, p("b.txt"));
    }
}

pub async fn wide_context_of_long_lines_is_complete(fs: &dyn Filesystem) {
    // Twenty lines of 100 KB before a match: more than a search buffer
    // holds as context. Every line is still shown, cut to 2 KiB.
    let long = |k: u64| format!("{k:02}{}", "x".repeat(100_000));
    let text: String = (1..=40)
        .map(|k| {
            if k == 30 {
                "needle\n".to_string()
            } else {
                format!("{}\n", long(k))
            }
        })
        .collect();
    put(fs, "f.txt", &text).await;

    let (matches, _) = grep_all(
        fs,
        GrepQuery {
            context_lines: 20,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    let [m] = &matches[..] else {
        panic!("{} matches", matches.len());
    };
    assert_eq!((m.line_number, m.line.as_str()), (30, "needle"));
    let numbers = |lines: &[ContextLine]| lines.iter().map(|l| l.line_number).collect::<Vec<_>>();
    assert_eq!(numbers(&m.before), (10..30).collect::<Vec<_>>());
    assert_eq!(numbers(&m.after), (31..=40).collect::<Vec<_>>());
    for l in m.before.iter().chain(&m.after) {
        assert_eq!(
            l.line,
            long(l.line_number)[..2048],
            "line {}",
            l.line_number
        );
    }
}

pub async fn max_matches_truncates_in_order(fs: &dyn Filesystem) {
    put(fs, "a.txt", "needle 1\nneedle 2\n").await;
    put(fs, "b.txt", "needle 3\nneedle 4\nneedle 5\n").await;

    let (matches, summary) = grep_all(
        fs,
        GrepQuery {
            max_matches: 3,
            ..query("needle")
        },
    )
    .await
    .unwrap();

    assert_eq!(
        locations(&matches),
        [("a.txt", 1), ("a.txt", 2), ("b.txt", 1)]
    );
    assert_eq!(summary.matches, 3);
    assert!(summary.truncated);
}

pub async fn summary_counts_files_searched_and_matches(fs: &dyn Filesystem) {
    put(fs, "a.txt", "needle needle\nneedle\n").await;
    put(fs, "b.txt", "hay\n").await;
    put(fs, "d/c.txt", "needle\n").await;

    let (matches, summary) = grep_all(fs, query("needle")).await.unwrap();

    // A line with two hits is one match.
    assert_eq!(matches.len(), 3);
    assert_eq!(summary.files_searched, 3);
    assert_eq!(summary.matches, 3);
    assert!(!summary.truncated);
}

pub async fn invalid_regex_is_invalid_pattern(fs: &dyn Filesystem) {
    put(fs, "f.txt", "(\n").await;

    let result = grep_all(fs, query("(unclosed")).await;

    expect_err(result, "INVALID_PATTERN");
}

pub async fn invalid_glob_is_invalid_pattern(fs: &dyn Filesystem) {
    put(fs, "f.txt", "needle\n").await;

    let result = grep_all(
        fs,
        GrepQuery {
            glob: Some("[a".into()),
            ..query("needle")
        },
    )
    .await;

    expect_err(result, "INVALID_PATTERN");
}

pub async fn base_path_restricts_the_search(fs: &dyn Filesystem) {
    put(fs, "in/a.txt", "needle\n").await;
    put(fs, "in/deeper/b.txt", "needle\n").await;
    put(fs, "inner.txt", "needle\n").await;
    put(fs, "out/c.txt", "needle\n").await;

    let (matches, summary) = grep_all(
        fs,
        GrepQuery {
            base: p("in"),
            ..query("needle")
        },
    )
    .await
    .unwrap();

    assert_eq!(
        locations(&matches),
        [("in/a.txt", 1), ("in/deeper/b.txt", 1)]
    );
    assert_eq!(summary.files_searched, 2);
}

pub async fn glob_is_relative_to_the_base(fs: &dyn Filesystem) {
    put(fs, "in/a.rs", "needle\n").await;
    put(fs, "in/a.txt", "needle\n").await;
    put(fs, "b.rs", "needle\n").await;

    let (matches, _) = grep_all(
        fs,
        GrepQuery {
            base: p("in"),
            glob: Some("*.rs".into()),
            ..query("needle")
        },
    )
    .await
    .unwrap();

    assert_eq!(locations(&matches), [("in/a.rs", 1)]);
}
