//! Builders for Grep and Glob, the calls with many options.
//!
//! A builder collects options with `&str` paths and reports a bad path when
//! it runs, so a chain of options reads without a `?` on every link.

use crate::session::{parse_path, Session};
use futures::stream::{BoxStream, StreamExt};
use wsfs::{
    CanonicalPath, Error, Filesystem, GlobOutcome, GlobQuery, GrepEvent, GrepMatch, GrepQuery,
    GrepSummary, Result,
};

/// A search: `session.grep_query("pattern")`, options, then
/// [`stream`](Self::stream) or [`collect`](Self::collect).
///
/// ```no_run
/// # async fn example(session: wsfs_client::Session) -> wsfs_client::Result<()> {
/// let (matches, summary) = session
///     .grep_query("todo")
///     .path("src")
///     .glob("*.rs")
///     .case_insensitive()
///     .context(2)
///     .collect()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a query does nothing until .stream() or .collect()"]
#[derive(Debug, Clone)]
pub struct GrepBuilder<'a> {
    session: &'a Session,
    query: GrepQuery,
    invalid: Option<Error>,
}

impl<'a> GrepBuilder<'a> {
    pub(crate) fn new(session: &'a Session, pattern: String) -> Self {
        GrepBuilder {
            session,
            query: GrepQuery::new(pattern),
            invalid: None,
        }
    }

    /// Search under this directory (default: the root).
    pub fn path(mut self, base: &str) -> Self {
        self.query.base = keep_first_error(&mut self.invalid, parse_path(base));
        self
    }

    /// Only files whose path relative to the base matches this glob.
    pub fn glob(mut self, glob: impl Into<String>) -> Self {
        self.query.glob = Some(glob.into());
        self
    }

    pub fn case_insensitive(mut self) -> Self {
        self.query.case_insensitive = true;
        self
    }

    /// The pattern is literal text, not a regex.
    pub fn fixed_string(mut self) -> Self {
        self.query.fixed_string = true;
        self
    }

    /// Stop after this many matches (default 1000).
    pub fn max_matches(mut self, max: u64) -> Self {
        self.query.max_matches = max;
        self
    }

    /// Lines of context before and after each match.
    pub fn context(mut self, lines: u32) -> Self {
        self.query.context_lines = lines;
        self
    }

    /// The query as the [`Filesystem`] trait takes it.
    pub fn query(self) -> Result<GrepQuery> {
        match self.invalid {
            Some(error) => Err(error),
            None => Ok(self.query),
        }
    }

    /// Matches as they arrive, then one summary. Dropping the stream stops
    /// the search on the server.
    pub async fn stream(self) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        let session = self.session;
        session.grep(self.query()?).await
    }

    /// Every match, and the summary.
    pub async fn collect(self) -> Result<(Vec<GrepMatch>, GrepSummary)> {
        let mut events = self.stream().await?;
        let mut matches = Vec::new();
        while let Some(event) = events.next().await {
            match event? {
                GrepEvent::Match(m) => matches.push(m),
                GrepEvent::Summary(summary) => return Ok((matches, summary)),
            }
        }
        Err(Error::internal("the Grep stream ended without its summary"))
    }
}

/// A glob: `session.glob_query("**/*.rs")`, options, then [`run`](Self::run).
#[must_use = "a query does nothing until .run()"]
#[derive(Debug, Clone)]
pub struct GlobBuilder<'a> {
    session: &'a Session,
    query: GlobQuery,
    invalid: Option<Error>,
}

impl<'a> GlobBuilder<'a> {
    pub(crate) fn new(session: &'a Session, pattern: String) -> Self {
        GlobBuilder {
            session,
            query: GlobQuery::new(pattern),
            invalid: None,
        }
    }

    /// Match paths relative to this directory (default: the root).
    pub fn path(mut self, base: &str) -> Self {
        self.query.base = keep_first_error(&mut self.invalid, parse_path(base));
        self
    }

    /// Return at most this many paths (default 1000).
    pub fn max_results(mut self, max: u64) -> Self {
        self.query.max_results = max;
        self
    }

    /// The query as the [`Filesystem`] trait takes it.
    pub fn query(self) -> Result<GlobQuery> {
        match self.invalid {
            Some(error) => Err(error),
            None => Ok(self.query),
        }
    }

    /// The matching paths, sorted.
    pub async fn run(self) -> Result<GlobOutcome> {
        let session = self.session;
        session.glob(self.query()?).await
    }
}

/// The parsed path, or the root with the error kept for when the query runs.
fn keep_first_error(invalid: &mut Option<Error>, parsed: Result<CanonicalPath>) -> CanonicalPath {
    parsed.unwrap_or_else(|error| {
        invalid.get_or_insert(error);
        CanonicalPath::root()
    })
}

#[cfg(test)]
mod tests {
    use crate::Client;
    use tonic::transport::Channel;
    use wsfs::Error;

    /// A session on a channel that is never used: nothing listens on the
    /// discard port, so a call that went out would fail UNAVAILABLE.
    fn offline_session() -> crate::Session {
        Client::from_channel(Channel::from_static("http://127.0.0.1:9").connect_lazy()).session("s")
    }

    #[tokio::test]
    async fn grep_builder_sets_every_option() {
        let session = offline_session();
        let q = session
            .grep_query("todo")
            .path("/src/")
            .glob("*.rs")
            .case_insensitive()
            .fixed_string()
            .max_matches(5)
            .context(2)
            .query()
            .unwrap();
        assert_eq!(q.pattern, "todo");
        assert_eq!(q.base.as_str(), "src");
        assert_eq!(q.glob.as_deref(), Some("*.rs"));
        assert!(q.case_insensitive && q.fixed_string);
        assert_eq!((q.max_matches, q.context_lines), (5, 2));
    }

    #[tokio::test]
    async fn grep_builder_defaults_follow_the_contract() {
        let session = offline_session();
        let q = session.grep_query("x").query().unwrap();
        assert!(q.base.is_root());
        assert_eq!(q.glob, None);
        assert_eq!(q.max_matches, 1000);
        assert_eq!(q.context_lines, 0);
    }

    #[tokio::test]
    async fn escaping_grep_base_fails_before_any_call() {
        let session = offline_session();
        let err = session
            .grep_query("x")
            .path("..")
            .collect()
            .await
            .unwrap_err();
        assert_eq!(err, Error::PathEscapesRoot { path: "..".into() });
    }

    #[tokio::test]
    async fn glob_builder_sets_base_and_limit() {
        let session = offline_session();
        let q = session
            .glob_query("**/*.rs")
            .path("crates")
            .max_results(3)
            .query()
            .unwrap();
        assert_eq!(
            (q.pattern.as_str(), q.base.as_str(), q.max_results),
            ("**/*.rs", "crates", 3)
        );
    }

    #[tokio::test]
    async fn escaping_glob_base_fails_before_any_call() {
        let session = offline_session();
        let err = session
            .glob_query("*")
            .path("a/../..")
            .run()
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Error::PathEscapesRoot {
                path: "a/../..".into()
            }
        );
    }

    #[tokio::test]
    async fn string_helpers_refuse_escaping_paths_before_any_call() {
        let session = offline_session();
        let escapes = |e: Error| matches!(e, Error::PathEscapesRoot { .. });
        assert!(escapes(session.read_to_string("../x").await.unwrap_err()));
        assert!(escapes(session.write_str("../x", "").await.unwrap_err()));
        assert!(escapes(
            session
                .download("../x", tokio::io::sink())
                .await
                .unwrap_err()
        ));
        let upload = session.upload("../x", tokio::io::empty(), Default::default());
        assert!(escapes(upload.await.unwrap_err()));
    }

    #[tokio::test]
    async fn unreachable_server_surfaces_as_unavailable() {
        let session = offline_session();
        let err = session.write_str("a.txt", "hi").await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    }
}
