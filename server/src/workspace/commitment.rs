//! [`Commitment`]: whether a call that handed its work to a task of its
//! own is still there to want it (see "Mutations own their lock" in the
//! module above).

use std::sync::Arc;

/// Whether a call that handed its work to a task of its own still wants
/// it: the work commits (takes the session's write lock and begins to
/// change the workspace) or the caller abandons it, whichever comes first.
#[derive(Debug, Default)]
pub struct Commitment(std::sync::atomic::AtomicU8);

const PENDING: u8 = 0;
const COMMITTED: u8 = 1;
const ABANDONED: u8 = 2;

tokio::task_local! {
    static COMMITMENT: Arc<Commitment>;
}

impl Commitment {
    /// Runs `work` with this commitment deciding its changes.
    pub fn scope<F: std::future::Future>(
        self: &Arc<Self>,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> {
        COMMITMENT.scope(self.clone(), work)
    }

    /// The work's side: true when it may change the workspace (again).
    fn commit(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        match self.0.compare_exchange(PENDING, COMMITTED, SeqCst, SeqCst) {
            Ok(_) => true,
            Err(now) => now == COMMITTED,
        }
    }

    /// The caller's side, when it goes away: true when the work had not
    /// committed and now never will.
    pub fn abandon(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0
            .compare_exchange(PENDING, ABANDONED, SeqCst, SeqCst)
            .is_ok()
    }
}

/// Whether the work running now may change the workspace: always, unless
/// it runs in a [`Commitment::scope`] whose caller has gone.
pub(super) fn may_commit() -> bool {
    COMMITMENT.try_with(|c| c.commit()).unwrap_or(true)
}
