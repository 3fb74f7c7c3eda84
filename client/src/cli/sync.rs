//! `push` and `pull`: mirror a subtree between this machine and a session,
//! transferring only the files that differ.
//!
//! Both sides are first read into a [`Tree`] (files with their sizes, and
//! directories). [`plan`] then decides, file by file: missing on the
//! destination or of another size means transfer; the same size means
//! compare SHA-256 digests, the local one read from disk and the remote one
//! computed here from a ReadBytes stream, so only same-size files are ever
//! read twice. A file whose permission bits differ is transferred again,
//! and every transferred file (and made directory) takes its source's bits
//! and modification time. Symbolic links are skipped on both sides: each is
//! named on a line of its own and counted in the summary. `--include` / `--exclude` filter both sides the same way,
//! so an excluded path is neither copied nor deleted. The plan is then
//! carried out: removals, then directories, then transfers, `--jobs` at a
//! time. Nothing that fails stops the rest: a file that cannot be read,
//! compared, removed or transferred, or a directory that cannot be read or
//! made, is set aside with its reason, what lies beneath a directory that
//! could not be made is not tried (and counted on that directory's line),
//! and every failure is listed at the end, when the command then fails.

use super::args::SyncArgs;
use super::files::{download_to_file, upload};
use super::output::{self, print_json, println};
use super::{local, Ctx, Failure, Outcome};
use futures::stream::{self, StreamExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use wsfs_client::{
    parse_path, ByteRange, CanonicalPath, DeleteOptions, Error, FileKind, Filesystem, MkdirOptions,
    Permissions, Session, WriteOptions, MAX_CHUNK_SIZE,
};

/// One side of a mirror, by path relative to its base (`/`-separated).
#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<String, u64>,
    dirs: BTreeSet<String>,
    /// Bits and modification time of each file and directory.
    attributes: BTreeMap<String, (Permissions, SystemTime)>,
    /// Symbolic links met (never followed, never copied).
    links: Vec<String>,
    /// Directories holding something the filter left out: never removed
    /// whole by `--delete`, only what the filter lets through inside.
    held: BTreeSet<String>,
    /// Entries that could not be read (a local directory, a name that is
    /// not UTF-8): left out of the mirror, reported with the rest.
    unreadable: Vec<Failed>,
}

/// `--include` and `--exclude`, compiled once.
struct Filter {
    include: Option<globset::GlobSet>,
    exclude: globset::GlobSet,
    /// Paths left out as excluded ones are: local entries that could not
    /// be read, whose counterparts must not be touched either.
    skipped: BTreeSet<String>,
}

impl Filter {
    fn new(include: &[String], exclude: &[String]) -> Outcome<Filter> {
        let set = |globs: &[String]| -> Outcome<globset::GlobSet> {
            let mut builder = globset::GlobSetBuilder::new();
            for glob in globs {
                // As grep --glob and rsync: a pattern without `/` names a
                // file or directory at any depth.
                let pattern = if glob.contains('/') {
                    glob.clone()
                } else {
                    format!("**/{glob}")
                };
                let compiled = globset::GlobBuilder::new(&pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| Failure::Usage(format!("bad glob '{glob}': {e}")))?;
                builder.add(compiled);
            }
            builder
                .build()
                .map_err(|e| Failure::Usage(format!("bad globs: {e}")))
        };
        Ok(Filter {
            include: if include.is_empty() {
                None
            } else {
                Some(set(include)?)
            },
            exclude: set(exclude)?,
            skipped: BTreeSet::new(),
        })
    }

    /// Leaves these paths (and what lies beneath them) out, on both sides.
    fn skip(&mut self, paths: impl IntoIterator<Item = String>) {
        self.skipped.extend(paths);
    }

    fn excludes(&self, rel: &str) -> bool {
        self.skipped.contains(rel) || self.exclude.is_match(rel)
    }

    /// Keeps what the filter lets through: files that are included and
    /// not excluded, directories not excluded, nothing under an excluded
    /// directory.
    fn apply(&self, tree: Tree) -> Tree {
        let excluded_dirs: BTreeSet<String> = tree
            .dirs
            .iter()
            .filter(|d| self.excludes(d))
            .cloned()
            .collect();
        let outside = |rel: &str| {
            std::iter::once(rel)
                .chain(ancestors(rel))
                .any(|a| excluded_dirs.contains(a))
        };
        let kept_file = |rel: &str| {
            !outside(rel)
                && !self.excludes(rel)
                && self.include.as_ref().is_none_or(|inc| inc.is_match(rel))
        };
        let mut held = BTreeSet::new();
        let mut hold = |rel: &str| held.extend(ancestors(rel).map(str::to_string));
        let mut files = BTreeMap::new();
        for (rel, size) in tree.files {
            if kept_file(&rel) {
                files.insert(rel, size);
            } else {
                hold(&rel);
            }
        }
        let mut dirs = BTreeSet::new();
        for dir in tree.dirs {
            if outside(&dir) {
                hold(&dir);
            } else {
                dirs.insert(dir);
            }
        }
        let mut links = Vec::new();
        for link in tree.links {
            // A link is never copied, so never removed whole either.
            hold(&link);
            if !outside(&link) {
                links.push(link);
            }
        }
        Tree {
            files,
            dirs,
            attributes: tree.attributes,
            links,
            held,
            unreadable: tree.unreadable,
        }
    }
}

/// Something that failed: the path and why.
type Failed = (String, Failure);

/// What failed, path by path. A directory that could not be made (or
/// removed) blocks what lies beneath it: those entries are not tried, only
/// counted on the directory's line.
#[derive(Debug, Default)]
struct Failures {
    failed: Vec<Failed>,
    /// Directories whose failure blocks their contents.
    blocking: BTreeSet<String>,
    /// Entries not tried, per blocking directory.
    beneath: BTreeMap<String, u64>,
    /// Entries not tried because a directory above them failed.
    untried: BTreeSet<String>,
}

impl Failures {
    fn add(&mut self, rel: &str, why: Failure) {
        self.failed.push((rel.to_string(), why));
    }

    /// A directory that failed: nothing beneath it is tried.
    fn add_directory(&mut self, rel: &str, why: Failure) {
        self.blocking.insert(rel.to_string());
        self.add(rel, why);
    }

    /// Whether a directory above `rel` failed; counts `rel` as not tried.
    fn blocks(&mut self, rel: &str) -> bool {
        let Some(above) = ancestors(rel).find(|a| self.blocking.contains(*a)) else {
            return false;
        };
        *self.beneath.entry(above.to_string()).or_default() += 1;
        self.untried.insert(rel.to_string());
        true
    }

    /// The files of `copy` that no failed directory blocks.
    fn unblocked(&mut self, copy: &[(String, u64)]) -> Vec<(String, u64)> {
        copy.iter()
            .filter(|(rel, _)| !self.blocks(rel))
            .cloned()
            .collect()
    }

    fn extend(&mut self, failed: impl IntoIterator<Item = Failed>) {
        self.failed.extend(failed);
    }

    /// The failures, by path, each with the count of entries beneath it
    /// that were not tried.
    fn sorted(mut self) -> (Vec<(String, Failure, u64)>, BTreeSet<String>) {
        self.failed.sort_by(|a, b| a.0.cmp(&b.0));
        let listed = self
            .failed
            .into_iter()
            .map(|(rel, why)| {
                let beneath = self.beneath.get(&rel).copied().unwrap_or(0);
                (rel, why, beneath)
            })
            .collect();
        (listed, self.untried)
    }
}

/// What to do to the destination.
#[derive(Debug, Default)]
struct Plan {
    /// Paths to remove first, directories with their contents: extras
    /// (with `--delete`) and entries of the wrong kind.
    remove: Vec<(String, bool)>,
    mkdir: Vec<String>,
    copy: Vec<(String, u64)>,
    unchanged: u64,
    /// Files whose comparison failed (neither copied nor unchanged).
    failed: Vec<Failed>,
}

pub async fn push(ctx: &mut Ctx, args: SyncArgs) -> Outcome {
    let session = ctx.session().await?;
    let local_root = PathBuf::from(&args.source);
    if !local_root.is_dir() {
        return Err(Failure::Local(format!(
            "'{}' is not a local directory",
            args.source
        )));
    }
    let base = parse_path(&args.destination)?;
    let mut filter = Filter::new(&args.include, &args.exclude)?;
    let walked = local_tree(local_root.clone()).await?;
    filter.skip(walked.unreadable.iter().map(|(rel, _)| rel.clone()));
    let mut source = filter.apply(walked);
    let destination = filter.apply(match remote_tree(&session, &base).await {
        Err(Error::FileNotFound { .. }) => Tree::default(),
        other => other?,
    });
    let mut failures = Failures::default();
    failures.extend(std::mem::take(&mut source.unreadable));
    let mut plan = plan(&source, &destination, args.delete, args.jobs, |rel| {
        let same_bits = source.bits(&rel) == destination.bits(&rel);
        let local = local_root.join(&rel);
        let remote = remote_path(&base, &rel);
        let session = session.clone();
        async move {
            if !same_bits {
                return Ok(false);
            }
            let remote = remote?;
            let (a, b) = futures::join!(local_sha256(local), remote_sha256(&session, &remote));
            Ok(a? == b?)
        }
    })
    .await;
    failures.extend(std::mem::take(&mut plan.failed));
    if args.dry_run {
        return report(ctx, &args, &plan, &source.links, 0, failures, true);
    }
    for (rel, recursive) in &plan.remove {
        let options = DeleteOptions {
            recursive: *recursive,
            allow_missing: true,
            if_version: None,
        };
        let removed =
            async { Ok::<_, Failure>(session.delete(&remote_path(&base, rel)?, options).await?) };
        if let Err(why) = removed.await {
            failures.add(rel, why);
        }
    }
    // Nothing can be pushed into a destination that cannot be made.
    if !base.is_root() {
        session.mkdir(&base, MkdirOptions::default()).await?;
    }
    for rel in &plan.mkdir {
        if failures.blocks(rel) {
            continue;
        }
        let options = MkdirOptions {
            permissions: source.bits(rel),
            ..MkdirOptions::default()
        };
        let made =
            async { Ok::<_, Failure>(session.mkdir(&remote_path(&base, rel)?, options).await?) };
        if let Err(why) = made.await {
            failures.add_directory(rel, why);
        }
    }
    let wanted = failures.unblocked(&plan.copy);
    let bar = byte_progress(&wanted, ctx, "push");
    let uploads = stream::iter(wanted)
        .map(|(rel, size)| {
            let session = session.clone();
            let file = local_root.join(&rel);
            let remote = remote_path(&base, &rel);
            let attributes = source.attributes.get(&rel).copied();
            async move {
                let done = async {
                    let remote = remote?;
                    let reader = tokio::fs::File::open(&file)
                        .await
                        .map_err(local(format!("cannot open '{}'", file.display())))?;
                    let options = WriteOptions {
                        permissions: attributes.map(|(bits, _)| bits),
                        modified: attributes.map(|(_, time)| time),
                        ..WriteOptions::default()
                    };
                    upload(&session, &remote, reader, Some(size), options, true).await?;
                    Ok::<u64, Failure>(size)
                }
                .await;
                (rel, done)
            }
        })
        .buffer_unordered(args.jobs.max(1));
    let bytes = settle(uploads, &bar, &mut failures).await;
    report(ctx, &args, &plan, &source.links, bytes, failures, false)
}

pub async fn pull(ctx: &mut Ctx, args: SyncArgs) -> Outcome {
    let session = ctx.session().await?;
    let base = parse_path(&args.source)?;
    let local_root = PathBuf::from(&args.destination);
    if local_root.exists() && !local_root.is_dir() {
        return Err(Failure::Local(format!(
            "'{}' is not a local directory",
            args.destination
        )));
    }
    let mut filter = Filter::new(&args.include, &args.exclude)?;
    let walked = if local_root.exists() {
        local_tree(local_root.clone()).await?
    } else {
        Tree::default()
    };
    filter.skip(walked.unreadable.iter().map(|(rel, _)| rel.clone()));
    let source = filter.apply(remote_tree(&session, &base).await?);
    let mut destination = filter.apply(walked);
    let mut failures = Failures::default();
    failures.extend(std::mem::take(&mut destination.unreadable));
    let mut plan = plan(&source, &destination, args.delete, args.jobs, |rel| {
        let same_bits = source.bits(&rel) == destination.bits(&rel);
        let local = local_root.join(&rel);
        let remote = remote_path(&base, &rel);
        let session = session.clone();
        async move {
            if !same_bits {
                return Ok(false);
            }
            let remote = remote?;
            let (a, b) = futures::join!(local_sha256(local), remote_sha256(&session, &remote));
            Ok(a? == b?)
        }
    })
    .await;
    failures.extend(std::mem::take(&mut plan.failed));
    if args.dry_run {
        return report(ctx, &args, &plan, &source.links, 0, failures, true);
    }
    for (rel, recursive) in &plan.remove {
        let path = local_root.join(rel);
        let removed = if *recursive {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(why) = removed.map_err(local(format!("cannot remove '{}'", path.display()))) {
            failures.add(rel, why);
        }
    }
    // Nothing can be pulled into a destination that cannot be made.
    std::fs::create_dir_all(&local_root)
        .map_err(local(format!("cannot create '{}'", local_root.display())))?;
    for rel in &plan.mkdir {
        if failures.blocks(rel) {
            continue;
        }
        let path = local_root.join(rel);
        if let Err(why) = std::fs::create_dir_all(&path)
            .map_err(local(format!("cannot create '{}'", path.display())))
        {
            failures.add_directory(rel, why);
        }
    }
    let wanted = failures.unblocked(&plan.copy);
    let bar = byte_progress(&wanted, ctx, "pull");
    let downloads = stream::iter(wanted)
        .map(|(rel, _)| {
            let session = session.clone();
            let file = local_root.join(&rel);
            let remote = remote_path(&base, &rel);
            let attributes = source.attributes.get(&rel).copied();
            async move {
                let done = async {
                    let bytes = download_to_file(&session, &remote?, &file, true).await?;
                    set_local_attributes(&file, attributes)?;
                    Ok(bytes)
                }
                .await;
                (rel, done)
            }
        })
        .buffer_unordered(args.jobs.max(1));
    let bytes = settle(downloads, &bar, &mut failures).await;
    // Directories last, deepest first, so a read-only one is filled first.
    for rel in plan.mkdir.iter().rev() {
        if failures.blocking.contains(rel) || failures.untried.contains(rel) {
            continue;
        }
        if let Err(why) =
            set_local_attributes(&local_root.join(rel), source.attributes.get(rel).copied())
        {
            failures.add(rel, why);
        }
    }
    report(ctx, &args, &plan, &source.links, bytes, failures, false)
}

impl Tree {
    fn bits(&self, rel: &str) -> Option<Permissions> {
        self.attributes.get(rel).map(|(bits, _)| *bits)
    }
}

/// Gives a pulled file or directory its remote bits and time.
fn set_local_attributes(path: &Path, attributes: Option<(Permissions, SystemTime)>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    let Some((bits, modified)) = attributes else {
        return Ok(());
    };
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(modified))
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(bits.bits())))
        .map_err(local(format!(
            "cannot set the mode and time of '{}'",
            path.display()
        )))
}

/// A bar over the bytes to transfer, with rate and ETA.
fn byte_progress(copy: &[(String, u64)], ctx: &Ctx, label: &str) -> indicatif::ProgressBar {
    let total = copy.iter().map(|(_, size)| size).sum();
    output::progress(Some(total), 1 << 20, ctx.quiet || ctx.json, label)
}

/// Runs every transfer to its end: the bytes moved; each failure joins
/// `failures`.
async fn settle(
    mut transfers: impl futures::Stream<Item = (String, Outcome<u64>)> + Unpin,
    bar: &indicatif::ProgressBar,
    failures: &mut Failures,
) -> u64 {
    let mut bytes = 0;
    while let Some((rel, done)) = transfers.next().await {
        match done {
            Ok(size) => {
                bytes += size;
                bar.inc(size);
            }
            Err(why) => failures.add(&rel, why),
        }
    }
    bar.finish_and_clear();
    bytes
}

fn report(
    ctx: &Ctx,
    args: &SyncArgs,
    plan: &Plan,
    links: &[String],
    bytes: u64,
    failures: Failures,
    dry_run: bool,
) -> Outcome {
    let (failed, untried) = failures.sorted();
    let failed_paths: BTreeSet<&str> = failed.iter().map(|(rel, ..)| rel.as_str()).collect();
    let copied: Vec<_> = plan
        .copy
        .iter()
        .map(|(rel, _)| rel.as_str())
        .filter(|rel| !failed_paths.contains(rel) && !untried.contains(*rel))
        .collect();
    let made_dirs = plan
        .mkdir
        .iter()
        .filter(|rel| !failed_paths.contains(rel.as_str()) && !untried.contains(*rel))
        .count();
    let removed: Vec<_> = plan
        .remove
        .iter()
        .map(|(rel, _)| rel.as_str())
        .filter(|rel| !failed_paths.contains(rel))
        .collect();
    let failures: Vec<(String, String, String, u64)> = failed
        .iter()
        .map(|(rel, why, beneath)| {
            let (reason, message) = why.text();
            (rel.clone(), reason, message, *beneath)
        })
        .collect();
    if ctx.json {
        print_json(&json!({
            "source": args.source,
            "destination": args.destination,
            "dry_run": dry_run,
            "transferred": copied.len(),
            "bytes": bytes,
            "unchanged": plan.unchanged,
            "deleted": removed.len(),
            "directories_created": made_dirs,
            "skipped_symlinks": links,
            "failed": failures
                .iter()
                .map(|(path, reason, message, beneath)| json!({
                    "path": path,
                    "reason": reason,
                    "message": message,
                    "not_tried_beneath": beneath,
                }))
                .collect::<Vec<_>>(),
            "transferred_paths": copied,
            "deleted_paths": removed,
        }))?;
    } else {
        if dry_run {
            for rel in &removed {
                println(&format!("delete {rel}"))?;
            }
            for rel in &plan.mkdir {
                println(&format!("mkdir  {rel}"))?;
            }
            for rel in &copied {
                println(&format!("copy   {rel}"))?;
            }
        }
        for (path, reason, message, beneath) in &failures {
            let mut line = format!("wsfs: {path}: {reason}: {message}");
            if *beneath > 0 {
                let plural = if *beneath == 1 { "entry" } else { "entries" };
                line.push_str(&format!(" ({beneath} {plural} beneath it not transferred)"));
            }
            eprintln!("{line}");
        }
        if !ctx.quiet {
            for link in links {
                println(&format!("skipped symlink {link}"))?;
            }
        }
        if !ctx.quiet {
            let verb = if dry_run {
                "would transfer"
            } else {
                "transferred"
            };
            let mut line = format!(
                "{verb} {} files ({}), {} unchanged, {} deleted",
                copied.len(),
                output::human_size(bytes),
                plan.unchanged,
                removed.len()
            );
            if !links.is_empty() {
                line.push_str(&format!(", {} symlinks skipped", links.len()));
            }
            if !failures.is_empty() {
                line.push_str(&format!(", {} failed", failures.len()));
            }
            println(&line)?;
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        let plural = if failures.len() == 1 { "" } else { "s" };
        Err(Failure::Local(format!(
            "{} failure{plural} (listed above); the rest was transferred",
            failures.len()
        )))
    }
}

/// Decides what to do; `same(rel)` compares a file present on both sides
/// with equal sizes, `jobs` at a time.
async fn plan<F, Fut>(source: &Tree, destination: &Tree, delete: bool, jobs: usize, same: F) -> Plan
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Outcome<bool>>,
{
    let mut plan = Plan::default();
    let mut compare = Vec::new();
    for (rel, size) in &source.files {
        if destination.dirs.contains(rel) {
            plan.remove.push((rel.clone(), true));
            plan.copy.push((rel.clone(), *size));
            continue;
        }
        match destination.files.get(rel) {
            Some(other) if other == size => compare.push((rel.clone(), *size)),
            _ => plan.copy.push((rel.clone(), *size)),
        }
    }
    let mut compared = stream::iter(compare)
        .map(|(rel, size)| {
            let same = same(rel.clone());
            async move { (rel, size, same.await) }
        })
        .buffer_unordered(jobs.max(1));
    while let Some((rel, size, same)) = compared.next().await {
        match same {
            Ok(true) => plan.unchanged += 1,
            Ok(false) => plan.copy.push((rel, size)),
            Err(why) => plan.failed.push((rel, why)),
        }
    }
    plan.copy.sort();
    for dir in &source.dirs {
        if destination.files.contains_key(dir) {
            plan.remove.push((dir.clone(), false));
            plan.mkdir.push(dir.clone());
        } else if !destination.dirs.contains(dir) {
            plan.mkdir.push(dir.clone());
        }
    }
    if delete {
        for rel in destination.files.keys() {
            if !source.files.contains_key(rel) && !source.dirs.contains(rel) {
                plan.remove.push((rel.clone(), false));
            }
        }
        for rel in &destination.dirs {
            if !source.dirs.contains(rel)
                && !source.files.contains_key(rel)
                && !destination.held.contains(rel)
            {
                plan.remove.push((rel.clone(), true));
            }
        }
    }
    // A removed directory takes its contents along: drop those entries.
    let removed_dirs: BTreeSet<String> = plan
        .remove
        .iter()
        .filter(|(_, dir)| *dir)
        .map(|(rel, _)| rel.clone())
        .collect();
    plan.remove
        .retain(|(rel, _)| !ancestors(rel).any(|a| removed_dirs.contains(a)));
    plan.remove.sort();
    plan.remove.dedup();
    plan
}

/// `a/b/c` gives `a/b`, then `a`.
fn ancestors(rel: &str) -> impl Iterator<Item = &str> {
    let mut rest = rel;
    std::iter::from_fn(move || {
        let cut = rest.rfind('/')?;
        rest = &rest[..cut];
        Some(rest)
    })
}

fn remote_path(base: &CanonicalPath, rel: &str) -> Outcome<CanonicalPath> {
    Ok(parse_path(&format!("{}/{rel}", base.as_str()))?)
}

async fn remote_tree(session: &Session, base: &CanonicalPath) -> wsfs_client::Result<Tree> {
    let mut tree = Tree::default();
    for entry in session.list_all(base, u32::MAX).await? {
        let Some(rel) = entry.path.strip_prefix(base) else {
            continue;
        };
        let attributes = (entry.permissions, entry.modified);
        match entry.kind {
            FileKind::File => {
                tree.files.insert(rel.as_str().to_string(), entry.size);
            }
            FileKind::Directory => {
                tree.dirs.insert(rel.as_str().to_string());
            }
            FileKind::Symlink => {
                tree.links.push(rel.as_str().to_string());
                continue;
            }
        }
        tree.attributes.insert(rel.as_str().to_string(), attributes);
    }
    Ok(tree)
}

async fn local_tree(root: PathBuf) -> Outcome<Tree> {
    tokio::task::spawn_blocking(move || {
        let mut tree = Tree::default();
        walk(&root, "", &mut tree)?;
        Ok(tree)
    })
    .await
    .map_err(|e| Failure::Local(format!("the directory walk failed: {e}")))?
}

/// Reads `dir` into `tree`. Only the top directory's failure is an error:
/// below it, an entry that cannot be read is set aside in
/// `tree.unreadable` (a directory stays listed, so that the filter keeps
/// its counterpart on the other side untouched) and the walk goes on.
fn walk(dir: &Path, prefix: &str, tree: &mut Tree) -> Outcome {
    let entries =
        std::fs::read_dir(dir).map_err(local(format!("cannot read '{}'", dir.display())))?;
    for entry in entries {
        let entry = match entry.map_err(local(format!("cannot read '{}'", dir.display()))) {
            Ok(entry) => entry,
            Err(why) => {
                tree.unreadable.push((prefix.to_string(), why));
                break;
            }
        };
        let name = entry.file_name();
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            }
        };
        let Some(name) = name.to_str() else {
            let why = Failure::Local(format!(
                "'{}' is not a UTF-8 name, which a workspace path must be",
                entry.path().display()
            ));
            tree.unreadable.push((join(&name.to_string_lossy()), why));
            continue;
        };
        let rel = join(name);
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) => {
                let why = Failure::Local(format!("cannot stat '{}': {e}", entry.path().display()));
                tree.unreadable.push((rel, why));
                continue;
            }
        };
        if kind.is_symlink() {
            tree.links.push(rel);
            continue;
        }
        if !kind.is_dir() && !kind.is_file() {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) => {
                let why = Failure::Local(format!("cannot stat '{}': {e}", entry.path().display()));
                tree.unreadable.push((rel, why));
                continue;
            }
        };
        let bits =
            Permissions::masked(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()));
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        tree.attributes.insert(rel.clone(), (bits, modified));
        if kind.is_dir() {
            if let Err(why) = walk(&entry.path(), &rel, tree) {
                tree.unreadable.push((rel.clone(), why));
            }
            tree.dirs.insert(rel);
        } else {
            tree.files.insert(rel, meta.len());
        }
    }
    Ok(())
}

async fn local_sha256(path: PathBuf) -> Outcome<[u8; 32]> {
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&path)
            .map_err(local(format!("cannot open '{}'", path.display())))?;
        let mut hasher = Sha256::new();
        std::io::copy(&mut file, &mut hasher)
            .map_err(local(format!("cannot read '{}'", path.display())))?;
        Ok(hasher.finalize().into())
    })
    .await
    .map_err(|e| Failure::Local(format!("hashing failed: {e}")))?
}

async fn remote_sha256(session: &Session, path: &CanonicalPath) -> Outcome<[u8; 32]> {
    let mut stream = session
        .read_bytes(path, ByteRange::default(), MAX_CHUNK_SIZE)
        .await?;
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.chunks.next().await {
        hasher.update(&chunk?);
    }
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, u64)], dirs: &[&str]) -> Tree {
        Tree {
            files: files.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            dirs: dirs.iter().map(|d| d.to_string()).collect(),
            attributes: BTreeMap::new(),
            links: Vec::new(),
            held: BTreeSet::new(),
            unreadable: Vec::new(),
        }
    }

    async fn plan_of(source: &Tree, destination: &Tree, delete: bool, same: bool) -> Plan {
        plan(source, destination, delete, 4, |_| async move { Ok(same) }).await
    }

    #[tokio::test]
    async fn equal_size_files_are_hashed_and_kept_when_equal() {
        let source = tree(&[("a", 3), ("b", 4)], &[]);
        let destination = tree(&[("a", 3), ("b", 5)], &[]);
        let plan = plan_of(&source, &destination, false, true).await;
        assert_eq!(plan.copy, vec![("b".to_string(), 4)]);
        assert_eq!(plan.unchanged, 1);
    }

    #[tokio::test]
    async fn delete_removes_only_the_topmost_extra() {
        let source = tree(&[("keep", 1)], &[]);
        let destination = tree(
            &[("keep", 1), ("old/x", 1), ("old/y/z", 1)],
            &["old", "old/y"],
        );
        let plan = plan_of(&source, &destination, true, true).await;
        assert_eq!(plan.remove, vec![("old".to_string(), true)]);
    }

    #[tokio::test]
    async fn a_directory_in_the_way_of_a_file_is_replaced() {
        let source = tree(&[("x", 1)], &[]);
        let destination = tree(&[("x/inner", 1)], &["x"]);
        let plan = plan_of(&source, &destination, false, true).await;
        assert_eq!(plan.remove, vec![("x".to_string(), true)]);
        assert_eq!(plan.copy, vec![("x".to_string(), 1)]);
    }

    #[test]
    fn filters_keep_included_files_and_skip_excluded_directories_whole() {
        let all = || {
            tree(
                &[
                    ("src/a.rs", 1),
                    ("src/b.txt", 1),
                    ("target/x.rs", 1),
                    ("top.rs", 1),
                ],
                &["src", "target"],
            )
        };
        let filter = Filter::new(&["*.rs".into()], &["target".into()]).unwrap();
        let kept = filter.apply(all());
        assert_eq!(
            kept.files.keys().collect::<Vec<_>>(),
            ["src/a.rs", "top.rs"]
        );
        assert_eq!(kept.dirs.iter().collect::<Vec<_>>(), ["src"]);
        let none = Filter::new(&[], &[]).unwrap().apply(all());
        assert_eq!(none.files.len(), 4);
        assert!(Filter::new(&["a[".into()], &[]).is_err());
    }

    #[tokio::test]
    async fn delete_never_removes_a_directory_whole_that_holds_filtered_out_files() {
        let filter = Filter::new(&["*.rs".into()], &["*.log".into()]).unwrap();
        let source = filter.apply(tree(&[("keep.rs", 1)], &[]));
        let destination = filter.apply(tree(
            &[
                ("keep.rs", 1),
                ("docs/README.md", 1),
                ("docs/old.rs", 1),
                ("logs/a.log", 1),
                ("gone/x.rs", 1),
            ],
            &["docs", "logs", "gone"],
        ));
        let plan = plan_of(&source, &destination, true, true).await;
        assert_eq!(
            plan.remove,
            vec![
                ("docs/old.rs".to_string(), false),
                ("gone".to_string(), true)
            ]
        );
    }

    #[test]
    fn ancestors_walk_up() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a"]);
        assert_eq!(ancestors("a").count(), 0);
    }
}
