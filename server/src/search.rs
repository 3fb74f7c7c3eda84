//! Glob and grep over a backend, built on ripgrep's crates.
//!
//! Grep is parallel across files yet streamed in (path, line) order: one
//! blocking walker lists files lazily in path order and hands them out in
//! batches; each batch is searched on the blocking pool by `grep-searcher`
//! with a `grep-regex` matcher, in units: a unit searches until it has
//! gathered [`UNIT_BUDGET_BYTES`] of results (or the batch ends), then
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
//! while a unit runs its line buffer ([`SEARCH_BUFFER_BYTES`]), and a file
//! small enough to be read whole ([`SMALL_FILE_BYTES`]); with
//! `context_lines` at most [`MAX_CONTEXT_LINES`] that is under 1.5 MiB per
//! batch, 6 MiB per stream (about 0.4 MiB measured for a stalled reader
//! with 2 lines of context). Descriptors: per batch walked or in flight,
//! the directories its files were listed in (at most [`DIRS_PER_TASK`]:
//! a file is opened by name in the directory the walk found it in, not
//! resolved from the root again) and the file being searched; and the
//! walk's open directories, one per level.

use crate::backend::{Backend, Content, Listed, ListedFiles};
use futures::stream::{BoxStream, StreamExt};
use globset::GlobMatcher;
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// What a unit of search found, in order.
enum Searched {
    Match(Box<Found>),
    /// The search reached the next file of the batch (whether it is then
    /// searched or skipped as binary).
    File,
    /// The search failed; nothing follows.
    Failed(Error),
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

/// A file being searched, kept between units so a search can pause
/// (returning its thread) and resume where it stopped.
struct FileCursor {
    path: CanonicalPath,
    content: Content,
    /// Bytes of the file already searched.
    offset: u64,
    /// Lines before `offset`.
    lines: u64,
    /// Recent lines, in order: the last `context` lines, and every line
    /// from the oldest pending match's before-context on.
    window: VecDeque<Seen>,
    /// Matches whose after-context is not complete yet: line and span.
    pending: VecDeque<(u64, (u32, u32))>,
    matches: u64,
    /// The rest of the file is searched line by line (see [`search_some`]).
    every_line: bool,
}

/// A batch of files and how far its search got.
struct BatchCursor {
    paths: std::vec::IntoIter<Listed>,
    file: Option<FileCursor>,
}

/// Results one unit of search gathers before it gives its thread back:
/// a reader that stops reading holds at most this much per batch, plus
/// the match that crossed it.
const UNIT_BUDGET_BYTES: usize = 64 * 1024;

/// What a match holds in memory, near enough: each line's text, its
/// shared allocation and its slot, the path and the match itself.
fn cost(found: &Found) -> usize {
    const PER_LINE: usize = 64;
    const PER_MATCH: usize = 160;
    let line = |text: &str| text.len() + PER_LINE;
    line(&found.line)
        + found
            .before
            .iter()
            .chain(&found.after)
            .map(|l| line(&l.text))
            .sum::<usize>()
        + found.path.as_str().len()
        + PER_MATCH
}

/// Adds each match to the unit's results as soon as its after-context is
/// complete, keeping only the lines a pending or a future match can
/// still show; pauses the search when the unit's budget is spent.
struct UnitSink<'a> {
    file: &'a mut FileCursor,
    matcher: &'a RegexMatcher,
    context: u64,
    limit: u64,
    stop: &'a AtomicBool,
    found: &'a mut Vec<Searched>,
    spent: &'a mut usize,
    /// The end of the last line handled (bytes from where this search
    /// started) and its line number.
    last: (u64, u64),
    /// Why the search stopped before the end of the file, if it did.
    paused: Option<Pause>,
    /// This search reports every line, only to finish the after-context
    /// of matches found before a pause; it stops once they are done.
    catching_up: bool,
}

/// Why a search stopped before the end of its file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// The unit's budget is spent.
    Budget,
    /// The matches pending at the start are complete: the rest of the file
    /// goes back to the searcher's own context.
    CaughtUp,
}

impl UnitSink<'_> {
    fn line(&mut self, relative: (u64, u64), bytes: &[u8], is_match: bool) -> bool {
        if self.file.matches >= self.limit {
            return false;
        }
        let number = self.file.lines + relative.0;
        // Lines past every pending match's after-context complete them.
        while let Some(&(m, _)) = self.file.pending.front() {
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
            self.file
                .pending
                .push_back((number, (clamp(span.0), clamp(span.1))));
            self.file.matches += 1;
        }
        cut_line(&mut text);
        self.file.window.push_back(Seen {
            number,
            text: text.into(),
        });
        let keep_from = self.file.pending.front().map_or(number + 1, |&(m, _)| m);
        while self
            .file
            .window
            .front()
            .is_some_and(|l| l.number + self.context < keep_from)
        {
            self.file.window.pop_front();
        }
        self.last = (relative.1 + bytes.len() as u64, number);
        if *self.spent >= UNIT_BUDGET_BYTES {
            self.paused = Some(Pause::Budget);
            return false;
        }
        if self.catching_up && self.file.pending.is_empty() {
            self.paused = Some(Pause::CaughtUp);
            return false;
        }
        self.file.matches < self.limit && !self.stop.load(Ordering::Relaxed)
    }

    /// Adds the oldest pending match with the context the window holds.
    fn emit_front(&mut self) {
        let Some((number, span)) = self.file.pending.pop_front() else {
            return;
        };
        let (mut before, mut after, mut line) = (Vec::new(), Vec::new(), None);
        for l in &self.file.window {
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
            path: self.file.path.clone(),
            line_number: number,
            line: line.unwrap_or_else(|| Arc::from("")),
            span,
            before,
            after,
        };
        *self.spent += cost(&found);
        self.found.push(Searched::Match(Box::new(found)));
    }

    /// Adds every match still pending: the file ended.
    fn flush(&mut self) {
        while !self.file.pending.is_empty() {
            self.emit_front();
        }
    }
}

impl Sink for UnitSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        let at = (mat.line_number().unwrap_or(0), mat.absolute_byte_offset());
        Ok(self.line(at, mat.bytes(), true))
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        let at = (ctx.line_number().unwrap_or(0), ctx.absolute_byte_offset());
        Ok(self.line(at, ctx.bytes(), false))
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        // Only when the file changed after it was checked: stop there.
        Ok(false)
    }
}

/// What [`Scan`] looks at, at a time; less than
/// [`MAX_SEARCHED_LINE_BYTES`].
const SCAN_CHUNK_BYTES: usize = 64 * 1024;

/// Whether a file is searched: no NUL byte (binary) and no line longer
/// than [`MAX_SEARCHED_LINE_BYTES`]. Decided before any match of the file
/// is sent, by the same rule on every backend, on the raw bytes (no
/// byte-order-mark decoding).
#[derive(Default)]
struct Scan {
    /// Bytes of the line running out of the last chunk.
    line: usize,
}

impl Scan {
    /// Looks at the next chunk (at most [`SCAN_CHUNK_BYTES`]); `false`
    /// once the file is not searched.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        if memchr::memchr(0, chunk).is_some() {
            return false;
        }
        // A chunk is shorter than the longest searched line, so only the
        // line running into it and the one running out of it can be too
        // long: two searches per chunk, not one per line.
        match (memchr::memchr(b'\n', chunk), memchr::memrchr(b'\n', chunk)) {
            (Some(first), Some(last)) => {
                if self.line + first > MAX_SEARCHED_LINE_BYTES {
                    return false;
                }
                self.line = chunk.len() - last - 1;
            }
            _ => self.line += chunk.len(),
        }
        self.line <= MAX_SEARCHED_LINE_BYTES
    }

    fn bytes(data: &[u8]) -> bool {
        let mut scan = Scan::default();
        data.chunks(SCAN_CHUNK_BYTES).all(|c| scan.feed(c))
    }

    fn reader(mut reader: impl Read) -> std::io::Result<bool> {
        let mut scan = Scan::default();
        let mut buf = vec![0u8; SCAN_CHUNK_BYTES];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return Ok(true),
                Ok(n) if !scan.feed(&buf[..n]) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
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

/// Files at most this long are read whole in one pass, then checked and
/// searched in memory; longer ones are read twice (checked, then searched)
/// through the searcher's bounded buffer. Most source files are smaller.
const SMALL_FILE_BYTES: usize = 32 * 1024;

/// The whole of `file` when it holds at most [`SMALL_FILE_BYTES`]; `None`
/// as soon as it is longer. `size` is its size when it was opened: a file
/// that size is read in one call, and what is appended after that call is
/// not searched (as if the search had come a moment earlier).
fn read_small(file: &std::fs::File, size: u64) -> std::io::Result<Option<bytes::Bytes>> {
    use std::os::unix::fs::FileExt;
    if size > SMALL_FILE_BYTES as u64 {
        return Ok(None);
    }
    // One byte more than the size, to see a file that grew.
    let mut data = vec![0u8; size as usize + 1];
    let mut len = 0;
    loop {
        if len == data.len() {
            if len > SMALL_FILE_BYTES {
                return Ok(None);
            }
            data.resize((len * 2).min(SMALL_FILE_BYTES + 1), 0);
        }
        match file.read_at(&mut data[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len as u64 == size {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if len > SMALL_FILE_BYTES {
        return Ok(None);
    }
    data.truncate(len);
    Ok(Some(data.into()))
}

/// Files handed to one batch: enough to amortise the hand-off between
/// threads (32 measured 1.3x rg's time over 16,000 files, 128 1.2x), few
/// enough that a stopped search wastes little.
const FILES_PER_TASK: usize = 128;

/// Directories whose files one batch may hold: each listed file keeps its
/// directory open until it is searched, so a tree with a directory per
/// file would otherwise hold a descriptor per file in flight.
const DIRS_PER_TASK: usize = 32;

/// What one unit of search produced, and the cursor to resume from
/// (`None` once the batch is done).
struct Unit {
    cursor: Option<BatchCursor>,
    found: Vec<Searched>,
}

/// Opens a file for searching, or `None` when it is skipped: gone since
/// the walk listed it, binary (a NUL byte), or with an overlong line.
fn open_searchable<B: Backend>(backend: &B, file: Listed) -> Result<Option<FileCursor>> {
    let (content, size) = match backend.open_listed(&file) {
        Ok(opened) => opened,
        Err(
            Error::FileNotFound { .. }
            | Error::IsADirectory { .. }
            | Error::PermissionDenied { .. },
        ) => return Ok(None),
        Err(e) => return Err(e),
    };
    let path = file.path;
    let content = match content {
        Content::Disk(f) => match read_small(&f, size).map_err(|e| Error::from_io(e, &path))? {
            Some(data) => Content::Memory(data),
            None => Content::Disk(f),
        },
        memory => memory,
    };
    let searchable = match &content {
        Content::Memory(data) => Scan::bytes(data),
        Content::Disk(f) => {
            Scan::reader(ReadAt { file: f, at: 0 }).map_err(|e| Error::from_io(e, &path))?
        }
    };
    Ok(searchable.then(|| FileCursor {
        path,
        content,
        offset: 0,
        lines: 0,
        window: VecDeque::new(),
        pending: VecDeque::new(),
        matches: 0,
        every_line: false,
    }))
}

/// How far one search of a file got.
enum Step {
    /// The file is done.
    Finished,
    /// The unit's budget is spent; the file resumes in the next unit.
    Paused,
    /// The file goes on at once, in the other mode.
    Switch,
}

/// The searchers of one unit: reporting context lines itself (only those
/// near matches, the fast way), or every line for the sink to keep.
struct Searchers {
    near: Searcher,
    every: Searcher,
}

impl Searchers {
    fn new(context: u32) -> Searchers {
        let build = |passthru: bool| {
            let context = if passthru { 0 } else { context as usize };
            SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .bom_sniffing(false)
                .heap_limit(Some(SEARCH_BUFFER_BYTES))
                .line_number(true)
                .before_context(context)
                .after_context(context)
                .passthru(passthru)
                .build()
        };
        Searchers {
            near: build(false),
            every: build(context > 0),
        }
    }
}

/// Searches from where the file's cursor stopped until the file ends or
/// the unit's budget is spent.
///
/// The searcher reports context lines itself, but keeps the lines before
/// a match in its buffer, which [`SEARCH_BUFFER_BYTES`] bounds: many long
/// lines of context can pass it. Then (DIRECTORY files only; MEMORY files
/// are searched in place) the rest of the file is searched reporting
/// every line, and the sink keeps the context, cut short. A file resumed
/// with matches still waiting for after-context is searched the same way
/// until they are complete.
fn search_some(
    searchers: &mut Searchers,
    file: &mut FileCursor,
    search: &SearchSpec,
    found: &mut Vec<Searched>,
    spent: &mut usize,
) -> Result<Step> {
    let every_line = search.context > 0 && (file.every_line || !file.pending.is_empty());
    let searcher = if every_line {
        &mut searchers.every
    } else {
        &mut searchers.near
    };
    // Taken out while the sink holds the cursor, put back after.
    let content = std::mem::replace(&mut file.content, Content::Memory(Default::default()));
    let (offset, path) = (file.offset, file.path.clone());
    let catching_up = every_line && !file.every_line;
    let mut sink = UnitSink {
        file,
        matcher: &search.matcher,
        context: search.context as u64,
        limit: search.limit,
        stop: &search.stop,
        found,
        spent,
        last: (0, 0),
        paused: None,
        catching_up,
    };
    let io = |e| Error::from_io(e, &path);
    let mut overflowed = false;
    let searched = match &content {
        Content::Memory(data) => {
            let rest = &data[(offset as usize).min(data.len())..];
            searcher
                .search_slice(&*search.matcher, rest, &mut sink)
                .map_err(io)
        }
        Content::Disk(f) => {
            let mut reader = Watched {
                inner: ReadAt {
                    file: f,
                    at: offset,
                },
                failed: false,
            };
            match searcher.search_reader(&*search.matcher, &mut reader, &mut sink) {
                Err(e) if reader.failed => Err(io(e)),
                // The buffer limit.
                Err(_) => {
                    overflowed = true;
                    Ok(())
                }
                Ok(()) => Ok(()),
            }
        }
    };
    let resume = |sink: &mut UnitSink<'_>| {
        let (end, number) = sink.last;
        sink.file.offset += end;
        sink.file.lines = number;
    };
    let step = searched.map(|()| match sink.paused {
        Some(pause) => {
            resume(&mut sink);
            match pause {
                Pause::Budget => Step::Paused,
                Pause::CaughtUp => Step::Switch,
            }
        }
        // Lines before a match outgrew the buffer: the rest line by line.
        None if overflowed && !every_line => {
            resume(&mut sink);
            sink.file.every_line = true;
            Step::Switch
        }
        // The end of the file, or a line that outgrew the buffer after the
        // file was checked (it changed meanwhile): the file ends there.
        None => {
            sink.flush();
            Step::Finished
        }
    });
    file.content = content;
    step
}

/// Runs one unit of a batch's search on the calling (blocking) thread:
/// files in order until the batch ends or the unit's budget is spent.
fn run_unit<B: Backend>(search: &SearchSpec, backend: &B, mut cursor: BatchCursor) -> Unit {
    let mut searchers = Searchers::new(search.context);
    let (mut found, mut spent) = (Vec::new(), 0usize);
    loop {
        if search.stop.load(Ordering::Relaxed) {
            return Unit {
                cursor: None,
                found,
            };
        }
        let file = match cursor.file.as_mut() {
            Some(file) => file,
            None => {
                let Some(listed) = cursor.paths.next() else {
                    return Unit {
                        cursor: None,
                        found,
                    };
                };
                found.push(Searched::File);
                match open_searchable(backend, listed) {
                    Ok(Some(file)) => cursor.file.insert(file),
                    Ok(None) => continue,
                    Err(e) => {
                        found.push(Searched::Failed(e));
                        return Unit {
                            cursor: None,
                            found,
                        };
                    }
                }
            }
        };
        match search_some(&mut searchers, file, search, &mut found, &mut spent) {
            Ok(Step::Finished) => cursor.file = None,
            Ok(Step::Paused | Step::Switch) => {}
            Err(e) => {
                found.push(Searched::Failed(e));
                return Unit {
                    cursor: None,
                    found,
                };
            }
        }
        if spent >= UNIT_BUDGET_BYTES {
            return Unit {
                cursor: Some(cursor),
                found,
            };
        }
    }
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
        .map(crate::glob::compile_glob)
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

/// The files a Grep walks: under `base`, matching `filter`.
struct WalkSpec {
    base: CanonicalPath,
    filter: Option<GlobMatcher>,
}

/// A walk of the tree in path order, lazy and resumable like the search.
type Files = ListedFiles;

/// Where the walk is: not started or paused (`Idle`), one unit running,
/// or finished.
enum Walk {
    Idle(Option<Files>),
    Running(tokio::task::JoinHandle<Walked>),
    Done,
}

/// What one unit of the walk produced: batches (or the failure that ended
/// the walk, last), and the walk to resume (`None` once it is done).
struct Walked {
    files: Option<Files>,
    batches: Vec<Result<Vec<Listed>>>,
}

/// Runs one unit of the walk on the calling (blocking) thread: up to
/// [`MAX_BATCHES_IN_FLIGHT`] batches, or to the end of the tree.
fn walk_unit<B: Backend>(
    backend: &B,
    spec: &WalkSpec,
    stop: &AtomicBool,
    files: Option<Files>,
) -> Walked {
    let mut files = match files.map_or_else(|| backend.walk_listed(&spec.base), Ok) {
        Ok(files) => files,
        Err(e) => {
            return Walked {
                files: None,
                batches: vec![Err(e)],
            }
        }
    };
    let mut batches = Vec::new();
    let mut batch: Vec<Listed> = Vec::with_capacity(FILES_PER_TASK);
    let mut dirs = 0;
    while batches.len() < MAX_BATCHES_IN_FLIGHT {
        if stop.load(Ordering::Relaxed) {
            return Walked {
                files: None,
                batches,
            };
        }
        let file = match files.next() {
            Some(Ok(file)) => file,
            end => {
                if !batch.is_empty() {
                    batches.push(Ok(batch));
                }
                if let Some(Err(e)) = end {
                    batches.push(Err(e));
                }
                return Walked {
                    files: None,
                    batches,
                };
            }
        };
        let path = &file.path;
        crate::faults::check_stream(path.as_str());
        let keep = spec.filter.as_ref().is_none_or(|g| {
            g.is_match(
                path.strip_prefix(&spec.base)
                    .unwrap_or_else(|| path.clone())
                    .as_str(),
            )
        });
        if keep {
            if file.holds_new_dir(batch.last()) {
                dirs += 1;
            }
            batch.push(file);
        }
        if batch.len() == FILES_PER_TASK || dirs == DIRS_PER_TASK {
            dirs = 0;
            batches.push(Ok(std::mem::replace(
                &mut batch,
                Vec::with_capacity(FILES_PER_TASK),
            )));
        }
    }
    if !batch.is_empty() {
        batches.push(Ok(batch));
    }
    Walked {
        files: Some(files),
        batches,
    }
}

/// The error a failed unit (walk or search) ends the stream with.
fn unit_failed(e: tokio::task::JoinError) -> Error {
    match e.try_into_panic() {
        Ok(panic) => crate::producer::panicked("Grep", &*panic),
        Err(e) => Error::internal(format!("search task failed: {e}")),
    }
}

/// What every batch of one Grep is searched with.
struct SearchSpec {
    matcher: Arc<RegexMatcher>,
    context: u32,
    /// Matches per file after which its search stops.
    limit: u64,
    stop: Arc<AtomicBool>,
}

/// A batch in walk order: a unit of its search running on the blocking
/// pool, its results waiting to be sent, or the walker's failure in its
/// place in the order.
enum Slot {
    Running(tokio::task::JoinHandle<Unit>),
    Ready {
        found: std::vec::IntoIter<Searched>,
        rest: Option<BatchCursor>,
    },
    Failed(Error),
}

/// The response stream's state: batches in walk order, the front one
/// drained first. No thread waits on a client: a unit runs until its
/// budget is spent and returns; the next unit of a batch starts only
/// when its results have been sent.
struct Merge<B> {
    walk: Walk,
    /// Batches walked and not started yet, in order.
    walked: VecDeque<Result<Vec<Listed>>>,
    slots: VecDeque<Slot>,
    parallel: usize,
    backend: Arc<B>,
    walking: Arc<WalkSpec>,
    search: Arc<SearchSpec>,
    max: u64,
    summary: GrepSummary,
    done: bool,
    _stop: StopOnDrop,
    _active: crate::metrics::Gauge,
}

impl<B: Backend> Merge<B> {
    /// Starts the next unit of a batch's search on the blocking pool.
    fn resume(search: &Arc<SearchSpec>, backend: &Arc<B>, cursor: BatchCursor) -> Slot {
        let (search, backend) = (search.clone(), backend.clone());
        Slot::Running(tokio::task::spawn_blocking(move || {
            run_unit(&search, &*backend, cursor)
        }))
    }

    /// Starts the walked batches while fewer than `parallel` are in
    /// flight, and the next unit of the walk when none are left.
    fn admit(&mut self) {
        while self.slots.len() < self.parallel {
            let Some(batch) = self.walked.pop_front() else {
                break;
            };
            let slot = match batch {
                Ok(paths) => Self::resume(
                    &self.search,
                    &self.backend,
                    BatchCursor {
                        paths: paths.into_iter(),
                        file: None,
                    },
                ),
                Err(e) => Slot::Failed(e),
            };
            self.slots.push_back(slot);
        }
        if self.walked.is_empty() {
            if let Walk::Idle(files) = &mut self.walk {
                let (files, backend) = (files.take(), self.backend.clone());
                let (spec, stop) = (self.walking.clone(), self.search.stop.clone());
                self.walk = Walk::Running(tokio::task::spawn_blocking(move || {
                    walk_unit(&*backend, &spec, &stop, files)
                }));
            }
        }
    }

    /// Waits for the running unit of the walk and takes its batches.
    async fn walked(&mut self) -> Result<()> {
        if let Walk::Running(unit) = &mut self.walk {
            let walked = unit.await.map_err(unit_failed)?;
            self.walked.extend(walked.batches);
            self.walk = walked.files.map_or(Walk::Done, |f| Walk::Idle(Some(f)));
        }
        Ok(())
    }

    /// The next event, or `None` after the summary or an error.
    async fn next(&mut self) -> Option<Result<GrepEvent>> {
        loop {
            if self.done {
                return None;
            }
            if matches!(&self.walk, Walk::Running(unit) if unit.is_finished()) {
                if let Err(e) = self.walked().await {
                    return Some(Err(self.fail(e)));
                }
            }
            self.admit();
            let Some(front) = self.slots.front_mut() else {
                if matches!(self.walk, Walk::Done) && self.walked.is_empty() {
                    return Some(Ok(self.finish(false)));
                }
                if let Err(e) = self.walked().await {
                    return Some(Err(self.fail(e)));
                }
                continue;
            };
            match front {
                Slot::Failed(_) => {
                    let Some(Slot::Failed(e)) = self.slots.pop_front() else {
                        unreachable!("the front is a failure");
                    };
                    return Some(Err(self.fail(e)));
                }
                Slot::Running(unit) => match unit.await {
                    Ok(unit) => {
                        *front = Slot::Ready {
                            found: unit.found.into_iter(),
                            rest: unit.cursor,
                        }
                    }
                    Err(e) => {
                        let e = unit_failed(e);
                        return Some(Err(self.fail(e)));
                    }
                },
                Slot::Ready { found, rest } => match found.next() {
                    Some(Searched::File) => self.summary.files_searched += 1,
                    Some(Searched::Match(m)) => {
                        if self.summary.matches == self.max {
                            return Some(Ok(self.finish(true)));
                        }
                        self.summary.matches += 1;
                        return Some(Ok(m.into_event()));
                    }
                    Some(Searched::Failed(e)) => return Some(Err(self.fail(e))),
                    None => match rest.take() {
                        Some(cursor) => *front = Self::resume(&self.search, &self.backend, cursor),
                        None => {
                            self.slots.pop_front();
                        }
                    },
                },
            }
        }
    }

    /// Ends the stream with `error`; stops the searches still running.
    fn fail(&mut self, error: Error) -> Error {
        self.done = true;
        self.search.stop.store(true, Ordering::Relaxed);
        self.slots.clear();
        error
    }

    /// The summary, last; stops the searches still running.
    fn finish(&mut self, truncated: bool) -> GrepEvent {
        self.done = true;
        self.search.stop.store(true, Ordering::Relaxed);
        self.slots.clear();
        self.summary.truncated = truncated;
        GrepEvent::Summary(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[usize]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|&n| std::iter::repeat_n(b'x', n).chain([b'\n']))
            .collect()
    }

    #[test]
    fn the_longest_searched_line_is_searched_one_more_byte_is_not() {
        let most = MAX_SEARCHED_LINE_BYTES;
        // Lines placed so that they start and end inside chunks, and span
        // several of them.
        for before in [0, 1, 1000, SCAN_CHUNK_BYTES - 1, SCAN_CHUNK_BYTES] {
            for (long, searched) in [(most, true), (most + 1, false)] {
                let data = text(&[before, long, 10]);
                assert_eq!(Scan::bytes(&data), searched, "{before} then {long}");
                assert_eq!(Scan::reader(&data[..]).unwrap(), searched);
            }
        }
        // Without a final newline, and many short lines.
        assert!(!Scan::bytes(&vec![b'x'; most + 1]));
        assert!(Scan::bytes(&text(&[100; 10_000])));
    }

    #[test]
    fn a_nul_byte_anywhere_is_binary() {
        let mut data = text(&[100; 5_000]);
        assert!(Scan::bytes(&data));
        let at = data.len() - 3;
        data[at] = 0;
        assert!(!Scan::bytes(&data));
    }
}
