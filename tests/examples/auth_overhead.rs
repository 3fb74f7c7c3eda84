//! Stat ops/s with tokens off and on: 16 concurrent callers on one
//! in-process server each, over loopback gRPC. A third row sends an
//! `authorization` header to the tokens-off server, which ignores it: the
//! cost of carrying a token (HTTP/2 never indexes `authorization`, so every
//! call sends it whole) apart from the cost of checking it. Prints the
//! rates and the overhead; run with `cargo run --release -p wsfs-tests --example auth_overhead`.

use std::time::{Duration, Instant};
use wsfs_client::{Client, Filesystem, SessionOptions};
use wsfs_tests::harness::TestServer;

const CALLERS: usize = 16;
const ROUNDS: usize = 3;
const WINDOW: Duration = Duration::from_secs(2);
const ADMIN: &str = "admin-token-for-the-benchmark-0123";

/// A token-shaped header a tokens-off server ignores.
const IGNORED: &str = "wsfs_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn stat_rate(server: &TestServer, admin_token: Option<&str>, ignored_header: bool) -> f64 {
    let mut client = Client::connect(&server.url()).await.unwrap();
    if let Some(t) = admin_token {
        client = client.with_token(t).unwrap();
    }
    let (_, info) = client
        .create(SessionOptions::memory().seed_file("a.txt", "x"))
        .await
        .unwrap();
    let path = wsfs_client::parse_path("a.txt").unwrap();
    let mut tasks = Vec::new();
    for i in 0..CALLERS {
        let session = match &info.token {
            Some(_) => {
                let token = client
                    .issue_token(&info.id, &format!("c{i}"))
                    .await
                    .unwrap()
                    .token;
                client.session(&info.id).with_token(&token).unwrap()
            }
            None if ignored_header => client.session(&info.id).with_token(IGNORED).unwrap(),
            None => client.session(&info.id),
        };
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let end = Instant::now() + WINDOW;
            let mut n = 0u64;
            while Instant::now() < end {
                session.stat(&path).await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / WINDOW.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let off = TestServer::start().await;
    let on = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let mut best = [0f64; 3];
    // Rotate which goes first, so none always runs on a warmer box.
    for round in 0..ROUNDS {
        for k in 0..3 {
            let which = (round + k) % 3;
            let rate = match which {
                0 => stat_rate(&off, None, false).await,
                1 => stat_rate(&off, None, true).await,
                _ => stat_rate(&on, Some(ADMIN), false).await,
            };
            best[which] = best[which].max(rate);
        }
    }
    let [best_off, best_header, best_on] = best;
    println!("Stat, {CALLERS} concurrent callers, best of {ROUNDS} x {WINDOW:?}");
    println!("  tokens off: {best_off:>10.0} ops/s");
    println!(
        "  header only:{best_header:>10.0} ops/s (tokens off, authorization sent and ignored)"
    );
    println!("  tokens on:  {best_on:>10.0} ops/s");
    println!(
        "  overhead:   {:>9.1} %",
        (1.0 - best_on / best_off) * 100.0
    );
}
