//! The walk a Grep searches: files under its base that pass its filter, in
//! path order, handed out in batches; lazy and resumable like the search.

use super::MAX_BATCHES_IN_FLIGHT;
use crate::backend::{Backend, Listed, ListedFiles};
use globset::GlobMatcher;
use std::sync::atomic::{AtomicBool, Ordering};
use wsfs::{CanonicalPath, Result};

/// Files handed to one batch: enough to amortise the hand-off between
/// threads (32 measured 1.3x rg's time over 16,000 files, 128 1.2x), few
/// enough that a stopped search wastes little.
const FILES_PER_TASK: usize = 128;

/// Directories whose files one batch may hold: each listed file keeps its
/// directory open until it is searched, so a tree with a directory per
/// file would otherwise hold a descriptor per file in flight.
const DIRS_PER_TASK: usize = 32;

/// The files a Grep walks: under `base`, matching `filter`.
pub(super) struct WalkSpec {
    pub(super) base: CanonicalPath,
    pub(super) filter: Option<GlobMatcher>,
}

/// A walk of the tree in path order, lazy and resumable like the search.
pub(super) type Files = ListedFiles;

/// Where the walk is: not started or paused (`Idle`), one unit running,
/// or finished.
pub(super) enum Walk {
    Idle(Option<Files>),
    Running(tokio::task::JoinHandle<Walked>),
    Done,
}

/// What one unit of the walk produced: batches (or the failure that ended
/// the walk, last), and the walk to resume (`None` once it is done).
pub(super) struct Walked {
    pub(super) files: Option<Files>,
    pub(super) batches: Vec<Result<Vec<Listed>>>,
}

/// Runs one unit of the walk on the calling (blocking) thread: up to
/// [`MAX_BATCHES_IN_FLIGHT`] batches, or to the end of the tree.
pub(super) fn walk_unit<B: Backend>(
    backend: &B,
    spec: &WalkSpec,
    stop: &AtomicBool,
    files: Option<Files>,
) -> Walked {
    let mut files = match files.map_or_else(|| backend.walk_listed(&spec.base), Ok) {
        Ok(files) => files,
        Err(e) => {
            return Walked {
                files: None,
                batches: vec![Err(e)],
            }
        }
    };
    let mut batches = Vec::new();
    let mut batch: Vec<Listed> = Vec::with_capacity(FILES_PER_TASK);
    let mut dirs = 0;
    while batches.len() < MAX_BATCHES_IN_FLIGHT {
        if stop.load(Ordering::Relaxed) {
            return Walked {
                files: None,
                batches,
            };
        }
        let file = match files.next() {
            Some(Ok(file)) => file,
            end => {
                if !batch.is_empty() {
                    batches.push(Ok(batch));
                }
                if let Some(Err(e)) = end {
                    batches.push(Err(e));
                }
                return Walked {
                    files: None,
                    batches,
                };
            }
        };
        let path = &file.path;
        crate::faults::check_stream(path.as_str());
        let keep = spec.filter.as_ref().is_none_or(|g| {
            g.is_match(
                path.strip_prefix(&spec.base)
                    .unwrap_or_else(|| path.clone())
                    .as_str(),
            )
        });
        if keep {
            if file.holds_new_dir(batch.last()) {
                dirs += 1;
            }
            batch.push(file);
        }
        if batch.len() == FILES_PER_TASK || dirs == DIRS_PER_TASK {
            dirs = 0;
            batches.push(Ok(std::mem::replace(
                &mut batch,
                Vec::with_capacity(FILES_PER_TASK),
            )));
        }
    }
    if !batch.is_empty() {
        batches.push(Ok(batch));
    }
    Walked {
        files: Some(files),
        batches,
    }
}
