//! Byte streams: ReadBytes and WriteBytes of one large file of
//! pseudo-random bytes over loopback, each beside a raw TCP copy of the
//! same bytes in this process (a tokio listener and stream; the file read
//! from disk on the sending side; the receiving side discards them for the
//! read figure, and for the write figure writes them to a new file on disk
//! that replaces the last run's, as a WriteBytes over a file does).
//! Then `wsfs get FILE -` of the same file, the CLI run as a person runs
//! it (a process, from start to exit, its output to /dev/null), beside the
//! same raw TCP read; a 4 KiB patch (WriteBytes in mode PATCH) into the
//! middle of the uploaded file beside the upload of the whole file; and the
//! server's peak memory growth while each stream runs.

use crate::corpus::Noise;
use crate::report::{Row, Samples, Target};
use crate::server::{MemoryGrowth, RssProbe};
use crate::wire::{self, Fs, TreeFile, DISK_READ_BYTES};
use futures::StreamExt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Channel;
use wsfs::proto;

const SOURCE_NAME: &str = "blob.bin";
const UPLOAD_NAME: &str = "upload.bin";
const RAW_UPLOAD_NAME: &str = "raw-upload.bin";
const RAW_NEW_NAME: &str = "raw-upload.bin.new";
const SCRATCH_NAME: &str = "scratch.bin";

/// Writes `size` pseudo-random bytes to `path`, once.
pub fn generate(path: &Path, size: u64) -> Result<(), String> {
    let io = |e: std::io::Error| format!("cannot write '{}': {e}", path.display());
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut noise = Noise::fixed(0x5eed_1234_abcd_ef01);
    let mut block = vec![0u8; DISK_READ_BYTES];
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        noise.fill(&mut block[..n]);
        out.write_all(&block[..n]).map_err(io)?;
        left -= n as u64;
    }
    out.flush().map_err(io)
}

async fn read_once(fs: &mut Fs, session: &str, size: u64) -> Result<Duration, String> {
    use proto::read_bytes_response::Payload;
    let started = Instant::now();
    let mut stream = fs
        .read_bytes(proto::ReadBytesRequest {
            session_id: session.to_string(),
            path: SOURCE_NAME.to_string(),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("ReadBytes failed: {}", s.message()))?
        .into_inner();
    let mut received = 0u64;
    while let Some(message) = stream.next().await {
        let message = message.map_err(|s| format!("ReadBytes stream failed: {}", s.message()))?;
        if let Some(Payload::Data(d)) = message.payload {
            received += d.len() as u64;
        }
    }
    let elapsed = started.elapsed();
    if received != size {
        return Err(format!("ReadBytes returned {received} of {size} bytes"));
    }
    Ok(elapsed)
}

/// Bytes a patch changes in the middle of the uploaded file.
const PATCH_BYTES: usize = 4096;

/// WriteBytes in mode PATCH: `PATCH_BYTES` at the middle of the file the
/// write runs left, which keeps its size.
async fn patch_once(fs: &mut Fs, session: &str, size: u64, run: u8) -> Result<Duration, String> {
    use proto::write_bytes_request::Payload;
    let header = proto::WriteBytesHeader {
        session_id: session.to_string(),
        path: UPLOAD_NAME.to_string(),
        mode: proto::WriteMode::Patch as i32,
        ..Default::default()
    };
    let messages = [
        Payload::Header(header),
        Payload::Offset(size / 2),
        Payload::Data(vec![run; PATCH_BYTES].into()),
    ]
    .map(|payload| proto::WriteBytesRequest {
        payload: Some(payload),
    });
    let started = Instant::now();
    let done = fs
        .write_bytes(futures::stream::iter(messages))
        .await
        .map_err(|s| format!("WriteBytes in mode PATCH failed: {}", s.message()))?
        .into_inner();
    let elapsed = started.elapsed();
    if done.size_bytes as u64 != size || done.bytes_written as usize != PATCH_BYTES {
        return Err(format!("the patch left {} bytes", done.size_bytes));
    }
    Ok(elapsed)
}

async fn write_once(fs: &mut Fs, session: &str, source: &Path) -> Result<Duration, String> {
    let started = Instant::now();
    wire::write_file(fs, session, UPLOAD_NAME, source).await?;
    Ok(started.elapsed())
}

/// Sends `source` from disk over a fresh loopback TCP connection: the
/// accepting side sends, the connecting side runs `receive` on its stream.
async fn raw_copy<F, Fut>(
    source: &Path,
    sender_accepts: bool,
    receive: F,
) -> Result<Duration, String>
where
    F: FnOnce(TcpStream) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<u64>>,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("raw TCP: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("raw TCP: {e}"))?;
    let size = std::fs::metadata(source)
        .map_err(|e| format!("raw TCP: {e}"))?
        .len();
    let source = source.to_path_buf();
    let send = |mut stream: TcpStream| async move {
        stream.set_nodelay(true)?;
        let mut file =
            BufReader::with_capacity(DISK_READ_BYTES, tokio::fs::File::open(&source).await?);
        let sent = tokio::io::copy_buf(&mut file, &mut stream).await?;
        stream.shutdown().await?;
        Ok::<u64, std::io::Error>(sent)
    };
    let started = Instant::now();
    let (sent, received) = if sender_accepts {
        let sender = tokio::spawn(async move { send(listener.accept().await?.0).await });
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("raw TCP: {e}"))?;
        let received = receive(stream).await;
        (sender.await, received)
    } else {
        let sender = tokio::spawn(async move { send(TcpStream::connect(addr).await?).await });
        let stream = listener
            .accept()
            .await
            .map_err(|e| format!("raw TCP: {e}"))?
            .0;
        let received = receive(stream).await;
        (sender.await, received)
    };
    let elapsed = started.elapsed();
    let sent = sent
        .map_err(|e| format!("raw TCP sender: {e}"))?
        .map_err(|e| format!("raw TCP sender: {e}"))?;
    let received = received.map_err(|e| format!("raw TCP receiver: {e}"))?;
    if sent != size || received != size {
        return Err(format!("raw TCP moved {sent}/{received} of {size} bytes"));
    }
    Ok(elapsed)
}

/// The raw read: the server side (accepting) sends the file, the client
/// side reads and discards.
async fn raw_read_once(source: &Path) -> Result<Duration, String> {
    raw_copy(source, true, |mut stream| async move {
        let mut buf = vec![0u8; wire::CHUNK_BYTES];
        let mut total = 0u64;
        loop {
            match stream.read(&mut buf).await? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    })
    .await
}

/// The raw write: the client side (connecting) sends the file, the server
/// side (accepting) writes it to a new file next to the source and swaps
/// it in for the last run's, then removes that one: the disk work of a
/// WriteBytes over an existing file, whose old content stays whole until
/// the new one is. (Truncating the old file and writing into it instead
/// lets the kernel reuse the old file's pages for the new bytes, which a
/// replacement that keeps the old content cannot do.)
async fn raw_write_once(source: &Path) -> Result<Duration, String> {
    let dest = source.with_file_name(RAW_UPLOAD_NAME);
    let new = source.with_file_name(RAW_NEW_NAME);
    raw_copy(source, false, |stream| async move {
        let mut file = tokio::fs::File::create(&new).await?;
        let mut incoming = BufReader::with_capacity(DISK_READ_BYTES, stream);
        let total = tokio::io::copy_buf(&mut incoming, &mut file).await?;
        file.flush().await?;
        drop(file);
        tokio::task::spawn_blocking(move || swap_in(&new, &dest))
            .await
            .map_err(std::io::Error::other)??;
        Ok(total)
    })
    .await
}

/// Copies `source` to a scratch file and removes it, untimed, so that the
/// write that follows fills pages just freed. On a virtual machine a page
/// the guest has not used lately can cost a fault in the host the first
/// time it is written: 1 GiB into the page cache took 0.3 s or 3 s
/// depending on which pages the kernel handed out, for any writer. Every
/// timed write starting from the same state keeps that out of the ratio.
fn recycle_memory(source: &Path) -> Result<(), String> {
    let scratch = source.with_file_name(SCRATCH_NAME);
    std::fs::copy(source, &scratch)
        .and_then(|_| std::fs::remove_file(&scratch))
        .map_err(|e| format!("cannot copy '{}' to a scratch file: {e}", source.display()))
}

/// Puts `new` at `dest` atomically, as the server's commit does: swapped
/// with the file there (which then goes), or renamed when there is none.
fn swap_in(new: &Path, dest: &Path) -> std::io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, new, CWD, dest, RenameFlags::EXCHANGE) {
        Ok(()) => std::fs::remove_file(new),
        Err(rustix::io::Errno::NOENT) => std::fs::rename(new, dest),
        Err(e) => Err(e.into()),
    }
}

/// Where the `wsfs` CLI is expected: next to this program.
pub fn sibling_cli() -> Option<PathBuf> {
    let bin = std::env::current_exe().ok()?.parent()?.join("wsfs");
    bin.is_file().then_some(bin)
}

/// Runs `wsfs ARGS...` against the session as a person runs it (a
/// process, its output discarded); the time from start to exit.
pub fn cli_once(
    cli: &Path,
    url: &str,
    session: &str,
    dir: &Path,
    args: &[&str],
) -> Result<Duration, String> {
    let mut command = std::process::Command::new(cli);
    command
        .args(args)
        .env("WSFS_SERVER", url)
        .env("WSFS_SESSION", session)
        .env("WSFS_CONFIG", dir.join("no-saved-context.json"))
        .env_remove("WSFS_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let started = Instant::now();
    let out = command
        .output()
        .map_err(|e| format!("cannot run '{}': {e}", cli.display()))?;
    let elapsed = started.elapsed();
    if !out.status.success() {
        return Err(format!(
            "`wsfs {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(elapsed)
}

/// `wsfs get SOURCE -` against the session, its output discarded.
async fn cli_get_once(
    cli: &Path,
    url: &str,
    session: &str,
    dir: &Path,
) -> Result<Duration, String> {
    let (cli, url, session, dir) = (
        cli.to_path_buf(),
        url.to_string(),
        session.to_string(),
        dir.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || {
        cli_once(&cli, &url, &session, &dir, &["get", SOURCE_NAME, "-"])
    })
    .await
    .map_err(|e| format!("`wsfs get` task failed: {e}"))?
}

fn mb_per_s(size: u64, d: Duration) -> f64 {
    size as f64 / d.as_secs_f64() / 1e6
}

pub fn size_label(size: u64) -> String {
    const GIB: u64 = 1 << 30;
    if size.is_multiple_of(GIB) {
        format!("{} GiB", size / GIB)
    } else {
        format!("{} MiB", size >> 20)
    }
}

pub async fn run(
    channel: &Channel,
    url: &str,
    dir: &Path,
    size: u64,
    runs: usize,
    rss: Option<&RssProbe>,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let source: PathBuf = dir.join(SOURCE_NAME);
    eprintln!(
        "bytes: writing {} of pseudo-random bytes...",
        size_label(size)
    );
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    generate(&source, size)?;
    let files = [TreeFile {
        local: source.clone(),
        path: SOURCE_NAME.to_string(),
        len: size,
    }];
    eprintln!("bytes: opening a DIRECTORY session over the file...");
    let max_write = (2u64 << 30).max(size * 2);
    let session = wire::tree_session(channel, dir, &files, max_write).await?;
    if let Some(note) = &session.note {
        notes.push(format!("ReadBytes/WriteBytes: {note}."));
    }
    let mut fs = wire::filesystem(channel);

    // The untimed warm-up transfers are the first of each kind on this
    // session, so they are the ones whose memory is watched: later ones
    // would reuse what the allocator kept from earlier ones.
    eprintln!("bytes: warming up (and watching server memory)...");
    let watch = |label: &str, r: Option<MemoryGrowth>| {
        r.map(|g| memory_row(format!("Server peak RSS growth during {label}"), g))
    };
    let label = size_label(size);
    let (result, read_memory) = watched(rss, read_once(&mut fs, &session.id, size)).await;
    result?;
    raw_read_once(&source).await?;
    let (result, write_memory) = watched(rss, write_once(&mut fs, &session.id, &source)).await;
    result?;
    raw_write_once(&source).await?;
    let memory_rows: Vec<Row> = [
        watch(&format!("ReadBytes {label}"), read_memory),
        watch(&format!("WriteBytes {label}"), write_memory),
    ]
    .into_iter()
    .flatten()
    .collect();
    if rss.is_none() {
        notes.push(
            "Memory: the server's process is not visible here, so its memory was not measured."
                .into(),
        );
    }

    let cli = sibling_cli();
    match &cli {
        Some(cli) => {
            cli_get_once(cli, url, &session.id, dir).await?;
        }
        None => notes.push(
            "`wsfs get`: no `wsfs` binary next to this program, so it was not measured \
             (build it with `cargo build --release -p wsfs-client`)."
                .into(),
        ),
    }

    let (mut read, mut raw_read, mut write, mut raw_write) = Default::default();
    let (mut get, mut patch_ms, mut write_ms) = Default::default();
    let ms = |s: &mut Samples, d: Duration| s.push(d.as_secs_f64() * 1000.0);
    let push = |s: &mut Samples, d: Duration| s.push(mb_per_s(size, d));
    for run in 1..=runs {
        eprintln!("bytes: run {run}/{runs}");
        push(&mut read, read_once(&mut fs, &session.id, size).await?);
        push(&mut raw_read, raw_read_once(&source).await?);
        // Each write goes first in every other run, and each starts on
        // memory just freed by an untimed copy of the file (see
        // `recycle_memory`).
        for first in [run % 2 == 1, run % 2 == 0] {
            recycle_memory(&source)?;
            if first {
                let took = write_once(&mut fs, &session.id, &source).await?;
                push(&mut write, took);
                ms(&mut write_ms, took);
            } else {
                push(&mut raw_write, raw_write_once(&source).await?);
            }
        }
        if let Some(cli) = &cli {
            push(&mut get, cli_get_once(cli, url, &session.id, dir).await?);
        }
        let took = patch_once(&mut fs, &session.id, size, run as u8).await?;
        ms(&mut patch_ms, took);
    }
    let mut rows = vec![
        Row::new(format!("ReadBytes {label}, throughput"), "MB/s", read)
            .baseline("raw TCP", raw_read.clone())
            .target(Target::AtLeastShare(0.7)),
        Row::new(
            format!("WriteBytes {label} in 64 KiB chunks, throughput"),
            "MB/s",
            write,
        )
        .baseline("raw TCP to a new file on disk, swapped in", raw_write)
        .target(Target::AtLeastShare(0.6)),
        Row::new(
            format!("WriteBytes in mode PATCH: {PATCH_BYTES} B into the {label} file, time"),
            "ms",
            patch_ms,
        )
        .baseline("WriteBytes of the whole file", write_ms)
        .target(Target::None),
    ];
    if cli.is_some() {
        rows.push(
            Row::new(
                format!("`wsfs get` {label} to /dev/null (a process, start to exit), throughput"),
                "MB/s",
                get,
            )
            .baseline("raw TCP", raw_read)
            .target(Target::AtLeastShare(0.6)),
        );
    }
    rows.extend(memory_rows);

    wire::delete_session(channel, &session.id).await;
    for name in [
        UPLOAD_NAME,
        RAW_UPLOAD_NAME,
        RAW_NEW_NAME,
        SCRATCH_NAME,
        SOURCE_NAME,
    ] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    Ok(rows)
}

async fn watched<F: std::future::Future>(
    rss: Option<&RssProbe>,
    work: F,
) -> (F::Output, Option<MemoryGrowth>) {
    match rss {
        Some(probe) => probe.watch(work).await,
        None => (work.await, None),
    }
}

fn memory_row(figure: String, g: MemoryGrowth) -> Row {
    let how = if g.kernel_peak {
        "VmHWM and 2 ms VmRSS samples"
    } else {
        "2 ms VmRSS samples"
    };
    Row::new(
        format!("{figure} ({how})"),
        "MiB",
        Samples::single(g.peak_growth_bytes as f64 / (1024.0 * 1024.0)),
    )
    .target(Target::AtMost(64.0))
}
