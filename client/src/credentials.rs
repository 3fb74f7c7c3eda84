//! [`Credentials`]: who a call says it comes from, as gRPC metadata. Both
//! the [`Client`](crate::Client) and each [`Session`](crate::Session)
//! carry one; it lives apart from both so neither depends on the other.

use tonic::metadata::{Ascii, MetadataValue};
use wsfs::{Error, Result};

/// The metadata that says who is calling.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    header: Option<(&'static str, MetadataValue<Ascii>)>,
    /// The session the token names ([`wsfs::token::session_of`]): the
    /// route of a call that names no session of its own.
    token_session: Option<MetadataValue<Ascii>>,
}

/// Names the header only: a token must not reach logs through `{:?}`.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.header {
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
        Ok(Credentials {
            header: Some(("authorization", value)),
            token_session: wsfs::token::session_of(token).and_then(|id| id.parse().ok()),
        })
    }

    pub(crate) fn caller(caller: &str) -> Result<Credentials> {
        let value = caller.parse().map_err(|_| {
            Error::invalid_argument(format!(
                "caller name '{caller}' must be printable ASCII to travel as gRPC metadata"
            ))
        })?;
        Ok(Credentials {
            header: Some(("x-wsfs-caller", value)),
            token_session: None,
        })
    }

    /// Wraps a message that names no session (ListSessions) in a request
    /// carrying these credentials, routed as [`wsfs::SESSION_HEADER`] by
    /// the session the token names, if it names one.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some((key, value)) = &self.header {
            request.metadata_mut().insert(*key, value.clone());
        }
        if let Some(session) = &self.token_session {
            request
                .metadata_mut()
                .insert(wsfs::SESSION_HEADER, session.clone());
        }
        request
    }

    /// Wraps a message about session `session_id` in a request carrying
    /// these credentials and the session's id as [`wsfs::SESSION_HEADER`],
    /// which a proxy in front of several servers routes by. An empty id
    /// (a GetSession asking which session the token opens) is routed by
    /// the session the token names. An id that cannot travel as metadata
    /// names no session: it goes unrouted, and the server says the session
    /// does not exist.
    pub(crate) fn session_request<T>(&self, session_id: &str, message: T) -> tonic::Request<T> {
        let mut request = self.request(message);
        if session_id.is_empty() {
            return request;
        }
        match session_id.parse::<MetadataValue<Ascii>>() {
            Ok(value) => {
                request.metadata_mut().insert(wsfs::SESSION_HEADER, value);
            }
            Err(_) => {
                request.metadata_mut().remove(wsfs::SESSION_HEADER);
            }
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

    const ID: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    const OTHER: &str = "0f9e8d7c-6b5a-4c3d-8e1f-a0b1c2d3e4f5";

    fn session_token(id: &str) -> String {
        wsfs::token::session_token(id, &[1; wsfs::token::SECRET_BYTES])
    }

    #[test]
    fn a_call_naming_no_session_is_routed_by_the_session_the_token_names() {
        let credentials = Credentials::token(&session_token(ID)).unwrap();
        for request in [credentials.request(()), credentials.session_request("", ())] {
            assert_eq!(request.metadata().get(wsfs::SESSION_HEADER).unwrap(), ID);
        }
    }

    #[test]
    fn a_session_named_by_the_call_routes_it_whatever_the_token_names() {
        let credentials = Credentials::token(&session_token(ID)).unwrap();
        let request = credentials.session_request(OTHER, ());
        let routes: Vec<_> = request
            .metadata()
            .get_all(wsfs::SESSION_HEADER)
            .iter()
            .collect();
        assert_eq!(routes, [OTHER]);
        let unroutable = credentials.session_request("bad\nid", ());
        assert!(unroutable.metadata().get(wsfs::SESSION_HEADER).is_none());
    }

    #[test]
    fn tokens_that_name_no_session_route_nothing() {
        for token in [format!("wsfs_{}", "ab".repeat(32)), "admin-secret".into()] {
            let request = Credentials::token(&token).unwrap().session_request("", ());
            assert!(request.metadata().get(wsfs::SESSION_HEADER).is_none());
        }
    }

    #[test]
    fn no_credentials_add_no_metadata() {
        assert!(Credentials::default().request(()).metadata().is_empty());
    }
}
