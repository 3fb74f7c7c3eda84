//! Canonical workspace paths.
//!
//! Every path that crosses the wire is parsed once into a [`CanonicalPath`]:
//! a leading `/` is stripped, repeated slashes collapse, `.` segments drop,
//! `..` resolves lexically, and a path that would climb above the root is
//! refused with `PATH_ESCAPES_ROOT` instead of being clamped. Nothing below
//! the edge handles raw strings.

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::fmt;

/// The most bytes (UTF-8) one segment may hold, on every backend: the name
/// limit of the filesystems DIRECTORY sessions live on (`NAME_MAX`), applied
/// to MEMORY sessions too, so any workspace can move to any backend.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// The most bytes a raw path may have (`PATH_MAX`). Checked before anything
/// else looks at the path, so a huge path costs nothing but its refusal.
pub const MAX_PATH_BYTES: usize = 4096;

/// The most characters of a client's input that an error message or a log
/// line quotes; the rest is summarised by its length.
pub const QUOTE_CHARS: usize = 128;

/// `raw` as errors and logs show it: whole when short, otherwise its first
/// [`QUOTE_CHARS`] characters and the total length, so echoing an input
/// never costs more than a fixed amount.
pub fn quote(raw: &str) -> Cow<'_, str> {
    match raw.char_indices().nth(QUOTE_CHARS) {
        None => Cow::Borrowed(raw),
        Some((cut, _)) => Cow::Owned(format!("{}... ({} bytes)", &raw[..cut], raw.len())),
    }
}

/// Per-session limits on path shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathLimits {
    /// Most segments a path may have.
    pub max_depth: usize,
    /// Most characters (Unicode scalar values) in one segment.
    pub max_segment_chars: usize,
}

impl PathLimits {
    pub const DEFAULT_MAX_DEPTH: usize = 16;
    pub const DEFAULT_MAX_SEGMENT_CHARS: usize = 80;

    /// No limits beyond well-formedness; used by clients, which leave the
    /// session's own limits to the server.
    pub const UNLIMITED: PathLimits = PathLimits {
        max_depth: usize::MAX,
        max_segment_chars: usize::MAX,
    };
}

impl Default for PathLimits {
    fn default() -> Self {
        PathLimits {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_segment_chars: Self::DEFAULT_MAX_SEGMENT_CHARS,
        }
    }
}

/// A workspace-relative path in canonical form: segments joined by `/`, no
/// leading or trailing slash, no `.` or `..`, no empty segment. The root is
/// the empty path. Ordering is bytewise on the string, which is the order
/// every listing, glob and grep result uses.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct CanonicalPath(String);

impl CanonicalPath {
    /// The workspace root.
    pub fn root() -> Self {
        CanonicalPath(String::new())
    }

    /// Parses a client-supplied path.
    pub fn parse(raw: &str, limits: &PathLimits) -> Result<Self> {
        if raw.len() > MAX_PATH_BYTES {
            return Err(Error::InvalidPath {
                path: quote(raw).into_owned(),
                message: format!(
                    "path is {} bytes long; at most {MAX_PATH_BYTES} are allowed",
                    raw.len()
                ),
            });
        }
        if raw.contains('\0') {
            return Err(Error::InvalidPath {
                path: raw.replace('\0', "\\0"),
                message: "path contains a NUL byte".into(),
            });
        }
        let mut segments: Vec<&str> = Vec::new();
        for segment in raw.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    if segments.pop().is_none() {
                        return Err(Error::PathEscapesRoot {
                            path: raw.to_string(),
                        });
                    }
                }
                s => segments.push(s),
            }
        }
        if segments.len() > limits.max_depth {
            return Err(Error::InvalidPath {
                path: raw.to_string(),
                message: format!(
                    "path '{raw}' has {} segments; this session allows at most {} (its \
                     max_path_depth, chosen when it is created: `wsfs session create \
                     --max-path-depth N`)",
                    segments.len(),
                    limits.max_depth
                ),
            });
        }
        if let Some(long) = segments
            .iter()
            .find(|s| s.chars().count() > limits.max_segment_chars)
        {
            return Err(Error::InvalidPath {
                path: raw.to_string(),
                message: format!(
                    "path segment '{long}' is longer than {} characters, this session's limit \
                     (its max_segment_length, chosen when it is created: `wsfs session create \
                     --max-segment-length N`)",
                    limits.max_segment_chars
                ),
            });
        }
        if let Some(long) = segments.iter().find(|s| s.len() > MAX_SEGMENT_BYTES) {
            return Err(segment_too_long(raw, long));
        }
        Ok(CanonicalPath(segments.join("/")))
    }

    /// Builds a path from a string already known to be canonical (for
    /// example one read back from a backend). Panics in debug builds if not.
    pub fn from_canonical(s: impl Into<String>) -> Self {
        let s = s.into();
        debug_assert!(Self::is_canonical(&s), "not canonical: {s:?}");
        CanonicalPath(s)
    }

    fn is_canonical(s: &str) -> bool {
        s.is_empty()
            || s.split('/')
                .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && !seg.contains('\0'))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path's segments; none for the root.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|s| !s.is_empty())
    }

    pub fn depth(&self) -> usize {
        self.segments().count()
    }

    /// The last segment; `None` for the root.
    pub fn name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The containing directory; `None` for the root.
    pub fn parent(&self) -> Option<CanonicalPath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => CanonicalPath(self.0[..i].to_string()),
            None => CanonicalPath::root(),
        })
    }

    /// Appends one segment. `name` must be a single valid segment (a name
    /// read from a directory listing, say); invalid names are refused.
    pub fn join(&self, name: &str) -> Result<CanonicalPath> {
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.contains('\0')
        {
            return Err(Error::InvalidPath {
                path: name.to_string(),
                message: format!("'{name}' is not a single path segment"),
            });
        }
        if name.len() > MAX_SEGMENT_BYTES {
            return Err(segment_too_long(name, name));
        }
        Ok(if self.is_root() {
            CanonicalPath(name.to_string())
        } else {
            CanonicalPath(format!("{}/{}", self.0, name))
        })
    }

    /// Appends a relative canonical path.
    pub fn join_path(&self, rel: &CanonicalPath) -> CanonicalPath {
        match (self.is_root(), rel.is_root()) {
            (true, _) => rel.clone(),
            (_, true) => self.clone(),
            _ => CanonicalPath(format!("{}/{}", self.0, rel.0)),
        }
    }

    /// True when `self` is `ancestor` or lies beneath it.
    pub fn starts_with(&self, ancestor: &CanonicalPath) -> bool {
        ancestor.is_root()
            || self.0 == ancestor.0
            || (self.0.starts_with(&ancestor.0) && self.0.as_bytes()[ancestor.0.len()] == b'/')
    }

    /// The part of `self` below `base`, when `self` lies beneath `base`.
    pub fn strip_prefix(&self, base: &CanonicalPath) -> Option<CanonicalPath> {
        if base.is_root() {
            return Some(self.clone());
        }
        if self.0 == base.0 {
            return Some(CanonicalPath::root());
        }
        if self.starts_with(base) {
            return Some(CanonicalPath(self.0[base.0.len() + 1..].to_string()));
        }
        None
    }

    /// A human form for messages: `/` for the root, the path otherwise.
    pub fn display(&self) -> &str {
        if self.is_root() {
            "/"
        } else {
            &self.0
        }
    }
}

fn segment_too_long(raw: &str, segment: &str) -> Error {
    Error::InvalidPath {
        path: quote(raw).into_owned(),
        message: format!(
            "path segment '{}' is {} bytes long; at most {MAX_SEGMENT_BYTES} bytes are allowed on every backend",
            quote(segment),
            segment.len()
        ),
    }
}

impl fmt::Display for CanonicalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.display())
    }
}

impl fmt::Debug for CanonicalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl AsRef<str> for CanonicalPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<CanonicalPath> {
        CanonicalPath::parse(s, &PathLimits::default())
    }

    #[test]
    fn leading_slash_is_stripped() {
        assert_eq!(p("/src/a.rs").unwrap(), p("src/a.rs").unwrap());
        assert_eq!(p("/src/a.rs").unwrap().as_str(), "src/a.rs");
    }

    #[test]
    fn root_spellings_are_the_root() {
        for s in ["", ".", "/", "//", "./", "a/.."] {
            assert!(p(s).unwrap().is_root(), "{s:?}");
        }
    }

    #[test]
    fn slashes_collapse_and_dots_drop() {
        assert_eq!(p("a//b/./c/").unwrap().as_str(), "a/b/c");
    }

    #[test]
    fn dotdot_resolves_lexically() {
        assert_eq!(p("a/b/../c").unwrap().as_str(), "a/c");
    }

    #[test]
    fn climbing_above_root_is_refused() {
        for s in ["..", "../x", "a/../../x", "/../etc/passwd"] {
            match p(s) {
                Err(Error::PathEscapesRoot { .. }) => {}
                other => panic!("{s:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn nul_is_refused() {
        assert!(matches!(p("a\0b"), Err(Error::InvalidPath { .. })));
    }

    #[test]
    fn depth_limit_applies_after_resolution() {
        let deep16 = vec!["d"; 16].join("/");
        assert!(p(&deep16).is_ok());
        let deep17 = vec!["d"; 17].join("/");
        assert!(matches!(p(&deep17), Err(Error::InvalidPath { .. })));
        assert!(p(&format!("{deep17}/..")).is_ok());
    }

    #[test]
    fn segment_limit_counts_characters() {
        assert!(p(&"é".repeat(80)).is_ok());
        assert!(matches!(p(&"x".repeat(81)), Err(Error::InvalidPath { .. })));
    }

    #[test]
    fn segment_limit_counts_bytes_too() {
        let wide = PathLimits {
            max_depth: 16,
            max_segment_chars: 1000,
        };
        // 85 three-byte characters: 255 bytes, the most a segment may hold.
        assert!(CanonicalPath::parse(&"€".repeat(85), &wide).is_ok());
        for limits in [wide, PathLimits::UNLIMITED] {
            match CanonicalPath::parse(&format!("a/{}", "€".repeat(86)), &limits) {
                Err(Error::InvalidPath { message, .. }) => {
                    assert!(message.contains("258 bytes"), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(CanonicalPath::root().join(&"x".repeat(256)).is_err());
    }

    #[test]
    fn huge_paths_are_refused_by_length_and_quoted_briefly() {
        let huge = "a/".repeat(20 * 1024 * 1024);
        match CanonicalPath::parse(&huge, &PathLimits::UNLIMITED) {
            Err(e @ Error::InvalidPath { .. }) => {
                let shown = format!("{e}");
                assert!(shown.len() < 1024, "{} bytes quoted", shown.len());
                assert!(shown.contains(&huge.len().to_string()), "{shown}");
            }
            other => panic!("{other:?}"),
        }
        let edge = "x/".repeat(MAX_PATH_BYTES / 2);
        assert!(CanonicalPath::parse(&edge, &PathLimits::UNLIMITED).is_ok());
        assert!(CanonicalPath::parse(&format!("{edge}y"), &PathLimits::UNLIMITED).is_err());
    }

    #[test]
    fn quote_keeps_short_inputs_and_cuts_long_ones_on_char_boundaries() {
        assert_eq!(quote("short"), "short");
        let long = "é".repeat(QUOTE_CHARS + 10);
        let q = quote(&long);
        assert!(q.starts_with(&"é".repeat(QUOTE_CHARS)), "{q}");
        assert!(q.ends_with(&format!("({} bytes)", long.len())), "{q}");
    }

    #[test]
    fn parent_name_and_prefixes() {
        let x = p("a/b/c").unwrap();
        assert_eq!(x.name(), Some("c"));
        assert_eq!(x.parent().unwrap().as_str(), "a/b");
        assert_eq!(p("a").unwrap().parent().unwrap(), CanonicalPath::root());
        assert!(x.starts_with(&p("a/b").unwrap()));
        assert!(!x.starts_with(&p("a/bc").unwrap()));
        assert!(!p("a/bc").unwrap().starts_with(&p("a/b").unwrap()));
        assert_eq!(x.strip_prefix(&p("a").unwrap()).unwrap().as_str(), "b/c");
        assert!(p("ab").unwrap().strip_prefix(&p("a").unwrap()).is_none());
    }
}
