//! The calls that change the workspace: Write, WriteBytes, Edit, Delete,
//! Mkdir, Move, Copy, SetAttributes, Symlink.

use super::{request_path, Request};
use crate::wire::{
    request_permissions, request_time, server_count, server_path, server_permissions, system_time,
    timestamp, wire_count, wire_path,
};
use crate::{
    proto, Attributes, AttributesOutcome, CanonicalPath, DeleteOptions, EditOutcome, EditSpec,
    Error, Metadata, MkdirOptions, PatchOptions, PathLimits, Permissions, Result, SymlinkOptions,
    TransferOptions, Transferred, WriteMode, WriteOptions, WriteOutcome,
};
use bytes::Bytes;

// ------------------------------------------------------------ Write, upload

/// A Write's or WriteBytes' mode; PATCH, which only WriteBytes takes, is
/// `None`.
fn request_mode(mode: i32) -> Result<Option<WriteMode>> {
    match proto::WriteMode::try_from(mode) {
        Ok(proto::WriteMode::Overwrite) => Ok(Some(WriteMode::Overwrite)),
        Ok(proto::WriteMode::Create) => Ok(Some(WriteMode::Create)),
        Ok(proto::WriteMode::Append) => Ok(Some(WriteMode::Append)),
        Ok(proto::WriteMode::Patch) => Ok(None),
        Err(_) => Err(Error::invalid_argument(format!(
            "unknown write mode {mode}"
        ))),
    }
}

impl From<WriteMode> for proto::WriteMode {
    fn from(mode: WriteMode) -> Self {
        match mode {
            WriteMode::Overwrite => proto::WriteMode::Overwrite,
            WriteMode::Create => proto::WriteMode::Create,
            WriteMode::Append => proto::WriteMode::Append,
        }
    }
}

/// Write: a whole UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub session_id: String,
    pub path: CanonicalPath,
    pub content: String,
    /// `modified` is not carried: only the byte upload sets it.
    pub options: WriteOptions,
}

impl Request for Write {
    type Message = proto::WriteRequest;

    fn parse(r: proto::WriteRequest, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&r.path, limits)?;
        let mode = request_mode(r.mode)?.ok_or_else(|| {
            Error::invalid_argument("mode PATCH is for WriteBytes; Write replaces or appends")
        })?;
        let options = WriteOptions {
            mode,
            create_parents: r.create_parents.unwrap_or(true),
            if_version: r.if_version,
            permissions: request_permissions(r.permissions)?,
            modified: None,
        };
        Ok(Write {
            session_id: r.session_id,
            path,
            content: r.content,
            options,
        })
    }

    fn message(self) -> Result<proto::WriteRequest> {
        Ok(proto::WriteRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            content: self.content,
            mode: proto::WriteMode::from(self.options.mode).into(),
            create_parents: Some(self.options.create_parents),
            if_version: self.options.if_version,
            permissions: self.options.permissions.map(Permissions::bits),
        })
    }
}

impl From<WriteOutcome> for proto::WriteResponse {
    fn from(w: WriteOutcome) -> Self {
        proto::WriteResponse {
            path: wire_path(&w.path),
            bytes_written: wire_count(w.bytes_written),
            size_bytes: wire_count(w.size),
            version: w.version,
            created: w.created,
        }
    }
}

impl TryFrom<proto::WriteResponse> for WriteOutcome {
    type Error = Error;

    fn try_from(r: proto::WriteResponse) -> Result<Self> {
        Ok(WriteOutcome {
            path: server_path(&r.path)?,
            bytes_written: server_count("bytes_written", r.bytes_written)?,
            size: server_count("size_bytes", r.size_bytes)?,
            version: r.version,
            created: r.created,
        })
    }
}

/// The header of a WriteBytes upload: a whole file, or a patch of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    Write {
        session_id: String,
        path: CanonicalPath,
        options: WriteOptions,
    },
    Patch {
        session_id: String,
        path: CanonicalPath,
        options: PatchOptions,
    },
}

impl Request for Upload {
    type Message = proto::WriteBytesHeader;

    fn parse(h: proto::WriteBytesHeader, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&h.path, limits)?;
        let create_parents = h.create_parents.unwrap_or(true);
        let permissions = request_permissions(h.permissions)?;
        let modified = request_time("modified_at", h.modified_at)?;
        let Some(mode) = request_mode(h.mode)? else {
            return Ok(Upload::Patch {
                session_id: h.session_id,
                path,
                options: PatchOptions {
                    truncate_to: h.truncate_to,
                    create_missing: h.create_missing,
                    create_parents,
                    if_version: h.if_version,
                    permissions,
                    modified,
                },
            });
        };
        if h.truncate_to.is_some() || h.create_missing {
            return Err(Error::invalid_argument(
                "truncate_to and create_missing apply to mode PATCH only",
            ));
        }
        Ok(Upload::Write {
            session_id: h.session_id,
            path,
            options: WriteOptions {
                mode,
                create_parents,
                if_version: h.if_version,
                permissions,
                modified,
            },
        })
    }

    fn message(self) -> Result<proto::WriteBytesHeader> {
        Ok(match self {
            Upload::Write {
                session_id,
                path,
                options,
            } => proto::WriteBytesHeader {
                session_id,
                path: wire_path(&path),
                mode: proto::WriteMode::from(options.mode).into(),
                create_parents: Some(options.create_parents),
                if_version: options.if_version,
                permissions: options.permissions.map(Permissions::bits),
                modified_at: options.modified.map(prost_types::Timestamp::from),
                ..Default::default()
            },
            Upload::Patch {
                session_id,
                path,
                options,
            } => proto::WriteBytesHeader {
                session_id,
                path: wire_path(&path),
                mode: proto::WriteMode::Patch.into(),
                create_parents: Some(options.create_parents),
                if_version: options.if_version,
                permissions: options.permissions.map(Permissions::bits),
                modified_at: options.modified.map(prost_types::Timestamp::from),
                truncate_to: options.truncate_to,
                create_missing: options.create_missing,
            },
        })
    }
}

/// The first message of an upload.
impl From<proto::WriteBytesHeader> for proto::WriteBytesRequest {
    fn from(header: proto::WriteBytesHeader) -> Self {
        proto::WriteBytesRequest {
            payload: Some(proto::write_bytes_request::Payload::Header(header)),
        }
    }
}

/// A message of an upload after its header: bytes written at the current
/// position, or (PATCH only) a new position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadPart {
    Data(Bytes),
    Offset(u64),
}

impl From<UploadPart> for proto::WriteBytesRequest {
    fn from(part: UploadPart) -> Self {
        use proto::write_bytes_request::Payload;
        proto::WriteBytesRequest {
            payload: Some(match part {
                UploadPart::Data(data) => Payload::Data(data),
                UploadPart::Offset(offset) => Payload::Offset(offset),
            }),
        }
    }
}

/// A second header, or a message with nothing in it: `INVALID_ARGUMENT`.
impl TryFrom<proto::WriteBytesRequest> for UploadPart {
    type Error = Error;

    fn try_from(m: proto::WriteBytesRequest) -> Result<Self> {
        use proto::write_bytes_request::Payload;
        match m.payload {
            Some(Payload::Data(data)) => Ok(UploadPart::Data(data)),
            Some(Payload::Offset(offset)) => Ok(UploadPart::Offset(offset)),
            Some(Payload::Header(_)) | None => Err(Error::invalid_argument(
                "only the first WriteBytes message may be a header",
            )),
        }
    }
}

// ------------------------------------------------------------------- Edit

/// Edit: replace text in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub session_id: String,
    pub path: CanonicalPath,
    pub edit: EditSpec,
}

impl Request for Edit {
    type Message = proto::EditRequest;

    fn parse(r: proto::EditRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Edit {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
            edit: EditSpec {
                old_text: r.old_text,
                new_text: r.new_text,
                replace_all: r.replace_all,
                if_version: r.if_version,
                dry_run: r.dry_run,
            },
        })
    }

    fn message(self) -> Result<proto::EditRequest> {
        Ok(proto::EditRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            old_text: self.edit.old_text,
            new_text: self.edit.new_text,
            replace_all: self.edit.replace_all,
            if_version: self.edit.if_version,
            dry_run: self.edit.dry_run,
        })
    }
}

impl From<EditOutcome> for proto::EditResponse {
    fn from(e: EditOutcome) -> Self {
        proto::EditResponse {
            path: wire_path(&e.path),
            replacements: wire_count(e.replacements),
            version: e.version,
            diff: e.diff,
            dry_run: e.dry_run,
            size_bytes: wire_count(e.size),
        }
    }
}

impl TryFrom<proto::EditResponse> for EditOutcome {
    type Error = Error;

    fn try_from(r: proto::EditResponse) -> Result<Self> {
        Ok(EditOutcome {
            path: server_path(&r.path)?,
            replacements: server_count("replacements", r.replacements)?,
            version: r.version,
            diff: r.diff,
            dry_run: r.dry_run,
            size: server_count("size_bytes", r.size_bytes)?,
        })
    }
}

// ----------------------------------------------------------------- Delete

/// Delete: a file, or a directory with what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub session_id: String,
    pub path: CanonicalPath,
    pub options: DeleteOptions,
}

impl Request for Delete {
    type Message = proto::DeleteRequest;

    fn parse(r: proto::DeleteRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Delete {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
            options: DeleteOptions {
                recursive: r.recursive,
                allow_missing: r.allow_missing,
                if_version: r.if_version,
            },
        })
    }

    fn message(self) -> Result<proto::DeleteRequest> {
        Ok(proto::DeleteRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            recursive: self.options.recursive,
            allow_missing: self.options.allow_missing,
            if_version: self.options.if_version,
        })
    }
}

impl Delete {
    /// The answer: how many files and directories went.
    pub fn response(deleted: u64) -> proto::DeleteResponse {
        proto::DeleteResponse {
            deleted: wire_count(deleted),
        }
    }

    pub fn outcome(r: proto::DeleteResponse) -> Result<u64> {
        server_count("deleted", r.deleted)
    }
}

// ------------------------------------------------------------- DeleteMany

/// DeleteMany: several Deletes, run in order, each failing alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteMany {
    pub session_id: String,
    pub entries: Vec<(CanonicalPath, DeleteOptions)>,
}

impl Request for DeleteMany {
    type Message = proto::DeleteManyRequest;

    /// Refused whole, deleting nothing, when it holds more than
    /// [`crate::MAX_DELETE_ENTRIES`] entries or an entry's path is invalid.
    fn parse(r: proto::DeleteManyRequest, limits: &PathLimits) -> Result<Self> {
        crate::fs::check_delete_entries(r.entries.len())?;
        let mut entries = Vec::with_capacity(r.entries.len());
        for (i, e) in r.entries.into_iter().enumerate() {
            let path = request_path(&e.path, limits).map_err(|err| match err {
                Error::InvalidPath { path, message } => Error::InvalidPath {
                    path,
                    message: format!("entry {i}: {message}"),
                },
                other => other,
            })?;
            let options = DeleteOptions {
                recursive: e.recursive,
                allow_missing: e.allow_missing,
                if_version: e.if_version,
            };
            entries.push((path, options));
        }
        Ok(DeleteMany {
            session_id: r.session_id,
            entries,
        })
    }

    fn message(self) -> Result<proto::DeleteManyRequest> {
        Ok(proto::DeleteManyRequest {
            session_id: self.session_id,
            entries: self
                .entries
                .into_iter()
                .map(|(path, options)| proto::DeleteEntry {
                    path: wire_path(&path),
                    recursive: options.recursive,
                    allow_missing: options.allow_missing,
                    if_version: options.if_version,
                })
                .collect(),
        })
    }
}

impl DeleteMany {
    /// The answer: each entry's count, or its error.
    pub fn response(results: Vec<Result<u64>>) -> proto::DeleteManyResponse {
        proto::DeleteManyResponse {
            results: results
                .into_iter()
                .map(|result| match result {
                    Ok(deleted) => proto::DeleteResult {
                        deleted: wire_count(deleted),
                        error: None,
                    },
                    Err(e) => proto::DeleteResult {
                        deleted: 0,
                        error: Some(e.to_entry_error()),
                    },
                })
                .collect(),
        }
    }

    /// Each entry's outcome; an answer with another number of results
    /// than `sent` entries is the server's fault.
    pub fn outcome(r: proto::DeleteManyResponse, sent: usize) -> Result<Vec<Result<u64>>> {
        if r.results.len() != sent {
            return Err(Error::internal(format!(
                "the server answered a DeleteMany of {sent} entries with {} results",
                r.results.len()
            )));
        }
        r.results
            .into_iter()
            .map(|result| match result.error {
                Some(e) => Ok(Err(Error::from_entry_error(e))),
                None => server_count("deleted", result.deleted).map(Ok),
            })
            .collect()
    }
}

// ------------------------------------------------------------------ Mkdir

/// Mkdir: a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mkdir {
    pub session_id: String,
    pub path: CanonicalPath,
    pub options: MkdirOptions,
}

impl Request for Mkdir {
    type Message = proto::MkdirRequest;

    fn parse(r: proto::MkdirRequest, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&r.path, limits)?;
        Ok(Mkdir {
            session_id: r.session_id,
            path,
            options: MkdirOptions {
                parents: r.parents.unwrap_or(true),
                exist_ok: r.exist_ok.unwrap_or(true),
                permissions: request_permissions(r.permissions)?,
            },
        })
    }

    fn message(self) -> Result<proto::MkdirRequest> {
        Ok(proto::MkdirRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            parents: Some(self.options.parents),
            exist_ok: Some(self.options.exist_ok),
            permissions: self.options.permissions.map(Permissions::bits),
        })
    }
}

impl Mkdir {
    /// The answer: the directory, and whether this call made it.
    pub fn response(&self, created: bool) -> proto::MkdirResponse {
        proto::MkdirResponse {
            path: wire_path(&self.path),
            created,
        }
    }
}

// ------------------------------------------------------------- Move, Copy

/// Move or Copy (one message for both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub session_id: String,
    pub source: CanonicalPath,
    pub destination: CanonicalPath,
    pub options: TransferOptions,
}

impl Request for Transfer {
    type Message = proto::TransferRequest;

    fn parse(r: proto::TransferRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Transfer {
            source: request_path(&r.source, limits)?,
            destination: request_path(&r.destination, limits)?,
            session_id: r.session_id,
            options: TransferOptions {
                overwrite: r.overwrite,
                create_parents: r.create_parents.unwrap_or(true),
                if_version: r.if_version,
            },
        })
    }

    fn message(self) -> Result<proto::TransferRequest> {
        Ok(proto::TransferRequest {
            session_id: self.session_id,
            source: wire_path(&self.source),
            destination: wire_path(&self.destination),
            overwrite: self.options.overwrite,
            create_parents: Some(self.options.create_parents),
            if_version: self.options.if_version,
        })
    }
}

impl Transfer {
    /// The answer: how many files and directories moved or were copied,
    /// and the destination's version.
    pub fn response(&self, done: Transferred) -> proto::TransferResponse {
        proto::TransferResponse {
            source: wire_path(&self.source),
            destination: wire_path(&self.destination),
            entries: wire_count(done.entries),
            version: done.version.unwrap_or(0),
        }
    }

    pub fn outcome(r: proto::TransferResponse) -> Result<Transferred> {
        Ok(Transferred {
            entries: server_count("entries", r.entries)?,
            version: (r.version != 0).then_some(r.version),
        })
    }
}

// ------------------------------------------------- SetAttributes, Symlink

/// SetAttributes: permission bits and/or modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAttributes {
    pub session_id: String,
    pub path: CanonicalPath,
    pub attributes: Attributes,
}

impl Request for SetAttributes {
    type Message = proto::SetAttributesRequest;

    fn parse(r: proto::SetAttributesRequest, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&r.path, limits)?;
        Ok(SetAttributes {
            session_id: r.session_id,
            path,
            attributes: Attributes {
                permissions: request_permissions(r.permissions)?,
                modified: request_time("modified_at", r.modified_at)?,
                if_version: r.if_version,
            },
        })
    }

    fn message(self) -> Result<proto::SetAttributesRequest> {
        Ok(proto::SetAttributesRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            permissions: self.attributes.permissions.map(Permissions::bits),
            modified_at: self.attributes.modified.map(prost_types::Timestamp::from),
            if_version: self.attributes.if_version,
        })
    }
}

impl SetAttributes {
    /// The answer: the path's bits, time and version after the change.
    pub fn response(&self, outcome: AttributesOutcome) -> proto::SetAttributesResponse {
        proto::SetAttributesResponse {
            path: wire_path(&self.path),
            permissions: outcome.permissions.bits(),
            modified_at: timestamp(outcome.modified),
            version: outcome.version,
        }
    }
}

impl TryFrom<proto::SetAttributesResponse> for AttributesOutcome {
    type Error = Error;

    fn try_from(r: proto::SetAttributesResponse) -> Result<Self> {
        Ok(AttributesOutcome {
            permissions: server_permissions(r.permissions)?,
            modified: system_time(r.modified_at),
            version: r.version,
        })
    }
}

/// Symlink: a link holding a target, never followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symlink {
    pub session_id: String,
    pub path: CanonicalPath,
    pub target: String,
    pub options: SymlinkOptions,
}

impl Request for Symlink {
    type Message = proto::SymlinkRequest;

    fn parse(r: proto::SymlinkRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Symlink {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
            target: r.target,
            options: SymlinkOptions {
                create_parents: r.create_parents.unwrap_or(true),
            },
        })
    }

    fn message(self) -> Result<proto::SymlinkRequest> {
        Ok(proto::SymlinkRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            target: self.target,
            create_parents: Some(self.options.create_parents),
        })
    }
}

impl From<Metadata> for proto::SymlinkResponse {
    fn from(m: Metadata) -> Self {
        proto::SymlinkResponse {
            entry: Some(m.into()),
        }
    }
}

/// An answer without the link's entry is the server's fault.
impl TryFrom<proto::SymlinkResponse> for Metadata {
    type Error = Error;

    fn try_from(r: proto::SymlinkResponse) -> Result<Self> {
        r.entry
            .ok_or_else(|| Error::internal("the server answered Symlink without the link's entry"))?
            .try_into()
    }
}
