//! DeepFabric's VFS API (`--http-listen`) beside gRPC on the same server:
//! `read_file` (the whole 6 KiB file) and `write_file` (1 KiB over the
//! client's own file) calls per second over `POST /vfs/execute`, by 1 and
//! by 16 clients, each client on a keep-alive connection of its own, beside
//! the same Read and Write calls over gRPC (each client on a channel of its
//! own) on one session of the same server. Target: at least 0.8x gRPC.

use crate::report::{Row, Samples, Target};
use crate::wire::{self, Fs};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use wsfs::proto;

/// The DeepFabric session the calls run in.
const SESSION: &str = "bench-http";
const FILE_NAME: &str = "notes.txt";
const FILE_LINES: usize = 100;
const WRITE_BYTES: usize = 1024;
const CLIENT_COUNTS: [usize; 2] = [1, 16];

#[derive(Debug, Clone, Copy)]
enum Call {
    Read,
    Write,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Read => "read_file (whole 100-line file)",
            Call::Write => "write_file (1 KiB, over the client's own file)",
        }
    }

    fn own_file(client: usize) -> String {
        format!("mutated/write-{client:02}.txt")
    }
}

/// A `wsfs-server` child with both faces on loopback ports.
struct Served {
    child: Child,
    grpc: String,
    http: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(bin: &Path, data: &Path) -> Result<Served, String> {
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
    // "wsfs-server listening on ADDR (...)", then "... VFS API on http://ADDR".
    let mut announced = |marker: &str| {
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        line.split_once(marker)
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(str::to_string)
    };
    let grpc = announced("listening on ");
    let http = announced("VFS API on http://").and_then(|a| a.parse().ok());
    // Keep the pipe drained: the server never blocks on its stdout.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    match (grpc, http) {
        (Some(grpc), Some(http)) => Ok(Served {
            child,
            grpc: format!("http://{grpc}"),
            http,
        }),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("{} did not announce both addresses", bin.display()))
        }
    }
}

/// One client's keep-alive HTTP/1.1 connection.
async fn connect_http(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One `/vfs/execute`; its `result` when it succeeded.
async fn execute(
    sender: &mut SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    tool: &str,
    args: serde_json::Value,
) -> Result<String, String> {
    let body = serde_json::json!({"session_id": SESSION, "tool": tool, "args": args});
    let request = hyper::Request::post("/vfs/execute")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{tool}: {e}"))?
        .to_bytes();
    let answer: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{tool}: not JSON: {e}"))?;
    match (answer["success"].as_bool(), answer["result"].as_str()) {
        (Some(true), Some(result)) => Ok(result.to_string()),
        _ => Err(format!("{tool} failed: {answer}")),
    }
}

/// Either face, for one client.
enum Face {
    Http(SendRequest<Full<Bytes>>, SocketAddr),
    Grpc(Fs, String),
}

impl Face {
    async fn once(&mut self, call: Call, client: usize, text_len: usize) -> Result<(), String> {
        let content = || "w".repeat(WRITE_BYTES);
        let ok = match (self, call) {
            (Face::Http(sender, addr), Call::Read) => {
                let args = serde_json::json!({"file_path": FILE_NAME});
                execute(sender, *addr, "read_file", args).await?.len() == text_len
            }
            (Face::Http(sender, addr), Call::Write) => {
                let args =
                    serde_json::json!({"file_path": Call::own_file(client), "content": content()});
                execute(sender, *addr, "write_file", args)
                    .await?
                    .starts_with("Successfully wrote 1024 bytes")
            }
            (Face::Grpc(fs, id), Call::Read) => {
                let page = fs
                    .read(proto::ReadRequest {
                        session_id: id.clone(),
                        path: FILE_NAME.to_string(),
                        limit: Some(-1),
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| format!("Read: {}", s.message()))?;
                page.into_inner().content.len() == text_len
            }
            (Face::Grpc(fs, id), Call::Write) => {
                let written = fs
                    .write(proto::WriteRequest {
                        session_id: id.clone(),
                        path: Call::own_file(client),
                        content: content(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| format!("Write: {}", s.message()))?;
                written.into_inner().bytes_written == WRITE_BYTES as i64
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{} returned the wrong answer", call.name()))
        }
    }
}

/// Calls per second of `total` calls shared by `clients` clients of one
/// face, timed once every client is connected.
async fn batch(
    served: &Served,
    http: bool,
    call: Call,
    clients: usize,
    total: usize,
    text_len: usize,
) -> Result<f64, String> {
    let per_client = total.div_ceil(clients);
    let mut faces = Vec::with_capacity(clients);
    for _ in 0..clients {
        faces.push(if http {
            Face::Http(connect_http(served.http).await?, served.http)
        } else {
            let channel = wire::connect(&served.grpc).await?;
            let id = wsfs_server::http::session_id(SESSION);
            Face::Grpc(wire::filesystem(&channel), id)
        });
    }
    let started = Instant::now();
    let tasks: Vec<_> = faces
        .into_iter()
        .enumerate()
        .map(|(client, mut face)| {
            tokio::spawn(async move {
                for _ in 0..per_client {
                    face.once(call, client, text_len).await?;
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| format!("client task: {e}"))??;
    }
    Ok((per_client * clients) as f64 / started.elapsed().as_secs_f64())
}

pub async fn run(
    bin: &Path,
    data: &Path,
    ops: usize,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let served = spawn(bin, data)?;
    let text: String = (1..=FILE_LINES)
        .map(|i| format!("line {i:03}: the quick brown fox jumps over the lazy dog, again.\n"))
        .collect();
    // The first call makes the DeepFabric session; gRPC then finds it by id.
    let mut first = connect_http(served.http).await?;
    let args = serde_json::json!({"file_path": FILE_NAME, "content": text});
    execute(&mut first, served.http, "write_file", args).await?;
    let mut rows = Vec::new();
    for call in [Call::Read, Call::Write] {
        for clients in CLIENT_COUNTS {
            let (mut over_http, mut over_grpc) = (Samples::default(), Samples::default());
            // One untimed warm-up of each face.
            for http in [true, false] {
                batch(&served, http, call, clients, ops / 10, text.len()).await?;
            }
            for run in 0..runs {
                // Alternate which face goes first, so neither always meets
                // a warmer server.
                let order = if run % 2 == 0 {
                    [true, false]
                } else {
                    [false, true]
                };
                for http in order {
                    let rate = batch(&served, http, call, clients, ops, text.len()).await?;
                    if http {
                        over_http.push(rate);
                    } else {
                        over_grpc.push(rate);
                    }
                }
            }
            let grpc_name = match call {
                Call::Read => "gRPC Read",
                Call::Write => "gRPC Write",
            };
            let mut row = Row::new(
                format!("HTTP {} by {clients} client(s)", call.name()),
                "calls/s",
                over_http,
            );
            row.baseline = Some((grpc_name.to_string(), over_grpc));
            row.target = Target::AtLeastShare(0.8);
            rows.push(row);
        }
    }
    notes.push(format!(
        "http: {ops} calls per figure and run on a MEMORY session of a child `wsfs-server`, \
         each client on its own connection (HTTP/1.1 keep-alive, or a gRPC channel)"
    ));
    Ok(rows)
}
