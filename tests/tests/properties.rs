//! Hostile input to the path canonicaliser, as a property test: thousands
//! of random paths built from the pieces that break parsers (`.`, `..`,
//! empty and repeated slashes, NUL, multi-byte characters, long segments).
//! A fixed-seed generator keeps every run identical and fast; no case may
//! panic, and every answer must agree with a simple model.

use wsfs::{CanonicalPath, Error, PathLimits};

/// xorshift64*: a fixed-seed generator, so a failure reproduces exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "a", "b", "src", ".", "..", "", "/", "//", "\0", "é", "日本", "...", ".a", "a.", " ", "\\",
];

fn random_path(rng: &mut Rng) -> String {
    let mut raw = String::new();
    if rng.below(3) == 0 {
        raw.push('/');
    }
    for i in 0..rng.below(24) {
        if i > 0 {
            raw.push('/');
        }
        let piece = PIECES[rng.below(PIECES.len())];
        // Now and then a segment longer than the limit.
        if rng.below(50) == 0 {
            raw.push_str(&piece.repeat(100));
        } else {
            raw.push_str(piece);
        }
    }
    raw
}

/// What the contract says, written as plainly as possible: walk the
/// segments with a stack; `..` below the root escapes; then the limits.
enum Expected {
    Path(String),
    Escapes,
    Invalid,
}

fn model(raw: &str, limits: &PathLimits) -> Expected {
    if raw.len() > wsfs::path::MAX_PATH_BYTES || raw.contains('\0') {
        return Expected::Invalid;
    }
    let mut stack: Vec<&str> = Vec::new();
    for seg in raw.split('/') {
        if seg == ".." {
            if stack.pop().is_none() {
                return Expected::Escapes;
            }
        } else if !seg.is_empty() && seg != "." {
            stack.push(seg);
        }
    }
    if stack.len() > limits.max_depth
        || stack
            .iter()
            .any(|s| s.chars().count() > limits.max_segment_chars)
        || stack
            .iter()
            .any(|s| s.len() > wsfs::path::MAX_SEGMENT_BYTES)
    {
        return Expected::Invalid;
    }
    Expected::Path(stack.join("/"))
}

#[test]
fn canonical_paths_match_the_model_never_escape_and_are_idempotent() {
    let limits = PathLimits::default();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..20_000 {
        let raw = random_path(&mut rng);
        let parsed = std::panic::catch_unwind(|| CanonicalPath::parse(&raw, &limits))
            .unwrap_or_else(|_| panic!("parse panicked on {raw:?}"));
        match (model(&raw, &limits), parsed) {
            (Expected::Path(want), Ok(got)) => {
                let s = got.as_str();
                assert_eq!(s, want, "{raw:?}");
                assert!(!s.starts_with('/') && !s.ends_with('/'), "{raw:?} -> {s:?}");
                assert!(
                    s.is_empty() || s.split('/').all(|g| !g.is_empty() && g != "." && g != ".."),
                    "{raw:?} -> {s:?} is not canonical"
                );
                let again = CanonicalPath::parse(s, &limits).expect("a canonical path parses");
                assert_eq!(again.as_str(), s, "not idempotent on {raw:?}");
            }
            (Expected::Escapes, Err(Error::PathEscapesRoot { .. })) => {}
            (Expected::Invalid, Err(Error::InvalidPath { .. })) => {}
            (_, got) => panic!("{raw:?}: the parser said {got:?}, the model disagrees"),
        }
    }
}
