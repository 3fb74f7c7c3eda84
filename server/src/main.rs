//! The `wsfs-server` binary: parses flags, sets up logging, serves until
//! SIGINT or SIGTERM.

use clap::Parser;
use wsfs_server::config::{LogFormat, ServerConfig};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = ServerConfig::parse();
    // The filesystem watcher's own warnings (a watch descriptor already
    // gone with its directory) are routine here: errors only.
    // Inside a container (--stdio) every line on stderr is relayed to the
    // outer server's log: problems only, unless RUST_LOG asks for more.
    let default_filter = match config.stdio {
        Some(_) => "warn,notify=error",
        None => "info,notify=error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }

    if let Some(dir) = config.stdio.clone() {
        return wsfs_server::stdio::run_stdio(config, dir).await;
    }
    if let Err(why) = config.validate(config.listen) {
        eprintln!("wsfs-server: {why}");
        return std::process::ExitCode::from(2);
    }
    // Every connection and every DIRECTORY session holds descriptors.
    let open_files = wsfs_server::connections::raise_open_file_limit();
    tracing::info!(?open_files, "open-file limit");
    let listener = match wsfs_server::connections::listen(config.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("wsfs-server: cannot listen on {}: {e}", config.listen);
            return std::process::ExitCode::from(1);
        }
    };
    let addr = listener.local_addr().map_or(config.listen, |a| a);
    println!(
        "wsfs-server listening on {addr} (data dir {}, max write {} bytes, tokens {}, {})",
        config.data_dir.display(),
        config.max_write_bytes,
        if config.admin_token.is_some() {
            "on"
        } else {
            "off"
        },
        if config.tls_cert.is_some() {
            "TLS"
        } else {
            "plaintext"
        },
    );
    let http = match config.http.http_listen {
        Some(at) => match wsfs_server::bind_http(at).await {
            Ok(l) => {
                let shown = l.local_addr().map_or(at, |a| a);
                println!("wsfs-server serving DeepFabric's VFS API on http://{shown}");
                Some(l)
            }
            Err(e) => {
                eprintln!("wsfs-server: {e}");
                return std::process::ExitCode::from(1);
            }
        },
        None => None,
    };
    match wsfs_server::serve_with_http(config, listener, http, shutdown_signal()).await {
        Ok(()) => {
            tracing::info!("shut down cleanly");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wsfs-server: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested: ending Watch streams, finishing in-flight calls");
}
