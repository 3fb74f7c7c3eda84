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

#[test]
fn the_binary_starts_on_a_public_address_with_an_admin_token() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wsfs-server"))
        .args(["--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env("WSFS_ADMIN_TOKEN", "admin-token-for-tests-0123456789")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        line.contains("listening on 0.0.0.0:") && line.contains("tokens on"),
        "{line}"
    );
}
