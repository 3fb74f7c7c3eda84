//! `wsfs-server --stdio DIR`, built in this package: the container tests
//! run it inside their sandbox, and a package's tests can only name the
//! binaries it builds itself.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = wsfs_server::ServerConfig::parse();
    let Some(dir) = config.stdio.clone() else {
        eprintln!("wsfs-stdio: pass --stdio DIR");
        return std::process::ExitCode::from(2);
    };
    wsfs_server::stdio::run_stdio(config, dir).await
}
