//! A client that resets its request stream has not finished its request.
//!
//! When a client cancels a call (it drops the call, times out, or aborts an
//! upload whose source failed), HTTP/2 carries a `RST_STREAM` with
//! `CANCEL`. tonic's request decoder reads a *cancelled* request body as a
//! clean end of the stream, so an upload cut off that way would look
//! finished and its first part would be committed. This layer renames the
//! body's `CANCELLED` error to `ABORTED` before tonic decodes it: the
//! handler then sees the stream break off, and WriteBytes and ImportArchive
//! keep the old content, as the contract says.

use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::{Code, Status};

type Request = http::Request<Body>;

/// The layer every service is served behind.
pub(crate) fn layer() -> tower::util::MapRequestLayer<fn(Request) -> Request> {
    tower::util::MapRequestLayer::new(resets_break_the_body as fn(Request) -> Request)
}

fn resets_break_the_body(request: Request) -> Request {
    request.map(|body| {
        Body::new(body.map_err(|status: Status| {
            if status.code() == Code::Cancelled {
                Status::aborted(format!(
                    "the client reset the request before it ended ({})",
                    status.message()
                ))
            } else {
                status
            }
        }))
    })
}
