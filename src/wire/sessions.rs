//! The `wsfs.v1.Sessions` service's messages and the [`crate::session`]
//! types, both ways: what a session is ([`SessionInfo`], with its
//! container, owner and usage), what its creation asks for (backend,
//! layout, host mounts, limits), its snapshots and what a restore put back,
//! so that the server builds and the client reads the same value.
//!
//! A conversion that can fail on the wire (an unknown enum value, a
//! negative count) returns `None` or a plain error here; which gRPC code
//! that is depends on the side: a request the server cannot read is the
//! caller's `INVALID_ARGUMENT`, an answer the client cannot read (an
//! unknown backend or layout, bits above `0o777`, a negative count) is the
//! server's fault: `INTERNAL`.

use super::{server_count, server_permissions, system_time, timestamp, utf8_path, wire_count};
use crate::{proto, BackendKind, Error, Layout, Permissions, Result};
use crate::{ContainerSpec, FileOwner, SessionInfo, SessionUsage};
use crate::{HostMount, RequestedLimits, Restored, SnapshotInfo, SnapshotRef};
use std::path::PathBuf;
use std::time::Duration;

impl From<ContainerSpec> for proto::ContainerSpec {
    fn from(c: ContainerSpec) -> Self {
        proto::ContainerSpec {
            runtime: c.runtime,
            name: c.name,
            workdir: c.workdir,
        }
    }
}

impl From<proto::ContainerSpec> for ContainerSpec {
    fn from(c: proto::ContainerSpec) -> Self {
        ContainerSpec {
            runtime: c.runtime,
            name: c.name,
            workdir: c.workdir,
        }
    }
}

/// Bits left to the server's defaults travel as 0.
impl From<FileOwner> for proto::FileOwner {
    fn from(o: FileOwner) -> Self {
        proto::FileOwner {
            uid: o.uid,
            gid: o.gid,
            file_permissions: o.file_permissions.map_or(0, Permissions::bits),
            directory_permissions: o.directory_permissions.map_or(0, Permissions::bits),
        }
    }
}

/// The owner a session reports, with the bits the server applies.
impl TryFrom<proto::FileOwner> for FileOwner {
    type Error = Error;

    fn try_from(o: proto::FileOwner) -> Result<Self> {
        Ok(FileOwner {
            uid: o.uid,
            gid: o.gid,
            file_permissions: Some(server_permissions(o.file_permissions)?),
            directory_permissions: Some(server_permissions(o.directory_permissions)?),
        })
    }
}

impl From<SessionUsage> for proto::SessionUsage {
    fn from(u: SessionUsage) -> Self {
        proto::SessionUsage {
            files: u.files,
            bytes: u.bytes,
        }
    }
}

impl From<proto::SessionUsage> for SessionUsage {
    fn from(u: proto::SessionUsage) -> Self {
        SessionUsage {
            files: u.files,
            bytes: u.bytes,
        }
    }
}

impl From<SessionInfo> for proto::Session {
    fn from(s: SessionInfo) -> Self {
        proto::Session {
            session_id: s.id,
            backend: proto::session::Backend::from(s.backend).into(),
            root_path: s
                .root_path
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            created_at: timestamp(s.created_at),
            limits: Some(s.limits.into()),
            read_only: s.read_only,
            layout: proto::session::Layout::from(s.layout).into(),
            labels: s.labels.into_iter().collect(),
            idle_ttl_seconds: s.idle_ttl.map_or(0, |ttl| ttl.as_secs()),
            token: s.token.unwrap_or_default(),
            last_active_at: s.last_active_at.and_then(timestamp),
            open_streams: s.open_streams,
            container: s.container.map(Into::into),
            forked_from: s.forked_from.map(Into::into),
            owner: s.owner.map(Into::into),
            usage: s.usage.map(Into::into),
            served_by: s.served_by.unwrap_or_default(),
            served_elsewhere: s.served_elsewhere,
        }
    }
}

/// Empty strings and a zero TTL are "none".
impl TryFrom<proto::Session> for SessionInfo {
    type Error = Error;

    fn try_from(s: proto::Session) -> Result<Self> {
        let backend = BackendKind::from_wire(s.backend).ok_or_else(|| {
            Error::internal(format!(
                "the server sent an unknown session backend ({})",
                s.backend
            ))
        })?;
        let layout = Layout::from_wire(s.layout).ok_or_else(|| {
            Error::internal(format!(
                "the server sent an unknown session layout ({})",
                s.layout
            ))
        })?;
        Ok(SessionInfo {
            id: s.session_id,
            backend,
            root_path: (!s.root_path.is_empty()).then(|| PathBuf::from(s.root_path)),
            created_at: system_time(s.created_at),
            read_only: s.read_only,
            limits: s.limits.map(Into::into).unwrap_or_default(),
            layout,
            labels: s.labels.into_iter().collect(),
            idle_ttl: (s.idle_ttl_seconds > 0).then(|| Duration::from_secs(s.idle_ttl_seconds)),
            token: (!s.token.is_empty()).then_some(s.token),
            last_active_at: s.last_active_at.map(|t| system_time(Some(t))),
            open_streams: s.open_streams,
            usage: s.usage.map(Into::into),
            container: s.container.map(Into::into),
            forked_from: s.forked_from.map(Into::into),
            owner: s.owner.map(FileOwner::try_from).transpose()?,
            served_by: (!s.served_by.is_empty()).then_some(s.served_by),
            served_elsewhere: s.served_elsewhere,
        })
    }
}

impl BackendKind {
    /// The backend a wire value names; `None` for a value this version
    /// does not know.
    pub fn from_wire(value: i32) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|b| *b as i32 == value)
    }
}

impl From<proto::session::Backend> for BackendKind {
    fn from(b: proto::session::Backend) -> Self {
        BackendKind::from_wire(b as i32).expect("every wire backend is a BackendKind")
    }
}

impl From<BackendKind> for proto::session::Backend {
    fn from(b: BackendKind) -> Self {
        proto::session::Backend::try_from(b as i32).expect("every BackendKind is a wire backend")
    }
}

impl Layout {
    /// The layout a wire value names; `None` for a value this version does
    /// not know.
    pub fn from_wire(value: i32) -> Option<Layout> {
        proto::session::Layout::try_from(value).ok().map(Into::into)
    }
}

impl From<proto::session::Layout> for Layout {
    fn from(l: proto::session::Layout) -> Self {
        match l {
            proto::session::Layout::Flat => Layout::Flat,
            proto::session::Layout::Swarm => Layout::Swarm,
        }
    }
}

impl From<Layout> for proto::session::Layout {
    fn from(l: Layout) -> Self {
        match l {
            Layout::Flat => proto::session::Layout::Flat,
            Layout::Swarm => proto::session::Layout::Swarm,
        }
    }
}

impl From<proto::HostMount> for HostMount {
    fn from(m: proto::HostMount) -> Self {
        HostMount {
            host_path: m.host_path.into(),
            mount_path: m.mount_path,
            include_glob: m.include_glob,
            exclude_glob: m.exclude_glob,
            max_bytes: m.max_bytes,
            follow_symlinks: m.follow_symlinks,
        }
    }
}

/// A host path that is not UTF-8 cannot be sent: `INVALID_ARGUMENT`.
impl TryFrom<HostMount> for proto::HostMount {
    type Error = Error;

    fn try_from(m: HostMount) -> Result<Self> {
        Ok(proto::HostMount {
            host_path: utf8_path("host path", &m.host_path)?,
            mount_path: m.mount_path,
            include_glob: m.include_glob,
            exclude_glob: m.exclude_glob,
            max_bytes: m.max_bytes,
            follow_symlinks: m.follow_symlinks,
        })
    }
}

impl From<proto::SessionLimits> for RequestedLimits {
    fn from(l: proto::SessionLimits) -> Self {
        RequestedLimits {
            max_write_bytes: l.max_write_bytes,
            max_path_depth: l.max_path_depth,
            max_segment_length: l.max_segment_length,
            max_files: l.max_files,
            max_total_bytes: l.max_total_bytes,
        }
    }
}

impl From<RequestedLimits> for proto::SessionLimits {
    fn from(l: RequestedLimits) -> Self {
        proto::SessionLimits {
            max_write_bytes: l.max_write_bytes,
            max_path_depth: l.max_path_depth,
            max_segment_length: l.max_segment_length,
            max_files: l.max_files,
            max_total_bytes: l.max_total_bytes,
        }
    }
}

impl From<proto::SnapshotRef> for SnapshotRef {
    fn from(r: proto::SnapshotRef) -> Self {
        SnapshotRef {
            session_id: r.session_id,
            snapshot_id: r.snapshot_id,
        }
    }
}

impl From<SnapshotRef> for proto::SnapshotRef {
    fn from(r: SnapshotRef) -> Self {
        proto::SnapshotRef {
            session_id: r.session_id,
            snapshot_id: r.snapshot_id,
        }
    }
}

impl From<&SnapshotInfo> for proto::SnapshotInfo {
    fn from(i: &SnapshotInfo) -> Self {
        proto::SnapshotInfo {
            snapshot_id: i.id.clone(),
            tag: i.tag.clone(),
            created_at: timestamp(i.created_at),
            file_count: wire_count(i.file_count),
            total_bytes: wire_count(i.total_bytes),
        }
    }
}

/// A negative count is the server's fault: `INTERNAL`.
impl TryFrom<proto::SnapshotInfo> for SnapshotInfo {
    type Error = Error;

    fn try_from(p: proto::SnapshotInfo) -> Result<Self> {
        Ok(SnapshotInfo {
            file_count: server_count("file_count", p.file_count)?,
            total_bytes: server_count("total_bytes", p.total_bytes)?,
            created_at: system_time(p.created_at),
            id: p.snapshot_id,
            tag: p.tag,
        })
    }
}

impl From<Restored> for proto::RestoreResponse {
    fn from(r: Restored) -> Self {
        proto::RestoreResponse {
            file_count: wire_count(r.file_count),
            total_bytes: wire_count(r.total_bytes),
            // The restored path is the service's to say.
            path: String::new(),
        }
    }
}

/// A negative count is the server's fault: `INTERNAL`.
impl TryFrom<proto::RestoreResponse> for Restored {
    type Error = Error;

    fn try_from(r: proto::RestoreResponse) -> Result<Self> {
        Ok(Restored {
            file_count: server_count("file_count", r.file_count)?,
            total_bytes: server_count("total_bytes", r.total_bytes)?,
        })
    }
}

impl From<Restored> for proto::ImportArchiveResponse {
    fn from(r: Restored) -> Self {
        proto::ImportArchiveResponse {
            file_count: wire_count(r.file_count),
            total_bytes: wire_count(r.total_bytes),
        }
    }
}

/// A negative count is the server's fault: `INTERNAL`.
impl TryFrom<proto::ImportArchiveResponse> for Restored {
    type Error = Error;

    fn try_from(r: proto::ImportArchiveResponse) -> Result<Self> {
        Ok(Restored {
            file_count: server_count("file_count", r.file_count)?,
            total_bytes: server_count("total_bytes", r.total_bytes)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestedLimits, SnapshotRef};
    use std::time::UNIX_EPOCH;
    use tonic::Code;

    fn container() -> ContainerSpec {
        ContainerSpec {
            runtime: "podman".into(),
            name: "web".into(),
            workdir: "/srv".into(),
        }
    }

    fn owner() -> FileOwner {
        FileOwner {
            uid: 1000,
            gid: 1001,
            file_permissions: Some(Permissions::new(0o640).unwrap()),
            directory_permissions: Some(Permissions::new(0o750).unwrap()),
        }
    }

    fn full_session() -> SessionInfo {
        let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        SessionInfo {
            id: "67e55044-10b1-426f-9247-bb680e5fe0c8".into(),
            backend: BackendKind::Directory,
            root_path: Some(PathBuf::from("/var/lib/wsfs/0f0e")),
            created_at: created,
            read_only: true,
            limits: RequestedLimits {
                max_write_bytes: 10,
                max_path_depth: 4,
                max_segment_length: 20,
                max_files: 5,
                max_total_bytes: 600,
            },
            layout: Layout::Swarm,
            labels: [("k".to_string(), "v".to_string())].into(),
            idle_ttl: Some(Duration::from_secs(60)),
            token: Some("tok".into()),
            last_active_at: Some(created + Duration::from_millis(5_250)),
            open_streams: 2,
            usage: Some(SessionUsage {
                files: 3,
                bytes: 40,
            }),
            container: Some(container()),
            forked_from: Some(SnapshotRef {
                session_id: "a1".into(),
                snapshot_id: "b2".into(),
            }),
            owner: Some(owner()),
            served_by: Some("replica-1".into()),
            served_elsewhere: true,
        }
    }

    #[test]
    fn a_session_round_trips_with_every_field_set() {
        let info = full_session();
        let wire = proto::Session::from(info.clone());
        assert_eq!(SessionInfo::try_from(wire).unwrap(), info);
    }

    #[test]
    fn a_bare_session_round_trips_with_its_nones() {
        let info = SessionInfo {
            created_at: UNIX_EPOCH + Duration::from_secs(1),
            ..SessionInfo::named("id")
        };
        let wire = proto::Session::from(info.clone());
        assert_eq!(wire.token, "");
        assert_eq!(wire.idle_ttl_seconds, 0);
        assert_eq!(SessionInfo::try_from(wire).unwrap(), info);
    }

    #[test]
    fn a_session_the_client_cannot_read_is_internal() {
        for wire in [
            proto::Session {
                backend: 99,
                ..Default::default()
            },
            proto::Session {
                layout: 99,
                ..Default::default()
            },
            proto::Session {
                owner: Some(proto::FileOwner {
                    file_permissions: 0o4755,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ] {
            let err = SessionInfo::try_from(wire).unwrap_err();
            assert_eq!(err.code(), Code::Internal, "{err}");
        }
    }

    #[test]
    fn container_specs_round_trip() {
        let wire = proto::ContainerSpec::from(container());
        assert_eq!(ContainerSpec::from(wire), container());
    }

    #[test]
    fn owners_round_trip_and_default_bits_travel_as_zero() {
        let wire = proto::FileOwner::from(owner());
        assert_eq!(FileOwner::try_from(wire).unwrap(), owner());
        let defaults = proto::FileOwner::from(FileOwner {
            file_permissions: None,
            directory_permissions: None,
            ..owner()
        });
        assert_eq!(
            (defaults.file_permissions, defaults.directory_permissions),
            (0, 0)
        );
    }

    #[test]
    fn usage_round_trips() {
        let usage = SessionUsage {
            files: 7,
            bytes: 1 << 40,
        };
        assert_eq!(SessionUsage::from(proto::SessionUsage::from(usage)), usage);
    }
}
