//! # wsfs — the workspace filesystem protocol
//!
//! This crate is the contract shared by the server (`wsfs-server`), the
//! client (`wsfs-client`) and the tests. It holds:
//!
//! - [`proto`]: the gRPC types and service stubs generated from
//!   `proto/wsfs/v1/*.proto`, and [`FILE_DESCRIPTOR_SET`] for reflection;
//! - [`CanonicalPath`]: a workspace path parsed once, at the edge, into its
//!   canonical form (`a/b/c`, the root is empty), refusing escapes;
//! - [`Error`]: one enum with a variant per contract reason, mapped to and
//!   from a gRPC `Status` with a `google.rpc.ErrorInfo` detail in exactly one
//!   place, so server and client agree on what each failure means;
//! - [`Filesystem`]: the operations every backend and the client implement,
//!   in Rust types. The conformance suite is written against this trait;
//! - [`session`]: the session and snapshot types both sides share
//!   ([`BackendKind`], [`Layout`], [`HostMount`], [`RequestedLimits`],
//!   [`SnapshotInfo`], [`Restored`]) with their wire conversions;
//! - [`token`]: the shape of a session's bearer token, which names its
//!   session for routing;
//! - [`wire`]: every other translation between the generated messages and
//!   these types, one call type per Filesystem RPC
//!   ([`wire::filesystem`]), so that server and client never translate on
//!   their own.
//!
//! ```
//! use wsfs::{CanonicalPath, PathLimits};
//! let p = CanonicalPath::parse("/src//lib/../main.rs", &PathLimits::default()).unwrap();
//! assert_eq!(p.as_str(), "src/main.rs");
//! assert!(CanonicalPath::parse("../etc/passwd", &PathLimits::default()).is_err());
//! ```

pub mod codec;
pub mod error;
pub mod fs;
pub mod path;
pub mod permissions;
pub mod session;
pub mod token;
pub mod wire;

pub use error::{Error, Result};
pub use fs::*;
pub use path::{CanonicalPath, PathLimits};
pub use permissions::Permissions;
pub use session::{
    BackendKind, ContainerSpec, FileOwner, HostMount, Layout, RequestedLimits, Restored,
    SessionInfo, SessionUsage, SnapshotInfo, SnapshotRef,
};

/// Generated gRPC types and service stubs for package `wsfs.v1`.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("wsfs.v1");
}

/// The encoded descriptor set of every `.proto` the service speaks,
/// including `google.rpc` error details, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/wsfs_descriptor.bin"));

/// The `ErrorInfo.domain` of every error wsfs sends.
pub const ERROR_DOMAIN: &str = "wsfs.v1";

/// The metadata every session-scoped call carries with its session's id,
/// so that a standard proxy in front of several servers routes each call to
/// the server holding its session (nginx: `hash $http_x_wsfs_session
/// consistent`). A server refuses a call whose metadata names another
/// session than its body; calls without it still work against one server.
/// A client that knows no session id but holds a session's token sends the
/// session its token names ([`token::session_of`]).
pub const SESSION_HEADER: &str = "x-wsfs-session";

/// The response header in which a server names its version, on every
/// answer (refusals included); `wsfs version` shows it.
pub const SERVER_VERSION_HEADER: &str = "wsfs-server-version";
