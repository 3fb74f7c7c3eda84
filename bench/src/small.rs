//! Small calls under concurrency: 16 callers share one connection (as
//! clones of one client do) and each makes its share of a fixed number of
//! Stat, then Read, calls on one small text file, then of List calls on a
//! directory of 1,000 files (a tenth as many), beside the same List on a
//! MEMORY session. Then Write and Edit calls (a tenth as many), each
//! caller on a file of its own, beside the same calls from one caller:
//! changes to different files of one session run in parallel, so 16
//! callers should get more done than one. Reported: calls per second over
//! the whole batch, and the p50 and p99 latency of one call.

use crate::report::{percentile, Row, Samples};
use crate::wire::{self, Fs, TreeFile};
use std::path::Path;
use std::time::Instant;
use tonic::transport::Channel;
use wsfs::proto;

pub const CALLERS: usize = 16;
const FILE_NAME: &str = "notes.txt";
/// Lines in the small file; about 6 KiB.
const FILE_LINES: usize = 100;
/// The directory the List calls list, and how many files it holds.
const LIST_DIR: &str = "listing";
const LIST_ENTRIES: usize = 1000;

/// Where each caller's own file for Write and Edit lives.
const MUTATED_DIR: &str = "mutated";
/// Bytes of each Write.
const WRITE_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy)]
enum Call {
    Stat,
    Read,
    List,
    Write,
    Edit,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Stat => "Stat",
            Call::Read => "Read (whole 100-line file)",
            Call::List => "List of a 1000-entry directory",
            Call::Write => "Write (1 KiB, over the caller's own file)",
            Call::Edit => "Edit (one line of the caller's own 100-line file)",
        }
    }

    /// The file caller `caller` changes, for Write and Edit.
    fn own_file(self, caller: usize) -> String {
        let kind = if matches!(self, Call::Edit) {
            "edit"
        } else {
            "write"
        };
        format!("{MUTATED_DIR}/{kind}-{caller:02}.txt")
    }

    /// What caller `caller` does before the clock starts: Edit rewrites
    /// its file so that round 0 finds `state: 0` in it.
    async fn prepare(self, fs: &mut Fs, session: &str, caller: usize) -> Result<(), String> {
        if !matches!(self, Call::Edit) {
            return Ok(());
        }
        let content: String = (1..FILE_LINES)
            .map(|i| format!("line {i:03}: the quick brown fox jumps over the lazy dog, again.\n"))
            .chain(std::iter::once("state: 0\n".to_string()))
            .collect();
        fs.write(proto::WriteRequest {
            session_id: session.to_string(),
            path: self.own_file(caller),
            content,
            ..Default::default()
        })
        .await
        .map(drop)
        .map_err(|s| format!("preparing {}: {}", self.name(), s.message()))
    }

    /// Call number `round` of caller `caller`.
    async fn once(
        self,
        fs: &mut Fs,
        session: &str,
        caller: usize,
        round: usize,
    ) -> Result<(), String> {
        let (session_id, path) = (session.to_string(), FILE_NAME.to_string());
        let ok = match self {
            Call::Stat => fs
                .stat(proto::StatRequest { session_id, path })
                .await
                .map(|r| r.into_inner().size_bytes > 0),
            Call::Read => fs
                .read(proto::ReadRequest {
                    session_id,
                    path,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().total_lines == FILE_LINES as i64),
            Call::List => fs
                .list(proto::ListRequest {
                    session_id,
                    path: LIST_DIR.to_string(),
                    depth: 1,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().entries.len() == LIST_ENTRIES),
            Call::Write => fs
                .write(proto::WriteRequest {
                    session_id,
                    path: self.own_file(caller),
                    content: "w".repeat(WRITE_BYTES),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().bytes_written == WRITE_BYTES as i64),
            Call::Edit => fs
                .edit(proto::EditRequest {
                    session_id,
                    path: self.own_file(caller),
                    old_text: format!("state: {round}\n"),
                    new_text: format!("state: {}\n", round + 1),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().replacements == 1),
        };
        match ok {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("{} returned the wrong file", self.name())),
            Err(s) => Err(format!("{} failed: {}", self.name(), s.message())),
        }
    }
}

struct Batch {
    ops_per_s: f64,
    /// Latencies of every call, in milliseconds, sorted.
    latencies_ms: Vec<f64>,
}

/// `total` calls shared by `callers` concurrent callers, timed from when
/// every caller is prepared.
async fn batch(
    channel: &Channel,
    session: &str,
    call: Call,
    callers: usize,
    total: usize,
) -> Result<Batch, String> {
    let per_caller = total.div_ceil(callers);
    let ready = std::sync::Arc::new(tokio::sync::Barrier::new(callers + 1));
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let mut fs = wire::filesystem(channel);
            let (session, ready) = (session.to_string(), ready.clone());
            tokio::spawn(async move {
                let prepared = call.prepare(&mut fs, &session, caller).await;
                ready.wait().await;
                prepared?;
                let mut latencies = Vec::with_capacity(per_caller);
                for round in 0..per_caller {
                    let t = Instant::now();
                    call.once(&mut fs, &session, caller, round).await?;
                    latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    ready.wait().await;
    let started = Instant::now();
    let mut latencies_ms = Vec::with_capacity(per_caller * callers);
    for c in tasks {
        latencies_ms.extend(c.await.map_err(|e| format!("caller task: {e}"))??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(Batch {
        ops_per_s: latencies_ms.len() as f64 / elapsed,
        latencies_ms,
    })
}

pub async fn run(
    channel: &Channel,
    dir: &Path,
    ops: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    let local = dir.join(FILE_NAME);
    let text: String = (1..=FILE_LINES)
        .map(|i| format!("line {i:03}: the quick brown fox jumps over the lazy dog, again.\n"))
        .collect();
    std::fs::write(&local, &text)
        .map_err(|e| format!("cannot write '{}': {e}", local.display()))?;
    let mut files = vec![TreeFile {
        local,
        path: FILE_NAME.to_string(),
        len: text.len() as u64,
    }];
    let list_dir = dir.join(LIST_DIR);
    std::fs::create_dir_all(&list_dir)
        .map_err(|e| format!("cannot create '{}': {e}", list_dir.display()))?;
    for i in 0..LIST_ENTRIES {
        let name = format!("f{i:04}.txt");
        let local = list_dir.join(&name);
        let body = format!("file {i}\n");
        std::fs::write(&local, &body)
            .map_err(|e| format!("cannot write '{}': {e}", local.display()))?;
        files.push(TreeFile {
            local,
            path: format!("{LIST_DIR}/{name}"),
            len: body.len() as u64,
        });
    }
    eprintln!("small: opening a DIRECTORY session over a small file and a directory...");
    let session = wire::tree_session(channel, dir, &files, 1 << 20).await?;
    if let Some(note) = &session.note {
        notes.push(format!("Stat/Read: {note}."));
    }

    let mut rows = Vec::new();
    for call in [Call::Stat, Call::Read] {
        eprintln!("small: {}: warming up...", call.name());
        batch(channel, &session.id, call, CALLERS, (ops / 10).max(CALLERS)).await?;
        let (mut rate, mut p50, mut p99) =
            (Samples::default(), Samples::default(), Samples::default());
        for run in 1..=runs {
            eprintln!("small: {}: run {run}/{runs}", call.name());
            let b = batch(channel, &session.id, call, CALLERS, ops).await?;
            rate.push(b.ops_per_s);
            p50.push(percentile(&b.latencies_ms, 0.50));
            p99.push(percentile(&b.latencies_ms, 0.99));
        }
        let what = format!("{}, {CALLERS} callers, {ops} calls", call.name());
        rows.push(Row::new(format!("{what}: throughput"), "calls/s", rate));
        rows.push(Row::new(format!("{what}: p50 latency"), "ms", p50));
        rows.push(Row::new(format!("{what}: p99 latency"), "ms", p99));
    }

    // List: fewer calls, each a thousand entries; MEMORY is the baseline.
    eprintln!("small: List: the same directory in a MEMORY session...");
    let memory = wire::memory_session(channel, &files[1..]).await?;
    let list_ops = (ops / 10).max(CALLERS);
    let (mut directory_rate, mut memory_rate) = (Samples::default(), Samples::default());
    for id in [&session.id, &memory] {
        batch(
            channel,
            id,
            Call::List,
            CALLERS,
            (list_ops / 10).max(CALLERS),
        )
        .await?;
    }
    for run in 1..=runs {
        eprintln!("small: List: run {run}/{runs}");
        let b = batch(channel, &session.id, Call::List, CALLERS, list_ops).await?;
        directory_rate.push(b.ops_per_s);
        let b = batch(channel, &memory, Call::List, CALLERS, list_ops).await?;
        memory_rate.push(b.ops_per_s);
    }
    rows.push(
        Row::new(
            format!(
                "{}, DIRECTORY, {CALLERS} callers, {list_ops} calls: throughput",
                Call::List.name()
            ),
            "lists/s",
            directory_rate,
        )
        .baseline("MEMORY session", memory_rate),
    );
    wire::delete_session(channel, &memory).await;

    // Write and Edit: 16 callers on different files beside one caller.
    let change_ops = (ops / 10).max(CALLERS);
    for call in [Call::Write, Call::Edit] {
        eprintln!("small: {}: warming up...", call.name());
        batch(
            channel,
            &session.id,
            call,
            CALLERS,
            (change_ops / 10).max(CALLERS),
        )
        .await?;
        let (mut many, mut one) = (Samples::default(), Samples::default());
        for run in 1..=runs {
            eprintln!("small: {}: run {run}/{runs}", call.name());
            let b = batch(channel, &session.id, call, CALLERS, change_ops).await?;
            many.push(b.ops_per_s);
            let b = batch(channel, &session.id, call, 1, change_ops).await?;
            one.push(b.ops_per_s);
        }
        rows.push(
            Row::new(
                format!(
                    "{}, {CALLERS} callers on different files, DIRECTORY, {change_ops} calls: throughput",
                    call.name()
                ),
                "calls/s",
                many,
            )
            .baseline("1 caller", one),
        );
    }
    wire::delete_session(channel, &session.id).await;
    Ok(rows)
}
