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
//!
//! The same layer answers a request body that is not a valid message of
//! the call's type. tonic's codec reports that as INTERNAL, without an
//! `ErrorInfo`, before any handler runs; it is the client's mistake, so the
//! answer is rewritten to INVALID_ARGUMENT with reason `INVALID_ARGUMENT`.

use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::{Code, Status};

type Request = http::Request<Body>;
type Response = http::Response<Body>;

/// Both rewrites, as one layer.
type Layer = tower::layer::util::Stack<
    tower::util::MapRequestLayer<fn(Request) -> Request>,
    tower::util::MapResponseLayer<fn(Response) -> Response>,
>;

/// The layer every service is served behind.
pub(crate) fn layer() -> Layer {
    tower::layer::util::Stack::new(
        tower::util::MapRequestLayer::new(resets_break_the_body as fn(Request) -> Request),
        tower::util::MapResponseLayer::new(
            undecodable_is_invalid_argument as fn(Response) -> Response,
        ),
    )
}

/// How prost's decode errors begin; tonic's codec passes them on as the
/// message of an INTERNAL status.
const DECODE_FAILED: &str = "failed to decode Protobuf message";

/// The contract's error for a status that says a request message could
/// not be decoded, or `None` for any other status.
pub(crate) fn undecodable(status: &Status) -> Option<wsfs::Error> {
    (status.code() == Code::Internal && status.message().starts_with(DECODE_FAILED)).then(|| {
        wsfs::Error::invalid_argument(format!(
            "the request is not a valid message for this call ({})",
            wsfs::path::quote(status.message())
        ))
    })
}

/// A call refused before its handler ran carries its status in the
/// response's extensions (a trailers-only response); an undecodable
/// request's INTERNAL there becomes INVALID_ARGUMENT with its `ErrorInfo`.
fn undecodable_is_invalid_argument(response: Response) -> Response {
    match response.extensions().get::<Status>().and_then(undecodable) {
        Some(error) => error.to_status().into_http(),
        None => response,
    }
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
