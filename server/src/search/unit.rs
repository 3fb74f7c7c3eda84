//! Units of search: a batch of files searched on a blocking thread until
//! the batch ends or the unit's budget is spent, then resumed from its
//! cursor once its results have been sent.

use super::scan::{read_small, ReadAt, Scan, Watched};
use super::sink::{Pause, Searched, Seen, UnitSink, UNIT_BUDGET_BYTES};
use super::MAX_SEARCHED_LINE_BYTES;
use crate::backend::{Backend, Content, Listed};
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Result};

/// Most bytes one searcher's line buffer may grow to; twice the longest
/// searched line, so a line that passed the check always fits.
const SEARCH_BUFFER_BYTES: usize = 2 * MAX_SEARCHED_LINE_BYTES;

/// A file being searched, kept between units so a search can pause
/// (returning its thread) and resume where it stopped.
pub(super) struct FileCursor {
    pub(super) path: CanonicalPath,
    pub(super) content: Content,
    /// Bytes of the file already searched.
    pub(super) offset: u64,
    /// Lines before `offset`.
    pub(super) lines: u64,
    /// Recent lines, in order: the last `context` lines, and every line
    /// from the oldest pending match's before-context on.
    pub(super) window: VecDeque<Seen>,
    /// Matches whose after-context is not complete yet: line and span.
    pub(super) pending: VecDeque<(u64, (u32, u32))>,
    pub(super) matches: u64,
    /// The rest of the file is searched line by line (see [`search_some`]).
    pub(super) every_line: bool,
}

/// A batch of files and how far its search got.
pub(super) struct BatchCursor {
    pub(super) paths: std::vec::IntoIter<Listed>,
    pub(super) file: Option<FileCursor>,
}

/// What every batch of one Grep is searched with.
pub(super) struct SearchSpec {
    pub(super) matcher: Arc<RegexMatcher>,
    pub(super) context: u32,
    /// Matches per file after which its search stops.
    pub(super) limit: u64,
    pub(super) stop: Arc<AtomicBool>,
}

/// What one unit of search produced, and the cursor to resume from
/// (`None` once the batch is done).
pub(super) struct Unit {
    pub(super) cursor: Option<BatchCursor>,
    pub(super) found: Vec<Searched>,
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
pub(super) fn run_unit<B: Backend>(
    search: &SearchSpec,
    backend: &B,
    mut cursor: BatchCursor,
) -> Unit {
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
