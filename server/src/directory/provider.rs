//! How the registry makes, forks and reopens DIRECTORY sessions.

use super::journal;
use super::record::{create_session_dirs, write_session_file, PersistedSession, SESSION_FILE};
use super::root::{allowed_root, fd_path, open_rooted};
use super::{DirectoryBackend, DirectorySnapshots};
use crate::backend::Backend;
use crate::kind::{
    handles, populate, BackendProvider, Context, Handles, Made, NewSession, Reopened, SessionRecord,
};
use crate::snapshots::fork::{abandoned, task_failed, HalfMade, Origin};
use crate::snapshots::phases::Phases;
use crate::workspace::Workspace;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wsfs::{Error, Result};

/// Makes DIRECTORY sessions: each owns `sessions/<id>/` under the data
/// directory, and outlives a restart.
pub(crate) struct DirectoryProvider;

pub(crate) use crate::kind::sessions_dir;

/// The snapshots of DIRECTORY session `id`, kept in `session_dir` and
/// mirrored when the server has an object store.
pub(crate) fn snapshots_of(
    cx: &Context<'_>,
    ws: &Arc<Workspace<DirectoryBackend>>,
    id: &str,
    session_dir: &Path,
) -> Arc<DirectorySnapshots> {
    Arc::new(
        DirectorySnapshots::new(ws.clone(), session_dir, cx.config.default_max_total_bytes)
            .mirrored(cx.mirror(id, session_dir)),
    )
}

#[async_trait::async_trait]
impl BackendProvider for DirectoryProvider {
    fn name(&self) -> &'static str {
        "directory"
    }

    fn mirrored(&self) -> bool {
        true
    }

    async fn create(&self, cx: &Context<'_>, new: NewSession<'_>) -> Result<Made> {
        let NewSession {
            id,
            spec,
            limits,
            mounts,
            seeds,
        } = new;
        let config = cx.config;
        let session_dir = sessions_dir(&config.data_dir).join(&id);
        // A chosen id may name a directory left behind: never adopt
        // it (nor remove it when this creation fails).
        if session_dir.symlink_metadata().is_ok() {
            return Err(Error::AlreadyExists {
                path: format!("session {id}"),
            });
        }
        let mut root_identity = None;
        let (root, held) = match &spec.root {
            Some(r) => {
                let real = allowed_root(&config.allow_roots, r)?;
                let (fd, identity) =
                    open_rooted(&config.allow_roots, &real, None).map_err(|why| {
                        Error::PermissionDenied {
                            path: r.display().to_string(),
                            message: format!("root '{}' cannot be used: {why}", r.display()),
                        }
                    })?;
                root_identity = Some(identity);
                (real, Some(fd))
            }
            None => (session_dir.join("root"), None),
        };
        let open_root = held.as_ref().map_or_else(|| root.clone(), fd_path);
        let made = create_session_dirs(&session_dir, &root, spec.root.is_none())
            .and_then(|_| DirectoryBackend::open(&open_root, &session_dir.join("staging")))
            .map(|b| b.with_owner(spec.owner).removing_later())
            .and_then(|b| b.claim_for_owner(spec.root.is_none()).map(|()| b));
        let backend = match made {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&session_dir);
                return Err(e);
            }
        };
        let ws = Arc::new(Workspace::new(backend, limits));
        if let Err(e) = populate(&ws, mounts, &seeds, spec.layout).await {
            let _ = std::fs::remove_dir_all(&session_dir);
            return Err(e);
        }
        // Filled without a sync per file, then synced once (the
        // root may be on another filesystem than the record).
        ws.backend().set_durability(config.durability);
        if let Err(e) = ws.exclusive(|b| b.settle()).await {
            let _ = std::fs::remove_dir_all(&session_dir);
            return Err(e);
        }
        ws.set_read_only(spec.read_only);
        let snapshots = snapshots_of(cx, &ws, &id, &session_dir);
        let durability = config.durability;
        let persist = {
            let (dir, root) = (session_dir.clone(), root.clone());
            move |record: &SessionRecord| {
                let persisted = PersistedSession::from_record(record, &root, root_identity);
                write_session_file(&dir, &persisted, durability)
            }
        };
        Ok(Made {
            handles: handles(ws, snapshots),
            root_path: Some(root),
            owned_dir: Some(session_dir),
            persist: Some(Box::new(persist)),
            on_listed: None,
        })
    }

    async fn fork(
        &self,
        cx: &Context<'_>,
        record: &mut SessionRecord,
        origin: Arc<Origin>,
        budget: u64,
    ) -> Result<Made> {
        let session_dir = sessions_dir(&cx.config.data_dir).join(&record.id);
        let root = session_dir.join("root");
        record.root_path = Some(root.clone());
        let mut half_made = HalfMade::directory(session_dir.clone());
        let made = {
            let (cancel, busy) = (half_made.cancel.clone(), half_made.busy.clone());
            let persisted = PersistedSession::from_record(record, &root, None);
            let durability = cx.config.durability;
            let session_dir = session_dir.clone();
            let origin = origin.clone();
            tokio::task::spawn_blocking(move || {
                let _busy = busy.lock().unwrap_or_else(|e| e.into_inner());
                let made = (|| {
                    if cancel.load(Ordering::Relaxed) {
                        return Err(abandoned());
                    }
                    let mut phases = Phases::start();
                    create_session_dirs(&session_dir, &root, true)?;
                    let written =
                        super::snapshots::materialise(&origin, &root, &session_dir, &cancel)?;
                    phases.mark("workspace and objects");
                    let b = DirectoryBackend::open(&root, &session_dir.join("staging"))?
                        .with_durability(durability)
                        .removing_later();
                    b.settle()?;
                    phases.mark("settled");
                    super::snapshots::first_snapshot(
                        &session_dir,
                        &root,
                        &b,
                        &origin,
                        budget,
                        &cancel,
                        &written,
                        &mut phases,
                    )?;
                    // Last: its presence makes the fork outlive a
                    // restart.
                    write_session_file(&session_dir, &persisted, durability)?;
                    phases.mark("session file");
                    if cancel.load(Ordering::Relaxed) {
                        return Err(abandoned());
                    }
                    tracing::info!(session = %persisted.id, %phases, "fork's workspace and store made");
                    Ok(b)
                })();
                if made.is_err() {
                    let _ = std::fs::remove_dir_all(&session_dir);
                }
                made
            })
        };
        let b = made.await.map_err(task_failed)??;
        let ws = Arc::new(Workspace::new(b, record.limits));
        ws.set_read_only(record.read_only);
        let snapshots = snapshots_of(cx, &ws, &record.id, &session_dir);
        half_made.keep();
        Ok(Made {
            handles: handles(ws, snapshots),
            root_path: record.root_path.clone(),
            owned_dir: Some(session_dir),
            persist: None,
            on_listed: None,
        })
    }

    /// Every DIRECTORY session recorded under the data directory. A
    /// session directory whose record cannot be read is left alone; one
    /// without a record is what a kill left of a creation, and is
    /// removed ([`crate::kind::clear_unfinished`]).
    fn reopen(&self, cx: &Context<'_>) -> Result<Vec<Reopened>> {
        let dir = sessions_dir(&cx.config.data_dir);
        let kept = crate::kind::clear_unfinished(&dir, SESSION_FILE).map_err(|e| {
            Error::io_while(
                e,
                format_args!("reopening the sessions in '{}'", dir.display()),
            )
        })?;
        Ok(kept
            .into_iter()
            .map(|session_dir| {
                reopen(cx, &session_dir).unwrap_or_else(|error| Reopened::Skipped {
                    dir: session_dir,
                    error,
                })
            })
            .collect())
    }
}

/// Reopens the DIRECTORY session recorded in `session_dir`. One that a
/// stop left with work to finish (a Restore or ImportArchive to roll
/// forward, a recursive Delete's tree to remove) is not opened here: it is
/// [`Reopened::Recovering`], finished in the background, so that other
/// sessions answer at once.
fn reopen(cx: &Context<'_>, session_dir: &Path) -> Result<Reopened> {
    let raw = std::fs::read(session_dir.join(SESSION_FILE))
        .map_err(|e| Error::internal(format!("no readable {SESSION_FILE}: {e}")))?;
    let persisted: PersistedSession = serde_json::from_slice(&raw)
        .map_err(|e| Error::internal(format!("corrupt {SESSION_FILE}: {e}")))?;
    let identity = persisted.root_identity;
    let record = persisted.into_record(cx.config.max_write_bytes);
    let root = record.root_path.clone().unwrap_or_default();
    // A root elsewhere is reopened by identity, never through a link,
    // and only while it is still inside an allowed root.
    let rooted = root != session_dir.join("root");
    let held = if rooted {
        match open_rooted(&cx.config.allow_roots, &root, identity) {
            Ok((fd, _)) => Some(fd),
            Err(why) => {
                return Ok(Reopened::Unavailable {
                    record,
                    why,
                    session_dir: session_dir.to_path_buf(),
                })
            }
        }
    } else {
        None
    };
    let open_root = held.as_ref().map_or_else(|| root.clone(), fd_path);
    if let Some(why) = journal::unfinished(session_dir, &open_root) {
        let finish = {
            let (config, mirrors) = (cx.config.clone(), cx.mirrors.clone());
            let record = record.clone();
            let session_dir = session_dir.to_path_buf();
            move || {
                let open_root = held.as_ref().map_or(root, fd_path);
                let cx = Context {
                    config: &config,
                    mirrors,
                };
                reopen_workspace(&cx, &session_dir, &record, &open_root)
            }
        };
        return Ok(Reopened::Recovering {
            record,
            why,
            session_dir: session_dir.to_path_buf(),
            finish: Box::new(finish),
        });
    }
    let handles = reopen_workspace(cx, session_dir, &record, &open_root)?;
    // Its change watcher watches the root by the path just checked
    // (component by component, to be that directory).
    Ok(Reopened::Ready {
        record,
        handles,
        session_dir: session_dir.to_path_buf(),
    })
}

/// The workspace of a recorded DIRECTORY session, made whole: a
/// replacement a stop cut short is rolled forward (before staging is
/// emptied: it needs the files it staged there), and what a stop left
/// to remove is removed. Blocking.
fn reopen_workspace(
    cx: &Context<'_>,
    session_dir: &Path,
    record: &SessionRecord,
    open_root: &Path,
) -> Result<Handles> {
    let durability = cx.config.durability;
    journal::recover(session_dir, open_root, durability, record.owner)?;
    // Uploads in flight when the server stopped are abandoned, and
    // trees a recursive Delete moved out are removed.
    let staging = session_dir.join("staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(|e| Error::internal(format!("cannot create '{}': {e}", staging.display())))?;
    let backend = DirectoryBackend::open(open_root, &staging)?
        .with_durability(durability)
        .with_owner(record.owner)
        .removing_later();
    backend.finish_removals()?;
    let ws = Arc::new(Workspace::new(backend, record.limits));
    ws.set_read_only(record.read_only);
    let snapshots = snapshots_of(cx, &ws, &record.id, session_dir);
    Ok(handles(ws, snapshots))
}

/// The workspace and snapshot store of DIRECTORY session `record`,
/// recovered from the object store into `session_dir` (its store
/// downloaded, its root still empty). Blocking.
pub(crate) fn recovered(
    cx: &Context<'_>,
    session_dir: &Path,
    record: &SessionRecord,
) -> Result<(Arc<Workspace<DirectoryBackend>>, Arc<DirectorySnapshots>)> {
    let root = record.root_path.clone().unwrap_or_default();
    let backend = DirectoryBackend::open(&root, &session_dir.join("staging"))?
        .with_durability(cx.config.durability)
        .with_owner(record.owner)
        .removing_later();
    backend.claim_for_owner(true)?;
    let ws = Arc::new(Workspace::new(backend, record.limits));
    let store = snapshots_of(cx, &ws, &record.id, session_dir);
    Ok((ws, store))
}

/// Snapshot `snapshot_id` of a store fetched into `copy` (a session
/// directory of its own), as a fork's origin.
pub(crate) async fn origin_in_copy(
    copy: &Path,
    snapshot_id: &str,
    default_budget: u64,
) -> Result<Origin> {
    let backend = DirectoryBackend::open(&copy.join("root"), &copy.join("staging"))?;
    let ws = Arc::new(Workspace::new(
        backend,
        crate::limits::SessionLimits::default(),
    ));
    let store = DirectorySnapshots::new(ws, copy, default_budget);
    crate::snapshots::SnapshotStore::fork_origin(&store, snapshot_id).await
}
