//! Every code block of README.md and docs/*.md is run or compiled by a
//! test, or says in its info string why not (```` ```sh no-run: needs
//! Docker ````); a block that is neither fails
//! `every_block_is_run_or_says_why_not`, so an untested block cannot land.
//!
//! - `sh`: run here by `bash -euo pipefail`, as written, in an empty
//!   directory, against a real server (the `wsfs` binary on PATH,
//!   `WSFS_SERVER` and a fresh `WSFS_SESSION` set, and the docs' address
//!   `127.0.0.1:50051` replaced by the server's). A block that calls a
//!   program this machine lacks (grpcurl, jq, unzip) says "skipping",
//!   unless `WSFS_REQUIRE_TOOLS=1`.
//! - `rust`: compiled as doc tests of `wsfs-client` (its `lib.rs` includes
//!   each page that has one; this test checks that it does).
//! - `python`: run by `clients/python/tests/test_docs.py` against the real
//!   server.
//! - `json`: parsed here.
//!
//! The binaries are the ones cargo built beside this test: `cargo test
//! --workspace` builds them; alone, `cargo build -p wsfs-client --bins`
//! first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wsfs_tests::cluster::binary;
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::system_tool;

/// The address the docs write; the tests' server is elsewhere.
const DOCS_ADDRESS: &str = "127.0.0.1:50051";

/// How long one shell block may run (it ends at once when done).
const BLOCK_DEADLINE: Duration = Duration::from_secs(120);

/// The Python test that runs every `python` block.
const PYTHON_RUNNER: &str = "clients/python/tests/test_docs.py";

/// Programs a shell block may call beyond bash, coreutils and `wsfs`.
const TOOLS: &[&str] = &["grpcurl", "jq", "unzip"];

/// The words of an info string that make rustdoc compile a block as Rust:
/// a block of another language must not carry them.
const RUSTDOC_WORDS: &[&str] = &[
    "rust",
    "ignore",
    "should_panic",
    "no_run",
    "compile_fail",
    "test_harness",
    "standalone_crate",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// One fenced block: where it is, the heading it sits under, its info
/// string and its text (without the list indentation it sits in).
#[derive(Debug, Clone)]
struct Block {
    file: String,
    line: usize,
    heading: String,
    info: String,
    code: String,
}

impl Block {
    fn lang(&self) -> &str {
        self.info
            .split(|c: char| c == ',' || c.is_whitespace())
            .next()
            .unwrap_or_default()
    }

    /// The reason after `no-run:`, if the block has one.
    fn not_run(&self) -> Option<&str> {
        self.info.split_once("no-run:").map(|(_, why)| why.trim())
    }

    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// README.md and docs/*.md, as paths relative to the repository.
fn pages() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry of docs/").file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    std::iter::once("README.md".to_string())
        .chain(docs)
        .collect()
}

fn blocks() -> Vec<Block> {
    pages().iter().flat_map(|page| blocks_of(page)).collect()
}

/// The fenced blocks of one page: a fence is three or more backticks at
/// the start of a line (after the indentation of a list item), closed by
/// the same backticks alone on a line.
fn blocks_of(page: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(page)).expect("a page");
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut heading = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let ticks = trimmed.len() - trimmed.trim_start_matches('`').len();
        if ticks < 3 {
            if line.starts_with('#') {
                heading = line.trim_start_matches('#').trim().to_string();
            }
            i += 1;
            continue;
        }
        let indent = line.len() - trimmed.len();
        let fence = &trimmed[..ticks];
        let mut code = String::new();
        let mut j = i + 1;
        while j < lines.len() && lines[j].trim() != fence {
            let body = lines[j];
            let strip = body.len() - body.trim_start().len();
            code.push_str(&body[strip.min(indent)..]);
            code.push('\n');
            j += 1;
        }
        assert!(j < lines.len(), "{page}:{}: a block is never closed", i + 1);
        found.push(Block {
            file: page.to_string(),
            line: i + 1,
            heading: heading.clone(),
            info: trimmed[ticks..].trim().to_string(),
            code,
        });
        i = j + 1;
    }
    found
}

/// How a block is checked, or why it cannot be.
#[derive(Debug, PartialEq)]
enum Check {
    NotRun,
    Shell,
    DocTest,
    Python,
    Json,
}

fn check_of(block: &Block, doctested: &str) -> Result<Check, String> {
    if let Some(why) = block.not_run() {
        if why.is_empty() {
            return Err("says `no-run:` but not why".into());
        }
        let words: Vec<&str> = block
            .info
            .split(|c: char| c == ',' || c.is_whitespace())
            .collect();
        if let Some(word) = words.iter().find(|w| RUSTDOC_WORDS.contains(w)) {
            return Err(format!(
                "its info string has `{word}`, which makes rustdoc compile it as Rust"
            ));
        }
        return Ok(Check::NotRun);
    }
    match block.lang() {
        "sh" | "bash" => Ok(Check::Shell),
        "rust" if block.info.contains("ignore") => {
            Err("a Rust block that is not compiled (`ignore`)".into())
        }
        "rust" if !doctested.contains(&format!("include_str!(\"../../{}\")", block.file)) => {
            Err(format!(
                "its page is not compiled as doc tests: add it to the list in client/src/lib.rs ({})",
                block.file
            ))
        }
        "rust" => Ok(Check::DocTest),
        "python" if !repo().join(PYTHON_RUNNER).is_file() => {
            Err(format!("{PYTHON_RUNNER}, which runs the Python blocks, is missing"))
        }
        "python" => Ok(Check::Python),
        "json" => Ok(Check::Json),
        "" => Err("has no language (rustdoc would compile it as Rust)".into()),
        other => Err(format!("`{other}` is not run by any test")),
    }
}

#[test]
fn every_block_is_run_or_says_why_not() {
    let doctested = std::fs::read_to_string(repo().join("client/src/lib.rs")).unwrap();
    let blocks = blocks();
    assert!(
        blocks.len() > 20,
        "the pages' blocks were found: {blocks:#?}"
    );
    let mut problems = Vec::new();
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    for block in &blocks {
        match check_of(block, &doctested) {
            Ok(check) => {
                if check == Check::Json {
                    if let Err(e) = serde_json::from_str::<serde_json::Value>(&block.code) {
                        problems.push(format!("{}: not JSON: {e}", block.at()));
                    }
                }
                *tally.entry(format!("{check:?}")).or_default() += 1;
            }
            Err(why) => problems.push(format!(
                "{} (```{}): {why}; run it in a test, or mark it ```{} no-run: WHY",
                block.at(),
                block.info,
                match block.lang() {
                    "" => "text",
                    lang => lang,
                }
            )),
        }
    }
    eprintln!("blocks by check: {tally:?}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What a shell block printed, beyond running cleanly.
struct Ran {
    stdout: String,
    stderr: String,
    /// The directory it ran in, kept until the expectations are checked.
    dir: tempfile::TempDir,
}

type Expectation = fn(&Ran);

/// What some blocks must print, by page and heading.
const EXPECTED: &[(&str, &str, Expectation)] = &[
    ("README.md", "From the command line", |ran| {
        assert!(ran.stdout.contains("println!(\"hi\")"), "{}", ran.stdout);
    }),
    ("README.md", "With grpcurl", |ran| {
        assert!(ran.stdout.contains("fn main() {}"), "{}", ran.stdout);
        let both = format!("{}{}", ran.stdout, ran.stderr);
        assert!(both.contains("PATH_ESCAPES_ROOT"), "{both}");
    }),
    ("docs/CLI.md", "The `wsfs` command line", the_tour),
    ("docs/CLI.md", "Modes", |ran| {
        assert!(
            ran.stdout.contains("rwxr-xr-x scripts/build.sh"),
            "{}",
            ran.stdout
        );
    }),
    ("docs/CLI.md", "push and pull", |ran| {
        let runs: Vec<serde_json::Value> = ran
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect();
        assert_eq!(runs.len(), 2, "{}", ran.stdout);
        assert_eq!(runs[0]["transferred"], 1, "{}", ran.stdout);
        assert_eq!(runs[1]["transferred"], 0, "{}", ran.stdout);
        assert_eq!(runs[1]["unchanged"], 1, "{}", ran.stdout);
    }),
    ("docs/API.md", "Archives and host mounts", |ran| {
        assert!(ran.stdout.contains("files/notes/todo.md"), "{}", ran.stdout);
        assert!(ran.stdout.contains("manifest.json"), "{}", ran.stdout);
    }),
    (
        "docs/API.md",
        "Change streams and swarm coordination",
        |ran| {
            assert!(ran.stdout.contains("READY"), "{}", ran.stdout);
            assert!(ran.stdout.contains("CREATED"), "{}", ran.stdout);
            assert!(ran.stdout.contains("shared/tasks/a.md"), "{}", ran.stdout);
        },
    ),
];

/// The CLI tour: every step did what its comment says.
fn the_tour(ran: &Ran) {
    let out = &ran.stdout;
    assert!(out.contains("- ship it\n- tell people\n"), "{out}");
    assert!(out.contains("101\n"), "the page of big.log: {out}");
    assert!(out.contains("println!"), "the edit's diff: {out}");
    let local = std::fs::read(ran.dir.path().join("model.bin")).unwrap();
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&local);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert!(out.contains(&hex), "get returned other bytes than put sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shell_blocks_run_against_a_real_server() {
    let shell: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.not_run().is_none() && matches!(b.lang(), "sh" | "bash"))
        .collect();
    for (file, heading, _) in EXPECTED {
        assert!(
            shell
                .iter()
                .any(|b| b.file == *file && b.heading == *heading),
            "no shell block under {file}, {heading:?}: update EXPECTED"
        );
    }
    let server = TestServer::start().await;
    let client = wsfs_client::Client::connect(&server.url())
        .await
        .expect("connect");
    let wsfs = binary("wsfs");
    let mut ran = 0;
    for block in shell {
        let needs: Vec<&str> = TOOLS
            .iter()
            .copied()
            .filter(|tool| mentions(&block.code, tool))
            .collect();
        if needs.iter().any(|tool| system_tool(tool).is_none()) {
            eprintln!("skipping {}: it needs {needs:?}", block.at());
            continue;
        }
        let (_, info) = client
            .create(wsfs_client::SessionOptions::memory())
            .await
            .expect("a session for the block");
        let (block, url, wsfs) = (block.clone(), server.url(), wsfs.clone());
        let addr = server.addr().to_string();
        let result = tokio::task::spawn_blocking(move || {
            let ran = run_shell(&block, &wsfs, &url, &addr, &info.id);
            (block, ran)
        })
        .await
        .expect("the block's thread");
        let (block, ran_block) = result;
        for (file, heading, expect) in EXPECTED {
            if block.file == *file && block.heading == *heading {
                expect(&ran_block);
            }
        }
        ran += 1;
    }
    eprintln!("{ran} shell blocks ran");
}

/// Whether `code` calls `tool` (as a word, not inside another).
fn mentions(code: &str, tool: &str) -> bool {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .any(|word| word == tool)
}

/// Runs `block` with bash in an empty directory and returns what it
/// printed; a block that fails or outlives [`BLOCK_DEADLINE`] fails the
/// test with its output.
fn run_shell(block: &Block, wsfs: &Path, url: &str, addr: &str, session: &str) -> Ran {
    let dir = tempfile::tempdir().expect("a directory for the block");
    let path = format!(
        "{}:{}",
        wsfs.parent().expect("the binaries' directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (out, err) = (dir.path().join(".stdout"), dir.path().join(".stderr"));
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c"])
        .arg(block.code.replace(DOCS_ADDRESS, addr))
        .current_dir(dir.path())
        .env("PATH", path)
        .env("WSFS_SERVER", url)
        .env("WSFS_SESSION", session)
        .env("WSFS_CONFIG", dir.path().join(".wsfs-context.json"))
        .env_remove("WSFS_TOKEN")
        .env_remove("WSFS_CA")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("bash runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for bash") {
            break status;
        }
        if started.elapsed() > BLOCK_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} ran for more than {BLOCK_DEADLINE:?}", block.at());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let ran = Ran {
        stdout: read(&out),
        stderr: read(&err),
        dir,
    };
    assert!(
        status.success(),
        "{} failed ({status}):\n{}\n--- stderr:\n{}\n--- stdout:\n{}",
        block.at(),
        block.code,
        ran.stderr,
        ran.stdout
    );
    ran
}
