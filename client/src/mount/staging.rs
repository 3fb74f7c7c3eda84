//! Local staging of a file open for writing: the bytes written (dirty)
//! and the bytes fetched from the server (present), in memory while the
//! file is small and in a sparse temporary file in the mount's private
//! directory once it is not ([`Store`]). Writes never wait for the
//! network; the commit at flush, fsync or release sends one patch with
//! only the dirty ranges and the length change. The mount's memory stays
//! bounded whatever the files' sizes: at most [`MEMORY_STAGE_TOTAL`] bytes
//! of small files are staged in memory, everything else on local disk.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use wsfs::{Permissions, MAX_CHUNK_SIZE};

/// A write that leaves a run of this many dirty bytes starts the upload
/// ahead of the commit (upload_ahead.rs).
pub const AHEAD_START_BYTES: u64 = 8 << 20;

/// What the upload ahead sends at a time: a whole chunk of a dirty run.
const AHEAD_CHUNK: u64 = MAX_CHUNK_SIZE as u64;

/// A file is staged in memory while it is at most this long, and moves to
/// local disk when it grows past it. A temporary file per small file was
/// most of the mount's own time in `tar x` (a new inode made and freed for
/// each).
pub const MEMORY_STAGE_BYTES: u64 = 64 * 1024;

/// The most bytes the files staged in memory may hold together (each
/// counts as [`MEMORY_STAGE_BYTES`] from its start): past it, new files
/// are staged on disk. Per process, whatever the number of mounts.
pub const MEMORY_STAGE_TOTAL: u64 = 64 << 20;

/// Bytes of [`MEMORY_STAGE_TOTAL`] held by files staged in memory now.
static MEMORY_STAGED: AtomicU64 = AtomicU64::new(0);

/// Where a file's staged bytes live; its length is the staged file's.
enum Store {
    /// At most [`MEMORY_STAGE_BYTES`], holding one share of the budget.
    Memory(Vec<u8>),
    Disk(File),
}

impl Store {
    /// In memory when `len` is small and the budget has room, else a
    /// temporary file in `dir`.
    fn new(dir: &Path, len: u64) -> io::Result<Store> {
        if len <= MEMORY_STAGE_BYTES && take_memory_share() {
            return Ok(Store::Memory(vec![0; len as usize]));
        }
        let file = tempfile::tempfile_in(dir)?;
        file.set_len(len)?;
        Ok(Store::Disk(file))
    }

    /// Makes room for bytes up to `end`: a store in memory that would
    /// pass [`MEMORY_STAGE_BYTES`] moves to disk first.
    fn reach(&mut self, dir: &Path, end: u64) -> io::Result<()> {
        if let Store::Memory(bytes) = self {
            if end > MEMORY_STAGE_BYTES {
                let file = tempfile::tempfile_in(dir)?;
                file.write_all_at(bytes, 0)?;
                // The memory store's share goes back as it is dropped.
                *self = Store::Disk(file);
            } else if end > bytes.len() as u64 {
                bytes.resize(end as usize, 0);
            }
        }
        Ok(())
    }

    fn write_at(&mut self, dir: &Path, data: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + data.len() as u64;
        self.reach(dir, end)?;
        match self {
            Store::Memory(bytes) => {
                bytes[offset as usize..end as usize].copy_from_slice(data);
                Ok(())
            }
            Store::Disk(file) => file.write_all_at(data, offset),
        }
    }

    fn set_len(&mut self, dir: &Path, len: u64) -> io::Result<()> {
        self.reach(dir, len)?;
        match self {
            Store::Memory(bytes) => {
                bytes.truncate(len as usize);
                Ok(())
            }
            Store::Disk(file) => file.set_len(len),
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Store::Memory(bytes) => {
                buf.copy_from_slice(&bytes[held_range(bytes.len(), offset, buf.len())?]);
                Ok(())
            }
            Store::Disk(file) => file.read_exact_at(buf, offset),
        }
    }

    /// Bytes `[offset, end)`.
    fn read_range(&self, offset: u64, end: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; end.saturating_sub(offset) as usize];
        self.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn reader(&self) -> io::Result<StageReader> {
        Ok(match self {
            Store::Memory(bytes) => StageReader::Memory(bytes::Bytes::copy_from_slice(bytes)),
            Store::Disk(file) => StageReader::Disk(file.try_clone()?),
        })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Store::Memory(_) = self {
            give_memory_share();
        }
    }
}

/// Takes one file's share of [`MEMORY_STAGE_TOTAL`]; false when it is
/// spent.
fn take_memory_share() -> bool {
    MEMORY_STAGED
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
            (held + MEMORY_STAGE_BYTES <= MEMORY_STAGE_TOTAL).then_some(held + MEMORY_STAGE_BYTES)
        })
        .is_ok()
}

/// Where `len` bytes at `offset` lie in `held` bytes staged in memory;
/// past their end is an error, as a read past a file's end is.
fn held_range(held: usize, offset: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
    usize::try_from(offset)
        .ok()
        .and_then(|start| Some(start..start.checked_add(len)?))
        .filter(|range| range.end <= held)
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
}

fn give_memory_share() {
    MEMORY_STAGED.fetch_sub(MEMORY_STAGE_BYTES, Ordering::SeqCst);
}

/// What a commit or an upload ahead reads a file's staged bytes through:
/// a handle on its staging file, or a copy of the bytes staged in memory
/// (taken once the commit's ranges are: bytes written after it are dirty
/// again, for the next commit).
pub enum StageReader {
    Disk(File),
    Memory(bytes::Bytes),
}

impl StageReader {
    /// `len` bytes at `offset`, every one staged.
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<bytes::Bytes> {
        match self {
            StageReader::Disk(file) => {
                let mut data = vec![0; len];
                file.read_exact_at(&mut data, offset)?;
                Ok(data.into())
            }
            StageReader::Memory(bytes) => Ok(bytes.slice(held_range(bytes.len(), offset, len)?)),
        }
    }
}

/// Half-open byte ranges `[start, end)`, merged when they touch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `[start, end)`; the run it is now part of.
    pub fn insert(&mut self, start: u64, end: u64) -> (u64, u64) {
        if start >= end {
            return (start, start);
        }
        let (mut start, mut end) = (start, end);
        // Every range that overlaps or touches [start, end) merges in.
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .rev()
            .take_while(|(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
        (start, end)
    }

    /// The run holding byte `at`.
    fn run_at(&self, at: u64) -> Option<(u64, u64)> {
        self.0
            .range(..=at)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e > at)
    }

    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..end)
            .rev()
            .take_while(|(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.0.remove(&s);
            if s < start {
                self.0.insert(s, start);
            }
            if e > end {
                self.0.insert(end, e);
            }
        }
    }

    /// The parts of `[start, end)` not covered.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        // The range that may begin before `start` and cover it.
        let first = self.0.range(..=start).next_back().map(|(&s, &e)| (s, e));
        let rest = self
            .0
            .range(start.saturating_add(1)..end)
            .map(|(&s, &e)| (s, e));
        for (s, e) in first.into_iter().chain(rest) {
            if e <= at {
                continue;
            }
            if s > at {
                out.push((at, s.min(end)));
            }
            at = at.max(e);
            if at >= end {
                break;
            }
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    pub fn contains(&self, at: u64) -> bool {
        self.0
            .range(..=at)
            .next_back()
            .is_some_and(|(_, &e)| e > at)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&s, &e)| (s, e))
    }
}

/// `ranges` in parts of at most `limit` bytes each (a range is cut where
/// a part fills), in order; one part when `limit` is 0 (not known) or they
/// fit. Never no part: a commit without bytes still sends one patch.
pub fn split(ranges: &[(u64, u64)], limit: u64) -> Vec<Vec<(u64, u64)>> {
    let mut parts = vec![Vec::new()];
    let mut room = if limit == 0 { u64::MAX } else { limit };
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            if room == 0 {
                parts.push(Vec::new());
                room = limit;
            }
            let take = (end - at).min(room);
            parts.last_mut().expect("never empty").push((at, at + take));
            at += take;
            room -= take;
        }
    }
    parts
}

/// One file's staged bytes.
pub struct Staged {
    state: Mutex<State>,
    /// One commit at a time, so that a commit's ranges return to the dirty
    /// set intact when it fails; held by a rename or unlink of the file so
    /// that no commit runs across it (behind.rs).
    pub commit_lock: Arc<tokio::sync::Mutex<()>>,
    /// Wakes the upload ahead: bytes to send, or its end (upload_ahead.rs).
    pub(super) ahead_wake: Arc<tokio::sync::Notify>,
    /// The upload ahead's task, while one runs (upload_ahead.rs).
    pub(super) ahead_task: Mutex<Option<super::upload_ahead::Running>>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        // An upload ahead still waiting learns that it is abandoned.
        self.ahead_wake.notify_one();
    }
}

/// The header an upload ahead began with: the commit that ends it must
/// ask for the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadHeader {
    pub truncate_to: Option<u64>,
    pub permissions: Option<Permissions>,
}

/// What the upload ahead does next.
#[derive(Debug, PartialEq, Eq)]
pub enum AheadStep {
    /// Send `len` bytes at `offset`, read from the staging file.
    Send(u64, u64),
    /// Nothing to send yet.
    Wait,
    /// Everything is sent: the stream ends, and the server commits.
    Done,
    /// Abandoned: the stream breaks off, and nothing of it lands.
    Abort,
}

/// An upload of dirty bytes begun before the commit that ends it.
struct Ahead {
    header: AheadHeader,
    /// Dirty ranges it took: dirty again when it does not land.
    taken: Ranges,
    /// Bytes it has taken so far.
    sent: u64,
    /// Where the latest long dirty run starts: what it sends from next.
    ready: Option<u64>,
    end: AheadEnd,
}

enum AheadEnd {
    Running,
    /// The commit's last ranges, then the end of the stream.
    Finish(VecDeque<(u64, u64)>),
    Abort,
}

struct State {
    store: Store,
    /// Where the store goes when it leaves memory.
    dir: PathBuf,
    /// Bytes valid in `file`: written, fetched, or known zeros. Everything
    /// at and after `size` always is (a later extension reads as zeros).
    present: Ranges,
    /// Bytes written since the last commit.
    dirty: Ranges,
    /// The file's length as programs see it.
    size: u64,
    /// The length the server holds.
    server_size: u64,
    /// The shortest length the file was cut to since the last commit.
    cut: Option<u64>,
    modified: SystemTime,
    /// A chmod made while bytes wait: sent with them at the commit.
    permissions: Option<Permissions>,
    /// A modification time a program set since its last write: sent with
    /// the commit, so that it is the file's time once committed.
    set_modified: Option<SystemTime>,
    /// Queued commits (behind.rs) not started yet, and not ended yet.
    waiting: u32,
    pending: u32,
    /// The errno of a queued commit that failed, for the file's next close
    /// or fsync to report.
    failure: Option<i32>,
    /// A commit is on its way: no upload ahead starts meanwhile.
    committing: bool,
    /// The length of the dirty run the last write left.
    run: u64,
    ahead: Option<Ahead>,
    /// An upload ahead did not land since the last commit: the next
    /// commit goes the ordinary way.
    ahead_off: bool,
}

impl State {
    /// `commit`'s bits and time did not land: the next commit sends them.
    fn attributes_again(&mut self, commit: &Commit) {
        self.permissions = self.permissions.or(commit.permissions);
        // A write since then made the time its own.
        if commit.set && commit.modified == Some(self.modified) {
            self.set_modified = self.set_modified.or(commit.modified);
        }
    }

    fn may_begin_ahead(&self) -> bool {
        self.run >= AHEAD_START_BYTES && self.ahead.is_none() && !self.committing && !self.ahead_off
    }
}

/// What one commit sends: the length to cut or extend to first, then the
/// dirty ranges (read from the staging file as they are sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub truncate_to: Option<u64>,
    pub ranges: Vec<(u64, u64)>,
    /// The file's length once committed.
    pub size: u64,
    /// The bits to set with the bytes, and the modification time: the one
    /// a program set, else the time of the last write (what the kernel was
    /// told, so that its cached attributes stay true once committed).
    pub permissions: Option<Permissions>,
    pub modified: Option<SystemTime>,
    /// Whether `modified` is a time a program set (utimensat).
    set: bool,
    /// The length the cut was taken from, restored when the commit fails.
    cut: Option<u64>,
    dirty: Ranges,
}

impl Staged {
    /// Staging for a file of `server_size` bytes on the server; `known` when
    /// those bytes are all known locally already (a file just created
    /// empty).
    pub fn new(dir: &Path, server_size: u64, known: bool) -> io::Result<Staged> {
        let store = Store::new(dir, server_size)?;
        let mut present = Ranges::default();
        present.insert(if known { 0 } else { server_size }, u64::MAX);
        Ok(Staged {
            state: Mutex::new(State {
                store,
                dir: dir.to_path_buf(),
                present,
                dirty: Ranges::default(),
                size: server_size,
                server_size,
                cut: None,
                modified: SystemTime::now(),
                permissions: None,
                set_modified: None,
                waiting: 0,
                pending: 0,
                failure: None,
                committing: false,
                run: 0,
                ahead: None,
                ahead_off: false,
            }),
            commit_lock: Arc::new(tokio::sync::Mutex::new(())),
            ahead_wake: Arc::default(),
            ahead_task: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn size(&self) -> u64 {
        self.state().size
    }

    pub fn modified(&self) -> SystemTime {
        self.state().modified
    }

    /// The bits a chmod set, waiting for the commit.
    pub fn permissions(&self) -> Option<Permissions> {
        self.state().permissions
    }

    /// Anything for a commit to send: bytes, a length, bits or a time.
    pub fn has_work(&self) -> bool {
        let s = self.state();
        !s.dirty.is_empty()
            || s.ahead.is_some()
            || s.cut.is_some()
            || s.size != s.server_size
            || s.permissions.is_some()
            || s.set_modified.is_some()
    }

    /// Changes wait, or a queued commit has not ended: the staging must
    /// stay, and a chmod or utimensat goes into it.
    pub fn busy(&self) -> bool {
        self.has_work() || self.state().pending > 0
    }

    /// A commit joins the queue, unless one queued has not started yet
    /// (it will send everything): whether it joined.
    pub fn enqueue(&self) -> bool {
        let mut s = self.state();
        if s.waiting > 0 {
            return false;
        }
        s.waiting += 1;
        s.pending += 1;
        true
    }

    /// A queued commit starts: what changes from now on needs another.
    pub fn started(&self) {
        let mut s = self.state();
        s.waiting = s.waiting.saturating_sub(1);
    }

    /// A queued commit ended; `failure` is its errno when it failed.
    pub fn ended(&self, failure: Option<i32>) {
        let mut s = self.state();
        s.pending = s.pending.saturating_sub(1);
        if failure.is_some() {
            s.failure = failure;
        }
    }

    /// The errno of a queued commit that failed, once.
    pub fn take_failure(&self) -> Option<i32> {
        self.state().failure.take()
    }

    /// A chmod, sent with the next commit.
    pub fn set_permissions(&self, permissions: Permissions) {
        self.state().permissions = Some(permissions);
    }

    /// A modification time set by a program, sent with the next commit.
    pub fn set_modified(&self, modified: SystemTime) {
        let mut s = self.state();
        s.modified = modified;
        s.set_modified = Some(modified);
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut guard = self.state();
        let s = &mut *guard;
        s.store.write_at(&s.dir, data, offset)?;
        let (run_start, run_end) = s.dirty.insert(offset, end);
        s.run = run_end - run_start;
        s.present.insert(offset, end);
        s.size = s.size.max(end);
        s.modified = SystemTime::now();
        s.set_modified = None;
        if let Some(ahead) = &mut s.ahead {
            if matches!(ahead.end, AheadEnd::Running) && run_end - run_start >= AHEAD_CHUNK {
                ahead.ready = Some(run_start);
                drop(guard);
                self.ahead_wake.notify_one();
            }
        }
        Ok(())
    }

    pub fn truncate(&self, len: u64) -> io::Result<()> {
        let mut s = self.state();
        let State { store, dir, .. } = &mut *s;
        store.set_len(dir, len)?;
        let cut = len < s.size;
        if cut {
            s.present.insert(len, u64::MAX);
            s.dirty.remove(len, u64::MAX);
            s.cut = Some(s.cut.map_or(len, |c| c.min(len)));
        }
        s.size = len;
        s.modified = SystemTime::now();
        s.set_modified = None;
        drop(s);
        if cut {
            // What it sent past the cut would land.
            self.abort_ahead();
        }
        Ok(())
    }

    /// The parts of `[offset, offset + len)` (within the file) that must
    /// come from the server, and where the readable range ends.
    pub fn missing(&self, offset: u64, len: u64) -> (u64, Vec<(u64, u64)>) {
        let s = self.state();
        let end = offset.saturating_add(len).min(s.size);
        if offset >= end {
            return (end, Vec::new());
        }
        (end, s.present.gaps(offset, end))
    }

    /// Stores bytes fetched from the server at `offset`, where nothing newer
    /// is present.
    pub fn fill(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.state();
        let end = offset + data.len() as u64;
        for (gs, ge) in s.present.gaps(offset, end) {
            let from = (gs - offset) as usize;
            let to = (ge - offset) as usize;
            let State { store, dir, .. } = &mut *s;
            store.write_at(dir, &data[from..to], gs)?;
        }
        s.present.insert(offset, end);
        Ok(())
    }

    /// Bytes `[offset, end)` from the staging file; every one must be
    /// present.
    pub fn read_local(&self, offset: u64, end: u64) -> io::Result<Vec<u8>> {
        self.state().store.read_range(offset, end)
    }

    /// The bytes from the last `block`-aligned offset before the end to
    /// the end, with that offset, when every one is here and no commit has
    /// failed since the last that landed; `None` otherwise (or when the
    /// file is empty).
    pub fn tail(&self, block: u64) -> Option<(u64, Vec<u8>)> {
        let s = self.state();
        if s.size == 0 || s.failure.is_some() {
            return None;
        }
        let start = (s.size - 1) / block * block;
        if !s.present.gaps(start, s.size).is_empty() {
            return None;
        }
        Some((start, s.store.read_range(start, s.size).ok()?))
    }

    /// What a commit's reads go through.
    pub fn reader(&self) -> io::Result<StageReader> {
        self.state().store.reader()
    }

    /// What the next commit sends, taken out of the dirty set; `None` when
    /// the server already holds every byte.
    pub fn begin_commit(&self) -> Option<Commit> {
        let mut s = self.state();
        if s.dirty.is_empty()
            && s.ahead.is_none()
            && s.cut.is_none()
            && s.size == s.server_size
            && s.permissions.is_none()
            && s.set_modified.is_none()
        {
            return None;
        }
        let size = s.size;
        // Bytes in [base, size) that are not dirty are zeros: cut away, or
        // added by an extension.
        let base = s.cut.unwrap_or(s.server_size).min(size);
        let truncate_to = (base != s.server_size).then_some(base);
        let dirty = std::mem::take(&mut s.dirty);
        let mut ranges: Vec<(u64, u64)> = dirty
            .iter()
            .map(|(a, b)| (a, b.min(size)))
            .filter(|(a, b)| a < b)
            .collect();
        let sent_ahead = |at| s.ahead.as_ref().is_some_and(|a| a.taken.contains(at));
        if size > base && !dirty.contains(size - 1) && !sent_ahead(size - 1) {
            // The file must end at `size`: its last byte, a zero, says so.
            ranges.push((size - 1, size));
        }
        let cut = s.cut.take();
        let set = s.set_modified.take();
        s.committing = true;
        Some(Commit {
            truncate_to,
            ranges,
            size,
            permissions: s.permissions.take(),
            modified: Some(set.unwrap_or(s.modified)),
            set: set.is_some(),
            cut,
            dirty,
        })
    }

    /// The server holds `commit` now.
    pub fn committed(&self, commit: &Commit) {
        let mut s = self.state();
        s.server_size = commit.size;
        // What an earlier failure left is sent now: nothing to report.
        s.failure = None;
        s.committing = false;
        s.ahead_off = false;
    }

    /// `commit` did not land: its ranges are dirty again.
    pub fn failed(&self, commit: Commit) {
        let mut s = self.state();
        s.committing = false;
        for (a, b) in commit.dirty.iter() {
            s.dirty.insert(a, b);
        }
        if let Some(c) = commit.cut {
            s.cut = Some(s.cut.map_or(c, |now| now.min(c)));
        }
        s.attributes_again(&commit);
    }

    /// `commit`'s bytes landed without its bits and time (an upload ahead
    /// carried them): those go with the next commit.
    pub fn attributes_again(&self, commit: &Commit) {
        self.state().attributes_again(commit);
    }

    /// Starts an upload ahead when the last write left a long dirty run
    /// and none runs, no commit is on its way and none failed since the
    /// last commit: the header it is sent with.
    pub fn begin_ahead(&self) -> Option<AheadHeader> {
        let mut s = self.state();
        if !s.may_begin_ahead() {
            return None;
        }
        // As the commit computes it; only a cut, which ends the upload,
        // changes it.
        let base = s.cut.unwrap_or(s.server_size).min(s.size);
        let header = AheadHeader {
            truncate_to: (base != s.server_size).then_some(base),
            permissions: s.permissions,
        };
        let ready = s
            .dirty
            .iter()
            .find(|(a, b)| b - a >= AHEAD_CHUNK)
            .map(|r| r.0);
        s.ahead = Some(Ahead {
            header,
            taken: Ranges::default(),
            sent: 0,
            ready,
            end: AheadEnd::Running,
        });
        Some(header)
    }

    /// Whether [`Self::begin_ahead`] would start one now.
    pub fn may_begin_ahead(&self) -> bool {
        self.state().may_begin_ahead()
    }

    /// The upload ahead's next step; `limit` is the session's per-write
    /// limit (0: not known), which it never passes.
    pub fn next_ahead(&self, limit: u64) -> AheadStep {
        let mut s = self.state();
        let State { ahead, dirty, .. } = &mut *s;
        let Some(ahead) = ahead else {
            return AheadStep::Abort;
        };
        match &mut ahead.end {
            AheadEnd::Abort => AheadStep::Abort,
            AheadEnd::Finish(rest) => match rest.front_mut() {
                None => AheadStep::Done,
                Some((start, end)) => {
                    let (at, len) = (*start, (*end - *start).min(AHEAD_CHUNK));
                    *start += len;
                    if start == end {
                        rest.pop_front();
                    }
                    AheadStep::Send(at, len)
                }
            },
            AheadEnd::Running => {
                let run = ahead.ready.and_then(|at| dirty.run_at(at));
                let Some((start, end)) = run.filter(|(a, b)| b - a >= AHEAD_CHUNK) else {
                    ahead.ready = None;
                    return AheadStep::Wait;
                };
                if limit > 0 && ahead.sent + AHEAD_CHUNK > limit {
                    ahead.end = AheadEnd::Abort;
                    return AheadStep::Abort;
                }
                let stop = start + AHEAD_CHUNK;
                dirty.remove(start, stop);
                ahead.taken.insert(start, stop);
                ahead.sent += AHEAD_CHUNK;
                ahead.ready = (end > stop).then_some(stop);
                AheadStep::Send(start, AHEAD_CHUNK)
            }
        }
    }

    /// The commit `commit` (begun with [`Self::begin_commit`]) ends the
    /// upload ahead: when it sets the length the upload began with and
    /// stays within `limit`, its ranges are sent last and the stream ends
    /// (`Some`: whether its bits and time go with them too; when they
    /// changed since the upload began, a chmod or a time set meanwhile,
    /// they go in a commit of their own); otherwise (`None`) the upload
    /// is abandoned.
    pub fn finish_ahead(&self, commit: &Commit, limit: u64) -> Option<bool> {
        let mut s = self.state();
        let ahead = s.ahead.as_mut()?;
        let rest: u64 = commit.ranges.iter().map(|(a, b)| b - a).sum();
        let fits = matches!(ahead.end, AheadEnd::Running)
            && ahead.header.truncate_to == commit.truncate_to
            && (limit == 0 || ahead.sent + rest <= limit);
        let whole = ahead.header.permissions == commit.permissions && !commit.set;
        ahead.end = if fits {
            AheadEnd::Finish(commit.ranges.iter().copied().collect())
        } else {
            AheadEnd::Abort
        };
        drop(s);
        self.ahead_wake.notify_one();
        fits.then_some(whole)
    }

    /// Abandons the upload ahead, if one runs: nothing of it lands.
    pub fn abort_ahead(&self) {
        let mut s = self.state();
        if let Some(ahead) = &mut s.ahead {
            ahead.end = AheadEnd::Abort;
            drop(s);
            self.ahead_wake.notify_one();
        }
    }

    /// The upload ahead ended; unless it `landed`, what it took is dirty
    /// again and the next commit goes the ordinary way.
    pub fn end_ahead(&self, landed: bool) {
        let mut s = self.state();
        let Some(ahead) = s.ahead.take() else {
            return;
        };
        if !landed {
            // Past a cut since, the bytes are gone.
            let size = s.size;
            for (a, b) in ahead.taken.iter() {
                s.dirty.insert(a, b.min(size));
            }
            s.ahead_off = true;
        }
    }

    /// The modification time the server gave a commit that carried none
    /// (one ended by the upload ahead), unless the file was written or
    /// given a time since.
    pub fn landed_at(&self, commit: &Commit, modified: SystemTime) {
        let mut s = self.state();
        if commit.modified == Some(s.modified) && s.set_modified.is_none() {
            s.modified = modified;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(list: &[(u64, u64)]) -> Ranges {
        let mut r = Ranges::default();
        for &(a, b) in list {
            r.insert(a, b);
        }
        r
    }

    #[test]
    fn ranges_merge_split_and_find_gaps() {
        let mut r = ranges(&[(0, 10), (20, 30), (10, 12)]);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 12), (20, 30)]);
        assert_eq!(r.gaps(5, 25), vec![(12, 20)]);
        assert_eq!(r.gaps(30, 40), vec![(30, 40)]);
        r.remove(5, 22);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 5), (22, 30)]);
        assert!(r.contains(4) && !r.contains(5) && r.contains(29) && !r.contains(30));
        r.insert(4, 23);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 30)]);
    }

    #[test]
    fn a_commit_splits_into_parts_within_the_limit() {
        assert_eq!(split(&[], 0), vec![Vec::new()]);
        assert_eq!(split(&[(0, 100)], 0), vec![vec![(0, 100)]]);
        assert_eq!(
            split(&[(0, 25), (50, 60)], 10),
            vec![
                vec![(0, 10)],
                vec![(10, 20)],
                vec![(20, 25), (50, 55)],
                vec![(55, 60)],
            ]
        );
        assert_eq!(split(&[(0, 20)], 10), vec![vec![(0, 10)], vec![(10, 20)]]);
    }

    fn staged(server_size: u64) -> Staged {
        Staged::new(&std::env::temp_dir(), server_size, false).unwrap()
    }

    /// Tests that count on the memory budget's state run one at a time.
    static BUDGET: Mutex<()> = Mutex::new(());

    fn in_memory(s: &Staged) -> bool {
        matches!(s.state().store, Store::Memory(_))
    }

    #[test]
    fn a_small_file_is_staged_in_memory_and_goes_to_disk_whole_as_it_grows() {
        let _alone = BUDGET.lock().unwrap_or_else(|e| e.into_inner());
        let s = Staged::new(&std::env::temp_dir(), 0, true).unwrap();
        s.write(0, b"hello").unwrap();
        s.write(100, b"world").unwrap();
        assert!(in_memory(&s));
        let reader = s.reader().unwrap();
        assert_eq!(&reader.read_at(100, 5).unwrap()[..], b"world");
        assert!(reader.read_at(100, 6).is_err(), "past the end");

        let far = MEMORY_STAGE_BYTES;
        s.write(far, b"!").unwrap();
        assert!(
            !in_memory(&s),
            "past {MEMORY_STAGE_BYTES} bytes it is on disk"
        );
        assert_eq!(s.read_local(0, 5).unwrap(), b"hello");
        assert_eq!(s.read_local(5, 100).unwrap(), vec![0; 95]);
        assert_eq!(s.read_local(100, 105).unwrap(), b"world");
        assert_eq!(s.read_local(far, far + 1).unwrap(), b"!");
        let c = s.begin_commit().unwrap();
        assert_eq!(c.size, far + 1);
        let reader = s.reader().unwrap();
        assert_eq!(&reader.read_at(100, 5).unwrap()[..], b"world");

        // Cut back and grown again within the bound: it stays on disk.
        s.truncate(3).unwrap();
        s.write(10, b"x").unwrap();
        assert_eq!(s.read_local(0, 11).unwrap(), b"hel\0\0\0\0\0\0\0x");
    }

    #[test]
    fn past_the_memory_budget_small_files_are_staged_on_disk_until_it_frees() {
        let _alone = BUDGET.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = Vec::new();
        while take_memory_share() {
            held.push(());
        }
        let s = staged(10);
        assert!(!in_memory(&s), "the budget is spent");
        s.write(0, b"on disk").unwrap();
        assert_eq!(s.read_local(0, 7).unwrap(), b"on disk");
        for () in held.drain(..) {
            give_memory_share();
        }
        let s = staged(10);
        assert!(in_memory(&s), "a share is free again");
        drop(s);
        assert!(take_memory_share(), "dropping a file gives its share back");
        give_memory_share();
    }

    #[test]
    fn a_small_write_commits_only_its_bytes() {
        let s = staged(1 << 30);
        s.write(4096, b"abc").unwrap();
        let c = s.begin_commit().unwrap();
        assert_eq!(c.truncate_to, None);
        assert_eq!(c.ranges, vec![(4096, 4099)]);
        s.committed(&c);
        assert!(s.begin_commit().is_none());
    }

    #[test]
    fn cut_then_extend_sends_the_cut_and_a_final_zero() {
        let s = staged(100);
        s.truncate(10).unwrap();
        s.truncate(50).unwrap();
        let c = s.begin_commit().unwrap();
        assert_eq!(c.truncate_to, Some(10));
        assert_eq!(c.ranges, vec![(49, 50)]);
        assert_eq!(s.read_local(10, 50).unwrap(), vec![0; 40]);
    }

    #[test]
    fn a_failed_commit_leaves_its_ranges_dirty() {
        let s = staged(0);
        s.write(0, b"hello").unwrap();
        let c = s.begin_commit().unwrap();
        s.write(10, b"x").unwrap();
        s.failed(c);
        let again = s.begin_commit().unwrap();
        assert_eq!(again.ranges, vec![(0, 5), (10, 11)]);
    }

    #[test]
    fn a_mode_and_time_set_before_the_commit_go_with_it() {
        let s = staged(0);
        s.write(0, b"#!/bin/sh\n").unwrap();
        let then = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        s.set_permissions(Permissions::masked(0o755));
        s.set_modified(then);
        assert_eq!(s.modified(), then);
        let c = s.begin_commit().unwrap();
        assert_eq!(c.permissions, Some(Permissions::masked(0o755)));
        assert_eq!(c.modified, Some(then));
        s.failed(c);
        let again = s.begin_commit().unwrap();
        assert_eq!(
            (again.permissions, again.modified),
            (Some(Permissions::masked(0o755)), Some(then))
        );
        s.committed(&again);
        assert!(s.begin_commit().is_none());
    }

    #[test]
    fn a_write_after_a_set_time_makes_the_time_its_own() {
        let s = staged(0);
        s.write(0, b"a").unwrap();
        s.set_modified(SystemTime::UNIX_EPOCH);
        s.write(1, b"b").unwrap();
        let written = s.modified();
        assert_ne!(written, SystemTime::UNIX_EPOCH);
        assert_eq!(s.begin_commit().unwrap().modified, Some(written));
    }

    const M: u64 = AHEAD_CHUNK;

    /// `chunks` writes of a chunk each from offset 0, then `tail` bytes.
    fn written(s: &Staged, chunks: u64, tail: usize) {
        for i in 0..chunks {
            s.write(i * M, &vec![i as u8; M as usize]).unwrap();
        }
        if tail > 0 {
            s.write(chunks * M, &vec![9; tail]).unwrap();
        }
    }

    /// Every step until the upload waits or ends.
    fn steps(s: &Staged, limit: u64) -> Vec<AheadStep> {
        let mut out = Vec::new();
        loop {
            let step = s.next_ahead(limit);
            let last = !matches!(step, AheadStep::Send(..));
            out.push(step);
            if last {
                return out;
            }
        }
    }

    #[test]
    fn an_upload_ahead_sends_a_long_runs_whole_chunks_then_the_commits_rest() {
        let s = staged(0);
        written(&s, 7, 0);
        // Under the start: the commit goes the ordinary way.
        assert_eq!(s.begin_ahead(), None);
        written(&s, 9, 100);
        let header = s.begin_ahead().unwrap();
        assert_eq!(header.truncate_to, None);
        assert_eq!(s.begin_ahead(), None, "one at a time");
        let mut want: Vec<AheadStep> = (0..9).map(|i| AheadStep::Send(i * M, M)).collect();
        want.push(AheadStep::Wait);
        assert_eq!(steps(&s, 0), want);
        assert!(s.has_work(), "taken bytes are not yet the server's");

        let c = s.begin_commit().unwrap();
        // The last byte went ahead: no extra range says where the file ends.
        assert_eq!(c.ranges, vec![(9 * M, 9 * M + 100)]);
        assert_eq!(s.finish_ahead(&c, 0), Some(true));
        assert_eq!(
            steps(&s, 0),
            vec![AheadStep::Send(9 * M, 100), AheadStep::Done]
        );
        s.end_ahead(true);
        s.committed(&c);
        assert!(s.begin_commit().is_none());
        assert!(!s.has_work());
    }

    #[test]
    fn a_cut_abandons_the_upload_ahead_and_its_bytes_are_dirty_again() {
        let s = staged(0);
        written(&s, 9, 0);
        s.begin_ahead().unwrap();
        assert_eq!(s.next_ahead(0), AheadStep::Send(0, M));
        assert_eq!(s.next_ahead(0), AheadStep::Send(M, M));
        s.truncate(M + 5).unwrap();
        assert_eq!(s.next_ahead(0), AheadStep::Abort);
        s.end_ahead(false);
        let c = s.begin_commit().unwrap();
        assert_eq!(c.ranges, vec![(0, M + 5)]);
        s.failed(c);
        // Not again before a commit lands.
        written(&s, 9, 0);
        assert_eq!(s.begin_ahead(), None);
    }

    #[test]
    fn a_commit_past_the_per_write_limit_abandons_the_upload_ahead() {
        let limit = 9 * M;
        let s = staged(0);
        written(&s, 9, 1);
        s.begin_ahead().unwrap();
        assert_eq!(steps(&s, limit).len(), 10);
        let c = s.begin_commit().unwrap();
        assert_eq!(s.finish_ahead(&c, limit), None);
        assert_eq!(s.next_ahead(limit), AheadStep::Abort);
        s.end_ahead(false);
        s.failed(c);
        let again = s.begin_commit().unwrap();
        assert_eq!(again.ranges, vec![(0, 9 * M + 1)], "every byte");
    }

    #[test]
    fn bits_or_a_time_set_while_uploading_ahead_follow_in_a_commit_of_their_own() {
        let then = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        type Change = fn(&Staged, SystemTime);
        let changes: [(&str, Change); 2] = [
            ("a chmod", |s, _| {
                s.set_permissions(Permissions::masked(0o600))
            }),
            ("a time set", |s, t| s.set_modified(t)),
        ];
        for (what, change) in changes {
            let s = staged(0);
            written(&s, 9, 1);
            s.begin_ahead().unwrap();
            assert_eq!(steps(&s, 0).len(), 10, "{what}");
            change(&s, then);
            let c = s.begin_commit().unwrap();
            assert_eq!(s.finish_ahead(&c, 0), Some(false), "{what}");
            assert_eq!(
                steps(&s, 0),
                vec![AheadStep::Send(9 * M, 1), AheadStep::Done],
                "{what}"
            );
            s.end_ahead(true);
            s.committed(&c);
            s.attributes_again(&c);
            let after = s.begin_commit().unwrap();
            assert!(after.ranges.is_empty(), "{what}: no byte again");
            assert_eq!(after.truncate_to, None, "{what}");
            assert_eq!(
                (after.permissions, after.set),
                (c.permissions, c.set),
                "{what}: the bits and time"
            );
        }
    }

    #[test]
    fn an_upload_ahead_never_passes_the_per_write_limit() {
        let s = staged(0);
        written(&s, 9, 0);
        s.begin_ahead().unwrap();
        assert_eq!(
            steps(&s, 2 * M),
            vec![
                AheadStep::Send(0, M),
                AheadStep::Send(M, M),
                AheadStep::Abort
            ]
        );
    }

    #[test]
    fn fetched_bytes_never_cover_newer_writes() {
        let s = staged(8);
        s.write(2, b"WW").unwrap();
        assert_eq!(s.missing(0, 8).1, vec![(0, 2), (4, 8)]);
        s.fill(0, b"abcdefgh").unwrap();
        assert_eq!(s.read_local(0, 8).unwrap(), b"abWWefgh");
        assert!(s.missing(0, 8).1.is_empty());
    }
}
