//! The shape ARCHITECTURE.md promises, read from the server's source: its
//! top-level modules depend on each other one way (no import cycle), and
//! no source file outside the tests is over 1,000 lines.
//!
//! A module's dependencies are the `crate::<module>` paths its files name,
//! test code left out: files declared under `#[cfg(test)]` and each file's
//! trailing `#[cfg(test)] mod tests { ... }`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest non-test source file the project accepts.
const MAX_LINES: usize = 1000;

fn server_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Files declared `#[cfg(test)] mod NAME;`: test code, wherever they are.
fn test_only_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut tests = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.file_stem().unwrap().to_str().unwrap();
        // A file's child modules live beside it (mod.rs, lib.rs) or in
        // the folder of its own name.
        let base = match name {
            "mod" | "lib" | "main" => file.parent().unwrap().to_path_buf(),
            _ => file.with_extension(""),
        };
        let mut lines = text.lines().map(str::trim).peekable();
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.peek() else { break };
            let decl = next
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(module) = decl.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                tests.insert(base.join(format!("{module}.rs")));
                tests.insert(base.join(module).join("mod.rs"));
            }
        }
    }
    tests
}

/// `text` without its trailing unit tests and its comments.
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::NAME` that `code` names.
fn named_modules(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // Not the tail of another path (`wsfs_crate::`, `$crate::`).
            !code[..*at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, m)| {
            code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

struct Source {
    /// Module -> the modules it names, with one file that names each.
    graph: BTreeMap<String, BTreeMap<String, PathBuf>>,
    /// Non-test files and their line counts.
    lengths: Vec<(PathBuf, usize)>,
}

fn read_server() -> Source {
    let root = server_src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let tests = test_only_files(&files);
    let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    let mut lengths = Vec::new();
    for file in files.iter().filter(|f| !tests.contains(*f)) {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(&root).unwrap().to_path_buf();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        let code = code_of(&text);
        lengths.push((rel.clone(), code.lines().count()));
        if top == "lib" || top == "main" || top == "bin" {
            continue;
        }
        let named = graph.entry(top.clone()).or_default();
        for module in named_modules(&code) {
            if module != top {
                named.entry(module).or_insert_with(|| rel.clone());
            }
        }
    }
    Source { graph, lengths }
}

/// The strongly connected groups of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, PathBuf>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        groups: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|m| m.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.groups
}

#[test]
fn server_modules_depend_on_each_other_one_way() {
    let source = read_server();
    assert!(
        source.graph.len() > 20,
        "the server's modules were not found: {:?}",
        source.graph.keys()
    );
    // The graph is read, not empty: the registry names the object store.
    assert!(source.graph["registry"].contains_key("objstore"));
    let groups = cycles(&source.graph);
    let explained: Vec<String> = groups
        .iter()
        .map(|group| {
            let mut edges = Vec::new();
            for a in group {
                for (b, file) in &source.graph[a] {
                    if group.contains(b) {
                        edges.push(format!("{a} -> {b} ({})", file.display()));
                    }
                }
            }
            format!("{group:?}: {}", edges.join(", "))
        })
        .collect();
    assert!(
        groups.is_empty(),
        "import cycles among server modules:\n{}",
        explained.join("\n")
    );
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(a.into())
            .or_default()
            .insert(b.into(), PathBuf::from(format!("{a}.rs")));
    }
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        named_modules("use crate::a::X; $crate::b; wsfs_crate::c; crate::d_2::y"),
        ["a", "d_2"].map(String::from).into()
    );
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let long: Vec<String> = read_server()
        .lengths
        .into_iter()
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(file, lines)| format!("{} ({lines} lines)", file.display()))
        .collect();
    assert!(
        long.is_empty(),
        "server files over {MAX_LINES} lines: {long:?}"
    );
}

/// The server's top-level modules other crates reach by path (the binary,
/// the tests, the benchmarks), and why; every other module is
/// `pub(crate)`, its public items re-exported in lib.rs where needed.
const PUBLIC_MODULES: &[(&str, &str)] = &[
    (
        "archive",
        "the archive fuzz test checks import plans directly",
    ),
    ("backend", "tests drive workspaces over the Backend trait"),
    ("config", "the binary and the tests build a ServerConfig"),
    (
        "connections",
        "the binary binds its listener and raises its file limit",
    ),
    ("container", "the test harness builds a container runtime"),
    ("directory", "tests make DIRECTORY backends in-process"),
    ("durability", "benchmarks and tests pick a durability mode"),
    ("faults", "reliability tests inject panics"),
    (
        "http",
        "tests and benchmarks address the HTTP face's sessions",
    ),
    ("memory", "tests make MEMORY backends in-process"),
    ("metrics", "tests read the server's counters"),
    ("objstore", "the object-store benchmark runs a sweep"),
    (
        "stdio",
        "the stdio binary serves a directory over stdin and stdout",
    ),
    ("workspace", "tests wrap backends in a Workspace"),
];

/// The top-level modules lib.rs declares `pub`.
fn public_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_top_level_module_is_public_only_with_a_reason() {
    let lib = std::fs::read_to_string(server_src().join("lib.rs")).unwrap();
    let allowed: BTreeSet<String> = PUBLIC_MODULES.iter().map(|(m, _)| m.to_string()).collect();
    let public = public_modules(&lib);
    let unlisted: Vec<_> = public.difference(&allowed).collect();
    assert!(
        unlisted.is_empty(),
        "top-level modules declared `pub` without a reason in PUBLIC_MODULES \
         (make them `pub(crate)`, or re-export what other crates need): {unlisted:?}"
    );
}

#[test]
fn a_public_module_off_the_list_is_found() {
    let lib = "pub mod workspace;\npub(crate) mod search;\npub mod secret;\n";
    assert_eq!(
        public_modules(lib),
        ["secret", "workspace"].map(String::from).into()
    );
}
