//! A Grep's response stream: batches in walk order, the front one drained
//! first, at most a few in flight.

use super::sink::Searched;
use super::unit::{run_unit, BatchCursor, SearchSpec, Unit};
use super::walk::{walk_unit, Walk, WalkSpec};
use crate::backend::{Backend, Listed};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wsfs::{Error, GrepEvent, GrepSummary, Result};

/// Sets the flag when dropped: the stream's consumer went away.
pub(super) struct StopOnDrop(pub(super) Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
/// The error a failed unit (walk or search) ends the stream with.
fn unit_failed(e: tokio::task::JoinError) -> Error {
    match e.try_into_panic() {
        Ok(panic) => crate::producer::panicked("Grep", &*panic),
        Err(e) => Error::internal(format!("search task failed: {e}")),
    }
}
/// A batch in walk order: a unit of its search running on the blocking
/// pool, its results waiting to be sent, or the walker's failure in its
/// place in the order.
pub(super) enum Slot {
    Running(tokio::task::JoinHandle<Unit>),
    Ready {
        found: std::vec::IntoIter<Searched>,
        rest: Option<BatchCursor>,
    },
    Failed(Error),
}

/// The response stream's state: batches in walk order, the front one
/// drained first. No thread waits on a client: a unit runs until its
/// budget is spent and returns; the next unit of a batch starts only
/// when its results have been sent.
pub(super) struct Merge<B> {
    pub(super) walk: Walk,
    /// Batches walked and not started yet, in order.
    pub(super) walked: VecDeque<Result<Vec<Listed>>>,
    pub(super) slots: VecDeque<Slot>,
    pub(super) parallel: usize,
    pub(super) backend: Arc<B>,
    pub(super) walking: Arc<WalkSpec>,
    pub(super) search: Arc<SearchSpec>,
    pub(super) max: u64,
    pub(super) summary: GrepSummary,
    pub(super) done: bool,
    pub(super) _stop: StopOnDrop,
    pub(super) _active: crate::metrics::Gauge,
}

impl<B: Backend> Merge<B> {
    /// Starts the next unit of a batch's search on the blocking pool.
    fn resume(search: &Arc<SearchSpec>, backend: &Arc<B>, cursor: BatchCursor) -> Slot {
        let (search, backend) = (search.clone(), backend.clone());
        Slot::Running(tokio::task::spawn_blocking(move || {
            run_unit(&search, &*backend, cursor)
        }))
    }

    /// Starts the walked batches while fewer than `parallel` are in
    /// flight, and the next unit of the walk when none are left.
    fn admit(&mut self) {
        while self.slots.len() < self.parallel {
            let Some(batch) = self.walked.pop_front() else {
                break;
            };
            let slot = match batch {
                Ok(paths) => Self::resume(
                    &self.search,
                    &self.backend,
                    BatchCursor {
                        paths: paths.into_iter(),
                        file: None,
                    },
                ),
                Err(e) => Slot::Failed(e),
            };
            self.slots.push_back(slot);
        }
        if self.walked.is_empty() {
            if let Walk::Idle(files) = &mut self.walk {
                let (files, backend) = (files.take(), self.backend.clone());
                let (spec, stop) = (self.walking.clone(), self.search.stop.clone());
                self.walk = Walk::Running(tokio::task::spawn_blocking(move || {
                    walk_unit(&*backend, &spec, &stop, files)
                }));
            }
        }
    }

    /// Waits for the running unit of the walk and takes its batches.
    async fn walked(&mut self) -> Result<()> {
        if let Walk::Running(unit) = &mut self.walk {
            let walked = unit.await.map_err(unit_failed)?;
            self.walked.extend(walked.batches);
            self.walk = walked.files.map_or(Walk::Done, |f| Walk::Idle(Some(f)));
        }
        Ok(())
    }

    /// The next event, or `None` after the summary or an error.
    pub(super) async fn next(&mut self) -> Option<Result<GrepEvent>> {
        loop {
            if self.done {
                return None;
            }
            if matches!(&self.walk, Walk::Running(unit) if unit.is_finished()) {
                if let Err(e) = self.walked().await {
                    return Some(Err(self.fail(e)));
                }
            }
            self.admit();
            let Some(front) = self.slots.front_mut() else {
                if matches!(self.walk, Walk::Done) && self.walked.is_empty() {
                    return Some(Ok(self.finish(false)));
                }
                if let Err(e) = self.walked().await {
                    return Some(Err(self.fail(e)));
                }
                continue;
            };
            match front {
                Slot::Failed(_) => {
                    let Some(Slot::Failed(e)) = self.slots.pop_front() else {
                        unreachable!("the front is a failure");
                    };
                    return Some(Err(self.fail(e)));
                }
                Slot::Running(unit) => match unit.await {
                    Ok(unit) => {
                        *front = Slot::Ready {
                            found: unit.found.into_iter(),
                            rest: unit.cursor,
                        }
                    }
                    Err(e) => {
                        let e = unit_failed(e);
                        return Some(Err(self.fail(e)));
                    }
                },
                Slot::Ready { found, rest } => match found.next() {
                    Some(Searched::File) => self.summary.files_searched += 1,
                    Some(Searched::Match(m)) => {
                        if self.summary.matches == self.max {
                            return Some(Ok(self.finish(true)));
                        }
                        self.summary.matches += 1;
                        return Some(Ok(m.into_event()));
                    }
                    Some(Searched::Failed(e)) => return Some(Err(self.fail(e))),
                    None => match rest.take() {
                        Some(cursor) => *front = Self::resume(&self.search, &self.backend, cursor),
                        None => {
                            self.slots.pop_front();
                        }
                    },
                },
            }
        }
    }

    /// Ends the stream with `error`; stops the searches still running.
    fn fail(&mut self, error: Error) -> Error {
        self.done = true;
        self.search.stop.store(true, Ordering::Relaxed);
        self.slots.clear();
        error
    }

    /// The summary, last; stops the searches still running.
    fn finish(&mut self, truncated: bool) -> GrepEvent {
        self.done = true;
        self.search.stop.store(true, Ordering::Relaxed);
        self.slots.clear();
        self.summary.truncated = truncated;
        GrepEvent::Summary(self.summary)
    }
}
