//! The binary itself refuses to serve an open filesystem to the network.

#[test]
fn the_binary_refuses_tokens_off_on_a_public_address_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wsfs-server"))
        .args(["--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("WSFS_ADMIN_TOKEN")
        .env_remove("WSFS_INSECURE")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("without tokens") && stderr.contains("--admin-token"),
        "{stderr}"
    );
}

/// The first line the binary prints on stdout (where it listens) when
/// started on `listen` with the admin token `token` (none: tokens off).
fn listening_line(listen: &str, token: Option<&str>) -> String {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wsfs-server"));
    command
        .args(["--listen", listen, "--data-dir"])
        .arg(dir.path())
        .env_remove("WSFS_INSECURE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    match token {
        Some(token) => command.env("WSFS_ADMIN_TOKEN", token),
        None => command.env_remove("WSFS_ADMIN_TOKEN"),
    };
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    line
}

#[test]
fn the_binary_starts_on_a_public_address_with_an_admin_token() {
    let line = listening_line("0.0.0.0:0", Some("admin-token-for-tests-0123456789"));
    assert!(
        line.contains("listening on 0.0.0.0:") && line.contains("tokens on"),
        "{line}"
    );
}

#[test]
fn the_binary_listens_on_a_host_name_and_refuses_one_that_does_not_resolve() {
    // localhost is loopback, so tokens may be off.
    let line = listening_line("localhost:0", None);
    assert!(
        line.contains("listening on 127.0.0.1:") || line.contains("listening on [::1]:"),
        "{line}"
    );

    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wsfs-server"))
        .args(["--listen", "no such host:50051", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'no such host' does not resolve"),
        "{stderr}"
    );
}
