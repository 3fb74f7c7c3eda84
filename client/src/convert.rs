//! The translation of this crate's own `SessionOptions` builder to the
//! generated `CreateSessionRequest`. Every message of the `wsfs` crate's
//! types (a session's `SessionInfo` among them) translates in `wsfs::wire`.
//!
//! Requests are built from values the caller controls, so a value the wire
//! cannot carry is `INVALID_ARGUMENT`. Responses come from the server, so a
//! value that breaks the protocol is `INTERNAL`, never a panic.

use crate::sessions::SessionOptions;
use std::time::Duration;
use wsfs::proto;
use wsfs::wire::utf8_path;
use wsfs::Result;

/// Whole seconds, rounded up so a sub-second TTL is not "none".
fn ttl_seconds(ttl: Duration) -> u64 {
    ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)
}

pub(crate) fn create_session_request(o: SessionOptions) -> Result<proto::CreateSessionRequest> {
    Ok(proto::CreateSessionRequest {
        backend: proto::session::Backend::from(o.backend).into(),
        root: match &o.root {
            Some(root) => utf8_path("root", root)?,
            None => String::new(),
        },
        mounts: o
            .mounts
            .into_iter()
            .map(proto::HostMount::try_from)
            .collect::<Result<_>>()?,
        seed_files: o.seed_files.into_iter().collect(),
        read_only: o.read_only,
        limits: Some(o.limits.into()),
        layout: proto::session::Layout::from(o.layout).into(),
        labels: o.labels.into_iter().collect(),
        idle_ttl_seconds: o.idle_ttl.map(ttl_seconds).unwrap_or(0),
        container: o.container.map(Into::into),
        // Chosen here, not by the server, so that the creation carries the
        // id a proxy routes every later call of the session by.
        session_id: o.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        from_snapshot: o.from_snapshot.map(proto::SnapshotRef::from),
        owner: o.owner.map(Into::into),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::{Backend, Layout, SessionInfo};
    use crate::{Permissions, SessionLimits};
    use bytes::Bytes;
    use std::path::PathBuf;
    use std::time::UNIX_EPOCH;
    use tonic::Code;
    use wsfs::HostMount;

    #[test]
    fn session_options_map_to_create_request() {
        let options = SessionOptions::directory()
            .root("/srv/ws")
            .read_only(true)
            .seed_file("a.txt", "hello")
            .max_write_bytes(1024)
            .label("team", "infra")
            .layout(Layout::Swarm)
            .mount(HostMount::new("/data/src", "src").include("**/*.rs"))
            .idle_ttl(Duration::from_millis(1500));
        let r = create_session_request(options).unwrap();
        assert_eq!(r.backend, proto::session::Backend::Directory as i32);
        assert_eq!(r.root, "/srv/ws");
        assert!(r.read_only);
        assert_eq!(r.seed_files["a.txt"], Bytes::from("hello"));
        assert_eq!(r.limits.unwrap().max_write_bytes, 1024);
        assert_eq!(r.labels["team"], "infra");
        assert_eq!(r.layout, proto::session::Layout::Swarm as i32);
        assert_eq!(r.mounts[0].host_path, "/data/src");
        assert_eq!(r.mounts[0].include_glob, vec!["**/*.rs".to_string()]);
        assert_eq!(r.idle_ttl_seconds, 2, "sub-second TTLs round up");
    }

    #[test]
    fn default_session_options_are_a_memory_session() {
        let r = create_session_request(SessionOptions::memory()).unwrap();
        assert_eq!(r.backend, proto::session::Backend::Memory as i32);
        assert_eq!(r.root, "");
        assert_eq!(r.idle_ttl_seconds, 0);
    }

    #[test]
    fn every_creation_chooses_a_fresh_uuid_v4_for_its_session() {
        let a = create_session_request(SessionOptions::memory()).unwrap();
        let b = create_session_request(SessionOptions::memory()).unwrap();
        assert_ne!(a.session_id, b.session_id);
        let parsed = uuid::Uuid::try_parse(&a.session_id).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.hyphenated().to_string(), a.session_id);
    }

    #[test]
    fn a_chosen_session_id_is_sent_as_given() {
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let r = create_session_request(SessionOptions::memory().id(id)).unwrap();
        assert_eq!(r.session_id, id);
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_root_is_invalid_argument() {
        use std::os::unix::ffi::OsStrExt;
        let root = std::ffi::OsStr::from_bytes(b"/srv/\xff");
        let err = create_session_request(SessionOptions::directory().root(root)).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[test]
    fn session_maps_to_info() {
        let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let info = SessionInfo::try_from(proto::Session {
            session_id: "0f0e".into(),
            backend: proto::session::Backend::Directory as i32,
            root_path: "/var/lib/wsfs/0f0e".into(),
            created_at: Some(created.into()),
            limits: Some(proto::SessionLimits {
                max_write_bytes: 10,
                ..Default::default()
            }),
            read_only: true,
            layout: proto::session::Layout::Flat as i32,
            labels: [("k".to_string(), "v".to_string())].into(),
            idle_ttl_seconds: 60,
            token: "tok".into(),
            last_active_at: Some((created + Duration::from_secs(5)).into()),
            open_streams: 2,
            usage: Some(proto::SessionUsage {
                files: 3,
                bytes: 40,
            }),
            container: None,
            forked_from: Some(proto::SnapshotRef {
                session_id: "a1".into(),
                snapshot_id: "b2".into(),
            }),
            owner: Some(proto::FileOwner {
                uid: 1000,
                gid: 1001,
                file_permissions: 0o640,
                directory_permissions: 0o750,
            }),
            served_by: "replica-1".into(),
            served_elsewhere: true,
        })
        .unwrap();
        assert_eq!(info.id, "0f0e");
        assert_eq!(info.served_by.as_deref(), Some("replica-1"));
        assert!(info.served_elsewhere);
        assert_eq!(
            info.usage,
            Some(crate::SessionUsage {
                files: 3,
                bytes: 40
            })
        );
        assert_eq!(info.last_active_at, Some(created + Duration::from_secs(5)));
        assert_eq!(info.open_streams, 2);
        let origin = info.forked_from.as_ref().unwrap();
        assert_eq!((&*origin.session_id, &*origin.snapshot_id), ("a1", "b2"));
        assert_eq!(info.backend, Backend::Directory);
        assert_eq!(info.root_path, Some(PathBuf::from("/var/lib/wsfs/0f0e")));
        assert_eq!(info.created_at, created);
        assert_eq!(info.limits.max_write_bytes, 10);
        assert!(info.read_only);
        assert_eq!(info.labels["k"], "v");
        assert_eq!(info.idle_ttl, Some(Duration::from_secs(60)));
        assert_eq!(info.token.as_deref(), Some("tok"));
        let owner = info.owner.unwrap();
        assert_eq!((owner.uid, owner.gid), (1000, 1001));
        assert_eq!(owner.file_permissions.map(Permissions::bits), Some(0o640));
        assert_eq!(
            owner.directory_permissions.map(Permissions::bits),
            Some(0o750)
        );
    }

    #[test]
    fn memory_session_has_no_root_ttl_or_token() {
        let info = SessionInfo::try_from(proto::Session {
            session_id: "id".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(info.backend, Backend::Memory);
        assert_eq!(info.root_path, None);
        assert_eq!(info.idle_ttl, None);
        assert_eq!(info.token, None);
        assert_eq!(info.usage, None);
        assert_eq!(info.limits, SessionLimits::default());
        assert_eq!(info.container, None);
    }

    #[test]
    fn container_sessions_carry_their_container_both_ways() {
        let request =
            create_session_request(SessionOptions::container("podman", "web", "/srv")).unwrap();
        assert_eq!(request.backend, proto::session::Backend::Container as i32);
        let spec = request.container.clone().unwrap();
        assert_eq!(
            (spec.runtime.as_str(), spec.name.as_str()),
            ("podman", "web")
        );
        let info = SessionInfo::try_from(proto::Session {
            backend: proto::session::Backend::Container as i32,
            container: Some(spec),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(info.backend, Backend::Container);
        let container = info.container.unwrap();
        assert_eq!(container.workdir, "/srv");
    }
}
