//! # wsfs-bench
//!
//! A program that measures wsfs and prints each figure beside a baseline
//! measured in the same run (it asserts nothing about time):
//!
//! - [`grep`]: Grep through the server over a source tree of 200 MB or
//!   more, beside `rg` over the same directory;
//! - [`bytes`]: ReadBytes and WriteBytes of a 1 GiB file, beside a raw TCP
//!   loopback copy, and the server's peak memory growth while they run;
//! - [`small`]: Stat and small Read calls from 16 concurrent callers, and
//!   their List of a 1,000-file directory beside the same on a MEMORY session;
//! - [`snapshot`]: Snapshot and Restore of a 10,000-file workspace beside
//!   git;
//! - [`archive`]: ExportArchive, ImportArchive and host mounts beside
//!   `zip`, `unzip` and `cp -r`.
//! - [`fork`]: a fork of a 10,000-file DIRECTORY snapshot beside `cp -r`;
//! - [`container`]: small calls and Grep on a CONTAINER session beside a
//!   DIRECTORY session on the same tree (only when asked for by name).
//! - [`durability`]: small Writes, a Snapshot and a Restore on a server in
//!   each `--durability` mode, `fsync` beside `none`.
//! - [`mount`]: real programs (`tar`, `git`, `rm`) and large-file reads
//!   and writes in a session mounted with `wsfs mount`, beside the same on
//!   local disk and beside `wsfs get`/`wsfs put` (skipped, with a note,
//!   where FUSE is unavailable);
//! - [`objstore`]: a Snapshot mirrored to a `file://` object store and a
//!   RecoverSession from it, beside `rsync -a`;
//! - [`failover`]: three `wsfs-server` processes behind the shipped nginx
//!   configuration on one `moto_server` bucket, the time from a SIGKILL of
//!   a session's holder to its first successful call through the proxy,
//!   beside the default lease (only when asked for by name).
//!
//! Every figure needs its baseline program ([`tools`]): when one is
//! missing the benchmark names its package and stops before any work.
//!
//! The server runs as a child process (`wsfs-server` next to this program)
//! when it can, so its memory is its own; otherwise in this process; or it
//! is an external one given with `--server`. Progress goes to stderr; the
//! results, a Markdown table, to stdout. See BENCHMARKS.md.

mod archive;
mod bytes;
mod compile;
mod container;
mod corpus;
mod durability;
mod failover;
mod fork;
mod grep;
mod http;
mod machine;
mod mount;
mod objstore;
mod report;
mod scratch;
mod server;
mod small;
mod snapshot;
mod tools;
mod trees;
mod wire;

use clap::{Parser, ValueEnum};
use server::Server;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    All,
    Grep,
    Bytes,
    Small,
    Snapshot,
    Archive,
    Fork,
    Durability,
    Objstore,
    /// Programs in a `wsfs mount` beside local disk (needs FUSE).
    Mount,
    /// DeepFabric's VFS API over HTTP beside gRPC (a server of its own).
    Http,
    /// Not part of `all`: it needs the `wsfs-server` binary for the inner
    /// end.
    Container,
    /// Not part of `all`: three `wsfs-server` processes behind nginx on a
    /// `moto_server` bucket, each round waiting out the default lease.
    Failover,
}

impl Which {
    /// The baseline programs this choice runs.
    fn tools(self) -> Vec<tools::Tool> {
        match self {
            Which::All => vec![
                tools::RG,
                tools::GIT,
                tools::ZIP,
                tools::UNZIP,
                tools::CP,
                tools::RSYNC,
                tools::TAR,
            ],
            Which::Grep => vec![tools::RG],
            Which::Snapshot => vec![tools::GIT],
            Which::Archive => vec![tools::ZIP, tools::UNZIP],
            Which::Fork => vec![tools::CP],
            Which::Objstore => vec![tools::RSYNC],
            Which::Failover => vec![tools::NGINX, tools::MOTO],
            Which::Mount => vec![tools::GIT, tools::TAR],
            Which::Bytes | Which::Small | Which::Durability | Which::Http | Which::Container => {
                Vec::new()
            }
        }
    }

    /// Whether it reads the server's data directory (so needs a server
    /// this program starts).
    fn needs_local_server(self) -> bool {
        matches!(
            self,
            Which::All | Which::Snapshot | Which::Archive | Which::Fork | Which::Objstore
        )
    }
}

/// Measures wsfs against baselines and prints a results table.
#[derive(Debug, Parser)]
#[command(name = "wsfs-bench", version, about)]
struct Cli {
    /// Which benchmarks to run.
    #[arg(value_enum, default_value_t = Which::All)]
    which: Which,

    /// Timed runs per figure; each figure shows min / median / max
    /// [default: 5, or 2 with --quick].
    #[arg(long)]
    runs: Option<usize>,

    /// Grep this directory as it is instead of assembling a corpus.
    #[arg(long)]
    corpus: Option<PathBuf>,

    /// Size of the assembled grep corpus in MiB [default: 200, or 20 with
    /// --quick].
    #[arg(long)]
    corpus_mib: Option<u64>,

    /// Size of the ReadBytes/WriteBytes file in MiB [default: 1024, or 64
    /// with --quick].
    #[arg(long)]
    size_mib: Option<u64>,

    /// Stat and Read calls per run, shared by the 16 callers [default:
    /// 20000, or 2000 with --quick].
    #[arg(long)]
    small_ops: Option<usize>,

    /// Files in the snapshot and archive workspaces and in the mount's
    /// source tree [default: 10000, or 1000 with --quick].
    #[arg(long, visible_alias = "files")]
    tree_files: Option<usize>,

    /// Size of the archive tree in MiB [default: 200, or 20 with --quick];
    /// the snapshot workspace's files are 20 KiB each.
    #[arg(long)]
    tree_mib: Option<u64>,

    /// Small writes per run of the durability figures [default: 1000, or
    /// 200 with --quick].
    #[arg(long)]
    durability_writes: Option<usize>,

    /// The regex for the "few hundred matches" grep figure [default: the
    /// first built-in candidate with 100 to 1000 matches on the corpus].
    #[arg(long)]
    regex: Option<String>,

    /// Small sizes and few runs, to check that everything works in well
    /// under a minute.
    #[arg(long)]
    quick: bool,

    /// Benchmark an external server at this URL instead of starting one.
    #[arg(long, conflicts_with_all = ["server_bin", "in_process"])]
    server: Option<String>,

    /// The `wsfs-server` binary to run as a child process [default: the
    /// one next to this program].
    #[arg(long)]
    server_bin: Option<PathBuf>,

    /// Run the server library inside this process instead of as a child.
    #[arg(long, conflicts_with = "server_bin")]
    in_process: bool,

    /// Where to put the corpus, the large file and the server's data
    /// [default: the system temp directory]. Use a disk, not a tmpfs.
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

struct Settings {
    runs: usize,
    corpus_bytes: u64,
    size_bytes: u64,
    small_ops: usize,
    tree_files: usize,
    tree_bytes: u64,
    durability_writes: usize,
    stat_ops: usize,
}

/// Each file of the snapshot workspace.
const SNAPSHOT_FILE_BYTES: usize = 20 * 1024;

impl Cli {
    fn settings(&self) -> Settings {
        let pick = |value: Option<u64>, full: u64, quick: u64| {
            value.unwrap_or(if self.quick { quick } else { full })
        };
        Settings {
            runs: pick(self.runs.map(|r| r as u64), 5, 2).max(1) as usize,
            corpus_bytes: pick(self.corpus_mib, 200, 20) << 20,
            size_bytes: pick(self.size_mib, 1024, 64) << 20,
            small_ops: (pick(self.small_ops.map(|n| n as u64), 20_000, 2_000) as usize)
                .div_ceil(small::CALLERS)
                * small::CALLERS,
            tree_files: pick(self.tree_files.map(|n| n as u64), 10_000, 1_000).max(1) as usize,
            tree_bytes: pick(self.tree_mib, 200, 20) << 20,
            durability_writes: pick(self.durability_writes.map(|n| n as u64), 1000, 200).max(1)
                as usize,
            stat_ops: pick(None, 200_000, 20_000) as usize,
        }
    }
}

/// A client error as the benchmark reports it: what was being done, then why.
fn failed(what: &str) -> impl FnOnce(wsfs_client::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn start_server(
    cli: &Cli,
    data: &Path,
    allow: &[PathBuf],
    durability: wsfs_server::durability::Durability,
    object_store: Option<&str>,
) -> Result<Server, String> {
    if let Some(url) = &cli.server {
        return Ok(Server::external(url.clone()));
    }
    if !cli.in_process {
        match cli
            .server_bin
            .clone()
            .or_else(server::sibling_server_binary)
        {
            Some(bin) => return Server::spawn(&bin, data, allow, durability, object_store),
            None => eprintln!(
                "no wsfs-server binary next to this program (build it with \
                 `cargo build --release -p wsfs-server`); running the server in this process"
            ),
        }
    }
    Server::in_process(data, allow, durability, object_store)
}

async fn run(cli: Cli) -> Result<(), String> {
    let settings = cli.settings();
    tools::require(&cli.which.tools())?;
    if cli.server.is_some() && cli.which.needs_local_server() {
        return Err(
            "the snapshot, archive, fork and object-storage figures start or read a local server: \
             run them without --server (choose grep, bytes or small for an external server)"
                .into(),
        );
    }
    let machine = machine::describe();
    eprintln!("machine: {machine}");

    let mut builder = tempfile::Builder::new();
    builder.prefix("wsfs-bench-");
    let work = match &cli.work_dir {
        Some(dir) => builder.tempdir_in(dir),
        None => builder.tempdir(),
    }
    .map_err(|e| format!("cannot create a work directory: {e}"))?;
    // Sessions may be rooted anywhere in the work directory (and in the
    // corpus given); the server's own data lives there too, so uploads and
    // their final places share a filesystem.
    let base = std::fs::canonicalize(work.path()).map_err(|e| e.to_string())?;
    let mut allow = vec![base.clone()];
    allow.extend(
        cli.corpus
            .iter()
            .filter_map(|c| std::fs::canonicalize(c).ok()),
    );
    let server_data = base.join("server-data");
    let server = start_server(
        &cli,
        &server_data,
        &allow,
        wsfs_server::durability::Durability::None,
        None,
    )?;
    eprintln!("server: {}", server.description);
    let channel = wire::connect(&server.url).await?;

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut corpus_origin = None;
    let wants = |w: Which| cli.which == Which::All || cli.which == w;

    if wants(Which::Grep) {
        let corpus = match &cli.corpus {
            Some(dir) => corpus::existing(dir)?,
            None => {
                eprintln!(
                    "grep: assembling a corpus of {} MiB from the text sources on this machine...",
                    settings.corpus_bytes >> 20
                );
                let dir = base.join("corpus");
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                corpus::assemble(&dir, settings.corpus_bytes)?
            }
        };
        eprintln!(
            "grep: corpus of {} files, {:.0} MB; rare literal {:?} planted on {} lines",
            corpus.files.len(),
            corpus.bytes as f64 / 1e6,
            corpus.literal,
            corpus.planted
        );
        corpus_origin = Some(corpus.origin.clone());
        rows.extend(
            grep::run(
                &channel,
                &corpus,
                settings.runs,
                cli.regex.clone(),
                &mut notes,
            )
            .await?,
        );
        if cli.corpus.is_none() {
            let _ = std::fs::remove_dir_all(&corpus.dir);
        }
        rows.extend(
            grep::small_tree(
                &channel,
                &base.join("small-tree"),
                settings.runs,
                &mut notes,
            )
            .await?,
        );
    }
    if wants(Which::Bytes) {
        rows.extend(
            bytes::run(
                &channel,
                &server.url,
                &base.join("bytes"),
                settings.size_bytes,
                settings.runs,
                server.rss.as_ref(),
                &mut notes,
            )
            .await?,
        );
    }
    if wants(Which::Small) {
        rows.extend(
            small::run(
                &channel,
                &base.join("small"),
                settings.small_ops,
                settings.runs,
                &mut notes,
            )
            .await?,
        );
    }
    // A server of the figure's own on `data` (and a bucket), for the
    // figures whose rounds each start one.
    let start_fresh = |data: &Path, bucket: Option<&str>| {
        start_server(
            &cli,
            data,
            &allow,
            wsfs_server::durability::Durability::None,
            bucket,
        )
    };
    if wants(Which::Mount) {
        match mount::support() {
            Ok(cli) => rows.extend(
                mount::run(
                    |data: &Path| start_fresh(data, None),
                    &channel,
                    &server.url,
                    &cli,
                    &base.join("mount"),
                    mount::Sizes {
                        tree_files: settings.tree_files,
                        file_bytes: settings.size_bytes,
                        stat_ops: settings.stat_ops,
                    },
                    settings.runs,
                    &mut notes,
                )
                .await?,
            ),
            Err(why) if cli.which == Which::All => {
                eprintln!("mount: skipped: {why}");
                notes.push(format!("mount: skipped, {why}"));
            }
            Err(why) => return Err(format!("the mount figures cannot run: {why}")),
        }
    }
    if wants(Which::Http) {
        let bin = cli
            .server_bin
            .clone()
            .or_else(server::sibling_server_binary);
        match (&cli.server, bin) {
            (Some(_), _) => notes.push(
                "http: skipped, it starts a server of its own with --http-listen".to_string(),
            ),
            (None, None) => notes.push(
                "http: skipped, no wsfs-server binary next to this program (build it with \
                 `cargo build --release -p wsfs-server`) or given with --server-bin"
                    .to_string(),
            ),
            (None, Some(bin)) => rows.extend(
                http::run(
                    &bin,
                    &base.join("http-data"),
                    settings.small_ops,
                    settings.runs,
                    &mut notes,
                )
                .await?,
            ),
        }
    }
    if wants(Which::Snapshot) || wants(Which::Archive) {
        let client = wsfs_client::Client::connect(&server.url)
            .await
            .map_err(|e| e.to_string())?;
        if wants(Which::Snapshot) {
            rows.extend(
                snapshot::run(
                    &client,
                    &server_data,
                    &base,
                    settings.tree_files,
                    SNAPSHOT_FILE_BYTES,
                    settings.runs,
                    &mut notes,
                )
                .await?,
            );
        }
        if wants(Which::Archive) {
            let dir = base.join("archive");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            rows.extend(
                archive::run(
                    &client,
                    &dir,
                    settings.tree_files,
                    settings.tree_bytes,
                    settings.runs,
                    &mut notes,
                )
                .await?,
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if wants(Which::Fork) {
        rows.extend(
            fork::run(
                |data: &Path| start_fresh(data, None),
                &base,
                settings.tree_files,
                SNAPSHOT_FILE_BYTES,
                settings.runs,
                &mut notes,
            )
            .await?,
        );
    }
    if wants(Which::Durability) {
        if cli.server.is_some() {
            notes.push(
                "durability: skipped, an external server's --durability cannot be chosen here"
                    .to_string(),
            );
        } else {
            let start = |mode| {
                let data = base.join(format!("durability-{mode:?}"));
                start_server(&cli, &data, &allow, mode, None)
            };
            rows.extend(durability::run(start, settings.durability_writes, settings.runs).await?);
            notes.push(format!(
                "durability: the server's data directory is on {}",
                machine::filesystem_of(&base)
            ));
        }
    }
    if wants(Which::Objstore) {
        rows.extend(
            objstore::run(
                |data: &Path, bucket: &str| start_fresh(data, Some(bucket)),
                &base,
                settings.tree_files,
                SNAPSHOT_FILE_BYTES,
                settings.runs,
                &mut notes,
            )
            .await?,
        );
    }
    if cli.which == Which::Container {
        let inner = cli
            .server_bin
            .clone()
            .or_else(server::sibling_server_binary)
            .ok_or(
                "the container figures run wsfs-server --stdio: build it \
                    (`cargo build --release -p wsfs-server`) or pass --server-bin",
            )?;
        let dir = base.join("container");
        rows.extend(
            container::run(
                &dir,
                &inner,
                settings.tree_files,
                settings.small_ops,
                settings.runs,
                &mut notes,
            )
            .await?,
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    if cli.which == Which::Failover {
        let bin = cli
            .server_bin
            .clone()
            .or_else(server::sibling_server_binary)
            .ok_or(
                "the failover figure runs three wsfs-server processes: build it \
                    (`cargo build --release -p wsfs-server`) or pass --server-bin",
            )?;
        let program = |tool: tools::Tool| PathBuf::from(tool.program);
        rows.extend(
            failover::run(
                &bin,
                &program(tools::NGINX),
                &program(tools::MOTO),
                &base,
                settings.runs.min(3),
                &mut notes,
            )
            .await?,
        );
    }
    let server_description = server.description.clone();
    drop(channel);
    drop(server);

    println!("machine: {machine}");
    println!("server: {server_description}");
    println!(
        "runs per figure: {} (after one untimed warm-up)",
        settings.runs
    );
    if let Some(origin) = corpus_origin {
        println!("grep corpus: {origin}");
    }
    println!();
    print!("{}", report::table(&rows));
    if !notes.is_empty() {
        println!();
        for note in notes {
            println!("- {note}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wsfs-bench: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wsfs-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
