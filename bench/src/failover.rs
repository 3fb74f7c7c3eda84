//! Failover through the proxy: three `wsfs-server` processes sharing one
//! bucket (`moto_server`'s S3 API on loopback) behind nginx, configured
//! from the shipped `deploy/nginx/wsfs.conf` with only its ports and file
//! paths changed. Each round starts a fresh cluster (its own data
//! directories, its own prefix in the bucket, a fresh nginx), makes a
//! DIRECTORY session through the proxy, snapshots it, SIGKILLs the
//! replica that holds it, and times from the kill to the first call
//! through the proxy that succeeds (GetSession, retried every 50 ms while
//! it is UNAVAILABLE), with the server's default lease. Beside it, the
//! lease itself: the wait a failover cannot beat, since the session is
//! taken over only once the dead holder's lease has run out.

use crate::report::{Row, Samples, Target};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use wsfs_client::{Client, SessionOptions};

/// The nginx configuration the repository ships.
const SHIPPED_NGINX_CONF: &str = include_str!("../../deploy/nginx/wsfs.conf");
/// The server's `--lease-ttl` when none is given.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const REPLICAS: usize = 3;
const BUCKET: &str = "wsfs-bench";
/// How long a process may take to listen, and a failover to answer
/// beyond the lease.
const PATIENCE: Duration = Duration::from_secs(60);

/// A child process killed (SIGKILL) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Replica {
    process: Process,
    data_dir: PathBuf,
    addr: SocketAddr,
    /// Held so that the server never writes into a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

/// The failover figure. `server_bin` is the replicas' binary, `work` a
/// scratch directory, `nginx` and `moto` the programs.
pub async fn run(
    server_bin: &Path,
    nginx: &Path,
    moto: &Path,
    work: &Path,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let bucket = start_moto(moto, work)?;
    let mut failover = Samples::default();
    let mut lease = Samples::default();
    for run in 1..=runs {
        eprintln!("failover: run {run}/{runs} (waits out the default lease, {DEFAULT_LEASE:?})");
        let dir = work.join(format!("failover-{run}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
        let seconds = one_failover(server_bin, nginx, &bucket, &dir, run).await;
        let _ = std::fs::remove_dir_all(&dir);
        failover.push(seconds?);
        lease.push(DEFAULT_LEASE.as_secs_f64());
    }
    drop(bucket);
    notes.push(format!(
        "Failover: {REPLICAS} `wsfs-server` processes with the default lease ({}s) on one \
         `moto_server` bucket, behind nginx running the shipped configuration; timed from the \
         SIGKILL of the session's holder to the first GetSession through the proxy that succeeds.",
        DEFAULT_LEASE.as_secs()
    ));
    Ok(vec![Row::new(
        "Failover: SIGKILL of the holder to the first successful call through nginx, wall time",
        "s",
        failover,
    )
    .baseline("the default lease", lease)
    .target(Target::None)])
}

/// One round: a fresh cluster on its own prefix of the bucket; seconds
/// from the kill to the first successful call.
async fn one_failover(
    server_bin: &Path,
    nginx: &Path,
    bucket: &Moto,
    dir: &Path,
    run: usize,
) -> Result<f64, String> {
    let store = format!("s3://{BUCKET}/run-{run}");
    let mut replicas = (0..REPLICAS)
        .map(|index| start_replica(server_bin, dir, index, &store, bucket))
        .collect::<Result<Vec<_>, _>>()?;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let (_nginx, proxy) = start_nginx(nginx, dir, &addrs)?;
    let client = Client::connect(&format!("http://{proxy}"))
        .await
        .map_err(|e| format!("cannot reach the proxy: {e}"))?;
    let (session, info) = client
        .create(SessionOptions::directory())
        .await
        .map_err(crate::failed("create a session through the proxy"))?;
    session
        .write_str("kept.txt", "written before the snapshot\n")
        .await
        .map_err(crate::failed("write"))?;
    client
        .snapshot(&info.id, "before the kill")
        .await
        .map_err(crate::failed("snapshot"))?;
    let holder = replicas
        .iter()
        .position(|r| {
            let record = r
                .data_dir
                .join("sessions")
                .join(&info.id)
                .join("session.json");
            record.exists()
        })
        .ok_or("no replica holds the session just made")?;
    let killed = Instant::now();
    drop(replicas.remove(holder).process);
    loop {
        match client.get_session(&info.id).await {
            Ok(_) => break,
            Err(e) if e.code() == tonic::Code::Unavailable => {}
            Err(e) => return Err(format!("a call after the kill failed: {e}")),
        }
        if killed.elapsed() > DEFAULT_LEASE + PATIENCE {
            return Err(format!(
                "the session did not fail over within {:?}",
                DEFAULT_LEASE + PATIENCE
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = killed.elapsed().as_secs_f64();
    let kept = session
        .read_to_string("kept.txt")
        .await
        .map_err(crate::failed("read after the failover"))?;
    if kept != "written before the snapshot\n" {
        return Err("the failed-over session does not hold its snapshot".into());
    }
    Ok(seconds)
}

/// `moto_server` on a free loopback port, with the bucket made.
struct Moto {
    _process: Process,
    addr: SocketAddr,
}

fn free_port() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))
}

fn start_moto(moto: &Path, work: &Path) -> Result<Moto, String> {
    let addr = free_port()?;
    let log = std::fs::File::create(work.join("moto.log")).map_err(|e| e.to_string())?;
    let child = Command::new(moto)
        .args(["-H", "127.0.0.1", "-p", &addr.port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", moto.display()))?;
    let moto = Moto {
        _process: Process(child),
        addr,
    };
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if started.elapsed() > PATIENCE {
            return Err(format!("moto_server did not listen on {addr}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Make the bucket: moto checks no signature, only that there is one.
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    write!(
        stream,
        "PUT /{BUCKET} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: AWS4-HMAC-SHA256 \
         Credential=wsfs/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    if !answer.starts_with("HTTP/1.1 200") {
        return Err(format!("moto_server did not make the bucket: {answer:?}"));
    }
    Ok(moto)
}

fn start_replica(
    bin: &Path,
    dir: &Path,
    index: usize,
    store: &str,
    bucket: &Moto,
) -> Result<Replica, String> {
    let data_dir = dir.join(format!("replica-{index}"));
    let log = std::fs::File::create(dir.join(format!("replica-{index}.log")))
        .map_err(|e| e.to_string())?;
    let mut child = Command::new(bin)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(&data_dir)
        .arg("--object-store")
        .arg(store)
        .arg("--replica-id")
        .arg(format!("replica-{index}"))
        .env("AWS_ENDPOINT_URL", format!("http://{}", bucket.addr))
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "wsfs")
        .env("AWS_SECRET_ACCESS_KEY", "wsfs-secret")
        .env("AWS_REGION", "us-east-1")
        .env("RUST_LOG", "warn")
        .env_remove("WSFS_LEASE_TTL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
    let process = Process(child);
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    // "wsfs-server listening on ADDR (...)"
    let addr = line
        .split_once("listening on ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("replica {index} did not say where it listens: {line:?}"))?;
    Ok(Replica {
        process,
        data_dir,
        addr,
        _stdout: stdout,
    })
}

/// The shipped configuration with its replica lines, listening address
/// and log and temporary paths replaced; fails when the shipped file no
/// longer has the lines replaced, so that the two cannot drift apart.
fn nginx_conf(listen: SocketAddr, replicas: &[SocketAddr], dir: &Path) -> Result<String, String> {
    const ACCESS_LOG: &str = "/var/log/nginx/wsfs-access.log";
    let mut out = String::new();
    let mut seen = [false; 4];
    for line in SHIPPED_NGINX_CONF.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("server 127.0.0.1:") {
            if !seen[0] {
                for addr in replicas {
                    let port = trimmed.split([':', ' ']).nth(2).unwrap_or_default();
                    let at = format!("127.0.0.1:{port}");
                    out.push_str(&line.replacen(&at, &addr.to_string(), 1));
                    out.push('\n');
                }
                seen[0] = true;
            }
            continue;
        }
        let line = if trimmed.starts_with("listen 127.0.0.1:8080 ") {
            seen[1] = true;
            line.replacen("127.0.0.1:8080", &listen.to_string(), 1)
        } else if line.contains(ACCESS_LOG) {
            seen[2] = true;
            line.replacen(ACCESS_LOG, &dir.join("access.log").display().to_string(), 1)
        } else {
            line.to_string()
        };
        out.push_str(&line);
        out.push('\n');
        if trimmed == "http {" {
            seen[3] = true;
            for kind in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                let path = dir.join(format!("nginx-{kind}"));
                out.push_str(&format!("    {kind}_temp_path {};\n", path.display()));
            }
        }
    }
    match seen {
        [true, true, true, true] => Ok(out),
        _ => Err(
            "deploy/nginx/wsfs.conf changed shape: the failover figure expects replica \
                  `server` lines, one `listen 127.0.0.1:8080`, one access log and one http block"
                .into(),
        ),
    }
}

/// nginx with the shipped configuration on a free loopback port, in the
/// foreground as one process (so that killing it stops all of it).
fn start_nginx(
    nginx: &Path,
    dir: &Path,
    replicas: &[SocketAddr],
) -> Result<(Process, SocketAddr), String> {
    let listen = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(listen, replicas, dir)?).map_err(|e| e.to_string())?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("nginx-error.log"))
        .arg("-c")
        .arg(&conf)
        .arg("-g")
        .arg(format!(
            "daemon off; master_process off; pid {};",
            dir.join("nginx.pid").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", nginx.display()))?;
    let mut process = Process(child);
    let started = Instant::now();
    while TcpStream::connect(listen).is_err() {
        if let Ok(Some(status)) = process.0.try_wait() {
            let log = std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default();
            return Err(format!("nginx exited ({status}): {log}"));
        }
        if started.elapsed() > PATIENCE {
            return Err(format!("nginx did not listen on {listen}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((process, listen))
}
