//! Watch latency and a contended compare-and-swap counter, on an in-process
//! MEMORY session over loopback gRPC:
//! `cargo run --release -p wsfs-tests --example watch_bench`.
//! Prints p50/p99 of write-to-event latency seen by 10 watchers, and the
//! successful increments per second of 8 writers sharing one counter with
//! `if_version`.

use futures::StreamExt;
use std::time::{Duration, Instant};
use wsfs_client::{ChangeKind, Client, Filesystem, SessionOptions, WriteOptions};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::{p, percentile, try_increment};

#[tokio::main]
async fn main() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, _) = client.create(SessionOptions::memory()).await.unwrap();

    let mut watchers = Vec::new();
    for _ in 0..10 {
        let mut events = s.watch("").recursive().stream().await.unwrap();
        events.next().await.unwrap().unwrap(); // READY
        watchers.push(events);
    }
    let mut latencies = Vec::new();
    for i in 0..200 {
        let started = Instant::now();
        s.write(&p("f"), &i.to_string(), WriteOptions::default())
            .await
            .unwrap();
        for w in watchers.iter_mut() {
            loop {
                let e = w.next().await.unwrap().unwrap();
                if e.kind() != ChangeKind::Keepalive {
                    break;
                }
            }
            latencies.push(started.elapsed());
        }
    }
    latencies.sort();
    println!(
        "watch latency, 10 watchers x 200 writes: p50 {:?}, p99 {:?}",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );

    // Unread watchers on the shared connection would hold its HTTP/2 flow
    // control window while the writers run.
    drop(watchers);

    let counter = p("counter");
    s.write(&counter, "0", WriteOptions::default())
        .await
        .unwrap();
    let run_for = Duration::from_secs(3);
    let started = Instant::now();
    let mut writers = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        let counter = counter.clone();
        writers.push(tokio::spawn(async move {
            let (mut ok, mut stale) = (0u64, 0u64);
            while started.elapsed() < run_for {
                match try_increment(&s, &counter).await {
                    Ok(true) => ok += 1,
                    Ok(false) => stale += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            (ok, stale)
        }));
    }
    let (mut ok, mut stale) = (0, 0);
    for w in writers {
        let (o, s) = w.await.unwrap();
        ok += o;
        stale += s;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "contended counter, 8 writers: {:.0} successful increments/s ({} ok, {} stale retries)",
        ok as f64 / secs,
        ok,
        stale
    );
}
