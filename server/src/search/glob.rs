//! The Glob walk: every file under the query's base whose path relative to
//! the base matches, in path order, up to the answer's bound.

use super::MAX_GLOB_RESULTS;
use crate::backend::Backend;
use globset::GlobMatcher;
use wsfs::{GlobOutcome, GlobQuery, Result};

/// A Glob, compiled: a pattern that is refused fails here, before the walk.
pub(crate) struct GlobWalk {
    query: GlobQuery,
    matcher: GlobMatcher,
    /// Paths the answer holds at most.
    max: u64,
}

impl GlobWalk {
    pub(crate) fn new(query: GlobQuery) -> Result<GlobWalk> {
        let matcher = crate::pattern::compile_glob(&query.pattern)?;
        let max = match query.max_results {
            0 => GlobQuery::DEFAULT_MAX_RESULTS,
            n => n.min(MAX_GLOB_RESULTS),
        };
        Ok(GlobWalk {
            query,
            matcher,
            max,
        })
    }

    /// Walks `backend`; blocks on a backend that blocks.
    pub(crate) fn run<B: Backend>(self, backend: &B) -> Result<GlobOutcome> {
        let base = &self.query.base;
        let mut paths = Vec::new();
        for file in backend.walk_files(base)? {
            let file = file?;
            let rel = file.strip_prefix(base).unwrap_or_else(|| file.clone());
            if self.matcher.is_match(rel.as_str()) {
                if paths.len() as u64 == self.max {
                    return Ok(GlobOutcome {
                        paths,
                        truncated: true,
                    });
                }
                paths.push(file);
            }
        }
        Ok(GlobOutcome {
            paths,
            truncated: false,
        })
    }
}
