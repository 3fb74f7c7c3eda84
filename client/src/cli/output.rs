//! Printing: JSON documents, lines, times, kinds, and progress bars.

use super::{Failure, Outcome};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::time::SystemTime;
use wsfs_client::{FileKind, Metadata};

/// Transfers at least this large get a progress bar on a terminal.
pub const PROGRESS_THRESHOLD: u64 = 8 * 1024 * 1024;

pub fn print_json(value: &Value) -> Outcome {
    println(&value.to_string())
}

/// A line on stdout. A closed pipe (`wsfs ls | head`) ends the command
/// quietly rather than as an error.
pub fn println(line: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").map_err(stdout_failed)
}

/// Raw bytes on stdout.
pub fn print_raw(bytes: &[u8]) -> Outcome {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(stdout_failed)
}

/// RFC 3339, UTC, whole seconds.
pub fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn kind(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symlink",
    }
}

pub fn metadata(m: &Metadata) -> Value {
    json!({
        "path": m.path.as_str(),
        "name": m.name(),
        "kind": kind(m.kind),
        "size_bytes": m.size,
        "created_at": time(m.created),
        "modified_at": time(m.modified),
        "version": m.version,
        "permissions": m.permissions.bits(),
        "mode": m.permissions.to_string(),
    })
}

/// A spinner with the time spent, on stderr, while one long call runs
/// (a snapshot or restore of a large tree answers only when done); shown
/// only on a terminal, without `--quiet` or `--json`. Clear it when the
/// call returns.
pub fn working(label: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let spinner = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{msg} {spinner} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.set_message(label.to_string());
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    spinner
}

/// A bar on stderr for a transfer of `total` bytes (or of `total` files
/// with `unit` "files"), shown only on a terminal, for large transfers,
/// without `--quiet` or `--json`.
pub fn progress(total: Option<u64>, threshold: u64, quiet: bool, label: &str) -> ProgressBar {
    let wanted = !quiet && std::io::stderr().is_terminal() && total.is_none_or(|t| t >= threshold);
    if !wanted {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{msg} {spinner} {bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_message(label.to_string());
    bar
}

/// `1.5 MiB`, for people.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

/// A failed write to stdout: a closed pipe (`wsfs cat f | head -1`) ends
/// the command quietly, as coreutils do; anything else is reported.
pub fn stdout_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::Silent(0)
    } else {
        Failure::Local(format!("cannot write to stdout: {e}"))
    }
}

/// Tokio's stdout, remembering whether the reader went away, for writes
/// made by library calls that turn the I/O error into their own.
pub struct Stdout {
    inner: tokio::io::Stdout,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Stdout {
    pub fn new() -> (Stdout, std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out = Stdout {
            inner: tokio::io::stdout(),
            closed: closed.clone(),
        };
        (out, closed)
    }

    fn watch<T>(&self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                self.closed
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        result
    }
}

impl tokio::io::AsyncWrite for Stdout {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        polled.map(|r| self.watch(r))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        polled.map(|r| self.watch(r))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_shutdown(cx);
        polled.map(|r| self.watch(r))
    }
}
