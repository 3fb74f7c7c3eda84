//! A live session: its record, its workspace's handles, its change log,
//! and the idle clock and stream quota the registry keeps for it.

use super::SessionRecord;
use crate::archive::import::ArchiveTarget;
use crate::snapshots::SnapshotStore;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Filesystem, Result};

/// A live session.
pub struct Session {
    pub record: SessionRecord,
    pub fs: Arc<dyn Filesystem>,
    /// The same workspace, for ImportArchive's whole-workspace replacement.
    pub archive: Arc<dyn ArchiveTarget>,
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Change events for Watch and Changes.
    pub events: Arc<crate::events::EventLog>,
    /// For a DIRECTORY session: reports changes made from outside.
    pub(super) _external: Option<crate::events::ExternalWatcher>,
    /// The directory this session owns and removes with itself.
    pub(super) owned_dir: Option<PathBuf>,
    /// Its idle clock and its open streams.
    pub(super) activity: Arc<Activity>,
    /// The most streams allowed open at once (0: no limit).
    pub(super) max_streams: usize,
    /// Cancelled when the session is deleted or expires, so that its
    /// streams (Watch above all, which would otherwise wait forever) end
    /// and release it.
    pub(super) closed: tokio_util::sync::CancellationToken,
}

/// What the idle TTL looks at: a session with a working stream open
/// (ReadBytes, WriteBytes, Grep, Export) is in use, however long ago its
/// last call started, and the end of any stream counts as use. A Watch only
/// waits for others' work: it does not keep its session alive while open,
/// nor outlive it.
#[derive(Default)]
pub(super) struct Activity {
    /// When a call last named this session or a stream of it last ended
    /// (ms since the Unix epoch).
    pub(super) last_used_ms: AtomicU64,
    /// Streams open on this session, Watch included (the stream quota).
    streams: AtomicUsize,
    /// Working streams open on this session.
    working: AtomicUsize,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        let a = Activity::default();
        a.last_used_ms.store(now_ms(), Ordering::Relaxed);
        Arc::new(a)
    }

    /// Idle for longer than `ttl_ms` at `now` (never with a stream open).
    pub(super) fn idle_longer_than(&self, ttl_ms: u64, now: u64) -> bool {
        ttl_ms > 0
            && self.working.load(Ordering::SeqCst) == 0
            && now.saturating_sub(self.last_used_ms.load(Ordering::SeqCst)) > ttl_ms
    }
}

/// One open stream of a session, released when dropped; the session's
/// idle clock restarts when any of its streams ends (the time is stored
/// before the stream stops counting, so the reaper never sees it neither
/// open nor used).
pub struct StreamPermit {
    activity: Arc<Activity>,
    working: bool,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let a = &self.activity;
        a.last_used_ms.store(now_ms(), Ordering::SeqCst);
        if self.working {
            a.working.fetch_sub(1, Ordering::SeqCst);
        }
        a.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Session {
    /// When a call last named this session, or a stream of it last ended.
    pub fn last_active(&self) -> std::time::SystemTime {
        let ms = self.activity.last_used_ms.load(Ordering::SeqCst);
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
    }

    /// Streams open on this session now, Watch included.
    pub fn open_streams(&self) -> usize {
        self.activity.streams.load(Ordering::SeqCst)
    }

    /// Watches open on this session now.
    pub(super) fn watches(&self) -> usize {
        let a = &self.activity;
        a.streams
            .load(Ordering::SeqCst)
            .saturating_sub(a.working.load(Ordering::SeqCst))
    }

    /// Admits one more working stream (ReadBytes, WriteBytes, Grep,
    /// Export) or refuses with `QUOTA_EXCEEDED` when the session has its
    /// maximum open. Hold the permit for as long as the stream lives: the
    /// session does not expire meanwhile.
    pub fn open_stream(&self) -> Result<StreamPermit> {
        self.admit(true)
    }

    /// Admits a Watch, which counts against the stream quota but does not
    /// keep the session from expiring (its end counts as use).
    pub fn open_watch(&self) -> Result<StreamPermit> {
        self.admit(false)
    }

    fn admit(&self, working: bool) -> Result<StreamPermit> {
        let open = self.activity.streams.fetch_add(1, Ordering::SeqCst);
        if working {
            self.activity.working.fetch_add(1, Ordering::SeqCst);
        }
        let permit = StreamPermit {
            activity: self.activity.clone(),
            working,
        };
        if self.max_streams > 0 && open >= self.max_streams {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "session '{}' already has {} streams open, its maximum; close one or raise --max-streams-per-session",
                    self.record.id, self.max_streams
                ),
            });
        }
        Ok(permit)
    }

    /// Resolves when the session is deleted or expires.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }
}

pub(super) use crate::clock::now_ms;

impl Session {
    /// Parses a client path under this session's limits.
    pub fn path(&self, raw: &str) -> Result<CanonicalPath> {
        CanonicalPath::parse(raw, &self.record.limits.path)
    }
}

impl Session {
    /// Whether `--autosnapshot` snapshots this session (by its kind).
    pub(crate) fn autosnapshots(&self) -> bool {
        super::factory::provider(self.record.backend).autosnapshots()
    }
}

impl crate::auth::TokenHolder for Session {
    fn session_id(&self) -> &str {
        &self.record.id
    }

    fn tokens_dir(&self) -> Option<&std::path::Path> {
        let mirrored = super::factory::provider(self.record.backend).mirrored();
        self.owned_dir.as_deref().filter(|_| mirrored)
    }
}
