//! The `wsfs` binary, run as a person or a script runs it, against a real
//! server started in this process. Each test makes its own session.

use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

#[path = "cli/habits.rs"]
mod habits;
#[path = "cli/mcp.rs"]
mod mcp;

/// One server for the whole test binary, on a loopback port, serving from
/// its own thread until the process ends.
fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let data_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wsfs-cli-tests");
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).expect("data directory");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind a loopback port");
                let addr = listener.local_addr().expect("bound address");
                let mut config = wsfs_server::ServerConfig::for_tests(data_dir);
                config.listen = addr;
                tx.send(format!("http://{addr}"))
                    .expect("report the address");
                wsfs_server::serve(config, listener, std::future::pending())
                    .await
                    .expect("server runs");
            });
        });
        rx.recv().expect("the server started")
    })
}

/// What one run of the binary did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    raw: Vec<u8>,
}

impl Run {
    fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    /// Exit 1 with `wsfs: REASON: ...` on stderr.
    fn fails_with(self, reason: &str) -> Run {
        assert_eq!(
            self.code, 1,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        assert!(
            self.stderr.starts_with(&format!("wsfs: {reason}: ")),
            "expected reason {reason}, stderr: {}",
            self.stderr
        );
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", self.stdout))
    }

    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// What one run of the binary did, with no saved context (`wsfs use`).
fn wsfs_with(session: Option<&str>, args: &[&str], stdin: &[u8], server: &str) -> Run {
    let none = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-saved-context.json");
    wsfs_in(&none, session, args, stdin, server)
}

/// What one run of the binary did, with `config` as its saved context file.
fn wsfs_in(config: &Path, session: Option<&str>, args: &[&str], stdin: &[u8], server: &str) -> Run {
    wsfs_as(config, session, None, args, stdin, server)
}

/// [`wsfs_in`], with `WSFS_TOKEN` set when `token` is given.
fn wsfs_as(
    config: &Path,
    session: Option<&str>,
    token: Option<&str>,
    args: &[&str],
    stdin: &[u8],
    server: &str,
) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsfs"));
    command
        .env("WSFS_CONFIG", config)
        .args(args)
        .env_remove("WSFS_SESSION")
        .env_remove("WSFS_TOKEN")
        .env_remove("WSFS_CA")
        .env("WSFS_SERVER", server)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(session) = session {
        command.env("WSFS_SESSION", session);
    }
    if let Some(token) = token {
        command.env("WSFS_TOKEN", token);
    }
    let mut child = command.spawn().expect("run wsfs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("write stdin");
    drop(input);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wsfs finishes");
    Run {
        code: status.code().expect("an exit code"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        raw: stdout,
    }
}

/// A fresh session and a way to run commands in it.
struct Workspace {
    id: String,
}

impl Workspace {
    fn new() -> Workspace {
        let run = wsfs_with(None, &["session", "create"], b"", server_url()).ok();
        let id = run.stdout.trim().to_string();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        Workspace { id }
    }

    fn run(&self, args: &[&str]) -> Run {
        wsfs_with(Some(&self.id), args, b"", server_url())
    }

    fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Run {
        wsfs_with(Some(&self.id), args, stdin, server_url())
    }

    fn cat(&self, path: &str) -> String {
        self.run(&["cat", path]).ok().stdout
    }
}

// --- sessions ---------------------------------------------------------

#[test]
fn session_create_show_list_rm() {
    let ws = Workspace::new();
    let shown = ws.run(&["session", "show", "--json"]).ok().json();
    assert_eq!(shown["session_id"], ws.id.as_str());
    assert_eq!(shown["backend"], "memory");
    let listed = ws.run(&["session", "list", "--json"]).ok().json();
    let ids: Vec<_> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.contains(&ws.id));
    let removed = ws.run(&["session", "rm", &ws.id]).ok();
    assert!(
        removed.stdout.contains("removed session"),
        "{}",
        removed.stdout
    );
    ws.run(&["session", "show"]).fails_with("SESSION_NOT_FOUND");
}

#[test]
fn session_create_json_with_labels_and_directory_backend() {
    let run = wsfs_with(
        None,
        &[
            "session",
            "create",
            "--directory",
            "--label",
            "team=ci",
            "--json",
        ],
        b"",
        server_url(),
    )
    .ok();
    let info = run.json();
    assert_eq!(info["backend"], "directory");
    assert_eq!(info["labels"]["team"], "ci");
    assert!(Path::new(info["root_path"].as_str().unwrap()).is_dir());
}

#[test]
fn session_list_filters_by_label_and_prints_a_header() {
    let tag = format!("run-{}", std::process::id());
    let label = format!("cli-list={tag}");
    let made: Vec<String> = (0..2)
        .map(|_| {
            wsfs_with(
                None,
                &["session", "create", "--label", &label],
                b"",
                server_url(),
            )
            .ok()
            .stdout
            .trim()
            .to_string()
        })
        .collect();
    let listed = wsfs_with(
        None,
        &["session", "list", "--label", &label],
        b"",
        server_url(),
    )
    .ok();
    let mut lines = listed.stdout.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("LAST ACTIVE"),
        "{header}"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{}", listed.stdout);
    for id in &made {
        assert!(
            rows.iter().any(|r| r.starts_with(id.as_str())),
            "{}",
            listed.stdout
        );
    }
    let json = wsfs_with(
        None,
        &["session", "list", "--label", &label, "--json"],
        b"",
        server_url(),
    )
    .ok()
    .json();
    assert_eq!(json["sessions"].as_array().unwrap().len(), 2);
    assert_eq!(json["sessions"][0]["open_streams"], 0);
    let none = wsfs_with(
        None,
        &["session", "list", "--label", "cli-list=none", "-q"],
        b"",
        server_url(),
    )
    .ok();
    assert_eq!(none.stdout, "");
}

#[test]
fn use_saves_the_session_and_server_until_cleared_and_flags_still_win() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wsfs").join("context.json");
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "from use"]).ok();
    let other = Workspace::new();
    other.run(&["write", "a.txt", "from the flag"]).ok();
    let run = |args: &[&str], server: &str| wsfs_in(&config, None, args, b"", server);

    // A session the server does not know is not saved.
    run(
        &["use", "00000000-0000-0000-0000-000000000000"],
        server_url(),
    )
    .fails_with("SESSION_NOT_FOUND");
    assert!(!config.exists());

    run(&["use", &ws.id], server_url()).ok();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the context may hold a token");
    // No WSFS_SERVER, no WSFS_SESSION: both come from the context.
    assert_eq!(run(&["cat", "a.txt"], "").ok().stdout, "from use\n");
    // A flag wins over the context.
    assert_eq!(
        run(&["cat", "a.txt", "-s", &other.id], "").ok().stdout,
        "from the flag\n"
    );
    let shown = run(&["use", "--json"], "").ok().json();
    assert_eq!(shown["session"], ws.id.as_str());
    assert_eq!(shown["server"], server_url());
    assert_eq!(shown["token"], false);

    run(&["use", "--clear"], "").ok();
    assert!(!config.exists());
    let without = run(&["cat", "a.txt"], server_url());
    assert_eq!(
        without.code, 2,
        "no session is a usage error: {}",
        without.stderr
    );

    // A broken file is named, and --clear still removes it.
    std::fs::write(&config, "{not json").unwrap();
    let broken = run(&["ls"], server_url());
    assert_ne!(broken.code, 0);
    assert!(broken.stderr.contains("context.json"), "{}", broken.stderr);
    run(&["use", "--clear"], "").ok();
    assert!(!config.exists());
}

#[test]
fn session_create_with_a_malformed_label_is_a_usage_error() {
    let run = wsfs_with(
        None,
        &["session", "create", "--label", "x"],
        b"",
        server_url(),
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn file_command_without_a_session_is_a_usage_error() {
    let run = wsfs_with(None, &["ls"], b"", server_url());
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("WSFS_SESSION"), "{}", run.stderr);
}

#[test]
fn unknown_subcommand_and_bad_flag_exit_2() {
    assert_eq!(wsfs_with(None, &["frobnicate"], b"", server_url()).code, 2);
    assert_eq!(
        wsfs_with(None, &["ls", "--nope"], b"", server_url()).code,
        2
    );
}

#[test]
fn unreachable_server_fails_with_unavailable_and_asks_whether_it_runs() {
    let run = wsfs_with(Some("x"), &["ls"], b"", "http://127.0.0.1:9").fails_with("UNAVAILABLE");
    assert!(
        run.stderr
            .contains("hint: is wsfs-server running at http://127.0.0.1:9?"),
        "{}",
        run.stderr
    );
}

#[test]
fn version_shows_the_client_and_the_version_the_server_reports() {
    // One workspace: the client and the server share its version.
    let version = env!("CARGO_PKG_VERSION");
    let run = wsfs_with(None, &["version"], b"", server_url()).ok();
    assert!(
        run.stdout.contains(&format!("wsfs {version}\n"))
            && run.stdout.contains(&format!("(wsfs-server {version})")),
        "{}",
        run.stdout
    );
    let json = wsfs_with(None, &["version", "--json"], b"", server_url())
        .ok()
        .json();
    assert_eq!(json["server"]["version"], version, "{json}");
}

#[test]
fn a_bare_host_and_port_is_an_http_server() {
    let ws = Workspace::new();
    let bare = server_url().trim_start_matches("http://");
    let run = wsfs_with(
        Some(&ws.id),
        &["write", "a.txt", "via host:port"],
        b"",
        bare,
    )
    .ok();
    assert!(run.stdout.contains("a.txt"), "{}", run.stdout);
    assert_eq!(ws.cat("a.txt"), "via host:port\n");
}

#[test]
fn cp_and_mv_into_a_directory_keep_the_source_name() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "A"]).ok();
    ws.run(&["mkdir", "dir"]).ok();
    let copied = ws.run(&["cp", "a.txt", "dir", "--json"]).ok().json();
    assert_eq!(copied["destination"], "dir/a.txt");
    ws.run(&["mv", "a.txt", "new/"]).ok();
    assert_eq!(ws.cat("new/a.txt"), "A\n");
    ws.run(&["mkdir", "src"]).ok();
    ws.run(&["write", "src/x", "X"]).ok();
    ws.run(&["cp", "src", "dir"]).ok();
    assert_eq!(ws.cat("dir/src/x"), "X\n");
    // -T: the destination is the new name, even for a directory.
    ws.run(&["cp", "-T", "-f", "src", "dir"]).ok();
    assert_eq!(ws.cat("dir/x"), "X\n");
}

#[test]
fn session_limits_take_size_suffixes_and_a_too_large_write_says_how_to_raise_them() {
    let created = wsfs_with(
        None,
        &[
            "session",
            "create",
            "--max-write-bytes",
            "1K",
            "--max-files",
            "10",
            "--json",
        ],
        b"",
        server_url(),
    )
    .ok()
    .json();
    assert_eq!(created["limits"]["max_write_bytes"], 1024);
    assert_eq!(created["limits"]["max_files"], 10);
    let id = created["session_id"].as_str().unwrap();
    let big = vec![b'x'; 2048];
    let refused =
        wsfs_with(Some(id), &["write", "big.txt"], &big, server_url()).fails_with("TOO_LARGE");
    assert!(
        refused.stderr.contains("--max-write-bytes 1G"),
        "{}",
        refused.stderr
    );
    let bad = wsfs_with(
        None,
        &["session", "create", "--max-write-bytes", "1Q"],
        b"",
        server_url(),
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("unknown size suffix"), "{}", bad.stderr);
}

#[test]
fn container_sessions_are_asked_for_by_runtime_name_and_workdir() {
    let args = [
        "session",
        "create",
        "--container",
        "box",
        "--runtime",
        "podman",
        "--workdir",
        "/srv",
    ];
    // The test server configures no runtime: the request reaches it whole
    // and is refused there.
    let refused = wsfs_with(None, &args, b"", server_url()).fails_with("FAILED_PRECONDITION");
    assert!(
        refused.stderr.contains("--container-runtime"),
        "{}",
        refused.stderr
    );
    let half = wsfs_with(None, &args[..4], b"", server_url());
    assert_eq!(half.code, 2, "{}", half.stderr);
}

#[test]
fn put_of_a_local_directory_points_to_push() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let run = ws.run(&["put", dir.path().to_str().unwrap(), "x"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("wsfs push"), "{}", run.stderr);
    ws.run(&["stat", "x"]).fails_with("FILE_NOT_FOUND");
}

#[test]
fn errors_in_json_mode_are_json_on_stderr() {
    let ws = Workspace::new();
    let run = ws.run(&["cat", "missing.txt", "--json"]);
    assert_eq!(run.code, 1);
    let error: Value = serde_json::from_str(run.stderr.trim()).unwrap();
    assert_eq!(error["error"]["reason"], "FILE_NOT_FOUND");
}

// --- reading and writing ------------------------------------------------

#[test]
fn write_from_argument_and_stdin_then_cat() {
    let ws = Workspace::new();
    ws.run(&["write", "notes/a.md", "- first\n"]).ok();
    assert_eq!(ws.cat("notes/a.md"), "- first\n");
    ws.run_with_stdin(&["write", "notes/b.md"], b"from stdin\n")
        .ok();
    assert_eq!(ws.cat("/notes//b.md"), "from stdin\n");
    let written = ws.run(&["write", "c.txt", "xyz", "--json"]).ok().json();
    assert_eq!(written["path"], "c.txt");
    assert_eq!(
        written["size_bytes"], 4,
        "a text argument is written as a line"
    );
    assert_eq!(written["created"], true);
    ws.run(&["write", "-n", "d.txt", "no newline"]).ok();
    assert_eq!(ws.cat("d.txt"), "no newline");
}

#[test]
fn write_then_append_arguments_make_lines_as_the_readme_shows() {
    let ws = Workspace::new();
    ws.run(&["write", "notes/todo.md", "- ship it"]).ok();
    ws.run(&["append", "notes/todo.md", "- tell people"]).ok();
    assert_eq!(ws.cat("notes/todo.md"), "- ship it\n- tell people\n");
}

#[test]
fn write_create_over_an_existing_file_fails() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "1"]).ok();
    let refused = ws
        .run(&["write", "--create", "a.txt", "2"])
        .fails_with("ALREADY_EXISTS");
    assert!(refused.stderr.contains("hint: "), "{}", refused.stderr);
    assert_eq!(ws.cat("a.txt"), "1\n");
}

#[test]
fn write_with_a_stale_version_fails() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "1"]).ok();
    ws.run(&["write", "--if-version", "999", "a.txt", "2"])
        .fails_with("VERSION_MISMATCH");
}

#[test]
fn append_adds_to_the_end_and_creates_missing_files() {
    let ws = Workspace::new();
    ws.run(&["append", "log.txt", "one\n"]).ok();
    ws.run_with_stdin(&["append", "log.txt"], b"two\n").ok();
    assert_eq!(ws.cat("log.txt"), "one\ntwo\n");
}

#[test]
fn cat_missing_file_fails_with_its_reason() {
    let ws = Workspace::new();
    let run = ws.run(&["cat", "a.txt"]).fails_with("FILE_NOT_FOUND");
    assert_eq!(
        run.stderr.trim(),
        "wsfs: FILE_NOT_FOUND: 'a.txt' does not exist"
    );
}

#[test]
fn cat_offset_and_limit_select_lines() {
    let ws = Workspace::new();
    ws.run(&["write", "f.txt", "a\nb\nc\nd\n"]).ok();
    assert_eq!(
        ws.run(&["cat", "--offset", "1", "--limit", "2", "f.txt"])
            .ok()
            .stdout,
        "b\nc\n"
    );
    let page = ws
        .run(&["cat", "--offset", "3", "f.txt", "--json"])
        .ok()
        .json();
    assert_eq!(page["content"], "d\n");
    assert_eq!(page["total_lines"], 4);
}

#[test]
fn cat_of_bytes_needs_bytes_flag() {
    let ws = Workspace::new();
    let data: Vec<u8> = (0..=255u8).collect();
    ws.run_with_stdin(&["put", "-", "blob.bin"], &data).ok();
    ws.run(&["cat", "blob.bin"]).fails_with("NOT_TEXT");
    assert_eq!(ws.run(&["cat", "--bytes", "blob.bin"]).ok().raw, data);
    let part = ws
        .run(&[
            "cat", "--bytes", "--offset", "10", "--limit", "3", "blob.bin", "--json",
        ])
        .ok()
        .json();
    assert_eq!(part["data_base64"], "CgsM");
}

#[test]
fn put_and_get_round_trip_files_and_pipes() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("data.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&source, &data).unwrap();

    let put = ws
        .run(&["put", source.to_str().unwrap(), "in/data.bin", "--json"])
        .ok()
        .json();
    assert_eq!(put["size_bytes"], data.len());

    let target = dir.path().join("back.bin");
    let got = ws
        .run(&["get", "in/data.bin", target.to_str().unwrap(), "--json"])
        .ok()
        .json();
    assert_eq!(got["bytes"], data.len());
    assert_eq!(std::fs::read(&target).unwrap(), data);

    assert_eq!(ws.run(&["get", "in/data.bin", "-"]).ok().raw, data);
}

#[test]
fn get_of_a_missing_file_fails_and_leaves_nothing_behind() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("x.bin");
    ws.run(&["get", "nope.bin", target.to_str().unwrap()])
        .fails_with("FILE_NOT_FOUND");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn put_of_a_missing_local_file_fails_locally() {
    let ws = Workspace::new();
    let run = ws.run(&["put", "/no/such/file", "x"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with("wsfs: cannot open"),
        "{}",
        run.stderr
    );
}

#[test]
fn edit_dry_run_prints_the_diff_and_changes_nothing() {
    let ws = Workspace::new();
    ws.run(&["write", "m.rs", "fn main() {}\n"]).ok();
    let diff = ws
        .run(&[
            "edit",
            "m.rs",
            "--old",
            "main",
            "--new",
            "start",
            "--dry-run",
        ])
        .ok()
        .stdout;
    assert!(diff.contains("-fn main() {}"), "{diff}");
    assert!(diff.contains("+fn start() {}"), "{diff}");
    assert_eq!(ws.cat("m.rs"), "fn main() {}\n");

    let done = ws
        .run(&["edit", "m.rs", "--old", "main", "--new", "start", "--json"])
        .ok()
        .json();
    assert_eq!(done["replacements"], 1);
    assert_eq!(ws.cat("m.rs"), "fn start() {}\n");
}

#[test]
fn edit_without_a_match_or_with_many_fails() {
    let ws = Workspace::new();
    ws.run(&["write", "t.txt", "a a\n"]).ok();
    ws.run(&["edit", "t.txt", "--old", "zzz", "--new", "y"])
        .fails_with("NO_MATCH");
    ws.run(&["edit", "t.txt", "--old", "a", "--new", "-b"])
        .fails_with("AMBIGUOUS_MATCH");
    ws.run(&["edit", "t.txt", "--old", "a", "--new", "-b", "--all"])
        .ok();
    assert_eq!(ws.cat("t.txt"), "-b -b\n");
}

// --- the tree -------------------------------------------------------------

#[test]
fn rm_files_and_directories() {
    let ws = Workspace::new();
    ws.run(&["write", "d/a.txt", "1"]).ok();
    ws.run(&["write", "d/b.txt", "2"]).ok();
    // As rm(1): a directory needs -r, whatever it holds.
    ws.run(&["rm", "d"]).fails_with("IS_A_DIRECTORY");
    ws.run(&["rm", "missing"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["rm", "-f", "missing"]).ok();
    let removed = ws.run(&["rm", "-r", "d", "--json"]).ok().json();
    assert_eq!(removed["deleted"], 3);
}

#[test]
fn rm_of_several_paths_removes_each_and_reports_every_refusal() {
    let ws = Workspace::new();
    for (path, text) in [("a.txt", "a"), ("d/c.txt", "c"), ("b.txt", "b")] {
        ws.run(&["write", path, text]).ok();
    }
    let run = ws
        .run(&["rm", "a.txt", "d", "missing", "../x", "b.txt", "--json"])
        .fails_with("IS_A_DIRECTORY");
    // The refusals in the order given, the last as the command's error
    // (with --json, a JSON document).
    let lines: Vec<&str> = run.stderr.lines().collect();
    let reasons: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("wsfs: "))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(
        reasons,
        ["IS_A_DIRECTORY", "FILE_NOT_FOUND"],
        "{}",
        run.stderr
    );
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(
        last["error"]["reason"], "PATH_ESCAPES_ROOT",
        "{}",
        run.stderr
    );
    let removed = run.json();
    assert_eq!(removed["deleted"], 2);
    let paths: Vec<_> = removed["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["a.txt", "b.txt"]);
    ws.run(&["stat", "a.txt"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["stat", "b.txt"]).fails_with("FILE_NOT_FOUND");
    // The refused directory is as it was.
    assert_eq!(ws.cat("d/c.txt"), "c\n");
}

#[test]
fn rm_r_of_more_paths_than_one_call_holds_removes_them_all() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let count = wsfs_client::MAX_DELETE_ENTRIES + 76;
    let names: Vec<String> = (0..count).map(|i| format!("f{i:04}")).collect();
    for name in &names {
        std::fs::write(dir.path().join(name), name).unwrap();
    }
    ws.run(&["push", dir.path().to_str().unwrap(), "many"]).ok();
    let mut args = vec!["rm".to_string(), "-r".to_string(), "--json".to_string()];
    args.extend(names.iter().map(|n| format!("many/{n}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let removed = ws.run(&args).ok().json();
    assert_eq!(removed["deleted"], count);
    let paths = removed["paths"].as_array().unwrap();
    assert_eq!(paths.len(), count);
    assert_eq!(
        paths[count - 1]["path"],
        format!("many/{}", names[count - 1])
    );
    let listed = ws.run(&["ls", "many", "--json"]).ok().json();
    assert_eq!(
        listed["entries"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
}

#[test]
fn mkdir_behaves_like_mkdir_1() {
    let ws = Workspace::new();
    ws.run(&["mkdir", "a/b"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["mkdir", "-p", "a/b"]).ok();
    ws.run(&["mkdir", "-p", "a/b"]).ok();
    ws.run(&["mkdir", "a"]).fails_with("ALREADY_EXISTS");
    let stat = ws.run(&["stat", "a/b", "--json"]).ok().json();
    assert_eq!(stat["kind"], "directory");
}

#[test]
fn mv_and_cp_refuse_to_overwrite_without_f() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "A"]).ok();
    ws.run(&["write", "b.txt", "B"]).ok();
    ws.run(&["cp", "a.txt", "b.txt"])
        .fails_with("ALREADY_EXISTS");
    ws.run(&["cp", "-f", "a.txt", "b.txt"]).ok();
    assert_eq!(ws.cat("b.txt"), "A\n");
    let moved = ws.run(&["mv", "a.txt", "sub/c.txt", "--json"]).ok().json();
    assert_eq!(moved["destination"], "sub/c.txt");
    ws.run(&["stat", "a.txt"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["mv", "../x", "y"]).fails_with("PATH_ESCAPES_ROOT");
}

#[test]
fn stat_prints_kind_size_and_version() {
    let ws = Workspace::new();
    ws.run(&["write", "-n", "s.txt", "12345"]).ok();
    let text = ws.run(&["stat", "s.txt"]).ok().stdout;
    assert!(text.contains("kind:     file"), "{text}");
    assert!(text.contains("size:     5"), "{text}");
    let json = ws.run(&["stat", "s.txt", "--json"]).ok().json();
    assert_eq!(json["size_bytes"], 5);
    assert!(json["version"].as_u64().unwrap() > 0);
}

#[test]
fn ls_short_long_recursive_and_json() {
    let ws = Workspace::new();
    ws.run(&["write", "src/main.rs", "fn main() {}\n"]).ok();
    ws.run(&["write", "README.md", "hi\n"]).ok();
    assert_eq!(ws.run(&["ls"]).ok().stdout, "README.md\nsrc/\n");
    assert_eq!(
        ws.run(&["ls", "-R"]).ok().stdout,
        "README.md\nsrc/\nsrc/main.rs\n"
    );
    assert_eq!(ws.run(&["ls", "src"]).ok().stdout, "main.rs\n");
    let long = ws.run(&["ls", "-l", "src"]).ok().stdout;
    assert!(
        long.starts_with("-rw-r--r-- ") && long.contains(" 13 ") && long.ends_with(" main.rs\n"),
        "{long}"
    );
    let json = ws.run(&["ls", "--depth", "2", "--json"]).ok().json();
    assert_eq!(json["entries"].as_array().unwrap().len(), 3);
    ws.run(&["ls", "README.md"]).fails_with("NOT_A_DIRECTORY");
    ws.run(&["ls", "nope"]).fails_with("FILE_NOT_FOUND");
}

// --- search -----------------------------------------------------------

#[test]
fn glob_lists_matching_files() {
    let ws = Workspace::new();
    ws.run(&["write", "a.rs", "x"]).ok();
    ws.run(&["write", "x/y/b.rs", "x"]).ok();
    ws.run(&["write", "c.md", "x"]).ok();
    assert_eq!(ws.run(&["glob", "**/*.rs"]).ok().stdout, "a.rs\nx/y/b.rs\n");
    let json = ws.run(&["glob", "*.rs", "x/y", "--json"]).ok().json();
    assert_eq!(json["paths"][0], "x/y/b.rs");
    ws.run(&["glob", "a{"]).fails_with("INVALID_PATTERN");
}

#[test]
fn grep_prints_path_line_text_like_ripgrep() {
    let ws = Workspace::new();
    ws.run(&[
        "write",
        "src/a.rs",
        "one\nTODO two\nthree\nfour\nfive\ntodo six\n",
    ])
    .ok();
    ws.run(&["write", "notes.md", "todo: notes\n"]).ok();
    assert_eq!(
        ws.run(&["grep", "TODO"]).ok().stdout,
        "src/a.rs:2:TODO two\n"
    );
    assert_eq!(
        ws.run(&["grep", "-i", "todo", "--glob", "*.rs"])
            .ok()
            .stdout,
        "src/a.rs:2:TODO two\nsrc/a.rs:6:todo six\n"
    );
    assert_eq!(
        ws.run(&["grep", "-i", "-C", "1", "todo", "src"]).ok().stdout,
        "src/a.rs-1-one\nsrc/a.rs:2:TODO two\nsrc/a.rs-3-three\n--\nsrc/a.rs-5-five\nsrc/a.rs:6:todo six\n"
    );
    assert_eq!(
        ws.run(&["grep", "-F", "-m", "1", "o"]).ok().stdout,
        "notes.md:1:todo: notes\n"
    );
    let coloured = ws.run(&["grep", "--color", "always", "TODO"]).ok().stdout;
    assert!(coloured.contains("\x1b[1;31mTODO\x1b[0m"), "{coloured:?}");
}

#[test]
fn grep_exits_1_quietly_when_nothing_matches_and_reports_bad_patterns() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "x\n"]).ok();
    let none = ws.run(&["grep", "zzz"]);
    assert_eq!(
        (none.code, none.stdout.as_str(), none.stderr.as_str()),
        (1, "", "")
    );
    let bad = ws.run(&["grep", "("]);
    assert_eq!(
        bad.code, 2,
        "errors exit 2, as in grep and rg: {}",
        bad.stderr
    );
    assert!(
        bad.stderr.starts_with("wsfs: INVALID_PATTERN: "),
        "{}",
        bad.stderr
    );
}

#[test]
fn grep_takes_rg_flags_for_files_counts_words_context_and_several_paths() {
    let ws = Workspace::new();
    ws.run(&[
        "write",
        "src/a.rs",
        "one\nSession two\nthree\nfour\nSessions five\n",
    ])
    .ok();
    ws.run(&["write", "src/b.rs", "session\nSession\n"]).ok();
    ws.run(&["write", "docs/c.md", "a Session here\n"]).ok();
    ws.run(&["write", "other/d.txt", "Session\n"]).ok();
    let out = |args: &[&str]| ws.run(args).ok().stdout;
    assert_eq!(
        out(&["grep", "-l", "Session"]),
        "docs/c.md\nother/d.txt\nsrc/a.rs\nsrc/b.rs\n"
    );
    assert_eq!(
        out(&["grep", "-c", "Session", "src"]),
        "src/a.rs:2\nsrc/b.rs:1\n"
    );
    assert_eq!(
        out(&["grep", "-w", "Session", "src"]),
        "src/a.rs:2:Session two\nsrc/b.rs:2:Session\n"
    );
    // -w with -F escapes the literal before it becomes a regex.
    ws.run(&["write", "e.txt", "a.b axb\n"]).ok();
    assert_eq!(
        out(&["grep", "-w", "-F", "a.b", "e.txt"]),
        "e.txt:1:a.b axb\n"
    );
    assert_eq!(
        out(&["grep", "-o", "Sess[a-z]+", "src/a.rs"]),
        "src/a.rs:2:Session\nsrc/a.rs:5:Sessions\n"
    );
    assert_eq!(
        out(&["grep", "-A", "1", "-B", "0", "two", "src"]),
        "src/a.rs:2:Session two\nsrc/a.rs-3-three\n"
    );
    assert_eq!(
        out(&["grep", "-B", "1", "five", "src"]),
        "src/a.rs-4-four\nsrc/a.rs:5:Sessions five\n"
    );
    // Several paths, each searched in turn; a match in any one is success.
    assert_eq!(
        out(&["grep", "-l", "Session", "other", "docs"]),
        "other/d.txt\ndocs/c.md\n"
    );
    let none = ws.run(&["grep", "nothing-here", "src", "docs"]);
    assert_eq!((none.code, none.stdout.as_str()), (1, ""));
    // A missing path is an error (2), not "no match" (1); as rg, the
    // other paths are still searched.
    let missing = ws.run(&["grep", "-l", "Session", "no-such-dir", "src"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("no-such-dir: FILE_NOT_FOUND"),
        "{}",
        missing.stderr
    );
    assert_eq!(missing.stdout, "src/a.rs\nsrc/b.rs\n");
    let alone = ws.run(&["grep", "Session", "no-such-dir"]);
    assert_eq!(alone.code, 2, "{}", alone.stderr);
    assert!(alone.stderr.contains("FILE_NOT_FOUND"), "{}", alone.stderr);
    let counts = ws
        .run(&["grep", "-c", "Session", "src", "--json"])
        .ok()
        .json_lines();
    assert_eq!(counts[0]["path"], "src/a.rs");
    assert_eq!(counts[0]["matches"], 2);
}

#[test]
fn grep_json_is_one_object_per_line_ending_with_the_summary() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "alpha\nbeta\nalpha again\n"])
        .ok();
    let lines = ws.run(&["grep", "alpha", "--json"]).ok().json_lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["type"], "match");
    assert_eq!(lines[1]["line_number"], 3);
    assert_eq!(lines[2]["type"], "summary");
    assert_eq!(lines[2]["matches"], 2);
}

// --- snapshots, archives, tokens, watch ---------------------------------

#[test]
fn snapshot_create_list_restore_and_rm() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "before"]).ok();
    let created = ws
        .run(&["snapshot", "create", "--tag", "t1", "--json"])
        .ok();
    let id = created.json()["snapshot_id"].as_str().unwrap().to_string();
    ws.run(&["write", "a.txt", "after"]).ok();
    ws.run(&["write", "b.txt", "new"]).ok();
    let listed = ws.run(&["snapshot", "list", "--json"]).ok().json();
    assert_eq!(listed["snapshots"][0]["tag"], "t1");
    let restored = ws.run(&["snapshot", "restore", &id]).ok();
    assert_eq!(restored.stderr, "", "no spinner off a terminal");
    assert_eq!(ws.cat("a.txt"), "before\n");
    ws.run(&["stat", "b.txt"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["snapshot", "rm", &id]).ok();
    ws.run(&["snapshot", "restore", &id])
        .fails_with("SNAPSHOT_NOT_FOUND");
}

#[test]
fn session_create_from_forks_a_snapshot_named_by_tag_or_the_newest() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "one"]).ok();
    let first = ws.run(&["snapshot", "create", "--tag", "first"]).ok();
    ws.run(&["write", "a.txt", "two"]).ok();
    ws.run(&["snapshot", "create", "--tag", "second"]).ok();
    ws.run(&["write", "a.txt", "three"]).ok();

    let from = format!("{}:first", ws.id);
    let made = ws
        .run(&[
            "session",
            "create",
            "--directory",
            "--from",
            &from,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(made["forked_from"]["session_id"], ws.id.as_str());
    assert_eq!(made["forked_from"]["snapshot_id"], first.stdout.trim());
    let fork = Workspace {
        id: made["session_id"].as_str().unwrap().to_string(),
    };
    assert_eq!(fork.cat("a.txt"), "one\n");
    let shown = fork.run(&["session", "show"]).ok().stdout;
    assert!(
        shown.contains(&format!("forked from: {}:", ws.id)),
        "{shown}"
    );

    let newest = ws.run(&["session", "create", "--from", &ws.id]).ok();
    let newest = Workspace {
        id: newest.stdout.trim().to_string(),
    };
    assert_eq!(newest.cat("a.txt"), "two\n");
    assert_eq!(ws.cat("a.txt"), "three\n", "the origin is untouched");

    let empty = Workspace::new();
    let refused = ws.run(&["session", "create", "--from", &empty.id]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("no snapshot"), "{}", refused.stderr);
    let unknown = format!("{}:nosuchtag", ws.id);
    ws.run(&["session", "create", "--from", &unknown])
        .fails_with("SNAPSHOT_NOT_FOUND");
}

#[test]
fn snapshots_are_named_by_tag_or_the_start_of_their_id() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "one"]).ok();
    let first = ws
        .run(&["snapshot", "create", "--tag", "first"])
        .ok()
        .stdout;
    let first = first.trim().to_string();
    ws.run(&["write", "a.txt", "two"]).ok();
    let second = ws.run(&["snapshot", "create", "--tag", "dup"]).ok().stdout;
    ws.run(&["snapshot", "create", "--tag", "dup"]).ok();
    ws.run(&["write", "a.txt", "three"]).ok();

    ws.run(&["snapshot", "restore", "first"]).ok();
    assert_eq!(ws.cat("a.txt"), "one\n");
    ws.run(&["snapshot", "restore", &second.trim()[..8]]).ok();
    assert_eq!(ws.cat("a.txt"), "two\n");

    // A tag on two snapshots is not guessed: both ids are named.
    let ambiguous = ws.run(&["snapshot", "restore", "dup"]);
    assert_eq!(ambiguous.code, 2, "{}", ambiguous.stderr);
    assert!(
        ambiguous.stderr.contains(second.trim()),
        "{}",
        ambiguous.stderr
    );
    assert_eq!(
        ws.cat("a.txt"),
        "two\n",
        "a refused restore changes nothing"
    );
    ws.run(&["snapshot", "restore", "no-such-tag"])
        .fails_with("SNAPSHOT_NOT_FOUND");

    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("first.zip");
    ws.run(&["export", zip.to_str().unwrap(), "--snapshot", "first"])
        .ok();
    ws.run(&["snapshot", "rm", "first"]).ok();
    ws.run(&["snapshot", "restore", &first])
        .fails_with("SNAPSHOT_NOT_FOUND");
    ws.run(&["import", zip.to_str().unwrap()]).ok();
    assert_eq!(ws.cat("a.txt"), "one\n");
}

#[test]
fn snapshot_diff_lists_changes_and_exits_1_when_there_are_some() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "one"]).ok();
    ws.run(&["write", "gone/b.txt", "b"]).ok();
    ws.run(&["snapshot", "create", "--tag", "base"]).ok();
    let clean = ws.run(&["snapshot", "diff", "base"]);
    assert_eq!(
        (clean.code, clean.stdout.as_str()),
        (0, ""),
        "{}",
        clean.stderr
    );

    ws.run(&["write", "a.txt", "two"]).ok();
    ws.run(&["rm", "-r", "gone"]).ok();
    ws.run(&["write", "new.txt", "n"]).ok();
    let changed = ws.run(&["snapshot", "diff", "base"]);
    assert_eq!(changed.code, 1, "{}", changed.stderr);
    assert_eq!(
        changed.stdout,
        "M  a.txt\nD  gone/\nD  gone/b.txt\nA  new.txt\n"
    );
    let json = ws.run(&["snapshot", "diff", "base", "--json"]);
    let value: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["changes"].as_array().unwrap().len(), 4);
    assert_eq!(value["changes"][1]["directory"], true);
    ws.run(&["snapshot", "diff", "no-such-tag"])
        .fails_with("SNAPSHOT_NOT_FOUND");
}

#[test]
fn cat_at_a_snapshot_and_restore_of_one_path() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "old a"]).ok();
    ws.run(&["write", "b.txt", "old b"]).ok();
    ws.run(&["snapshot", "create", "--tag", "base"]).ok();
    ws.run(&["write", "a.txt", "new a"]).ok();
    ws.run(&["write", "b.txt", "new b"]).ok();
    assert_eq!(
        ws.run(&["cat", "a.txt", "--snapshot", "base"]).ok().stdout,
        "old a\n"
    );
    ws.run(&["snapshot", "restore", "base", "--path", "a.txt"])
        .ok();
    assert_eq!(ws.cat("a.txt"), "old a\n");
    assert_eq!(ws.cat("b.txt"), "new b\n", "only the path asked for");
    ws.run(&["rm", "a.txt"]).ok();
    ws.run(&["snapshot", "restore", "base", "--path", "a.txt"])
        .ok();
    assert_eq!(ws.cat("a.txt"), "old a\n", "a deleted file comes back");
    ws.run(&["cat", "missing.txt", "--snapshot", "base"])
        .fails_with("FILE_NOT_FOUND");
    ws.run(&["snapshot", "restore", "base", "--path", "missing.txt"])
        .fails_with("FILE_NOT_FOUND");
    ws.run(&["stat", "missing.txt"])
        .fails_with("FILE_NOT_FOUND");
}

#[test]
fn restore_of_one_directory_puts_back_exactly_that_directory() {
    let ws = Workspace::new();
    ws.run(&["write", "src/a.rs", "old a"]).ok();
    ws.run(&["write", "src/lib/b.rs", "old b"]).ok();
    ws.run(&["write", "notes.txt", "old notes"]).ok();
    ws.run(&["snapshot", "create", "--tag", "base"]).ok();
    ws.run(&["write", "src/a.rs", "new a"]).ok();
    ws.run(&["rm", "-r", "src/lib"]).ok();
    ws.run(&["write", "src/new.rs", "made since"]).ok();
    ws.run(&["write", "notes.txt", "new notes"]).ok();

    let restored = ws
        .run(&["snapshot", "restore", "base", "--path", "src", "--json"])
        .ok()
        .json();
    assert_eq!(restored["path"], "src");
    assert_eq!(restored["file_count"], 2);

    assert_eq!(ws.cat("src/a.rs"), "old a\n");
    assert_eq!(ws.cat("src/lib/b.rs"), "old b\n");
    ws.run(&["stat", "src/new.rs"]).fails_with("FILE_NOT_FOUND");
    assert_eq!(ws.cat("notes.txt"), "new notes\n", "outside src: untouched");
    ws.run(&["snapshot", "restore", "base", "--path", "../up"])
        .fails_with("PATH_ESCAPES_ROOT");
}

// --- tokens -----------------------------------------------------------

const ADMIN_TOKEN: &str = "admin-token-for-cli-tests-0123456789";

/// A server with tokens on, for the tests that need one.
fn token_server() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let mut config = wsfs_server::ServerConfig::for_tests(data_dir);
            config.listen = addr;
            config.admin_token = Some(ADMIN_TOKEN.into());
            tx.send(format!("http://{addr}")).unwrap();
            let _ = wsfs_server::serve(config, listener, std::future::pending()).await;
        });
    });
    (rx.recv().unwrap(), dir)
}

/// `wsfs` against `server` with `WSFS_TOKEN=token` and, when given,
/// `WSFS_SESSION=session`.
fn wsfs_token(server: &str, token: &str, session: Option<&str>, args: &[&str]) -> Run {
    let none = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-saved-context.json");
    wsfs_as(&none, session, Some(token), args, b"", server)
}

#[test]
fn a_session_token_names_its_session_and_a_session_that_disagrees_is_refused() {
    let (server, _dir) = token_server();
    let create = |admin: &str| {
        wsfs_token(&server, admin, None, &["session", "create", "--json"])
            .ok()
            .json()
    };
    let mine = create(ADMIN_TOKEN);
    let other = create(ADMIN_TOKEN);
    let (id, token) = (
        mine["session_id"].as_str().unwrap(),
        mine["token"].as_str().unwrap(),
    );
    let other_id = other["session_id"].as_str().unwrap();

    // The token alone: its session.
    wsfs_token(&server, token, None, &["write", "a.txt", "by token"]).ok();
    assert_eq!(
        wsfs_token(&server, ADMIN_TOKEN, Some(id), &["cat", "a.txt"])
            .ok()
            .stdout,
        "by token\n"
    );
    let shown = wsfs_token(&server, token, None, &["session", "show", "--json"])
        .ok()
        .json();
    assert_eq!(shown["session_id"], id);
    // A named caller's token names the session too.
    let alice = wsfs_token(&server, token, None, &["token", "issue", "alice"])
        .ok()
        .stdout;
    let read = wsfs_token(&server, alice.trim(), None, &["cat", "a.txt"]).ok();
    assert_eq!(read.stdout, "by token\n");

    // The same session named as well: fine.
    wsfs_token(&server, token, Some(id), &["cat", "a.txt"]).ok();
    // Another session: refused before anything is sent, saying both.
    let refused = wsfs_token(&server, token, Some(other_id), &["write", "b.txt", "x"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains(other_id), "{}", refused.stderr);
    assert!(refused.stderr.contains(id), "{}", refused.stderr);
    wsfs_token(&server, ADMIN_TOKEN, Some(other_id), &["stat", "b.txt"])
        .fails_with("FILE_NOT_FOUND");

    // The admin token names no session: a usage error that says so.
    let none = wsfs_token(&server, ADMIN_TOKEN, None, &["ls"]);
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(
        none.stderr.contains("the token names none"),
        "{}",
        none.stderr
    );
    // A token the server does not know: UNAUTHENTICATED, with the hint.
    wsfs_token(&server, "wsfs_0000", None, &["ls"]).fails_with("UNAUTHENTICATED");
}

#[test]
fn export_then_import_restores_the_workspace() {
    let ws = Workspace::new();
    ws.run(&["write", "a.txt", "archived"]).ok();
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("ws.zip");
    let zip = zip.to_str().unwrap();
    ws.run(&["export", zip]).ok();
    assert!(Path::new(zip).exists());
    ws.run(&["rm", "a.txt"]).ok();
    let imported = ws.run(&["import", zip, "--json"]).ok().json();
    assert_eq!(imported["file_count"], 1);
    assert_eq!(ws.cat("a.txt"), "archived\n");
}

#[test]
fn token_issue_on_a_server_without_tokens_is_invalid_argument() {
    let ws = Workspace::new();
    ws.run(&["token", "issue", "agent-1"])
        .fails_with("INVALID_ARGUMENT");
}

#[test]
fn watch_prints_ready_then_a_line_per_event() {
    use std::io::BufRead;
    let ws = Workspace::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wsfs"))
        .args(["watch", "--json"])
        .env("WSFS_SERVER", server_url())
        .env("WSFS_SESSION", &ws.id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(ready["kind"], "READY");

    ws.run(&["write", "watched.txt", "x"]).ok();
    let event = lines
        .map(|l| serde_json::from_str::<Value>(&l.unwrap()).unwrap())
        .find(|e| e["kind"] != "KEEPALIVE")
        .expect("an event line");
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(event["kind"], "CREATED");
    assert_eq!(event["path"], "watched.txt");
}

// --- push and pull ----------------------------------------------------

fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[test]
fn push_then_pull_round_trip_with_delete_and_nothing_twice() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    write_tree(
        &local,
        &[
            ("a.txt", "alpha"),
            ("sub/b.txt", "beta"),
            ("sub/deep/c.txt", "gamma"),
        ],
    );
    std::fs::create_dir_all(local.join("empty")).unwrap();
    let src = local.to_str().unwrap();

    let first = ws.run(&["push", src, "proj", "--json"]).ok().json();
    assert_eq!(first["transferred"], 3);
    assert_eq!(first["bytes"], 14);
    assert_eq!(ws.cat("proj/sub/deep/c.txt"), "gamma");
    ws.run(&["stat", "proj/empty"]).ok();

    let second = ws.run(&["push", src, "proj", "--json"]).ok().json();
    assert_eq!(second["transferred"], 0, "{second}");
    assert_eq!(second["unchanged"], 3);

    // Same size, other content: found by the hash.
    std::fs::write(local.join("a.txt"), "ALPHA").unwrap();
    std::fs::remove_file(local.join("sub/b.txt")).unwrap();
    ws.run(&["write", "proj/extra/x.txt", "remote only"]).ok();
    let plain = ws.run(&["push", src, "proj"]).ok();
    assert!(
        plain.stdout.contains("transferred 1 files"),
        "{}",
        plain.stdout
    );
    ws.run(&["stat", "proj/sub/b.txt"]).ok();
    let third = ws
        .run(&["push", src, "proj", "--delete", "--json"])
        .ok()
        .json();
    assert_eq!(third["transferred"], 0, "{third}");
    assert_eq!(third["deleted"], 2, "{third}");
    ws.run(&["stat", "proj/extra"]).fails_with("FILE_NOT_FOUND");
    assert_eq!(ws.cat("proj/a.txt"), "ALPHA");

    // Pull into a directory that has an extra file and a stale one.
    let back = dir.path().join("back");
    write_tree(&back, &[("stale.txt", "x"), ("a.txt", "old!!")]);
    let dst = back.to_str().unwrap();
    let dry = ws
        .run(&["pull", "proj", dst, "--delete", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(dry["transferred"], 2);
    assert!(back.join("stale.txt").exists(), "a dry run changes nothing");
    let pulled = ws
        .run(&["pull", "proj", dst, "--delete", "--json"])
        .ok()
        .json();
    assert_eq!(pulled["transferred"], 2, "{pulled}");
    assert_eq!(pulled["deleted"], 1, "{pulled}");
    assert!(!back.join("stale.txt").exists());
    assert!(back.join("empty").is_dir());
    assert_eq!(
        std::fs::read_to_string(back.join("a.txt")).unwrap(),
        "ALPHA"
    );
    assert_eq!(
        std::fs::read_to_string(back.join("sub/deep/c.txt")).unwrap(),
        "gamma"
    );
    let again = ws
        .run(&["pull", "proj", dst, "--delete", "--json"])
        .ok()
        .json();
    assert_eq!(again["transferred"], 0);
    assert_eq!(again["deleted"], 0);
}

#[test]
fn push_and_pull_filter_both_sides_and_delete_spares_what_the_filter_leaves_out() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    write_tree(
        &local,
        &[
            ("src/main.rs", "fn main() {}"),
            ("src/notes.txt", "notes"),
            ("target/debug/out.rs", "built"),
            ("top.rs", "top"),
        ],
    );
    let src = local.to_str().unwrap();
    ws.run(&["write", "proj/docs/README.md", "remote only"])
        .ok();
    ws.run(&["write", "proj/stale.rs", "remote only"]).ok();
    let pushed = ws
        .run(&[
            "push",
            src,
            "proj",
            "--include",
            "*.rs",
            "--exclude",
            "target",
            "--delete",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(pushed["transferred"], 2, "{pushed}");
    assert_eq!(pushed["deleted"], 1, "{pushed}");
    assert_eq!(ws.cat("proj/src/main.rs"), "fn main() {}");
    assert_eq!(ws.cat("proj/top.rs"), "top");
    ws.run(&["stat", "proj/src/notes.txt"])
        .fails_with("FILE_NOT_FOUND");
    ws.run(&["stat", "proj/target"])
        .fails_with("FILE_NOT_FOUND");
    ws.run(&["stat", "proj/stale.rs"])
        .fails_with("FILE_NOT_FOUND");
    // Left out by --include, so never deleted by --delete.
    assert_eq!(ws.cat("proj/docs/README.md"), "remote only\n");

    let back = dir.path().join("back");
    write_tree(&back, &[("keep.log", "mine")]);
    let pulled = ws
        .run(&[
            "pull",
            "proj",
            back.to_str().unwrap(),
            "--exclude",
            "*.log",
            "--exclude",
            "docs",
            "--delete",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(pulled["transferred"], 2, "{pulled}");
    assert_eq!(pulled["deleted"], 0, "{pulled}");
    assert!(back.join("keep.log").exists());
    assert!(!back.join("docs").exists());
    let bad = ws.run(&["push", src, "proj", "--include", "a["]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("bad glob"), "{}", bad.stderr);
}

#[test]
fn push_goes_on_past_a_refused_file_and_lists_it_at_the_end() {
    let created = wsfs_with(
        None,
        &["session", "create", "--max-write-bytes", "1K", "--json"],
        b"",
        server_url(),
    )
    .ok()
    .json();
    let id = created["session_id"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(4096);
    write_tree(
        dir.path(),
        &[("a.txt", "a"), ("big.txt", big.as_str()), ("z.txt", "z")],
    );
    let src = dir.path().to_str().unwrap();
    let run = wsfs_with(Some(id), &["push", src, "proj"], b"", server_url());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("big.txt: TOO_LARGE"), "{}", run.stderr);
    assert!(run.stdout.contains("transferred 2 files"), "{}", run.stdout);
    assert!(run.stdout.contains("1 failed"), "{}", run.stdout);
    let listed = wsfs_with(Some(id), &["cat", "proj/z.txt"], b"", server_url()).ok();
    assert_eq!(listed.stdout, "z");
    wsfs_with(Some(id), &["stat", "proj/big.txt"], b"", server_url()).fails_with("FILE_NOT_FOUND");
    let json = wsfs_with(
        Some(id),
        &["push", src, "proj", "--json"],
        b"",
        server_url(),
    );
    assert_eq!(json.code, 1);
    let summary: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(summary["failed"][0]["path"], "big.txt", "{summary}");
    assert_eq!(summary["failed"][0]["reason"], "TOO_LARGE", "{summary}");
    assert_eq!(summary["unchanged"], 2, "{summary}");
}

#[test]
fn push_of_a_missing_directory_and_pull_of_a_missing_remote_fail() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let run = ws.run(&["push", "/no/such/dir", "x"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    ws.run(&["pull", "nope", dir.path().to_str().unwrap()])
        .fails_with("FILE_NOT_FOUND");
}

#[test]
fn completions_are_printed_for_each_shell_without_a_server() {
    for (shell, marker) in [
        ("bash", "_wsfs()"),
        ("zsh", "#compdef wsfs"),
        ("fish", "complete -c wsfs"),
    ] {
        let run = wsfs_with(None, &["completions", shell], b"", "http://127.0.0.1:1");
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(
            run.stdout.contains(marker),
            "{shell}: {}",
            &run.stdout[..200.min(run.stdout.len())]
        );
        assert!(
            run.stdout.contains("snapshot"),
            "{shell}: subcommands are completed"
        );
    }
    let bad = wsfs_with(None, &["completions", "cmd.exe"], b"", "http://127.0.0.1:1");
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

// --- help -------------------------------------------------------------

#[test]
fn the_readme_library_example_is_the_compiled_one() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../examples/library.rs");
    let section = readme
        .split("### From Rust")
        .nth(1)
        .expect("the README's Rust section");
    let block = section
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its Rust block");
    assert_eq!(
        block, example,
        "README and client/examples/library.rs differ"
    );
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    let commands: &[&[&str]] = &[
        &[],
        &["session", "create"],
        &["completions"],
        &["use"],
        &["session", "list"],
        &["session", "show"],
        &["session", "rm"],
        &["ls"],
        &["cat"],
        &["get"],
        &["put"],
        &["write"],
        &["append"],
        &["edit"],
        &["rm"],
        &["mkdir"],
        &["mv"],
        &["cp"],
        &["stat"],
        &["glob"],
        &["grep"],
        &["watch"],
        &["snapshot", "create"],
        &["snapshot", "list"],
        &["snapshot", "restore"],
        &["snapshot", "rm"],
        &["snapshot", "diff"],
        &["export"],
        &["import"],
        &["token", "issue"],
        &["pull"],
        &["push"],
        &["session"],
        &["snapshot"],
        &["token"],
        &["tree"],
        &["du"],
        &["head"],
        &["tail"],
        &["touch"],
        &["version"],
        &["doctor"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let run = wsfs_with(None, &args, b"", server_url()).ok();
        assert!(
            run.stdout.contains("Example:\n  wsfs ") || run.stdout.contains("Examples:\n  wsfs "),
            "`wsfs {}` has no example:\n{}",
            args.join(" "),
            run.stdout
        );
    }
}

// --- TLS ----------------------------------------------------------------

/// A TLS server with a self-signed certificate made here (marked as a CA
/// when `ca_marked`, as `openssl req -x509` makes them), and the file to
/// trust it.
fn tls_server_with(ca_marked: bool) -> (String, tempfile::TempDir) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    if ca_marked {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    let signing_key = rcgen::KeyPair::generate().unwrap();
    let made = params.self_signed(&signing_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.pem()).unwrap();
    std::fs::write(&key, signing_key.serialize_pem()).unwrap();
    let data_dir = dir.path().join("data");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let mut config = wsfs_server::ServerConfig::for_tests(data_dir);
            config.tls_cert = Some(cert);
            config.tls_key = Some(key);
            tx.send(format!("https://localhost:{port}")).unwrap();
            let _ = wsfs_server::serve(config, listener, std::future::pending()).await;
        });
    });
    (rx.recv().unwrap(), dir)
}

fn tls_server() -> (String, tempfile::TempDir) {
    tls_server_with(false)
}

#[test]
fn a_certificate_marked_as_a_ca_is_refused_once_with_what_to_do() {
    let (url, dir) = tls_server_with(true);
    let ca = dir.path().join("cert.pem");
    let out = Command::new(env!("CARGO_BIN_EXE_wsfs"))
        .args(["session", "list"])
        .env("WSFS_SERVER", &url)
        .env("WSFS_CA", &ca)
        .env("WSFS_CONFIG", dir.path().join("none.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("CaUsedAsEndEntity").count(),
        1,
        "the cause is said once: {stderr}"
    );
    assert!(stderr.contains("CA:FALSE"), "{stderr}");
    assert!(!stderr.contains("is wsfs-server running"), "{stderr}");
}

#[test]
fn an_https_server_is_reached_with_wsfs_ca() {
    let (url, dir) = tls_server();
    let ca = dir.path().join("cert.pem");
    let run = |args: &[&str], ca: Option<&Path>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wsfs"));
        command
            .args(args)
            .env_remove("WSFS_SESSION")
            .env_remove("WSFS_TOKEN")
            .env_remove("WSFS_CA")
            .env("WSFS_SERVER", &url);
        if let Some(ca) = ca {
            command.env("WSFS_CA", ca);
        }
        command.output().unwrap()
    };
    let created = run(&["session", "create"], Some(&ca));
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let id = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(id.len(), 36);

    // Without --ca the system's authorities decide, and they do not know
    // a self-signed certificate: refused, with what to do.
    let refused = run(&["session", "list"], None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    // In plain words, not the TLS library's enum.
    assert!(
        stderr.contains("an authority this client does not trust"),
        "{stderr}"
    );
    assert!(!stderr.contains("UnknownIssuer"), "{stderr}");
    assert!(stderr.contains("WSFS_CA"), "{stderr}");

    // A certificate the system trusts (SSL_CERT_FILE stands in for the
    // system's store here) needs no --ca.
    let trusted = Command::new(env!("CARGO_BIN_EXE_wsfs"))
        .args(["session", "list", "-q"])
        .env("WSFS_SERVER", &url)
        .env_remove("WSFS_CA")
        .env("SSL_CERT_FILE", &ca)
        .env("WSFS_CONFIG", dir.path().join("none.json"))
        .output()
        .unwrap();
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert!(String::from_utf8_lossy(&trusted.stdout).contains(&id));
}

// --- modes ------------------------------------------------------------

#[test]
fn chmod_sets_octal_bits_and_toggles_execute_and_ls_and_stat_show_them() {
    let ws = Workspace::new();
    ws.run(&["write", "bin/run.sh", "#!/bin/sh\n"]).ok();
    assert!(ws
        .run(&["stat", "bin/run.sh"])
        .ok()
        .stdout
        .contains("mode:     rw-r--r-- (0644)"));

    let set = ws.run(&["chmod", "750", "bin/run.sh"]).ok();
    assert_eq!(set.stdout, "rwxr-x--- bin/run.sh\n");
    ws.run(&["chmod", "-x", "bin/run.sh"]).ok();
    let listed = ws.run(&["ls", "-l", "bin"]).ok().stdout;
    assert!(listed.starts_with("-rw-r----- "), "{listed}");
    ws.run(&["chmod", "+x", "bin/run.sh"]).ok();
    let stat = ws.run(&["stat", "bin/run.sh", "--json"]).ok().json();
    assert_eq!(stat["permissions"], 0o751);
    assert_eq!(stat["mode"], "rwxr-x--x");
    let dir = ws.run(&["ls", "-l"]).ok().stdout;
    assert!(dir.starts_with("drwxr-xr-x "), "{dir}");

    // setuid is refused before anything is sent, and nothing changed.
    let refused = ws.run(&["chmod", "4755", "bin/run.sh"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("setuid"), "{}", refused.stderr);
    let stat = ws.run(&["stat", "bin/run.sh", "--json"]).ok().json();
    assert_eq!(stat["permissions"], 0o751);
}

#[test]
fn push_and_pull_keep_modes_and_times_and_name_each_skipped_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    write_tree(&local, &[("run.sh", "#!/bin/sh\n"), ("notes.txt", "n")]);
    let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    let script = local.join("run.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&script)
        .unwrap()
        .set_modified(then)
        .unwrap();
    std::os::unix::fs::symlink("notes.txt", local.join("link")).unwrap();

    let pushed = ws.run(&["push", local.to_str().unwrap(), "p"]).ok();
    assert!(
        pushed.stdout.contains("skipped symlink link\n"),
        "{}",
        pushed.stdout
    );
    assert!(
        pushed.stdout.contains("1 symlinks skipped"),
        "{}",
        pushed.stdout
    );
    let stat = ws.run(&["stat", "p/run.sh", "--json"]).ok().json();
    assert_eq!(stat["permissions"], 0o755);

    // Only the bits changed: the next push sends the file again.
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let again = ws
        .run(&["push", local.to_str().unwrap(), "p", "--json"])
        .ok()
        .json();
    assert_eq!(again["transferred"], 1, "{again}");
    let stat = ws.run(&["stat", "p/run.sh", "--json"]).ok().json();
    assert_eq!(stat["permissions"], 0o700);

    let back = dir.path().join("back");
    ws.run(&["pull", "p", back.to_str().unwrap()]).ok();
    let meta = std::fs::metadata(back.join("run.sh")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.modified().unwrap(), then);
    let notes = std::fs::metadata(back.join("notes.txt")).unwrap();
    assert_eq!(notes.permissions().mode() & 0o777, 0o644);
}

#[test]
fn session_recover_reaches_the_server_which_says_it_has_no_object_store() {
    let id = "00000000-0000-4000-8000-000000000000";
    let refused = wsfs_with(
        None,
        &["session", "recover", id, "--snapshot", id, "--force"],
        b"",
        server_url(),
    )
    .fails_with("FAILED_PRECONDITION");
    assert!(
        refused.stderr.contains("object store"),
        "{}",
        refused.stderr
    );
    let missing = wsfs_with(None, &["session", "recover"], b"", server_url());
    assert_eq!(missing.code, 2, "{}", missing.stderr);
}

// --- mount ------------------------------------------------------------

/// Whether this machine can mount: /dev/fuse, and root or fusermount3.
fn can_mount() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let fusermount = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join("fusermount3").is_file())
    });
    if Path::new("/dev/fuse").exists() && (root || fusermount) {
        return true;
    }
    assert!(
        std::env::var("WSFS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "WSFS_REQUIRE_TOOLS=1 and this machine cannot mount (no /dev/fuse, or not root and no fusermount3)"
    );
    eprintln!("skipping: no /dev/fuse, or not root and no fusermount3");
    false
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    let dir = dir.display().to_string();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir.as_str()))
}

/// Waits (generously) for `done`; false when it never happened.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn mount_runs_until_unmount_or_sigterm_and_commits_what_programs_wrote() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let config = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-saved-context.json");
    for stop in ["unmount", "sigterm"] {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = dir.path().canonicalize().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wsfs"))
            .env("WSFS_CONFIG", &config)
            .env("WSFS_SERVER", server_url())
            .env("WSFS_SESSION", &ws.id)
            .arg("mount")
            .arg(&dir_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run wsfs mount");
        let mounted = wait_for(|| is_mounted(&dir_path) || child.try_wait().unwrap().is_some());
        assert!(
            mounted && is_mounted(&dir_path),
            "{stop}: the mount never appeared"
        );
        let file = format!("from-{stop}.txt");
        std::fs::write(dir_path.join(&file), format!("written before {stop}\n")).unwrap();
        match stop {
            "unmount" => {
                let run = wsfs_with(
                    None,
                    &["unmount", dir_path.to_str().unwrap()],
                    b"",
                    server_url(),
                );
                assert!(run.ok().stdout.contains("unmounted"));
            }
            _ => {
                // SAFETY: signals a child this test started and still owns.
                assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
            }
        }
        let exited = wait_for(|| child.try_wait().unwrap().is_some());
        if !exited {
            let _ = child.kill();
            panic!("{stop}: wsfs mount did not exit");
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{stop}: wsfs mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("mounted session"));
        assert!(!is_mounted(&dir_path), "{stop}: still mounted");
        assert_eq!(ws.cat(&file), format!("written before {stop}\n"));
    }
    let not_mounted = tempfile::tempdir().unwrap();
    let run = wsfs_with(
        None,
        &["unmount", not_mounted.path().to_str().unwrap()],
        b"",
        server_url(),
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("is not a mount point"),
        "{}",
        run.stderr
    );
}
