//! The FUSE operations. fuser calls each one on its own threads with a
//! `Reply` that may be answered from anywhere: an operation runs on
//! fuser's thread until it must wait (for the server, mostly), and then
//! goes on as a task on the tokio runtime ([`WsfsFs::spawn`]), so many run
//! at once and no call waits behind another. Writes go to the local
//! staging file right away, on fuser's thread, and reach the server at the
//! commit.
//!
//! This module hands each call to the `do_<operation>` method of the module
//! that does it (`attr`, `read`, `write`, `namespace`) and answers the
//! refusals itself.

use super::attr::Setattr;
use super::shared::Shared;
use fuser::{
    Errno, FileHandle, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;
use wsfs::CanonicalPath;

/// The largest write and read the kernel is asked to send in one request.
const MAX_IO: u32 = 1024 * 1024;

/// The answer to every extended-attribute call. The kernel takes ENOSYS
/// as "never supported": it stops sending that call for the mount's life
/// and answers programs `ENOTSUP` itself. Among them is the getxattr of
/// `security.capability` it makes before each write and chown (two or
/// three requests per file `tar x` writes, none once refused so).
const NO_XATTRS: Errno = Errno::ENOSYS;

/// The FUSE filesystem: a thin shell that hands each call to [`Shared`].
pub(super) struct WsfsFs {
    pub(super) shared: Arc<Shared>,
    /// Told when the kernel ends the session (unmounted from anywhere).
    pub(super) ended: tokio::sync::watch::Sender<bool>,
    /// The kernel opens directories by itself when opendir answers
    /// `ENOSYS` (Linux 5.1 and later say so at init): read.rs.
    pub(super) no_opendir: bool,
}

impl WsfsFs {
    /// Runs `work`, which answers its own reply (the kernel waits for it,
    /// not for this call): first here, on fuser's thread, and only if it
    /// must wait (for the server, a queue, a lock) as a task on the
    /// mount's runtime, which goes on from where it stopped. Most calls
    /// (a close, a setattr of a staged file, a lookup the mount can
    /// answer) never wait, and answering them here saves the hand-off to a
    /// runtime thread and back: two thread wake-ups, which a profile of
    /// `tar x` into the mount found to be most of the mount's time.
    pub(super) fn spawn<F, Fut>(&self, work: F)
    where
        F: FnOnce(Arc<Shared>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let shared = self.shared.clone();
        let runtime = &self.shared.runtime;
        // Timers, I/O and `tokio::spawn` in `work` need the runtime.
        let _entered = runtime.enter();
        let mut work = Box::pin(work(shared));
        // Polled once with a waker that does nothing: if it is pending, the
        // task polls it again at once, and that poll registers the task's
        // own waker with whatever it waits for (every future re-registers
        // on each poll), so no wake-up is lost.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if work.as_mut().poll(&mut cx).is_pending() {
            runtime.spawn(work);
        }
    }

    pub(super) fn read_only(&self) -> bool {
        self.shared.options.read_only
    }

    /// The path of a name about to be made or removed in `parent`.
    pub(super) fn new_child(&self, parent: INodeNo, name: &OsStr) -> Result<CanonicalPath, Errno> {
        if self.read_only() {
            return Err(Errno::EROFS);
        }
        self.shared.child(parent.0, name)
    }
}

impl fuser::Filesystem for WsfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is a wish: a kernel without it still mounts.
        self.no_opendir = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_MAX_PAGES);
        // "The filesystem clears set-user-ID and set-group-ID bits on
        // write, truncate and chown": a session keeps only the nine
        // permission bits, so there are never any to clear, and the kernel
        // need not fetch a file's attributes before each chown to find out
        // (as root, `tar x` chowns every file it makes).
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV);
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn destroy(&mut self) {
        let shared = self.shared.clone();
        self.shared
            .runtime
            .block_on(async move { shared.commit_all().await })
            .ok();
        let _ = self.ended.send(true);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.do_lookup(parent, name, reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.do_getattr(ino, reply);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let asked = Setattr {
            mode,
            uid,
            gid,
            size,
            mtime,
        };
        self.do_setattr(ino, asked, reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.do_readlink(ino, reply);
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        self.do_mknod(parent, name, mode, umask, reply);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.do_mkdir(parent, name, mode, umask, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, false, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, true, reply);
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.do_symlink(parent, link_name, target, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.do_rename(parent, name, newparent, newname, flags, reply);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // Hard links are not in the protocol; ln and git fall back from EPERM.
        reply.error(Errno::EPERM);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.do_open(ino, flags, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(ino, offset, size, reply);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.do_write(ino, offset, data, reply);
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.do_flush(ino, reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.do_fsync(ino, reply);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.do_release(ino, fh, reply);
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.do_opendir(reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(ino, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.do_readdirplus(ino, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.do_releasedir(reply);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The directory's changes are on the server once its Deletes on
        // their way ended and its new files were made; a Delete refused
        // in it is reported here (behind.rs, namespace.rs).
        self.spawn(move |s| async move {
            let Ok((dir, _)) = s.path(ino.0) else {
                // Removed: nothing of it is left to send.
                return reply.ok();
            };
            if let Some(refusal) = s.delete_refused(&dir).await {
                return reply.error(refusal);
            }
            if !s.settle_dir(&dir).await {
                return reply.error(Errno::EIO);
            }
            reply.ok();
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // The session's limits are the server's business; report room
        // enough that programs do not refuse to start.
        const BLOCKS: u64 = 1 << 32;
        const FILES: u64 = 1 << 32;
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, FILES, FILES, 4096, 255, 4096);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(NO_XATTRS);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(NO_XATTRS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(NO_XATTRS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(NO_XATTRS);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.do_create(parent, name, mode, umask, flags, reply);
    }
}
