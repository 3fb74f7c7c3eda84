//! Namespace changes: create, mknod, mkdir, symlink, rename, unlink and
//! rmdir, each committed to the server before it is answered, except those
//! that go behind (behind.rs):
//!
//! - a create in a directory whose every name the mount knows (known.rs),
//!   not `O_EXCL`, is answered at once: the file is made on the server by
//!   its first commit (at close, or sooner when something needs the server
//!   to hold it: see [`Shared::born`]), exclusively (`if_version: 0`), so
//!   that a file made elsewhere first is never overwritten; the loser's
//!   close or fsync fails with `EEXIST`.
//! - an unlink of a file the mount knows, not open and with nothing
//!   staged, and an rmdir of a directory the mount made or listed whose
//!   every known name is gone, are answered once their Delete is on its way
//!   ([`Shared::queue_change`]).

use super::attr::new_permissions;
use super::behind::Change;
use super::dispatch::WsfsFs;
use super::errno::errno;
use super::shared::{Handle, Shared};
use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, RenameFlags, ReplyCreate,
    ReplyEmpty, ReplyEntry,
};
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;
use wsfs::{
    CanonicalPath, DeleteOptions, Error, FileKind, Filesystem as _, MkdirOptions, PatchOptions,
    PathLimits, Permissions, SymlinkOptions, TransferOptions, WriteMode, WriteOptions,
};

/// The options of a patch that makes a new file, exclusively, when
/// `create` (its parent must exist); else those of a plain patch.
pub(super) fn create_options(create: bool) -> PatchOptions {
    if !create {
        return PatchOptions::default();
    }
    PatchOptions {
        create_missing: true,
        create_parents: false,
        if_version: Some(0),
        ..PatchOptions::default()
    }
}

impl WsfsFs {
    pub(super) fn do_create(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        let exclusive = flags & libc::O_EXCL != 0;
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncate = flags & libc::O_TRUNC != 0;
        self.spawn(move |s| async move {
            let result = async {
                s.settle(&path).await;
                if writable && !exclusive && s.may_create_here(&path) {
                    return s.create_here(&path, permissions);
                }
                let options = PatchOptions {
                    truncate_to: truncate.then_some(0),
                    create_missing: true,
                    create_parents: false,
                    if_version: exclusive.then_some(0),
                    permissions: Some(permissions),
                    modified: None,
                };
                // Until the version is noted below.
                let _own = s.own_change(&path);
                let outcome = if exclusive {
                    s.create_exclusive(&path, permissions).await?
                } else {
                    s.patch(&path, options).await?
                };
                s.known.added(&path);
                let ino = {
                    let mut inodes = s.inodes();
                    let ino = inodes.learn(&path, FileKind::File);
                    let node = inodes.get_mut(ino).expect("just learned");
                    node.open += 1;
                    node.cached_version = Some(outcome.version);
                    node.own_version = Some(outcome.version);
                    ino
                };
                if writable {
                    if let Err(e) = s.stage(ino, outcome.size, outcome.size == 0) {
                        s.release_node(ino);
                        return Err(e);
                    }
                }
                let now = SystemTime::now();
                let mut attr = s.attr_of(ino, FileKind::File, outcome.size, now, now, permissions);
                if outcome.created {
                    // Only a new file surely has the bits asked.
                    attr = s.remember(ino, attr);
                }
                let fh = s.add_handle(Handle::File { writable });
                Ok((attr, fh))
            }
            .await;
            match result {
                Ok((attr, fh)) => reply.created(
                    &s.ttl(),
                    &attr,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_mknod(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, pipes and sockets have no place in a workspace.
            return reply.error(Errno::ENOTSUP);
        }
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        self.spawn(move |s| async move {
            let made = s.create_exclusive(&path, permissions).await;
            if made.is_ok() {
                s.known.added(&path);
            }
            match made {
                Ok(_) => match s.stat(&path).await {
                    Ok(meta) => {
                        let ino = s.inodes().learn(&path, meta.kind);
                        reply.entry(&s.ttl(), &s.attr(ino, &meta), Generation(0));
                    }
                    Err(e) => reply.error(e),
                },
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_mkdir(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        self.spawn(move |s| async move {
            let options = MkdirOptions {
                parents: false,
                exist_ok: false,
                permissions: Some(permissions),
            };
            s.settle(&path).await;
            // Until the attributes told the kernel are noted below.
            let _own = s.own_change(&path);
            // Known (empty) before it exists, so that no name made in it
            // meanwhile is missed (known.rs).
            s.known.made(&path);
            s.making().insert(path.clone());
            let made = s.retry(|| s.session.mkdir(&path, options)).await;
            if made.is_ok() {
                s.inodes().learn(&path, FileKind::Directory);
            }
            s.making().remove(&path);
            match made {
                Ok(_) => {
                    s.known.added(&path);
                    let ino = s.inodes().at(&path).expect("learned above");
                    let now = SystemTime::now();
                    let attr = s.remember(
                        ino,
                        s.attr_of(ino, FileKind::Directory, 0, now, now, permissions),
                    );
                    reply.entry(&s.ttl(), &attr, Generation(0));
                }
                Err(e) => {
                    s.known.forget(&path);
                    reply.error(e)
                }
            }
        });
    }

    pub(super) fn do_symlink(
        &self,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let path = match self.new_child(parent, link_name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let Some(target) = target.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(move |s| async move {
            s.settle(&path).await;
            let options = SymlinkOptions {
                create_parents: false,
            };
            match s.retry(|| s.session.symlink(&path, &target, options)).await {
                Ok(meta) => {
                    s.known.added(&path);
                    let ino = s.inodes().learn(&path, FileKind::Symlink);
                    reply.entry(&s.ttl(), &s.attr(ino, &meta), Generation(0));
                }
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if self.read_only() {
            return reply.error(Errno::EROFS);
        }
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT: not in the protocol.
            return reply.error(Errno::EINVAL);
        }
        let replace = !flags.contains(RenameFlags::RENAME_NOREPLACE);
        let (source, destination) = match (
            self.shared.child(parent.0, name),
            self.shared.child(newparent.0, newname),
        ) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if source == destination {
            return reply.ok();
        }
        self.spawn(move |s| async move {
            let result = async {
                // The server holds both names as the mount's programs see
                // them: Deletes under them ended, new files made.
                s.settle_under(&source).await;
                s.settle_under(&destination).await;
                s.born(&source).await?;
                s.born(&destination).await?;
                // No queued commit runs across the rename (behind.rs): the
                // commits of files in a directory moved end first; a file's
                // own one runs after, at its new name.
                let _held = if s.inodes().kind_at(&source) == Some(FileKind::Directory) {
                    s.drain().await;
                    Vec::new()
                } else {
                    s.quiesce_both(&source, &destination).await
                };
                if replace {
                    // A directory replaces only an empty directory.
                    let target_kind = s.inodes().kind_at(&destination);
                    if target_kind == Some(FileKind::Directory) {
                        match s.retry(|| s.session.list(&destination, 1)).await {
                            Ok(listing) if !listing.entries.is_empty() => {
                                return Err(Errno::ENOTEMPTY)
                            }
                            Ok(_) | Err(Errno::ENOENT) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    s.keep_if_open(&destination).await?;
                }
                // A file keeps its pages across the rename when the
                // server's file is still the one they hold: the rename
                // says so (`if_version`), and the version its answer names
                // is what the next open compares with.
                let held = {
                    let inodes = s.inodes();
                    inodes
                        .at(&source)
                        .and_then(|ino| inodes.get(ino))
                        .filter(|node| node.kind == FileKind::File)
                        .and_then(|node| node.cached_version)
                };
                // Until the answer is noted below: the Moved event it
                // causes is judged after that (invalidate.rs).
                let _own = s.own_change(&destination);
                let mut options = TransferOptions {
                    overwrite: replace,
                    create_parents: false,
                    if_version: held,
                };
                let moved = s
                    .retry_refusal(|| s.session.rename(&source, &destination, options))
                    .await;
                let (done, kept) = match moved {
                    Err(Error::VersionMismatch { .. }) if held.is_some() => {
                        // Changed elsewhere since the kernel read it: moved
                        // all the same, and what the kernel holds of it
                        // goes.
                        options.if_version = None;
                        let done = s
                            .retry(|| s.session.rename(&source, &destination, options))
                            .await?;
                        (done, false)
                    }
                    other => (other.map_err(|e| errno(&e))?, true),
                };
                s.inodes().renamed(&source, &destination);
                s.moved_here(&destination, done.version, kept);
                if !kept {
                    s.forget_cached(&destination, false);
                }
                s.known.forget(&source);
                s.known.forget(&destination);
                s.known.removed(&source);
                s.known.added(&destination);
                Ok(())
            }
            .await;
            match result {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    /// unlink (`directory` false) and rmdir (true).
    pub(super) fn remove(&self, parent: INodeNo, name: &OsStr, directory: bool, reply: ReplyEmpty) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        self.spawn(move |s| async move {
            let result = async {
                let known = s.inodes().kind_at(&path);
                let kind = match known {
                    Some(kind) => kind,
                    None => s.stat(&path).await?.kind,
                };
                match (directory, kind == FileKind::Directory) {
                    (false, true) => return Err(Errno::EISDIR),
                    (true, false) => return Err(Errno::ENOTDIR),
                    _ => {}
                }
                if directory {
                    // A Delete in it the server refused: the name is
                    // still there, and this is where rm -rf hears of it.
                    if let Some(refusal) = s.refused_now(&path) {
                        return Err(refusal);
                    }
                    if s.rmdir_behind(&path) {
                        s.forget_removed(&path);
                        s.queue_change(path, Change::Delete { directory: true })
                            .await;
                        return Ok(());
                    }
                    if let Some(refusal) = s.delete_refused(&path).await {
                        return Err(refusal);
                    }
                    if !s.settle_dir(&path).await {
                        return Err(Errno::ENOTEMPTY);
                    }
                }
                // A queued commit of the file runs after: not at all.
                let held = s.quiesce(&path).await;
                if !directory {
                    if s.unborn_at(&path).is_some() {
                        // Never on the server: gone from the mount alone.
                        s.forget_removed(&path);
                        return Ok(());
                    }
                    if s.unlink_behind(&path) {
                        s.forget_removed(&path);
                        drop(held);
                        s.queue_change(path, Change::Delete { directory: false })
                            .await;
                        return Ok(());
                    }
                    s.keep_if_open(&path).await?;
                }
                let options = DeleteOptions {
                    recursive: false,
                    allow_missing: false,
                    if_version: None,
                };
                s.retry(|| s.session.delete(&path, options)).await?;
                s.forget_removed(&path);
                Ok(())
            }
            .await;
            match result {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }
}

impl Shared {
    /// The mount's own rename to `path` landed as `version` (when the
    /// server said). Its Moved event is then known for the mount's own
    /// (invalidate.rs: the kernel made the rename itself, and keeps the
    /// entries and pages it holds). A file's pages are kept at its next
    /// open when `kept`: the server's file is still the one they hold.
    fn moved_here(&self, path: &CanonicalPath, version: Option<u64>, kept: bool) {
        if let Some(version) = version {
            self.committed(path, version);
        }
        let mut inodes = self.inodes();
        let Some(node) = inodes.at(path).and_then(|ino| inodes.get_mut(ino)) else {
            return;
        };
        node.own_version = version;
        if node.kind == FileKind::File && node.cached_version.is_some() {
            node.cached_version = version.filter(|_| kept);
        }
    }

    /// Makes an empty file at `path` with `permissions`, refused when the
    /// name exists (`O_EXCL`, mknod): one unary call, cheaper for the
    /// server than a patch.
    async fn create_exclusive(
        &self,
        path: &CanonicalPath,
        permissions: Permissions,
    ) -> Result<wsfs::WriteOutcome, Errno> {
        self.settle(path).await;
        let options = WriteOptions {
            mode: WriteMode::Create,
            create_parents: false,
            permissions: Some(permissions),
            ..WriteOptions::default()
        };
        self.retry(|| self.session.write(path, "", options)).await
    }

    /// Whether a create of `path` may be answered here: its directory's
    /// names are known and hold no such name, and the name is within the
    /// default path limits (a session may set tighter ones; a name over
    /// them is then refused at the first commit, at close or fsync).
    fn may_create_here(&self, path: &CanonicalPath) -> bool {
        self.known.absent(path)
            && self.inodes().at(path).is_none()
            && CanonicalPath::parse(path.as_str(), &PathLimits::default()).is_ok()
    }

    /// A create answered here (see the module's notes): the file is open,
    /// empty and staged, and its first commit makes it on the server.
    fn create_here(
        &self,
        path: &CanonicalPath,
        permissions: Permissions,
    ) -> Result<(FileAttr, u64), Errno> {
        let ino = {
            let mut inodes = self.inodes();
            let ino = inodes.learn(path, FileKind::File);
            let node = inodes.get_mut(ino).expect("just learned");
            node.open += 1;
            node.unborn = true;
            ino
        };
        let staged = match self.stage(ino, 0, true) {
            Ok(staged) => staged,
            Err(e) => {
                self.inodes().detach(path);
                self.release_node(ino);
                return Err(e);
            }
        };
        // Sent with the first commit, which it makes due even when
        // nothing is written (`touch`).
        staged.set_permissions(permissions);
        self.known.added(path);
        let now = SystemTime::now();
        let attr = self.remember(
            ino,
            self.attr_of(ino, FileKind::File, 0, now, now, permissions),
        );
        Ok((attr, self.add_handle(Handle::File { writable: true })))
    }

    /// Whether the unlink of the file at `path` may go behind: the mount
    /// knows it is a file or link, and no handle, staging or queued commit
    /// needs it.
    fn unlink_behind(&self, path: &CanonicalPath) -> bool {
        let inodes = self.inodes();
        inodes
            .at(path)
            .and_then(|ino| inodes.get(ino))
            .is_some_and(|node| {
                node.kind != FileKind::Directory && node.open == 0 && node.staged.is_none()
            })
    }

    /// Whether the rmdir of the directory at `path` may go behind: the
    /// mount made or listed it, and every name it knows there is gone
    /// (removed through the mount, or on its way out). A name made
    /// elsewhere that the mount has not seen makes the server refuse it,
    /// reported as a refused unlink is (known.rs, behind.rs).
    fn rmdir_behind(&self, path: &CanonicalPath) -> bool {
        !path.is_root() && self.known.empty(path) && self.inodes().unborn_in(path).is_empty()
    }

    /// `path` left the workspace through the mount.
    fn forget_removed(&self, path: &CanonicalPath) {
        self.inodes().detach(path);
        self.known.forget(path);
        self.known.removed(path);
    }
}
