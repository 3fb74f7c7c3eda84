//! Session-level commands: sessions, snapshots, archives, tokens.

use super::args::{ExportArgs, ImportArgs, SessionCommand, SnapshotCommand, TokenCommand};
use super::output::{self, print_json, println};
use super::{local, Ctx, Failure, Outcome};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::io::{InspectReader, InspectWriter};
use wsfs_client::{Backend, Layout, SessionInfo, SessionOptions, SnapshotChangeKind, SnapshotInfo};

/// `session list` refused, said in one line: the admin token it needs, or
/// the proxy in front of the servers that will not list. A wsfs server
/// answers ListSessions with UNAUTHENTICATED about the admin token, never
/// PERMISSION_DENIED or UNIMPLEMENTED: those, an UNAUTHENTICATED that is
/// not about a token, and an HTTP answer instead of a gRPC one (which the
/// client names as the proxy's, [`wsfs::error::PROXY_ANSWERED`]) come from
/// something between the two.
fn listing_refused(error: wsfs_client::Error, ctx: &Ctx) -> Failure {
    use wsfs_client::Error;
    let line = match &error {
        Error::Unauthenticated { message }
            if message.contains("token") && !message.starts_with(wsfs::error::PROXY_ANSWERED) =>
        {
            if ctx.token.is_some() {
                "listing sessions needs the server's admin token, and the token sent \
                 (WSFS_TOKEN or --token) is not it: a session's token opens that one session \
                 (`wsfs session show` shows it)"
                    .to_string()
            } else {
                "listing sessions needs the server's admin token: set WSFS_TOKEN (or pass \
                 --token) to it"
                    .to_string()
            }
        }
        Error::Unauthenticated { message }
        | Error::PermissionDenied { message, .. }
        | Error::Unimplemented { message } => {
            // "a proxy ... answered HTTP 403 Forbidden instead of gRPC: ..."
            let said = match message.strip_prefix(wsfs::error::PROXY_ANSWERED) {
                Some(rest) => format!(
                    "it answered HTTP {}",
                    rest.split(':').next().unwrap_or(rest)
                ),
                None => message.clone(),
            };
            format!(
                "a proxy or gateway at {} refused to list sessions ({said}); a proxy in front of \
                 several servers may forbid it: list each server directly with `wsfs session \
                 list --server http://HOST:PORT`",
                ctx.server
            )
        }
        _ => return error.into(),
    };
    Failure::Said(error, line)
}

pub async fn session(ctx: &mut Ctx, command: SessionCommand) -> Outcome {
    match command {
        SessionCommand::Create(args) => {
            let mut options = match (&args.container, args.directory) {
                (Some(name), _) => SessionOptions::container(
                    args.runtime.clone().unwrap_or_default(),
                    name,
                    args.workdir.clone().unwrap_or_default(),
                ),
                (None, true) => SessionOptions::directory(),
                (None, false) => SessionOptions::memory(),
            };
            if let Some(root) = args.root {
                options = options.root(root);
            }
            options = options.read_only(args.read_only);
            if args.swarm {
                options = options.layout(Layout::Swarm);
            }
            for label in &args.labels {
                let (key, value) = split_pair(label, "--label KEY=VALUE")?;
                options = options.label(key, value);
            }
            for seed in &args.seeds {
                let (path, file) = split_pair(seed, "--seed PATH=FILE")?;
                let content =
                    std::fs::read(file).map_err(local(format!("cannot read '{file}'")))?;
                options = options.seed_file(path, content);
            }
            let mut limits = wsfs_client::SessionLimits::default();
            if let Some(bytes) = args.max_write_bytes {
                limits.max_write_bytes = bytes;
            }
            if let Some(bytes) = args.max_total_bytes {
                limits.max_total_bytes = bytes;
            }
            if let Some(files) = args.max_files {
                limits.max_files = files;
            }
            if let Some(depth) = args.max_path_depth {
                limits.max_path_depth = depth;
            }
            if let Some(chars) = args.max_segment_length {
                limits.max_segment_length = chars;
            }
            options = options.limits(limits);
            if let Some(ttl) = args.ttl {
                options = options.idle_ttl(Duration::from_secs(ttl));
            }
            if let Some(from) = &args.from {
                let (session, snapshot) = match from.split_once(':') {
                    Some((session, snapshot)) => {
                        (session, resolve_snapshot(ctx, session, snapshot).await?)
                    }
                    None => (from.as_str(), newest_snapshot(ctx, from).await?),
                };
                options = options.from_snapshot(session, snapshot);
            }
            if let Some(id) = args.id {
                options = options.id(id);
            }
            if let Some((uid, gid)) = args.owner {
                options = options.owner(wsfs_client::FileOwner {
                    file_permissions: args.file_mode,
                    directory_permissions: args.dir_mode,
                    ..wsfs_client::FileOwner::new(uid, gid)
                });
            }
            let info = ctx.client().await?.create_session(options).await?;
            print_new_session(ctx, &info)
        }
        SessionCommand::Recover {
            id,
            snapshot,
            force,
        } => {
            let info = ctx
                .client()
                .await?
                .recover_session(&id, snapshot.as_deref(), force)
                .await?;
            print_new_session(ctx, &info)
        }
        SessionCommand::List {
            labels,
            usage,
            local,
        } => {
            let mut query = wsfs_client::SessionQuery {
                usage,
                local_only: local,
                ..Default::default()
            };
            for label in &labels {
                let (key, value) = split_pair(label, "--label KEY=VALUE")?;
                query.labels.insert(key.to_string(), value.to_string());
            }
            let sessions = ctx
                .client()
                .await?
                .query_sessions(&query)
                .await
                .map_err(|e| listing_refused(e, ctx))?;
            if ctx.json {
                let all: Vec<_> = sessions.iter().map(session_json).collect();
                return print_json(&json!({ "sessions": all }));
            }
            // Servers that share an object store name each session's replica.
            let replicas = sessions
                .iter()
                .any(|s| s.served_by.is_some() || s.served_elsewhere);
            let width = sessions
                .iter()
                .filter_map(|s| s.served_by.as_ref().map(|r| r.chars().count()))
                .max()
                .unwrap_or(0)
                .max("REPLICA".len());
            let replica = |name: &str| match replicas {
                true => format!("{name:<width$}  "),
                false => String::new(),
            };
            if !ctx.quiet {
                let counts = if usage { "    FILES      BYTES  " } else { "" };
                println(&format!(
                    "{:<36}  {:<9}  {}{:<20}  {:<20}  {:>7}  {counts}LABELS",
                    "ID",
                    "BACKEND",
                    replica("REPLICA"),
                    "CREATED",
                    "LAST ACTIVE",
                    "STREAMS"
                ))?;
            }
            for info in &sessions {
                let labels: Vec<_> = info
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let counts = match (usage, info.usage) {
                    (false, _) => String::new(),
                    (true, Some(u)) => {
                        format!("{:>9}  {:>9}  ", u.files, output::human_size(u.bytes))
                    }
                    (true, None) => format!("{:>9}  {:>9}  ", "-", "-"),
                };
                println(&format!(
                    "{:<36}  {:<9}  {}{:<20}  {:<20}  {:>7}  {counts}{}",
                    info.id,
                    backend(info.backend),
                    replica(info.served_by.as_deref().unwrap_or("-")),
                    output::time(info.created_at),
                    info.last_active_at
                        .map(output::time)
                        .unwrap_or_else(|| "-".into()),
                    info.open_streams,
                    labels.join(",")
                ))?;
            }
            Ok(())
        }
        SessionCommand::Show { id } => {
            let id = match id {
                Some(id) => id,
                None => ctx.session_id().await?,
            };
            let info = ctx.client().await?.get_session(&id).await?;
            if ctx.json {
                return print_json(&session_json(&info));
            }
            let mut lines = vec![
                format!("id:        {}", info.id),
                format!("backend:   {}", backend(info.backend)),
                format!("created:   {}", output::time(info.created_at)),
                format!("read-only: {}", info.read_only),
                format!(
                    "layout:    {}",
                    if info.layout == Layout::Swarm {
                        "swarm"
                    } else {
                        "flat"
                    }
                ),
            ];
            if let Some(root) = &info.root_path {
                lines.push(format!("root:      {}", root.display()));
            }
            if let Some(ttl) = info.idle_ttl {
                lines.push(format!("idle ttl:  {}s", ttl.as_secs()));
            }
            if let Some(u) = info.usage {
                lines.push(format!(
                    "usage:     {} files, {}",
                    u.files,
                    output::human_size(u.bytes)
                ));
            }
            for (k, v) in &info.labels {
                lines.push(format!("label:     {k}={v}"));
            }
            if let Some(o) = &info.owner {
                let bits = |b: Option<wsfs_client::Permissions>| {
                    b.map_or_else(|| "-".into(), |b| format!("{:o}", b.bits()))
                };
                lines.push(format!(
                    "owner:     {}:{} (files {}, directories {})",
                    o.uid,
                    o.gid,
                    bits(o.file_permissions),
                    bits(o.directory_permissions)
                ));
            }
            if let Some(origin) = &info.forked_from {
                lines.push(format!(
                    "forked from: {}:{}",
                    origin.session_id, origin.snapshot_id
                ));
            }
            println(&lines.join("\n"))
        }
        SessionCommand::Rm { ids } => {
            let client = ctx.client().await?;
            let mut removed = Vec::new();
            for id in &ids {
                let files = client.delete_session(id).await?;
                if !ctx.json && !ctx.quiet {
                    println(&format!("removed session {id} ({files} files)"))?;
                }
                removed.push(json!({"session_id": id, "files_deleted": files}));
            }
            if ctx.json {
                print_json(&json!({ "sessions": removed }))?;
            }
            Ok(())
        }
    }
}

fn split_pair<'a>(text: &'a str, form: &str) -> Outcome<(&'a str, &'a str)> {
    text.split_once('=')
        .ok_or_else(|| Failure::Usage(format!("'{text}' is not of the form {form}")))
}

fn backend(backend: Backend) -> &'static str {
    match backend {
        Backend::Memory => "memory",
        Backend::Directory => "directory",
        Backend::Container => "container",
    }
}

fn session_json(info: &SessionInfo) -> Value {
    json!({
        "session_id": info.id,
        "backend": backend(info.backend),
        "root_path": info.root_path.as_ref().map(|p| p.display().to_string()),
        "created_at": output::time(info.created_at),
        "read_only": info.read_only,
        "layout": if info.layout == Layout::Swarm { "swarm" } else { "flat" },
        "labels": info.labels,
        "idle_ttl_seconds": info.idle_ttl.map(|t| t.as_secs()),
        "last_active_at": info.last_active_at.map(output::time),
        "open_streams": info.open_streams,
        "served_by": info.served_by,
        "served_elsewhere": info.served_elsewhere,
        "usage": info.usage.map(|u| json!({"files": u.files, "bytes": u.bytes})),
        "limits": {
            "max_write_bytes": info.limits.max_write_bytes,
            "max_path_depth": info.limits.max_path_depth,
            "max_segment_length": info.limits.max_segment_length,
            "max_files": info.limits.max_files,
            "max_total_bytes": info.limits.max_total_bytes,
        },
        "token": info.token,
        "owner": info.owner.map(|o| json!({
            "uid": o.uid,
            "gid": o.gid,
            "file_permissions": o.file_permissions.map(|b| b.bits()),
            "directory_permissions": o.directory_permissions.map(|b| b.bits()),
        })),
        "forked_from": info.forked_from.as_ref().map(|f| json!({
            "session_id": f.session_id,
            "snapshot_id": f.snapshot_id,
        })),
    })
}

fn snapshot_json(s: &SnapshotInfo) -> Value {
    json!({
        "snapshot_id": s.id,
        "tag": s.tag,
        "created_at": output::time(s.created_at),
        "file_count": s.file_count,
        "total_bytes": s.total_bytes,
    })
}

pub async fn snapshot(ctx: &mut Ctx, command: SnapshotCommand) -> Outcome {
    match command {
        SnapshotCommand::Create { tag } => {
            let id = ctx.session_id().await?;
            let spinner = output::working("snapshot", ctx.quiet || ctx.json);
            let taken = ctx.client().await?.snapshot(&id, &tag).await;
            spinner.finish_and_clear();
            let info = taken?;
            if ctx.json {
                print_json(&snapshot_json(&info))
            } else {
                println(&info.id)
            }
        }
        SnapshotCommand::List => {
            let id = ctx.session_id().await?;
            let snapshots = ctx.client().await?.list_snapshots(&id).await?;
            if ctx.json {
                let all: Vec<_> = snapshots.iter().map(snapshot_json).collect();
                return print_json(&json!({ "snapshots": all }));
            }
            for s in &snapshots {
                println(&format!(
                    "{}  {}  {:>6} files {:>10}  {}",
                    s.id,
                    output::time(s.created_at),
                    s.file_count,
                    output::human_size(s.total_bytes),
                    s.tag
                ))?;
            }
            Ok(())
        }
        SnapshotCommand::Restore { id, path } => {
            let session_id = ctx.session_id().await?;
            let id = resolve_snapshot(ctx, &session_id, &id).await?;
            let at = match &path {
                Some(path) => wsfs_client::parse_path(path)?,
                None => wsfs::CanonicalPath::root(),
            };
            let spinner = output::working("restore", ctx.quiet || ctx.json);
            let restored = ctx
                .client()
                .await?
                .restore_path(&session_id, &id, &at)
                .await;
            spinner.finish_and_clear();
            let contents = restored?;
            let what = match at.is_root() {
                true => String::new(),
                false => format!(" {}", at.display()),
            };
            ctx.done(
                || {
                    format!(
                        "restored{what} from {id}: {} files, {}",
                        contents.file_count,
                        output::human_size(contents.total_bytes)
                    )
                },
                json!({"snapshot_id": id, "path": at.as_str(), "file_count": contents.file_count, "total_bytes": contents.total_bytes}),
            )
        }
        SnapshotCommand::Diff { id } => {
            let session_id = ctx.session_id().await?;
            let id = resolve_snapshot(ctx, &session_id, &id).await?;
            let spinner = output::working("diff", ctx.quiet || ctx.json);
            let compared = ctx.client().await?.diff_snapshot(&session_id, &id).await;
            spinner.finish_and_clear();
            let diff = compared?;
            let letter = |k: SnapshotChangeKind| match k {
                SnapshotChangeKind::Added => "A",
                SnapshotChangeKind::Deleted => "D",
                SnapshotChangeKind::Modified => "M",
            };
            if ctx.json {
                let changes: Vec<_> = diff
                    .changes
                    .iter()
                    .map(|c| json!({"kind": letter(c.kind), "path": c.path, "directory": c.directory}))
                    .collect();
                print_json(
                    &json!({"snapshot_id": id, "changes": changes, "truncated": diff.truncated}),
                )?;
            } else {
                for c in &diff.changes {
                    let slash = if c.directory { "/" } else { "" };
                    println(&format!("{}  {}{slash}", letter(c.kind), c.path))?;
                }
                if diff.truncated && !ctx.quiet {
                    eprintln!("wsfs: more changes than one answer holds; only the first are shown");
                }
            }
            if diff.changes.is_empty() {
                Ok(())
            } else {
                Err(Failure::Silent(1))
            }
        }
        SnapshotCommand::Rm { id } => {
            let session_id = ctx.session_id().await?;
            let id = resolve_snapshot(ctx, &session_id, &id).await?;
            ctx.client()
                .await?
                .delete_snapshot(&session_id, &id)
                .await?;
            ctx.done(
                || format!("removed snapshot {id}"),
                json!({ "snapshot_id": id }),
            )
        }
    }
}

pub async fn export(ctx: &mut Ctx, args: ExportArgs) -> Outcome {
    let session = ctx.session().await?;
    let snapshot = match &args.snapshot {
        Some(name) => Some(resolve_snapshot(ctx, session.id(), name).await?),
        None => None,
    };
    let to_stdout = args.file == "-";
    // The size is not known ahead: a spinner counting bytes.
    let bar = output::progress(None, 0, ctx.quiet || ctx.json || to_stdout, "export");
    let (stdout, stdout_closed) = output::Stdout::new();
    let out: Box<dyn tokio::io::AsyncWrite + Unpin> = if to_stdout {
        Box::new(stdout)
    } else {
        Box::new(
            tokio::fs::File::create(&args.file)
                .await
                .map_err(local(format!("cannot create '{}'", args.file)))?,
        )
    };
    let counted = bar.clone();
    let out = InspectWriter::new(out, move |written| counted.inc(written.len() as u64));
    let bytes = match session.export_to_writer(out, snapshot.as_deref()).await {
        Ok(bytes) => bytes,
        Err(_) if stdout_closed.load(std::sync::atomic::Ordering::Relaxed) => {
            return Err(Failure::Silent(0))
        }
        Err(e) => {
            if !to_stdout {
                let _ = tokio::fs::remove_file(&args.file).await;
            }
            return Err(e.into());
        }
    };
    bar.finish_and_clear();
    if to_stdout {
        return Ok(());
    }
    ctx.done(
        || format!("exported {} to {}", output::human_size(bytes), args.file),
        json!({"file": args.file, "bytes": bytes}),
    )
}

/// `wsfs import`: a wsfs archive replaces the workspace (the server checks
/// it whole first); an ordinary zip or tar is added to it, file by file
/// (see `unpack`).
pub async fn import(ctx: &mut Ctx, args: ImportArgs) -> Outcome {
    use super::unpack::{self, Kind, Placement, Source};
    use std::io::{Read, Seek};
    use tokio::io::AsyncReadExt;
    let placing = args.strip_components.is_some() || args.prefix.is_some();
    let mut placement = Placement {
        strip: args.strip_components.unwrap_or(0),
        prefix: args.prefix.clone().unwrap_or_default(),
        wsfs_layout: false,
    };
    // The first 512 bytes say what the archive is (a tar's magic is at 257).
    let mut head = Vec::with_capacity(512);
    if args.file == "-" {
        let mut stdin = tokio::io::stdin();
        (&mut stdin)
            .take(512)
            .read_to_end(&mut head)
            .await
            .map_err(local("cannot read stdin"))?;
        let kind = Kind::sniff(&head).ok_or_else(|| unpack::unknown_kind("-"))?;
        let whole = AsyncReadExt::chain(std::io::Cursor::new(head), stdin);
        return match kind {
            Kind::Zip if placing => Err(Failure::Usage(
                "a zip read from stdin is taken as a wsfs archive; to place an ordinary zip's \
                 files (--prefix, --strip-components), pass the zip's path"
                    .into(),
            )),
            Kind::Zip => replace(ctx, &args.file, Box::new(whole), None).await,
            kind => {
                let reader = tokio_util::io::SyncIoBridge::new(whole);
                let source = Source::Stream(Box::new(reader), kind);
                unpack::extract(ctx, "stdin", source, placement).await
            }
        };
    }
    let mut file =
        std::fs::File::open(&args.file).map_err(local(format!("cannot open '{}'", args.file)))?;
    (&mut file)
        .take(512)
        .read_to_end(&mut head)
        .and_then(|_| file.rewind())
        .map_err(local(format!("cannot read '{}'", args.file)))?;
    let kind = Kind::sniff(&head).ok_or_else(|| unpack::unknown_kind(&args.file))?;
    if kind == Kind::Zip {
        placement.wsfs_layout = unpack::is_wsfs_zip(&file)?;
        // The look moved the shared offset: back to the start.
        file.rewind()
            .map_err(local(format!("cannot read '{}'", args.file)))?;
        if placement.wsfs_layout && !placing {
            let size = file.metadata().ok().map(|m| m.len());
            let file = tokio::fs::File::from_std(file);
            return replace(ctx, &args.file, Box::new(file), size).await;
        }
    }
    unpack::extract(ctx, &args.file, Source::File(file, kind), placement).await
}

/// Replaces the workspace with the wsfs archive `reader` yields.
async fn replace(
    ctx: &mut Ctx,
    shown: &str,
    reader: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    size: Option<u64>,
) -> Outcome {
    let quiet = ctx.quiet || ctx.json;
    let bar = output::progress(size, 0, quiet, "import");
    let counted = bar.clone();
    let reader = InspectReader::new(reader, move |read| counted.inc(read.len() as u64));
    // A read error aborts the upload: the server never sees a complete
    // archive, so nothing changes.
    let (file_count, total_bytes) = ctx.session().await?.import_from_reader(reader).await?;
    bar.finish_and_clear();
    ctx.done(
        || {
            format!(
                "imported {shown}: {} files, {} (the workspace now holds exactly these)",
                file_count,
                output::human_size(total_bytes)
            )
        },
        json!({"file": shown, "file_count": file_count, "total_bytes": total_bytes}),
    )
}

pub async fn token(ctx: &mut Ctx, command: TokenCommand) -> Outcome {
    match command {
        TokenCommand::Issue { caller } => {
            let id = ctx.session_id().await?;
            let issued = ctx.client().await?.issue_token(&id, &caller).await?;
            if ctx.json {
                print_json(&json!({"token": issued.token, "caller": issued.caller}))
            } else {
                println(&issued.token)
            }
        }
    }
}

/// The newest snapshot of `session_id`.
async fn newest_snapshot(ctx: &mut Ctx, session_id: &str) -> Outcome<String> {
    let snapshots = ctx.client().await?.list_snapshots(session_id).await?;
    match snapshots.last() {
        Some(newest) => Ok(newest.id.clone()),
        None => Err(Failure::Usage(format!(
            "session '{session_id}' has no snapshot to fork; take one with `wsfs snapshot create`"
        ))),
    }
}

/// A snapshot named as git names commits: its id, its tag, or a prefix of
/// its id that names only one (at least 4 characters). A tag given to
/// several snapshots is refused with their ids, not guessed.
pub(super) async fn resolve_snapshot(
    ctx: &mut Ctx,
    session_id: &str,
    name: &str,
) -> Outcome<String> {
    resolve_snapshot_with(&ctx.client().await?, session_id, name).await
}

/// [`resolve_snapshot`] on `client` (the MCP server names snapshots the
/// same way). A name that fits several is a usage error listing them.
pub(super) async fn resolve_snapshot_with(
    client: &wsfs_client::Client,
    session_id: &str,
    name: &str,
) -> Outcome<String> {
    let snapshots = client.list_snapshots(session_id).await?;
    if snapshots.iter().any(|s| s.id == name) {
        return Ok(name.to_string());
    }
    let ids = |found: Vec<&wsfs_client::SnapshotInfo>| -> Vec<String> {
        found.iter().map(|s| s.id.clone()).collect()
    };
    let tagged: Vec<_> = snapshots.iter().filter(|s| s.tag == name).collect();
    match tagged.len() {
        1 => return Ok(tagged[0].id.clone()),
        0 => {}
        _ => {
            return Err(Failure::Usage(format!(
                "the tag '{name}' names {} snapshots ({}); give one id",
                tagged.len(),
                ids(tagged).join(", ")
            )))
        }
    }
    let prefixed: Vec<_> = snapshots
        .iter()
        .filter(|s| name.len() >= 4 && s.id.starts_with(name))
        .collect();
    match prefixed.len() {
        1 => Ok(prefixed[0].id.clone()),
        0 => Err(wsfs_client::Error::SnapshotNotFound {
            snapshot_id: name.to_string(),
        }
        .into()),
        _ => Err(Failure::Usage(format!(
            "'{name}' starts {} snapshot ids ({}); give more of it",
            prefixed.len(),
            ids(prefixed).join(", ")
        ))),
    }
}

/// A session just made or brought back: its id alone on stdout
/// (`export WSFS_SESSION=$(...)`), or all of it with --json.
fn print_new_session(ctx: &Ctx, info: &SessionInfo) -> Outcome {
    if ctx.json {
        return print_json(&session_json(info));
    }
    // The token, shown once, must not be lost with the id.
    if let Some(token) = &info.token {
        eprintln!("wsfs: this session's system token (shown once): export WSFS_TOKEN={token}");
    }
    println(&info.id)
}
