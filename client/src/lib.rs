//! # wsfs-client — a typed async client for wsfs
//!
//! wsfs is a workspace filesystem served over gRPC. This crate speaks its
//! protocol in Rust types:
//!
//! - [`Client`] holds the connection (one HTTP/2 channel; clones share it)
//!   and manages sessions: [`create_session`](Client::create_session) from
//!   [`SessionOptions`], [`get_session`](Client::get_session),
//!   [`list_sessions`](Client::list_sessions),
//!   [`delete_session`](Client::delete_session), each describing a session
//!   as a [`SessionInfo`]; and snapshots a session's workspace:
//!   [`snapshot`](Client::snapshot), [`restore`](Client::restore),
//!   [`list_snapshots`](Client::list_snapshots),
//!   [`delete_snapshot`](Client::delete_snapshot).
//! - [`Session`] is a handle on one session's workspace. It implements
//!   [`Filesystem`], the trait the server's backends implement too, so code
//!   written against the trait (the conformance suite, say) runs unchanged
//!   in-process or over the wire. Its inherent methods take `&str` paths and
//!   cover the common cases: [`read_to_string`](Session::read_to_string),
//!   [`write_str`](Session::write_str), streaming
//!   [`download`](Session::download) and [`upload`](Session::upload) of
//!   files of any size, and the [`GrepBuilder`] and [`GlobBuilder`] queries,
//!   and ZIP archives of the whole workspace:
//!   [`export_to`](Session::export_to) and [`import_from`](Session::import_from).
//! - `mount` (feature `mount`, Linux): the session as a POSIX directory
//!   through FUSE, `mount::mount(session, dir, MountOptions)`.
//! - [`Error`] is the protocol's own error enum (`wsfs::Error`): every
//!   failure arrives as the variant the server meant, `VERSION_MISMATCH`
//!   with its current version, `PATH_ESCAPES_ROOT` with its path.
//!
//! Paths are parsed on this side before any call (see [`parse_path`]), so a
//! path that climbs out of the workspace fails early with the same error
//! the server would give.
//!
//! ```no_run
//! use wsfs_client::{Client, Filesystem, SessionOptions};
//!
//! # async fn example() -> wsfs_client::Result<()> {
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let (session, info) = client
//!     .create(SessionOptions::memory().seed_file("src/main.rs", "fn main() {}\n"))
//!     .await?;
//!
//! session.write_str("notes/todo.md", "- ship it\n").await?;
//! assert_eq!(session.read_to_string("/notes//todo.md").await?, "- ship it\n");
//!
//! let (matches, summary) = session.grep_query("fn main").glob("*.rs").collect().await?;
//! println!("{} matches in {} files", matches.len(), summary.files_searched);
//!
//! let listing = session.list(&wsfs_client::parse_path("src")?, 1).await?;
//! for entry in &listing.entries {
//!     println!("{} {:?} {} bytes", entry.path, entry.kind, entry.size);
//! }
//!
//! client.delete_session(&info.id).await?;
//! # Ok(()) }
//! ```

mod archive;
mod client;
mod convert;
mod credentials;
#[cfg(all(feature = "mount", target_os = "linux"))]
pub mod mount;
mod query;
mod session;
mod sessions;
mod snapshots;
mod stream;
mod watch;

pub use client::{endpoint, Client, IssuedToken, SessionQuery, MAX_MESSAGE_BYTES};
pub use query::{GlobBuilder, GrepBuilder};
pub use session::{parse_path, Session};
pub use sessions::{
    Backend, ContainerSpec, FileOwner, HostMount, Layout, SessionInfo, SessionLimits,
    SessionOptions, SessionUsage, SnapshotRef,
};
pub use snapshots::{Restored, SnapshotChange, SnapshotChangeKind, SnapshotDiff, SnapshotInfo};
pub use watch::{ChangeEvent, ChangeKind, ChangesResponse, WatchBuilder};

/// The protocol crate, and the types every [`Filesystem`] call uses.
pub use wsfs;
pub use wsfs::fs::*;
pub use wsfs::{CanonicalPath, Error, PathLimits, Permissions, Result};

/// The Rust blocks of the README and of `docs/`, compiled as doc tests
/// (`cargo test -p wsfs-client --doc`). Every page with a Rust block is
/// listed here; `wsfs-tests`' `docs` test fails when one is missing.
#[cfg(doctest)]
// The other blocks' info strings say in words why they are not run
// (`sh no-run: needs Docker`), which rustdoc reads as malformed attributes.
#[allow(rustdoc::invalid_codeblock_attributes)]
mod docs {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/API.md")]
    pub struct Api;
    #[doc = include_str!("../../docs/SECURITY.md")]
    pub struct Security;
}
