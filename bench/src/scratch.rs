//! A filesystem of its own for each round of the fork, object-storage and
//! mount figures, so that every round, and both sides of it, start from
//! the same allocator state.
//!
//! On ext4 without a journal, creating a file soon after many deletions
//! is slow: for each new inode the allocator skips every inode freed in
//! the last minute (five while its table block is dirty), reading its
//! table entry to tell. A round that follows the previous round's
//! deletion of 20,000 files (or another program's) is then slower than
//! one that does not, by more than the difference being measured. Here
//! each round's copies live in a new ext4 image (inode tables written at
//! `mkfs`, not in the background during the round), loop-mounted at the
//! round's directory and removed after it. The fork and object-storage
//! figures make it without a journal, as on the disk their earlier figures
//! were taken on; the mount's with one, as `mkfs.ext4` makes it by default
//! and most machines have it: a journal makes the local side's many small
//! creates and deletions cheaper, and a baseline without one flatters the
//! mount. That needs root and
//! `mkfs.ext4`; without them the round's directory is a plain directory
//! on the work disk (the figures then carry the disk's allocator state
//! from round to round) and the notes say why.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Room beside what a round writes: the filesystem's own metadata, the
/// servers' records.
const SLACK_BYTES: u64 = 256 << 20;

/// A round's directory: a fresh filesystem mounted there, or a plain
/// directory. Removed (unmounted first) when dropped.
pub struct Scratch {
    dir: PathBuf,
    /// The image mounted at `dir`, when it is one.
    image: Option<PathBuf>,
}

/// How a figure's rounds got their directories, for the notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScratchKind {
    /// Each round in a new loop-mounted ext4 image, with a journal or not.
    FreshFilesystem { journal: bool },
    /// Plain directories on the work disk, and why.
    Plain(String),
}

impl ScratchKind {
    /// A sentence for the notes.
    pub fn describe(&self) -> String {
        match self {
            ScratchKind::FreshFilesystem { journal } => format!(
                "each round's copies, both sides, in a new loop-mounted ext4 image ({}), \
                 made fresh for the round",
                if *journal {
                    "with a journal"
                } else {
                    "no journal"
                }
            ),
            ScratchKind::Plain(why) => format!(
                "each round's copies in plain directories on the work disk ({why}): \
                 a round may follow another's deletions, which slows file creation on ext4"
            ),
        }
    }
}

impl Scratch {
    /// An empty directory at `dir` (which must not exist) with room for
    /// `holds` bytes: a new filesystem of its own when `kind` says one
    /// can be made, else a plain directory. A filesystem that cannot be
    /// made turns `kind` into [`ScratchKind::Plain`] for later rounds.
    pub fn fresh(dir: &Path, holds: u64, kind: &mut ScratchKind) -> Result<Scratch, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
        let mut scratch = Scratch {
            dir: dir.to_path_buf(),
            image: None,
        };
        if let ScratchKind::FreshFilesystem { journal } = *kind {
            let image = dir.with_extension("img");
            match mount_fresh(&image, dir, holds + SLACK_BYTES, journal) {
                Ok(()) => scratch.image = Some(image),
                Err(why) => {
                    let _ = std::fs::remove_file(&image);
                    eprintln!("no fresh filesystem for the round: {why}");
                    *kind = ScratchKind::Plain(why);
                }
            }
        }
        Ok(scratch)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(image) = self.image.take() {
            // A mount made with `-o loop` frees its loop device here.
            let _ = run(Command::new("umount").arg(&self.dir));
            let _ = std::fs::remove_file(image);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether rounds can have filesystems of their own here (root, with
/// `mkfs.ext4` and `mount`), made with a `journal` or without.
pub fn kind(journal: bool) -> ScratchKind {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false);
    if !root {
        return ScratchKind::Plain("not running as root, so no loop mounts".into());
    }
    if run(Command::new("mkfs.ext4").arg("-V")).is_err() {
        return ScratchKind::Plain("no mkfs.ext4 (Debian package e2fsprogs)".into());
    }
    ScratchKind::FreshFilesystem { journal }
}

/// Makes a sparse ext4 image of `bytes` at `image`, with a `journal` or
/// without, and mounts it at `dir`.
fn mount_fresh(image: &Path, dir: &Path, bytes: u64, journal: bool) -> Result<(), String> {
    let file = std::fs::File::create_new(image)
        .map_err(|e| format!("cannot create '{}': {e}", image.display()))?;
    file.set_len(bytes)
        .map_err(|e| format!("cannot size '{}': {e}", image.display()))?;
    drop(file);
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O"])
        .arg(if journal {
            "has_journal"
        } else {
            "^has_journal"
        })
        .args(["-E", "lazy_itable_init=0,nodiscard"])
        .arg(image))?;
    run(Command::new("mount")
        .arg("-o")
        .arg("loop")
        .arg(image)
        .arg(dir))
}

/// Runs `cmd` to completion; its stderr on failure.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounted(dir: &Path) -> bool {
        device(dir).is_some()
    }

    /// The device mounted at `dir`, if any.
    fn device(dir: &Path) -> Option<String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let dir = dir.to_string_lossy();
        mounts.lines().find_map(|l| {
            let mut fields = l.split_whitespace();
            let dev = fields.next()?;
            (fields.next() == Some(&*dir)).then(|| dev.to_string())
        })
    }

    /// Whether the ext4 filesystem on `device` keeps a journal: the kernel
    /// lists a journal thread's statistics for it.
    fn journaled(device: &str) -> bool {
        let name = device.trim_start_matches("/dev/");
        std::fs::read_dir("/proc/fs/jbd2")
            .map(|entries| {
                entries.flatten().any(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{name}-"))
                })
            })
            .unwrap_or(false)
    }

    /// Where rounds can have filesystems of their own, a round's directory
    /// is a new, empty one mounted there, with a journal when asked for;
    /// where one cannot be made (no loop devices), a plain directory, and
    /// the kind says why; either way nothing is left once the round ends.
    /// `WSFS_REQUIRE_TOOLS=1` fails instead of falling back.
    #[test]
    fn a_round_gets_a_fresh_directory_and_leaves_nothing() {
        for journal in [false, true] {
            let work = tempfile::tempdir().unwrap();
            let dir = work.path().join("round");
            let mut kind = kind(journal);
            let asked = kind.clone();
            let round = Scratch::fresh(&dir, 64 << 20, &mut kind).unwrap();
            if kind != asked {
                assert!(
                    std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
                    "WSFS_REQUIRE_TOOLS=1 and a fresh filesystem could not be made: {kind:?}"
                );
                eprintln!("fell back to a plain directory: {kind:?}");
            }
            let fresh = kind == ScratchKind::FreshFilesystem { journal };
            assert_eq!(mounted(&dir), fresh);
            if fresh {
                let device = device(&dir).expect("the round's device");
                assert_eq!(
                    journaled(&device),
                    journal,
                    "{device}, journal asked: {journal}"
                );
            }
            std::fs::write(round.path().join("f"), b"x").unwrap();
            drop(round);
            assert!(!mounted(&dir));
            assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
        }
    }
}
