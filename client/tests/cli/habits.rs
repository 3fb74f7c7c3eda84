//! The habits of the tools `wsfs` resembles (coreutils, grep, rg, tar,
//! rclone), errors that name the real cause and the flag that fixes it,
//! and push/pull/import that go on past what fails: each on the real
//! binary against the test servers.

use super::{
    server_url, tls_server, token_server, write_tree, wsfs_token, wsfs_with, Workspace, ADMIN_TOKEN,
};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// A session with these extra `session create` flags; its id.
fn session_with(flags: &[&str]) -> String {
    let mut args = vec!["session", "create", "--json"];
    args.extend_from_slice(flags);
    let created = wsfs_with(None, &args, b"", server_url()).ok().json();
    created["session_id"].as_str().unwrap().to_string()
}

/// `dir/deep/d1/.../d20/f.txt`: a chain of 21 directories.
fn deep_chain(root: &std::path::Path) -> String {
    let mut rel = String::from("deep");
    for i in 1..=20 {
        rel.push_str(&format!("/d{i}"));
    }
    write_tree(root, &[(&format!("{rel}/f.txt"), "deep")]);
    rel
}

#[test]
fn push_goes_on_past_a_directory_over_the_session_depth_and_reports_it() {
    let id = session_with(&["--max-path-depth", "16"]);
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("ok/x.txt", "x"), ("z.txt", "z")]);
    deep_chain(dir.path());
    let src = dir.path().to_str().unwrap();
    let run = wsfs_with(Some(&id), &["push", src, "proj"], b"", server_url());
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    // The other files are there.
    let cat = |path: &str| wsfs_with(Some(&id), &["cat", path], b"", server_url());
    assert_eq!(cat("proj/z.txt").ok().stdout, "z");
    assert_eq!(cat("proj/ok/x.txt").ok().stdout, "x");
    assert!(run.stdout.contains("transferred 2 files"), "{}", run.stdout);
    assert!(run.stdout.contains("1 failed"), "{}", run.stdout);
    // The one directory that could not be made is named once, with the
    // flag that raises the limit and what was left beneath it.
    assert_eq!(
        run.stderr.matches("INVALID_PATH").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("/d15: INVALID_PATH"), "{}", run.stderr);
    assert!(run.stderr.contains("--max-path-depth"), "{}", run.stderr);
    assert!(
        run.stderr.contains("6 entries beneath it not transferred"),
        "{}",
        run.stderr
    );
    // Again, as JSON: the same failure, nothing else to transfer.
    let again = wsfs_with(
        Some(&id),
        &["push", src, "proj", "--json"],
        b"",
        server_url(),
    );
    assert_eq!(again.code, 1, "{}", again.stderr);
    let summary = again.json();
    assert_eq!(summary["unchanged"], 2, "{summary}");
    assert_eq!(summary["failed"].as_array().unwrap().len(), 1, "{summary}");
    assert_eq!(summary["failed"][0]["reason"], "INVALID_PATH", "{summary}");
    assert_eq!(summary["failed"][0]["not_tried_beneath"], 6, "{summary}");
    assert_eq!(summary["directories_created"], 0, "{summary}");
}

#[test]
fn pull_goes_on_past_a_directory_it_cannot_make_here() {
    // Sixteen 250-character names under a local directory of a 200-byte
    // name: a local path longer than the system allows (PATH_MAX, 4096
    // bytes), whoever runs the test.
    let id = session_with(&["--max-path-depth", "32", "--max-segment-length", "255"]);
    let long: Vec<String> = (0..16)
        .map(|i| format!("{i:02}{}", "n".repeat(248)))
        .collect();
    let deep = format!("far/{}", long.join("/"));
    let run = |args: &[&str], stdin: &[u8]| wsfs_with(Some(&id), args, stdin, server_url());
    run(&["write", &format!("{deep}/f.txt"), "far"], b"").ok();
    run(&["write", "a.txt", "a"], b"").ok();
    run(&["write", "b/c.txt", "c"], b"").ok();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("l".repeat(200));
    let pulled = run(&["pull", "", local.to_str().unwrap()], b"");
    assert_eq!(pulled.code, 1, "{}\n{}", pulled.stdout, pulled.stderr);
    assert_eq!(std::fs::read_to_string(local.join("a.txt")).unwrap(), "a\n");
    assert_eq!(
        std::fs::read_to_string(local.join("b/c.txt")).unwrap(),
        "c\n"
    );
    assert!(pulled.stderr.contains("cannot create"), "{}", pulled.stderr);
    assert!(
        pulled.stdout.contains("transferred 2 files"),
        "{}",
        pulled.stdout
    );
    assert!(pulled.stdout.contains("1 failed"), "{}", pulled.stdout);
}

#[test]
fn import_of_an_ordinary_archive_goes_on_past_a_refused_file() {
    let id = session_with(&["--max-path-depth", "16"]);
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    write_tree(&tree, &[("ok/x.txt", "x"), ("z.txt", "z")]);
    deep_chain(&tree);
    let archive = dir.path().join("t.tar");
    let status = Command::new("tar")
        .arg("cf")
        .arg(&archive)
        .arg("-C")
        .arg(&tree)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success());
    let run = wsfs_with(
        Some(&id),
        &["import", archive.to_str().unwrap()],
        b"",
        server_url(),
    );
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("INVALID_PATH"), "{}", run.stderr);
    assert!(run.stdout.contains("2 files"), "{}", run.stdout);
    let cat = |path: &str| wsfs_with(Some(&id), &["cat", path], b"", server_url());
    assert_eq!(cat("z.txt").ok().stdout, "z");
    assert_eq!(cat("ok/x.txt").ok().stdout, "x");
}

/// The same small tree as a plain zip, a tar and a gzipped tar, each with
/// its files under `pkg-1.0/`, made with the zip, tar and flate2 crates.
fn archives(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let files = [
        ("pkg-1.0/README", "readme\n"),
        ("pkg-1.0/src/lib.rs", "fn f() {}\n"),
    ];
    let zip_path = dir.join("pkg.zip");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&zip_path).unwrap());
    for (name, text) in files {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(0o755);
        zip.start_file(name, options).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
    }
    zip.finish().unwrap();
    let tar_bytes = {
        let mut tar = tar::Builder::new(Vec::new());
        for (name, text) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o640);
            header.set_cksum();
            tar.append_data(&mut header, name, text.as_bytes()).unwrap();
        }
        tar.into_inner().unwrap()
    };
    let tar_path = dir.join("pkg.tar");
    std::fs::write(&tar_path, &tar_bytes).unwrap();
    let gz_path = dir.join("pkg.tar.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz_path).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(&tar_bytes).unwrap();
    gz.finish().unwrap();
    vec![zip_path, tar_path, gz_path]
}

#[test]
fn import_takes_plain_zips_tars_and_gzipped_tars_with_strip_components_and_prefix() {
    let ws = Workspace::new();
    ws.run(&["write", "kept.txt", "kept"]).ok();
    let dir = tempfile::tempdir().unwrap();
    for (i, archive) in archives(dir.path()).iter().enumerate() {
        let prefix = format!("vendor/{i}");
        let run = ws
            .run(&[
                "import",
                archive.to_str().unwrap(),
                "--strip-components",
                "1",
                "--prefix",
                &prefix,
            ])
            .ok();
        assert!(run.stdout.contains("2 files"), "{}", run.stdout);
        assert_eq!(ws.cat(&format!("{prefix}/README")), "readme\n");
        assert_eq!(ws.cat(&format!("{prefix}/src/lib.rs")), "fn f() {}\n");
    }
    // As tar extracts: the rest of the workspace stays.
    assert_eq!(ws.cat("kept.txt"), "kept\n");
    // Modes come along (the zip's 755, the tar's 640).
    let zipped = ws.run(&["stat", "vendor/0/README", "--json"]).ok().json();
    assert_eq!(zipped["mode"], "rwxr-xr-x");
    let tarred = ws.run(&["stat", "vendor/1/README", "--json"]).ok().json();
    assert_eq!(tarred["mode"], "rw-r-----");
    // Without options the archive's own paths; a gzipped tar from stdin.
    let gz = std::fs::read(dir.path().join("pkg.tar.gz")).unwrap();
    ws.run_with_stdin(&["import", "-"], &gz).ok();
    assert_eq!(ws.cat("pkg-1.0/README"), "readme\n");
    // Something that is no archive: refused, nothing changed.
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"not an archive at all").unwrap();
    let refused = ws
        .run(&["import", junk.to_str().unwrap()])
        .fails_with("INVALID_ARGUMENT");
    assert!(
        refused.stderr.contains("not a zip, a tar"),
        "{}",
        refused.stderr
    );
    // A wsfs archive still replaces the workspace whole.
    let exported = dir.path().join("ws.zip");
    ws.run(&["export", exported.to_str().unwrap()]).ok();
    ws.run(&["write", "later.txt", "later"]).ok();
    ws.run(&["import", exported.to_str().unwrap()]).ok();
    ws.run(&["stat", "later.txt"]).fails_with("FILE_NOT_FOUND");
    assert_eq!(ws.cat("kept.txt"), "kept\n");
}

#[test]
fn rm_of_a_directory_needs_r_and_goes_on_to_the_other_paths() {
    let ws = Workspace::new();
    ws.run(&["mkdir", "empty"]).ok();
    ws.run(&["write", "a.txt", "a"]).ok();
    let refused = ws
        .run(&["rm", "empty", "a.txt"])
        .fails_with("IS_A_DIRECTORY");
    assert!(refused.stderr.contains("-r"), "{}", refused.stderr);
    ws.run(&["stat", "a.txt"]).fails_with("FILE_NOT_FOUND");
    ws.run(&["stat", "empty"]).ok();
    ws.run(&["rm", "-r", "empty"]).ok();
    ws.run(&["stat", "empty"]).fails_with("FILE_NOT_FOUND");
}

#[test]
fn combined_short_flags_grep_rn_and_ls_la_are_accepted() {
    let ws = Workspace::new();
    ws.run(&["write", "src/.hidden.rs", "fn main() {}"]).ok();
    let grep = ws.run(&["grep", "-rn", "main", "src"]).ok();
    assert_eq!(grep.stdout, "src/.hidden.rs:1:fn main() {}\n");
    let ls = ws.run(&["ls", "-la", "src"]).ok();
    assert!(ls.stdout.contains(".hidden.rs"), "{}", ls.stdout);
    assert!(ls.stdout.starts_with("-rw-r--r--"), "{}", ls.stdout);
}

#[test]
fn cp_of_a_local_file_says_it_is_local_and_points_to_put() {
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("local.txt");
    std::fs::write(&file, "here").unwrap();
    let refused = ws
        .run(&["cp", file.to_str().unwrap(), "x"])
        .fails_with("FILE_NOT_FOUND");
    assert!(
        refused.stderr.contains("on this machine"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("wsfs put"), "{}", refused.stderr);
    // A path that is nowhere: the plain refusal.
    let nowhere = ws
        .run(&["cp", "no/such/file", "x"])
        .fails_with("FILE_NOT_FOUND");
    assert!(!nowhere.stderr.contains("wsfs put"), "{}", nowhere.stderr);
}

/// `wsfs ARGS` (a watch) on `session`, and its lines other than
/// KEEPALIVE as they come.
fn watching(
    session: &str,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_wsfs"))
        .args(args)
        .env("WSFS_SERVER", server_url())
        .env("WSFS_SESSION", session)
        .env_remove("WSFS_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if !line.contains("KEEPALIVE") && tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn watch_since_0_replays_from_the_first_event() {
    let ws = Workspace::new();
    ws.run(&["write", "first.txt", "1"]).ok();
    ws.run(&["write", "second.txt", "2"]).ok();
    let watch = |args: &[&str]| {
        // Lines as they come, until three or a generous deadline (a
        // watch that replays nothing would otherwise wait forever).
        let (mut child, rx) = watching(&ws.id, args);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut lines = Vec::new();
        while lines.len() < 3 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        child.kill().unwrap();
        let _ = child.wait();
        lines
    };
    // A line's seq, and the rest of it.
    let seq = |line: &str| -> (u64, String) {
        let (seq, rest) = line.split_once(' ').unwrap();
        (seq.parse().unwrap(), rest.to_string())
    };
    let all = watch(&["watch", "--since", "0"]);
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all[0].contains("READY"), "{all:?}");
    let (first, rest) = seq(&all[1]);
    assert!(rest.starts_with("CREATED first.txt"), "{all:?}");
    assert_eq!(seq(&all[2]).0, first + 1, "{all:?}");
    assert!(seq(&all[2]).1.starts_with("CREATED second.txt"), "{all:?}");
    // The first event is filtered as the stream filters the rest.
    ws.run(&["write", "third.txt", "3"]).ok();
    let some = watch(&["watch", "--since", "0", "-g", "{second,third}.txt"]);
    assert_eq!(some.len(), 3, "{some:?}");
    assert_eq!(
        (seq(&some[1]).0, seq(&some[2]).0),
        (first + 1, first + 2),
        "{some:?}"
    );
    assert!(
        seq(&some[1]).1.starts_with("CREATED second.txt"),
        "{some:?}"
    );
    assert!(seq(&some[2]).1.starts_with("CREATED third.txt"), "{some:?}");
}

/// `--since 0` on a session with no change yet: READY, then each change
/// as it comes (the watch from the log's beginning is the watch from now).
#[test]
fn watch_since_0_of_an_unchanged_session_follows_what_comes() {
    let ws = Workspace::new();
    let (mut child, rx) = watching(&ws.id, &["watch", "--since", "0"]);
    let wait = std::time::Duration::from_secs(60);
    let ready = rx.recv_timeout(wait).expect("READY within a minute");
    assert!(ready.contains("READY"), "{ready}");
    ws.run(&["write", "late.txt", "1"]).ok();
    let change = rx.recv_timeout(wait).expect("the change within a minute");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(change.contains("CREATED late.txt"), "{change}");
}

/// Runs `wsfs args` with its stdout a pipe whose reader is gone before
/// anything is written.
fn into_closed_pipe(session: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsfs"));
    command
        .args(args)
        .env("WSFS_SERVER", server_url())
        .env_remove("WSFS_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(session) = session {
        command.env("WSFS_SESSION", session);
    }
    let mut child = command.spawn().unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code().unwrap_or(-1), stderr)
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let (code, stderr) = into_closed_pipe(None, &["completions", "bash"]);
    assert_eq!((code, stderr.as_str()), (0, ""), "completions");
    let ws = Workspace::new();
    let big = "line\n".repeat(400_000);
    ws.run_with_stdin(&["write", "big.txt"], big.as_bytes())
        .ok();
    for args in [
        &["cat", "big.txt"][..],
        &["cat", "--bytes", "big.txt"],
        &["export", "-"],
    ] {
        let (code, stderr) = into_closed_pipe(Some(&ws.id), args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}");
    }
}

#[test]
fn tree_du_head_tail_and_touch() {
    let ws = Workspace::new();
    ws.run(&["write", "src/main.rs", "fn main() {}"]).ok();
    ws.run(&["write", "src/util/mod.rs", "pub mod x;"]).ok();
    let lines: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    ws.run_with_stdin(&["write", "log.txt"], lines.as_bytes())
        .ok();
    let tree = ws.run(&["tree", "src"]).ok();
    assert_eq!(
        tree.stdout,
        "src\n├── main.rs\n└── util/\n    └── mod.rs\n\n1 directory, 2 files\n"
    );
    let du = ws.run(&["du"]).ok();
    assert_eq!(
        du.stdout,
        format!("11\tsrc/util\n24\tsrc\n{}\t/\n", 24 + lines.len())
    );
    let total = ws.run(&["du", "-d", "0", "src"]).ok();
    assert_eq!(total.stdout, "24\tsrc\n");
    assert_eq!(
        ws.run(&["head", "-n", "2", "log.txt"]).ok().stdout,
        "line 1\nline 2\n"
    );
    assert_eq!(
        ws.run(&["tail", "-n", "2", "log.txt"]).ok().stdout,
        "line 29\nline 30\n"
    );
    assert_eq!(ws.run(&["head", "log.txt"]).ok().stdout.lines().count(), 10);
    assert_eq!(ws.run(&["head", "-n", "0", "log.txt"]).ok().stdout, "");
    assert_eq!(ws.run(&["tail", "-n", "0", "log.txt"]).ok().stdout, "");
    ws.run(&["touch", "new.txt"]).ok();
    assert_eq!(ws.cat("new.txt"), "");
    let before = ws.run(&["stat", "--json", "log.txt"]).ok().json();
    ws.run(&["touch", "log.txt"]).ok();
    let after = ws.run(&["stat", "--json", "log.txt"]).ok().json();
    assert_ne!(
        before["version"], after["version"],
        "touch changes the time"
    );
    assert_eq!(ws.cat("log.txt"), lines, "and nothing else");
    ws.run(&["touch", "-c", "absent.txt"]).ok();
    ws.run(&["stat", "absent.txt"]).fails_with("FILE_NOT_FOUND");
}

#[test]
fn ls_long_aligns_columns_whatever_the_widths() {
    let created = wsfs_with(
        None,
        &["session", "create", "--directory", "--json"],
        b"",
        server_url(),
    )
    .ok()
    .json();
    let id = created["session_id"].as_str().unwrap();
    let run = |args: &[&str], stdin: &[u8]| wsfs_with(Some(id), args, stdin, server_url());
    run(&["write", "a.txt", "a"], b"").ok();
    run(&["write", "big.txt"], &vec![b'x'; 123_456]).ok();
    run(&["mkdir", "dir"], b"").ok();
    let listed = run(&["ls", "-l"], b"").ok();
    let name_at: Vec<usize> = listed
        .stdout
        .lines()
        .map(|l| l.rfind(' ').unwrap())
        .collect();
    assert_eq!(name_at.len(), 3, "{}", listed.stdout);
    assert!(
        name_at.iter().all(|&n| n == name_at[0]),
        "{}",
        listed.stdout
    );
    let version_at: Vec<usize> = listed
        .stdout
        .lines()
        .map(|l| l.find(" v").unwrap())
        .collect();
    assert!(
        version_at.iter().all(|&n| n == version_at[0]),
        "{}",
        listed.stdout
    );
}

#[test]
fn put_over_the_write_limit_names_the_files_size_and_the_flag() {
    let id = session_with(&["--max-write-bytes", "1M"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.bin");
    std::fs::write(&file, vec![7u8; 5 << 20]).unwrap();
    let refused = wsfs_with(
        Some(&id),
        &["put", file.to_str().unwrap(), "big.bin"],
        b"",
        server_url(),
    )
    .fails_with("TOO_LARGE");
    assert!(
        refused.stderr.contains("writing 5242880 bytes"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("1048576"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--max-write-bytes"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("smaller range"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_path_over_the_session_limits_names_the_flag_that_raises_them() {
    let ws = Workspace::new();
    let deep = (0..20)
        .map(|i| format!("d{i}"))
        .collect::<Vec<_>>()
        .join("/");
    let refused = ws.run(&["write", &deep, "x"]).fails_with("INVALID_PATH");
    assert!(
        refused.stderr.contains("--max-path-depth"),
        "{}",
        refused.stderr
    );
    let long = "n".repeat(100);
    let refused = ws.run(&["write", &long, "x"]).fails_with("INVALID_PATH");
    assert!(
        refused.stderr.contains("--max-segment-length"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_session_token_on_session_list_is_told_the_admin_token_is_needed() {
    let (server, _dir) = token_server();
    let created = wsfs_token(&server, ADMIN_TOKEN, None, &["session", "create", "--json"])
        .ok()
        .json();
    let token = created["token"].as_str().unwrap();
    let refused =
        wsfs_token(&server, token, None, &["session", "list"]).fails_with("UNAUTHENTICATED");
    assert!(refused.stderr.contains("admin token"), "{}", refused.stderr);
    assert!(
        !refused.stderr.contains("set WSFS_TOKEN"),
        "{}",
        refused.stderr
    );
    // One line, in the CLI's words (not the header to send), with the
    // command that serves a session's token.
    assert_eq!(
        refused.stderr,
        "wsfs: UNAUTHENTICATED: listing sessions needs the server's admin token, and the token \
         sent (WSFS_TOKEN or --token) is not it: a session's token opens that one session \
         (`wsfs session show` shows it)\n"
    );
    // That command works with the token alone.
    let shown = wsfs_token(&server, token, None, &["session", "show", "--json"])
        .ok()
        .json();
    assert_eq!(shown["session_id"], created["session_id"]);
    // Without any token: set it, in one line.
    let refused = wsfs_with(None, &["session", "list"], b"", &server).fails_with("UNAUTHENTICATED");
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("set WSFS_TOKEN"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_missing_session_points_to_recover_as_well_as_create() {
    let refused = wsfs_with(
        Some("00000000-0000-4000-8000-000000000000"),
        &["ls"],
        b"",
        server_url(),
    )
    .fails_with("SESSION_NOT_FOUND");
    assert!(
        refused.stderr.contains("wsfs session recover"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("wsfs session create"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_plaintext_client_against_a_tls_server_is_told_to_use_https() {
    let (url, _dir) = tls_server();
    let plain = url.replace("https://", "http://");
    let refused = wsfs_with(None, &["session", "list"], b"", &plain).fails_with("UNAVAILABLE");
    assert!(refused.stderr.contains("speaks TLS"), "{}", refused.stderr);
    assert!(refused.stderr.contains(&url), "{}", refused.stderr);
    assert!(refused.stderr.contains("--ca"), "{}", refused.stderr);
    // And a TLS client against a plaintext server.
    let tls = server_url().replace("http://", "https://");
    let refused = wsfs_with(None, &["session", "list"], b"", &tls).fails_with("UNAVAILABLE");
    assert!(
        refused.stderr.contains("does not speak TLS"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("http://"), "{}", refused.stderr);
}

#[test]
fn version_and_doctor_say_what_works_and_what_to_fix() {
    let version = wsfs_with(None, &["version"], b"", server_url()).ok();
    assert!(
        version
            .stdout
            .starts_with(&format!("wsfs {}\n", env!("CARGO_PKG_VERSION"))),
        "{}",
        version.stdout
    );
    assert!(version.stdout.contains("reachable"), "{}", version.stdout);
    let healthy = wsfs_with(None, &["doctor"], b"", server_url()).ok();
    assert!(healthy.stdout.contains("plaintext"), "{}", healthy.stdout);
    let reported = format!("(wsfs-server {})", env!("CARGO_PKG_VERSION"));
    assert!(healthy.stdout.contains(&reported), "{}", healthy.stdout);
    assert!(
        healthy.stdout.contains("tokens       off"),
        "{}",
        healthy.stdout
    );
    assert!(
        healthy.stdout.contains("object store off"),
        "{}",
        healthy.stdout
    );
    assert!(
        healthy.stdout.contains("containers   none"),
        "{}",
        healthy.stdout
    );
    let (server, _dir) = token_server();
    let admin = wsfs_token(&server, ADMIN_TOKEN, None, &["doctor", "--json"])
        .ok()
        .json();
    assert_eq!(admin["ok"], true, "{admin}");
    // A refused call names the server's version too.
    let refused = wsfs_token(&server, "wsfs_not_a_token", None, &["version"]).ok();
    assert!(refused.stdout.contains(&reported), "{}", refused.stdout);
    let bad = wsfs_token(&server, "wsfs_not_a_token", None, &["doctor"]);
    assert_eq!(bad.code, 1, "{}", bad.stdout);
    assert!(bad.stdout.contains("FAIL token"), "{}", bad.stdout);
    assert!(bad.stdout.contains("fix: "), "{}", bad.stdout);
    let down = wsfs_with(None, &["doctor"], b"", "http://127.0.0.1:9");
    assert_eq!(down.code, 1, "{}", down.stdout);
    assert!(
        down.stdout.contains("is wsfs-server running"),
        "{}",
        down.stdout
    );
}

#[test]
fn help_says_what_read_only_and_ignore_case_do_and_groups_have_examples() {
    let help = |args: &[&str]| wsfs_with(None, args, b"", server_url()).ok().stdout;
    assert!(help(&["session", "create", "--help"]).contains("Refuse every change"));
    assert!(help(&["grep", "--help"]).contains("either case"));
    for group in ["session", "snapshot", "token"] {
        let text = help(&[group, "--help"]);
        assert!(text.contains("Example"), "{group}: {text}");
    }
    assert!(help(&["session", "list", "--help"]).contains("proxy"));
    assert!(help(&["watch", "--help"]).contains("--since 0"));
    // Each command's own flags apart from the global ones.
    let grep = help(&["grep", "--help"]);
    let (own, global) = grep
        .split_once("Global options:")
        .expect("a global section");
    assert!(
        own.contains("--ignore-case") && !own.contains("--server"),
        "{grep}"
    );
    assert!(
        global.contains("--server") && !global.contains("--ignore-case"),
        "{grep}"
    );
}

#[test]
fn an_unavailable_from_a_running_server_does_not_ask_whether_it_runs() {
    // A server whose one container runtime cannot reach any container.
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
            config.container_runtimes = vec!["broken=false".parse().unwrap()];
            tx.send(format!("http://{addr}")).unwrap();
            let _ = wsfs_server::serve(config, listener, std::future::pending()).await;
        });
    });
    let server = rx.recv().unwrap();
    let args = [
        "session",
        "create",
        "--container",
        "box",
        "--runtime",
        "broken",
        "--workdir",
        "/srv",
    ];
    let doctor = wsfs_with(None, &["doctor"], b"", &server).ok();
    assert!(
        doctor.stdout.contains("containers   broken"),
        "{}",
        doctor.stdout
    );
    let refused = wsfs_with(None, &args, b"", &server).fails_with("UNAVAILABLE");
    assert!(
        !refused.stderr.contains("is wsfs-server running"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("is running but"),
        "{}",
        refused.stderr
    );
}

#[test]
fn push_goes_on_past_a_local_name_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Workspace::new();
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("ok.txt", "ok")]);
    let bad = dir.path().join(std::ffi::OsStr::from_bytes(b"bad\xff.txt"));
    std::fs::write(bad, "bad").unwrap();
    let run = ws.run(&["push", dir.path().to_str().unwrap(), "out"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("not a UTF-8 name"), "{}", run.stderr);
    assert!(run.stdout.contains("transferred 1 files"), "{}", run.stdout);
    assert_eq!(ws.cat("out/ok.txt"), "ok");
}
