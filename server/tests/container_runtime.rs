//! The real binary as both ends of a CONTAINER session: a runtime whose
//! template runs `{wsfs} --stdio {workdir}` (the server's own executable,
//! no sandbox), configured through the environment as an operator would.

use std::io::BufRead;
use wsfs_client::{Client, SessionOptions};

/// Kills the server when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_server_runs_itself_inside_through_the_wsfs_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let container = dir.path().join("container");
    std::fs::create_dir(&container).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wsfs-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env(
            "WSFS_CONTAINER_RUNTIME",
            "other=false {name};direct={wsfs} --stdio {workdir}",
        )
        .env_remove("WSFS_ADMIN_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    let addr = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let client = Client::connect(&format!("http://{addr}")).await.unwrap();

    let workdir = std::fs::canonicalize(&container).unwrap();
    let info = client
        .create_session(SessionOptions::container(
            "direct",
            "local",
            workdir.display().to_string(),
        ))
        .await
        .unwrap();
    let session = client.session(&info.id);
    session
        .write_str("made/here.txt", "inside\n")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(container.join("made/here.txt")).unwrap(),
        "inside\n"
    );

    // Both runtimes came from the one variable; `false` exits at once.
    let err = client
        .create_session(SessionOptions::container("other", "local", "/"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "UNAVAILABLE", "{err}");
    assert!(err.to_string().contains("'other'"), "{err}");
}
