//! [`Client`]: the connection, and the Sessions service.

use crate::convert;
use crate::credentials::Credentials;
use crate::session::Session;
use crate::sessions::{SessionInfo, SessionOptions};
use std::collections::BTreeMap;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use wsfs::proto;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::{Error, Result};

/// Sessions asked for per ListSessions call when listing them all.
pub const LIST_PAGE: u32 = wsfs::MAX_SESSION_PAGE;

/// Which sessions [`Client::query_sessions`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionQuery {
    /// Only sessions carrying every one of these labels, with these values.
    pub labels: BTreeMap<String, String>,
    /// Count each listed session's files and bytes (a walk of each
    /// workspace).
    pub usage: bool,
    /// Only the sessions the server reached holds, not the other
    /// replicas' it knows from a shared object store.
    pub local_only: bool,
}

pub use wsfs::MAX_MESSAGE_BYTES;

/// A caller's bearer token, as [`Client::issue_token`] returns it.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// Sent as `authorization: Bearer <token>`.
    pub token: String,
    /// The caller the token speaks for, as the server recorded it.
    pub caller: String,
}

/// Keeps the token out of logs and panic messages.
impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("token", &"<redacted>")
            .field("caller", &self.caller)
            .finish()
    }
}

/// A connection to a wsfs server. Cloning is cheap: clones share one
/// HTTP/2 channel.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) sessions: SessionsClient<Channel>,
    filesystem: FilesystemClient<Channel>,
    pub(crate) credentials: Credentials,
}

/// The connection settings every client of this crate uses, for `url`:
/// HTTP/2 frames of [`wsfs::HTTP2_MAX_FRAME_BYTES`], so that a download's
/// chunks arrive whole rather than in 16 KiB pieces. Build a channel on it
/// and pass it to [`Client::from_channel`] to add settings of your own.
pub fn endpoint(url: &str) -> Result<Endpoint> {
    Endpoint::from_shared(url.to_string())
        .map(|e| e.max_frame_size(wsfs::HTTP2_MAX_FRAME_BYTES))
        .map_err(|e| Error::invalid_argument(format!("'{url}' is not a valid server address: {e}")))
}

impl Client {
    /// Connects to a server, e.g. `"http://127.0.0.1:50051"`. An
    /// `https://` URL speaks TLS and trusts the system's certificate
    /// authorities; for a private CA or a self-signed server use
    /// [`Client::connect_with_tls`].
    pub async fn connect(url: &str) -> Result<Client> {
        let mut endpoint = endpoint(url)?;
        if url.starts_with("https://") {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_native_roots())
                .map_err(|e| Error::invalid_argument(format!("TLS setup for {url} failed: {e}")))?;
        }
        let channel = endpoint.connect().await.map_err(|e| Error::Unavailable {
            message: format!("cannot connect to {url}: {}", error_chain(&e)),
        })?;
        Ok(Client::from_channel(channel))
    }

    /// Connects over TLS, e.g. `"https://wsfs.example:50051"`, trusting the
    /// server certificates signed by `ca_pem` (PEM; the server's own
    /// certificate when it is self-signed). The certificate must name the
    /// URL's host.
    pub async fn connect_with_tls(url: &str, ca_pem: &[u8]) -> Result<Client> {
        let endpoint = endpoint(url)?
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem)))
            .map_err(|e| Error::invalid_argument(format!("TLS setup for {url} failed: {e}")))?;
        let channel = endpoint.connect().await.map_err(|e| Error::Unavailable {
            message: format!("cannot connect to {url}: {}", error_chain(&e)),
        })?;
        Ok(Client::from_channel(channel))
    }

    /// A client over a channel built elsewhere (TLS, a lazy connection, an
    /// in-process transport).
    pub fn from_channel(channel: Channel) -> Client {
        Client {
            sessions: SessionsClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            filesystem: FilesystemClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            credentials: Credentials::default(),
        }
    }

    /// Sends `authorization: Bearer <token>` with every call, from this
    /// client and the sessions it opens.
    pub fn with_token(mut self, token: &str) -> Result<Client> {
        self.credentials = Credentials::token(token)?;
        Ok(self)
    }

    /// Names the caller with `x-wsfs-caller` (servers with tokens off).
    pub fn with_caller(mut self, caller: &str) -> Result<Client> {
        self.credentials = Credentials::caller(caller)?;
        Ok(self)
    }

    pub async fn create_session(&self, options: SessionOptions) -> Result<SessionInfo> {
        let request = convert::create_session_request(options)?;
        let response = self
            .sessions
            .clone()
            .create_session(self.credentials.about(request))
            .await?;
        SessionInfo::try_from(response.into_inner())
    }

    /// Creates a session and opens it; the handle carries the session's
    /// token when the server issued one.
    pub async fn create(&self, options: SessionOptions) -> Result<(Session, SessionInfo)> {
        let info = self.create_session(options).await?;
        let session = match &info.token {
            Some(token) => self.session(&info.id).with_token(token)?,
            None => self.session(&info.id),
        };
        Ok((session, info))
    }

    pub async fn get_session(&self, id: &str) -> Result<SessionInfo> {
        let request = proto::GetSessionRequest {
            session_id: id.to_string(),
        };
        let response = self
            .sessions
            .clone()
            .get_session(self.credentials.about(request))
            .await?;
        SessionInfo::try_from(response.into_inner())
    }

    /// The version the server names in its answers
    /// ([`wsfs::SERVER_VERSION_HEADER`]); `None` from a server that names
    /// none. One GetSession naming no session: its refusal carries the
    /// header as well as an answer would.
    pub async fn server_version(&self) -> Result<Option<String>> {
        let request = proto::GetSessionRequest {
            session_id: String::new(),
        };
        let called = self
            .sessions
            .clone()
            .get_session(self.credentials.about(request))
            .await;
        let metadata = match &called {
            Ok(response) => response.metadata(),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                return Err(status.clone().into())
            }
            Err(status) => status.metadata(),
        };
        Ok(metadata
            .get(wsfs::SERVER_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string))
    }

    /// The session this client's token opens (a GetSession naming none):
    /// how a holder of nothing but a session's token finds its session.
    /// The admin token, or no token, names no session: `InvalidArgument`.
    pub async fn token_session(&self) -> Result<SessionInfo> {
        self.get_session("").await
    }

    /// Every session of the server. With replicas sharing an object store
    /// (through a proxy in front of them, say), every replica's sessions,
    /// each naming the replica that serves it ([`SessionInfo::served_by`]).
    pub async fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        self.list_sessions_labelled(&BTreeMap::new(), false).await
    }

    /// The sessions carrying every label of `labels` (key and value), in
    /// session-id order, fetched a page of [`LIST_PAGE`] at a time, or of
    /// [`wsfs::MAX_USAGE_PAGE`] with `usage` (each session's files and bytes
    /// counted: a walk of every workspace on the server).
    pub async fn list_sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
        usage: bool,
    ) -> Result<Vec<SessionInfo>> {
        self.query_sessions(&SessionQuery {
            labels: labels.clone(),
            usage,
            local_only: false,
        })
        .await
    }

    /// The sessions `query` asks for, in session-id order, fetched a page
    /// at a time (see [`Client::list_sessions_labelled`]).
    pub async fn query_sessions(&self, query: &SessionQuery) -> Result<Vec<SessionInfo>> {
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = proto::ListSessionsRequest {
                labels: query
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                page_size: if query.usage {
                    wsfs::MAX_USAGE_PAGE
                } else {
                    LIST_PAGE
                },
                page_token,
                include_usage: query.usage,
                local_only: query.local_only,
            };
            let page = self
                .sessions
                .clone()
                .list_sessions(self.credentials.request(request))
                .await?
                .into_inner();
            for s in page.sessions {
                all.push(SessionInfo::try_from(s)?);
            }
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }

    /// Removes the session and everything it owns; returns how many files
    /// went with it.
    pub async fn delete_session(&self, id: &str) -> Result<u64> {
        let request = proto::DeleteSessionRequest {
            session_id: id.to_string(),
        };
        let response = self
            .sessions
            .clone()
            .delete_session(self.credentials.about(request))
            .await?;
        wsfs::wire::server_count("files_deleted", response.into_inner().files_deleted)
    }

    /// Recreates on the server this client reaches the DIRECTORY session
    /// `id` from the server's object store, as its snapshot `snapshot`
    /// holds it (`None`: its latest there). Refused with `SESSION_LEASED`
    /// while another server's lease on it is live, unless `force`.
    pub async fn recover_session(
        &self,
        id: &str,
        snapshot: Option<&str>,
        force: bool,
    ) -> Result<SessionInfo> {
        let request = proto::RecoverSessionRequest {
            session_id: id.to_string(),
            snapshot_id: snapshot.unwrap_or_default().to_string(),
            force,
        };
        let response = self
            .sessions
            .clone()
            .recover_session(self.credentials.about(request))
            .await?;
        SessionInfo::try_from(response.into_inner())
    }

    /// A token for `caller` in session `id` (this client must carry the
    /// admin token or the session's system token). Callers are named
    /// `[a-z0-9_-]{1,64}`, never `system`.
    pub async fn issue_token(&self, id: &str, caller: &str) -> Result<IssuedToken> {
        let request = proto::IssueTokenRequest {
            session_id: id.to_string(),
            caller: caller.to_string(),
        };
        let response = self
            .sessions
            .clone()
            .issue_token(self.credentials.about(request))
            .await?
            .into_inner();
        Ok(IssuedToken {
            token: response.token,
            caller: response.caller,
        })
    }

    /// A handle on an existing session. Nothing is sent until it is used.
    pub fn session(&self, id: impl Into<String>) -> Session {
        Session::new(
            id.into(),
            self.filesystem.clone(),
            self.sessions.clone(),
            self.credentials.clone(),
        )
    }

    /// The generated Sessions stub, for what the typed API cannot say (a
    /// test that sends a malformed request, say). Carries no credentials.
    pub fn raw_sessions(&self) -> SessionsClient<Channel> {
        self.sessions.clone()
    }

    /// The generated Filesystem stub, for what the typed API cannot say.
    /// Carries no credentials.
    pub fn raw_filesystem(&self) -> FilesystemClient<Channel> {
        self.filesystem.clone()
    }
}

/// A transport error with its causes: tonic's own text is often just
/// "transport error".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // Layers often repeat their cause in their own message: say it once.
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[tokio::test]
    async fn malformed_url_is_invalid_argument() {
        let err = Client::connect("not a url").await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn unreachable_server_is_unavailable() {
        // Port 9 (discard) on loopback: nothing listens there in a test box.
        let err = Client::connect("http://127.0.0.1:9").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
    }
}
