//! What a unit of search reports: each match with its context, kept only
//! as long as a pending or a future match can still show a line, within
//! the unit's budget.

use super::unit::FileCursor;
use super::MAX_LINE_BYTES;
use grep_matcher::Matcher;
use grep_regex::RegexMatcher;
use grep_searcher::{Searcher, Sink, SinkContext, SinkMatch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, ContextLine, Error, GrepEvent, GrepMatch};

/// A line the searcher reported, cut to [`MAX_LINE_BYTES`].
pub(super) struct Seen {
    number: u64,
    text: Arc<str>,
}

/// A match whose context is complete, its lines shared with the window
/// until the response stream turns it into a message.
pub(super) struct Found {
    path: CanonicalPath,
    line_number: u64,
    line: Arc<str>,
    span: (u32, u32),
    before: Vec<Seen>,
    after: Vec<Seen>,
}

impl Found {
    pub(super) fn into_event(self) -> GrepEvent {
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
pub(super) enum Searched {
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

/// Results one unit of search gathers before it gives its thread back:
/// a reader that stops reading holds at most this much per batch, plus
/// the match that crossed it.
pub(super) const UNIT_BUDGET_BYTES: usize = 64 * 1024;

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
pub(super) struct UnitSink<'a> {
    pub(super) file: &'a mut FileCursor,
    pub(super) matcher: &'a RegexMatcher,
    pub(super) context: u64,
    pub(super) limit: u64,
    pub(super) stop: &'a AtomicBool,
    pub(super) found: &'a mut Vec<Searched>,
    pub(super) spent: &'a mut usize,
    /// The end of the last line handled (bytes from where this search
    /// started) and its line number.
    pub(super) last: (u64, u64),
    /// Why the search stopped before the end of the file, if it did.
    pub(super) paused: Option<Pause>,
    /// This search reports every line, only to finish the after-context
    /// of matches found before a pause; it stops once they are done.
    pub(super) catching_up: bool,
}

/// Why a search stopped before the end of its file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pause {
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
    pub(super) fn flush(&mut self) {
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
