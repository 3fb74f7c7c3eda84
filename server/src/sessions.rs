//! The session registry: every live session, its record and its workspace.
//!
//! A MEMORY session lives only in this process. A DIRECTORY session owns a
//! directory under the data directory (`sessions/<id>/`, holding `root/`
//! unless the session was rooted elsewhere, `staging/` for uploads in
//! flight, and `session.json`), or is rooted in an existing directory
//! inside one of the allowed roots.

use crate::backend::{Backend, DirectoryBackend, MemoryBackend};
use crate::config::ServerConfig;
use crate::limits::SessionLimits;
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Filesystem, Result, WriteMode, WriteOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Memory,
    Directory,
}

/// What the server knows of a session, apart from its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub backend: BackendKind,
    /// DIRECTORY: the workspace directory on the server.
    pub root_path: Option<PathBuf>,
    pub created_at: SystemTime,
    pub limits: SessionLimits,
    pub read_only: bool,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl_seconds: u64,
}

/// What CreateSession asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct SessionSpec {
    pub backend: Option<BackendKind>,
    /// DIRECTORY: an existing directory inside an allowed root.
    pub root: Option<PathBuf>,
    pub seed_files: Vec<(String, bytes::Bytes)>,
    pub read_only: bool,
    pub limits: Option<wsfs::proto::SessionLimits>,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl_seconds: u64,
}

/// A live session.
pub struct Session {
    pub record: SessionRecord,
    pub fs: Arc<dyn Filesystem>,
    /// The directory this session owns and removes with itself.
    owned_dir: Option<PathBuf>,
}

impl Session {
    /// Parses a client path under this session's limits.
    pub fn path(&self, raw: &str) -> Result<CanonicalPath> {
        CanonicalPath::parse(raw, &self.record.limits.path)
    }
}

pub struct SessionRegistry {
    config: Arc<ServerConfig>,
    sessions: RwLock<HashMap<String, Arc<Session>>>,
}

impl SessionRegistry {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        SessionRegistry {
            config,
            sessions: RwLock::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    pub fn get(&self, id: &str) -> Result<Arc<Session>> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Error::SessionNotFound {
                session_id: id.to_string(),
            })
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| {
            (a.record.created_at, &a.record.id).cmp(&(b.record.created_at, &b.record.id))
        });
        all
    }

    pub async fn create(&self, spec: SessionSpec) -> Result<Arc<Session>> {
        let id = uuid::Uuid::new_v4().to_string();
        let limits = SessionLimits::resolve(spec.limits.as_ref(), self.config.max_write_bytes);
        // Parse every seed path before anything is created.
        let seeds = spec
            .seed_files
            .iter()
            .map(|(p, data)| Ok((CanonicalPath::parse(p, &limits.path)?, data.clone())))
            .collect::<Result<Vec<_>>>()?;
        let backend = spec.backend.unwrap_or(BackendKind::Memory);
        let (fs, root_path, owned_dir): (Arc<dyn Filesystem>, _, _) = match backend {
            BackendKind::Memory => {
                if spec.root.is_some() {
                    return Err(Error::invalid_argument(
                        "root applies only to DIRECTORY sessions",
                    ));
                }
                let ws = Arc::new(Workspace::new(MemoryBackend::new(), limits));
                seed(&ws, &seeds).await?;
                ws.set_read_only(spec.read_only);
                (ws, None, None)
            }
            BackendKind::Directory => {
                let session_dir = self.config.data_dir.join("sessions").join(&id);
                let root = match &spec.root {
                    Some(r) => self.allowed_root(r)?,
                    None => session_dir.join("root"),
                };
                let made = create_session_dirs(&session_dir, &root, spec.root.is_none())
                    .and_then(|_| DirectoryBackend::open(&root, &session_dir.join("staging")));
                let backend = match made {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&session_dir);
                        return Err(e);
                    }
                };
                let ws = Arc::new(Workspace::new(backend, limits));
                if let Err(e) = seed(&ws, &seeds).await {
                    let _ = std::fs::remove_dir_all(&session_dir);
                    return Err(e);
                }
                ws.set_read_only(spec.read_only);
                (ws, Some(root), Some(session_dir))
            }
        };
        let session = Arc::new(Session {
            record: SessionRecord {
                id: id.clone(),
                backend,
                root_path,
                created_at: SystemTime::now(),
                limits,
                read_only: spec.read_only,
                labels: spec.labels,
                idle_ttl_seconds: spec.idle_ttl_seconds,
            },
            fs,
            owned_dir,
        });
        self.sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, session.clone());
        Ok(session)
    }

    /// Removes a session and everything it owns; returns how many files
    /// its workspace held. A directory the session was rooted in (rather
    /// than one it created) is left in place with its files.
    pub async fn delete(&self, id: &str) -> Result<u64> {
        let session = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
            .ok_or_else(|| Error::SessionNotFound {
                session_id: id.to_string(),
            })?;
        let files = count_files(&*session.fs).await;
        if let Some(dir) = session.owned_dir.clone() {
            // The owned directory holds the root only when the session made
            // it; a root elsewhere is never inside it.
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir))
                .await
                .map_err(|e| Error::internal(format!("removing the session's files failed: {e}")))?
                .map_err(|e| {
                    Error::internal(format!("removing the session's files failed: {e}"))
                })?;
        }
        Ok(files)
    }

    /// Resolves a requested root: it must exist, be a directory, and lie
    /// inside one of the allowed roots after every symlink is resolved.
    fn allowed_root(&self, requested: &Path) -> Result<PathBuf> {
        let denied = |why: String| Error::PermissionDenied {
            path: requested.display().to_string(),
            message: why,
        };
        let real = std::fs::canonicalize(requested).map_err(|e| {
            denied(format!(
                "root '{}' cannot be used: {e}",
                requested.display()
            ))
        })?;
        if !real.is_dir() {
            return Err(denied(format!(
                "root '{}' is not a directory",
                requested.display()
            )));
        }
        let inside = self
            .config
            .allow_roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .any(|allowed| real.starts_with(&allowed));
        if !inside {
            return Err(denied(format!(
                "root '{}' is not inside a directory the server allows (--allow-root)",
                requested.display()
            )));
        }
        Ok(real)
    }
}

fn create_session_dirs(session_dir: &Path, root: &Path, own_root: bool) -> Result<()> {
    let io = |e: std::io::Error| {
        Error::internal(format!(
            "cannot create session directory '{}': {e}",
            session_dir.display()
        ))
    };
    std::fs::create_dir_all(session_dir.join("staging")).map_err(io)?;
    if own_root {
        std::fs::create_dir_all(root).map_err(io)?;
    }
    Ok(())
}

async fn seed<B: Backend>(
    ws: &Workspace<B>,
    seeds: &[(CanonicalPath, bytes::Bytes)],
) -> Result<()> {
    for (path, data) in seeds {
        let chunks = futures::stream::iter([Ok(data.clone())]);
        ws.write_bytes(
            path,
            WriteOptions {
                mode: WriteMode::Overwrite,
                create_parents: true,
                if_version: None,
            },
            Box::pin(chunks),
        )
        .await?;
    }
    Ok(())
}

async fn count_files(fs: &dyn Filesystem) -> u64 {
    let mut query = wsfs::GlobQuery::new("**");
    query.max_results = u64::MAX;
    fs.glob(query).await.map_or(0, |g| g.paths.len() as u64)
}
