//! Change events: [`WatchBuilder`] for the live `Watch` stream and
//! [`Session::changes`] for polling.

use crate::session::Session;
use futures::stream::{BoxStream, StreamExt};
use wsfs::proto;
use wsfs::{Error, Result};

pub use wsfs::proto::{ChangeEvent, ChangeKind, ChangesResponse};

/// A `Watch` request under construction: `session.watch("src").recursive()
/// .glob("*.rs").since(seq).stream()`.
pub struct WatchBuilder {
    session: Session,
    request: proto::WatchRequest,
}

impl WatchBuilder {
    /// The whole subtree, not only direct children.
    pub fn recursive(mut self) -> Self {
        self.request.recursive = true;
        self
    }

    /// Only paths (relative to the watched path) matching this glob.
    pub fn glob(mut self, glob: &str) -> Self {
        self.request.glob = glob.to_string();
        self
    }

    /// Resume after this seq: replayed events first, then live ones.
    pub fn since(mut self, seq: u64) -> Self {
        self.request.since_seq = seq;
        self
    }

    /// Opens the stream; its first event is READY with the current seq.
    pub async fn stream(self) -> Result<BoxStream<'static, Result<ChangeEvent>>> {
        let request = self.session.request(self.request);
        let response = self.session.stub().watch(request).await?;
        Ok(response
            .into_inner()
            .map(|e| e.map_err(Error::from))
            .boxed())
    }
}

impl Session {
    /// Watches `path` (direct children and the path itself, unless
    /// [`WatchBuilder::recursive`]).
    pub fn watch(&self, path: &str) -> WatchBuilder {
        WatchBuilder {
            session: self.clone(),
            request: proto::WatchRequest {
                session_id: self.id().to_string(),
                path: path.to_string(),
                ..Default::default()
            },
        }
    }

    /// Up to `max` events after `since_seq` (0: the server's default cap).
    pub async fn changes(&self, since_seq: u64, max: u32) -> Result<ChangesResponse> {
        let request = self.request(proto::ChangesRequest {
            session_id: self.id().to_string(),
            since_seq,
            max,
        });
        Ok(self.stub().changes(request).await?.into_inner())
    }
}
