//! What the test binaries share besides a server: the contract reason of a
//! refusal, a Write over the raw stub, a compare-and-swap increment, the
//! archive of a tree, a whole workspace's contents, a path from a literal, environment
//! knobs, a seeded random generator (a failing run reproduces from its
//! seed) and latency percentiles.

use std::str::FromStr;
use std::time::Duration;
use tonic::transport::Channel;
use tonic_types::StatusExt;
use wsfs::proto::{self, filesystem_client::FilesystemClient};
use wsfs::Filesystem as _;

/// The contract reason a refusal carries in its `ErrorInfo`; empty when it
/// carries none, so an assertion on it fails with what was sent instead.
pub fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

/// A text Write through the generated stub, for tests that speak the wire.
pub async fn raw_write(
    fs: &mut FilesystemClient<Channel>,
    session: &str,
    path: &str,
    content: String,
) -> Result<proto::WriteResponse, tonic::Status> {
    fs.write(proto::WriteRequest {
        session_id: session.to_string(),
        path: path.to_string(),
        content,
        ..Default::default()
    })
    .await
    .map(tonic::Response::into_inner)
}

/// One compare-and-swap increment of the number `counter` holds: read it,
/// write it plus one with `if_version`. True when the write landed, false
/// when another writer changed the file first (`VERSION_MISMATCH`).
pub async fn try_increment(
    fs: &dyn wsfs::Filesystem,
    counter: &wsfs::CanonicalPath,
) -> wsfs::Result<bool> {
    let page = fs.read(counter, wsfs::LineRange::default()).await?;
    let n: u64 = page
        .content
        .trim()
        .parse()
        .expect("the counter holds a number");
    let options = wsfs::WriteOptions {
        if_version: Some(page.version),
        ..wsfs::WriteOptions::default()
    };
    match fs.write(counter, &(n + 1).to_string(), options).await {
        Ok(_) => Ok(true),
        Err(wsfs::Error::VersionMismatch { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The archive ExportArchive makes of `files` (path and bytes) beside the
/// empty directories `dirs`, built in a MEMORY session of its own that is
/// deleted after.
pub async fn archive_of(
    client: &wsfs_client::Client,
    files: impl IntoIterator<Item = (String, Vec<u8>)>,
    dirs: &[&str],
) -> Vec<u8> {
    let options = files
        .into_iter()
        .fold(wsfs_client::SessionOptions::memory(), |o, (path, data)| {
            o.seed_file(path, data)
        });
    let (donor, info) = client.create(options).await.expect("a donor session");
    let mkdir = wsfs::MkdirOptions {
        parents: true,
        exist_ok: false,
        ..Default::default()
    };
    for dir in dirs {
        donor
            .mkdir(&p(dir), mkdir)
            .await
            .expect("a donor directory");
    }
    let mut out = Vec::new();
    donor
        .export_to_writer(&mut out, None)
        .await
        .expect("the donor's archive");
    client
        .delete_session(&info.id)
        .await
        .expect("the donor deleted");
    out
}

/// A path written in a test, parsed as a client parses it.
pub fn p(s: &str) -> wsfs::CanonicalPath {
    wsfs_client::parse_path(s).expect("a literal path")
}

/// The environment variable `name` parsed, or `default` when it is unset;
/// a set but unparsable value fails the test rather than being ignored.
pub fn env<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        Err(_) => default,
    }
}

/// splitmix64: small, fast and seeded, so a failing run reproduces with
/// its seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// The latency at quantile `q` (0..=1) of sorted samples, by nearest rank
/// (the rule `wsfs-bench` reports with); zero when there are none.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The system program `name` (found on `PATH`) a test drives as a real part
/// (`bwrap`, `nginx`, ...), or `None` when this machine lacks it: the test
/// then says so on stderr and passes without running, so that
/// `cargo test --workspace` passes on a machine with only the Rust
/// toolchain. With `WSFS_REQUIRE_TOOLS=1` (CI sets it after installing the
/// programs) a missing program fails the test instead.
pub fn system_tool(name: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        unavailable(&format!(
            "`{name}` is not on PATH (install it: see .ci/run)"
        ));
    }
    found
}

/// Why nothing can be mounted with FUSE here, if so: `/dev/fuse` is
/// missing, or this is not root and `fusermount3` is not on PATH.
pub fn fuse_missing() -> Option<&'static str> {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !std::path::Path::new("/dev/fuse").exists() {
        Some("/dev/fuse is missing, so nothing can be mounted")
    } else if !root && system_tool("fusermount3").is_none() {
        Some("not root and `fusermount3` is not on PATH")
    } else {
        None
    }
}

/// Says on stderr that a test skips because `why` (something this machine
/// lacks), or, with `WSFS_REQUIRE_TOOLS=1`, fails the test with it.
pub fn unavailable(why: &str) {
    assert!(
        std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "WSFS_REQUIRE_TOOLS=1 and {why}"
    );
    eprintln!("skipping: {why} (set WSFS_REQUIRE_TOOLS=1 to make this a failure)");
}

/// What a workspace holds: path -> file bytes, or `None` for a directory.
pub type WorkspaceState = std::collections::BTreeMap<String, Option<Vec<u8>>>;

/// Every entry of `session`'s workspace, each file read whole.
pub async fn workspace_state(session: &wsfs_client::Session) -> WorkspaceState {
    let listing = session
        .list(&wsfs::CanonicalPath::root(), 64)
        .await
        .expect("list the workspace");
    assert!(!listing.truncated, "the workspace is listed whole");
    let mut state = WorkspaceState::new();
    for entry in listing.entries {
        let content = match entry.kind {
            wsfs::FileKind::Directory => None,
            _ => {
                let mut bytes = Vec::new();
                session
                    .download(entry.path.as_str(), &mut bytes)
                    .await
                    .expect("read a file");
                Some(bytes)
            }
        };
        state.insert(entry.path.as_str().to_string(), content);
    }
    state
}

/// Every entry's version, by path.
pub async fn workspace_versions(
    session: &wsfs_client::Session,
) -> std::collections::BTreeMap<String, u64> {
    let listing = session
        .list(&wsfs::CanonicalPath::root(), 64)
        .await
        .expect("list the workspace");
    listing
        .entries
        .into_iter()
        .map(|e| (e.path.as_str().to_string(), e.version))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_repeats_from_its_seed_and_stays_below_its_bound() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let drawn: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        assert_eq!(drawn, (0..100).map(|_| b.below(10)).collect::<Vec<_>>());
        assert!(drawn.iter().all(|&n| n < 10));
        assert!(drawn.iter().any(|&n| n != drawn[0]), "not constant");
        assert_eq!(Rng(1).bytes(13).len(), 13);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&ms, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&ms, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
