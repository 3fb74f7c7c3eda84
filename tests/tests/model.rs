//! Model-based operation sequences: random runs of Write (OVERWRITE,
//! CREATE, APPEND, `if_version`), WriteBytes (non-UTF-8 content), Edit,
//! Mkdir, Delete, Move, Copy, Read, ReadBytes, Stat, Exists, List, Glob and Grep
//! over a tiny path alphabet, so that collisions, files in the way of
//! directories, moves into their own subtree and stale versions come up
//! often. Each operation goes to the memory backend, the directory backend
//! (and, in a smaller run, MEMORY and DIRECTORY sessions over gRPC) and to
//! [`Model`], a plain map from path to bytes written from the contract.
//! After every operation all of them must answer alike: the same value
//! (versions and times aside) or the same error code, reason and path.
//! Versions are held to the contract instead: a file's version grows when
//! the model says the path changed and stays put otherwise. At the end the
//! trees must be equal.
//!
//! `PROPTEST_CASES` sets the number of sequences (default: 256 in-process,
//! 32 over gRPC).

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::{BTreeMap, HashMap};
use tonic::Code;
use wsfs::{
    ByteRange, CanonicalPath, DeleteOptions, EditSpec, Error, FileKind, Filesystem, GlobQuery,
    GrepEvent, GrepQuery, LineRange, MkdirOptions, TransferOptions, WriteMode, WriteOptions,
    WriteOutcome,
};
use wsfs_tests::fixture::Fixture;
use wsfs_tests::harness;
// `p` names many a path variable here.
use wsfs_tests::kit::p as cp;

/// Directory segments of every path (and last segments, with `f`). `a.b`
/// sorts before `a/…` bytewise (`.` < `/`), so listings must order by path,
/// not by walking directory after directory.
const SEGMENTS: &[&str] = &["a", "a.b"];

/// Pieces of file contents and edit texts: lines, repeats (ambiguous
/// edits), a multi-byte character (byte ranges that split it).
const PIECES: &[&str] = &["x", "y", "\n", "xy", "é"];

const GLOBS: &[&str] = &[
    "*", "**", "**/*", "*/*", "a/*", "a/**", "**/a", "{a,a.b}", "[ab]", "*.b", "a*", "**/a.b",
    "*/a", "**/f", "[",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IfVersion {
    Unset,
    /// 0: the path must not exist.
    Zero,
    /// The version the backend reports right before the call.
    Current,
    /// A version the path does not have.
    Stale,
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        path: String,
        content: String,
        mode: WriteMode,
        create_parents: bool,
        if_version: IfVersion,
    },
    WriteBytes {
        path: String,
        data: Vec<u8>,
        if_version: IfVersion,
    },
    Edit {
        path: String,
        old: String,
        new: String,
        replace_all: bool,
        dry_run: bool,
        if_version: IfVersion,
    },
    Mkdir {
        path: String,
        parents: bool,
        exist_ok: bool,
    },
    Delete {
        path: String,
        recursive: bool,
        allow_missing: bool,
        if_version: IfVersion,
    },
    Move {
        src: String,
        dst: String,
        overwrite: bool,
        create_parents: bool,
        if_version: IfVersion,
    },
    Copy {
        src: String,
        dst: String,
        overwrite: bool,
        create_parents: bool,
    },
    Read {
        path: String,
        offset: u64,
        limit: Option<u64>,
    },
    ReadBytes {
        path: String,
        offset: u64,
        limit: Option<u64>,
        chunk: usize,
    },
    Stat {
        path: String,
    },
    Exists {
        path: String,
    },
    List {
        path: String,
        depth: u32,
    },
    Glob {
        pattern: &'static str,
        base: String,
        max: u64,
    },
    Grep {
        pattern: &'static str,
        base: String,
        glob: Option<&'static str>,
        case_insensitive: bool,
        fixed_string: bool,
        max: u64,
        context: u32,
    },
}

/// Grep patterns the model reads without a regex engine: literals, one
/// anchor, and a pattern that does not compile.
const GREP_PATTERNS: &[&str] = &["x", "y", "xy", "X", "é", "^x", "y$", "("];

// ---------------------------------------------------------------------------
// Strategies

/// Mostly shallow, so that operations keep meeting what earlier ones made.
/// `f` is only ever a last segment: writes under `a/` make `a` a directory
/// soon, while `f` stays a file more often than not.
fn path() -> impl Strategy<Value = String> {
    let dirs = |n| prop::collection::vec(prop::sample::select(SEGMENTS), n);
    let last = prop::sample::select(&["a", "a.b", "f", "f"][..]);
    prop_oneof![
        1 => Just(String::new()),
        15 => (prop_oneof![6 => dirs(0), 4 => dirs(1), 2 => dirs(2)], last).prop_map(|(mut d, l)| {
            d.push(l);
            d.join("/")
        }),
    ]
}

/// What Edit looks for: mostly one piece, which files often hold more than
/// once; sometimes text they do not hold, or nothing.
fn old_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(PIECES).prop_map(str::to_string),
        2 => text(),
        1 => Just("z".to_string()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..6).prop_map(|p| p.concat())
}

/// Bytes that are not always text: invalid UTF-8 (`NOT_TEXT`), NUL
/// (binary to Grep).
fn raw_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![b'x', b'\n', 0xff, 0]), 0..4)
}

fn if_version() -> impl Strategy<Value = IfVersion> {
    prop_oneof![
        6 => Just(IfVersion::Unset),
        1 => Just(IfVersion::Zero),
        2 => Just(IfVersion::Current),
        1 => Just(IfVersion::Stale),
    ]
}

fn write_mode() -> impl Strategy<Value = WriteMode> {
    prop_oneof![
        Just(WriteMode::Overwrite),
        Just(WriteMode::Create),
        Just(WriteMode::Append)
    ]
}

fn mostly(yes: bool) -> impl Strategy<Value = bool> {
    prop::bool::weighted(if yes { 0.8 } else { 0.2 })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (path(), text(), write_mode(), mostly(true), if_version()).prop_map(
            |(path, content, mode, create_parents, if_version)| Op::Write {
                path,
                content,
                mode,
                create_parents,
                if_version,
            }
        ),
        1 => (path(), raw_bytes(), if_version())
            .prop_map(|(path, data, if_version)| Op::WriteBytes { path, data, if_version }),
        3 => (
            path(),
            old_text(),
            text(),
            any::<bool>(),
            mostly(false),
            if_version()
        )
            .prop_map(|(path, old, new, replace_all, dry_run, if_version)| Op::Edit {
                path,
                old,
                new,
                replace_all,
                dry_run,
                if_version,
            }),
        2 => (path(), mostly(true), mostly(true)).prop_map(|(path, parents, exist_ok)| Op::Mkdir {
            path,
            parents,
            exist_ok
        }),
        3 => (path(), any::<bool>(), mostly(false), if_version()).prop_map(
            |(path, recursive, allow_missing, if_version)| Op::Delete {
                path,
                recursive,
                allow_missing,
                if_version,
            }
        ),
        3 => (path(), path(), any::<bool>(), mostly(true), if_version()).prop_map(
            |(src, dst, overwrite, create_parents, if_version)| Op::Move {
                src,
                dst,
                overwrite,
                create_parents,
                if_version,
            }
        ),
        3 => (path(), path(), any::<bool>(), mostly(true)).prop_map(
            |(src, dst, overwrite, create_parents)| Op::Copy {
                src,
                dst,
                overwrite,
                create_parents,
            }
        ),
        2 => (path(), 0..4u64, prop::option::of(0..4u64))
            .prop_map(|(path, offset, limit)| Op::Read { path, offset, limit }),
        2 => (path(), 0..10u64, prop::option::of(0..6u64), 0..4usize).prop_map(
            |(path, offset, limit, chunk)| Op::ReadBytes {
                path,
                offset,
                limit,
                chunk,
            }
        ),
        1 => path().prop_map(|path| Op::Stat { path }),
        1 => path().prop_map(|path| Op::Exists { path }),
        2 => (path(), 0..4u32).prop_map(|(path, depth)| Op::List { path, depth }),
        2 => (prop::sample::select(GLOBS), path(), prop_oneof![Just(0u64), 1..4u64])
            .prop_map(|(pattern, base, max)| Op::Glob { pattern, base, max }),
        2 => (
            prop::sample::select(GREP_PATTERNS),
            prop_oneof![Just(String::new()), path()],
            prop::option::weighted(0.3, prop::sample::select(GLOBS)),
            any::<(bool, bool)>(),
            prop_oneof![Just(0u64), 1..4u64],
            0..2u32,
        )
            .prop_map(
                |(pattern, base, glob, (case_insensitive, fixed_string), max, context)| Op::Grep {
                    pattern,
                    base,
                    glob,
                    case_insensitive,
                    fixed_string,
                    max,
                    context,
                }
            ),
    ]
}

/// A sequence: a few plain writes that populate the workspace, then any
/// operations.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let seed = (path(), text()).prop_map(|(path, content)| Op::Write {
        path,
        content,
        mode: WriteMode::Overwrite,
        create_parents: true,
        if_version: IfVersion::Unset,
    });
    (
        prop::collection::vec(seed, 2..8),
        prop::collection::vec(op(), 1..40),
    )
        .prop_map(|(mut seeds, ops)| {
            seeds.extend(ops);
            seeds
        })
}

// ---------------------------------------------------------------------------
// What a call answered, with versions and times left out.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Failed {
        code: Code,
        reason: String,
        path: Option<String>,
    },
    Wrote {
        path: String,
        bytes_written: u64,
        size: u64,
        created: bool,
    },
    Edited {
        replacements: u64,
        size: u64,
        dry_run: bool,
    },
    Count(u64),
    Made(bool),
    Page {
        content: String,
        total_lines: u64,
        offset: u64,
        lines: u64,
        truncated: bool,
        size: u64,
    },
    Bytes {
        size: u64,
        offset: u64,
        length: u64,
        data: Vec<u8>,
    },
    Meta {
        path: String,
        kind: FileKind,
        size: u64,
    },
    Kind(Option<FileKind>),
    Entries {
        entries: Vec<(String, FileKind, u64)>,
        truncated: bool,
    },
    Paths {
        paths: Vec<String>,
        truncated: bool,
    },
    Grep {
        matches: Vec<Found>,
        files_searched: u64,
        count: u64,
        truncated: bool,
    },
}

/// One grep match: path, line number, line, match range, context before
/// and after (line number and text).
type Found = (
    String,
    u64,
    String,
    (u32, u32),
    Vec<(u64, String)>,
    Vec<(u64, String)>,
);

fn failed(e: &Error) -> Seen {
    Seen::Failed {
        code: e.code(),
        reason: e.reason().to_string(),
        path: e.path().map(str::to_string),
    }
}

// ---------------------------------------------------------------------------
// The model

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir,
}

/// The contract's answer to a failed call: reason and the path it names.
struct Refusal(&'static str, Option<String>);

fn refuse(reason: &'static str, path: &str) -> Refusal {
    Refusal(reason, Some(path.to_string()))
}

fn invalid_argument() -> Refusal {
    Refusal("INVALID_ARGUMENT", None)
}

impl Refusal {
    fn seen(self) -> Seen {
        // The contract's table from reason to code.
        let code = match self.0 {
            "FILE_NOT_FOUND" => Code::NotFound,
            "ALREADY_EXISTS" => Code::AlreadyExists,
            "NOT_A_DIRECTORY"
            | "IS_A_DIRECTORY"
            | "DIRECTORY_NOT_EMPTY"
            | "NOT_TEXT"
            | "NO_MATCH"
            | "AMBIGUOUS_MATCH" => Code::FailedPrecondition,
            "VERSION_MISMATCH" => Code::Aborted,
            "INVALID_ARGUMENT" | "INVALID_PATTERN" => Code::InvalidArgument,
            "OUT_OF_RANGE" => Code::OutOfRange,
            other => panic!("the model has no code for {other}"),
        };
        Seen::Failed {
            code,
            reason: self.0.to_string(),
            path: self.1,
        }
    }
}

type Answer = Result<Seen, Refusal>;

/// The parent of a non-root path ("" for a top-level one).
fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

/// Proper ancestors of `path`, top-down, the root left out.
fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/').map(|(i, _)| &path[..i]).collect()
}

fn is_under(path: &str, ancestor: &str) -> bool {
    ancestor.is_empty()
        || path == ancestor
        || (path.starts_with(ancestor) && path.as_bytes()[ancestor.len()] == b'/')
}

/// Path order: bytewise on the whole path.
#[derive(Default)]
struct Model {
    /// The root is implied.
    nodes: BTreeMap<String, Node>,
    /// Paths added, replaced or removed by the current operation.
    touched: Vec<String>,
}

impl Model {
    /// What is at `path`; a file met on the way is `NOT_A_DIRECTORY`.
    fn lookup(&self, path: &str) -> Result<Option<Node>, Refusal> {
        if path.is_empty() {
            return Ok(Some(Node::Dir));
        }
        for a in ancestors(path) {
            match self.nodes.get(a) {
                Some(Node::File(_)) => return Err(refuse("NOT_A_DIRECTORY", a)),
                Some(Node::Dir) => {}
                None => return Ok(None),
            }
        }
        Ok(self.nodes.get(path).cloned())
    }

    /// The bytes of a file, as Read, ReadBytes and Edit open it.
    fn open(&self, path: &str) -> Result<Vec<u8>, Refusal> {
        match self.lookup(path)? {
            None => Err(refuse("FILE_NOT_FOUND", path)),
            Some(Node::Dir) => Err(refuse("IS_A_DIRECTORY", path)),
            Some(Node::File(data)) => Ok(data),
        }
    }

    fn check_version(
        &self,
        path: &str,
        exists: bool,
        if_version: IfVersion,
    ) -> Result<(), Refusal> {
        let ok = match if_version {
            IfVersion::Unset | IfVersion::Current => true,
            IfVersion::Zero => !exists,
            IfVersion::Stale => false,
        };
        if ok {
            Ok(())
        } else {
            Err(refuse("VERSION_MISMATCH", path))
        }
    }

    /// Makes the parent of `path` a directory, or says which is missing.
    fn ensure_parent(&mut self, path: &str, create: bool) -> Result<(), Refusal> {
        let parent = parent(path);
        match self.lookup(parent)? {
            Some(Node::Dir) => return Ok(()),
            Some(Node::File(_)) => return Err(refuse("NOT_A_DIRECTORY", parent)),
            None if !create => return Err(refuse("FILE_NOT_FOUND", parent)),
            None => {}
        }
        let mut dirs = ancestors(path);
        dirs.retain(|a| !self.nodes.contains_key(*a));
        for a in dirs {
            let a = a.to_string();
            self.insert(a, Node::Dir);
        }
        Ok(())
    }

    fn insert(&mut self, path: String, node: Node) {
        self.touched.push(path.clone());
        self.nodes.insert(path, node);
    }

    /// Keys strictly beneath `dir`, in order.
    fn below(&self, dir: &str) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|k| *k != dir && is_under(k, dir))
            .cloned()
            .collect()
    }

    /// Removes `path` (unless the root) and everything beneath it.
    fn remove_subtree(&mut self, path: &str) -> u64 {
        let mut keys = self.below(path);
        if !path.is_empty() && self.nodes.contains_key(path) {
            keys.push(path.to_string());
        }
        for k in &keys {
            self.nodes.remove(k);
        }
        let n = keys.len() as u64;
        self.touched.extend(keys);
        n
    }

    fn apply(&mut self, op: &Op) -> Answer {
        match op {
            Op::Write {
                path,
                content,
                mode,
                create_parents,
                if_version,
            } => self.write(
                path,
                content.as_bytes(),
                *mode,
                *create_parents,
                *if_version,
            ),
            Op::WriteBytes {
                path,
                data,
                if_version,
            } => self.write(path, data, WriteMode::Overwrite, true, *if_version),
            Op::Edit {
                path,
                old,
                new,
                replace_all,
                dry_run,
                if_version,
            } => {
                if old.is_empty() {
                    return Err(invalid_argument());
                }
                let data = self.open(path)?;
                let text = String::from_utf8(data).map_err(|_| refuse("NOT_TEXT", path))?;
                self.check_version(path, true, *if_version)?;
                let replacements = text.matches(old.as_str()).count() as u64;
                if replacements == 0 {
                    return Err(refuse("NO_MATCH", path));
                }
                if replacements > 1 && !replace_all {
                    return Err(refuse("AMBIGUOUS_MATCH", path));
                }
                let edited = text.replace(old.as_str(), new);
                let size = if *dry_run {
                    text.len()
                } else {
                    let size = edited.len();
                    self.insert(path.clone(), Node::File(edited.into_bytes()));
                    size
                };
                Ok(Seen::Edited {
                    replacements,
                    size: size as u64,
                    dry_run: *dry_run,
                })
            }
            Op::Mkdir {
                path,
                parents,
                exist_ok,
            } => {
                let created = match self.lookup(path)? {
                    Some(Node::Dir) => false,
                    Some(Node::File(_)) => return Err(refuse("ALREADY_EXISTS", path)),
                    None => {
                        self.ensure_parent(path, *parents)?;
                        self.insert(path.clone(), Node::Dir);
                        true
                    }
                };
                if !created && !exist_ok {
                    return Err(refuse("ALREADY_EXISTS", path));
                }
                Ok(Seen::Made(created))
            }
            Op::Delete {
                path,
                recursive,
                allow_missing,
                if_version,
            } => {
                // A path under a file is simply missing here.
                let current = match self.lookup(path) {
                    Err(Refusal("NOT_A_DIRECTORY", _)) => None,
                    other => other?,
                };
                self.check_version(path, current.is_some(), *if_version)?;
                match current {
                    None if *allow_missing => Ok(Seen::Count(0)),
                    None => Err(refuse("FILE_NOT_FOUND", path)),
                    Some(Node::Dir) if !recursive && !self.below(path).is_empty() => {
                        Err(refuse("DIRECTORY_NOT_EMPTY", path))
                    }
                    Some(_) => Ok(Seen::Count(self.remove_subtree(path))),
                }
            }
            Op::Move {
                src,
                dst,
                overwrite,
                create_parents,
                if_version,
            } => {
                if *if_version != IfVersion::Unset {
                    let current = self.lookup(src)?;
                    self.check_version(src, current.is_some(), *if_version)?;
                }
                self.transfer(src, dst, *overwrite, *create_parents, true)
            }
            Op::Copy {
                src,
                dst,
                overwrite,
                create_parents,
            } => self.transfer(src, dst, *overwrite, *create_parents, false),
            Op::Read {
                path,
                offset,
                limit,
            } => {
                let data = self.open(path)?;
                let text = String::from_utf8(data).map_err(|_| refuse("NOT_TEXT", path))?;
                let lines: Vec<&str> = text.split_inclusive('\n').collect();
                let total = lines.len() as u64;
                let start = (*offset).min(total);
                let end = limit.map_or(total, |l| (start + l).min(total));
                Ok(Seen::Page {
                    content: lines[start as usize..end as usize].concat(),
                    total_lines: total,
                    offset: start,
                    lines: end - start,
                    truncated: end < total,
                    size: text.len() as u64,
                })
            }
            Op::ReadBytes {
                path,
                offset,
                limit,
                ..
            } => {
                let data = self.open(path)?;
                let size = data.len() as u64;
                if *offset > size {
                    return Err(refuse("OUT_OF_RANGE", path));
                }
                let length = limit.map_or(size - offset, |l| l.min(size - offset));
                Ok(Seen::Bytes {
                    size,
                    offset: *offset,
                    length,
                    data: data[*offset as usize..(offset + length) as usize].to_vec(),
                })
            }
            Op::Stat { path } => match self.lookup(path)? {
                None => Err(refuse("FILE_NOT_FOUND", path)),
                Some(node) => Ok(meta_of(path, &node)),
            },
            Op::Exists { path } => match self.lookup(path) {
                Err(Refusal("NOT_A_DIRECTORY", _)) => Ok(Seen::Kind(None)),
                other => Ok(Seen::Kind(other?.map(|n| kind_of(&n)))),
            },
            Op::List { path, depth } => {
                match self.lookup(path)? {
                    None => return Err(refuse("FILE_NOT_FOUND", path)),
                    Some(Node::File(_)) => return Err(refuse("NOT_A_DIRECTORY", path)),
                    Some(Node::Dir) => {}
                }
                let base = if path.is_empty() {
                    0
                } else {
                    path.split('/').count()
                };
                let depth = (*depth).max(1) as usize;
                let entries = self
                    .below(path)
                    .into_iter()
                    .filter(|k| k.split('/').count() - base <= depth)
                    .map(|k| {
                        let node = &self.nodes[&k];
                        (k.clone(), kind_of(node), size_of(node))
                    })
                    .collect();
                Ok(Seen::Entries {
                    entries,
                    truncated: false,
                })
            }
            Op::Glob { pattern, base, max } => {
                if *pattern == "[" {
                    return Err(Refusal("INVALID_PATTERN", None));
                }
                let max = if *max == 0 {
                    GlobQuery::DEFAULT_MAX_RESULTS
                } else {
                    *max
                } as usize;
                let mut paths = self.files_matching(base, Some(pattern));
                let truncated = paths.len() > max;
                paths.truncate(max);
                Ok(Seen::Paths { paths, truncated })
            }
            Op::Grep {
                pattern,
                base,
                glob,
                case_insensitive,
                fixed_string,
                max,
                context,
            } => {
                if *pattern == "(" && !fixed_string || *glob == Some("[") {
                    return Err(Refusal("INVALID_PATTERN", None));
                }
                let max = if *max == 0 {
                    GrepQuery::DEFAULT_MAX_MATCHES
                } else {
                    *max
                };
                let (mut found, mut files_searched, mut truncated) = (Vec::new(), 0, false);
                'files: for path in self.files_matching(base, *glob) {
                    files_searched += 1;
                    let Some(Node::File(data)) = self.nodes.get(&path) else {
                        unreachable!("files_matching lists files");
                    };
                    if data.contains(&0) {
                        continue; // binary
                    }
                    let text = String::from_utf8_lossy(data);
                    let lines: Vec<&str> = text.lines().collect();
                    for (i, line) in lines.iter().enumerate() {
                        let Some(range) =
                            grep_line(pattern, line, *case_insensitive, *fixed_string)
                        else {
                            continue;
                        };
                        if found.len() as u64 == max {
                            truncated = true;
                            break 'files;
                        }
                        let near = |j: usize| ((j + 1) as u64, lines[j].to_string());
                        let ctx = *context as usize;
                        found.push((
                            path.clone(),
                            (i + 1) as u64,
                            line.to_string(),
                            range,
                            (i.saturating_sub(ctx)..i).map(near).collect(),
                            (i + 1..(i + 1 + ctx).min(lines.len())).map(near).collect(),
                        ));
                    }
                }
                Ok(Seen::Grep {
                    count: found.len() as u64,
                    matches: found,
                    files_searched,
                    truncated,
                })
            }
        }
    }

    /// Files beneath `base` (or `base` itself when a file), in path order,
    /// whose path relative to `base` matches `glob`. A file base is
    /// matched as the empty path.
    fn files_matching(&self, base: &str, glob: Option<&str>) -> Vec<String> {
        let files: Vec<String> = match self.lookup(base) {
            Ok(Some(Node::File(_))) => vec![base.to_string()],
            Ok(Some(Node::Dir)) => self
                .below(base)
                .into_iter()
                .filter(|k| matches!(self.nodes[k], Node::File(_)))
                .collect(),
            _ => Vec::new(),
        };
        files
            .into_iter()
            .filter(|f| {
                let rel = if f == base {
                    ""
                } else if base.is_empty() {
                    f.as_str()
                } else {
                    &f[base.len() + 1..]
                };
                glob.is_none_or(|g| glob_matches(g, rel))
            })
            .collect()
    }

    fn write(
        &mut self,
        path: &str,
        data: &[u8],
        mode: WriteMode,
        create_parents: bool,
        if_version: IfVersion,
    ) -> Answer {
        if path.is_empty() {
            return Err(invalid_argument());
        }
        let current = self.lookup(path)?;
        self.check_version(path, current.is_some(), if_version)?;
        let old = match current {
            Some(Node::Dir) => return Err(refuse("IS_A_DIRECTORY", path)),
            Some(Node::File(_)) if mode == WriteMode::Create => {
                return Err(refuse("ALREADY_EXISTS", path))
            }
            Some(Node::File(old)) => Some(old),
            None => None,
        };
        self.ensure_parent(path, create_parents)?;
        let mut content = match (&old, mode) {
            (Some(old), WriteMode::Append) => old.clone(),
            _ => Vec::new(),
        };
        content.extend_from_slice(data);
        let size = content.len() as u64;
        self.insert(path.to_string(), Node::File(content));
        Ok(Seen::Wrote {
            path: path.to_string(),
            bytes_written: data.len() as u64,
            size,
            created: old.is_none(),
        })
    }

    /// Move (`moving`) or Copy.
    fn transfer(
        &mut self,
        src: &str,
        dst: &str,
        overwrite: bool,
        create_parents: bool,
        moving: bool,
    ) -> Answer {
        let src_node = self.lookup(src)?;
        let dst_node = self.lookup(dst)?;
        let Some(src_node) = src_node else {
            return Err(refuse("FILE_NOT_FOUND", src));
        };
        if src.is_empty() || is_under(dst, src) {
            return Err(invalid_argument());
        }
        if dst.is_empty() {
            return Err(refuse("ALREADY_EXISTS", dst));
        }
        if is_under(src, dst) {
            return Err(invalid_argument());
        }
        if let Some(dst_node) = &dst_node {
            if !overwrite {
                return Err(refuse("ALREADY_EXISTS", dst));
            }
            match (&src_node, dst_node) {
                (Node::File(_), Node::Dir) => return Err(refuse("IS_A_DIRECTORY", dst)),
                (Node::Dir, Node::File(_)) => return Err(refuse("NOT_A_DIRECTORY", dst)),
                _ => {}
            }
        }
        self.ensure_parent(dst, create_parents)?;
        self.remove_subtree(dst);
        let mut moved = vec![(src.to_string(), src_node)];
        for k in self.below(src) {
            let node = self.nodes[&k].clone();
            moved.push((k, node));
        }
        if moving {
            self.remove_subtree(src);
        }
        let count = moved.len() as u64;
        for (k, node) in moved {
            let at = format!("{dst}{}", &k[src.len()..]);
            self.insert(at, node);
        }
        Ok(Seen::Count(count))
    }

    /// Every entry with its bytes (`None` for a directory), in path order.
    fn tree(&self) -> Vec<(String, Option<Vec<u8>>)> {
        self.nodes
            .iter()
            .map(|(k, n)| {
                let data = match n {
                    Node::File(d) => Some(d.clone()),
                    Node::Dir => None,
                };
                (k.clone(), data)
            })
            .collect()
    }
}

fn kind_of(node: &Node) -> FileKind {
    match node {
        Node::File(_) => FileKind::File,
        Node::Dir => FileKind::Directory,
    }
}

fn size_of(node: &Node) -> u64 {
    match node {
        Node::File(d) => d.len() as u64,
        Node::Dir => 0,
    }
}

fn meta_of(path: &str, node: &Node) -> Seen {
    Seen::Meta {
        path: path.to_string(),
        kind: kind_of(node),
        size: size_of(node),
    }
}

/// Where [`GREP_PATTERNS`] first match in `line`, if they do.
fn grep_line(
    pattern: &str,
    line: &str,
    case_insensitive: bool,
    fixed_string: bool,
) -> Option<(u32, u32)> {
    let fold = |s: &str| {
        if case_insensitive {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let (pattern, line) = (fold(pattern), fold(line));
    let span = |start: usize, len: usize| Some((start as u32, (start + len) as u32));
    if !fixed_string {
        if let Some(lit) = pattern.strip_prefix('^') {
            return line.starts_with(lit).then(|| span(0, lit.len())).flatten();
        }
        if let Some(lit) = pattern.strip_suffix('$') {
            return line
                .ends_with(lit)
                .then(|| span(line.len() - lit.len(), lit.len()))
                .flatten();
        }
    }
    line.find(&pattern).and_then(|at| span(at, pattern.len()))
}

/// The contract's globs on the patterns of [`GLOBS`]: `*` and `[ab]` stay
/// in one segment, a `**` segment spans any number of them (at least one
/// when it ends the pattern: `a/**` is what is under `a`, not `a`),
/// `{a,b}` is either.
fn glob_matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    segments_match(&pattern, &path)
}

fn segments_match(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => {
            let least = usize::from(rest.is_empty());
            (least..=path.len()).any(|skip| segments_match(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((seg, tail)) => segment_matches(first, seg) && segments_match(rest, tail),
            None => false,
        },
    }
}

fn segment_matches(pattern: &str, seg: &str) -> bool {
    if let Some(inner) = pattern.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
        return inner.split(',').any(|alt| segment_matches(alt, seg));
    }
    if let Some(inner) = pattern.strip_prefix('[').and_then(|p| p.strip_suffix(']')) {
        let mut chars = seg.chars();
        return matches!((chars.next(), chars.next()), (Some(c), None) if inner.contains(c));
    }
    match pattern.split_once('*') {
        None => pattern == seg,
        Some((head, tail)) => {
            seg.len() >= head.len() + tail.len() && seg.starts_with(head) && seg.ends_with(tail)
        }
    }
}

// ---------------------------------------------------------------------------
// Running an operation against a workspace

/// A write's answer, its version noted for the contract's version rule.
fn wrote(versions: &mut Vec<(String, u64)>, path: &str, w: WriteOutcome) -> Seen {
    versions.push((path.to_string(), w.version));
    Seen::Wrote {
        path: w.path.as_str().to_string(),
        bytes_written: w.bytes_written,
        size: w.size,
        created: w.created,
    }
}

/// Every byte a ReadBytes stream carries.
async fn drain(stream: wsfs::ByteStream) -> wsfs::Result<Vec<u8>> {
    let chunks: Vec<Bytes> = stream.chunks.try_collect().await?;
    Ok(chunks.concat())
}

/// Versions a workspace reported for files, held to the contract.
#[derive(Default)]
struct Versions {
    /// Last version seen per path, and whether the path changed since.
    seen: HashMap<String, (u64, bool)>,
}

impl Versions {
    fn changed(&mut self, paths: &[String]) {
        for p in paths {
            self.seen.entry(p.clone()).or_insert((0, true)).1 = true;
        }
    }

    fn observe(&mut self, path: &str, version: u64) -> Result<(), String> {
        match self.seen.get_mut(path) {
            None => {
                self.seen.insert(path.to_string(), (version, false));
            }
            Some((last, false)) if *last != version => {
                return Err(format!(
                    "version of '{path}' moved from {last} to {version} with no change to it"
                ))
            }
            Some((_, false)) => {}
            Some((last, changed @ true)) => {
                if version <= *last {
                    return Err(format!(
                        "'{path}' changed but its version went from {last} to {version}"
                    ));
                }
                *last = version;
                *changed = false;
            }
        }
        Ok(())
    }
}

/// One workspace under test and what the test knows of its versions.
struct Subject {
    name: &'static str,
    fs: Fixture,
    versions: Versions,
}

impl Subject {
    fn new(name: &'static str, fs: Fixture) -> Subject {
        Subject {
            name,
            fs,
            versions: Versions::default(),
        }
    }

    /// The concrete `if_version` for this workspace: its current version of
    /// `path` (0 when missing), or one it does not have.
    async fn resolve(
        fs: &dyn Filesystem,
        seen: &mut Versions,
        path: &str,
        if_version: IfVersion,
    ) -> Result<Option<u64>, String> {
        let current = match fs.stat(&cp(path)).await {
            Ok(m) => {
                if m.kind == FileKind::File {
                    seen.observe(path, m.version)?;
                }
                m.version
            }
            Err(_) => 0,
        };
        Ok(match if_version {
            IfVersion::Unset => None,
            IfVersion::Zero => Some(0),
            IfVersion::Current => Some(current),
            IfVersion::Stale => Some(current + 1_000_000),
        })
    }

    /// Runs `op`; returns the answer, the file versions it reported, and the
    /// edit diff (held equal between workspaces, not to the model).
    async fn run(&mut self, op: &Op) -> Result<(Seen, Vec<(String, u64)>, String), String> {
        let Subject {
            name,
            fs,
            versions: seen,
        } = self;
        let fs: &dyn Filesystem = &**fs;
        let mut versions = Vec::new();
        let mut diff = String::new();
        let answer = match op {
            Op::Write {
                path,
                content,
                mode,
                create_parents,
                if_version,
            } => {
                let if_version = Self::resolve(fs, seen, path, *if_version).await?;
                let options = WriteOptions {
                    mode: *mode,
                    create_parents: *create_parents,
                    if_version,
                    ..Default::default()
                };
                fs.write(&cp(path), content, options)
                    .await
                    .map(|w| wrote(&mut versions, path, w))
            }
            Op::WriteBytes {
                path,
                data,
                if_version,
            } => {
                let if_version = Self::resolve(fs, seen, path, *if_version).await?;
                let options = WriteOptions {
                    if_version,
                    ..WriteOptions::default()
                };
                let chunks = futures::stream::iter([Ok(Bytes::from(data.clone()))]).boxed();
                fs.write_bytes(&cp(path), options, chunks)
                    .await
                    .map(|w| wrote(&mut versions, path, w))
            }
            Op::Edit {
                path,
                old,
                new,
                replace_all,
                dry_run,
                if_version,
            } => {
                let if_version = Self::resolve(fs, seen, path, *if_version).await?;
                let spec = EditSpec {
                    old_text: old.clone(),
                    new_text: new.clone(),
                    replace_all: *replace_all,
                    if_version,
                    dry_run: *dry_run,
                };
                fs.edit(&cp(path), spec).await.map(|e| {
                    versions.push((path.clone(), e.version));
                    diff = e.diff;
                    Seen::Edited {
                        replacements: e.replacements,
                        size: e.size,
                        dry_run: e.dry_run,
                    }
                })
            }
            Op::Mkdir {
                path,
                parents,
                exist_ok,
            } => {
                let options = MkdirOptions {
                    parents: *parents,
                    exist_ok: *exist_ok,
                    ..Default::default()
                };
                fs.mkdir(&cp(path), options).await.map(Seen::Made)
            }
            Op::Delete {
                path,
                recursive,
                allow_missing,
                if_version,
            } => {
                let if_version = Self::resolve(fs, seen, path, *if_version).await?;
                let options = DeleteOptions {
                    recursive: *recursive,
                    allow_missing: *allow_missing,
                    if_version,
                };
                fs.delete(&cp(path), options).await.map(Seen::Count)
            }
            Op::Move {
                src,
                dst,
                overwrite,
                create_parents,
                if_version,
            } => {
                let if_version = Self::resolve(fs, seen, src, *if_version).await?;
                let options = TransferOptions {
                    overwrite: *overwrite,
                    create_parents: *create_parents,
                    if_version,
                };
                fs.rename(&cp(src), &cp(dst), options)
                    .await
                    .map(|done| Seen::Count(done.entries))
            }
            Op::Copy {
                src,
                dst,
                overwrite,
                create_parents,
            } => {
                let options = TransferOptions {
                    overwrite: *overwrite,
                    create_parents: *create_parents,
                    if_version: None,
                };
                fs.copy(&cp(src), &cp(dst), options)
                    .await
                    .map(|done| Seen::Count(done.entries))
            }
            Op::Read {
                path,
                offset,
                limit,
            } => {
                let range = LineRange {
                    offset: *offset,
                    limit: *limit,
                };
                fs.read(&cp(path), range).await.map(|page| {
                    versions.push((path.clone(), page.version));
                    Seen::Page {
                        content: page.content,
                        total_lines: page.total_lines,
                        offset: page.offset,
                        lines: page.lines,
                        truncated: page.truncated,
                        size: page.size,
                    }
                })
            }
            Op::ReadBytes {
                path,
                offset,
                limit,
                chunk,
            } => {
                let range = ByteRange {
                    offset: *offset,
                    limit: *limit,
                };
                match fs.read_bytes(&cp(path), range, *chunk).await {
                    Err(e) => Err(e),
                    Ok(stream) => {
                        versions.push((path.clone(), stream.version));
                        let (size, offset, length) = (stream.size, stream.offset, stream.length);
                        let data = drain(stream)
                            .await
                            .map_err(|e| format!("{name}: ReadBytes stream failed: {e}"))?;
                        Ok(Seen::Bytes {
                            size,
                            offset,
                            length,
                            data,
                        })
                    }
                }
            }
            Op::Stat { path } => fs.stat(&cp(path)).await.map(|m| {
                if m.kind == FileKind::File {
                    versions.push((path.clone(), m.version));
                }
                Seen::Meta {
                    path: m.path.as_str().to_string(),
                    kind: m.kind,
                    size: m.size,
                }
            }),
            Op::Exists { path } => fs.exists(&cp(path)).await.map(Seen::Kind),
            Op::List { path, depth } => fs.list(&cp(path), *depth).await.map(|listing| {
                let entries = listing
                    .entries
                    .into_iter()
                    .map(|m| {
                        if m.kind == FileKind::File {
                            versions.push((m.path.as_str().to_string(), m.version));
                        }
                        (m.path.as_str().to_string(), m.kind, m.size)
                    })
                    .collect();
                Seen::Entries {
                    entries,
                    truncated: listing.truncated,
                }
            }),
            Op::Glob { pattern, base, max } => {
                let query = GlobQuery {
                    pattern: pattern.to_string(),
                    base: cp(base),
                    max_results: *max,
                };
                fs.glob(query).await.map(|g| Seen::Paths {
                    paths: g.paths.iter().map(|p| p.as_str().to_string()).collect(),
                    truncated: g.truncated,
                })
            }
            Op::Grep {
                pattern,
                base,
                glob,
                case_insensitive,
                fixed_string,
                max,
                context,
            } => {
                let query = GrepQuery {
                    pattern: pattern.to_string(),
                    base: cp(base),
                    glob: glob.map(str::to_string),
                    case_insensitive: *case_insensitive,
                    fixed_string: *fixed_string,
                    max_matches: *max,
                    context_lines: *context,
                };
                match fs.grep(query).await {
                    Err(e) => Err(e),
                    Ok(events) => {
                        let events: Vec<GrepEvent> = events
                            .try_collect()
                            .await
                            .map_err(|e| format!("{name}: Grep stream failed: {e}"))?;
                        let mut matches = Vec::new();
                        let mut summary = None;
                        for event in events {
                            match event {
                                GrepEvent::Match(m) => {
                                    let lines = |c: Vec<wsfs::ContextLine>| {
                                        c.into_iter().map(|c| (c.line_number, c.line)).collect()
                                    };
                                    matches.push((
                                        m.path.as_str().to_string(),
                                        m.line_number,
                                        m.line,
                                        (m.match_start, m.match_end),
                                        lines(m.before),
                                        lines(m.after),
                                    ))
                                }
                                GrepEvent::Summary(s) if summary.is_none() => summary = Some(s),
                                GrepEvent::Summary(_) => {
                                    return Err(format!("{name}: Grep sent two summaries"))
                                }
                            }
                        }
                        let s = summary.ok_or(format!("{name}: Grep ended without a summary"))?;
                        Ok(Seen::Grep {
                            matches,
                            files_searched: s.files_searched,
                            count: s.matches,
                            truncated: s.truncated,
                        })
                    }
                }
            }
        };
        Ok((answer.unwrap_or_else(|e| failed(&e)), versions, diff))
    }

    /// Every entry with its bytes (`None` for a directory), in path order.
    async fn tree(&self) -> Result<Vec<(String, Option<Vec<u8>>)>, String> {
        let listing = self
            .fs
            .list(&CanonicalPath::root(), u32::MAX)
            .await
            .map_err(|e| format!("{}: listing the tree: {e}", self.name))?;
        let mut out = Vec::new();
        for m in listing.entries {
            let data = match m.kind {
                FileKind::Directory => None,
                _ => {
                    let stream = self
                        .fs
                        .read_bytes(&m.path, ByteRange::default(), 0)
                        .await
                        .map_err(|e| format!("{}: reading {}: {e}", self.name, m.path))?;
                    let data = drain(stream)
                        .await
                        .map_err(|e| format!("{}: reading {}: {e}", self.name, m.path))?;
                    Some(data)
                }
            };
            out.push((m.path.as_str().to_string(), data));
        }
        Ok(out)
    }
}

/// Applies `ops` to the model and every subject; the first disagreement is
/// the error.
async fn agree(ops: &[Op], mut subjects: Vec<Subject>) -> Result<(), String> {
    let mut model = Model::default();
    for (i, op) in ops.iter().enumerate() {
        let history = || format!("after ops[..{i}] = {:#?}", &ops[..i]);
        model.touched.clear();
        let expected = model.apply(op).unwrap_or_else(Refusal::seen);
        let mut first_diff: Option<(&str, String)> = None;
        for s in &mut subjects {
            let (seen, versions, diff) = s.run(op).await?;
            if seen != expected {
                return Err(format!(
                    "op {i} {op:?}\n  model: {expected:?}\n  {}: {seen:?}\n{}",
                    s.name,
                    history()
                ));
            }
            s.versions.changed(&model.touched);
            for (path, version) in versions {
                s.versions
                    .observe(&path, version)
                    .map_err(|e| format!("op {i} {op:?}\n  {}: {e}\n{}", s.name, history()))?;
            }
            match &first_diff {
                None => first_diff = Some((s.name, diff)),
                Some((name, d)) if *d != diff => {
                    return Err(format!(
                        "op {i} {op:?}: edit diffs differ\n  {name}: {d:?}\n  {}: {diff:?}",
                        s.name
                    ))
                }
                Some(_) => {}
            }
        }
    }
    let expected = model.tree();
    for s in &subjects {
        let tree = s.tree().await?;
        if tree != expected {
            return Err(format!(
                "final trees differ\n  model: {expected:?}\n  {}: {tree:?}\n after {ops:#?}",
                s.name
            ));
        }
    }
    Ok(())
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: wsfs_tests::kit::env("PROPTEST_CASES", default_cases),
        // Failures print their shrunk sequence; nothing is written into the
        // source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs [`agree`] on a fresh runtime over the subjects `subjects` makes.
fn agree_on_a_runtime(
    ops: &[Op],
    subjects: impl std::future::Future<Output = Vec<Subject>>,
) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(async { agree(ops, subjects.await).await })
        .map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn memory_and_directory_backends_agree_with_the_model(
        ops in ops()
    ) {
        agree_on_a_runtime(&ops, async {
            vec![
                Subject::new("memory", harness::memory().await),
                Subject::new("directory", harness::directory().await),
            ]
        })?;
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn memory_and_directory_sessions_over_grpc_agree_with_the_model(
        ops in ops()
    ) {
        agree_on_a_runtime(&ops, async {
            vec![
                Subject::new("grpc memory", harness::grpc_memory().await),
                Subject::new("grpc directory", harness::grpc_directory().await),
            ]
        })?;
    }
}

/// The model itself, on cases worked out by hand from the contract: a test
/// of the test, so that agreement above means agreement with the contract.
#[test]
fn the_model_follows_the_contract_on_known_cases() {
    let mut m = Model::default();
    let write = |path: &str, content: &str, mode| Op::Write {
        path: path.into(),
        content: content.into(),
        mode,
        create_parents: true,
        if_version: IfVersion::Unset,
    };
    assert!(matches!(
        m.apply(&write("a/b", "x\ny\n", WriteMode::Overwrite)),
        Ok(Seen::Wrote { created: true, .. })
    ));
    assert_eq!(
        m.apply(&write("a", "", WriteMode::Overwrite))
            .unwrap_err()
            .seen(),
        refuse("IS_A_DIRECTORY", "a").seen()
    );
    assert_eq!(
        m.apply(&write("a/b/c", "", WriteMode::Overwrite))
            .unwrap_err()
            .0,
        "NOT_A_DIRECTORY"
    );
    let read = m
        .apply(&Op::Read {
            path: "a/b".into(),
            offset: 1,
            limit: Some(5),
        })
        .ok()
        .unwrap();
    assert_eq!(
        read,
        Seen::Page {
            content: "y\n".into(),
            total_lines: 2,
            offset: 1,
            lines: 1,
            truncated: false,
            size: 4
        }
    );
    let moved = m.apply(&Op::Move {
        src: "a".into(),
        dst: "a/c".into(),
        overwrite: false,
        create_parents: true,
        if_version: IfVersion::Unset,
    });
    assert_eq!(moved.unwrap_err().0, "INVALID_ARGUMENT");
    assert!(glob_matches("**/b", "b") && glob_matches("**/b", "a/b"));
    assert!(!glob_matches("a/**", "a") && glob_matches("a/**", "a/b/c"));
    assert!(glob_matches("*.b", "a.b") && !glob_matches("*", "a/b"));
    assert!(glob_matches("{a,b}", "b") && glob_matches("[ab]", "a") && !glob_matches("[ab]", "ab"));
}
