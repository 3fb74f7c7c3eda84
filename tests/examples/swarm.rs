//! The three-agent swarm of `wsfs_tests::swarm` against an in-process
//! server with tokens on: `cargo run -p wsfs-tests --example swarm -- [TASKS]`.
//! Prints each task's result and which worker did it.

use wsfs_tests::harness::TestServer;

const ADMIN: &str = "admin-token-for-the-swarm-example";

#[tokio::main]
async fn main() -> wsfs_client::Result<()> {
    let tasks = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let server = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    for (task, result) in wsfs_tests::swarm::run(&server.url(), ADMIN, tasks).await? {
        println!("{task}: {result}");
    }
    Ok(())
}
