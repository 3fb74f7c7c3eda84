//! The gRPC edge: requests are parsed here into canonical Rust values, the
//! session is looked up, the `Filesystem` call is made, and the answer is
//! translated back. No filesystem logic lives here.
//!
//! Every call runs inside [`traced`], which logs one structured line per RPC
//! (method, session, path, outcome, duration; never payload bytes) and turns
//! `wsfs::Error` into a `Status` with its `ErrorInfo`.

mod filesystem;
mod sessions;

pub use filesystem::FilesystemService;
pub use sessions::SessionsService;

use std::future::Future;
use std::time::{Instant, SystemTime};
use tonic::{Response, Status};
use wsfs::Error;

/// Runs one RPC body with a tracing span and its outcome logged.
pub(crate) async fn traced<T, F>(
    method: &'static str,
    session: &str,
    path: &str,
    body: F,
) -> Result<Response<T>, Status>
where
    F: Future<Output = wsfs::Result<T>>,
{
    let started = Instant::now();
    let span = tracing::info_span!("rpc", method, session, path);
    let _enter = span.enter();
    drop(_enter);
    let result = tracing::Instrument::instrument(body, span.clone()).await;
    let elapsed_us = started.elapsed().as_micros() as u64;
    let _enter = span.enter();
    match result {
        Ok(v) => {
            tracing::info!(outcome = "OK", elapsed_us, "rpc done");
            Ok(Response::new(v))
        }
        Err(e) => {
            tracing::info!(outcome = e.reason(), elapsed_us, error = %e, "rpc failed");
            Err(e.to_status())
        }
    }
}

pub(crate) fn timestamp(t: SystemTime) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(t))
}

pub(crate) fn unimplemented(what: &str, issue_note: &str) -> Error {
    Error::Unimplemented {
        message: format!("{what} is not implemented yet ({issue_note})"),
    }
}
