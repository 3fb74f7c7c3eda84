//! The mount: a DIRECTORY session mounted with `wsfs mount` (the CLI next
//! to this program, a process of its own) and real programs working in
//! it, each beside the same work on the local disk in the same run:
//!
//! - on a generated source tree (10,000 files of 4 KiB by default): `tar x`
//!   of its tarball, `rm -rf` of the extracted tree, `git clone` from a
//!   local bare repository (over `file://`), and `git status` of the clone
//!   the second time it runs (the first fills the caches);
//! - `cargo build` of a small generated crate, clean and after one file
//!   changed (see `compile.rs`);
//!
//! - one large file: a sequential write through the mount (1 MiB writes,
//!   timed until fsync returns, when the mount has committed it) beside
//!   `wsfs put` of the same file, with its two parts' times (the writes,
//!   staged on local disk, and the commit at fsync) beside `put`'s time,
//!   and a sequential read through the mount
//!   (the file's pages dropped from the kernel's cache first) beside
//!   `wsfs get`;
//! - `stat` of a file the kernel has cached, calls per second, beside the
//!   same on a local file.
//!
//! Each of the tree rounds, and the build figure, runs in a filesystem of
//! its own ([`crate::scratch`]: a new ext4 image with a journal, as
//! `mkfs.ext4` makes it) holding both sides: the local directory and a
//! server of the round's own, whose data directory (and so the mounted
//! session's files and its staging area) is there too. A round then
//! neither follows another's ten thousand deletions nor runs on a disk
//! without a journal, either of which slows the local side's creates and
//! makes the mount look nearer to it than it is. The large-file and `stat`
//! figures use the benchmark's own server.
//!
//! Without `/dev/fuse` or a `wsfs` binary with a `mount` command the figures
//! are skipped with a note saying why.

use crate::report::{Row, Samples, Target};
use crate::scratch::{self, Scratch, ScratchKind};
use crate::server::Server;
use crate::{archive::timed, bytes, trees, wire};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Each file of the source tree.
const TREE_FILE_BYTES: u64 = 4096;

/// The size of each read and write of the large file.
const IO_BYTES: usize = 1 << 20;

/// How long a clone rests before its first `git status`. git reads again
/// every file whose modification time is not older than its index's
/// ("racily clean"); when the clone and the first status fall in the same
/// second, the index that status writes is just as new, and the timed
/// second run reads every file again: on a fresh local filesystem the
/// second run took 0.23 s instead of 0.03 s in most rounds. After the
/// wait the first status leaves an index older files are clean against.
const RACY_GIT_WAIT: Duration = Duration::from_millis(1100);

/// How long the mount may take to appear, and to go after SIGTERM.
const MOUNT_DEADLINE: Duration = Duration::from_secs(60);

const BIG_NAME: &str = "big.bin";
const PUT_NAME: &str = "big-put.bin";

/// The `wsfs` binary when a session can be mounted here, or why not.
pub fn support() -> Result<PathBuf, String> {
    if !Path::new("/dev/fuse").exists() {
        return Err(
            "/dev/fuse is missing (run where FUSE is available, e.g. a container \
                    with `--device /dev/fuse --cap-add SYS_ADMIN`)"
                .into(),
        );
    }
    let cli = bytes::sibling_cli().ok_or(
        "no `wsfs` binary next to this program (build it with \
         `cargo build --release -p wsfs-client`)",
    )?;
    let help = Command::new(&cli)
        .args(["mount", "--help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    if !help.status.success() {
        return Err(format!("{} has no `mount` command", cli.display()));
    }
    Ok(cli)
}

/// A `wsfs mount` process and its mount point; unmounted on drop.
struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    fn start(cli: &Path, url: &str, session: &str, dir: &Path) -> Result<Mounted, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
        let child = Command::new(cli)
            .args(["--server", url, "mount", "--session", session])
            .arg(dir)
            .env("WSFS_CONFIG", dir.with_extension("no-saved-context.json"))
            .env_remove("WSFS_TOKEN")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start `wsfs mount`: {e}"))?;
        let mut mounted = Mounted {
            child,
            dir: dir.to_path_buf(),
        };
        let started = Instant::now();
        while !is_mounted(dir) {
            if let Ok(Some(status)) = mounted.child.try_wait() {
                return Err(format!("`wsfs mount` exited ({status}) before mounting"));
            }
            if started.elapsed() > MOUNT_DEADLINE {
                return Err(format!(
                    "`wsfs mount` did not mount within {MOUNT_DEADLINE:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(mounted)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let started = Instant::now();
        while started.elapsed() < MOUNT_DEADLINE {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if is_mounted(&self.dir) {
            eprintln!(
                "mount: `wsfs mount` left {} mounted; unmounting it",
                self.dir.display()
            );
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir)
                .status();
        }
    }
}

/// Whether the kernel lists a mount at `dir` (an absolute path without
/// spaces, as the benchmark makes them).
fn is_mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.to_string_lossy();
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(want.as_ref()))
}

/// What the tree figures run on: a tarball of the tree and a bare
/// repository holding it.
#[derive(Clone)]
struct Sources {
    tarball: PathBuf,
    bare: PathBuf,
}

fn git() -> Command {
    let mut c = Command::new("git");
    c.args([
        "-c",
        "user.name=bench",
        "-c",
        "user.email=bench@example.invalid",
    ])
    .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
    .stdout(Stdio::null());
    c
}

fn run_ok(command: &mut Command) -> Result<(), String> {
    timed(command).map(|_| ())
}

fn prepare(dir: &Path, files: usize) -> Result<Sources, String> {
    let tree = dir.join("source");
    trees::source_like(&tree, files, files as u64 * TREE_FILE_BYTES)?;
    let tarball = dir.join("tree.tar");
    run_ok(
        Command::new("tar")
            .arg("cf")
            .arg(&tarball)
            .arg("-C")
            .arg(&tree)
            .arg("."),
    )?;
    run_ok(git().args(["init", "-q"]).arg(&tree))?;
    run_ok(git().arg("-C").arg(&tree).args(["add", "-A"]))?;
    run_ok(
        git()
            .arg("-C")
            .arg(&tree)
            .args(["commit", "-q", "-m", "the tree"]),
    )?;
    let bare = dir.join("bare.git");
    run_ok(git().args(["clone", "-q", "--bare"]).arg(&tree).arg(&bare))?;
    std::fs::remove_dir_all(&tree).map_err(|e| format!("cannot remove the source tree: {e}"))?;
    Ok(Sources { tarball, bare })
}

/// One pass of the tree work in `place`: the seconds of `tar x`, `rm -rf`,
/// `git clone` and the second `git status`.
fn tree_pass(place: &Path, sources: &Sources) -> Result<[f64; 4], String> {
    let extracted = place.join("tree");
    std::fs::create_dir(&extracted)
        .map_err(|e| format!("cannot create '{}': {e}", extracted.display()))?;
    let tar = timed(
        Command::new("tar")
            .arg("xf")
            .arg(&sources.tarball)
            .arg("-C")
            .arg(&extracted),
    )?;
    let rm = timed(Command::new("rm").arg("-rf").arg(&extracted))?;
    let clone_dir = place.join("clone");
    let url = format!("file://{}", sources.bare.display());
    let clone = timed(git().args(["clone", "-q"]).arg(&url).arg(&clone_dir))?;
    std::thread::sleep(RACY_GIT_WAIT);
    clean_status(&clone_dir)?;
    let started = Instant::now();
    clean_status(&clone_dir)?;
    let status = started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&clone_dir)
        .map_err(|e| format!("cannot remove '{}': {e}", clone_dir.display()))?;
    Ok([tar, rm, clone, status])
}

/// `git status --porcelain` in `repo`, which must report a clean tree.
fn clean_status(repo: &Path) -> Result<(), String> {
    let out = git()
        .arg("-C")
        .arg(repo)
        .args(["status", "--porcelain"])
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run git status: {e}"))?;
    if !out.status.success() || !out.stdout.is_empty() {
        return Err(format!(
            "`git status` in '{}' did not find a clean tree: {} {}{}",
            repo.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Copies `source` into a new file at `dest` in 1 MiB writes; the seconds
/// until the last write returns (the bytes staged) and until fsync returns
/// (the mount has committed them).
fn write_through(source: &Path, dest: &Path) -> Result<(f64, f64), String> {
    let io = |e: std::io::Error| format!("cannot copy to '{}': {e}", dest.display());
    trees::settle();
    let mut input = std::fs::File::open(source).map_err(io)?;
    let mut buf = vec![0u8; IO_BYTES];
    let started = Instant::now();
    let mut output = std::fs::File::create(dest).map_err(io)?;
    loop {
        let n = input.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        output.write_all(&buf[..n]).map_err(io)?;
    }
    let staged = started.elapsed().as_secs_f64();
    // close returns before the commit lands (the mount's write-behind):
    // fsync waits for it.
    output.sync_all().map_err(io)?;
    drop(output);
    Ok((staged, started.elapsed().as_secs_f64()))
}

/// Reads `path` whole in 1 MiB reads after dropping its cached pages; the
/// seconds it took and the bytes read.
fn read_through(path: &Path) -> Result<(f64, u64), String> {
    let io = |e: std::io::Error| format!("cannot read '{}': {e}", path.display());
    let mut file = std::fs::File::open(path).map_err(io)?;
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).map_err(|e| io(e.into()))?;
    let mut buf = vec![0u8; IO_BYTES];
    let mut total = 0u64;
    let started = Instant::now();
    loop {
        match file.read(&mut buf).map_err(io)? {
            0 => break,
            n => total += n as u64,
        }
    }
    Ok((started.elapsed().as_secs_f64(), total))
}

/// `stat` calls per second on `path`, `ops` of them after one untimed.
fn stats_per_second(path: &Path, ops: usize) -> Result<f64, String> {
    let io = |e: std::io::Error| format!("cannot stat '{}': {e}", path.display());
    let size = std::fs::metadata(path).map_err(io)?.size();
    let started = Instant::now();
    for _ in 0..ops {
        if std::fs::metadata(path).map_err(io)?.size() != size {
            return Err(format!("'{}' changed size while stat ran", path.display()));
        }
    }
    Ok(ops as f64 / started.elapsed().as_secs_f64())
}

/// What the mount figures measure.
#[derive(Clone, Copy)]
pub struct Sizes {
    pub tree_files: usize,
    pub file_bytes: u64,
    pub stat_ops: usize,
}

/// A round's own filesystem ([`Scratch`]), a server of its own whose data
/// directory is there, and a DIRECTORY session on it (its files under that
/// data directory). Dropped in field order: the server stops before its
/// filesystem is unmounted.
struct Round {
    session: String,
    url: String,
    _server: Server,
    scratch: Scratch,
}

impl Round {
    async fn start<F>(
        start: &F,
        dir: &Path,
        holds: u64,
        kind: &mut ScratchKind,
        max_write: u64,
    ) -> Result<Round, String>
    where
        F: Fn(&Path) -> Result<Server, String>,
    {
        let scratch = Scratch::fresh(dir, holds, kind)?;
        let server = start(&scratch.path().join("server-data"))?;
        let channel = wire::connect(&server.url).await?;
        let session = wire::create_directory_session(&channel, None, max_write)
            .await
            .map_err(|s| format!("CreateSession(DIRECTORY) failed: {}", s.message()))?;
        Ok(Round {
            session,
            url: server.url.clone(),
            _server: server,
            scratch,
        })
    }

    /// Mounts the round's session at `mnt` and runs `work` with the local
    /// directory and the one in the mount, each made empty.
    async fn run<T: Send + 'static>(
        &self,
        cli: &Path,
        mnt: &Path,
        work: impl FnOnce(&Path, &Path) -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let (cli, url, session) = (cli.to_path_buf(), self.url.clone(), self.session.clone());
        let (mnt, local) = (mnt.to_path_buf(), self.scratch.path().join("local"));
        tokio::task::spawn_blocking(move || {
            let mounted = Mounted::start(&cli, &url, &session, &mnt)?;
            let remote = mounted.dir.join("work");
            for place in [&local, &remote] {
                std::fs::create_dir_all(place)
                    .map_err(|e| format!("cannot create '{}': {e}", place.display()))?;
            }
            work(&local, &remote)
        })
        .await
        .map_err(|e| format!("a mount round's task failed: {e}"))?
    }
}

#[allow(clippy::too_many_arguments)]
pub async fn run<F>(
    start: F,
    channel: &Channel,
    url: &str,
    cli: &Path,
    dir: &Path,
    sizes: Sizes,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String>
where
    F: Fn(&Path) -> Result<Server, String>,
{
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    eprintln!(
        "mount: a tree of {} files of {} bytes, its tarball and a bare repository...",
        sizes.tree_files, TREE_FILE_BYTES
    );
    let sources = {
        let (dir, files) = (dir.to_path_buf(), sizes.tree_files);
        tokio::task::spawn_blocking(move || prepare(&dir, files))
            .await
            .map_err(|e| format!("preparing the tree failed: {e}"))??
    };
    // Both sides of a pass at once: the extracted tree, then the clone's
    // work tree and its objects; room for twice that.
    let holds = 2 * 2 * 3 * sizes.tree_files as u64 * TREE_FILE_BYTES;
    // The largest single write the mounted sessions take: above the large
    // file, which the mount commits as one patch.
    let max_write = (2u64 << 30).max(sizes.file_bytes * 2);
    let mut kind = scratch::kind(true);
    let mnt = dir.join("mnt");
    let mut tree: [(Samples, Samples); 4] = Default::default();
    // Round 0 is the warm-up: the tarball, the bare repository and the
    // programs in the page cache.
    for run in 0..=runs {
        eprintln!("mount: tree run {run}/{runs}");
        let round = Round::start(&start, &dir.join("round"), holds, &mut kind, max_write).await?;
        let sources = sources.clone();
        let seconds = round
            .run(cli, &mnt, move |local, remote| {
                // Each place goes first in every other run.
                let mut seconds = [[0.0; 4]; 2];
                for on_mount in [run % 2 == 1, run % 2 == 0] {
                    let place = if on_mount { remote } else { local };
                    seconds[usize::from(on_mount)] = tree_pass(place, &sources)?;
                }
                Ok(seconds)
            })
            .await?;
        drop(round);
        if run > 0 {
            for (i, figure) in tree.iter_mut().enumerate() {
                figure.0.push(seconds[1][i]);
                figure.1.push(seconds[0][i]);
            }
        }
    }

    eprintln!("mount: `cargo build` of a small crate in each place...");
    let round = Round::start(&start, &dir.join("round"), 1 << 30, &mut kind, max_write).await?;
    let build = round
        .run(cli, &mnt, move |local, remote| {
            crate::compile::rows(local, remote, runs)
        })
        .await?;
    drop(round);
    notes.push(format!(
        "mount, the tree and `cargo build` rows: {}, with a server of the round's own whose \
         data directory (and so the mounted DIRECTORY session) is there too",
        kind.describe()
    ));

    let session = wire::create_directory_session(channel, None, max_write)
        .await
        .map_err(|s| format!("CreateSession(DIRECTORY) failed: {}", s.message()))?;
    let (url, cli, dir) = (url.to_string(), cli.to_path_buf(), dir.to_path_buf());
    let id = session.clone();
    let measured = tokio::task::spawn_blocking(move || measure(&url, &cli, &id, &dir, sizes, runs))
        .await
        .map_err(|e| format!("the mount figures' task failed: {e}"))?;
    wire::delete_session(channel, &session).await;
    let (rows, note) = measured?;
    notes.push(note);
    let [tar, rm, clone, status] = tree;
    let n = sizes.tree_files;
    let mut all: Vec<Row> = [
        ("`tar x`", "", tar, 3.0),
        ("`git status`", ", second run", status, 1.5),
        ("`rm -rf`", "", rm, 3.0),
        ("`git clone`", "", clone, 3.0),
    ]
    .into_iter()
    .map(|(work, when, (mount, local), times)| {
        Row::new(
            format!("mount: {work} of {n} files{when}, time"),
            "s",
            mount,
        )
        .baseline("local disk", local)
        .target(Target::AtMostTimes(times))
    })
    .collect();
    all.extend(build);
    all.extend(rows);
    Ok(all)
}

/// The large-file and `stat` figures, on the benchmark's own server.
fn measure(
    url: &str,
    cli: &Path,
    session: &str,
    dir: &Path,
    sizes: Sizes,
    runs: usize,
) -> Result<(Vec<Row>, String), String> {
    let mounted = Mounted::start(cli, url, session, &dir.join("mnt"))?;
    let local = dir.join("local");
    let remote = mounted.dir.join("work");
    for place in [&local, &remote] {
        std::fs::create_dir_all(place)
            .map_err(|e| format!("cannot create '{}': {e}", place.display()))?;
    }

    let label = bytes::size_label(sizes.file_bytes);
    eprintln!("mount: a {label} file through the mount and through the CLI...");
    let source = dir.join("big-source.bin");
    bytes::generate(&source, sizes.file_bytes)?;
    let source_text = source.display().to_string();
    let cli_run = |args: &[&str]| bytes::cli_once(cli, url, session, dir, args);
    let in_mount = mounted.dir.join(BIG_NAME);
    let mb_s = |seconds: f64| sizes.file_bytes as f64 / seconds / 1e6;
    let (mut write, mut put, mut read, mut get) = Default::default();
    let (mut staging, mut commit, mut put_time) = Default::default();
    for run in 0..=runs {
        let (s, w) = write_through(&source, &in_mount)?;
        let p = cli_run(&["put", &source_text, PUT_NAME])?;
        let (r, got) = read_through(&in_mount)?;
        if got != sizes.file_bytes {
            return Err(format!(
                "read {got} of {} bytes through the mount",
                sizes.file_bytes
            ));
        }
        let g = cli_run(&["get", BIG_NAME, "-"])?;
        // Run 0 is the warm-up.
        if run > 0 {
            Samples::push(&mut write, mb_s(w));
            Samples::push(&mut staging, s);
            Samples::push(&mut commit, w - s);
            Samples::push(&mut put, mb_s(p.as_secs_f64()));
            Samples::push(&mut put_time, p.as_secs_f64());
            Samples::push(&mut read, mb_s(r));
            Samples::push(&mut get, mb_s(g.as_secs_f64()));
        }
    }

    eprintln!("mount: stat of a cached file...");
    let probe = "stat-me.txt";
    std::fs::write(local.join(probe), b"stat me").map_err(|e| e.to_string())?;
    std::fs::write(remote.join(probe), b"stat me").map_err(|e| e.to_string())?;
    let (mut stat_mount, mut stat_local) = (Samples::default(), Samples::default());
    for _ in 0..runs {
        stat_mount.push(stats_per_second(&remote.join(probe), sizes.stat_ops)?);
        stat_local.push(stats_per_second(&local.join(probe), sizes.stat_ops)?);
    }
    drop(mounted);

    let disk = "local disk";
    let rows = vec![
        Row::new(
            format!("mount: sequential read of {label}, throughput"),
            "MB/s",
            read,
        )
        .baseline("`wsfs get`", get)
        .target(Target::AtLeastShare(0.7)),
        Row::new(
            format!("mount: sequential write of {label}, throughput"),
            "MB/s",
            write,
        )
        .baseline("`wsfs put`", put)
        .target(Target::AtLeastShare(0.6)),
        Row::new(
            format!("mount: sequential write of {label}, the writes (staged), time"),
            "s",
            staging,
        )
        .baseline("`wsfs put`", put_time.clone()),
        Row::new(
            format!("mount: sequential write of {label}, the commit at fsync, time"),
            "s",
            commit,
        )
        .baseline("`wsfs put`", put_time),
        Row::new("mount: `stat` of a cached file", "calls/s", stat_mount)
            .baseline(disk, stat_local)
            .target(Target::AtLeast(100_000.0)),
    ];
    let note = format!(
        "mount, the large file and `stat` rows: a DIRECTORY session on the benchmark's server, \
         mounted with `wsfs mount`, its per-write limit above the large file (committed as one \
         patch); the local disk is {}",
        crate::machine::filesystem_of(dir)
    );
    Ok((rows, note))
}
