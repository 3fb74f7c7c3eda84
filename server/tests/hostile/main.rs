//! Hostile requests against the real `wsfs-server` binary.
//!
//! Each test reproduces one attack with nothing but the public API (or a
//! process writing into a DIRECTORY session's root, as a container would),
//! against the binary started under an address-space limit
//! (`RLIMIT_AS`, [`harness::DEFAULT_ADDRESS_SPACE`]). Each asserts the
//! answer (gRPC code and contract reason), the server's peak resident
//! memory (`VmHWM`) under the bound the README and RELIABILITY.md state,
//! that a bystander session is still served, and that nothing changed.
//!
//! - [`requests`]: one request's own cost: Edit, Grep, paths and patterns;
//! - [`connections`]: the connection cap under silent sockets, per peer;
//! - [`lifecycle`]: connections, Watch, idle expiry, shutdown, watchers;
//! - [`store`]: sparse files, archives, snapshots and the disk;
//! - [`watchers`]: outside changes with a thousand sessions, one watcher.

mod connections;
// Shared by the modules below; not every helper is used by each.
#[allow(dead_code)]
mod harness;
mod lifecycle;
mod requests;
mod store;
mod watchers;

/// The harness itself: the binary starts under the limit, serves, and
/// reports a peak memory that is plausible for an idle server.
#[tokio::test]
async fn a_limited_server_serves_a_bystander() {
    let mut server = harness::Server::start(&[]);
    server.assert_serves_bystander().await;
    let peak = server.peak_rss();
    assert!(
        peak > harness::MIB && peak < 256 * harness::MIB,
        "idle peak {peak} bytes"
    );
}
