//! The `wsfs.v1.Filesystem` service's messages in Rust types.
//!
//! Each RPC has a call type here: what its request carries, with its paths
//! canonical and its options with the contract's defaults filled in. The
//! server parses a request into one with the session's path limits
//! ([`Request::parse`]: anything malformed is `INVALID_ARGUMENT`, and
//! nothing past the parse sees a raw string); the client makes the request
//! from one ([`Request::message`]). Answers convert with `From` on the
//! server's side and `TryFrom` on the client's, or, where an answer echoes
//! its request (Mkdir, Move, Copy, SetAttributes), through the call.

mod changes;
mod reads;

pub use changes::{
    Delete, DeleteMany, Edit, Mkdir, SetAttributes, Symlink, Transfer, Upload, UploadPart, Write,
};
pub use reads::{byte_stream, Exists, Glob, Grep, List, Read, ReadBytes, Stat, Watch};

use crate::{CanonicalPath, PathLimits, Result};

/// One RPC's request message as its Rust call, both ways.
pub trait Request: Sized {
    /// The generated message.
    type Message;

    /// The server's side: `message` as a caller sent it, with every path
    /// parsed under the session's `limits`. Malformed: `INVALID_ARGUMENT`.
    fn parse(message: Self::Message, limits: &PathLimits) -> Result<Self>;

    /// The client's side: a number the wire cannot carry is
    /// `INVALID_ARGUMENT`.
    fn message(self) -> Result<Self::Message>;
}

/// A path of a request, under the session's limits.
fn request_path(raw: &str, limits: &PathLimits) -> Result<CanonicalPath> {
    CanonicalPath::parse(raw, limits)
}

/// A link's target as the wire carries it: empty for everything else.
fn link_target(target: String) -> Option<String> {
    Some(target).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests;
