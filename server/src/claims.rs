//! Path claims: the session's write lock, taken over the paths a mutation
//! changes rather than over the whole workspace, so that writes to
//! different files run in parallel.
//!
//! A [`Claim`] names one or more paths (a Write its file, a Move both
//! ends, a Restore the root). Two claims conflict when a path of one is
//! equal to, or an ancestor of, a path of the other: a claim on `a` covers
//! everything beneath `a`, so a recursive Delete or a Move of `a` excludes
//! a Write to `a/x`, and a Write that creates the missing parents of
//! `a/x` never races a Delete of `a`. The root conflicts with everything.
//!
//! Claims are granted first come, first served among those that conflict:
//! a claim waits while a conflicting claim is held, or is waiting ahead of
//! it. So a root claim (a Snapshot) that waits behind running writes is
//! not passed by the writes that arrive after it, and is never starved by
//! a stream of them; claims that conflict with nothing ahead of them are
//! granted at once, whatever waits elsewhere.
//!
//! A [`Claim`] is an owned guard: it travels with the work into whatever
//! task runs it and is let go when that work drops it. A caller that stops
//! waiting for its claim (its future is dropped) leaves the queue, and the
//! claims behind it are looked at again.
//!
//! No crate fitted: the hierarchical locks published take one path per
//! guard (a Move would take two in turn, and could deadlock with another
//! Move taking them the other way), so this is a small table behind one
//! mutex, sized by the mutations in flight.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;
use wsfs::CanonicalPath;

/// Every claim of one session: held, and waiting in arrival order.
#[derive(Default)]
pub struct PathLocks {
    table: Mutex<Table>,
    /// Woken whenever a claim is let go or leaves the queue.
    released: Notify,
}

#[derive(Default)]
struct Table {
    next_ticket: u64,
    held: Vec<Entry>,
    waiting: VecDeque<Entry>,
}

struct Entry {
    ticket: u64,
    paths: Vec<CanonicalPath>,
}

impl Entry {
    fn conflicts(&self, paths: &[CanonicalPath]) -> bool {
        self.paths
            .iter()
            .any(|held| paths.iter().any(|p| overlap(held, p)))
    }
}

/// Whether a claim on `a` and one on `b` exclude each other.
fn overlap(a: &CanonicalPath, b: &CanonicalPath) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Paths held until dropped. See the module documentation.
#[must_use = "a claim is let go as soon as it is dropped"]
pub struct Claim {
    locks: Arc<PathLocks>,
    ticket: u64,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut table = self.locks.table();
        if let Some(i) = table.held.iter().position(|e| e.ticket == self.ticket) {
            table.held.swap_remove(i);
        }
        drop(table);
        self.locks.released.notify_waiters();
    }
}

/// A claim in the queue; leaves it when dropped before it is granted.
struct Waiting<'a> {
    locks: &'a PathLocks,
    ticket: u64,
    granted: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut table = self.locks.table();
        if let Some(i) = table.waiting.iter().position(|e| e.ticket == self.ticket) {
            table.waiting.remove(i);
        }
        drop(table);
        // Claims queued behind this one may now go ahead.
        self.locks.released.notify_waiters();
    }
}

impl PathLocks {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims `paths` (at least one), waiting for every conflicting claim
    /// held or queued before this one to be let go.
    pub async fn claim(self: &Arc<Self>, paths: Vec<CanonicalPath>) -> Claim {
        let ticket = {
            let mut table = self.table();
            let ticket = table.next_ticket;
            table.next_ticket += 1;
            let blocked = table.held.iter().any(|e| e.conflicts(&paths))
                || table.waiting.iter().any(|e| e.conflicts(&paths));
            let entry = Entry { ticket, paths };
            if !blocked {
                table.held.push(entry);
                return Claim {
                    locks: self.clone(),
                    ticket,
                };
            }
            table.waiting.push_back(entry);
            ticket
        };
        let mut waiting = Waiting {
            locks: self,
            ticket,
            granted: false,
        };
        loop {
            // Registered before the table is looked at, so a release
            // between the look and the wait is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.grant(ticket) {
                waiting.granted = true;
                return Claim {
                    locks: self.clone(),
                    ticket,
                };
            }
            released.await;
        }
    }

    /// Claims the whole workspace: what a whole-tree change (a snapshot, a
    /// restore, an import) holds, as the session-wide lock did.
    #[cfg(test)]
    pub async fn lock_owned(self: Arc<Self>) -> Claim {
        self.claim(vec![CanonicalPath::root()]).await
    }

    /// Moves the queued claim `ticket` to the held ones when nothing held
    /// or queued ahead of it conflicts with it.
    fn grant(&self, ticket: u64) -> bool {
        let mut table = self.table();
        let Some(at) = table.waiting.iter().position(|e| e.ticket == ticket) else {
            return false;
        };
        let paths = &table.waiting[at].paths;
        let blocked = table.held.iter().any(|e| e.conflicts(paths))
            || table.waiting.iter().take(at).any(|e| e.conflicts(paths));
        if blocked {
            return false;
        }
        if let Some(entry) = table.waiting.remove(at) {
            table.held.push(entry);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::from_canonical(s)
    }

    /// Whether `claim` is granted within a short wait.
    async fn granted<F: std::future::Future<Output = Claim>>(claim: F) -> Option<Claim> {
        tokio::time::timeout(Duration::from_millis(50), claim)
            .await
            .ok()
    }

    #[tokio::test]
    async fn claims_on_unrelated_paths_are_held_together() {
        let locks = Arc::new(PathLocks::default());
        let _a = locks.claim(vec![p("a/x")]).await;
        let b = granted(locks.claim(vec![p("a/y")])).await;
        let c = granted(locks.claim(vec![p("ab")])).await;
        assert!(b.is_some(), "a sibling file is free");
        assert!(c.is_some(), "'ab' is not beneath 'a'");
    }

    #[tokio::test]
    async fn a_claim_waits_for_an_equal_ancestor_or_descendant_path() {
        let locks = Arc::new(PathLocks::default());
        for (held, wanted) in [("a", "a"), ("a", "a/b/c"), ("a/b/c", "a"), ("", "z")] {
            let claim = locks.claim(vec![p(held)]).await;
            assert!(
                granted(locks.claim(vec![p(wanted)])).await.is_none(),
                "'{wanted}' granted while '{held}' is held"
            );
            drop(claim);
            assert!(
                granted(locks.claim(vec![p(wanted)])).await.is_some(),
                "'{wanted}' still waits after '{held}' was let go"
            );
        }
    }

    #[tokio::test]
    async fn a_claim_of_two_paths_waits_for_either() {
        let locks = Arc::new(PathLocks::default());
        let dst = locks.claim(vec![p("to/file")]).await;
        let moving = locks.clone();
        let waiting = tokio::spawn(async move { moving.claim(vec![p("from"), p("to")]).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(dst);
        let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("granted once the destination is free");
        drop(granted.unwrap());
    }

    /// A root claim queued behind a running write is granted before the
    /// writes that arrive after it: a stream of small writes cannot
    /// starve a snapshot.
    #[tokio::test]
    async fn a_queued_root_claim_is_not_passed_by_later_claims() {
        let locks = Arc::new(PathLocks::default());
        let running = locks.claim(vec![p("a")]).await;
        let root = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.clone().lock_owned().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            granted(locks.claim(vec![p("b")])).await.is_none(),
            "a later write passed the queued root claim"
        );
        drop(running);
        let root = tokio::time::timeout(Duration::from_secs(5), root)
            .await
            .expect("the root claim is granted once the running write ends")
            .unwrap();
        assert!(granted(locks.claim(vec![p("b")])).await.is_none());
        drop(root);
        assert!(granted(locks.claim(vec![p("b")])).await.is_some());
    }

    #[tokio::test]
    async fn a_claim_given_up_while_queued_leaves_the_queue() {
        let locks = Arc::new(PathLocks::default());
        let running = locks.claim(vec![p("a")]).await;
        // Queued behind 'a', then given up.
        assert!(granted(locks.clone().lock_owned()).await.is_none());
        assert!(
            granted(locks.claim(vec![p("b")])).await.is_some(),
            "a root claim that gave up still holds up later claims"
        );
        drop(running);
        assert!(locks.table().waiting.is_empty());
        assert!(locks.table().held.is_empty());
    }
}
