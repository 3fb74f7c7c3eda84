//! Search and change commands: glob, grep, watch.

use super::args::{ColorChoice, GlobArgs, GrepArgs, WatchArgs};
use super::output::{self, print_json, println};
use super::{Ctx, Failure, Outcome};
use futures::StreamExt;
use serde_json::json;
use std::io::IsTerminal;
use std::time::SystemTime;
use wsfs_client::{
    parse_path, ChangeEvent, ChangeKind, ContextLine, Filesystem, GrepEvent, GrepMatch,
};

pub async fn glob(ctx: &mut Ctx, args: GlobArgs) -> Outcome {
    let session = ctx.session().await?;
    let mut query = session.glob_query(args.pattern).path(&args.path);
    if let Some(max) = args.max {
        query = query.max_results(max);
    }
    let outcome = query.run().await?;
    if ctx.json {
        let paths: Vec<_> = outcome.paths.iter().map(|p| p.as_str()).collect();
        return print_json(&json!({"paths": paths, "truncated": outcome.truncated}));
    }
    for path in &outcome.paths {
        println(path.as_str())?;
    }
    if outcome.truncated {
        eprintln!("wsfs: more paths match; raise --max to see them");
    }
    Ok(())
}

/// ANSI styles for grep's output, or none.
struct Palette {
    on: bool,
}

impl Palette {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

pub async fn grep(ctx: &mut Ctx, args: GrepArgs) -> Outcome {
    let session = ctx.session().await?;
    let palette = Palette {
        on: match args.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                !ctx.json
                    && std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none()
            }
        },
    };
    let shape = Shape::of(&args);
    let paths = if args.paths.is_empty() {
        vec![String::new()]
    } else {
        args.paths.clone()
    };
    // As rg: a PATH that fails is reported and the others are searched;
    // any failure makes the exit status 2, whatever matched.
    let mut matched = false;
    let mut failed = None;
    for path in &paths {
        match grep_one(ctx, &session, &args, &shape, path, &palette).await {
            Ok(found) => matched |= found,
            Err(failure) if paths.len() == 1 => return Err(failure),
            Err(failure) => {
                let (reason, message) = failure.text();
                eprintln!("wsfs: {}: {reason}: {message}", display_path(path));
                failed = Some(failure);
            }
        }
    }
    match (failed, matched) {
        (Some(_), _) => Err(Failure::Silent(2)),
        (None, true) => Ok(()),
        (None, false) => Err(Failure::Silent(1)),
    }
}

/// What the output looks like, from the flags.
struct Shape {
    before: u32,
    after: u32,
    /// Per file, not per match: `-l` or `-c`.
    per_file: Option<PerFile>,
    only_matching: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PerFile {
    Names,
    Counts,
}

impl Shape {
    fn of(args: &GrepArgs) -> Shape {
        let context = args.context.unwrap_or(0);
        Shape {
            before: args.before_context.unwrap_or(context),
            after: args.after_context.unwrap_or(context),
            per_file: if args.files_with_matches {
                Some(PerFile::Names)
            } else if args.count {
                Some(PerFile::Counts)
            } else {
                None
            },
            only_matching: args.only_matching,
        }
    }
}

/// `-w` as ripgrep and grep: the pattern, as a group, between word
/// boundaries; a literal is escaped first, since the result is a regex.
fn word_pattern(pattern: &str, literal: bool) -> String {
    let inner = if literal {
        regex_syntax::escape(pattern)
    } else {
        pattern.to_string()
    };
    format!(r"\b(?:{inner})\b")
}

/// Searches one PATH; true when something matched.
async fn grep_one(
    ctx: &Ctx,
    session: &wsfs_client::Session,
    args: &GrepArgs,
    shape: &Shape,
    path: &str,
    palette: &Palette,
) -> Outcome<bool> {
    let pattern = if args.word_regexp {
        word_pattern(&args.pattern, args.fixed_strings)
    } else {
        args.pattern.clone()
    };
    let mut query = session.grep_query(pattern).path(path);
    if args.ignore_case {
        query = query.case_insensitive();
    }
    if args.fixed_strings && !args.word_regexp {
        query = query.fixed_string();
    }
    if let Some(glob) = &args.glob {
        query = query.glob(file_glob(glob.clone()));
    }
    let explicit_max = args.max.is_some();
    let max = args.max.or(shape.per_file.map(|_| PER_FILE_MAX_MATCHES));
    if let Some(max) = max {
        query = query.max_matches(max);
    }
    let context = shape.before.max(shape.after);
    if context > 0 && shape.per_file.is_none() {
        query = query.context(context);
    }
    let mut events = query.stream().await?;
    let mut printer = GrepPrinter::default();
    // The file being counted, for -l and -c.
    let mut counting: Option<(String, u64)> = None;
    while let Some(event) = events.next().await {
        match event? {
            GrepEvent::Match(mut m) => {
                if let Some(per_file) = shape.per_file {
                    let path = m.path.as_str();
                    match &mut counting {
                        Some((p, n)) if p == path => *n += 1,
                        _ => {
                            if let Some((p, n)) = counting.take() {
                                print_per_file(ctx, per_file, &p, n, palette)?;
                            }
                            counting = Some((path.to_string(), 1));
                        }
                    }
                    continue;
                }
                trim_context(&mut m, shape);
                if ctx.json {
                    print_json(&match_json(&m))?;
                } else if shape.only_matching {
                    printer.only_match(&m, palette)?;
                } else {
                    printer.print(&m, palette)?;
                }
            }
            GrepEvent::Summary(summary) => {
                if let (Some(per_file), Some((p, n))) = (shape.per_file, counting.take()) {
                    print_per_file(ctx, per_file, &p, n, palette)?;
                }
                if ctx.json {
                    print_json(&json!({
                        "type": "summary",
                        "path": path,
                        "files_searched": summary.files_searched,
                        "matches": summary.matches,
                        "truncated": summary.truncated,
                    }))?;
                } else if summary.truncated && !ctx.quiet {
                    let hint = if explicit_max {
                        "(--max)"
                    } else {
                        "; raise --max to see more"
                    };
                    eprintln!("wsfs: stopped after {} matches{hint}", summary.matches);
                }
                // As rg: a PATH that does not exist is an error, not a
                // search that found nothing (the server's Grep, like Glob,
                // treats a missing base as empty).
                if summary.files_searched == 0 && !path.is_empty() {
                    let base = parse_path(path)?;
                    if session.exists(&base).await?.is_none() {
                        return Err(wsfs_client::Error::FileNotFound {
                            path: base.as_str().to_string(),
                        }
                        .into());
                    }
                }
                return Ok(summary.matches > 0);
            }
        }
    }
    Err(wsfs_client::Error::internal("the Grep stream ended without its summary").into())
}

/// Matches asked for with -l and -c when --max is not given: enough to
/// name and count the files of any ordinary tree.
const PER_FILE_MAX_MATCHES: u64 = 1_000_000;

fn print_per_file(
    ctx: &Ctx,
    per_file: PerFile,
    path: &str,
    count: u64,
    palette: &Palette,
) -> Outcome {
    if ctx.json {
        return print_json(&json!({"type": "file", "path": path, "matches": count}));
    }
    let shown = palette.paint("35", path);
    match per_file {
        PerFile::Names => println(&shown),
        PerFile::Counts => println(&format!("{shown}:{count}")),
    }
}

/// The server sends the same context on both sides: keep what -A and -B
/// ask for.
fn trim_context(m: &mut GrepMatch, shape: &Shape) {
    let before = shape.before as usize;
    if m.before.len() > before {
        m.before.drain(..m.before.len() - before);
    }
    m.after.truncate(shape.after as usize);
}

/// As ripgrep's `--glob`: a pattern without `/` names files at any depth
/// (`*.rs` is `**/*.rs`); one with `/` matches the path from the base.
fn file_glob(glob: String) -> String {
    if glob.contains('/') {
        glob
    } else {
        format!("**/{glob}")
    }
}

fn match_json(m: &GrepMatch) -> serde_json::Value {
    let lines = |lines: &[ContextLine]| -> Vec<serde_json::Value> {
        lines
            .iter()
            .map(|c| json!({"line_number": c.line_number, "line": c.line}))
            .collect()
    };
    json!({
        "type": "match",
        "path": m.path.as_str(),
        "line_number": m.line_number,
        "line": m.line,
        "match_start": m.match_start,
        "match_end": m.match_end,
        "before": lines(&m.before),
        "after": lines(&m.after),
    })
}

/// Prints matches as ripgrep does: `path:line:text` for matches,
/// `path-line-text` for context, `--` between groups that do not touch.
/// Each match carries its own context, so lines already printed are
/// skipped.
#[derive(Default)]
struct GrepPrinter {
    last: Option<(String, u64)>,
}

impl GrepPrinter {
    fn print(&mut self, m: &GrepMatch, palette: &Palette) -> Outcome {
        let path = m.path.as_str();
        let first = m.before.first().map_or(m.line_number, |c| c.line_number);
        if let Some((last_path, last_line)) = &self.last {
            let with_context = !m.before.is_empty() || !m.after.is_empty();
            if with_context && (last_path != path || first > last_line + 1) {
                println(&palette.paint("36", "--"))?;
            }
        }
        for c in &m.before {
            self.line(path, c.line_number, '-', &c.line, palette)?;
        }
        if self.fresh(path, m.line_number) {
            let start = (m.match_start as usize).min(m.line.len());
            let end = (m.match_end as usize).clamp(start, m.line.len());
            let text = match (
                m.line.get(..start),
                m.line.get(start..end),
                m.line.get(end..),
            ) {
                (Some(a), Some(b), Some(c)) if palette.on => {
                    format!("{a}{}{c}", palette.paint("1;31", b))
                }
                _ => m.line.clone(),
            };
            self.emit(path, m.line_number, ':', &text, palette)?;
        }
        for c in &m.after {
            self.line(path, c.line_number, '-', &c.line, palette)?;
        }
        Ok(())
    }

    /// `-o`: the matched text alone, as `path:line:text`.
    fn only_match(&mut self, m: &GrepMatch, palette: &Palette) -> Outcome {
        let start = (m.match_start as usize).min(m.line.len());
        let end = (m.match_end as usize).clamp(start, m.line.len());
        let text = m.line.get(start..end).unwrap_or_default();
        let shown = palette.paint("1;31", text);
        self.emit(m.path.as_str(), m.line_number, ':', &shown, palette)
    }

    fn fresh(&self, path: &str, line: u64) -> bool {
        !matches!(&self.last, Some((p, l)) if p == path && *l >= line)
    }

    fn line(
        &mut self,
        path: &str,
        number: u64,
        sep: char,
        text: &str,
        palette: &Palette,
    ) -> Outcome {
        if self.fresh(path, number) {
            self.emit(path, number, sep, text, palette)?;
        }
        Ok(())
    }

    fn emit(
        &mut self,
        path: &str,
        number: u64,
        sep: char,
        text: &str,
        palette: &Palette,
    ) -> Outcome {
        self.last = Some((path.to_string(), number));
        println(&format!(
            "{}{sep}{}{sep}{text}",
            palette.paint("35", path),
            palette.paint("32", &number.to_string())
        ))
    }
}

pub async fn watch(ctx: &mut Ctx, args: WatchArgs) -> Outcome {
    let path = parse_path(&args.path)?;
    let session = ctx.session().await?;
    let open = |since: u64| {
        let mut watch = session.watch(path.as_str()).since(since);
        if !args.shallow {
            watch = watch.recursive();
        }
        if let Some(glob) = &args.glob {
            watch = watch.glob(glob);
        }
        watch.stream()
    };
    let (mut events, mut replayed) = match args.since {
        Some(0) => from_the_first(&session, &path, &args, open).await?,
        since => (open(since.unwrap_or(0)).await?, None),
    };
    while let Some(event) = events.next().await {
        let event = event?;
        let ready = event.kind == ChangeKind::Ready as i32;
        print_event(ctx, &event)?;
        // The first event, replayed by hand, goes right after READY.
        if ready {
            if let Some(first) = replayed.take() {
                print_event(ctx, &first)?;
            }
        }
    }
    Ok(())
}

type Events = futures::stream::BoxStream<'static, wsfs_client::Result<ChangeEvent>>;

/// `--since 0`: every event the server still holds. The server reads a
/// Watch's since_seq 0 as "from now" and resumes after any other seq, so
/// the stream resumes after the first held event, which is fetched with
/// Changes and filtered here as the stream's own filter would. Returns the
/// stream and that first event, when it is in scope.
async fn from_the_first<F, Fut>(
    session: &wsfs_client::Session,
    base: &wsfs_client::CanonicalPath,
    args: &WatchArgs,
    open: F,
) -> Outcome<(Events, Option<ChangeEvent>)>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = wsfs_client::Result<Events>>,
{
    let scope = Scope::new(base, !args.shallow, args.glob.as_deref())?;
    loop {
        let first = session.changes(0, 1).await?;
        // With no event yet, the seq the log began at.
        let began_at = first.next_seq;
        if first.resync {
            // Events from the start are gone: the stream says RESYNC.
            return Ok((open(1).await?, None));
        }
        if let Some(event) = first.events.into_iter().next() {
            let stream = open(event.seq).await?;
            return Ok((stream, Some(event).filter(|e| scope.matches(e))));
        }
        // Nothing yet: from now is from the start, unless a change came
        // between the two calls (READY's seq says), then look again.
        let mut stream = open(0).await?;
        match stream.next().await {
            Some(Ok(ready)) if ready.seq == began_at => {
                let stream = futures::stream::once(async move { Ok(ready) })
                    .chain(stream)
                    .boxed();
                return Ok((stream, None));
            }
            Some(Err(e)) => return Err(e.into()),
            _ => continue,
        }
    }
}

/// The paths a Watch reports, as the server's Watch filter decides them:
/// at or under the base (only its own entries when shallow), and matching
/// the glob, relative to the base, when there is one.
struct Scope {
    base: String,
    recursive: bool,
    glob: Option<globset::GlobMatcher>,
}

impl Scope {
    fn new(
        base: &wsfs_client::CanonicalPath,
        recursive: bool,
        glob: Option<&str>,
    ) -> Outcome<Scope> {
        let glob = match glob {
            Some(g) => Some(
                globset::GlobBuilder::new(g)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| Failure::Usage(format!("bad glob '{g}': {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        Ok(Scope {
            base: base.as_str().to_string(),
            recursive,
            glob,
        })
    }

    fn matches_path(&self, raw: &str) -> bool {
        let relative = if self.base.is_empty() {
            raw
        } else if raw == self.base {
            ""
        } else {
            match raw
                .strip_prefix(self.base.as_str())
                .and_then(|r| r.strip_prefix('/'))
            {
                Some(rest) => rest,
                None => return false,
            }
        };
        if !self.recursive && relative.contains('/') {
            return false;
        }
        self.glob
            .as_ref()
            .is_none_or(|g| !relative.is_empty() && g.is_match(relative))
    }

    fn matches(&self, event: &ChangeEvent) -> bool {
        self.matches_path(&event.path)
            || (!event.to_path.is_empty() && self.matches_path(&event.to_path))
    }
}

fn print_event(ctx: &Ctx, event: &ChangeEvent) -> Outcome {
    let kind = ChangeKind::try_from(event.kind)
        .map(|k| k.as_str_name().to_string())
        .unwrap_or_else(|_| event.kind.to_string());
    if ctx.json {
        return print_json(&json!({
            "seq": event.seq,
            "kind": kind,
            "path": event.path,
            "to_path": event.to_path,
            "version": event.version,
            "caller": event.caller,
            "at": event.at.and_then(|t| SystemTime::try_from(t).ok()).map(output::time),
        }));
    }
    if kind == "KEEPALIVE" {
        return Ok(());
    }
    let mut line = format!("{} {kind} {}", event.seq, event.path);
    if !event.to_path.is_empty() {
        line.push_str(&format!(" -> {}", event.to_path));
    }
    if !event.caller.is_empty() {
        line.push_str(&format!(" by {}", event.caller));
    }
    println(&line)
}

/// A PATH as the user gave it, the root shown as `/`.
fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}
