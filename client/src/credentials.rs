//! [`Credentials`]: who a call says it comes from, as gRPC metadata. Both
//! the [`Client`](crate::Client) and each [`Session`](crate::Session)
//! carry one; it lives apart from both so neither depends on the other.

use tonic::metadata::{Ascii, MetadataValue};
use wsfs::{Error, Result};

/// The metadata that says who is calling.
#[derive(Clone, Default)]
pub(crate) struct Credentials(Option<(&'static str, MetadataValue<Ascii>)>);

/// Names the header only: a token must not reach logs through `{:?}`.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some((key, _)) => write!(f, "Credentials({key}: <redacted>)"),
            None => f.write_str("Credentials(none)"),
        }
    }
}

impl Credentials {
    pub(crate) fn token(token: &str) -> Result<Credentials> {
        let value = format!("Bearer {token}").parse().map_err(|_| {
            Error::invalid_argument("a token must be printable ASCII to travel as gRPC metadata")
        })?;
        Ok(Credentials(Some(("authorization", value))))
    }

    pub(crate) fn caller(caller: &str) -> Result<Credentials> {
        let value = caller.parse().map_err(|_| {
            Error::invalid_argument(format!(
                "caller name '{caller}' must be printable ASCII to travel as gRPC metadata"
            ))
        })?;
        Ok(Credentials(Some(("x-wsfs-caller", value))))
    }

    /// Wraps a message that names no session (ListSessions) in a request
    /// carrying these credentials.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some((key, value)) = &self.0 {
            request.metadata_mut().insert(*key, value.clone());
        }
        request
    }

    /// Wraps a message about session `session_id` in a request carrying
    /// these credentials and the session's id as [`wsfs::SESSION_HEADER`],
    /// which a proxy in front of several servers routes by. An id that
    /// cannot travel as metadata names no session: it goes unrouted, and
    /// the server says the session does not exist.
    pub(crate) fn session_request<T>(&self, session_id: &str, message: T) -> tonic::Request<T> {
        let mut request = self.request(message);
        if let Ok(value) = session_id.parse::<MetadataValue<Ascii>>() {
            request.metadata_mut().insert(wsfs::SESSION_HEADER, value);
        }
        request
    }
}

/// A Sessions request about one session, named in its body.
pub(crate) trait AboutSession {
    fn session_id(&self) -> &str;
}

macro_rules! about_session {
    ($($message:ident),* $(,)?) => {
        $(impl AboutSession for wsfs::proto::$message {
            fn session_id(&self) -> &str {
                &self.session_id
            }
        })*
    };
}

about_session!(
    CreateSessionRequest,
    GetSessionRequest,
    DeleteSessionRequest,
    RecoverSessionRequest,
    IssueTokenRequest,
    SnapshotRequest,
    RestoreRequest,
    DiffSnapshotRequest,
    ReadSnapshotFileRequest,
    ListSnapshotsRequest,
    DeleteSnapshotRequest,
);

impl Credentials {
    /// [`Credentials::session_request`] for the session the message names.
    pub(crate) fn about<T: AboutSession>(&self, message: T) -> tonic::Request<T> {
        let id = message.session_id().to_string();
        self.session_request(&id, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn token_travels_as_bearer_authorization() {
        let request = Credentials::token("abc").unwrap().request(());
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer abc"
        );
    }

    #[test]
    fn caller_travels_as_x_wsfs_caller() {
        let request = Credentials::caller("agent-1").unwrap().request(());
        assert_eq!(request.metadata().get("x-wsfs-caller").unwrap(), "agent-1");
    }

    #[test]
    fn token_that_cannot_be_metadata_is_invalid_argument() {
        let err = Credentials::token("tok\nen").unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[test]
    fn debug_output_hides_the_token() {
        let shown = format!("{:?}", Credentials::token("s3cret").unwrap());
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn session_requests_carry_the_session_id_beside_the_credentials() {
        let request = Credentials::caller("agent-1")
            .unwrap()
            .session_request("67e55044-10b1-426f-9247-bb680e5fe0c8", ());
        assert_eq!(
            request.metadata().get(wsfs::SESSION_HEADER).unwrap(),
            "67e55044-10b1-426f-9247-bb680e5fe0c8"
        );
        assert_eq!(request.metadata().get("x-wsfs-caller").unwrap(), "agent-1");
    }

    #[test]
    fn a_session_id_that_cannot_be_metadata_goes_unrouted() {
        let request = Credentials::default().session_request("bad\nid", ());
        assert!(request.metadata().get(wsfs::SESSION_HEADER).is_none());
    }

    #[test]
    fn no_credentials_add_no_metadata() {
        assert!(Credentials::default().request(()).metadata().is_empty());
    }
}
