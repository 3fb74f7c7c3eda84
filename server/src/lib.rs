//! # wsfs-server
//!
//! The wsfs gRPC server. Requests flow one way:
//!
//! gRPC request → [`service`] (parse at the edge, authorize) → [`layers`]
//! (events, zones) → [`workspace::Workspace`] (the contract's shared logic)
//! → [`backend::Backend`] (memory or directory storage).
//!
//! Each backend kind is one folder ([`memory`], [`directory`],
//! [`container`]) with one provider that makes, forks and reopens its
//! sessions; the registry picks it in one factory.
//!
//! [`registry::SessionRegistry`] owns every session and its workspace;
//! [`search`] holds glob and the ripgrep-class grep, [`pattern`] the bound
//! on every pattern and the one glob dialect every call that takes a glob
//! compiles with; [`serve`] runs it all with health and reflection;
//! [`archive`] exports and imports ZIP archives; [`snapshots`] takes,
//! restores and reads back each session's snapshots; [`stdio`] serves one
//! directory over stdin and stdout inside a container.

// Reached by other crates (the binary, the tests, the benchmarks); the
// reasons are listed in tests/tests/architecture.rs, which refuses a new
// `pub mod` without one.
pub mod archive;
pub mod backend;
pub mod config;
pub mod connections;
pub mod container;
pub mod directory;
pub mod durability;
pub mod faults;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod objstore;
pub mod stdio;
pub mod workspace;

pub(crate) mod auth;
pub(crate) mod claims;
pub(crate) mod clock;
pub(crate) mod events;
pub(crate) mod exporter;
pub(crate) mod kind;
pub(crate) mod layers;
pub(crate) mod limits;
pub(crate) mod mounts;
pub(crate) mod pattern;
pub(crate) mod producer;
pub(crate) mod quota;
pub(crate) mod registry;
pub(crate) mod search;
pub(crate) mod service;
pub(crate) mod snapshots;

pub use config::ServerConfig;
pub use limits::SessionLimits;
pub use workspace::Workspace;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use wsfs::proto::{filesystem_server::FilesystemServer, sessions_server::SessionsServer};

pub use wsfs::MAX_MESSAGE_BYTES;

/// What one upload may have in flight to the server before it waits for
/// the server to take it (HTTP/2's stream window). At 1 MiB (hyper's
/// default) an upload waited on window updates; 2 MiB measured faster and
/// steadier, 4 MiB no better. It is also the most one upload makes the
/// server buffer while its disk writes lag.
pub(crate) const UPLOAD_STREAM_WINDOW_BYTES: u32 = 2 * 1024 * 1024;

/// The same for all of a connection's uploads together: two at full speed,
/// and at most this much buffered per connection.
pub(crate) const UPLOAD_CONNECTION_WINDOW_BYTES: u32 = 2 * UPLOAD_STREAM_WINDOW_BYTES;

/// The longest a graceful shutdown waits, in all, for the object store to
/// take back the server's leases.
const LEASE_RELEASE_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// Serves wsfs on `listener` until `shutdown` resolves, then stops
/// accepting, ends every Watch (UNAVAILABLE), gives other calls
/// `--shutdown-grace` to finish, gives back its leases in the object store
/// (at most [`LEASE_RELEASE_BOUND`]), and returns. With `--http-listen`, also
/// serves DeepFabric's VFS API there ([`http`]).
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> wsfs::Result<()> {
    let http = match config.http.http_listen {
        Some(addr) => {
            // Refused before anything listens there.
            let bound = listener.local_addr().map_err(|e| {
                wsfs::Error::internal(format!("cannot read the listening address: {e}"))
            })?;
            config
                .validate(bound)
                .map_err(wsfs::Error::invalid_argument)?;
            Some(bind_http(addr).await?)
        }
        None => None,
    };
    serve_with_http(config, listener, http, shutdown).await
}

/// Binds `--http-listen`.
pub async fn bind_http(addr: std::net::SocketAddr) -> wsfs::Result<TcpListener> {
    // The same deep backlog as the gRPC listener's.
    connections::listen(addr)
        .map_err(|e| wsfs::Error::internal(format!("cannot listen for HTTP on {addr}: {e}")))
}

/// [`serve`] with the HTTP face's listener already bound (`None`: no HTTP
/// face), so that a caller learns its address before serving.
pub async fn serve_with_http(
    config: ServerConfig,
    listener: TcpListener,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> wsfs::Result<()> {
    let bound = listener
        .local_addr()
        .map_err(|e| wsfs::Error::internal(format!("cannot read the listening address: {e}")))?;
    let mut config = config;
    // The HTTP address actually bound is the one the loopback rule judges.
    config.http.http_listen = match &http {
        Some(http) => Some(http.local_addr().map_err(|e| {
            wsfs::Error::internal(format!("cannot read the HTTP listening address: {e}"))
        })?),
        None => None,
    };
    config
        .validate(bound)
        .map_err(wsfs::Error::invalid_argument)?;
    let tls = tls_config(&config)?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        wsfs::Error::internal(format!(
            "cannot create the data directory '{}': {e}",
            config.data_dir.display()
        ))
    })?;
    archive::import::clear_spool(&config.data_dir);
    let auth = auth::Auth::new(config.admin_token.as_ref().map(config::Secret::expose));
    let connection_limits =
        connections::Limits::new(config.max_connections, config.max_connections_per_peer);
    let timeouts = connections::Timeouts {
        handshake: config.handshake_timeout,
        idle: config.idle_timeout,
    };
    let grace = config.shutdown_grace;
    tracing::info!(
        max_connections = connection_limits.max,
        max_connections_per_peer = connection_limits.per_peer,
        handshake_timeout = ?timeouts.handshake,
        idle_timeout = ?timeouts.idle,
        "connection limits"
    );
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout))
        .max_concurrent_streams(Some(config.max_streams_per_connection))
        .max_frame_size(wsfs::HTTP2_MAX_FRAME_BYTES)
        .initial_stream_window_size(UPLOAD_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(UPLOAD_CONNECTION_WINDOW_BYTES);
    if config.replica_id.is_none() && config.object_store.is_some() {
        config.replica_id = Some(objstore::default_replica_id(&config.data_dir)?);
    }
    let registry = Arc::new(registry::SessionRegistry::open(Arc::new(config))?);
    // A bucket that is missing or out of reach stops the start, with why.
    if let Some(bucket) = registry.bucket() {
        bucket.check_at_start().await?;
    }
    // Sessions a stop left half done are finished in the background, each
    // refused (UNAVAILABLE) until its own recovery ends; the others answer
    // at once.
    let recoveries = registry.start_recoveries();
    // Leases before the first call: a session recovered elsewhere while
    // this server was down is not served here.
    registry.tend_leases().await;
    let background = registry::background::start(registry.clone());
    let stopping = registry.stopping();
    let auth = Arc::new(auth.persisted_under(registry.mirrored_sessions()));
    registry.attach_auth(auth.clone());
    if auth.tokens_on() && tls.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(%bound, "tokens travel in clear text: pass --tls-cert and --tls-key");
    }

    let exporter = match registry.config().metrics_listen {
        Some(addr) => {
            let metrics = TcpListener::bind(addr).await.map_err(|e| {
                wsfs::Error::internal(format!("cannot listen for metrics on {addr}: {e}"))
            })?;
            let shown = metrics.local_addr().map_or(addr, |a| a);
            tracing::info!(addr = %shown, "metrics on http://{shown}/metrics");
            Some(tokio::spawn(exporter::serve(metrics, registry.clone())))
        }
        None => None,
    };
    let reaper = {
        let registry = registry.clone();
        let auth = auth.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                for id in registry.expire_idle().await {
                    auth.tokens().forget_session(&id);
                }
            }
        })
    };

    let http_face = http.map(|http| {
        if let Ok(at) = http.local_addr() {
            tracing::info!(addr = %at, "DeepFabric VFS API on http://{at}/vfs");
        }
        tokio::spawn(http::serve(
            http,
            registry.clone(),
            auth.clone(),
            stopping.clone(),
        ))
    });

    let filesystem = FilesystemServer::new(service::FilesystemService::new(
        registry.clone(),
        auth.clone(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let bucket = registry.bucket().cloned();
    let sessions = SessionsServer::new(service::SessionsService::new(registry, auth))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);

    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<FilesystemServer<service::FilesystemService>>()
        .await;
    health_reporter
        .set_serving::<SessionsServer<service::SessionsService>>()
        .await;

    let reflection_error =
        |e: tonic_reflection::server::Error| wsfs::Error::internal(format!("reflection: {e}"));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(wsfs::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(reflection_error)?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(wsfs::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(reflection_error)?;

    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| wsfs::Error::internal(format!("TLS setup failed: {e}")))?;
    }
    // The shutdown signal first ends every Watch, which would otherwise
    // hold the graceful shutdown open for ever; the grace clock starts then.
    let signalled = {
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    };
    let serving = builder
        .trace_fn(connections::call_span)
        .layer(connections::CallsLayer)
        .layer(tower::util::MapResponseLayer::new(with_version))
        .layer(service::resets::layer())
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(filesystem)
        .add_service(sessions)
        .serve_with_incoming_shutdown(
            connections::incoming(
                listener,
                connection_limits,
                timeouts,
                connections::Hello::Http2,
            ),
            signalled,
        );
    let served = tokio::select! {
        served = serving => served
            .map_err(|e| wsfs::Error::internal(format!("server failed: {e}"))),
        () = async { stopping.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(?grace, "calls still running after the shutdown grace: stopping them");
            Ok(())
        }
    };
    reaper.abort();
    for task in recoveries.into_iter().chain(background) {
        task.abort();
    }
    if let Some(exporter) = exporter {
        exporter.abort();
    }
    if let Some(face) = http_face {
        face.abort();
    }
    // Calls have ended: another replica may recover these sessions now
    // rather than when their leases run out.
    if let Some(bucket) = bucket {
        let released = bucket.release_all(LEASE_RELEASE_BOUND).await;
        if released > 0 {
            tracing::info!(released, "leases given back");
        }
    }
    served
}

/// `response` naming this server's version ([`wsfs::SERVER_VERSION_HEADER`]).
fn with_version<B>(mut response: ::http::Response<B>) -> ::http::Response<B> {
    response.headers_mut().insert(
        wsfs::SERVER_VERSION_HEADER,
        ::http::HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    response
}

/// The server's TLS identity from `--tls-cert` and `--tls-key`, if given.
fn tls_config(config: &ServerConfig) -> wsfs::Result<Option<tonic::transport::ServerTlsConfig>> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| {
            wsfs::Error::invalid_argument(format!("cannot read '{}': {e}", p.display()))
        })
    };
    let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
    Ok(Some(
        tonic::transport::ServerTlsConfig::new().identity(identity),
    ))
}
