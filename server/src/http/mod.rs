//! DeepFabric's VFS API over HTTP (`--http-listen`): the JSON service that
//! DeepFabric's `SpinClient` speaks to its tools-sdk `vfs` component, served
//! on wsfs sessions, so that `spin_endpoint: http://ADDR` works unchanged.
//!
//! | Route (also under `/vfs`) | Answer |
//! |---|---|
//! | `POST /execute` `{session_id, tool, args}` | 200 `{success, result, error_type}`; 400 `InvalidRequest` for a body that is not that JSON |
//! | `GET /health` | `{"status": "healthy", "components": ["vfs"]}` |
//! | `GET /components` | `{"components": ["vfs"]}` |
//! | `DELETE /session/{id}` | `{success, deleted_files}` |
//!
//! The tools and their strings are the tools-sdk component's (see
//! [`tools`]). A DeepFabric session id names a wsfs session ([`names`]):
//! made on first use with `--http-session-*`, labelled
//! [`names::SESSION_LABEL`] so that every other client finds it, and
//! removed by the DELETE or by its idle TTL. This module parses and
//! answers; the files are the registry's and the workspace's, opened the
//! way the gRPC service opens them, with the same tokens.
//!
//! Bounded like the gRPC listener, and by the same rules
//! ([`crate::connections`]): at most `--max-connections` connections
//! (HTTP/1.1; `--max-connections-per-peer` from one address), a newcomer
//! at the cap admitted by shedding the least active one (still without a
//! whole request head in what it sent, oldest first, else idle longest; never one with a
//! request running), a request's headers within `--handshake-timeout`
//! (which also closes a keep-alive connection idle that long), a body of at most
//! [`MAX_BODY_BYTES`], each request answered within
//! `--http-request-timeout`, and sessions within `--max-sessions`.

mod names;
mod tools;

use crate::auth::Auth;
use crate::registry::{BackendKind, SessionRegistry};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use wsfs::Error;

pub use crate::config::http::{HttpBackend, HttpConfig};
pub use names::{session_id, SESSION_LABEL};

/// The largest request body: the largest gRPC message, so that what one
/// face accepts the other does (a write's JSON escaping aside).
pub const MAX_BODY_BYTES: usize = wsfs::MAX_MESSAGE_BYTES;

/// The one component this service implements.
const COMPONENT: &str = "vfs";

impl From<HttpBackend> for BackendKind {
    fn from(b: HttpBackend) -> Self {
        match b {
            HttpBackend::Memory => BackendKind::Memory,
            HttpBackend::Directory => BackendKind::Directory,
        }
    }
}

/// What every handler shares.
struct Face {
    registry: Arc<SessionRegistry>,
    auth: Arc<Auth>,
    config: HttpConfig,
    /// Serializes first uses, so that two requests naming a new session
    /// make it once.
    creating: tokio::sync::Mutex<()>,
}

/// Serves the API on `listener` until `stopping` is cancelled or the task
/// is dropped; each connection is a task of this one and ends with it.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<SessionRegistry>,
    auth: Arc<Auth>,
    stopping: CancellationToken,
) {
    use crate::connections::{self, CallGuard, Hello};
    use futures::StreamExt;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let config = registry.config();
    let limits = connections::Limits::new(config.max_connections, config.max_connections_per_peer);
    let timeouts = connections::Timeouts {
        handshake: config.handshake_timeout,
        idle: config.idle_timeout,
    };
    let header_timeout = config.handshake_timeout;
    let request_timeout = config.http.http_request_timeout;
    let face = Arc::new(Face {
        config: config.http.clone(),
        registry: registry.clone(),
        auth,
        creating: tokio::sync::Mutex::new(()),
    });
    let router = router(face);
    let incoming = connections::incoming(listener, limits, timeouts, Hello::Request);
    let mut incoming = std::pin::pin!(incoming);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let conn = tokio::select! {
            conn = incoming.next() => match conn {
                Some(Ok(conn)) => conn,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "http: accept failed");
                    continue;
                }
                None => return,
            },
            () = stopping.cancelled() => return,
        };
        let router = router.clone();
        let info = conn.info().clone();
        connections.spawn(async move {
            let answer = hyper::service::service_fn(move |request| {
                let router = router.clone();
                // Counted until the answer's body is sent: a connection
                // with a request running is never shed.
                let call = CallGuard::on(Some(&info));
                async move {
                    let answered = tokio::time::timeout(request_timeout, router.oneshot(request));
                    let response = match answered.await {
                        Ok(Ok(response)) => response,
                        Ok(Err(never)) => match never {},
                        Err(_) => refusal(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "Timeout",
                            &format!(
                                "the request did not finish within {} (--http-request-timeout); a change under way still completes",
                                humantime::format_duration(request_timeout)
                            ),
                        ),
                    };
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        Body::new(body.map_frame(move |frame| {
                            let _held = &call;
                            frame
                        }))
                    }))
                }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(conn), answer)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "http: connection ended");
            }
        });
    }
}

/// Every route, with and without the `/vfs` prefix (DeepFabric posts to
/// `/vfs/execute` but asks `/health`, `/components` and `/session/{id}`).
fn router(face: Arc<Face>) -> Router {
    let routes = || {
        Router::new()
            .route("/execute", post(execute))
            .route("/health", get(health))
            .route("/components", get(components))
            .route("/session/{id}", delete(delete_session))
    };
    Router::new()
        .merge(routes())
        .nest("/vfs", routes())
        .fallback(|| async { json(StatusCode::NOT_FOUND, &NotFound { error: "Not found" }) })
        .method_not_allowed_fallback(|| async {
            json(
                StatusCode::METHOD_NOT_ALLOWED,
                &NotFound {
                    error: "Method not allowed",
                },
            )
        })
        .with_state(face)
}

#[derive(Deserialize)]
struct ExecuteRequest {
    session_id: String,
    tool: String,
    args: serde_json::Value,
}

/// The answer to every execute, and to a refused request (`error` then
/// repeats `result`, which DeepFabric shows for a status other than 200).
#[derive(Serialize)]
struct ExecuteResponse<'a> {
    success: bool,
    result: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct HealthResponse {
    status: &'static str,
    components: [&'static str; 1],
}

#[derive(Serialize)]
struct ComponentsResponse {
    components: [&'static str; 1],
}

#[derive(Serialize)]
struct SessionDeleted {
    success: bool,
    deleted_files: u64,
}

#[derive(Serialize)]
struct NotFound {
    error: &'static str,
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    // Serializing these plain structs cannot fail.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

/// A tool's answer: always 200.
fn answered(result: Result<String, tools::Failure>) -> Response {
    let (success, result, error_type) = match &result {
        Ok(text) => (true, text.as_str(), None),
        Err(f) => (false, f.message.as_str(), Some(f.error_type)),
    };
    json(
        StatusCode::OK,
        &ExecuteResponse {
            success,
            result,
            error_type,
            error: None,
        },
    )
}

/// A request refused before any tool ran.
fn refusal(status: StatusCode, error_type: &str, message: &str) -> Response {
    json(
        status,
        &ExecuteResponse {
            success: false,
            result: message,
            error_type: Some(error_type),
            error: Some(message),
        },
    )
}

fn invalid_request(message: &str) -> Response {
    refusal(
        StatusCode::BAD_REQUEST,
        "InvalidRequest",
        &format!("Invalid request: {message}"),
    )
}

/// A failure to admit the request or open its session: the status says
/// which (DeepFabric reports any of them as `HTTPError` with the message).
fn not_admitted(e: &Error) -> Response {
    let (status, error_type) = match e {
        Error::Unauthenticated { .. } => (StatusCode::UNAUTHORIZED, "Unauthenticated"),
        Error::PermissionDenied { .. } => (StatusCode::FORBIDDEN, "PermissionDenied"),
        Error::InvalidArgument { .. } => (StatusCode::BAD_REQUEST, "InvalidRequest"),
        Error::FailedPrecondition { .. } => (StatusCode::CONFLICT, "IOError"),
        Error::QuotaExceeded { .. } | Error::SessionLeased { .. } | Error::Unavailable { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "Unavailable")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "IOError"),
    };
    refusal(status, error_type, &e.to_string())
}

async fn health() -> Response {
    json(
        StatusCode::OK,
        &HealthResponse {
            status: "healthy",
            components: [COMPONENT],
        },
    )
}

async fn components() -> Response {
    json(
        StatusCode::OK,
        &ComponentsResponse {
            components: [COMPONENT],
        },
    )
}

async fn execute(State(face): State<Arc<Face>>, headers: HeaderMap, body: Body) -> Response {
    let bytes = match http_body_util::Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "InvalidRequest",
                &format!("Invalid request: the body is larger than {MAX_BODY_BYTES} bytes"),
            )
        }
        Err(e) => return invalid_request(&format!("the body could not be read: {e}")),
    };
    let request: ExecuteRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return invalid_request(&e.to_string()),
    };
    if let Err(e) = names::check(&request.session_id) {
        return invalid_request(&e.to_string());
    }
    let metadata = MetadataMap::from_headers(headers);
    let id = names::session_id(&request.session_id);
    // Who calls is settled first: a refused caller learns nothing, not
    // even whether the tool exists.
    if let Err(e) = face.auth.filesystem_caller(&metadata, &id) {
        return not_admitted(&e);
    }
    let Some(tool) = tools::Tool::parse(&request.tool) else {
        return answered(Err(tools::Failure::unknown_tool(&request.tool)));
    };
    let mut opened = false;
    let outcome = crate::service::logged(tool.method(), &id, tool.path_of(&request.args), async {
        let session = names::open_or_create(&face, &metadata, &request.session_id, &id).await?;
        opened = true;
        tool.run(session, &request.args).await
    })
    .await;
    match outcome {
        Ok(text) => answered(Ok(text)),
        Err(e) if opened => answered(Err(tools::Failure::of(&e, &request.args))),
        Err(e) => not_admitted(&e),
    }
}

async fn delete_session(
    State(face): State<Arc<Face>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = names::check(&name) {
        return invalid_request(&e.to_string());
    }
    let metadata = MetadataMap::from_headers(headers);
    let id = names::session_id(&name);
    let deleted = crate::service::logged("VfsDeleteSession", &id, "", async {
        face.auth.require_admin(&metadata)?;
        names::delete(&face, &name, &id).await
    })
    .await;
    match deleted {
        Ok(deleted_files) => json(
            StatusCode::OK,
            &SessionDeleted {
                success: true,
                deleted_files,
            },
        ),
        Err(e) => not_admitted(&e),
    }
}
