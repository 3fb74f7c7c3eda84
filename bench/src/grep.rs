//! Grep through the server over the corpus, beside `rg -n --no-ignore
//! --hidden` over the same directory (wsfs searches every file and ignores
//! nothing, so rg is told to do the same). Both run warm: one untimed pass
//! each before the timed ones. A wsfs run is the full stream, consumed by
//! this client, up to the summary; an rg run is the process from start to
//! exit with its output read through a pipe. Each pattern is measured on
//! a DIRECTORY session rooted at the corpus, then on a MEMORY session the
//! corpus is uploaded into.

use crate::corpus::Corpus;
use crate::report::{Row, Samples, Target};
use crate::wire::{self, Fs};
use futures::StreamExt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use wsfs::proto;

/// Matches one Grep may return (the server's cap); high enough that no
/// benchmark pattern is cut short.
const MAX_MATCHES: u32 = 100_000;

/// Regexes tried, in order, for the "a few hundred matches" figure; the
/// first whose match count on this corpus lands in `WANTED_MATCHES` wins
/// (else the one nearest 300).
const REGEX_CANDIDATES: &[&str] = &[
    r"#\[inline\(never\)\]",
    r"fn [a-z_]+_unchecked\(",
    r"\b[Uu]ndefined [Bb]ehaviou?r\b",
    r"impl<T: \?Sized \+ [A-Z][a-z]+>",
    r"TODO\(\w+\)",
    r"\bunreachable_unchecked\(",
];
const WANTED_MATCHES: std::ops::RangeInclusive<u64> = 100..=1000;

struct Outcome {
    elapsed: Duration,
    matches: u64,
    files: u64,
}

async fn wsfs_grep(
    fs: &mut Fs,
    session: &str,
    pattern: &str,
    fixed: bool,
) -> Result<Outcome, String> {
    use proto::grep_response::Payload;
    let started = Instant::now();
    let mut stream = fs
        .grep(proto::GrepRequest {
            session_id: session.to_string(),
            pattern: pattern.to_string(),
            fixed_string: fixed,
            max_matches: MAX_MATCHES,
            ..Default::default()
        })
        .await
        .map_err(|s| format!("Grep failed: {}", s.message()))?
        .into_inner();
    let mut received = 0u64;
    let mut summary = None;
    while let Some(message) = stream.next().await {
        match message.map_err(|s| format!("Grep stream failed: {}", s.message()))? {
            proto::GrepResponse {
                payload: Some(Payload::Match(_)),
            } => received += 1,
            proto::GrepResponse {
                payload: Some(Payload::Summary(s)),
            } => summary = Some(s),
            _ => {}
        }
    }
    let elapsed = started.elapsed();
    let summary = summary.ok_or("the Grep stream ended without a summary")?;
    if summary.truncated || summary.matches != received {
        return Err(format!(
            "Grep was cut short ({} matches received, summary says {}, truncated {})",
            received, summary.matches, summary.truncated
        ));
    }
    Ok(Outcome {
        elapsed,
        matches: received,
        files: summary.files_searched,
    })
}

/// One `rg` run; the matches are the lines it prints.
fn rg_grep(dir: &Path, pattern: &str, fixed: bool) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut cmd = Command::new("rg");
    cmd.args(["-n", "--no-ignore", "--hidden"]);
    if fixed {
        cmd.arg("-F");
    }
    let mut child = cmd
        .arg("--")
        .arg(pattern)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run rg: {e}"))?;
    let mut out = child.stdout.take().ok_or("rg has no stdout")?;
    let mut lines = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64,
            Err(e) => return Err(format!("reading rg's output: {e}")),
        }
    }
    let status = child.wait().map_err(|e| format!("rg: {e}"))?;
    let elapsed = started.elapsed();
    // rg exits 1 when nothing matched; 2 is an error (it may still have
    // searched everything else, so the count is kept).
    if status.code() == Some(2) {
        eprintln!("  rg reported errors (exit 2) for {pattern:?}");
    }
    Ok(Outcome {
        elapsed,
        matches: lines,
        files: 0,
    })
}

async fn rg(dir: &Path, pattern: &str, fixed: bool) -> Result<Outcome, String> {
    let (dir, pattern): (PathBuf, String) = (dir.to_path_buf(), pattern.to_string());
    tokio::task::spawn_blocking(move || rg_grep(&dir, &pattern, fixed))
        .await
        .map_err(|e| format!("rg task: {e}"))?
}

/// Picks the regex for the "few hundred matches" figure by counting the
/// candidates through the server (which also warms it up).
async fn choose_regex(fs: &mut Fs, session: &str) -> Result<(String, u64), String> {
    let mut counted = Vec::new();
    for candidate in REGEX_CANDIDATES {
        let n = wsfs_grep(fs, session, candidate, false).await?.matches;
        eprintln!("  candidate regex {candidate:?}: {n} matches");
        if WANTED_MATCHES.contains(&n) {
            return Ok((candidate.to_string(), n));
        }
        counted.push((candidate.to_string(), n));
    }
    let distance = |n: u64| ((n.max(1) as f64) / 300.0).ln().abs();
    counted
        .into_iter()
        .min_by(|a, b| distance(a.1).total_cmp(&distance(b.1)))
        .ok_or_else(|| "no regex candidates".to_string())
}

fn markdown_code(s: &str) -> String {
    format!("`{}`", s.replace('|', "\\|"))
}

pub async fn run(
    channel: &Channel,
    corpus: &Corpus,
    runs: usize,
    regex: Option<String>,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    eprintln!("grep: opening a DIRECTORY session over the corpus...");
    let session = wire::tree_session(channel, &corpus.dir, &corpus.files, 1 << 30).await?;
    if let Some(note) = &session.note {
        notes.push(format!("Grep: {note}."));
    }
    let mut fs = wire::filesystem(channel);

    let (regex, _) = match regex {
        Some(r) => (r, 0),
        None => choose_regex(&mut fs, &session.id).await?,
    };
    let patterns = [
        (corpus.literal.clone(), true, "rare literal"),
        (regex, false, "regex"),
    ];

    let mut rows = measure(
        &mut fs,
        &session.id,
        "DIRECTORY",
        corpus,
        &patterns,
        runs,
        notes,
    )
    .await?;
    wire::delete_session(channel, &session.id).await;

    eprintln!(
        "grep: uploading the corpus into a MEMORY session ({} files)...",
        corpus.files.len()
    );
    let memory = wire::memory_session(channel, &corpus.files).await?;
    let measured = measure(&mut fs, &memory, "MEMORY", corpus, &patterns, runs, notes).await;
    wire::delete_session(channel, &memory).await;
    rows.extend(measured?);
    Ok(rows)
}

/// Files in the small tree: the issue's 2,000 small files.
const SMALL_TREE_FILES: usize = 2_000;

/// Bytes in the small tree: about 1.5 KiB per file.
const SMALL_TREE_BYTES: u64 = 3 << 20;

/// A regex with a match on most lines of the small tree (tens of
/// thousands): what a search costs per match.
const MANY_MATCHES: &str = "fn [a-z]+";

/// Grep over a tree of [`SMALL_TREE_FILES`] small source-like files made
/// under `dir`, on a DIRECTORY and a MEMORY session, each beside rg: a
/// rare literal (cost per file) and [`MANY_MATCHES`] (cost per match).
pub async fn small_tree(
    channel: &Channel,
    dir: &Path,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    eprintln!("grep: writing {SMALL_TREE_FILES} small source-like files...");
    crate::trees::source_like(dir, SMALL_TREE_FILES, SMALL_TREE_BYTES)?;
    let tree = crate::corpus::existing(dir)?;
    let session = wire::tree_session(channel, &tree.dir, &tree.files, 1 << 30).await?;
    if let Some(note) = &session.note {
        notes.push(format!("Grep, small tree: {note}."));
    }
    let mut fs = wire::filesystem(channel);
    let patterns = [
        (tree.literal.clone(), true, "rare literal"),
        (MANY_MATCHES.to_string(), false, "regex"),
    ];
    let mut rows = measure(
        &mut fs,
        &session.id,
        "DIRECTORY",
        &tree,
        &patterns,
        runs,
        notes,
    )
    .await?;
    wire::delete_session(channel, &session.id).await;
    let memory = wire::memory_session(channel, &tree.files).await?;
    let measured = measure(&mut fs, &memory, "MEMORY", &tree, &patterns, runs, notes).await;
    wire::delete_session(channel, &memory).await;
    rows.extend(measured?);
    let _ = std::fs::remove_dir_all(dir);
    Ok(rows)
}

/// Each pattern through `session` (a `backend` session holding the
/// corpus), beside rg over the corpus on disk, run for run.
async fn measure(
    fs: &mut Fs,
    session: &str,
    backend: &str,
    corpus: &Corpus,
    patterns: &[(String, bool, &str)],
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (pattern, fixed, kind) in patterns {
        let (pattern, fixed) = (pattern.as_str(), *fixed);
        eprintln!("grep: {backend} {kind} {pattern:?}: warming up...");
        let warm = wsfs_grep(fs, session, pattern, fixed).await?;
        let rg_warm = rg(&corpus.dir, pattern, fixed).await?;
        let mut ours = Samples::default();
        let mut theirs = Samples::default();
        for run in 1..=runs {
            eprintln!("grep: {backend} {kind}: run {run}/{runs}");
            let o = wsfs_grep(fs, session, pattern, fixed).await?;
            ours.push(o.elapsed.as_secs_f64());
            if o.matches != warm.matches {
                notes.push(format!(
                    "warning: wsfs grep for {pattern:?} found {} matches in one run and {} in another.",
                    warm.matches, o.matches
                ));
            }
            theirs.push(rg(&corpus.dir, pattern, fixed).await?.elapsed.as_secs_f64());
        }
        let counts = format!("wsfs {} / rg {} matches", warm.matches, rg_warm.matches);
        if rg_warm.matches != warm.matches {
            notes.push(format!(
                "warning: match counts differ for {pattern:?} ({backend}): wsfs {}, rg {}.",
                warm.matches, rg_warm.matches
            ));
        }
        let figure = format!(
            "Grep {kind} {}, {backend} session ({counts}; {} files, {:.0} MB), wall time",
            markdown_code(pattern),
            warm.files,
            corpus.bytes as f64 / 1e6
        );
        rows.push(
            Row::new(figure, "s", ours)
                .baseline("rg", theirs)
                .target(Target::AtMostTimes(1.2)),
        );
    }
    Ok(rows)
}
