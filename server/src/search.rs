//! Glob and grep over a backend, built on ripgrep's crates.
//!
//! Grep is parallel across files yet streamed in (path, line) order: one
//! blocking walker lists files lazily in path order and hands them out in
//! batches; each batch is searched on the blocking pool by `grep-searcher`
//! with a `grep-regex` matcher, and sends its matches one at a time through
//! its own channel of one message. The response stream drains those
//! channels in walk order, so at most [`MAX_BATCHES_IN_FLIGHT`] batches run
//! ahead of the client, each holding at most a line buffer, a window of
//! context lines and two matches. A slow client throttles the search; a
//! client that goes away drops the channels, which stops the walker and,
//! through a shared flag, the searches in flight.
//!
//! What one stream can hold, whatever the tree or the query:
//! [`MAX_BATCHES_IN_FLIGHT`] × ([`SEARCH_BUFFER_BYTES`] + three windows of
//! `2 × context_lines + 1` lines of at most [`MAX_LINE_BYTES`] each), with
//! `context_lines` at most [`MAX_CONTEXT_LINES`]: under 8 MiB.

use crate::backend::{Backend, Content};
use futures::stream::{BoxStream, StreamExt};
use globset::{GlobBuilder, GlobMatcher};
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use wsfs::path::quote;
use wsfs::{
    CanonicalPath, ContextLine, Error, GrepEvent, GrepMatch, GrepQuery, GrepSummary, Result,
};

/// Longest pattern (Grep's regex, a Grep, Glob or Watch glob), in bytes.
/// Refused before it is parsed: parsing costs memory in proportion to the
/// pattern, and no search a person writes comes near it.
pub const MAX_PATTERN_BYTES: usize = 64 * 1024;

/// Most lines of context a Grep may ask for on each side of a match.
pub const MAX_CONTEXT_LINES: u32 = 100;

/// Longest line a Grep result carries (the matched line and each context
/// line): longer ones are cut at a character boundary, and the match
/// offsets are clamped to the cut line.
pub const MAX_LINE_BYTES: usize = 2 * 1024;

/// Files with a line longer than this are skipped, as binary files are:
/// the searcher holds a whole line in memory, so this bounds its buffer.
pub const MAX_SEARCHED_LINE_BYTES: usize = 256 * 1024;

/// Most bytes one searcher's line buffer may grow to; twice the longest
/// searched line, so a line that passed the check always fits.
const SEARCH_BUFFER_BYTES: usize = 2 * MAX_SEARCHED_LINE_BYTES;

/// Most batches of files searched at once for one Grep.
pub const MAX_BATCHES_IN_FLIGHT: usize = 4;

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
fn pattern_error(pattern: &str, message: String) -> Error {
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

/// Largest compiled regex, in bytes; bigger patterns are INVALID_PATTERN.
pub const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// Most matches one Grep may ask for.
pub const MAX_MATCHES_CAP: u64 = 100_000;

/// Most paths one Glob returns, whatever `max_results` asks (as many as a
/// List): the answer is one message, built whole.
pub const MAX_GLOB_RESULTS: u64 = 100_000;

/// Compiles a glob where `*` stays inside one segment and `**` spans them.
pub fn compile_glob(pattern: &str) -> Result<GlobMatcher> {
    check_pattern(pattern)?;
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| pattern_error(pattern, e.kind().to_string()))
}

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

/// A line the searcher reported, cut to [`MAX_LINE_BYTES`].
struct Seen {
    number: u64,
    text: Arc<str>,
}

/// A match whose context is complete, its lines shared with the window
/// until the response stream turns it into a message.
struct Found {
    path: CanonicalPath,
    line_number: u64,
    line: Arc<str>,
    span: (u32, u32),
    before: Vec<Seen>,
    after: Vec<Seen>,
}

impl Found {
    fn into_event(self) -> GrepEvent {
        let owned = |lines: Vec<Seen>| {
            lines
                .into_iter()
                .map(|l| ContextLine {
                    line_number: l.number,
                    line: l.text.to_string(),
                })
                .collect()
        };
        GrepEvent::Match(GrepMatch {
            path: self.path,
            line_number: self.line_number,
            line: self.line.to_string(),
            match_start: self.span.0,
            match_end: self.span.1,
            before: owned(self.before),
            after: owned(self.after),
        })
    }
}

/// What a batch's search sends, in order.
enum Searched {
    Match(Box<Found>),
    /// The search reached the next file of the batch (whether it is then
    /// searched or skipped as binary).
    File,
}

/// The text of a reported line without its terminator.
fn line_text(bytes: &[u8]) -> String {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    String::from_utf8_lossy(b).into_owned()
}

/// Cuts `text` to at most [`MAX_LINE_BYTES`] at a character boundary.
fn cut_line(text: &mut String) {
    if text.len() > MAX_LINE_BYTES {
        let cut = (0..=MAX_LINE_BYTES)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
    }
}

/// Sends each match as soon as its after-context is complete, keeping only
/// the lines a pending or a future match can still show.
struct StreamSink<'a> {
    path: &'a CanonicalPath,
    matcher: &'a RegexMatcher,
    context: u64,
    /// Recent lines, in order: the last `context` lines, and every line
    /// from the oldest pending match's before-context on.
    window: VecDeque<Seen>,
    /// Matches whose after-context is not complete yet: line and span.
    pending: VecDeque<(u64, (u32, u32))>,
    matches: u64,
    limit: u64,
    stop: &'a AtomicBool,
    tx: &'a mpsc::Sender<Result<Searched>>,
    /// The response stream went away.
    gone: bool,
}

impl StreamSink<'_> {
    fn line(&mut self, number: u64, bytes: &[u8], is_match: bool) -> bool {
        // Lines past every pending match's after-context complete them.
        while let Some(&(m, _)) = self.pending.front() {
            if m + self.context >= number {
                break;
            }
            self.emit_front();
        }
        let mut text = line_text(bytes);
        if is_match {
            let span = self
                .matcher
                .find(text.as_bytes())
                .ok()
                .flatten()
                .map_or((0, 0), |m| (m.start(), m.end()));
            let shown = text.len().min(MAX_LINE_BYTES);
            let clamp = |at: usize| at.min(shown) as u32;
            self.pending
                .push_back((number, (clamp(span.0), clamp(span.1))));
            self.matches += 1;
        }
        cut_line(&mut text);
        self.window.push_back(Seen {
            number,
            text: text.into(),
        });
        let keep_from = self.pending.front().map_or(number + 1, |&(m, _)| m);
        while self
            .window
            .front()
            .is_some_and(|l| l.number + self.context < keep_from)
        {
            self.window.pop_front();
        }
        !self.gone && self.matches < self.limit && !self.stop.load(Ordering::Relaxed)
    }

    /// Sends the oldest pending match with the context the window holds.
    fn emit_front(&mut self) {
        let Some((number, span)) = self.pending.pop_front() else {
            return;
        };
        let (mut before, mut after, mut line) = (Vec::new(), Vec::new(), None);
        for l in &self.window {
            let seen = || Seen {
                number: l.number,
                text: l.text.clone(),
            };
            if l.number + self.context >= number && l.number < number {
                before.push(seen());
            } else if l.number == number {
                line = Some(l.text.clone());
            } else if l.number > number && l.number <= number + self.context {
                after.push(seen());
            }
        }
        let found = Found {
            path: self.path.clone(),
            line_number: number,
            line: line.unwrap_or_else(|| Arc::from("")),
            span,
            before,
            after,
        };
        if !self.gone
            && self
                .tx
                .blocking_send(Ok(Searched::Match(Box::new(found))))
                .is_err()
        {
            self.gone = true;
        }
    }

    /// Sends every match still pending: the file ended.
    fn flush(&mut self) {
        while !self.pending.is_empty() {
            self.emit_front();
        }
    }
}

impl Sink for StreamSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        Ok(self.line(mat.line_number().unwrap_or(0), mat.bytes(), true))
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        Ok(self.line(ctx.line_number().unwrap_or(0), ctx.bytes(), false))
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        // Only when the file changed after it was checked: stop there.
        Ok(false)
    }
}

/// Whether a file is searched: no NUL byte (binary) and no line longer
/// than [`MAX_SEARCHED_LINE_BYTES`]. Decided before any match of the file
/// is sent, by the same rule on every backend, on the raw bytes (no
/// byte-order-mark decoding).
fn searchable(mut reader: impl Read) -> std::io::Result<bool> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line = 0usize;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buf[..n];
        if memchr::memchr(0, chunk).is_some() {
            return Ok(false);
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if line + (end - start) > MAX_SEARCHED_LINE_BYTES {
                return Ok(false);
            }
            line = 0;
            start = end + 1;
        }
        line += n - start;
        if line > MAX_SEARCHED_LINE_BYTES {
            return Ok(false);
        }
    }
}

/// Reads a file from an offset without moving its cursor, so the check
/// and the search each read it from the start.
struct ReadAt<'a> {
    file: &'a std::fs::File,
    at: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Records whether reading failed, to tell an I/O error from the
/// searcher's own buffer limit.
struct Watched<R> {
    inner: R,
    failed: bool,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|_| self.failed = true)
    }
}

/// Files handed to one search task: enough to amortise the hand-off
/// between threads, few enough that a stopped search wastes little.
const FILES_PER_TASK: usize = 32;

/// Searches a batch of files in order with one searcher, sending matches
/// and file ends through `tx` (one message at a time).
fn search_batch<B: Backend>(
    backend: &B,
    paths: &[CanonicalPath],
    matcher: &RegexMatcher,
    context: u32,
    limit: u64,
    stop: &AtomicBool,
    tx: &mpsc::Sender<Result<Searched>>,
) {
    // Context is kept by the sink, not the searcher: the searcher would
    // hold `context` lines in its buffer, the sink holds them cut short.
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .bom_sniffing(false)
        .heap_limit(Some(SEARCH_BUFFER_BYTES))
        .line_number(true)
        .passthru(context > 0)
        .build();
    for path in paths {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if tx.blocking_send(Ok(Searched::File)).is_err() {
            return;
        }
        match search_file(
            &mut searcher,
            backend,
            path,
            matcher,
            context,
            limit,
            stop,
            tx,
        ) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    }
}

/// Searches one file, sending its matches; binary files (a NUL byte) and
/// files with overlong lines yield none. `false`: the stream went away.
#[allow(clippy::too_many_arguments)]
fn search_file<B: Backend>(
    searcher: &mut Searcher,
    backend: &B,
    path: &CanonicalPath,
    matcher: &RegexMatcher,
    context: u32,
    limit: u64,
    stop: &AtomicBool,
    tx: &mpsc::Sender<Result<Searched>>,
) -> Result<bool> {
    let file = match backend.open(path) {
        Ok(f) => f,
        // Gone or replaced since the walk listed it: nothing to search.
        Err(
            Error::FileNotFound { .. }
            | Error::IsADirectory { .. }
            | Error::PermissionDenied { .. },
        ) => return Ok(true),
        Err(e) => return Err(e),
    };
    let io = |e| Error::from_io(e, path);
    let mut sink = StreamSink {
        path,
        matcher,
        context: context as u64,
        window: VecDeque::new(),
        pending: VecDeque::new(),
        matches: 0,
        limit,
        stop,
        tx,
        gone: false,
    };
    match &file.content {
        Content::Memory(data) => {
            if !searchable(&data[..]).map_err(io)? {
                return Ok(true);
            }
            searcher
                .search_slice(matcher, data, &mut sink)
                .map_err(io)?;
        }
        Content::Disk(f) => {
            if !searchable(ReadAt { file: f, at: 0 }).map_err(io)? {
                return Ok(true);
            }
            let mut reader = Watched {
                inner: ReadAt { file: f, at: 0 },
                failed: false,
            };
            match searcher.search_reader(matcher, &mut reader, &mut sink) {
                Ok(()) => {}
                Err(e) if reader.failed => return Err(io(e)),
                // The buffer limit: a line grew past it after the check
                // (the file changed meanwhile). The file ends there.
                Err(_) => {}
            }
        }
    }
    sink.flush();
    Ok(!sink.gone)
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
        .map(compile_glob)
        .transpose()?;
    let max = match query.max_matches {
        0 => GrepQuery::DEFAULT_MAX_MATCHES,
        n => n.min(MAX_MATCHES_CAP),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let parallel = (std::thread::available_parallelism().map_or(2, |n| n.get()) * 2)
        .min(MAX_BATCHES_IN_FLIGHT);

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

    let merge = Merge {
        paths: path_rx,
        walking: true,
        running: VecDeque::new(),
        parallel,
        search: Arc::new(BatchSearch {
            backend,
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

/// What every batch of one Grep is searched with.
struct BatchSearch<B> {
    backend: Arc<B>,
    matcher: Arc<RegexMatcher>,
    context: u32,
    limit: u64,
    stop: Arc<AtomicBool>,
}

impl<B: Backend> BatchSearch<B> {
    /// Starts searching `paths` on the blocking pool; its results arrive
    /// one at a time on the returned channel.
    fn start(self: &Arc<Self>, paths: Vec<CanonicalPath>) -> mpsc::Receiver<Result<Searched>> {
        let (tx, rx) = mpsc::channel(1);
        let search = self.clone();
        crate::producer::spawn_blocking("Grep", tx, move |tx| {
            search_batch(
                &*search.backend,
                &paths,
                &search.matcher,
                search.context,
                search.limit,
                &search.stop,
                &tx,
            )
        });
        rx
    }
}

/// A batch in flight, or the walker's failure in its place in the order.
enum Batch {
    Running(mpsc::Receiver<Result<Searched>>),
    Failed(Error),
}

/// The response stream's state: batches in flight in walk order, drained
/// front first.
struct Merge<B> {
    paths: mpsc::Receiver<Result<Vec<CanonicalPath>>>,
    walking: bool,
    running: VecDeque<Batch>,
    parallel: usize,
    search: Arc<BatchSearch<B>>,
    max: u64,
    summary: GrepSummary,
    done: bool,
    _stop: StopOnDrop,
    _active: crate::metrics::Gauge,
}

impl<B: Backend> Merge<B> {
    fn admit(&mut self, batch: Option<Result<Vec<CanonicalPath>>>) {
        match batch {
            Some(Ok(paths)) => {
                let rx = self.search.start(paths);
                self.running.push_back(Batch::Running(rx));
            }
            Some(Err(e)) => {
                self.running.push_back(Batch::Failed(e));
                self.walking = false;
            }
            None => self.walking = false,
        }
    }

    /// The next event, or `None` after the summary or an error.
    async fn next(&mut self) -> Option<Result<GrepEvent>> {
        use mpsc::error::TryRecvError;
        loop {
            if self.done {
                return None;
            }
            while self.walking && self.running.len() < self.parallel {
                match self.paths.try_recv() {
                    Ok(batch) => self.admit(Some(batch)),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => self.admit(None),
                }
            }
            let Some(front) = self.running.front_mut() else {
                if self.walking {
                    let batch = self.paths.recv().await;
                    self.admit(batch);
                    continue;
                }
                return Some(Ok(self.finish(false)));
            };
            let rx = match front {
                Batch::Failed(_) => {
                    let Some(Batch::Failed(e)) = self.running.pop_front() else {
                        unreachable!("the front is a failure");
                    };
                    self.done = true;
                    return Some(Err(e));
                }
                Batch::Running(rx) => rx,
            };
            match rx.recv().await {
                Some(Ok(Searched::File)) => self.summary.files_searched += 1,
                Some(Ok(Searched::Match(found))) => {
                    if self.summary.matches == self.max {
                        return Some(Ok(self.finish(true)));
                    }
                    self.summary.matches += 1;
                    return Some(Ok(found.into_event()));
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.running.pop_front();
                }
            }
        }
    }

    /// The summary, last; stops the searches still running.
    fn finish(&mut self, truncated: bool) -> GrepEvent {
        self.done = true;
        self.search.stop.store(true, Ordering::Relaxed);
        self.running.clear();
        self.summary.truncated = truncated;
        GrepEvent::Summary(self.summary)
    }
}
