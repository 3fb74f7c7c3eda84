//! Load: many clients, each on its own connection, run a seeded random mix
//! of Write, Append, Edit, Read, ReadBytes, WriteBytes, Grep, Glob, List,
//! Delete and compare-and-set increments against MEMORY and DIRECTORY
//! sessions of one server. Zero unexpected errors, and at the end every
//! workspace equals a model built from what the server acknowledged.
//!
//! The workload keeps the model exact despite the concurrency:
//!
//! - each client owns its files (`cNNN/t*.txt`, `cNNN/b*.bin`): only it
//!   writes them, so their model is the last acknowledged content, and
//!   every Read, ReadBytes, Grep, Glob and List of them has one right
//!   answer;
//! - every client of a session appends tagged lines (`cNNN aSEQ PAYLOAD`) to
//!   the session's `shared/log.txt`: a read must show, for each client, a
//!   contiguous run `a0, a1, ...` of intact lines, at least up to what was
//!   acknowledged before the read and at most up to what was sent; at the
//!   end exactly every acknowledged line, once, and nothing else;
//! - every client increments the session's `shared/counter.txt` by
//!   read-then-Write with `if_version`, retrying on `VERSION_MISMATCH`: at
//!   the end it holds the number of acknowledged increments (a lost update
//!   would leave it short).
//!
//! The CI size runs in seconds. The harness size, with its figures:
//! `LOAD_CLIENTS=64 LOAD_SESSIONS=16 LOAD_OPS=2000 cargo test --release -p
//! wsfs-tests --test load -- --nocapture` (also `LOAD_SEED`, and
//! `LOAD_MAX_BLOB` for the largest WriteBytes in bytes).

use bytes::Bytes;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wsfs_client::{
    parse_path, ByteRange, Client, DeleteOptions, EditSpec, Error, FileKind, Filesystem, GlobQuery,
    GrepEvent, GrepQuery, LineRange, Session, SessionOptions, WriteMode, WriteOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{env, percentile, Rng};

const LOG: &str = "shared/log.txt";
const COUNTER: &str = "shared/counter.txt";
const TEXT_FILES: u64 = 3;
const BLOB_FILES: u64 = 2;
/// An owned text file longer than this is overwritten rather than appended
/// to, so greps stay under their match limit.
const MAX_OWNED_LINES: usize = 120;
const CHUNK: usize = wsfs::DEFAULT_CHUNK_SIZE;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Write,
    AppendOwned,
    AppendShared,
    Edit,
    Read,
    ReadShared,
    ReadBytes,
    WriteBytes,
    Grep,
    Glob,
    List,
    Increment,
    Delete,
}

/// The mix, by weight.
const MIX: &[(Op, u64)] = &[
    (Op::Write, 12),
    (Op::AppendOwned, 7),
    (Op::AppendShared, 10),
    (Op::Edit, 12),
    (Op::Read, 12),
    (Op::ReadShared, 4),
    (Op::ReadBytes, 8),
    (Op::WriteBytes, 8),
    (Op::Grep, 8),
    (Op::Glob, 5),
    (Op::List, 5),
    (Op::Increment, 6),
    (Op::Delete, 3),
];

fn pick(rng: &mut Rng) -> Op {
    let total: u64 = MIX.iter().map(|(_, w)| w).sum();
    let mut r = rng.below(total);
    for (op, w) in MIX {
        if r < *w {
            return *op;
        }
        r -= w;
    }
    unreachable!("weights cover the range")
}

/// What the clients of one session have sent to, and been told about, the
/// session's shared files. Indexed by the client's slot in the session.
struct Shared {
    clients: usize,
    /// Appends to the log sent, and acknowledged (each client's are numbered
    /// 0, 1, 2, ... and sent one at a time).
    appends_sent: Vec<AtomicU64>,
    appends_acked: Vec<AtomicU64>,
    /// Conditional writes of the counter sent, and acknowledged.
    increments_sent: AtomicU64,
    increments_acked: AtomicU64,
}

impl Shared {
    fn new(clients: usize) -> Shared {
        let counters = || (0..clients).map(|_| AtomicU64::new(0)).collect();
        Shared {
            clients,
            appends_sent: counters(),
            appends_acked: counters(),
            increments_sent: AtomicU64::new(0),
            increments_acked: AtomicU64::new(0),
        }
    }

    fn load(v: &[AtomicU64]) -> Vec<u64> {
        v.iter().map(|a| a.load(Ordering::SeqCst)).collect()
    }
}

/// The payload of client `id`'s append number `seq`: derived from both, so
/// a torn or misplaced line does not check out.
fn log_line(id: usize, seq: u64) -> String {
    let mut mix = Rng((id as u64) << 32 ^ seq);
    format!(
        "c{id:03} a{seq} {:016x}{:016x}\n",
        mix.next_u64(),
        mix.next_u64()
    )
}

/// Checks a read of the log: for each client slot a contiguous run of its
/// lines, intact, from 0 to at least `at_least[slot]` and below
/// `at_most[slot]`. `sessions` and `session` map ids to slots.
fn check_log(
    text: &str,
    sessions: usize,
    session: usize,
    at_least: &[u64],
    at_most: &[u64],
) -> Result<(), String> {
    let mut next = vec![0u64; at_least.len()];
    for line in text.split_inclusive('\n') {
        let bad = || format!("log line {line:?} is not one any client sent");
        let mut words = line.split(' ');
        let id: usize = words
            .next()
            .and_then(|w| w.strip_prefix('c'))
            .and_then(|w| w.parse().ok())
            .ok_or_else(bad)?;
        let seq: u64 = words
            .next()
            .and_then(|w| w.strip_prefix('a'))
            .and_then(|w| w.parse().ok())
            .ok_or_else(bad)?;
        if id % sessions != session || line != log_line(id, seq) {
            return Err(bad());
        }
        let slot = id / sessions;
        if seq != next[slot] {
            return Err(format!(
                "client {id}'s append a{seq} is out of place: expected a{} (lost, repeated or reordered)",
                next[slot]
            ));
        }
        if seq >= at_most[slot] {
            return Err(format!(
                "client {id}'s append a{seq} is in the log but was never sent (phantom)"
            ));
        }
        next[slot] += 1;
    }
    for (slot, (&seen, &acked)) in next.iter().zip(at_least).enumerate() {
        if seen < acked {
            return Err(format!(
                "client {}'s appends a{seen}..a{acked} were acknowledged but are missing from the log",
                slot * sessions + session
            ));
        }
    }
    Ok(())
}

/// One client: its connection, its files' model and its latencies.
struct Worker {
    id: usize,
    slot: usize,
    sessions: usize,
    session_index: usize,
    session: Session,
    shared: Arc<Shared>,
    rng: Rng,
    max_blob: u64,
    text: BTreeMap<String, String>,
    blobs: BTreeMap<String, Vec<u8>>,
    /// Operations begun, which also numbers the tags it writes.
    n: u64,
    latencies: BTreeMap<Op, Vec<Duration>>,
    cas_retries: u64,
}

fn fail(op: &str, path: &str, e: Error) -> String {
    format!("{op} '{path}': unexpected error {e:?}")
}

impl Worker {
    fn dir(&self) -> String {
        format!("c{:03}", self.id)
    }

    fn text_path(&mut self) -> String {
        format!("{}/t{}.txt", self.dir(), self.rng.below(TEXT_FILES))
    }

    fn blob_path(&mut self) -> String {
        format!("{}/b{}.bin", self.dir(), self.rng.below(BLOB_FILES))
    }

    /// `lines` fresh lines, each opening with a unique tag `<KIND id.n.i>`.
    fn lines(&mut self, kind: char, lines: u64) -> String {
        (0..lines)
            .map(|i| {
                format!(
                    "<{kind}{}.{}.{i}> lorem ipsum {}\n",
                    self.id,
                    self.n,
                    self.rng.next_u64()
                )
            })
            .collect()
    }

    fn random_existing<T>(&mut self, map: &BTreeMap<String, T>) -> Option<String> {
        if map.is_empty() {
            return None;
        }
        let i = self.rng.below(map.len() as u64) as usize;
        map.keys().nth(i).cloned()
    }

    async fn run(mut self, ops: u64) -> Result<Worker, String> {
        // Every owned file exists before the mix starts, so List has a
        // directory to list.
        for k in 0..TEXT_FILES {
            let path = format!("{}/t{k}.txt", self.dir());
            self.write(path).await?;
        }
        for k in 0..BLOB_FILES {
            let path = format!("{}/b{k}.bin", self.dir());
            self.write_bytes(path).await?;
        }
        for _ in 0..ops {
            self.n += 1;
            let op = pick(&mut self.rng);
            let started = Instant::now();
            let done = match op {
                Op::Write => {
                    let path = self.text_path();
                    self.write(path).await?
                }
                Op::AppendOwned => self.append_owned().await?,
                Op::AppendShared => self.append_shared().await?,
                Op::Edit => self.edit().await?,
                Op::Read => self.read().await?,
                Op::ReadShared => self.read_shared().await?,
                Op::ReadBytes => self.read_bytes().await?,
                Op::WriteBytes => {
                    let path = self.blob_path();
                    self.write_bytes(path).await?
                }
                Op::Grep => self.grep().await?,
                Op::Glob => self.glob().await?,
                Op::List => self.list().await?,
                Op::Increment => self.increment().await?,
                Op::Delete => self.delete().await?,
            };
            self.latencies
                .entry(done)
                .or_default()
                .push(started.elapsed());
        }
        Ok(self)
    }

    async fn write(&mut self, path: String) -> Result<Op, String> {
        let lines = 1 + self.rng.below(20);
        let content = self.lines('W', lines);
        let outcome = self
            .session
            .write_str(&path, &content)
            .await
            .map_err(|e| fail("Write", &path, e))?;
        if outcome.size != content.len() as u64 {
            return Err(format!(
                "Write '{path}' acknowledged {} bytes of {}",
                outcome.size,
                content.len()
            ));
        }
        self.text.insert(path, content);
        Ok(Op::Write)
    }

    async fn append_owned(&mut self) -> Result<Op, String> {
        let path = self.text_path();
        if self
            .text
            .get(&path)
            .is_some_and(|t| t.lines().count() > MAX_OWNED_LINES)
        {
            return self.write(path).await;
        }
        let lines = 1 + self.rng.below(3);
        let content = self.lines('A', lines);
        let options = WriteOptions {
            mode: WriteMode::Append,
            ..WriteOptions::default()
        };
        let outcome = self
            .session
            .write(&parse_path(&path).unwrap(), &content, options)
            .await
            .map_err(|e| fail("Append", &path, e))?;
        let model = self.text.entry(path.clone()).or_default();
        model.push_str(&content);
        if outcome.size != model.len() as u64 {
            return Err(format!(
                "Append to '{path}' says the file has {} bytes; the model has {}",
                outcome.size,
                model.len()
            ));
        }
        Ok(Op::AppendOwned)
    }

    async fn append_shared(&mut self) -> Result<Op, String> {
        let seq = self.shared.appends_sent[self.slot].fetch_add(1, Ordering::SeqCst);
        let line = log_line(self.id, seq);
        let options = WriteOptions {
            mode: WriteMode::Append,
            ..WriteOptions::default()
        };
        self.session
            .write(&parse_path(LOG).unwrap(), &line, options)
            .await
            .map_err(|e| fail("Append", LOG, e))?;
        self.shared.appends_acked[self.slot].fetch_add(1, Ordering::SeqCst);
        Ok(Op::AppendShared)
    }

    async fn edit(&mut self) -> Result<Op, String> {
        let Some(path) = self.random_existing(&self.text.clone()) else {
            let path = self.text_path();
            return self.write(path).await;
        };
        let model = &self.text[&path];
        let lines: Vec<&str> = model.lines().collect();
        let line = lines[self.rng.below(lines.len() as u64) as usize];
        let old = line[..=line.find('>').expect("every line opens with a tag")].to_string();
        let new = format!("<E{}.{}>", self.id, self.n);
        let outcome = self
            .session
            .edit(
                &parse_path(&path).unwrap(),
                EditSpec {
                    old_text: old.clone(),
                    new_text: new.clone(),
                    ..EditSpec::default()
                },
            )
            .await
            .map_err(|e| fail("Edit", &path, e))?;
        if outcome.replacements != 1 {
            return Err(format!(
                "Edit '{path}' made {} replacements of a unique tag",
                outcome.replacements
            ));
        }
        let edited = model.replacen(&old, &new, 1);
        self.text.insert(path, edited);
        Ok(Op::Edit)
    }

    async fn read(&mut self) -> Result<Op, String> {
        let path = self.text_path();
        let result = self
            .session
            .read(&parse_path(&path).unwrap(), LineRange::all())
            .await;
        match (result, self.text.get(&path)) {
            (Ok(page), Some(model)) if page.content == *model && !page.truncated => {}
            (Err(Error::FileNotFound { .. }), None) => {}
            (Ok(page), model) => {
                return Err(format!(
                    "Read '{path}' returned {} bytes that are not its last acknowledged content ({:?} bytes)",
                    page.content.len(),
                    model.map(String::len)
                ))
            }
            (Err(e), _) => return Err(fail("Read", &path, e)),
        }
        Ok(Op::Read)
    }

    async fn read_shared(&mut self) -> Result<Op, String> {
        let at_least = Shared::load(&self.shared.appends_acked);
        let page = self
            .session
            .read(&parse_path(LOG).unwrap(), LineRange::all())
            .await
            .map_err(|e| fail("Read", LOG, e))?;
        let at_most = Shared::load(&self.shared.appends_sent);
        check_log(
            &page.content,
            self.sessions,
            self.session_index,
            &at_least,
            &at_most,
        )?;
        Ok(Op::ReadShared)
    }

    async fn read_bytes(&mut self) -> Result<Op, String> {
        let Some(path) = self.random_existing(&self.blobs.clone()) else {
            return self.read().await;
        };
        let model = &self.blobs[&path];
        // Half whole reads, half a random range.
        let range = if self.rng.below(2) == 0 || model.is_empty() {
            ByteRange::default()
        } else {
            let offset = self.rng.below(model.len() as u64);
            let limit = 1 + self.rng.below(model.len() as u64 - offset);
            ByteRange {
                offset,
                limit: Some(limit),
            }
        };
        let mut stream = self
            .session
            .read_bytes(&parse_path(&path).unwrap(), range, CHUNK)
            .await
            .map_err(|e| fail("ReadBytes", &path, e))?;
        let mut got = Vec::new();
        while let Some(chunk) = stream.chunks.next().await {
            got.extend_from_slice(&chunk.map_err(|e| fail("ReadBytes", &path, e))?);
        }
        let start = range.offset as usize;
        let end = range.limit.map_or(model.len(), |l| start + l as usize);
        if got != model[start..end] || stream.size != model.len() as u64 {
            return Err(format!(
                "ReadBytes '{path}' [{start}..{end}) returned {} bytes of a {}-byte file that differ from its last acknowledged content ({} bytes)",
                got.len(),
                stream.size,
                model.len()
            ));
        }
        Ok(Op::ReadBytes)
    }

    async fn write_bytes(&mut self, path: String) -> Result<Op, String> {
        let len = self.rng.below(self.max_blob + 1) as usize;
        let data = Bytes::from(self.rng.bytes(len));
        let chunks: Vec<wsfs_client::Result<Bytes>> = (0..len)
            .step_by(CHUNK)
            .map(|at| Ok(data.slice(at..(at + CHUNK).min(len))))
            .collect();
        let outcome = self
            .session
            .write_bytes(
                &parse_path(&path).unwrap(),
                WriteOptions::default(),
                futures::stream::iter(chunks).boxed(),
            )
            .await
            .map_err(|e| fail("WriteBytes", &path, e))?;
        if outcome.size != len as u64 {
            return Err(format!(
                "WriteBytes '{path}' acknowledged {} bytes of {len}",
                outcome.size
            ));
        }
        self.blobs.insert(path, data.to_vec());
        Ok(Op::WriteBytes)
    }

    async fn grep(&mut self) -> Result<Op, String> {
        let (query, expected) = match self.rng.below(3) {
            // One tag: one line.
            0 if !self.text.is_empty() => {
                let path = self.random_existing(&self.text.clone()).unwrap();
                let lines: Vec<&str> = self.text[&path].lines().collect();
                let line = lines[self.rng.below(lines.len() as u64) as usize];
                let tag = line[..=line.find('>').unwrap()].to_string();
                let mut query = GrepQuery::new(tag.clone());
                query.fixed_string = true;
                query.base = parse_path(&self.dir()).unwrap();
                query.glob = Some("*.txt".into());
                (query, self.expected_matches(|l| l.contains(&tag)))
            }
            // This client's lines in the shared log: exactly its own
            // acknowledged appends, since only it adds them, one at a time.
            1 => {
                let mut query = GrepQuery::new(format!("^c{:03} a", self.id));
                query.max_matches = 100_000;
                query.base = parse_path("shared").unwrap();
                let acked = self.shared.appends_acked[self.slot].load(Ordering::SeqCst);
                let expected = (0..acked)
                    .map(|seq| {
                        let line = log_line(self.id, seq);
                        (LOG.to_string(), line.trim_end().to_string())
                    })
                    .collect();
                (query, expected)
            }
            // Every tagged line of this client's text files.
            _ => {
                let mut query = GrepQuery::new(format!("<[WAE]{}\\.", self.id));
                query.max_matches = 100_000;
                query.base = parse_path(&self.dir()).unwrap();
                query.glob = Some("*.txt".into());
                (query, self.expected_matches(|_| true))
            }
        };
        let pattern = query.pattern.clone();
        let mut events = self
            .session
            .grep(query)
            .await
            .map_err(|e| fail("Grep", &pattern, e))?;
        let mut got = Vec::new();
        let mut summary = None;
        while let Some(event) = events.next().await {
            match event.map_err(|e| fail("Grep", &pattern, e))? {
                GrepEvent::Match(m) => got.push((m.path.as_str().to_string(), m.line)),
                GrepEvent::Summary(s) => summary = Some(s),
            }
        }
        let summary = summary.ok_or_else(|| format!("Grep {pattern:?} ended without a summary"))?;
        if got != expected || summary.truncated {
            return Err(format!(
                "Grep {pattern:?} found {} lines, the model says {} (truncated {})",
                got.len(),
                expected.len(),
                summary.truncated
            ));
        }
        Ok(Op::Grep)
    }

    fn expected_matches(&self, keep: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (path, content) in &self.text {
            for line in content.lines() {
                if keep(line) {
                    out.push((path.clone(), line.to_string()));
                }
            }
        }
        out
    }

    fn owned_paths(&self) -> Vec<String> {
        let all: BTreeSet<&String> = self.text.keys().chain(self.blobs.keys()).collect();
        all.into_iter().cloned().collect()
    }

    async fn glob(&mut self) -> Result<Op, String> {
        let mut query = GlobQuery::new("**");
        query.base = parse_path(&self.dir()).unwrap();
        let outcome = self
            .session
            .glob(query)
            .await
            .map_err(|e| fail("Glob", &self.dir(), e))?;
        let got: Vec<String> = outcome
            .paths
            .iter()
            .map(|p| p.as_str().to_string())
            .collect();
        if got != self.owned_paths() || outcome.truncated {
            return Err(format!(
                "Glob '{}/**' found {got:?}; the model holds {:?}",
                self.dir(),
                self.owned_paths()
            ));
        }
        Ok(Op::Glob)
    }

    async fn list(&mut self) -> Result<Op, String> {
        let dir = self.dir();
        let listing = self
            .session
            .list(&parse_path(&dir).unwrap(), 1)
            .await
            .map_err(|e| fail("List", &dir, e))?;
        let got: Vec<(String, u64)> = listing
            .entries
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .map(|e| (e.path.as_str().to_string(), e.size))
            .collect();
        let expected: Vec<(String, u64)> = self
            .owned_paths()
            .into_iter()
            .map(|p| {
                let size = self
                    .text
                    .get(&p)
                    .map(|t| t.len())
                    .or_else(|| self.blobs.get(&p).map(Vec::len))
                    .unwrap_or_default() as u64;
                (p, size)
            })
            .collect();
        if got != expected || listing.entries.len() != expected.len() {
            return Err(format!(
                "List '{dir}' shows {got:?}; the model holds {expected:?}"
            ));
        }
        Ok(Op::List)
    }

    /// Read the counter, write it plus one if its version has not moved;
    /// retry when it has.
    async fn increment(&mut self) -> Result<Op, String> {
        let path = parse_path(COUNTER).unwrap();
        loop {
            let at_least = self.shared.increments_acked.load(Ordering::SeqCst);
            let page = self
                .session
                .read(&path, LineRange::all())
                .await
                .map_err(|e| fail("Read", COUNTER, e))?;
            let at_most = self.shared.increments_sent.load(Ordering::SeqCst);
            let value: u64 = page
                .content
                .trim_end()
                .parse()
                .map_err(|_| format!("the counter holds {:?}", page.content))?;
            if value < at_least || value > at_most {
                return Err(format!(
                    "the counter reads {value}; {at_least} increments were acknowledged and {at_most} sent"
                ));
            }
            self.shared.increments_sent.fetch_add(1, Ordering::SeqCst);
            let options = WriteOptions {
                if_version: Some(page.version),
                ..WriteOptions::default()
            };
            match self
                .session
                .write(&path, &format!("{}\n", value + 1), options)
                .await
            {
                Ok(_) => {
                    self.shared.increments_acked.fetch_add(1, Ordering::SeqCst);
                    return Ok(Op::Increment);
                }
                Err(Error::VersionMismatch { .. }) => {
                    self.shared.increments_sent.fetch_sub(1, Ordering::SeqCst);
                    self.cas_retries += 1;
                }
                Err(e) => return Err(fail("Write if_version", COUNTER, e)),
            }
        }
    }

    async fn delete(&mut self) -> Result<Op, String> {
        let paths = self.owned_paths();
        if paths.is_empty() {
            let path = self.text_path();
            return self.write(path).await;
        }
        let path = paths[self.rng.below(paths.len() as u64) as usize].clone();
        let deleted = self
            .session
            .delete(&parse_path(&path).unwrap(), DeleteOptions::default())
            .await
            .map_err(|e| fail("Delete", &path, e))?;
        if deleted != 1 {
            return Err(format!("Delete '{path}' removed {deleted} entries"));
        }
        self.text.remove(&path);
        self.blobs.remove(&path);
        Ok(Op::Delete)
    }
}

/// The whole bytes of `path`, by ReadBytes.
async fn download(session: &Session, path: &str) -> Vec<u8> {
    let mut stream = session
        .read_bytes(&parse_path(path).unwrap(), ByteRange::default(), CHUNK)
        .await
        .unwrap_or_else(|e| panic!("final ReadBytes '{path}': {e:?}"));
    let mut out = Vec::new();
    while let Some(chunk) = stream.chunks.next().await {
        out.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("final ReadBytes '{path}': {e:?}")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_lose_tear_and_invent_nothing() {
    let clients: usize = env("LOAD_CLIENTS", 16);
    let sessions: usize = env("LOAD_SESSIONS", 4);
    let ops: u64 = env("LOAD_OPS", 300);
    let max_blob: u64 = env("LOAD_MAX_BLOB", 64 * 1024);
    let seed: u64 = env("LOAD_SEED", 0x5eed_10ad);
    assert!(
        sessions >= 1 && clients >= sessions,
        "need clients >= sessions >= 1"
    );
    println!(
        "load: {clients} clients, {sessions} sessions (half MEMORY, half DIRECTORY), {ops} ops each, WriteBytes up to {max_blob} bytes, LOAD_SEED={seed}"
    );

    let server = TestServer::start().await;
    let admin = Client::connect(&server.url()).await.unwrap();
    let mut ids = Vec::new();
    let mut shared = Vec::new();
    for s in 0..sessions {
        let options = if s % 2 == 0 {
            SessionOptions::memory()
        } else {
            SessionOptions::directory()
        };
        let info = admin
            .create_session(options.seed_file(LOG, "").seed_file(COUNTER, "0\n"))
            .await
            .unwrap();
        ids.push(info.id);
        shared.push(Arc::new(Shared::new(clients.div_ceil(sessions))));
    }

    let mut workers = Vec::new();
    for id in 0..clients {
        let s = id % sessions;
        // Each client on its own connection.
        let client = Client::connect(&server.url()).await.unwrap();
        workers.push(Worker {
            id,
            slot: id / sessions,
            sessions,
            session_index: s,
            session: client.session(&ids[s]),
            shared: shared[s].clone(),
            rng: Rng(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            max_blob,
            text: BTreeMap::new(),
            blobs: BTreeMap::new(),
            n: 0,
            latencies: BTreeMap::new(),
            cas_retries: 0,
        });
    }

    let started = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|w| tokio::spawn(w.run(ops)))
        .collect();
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for (id, task) in tasks.into_iter().enumerate() {
        match task.await.expect("a client task panicked") {
            Ok(w) => done.push(w),
            Err(e) => errors.push(format!("client {id}: {e}")),
        }
    }
    let elapsed = started.elapsed();
    assert!(
        errors.is_empty(),
        "{} clients failed (LOAD_SEED={seed}); first: {}",
        errors.len(),
        errors[0]
    );

    // The figures.
    let mut by_op: BTreeMap<Op, Vec<Duration>> = BTreeMap::new();
    for w in &done {
        for (op, lat) in &w.latencies {
            by_op.entry(*op).or_default().extend(lat);
        }
    }
    let total: usize = by_op.values().map(Vec::len).sum();
    let retries: u64 = done.iter().map(|w| w.cas_retries).sum();
    println!(
        "load: {total} ops in {:.2} s = {:.0} ops/s; {retries} compare-and-set retries",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "{:<13} {:>7} {:>10} {:>10}",
        "op", "count", "p50 ms", "p99 ms"
    );
    for (op, lat) in &mut by_op {
        lat.sort();
        println!(
            "{:<13} {:>7} {:>10.2} {:>10.2}",
            format!("{op:?}"),
            lat.len(),
            percentile(lat, 0.50).as_secs_f64() * 1e3,
            percentile(lat, 0.99).as_secs_f64() * 1e3
        );
    }

    // Every workspace equals the model: no lost, torn or phantom write.
    for (s, id) in ids.iter().enumerate() {
        let session = admin.session(id);
        let owners: Vec<&Worker> = done.iter().filter(|w| w.session_index == s).collect();
        let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for w in &owners {
            for (p, t) in &w.text {
                expected.insert(p.clone(), t.clone().into_bytes());
            }
            for (p, b) in &w.blobs {
                expected.insert(p.clone(), b.clone());
            }
        }
        let mut query = GlobQuery::new("**");
        query.max_results = u64::MAX;
        let found = session.glob(query).await.unwrap();
        let mut expected_paths: Vec<String> = expected.keys().cloned().collect();
        expected_paths.extend([COUNTER.to_string(), LOG.to_string()]);
        expected_paths.sort();
        let found_paths: Vec<String> = found.paths.iter().map(|p| p.as_str().to_string()).collect();
        assert_eq!(
            found_paths, expected_paths,
            "session {s}: the files differ from the model (LOAD_SEED={seed})"
        );
        for (path, content) in &expected {
            assert!(
                download(&session, path).await == *content,
                "session {s}: '{path}' differs from its last acknowledged content (LOAD_SEED={seed})"
            );
        }
        let sh = &shared[s];
        let acked = Shared::load(&sh.appends_acked);
        assert_eq!(acked, Shared::load(&sh.appends_sent));
        let log = String::from_utf8(download(&session, LOG).await).unwrap();
        check_log(
            &log,
            sessions,
            s,
            &acked,
            &acked.iter().map(|a| a + 1).collect::<Vec<_>>(),
        )
        .unwrap_or_else(|e| panic!("session {s}: {e} (LOAD_SEED={seed})"));
        assert_eq!(
            log.lines().count() as u64,
            acked.iter().sum::<u64>(),
            "session {s}: the log holds other lines than the acknowledged appends"
        );
        let counter = String::from_utf8(download(&session, COUNTER).await).unwrap();
        assert_eq!(
            counter,
            format!("{}\n", sh.increments_acked.load(Ordering::SeqCst)),
            "session {s}: the counter is not the number of acknowledged increments (LOAD_SEED={seed})"
        );
        assert_eq!(sh.clients, owners.len());
    }
}

#[test]
fn the_log_check_catches_lost_torn_repeated_and_phantom_lines() {
    // Two sessions; session 0 holds clients 0 and 2 (slots 0 and 1).
    let good = format!("{}{}{}", log_line(0, 0), log_line(2, 0), log_line(0, 1));
    assert!(check_log(&good, 2, 0, &[2, 1], &[2, 1]).is_ok());
    assert!(check_log(&good, 2, 0, &[2, 2], &[2, 2]).is_err(), "lost");
    let torn = good.replacen("a1 ", "a1 0", 1);
    assert!(check_log(&torn, 2, 0, &[2, 1], &[2, 1]).is_err(), "torn");
    let repeated = format!("{good}{}", log_line(0, 1));
    assert!(
        check_log(&repeated, 2, 0, &[2, 1], &[3, 1]).is_err(),
        "repeated"
    );
    assert!(check_log(&good, 2, 0, &[1, 1], &[1, 1]).is_err(), "phantom");
    let foreign = format!("{good}{}", log_line(1, 0));
    assert!(
        check_log(&foreign, 2, 0, &[2, 1], &[2, 1]).is_err(),
        "other session"
    );
}
