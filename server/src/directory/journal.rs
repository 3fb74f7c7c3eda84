//! Intent records: Restore and ImportArchive on a DIRECTORY session are
//! whole-workspace replacements made of many steps (removals, directories,
//! renames of staged files). A crash between two steps would leave a mix of
//! the old tree and the new, which no client ever saw.
//!
//! Both stage every file they will write before their first change. Their
//! apply step then records an [`Intent`]: the target (every directory, and
//! every file with the name of its staged copy) and what may have to go.
//! The record is fsynced before the first change and removed after the
//! last, by the backend ([`crate::backend::Backend::replace_whole`]). At the
//! next start, [`recover`] finds a record left behind and rolls the
//! workspace forward to the target, before the staging directory is
//! emptied. Replay is idempotent (a crash during recovery is recovered the
//! same way), and works from what is on disk rather than from a count of
//! steps done:
//!
//! 1. each entry that may go (every entry, for an import; the planned
//!    removals, for a restore) is removed unless the target holds the same
//!    kind of entry at its path (a file the target holds and that is
//!    already there is either already new, or replaced in step 3);
//! 2. every directory of the target is made (`mkdir -p`);
//! 3. each target file whose staged copy is still in the staging directory
//!    is committed from it, unless that copy is not the target content: a
//!    restore swaps the old file out under the staged name
//!    ([`crate::backend::DirectoryBackend::commit_aside`]), so the record
//!    carries each file's size and SHA-256 and a staged copy that does not
//!    match is an old file already swapped out, left for the staging sweep.
//!
//! The workspace's write lock is held from before the record is written
//! until after it is removed, so no acknowledged write falls between.

use crate::backend::intent::{hex, Intent, Prune};
use crate::backend::{Backend, CommitMode, StagedFile};
use crate::directory::DirectoryBackend;
use crate::durability::Durability;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use wsfs::{CanonicalPath, Error, FileKind, Permissions, Result};

/// Completes a replacement that a stopped server left part-way in the
/// DIRECTORY session at `session_dir` (workspace `root`). Runs at start,
/// before the session is served and before its staging directory (which
/// holds the staged files the replacement still needs) is emptied. True
/// when there was one. On error the session is not served (it could show
/// a mix of two trees) and the record stays for the next start. What it
/// creates belongs to the session's `owner`, as the replacement would have.
pub fn recover(
    session_dir: &Path,
    root: &Path,
    durability: Durability,
    owner: Option<crate::directory::Owner>,
) -> Result<bool> {
    let staging = session_dir.join("staging");
    if !staging.is_dir() {
        return Ok(false);
    }
    let backend = DirectoryBackend::open(root, &staging)?
        .with_durability(durability)
        .with_owner(owner);
    let Some(intent) = backend.resume_intent()? else {
        return Ok(false);
    };
    tracing::warn!(
        session_dir = %session_dir.display(),
        operation = %intent.operation,
        files = intent.files.len(),
        "completing a replacement cut short by a stop"
    );
    replay(&backend, &staging, &intent)?;
    backend.end_intent()?;
    Ok(true)
}

/// What a stop left for the next start to finish in the DIRECTORY session
/// at `session_dir` (workspace `root`), in words; `None` when nothing: a
/// replacement cut short (its intent record), entries in its staging
/// directory (abandoned uploads, trees a recursive Delete moved out), or
/// trees in the root's [`crate::directory::backend::REMOVING_DIR`]. Reads
/// no more than the record.
pub fn unfinished(session_dir: &Path, root: &Path) -> Option<String> {
    let staging = session_dir.join("staging");
    if let Ok(raw) = std::fs::read(staging.join(crate::directory::backend::INTENT_NAME)) {
        return Some(match serde_json::from_slice::<Intent>(&raw) {
            Ok(intent) => format!("completing '{}', cut short by a stop", intent.operation),
            Err(_) => "completing a replacement cut short by a stop".to_string(),
        });
    }
    let left_in_staging = std::fs::read_dir(&staging).is_ok_and(|mut d| d.next().is_some());
    if left_in_staging || DirectoryBackend::removals_left(root) {
        return Some("removing what a stop left half done".to_string());
    }
    None
}

/// Rolls the workspace forward to `intent`'s target. Idempotent.
fn replay(b: &DirectoryBackend, staging: &Path, intent: &Intent) -> Result<()> {
    // The record holds paths this server parsed before; only well-formedness
    // is checked again.
    let parse = |p: &str| CanonicalPath::parse(p, &wsfs::PathLimits::UNLIMITED);
    let mut target: HashMap<&str, FileKind> = HashMap::new();
    for d in &intent.dirs {
        target.insert(d, FileKind::Directory);
    }
    for f in &intent.files {
        target.insert(&f.path, FileKind::File);
    }
    let candidates: Vec<CanonicalPath> = match &intent.prune {
        Prune::Everything => crate::directory::snapshots::tree(b)?
            .into_iter()
            .map(|e| e.path)
            .collect(),
        Prune::Paths(paths) => paths.iter().map(|p| parse(p)).collect::<Result<_>>()?,
    };
    let mut removed: Vec<CanonicalPath> = Vec::new();
    for path in candidates {
        if removed.last().is_some_and(|r| path.starts_with(r)) {
            continue;
        }
        let current = match b.metadata(&path) {
            Ok(Some(m)) => m.kind,
            Ok(None) | Err(Error::NotADirectory { .. } | Error::PermissionDenied { .. }) => {
                continue
            }
            Err(e) => return Err(e),
        };
        if target.get(path.as_str()) == Some(&current) {
            continue;
        }
        match b.remove(&path, true) {
            Ok(_) | Err(Error::FileNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        removed.push(path);
    }
    let dirs = intent
        .dirs
        .iter()
        .map(|d| parse(d))
        .collect::<Result<Vec<_>>>()?;
    for d in &dirs {
        b.mkdir(d, true, Permissions::DIRECTORY_DEFAULT)?;
    }
    for f in &intent.files {
        let put = CommitMode {
            append: false,
            create_parents: true,
            permissions: intent.bits(&f.path),
            modified: f.modified,
        };
        let Some(name) = &f.staged else { continue };
        let Some(staged) = b.staged(name)? else {
            continue;
        };
        if staged.len() != f.size || !holds(&staged_path(staging, name), f.sha256.as_deref())? {
            // An old file swapped out under the staged name: the new one
            // is in place already.
            continue;
        }
        b.commit(staged, &parse(&f.path)?, put)?;
    }
    let bits = dirs.iter().map(|d| {
        let bits = intent
            .bits(d.as_str())
            .unwrap_or(Permissions::DIRECTORY_DEFAULT);
        (d, bits)
    });
    crate::backend::finish_directories(b, bits)?;
    Ok(())
}

fn staged_path(staging: &Path, name: &str) -> std::path::PathBuf {
    staging.join(name)
}

/// Whether the file at `path` has SHA-256 `expected` (hex); true when no
/// hash was recorded.
fn holds(path: &Path, expected: Option<&str>) -> Result<bool> {
    let Some(expected) = expected else {
        return Ok(true);
    };
    let fail = |e: std::io::Error| Error::internal(format!("cannot read a staged file: {e}"));
    let mut file = std::fs::File::open(path).map_err(fail)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(hex(hasher.finalize()) == expected)
}

#[cfg(test)]
mod tests {
    const DIR: wsfs::Permissions = wsfs::Permissions::DIRECTORY_DEFAULT;
    use super::*;
    use crate::backend::intent::IntentFile;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    /// A session directory with `root/` and `staging/`.
    struct Session {
        _dir: tempfile::TempDir,
        dir: PathBuf,
        root: PathBuf,
    }

    impl Session {
        fn new() -> Session {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().to_path_buf();
            std::fs::create_dir(path.join("root")).unwrap();
            std::fs::create_dir(path.join("staging")).unwrap();
            Session {
                root: path.join("root"),
                dir: path,
                _dir: dir,
            }
        }

        fn backend(&self) -> DirectoryBackend {
            DirectoryBackend::open(&self.root, &self.dir.join("staging")).unwrap()
        }

        fn put(&self, path: &str, data: &str) {
            let at = self.root.join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, data).unwrap();
        }

        /// Every entry under the root: path -> content (`None`: a directory).
        fn tree(&self) -> std::collections::BTreeMap<String, Option<String>> {
            let mut out = std::collections::BTreeMap::new();
            for entry in walk(&self.root) {
                let rel = entry.strip_prefix(&self.root).unwrap();
                let rel = rel.to_str().unwrap().to_string();
                let data = std::fs::read_to_string(&entry).ok();
                out.insert(rel, data);
            }
            out
        }
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.push(p.clone());
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    fn stage(b: &DirectoryBackend, data: &str) -> <DirectoryBackend as Backend>::Staged {
        let mut s = b.stage().unwrap();
        s.write_chunk(data.as_bytes()).unwrap();
        s.finish().unwrap();
        s
    }

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::from_canonical(s)
    }

    fn sha(data: &str) -> Vec<u8> {
        Sha256::digest(data.as_bytes()).to_vec()
    }

    /// Old tree: `keep.txt`, `gone.txt`, `flip` (a file that becomes a
    /// directory). Target: `keep.txt` rewritten, `flip/in.txt`, `new/a.txt`.
    fn intent(
        b: &DirectoryBackend,
        prune: Prune,
        hashed: bool,
    ) -> (Intent, Vec<<DirectoryBackend as Backend>::Staged>) {
        let files = [
            ("keep.txt", "new keep\n"),
            ("flip/in.txt", "in\n"),
            ("new/a.txt", "a\n"),
        ];
        let staged: Vec<_> = files.iter().map(|(_, d)| stage(b, d)).collect();
        let intent = Intent {
            operation: "test".into(),
            prune,
            dirs: vec!["flip".into(), "new".into()],
            files: files
                .iter()
                .zip(&staged)
                .map(|((path, data), s)| {
                    IntentFile::new(&p(path), s, hashed.then(|| sha(data)).as_deref())
                })
                .collect(),
            permissions: BTreeMap::new(),
        };
        (intent, staged)
    }

    fn old_tree(s: &Session) {
        s.put("keep.txt", "old keep\n");
        s.put("gone.txt", "gone\n");
        s.put("flip", "a file for now\n");
    }

    fn target() -> std::collections::BTreeMap<String, Option<String>> {
        [
            ("flip", None),
            ("flip/in.txt", Some("in\n")),
            ("keep.txt", Some("new keep\n")),
            ("new", None),
            ("new/a.txt", Some("a\n")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .collect()
    }

    /// Records the intent and leaves the staged files behind, as a server
    /// killed right after `begin_intent` would.
    fn killed_after(
        b: &DirectoryBackend,
        intent: &Intent,
        staged: Vec<<DirectoryBackend as Backend>::Staged>,
    ) {
        b.begin_intent(intent).unwrap();
        // A killed process removes nothing: keep the staged files.
        std::mem::forget(staged);
    }

    #[test]
    fn a_replacement_killed_before_its_first_change_is_completed_at_start() {
        for prune in [
            Prune::Everything,
            Prune::Paths(vec!["gone.txt".into(), "flip".into()]),
        ] {
            let s = Session::new();
            old_tree(&s);
            let b = s.backend();
            let (intent, staged) = intent(&b, prune, false);
            killed_after(&b, &intent, staged);
            assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
            assert_eq!(s.tree(), target());
            assert!(s.backend().pending_intent().unwrap().is_none());
            // Nothing left to do the second time.
            assert!(!recover(&s.dir, &s.root, Durability::None, None).unwrap());
            assert_eq!(s.tree(), target());
        }
    }

    /// A restore of one path records only what lies there (and its
    /// missing parents): a replay leaves everything else as it was.
    #[test]
    fn a_replayed_restore_of_one_path_leaves_what_its_record_does_not_name() {
        let s = Session::new();
        old_tree(&s);
        s.put("outside/kept.txt", "not in the record\n");
        let b = s.backend();
        let prune = Prune::Paths(vec!["gone.txt".into(), "flip".into()]);
        let (intent, staged) = intent(&b, prune, false);
        killed_after(&b, &intent, staged);
        assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
        let mut expected = target();
        expected.insert("outside".into(), None);
        expected.insert(
            "outside/kept.txt".into(),
            Some("not in the record\n".into()),
        );
        assert_eq!(s.tree(), expected);
    }

    #[test]
    fn a_replayed_replacement_gives_what_it_creates_to_the_sessions_owner() {
        use std::os::unix::fs::MetadataExt;
        if !rustix::process::geteuid().is_root() {
            return; // giving files away needs root
        }
        let s = Session::new();
        old_tree(&s);
        let b = s.backend();
        let (intent, staged) = intent(&b, Prune::Everything, false);
        killed_after(&b, &intent, staged);
        let owner = crate::directory::Owner::new(1000, 1001, 0, 0).unwrap();
        assert!(recover(&s.dir, &s.root, Durability::None, Some(owner)).unwrap());
        assert_eq!(s.tree(), target());
        for path in ["new", "new/a.txt"] {
            let meta = std::fs::metadata(s.root.join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (1000, 1001), "{path}");
        }
    }

    #[test]
    fn a_replayed_replacement_gives_its_entries_their_recorded_bits_and_times() {
        use std::os::unix::fs::PermissionsExt;
        let s = Session::new();
        old_tree(&s);
        let b = s.backend();
        let (mut intent, staged) = intent(&b, Prune::Everything, false);
        let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
        intent.files[2].modified = Some(then);
        intent.permissions = [("new", 0o700), ("new/a.txt", 0o755), ("keep.txt", 0o600)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        killed_after(&b, &intent, staged);
        assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
        assert_eq!(s.tree(), target());
        let mode = |path: &str| {
            std::fs::metadata(s.root.join(path))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("new"), 0o700);
        assert_eq!(mode("new/a.txt"), 0o755);
        assert_eq!(mode("keep.txt"), 0o600);
        assert_eq!(mode("flip/in.txt"), 0o644, "no record: the default");
        let modified = std::fs::metadata(s.root.join("new/a.txt"))
            .unwrap()
            .modified();
        assert_eq!(modified.unwrap(), then);
    }

    #[test]
    fn replay_after_part_of_the_steps_reaches_the_same_tree() {
        let s = Session::new();
        old_tree(&s);
        let b = s.backend();
        let (intent, mut staged) = intent(&b, Prune::Everything, false);
        b.begin_intent(&intent).unwrap();
        // Some steps done: `gone.txt` removed, `flip` replaced, `new/a.txt`
        // committed; `keep.txt` still old.
        b.remove(&p("gone.txt"), true).unwrap();
        b.remove(&p("flip"), true).unwrap();
        b.mkdir(&p("new"), true, DIR).unwrap();
        let put = CommitMode {
            append: false,
            create_parents: true,
            ..CommitMode::default()
        };
        b.commit(staged.pop().unwrap(), &p("new/a.txt"), put)
            .unwrap();
        std::mem::forget(staged);
        assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
        assert_eq!(s.tree(), target());
    }

    #[test]
    fn an_old_file_swapped_out_under_a_staged_name_is_not_put_back() {
        let s = Session::new();
        old_tree(&s);
        let b = s.backend();
        let (intent, mut staged) = intent(&b, Prune::Everything, true);
        b.begin_intent(&intent).unwrap();
        // `keep.txt` committed by exchange: the staged name now holds the
        // old content.
        let put = CommitMode {
            append: false,
            create_parents: true,
            ..CommitMode::default()
        };
        let keep = staged.remove(0);
        let (_, displaced) = b.commit_aside(keep, &p("keep.txt"), put).unwrap();
        std::mem::forget(displaced);
        std::mem::forget(staged);
        assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
        assert_eq!(s.tree(), target());
    }

    /// Emptying the workspace (a recursive Delete of the root) cut short
    /// after its first removal is completed at start.
    #[test]
    fn an_emptying_cut_short_is_completed_at_start() {
        let s = Session::new();
        old_tree(&s);
        s.put("deep/er/file.txt", "x\n");
        let b = s.backend();
        b.begin_intent(&Intent::emptying("delete")).unwrap();
        b.remove(&p("gone.txt"), true).unwrap();
        assert!(recover(&s.dir, &s.root, Durability::None, None).unwrap());
        assert!(s.tree().is_empty(), "{:?}", s.tree());
        assert!(s.backend().pending_intent().unwrap().is_none());
    }

    #[test]
    fn a_corrupt_intent_record_fails_recovery_and_changes_nothing() {
        let s = Session::new();
        old_tree(&s);
        let before = s.tree();
        std::fs::write(s.dir.join("staging").join("intent.json"), "{ not json").unwrap();
        let err = recover(&s.dir, &s.root, Durability::None, None).unwrap_err();
        assert!(
            err.to_string().contains("intent record is corrupt"),
            "{err}"
        );
        assert_eq!(s.tree(), before);
        assert!(s.dir.join("staging").join("intent.json").exists());
    }
}
