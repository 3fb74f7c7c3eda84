//! The DIRECTORY backend kind, whole: a session whose workspace is a
//! directory on the server's disk and whose state outlives a restart.
//!
//! - [`backend`]: [`DirectoryBackend`], the symlink-proof storage under
//!   one root;
//! - [`snapshots`]: [`DirectorySnapshots`], the content-addressed snapshot
//!   store beside the root;
//! - [`journal`]: the replay of a whole-workspace replacement a stop cut
//!   short;
//! - `record`: `session.json`, and `root`: a root in an existing directory;
//! - `provider`: how the registry makes, forks and reopens such a session.
//!
//! A DIRECTORY session owns `sessions/<id>/` under the data directory:
//! `root/` (unless the session was rooted elsewhere), `staging/` for
//! uploads in flight, `session.json`, and its snapshots (`objects/`,
//! `trees/`, `snapshots/`, `head`).

pub mod backend;
pub mod journal;
pub(crate) mod provider;
pub(crate) mod record;
mod root;
pub mod snapshots;

pub use backend::{DirectoryBackend, Owner};
pub(crate) use provider::DirectoryProvider;
pub use record::RootIdentity;
pub use snapshots::DirectorySnapshots;
