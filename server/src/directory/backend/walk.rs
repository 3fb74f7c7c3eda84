//! Walks by descriptor: list, copy, remove, count, and the lazy file walk.

use super::links::link_target;
use super::owner::{claim, Claim, Owner};
use super::staging::Replace;
use super::sys::{
    check_path, child_path, cname, copy_data, entry_kind, io, is_reserved, kept_changing,
    not_found, open_regular, read_entries, read_link, set_attributes_fd, stat_at, symlink_denied,
    too_deep, visible_name, Kind, CREATE_FLAGS, DIR_FLAGS, MAX_TREE_DEPTH, RACE_RETRIES,
};
use super::DirectoryBackend;
use crate::backend::{check_transfer, Backend, Listed};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Mode};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Result};

/// Whether a directory holds any entry a listing would count.
pub(super) fn has_entries(dir: impl AsFd, path: &CanonicalPath) -> Result<bool> {
    let entries = read_entries(dir).map_err(|e| io(e, path))?;
    Ok(entries.iter().any(|(name, _)| !is_reserved(name)))
}

/// Removes everything inside `dir`; returns how many entries went
/// (temporary files are removed but not counted).
pub(super) fn remove_contents(dir: &OwnedFd, path: &CanonicalPath, depth: usize) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, _) in read_entries(dir).map_err(|e| io(e, path))? {
        count += remove_entry(dir, &name, &child_path(path, &name), depth)?;
    }
    Ok(count)
}

/// Removes one entry of `dir`, whatever it is, a directory with everything
/// in it; a symlink is removed itself, never followed. Returns how many
/// entries went; 0 when it was already gone.
pub(super) fn remove_entry(
    dir: &OwnedFd,
    name: &CStr,
    path: &CanonicalPath,
    depth: usize,
) -> Result<u64> {
    let own = u64::from(!is_reserved(name));
    let mut count = 0;
    for _ in 0..RACE_RETRIES {
        let st = match stat_at(dir, name) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(count),
            Err(e) => return Err(io(e, path)),
        };
        if st.kind != Kind::Dir {
            match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => return Ok(count + own),
                Err(Errno::NOENT) => return Ok(count),
                Err(Errno::ISDIR | Errno::PERM) => continue,
                Err(e) => return Err(io(e, path)),
            }
        }
        let sub = match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(count),
            // Swapped for something else since the stat: look again.
            Err(Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => return Err(io(e, path)),
        };
        count += remove_contents(&sub, path, depth + 1)?;
        drop(sub);
        match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
            Ok(()) => return Ok(count + own),
            Err(Errno::NOENT) => return Ok(count),
            // Something was added, or the entry was swapped: go again.
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => continue,
            Err(e) => return Err(io(e, path)),
        }
    }
    Err(kept_changing(path))
}

/// How many visible entries a directory holds, all levels down.
pub(super) fn count_tree(dir: &OwnedFd, path: &CanonicalPath, depth: usize) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, ft) in read_entries(dir).map_err(|e| io(e, path))? {
        if is_reserved(&name) {
            continue;
        }
        count += 1;
        if entry_kind(dir, &name, ft) == Some(Kind::Dir) {
            if let Ok(sub) = rustix::fs::openat(dir, &name, DIR_FLAGS, Mode::empty()) {
                count += count_tree(&sub, &child_path(path, &name), depth + 1)?;
            }
        }
    }
    Ok(count)
}

/// Copies the visible contents of `src` into the empty directory `dst`:
/// files, directories and symlinks (as links). Returns how many entries
/// were created.
pub(super) fn copy_tree(
    src: &OwnedFd,
    dst: &OwnedFd,
    path: &CanonicalPath,
    depth: usize,
    owner: Option<&Owner>,
) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, _) in read_entries(src).map_err(|e| io(e, path))? {
        if visible_name(&name).is_none() {
            continue;
        }
        let child = child_path(path, &name);
        let st = match stat_at(src, &name) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io(e, &child)),
        };
        count += match st.kind {
            Kind::File => {
                let (from, st) = open_regular(src, &name, &child)?;
                let to = rustix::fs::openat(
                    dst,
                    &name,
                    CREATE_FLAGS,
                    Mode::from_raw_mode(st.mode & 0o777),
                )
                .map(File::from)
                .map_err(|e| io(e, &child))?;
                claim(owner, &to).map_err(|e| io(e, &child))?;
                copy_data(&from, &to, 0).map_err(|e| Error::from_io(e, &child))?;
                // The umask trimmed the bits it was created with.
                set_attributes_fd(&to, Some(st.permissions()), None).map_err(|e| io(e, &child))?;
                1
            }
            Kind::Dir => {
                let from = rustix::fs::openat(src, &name, DIR_FLAGS, Mode::empty()).map_err(
                    |e| match e {
                        Errno::LOOP | Errno::NOTDIR => symlink_denied(&child, true),
                        e => io(e, &child),
                    },
                )?;
                rustix::fs::mkdirat(dst, &name, Mode::RWXU).map_err(|e| io(e, &child))?;
                let to = rustix::fs::openat(dst, &name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| io(e, &child))?;
                claim(owner, &to).map_err(|e| io(e, &child))?;
                let inner = copy_tree(&from, &to, &child, depth + 1, owner)?;
                // Permissions last, so a read-only source directory can be filled.
                rustix::fs::fchmod(&to, Mode::from_raw_mode(st.mode & 0o777))
                    .map_err(|e| io(e, &child))?;
                inner + 1
            }
            Kind::Symlink => {
                let target = read_link(src, &name, &child)?;
                rustix::fs::symlinkat(&target, dst, &name).map_err(|e| io(e, &child))?;
                if let Some(owner) = owner {
                    owner.claim_at(dst, &name).map_err(|e| io(e, &child))?;
                }
                1
            }
            Kind::Special => 0,
        };
    }
    Ok(count)
}

impl DirectoryBackend {
    /// Both ends of a move or copy, checked (`check_transfer`) and resolved
    /// beneath the root: the source's parent and name, and the
    /// destination's parent (made when `create_parents`) and name.
    pub(super) fn transfer_plan(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<TransferPlan> {
        check_path(src)?;
        check_path(dst)?;
        let src_meta = self.metadata(src)?;
        let dst_meta = self.metadata(dst)?;
        let replace = check_transfer(src, src_meta.as_ref(), dst, dst_meta.as_ref(), overwrite)?;
        let src_meta = src_meta.ok_or_else(|| not_found(src))?;
        let replace = match (replace, src_meta.kind) {
            (false, _) => Replace::No,
            (true, FileKind::Directory) => Replace::Dir,
            (true, _) => Replace::File,
        };
        let (src_dir, src_name) = self.parent_dir(src, false, src)?;
        let src_name = cname(src_name, src)?;
        let dst_parent = dst.parent().unwrap_or_default();
        let (dst_dir, dst_name) = self.parent_dir(dst, create_parents, &dst_parent)?;
        let dst_name = cname(dst_name, dst)?;
        Ok(TransferPlan {
            src_meta,
            replace,
            src_dir,
            src_name,
            dst_dir: Arc::new(dst_dir),
            dst_name,
        })
    }
}

/// What `transfer_plan` resolved for a move or copy.
pub(super) struct TransferPlan {
    pub(super) src_meta: Metadata,
    pub(super) replace: Replace,
    pub(super) src_dir: OwnedFd,
    pub(super) src_name: CString,
    pub(super) dst_dir: Arc<OwnedFd>,
    pub(super) dst_name: CString,
}

impl DirectoryBackend {
    /// Appends the entries beneath `dir` to `out` in path order, `levels`
    /// deep; true when it stopped at `max` with more left.
    pub(super) fn list_into(
        &self,
        dir: &OwnedFd,
        path: &CanonicalPath,
        levels: u32,
        page: &Page<'_>,
        out: &mut Vec<Metadata>,
        depth: usize,
    ) -> Result<bool> {
        let max = page.max;
        let mut items = Vec::new();
        for (raw, ft) in read_entries(dir).map_err(|e| io(e, path))? {
            let Some(name) = visible_name(&raw) else {
                continue;
            };
            let descend = levels > 1
                && depth + 1 < MAX_TREE_DEPTH
                && page.reaches_under(path, name)
                && entry_kind(dir, &raw, ft) == Some(Kind::Dir);
            if descend {
                items.push(Item::Subtree(name.to_string()));
            }
            if page.holds(path, name) {
                items.push(Item::Entry(name.to_string()));
            }
        }
        items.sort_by(Item::cmp_path);
        // This level's entries are observed together (one lock of the
        // version map for all), as many as could still fit and one more.
        let room = max.saturating_sub(out.len()).saturating_add(1);
        let mut entries = Vec::new();
        for item in &items {
            if let Item::Entry(name) = item {
                if entries.len() == room {
                    break;
                }
                entries.push((name.as_str(), path.join(name)?));
            }
        }
        let mut observed = self.observe_entries(dir, &entries)?.into_iter();
        for item in &items {
            match item {
                Item::Entry(name) => {
                    let meta = match observed.next() {
                        Some(Some(meta)) => Some(link_target(dir, &cname(name, path)?, meta)?),
                        Some(None) => None,
                        // Past the batch: only reached when entries of the
                        // batch were gone.
                        None => self.observe_at(dir, name, &path.join(name)?)?,
                    };
                    if let Some(meta) = meta {
                        if out.len() >= max {
                            return Ok(true);
                        }
                        out.push(meta);
                    }
                }
                Item::Subtree(name) => {
                    let child = path.join(name)?;
                    let sub = match rustix::fs::openat(dir, name.as_str(), DIR_FLAGS, Mode::empty())
                    {
                        Ok(fd) => fd,
                        // Gone or swapped for something else since read.
                        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                        Err(e) => return Err(io(e, &child)),
                    };
                    if self.list_into(&sub, &child, levels - 1, page, out, depth + 1)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// One step of an ordered walk over a directory's children. A directory
/// is an `Entry` under its name and a `Subtree` under its name plus `/`:
/// sorting by those keys bytewise puts every path in full-path byte order
/// (`a`, `a.txt`, `a/b`).
pub(crate) enum Item {
    Entry(String),
    Subtree(String),
}

/// Which part of a listing is asked for: the entries whose path sorts
/// after `after` (bytewise, the listing's order), at most `max`.
pub(super) struct Page<'a> {
    pub(super) after: Option<&'a CanonicalPath>,
    pub(super) max: usize,
}

impl Page<'_> {
    /// Whether entry `name` of directory `path` is on the page. A name
    /// that is not a path segment is kept, for the walk to refuse as
    /// before.
    fn holds(&self, path: &CanonicalPath, name: &str) -> bool {
        self.after.is_none_or(|after| {
            path.join(name).map_or(true, |child| {
                child.as_str().as_bytes() > after.as_str().as_bytes()
            })
        })
    }

    /// Whether any path beneath `name` in `path` can be on the page: all
    /// of them start with `path/name/`, so none is when that prefix sorts
    /// before `after` without being its beginning.
    fn reaches_under(&self, path: &CanonicalPath, name: &str) -> bool {
        self.after.is_none_or(|after| {
            path.join(name).map_or(true, |child| {
                let prefix = format!("{}/", child.as_str());
                prefix.as_bytes() > after.as_str().as_bytes() || after.as_str().starts_with(&prefix)
            })
        })
    }
}

impl Item {
    pub(crate) fn cmp_path(&self, other: &Item) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }

    fn key(&self) -> impl Iterator<Item = u8> + '_ {
        let (name, suffix): (&str, &[u8]) = match self {
            Item::Entry(name) => (name, b""),
            Item::Subtree(name) => (name, b"/"),
        };
        name.bytes().chain(suffix.iter().copied())
    }
}

/// The lazy iterator behind `walk_files`: a stack of open directories, each
/// with its remaining children in path order.
#[derive(Default)]
pub(super) struct FileWalk {
    pub(super) single: Option<CanonicalPath>,
    pub(super) stack: Vec<WalkLevel>,
}

pub(super) struct WalkLevel {
    /// Shared with the files listed in it, which are opened through it.
    dir: Arc<OwnedFd>,
    path: CanonicalPath,
    /// Remaining children, in reverse order (popped from the end).
    items: Vec<Item>,
}

impl FileWalk {
    pub(super) fn push(&mut self, dir: OwnedFd, path: CanonicalPath) -> Result<()> {
        if self.stack.len() >= MAX_TREE_DEPTH {
            return Err(too_deep(&path));
        }
        let mut items = Vec::new();
        for (name, ft) in read_entries(&dir).map_err(|e| io(e, &path))? {
            let Some(visible) = visible_name(&name) else {
                continue;
            };
            match entry_kind(&dir, &name, ft) {
                Some(Kind::File) => items.push(Item::Entry(visible.to_string())),
                Some(Kind::Dir) => items.push(Item::Subtree(visible.to_string())),
                _ => {}
            }
        }
        items.sort_by(|a, b| b.cmp_path(a));
        self.stack.push(WalkLevel {
            dir: Arc::new(dir),
            path,
            items,
        });
        Ok(())
    }
}

impl Iterator for FileWalk {
    type Item = Result<Listed>;

    fn next(&mut self) -> Option<Result<Listed>> {
        if let Some(path) = self.single.take() {
            return Some(Ok(Listed::path(path)));
        }
        loop {
            let level = self.stack.last_mut()?;
            let Some(item) = level.items.pop() else {
                self.stack.pop();
                continue;
            };
            match item {
                Item::Entry(name) => {
                    return Some(
                        level
                            .path
                            .join(&name)
                            .map(|path| Listed::found(path, level.dir.clone())),
                    )
                }
                Item::Subtree(name) => {
                    let path = match level.path.join(&name) {
                        Ok(path) => path,
                        Err(e) => return Some(Err(e)),
                    };
                    match rustix::fs::openat(&level.dir, name.as_str(), DIR_FLAGS, Mode::empty()) {
                        Ok(fd) => {
                            if let Err(e) = self.push(fd, path) {
                                return Some(Err(e));
                            }
                        }
                        // Gone or swapped for something else since read.
                        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => {}
                        Err(e) => return Some(Err(io(e, &path))),
                    }
                }
            }
        }
    }
}
