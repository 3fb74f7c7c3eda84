//! Crash loop: the real `wsfs-server` binary, SIGKILLed at a random moment
//! of a storm of writes, multi-megabyte WriteBytes uploads, edits, deletes,
//! snapshots and snapshot deletes on DIRECTORY sessions, then started again on the same data
//! directory. After every restart:
//!
//! - every session is listed and serves (a probe write reads back);
//! - every file holds either its last acknowledged content or the content
//!   of the one write that was in flight on it, never a torn mix: contents
//!   are self-validating (a header naming path, generation and length, and
//!   a body derived from them), and the model of acknowledged writes says
//!   which generations are allowed;
//! - nothing else is in any workspace root on disk: no temporary, staged or
//!   partial file, no phantom; the staging directory is empty;
//! - every acknowledged snapshot is listed (the one in flight may or may
//!   not be), and each new one restores to exactly what it captured: each
//!   file in a state it held while the snapshot was being taken; after a
//!   snapshot delete cut short by the kill, every remaining snapshot is
//!   restored and checked again (its garbage collection must not have
//!   taken what they hold).
//!
//! A second loop SIGKILLs Restore and ImportArchive at random moments
//! (half of them inside the apply step, once its intent record is on
//! disk): after the restart the workspace is the old tree or the new one,
//! whole, and the new one when the call had answered.
//!
//! Then the first answer after a restart: Restore, ImportArchive, a
//! restore of one path and a recursive Delete of 3,000 files killed part
//! way, the server called as it accepts: the session answers the old tree
//! or the new (the whole directory or none), refusing UNAVAILABLE while it
//! recovers, as other sessions answer. Last, a full disk (a tmpfs the test
//! mounts, root only): every path refused with one reason, nothing left.
//!
//! Scope: SIGKILL keeps the kernel's page cache, so "acknowledged" means
//! "handed to the kernel" here. Power loss is not covered by this test:
//! it runs the server with the default `--durability none`, which does not
//! fsync file contents, renames or directories.
//!
//! It lives in the server package because only a package's own tests are
//! given its binary (`CARGO_BIN_EXE_wsfs-server`), built by the same cargo
//! command. `CRASH_LOOPS` (default 5) sets the iterations and `CRASH_SEED` replays a
//! schedule of operations and kill points (the kill point is a time, so
//! the exact interleaving still varies); `CRASH_REPLACE_LOOPS` (default 6)
//! sets the kills of the second loop. Harness size:
//! `CRASH_LOOPS=200 cargo test --release -p wsfs-server --test crash --
//! --nocapture`.

use bytes::Bytes;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsfs_client::{
    parse_path, ByteRange, Client, DeleteOptions, EditSpec, Error, Filesystem, GlobQuery, Session,
    SessionOptions, WriteOptions,
};
use wsfs_tests::kit::{env, Rng};

const SESSIONS: usize = 2;
const WRITERS: usize = 2;
const EDIT_SLOTS: usize = 6;
const MAX_BLOB: u64 = 6 << 20;
const CHUNK: usize = wsfs::DEFAULT_CHUNK_SIZE;
/// Snapshots kept (all verified) after each iteration; older ones are
/// deleted so the store stays small over hundreds of iterations.
const KEEP_SNAPSHOTS: usize = 2;
const TEMP_PREFIX: &str = ".wsfs-tmp-";

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What a file holds, in the model.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    /// Written by WriteBytes: a header and `len` bytes of body.
    Blob {
        generation: u64,
        len: u64,
    },
    /// Written by Write: a header and `lines` lines.
    Text {
        generation: u64,
        lines: u64,
    },
    /// Changed by Edit, one slot at a time.
    Slots([u64; EDIT_SLOTS]),
}

fn header(path: &str, kind: &str, generation: u64, len: u64) -> String {
    format!("WSFS-CRASH {kind} {path} generation={generation} len={len}\n")
}

/// The bytes of `state` at `path`; `None` when absent.
fn content(path: &str, state: &State) -> Option<Vec<u8>> {
    match state {
        State::Absent => None,
        State::Blob { generation, len } => {
            let mut out = header(path, "blob", *generation, *len).into_bytes();
            let mut rng = Rng(fnv(path) ^ generation);
            let block: Vec<u8> = (0..CHUNK / 8)
                .flat_map(|_| rng.next_u64().to_le_bytes())
                .collect();
            let body_start = out.len();
            let mut index = 0u64;
            while ((out.len() - body_start) as u64) < *len {
                let mut b = block.clone();
                b[..8].copy_from_slice(&index.to_le_bytes());
                out.extend_from_slice(&b);
                index += 1;
            }
            out.truncate(body_start + *len as usize);
            Some(out)
        }
        State::Text { generation, lines } => {
            let mut out = header(path, "text", *generation, *lines);
            let mut rng = Rng(fnv(path) ^ generation);
            for i in 0..*lines {
                out.push_str(&format!(
                    "line {i} of {path} #{generation} {:016x}\n",
                    rng.next_u64()
                ));
            }
            Some(out.into_bytes())
        }
        State::Slots(slots) => {
            let mut out = header(path, "slots", 0, EDIT_SLOTS as u64);
            for (i, v) in slots.iter().enumerate() {
                out.push_str(&slot_line(i, *v));
            }
            Some(out.into_bytes())
        }
    }
}

fn slot_line(i: usize, v: u64) -> String {
    format!("slot {i} = v{v};\n")
}

/// Reads back which state `bytes` are, from the bytes alone: the header
/// names the state and the rest must be exactly what it implies. A torn,
/// truncated or mixed file fails here whatever the model says.
fn validate(path: &str, bytes: &[u8]) -> Result<State, String> {
    let torn = |why: &str| {
        format!(
            "'{path}' is torn or foreign ({why}): {} bytes starting {:?}",
            bytes.len(),
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        )
    };
    let end = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| torn("no header"))?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| torn("header not UTF-8"))?;
    let words: Vec<&str> = head.split(' ').collect();
    let [magic, kind, named, generation, len] = words[..] else {
        return Err(torn("bad header"));
    };
    let number = |w: &str, key: &str| -> Result<u64, String> {
        w.strip_prefix(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| torn("bad header number"))
    };
    if magic != "WSFS-CRASH" || named != path {
        return Err(torn("wrong header"));
    }
    let generation = number(generation, "generation=")?;
    let len = number(len, "len=")?;
    let state = match kind {
        "blob" => State::Blob { generation, len },
        "text" => State::Text {
            generation,
            lines: len,
        },
        "slots" => {
            let text = std::str::from_utf8(&bytes[end + 1..]).map_err(|_| torn("not UTF-8"))?;
            let mut slots = [0u64; EDIT_SLOTS];
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            if lines.len() != EDIT_SLOTS {
                return Err(torn("wrong slot count"));
            }
            for (i, line) in lines.iter().enumerate() {
                slots[i] = line
                    .strip_prefix(&format!("slot {i} = v"))
                    .and_then(|l| l.strip_suffix(";\n"))
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| torn("bad slot line"))?;
            }
            State::Slots(slots)
        }
        _ => return Err(torn("unknown kind")),
    };
    if content(path, &state).as_deref() != Some(bytes) {
        return Err(torn("body does not match its header"));
    }
    Ok(state)
}

/// One path's history: every state written to it, in order, and how far
/// the server has acknowledged. One writer at a time per path, so at most
/// the state after `acked` is in flight.
#[derive(Debug, Default)]
struct PathModel {
    history: Vec<State>,
    acked: usize,
}

impl PathModel {
    fn current(&self) -> &State {
        &self.history[self.acked]
    }

    /// Makes `state` the acknowledged present.
    fn settle(&mut self, state: State) {
        self.history.push(state);
        self.acked = self.history.len() - 1;
    }
}

/// What an acknowledged snapshot must restore: for each path, the states
/// the path held while the snapshot was taken.
#[derive(Debug)]
struct SnapshotExpect {
    id: String,
    tag: String,
    allowed: BTreeMap<String, Vec<State>>,
    verified: bool,
    /// A DeleteSnapshot of it was in flight at the kill.
    deleting: bool,
}

/// A snapshot request in flight: the acknowledged index of every path when
/// it was sent.
#[derive(Debug)]
struct SnapshotInFlight {
    tag: String,
    from: BTreeMap<String, usize>,
}

#[derive(Debug, Default)]
struct SessionModel {
    id: String,
    root: PathBuf,
    paths: BTreeMap<String, PathModel>,
    snapshots: Vec<SnapshotExpect>,
    in_flight: Option<SnapshotInFlight>,
}

type Model = Arc<Mutex<Vec<SessionModel>>>;

fn lock(model: &Model) -> std::sync::MutexGuard<'_, Vec<SessionModel>> {
    model.lock().unwrap_or_else(|e| e.into_inner())
}

/// `CRASH_SEED`, or a fresh seed.
fn crash_seed() -> u64 {
    let fresh = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    env("CRASH_SEED", fresh)
}

/// A scratch directory (removed when dropped), the data directory in it
/// and the server's log file.
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (data_dir, log) = (
        scratch.path().join("data"),
        scratch.path().join("server.log"),
    );
    (scratch, data_dir, log)
}

/// The server binary, running on `data_dir`.
struct Server {
    child: Child,
    url: String,
    /// Held so the server's stdout stays open.
    _stdout: std::io::BufReader<ChildStdout>,
}

impl Server {
    fn start(data_dir: &Path, log: &Path) -> Server {
        Server::start_with(data_dir, log, &[])
    }

    /// [`Server::start`] with more arguments.
    fn start_with(data_dir: &Path, log: &Path, args: &[&std::ffi::OsStr]) -> Server {
        let stderr = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wsfs-server"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env_remove("WSFS_ADMIN_TOKEN")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start wsfs-server");
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("the server did not say where it listens: {line:?}"));
        Server {
            child,
            url: format!("http://{addr}"),
            _stdout: stdout,
        }
    }

    fn kill(&mut self) {
        // SIGKILL on Unix; a no-op on a process already reaped.
        let _ = self.child.kill();
        self.child.wait().unwrap();
    }
}

/// A failing test must not leave its server running.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The storm's shared flags: whether the server has been killed (errors
/// are expected from then on), and errors seen before that.
struct Storm {
    killed: AtomicBool,
    unexpected: Mutex<Vec<String>>,
    generation: Arc<AtomicU64>,
    acked_ops: AtomicU64,
    /// DeleteSnapshot calls sent.
    snapshot_deletes: AtomicU64,
}

impl Storm {
    /// `Ok(true)` when the call succeeded; `Ok(false)` when it failed after
    /// the kill (its effect is in doubt); an error before the kill is kept.
    fn outcome<T>(&self, what: &str, result: wsfs::Result<T>) -> bool {
        match result {
            Ok(_) => {
                self.acked_ops.fetch_add(1, Ordering::SeqCst);
                true
            }
            Err(_) if self.killed.load(Ordering::SeqCst) => false,
            Err(e) => {
                self.unexpected
                    .lock()
                    .unwrap()
                    .push(format!("{what}: {e:?}"));
                false
            }
        }
    }
}

async fn upload(session: &Session, path: &str, data: Vec<u8>) -> wsfs::Result<()> {
    let data = Bytes::from(data);
    let chunks: Vec<wsfs::Result<Bytes>> = (0..data.len())
        .step_by(CHUNK)
        .map(|at| Ok(data.slice(at..(at + CHUNK).min(data.len()))))
        .collect();
    session
        .write_bytes(
            &parse_path(path)?,
            WriteOptions::default(),
            futures::stream::iter(chunks).boxed(),
        )
        .await
        .map(drop)
}

/// Writes, uploads, edits and deletes on one writer's own paths until the
/// server dies.
async fn writer(
    session: Session,
    s: usize,
    w: usize,
    model: Model,
    storm: Arc<Storm>,
    mut rng: Rng,
) {
    loop {
        if storm.killed.load(Ordering::SeqCst) {
            return;
        }
        let generation = storm.generation.fetch_add(1, Ordering::SeqCst);
        let (path, next) = match rng.below(10) {
            0..=2 => (
                format!("w{w}/blob.bin"),
                State::Blob {
                    generation,
                    len: 1 + rng.below(MAX_BLOB),
                },
            ),
            3..=5 => (
                format!("w{w}/t{}.txt", rng.below(2)),
                State::Text {
                    generation,
                    lines: 1 + rng.below(200),
                },
            ),
            6 => (format!("w{w}/t1.txt"), State::Absent),
            _ => {
                let path = format!("w{w}/slots.txt");
                let State::Slots(mut slots) = lock(&model)[s].paths[&path].current().clone() else {
                    panic!("'{path}' holds no slots in the model");
                };
                slots[rng.below(EDIT_SLOTS as u64) as usize] = generation;
                (path, State::Slots(slots))
            }
        };
        let before = {
            let mut m = lock(&model);
            let p = m[s].paths.entry(path.clone()).or_insert_with(|| PathModel {
                history: vec![State::Absent],
                acked: 0,
            });
            let before = p.current().clone();
            p.history.push(next.clone());
            before
        };
        let result = match (&before, &next) {
            (_, State::Absent) => session
                .delete(
                    &parse_path(&path).unwrap(),
                    DeleteOptions {
                        allow_missing: true,
                        ..DeleteOptions::default()
                    },
                )
                .await
                .map(drop),
            (_, State::Blob { .. }) => {
                upload(&session, &path, content(&path, &next).unwrap()).await
            }
            (State::Slots(old), State::Slots(new)) => {
                let i = (0..EDIT_SLOTS).find(|i| old[*i] != new[*i]).unwrap();
                session
                    .edit(
                        &parse_path(&path).unwrap(),
                        EditSpec {
                            old_text: slot_line(i, old[i]),
                            new_text: slot_line(i, new[i]),
                            ..EditSpec::default()
                        },
                    )
                    .await
                    .map(drop)
            }
            _ => {
                let text = String::from_utf8(content(&path, &next).unwrap()).unwrap();
                session.write_str(&path, &text).await.map(drop)
            }
        };
        if storm.outcome(&format!("session {s} '{path}'"), result) {
            let mut m = lock(&model);
            let p = m[s].paths.get_mut(&path).unwrap();
            p.acked = p.history.len() - 1;
        } else {
            return;
        }
    }
}

/// Takes snapshots now and then until the server dies.
async fn snapshotter(
    client: Client,
    s: usize,
    iteration: usize,
    model: Model,
    storm: Arc<Storm>,
    mut rng: Rng,
) {
    for n in 0.. {
        tokio::time::sleep(Duration::from_millis(50 + rng.below(300))).await;
        if storm.killed.load(Ordering::SeqCst) {
            return;
        }
        // Now and then delete a snapshot of an earlier iteration instead:
        // the store's garbage collection is cut short by the kill too.
        if rng.below(4) == 0 {
            let doomed = {
                let mut m = lock(&model);
                let session = m[s].id.clone();
                m[s].snapshots
                    .iter_mut()
                    .find(|k| k.verified && !k.deleting)
                    .map(|k| {
                        k.deleting = true;
                        (session, k.id.clone())
                    })
            };
            if let Some((session, snapshot)) = doomed {
                storm.snapshot_deletes.fetch_add(1, Ordering::SeqCst);
                let result = client.delete_snapshot(&session, &snapshot).await;
                if !storm.outcome(&format!("delete snapshot {snapshot}"), result) {
                    return;
                }
                lock(&model)[s].snapshots.retain(|k| k.id != snapshot);
                continue;
            }
        }
        let tag = format!("i{iteration}-n{n}");
        let id = {
            let mut m = lock(&model);
            let from = m[s]
                .paths
                .iter()
                .map(|(p, pm)| (p.clone(), pm.acked))
                .collect();
            m[s].in_flight = Some(SnapshotInFlight {
                tag: tag.clone(),
                from,
            });
            m[s].id.clone()
        };
        let result = client.snapshot(&id, &tag).await;
        let ok = match &result {
            Ok(info) => Some(info.id.clone()),
            Err(_) => None,
        };
        if !storm.outcome(&format!("snapshot {tag}"), result) {
            return;
        }
        let mut m = lock(&model);
        let flight = m[s].in_flight.take().unwrap();
        let allowed = window(&m[s].paths, &flight.from);
        m[s].snapshots.push(SnapshotExpect {
            id: ok.unwrap(),
            tag,
            allowed,
            verified: false,
            deleting: false,
        });
    }
}

/// The states each path may have had in a snapshot whose request was sent
/// when the paths' acknowledged indices were `from`, and which was
/// answered (or cut off) now.
fn window(
    paths: &BTreeMap<String, PathModel>,
    from: &BTreeMap<String, usize>,
) -> BTreeMap<String, Vec<State>> {
    paths
        .iter()
        .map(|(p, pm)| {
            let start = from.get(p).copied().unwrap_or(0);
            (p.clone(), pm.history[start..].to_vec())
        })
        .collect()
}

/// The whole file, or `None` when it does not exist.
async fn fetch(session: &Session, path: &str) -> Option<Vec<u8>> {
    let opened = session
        .read_bytes(&parse_path(path).unwrap(), ByteRange::default(), CHUNK)
        .await;
    let mut stream = match opened {
        Ok(s) => s,
        Err(Error::FileNotFound { .. }) => return None,
        Err(e) => panic!("ReadBytes '{path}' after the restart: {e:?}"),
    };
    let mut out = Vec::new();
    while let Some(chunk) = stream.chunks.next().await {
        out.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("ReadBytes '{path}': {e:?}")));
    }
    Some(out)
}

/// The state of `path` as the server serves it, checked to be whole.
async fn observe(session: &Session, path: &str) -> State {
    match fetch(session, path).await {
        None => State::Absent,
        Some(bytes) => validate(path, &bytes).unwrap_or_else(|e| panic!("{e}")),
    }
}

/// Every file under `dir` on disk, relative, with `/` separators.
fn files_on_disk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        assert!(
            !name.starts_with(TEMP_PREFIX),
            "a temporary entry '{prefix}{name}' is visible in the workspace root {}",
            dir.display()
        );
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_on_disk(&entry.path(), &format!("{prefix}{name}/"), out);
        } else {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

/// The files the server lists, by Glob.
async fn files_served(session: &Session) -> BTreeSet<String> {
    let mut query = GlobQuery::new("**");
    query.max_results = u64::MAX;
    let found = session.glob(query).await.unwrap();
    found.paths.iter().map(|p| p.as_str().to_string()).collect()
}

fn present(paths: &BTreeMap<String, PathModel>) -> BTreeSet<String> {
    paths
        .iter()
        .filter(|(_, pm)| *pm.current() != State::Absent)
        .map(|(p, _)| p.clone())
        .collect()
}

/// Everything that must hold after a restart; settles the model on what
/// the server now holds.
/// Returns how many snapshots it restored and checked.
async fn verify_after_restart(client: &Client, data_dir: &Path, model: &Model, seed: u64) -> usize {
    let mut restored_snapshots = 0;
    let ids: BTreeSet<String> = lock(model).iter().map(|m| m.id.clone()).collect();
    let listed: BTreeSet<String> = client
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(
        listed, ids,
        "sessions lost or invented by the crash (CRASH_SEED={seed})"
    );

    for s in 0..SESSIONS {
        let (id, root) = {
            let m = lock(model);
            (m[s].id.clone(), m[s].root.clone())
        };
        // A session the kill left with work to finish answers once it is
        // done (UNAVAILABLE until then).
        first_listing(client, &id).await;
        let session = client.session(&id);
        // Each file: its acknowledged state or the one in flight.
        let paths: Vec<String> = lock(model)[s].paths.keys().cloned().collect();
        let mut seen = BTreeMap::new();
        for path in &paths {
            let state = observe(&session, path).await;
            let m = lock(model);
            let pm = &m[s].paths[path];
            let allowed = &pm.history[pm.acked..];
            assert!(
                allowed.contains(&state),
                "session {s}: '{path}' holds {state:?}; allowed (acknowledged first, then in flight): {allowed:?} (CRASH_SEED={seed})"
            );
            seen.insert(path.clone(), state);
        }
        // The in-flight snapshot's window ends at the kill: take it before
        // the model forgets what did not land.
        let flight = {
            let mut m = lock(model);
            let flight = m[s].in_flight.take();
            flight.map(|f| (f.tag.clone(), window(&m[s].paths, &f.from)))
        };
        {
            let mut m = lock(model);
            for (path, state) in seen {
                let pm = m[s].paths.get_mut(&path).unwrap();
                if *pm.current() != state {
                    pm.settle(state);
                } else {
                    pm.history.truncate(pm.acked + 1);
                }
            }
        }
        // Nothing else in the root: no temporary, partial or phantom file.
        let mut on_disk = BTreeSet::new();
        files_on_disk(&root, "", &mut on_disk);
        let expected = present(&lock(model)[s].paths);
        assert_eq!(
            on_disk, expected,
            "session {s}: the files on disk are not the model's (CRASH_SEED={seed})"
        );
        assert_eq!(files_served(&session).await, expected, "session {s}: Glob");
        let staging = data_dir.join("sessions").join(&id).join("staging");
        assert_eq!(
            std::fs::read_dir(&staging).unwrap().count(),
            0,
            "session {s}: staged uploads left behind"
        );

        // Snapshots: every acknowledged one listed, the one in flight
        // perhaps, nothing else; each new one restores exactly.
        let listed = client.list_snapshots(&id).await.unwrap();
        {
            let mut m = lock(model);
            // A delete cut short: the snapshot may be gone or still there;
            // if there, it and every other must still restore whole.
            let interrupted = m[s].snapshots.iter().any(|k| k.deleting);
            m[s].snapshots
                .retain(|k| !k.deleting || listed.iter().any(|l| l.id == k.id));
            for known in &mut m[s].snapshots {
                known.verified &= !interrupted;
                known.deleting = false;
            }
            for known in &m[s].snapshots {
                assert!(
                    listed.iter().any(|l| l.id == known.id && l.tag == known.tag),
                    "session {s}: acknowledged snapshot {} ({}) is not listed after the crash (CRASH_SEED={seed})",
                    known.id,
                    known.tag
                );
            }
            for l in &listed {
                if m[s].snapshots.iter().any(|k| k.id == l.id) {
                    continue;
                }
                match &flight {
                    Some((tag, allowed)) if *tag == l.tag => m[s].snapshots.push(SnapshotExpect {
                        id: l.id.clone(),
                        tag: tag.clone(),
                        allowed: allowed.clone(),
                        verified: false,
                        deleting: false,
                    }),
                    _ => panic!(
                        "session {s}: snapshot {} ({}) was never taken (CRASH_SEED={seed})",
                        l.id, l.tag
                    ),
                }
            }
        }
        let unverified: Vec<(String, BTreeMap<String, Vec<State>>)> = lock(model)[s]
            .snapshots
            .iter()
            .filter(|k| !k.verified)
            .map(|k| (k.id.clone(), k.allowed.clone()))
            .collect();
        for (snapshot, allowed) in unverified {
            client
                .restore(&id, &snapshot)
                .await
                .unwrap_or_else(|e| panic!("session {s}: snapshot {snapshot} does not restore after the crash: {e:?} (CRASH_SEED={seed})"));
            let mut restored = BTreeSet::new();
            let known: Vec<String> = lock(model)[s].paths.keys().cloned().collect();
            for path in known.iter().filter(|p| !allowed.contains_key(*p)) {
                let state = observe(&session, path).await;
                assert_eq!(
                    state,
                    State::Absent,
                    "session {s}: snapshot {snapshot} kept '{path}', made after it"
                );
                lock(model)[s].paths.get_mut(path).unwrap().settle(state);
            }
            for (path, states) in &allowed {
                let state = observe(&session, path).await;
                assert!(
                    states.contains(&state),
                    "session {s}: snapshot {snapshot} restored '{path}' as {state:?}; it captured one of {states:?} (CRASH_SEED={seed})"
                );
                if state != State::Absent {
                    restored.insert(path.clone());
                }
                lock(model)[s].paths.get_mut(path).unwrap().settle(state);
            }
            assert_eq!(
                files_served(&session).await,
                restored,
                "session {s}: snapshot {snapshot} restored other files than it holds"
            );
            let mut m = lock(model);
            let known = m[s]
                .snapshots
                .iter_mut()
                .find(|k| k.id == snapshot)
                .unwrap();
            known.verified = true;
            restored_snapshots += 1;
        }
        // Keep the store small: drop all but the newest verified ones.
        let doomed: Vec<String> = {
            let mut m = lock(model);
            let n = m[s].snapshots.len().saturating_sub(KEEP_SNAPSHOTS);
            m[s].snapshots.drain(..n).map(|k| k.id).collect()
        };
        for snapshot in doomed {
            client.delete_snapshot(&id, &snapshot).await.unwrap();
        }

        // The server serves normally.
        let probe = session.write_str("probe.txt", "alive\n").await.unwrap();
        assert_eq!(probe.size, 6);
        assert_eq!(
            session.read_to_string("probe.txt").await.unwrap(),
            "alive\n"
        );
        session
            .delete(&parse_path("probe.txt").unwrap(), DeleteOptions::default())
            .await
            .unwrap();
    }
    restored_snapshots
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_mid_storm_restarts_with_every_acknowledged_write_whole() {
    let loops: usize = env("CRASH_LOOPS", 5);
    let seed = crash_seed();
    let max_kill_ms: u64 = env("CRASH_MAX_KILL_MS", 1500);
    println!("crash: {loops} iterations, kill within {max_kill_ms} ms, CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let (_scratch, data_dir, log) = scratch();
    let model: Model = Arc::new(Mutex::new(Vec::new()));
    let generation = Arc::new(AtomicU64::new(1));

    let mut server = Server::start(&data_dir, &log);
    let client = Client::connect(&server.url).await.unwrap();
    for _ in 0..SESSIONS {
        let info = client
            .create_session(SessionOptions::directory())
            .await
            .unwrap();
        let session = client.session(&info.id);
        let mut paths = BTreeMap::new();
        for w in 0..WRITERS {
            let path = format!("w{w}/slots.txt");
            let state = State::Slots([0; EDIT_SLOTS]);
            let text = String::from_utf8(content(&path, &state).unwrap()).unwrap();
            session.write_str(&path, &text).await.unwrap();
            paths.insert(
                path,
                PathModel {
                    history: vec![state],
                    acked: 0,
                },
            );
        }
        lock(&model).push(SessionModel {
            id: info.id,
            root: info.root_path.expect("a DIRECTORY session has a root"),
            paths,
            ..SessionModel::default()
        });
    }

    let (mut acked_total, mut snapshots_total) = (0u64, 0usize);
    let started = Instant::now();
    for iteration in 0..loops {
        let client = Client::connect(&server.url).await.unwrap();
        let storm = Arc::new(Storm {
            killed: AtomicBool::new(false),
            unexpected: Mutex::new(Vec::new()),
            generation: generation.clone(),
            acked_ops: AtomicU64::new(0),
            snapshot_deletes: AtomicU64::new(0),
        });
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let id = lock(&model)[s].id.clone();
            for w in 0..WRITERS {
                // Each writer on its own connection.
                let own = Client::connect(&server.url).await.unwrap();
                tasks.push(tokio::spawn(writer(
                    own.session(&id),
                    s,
                    w,
                    model.clone(),
                    storm.clone(),
                    Rng(rng.next_u64()),
                )));
            }
            tasks.push(tokio::spawn(snapshotter(
                client.clone(),
                s,
                iteration,
                model.clone(),
                storm.clone(),
                Rng(rng.next_u64()),
            )));
        }
        let kill_after = Duration::from_millis(rng.below(max_kill_ms + 1));
        tokio::time::sleep(kill_after).await;
        storm.killed.store(true, Ordering::SeqCst);
        server.kill();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("a storm client hung after the kill")
                .expect("a storm client panicked");
        }
        let unexpected = storm.unexpected.lock().unwrap().clone();
        assert!(
            unexpected.is_empty(),
            "errors before the kill (CRASH_SEED={seed}): {unexpected:?}"
        );
        let acked = storm.acked_ops.load(Ordering::SeqCst);
        acked_total += acked;

        server = Server::start(&data_dir, &log);
        let client = Client::connect(&server.url).await.unwrap();
        let restored = verify_after_restart(&client, &data_dir, &model, seed).await;
        snapshots_total += restored;
        println!(
            "crash: iteration {iteration}: killed after {} ms, {acked} calls acknowledged ({} snapshot deletes sent); verified, {restored} snapshots restored",
            kill_after.as_millis(),
            storm.snapshot_deletes.load(Ordering::SeqCst)
        );
    }
    server.kill();
    println!(
        "crash: {loops} kills, {acked_total} acknowledged calls, {snapshots_total} snapshots restored, all whole, in {:.1} s (CRASH_SEED={seed})",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn validation_refuses_torn_and_foreign_content() {
    let path = "w0/blob.bin";
    let state = State::Blob {
        generation: 7,
        len: 200_000,
    };
    let whole = content(path, &state).unwrap();
    assert_eq!(validate(path, &whole), Ok(state.clone()));
    assert!(
        validate(path, &whole[..whole.len() - 1]).is_err(),
        "truncated"
    );
    let mut mixed = whole.clone();
    let other = content(
        path,
        &State::Blob {
            generation: 8,
            len: 200_000,
        },
    )
    .unwrap();
    mixed[100_000..].copy_from_slice(&other[100_000..]);
    assert!(validate(path, &mixed).is_err(), "two versions mixed");
    assert!(
        validate("w1/blob.bin", &whole).is_err(),
        "another file's content"
    );
    let slots = State::Slots([1, 2, 3, 4, 5, 6]);
    let text = content("s", &slots).unwrap();
    assert_eq!(validate("s", &text), Ok(slots));
    assert!(
        validate("s", &text[..text.len() - 2]).is_err(),
        "torn slots"
    );
}

/// A client that read a version before the server went down must not be
/// able to overwrite a change made after that read once the server is back:
/// versions keep growing across restarts, not start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_seen_before_a_crash_is_stale_after_it() {
    let (_scratch, data_dir, log) = scratch();
    let mut server = Server::start(&data_dir, &log);
    let client = Client::connect(&server.url).await.unwrap();
    let info = client
        .create_session(SessionOptions::directory())
        .await
        .unwrap();
    let session = client.session(&info.id);
    let mut seen = Vec::new();
    for i in 0..5 {
        seen.push(
            session
                .write_str("a.txt", &format!("{i}\n"))
                .await
                .unwrap()
                .version,
        );
    }
    server.kill();

    let restarted = Server::start(&data_dir, &log);
    let client = Client::connect(&restarted.url).await.unwrap();
    let session = client.session(&info.id);
    let path = parse_path("a.txt").unwrap();
    let now = session.stat(&path).await.unwrap().version;
    for stale in &seen[..4] {
        assert_ne!(now, *stale, "a version from before the crash came back");
        let result = session
            .write(
                &path,
                "lost update\n",
                WriteOptions {
                    if_version: Some(*stale),
                    ..WriteOptions::default()
                },
            )
            .await;
        assert!(
            matches!(result, Err(Error::VersionMismatch { .. })),
            "a write conditional on version {stale}, from before the crash, was {result:?}"
        );
    }
    assert_eq!(session.read_to_string("a.txt").await.unwrap(), "4\n");
}

// ---- Restore and ImportArchive cut short ------------------------------

/// Files of the tree a replacement writes: enough that its apply step
/// (removals, directories, renames) takes a while to kill inside.
const NEW_FILES: usize = 600;

/// A whole tree: path -> `Some(content)` for a file, `None` for a directory.
type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// `files` and `empty_dirs`, with every parent directory.
fn tree_of(files: &[(String, Vec<u8>)], empty_dirs: &[&str]) -> Tree {
    let mut tree = Tree::new();
    let add_parents = |tree: &mut Tree, path: &str| {
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            tree.insert(path[..at + i].to_string(), None);
            at += i + 1;
        }
    };
    for (path, data) in files {
        add_parents(&mut tree, path);
        tree.insert(path.clone(), Some(data.clone()));
    }
    for dir in empty_dirs {
        add_parents(&mut tree, dir);
        tree.insert(dir.to_string(), None);
    }
    tree
}

/// The old tree: paths the new one also holds (with other contents), a
/// file where the new tree has a directory and a directory where it has a
/// file, and an empty directory.
fn old_files() -> (Vec<(String, Vec<u8>)>, Vec<&'static str>) {
    let mut files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| {
            (
                format!("d{:02}/f{i:04}.txt", i % 10),
                format!("old {i}\n").into_bytes(),
            )
        })
        .collect();
    files.push(("kind".into(), b"old: a file\n".to_vec()));
    files.push((
        "flip/inner.txt".into(),
        b"old: under a directory\n".to_vec(),
    ));
    files.push(("old-only/notes.txt".into(), b"old only\n".to_vec()));
    (files, vec!["old-empty/inner"])
}

fn new_files() -> (Vec<(String, Vec<u8>)>, Vec<&'static str>) {
    let mut files: Vec<(String, Vec<u8>)> = (0..NEW_FILES)
        .map(|i| {
            (
                format!("d{:02}/f{i:04}.txt", i % 10),
                format!("new {i}\n").repeat(1 + i % 50).into_bytes(),
            )
        })
        .collect();
    files.push(("kind/now-a-directory.txt".into(), b"new\n".to_vec()));
    files.push(("flip".into(), b"new: a file\n".to_vec()));
    (files, vec!["new-empty"])
}

/// The archive ExportArchive makes of `files` and `dirs`.
async fn archive_of(
    client: &Client,
    (files, dirs): (Vec<(String, Vec<u8>)>, Vec<&str>),
) -> Vec<u8> {
    wsfs_tests::kit::archive_of(client, files, &dirs).await
}

/// The workspace as it is on disk; no temporary entry may show.
fn tree_on_disk(dir: &Path, prefix: &str, out: &mut Tree) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        assert!(
            !name.starts_with(TEMP_PREFIX),
            "a temporary entry '{prefix}{name}' is visible in the workspace root"
        );
        let path = format!("{prefix}{name}");
        if entry.file_type().unwrap().is_dir() {
            out.insert(path.clone(), None);
            tree_on_disk(&entry.path(), &format!("{path}/"), out);
        } else {
            out.insert(path, Some(std::fs::read(entry.path()).unwrap()));
        }
    }
}

/// What differs between two trees, briefly.
fn difference(now: &Tree, expected: &Tree) -> String {
    let missing = expected.keys().filter(|k| !now.contains_key(*k)).count();
    let extra = now.keys().filter(|k| !expected.contains_key(*k)).count();
    let changed = now
        .iter()
        .filter(|(k, v)| expected.get(*k).is_some_and(|e| e != *v))
        .count();
    format!("{missing} missing, {extra} extra, {changed} different")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replacement {
    Restore,
    Import,
    /// A restore of one directory, [`ONE_PATH`].
    RestoreOnePath,
}

/// The directory [`Replacement::RestoreOnePath`] restores.
const ONE_PATH: &str = "d03";

/// Starts `op` on the session and resolves when it answers.
fn replacement(
    client: &Client,
    id: &str,
    op: Replacement,
    snapshot: &str,
    archive: &[u8],
) -> tokio::task::JoinHandle<wsfs::Result<()>> {
    let (client, id, snapshot, archive) = (
        client.clone(),
        id.to_string(),
        snapshot.to_string(),
        archive.to_vec(),
    );
    tokio::spawn(async move {
        match op {
            Replacement::Restore => client.restore(&id, &snapshot).await.map(drop),
            Replacement::RestoreOnePath => client
                .restore_path(&id, &snapshot, &parse_path(ONE_PATH).unwrap())
                .await
                .map(drop),
            Replacement::Import => client
                .session(&id)
                .import_from_reader(std::io::Cursor::new(archive))
                .await
                .map(drop),
        }
    })
}

/// Waits for the intent record of a replacement to appear (its apply step
/// has begun), or for `deadline`, or for `call` to finish.
async fn intent_appears<T>(
    staging: &Path,
    deadline: Instant,
    call: &tokio::task::JoinHandle<T>,
) -> bool {
    while Instant::now() < deadline && !call.is_finished() {
        if staging.join("intent.json").exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// A running server with one DIRECTORY session that held the new tree
/// when snapshot `snapshot` was taken, and the archives of both trees.
struct Replacing {
    _scratch: tempfile::TempDir,
    data_dir: PathBuf,
    log: PathBuf,
    server: Server,
    old_archive: Vec<u8>,
    new_archive: Vec<u8>,
    id: String,
    root: PathBuf,
    staging: PathBuf,
    snapshot: String,
}

impl Replacing {
    async fn start(
        old: (Vec<(String, Vec<u8>)>, Vec<&str>),
        new: (Vec<(String, Vec<u8>)>, Vec<&str>),
    ) -> Replacing {
        let (scratch, data_dir, log) = scratch();
        let server = Server::start(&data_dir, &log);
        let client = Client::connect(&server.url).await.unwrap();
        let (old_archive, new_archive) = (
            archive_of(&client, old).await,
            archive_of(&client, new).await,
        );
        let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
        let id = info.id.clone();
        session
            .import_from_reader(std::io::Cursor::new(new_archive.clone()))
            .await
            .unwrap();
        let snapshot = client.snapshot(&id, "new").await.unwrap().id;
        Replacing {
            _scratch: scratch,
            staging: data_dir.join("sessions").join(&id).join("staging"),
            root: info.root_path.expect("a DIRECTORY session has a root"),
            data_dir,
            log,
            server,
            old_archive,
            new_archive,
            id,
            snapshot,
        }
    }
}

/// Restore and ImportArchive on a DIRECTORY session, SIGKILLed at random
/// moments (half of them uniformly over the call, half inside its apply
/// step, after its intent record appeared), then restarted: the workspace
/// is the old tree or the new one, whole, never a mix; the new one when the
/// call had answered. `CRASH_REPLACE_LOOPS` (default 6) sets the kills;
/// `CRASH_SEED` replays the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_or_import_killed_part_way_leaves_the_old_tree_or_the_new() {
    let loops: usize = env("CRASH_REPLACE_LOOPS", 6);
    let seed = crash_seed();
    println!("crash: {loops} replacements killed, CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let Replacing {
        _scratch,
        data_dir,
        log,
        mut server,
        old_archive,
        new_archive,
        id,
        root,
        staging,
        snapshot,
    } = Replacing::start(old_files(), new_files()).await;
    let (old, new) = {
        let ((of, od), (nf, nd)) = (old_files(), new_files());
        (tree_of(&of, &od), tree_of(&nf, &nd))
    };
    let client = Client::connect(&server.url).await.unwrap();
    let session = client.session(&id);

    // How long each call takes, and when its apply step begins.
    let mut timing = BTreeMap::new();
    for op in [Replacement::Restore, Replacement::Import] {
        session
            .import_from_reader(std::io::Cursor::new(old_archive.clone()))
            .await
            .unwrap();
        let started = Instant::now();
        let call = replacement(&client, &id, op, &snapshot, &new_archive);
        let recorded = intent_appears(&staging, started + Duration::from_secs(120), &call).await;
        let applying = started.elapsed();
        call.await.unwrap().unwrap();
        let total = started.elapsed();
        // With no record to see, the second half of the call stands in
        // for its apply step.
        let applying = if recorded { applying } else { total / 2 };
        let mut now = Tree::new();
        tree_on_disk(&root, "", &mut now);
        assert!(
            now == new,
            "{op:?} without a kill: {}",
            difference(&now, &new)
        );
        println!(
            "crash: {op:?} takes {} ms, its apply step from {} ms",
            total.as_millis(),
            applying.as_millis()
        );
        timing.insert(format!("{op:?}"), (applying, total));
    }

    let (mut ended_old, mut ended_new, mut recovered) = (0, 0, 0);
    for iteration in 0..loops {
        let client = Client::connect(&server.url).await.unwrap();
        client
            .session(&id)
            .import_from_reader(std::io::Cursor::new(old_archive.clone()))
            .await
            .unwrap();
        let op = if rng.below(2) == 0 {
            Replacement::Restore
        } else {
            Replacement::Import
        };
        let (applying, total) = timing[&format!("{op:?}")];
        let in_apply = iteration % 2 == 1;
        let started = Instant::now();
        let call = replacement(&client, &id, op, &snapshot, &new_archive);
        if in_apply {
            // Somewhere in the apply step (or just after it).
            let span = (total - applying).as_micros() as u64 + 1;
            // Calls after a restart run slower than the calibration (cold
            // caches): wait for the record itself.
            intent_appears(&staging, started + Duration::from_secs(30), &call).await;
            tokio::time::sleep(Duration::from_micros(rng.below(span))).await;
        } else {
            let span = total.as_micros() as u64 * 6 / 5 + 1;
            tokio::time::sleep(Duration::from_micros(rng.below(span))).await;
        }
        let killed_at = started.elapsed();
        server.kill();
        let intent_left = staging.join("intent.json").exists();
        let answered = matches!(
            tokio::time::timeout(Duration::from_secs(60), call).await,
            Ok(Ok(Ok(())))
        );
        recovered += intent_left as usize;

        server = Server::start(&data_dir, &log);
        let client = Client::connect(&server.url).await.unwrap();
        let listed = client.list_sessions().await.unwrap();
        assert!(
            listed.iter().any(|s| s.id == id),
            "iteration {iteration}: the session is not served after the restart (CRASH_SEED={seed})"
        );
        // Served once its recovery ends.
        first_listing(&client, &id).await;
        let mut now = Tree::new();
        tree_on_disk(&root, "", &mut now);
        let what = format!(
            "iteration {iteration}: {op:?} killed at {} ms (intent record {}), answered: {answered}",
            killed_at.as_millis(),
            if intent_left { "present" } else { "absent" }
        );
        if now == new {
            ended_new += 1;
        } else {
            assert!(
                now == old && !answered,
                "{what}: the workspace is neither the old tree nor the new one: against the old {}, against the new {} (CRASH_SEED={seed})",
                difference(&now, &old),
                difference(&now, &new)
            );
            ended_old += 1;
        }
        let staged: Vec<_> = std::fs::read_dir(&staging).unwrap().flatten().collect();
        assert!(
            staged.is_empty(),
            "{what}: the staging directory is not empty after the restart"
        );
        let probe = client.session(&id);
        probe.write_str("probe.txt", "probe\n").await.unwrap();
        assert_eq!(probe.read_to_string("probe.txt").await.unwrap(), "probe\n");
        println!(
            "crash: {what}: {}",
            if now == new { "new tree" } else { "old tree" }
        );
    }
    server.kill();
    println!(
        "crash: {loops} replacements killed: {ended_old} ended old, {ended_new} new, {recovered} rolled forward from an intent record (CRASH_SEED={seed})"
    );
}

// ---- The first answer after a restart ---------------------------------

/// Files of the trees the first-answer tests replace and delete: enough
/// that a roll-forward or a removal takes long enough to be caught.
const BIG_FILES: usize = 3_000;

/// A workspace as List shows it: path -> size, `None` for a directory.
type Shown = BTreeMap<String, Option<u64>>;

fn shown(tree: &Tree) -> Shown {
    tree.iter()
        .map(|(path, data)| (path.clone(), data.as_ref().map(|d| d.len() as u64)))
        .collect()
}

/// `BIG_FILES` files in 30 directories, their bytes depending on `tag`,
/// plus `tag`'s own file.
fn big_files(tag: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = (0..BIG_FILES)
        .map(|i| {
            (
                format!("d{:02}/f{i:04}.txt", i % 30),
                // Each tree's files have sizes of their own: a listing
                // tells them apart.
                format!("{tag} {i}\n")
                    .repeat(1 + (i + usize::from(tag.as_bytes()[0])) % 7)
                    .into_bytes(),
            )
        })
        .collect();
    files.push((format!("{tag}-only.txt"), b"only here\n".to_vec()));
    files
}

/// The whole workspace as the server lists it.
async fn listing(session: &Session) -> wsfs::Result<Shown> {
    let listed = session.list(&wsfs::CanonicalPath::root(), 64).await?;
    assert!(!listed.truncated, "the workspace is listed whole");
    Ok(listed
        .entries
        .into_iter()
        .map(|m| {
            let size = (m.kind != wsfs::FileKind::Directory).then_some(m.size);
            (m.path.as_str().to_string(), size)
        })
        .collect())
}

/// A refusal of a session whose recovery is pending.
fn is_recovering(e: &Error) -> bool {
    matches!(e, Error::Unavailable { message } if message.contains("being recovered after a restart"))
}

/// Lists session `id` from the moment the server starts until it answers;
/// every refusal before must be UNAVAILABLE naming the recovery. Returns
/// the first answer and how many refusals came before it.
async fn first_listing(client: &Client, id: &str) -> (Shown, usize) {
    let session = client.session(id);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut refused = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(60), listing(&session)).await {
            Ok(Ok(shown)) => return (shown, refused),
            Ok(Err(e)) if is_recovering(&e) => refused += 1,
            Ok(Err(e)) => panic!("List after the restart: {e:?}"),
            Err(_) => panic!("List after the restart did not answer within 60 s"),
        }
        assert!(
            Instant::now() < deadline,
            "the session was still recovering 120 s after the restart"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Restore, ImportArchive and a restore of one path on a DIRECTORY
/// session of 3,000 files, SIGKILLed inside their apply step, then the
/// server started again and called at once, as it accepts: the first
/// answer on the session is the old tree or the new one, whole (a session
/// still recovering answers UNAVAILABLE, naming the recovery, until it is
/// whole); a bystander session answers while it recovers; a Write racing
/// the recovery either lands on the whole new tree or is refused and
/// changes nothing. `CRASH_FIRST_ANSWER_KILLS` (default 2) sets the kills
/// per case; `CRASH_SEED` replays the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_after_a_restart_is_the_old_tree_or_the_new() {
    let kills: usize = env("CRASH_FIRST_ANSWER_KILLS", 2);
    let seed = crash_seed();
    println!("crash: first answers, {kills} kills per case, CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let (old_files, new_files) = (big_files("old"), big_files("new"));
    let Replacing {
        _scratch,
        data_dir,
        log,
        mut server,
        old_archive,
        new_archive,
        id,
        root,
        staging,
        snapshot,
    } = Replacing::start((old_files.clone(), vec![]), (new_files.clone(), vec![])).await;
    let client = Client::connect(&server.url).await.unwrap();
    let (old, new) = (tree_of(&old_files, &[]), tree_of(&new_files, &[]));
    // The restore of `d03` alone: the new tree there, the old elsewhere.
    let mut one_path = old.clone();
    let under = |path: &str| path == ONE_PATH || path.starts_with(&format!("{ONE_PATH}/"));
    one_path.retain(|path, _| !under(path));
    one_path.extend(
        new.iter()
            .filter(|(path, _)| under(path))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let (bystander, bystander_info) = client.create(SessionOptions::directory()).await.unwrap();
    bystander.write_str("here.txt", "here\n").await.unwrap();

    let (mut recovered, mut refusals_seen, mut bystander_first) = (0, 0, 0);
    let cases = [
        Replacement::Restore,
        Replacement::Import,
        Replacement::RestoreOnePath,
    ];
    for (iteration, case) in cases
        .iter()
        .flat_map(|c| std::iter::repeat_n(*c, kills))
        .enumerate()
    {
        let client = Client::connect(&server.url).await.unwrap();
        client
            .session(&id)
            .import_from_reader(std::io::Cursor::new(old_archive.clone()))
            .await
            .unwrap();
        let started = Instant::now();
        let call = replacement(&client, &id, case, &snapshot, &new_archive);
        // Inside the apply step: its record is on disk.
        intent_appears(&staging, started + Duration::from_secs(60), &call).await;
        tokio::time::sleep(Duration::from_micros(rng.below(20_000))).await;
        server.kill();
        let intent_left = staging.join("intent.json").exists();
        recovered += intent_left as usize;
        let answered = matches!(
            tokio::time::timeout(Duration::from_secs(60), call).await,
            Ok(Ok(Ok(())))
        );
        let target = match case {
            Replacement::RestoreOnePath => &one_path,
            _ => &new,
        };

        server = Server::start(&data_dir, &log);
        let client = Client::connect(&server.url).await.unwrap();
        // As the server accepts: the bystander, a write racing the
        // recovery, and the recovering session's first answer.
        let racer = {
            let session = client.session(&id);
            tokio::spawn(async move { session.write_str("d00/raced.txt", "raced\n").await })
        };
        let by = tokio::time::timeout(
            Duration::from_secs(60),
            listing(&client.session(&bystander_info.id)),
        )
        .await
        .expect("the bystander answers within 60 s")
        .expect("the bystander is served while the other session recovers");
        assert!(by.contains_key("here.txt"));
        let (first, refused) = first_listing(&client, &id).await;
        refusals_seen += refused;
        bystander_first += (refused > 0) as usize;
        let what = format!(
            "iteration {iteration}: {case:?} killed at {} ms (intent record {}), answered: {answered}, {refused} refusals before the first answer",
            started.elapsed().as_millis(),
            if intent_left { "left" } else { "gone" }
        );
        // The racing write may land before or after the first answer.
        let mut first = first;
        first.remove("d00/raced.txt");
        let (old_shown, target_shown) = (shown(&old), shown(target));
        assert!(
            first == target_shown || (first == old_shown && !answered),
            "{what}: the first answer is neither the old tree nor the new: against the old {}, against the new {} (CRASH_SEED={seed})",
            shown_difference(&first, &old_shown),
            shown_difference(&first, &target_shown),
        );
        // Once it answered: it landed on the tree the session answers
        // with, or was refused and changed nothing.
        let raced = racer.await.unwrap();
        let mut after = listing(&client.session(&id)).await.unwrap();
        match &raced {
            Ok(_) => assert_eq!(
                after.remove("d00/raced.txt"),
                Some(Some(6)),
                "{what}: the racing write succeeded but is not there"
            ),
            Err(e) => {
                assert!(
                    is_recovering(e),
                    "{what}: the racing write failed otherwise: {e:?}"
                );
                assert!(
                    !after.contains_key("d00/raced.txt"),
                    "{what}: a refused write landed"
                );
            }
        }
        assert!(
            after == first,
            "{what}: the tree changed after the first answer: {}",
            shown_difference(&after, &first)
        );
        let mut now = Tree::new();
        tree_on_disk(&root, "", &mut now);
        now.remove("d00/raced.txt");
        assert!(
            now == *target || (now == old && !answered),
            "{what}: the tree on disk is neither the old tree nor the new"
        );
        let staged: Vec<_> = std::fs::read_dir(&staging).unwrap().flatten().collect();
        assert!(
            staged.is_empty(),
            "{what}: the staging directory is not empty once served"
        );
        println!(
            "crash: {what}: {}, the racing write {}",
            if first == old_shown {
                "old tree"
            } else {
                "new tree"
            },
            if raced.is_ok() {
                "landed"
            } else {
                "was refused"
            }
        );
        client
            .session(&id)
            .delete(
                &parse_path("d00/raced.txt").unwrap(),
                DeleteOptions {
                    allow_missing: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    server.kill();
    println!(
        "crash: first answers: {recovered} kills left an intent record; {refusals_seen} refusals while recovering, in {bystander_first} restarts where the bystander answered first (CRASH_SEED={seed})"
    );
    assert!(
        recovered > 0,
        "no kill landed inside an apply step: nothing was rolled forward"
    );
    assert!(
        bystander_first > 0,
        "the bystander never answered while the other session recovered: one session's recovery held up the whole server"
    );
}

/// What differs between two listings, briefly.
fn shown_difference(now: &Shown, expected: &Shown) -> String {
    let missing = expected.keys().filter(|k| !now.contains_key(*k)).count();
    let extra = now.keys().filter(|k| !expected.contains_key(*k)).count();
    let changed = now
        .iter()
        .filter(|(k, v)| expected.get(*k).is_some_and(|e| e != *v))
        .count();
    format!("{missing} missing, {extra} extra, {changed} different")
}

/// A recursive Delete of a directory of 3,000 files, SIGKILLed a moment
/// after it was sent (50 ms and other random moments), then the server
/// started again and called at once: the first answer shows the whole
/// directory or none of it, never part; once the session answers, its
/// staging directory is empty. `CRASH_DELETE_KILLS` (default 4) sets the
/// kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_delete_killed_part_way_is_all_or_nothing() {
    deletes_killed(env("CRASH_DELETE_KILLS", 4), None).await;
}

/// The same for a session rooted on another filesystem than its staging
/// directory (a tmpfs the test mounts; root only): the tree waits in the
/// root's hidden `.wsfs-tmp-removing`, emptied before the session answers
/// after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_delete_across_filesystems_is_all_or_nothing_too() {
    let Some(disk) = SmallDisk::mount("64m", 20_000) else {
        return;
    };
    deletes_killed(env("CRASH_DELETE_KILLS", 4), Some(&disk.mount)).await;
}

/// Recursive Deletes of `big/` (3,000 files) killed `kills` times, in a
/// session of its own directory or rooted in `rooted_in`; see
/// [`a_recursive_delete_killed_part_way_is_all_or_nothing`].
async fn deletes_killed(kills: usize, rooted_in: Option<&Path>) {
    let seed = crash_seed();
    println!(
        "crash: {kills} recursive deletes killed (rooted in {rooted_in:?}), CRASH_SEED={seed}"
    );
    let mut rng = Rng(seed);
    let (_scratch, data_dir, log) = scratch();
    let allowed: Vec<&std::ffi::OsStr> = match rooted_in {
        Some(dir) => vec!["--allow-root".as_ref(), dir.as_os_str()],
        None => Vec::new(),
    };
    let mut server = Server::start_with(&data_dir, &log, &allowed);
    let client = Client::connect(&server.url).await.unwrap();
    let files: Vec<(String, Vec<u8>)> = big_files("big")
        .into_iter()
        .map(|(path, data)| (format!("big/{path}"), data))
        .chain([("keep.txt".to_string(), b"kept\n".to_vec())])
        .collect();
    let archive = wsfs_tests::kit::archive_of(&client, files.clone(), &[]).await;
    let full = shown(&tree_of(&files, &[]));
    let mut without = full.clone();
    without.retain(|path, _| path != "big" && !path.starts_with("big/"));
    let options = match rooted_in {
        Some(dir) => SessionOptions::directory().root(dir),
        None => SessionOptions::directory(),
    };
    let (_, info) = client.create(options).await.unwrap();
    let id = info.id.clone();
    let staging = data_dir.join("sessions").join(&id).join("staging");
    // Where a deleted tree waits across filesystems.
    let removing = info.root_path.unwrap().join(".wsfs-tmp-removing");
    let (mut whole, mut gone) = (0, 0);
    for iteration in 0..kills {
        let client = Client::connect(&server.url).await.unwrap();
        let session = client.session(&id);
        session
            .import_from_reader(std::io::Cursor::new(archive.clone()))
            .await
            .unwrap();
        // 50 ms in, as reported, then anywhere in the first 100 ms.
        let wait = match iteration {
            0 => Duration::from_millis(50),
            _ => Duration::from_micros(rng.below(60_000)),
        };
        let call = {
            let session = session.clone();
            tokio::spawn(async move {
                let options = DeleteOptions {
                    recursive: true,
                    ..Default::default()
                };
                session.delete(&parse_path("big").unwrap(), options).await
            })
        };
        tokio::time::sleep(wait).await;
        server.kill();
        let answered = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .ok()
            .and_then(|joined| joined.ok())
            .and_then(|result| result.ok());
        server = Server::start_with(&data_dir, &log, &allowed);
        let client = Client::connect(&server.url).await.unwrap();
        let (first, refused) = first_listing(&client, &id).await;
        let what = format!(
            "iteration {iteration}: killed {} ms in, answered: {answered:?}, {refused} refusals before the first answer",
            wait.as_millis()
        );
        if first == full {
            assert!(
                answered.is_none(),
                "{what}: the Delete answered but the directory is back"
            );
            whole += 1;
        } else {
            assert!(
                first == without,
                "{what}: the first answer shows part of the directory: against the whole {}, against none {} (CRASH_SEED={seed})",
                shown_difference(&first, &full),
                shown_difference(&first, &without)
            );
            gone += 1;
        }
        if let Some(deleted) = answered {
            assert_eq!(
                deleted,
                (full.len() - without.len()) as u64,
                "{what}: the count deleted"
            );
        }
        let staged: Vec<_> = std::fs::read_dir(&staging).unwrap().flatten().collect();
        assert!(
            entries_in(&removing).is_empty(),
            "{what}: the root's removal directory is not empty once the session answers"
        );
        assert!(
            staged.is_empty(),
            "{what}: the staging directory holds {} entries once the session answers",
            staged.len()
        );
        println!(
            "crash: {what}: {}",
            if first == full { "whole" } else { "gone" }
        );
    }
    // Without a kill: the Delete answers with the count, and the removal
    // it left to finish empties the staging directory soon after.
    let client = Client::connect(&server.url).await.unwrap();
    let session = client.session(&id);
    if session.stat(&parse_path("big").unwrap()).await.is_err() {
        session
            .import_from_reader(std::io::Cursor::new(archive.clone()))
            .await
            .unwrap();
    }
    let options = DeleteOptions {
        recursive: true,
        ..Default::default()
    };
    let deleted = session
        .delete(&parse_path("big").unwrap(), options)
        .await
        .unwrap();
    assert_eq!(deleted, (full.len() - without.len()) as u64);
    assert_eq!(listing(&session).await.unwrap(), without);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&staging).unwrap().next().is_some() || !entries_in(&removing).is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the deleted tree was not removed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A MEMORY session deletes as before: the count, and the tree gone.
    let (memory, _) = client.create(SessionOptions::memory()).await.unwrap();
    memory
        .import_from_reader(std::io::Cursor::new(archive.clone()))
        .await
        .unwrap();
    let deleted = memory
        .delete(&parse_path("big").unwrap(), options)
        .await
        .unwrap();
    assert_eq!(deleted, (full.len() - without.len()) as u64);
    assert_eq!(listing(&memory).await.unwrap(), without);
    server.kill();
    println!(
        "crash: {kills} recursive deletes killed: {whole} whole, {gone} gone (CRASH_SEED={seed})"
    );
}

// ---- A full disk -------------------------------------------------------

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None`, with the reason printed, when this process may not mount
    /// (not root); with `WSFS_REQUIRE_TOOLS=1` that fails the test instead.
    fn mount(size: &str, inodes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},nr_inodes={inodes},mode=0755"))
            .arg("tmpfs")
            .arg(&mount)
            .stderr(Stdio::piped())
            .output();
        let why = match mounted {
            Ok(out) if out.status.success() => {
                return Some(SmallDisk { mount, _dir: dir });
            }
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(
            std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "WSFS_REQUIRE_TOOLS=1 and a tmpfs cannot be mounted (run as root): {why}"
        );
        eprintln!("skipping: cannot mount a tmpfs to fill ({why}); run as root");
        None
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    /// No data page left.
    Pages,
    /// No inode left.
    Inodes,
}

/// Fills the disk at `at` as `how` says; returns the filler file when it
/// filled pages.
fn fill(at: &Path, how: Full) -> PathBuf {
    use std::io::Write;
    let filler = at.join("filler");
    match how {
        Full::Pages => {
            let mut file = std::fs::File::create(&filler).unwrap();
            let block = vec![7u8; 64 * 1024];
            loop {
                match file.write(&block) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling the disk: {e}"),
                }
            }
            // The last page, written in smaller pieces.
            while file.write(&block[..512]).is_ok() {}
        }
        Full::Inodes => {
            std::fs::create_dir(&filler).unwrap();
            for n in 0.. {
                match std::fs::File::create(filler.join(n.to_string())) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling the inodes: {e}"),
                }
            }
        }
    }
    filler
}

/// Checks one call refused on a full disk: RESOURCE_EXHAUSTED
/// `QUOTA_EXCEEDED` with the one sentence of a full disk.
fn full_disk_refusal<T: std::fmt::Debug>(what: &str, result: wsfs::Result<T>) {
    match result {
        Err(Error::QuotaExceeded { message }) => {
            assert!(
                message.starts_with(wsfs::error::OUT_OF_SPACE),
                "{what}: the refusal does not say the disk is full: {message}"
            );
            assert!(
                !message.contains("os error"),
                "{what}: the refusal repeats the system's words: {message}"
            );
            println!("crash: full disk: {what}: {message}");
        }
        other => panic!(
            "{what} on a full disk: expected RESOURCE_EXHAUSTED QUOTA_EXCEEDED, got {other:?}"
        ),
    }
}

/// Every entry in `dir`, recursively, by name (none when it is missing).
fn entries_in(dir: &Path) -> Vec<String> {
    let mut out = BTreeSet::new();
    if dir.exists() {
        files_on_disk_any(dir, "", &mut out);
    }
    out.into_iter().collect()
}

/// Every entry under `dir` into `out`, named from `prefix`. The walk may
/// race a removal still under way (the server empties its removal
/// directory in the background): a directory that vanishes between its
/// listing and its reading counts as seen but empty, so the caller still
/// finds every name that was there when listed.
fn files_on_disk_any(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    for entry in entries.flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            files_on_disk_any(&entry.path(), &format!("{name}/"), out);
        }
        out.insert(name);
    }
}

/// Snapshot, Restore, ImportArchive, a fork (CreateSession from a
/// snapshot) and Write on a data directory whose disk is full, by data
/// pages and then by inodes (a small tmpfs the test mounts; root only):
/// each is RESOURCE_EXHAUSTED `QUOTA_EXCEEDED` saying the disk is full,
/// changes nothing (workspace, snapshots, sessions), and leaves nothing in
/// the session's staging directory or the import spool; once space is
/// back the same calls succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_every_path_with_one_reason_and_leaves_nothing() {
    for how in [Full::Pages, Full::Inodes] {
        let Some(disk) = SmallDisk::mount("8m", 2048) else {
            return;
        };
        let data_dir = disk.mount.join("data");
        let log = disk.mount.parent().unwrap().join("server.log");
        let mut server = Server::start(&data_dir, &log);
        let client = Client::connect(&server.url).await.unwrap();
        // Only empty files: staging them takes inodes but no data page,
        // so with pages full the refusal comes from the step after.
        let archive = wsfs_tests::kit::archive_of(
            &client,
            [
                ("x/one.txt".to_string(), Vec::new()),
                ("two.txt".to_string(), Vec::new()),
            ],
            &[],
        )
        .await;
        let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
        let id = info.id.clone();
        session.write_str("a.txt", "a\n").await.unwrap();
        session.write_str("empty.txt", "").await.unwrap();
        let snapshot = client.snapshot(&id, "before").await.unwrap().id;
        session
            .delete(&parse_path("empty.txt").unwrap(), DeleteOptions::default())
            .await
            .unwrap();
        session
            .write_str("c.txt", &"c\n".repeat(3000))
            .await
            .unwrap();
        let staging = data_dir.join("sessions").join(&id).join("staging");
        let spool = data_dir.join("imports");

        let filler = fill(&disk.mount, how);
        let workspace = listing(&session).await.unwrap();
        let snapshots = client.list_snapshots(&id).await.unwrap();
        let sessions = client.list_sessions().await.unwrap().len();
        let unchanged = |what: String| {
            let (client, session, workspace, snapshots) = (
                client.clone(),
                session.clone(),
                workspace.clone(),
                snapshots.clone(),
            );
            let (staging, spool) = (staging.clone(), spool.clone());
            async move {
                assert_eq!(
                    listing(&session).await.unwrap(),
                    workspace,
                    "{what}: the workspace changed"
                );
                assert_eq!(
                    client.list_snapshots(&id_of(&session)).await.unwrap(),
                    snapshots,
                    "{what}: the snapshots changed"
                );
                assert_eq!(
                    client.list_sessions().await.unwrap().len(),
                    sessions,
                    "{what}: a session came or went"
                );
                assert_eq!(
                    entries_in(&staging),
                    Vec::<String>::new(),
                    "{what}: left in the staging directory"
                );
                assert_eq!(
                    entries_in(&spool),
                    Vec::<String>::new(),
                    "{what}: left in the import spool"
                );
            }
        };
        let what = |call: &str| format!("{call} ({how:?} full)");
        full_disk_refusal(&what("Snapshot"), client.snapshot(&id, "full").await);
        unchanged(what("Snapshot")).await;
        full_disk_refusal(&what("Restore"), client.restore(&id, &snapshot).await);
        unchanged(what("Restore")).await;
        full_disk_refusal(
            &what("ImportArchive"),
            session
                .import_from_reader(std::io::Cursor::new(archive.clone()))
                .await,
        );
        unchanged(what("ImportArchive")).await;
        if how == Full::Pages {
            // Room for the spooled archive alone: the refusal comes from
            // recording the import's intent.
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&filler)
                .unwrap();
            let len = file.metadata().unwrap().len();
            file.set_len(len.saturating_sub(4096)).unwrap();
            full_disk_refusal(
                &what("ImportArchive with room for its spool"),
                session
                    .import_from_reader(std::io::Cursor::new(archive.clone()))
                    .await,
            );
            unchanged(what("ImportArchive with room for its spool")).await;
            // Full again: the page written back, not a hole.
            std::os::unix::fs::FileExt::write_all_at(&file, &[7u8; 4096], len - 4096).unwrap();
        }
        full_disk_refusal(
            &what("a fork"),
            client
                .create(SessionOptions::directory().from_snapshot(&id, &snapshot))
                .await,
        );
        unchanged(what("a fork")).await;
        full_disk_refusal(&what("Write"), session.write_str("new.txt", "new\n").await);
        unchanged(what("Write")).await;

        // Space again: the same calls go through.
        match how {
            Full::Pages => std::fs::remove_file(&filler).unwrap(),
            Full::Inodes => std::fs::remove_dir_all(&filler).unwrap(),
        }
        client.snapshot(&id, "full").await.unwrap();
        client.restore(&id, &snapshot).await.unwrap();
        session
            .import_from_reader(std::io::Cursor::new(archive.clone()))
            .await
            .unwrap();
        client
            .create(SessionOptions::directory().from_snapshot(&id, &snapshot))
            .await
            .unwrap();
        session.write_str("new.txt", "new\n").await.unwrap();
        server.kill();
        drop(disk);
    }
}

fn id_of(session: &Session) -> String {
    session.id().to_string()
}

/// Files a session's root gets straight on disk for the tests below.
const ROOT_FILES: usize = 4_000;

/// Writes [`ROOT_FILES`] files of 8 to 12 KiB in 40 directories into
/// `root`, as a program in a container would.
fn fill_root(root: &Path) {
    for i in 0..ROOT_FILES {
        let dir = root.join(format!("d{:02}", i % 40));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{i:05}.bin")),
            vec![(i % 251) as u8; 8192 + i % 4096],
        )
        .unwrap();
    }
}

/// A session id of the client's choosing.
fn chosen_id(rng: &mut Rng) -> String {
    let (a, b) = (rng.next_u64(), rng.next_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// Waits until nothing a removed session left is on disk under
/// `data_dir`'s sessions directory but the sessions named in `keep`.
async fn nothing_left_but(data_dir: &Path, keep: &[&str]) {
    let sessions = data_dir.join("sessions");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut left: Vec<String> = std::fs::read_dir(&sessions)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !keep.contains(&name.as_str()))
            .collect();
        if let Ok(removing) = std::fs::read_dir(sessions.join(".removing")) {
            left.extend(
                removing
                    .flatten()
                    .map(|e| format!(".removing/{}", e.file_name().to_string_lossy())),
            );
        }
        left.retain(|name| name != ".removing");
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "120 s after the restart these are still on disk: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A DIRECTORY fork of a 4,000-file snapshot, SIGKILLed while it writes
/// its workspace (its directory made, its record not yet), then the
/// server started again: the first answer about the fork's id is
/// NOT_FOUND; the same fork asked again (same chosen id) succeeds, whole,
/// rather than meeting ALREADY_EXISTS forever; and what the kill left is
/// removed by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_killed_part_way_leaves_no_session_and_frees_its_id() {
    let seed = crash_seed();
    println!("crash: a fork killed part way, CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let (_scratch, data_dir, log) = scratch();
    let mut server = Server::start(&data_dir, &log);
    let client = Client::connect(&server.url).await.unwrap();
    let (origin, info) = client.create(SessionOptions::directory()).await.unwrap();
    fill_root(&info.root_path.clone().unwrap());
    let snapshot = client.snapshot(&info.id, "big").await.unwrap().id;
    let expected = listing(&origin).await.unwrap();
    assert!(expected.len() > ROOT_FILES, "the origin holds every file");
    let fork = |id: &str| {
        SessionOptions::directory()
            .from_snapshot(info.id.clone(), snapshot.clone())
            .id(id)
    };
    // Kill a fork while it writes: its directory there, its record not.
    let mut cut = None;
    for _attempt in 0..5 {
        let id = chosen_id(&mut rng);
        let fork_dir = data_dir.join("sessions").join(&id);
        let client = Client::connect(&server.url).await.unwrap();
        let forking = tokio::spawn({
            let options = fork(&id);
            async move { client.create(options).await }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while !forking.is_finished() && Instant::now() < deadline {
            let files = std::fs::read_dir(fork_dir.join("root/d00")).map_or(0, |d| d.count());
            if files > rng.below(50) as usize {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        server.kill();
        let _ = forking.await;
        let part_way = fork_dir.exists() && !fork_dir.join("session.json").exists();
        server = Server::start(&data_dir, &log);
        if part_way {
            cut = Some(id);
            break;
        }
        // The fork ended before the kill: another id, another try.
    }
    let id = cut.expect("one of 5 forks was killed while it wrote its workspace");
    let client = Client::connect(&server.url).await.unwrap();
    match client.get_session(&id).await {
        Err(Error::SessionNotFound { .. }) => {}
        other => panic!("the first answer about a fork cut short: {other:?}"),
    }
    let (forked, _) = client
        .create(fork(&id))
        .await
        .expect("the id of a fork cut short is free again after the restart");
    assert_eq!(
        listing(&forked).await.unwrap(),
        expected,
        "the fork asked again is the whole snapshot"
    );
    let origin_id = info.id.clone();
    let forks: Vec<String> = client
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    nothing_left_but(
        &data_dir,
        &forks.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert!(forks.contains(&origin_id) && forks.contains(&id));
}

/// DeleteSession of a 4,000-file DIRECTORY session, SIGKILLed while it
/// removes, then the server started again: the first answer about the
/// session is NOT_FOUND or the session whole, never part of its files;
/// and nothing of it stays on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_delete_killed_part_way_leaves_it_whole_or_gone() {
    let (_scratch, data_dir, log) = scratch();
    let mut server = Server::start(&data_dir, &log);
    let client = Client::connect(&server.url).await.unwrap();
    let (session, info) = client.create(SessionOptions::directory()).await.unwrap();
    let root = info.root_path.clone().unwrap();
    fill_root(&root);
    let expected = listing(&session).await.unwrap();
    let session_dir = data_dir.join("sessions").join(&info.id);
    let deleting = tokio::spawn({
        let (client, id) = (client.clone(), info.id.clone());
        async move { client.delete_session(&id).await }
    });
    // Until the removal has begun: the session's directory moved, or its
    // root's directories fewer.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dirs = std::fs::read_dir(&root).map_or(0, |d| d.count());
        if !session_dir.exists() || dirs < 40 || deleting.is_finished() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DeleteSession never began removing"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.kill();
    let _ = deleting.await;
    let server = Server::start(&data_dir, &log);
    let client = Client::connect(&server.url).await.unwrap();
    match client.get_session(&info.id).await {
        Err(Error::SessionNotFound { .. }) => nothing_left_but(&data_dir, &[]).await,
        Ok(_) => assert_eq!(
            listing(&client.session(&info.id)).await.unwrap(),
            expected,
            "a delete cut short leaves the session whole"
        ),
        Err(e) => panic!("the first answer about a session whose delete was cut short: {e:?}"),
    }
}
