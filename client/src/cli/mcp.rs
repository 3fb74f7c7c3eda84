//! `wsfs mcp`: one session served as a Model Context Protocol server on
//! stdio, for agents that reach their tools through MCP.
//!
//! Every tool is a plain call on the typed client's [`Session`], so the
//! server behind it applies the same rules as to any other client:
//! versions, limits, SWARM zones (the MCP server speaks as the caller
//! whose token it was given). A refusal comes back as a tool error whose
//! text starts with the contract reason and ends with what to do next, in
//! words a model can act on; only a malformed call is a protocol error.

use super::{Ctx, Outcome};
use futures::StreamExt;
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use std::fmt::Write as _;
use wsfs_client::{
    parse_path, Client, DeleteOptions, EditSpec, Error, FileKind, Filesystem, GlobQuery, GrepEvent,
    GrepQuery, LineRange, Metadata, MkdirOptions, Permissions, Session, TransferOptions, WriteMode,
    WriteOptions,
};

/// Lines a `read` returns when the call names no limit.
const DEFAULT_READ_LINES: u64 = 2000;

/// Matches a `grep` returns when the call names no limit.
const DEFAULT_GREP_MATCHES: u64 = 200;

/// Serves the session on stdin and stdout until the client hangs up.
pub async fn serve(ctx: &mut Ctx) -> Outcome {
    let session = ctx.session().await?;
    let client = ctx.client().await?;
    // Fail before the handshake when the session is not there: an MCP
    // client shows a server that exits at once better than one whose
    // every tool fails.
    session.stat(&wsfs_client::CanonicalPath::root()).await?;
    let running = Workspace::new(client, session)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| super::Failure::Local(format!("MCP handshake failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| super::Failure::Local(format!("MCP server stopped: {e}")))?;
    Ok(())
}

/// The MCP server: one session, and the tools over it.
#[derive(Clone)]
struct Workspace {
    client: Client,
    session: Session,
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: text for the model, or a refusal with its reason.
fn answer(result: Result<String, Error>) -> Result<CallToolResult, ErrorData> {
    Ok(match result {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(refusal(&e))]),
    })
}

/// `REASON: message. What to do.`
fn refusal(error: &Error) -> String {
    refusal_noted(error, None)
}

/// `REASON: message (note). What to do.`: the note says which part of the
/// call failed (the edit of a multi_edit), apart from the path.
fn refusal_noted(error: &Error, note: Option<&str>) -> String {
    let hint = match error {
        Error::FileNotFound { .. } => "Check the path with `list` or `glob`.",
        Error::SessionNotFound { .. } => {
            "The session is gone: the MCP server must be restarted with a new one."
        }
        Error::SnapshotNotFound { .. } => {
            "Name a snapshot by its id, its tag or the start of its id: `list_snapshots` shows them."
        }
        Error::AlreadyExists { .. } => {
            "Choose another path, or pass overwrite (move/copy) or mode \"overwrite\" (write)."
        }
        Error::NotADirectory { .. } => "A parent of the path is a file, not a directory.",
        Error::IsADirectory { .. } => "The path is a directory: `list` it instead.",
        Error::DirectoryNotEmpty { .. } => "Pass recursive: true to delete it with its contents.",
        Error::NotText { .. } => "The file is not UTF-8 text; it cannot be read or edited here.",
        Error::NoMatch { .. } => {
            "old_text must match the file exactly, whitespace included: `read` the file and copy the text."
        }
        Error::AmbiguousMatch { .. } => {
            "Include more surrounding lines in old_text so it matches once, or pass replace_all: true."
        }
        Error::VersionMismatch { .. } => {
            "The file changed since you read it: `read` it again and retry with its new version."
        }
        Error::InvalidPath { .. } | Error::PathEscapesRoot { .. } => {
            "Paths are relative to the workspace root, may not climb above it, and must fit the session's depth and name-length limits."
        }
        Error::InvalidPattern { .. } => "Fix the pattern (Rust regex syntax; pass fixed: true for literal text).",
        Error::InvalidArgument { .. } => "Fix the argument the message names, then call again.",
        Error::TooLarge { .. } => "Split the content into smaller writes, or read a smaller range.",
        Error::OutOfRange { .. } => "Check the offset against the file's size with `stat`.",
        Error::ReadOnly { .. } => "This session is read-only: nothing in it can be changed.",
        Error::PermissionDenied { .. } => {
            "This caller may not change that path (another caller's zone, or outside the workspace)."
        }
        Error::Unauthenticated { .. } => {
            "The MCP server's token was refused: it must be restarted with a valid WSFS_TOKEN."
        }
        Error::QuotaExceeded { .. } => "The session is at a limit: delete files or ask for a larger session.",
        Error::Unimplemented { .. } => "The wsfs server is older than this tool: do without this call.",
        Error::FailedPrecondition { .. } => {
            "The server is not set up for this (the message says what it lacks): do without it."
        }
        Error::SessionLeased { .. } => {
            "Another wsfs server serves this session now: the MCP server must be pointed at it."
        }
        Error::Cancelled { .. } | Error::Unavailable { .. } => {
            "The wsfs server cannot be reached or did not finish: try again shortly."
        }
        Error::Internal { .. } => "The wsfs server failed: try again; if it persists, report it.",
    };
    let message = error.to_string();
    let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
    format!("{}: {message}{note}. {hint}", error.reason())
}

/// A snapshot named as the CLI names it (id, tag or start of an id), with
/// the CLI's resolver.
async fn snapshot_id(client: &Client, session_id: &str, name: &str) -> Result<String, Error> {
    super::sessions::resolve_snapshot_with(client, session_id, name)
        .await
        .map_err(|failure| match failure {
            super::Failure::Remote(e) | super::Failure::Hinted(e, _) => e,
            other => Error::InvalidArgument {
                message: other.text().1,
            },
        })
}

fn kind(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Directory => "dir",
        FileKind::Symlink => "symlink",
    }
}

fn entry_line(out: &mut String, m: &Metadata) {
    let _ = writeln!(
        out,
        "{:<7} {:>10}  v{:<6} {}",
        kind(m.kind),
        m.size,
        m.version,
        m.path.display()
    );
}

// ----- tool arguments: the JSON schemas a model sees -----

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ReadArgs {
    /// File path, relative to the workspace root.
    path: String,
    /// First line to return, 0-based (default 0).
    #[serde(default)]
    offset: u64,
    /// Most lines to return (default 2000).
    limit: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    /// File path, relative to the workspace root. Missing parent
    /// directories are created.
    path: String,
    /// The whole new content (UTF-8 text).
    content: String,
    /// "overwrite" (default), "create" (fail if the file exists) or
    /// "append".
    #[serde(default)]
    mode: Option<String>,
    /// Only write if the file is still at this version (from read or stat).
    if_version: Option<u64>,
    /// Permission bits in octal, e.g. "755" for a script to run; at most
    /// "777". Default: a new file gets "644", an existing one keeps its own.
    #[serde(default)]
    permissions: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct EditArgs {
    /// File path, relative to the workspace root.
    path: String,
    /// Exact text to replace, whitespace included; must match once unless
    /// replace_all.
    old_text: String,
    /// The replacement text.
    new_text: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    replace_all: bool,
    /// Show the unified diff without changing the file.
    #[serde(default)]
    dry_run: bool,
    /// Only edit if the file is still at this version.
    if_version: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct OneEdit {
    /// Exact text to replace; must match once unless replace_all.
    old_text: String,
    /// The replacement text.
    new_text: String,
    /// Replace every occurrence.
    #[serde(default)]
    replace_all: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct MultiEditArgs {
    /// File path, relative to the workspace root.
    path: String,
    /// Edits applied in order, each to the result of the previous one; all
    /// apply or none does.
    edits: Vec<OneEdit>,
    /// Show the unified diff without changing the file.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ListArgs {
    /// Directory path (default: the workspace root).
    #[serde(default)]
    path: String,
    /// Levels to descend: 1 lists the directory's own entries (default 1).
    depth: Option<u32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct GlobArgs {
    /// Glob over paths: `*` within one segment, `**` across segments,
    /// e.g. `src/**/*.rs`.
    pattern: String,
    /// Directory the pattern is relative to (default: the root).
    #[serde(default)]
    path: String,
    /// Most paths to return (default 1000).
    max_results: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct GrepArgs {
    /// Regex (Rust syntax), or literal text with fixed: true.
    pattern: String,
    /// Directory or file to search (default: the whole workspace).
    #[serde(default)]
    path: String,
    /// Only files whose path matches this glob, e.g. `*.py`.
    glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    case_insensitive: bool,
    /// Treat the pattern as literal text.
    #[serde(default)]
    fixed: bool,
    /// Lines of context before and after each match (default 0).
    #[serde(default)]
    context_lines: u32,
    /// Most matches to return (default 200).
    max_matches: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct PathArgs {
    /// Path relative to the workspace root.
    path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct TransferArgs {
    /// Source path.
    from: String,
    /// Destination path (the full new path, not a directory to put it in).
    to: String,
    /// Replace what is at the destination.
    #[serde(default)]
    overwrite: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// Path relative to the workspace root.
    path: String,
    /// Delete a directory with everything in it.
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SnapshotArgs {
    /// A label to recognise the snapshot by.
    #[serde(default)]
    tag: String,
}

/// A snapshot, for `diff_snapshot`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct RestoreArgs {
    /// The snapshot: its id, its tag, or the start of its id (4 characters
    /// or more), from `snapshot` or `list_snapshots`.
    snapshot_id: String,
}

/// A snapshot to restore, whole or at one path.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct RestorePathArgs {
    /// The snapshot: its id, its tag, or the start of its id (4 characters
    /// or more), from `snapshot` or `list_snapshots`.
    snapshot_id: String,
    /// Only this file or directory (everything beneath it that the
    /// snapshot lacks is removed; the rest of the workspace is left as it
    /// is). Omit it to restore the whole workspace.
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn write_mode(mode: Option<&str>) -> Result<WriteMode, Error> {
    match mode.unwrap_or("overwrite") {
        "overwrite" => Ok(WriteMode::Overwrite),
        "create" => Ok(WriteMode::Create),
        "append" => Ok(WriteMode::Append),
        other => Err(Error::invalid_argument(format!(
            "mode must be \"overwrite\", \"create\" or \"append\", not {other:?}"
        ))),
    }
}

/// One edit of a multi_edit that failed: which one (from 1), and why.
struct EditFailed {
    index: usize,
    error: Error,
}

/// Applies `edits` in order to `text`; the count of replacements.
fn apply_edits(
    path: &str,
    mut text: String,
    edits: &[OneEdit],
) -> Result<(String, u64), EditFailed> {
    let mut replaced = 0;
    for (i, e) in edits.iter().enumerate() {
        let failed = |error| EditFailed {
            index: i + 1,
            error,
        };
        if e.old_text.is_empty() {
            return Err(failed(Error::invalid_argument(
                "old_text must not be empty",
            )));
        }
        let count = text.matches(e.old_text.as_str()).count() as u64;
        if count == 0 {
            return Err(failed(Error::NoMatch {
                path: path.to_string(),
            }));
        }
        if count > 1 && !e.replace_all {
            return Err(failed(Error::AmbiguousMatch {
                path: path.to_string(),
                count,
            }));
        }
        text = text.replace(e.old_text.as_str(), &e.new_text);
        replaced += count;
    }
    Ok((text, replaced))
}

/// A unified diff with the server's Edit format (3 lines of context).
fn unified_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[tool_router]
impl Workspace {
    fn new(client: Client, session: Session) -> Workspace {
        Workspace {
            client,
            session,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Read a UTF-8 text file, or a range of its lines. Returns the text and a last line saying which lines of how many, the file's version (for if_version), and whether more follows."
    )]
    async fn read(&self, Parameters(a): Parameters<ReadArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let path = parse_path(&a.path)?;
                let limit = a.limit.unwrap_or(DEFAULT_READ_LINES);
                let page = self
                    .session
                    .read(
                        &path,
                        LineRange {
                            offset: a.offset,
                            limit: Some(limit),
                        },
                    )
                    .await?;
                let end = page.offset + page.lines;
                let mut out = page.content;
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                let _ = write!(
                    out,
                    "[{}: lines {}-{} of {}, version {}",
                    page.path.display(),
                    page.offset + 1,
                    end,
                    page.total_lines,
                    page.version
                );
                if page.truncated || end < page.total_lines {
                    let _ = write!(out, "; more: read with offset {end}");
                }
                out.push(']');
                Ok(out)
            }
            .await,
        )
    }

    #[tool(
        description = "Write a whole text file (created with its parent directories, or replaced). mode \"create\" refuses to replace, \"append\" adds to the end. Returns the new version."
    )]
    async fn write(
        &self,
        Parameters(a): Parameters<WriteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let path = parse_path(&a.path)?;
                let options = WriteOptions {
                    mode: write_mode(a.mode.as_deref())?,
                    create_parents: true,
                    if_version: a.if_version,
                    permissions: a
                        .permissions
                        .as_deref()
                        .map(Permissions::parse_octal)
                        .transpose()?,
                    ..WriteOptions::default()
                };
                let w = self.session.write(&path, &a.content, options).await?;
                Ok(format!(
                    "{} {}: {} bytes written, size {}, version {}",
                    if w.created { "created" } else { "wrote" },
                    w.path.display(),
                    w.bytes_written,
                    w.size,
                    w.version
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "Replace exact text in a file: old_text must match once (or pass replace_all). Returns the unified diff and the new version; dry_run shows the diff without changing anything."
    )]
    async fn edit(&self, Parameters(a): Parameters<EditArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let path = parse_path(&a.path)?;
                let spec = EditSpec {
                    old_text: a.old_text,
                    new_text: a.new_text,
                    replace_all: a.replace_all,
                    if_version: a.if_version,
                    dry_run: a.dry_run,
                };
                let e = self.session.edit(&path, spec).await?;
                Ok(format!(
                    "{}{} replacement(s) in {}, version {}{}",
                    e.diff,
                    e.replacements,
                    e.path.display(),
                    e.version,
                    if e.dry_run {
                        " (dry run: nothing changed)"
                    } else {
                        ""
                    }
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "Several exact-text replacements in one file, applied in order, all or none. The file is written only if nobody changed it meanwhile. Returns the unified diff and the new version."
    )]
    async fn multi_edit(
        &self,
        Parameters(a): Parameters<MultiEditArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.apply_multi_edit(&a).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(Refused::Call(e)) => CallToolResult::error(vec![ContentBlock::text(refusal(&e))]),
            Err(Refused::Edit(f)) => {
                let note = format!("edit {} of {}", f.index, a.edits.len());
                let text = refusal_noted(&f.error, Some(&note));
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        })
    }

    #[tool(
        description = "List a directory: kind, size, version and path of each entry, depth levels down (1: its own entries)."
    )]
    async fn list(&self, Parameters(a): Parameters<ListArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let path = parse_path(&a.path)?;
                let listing = self.session.list(&path, a.depth.unwrap_or(1)).await?;
                let mut out = String::new();
                for m in &listing.entries {
                    entry_line(&mut out, m);
                }
                if listing.entries.is_empty() {
                    let _ = writeln!(out, "({} is empty)", listing.path.display());
                }
                if listing.truncated {
                    out.push_str("(truncated: list a subdirectory or use glob)\n");
                }
                Ok(out)
            }
            .await,
        )
    }

    #[tool(
        description = "Find files whose path matches a glob, e.g. `**/*.rs`. One path per line."
    )]
    async fn glob(&self, Parameters(a): Parameters<GlobArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let outcome = self
                    .session
                    .glob(GlobQuery {
                        pattern: a.pattern,
                        base: parse_path(&a.path)?,
                        max_results: a.max_results.unwrap_or(0),
                    })
                    .await?;
                let mut out = String::new();
                for p in &outcome.paths {
                    let _ = writeln!(out, "{}", p.display());
                }
                if outcome.paths.is_empty() {
                    out.push_str("(no file matches)\n");
                }
                if outcome.truncated {
                    out.push_str("(truncated: narrow the pattern or raise max_results)\n");
                }
                Ok(out)
            }
            .await,
        )
    }

    #[tool(
        description = "Search file contents (every file, hidden ones too; binary files skipped). One `path:line:text` per match, context lines as `path-line-text`, then a summary."
    )]
    async fn grep(&self, Parameters(a): Parameters<GrepArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let mut events = self
                    .session
                    .grep(GrepQuery {
                        pattern: a.pattern,
                        base: parse_path(&a.path)?,
                        glob: a.glob,
                        case_insensitive: a.case_insensitive,
                        fixed_string: a.fixed,
                        max_matches: a.max_matches.unwrap_or(DEFAULT_GREP_MATCHES),
                        context_lines: a.context_lines,
                    })
                    .await?;
                let mut out = String::new();
                while let Some(event) = events.next().await {
                    match event? {
                        GrepEvent::Match(m) => {
                            let path = m.path.display();
                            for c in &m.before {
                                let _ = writeln!(out, "{path}-{}-{}", c.line_number, c.line);
                            }
                            let _ = writeln!(out, "{path}:{}:{}", m.line_number, m.line);
                            for c in &m.after {
                                let _ = writeln!(out, "{path}-{}-{}", c.line_number, c.line);
                            }
                        }
                        GrepEvent::Summary(s) => {
                            let _ = write!(
                                out,
                                "[{} match(es) in {} file(s) searched{}]",
                                s.matches,
                                s.files_searched,
                                if s.truncated {
                                    "; truncated: raise max_matches or narrow the search"
                                } else {
                                    ""
                                }
                            );
                        }
                    }
                }
                Ok(out)
            }
            .await,
        )
    }

    #[tool(description = "Kind, size, version and modification time of a path.")]
    async fn stat(&self, Parameters(a): Parameters<PathArgs>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let m = self.session.stat(&parse_path(&a.path)?).await?;
                let mut out = String::new();
                entry_line(&mut out, &m);
                let _ = write!(
                    out,
                    "modified {}",
                    humantime::format_rfc3339_seconds(m.modified)
                );
                Ok(out)
            }
            .await,
        )
    }

    #[tool(
        name = "move",
        description = "Move or rename a file or a directory (with its contents)."
    )]
    async fn move_path(
        &self,
        Parameters(a): Parameters<TransferArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.transfer(a, true).await)
    }

    #[tool(description = "Copy a file or a directory (with its contents).")]
    async fn copy(
        &self,
        Parameters(a): Parameters<TransferArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(self.transfer(a, false).await)
    }

    #[tool(description = "Delete a file, or a directory (recursive: true for one with contents).")]
    async fn delete(
        &self,
        Parameters(a): Parameters<DeleteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let options = DeleteOptions {
                    recursive: a.recursive,
                    allow_missing: false,
                    if_version: None,
                };
                let n = self.session.delete(&parse_path(&a.path)?, options).await?;
                Ok(format!("deleted {} ({n} entries)", a.path))
            }
            .await,
        )
    }

    #[tool(description = "Create a directory and any missing parents.")]
    async fn mkdir(
        &self,
        Parameters(a): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let options = MkdirOptions {
                    parents: true,
                    exist_ok: true,
                    ..MkdirOptions::default()
                };
                let created = self.session.mkdir(&parse_path(&a.path)?, options).await?;
                Ok(if created {
                    format!("created {}", a.path)
                } else {
                    format!("{} already existed", a.path)
                })
            }
            .await,
        )
    }

    #[tool(
        description = "Save the whole workspace as a snapshot to restore later. Returns its id."
    )]
    async fn snapshot(
        &self,
        Parameters(a): Parameters<SnapshotArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let s = self.client.snapshot(self.session.id(), &a.tag).await?;
                Ok(format!(
                    "snapshot {} ({} files, {} bytes)",
                    s.id, s.file_count, s.total_bytes
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "Put the workspace back exactly as a snapshot holds it, or only one file or directory of it (path): later changes there are undone."
    )]
    async fn restore(
        &self,
        Parameters(a): Parameters<RestorePathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let at = match &a.path {
                    Some(path) => wsfs_client::parse_path(path)?,
                    None => wsfs::CanonicalPath::root(),
                };
                let id = snapshot_id(&self.client, self.session.id(), &a.snapshot_id).await?;
                let r = self
                    .client
                    .restore_path(self.session.id(), &id, &at)
                    .await?;
                Ok(format!(
                    "restored {id}{} ({} files, {} bytes)",
                    if at.is_root() {
                        String::new()
                    } else {
                        format!(" at {at}")
                    },
                    r.file_count,
                    r.total_bytes
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "What changed since a snapshot: one line per path, A added, D deleted, M modified (a trailing / marks a directory). Use it to review your own changes before keeping or restoring them."
    )]
    async fn diff_snapshot(
        &self,
        Parameters(a): Parameters<RestoreArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        use wsfs_client::SnapshotChangeKind;
        answer(
            async {
                let id = snapshot_id(&self.client, self.session.id(), &a.snapshot_id).await?;
                let diff = self.client.diff_snapshot(self.session.id(), &id).await?;
                let mut out = String::new();
                for c in &diff.changes {
                    let letter = match c.kind {
                        SnapshotChangeKind::Added => 'A',
                        SnapshotChangeKind::Deleted => 'D',
                        SnapshotChangeKind::Modified => 'M',
                    };
                    let slash = if c.directory { "/" } else { "" };
                    let _ = writeln!(out, "{letter}  {}{slash}", c.path);
                }
                if diff.changes.is_empty() {
                    out.push_str("(nothing changed since the snapshot)\n");
                }
                if diff.truncated {
                    out.push_str("(more changes than one answer holds)\n");
                }
                Ok(out)
            }
            .await,
        )
    }

    #[tool(description = "The session's snapshots, oldest first: id, time, tag.")]
    async fn list_snapshots(
        &self,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let all = self.client.list_snapshots(self.session.id()).await?;
                let mut out = String::new();
                for s in &all {
                    let _ = writeln!(
                        out,
                        "{}  {}  {} files  {}",
                        s.id,
                        humantime::format_rfc3339_seconds(s.created_at),
                        s.file_count,
                        s.tag
                    );
                }
                if all.is_empty() {
                    out.push_str("(no snapshots)\n");
                }
                Ok(out)
            }
            .await,
        )
    }
}

/// Why a multi_edit failed: a call, or one of its edits.
enum Refused {
    Call(Error),
    Edit(EditFailed),
}

impl From<Error> for Refused {
    fn from(e: Error) -> Refused {
        Refused::Call(e)
    }
}

impl Workspace {
    /// Reads the file, applies every edit, and writes it back only if
    /// nobody changed it meanwhile.
    async fn apply_multi_edit(&self, a: &MultiEditArgs) -> Result<String, Refused> {
        let path = parse_path(&a.path)?;
        let whole = LineRange {
            offset: 0,
            limit: None,
        };
        let page = self.session.read(&path, whole).await?;
        if page.truncated {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size: page.size,
                limit: page.content.len() as u64,
            }
            .into());
        }
        let (new, replaced) =
            apply_edits(path.as_str(), page.content.clone(), &a.edits).map_err(Refused::Edit)?;
        let diff = unified_diff(path.as_str(), &page.content, &new);
        if a.dry_run {
            return Ok(format!(
                "{diff}{replaced} replacement(s) in {}, version {} (dry run: nothing changed)",
                path.display(),
                page.version
            ));
        }
        let options = WriteOptions {
            mode: WriteMode::Overwrite,
            create_parents: false,
            if_version: Some(page.version),
            ..WriteOptions::default()
        };
        let w = self.session.write(&path, &new, options).await?;
        Ok(format!(
            "{diff}{replaced} replacement(s) in {}, version {}",
            w.path.display(),
            w.version
        ))
    }

    /// Move (`moving`) or copy, creating the destination's parents.
    async fn transfer(&self, a: TransferArgs, moving: bool) -> Result<String, Error> {
        let (from, to) = (parse_path(&a.from)?, parse_path(&a.to)?);
        let options = TransferOptions {
            overwrite: a.overwrite,
            create_parents: true,
            if_version: None,
        };
        let (transferred, done) = if moving {
            (self.session.rename(&from, &to, options).await?, "moved")
        } else {
            (self.session.copy(&from, &to, options).await?, "copied")
        };
        let n = transferred.entries;
        Ok(format!("{done} {from} to {to} ({n} entries)"))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Workspace {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("wsfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A wsfs session workspace: an isolated file tree shared with other agents and \
                 programs. Paths are relative to the workspace root. Every file has a version \
                 that grows with each change; pass it as if_version to write or edit only if \
                 nobody changed the file since you read it. Prefer edit/multi_edit over \
                 rewriting whole files; grep searches contents, glob finds paths; snapshot \
                 before risky changes and restore to undo them.",
            )
    }
}
