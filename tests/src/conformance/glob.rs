//! Glob: files whose path relative to a base matches a pattern.

use super::support::*;
use wsfs::{CanonicalPath, Filesystem, GlobOutcome, GlobQuery};

async fn seed(fs: &dyn Filesystem) {
    for path in [
        "a.rs",
        "b.rs",
        "c.txt",
        "x/b.rs",
        "x/y/a.rs",
        "x/y/z.txt",
        "src/main.rs",
        "src/lib/mod.rs",
    ] {
        put(fs, path, "content\n").await;
    }
    mkdir(fs, "empty.rs").await;
}

async fn glob(fs: &dyn Filesystem, query: GlobQuery) -> GlobOutcome {
    fs.glob(query.clone())
        .await
        .unwrap_or_else(|e| panic!("{query:?}: {e}"))
}

async fn matched(fs: &dyn Filesystem, pattern: &str) -> Vec<String> {
    glob(fs, GlobQuery::new(pattern))
        .await
        .paths
        .into_iter()
        .map(|p| p.as_str().to_string())
        .collect()
}

pub async fn star_stays_inside_one_segment(fs: &dyn Filesystem) {
    seed(fs).await;

    // `empty.rs` is a directory: glob names files only.
    assert_eq!(matched(fs, "*.rs").await, ["a.rs", "b.rs"]);
}

pub async fn double_star_spans_segments_including_none(fs: &dyn Filesystem) {
    seed(fs).await;

    assert_eq!(
        matched(fs, "**/*.rs").await,
        [
            "a.rs",
            "b.rs",
            "src/lib/mod.rs",
            "src/main.rs",
            "x/b.rs",
            "x/y/a.rs"
        ]
    );
}

pub async fn braces_match_alternatives(fs: &dyn Filesystem) {
    seed(fs).await;

    assert_eq!(matched(fs, "{a,c}.*").await, ["a.rs", "c.txt"]);
}

pub async fn brackets_match_a_character_class(fs: &dyn Filesystem) {
    seed(fs).await;

    assert_eq!(matched(fs, "[ab].rs").await, ["a.rs", "b.rs"]);
}

pub async fn base_path_restricts_and_paths_stay_workspace_relative(fs: &dyn Filesystem) {
    seed(fs).await;

    let outcome = glob(
        fs,
        GlobQuery {
            base: p("src"),
            ..GlobQuery::new("*.rs")
        },
    )
    .await;

    assert_eq!(outcome.paths, [p("src/main.rs")]);
    assert!(!outcome.truncated);
}

pub async fn missing_base_matches_nothing(fs: &dyn Filesystem) {
    seed(fs).await;

    let outcome = glob(
        fs,
        GlobQuery {
            base: p("no/such/dir"),
            ..GlobQuery::new("**")
        },
    )
    .await;

    assert!(outcome.paths.is_empty());
    assert!(!outcome.truncated);
}

pub async fn max_results_truncates_in_sorted_order(fs: &dyn Filesystem) {
    seed(fs).await;

    let outcome = glob(
        fs,
        GlobQuery {
            max_results: 2,
            ..GlobQuery::new("**/*.rs")
        },
    )
    .await;

    assert_eq!(outcome.paths, [p("a.rs"), p("b.rs")]);
    assert!(outcome.truncated);
}

pub async fn exactly_max_results_is_not_truncated(fs: &dyn Filesystem) {
    seed(fs).await;

    let outcome = glob(
        fs,
        GlobQuery {
            max_results: 2,
            ..GlobQuery::new("*.rs")
        },
    )
    .await;

    assert_eq!(outcome.paths.len(), 2);
    assert!(!outcome.truncated);
}

pub async fn bad_pattern_is_invalid_pattern(fs: &dyn Filesystem) {
    seed(fs).await;

    for pattern in ["[a", "{a,b"] {
        let result = fs
            .glob(GlobQuery {
                base: CanonicalPath::root(),
                ..GlobQuery::new(pattern)
            })
            .await;
        expect_err(result, "INVALID_PATTERN");
    }
}
