//! The mount's build figures: `cargo build` of a small generated crate
//! (no dependencies, so it builds offline), its build directory in the
//! same place as its sources, beside the same build on the local disk in
//! the same run:
//!
//! - a clean build (the build directory removed first): rustc's work plus
//!   every file a build writes (dependency info, fingerprints, the
//!   incremental cache, the binary);
//! - the rebuild after one source file changed: what an agent's edit,
//!   build, test loop waits for.
//!
//! Without `cargo` on `PATH` (the baseline's program, run in both places)
//! the figures are refused with a note saying why.

use crate::archive::timed;
use crate::report::{Row, Samples, Target};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Modules of the generated crate.
const MODULES: usize = 24;

/// The crate's directory under each place.
const CRATE_DIR: &str = "build-me";

/// `cargo`, or why it cannot be run.
fn cargo() -> Result<PathBuf, String> {
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let ran = Command::new(&cargo)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match ran {
        Ok(status) if status.success() => Ok(cargo),
        _ => Err(format!(
            "`{}` cannot be run: the build figures need cargo on PATH (it is \
             the baseline's program too)",
            cargo.display()
        )),
    }
}

/// The build rows, `runs` of each in `local` and in `remote` (the mount),
/// each place first in every other run.
pub fn rows(local: &Path, remote: &Path, runs: usize) -> Result<Vec<Row>, String> {
    let cargo = cargo()?;
    let places = [local.join(CRATE_DIR), remote.join(CRATE_DIR)];
    for krate in &places {
        generate(krate)?;
        // Untimed: the first build fills the kernel's and cargo's caches.
        clean(krate)?;
        build(&cargo, krate)?;
    }
    let (mut clean_build, mut rebuild): ([Samples; 2], [Samples; 2]) = Default::default();
    for run in 1..=runs {
        for which in [run % 2, (run + 1) % 2] {
            let krate = &places[which];
            clean(krate)?;
            clean_build[which].push(build(&cargo, krate)?);
            touch_one(krate, run)?;
            rebuild[which].push(build(&cargo, krate)?);
        }
    }
    let [clean_local, clean_mount] = clean_build;
    let [rebuild_local, rebuild_mount] = rebuild;
    for krate in &places {
        std::fs::remove_dir_all(krate)
            .map_err(|e| format!("cannot remove '{}': {e}", krate.display()))?;
    }
    let disk = "local disk";
    Ok(vec![
        Row::new(
            format!("mount: `cargo build` of a {MODULES}-module crate, clean, time"),
            "s",
            clean_mount,
        )
        .baseline(disk, clean_local)
        .target(Target::AtMostTimes(1.5)),
        Row::new(
            "mount: `cargo build` after one source file changed, time",
            "s",
            rebuild_mount,
        )
        .baseline(disk, rebuild_local)
        .target(Target::AtMostTimes(1.5)),
    ])
}

fn build(cargo: &Path, krate: &Path) -> Result<f64, String> {
    timed(
        Command::new(cargo)
            .args(["build", "--offline", "--quiet"])
            .current_dir(krate)
            .env("CARGO_TARGET_DIR", krate.join("target"))
            .env_remove("RUSTFLAGS")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("CARGO_BUILD_RUSTC_WRAPPER"),
    )
}

fn clean(krate: &Path) -> Result<(), String> {
    let target = krate.join("target");
    match std::fs::remove_dir_all(&target) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove '{}': {e}", target.display()))
        }
        _ => Ok(()),
    }
}

/// Rewrites one module with a new body (a different constant each run),
/// so the rebuild has real work.
fn touch_one(krate: &Path, run: usize) -> Result<(), String> {
    write(&krate.join("src/m0.rs"), &module(0, run))
}

fn generate(krate: &Path) -> Result<(), String> {
    let src = krate.join("src");
    std::fs::create_dir_all(&src).map_err(|e| format!("cannot create '{}': {e}", src.display()))?;
    write(
        &krate.join("Cargo.toml"),
        "[package]\nname = \"build-me\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [workspace]\n",
    )?;
    let mut main = String::new();
    for m in 0..MODULES {
        main.push_str(&format!("mod m{m};\n"));
        write(&src.join(format!("m{m}.rs")), &module(m, 0))?;
    }
    main.push_str("\nfn main() {\n    let mut total = 0u64;\n");
    for m in 0..MODULES {
        main.push_str(&format!("    total = total.wrapping_add(m{m}::run(7));\n"));
    }
    main.push_str("    println!(\"{total}\");\n}\n");
    write(&src.join("main.rs"), &main)
}

/// One module: a few types, trait impls and generic functions, enough for
/// rustc to spend real time on.
fn module(m: usize, salt: usize) -> String {
    format!(
        r#"use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Item{m} {{
    pub name: String,
    pub weight: u64,
    pub tags: Vec<String>,
}}

impl fmt::Display for Item{m} {{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{
        write!(f, "{{}} ({{}}): {{}}", self.name, self.weight, self.tags.join(","))
    }}
}}

pub trait Score {{
    fn score(&self) -> u64;
}}

impl Score for Item{m} {{
    fn score(&self) -> u64 {{
        self.weight * {salt} + self.tags.iter().map(|t| t.len() as u64).sum::<u64>()
    }}
}}

pub fn rank<T: Score + Clone>(items: &[T]) -> Vec<(u64, T)> {{
    let mut ranked: Vec<(u64, T)> = items.iter().map(|i| (i.score(), i.clone())).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0));
    ranked
}}

pub fn group<T: Score + fmt::Display>(items: &[T]) -> BTreeMap<u64, Vec<String>> {{
    let mut groups: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for item in items {{
        groups.entry(item.score() % 7).or_default().push(item.to_string());
    }}
    groups
}}

pub fn run(n: u64) -> u64 {{
    let items: Vec<Item{m}> = (0..n)
        .map(|i| Item{m} {{
            name: format!("item-{m}-{{i}}"),
            weight: i * {m} + {salt},
            tags: (0..i % 4).map(|t| format!("t{{t}}")).collect(),
        }})
        .collect();
    let ranked = rank(&items);
    let groups = group(&items);
    ranked.first().map_or(0, |r| r.0) + groups.len() as u64
}}
"#
    )
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write '{}': {e}", path.display()))
}
