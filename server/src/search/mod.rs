//! Glob and grep over a backend, built on ripgrep's crates.
//!
//! Grep is parallel across files yet streamed in (path, line) order: one
//! blocking walker lists files lazily in path order and hands them out in
//! batches; each batch is searched on the blocking pool by `grep-searcher`
//! with a `grep-regex` matcher, in units: a unit searches until it has
//! gathered [`sink::UNIT_BUDGET_BYTES`] of results (or the batch ends), then
//! returns them with a cursor and gives its thread back. The response
//! stream sends the front batch's results, starting its next unit once
//! they are sent, while at most [`MAX_BATCHES_IN_FLIGHT`] batches run or
//! wait ahead. So a client that stops reading holds no thread and a bounded
//! amount of memory, and a client that goes away drops the batches, which
//! stops the walker and, through a shared flag, the units in flight.
//!
//! What one stream can hold, whatever the tree or the query: per batch in
//! flight, a unit's results (the budget plus the match that crossed it), a
//! window of `2 × context_lines + 1` lines of at most [`MAX_LINE_BYTES`],
//! while a unit runs its line buffer ([`unit::SEARCH_BUFFER_BYTES`]), and a file
//! small enough to be read whole ([`scan::SMALL_FILE_BYTES`]); with
//! `context_lines` at most [`MAX_CONTEXT_LINES`] that is under 1.5 MiB per
//! batch, 6 MiB per stream (about 0.4 MiB measured for a stalled reader
//! with 2 lines of context). Descriptors: per batch walked or in flight,
//! the directories its files were listed in (at most [`walk::DIRS_PER_TASK`]:
//! a file is opened by name in the directory the walk found it in, not
//! resolved from the root again) and the file being searched; and the
//! walk's open directories, one per level.
//!
//! The modules, in the order a Grep runs through them: [`walk`] lists the
//! files, [`unit`] searches a batch of them in units, [`scan`] decides
//! which files are searched and reads them, [`sink`] gathers each match
//! with its context, and [`merge`] streams the results in order. [`glob`]
//! is the Glob walk.

mod glob;
mod merge;
mod scan;
mod sink;
mod unit;
mod walk;

pub(crate) use glob::GlobWalk;

use crate::backend::Backend;
use crate::pattern::{check_pattern, pattern_error};
use futures::stream::{BoxStream, StreamExt};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use merge::{Merge, StopOnDrop};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use unit::SearchSpec;
use walk::{Walk, WalkSpec};
use wsfs::{Error, GrepEvent, GrepQuery, GrepSummary, Result};

/// Most lines of context a Grep may ask for on each side of a match.
pub const MAX_CONTEXT_LINES: u32 = 100;

/// Longest line a Grep result carries (the matched line and each context
/// line): longer ones are cut at a character boundary, and the match
/// offsets are clamped to the cut line.
pub const MAX_LINE_BYTES: usize = 2 * 1024;

/// Files with a line longer than this are skipped, as binary files are:
/// the searcher holds a whole line in memory, so this bounds its buffer.
pub const MAX_SEARCHED_LINE_BYTES: usize = 256 * 1024;

/// Most batches of files searched at once for one Grep.
pub const MAX_BATCHES_IN_FLIGHT: usize = 4;

/// Largest compiled regex, in bytes; bigger patterns are INVALID_PATTERN.
pub const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// Most matches one Grep may ask for.
pub const MAX_MATCHES_CAP: u64 = 100_000;

/// Most paths one Glob returns, whatever `max_results` asks (as many as a
/// List): the answer is one message, built whole.
pub const MAX_GLOB_RESULTS: u64 = 100_000;

fn compile_regex(query: &GrepQuery) -> Result<RegexMatcher> {
    check_pattern(&query.pattern)?;
    RegexMatcherBuilder::new()
        .case_insensitive(query.case_insensitive)
        .fixed_strings(query.fixed_string)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build(&query.pattern)
        .map_err(|e| pattern_error(&query.pattern, e.to_string()))
}

/// Starts a grep and returns its ordered stream of events.
pub fn grep<B: Backend>(
    backend: Arc<B>,
    query: GrepQuery,
) -> Result<BoxStream<'static, Result<GrepEvent>>> {
    if query.context_lines > MAX_CONTEXT_LINES {
        return Err(Error::invalid_argument(format!(
            "context_lines is {}; at most {MAX_CONTEXT_LINES} are allowed",
            query.context_lines
        )));
    }
    let matcher = Arc::new(compile_regex(&query)?);
    let filter = query
        .glob
        .as_deref()
        .filter(|g| !g.is_empty())
        .map(crate::pattern::compile_glob)
        .transpose()?;
    let max = match query.max_matches {
        0 => GrepQuery::DEFAULT_MAX_MATCHES,
        n => n.min(MAX_MATCHES_CAP),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let parallel = (std::thread::available_parallelism().map_or(2, |n| n.get()) * 2)
        .min(MAX_BATCHES_IN_FLIGHT);

    let merge = Merge {
        walk: Walk::Idle(None),
        walked: VecDeque::new(),
        slots: VecDeque::new(),
        parallel,
        backend,
        walking: Arc::new(WalkSpec {
            base: query.base.clone(),
            filter,
        }),
        search: Arc::new(SearchSpec {
            matcher,
            context: query.context_lines,
            limit: max.saturating_add(1),
            stop: stop.clone(),
        }),
        max,
        summary: GrepSummary::default(),
        done: false,
        _stop: StopOnDrop(stop),
        _active: crate::metrics::Gauge::hold(&crate::metrics::ACTIVE_GREPS),
    };
    Ok(futures::stream::unfold(merge, |mut merge| async move {
        let event = merge.next().await?;
        Some((event, merge))
    })
    .boxed())
}
