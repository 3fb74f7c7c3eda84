//! # wsfs-server
//!
//! The wsfs gRPC server. Requests flow one way:
//!
//! gRPC request → [`service`] (parse at the edge, authorize) →
//! [`wsfs::Filesystem`] → [`workspace::Workspace`] (the contract's shared
//! logic) → [`backend::Backend`] (memory or directory storage).
//!
//! [`sessions::SessionRegistry`] owns every session and its workspace;
//! [`search`] holds glob and the ripgrep-class grep; [`serve`] runs it all
//! with health and reflection.

pub mod backend;
pub mod limits;
pub mod metrics;
pub mod search;
pub mod workspace;

pub use limits::SessionLimits;
pub use workspace::Workspace;
pub mod config;
pub mod service;
pub mod sessions;

pub use config::ServerConfig;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use wsfs::proto::{filesystem_server::FilesystemServer, sessions_server::SessionsServer};

/// Largest gRPC message accepted or sent: a 32 MiB Write or Read page plus
/// framing, with headroom for sessions configured a little higher.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024 + 64 * 1024;

/// Serves wsfs on `listener` until `shutdown` resolves, then stops
/// accepting, lets in-flight calls finish, and returns.
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> wsfs::Result<()> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        wsfs::Error::internal(format!(
            "cannot create the data directory '{}': {e}",
            config.data_dir.display()
        ))
    })?;
    let registry = Arc::new(sessions::SessionRegistry::open(Arc::new(config))?);

    let reaper = {
        let registry = registry.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                registry.expire_idle().await;
            }
        })
    };

    let filesystem = FilesystemServer::new(service::FilesystemService::new(registry.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let sessions = SessionsServer::new(service::SessionsService::new(registry))
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

    let served = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(filesystem)
        .add_service(sessions)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY a stream's small messages (a ReadBytes
            // header, a short file, the trailers) wait out delayed ACKs:
            // ~40 ms per small-file read.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
        .map_err(|e| wsfs::Error::internal(format!("server failed: {e}")));
    reaper.abort();
    served
}
