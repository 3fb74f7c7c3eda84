//! The grep corpus: a real source tree on disk. By default it is assembled
//! from the text files of the Rust sources and documentation installed on
//! this machine (the cargo registry's unpacked crates, the toolchains'
//! `share/doc` and `lib/rustlib`), copied again and again (`copy-1/`,
//! `copy-2/`, ...) until it reaches the size asked for. A rare literal is
//! planted in three of its files. `--corpus DIR` uses a tree as it is.

use crate::wire::TreeFile;
use std::fs;
use std::path::{Path, PathBuf};

/// Most path segments and characters per segment kept in the corpus; the
/// benchmark's sessions allow exactly this much.
const MAX_DEPTH: usize = 64;
const MAX_SEGMENT_CHARS: usize = 255;

/// Files the rare literal is planted in.
const PLANTED_FILES: usize = 3;

pub struct Corpus {
    pub dir: PathBuf,
    pub files: Vec<TreeFile>,
    pub bytes: u64,
    /// A 12-character string that occurs only where planted.
    pub literal: String,
    /// How many lines carry the literal (0 when the tree was not ours to
    /// change).
    pub planted: usize,
    /// Where the text came from, for the results.
    pub origin: String,
}

/// Regular files under `root` (symlinks are neither followed nor listed,
/// as wsfs does), in bytewise path order, with their workspace paths.
/// Files whose names are not UTF-8 or break the path limits are left out.
pub fn walk(root: &Path) -> std::io::Result<Vec<TreeFile>> {
    fn visit(root: &Path, dir: &Path, out: &mut Vec<TreeFile>) -> std::io::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let meta = entry.file_type()?;
            let local = entry.path();
            if meta.is_dir() {
                visit(root, &local, out)?;
            } else if meta.is_file() {
                let Some(path) = workspace_path(root, &local) else {
                    continue;
                };
                let len = entry.metadata()?.len();
                out.push(TreeFile { local, path, len });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    visit(root, root, &mut out)?;
    Ok(out)
}

fn workspace_path(root: &Path, local: &Path) -> Option<String> {
    let rel = local.strip_prefix(root).ok()?.to_str()?;
    let segments: Vec<&str> = rel.split('/').collect();
    let fits = segments.len() <= MAX_DEPTH
        && segments
            .iter()
            .all(|s| !s.is_empty() && s.chars().count() <= MAX_SEGMENT_CHARS);
    fits.then(|| rel.to_string())
}

/// A small xorshift generator: reproducible noise with no dependency.
pub struct Noise(u64);

impl Noise {
    pub fn seeded() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Noise((nanos ^ (u64::from(std::process::id()) << 32)) | 1)
    }

    pub fn fixed(seed: u64) -> Self {
        Noise(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Fills `buf` with pseudo-random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn random_literal(noise: &mut Noise) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..12)
        .map(|_| ALPHABET[(noise.next_u64() % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// Uses an existing tree as it is: nothing is planted, so the literal (a
/// fresh random string) is expected nowhere and both tools scan everything.
pub fn existing(dir: &Path) -> Result<Corpus, String> {
    let dir = fs::canonicalize(dir).map_err(|e| format!("corpus '{}': {e}", dir.display()))?;
    let files = walk(&dir).map_err(|e| format!("cannot walk '{}': {e}", dir.display()))?;
    if files.is_empty() {
        return Err(format!("corpus '{}' holds no files", dir.display()));
    }
    let bytes = files.iter().map(|f| f.len).sum();
    Ok(Corpus {
        dir,
        files,
        bytes,
        literal: random_literal(&mut Noise::seeded()),
        planted: 0,
        origin: "the tree given with --corpus, unchanged".to_string(),
    })
}

/// The text trees found on this machine, each with a short label that
/// names it in the corpus (no machine paths reach the results).
fn sources() -> Vec<(String, PathBuf)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".cargo")));
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".rustup")));
    let mut out = Vec::new();
    if let Some(c) = cargo_home {
        out.push(("cargo-registry".to_string(), c.join("registry").join("src")));
    }
    if let Some(r) = rustup_home {
        let mut toolchains: Vec<PathBuf> = fs::read_dir(r.join("toolchains"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        toolchains.sort();
        for (i, t) in toolchains.iter().enumerate() {
            out.push((
                format!("toolchain-{}-doc", i + 1),
                t.join("share").join("doc"),
            ));
            out.push((
                format!("toolchain-{}-rustlib", i + 1),
                t.join("lib").join("rustlib"),
            ));
        }
    }
    out.retain(|(_, p)| p.is_dir());
    out
}

/// Builds a corpus of at least `target_bytes` under `dir` from the text
/// files (no NUL byte) of the source trees on this machine, and plants the
/// rare literal in three files spread through it.
pub fn assemble(dir: &Path, target_bytes: u64) -> Result<Corpus, String> {
    let sources: Vec<(String, Vec<TreeFile>)> = sources()
        .into_iter()
        .filter_map(|(label, path)| walk(&path).ok().map(|files| (label, files)))
        .filter(|(_, files)| !files.is_empty())
        .collect();
    let mut total = 0u64;
    let mut copies = 0;
    'passes: while total < target_bytes {
        copies += 1;
        let before = total;
        for (label, files) in &sources {
            for f in files {
                let Ok(data) = fs::read(&f.local) else {
                    continue;
                };
                if data.contains(&0) {
                    continue;
                }
                let dest = dir.join(format!("copy-{copies}")).join(label).join(&f.path);
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent)
                        .map_err(|e| format!("cannot create '{}': {e}", parent.display()))?;
                }
                fs::write(&dest, &data)
                    .map_err(|e| format!("cannot write '{}': {e}", dest.display()))?;
                total += data.len() as u64;
                if total >= target_bytes {
                    break 'passes;
                }
            }
        }
        if total == before {
            return Err(
                "no text source trees found on this machine (cargo registry sources, toolchain \
                 docs); pass --corpus DIR"
                    .to_string(),
            );
        }
    }

    let mut files = walk(dir).map_err(|e| format!("cannot walk the corpus: {e}"))?;
    let mut noise = Noise::seeded();
    let literal = random_literal(&mut noise);
    let n = files.len();
    for k in 1..=PLANTED_FILES.min(n) {
        let f = &mut files[k * n / (PLANTED_FILES + 1)];
        let mut data = fs::read(&f.local).map_err(|e| format!("planting: {e}"))?;
        if !data.is_empty() && !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        data.extend_from_slice(format!("// planted by wsfs-bench: {literal}\n").as_bytes());
        fs::write(&f.local, &data).map_err(|e| format!("planting: {e}"))?;
        f.len = data.len() as u64;
    }
    let labels: Vec<&str> = sources.iter().map(|(l, _)| l.as_str()).collect();
    Ok(Corpus {
        dir: dir.to_path_buf(),
        bytes: files.iter().map(|f| f.len).sum(),
        planted: PLANTED_FILES.min(n),
        files,
        literal,
        origin: format!(
            "text files (no NUL byte) of the Rust sources and docs installed here ({}), in {copies} \
             cop{}",
            labels.join(", "),
            if copies == 1 { "y" } else { "ies" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn walk_lists_files_in_path_order_without_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("b/c")).unwrap();
        fs::write(root.join("b/c/z.txt"), "z").unwrap();
        fs::write(root.join("a.txt"), "aa").unwrap();
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("link")).unwrap();

        let files = walk(root).unwrap();

        let paths: Vec<_> = files.iter().map(|f| (f.path.as_str(), f.len)).collect();
        assert_eq!(paths, [("a.txt", 2), ("b/c/z.txt", 1)]);
    }
}
