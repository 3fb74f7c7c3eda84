//! File commands: ls, tree, du, cat, head, tail, get, put, write, append,
//! edit, rm, mkdir, mv, cp, stat, chmod, touch.

use super::args::{
    CatArgs, ChmodArgs, DuArgs, EditArgs, GetArgs, HeadArgs, LsArgs, MkdirArgs, PutArgs, RmArgs,
    StatArgs, TouchArgs, TransferArgs, TreeArgs, WriteArgs,
};
use super::output::{self, print_json, println};
use super::{local, Ctx, Failure, Outcome};
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;
use wsfs_client::{
    parse_path, Attributes, ByteRange, CanonicalPath, DeleteOptions, EditSpec, Error, FileKind,
    Filesystem, LineRange, MkdirOptions, Permissions, Session, TransferOptions, WriteMode,
    WriteOptions, WriteOutcome, MAX_CHUNK_SIZE, MAX_DELETE_ENTRIES,
};

pub async fn ls(ctx: &mut Ctx, args: LsArgs) -> Outcome {
    let session = ctx.session().await?;
    let base = parse_path(&args.path)?;
    let depth = if args.recursive {
        u32::MAX
    } else {
        args.depth.unwrap_or(1)
    };
    let listed = session.list_all(&base, depth).await?;
    if ctx.json {
        let entries: Vec<_> = listed.iter().map(output::metadata).collect();
        return print_json(&json!({
            "path": base.as_str(),
            "entries": entries,
            "truncated": false,
        }));
    }
    for line in ls_lines(&listed, &base, args.long) {
        println(&line)?;
    }
    Ok(())
}

/// The lines of `ls`: names relative to `base` (directories with a `/`),
/// or with `long`, kind and bits, size, time and version in columns as
/// wide as their widest value, as ls -l aligns them (a DIRECTORY
/// session's versions are 16-digit clocks where MEMORY counts from 1).
fn ls_lines(entries: &[wsfs_client::Metadata], base: &CanonicalPath, long: bool) -> Vec<String> {
    let width = |value: fn(&wsfs_client::Metadata) -> u64| {
        entries
            .iter()
            .map(|e| value(e).to_string().len())
            .max()
            .unwrap_or(1)
    };
    let (size_width, version_width) = (width(|e| e.size), width(|e| e.version));
    entries
        .iter()
        .map(|entry| {
            let shown = entry
                .path
                .strip_prefix(base)
                .map_or_else(|| entry.path.to_string(), |p| p.to_string());
            let suffix = if entry.kind == FileKind::Directory {
                "/"
            } else {
                ""
            };
            if !long {
                return format!("{shown}{suffix}");
            }
            let kind = match entry.kind {
                FileKind::File => '-',
                FileKind::Directory => 'd',
                FileKind::Symlink => 'l',
            };
            format!(
                "{kind}{} {:>size_width$} {} v{:<version_width$} {shown}{suffix}",
                entry.permissions,
                entry.size,
                output::time(entry.modified),
                entry.version,
            )
        })
        .collect()
}

pub async fn cat(ctx: &mut Ctx, args: CatArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    if let Some(name) = &args.snapshot {
        if ctx.json {
            return Err(Failure::Usage(
                "cat --snapshot prints the bytes as stored; drop --json".into(),
            ));
        }
        let id = super::sessions::resolve_snapshot(ctx, session.id(), name).await?;
        let (_, mut chunks) = ctx
            .client()
            .await?
            .read_snapshot_file(session.id(), &id, path.as_str())
            .await?;
        let mut out = tokio::io::stdout();
        while let Some(chunk) = chunks.next().await {
            out.write_all(&chunk?)
                .await
                .map_err(output::stdout_failed)?;
        }
        return out.flush().await.map_err(output::stdout_failed);
    }
    if args.bytes {
        let range = ByteRange {
            offset: args.offset.unwrap_or(0),
            limit: args.limit,
        };
        let mut stream = session.read_bytes(&path, range, MAX_CHUNK_SIZE).await?;
        if ctx.json {
            let mut data = Vec::new();
            while let Some(chunk) = stream.chunks.next().await {
                data.extend_from_slice(&chunk?);
            }
            return print_json(&json!({
                "path": stream.path.as_str(),
                "size_bytes": stream.size,
                "version": stream.version,
                "offset": stream.offset,
                "length": stream.length,
                "data_base64": base64::engine::general_purpose::STANDARD.encode(&data),
            }));
        }
        while let Some(chunk) = stream.chunks.next().await {
            output::print_raw(&chunk?)?;
        }
        return Ok(());
    }
    if ctx.json || args.offset.is_some() || args.limit.is_some() {
        let range = LineRange {
            offset: args.offset.unwrap_or(0),
            // No --limit: the rest of the file, not the server's 2000 lines.
            limit: args.limit,
        };
        let page = session.read(&path, range).await?;
        if ctx.json {
            return print_json(&json!({
                "path": page.path.as_str(),
                "content": page.content,
                "total_lines": page.total_lines,
                "offset": page.offset,
                "lines": page.lines,
                "truncated": page.truncated,
                "version": page.version,
                "size_bytes": page.size,
            }));
        }
        return output::print_raw(page.content.as_bytes());
    }
    let text = session.read_to_string(path.as_str()).await?;
    output::print_raw(text.as_bytes())
}

pub async fn get(ctx: &mut Ctx, args: GetArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.remote)?;
    let name = path.name().unwrap_or("workspace").to_string();
    let target = match args.local.as_deref() {
        Some("-") => None,
        Some(local) if Path::new(local).is_dir() => Some(Path::new(local).join(&name)),
        Some(local) => Some(PathBuf::from(local)),
        None => Some(PathBuf::from(&name)),
    };
    let bytes = match &target {
        None => {
            let mut stdout = std::io::stdout().lock();
            download(&session, &path, &mut stdout, true).await?
        }
        Some(target) => download_to_file(&session, &path, target, ctx.quiet || ctx.json).await?,
    };
    if target.is_some() {
        let shown = target.as_ref().map(|t| t.display().to_string());
        ctx.done(
            || {
                format!(
                    "{} -> {} ({})",
                    path,
                    shown.clone().unwrap_or_default(),
                    output::human_size(bytes)
                )
            },
            json!({"path": path.as_str(), "local": shown, "bytes": bytes}),
        )?;
    }
    Ok(())
}

/// Streams a remote file into `writer`; returns the bytes written. Each
/// chunk (up to 1 MiB) is written in place, off the runtime's other work
/// (`block_in_place`): tokio's stdout and files copy every chunk and hand
/// it to the blocking pool, which cost a third of the CLI's CPU time on a
/// 1 GiB `get` (BENCHMARKS.md, Byte streams). Needs the CLI's
/// multi-threaded runtime.
pub async fn download<W: std::io::Write>(
    session: &Session,
    path: &CanonicalPath,
    writer: &mut W,
    quiet: bool,
) -> Outcome<u64> {
    let mut stream = session
        .read_bytes(path, ByteRange::default(), MAX_CHUNK_SIZE)
        .await?;
    let bar = output::progress(
        Some(stream.length),
        output::PROGRESS_THRESHOLD,
        quiet,
        path.as_str(),
    );
    let failed = || local(format!("cannot write the download of '{path}'"));
    let mut written = 0u64;
    while let Some(chunk) = stream.chunks.next().await {
        let chunk = chunk?;
        match tokio::task::block_in_place(|| writer.write_all(&chunk)) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Err(Failure::Silent(0)),
            other => other.map_err(failed())?,
        }
        written += chunk.len() as u64;
        bar.inc(chunk.len() as u64);
    }
    tokio::task::block_in_place(|| writer.flush()).map_err(failed())?;
    bar.finish_and_clear();
    Ok(written)
}

/// Downloads next to `target` and renames into place, so a failed
/// download never leaves a half file under the real name.
pub async fn download_to_file(
    session: &Session,
    path: &CanonicalPath,
    target: &Path,
    quiet: bool,
) -> Outcome<u64> {
    let part = partial_name(target);
    let mut file = std::fs::File::create(&part)
        .map_err(local(format!("cannot create '{}'", part.display())))?;
    let result = download(session, path, &mut file, quiet).await;
    drop(file);
    match result {
        Ok(bytes) => {
            tokio::fs::rename(&part, target)
                .await
                .map_err(local(format!("cannot write '{}'", target.display())))?;
            Ok(bytes)
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            Err(e)
        }
    }
}

fn partial_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.wsfs-part"))
}

pub async fn put(ctx: &mut Ctx, args: PutArgs) -> Outcome {
    let session = ctx.session().await?;
    let remote = match (&args.remote, args.local.as_str()) {
        (Some(remote), _) => remote.clone(),
        (None, "-") => return Err(Failure::Usage("put from stdin needs a REMOTE path".into())),
        (None, local) => Path::new(local)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| Failure::Usage(format!("'{local}' names no file")))?,
    };
    let path = parse_path(&remote)?;
    let options = WriteOptions {
        mode: if args.create {
            WriteMode::Create
        } else {
            WriteMode::Overwrite
        },
        create_parents: true,
        if_version: args.if_version,
        ..WriteOptions::default()
    };
    let quiet = ctx.quiet || ctx.json;
    let outcome = if args.local == "-" {
        upload(&session, &path, tokio::io::stdin(), None, options, quiet).await?
    } else {
        let file = tokio::fs::File::open(&args.local)
            .await
            .map_err(local(format!("cannot open '{}'", args.local)))?;
        let meta = file
            .metadata()
            .await
            .map_err(local(format!("cannot read '{}'", args.local)))?;
        if meta.is_dir() {
            return Err(Failure::Usage(format!(
                "'{}' is a directory: upload a tree with `wsfs push {} REMOTE_DIR`",
                args.local, args.local
            )));
        }
        let size = Some(meta.len());
        upload(&session, &path, file, size, options, quiet).await?
    };
    ctx.done(|| wrote(&outcome), write_json(&outcome))
}

/// Streams `reader` into a remote file, 1 MiB per message.
pub async fn upload<R: AsyncRead + Send + 'static>(
    session: &Session,
    path: &CanonicalPath,
    reader: R,
    size: Option<u64>,
    options: WriteOptions,
    quiet: bool,
) -> Outcome<WriteOutcome> {
    let bar = output::progress(size, output::PROGRESS_THRESHOLD, quiet, path.as_str());
    let counted = bar.clone();
    let source = path.clone();
    let data = ReaderStream::with_capacity(reader, MAX_CHUNK_SIZE)
        .map(move |chunk: std::io::Result<Bytes>| {
            if let Ok(chunk) = &chunk {
                counted.inc(chunk.len() as u64);
            }
            chunk.map_err(|e| Error::internal(format!("reading the upload for '{source}': {e}")))
        })
        .boxed();
    let outcome = session.write_bytes(path, options, data).await;
    bar.finish_and_clear();
    match (outcome, size) {
        // The server counts the bytes it received before refusing; the
        // file's own size is the figure to act on.
        (Err(Error::TooLarge { path, limit, .. }), Some(size)) => {
            Err(Error::TooLarge { path, size, limit }.into())
        }
        (Err(Error::TooLarge { path, size, limit }), None) => Err(Failure::Hinted(
            Error::TooLarge { path, size, limit },
            format!(
                "the upload passed this session's per-write limit of {} after {} bytes; create a session with a larger limit, e.g. `wsfs session create --max-write-bytes 1G` (up to the server's --max-write-bytes)",
                output::human_size(limit),
                size
            ),
        )),
        (outcome, _) => Ok(outcome?),
    }
}

fn wrote(outcome: &WriteOutcome) -> String {
    format!(
        "wrote {} to {} (version {})",
        output::human_size(outcome.bytes_written),
        outcome.path,
        outcome.version
    )
}

fn write_json(outcome: &WriteOutcome) -> serde_json::Value {
    json!({
        "path": outcome.path.as_str(),
        "bytes_written": outcome.bytes_written,
        "size_bytes": outcome.size,
        "version": outcome.version,
        "created": outcome.created,
    })
}

pub async fn write(ctx: &mut Ctx, args: WriteArgs, append: bool) -> Outcome {
    if append && args.create {
        return Err(Failure::Usage("append takes no --create".into()));
    }
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    let text = match args.text {
        Some(text) if args.no_newline || text.ends_with('\n') => text,
        Some(text) => text + "\n",
        None => {
            let mut raw = Vec::new();
            tokio::io::stdin()
                .read_to_end(&mut raw)
                .await
                .map_err(local("cannot read stdin"))?;
            String::from_utf8(raw).map_err(|_| {
                Failure::Usage(
                    "stdin is not UTF-8 text; upload bytes with `wsfs put - PATH`".into(),
                )
            })?
        }
    };
    let options = WriteOptions {
        mode: match (append, args.create) {
            (true, _) => WriteMode::Append,
            (false, true) => WriteMode::Create,
            (false, false) => WriteMode::Overwrite,
        },
        create_parents: !args.no_parents,
        if_version: args.if_version,
        ..WriteOptions::default()
    };
    let outcome = session.write(&path, &text, options).await?;
    ctx.done(|| wrote(&outcome), write_json(&outcome))
}

pub async fn edit(ctx: &mut Ctx, args: EditArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    let spec = EditSpec {
        old_text: args.old,
        new_text: args.new,
        replace_all: args.all,
        if_version: args.if_version,
        dry_run: args.dry_run,
    };
    let outcome = session.edit(&path, spec).await?;
    if ctx.json {
        return print_json(&json!({
            "path": outcome.path.as_str(),
            "replacements": outcome.replacements,
            "version": outcome.version,
            "diff": outcome.diff,
            "dry_run": outcome.dry_run,
            "size_bytes": outcome.size,
        }));
    }
    if outcome.dry_run {
        return output::print_raw(outcome.diff.as_bytes());
    }
    if ctx.quiet {
        return Ok(());
    }
    let plural = if outcome.replacements == 1 { "" } else { "s" };
    println(&format!(
        "{} replacement{plural} in {} (version {})",
        outcome.replacements, outcome.path, outcome.version
    ))
}

/// As rm(1): a directory, even an empty one, needs -r; a path that fails
/// is reported and the others are still removed, and the command then
/// fails.
///
/// The paths go to the server in DeleteMany calls of up to
/// [`MAX_DELETE_ENTRIES`] entries, each removed as a Delete
/// of its own, in the order given. Without -r each path is looked at
/// first (a few at once), so that a directory is refused with rm(1)'s
/// hint and left as it was.
pub async fn rm(ctx: &mut Ctx, args: RmArgs) -> Outcome {
    let session = ctx.session().await?;
    let options = DeleteOptions {
        recursive: args.recursive,
        allow_missing: args.force,
        if_version: None,
    };
    // Each path in the order given: refused here (it does not parse, a
    // directory without -r), then removed or refused by the server.
    let mut each: Vec<RmPath> = args
        .paths
        .iter()
        .map(|raw| match parse_path(raw) {
            Ok(path) => RmPath::Waiting(path),
            Err(e) => RmPath::Refused(e.into()),
        })
        .collect();
    if !options.recursive {
        let kinds: Vec<_> = futures::stream::iter(each.iter().map(|state| async {
            match state {
                RmPath::Waiting(path) => Some(session.exists(path).await),
                _ => None,
            }
        }))
        .buffered(RM_LOOKS_AT_ONCE)
        .collect()
        .await;
        for ((state, kind), raw) in each.iter_mut().zip(kinds).zip(&args.paths) {
            let refusal = match (&*state, kind) {
                (RmPath::Waiting(path), Some(Ok(Some(FileKind::Directory)))) => Failure::Hinted(
                    Error::IsADirectory {
                        path: path.as_str().to_string(),
                    },
                    format!(
                        "cannot remove '{path}' without -r: `wsfs rm -r {raw}` removes it with its contents"
                    ),
                ),
                (_, Some(Err(e))) => e.into(),
                _ => continue,
            };
            *state = RmPath::Refused(refusal);
        }
    }
    let waiting: Vec<usize> = (0..each.len())
        .filter(|&i| matches!(each[i], RmPath::Waiting(_)))
        .collect();
    for batch in waiting.chunks(MAX_DELETE_ENTRIES) {
        let entries = batch
            .iter()
            .filter_map(|&i| match &each[i] {
                RmPath::Waiting(path) => Some((path.clone(), options)),
                _ => None,
            })
            .collect();
        // A call that fails whole (the server gone) fails each of its
        // paths; what earlier calls removed is still reported.
        let results = match session.delete_many(entries).await {
            Ok(results) => results,
            Err(e) => vec![Err(e); batch.len()],
        };
        for (&i, result) in batch.iter().zip(results) {
            if let RmPath::Waiting(path) = &each[i] {
                each[i] = match result {
                    Ok(deleted) => RmPath::Removed(path.clone(), deleted),
                    Err(e) => RmPath::Refused(e.into()),
                };
            }
        }
    }
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for state in each {
        match state {
            RmPath::Removed(path, deleted) => {
                if !ctx.json && !ctx.quiet && deleted > 0 {
                    println(&format!("removed {path} ({})", entries_text(deleted)))?;
                }
                results.push(json!({"path": path.as_str(), "deleted": deleted}));
            }
            RmPath::Refused(failure) => failures.push(failure),
            RmPath::Waiting(_) => {}
        }
    }
    if ctx.json {
        let total: u64 = results.iter().filter_map(|r| r["deleted"].as_u64()).sum();
        print_json(&json!({"paths": results, "deleted": total}))?;
    }
    let last = failures.pop();
    for failure in failures {
        let (reason, message) = failure.text();
        eprintln!("wsfs: {reason}: {message}");
    }
    last.map_or(Ok(()), Err)
}

/// Where one path of `wsfs rm` stands.
enum RmPath {
    /// To be deleted.
    Waiting(CanonicalPath),
    /// Deleted, with the entries that went.
    Removed(CanonicalPath, u64),
    Refused(Failure),
}

/// Paths `wsfs rm` looks at at once, before deleting without -r.
const RM_LOOKS_AT_ONCE: usize = 16;

pub async fn mkdir(ctx: &mut Ctx, args: MkdirArgs) -> Outcome {
    let session = ctx.session().await?;
    // As mkdir(1): without -p, parents must exist and the directory must not.
    let options = MkdirOptions {
        parents: args.parents,
        exist_ok: args.parents,
        ..MkdirOptions::default()
    };
    let mut results = Vec::new();
    for raw in &args.paths {
        let path = parse_path(raw)?;
        let created = session.mkdir(&path, options).await?;
        results.push(json!({"path": path.as_str(), "created": created}));
    }
    if ctx.json {
        print_json(&json!({ "paths": results }))?;
    }
    Ok(())
}

/// What `wsfs chmod` asks for.
enum ModeChange {
    Set(Permissions),
    /// Add (true) or remove every execute bit.
    Execute(bool),
}

fn parse_mode(raw: &str) -> Outcome<ModeChange> {
    match raw {
        "+x" | "a+x" => return Ok(ModeChange::Execute(true)),
        "-x" | "a-x" => return Ok(ModeChange::Execute(false)),
        _ => {}
    }
    Permissions::parse_octal(raw)
        .map(ModeChange::Set)
        .map_err(|e| Failure::Usage(format!("{e}; or +x / -x")))
}

pub async fn chmod(ctx: &mut Ctx, args: ChmodArgs) -> Outcome {
    let change = parse_mode(&args.mode)?;
    let session = ctx.session().await?;
    let mut results = Vec::new();
    for raw in &args.paths {
        let path = parse_path(raw)?;
        let attributes = match change {
            ModeChange::Set(bits) => Attributes {
                permissions: Some(bits),
                ..Attributes::default()
            },
            ModeChange::Execute(add) => {
                // Against the bits just read: a change made meanwhile is
                // VERSION_MISMATCH, not overwritten.
                let now = session.stat(&path).await?;
                let bits = now.permissions.bits();
                let bits = if add { bits | 0o111 } else { bits & !0o111 };
                Attributes {
                    permissions: Some(Permissions::masked(bits)),
                    if_version: Some(now.version),
                    ..Attributes::default()
                }
            }
        };
        let done = session.set_attributes(&path, attributes).await?;
        if !ctx.json && !ctx.quiet {
            println(&format!("{} {}", done.permissions, path.display()))?;
        }
        results.push(json!({
            "path": path.as_str(),
            "permissions": done.permissions.bits(),
            "mode": done.permissions.to_string(),
            "version": done.version,
        }));
    }
    if ctx.json {
        print_json(&json!({ "paths": results }))?;
    }
    Ok(())
}

pub async fn transfer(ctx: &mut Ctx, args: TransferArgs, is_move: bool) -> Outcome {
    let session = ctx.session().await?;
    let source = parse_path(&args.source)?;
    let mut destination = parse_path(&args.destination)?;
    // As cp and mv: into an existing directory, or one named with a
    // trailing slash, under the source's own name.
    let into = !args.no_target_directory
        && (args.destination.ends_with('/')
            || session.exists(&destination).await? == Some(FileKind::Directory));
    if into {
        if let Some(name) = source.name() {
            destination = destination.join(name)?;
        }
    }
    let options = TransferOptions {
        overwrite: args.overwrite,
        ..TransferOptions::default()
    };
    let done = if is_move {
        session.rename(&source, &destination, options).await
    } else {
        session.copy(&source, &destination, options).await
    };
    let done = match done {
        // A source that is not in the session but is on this machine: the
        // user meant an upload.
        Err(e @ Error::FileNotFound { .. })
            if e.path() == Some(source.as_str()) && Path::new(&args.source).exists() =>
        {
            return Err(Failure::Hinted(
                e,
                format!(
                    "'{}' is a path on this machine, not in the session: upload it with `wsfs put {} {}` (a directory with `wsfs push`)",
                    args.source, args.source, args.destination
                ),
            ));
        }
        other => other?,
    };
    let verb = if is_move { "moved" } else { "copied" };
    ctx.done(
        || {
            format!(
                "{verb} {source} -> {destination} ({})",
                entries_text(done.entries)
            )
        },
        json!({
            "source": source.as_str(),
            "destination": destination.as_str(),
            "entries": done.entries,
            "version": done.version,
        }),
    )
}

fn entries_text(n: u64) -> String {
    if n == 1 {
        "1 entry".to_string()
    } else {
        format!("{n} entries")
    }
}

pub async fn stat(ctx: &mut Ctx, args: StatArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    let meta = session.stat(&path).await?;
    if ctx.json {
        return print_json(&output::metadata(&meta));
    }
    println(&format!(
        "path:     {}\nkind:     {}\nsize:     {} ({})\nmode:     {} ({:04o})\ncreated:  {}\nmodified: {}\nversion:  {}",
        meta.path.display(),
        output::kind(meta.kind),
        meta.size,
        output::human_size(meta.size),
        meta.permissions,
        meta.permissions,
        output::time(meta.created),
        output::time(meta.modified),
        meta.version
    ))
}

/// Lists `base` to `depth` levels, whole (page after page).
async fn whole_listing(
    session: &Session,
    base: &CanonicalPath,
    depth: u32,
) -> Outcome<Vec<wsfs_client::Metadata>> {
    Ok(session.list_all(base, depth).await?)
}

/// Each directory's entries, by the directory's path, in name order.
fn children(
    entries: Vec<wsfs_client::Metadata>,
) -> std::collections::BTreeMap<String, Vec<wsfs_client::Metadata>> {
    let mut by_parent: std::collections::BTreeMap<String, Vec<wsfs_client::Metadata>> =
        Default::default();
    for entry in entries {
        let parent = entry
            .path
            .parent()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        by_parent.entry(parent).or_default().push(entry);
    }
    for list in by_parent.values_mut() {
        list.sort_by(|a, b| a.path.cmp(&b.path));
    }
    by_parent
}

pub async fn tree(ctx: &mut Ctx, args: TreeArgs) -> Outcome {
    let session = ctx.session().await?;
    let base = parse_path(&args.path)?;
    let entries = whole_listing(&session, &base, args.level.unwrap_or(u32::MAX)).await?;
    if ctx.json {
        let all: Vec<_> = entries.iter().map(output::metadata).collect();
        return print_json(&json!({"path": base.as_str(), "entries": all}));
    }
    let (dirs, files) = entries.iter().fold((0, 0), |(d, f), e| match e.kind {
        FileKind::Directory => (d + 1, f),
        _ => (d, f + 1),
    });
    let by_parent = children(entries);
    println(base.display())?;
    let mut lines = Vec::new();
    tree_lines(&by_parent, base.as_str(), "", &mut lines);
    for line in &lines {
        println(line)?;
    }
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    println(&format!(
        "\n{}, {}",
        plural(dirs, "directory", "directories"),
        plural(files, "file", "files")
    ))
}

/// The lines of `dir`'s subtree, drawn as tree(1) draws them.
fn tree_lines(
    by_parent: &std::collections::BTreeMap<String, Vec<wsfs_client::Metadata>>,
    dir: &str,
    indent: &str,
    lines: &mut Vec<String>,
) {
    let Some(entries) = by_parent.get(dir) else {
        return;
    };
    for (i, entry) in entries.iter().enumerate() {
        let last = i + 1 == entries.len();
        let name = entry.name();
        let suffix = if entry.kind == FileKind::Directory {
            "/"
        } else {
            ""
        };
        let branch = if last { "└── " } else { "├── " };
        lines.push(format!("{indent}{branch}{name}{suffix}"));
        if entry.kind == FileKind::Directory {
            let deeper = format!("{indent}{}", if last { "    " } else { "│   " });
            tree_lines(by_parent, entry.path.as_str(), &deeper, lines);
        }
    }
}

pub async fn du(ctx: &mut Ctx, args: DuArgs) -> Outcome {
    let session = ctx.session().await?;
    let max_depth = if args.summarize {
        Some(0)
    } else {
        args.max_depth
    };
    let paths = if args.paths.is_empty() {
        vec![String::new()]
    } else {
        args.paths.clone()
    };
    let mut rows = Vec::new();
    for raw in &paths {
        let base = parse_path(raw)?;
        let meta = session.stat(&base).await?;
        if meta.kind != FileKind::Directory {
            rows.push((base.as_str().to_string(), meta.size));
            continue;
        }
        let entries = whole_listing(&session, &base, u32::MAX).await?;
        // Every directory's total: each file counts in all its ancestors
        // up to the base.
        let mut totals: std::collections::BTreeMap<String, u64> = Default::default();
        totals.insert(base.as_str().to_string(), 0);
        for entry in &entries {
            if entry.kind == FileKind::Directory {
                totals.entry(entry.path.as_str().to_string()).or_default();
            }
        }
        for entry in entries.iter().filter(|e| e.kind == FileKind::File) {
            let mut at = entry.path.parent();
            while let Some(dir) = at {
                if let Some(total) = totals.get_mut(dir.as_str()) {
                    *total += entry.size;
                }
                if dir == base {
                    break;
                }
                at = dir.parent();
            }
        }
        // As du: children before their parent, the base last.
        let mut dirs: Vec<_> = totals
            .into_iter()
            .filter(|(dir, _)| {
                let below = segments(dir).count() - base.depth();
                max_depth.is_none_or(|d| below <= d as usize)
            })
            .collect();
        dirs.sort_by(|a, b| du_order(&a.0, &b.0));
        rows.extend(dirs);
    }
    if ctx.json {
        let all: Vec<_> = rows
            .iter()
            .map(|(path, bytes)| json!({"path": path, "bytes": bytes}))
            .collect();
        return print_json(&json!({ "paths": all }));
    }
    for (path, bytes) in &rows {
        let size = if args.human_readable {
            output::human_size(*bytes)
        } else {
            bytes.to_string()
        };
        let shown = if path.is_empty() { "/" } else { path.as_str() };
        println(&format!("{size}\t{shown}"))?;
    }
    Ok(())
}

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// du's order: a directory after everything beneath it, siblings by name
/// (segment by segment, so that `a/b` stays beside `a`).
fn du_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut x, mut y) = (segments(a), segments(b));
    loop {
        match (x.next(), y.next()) {
            (Some(p), Some(q)) if p == q => continue,
            (Some(p), Some(q)) => return p.cmp(q),
            // The one that goes on is beneath the other: it comes first.
            (Some(_), None) => return std::cmp::Ordering::Less,
            (None, Some(_)) => return std::cmp::Ordering::Greater,
            (None, None) => return std::cmp::Ordering::Equal,
        }
    }
}

pub async fn head(ctx: &mut Ctx, args: HeadArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    if args.lines == 0 {
        // Still a refusal for a path that is not a text file.
        session
            .read(
                &path,
                LineRange {
                    offset: 0,
                    limit: Some(1),
                },
            )
            .await?;
        return Ok(());
    }
    let range = LineRange {
        offset: 0,
        limit: Some(args.lines),
    };
    let page = session.read(&path, range).await?;
    output::print_raw(page.content.as_bytes())
}

pub async fn tail(ctx: &mut Ctx, args: HeadArgs) -> Outcome {
    let session = ctx.session().await?;
    let path = parse_path(&args.path)?;
    let first = LineRange {
        offset: 0,
        limit: Some(1),
    };
    let total = session.read(&path, first).await?.total_lines;
    let rest = LineRange {
        offset: total.saturating_sub(args.lines),
        limit: None,
    };
    let page = session.read(&path, rest).await?;
    output::print_raw(page.content.as_bytes())
}

/// As touch(1): a missing file is created empty (unless -c), an existing
/// path's modification time becomes now.
pub async fn touch(ctx: &mut Ctx, args: TouchArgs) -> Outcome {
    let session = ctx.session().await?;
    for raw in &args.paths {
        let path = parse_path(raw)?;
        let now = Attributes {
            modified: Some(std::time::SystemTime::now()),
            ..Attributes::default()
        };
        match session.set_attributes(&path, now).await {
            Err(Error::FileNotFound { .. }) if !args.no_create => {
                let options = WriteOptions {
                    mode: WriteMode::Create,
                    create_parents: false,
                    ..WriteOptions::default()
                };
                match session.write(&path, "", options).await {
                    // Made meanwhile by someone else: it exists, as asked.
                    Err(Error::AlreadyExists { .. }) => {}
                    other => {
                        other?;
                    }
                }
            }
            Err(Error::FileNotFound { .. }) => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, size: u64, version: u64) -> wsfs_client::Metadata {
        wsfs_client::Metadata {
            path: parse_path(path).unwrap(),
            kind: FileKind::File,
            size,
            created: std::time::UNIX_EPOCH,
            modified: std::time::UNIX_EPOCH,
            version,
            permissions: Permissions::FILE_DEFAULT,
            symlink_target: None,
        }
    }

    #[test]
    fn ls_long_columns_are_as_wide_as_their_widest_value() {
        let entries = [
            entry("a", 1, 3),
            entry("b", 1_234_567_890_123_456, 1_795_694_438_060_779),
        ];
        let lines = ls_lines(&entries, &CanonicalPath::root(), true);
        let name_at: Vec<_> = lines.iter().map(|l| l.rfind(' ').unwrap()).collect();
        assert_eq!(name_at[0], name_at[1], "{lines:#?}");
        let version_at: Vec<_> = lines.iter().map(|l| l.find(" v").unwrap()).collect();
        assert_eq!(version_at[0], version_at[1], "{lines:#?}");
        assert_eq!(
            ls_lines(&entries, &CanonicalPath::root(), false),
            ["a", "b"]
        );
    }

    #[test]
    fn du_puts_a_directory_after_everything_beneath_it() {
        let mut dirs = vec!["", "a", "a/b", "a-c", "a/b/c", "b"];
        dirs.sort_by(|x, y| du_order(x, y));
        assert_eq!(dirs, ["a/b/c", "a/b", "a", "a-c", "b", ""]);
    }
}
