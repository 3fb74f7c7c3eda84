//! The synthetic workspaces of the snapshot and archive figures, built
//! straight on disk so that only the operation under test is timed.

use std::path::Path;

/// `count` files spread over directories of 100, each `size` bytes of
/// distinct, incompressible data (xorshift), as `d000/f00000.dat`.
pub fn incompressible(root: &Path, count: usize, size: usize) -> Result<(), String> {
    for i in 0..count {
        let path = root.join(incompressible_name(i));
        create_parent(&path)?;
        let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut data = Vec::with_capacity(size + 8);
        while data.len() < size {
            state = xorshift(state);
            data.extend_from_slice(&state.to_le_bytes());
        }
        data.truncate(size);
        write(&path, &data)?;
    }
    Ok(())
}

/// The name of file `i` of [`incompressible`].
pub fn incompressible_name(i: usize) -> String {
    format!("d{:03}/f{:05}.dat", i / 100, i)
}

/// `count` source-like text files of `total / count` bytes each, that
/// deflate about 3-4:1 like code, in 1,000 directories two levels deep.
pub fn source_like(root: &Path, count: usize, total: u64) -> Result<(), String> {
    let per = (total / count.max(1) as u64) as usize;
    for i in 0..count {
        let path = root
            .join(format!("d{:02}/s{:02}", i % 50, (i / 50) % 20))
            .join(format!("f{i}.rs"));
        create_parent(&path)?;
        write(&path, &source_text(i as u64, per))?;
    }
    Ok(())
}

fn source_text(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "fn",
        "let",
        "mut",
        "self",
        "impl",
        "pub",
        "struct",
        "return",
        "match",
        "Some",
        "None",
        "Ok(",
        "Err(",
        "=>",
        "{",
        "}",
        "(",
        ")",
        ";",
        "::",
        "&",
        "async",
        "await",
        "String",
        "Vec<u8>",
        "Result",
        "path",
        "bytes",
        "session",
        "workspace",
        "len",
        "0",
        "1",
        "64",
    ];
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x = xorshift(x);
        out.extend_from_slice(WORDS[(x % WORDS.len() as u64) as usize].as_bytes());
        out.push(if x.is_multiple_of(11) { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn create_parent(path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display())),
        None => Ok(()),
    }
}

fn write(path: &Path, data: &[u8]) -> Result<(), String> {
    std::fs::write(path, data).map_err(|e| format!("cannot write '{}': {e}", path.display()))
}

/// Bytes of every regular file under `dir` (apparent sizes).
pub fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => bytes_under(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Flushes dirty pages, so that one step's writeback does not slow the
/// next one down.
pub fn settle() {
    let _ = std::process::Command::new("sync").status();
}
