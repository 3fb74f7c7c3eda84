//! The Deletes the write-behind sends (behind.rs), gathered into DeleteMany
//! calls: the first goes at once, and those queued while a call is on its
//! way go together in the next, so that `rm -rf` of a tree costs one round
//! trip per batch, not one per name.
//!
//! The write-behind queues a Delete only once every change it must follow
//! has ended (an rmdir after the unlinks in it), so the Deletes of one
//! batch never depend on each other; the server runs them in order all the
//! same. A call that fails whole (the server away) fails each of its
//! Deletes, which the write-behind then tries again as it would a Delete.

use crate::Session;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;
use wsfs::{CanonicalPath, DeleteOptions, Error, Filesystem as _, MAX_DELETE_ENTRIES};

/// Deletes waiting for the next DeleteMany.
pub(super) struct Deletes {
    session: Session,
    runtime: tokio::runtime::Handle,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Whether a sender is running: it sends what is waiting until
    /// nothing is.
    sending: bool,
}

struct Waiting {
    path: CanonicalPath,
    options: DeleteOptions,
    answer: oneshot::Sender<wsfs::Result<u64>>,
}

impl Deletes {
    pub(super) fn new(session: Session, runtime: tokio::runtime::Handle) -> Deletes {
        Deletes {
            session,
            runtime,
            queue: Mutex::default(),
        }
    }

    /// Deletes `path` as part of the next DeleteMany and returns its own
    /// outcome.
    pub(super) async fn delete(
        self: &Arc<Self>,
        path: &CanonicalPath,
        options: DeleteOptions,
    ) -> wsfs::Result<u64> {
        let (answer, outcome) = oneshot::channel();
        let start = {
            let mut queue = self.queue();
            queue.waiting.push(Waiting {
                path: path.clone(),
                options,
                answer,
            });
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            let this = self.clone();
            self.runtime.spawn(async move { this.send_all().await });
        }
        outcome.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                message: "the mount stopped before the delete was answered".into(),
            })
        })
    }

    /// Sends what is waiting, [`MAX_DELETE_ENTRIES`] at most a call, until
    /// nothing is.
    async fn send_all(&self) {
        loop {
            let batch: Vec<Waiting> = {
                let mut queue = self.queue();
                if queue.waiting.is_empty() {
                    queue.sending = false;
                    return;
                }
                let take = queue.waiting.len().min(MAX_DELETE_ENTRIES);
                queue.waiting.drain(..take).collect()
            };
            let entries = batch.iter().map(|w| (w.path.clone(), w.options)).collect();
            match self.session.delete_many(entries).await {
                Ok(results) => {
                    for (waiting, result) in batch.into_iter().zip(results) {
                        let _ = waiting.answer.send(result);
                    }
                }
                Err(e) => {
                    for waiting in batch {
                        let _ = waiting.answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}
