//! The server's background work for durability: renewing leases and
//! honouring hand-back requests (`--object-store`), snapshotting changed sessions
//! (`--autosnapshot SECS`) and sweeping the bucket (`--sweep-interval`).

use super::SessionRegistry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The tag of the snapshots `--autosnapshot` takes.
pub const AUTO_TAG: &str = "auto";
/// `auto` snapshots kept per session; older ones are deleted (locally and
/// in the bucket) as new ones are taken. Snapshots with other tags are
/// never pruned.
pub const AUTO_KEEP: usize = 10;

/// Starts the tasks the configuration asks for; abort them to stop.
pub fn start(registry: Arc<SessionRegistry>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(bucket) = registry.bucket() {
        let every = crate::objstore::lease::renewal_interval(bucket.lease_ttl());
        let renewing = registry.clone();
        tasks.push(each_round(every, move || {
            let registry = renewing.clone();
            async move { registry.tend_leases().await }
        }));
        // Its own task: renewals never wait for a hand-back.
        let handing = registry.clone();
        tasks.push(each_round(every, move || {
            let registry = handing.clone();
            async move { registry.honour_handbacks().await }
        }));
    }
    let sweep_every = registry.config().sweep_interval;
    if let Some(bucket) = registry.bucket().filter(|_| !sweep_every.is_zero()) {
        let (bucket, grace) = (bucket.clone(), registry.config().sweep_grace);
        // The markers make it one sweep at a time across replicas.
        tasks.push(each_round(sweep_every, move || {
            let bucket = bucket.clone();
            async move { sweep(&bucket, grace).await }
        }));
    }
    let secs = registry.config().autosnapshot;
    if secs > 0 {
        tasks.push(tokio::spawn(autosnapshot(
            registry,
            Duration::from_secs(secs),
        )));
    }
    tasks
}

/// Runs `round` every `every` (the first one `every` after start), each
/// once the one before has ended.
fn each_round<F, Fut>(every: Duration, mut round: F) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            round().await;
        }
    })
}

/// Every `every`, snapshots each MEMORY or DIRECTORY session changed since
/// its last autosnapshot (or since it was opened), one at a time.
async fn autosnapshot(registry: Arc<SessionRegistry>, every: Duration) {
    // The change sequence each session had at its last autosnapshot.
    let mut taken_at: HashMap<String, u64> = HashMap::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let sessions = registry.list();
        taken_at.retain(|id, _| sessions.iter().any(|s| &s.record.id == id));
        for session in sessions {
            if !session.autosnapshots() {
                continue;
            }
            let id = session.record.id.clone();
            let seq = session.events.current_seq();
            let last = taken_at.get(&id).copied();
            if seq == last.unwrap_or_else(|| session.events.began_at()) {
                continue;
            }
            match session.snapshots.snapshot(AUTO_TAG).await {
                Ok(info) => {
                    tracing::info!(session = %id, snapshot = %info.id, "autosnapshot taken");
                    taken_at.insert(id.clone(), seq);
                    prune(&*session.snapshots, &id, AUTO_KEEP).await;
                }
                Err(e) => tracing::warn!(session = %id, error = %e, "autosnapshot failed"),
            }
        }
    }
}

/// Sweeps the bucket once.
async fn sweep(bucket: &crate::objstore::Bucket, grace: Duration) {
    match bucket.sweep(grace).await {
        Ok(report) => tracing::info!(?report, "object store swept"),
        Err(e) => tracing::warn!(error = %e, "sweeping the object store failed"),
    }
}

/// Deletes the oldest `auto` snapshots past the newest `keep`.
pub(super) async fn prune(snapshots: &dyn crate::snapshots::SnapshotStore, id: &str, keep: usize) {
    let Ok(all) = snapshots.list().await else {
        return;
    };
    let autos: Vec<_> = all.iter().filter(|s| s.tag == AUTO_TAG).collect();
    let excess = autos.len().saturating_sub(keep);
    for old in &autos[..excess] {
        if let Err(e) = snapshots.delete(&old.id).await {
            tracing::warn!(session = %id, snapshot = %old.id, error = %e, "pruning an autosnapshot failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryBackend, MemorySnapshots};
    use crate::snapshots::SnapshotStore;
    use crate::workspace::Workspace;

    #[tokio::test]
    async fn pruning_keeps_the_newest_auto_snapshots_and_every_other_tag() {
        let ws = Arc::new(Workspace::new(
            MemoryBackend::new(),
            crate::limits::SessionLimits::default(),
        ));
        let snapshots = MemorySnapshots::new(ws);
        let manual = snapshots.snapshot("before-refactor").await.unwrap();
        let mut autos = Vec::new();
        for _ in 0..5 {
            // Listed by creation time: distinct ones.
            tokio::time::sleep(Duration::from_millis(2)).await;
            autos.push(snapshots.snapshot(AUTO_TAG).await.unwrap().id);
        }
        prune(&snapshots, "s", 3).await;
        let left: Vec<String> = snapshots
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        let mut expected = vec![manual.id];
        expected.extend(autos[2..].iter().cloned());
        assert_eq!(left, expected);
    }
}
