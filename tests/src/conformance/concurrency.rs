//! Concurrent use of one workspace.
//!
//! Cases get a borrowed `&dyn Filesystem`, which cannot move into spawned
//! tasks; they run their actors on scoped OS threads instead (each driving
//! its future with the test runtime's handle), so the actors truly run in
//! parallel. This needs the multi-threaded runtime the suite macro uses.

use super::support::*;
use bytes::Bytes;
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::Handle;
use wsfs::{ByteRange, Filesystem, WriteOptions};

type Actor<'a, R> = Box<dyn FnOnce(&Handle) -> R + Send + 'a>;

/// Runs each actor on a scoped thread of its own, blocking the calling
/// worker (via `block_in_place`) until all are done. Actors drive their
/// futures with the runtime handle they are given.
fn in_parallel<R: Send>(actors: Vec<Actor<'_, R>>) -> Vec<R> {
    let handle = Handle::current();
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let threads: Vec<_> = actors
                .into_iter()
                .map(|actor| {
                    let handle = handle.clone();
                    scope.spawn(move || actor(&handle))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    })
}

/// Counts a finished writer even when it panics, so the reader stops.
struct Finished<'a>(&'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Every version of the file is `len(fill)` copies of one byte `fill`.
fn content(fill: u8) -> Bytes {
    Bytes::from(vec![fill; expected_len(fill)])
}

/// Two writers with different sizes, so a read that mixes them shows.
fn expected_len(fill: u8) -> usize {
    if fill < 100 {
        48 * 1024
    } else {
        40 * 1024
    }
}

pub async fn concurrent_overwrites_are_read_whole(fs: &dyn Filesystem) {
    const WRITES: u8 = 40;
    const WRITERS: usize = 2;
    put_bytes(fs, "race.bin", &content(0)).await;
    let finished = AtomicUsize::new(0);

    let writer = |fills: RangeInclusive<u8>| -> Actor<'_, Vec<(u64, u8)>> {
        let finished = &finished;
        Box::new(move |handle| {
            let _finished = Finished(finished);
            handle.block_on(async {
                for fill in fills {
                    fs.write_bytes(
                        &p("race.bin"),
                        WriteOptions::default(),
                        chunks([content(fill)]),
                    )
                    .await
                    .unwrap();
                }
            });
            Vec::new()
        })
    };
    // Reads until both writers are done, then once more.
    let reader: Actor<'_, Vec<(u64, u8)>> = Box::new(|handle| {
        handle.block_on(async {
            let mut seen = Vec::new();
            loop {
                let last_round = finished.load(Ordering::SeqCst) == WRITERS;
                let stream = fs
                    .read_bytes(&p("race.bin"), ByteRange::default(), 4096)
                    .await
                    .unwrap();
                let (size, version) = (stream.size, stream.version);
                let data = concat(stream.chunks).await.unwrap();
                let fill = data[0];
                assert_eq!(data.len() as u64, size, "length differs from the header");
                assert_eq!(data.len(), expected_len(fill), "torn read of {fill}");
                assert!(
                    data.iter().all(|&b| b == fill),
                    "mixed versions in one read"
                );
                seen.push((version, fill));
                if last_round {
                    return seen;
                }
            }
        })
    });

    let results = in_parallel(vec![writer(1..=WRITES), writer(101..=100 + WRITES), reader]);

    let reads = &results[2];
    assert!(!reads.is_empty());
    let mut content_of_version = HashMap::new();
    for pair in reads.windows(2) {
        assert!(pair[0].0 <= pair[1].0, "a later read saw an older version");
    }
    for &(version, fill) in reads {
        let known = *content_of_version.entry(version).or_insert(fill);
        assert_eq!(known, fill, "version {version} had two contents");
    }
    let final_fill = read_all(fs, "race.bin").await[0];
    assert!(
        final_fill == WRITES || final_fill == 100 + WRITES,
        "{final_fill}"
    );
    assert_eq!(reads.last().unwrap().1, final_fill);
}
