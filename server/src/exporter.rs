//! The Prometheus endpoint (`--metrics-listen`): `GET /metrics` answers the
//! text exposition format; every other path is 404.
//!
//! What it shows: sessions by backend, running streams by kind (from the
//! gauges in [`crate::metrics`]), files searched and bytes streamed, and
//! for every RPC a counter by method and outcome (`OK` or the contract
//! reason) and a latency histogram by method. Labels come from closed sets
//! (method names, contract reasons, backends, stream kinds), never from
//! session ids or paths, so the series stay few however many sessions run.
//! Per-session usage is left out: a session's bytes and files cost a walk
//! of its tree to count.
//!
//! Bounded cost: at most [`MAX_SCRAPERS`] connections at once, HTTP/1.1
//! only, a request's headers within [`HEADER_TIMEOUT`] (hyper's own buffer
//! bounds their size), and the answer is built from counters, not walks.

use crate::metrics;
use crate::registry::SessionRegistry;
use http_body_util::Full;
use hyper::body::Bytes;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::net::TcpListener;

/// Scrapers served at once; more wait in the listen backlog.
pub const MAX_SCRAPERS: usize = 16;
/// How long a scraper may take to send its request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

struct Exported {
    registry: Registry,
    rpcs: IntCounterVec,
    latency: HistogramVec,
    sessions: IntGaugeVec,
    streams: IntGaugeVec,
    files_searched: IntCounter,
    bytes_streamed: IntCounter,
    up: IntGauge,
}

static EXPORTED: LazyLock<Exported> = LazyLock::new(|| {
    let registry = Registry::new();
    // The names and help are fixed: registering them cannot fail but by
    // a programming error, caught by the first test that scrapes.
    let rpcs = IntCounterVec::new(
        Opts::new(
            "wsfs_rpc_total",
            "Calls answered, by method and outcome (OK or the contract reason).",
        ),
        &["method", "outcome"],
    )
    .expect("valid metric");
    let latency = HistogramVec::new(
        HistogramOpts::new(
            "wsfs_rpc_duration_seconds",
            "Time from a call's arrival to its answer (streams: to their first message).",
        )
        .buckets(vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]),
        &["method"],
    )
    .expect("valid metric");
    let sessions = IntGaugeVec::new(
        Opts::new("wsfs_sessions", "Sessions open, by backend."),
        &["backend"],
    )
    .expect("valid metric");
    let streams = IntGaugeVec::new(
        Opts::new("wsfs_active_streams", "Server streams running, by kind."),
        &["kind"],
    )
    .expect("valid metric");
    let files_searched = IntCounter::new(
        "wsfs_grep_files_searched_total",
        "Files Grep has searched since the server started.",
    )
    .expect("valid metric");
    let bytes_streamed = IntCounter::new(
        "wsfs_read_bytes_streamed_total",
        "Bytes ReadBytes streams have sent since the server started.",
    )
    .expect("valid metric");
    let up = IntGauge::new("wsfs_up", "1 while the server serves.").expect("valid metric");
    for c in [
        Box::new(rpcs.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(latency.clone()),
        Box::new(sessions.clone()),
        Box::new(streams.clone()),
        Box::new(files_searched.clone()),
        Box::new(bytes_streamed.clone()),
        Box::new(up.clone()),
    ] {
        registry.register(c).expect("metric names are unique");
    }
    Exported {
        registry,
        rpcs,
        latency,
        sessions,
        streams,
        files_searched,
        bytes_streamed,
        up,
    }
});

/// Counts one answered call.
pub fn rpc_done(method: &str, outcome: &str, elapsed: Duration) {
    EXPORTED.rpcs.with_label_values(&[method, outcome]).inc();
    EXPORTED
        .latency
        .with_label_values(&[method])
        .observe(elapsed.as_secs_f64());
}

/// Brings a counter kept elsewhere (an atomic) up to `now`.
fn catch_up(counter: &IntCounter, now: u64) {
    let seen = counter.get();
    if now > seen {
        counter.inc_by(now - seen);
    }
}

/// The exposition text, as of now.
pub fn render(registry: &SessionRegistry) -> String {
    let e = &*EXPORTED;
    e.up.set(1);
    for (kind, count) in registry.count_by_kind() {
        e.sessions.with_label_values(&[kind]).set(count);
    }
    for (kind, gauge) in [
        ("grep", &metrics::ACTIVE_GREPS),
        ("read_bytes", &metrics::ACTIVE_BYTE_STREAMS),
        ("export_archive", &metrics::ACTIVE_EXPORTS),
        ("watch", &metrics::ACTIVE_WATCHES),
    ] {
        let running = gauge.load(Ordering::SeqCst);
        e.streams
            .with_label_values(&[kind])
            .set(i64::try_from(running).unwrap_or(i64::MAX));
    }
    catch_up(
        &e.files_searched,
        metrics::FILES_SEARCHED.load(Ordering::SeqCst),
    );
    catch_up(
        &e.bytes_streamed,
        metrics::BYTES_STREAMED.load(Ordering::SeqCst),
    );
    let mut out = Vec::new();
    // Encoding into a Vec fails only on invalid metric data, which the
    // fixed names above rule out; an empty answer is then what shows it.
    let _ = TextEncoder::new().encode(&e.registry.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, registry: Arc<SessionRegistry>) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioIo, TokioTimer};
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPERS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let answer = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let registry = registry.clone();
                async move {
                    let found = request.method() == hyper::Method::GET
                        && request.uri().path() == "/metrics";
                    if found {
                        hyper::Response::builder()
                            .header("content-type", prometheus::TEXT_FORMAT)
                            .body(Full::new(Bytes::from(render(&registry))))
                    } else {
                        hyper::Response::builder()
                            .status(hyper::StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::from_static(b"only GET /metrics\n")))
                    }
                }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), answer)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "metrics: connection ended");
            }
        });
    }
}
