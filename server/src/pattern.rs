//! Patterns: the bound every pattern is held to, and the one glob dialect.
//!
//! Glob, Grep's file filter, Watch's filter and the
//! include/exclude globs of host mounts all compile here, so a pattern a
//! client writes means the same thing on every call that takes one: `*`,
//! `?` and `[..]` stay inside one segment, `**` spans segments, `{a,b}`
//! picks one, and `\` escapes the next character (`\*` is a literal star)
//! on every platform, not only where globset enables it by default.
//!
//! Every pattern (a glob, or Grep's regex) is held to [`MAX_PATTERN_BYTES`]
//! before it is parsed, and a parser's complaint about it is bounded, the
//! same way for both.

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use wsfs::{path::quote, Error, Result};

/// Longest pattern (Grep's regex, a Grep, Glob or Watch glob), in bytes.
/// Refused before it is parsed: parsing costs memory in proportion to the
/// pattern, and no search a person writes comes near it.
pub const MAX_PATTERN_BYTES: usize = 64 * 1024;

/// Refuses a pattern longer than [`MAX_PATTERN_BYTES`], quoting a prefix.
pub fn check_pattern(pattern: &str) -> Result<()> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(Error::InvalidPattern {
            pattern: quote(pattern).into_owned(),
            message: format!(
                "the pattern is {} bytes long; at most {MAX_PATTERN_BYTES} are allowed",
                pattern.len()
            ),
        });
    }
    Ok(())
}

/// The parser's complaint about `pattern`, bounded: a long pattern's
/// message would repeat the pattern, so only its last line (the reason) is
/// kept.
pub(crate) fn pattern_error(pattern: &str, message: String) -> Error {
    let message = if pattern.len() > wsfs::path::QUOTE_CHARS {
        let last = message.lines().last().unwrap_or_default();
        quote(last).into_owned()
    } else {
        message
    };
    Error::InvalidPattern {
        pattern: quote(pattern).into_owned(),
        message,
    }
}

fn parse(pattern: &str) -> Result<Glob> {
    check_pattern(pattern)?;
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| pattern_error(pattern, e.kind().to_string()))
}

/// Compiles one glob, matched against a path relative to some base.
pub fn compile_glob(pattern: &str) -> Result<GlobMatcher> {
    parse(pattern).map(|g| g.compile_matcher())
}

/// Compiles several globs into a set that matches when any of them does.
pub fn compile_glob_set(patterns: &[String]) -> Result<GlobSet> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        set.add(parse(pattern)?);
    }
    set.build().map_err(|e| Error::InvalidPattern {
        pattern: quote(&patterns.join(", ")).into_owned(),
        message: quote(&e.to_string()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backslash_escapes_a_wildcard() {
        let g = compile_glob(r"notes/\*.md").unwrap();
        assert!(g.is_match("notes/*.md"));
        assert!(!g.is_match("notes/a.md"), "the star is literal");
    }

    #[test]
    fn star_stays_inside_one_segment_and_double_star_spans_them() {
        let star = compile_glob("*.rs").unwrap();
        assert!(star.is_match("a.rs"));
        assert!(!star.is_match("src/a.rs"));
        let deep = compile_glob("**/*.rs").unwrap();
        assert!(deep.is_match("a.rs") && deep.is_match("src/x/a.rs"));
    }

    #[test]
    fn a_set_matches_when_any_glob_does_and_names_a_bad_one() {
        let set = compile_glob_set(&["*.rs".into(), "Cargo.toml".into()]).unwrap();
        assert!(set.is_match("Cargo.toml") && set.is_match("a.rs"));
        assert!(!set.is_match("README.md"));
        let err = compile_glob_set(&["*.rs".into(), "a{".into()]).unwrap_err();
        assert_eq!(err.reason(), "INVALID_PATTERN", "{err}");
        assert!(err.to_string().contains("a{"), "{err}");
    }
}
