//! The contract's file operations on a [`Workspace`]: each checks what it
//! can outside the lock, then runs its change under the claim of the paths
//! it changes.

use super::byte_stream::byte_chunks;
use super::edit::{bounded_diff, edited_size, read_text_for_edit};
use super::patch::admit_chunk;
use super::text::text_page;
use super::{check_version, Cost, Landing, Workspace, MAX_LIST_ENTRIES};
use crate::backend::{Backend, CommitMode, Patch, StagedFile};
use crate::quota::{self, Usage};
use crate::search;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, ByteRange, ByteStream, CanonicalPath, DeleteOptions,
    EditOutcome, EditSpec, Error, FileKind, Filesystem, GlobOutcome, GlobQuery, GrepEvent,
    GrepQuery, LineRange, Listing, Metadata, MkdirOptions, PatchChunks, PatchOptions, Result,
    SymlinkOptions, TextPage, TransferOptions, Transferred, WriteOptions, WriteOutcome,
    MAX_CHUNK_SIZE,
};

#[async_trait]
impl<B: Backend> Filesystem for Workspace<B> {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        let path = path.clone();
        self.run(move |b| text_page(b.open(&path)?, path, range))
            .await
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        let chunk = if chunk_size == 0 {
            wsfs::DEFAULT_CHUNK_SIZE
        } else {
            chunk_size.min(MAX_CHUNK_SIZE)
        };
        let p = path.clone();
        let file = self.run(move |b| b.open(&p)).await?;
        let size = file.meta.size;
        if range.offset > size {
            return Err(Error::OutOfRange {
                path: path.as_str().to_string(),
                message: format!(
                    "offset {} is past the end of '{path}' ({size} bytes)",
                    range.offset
                ),
            });
        }
        let length = range
            .limit
            .map_or(size - range.offset, |l| l.min(size - range.offset));
        Ok(ByteStream {
            path: path.clone(),
            size,
            version: file.meta.version,
            offset: range.offset,
            length,
            chunks: crate::metrics::Gauged::new(
                byte_chunks(file.content, path.clone(), range.offset, length, chunk)
                    .inspect(|c| {
                        if let Ok(bytes) = c {
                            crate::metrics::BYTES_STREAMED.fetch_add(
                                bytes.len() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                    })
                    .boxed(),
                &crate::metrics::ACTIVE_BYTE_STREAMS,
            )
            .boxed(),
        })
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        // Refused before the content is copied.
        self.check_size(path, content.len() as u64)?;
        let data = Bytes::copy_from_slice(content.as_bytes());
        self.write_bytes(path, options, futures::stream::iter([Ok(data)]).boxed())
            .await
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        self.writable_file(path, "write")?;
        let staged = self.stage_upload(path, data).await?;
        self.commit(path, staged, options).await
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        self.writable_file(path, "patch")?;
        let ranges = Arc::new(std::sync::Mutex::new(Vec::new()));
        let admitted = ranges.clone();
        let (p, limit) = (path.clone(), self.limits.max_write_bytes);
        let bytes = data
            .map(move |chunk| {
                let mut ranges = admitted.lock().unwrap_or_else(|e| e.into_inner());
                admit_chunk(&p, &mut ranges, chunk?)
            })
            .boxed();
        let staged = self.stage_upload(path, bytes).await?;
        let patch = Patch {
            truncate_to: options.truncate_to,
            ranges: std::mem::take(&mut *ranges.lock().unwrap_or_else(|e| e.into_inner())),
            create_missing: options.create_missing,
        };
        let (path, limits, quota) = (path.clone(), self.limits, self.quota.clone());
        // A patch copies the file as it is, unless it replaces it whole.
        let cost = self.cost_of_file(&path, staged.len());
        self.locked(vec![path.clone()], cost, move |b| {
            let current = b.metadata(&path)?;
            check_version(&path, current.as_ref(), options.if_version)?;
            match current.as_ref().map(|m| m.kind) {
                None if !options.create_missing => {
                    return Err(Error::FileNotFound {
                        path: path.as_str().to_string(),
                    })
                }
                Some(FileKind::Directory) => {
                    return Err(Error::IsADirectory {
                        path: path.as_str().to_string(),
                    })
                }
                Some(FileKind::Symlink) => return Err(crate::backend::symlink_denied(&path, true)),
                _ => {}
            }
            let old = current.as_ref().map_or(0, |m| m.size);
            let size = patch.size_after(old);
            // What a patch adds to the file costs what writing it costs: a
            // gap or an extension is bytes the server makes.
            if size.saturating_sub(old) > limit {
                return Err(Error::TooLarge {
                    path: path.as_str().to_string(),
                    size: size - old,
                    limit,
                });
            }
            let bytes_written = staged.len();
            let mode = CommitMode {
                append: false,
                create_parents: options.create_parents,
                permissions: options.permissions,
                modified: options.modified,
            };
            let landing = Landing {
                quota: &quota,
                limits: &limits,
                current: current.as_ref(),
                size,
                bytes_written,
            };
            landing.land(b, path, |b, path| {
                if patch.replaces_whole(old) {
                    // The staged bytes are the new version whole: committed
                    // as a write's are (a rename where the backend can),
                    // without the copy a patch's apply makes. Everything a
                    // patch checks was checked above, under the same lock.
                    b.commit(staged, path, mode)
                } else {
                    b.commit_patch(staged, path, &patch, mode)
                }
            })
        })
        .await
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        wsfs::check_symlink_target(path, target)?;
        self.writable(path)?;
        let (path, target) = (path.clone(), target.to_string());
        self.locked(vec![path.clone()], Cost::Small, move |b| {
            b.symlink(&path, &target, options.create_parents)
        })
        .await
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        if edit.old_text.is_empty() {
            return Err(Error::invalid_argument("old_text must not be empty"));
        }
        // A dry run previews the real edit: it fails wherever the edit
        // would, and costs no more.
        self.writable(path)?;
        let limit = self.limits.max_write_bytes;
        // Neither text can be part of a result within the limit when it is
        // itself larger: refused before the file is read.
        for text in [&edit.old_text, &edit.new_text] {
            self.check_size(path, text.len() as u64)?;
        }
        // Read, replace and commit under the lock: no update slips between.
        let limits = self.limits;
        let quota = self.quota.clone();
        let path = path.clone();
        self.locked(vec![path.clone()], Cost::Large, move |b| {
            let (text, meta) = read_text_for_edit(b, &path, limit)?;
            check_version(&path, Some(&meta), edit.if_version)?;
            let count = text.matches(edit.old_text.as_str()).count() as u64;
            if count == 0 {
                return Err(Error::NoMatch {
                    path: path.as_str().to_string(),
                });
            }
            if count > 1 && !edit.replace_all {
                return Err(Error::AmbiguousMatch {
                    path: path.as_str().to_string(),
                    count,
                });
            }
            // The result's size follows from the match count alone, so an
            // edit that would grow past the limit is refused before the
            // result is built.
            let size = edited_size(
                text.len() as u64,
                count,
                edit.old_text.len() as u64,
                edit.new_text.len() as u64,
            );
            if size > limit {
                return Err(Error::TooLarge {
                    path: path.as_str().to_string(),
                    size,
                    limit,
                });
            }
            let new_text = text.replace(edit.old_text.as_str(), &edit.new_text);
            let diff = bounded_diff(&path, &text, &new_text);
            let (version, size) = if edit.dry_run {
                (meta.version, meta.size)
            } else {
                let (old, new) = (Usage::file(meta.size), Usage::file(new_text.len() as u64));
                let reserved = quota.reserve(b, &limits, &path, old, new)?;
                let mut staged = b.stage()?;
                staged.write_chunk(new_text.as_bytes())?;
                let mode = CommitMode {
                    append: false,
                    create_parents: false,
                    ..CommitMode::default()
                };
                let m = reserved.land(|| b.commit(staged, &path, mode))?;
                (m.version, m.size)
            };
            Ok(EditOutcome {
                path,
                replacements: count,
                version,
                diff,
                dry_run: edit.dry_run,
                size,
            })
        })
        .await
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        self.writable(path)?;
        let path = path.clone();
        let quota = self.quota.clone();
        // One small file removed is small (a large one's blocks are freed
        // as it goes); a tree is not.
        let cost = if options.recursive {
            Cost::Large
        } else {
            self.cost_of_file(&path, 0)
        };
        self.locked(vec![path.clone()], cost, move |b| {
            let current = match b.metadata(&path) {
                Err(Error::NotADirectory { .. }) => None,
                other => other?,
            };
            check_version(&path, current.as_ref(), options.if_version)?;
            match current {
                None if options.allow_missing => Ok(0),
                None => Err(Error::FileNotFound {
                    path: path.as_str().to_string(),
                }),
                // Emptying the workspace is one removal per entry at its
                // top: recorded, so that the next start completes one a
                // crash cut short.
                Some(_) if path.is_root() && options.recursive => quota.change(|| {
                    let intent =
                        crate::backend::intent::Intent::emptying("delete the workspace's contents");
                    crate::backend::intent::apply(b, &intent, || b.remove(&path, true))
                }),
                Some(_) => quota.change(|| b.remove(&path, options.recursive)),
            }
        })
        .await
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        self.writable(path)?;
        let p = path.clone();
        let created = self
            .locked(vec![p.clone()], Cost::Small, move |b| {
                let permissions = options
                    .permissions
                    .unwrap_or_else(|| b.default_directory_permissions());
                b.mkdir(&p, options.parents, permissions)
            })
            .await?;
        if !created && !options.exist_ok {
            return Err(Error::AlreadyExists {
                path: path.as_str().to_string(),
            });
        }
        Ok(created)
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        self.writable(source)?;
        self.writable(destination)?;
        let (src, dst) = (source.clone(), destination.clone());
        let quota = self.quota.clone();
        // A file's new name is small, unless it replaces a large file
        // (whose blocks are freed as it goes); a directory's moves what
        // the server knows of every path beneath it.
        let cost = match self.backend.metadata(&src) {
            Ok(Some(m)) if m.kind != FileKind::Directory => self.cost_of_file(&dst, 0),
            _ => Cost::Large,
        };
        self.locked(vec![src.clone(), dst.clone()], cost, move |b| {
            if options.if_version.is_some() {
                let current = b.metadata(&src)?;
                check_version(&src, current.as_ref(), options.if_version)?;
            }
            let entries =
                quota.change(|| b.rename(&src, &dst, options.overwrite, options.create_parents))?;
            transferred(b, &dst, entries)
        })
        .await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        self.writable(destination)?;
        let (src, dst) = (source.clone(), destination.clone());
        let limits = self.limits;
        let quota = self.quota.clone();
        self.locked(vec![src.clone(), dst.clone()], Cost::Large, move |b| {
            let (removed, added) = if quota::limited(&limits) {
                (quota::usage(b, &dst)?, quota::usage(b, &src)?)
            } else {
                Default::default()
            };
            let reserved = quota.reserve(b, &limits, &dst, removed, added)?;
            let entries =
                reserved.land(|| b.copy(&src, &dst, options.overwrite, options.create_parents))?;
            transferred(b, &dst, entries)
        })
        .await
    }

    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing> {
        let depth = depth.max(1);
        let (p, after) = (path.clone(), after.cloned());
        let (entries, truncated) = self
            .run(move |b| b.list(&p, depth, after.as_ref(), MAX_LIST_ENTRIES))
            .await?;
        Ok(Listing {
            path: path.clone(),
            entries,
            truncated,
        })
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        let walk = search::GlobWalk::new(query)?;
        self.run(move |b| walk.run(b)).await
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        search::grep(self.backend.clone(), query)
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        // In place, even on a backend that blocks: a path resolution and a
        // `statx` cost less than the hand-off to the blocking pool and back
        // (two thread wake-ups, most of a Stat's time with 16 callers on 2
        // CPUs). A text Read measured slower in place and stays there.
        self.backend
            .metadata(path)?
            .ok_or_else(|| Error::FileNotFound {
                path: path.as_str().to_string(),
            })
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        // In place, as Stat.
        match self.backend.metadata(path) {
            Ok(m) => Ok(m.map(|m| m.kind)),
            Err(Error::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        attributes.check()?;
        self.writable(path)?;
        let path = path.clone();
        self.locked(vec![path.clone()], Cost::Small, move |b| {
            let current = b.metadata(&path)?;
            check_version(&path, current.as_ref(), attributes.if_version)?;
            if current.is_none() {
                return Err(Error::FileNotFound {
                    path: path.as_str().to_string(),
                });
            }
            let m = b.set_attributes(&path, attributes.permissions, attributes.modified)?;
            Ok(AttributesOutcome::from(&m))
        })
        .await
    }
}

/// What a Move or Copy of `entries` entries to `destination` did, with the
/// version the destination got: read under the call's locks, so that no
/// later change is taken for it.
fn transferred<B: Backend>(
    b: &B,
    destination: &CanonicalPath,
    entries: u64,
) -> Result<Transferred> {
    Ok(Transferred {
        entries,
        version: b.metadata(destination)?.map(|m| m.version),
    })
}
