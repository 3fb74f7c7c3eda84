//! The four tools of DeepFabric's `vfs` component, with its strings:
//!
//! | Tool | Args | Result |
//! |---|---|---|
//! | `read_file` | `file_path` | the file's text |
//! | `write_file` | `file_path`, `content` | `Successfully wrote N bytes to P` |
//! | `list_files` | none | a JSON array of every file's path |
//! | `delete_file` | `file_path` | `Successfully deleted P` |
//!
//! `file_path` is parsed as every wsfs path is (`/a.txt` and `a.txt` name
//! the same file; `..` may not climb above the root); `list_files` shows
//! paths from the root without a leading `/`, sorted. Failures carry the
//! component's `error_type`: `FileNotFound` (`File not found: P`),
//! `InvalidArguments` (a missing argument, a path wsfs refuses, a write
//! over the session's limit), `IOError` (anything else, with the wsfs
//! message). `read_file` returns a file of at most the session's per-write
//! limit (so anything `write_file` wrote), whole.

use crate::service::filesystem::Opened;
use crate::service::to_the_end;
use serde_json::Value;
use wsfs::path::quote;
use wsfs::{CanonicalPath, DeleteOptions, Error, FileKind, LineRange, Result, WriteOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tool {
    ReadFile,
    WriteFile,
    ListFiles,
    DeleteFile,
}

/// A tool's failure as the component reports it.
pub(super) struct Failure {
    pub error_type: &'static str,
    pub message: String,
}

impl Failure {
    pub fn unknown_tool(tool: &str) -> Failure {
        Failure {
            error_type: "UnknownTool",
            message: format!("Unknown tool: {}", quote(tool)),
        }
    }

    /// The component's error for wsfs error `e` of a call with `args`.
    pub fn of(e: &Error, args: &Value) -> Failure {
        let (error_type, message) = match e {
            Error::FileNotFound { .. } => (
                "FileNotFound",
                format!("File not found: {}", quote(file_path(args).unwrap_or(""))),
            ),
            Error::InvalidPath { .. }
            | Error::PathEscapesRoot { .. }
            | Error::InvalidArgument { .. }
            | Error::TooLarge { .. }
            | Error::IsADirectory { .. }
            | Error::NotADirectory { .. } => ("InvalidArguments", e.to_string()),
            _ => ("IOError", format!("IO error: {e}")),
        };
        Failure {
            error_type,
            message,
        }
    }
}

fn file_path(args: &Value) -> Option<&str> {
    args.get("file_path").and_then(Value::as_str)
}

/// A string argument, or the component's refusal.
fn required<'a>(args: &'a Value, name: &str) -> Result<&'a str> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid_argument(format!("Missing required argument: {name}")))
}

impl Tool {
    pub fn parse(name: &str) -> Option<Tool> {
        match name {
            "read_file" => Some(Tool::ReadFile),
            "write_file" => Some(Tool::WriteFile),
            "list_files" => Some(Tool::ListFiles),
            "delete_file" => Some(Tool::DeleteFile),
            _ => None,
        }
    }

    /// The method name logs and metrics show.
    pub fn method(self) -> &'static str {
        match self {
            Tool::ReadFile => "VfsReadFile",
            Tool::WriteFile => "VfsWriteFile",
            Tool::ListFiles => "VfsListFiles",
            Tool::DeleteFile => "VfsDeleteFile",
        }
    }

    /// The path the log line shows.
    pub fn path_of(self, args: &Value) -> &str {
        match self {
            Tool::ListFiles => "",
            _ => file_path(args).unwrap_or(""),
        }
    }

    pub async fn run(self, s: Opened, args: &Value) -> Result<String> {
        match self {
            Tool::ReadFile => read_file(&s, required(args, "file_path")?).await,
            Tool::WriteFile => {
                let raw = required(args, "file_path")?;
                let content = required(args, "content")?;
                let path = s.path(raw)?;
                let owned = content.to_string();
                let written =
                    to_the_end(
                        async move { s.fs.write(&path, &owned, WriteOptions::default()).await },
                    )
                    .await?;
                Ok(format!(
                    "Successfully wrote {} bytes to {}",
                    written.bytes_written,
                    quote(raw)
                ))
            }
            Tool::ListFiles => list_files(&s).await,
            Tool::DeleteFile => {
                let raw = required(args, "file_path")?;
                let path = s.path(raw)?;
                if path.is_root() {
                    return Err(Error::invalid_argument(
                        "delete_file deletes a file; the root is not one",
                    ));
                }
                to_the_end(async move { s.fs.delete(&path, DeleteOptions::default()).await })
                    .await?;
                Ok(format!("Successfully deleted {}", quote(raw)))
            }
        }
    }
}

/// The whole text of a file of at most the session's per-write limit,
/// page by page, all of one version.
async fn read_file(s: &Opened, raw: &str) -> Result<String> {
    let path = s.path(raw)?;
    let limit = s.session.record.limits.max_write_bytes;
    let mut page = s.fs.read(&path, LineRange::all()).await?;
    if page.size > limit {
        return Err(Error::OutOfRange {
            path: path.as_str().to_string(),
            message: format!(
                "'{}' is {} bytes; read_file returns files of at most {limit} bytes (the session's per-write limit): read it over gRPC",
                quote(raw),
                page.size
            ),
        });
    }
    let version = page.version;
    let mut text = std::mem::take(&mut page.content);
    while page.truncated {
        page =
            s.fs.read(
                &path,
                LineRange {
                    offset: page.offset + page.lines,
                    limit: None,
                },
            )
            .await?;
        if page.version != version || page.lines == 0 {
            return Err(Error::Unavailable {
                message: format!("'{}' changed while it was read; read it again", quote(raw)),
            });
        }
        text.push_str(&page.content);
    }
    Ok(text)
}

/// Every file's path, sorted, as a JSON array.
async fn list_files(s: &Opened) -> Result<String> {
    let depth = u32::try_from(s.session.record.limits.path.max_depth).unwrap_or(u32::MAX);
    let listing = s.fs.list(&CanonicalPath::root(), depth).await?;
    let files: Vec<&str> = listing
        .entries
        .iter()
        .filter(|e| e.kind == FileKind::File)
        .map(|e| e.path.as_str())
        .collect();
    serde_json::to_string(&files)
        .map_err(|e| Error::internal(format!("cannot encode the listing: {e}")))
}
