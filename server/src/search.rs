//! Glob and grep over a backend, built on ripgrep's crates.
//!
//! Grep is parallel across files yet streamed in (path, line) order: one
//! blocking walker lists files lazily in path order, each file is searched
//! on the blocking pool by `grep-searcher` with a `grep-regex` matcher, and
//! `buffered` hands results back in walk order while several files are in
//! flight. The output channel is small, so a slow client throttles the
//! search, and a client that goes away makes the next send fail, which
//! stops the walker and, through a shared flag, the searches in flight.

use crate::backend::{Backend, Content};
use futures::stream::{BoxStream, StreamExt};
use globset::{GlobBuilder, GlobMatcher};
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use wsfs::{
    CanonicalPath, ContextLine, Error, GrepEvent, GrepMatch, GrepQuery, GrepSummary, Result,
};

/// Largest compiled regex, in bytes; bigger patterns are INVALID_PATTERN.
pub const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// Most matches one Grep may ask for.
pub const MAX_MATCHES_CAP: u64 = 100_000;

/// Compiles a glob where `*` stays inside one segment and `**` spans them.
pub fn compile_glob(pattern: &str) -> Result<GlobMatcher> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidPattern {
            pattern: pattern.to_string(),
            message: e.kind().to_string(),
        })
}

fn compile_regex(query: &GrepQuery) -> Result<RegexMatcher> {
    RegexMatcherBuilder::new()
        .case_insensitive(query.case_insensitive)
        .fixed_strings(query.fixed_string)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build(&query.pattern)
        .map_err(|e| Error::InvalidPattern {
            pattern: query.pattern.clone(),
            message: e.to_string(),
        })
}

/// What searching one file produced.
struct FileResult {
    matches: Vec<GrepMatch>,
}

/// A line the searcher reported: a match or context around one.
struct Reported {
    line_number: u64,
    text: String,
    is_match: bool,
}

fn line_text(bytes: &[u8]) -> String {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    String::from_utf8_lossy(b).into_owned()
}

struct CollectSink<'a> {
    lines: Vec<Reported>,
    matches: u64,
    limit: u64,
    binary: bool,
    stop: &'a AtomicBool,
}

impl Sink for CollectSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.lines.push(Reported {
            line_number: mat.line_number().unwrap_or(0),
            text: line_text(mat.bytes()),
            is_match: true,
        });
        self.matches += 1;
        Ok(self.matches < self.limit && !self.stop.load(Ordering::Relaxed))
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        self.lines.push(Reported {
            line_number: ctx.line_number().unwrap_or(0),
            text: line_text(ctx.bytes()),
            is_match: false,
        });
        Ok(!self.stop.load(Ordering::Relaxed))
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Files handed to one search task: enough to amortise the hand-off
/// between threads, few enough that a stopped search wastes little.
const FILES_PER_TASK: usize = 32;

/// Searches a batch of files in order with one searcher.
fn search_batch<B: Backend>(
    backend: &B,
    paths: &[CanonicalPath],
    matcher: &RegexMatcher,
    context: u32,
    limit: u64,
    stop: &AtomicBool,
) -> Result<Vec<FileResult>> {
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .before_context(context as usize)
        .after_context(context as usize)
        .build();
    paths
        .iter()
        .map(|path| search_file(&mut searcher, backend, path, matcher, context, limit, stop))
        .collect()
}

/// Searches one file; binary files (a NUL byte) yield no matches.
fn search_file<B: Backend>(
    searcher: &mut Searcher,
    backend: &B,
    path: &CanonicalPath,
    matcher: &RegexMatcher,
    context: u32,
    limit: u64,
    stop: &AtomicBool,
) -> Result<FileResult> {
    let empty = FileResult {
        matches: Vec::new(),
    };
    if stop.load(Ordering::Relaxed) {
        return Ok(empty);
    }
    let file = match backend.open(path) {
        Ok(f) => f,
        // Gone or replaced since the walk listed it: nothing to search.
        Err(
            Error::FileNotFound { .. }
            | Error::IsADirectory { .. }
            | Error::PermissionDenied { .. },
        ) => return Ok(empty),
        Err(e) => return Err(e),
    };
    let mut sink = CollectSink {
        lines: Vec::new(),
        matches: 0,
        limit,
        binary: false,
        stop,
    };
    let result = match &file.content {
        Content::Memory(data) => {
            if memchr_nul(data) {
                return Ok(empty);
            }
            searcher.search_slice(matcher, data, &mut sink)
        }
        Content::Disk(f) => searcher.search_file(matcher, f, &mut sink),
    };
    result.map_err(|e| Error::from_io(e, path))?;
    if sink.binary {
        return Ok(empty);
    }
    Ok(FileResult {
        matches: assemble(path, matcher, sink.lines, context),
    })
}

fn memchr_nul(data: &[u8]) -> bool {
    data.contains(&0)
}

/// Turns the reported lines into matches, each with its own context (a line
/// may be context of two matches, or itself a match).
fn assemble(
    path: &CanonicalPath,
    matcher: &RegexMatcher,
    lines: Vec<Reported>,
    context: u32,
) -> Vec<GrepMatch> {
    let ctx = context as u64;
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !l.is_match {
            continue;
        }
        let (start, end) = matcher
            .find(l.text.as_bytes())
            .ok()
            .flatten()
            .map_or((0, 0), |m| (m.start() as u32, m.end() as u32));
        let near = |r: &Reported| ContextLine {
            line_number: r.line_number,
            line: r.text.clone(),
        };
        let before = lines[..i]
            .iter()
            .rev()
            .take_while(|r| r.line_number + ctx >= l.line_number)
            .map(near)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after = lines[i + 1..]
            .iter()
            .take_while(|r| r.line_number <= l.line_number + ctx)
            .map(near)
            .collect();
        out.push(GrepMatch {
            path: path.clone(),
            line_number: l.line_number,
            line: l.text.clone(),
            match_start: start,
            match_end: end,
            before,
            after,
        });
    }
    out
}

/// Sets the flag when dropped: the stream's consumer went away.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Starts a grep and returns its ordered stream of events.
pub fn grep<B: Backend>(
    backend: Arc<B>,
    query: GrepQuery,
) -> Result<BoxStream<'static, Result<GrepEvent>>> {
    let matcher = Arc::new(compile_regex(&query)?);
    let filter = query
        .glob
        .as_deref()
        .filter(|g| !g.is_empty())
        .map(compile_glob)
        .transpose()?;
    let max = match query.max_matches {
        0 => GrepQuery::DEFAULT_MAX_MATCHES,
        n => n.min(MAX_MATCHES_CAP),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let parallel = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;

    // Walker: lists files lazily in path order on the blocking pool.
    let (path_tx, path_rx) = mpsc::channel::<Result<Vec<CanonicalPath>>>(16);
    {
        let backend = backend.clone();
        let base = query.base.clone();
        let stop = stop.clone();
        crate::producer::spawn_blocking("Grep", path_tx, move |path_tx| {
            let walk = match backend.walk_files(&base) {
                Ok(w) => w,
                Err(e) => {
                    let _ = path_tx.blocking_send(Err(e));
                    return;
                }
            };
            let mut batch = Vec::with_capacity(FILES_PER_TASK);
            for item in walk {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let path = match item {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = path_tx.blocking_send(Err(e));
                        return;
                    }
                };
                crate::faults::check_stream(path.as_str());
                let keep = filter.as_ref().is_none_or(|g| {
                    g.is_match(
                        path.strip_prefix(&base)
                            .unwrap_or_else(|| path.clone())
                            .as_str(),
                    )
                });
                if keep {
                    batch.push(path);
                }
                if batch.len() == FILES_PER_TASK {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(FILES_PER_TASK));
                    if path_tx.blocking_send(Ok(full)).is_err() {
                        return;
                    }
                }
            }
            if !batch.is_empty() {
                let _ = path_tx.blocking_send(Ok(batch));
            }
        });
    }

    let (out_tx, out_rx) = mpsc::channel::<Result<GrepEvent>>(64);
    crate::producer::spawn("Grep", out_tx.clone(), async move {
        let _stop_guard = StopOnDrop(stop.clone());
        let _active = crate::metrics::Gauge::hold(&crate::metrics::ACTIVE_GREPS);
        let context = query.context_lines;
        let mut results = tokio_stream::wrappers::ReceiverStream::new(path_rx)
            .map(|item| {
                let backend = backend.clone();
                let matcher = matcher.clone();
                let stop = stop.clone();
                async move {
                    let paths = item?;
                    tokio::task::spawn_blocking(move || {
                        search_batch(
                            &*backend,
                            &paths,
                            &matcher,
                            context,
                            max.saturating_add(1),
                            &stop,
                        )
                    })
                    .await
                    .map_err(|e| Error::internal(format!("search task failed: {e}")))?
                }
            })
            .buffered(parallel);
        let mut summary = GrepSummary::default();
        'batches: while let Some(result) = results.next().await {
            let files = match result {
                Ok(f) => f,
                Err(e) => {
                    let _ = out_tx.send(Err(e)).await;
                    return;
                }
            };
            for file in files {
                summary.files_searched += 1;
                for m in file.matches {
                    if summary.matches == max {
                        summary.truncated = true;
                        break 'batches;
                    }
                    summary.matches += 1;
                    if out_tx.send(Ok(GrepEvent::Match(m))).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = out_tx.send(Ok(GrepEvent::Summary(summary))).await;
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(out_rx).boxed())
}
