//! The connection cap under attack: silent sockets are shed for newcomers,
//! connections with a call running never are, and one peer address holds
//! at most its share; on the gRPC listener and on the HTTP face alike.

use crate::harness::{closed_within, next_change, Events, Server, EMPTY_SETTINGS, PREFACE};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use wsfs_client::{ChangeKind, Client, SessionOptions};

/// What a client with a deadline gives each whole round of its work.
const BYSTANDER_ROUND: Duration = Duration::from_secs(5);

/// How soon a refused newcomer must see its connection closed: "at once",
/// with room for a loaded machine, and far below the handshake timeout the
/// tests give the server.
const CLOSED_AT_ONCE: Duration = Duration::from_secs(3);

/// How long a connection that should stay open is watched.
const STAYS_OPEN: Duration = Duration::from_millis(700);

/// A MEMORY session and `n` connections of its own, each running a
/// recursive Watch of it: calls that run as long as the test holds them.
async fn busy_connections(server: &Server, n: usize) -> (String, Vec<(Client, Events)>) {
    let client = server.client().await;
    let (_, info) = client.create(SessionOptions::memory()).await.unwrap();
    drop(client);
    let mut watchers = Vec::new();
    for _ in 0..n {
        let client = server.client().await;
        let mut events = client
            .session(&info.id)
            .watch("")
            .recursive()
            .stream()
            .await
            .expect("Watch");
        assert_eq!(next_change(&mut events).await.kind(), ChangeKind::Ready);
        watchers.push((client, events));
    }
    (info.id, watchers)
}

/// Writes `name` into the session from a new connection, trying again
/// until one is admitted (within 20 s).
async fn write_when_admitted(server: &Server, session_id: &str, name: &str) {
    let started = Instant::now();
    loop {
        let served = tokio::time::timeout(BYSTANDER_ROUND, async {
            let writer = Client::connect(&server.url).await?;
            writer.session(session_id).write_str(name, "x").await
        })
        .await;
        if matches!(served, Ok(Ok(_))) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no connection admitted to write {name}: {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `name` into the session and asserts that every watcher, on its
/// own connection, is told: none of their connections was closed.
async fn assert_watchers_still_served(
    server: &Server,
    session_id: &str,
    watchers: &mut [(Client, Events)],
    name: &str,
) {
    write_when_admitted(server, session_id, name).await;
    for (_, events) in watchers.iter_mut() {
        let e = next_change(events).await;
        assert_eq!((e.kind(), e.path.as_str()), (ChangeKind::Created, name));
    }
}

/// One round of a client with a deadline: connect, CreateSession, Write,
/// Read, within [`BYSTANDER_ROUND`]; how long it took.
async fn bystander_round(url: &str) -> Duration {
    let started = Instant::now();
    let url = url.to_string();
    let served = tokio::time::timeout(BYSTANDER_ROUND, async move {
        let client = Client::connect(&url).await?;
        let (session, info) = client.create(SessionOptions::memory()).await?;
        session.write_str("bystander.txt", "served\n").await?;
        let text = session.read_to_string("bystander.txt").await?;
        client.delete_session(&info.id).await?;
        Ok::<_, wsfs::Error>(text)
    })
    .await;
    match served {
        Ok(Ok(text)) => assert_eq!(text, "served\n"),
        Ok(Err(e)) => panic!("the bystander was refused: {e:?}"),
        Err(_) => panic!("the bystander was not served within {BYSTANDER_ROUND:?}"),
    }
    started.elapsed()
}

/// A connection from `local` (a loopback address) that sends `first`; an
/// error when the server reset it before the connect completed.
async fn try_raw_from(
    local: &str,
    server: SocketAddr,
    first: &[&[u8]],
) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(format!("{local}:0").parse().unwrap())
        .expect("bind a loopback source address");
    let mut stream = socket.connect(server).await?;
    for bytes in first {
        // A refused connection may be closed before its hello is written.
        let _ = stream.write_all(bytes).await;
    }
    Ok(stream)
}

async fn raw_from(local: &str, server: SocketAddr, first: &[&[u8]]) -> TcpStream {
    try_raw_from(local, server, first).await.expect("connect")
}

/// A connection that has said its HTTP/2 hello and then nothing.
async fn idle_from(local: &str, server: SocketAddr) -> TcpStream {
    raw_from(local, server, &[PREFACE, &EMPTY_SETTINGS]).await
}

/// Whether a newcomer from `local` that says its hello is closed (or reset
/// before its connect completes) within [`CLOSED_AT_ONCE`].
async fn refused_at_once(local: &str, server: SocketAddr) -> bool {
    match try_raw_from(local, server, &[PREFACE, &EMPTY_SETTINGS]).await {
        Ok(mut newcomer) => closed_within(&mut newcomer, CLOSED_AT_ONCE).await.is_some(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// `sockets` silent connections (`first`, such as the HTTP/2 preface, and
/// nothing more), each reopened as soon as the server closes it, until
/// `stop`; counts the opens and the closes. The attacker runs on a thread of its own, as another process
/// would: the bystander's client is not starved by it, only the server.
fn attack(
    addr: SocketAddr,
    sockets: usize,
    first: &'static [u8],
    stop: &Arc<AtomicBool>,
    opened: &Arc<AtomicUsize>,
    closes: &Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    let counters = (stop.clone(), opened.clone(), closes.clone());
    std::thread::spawn(move || {
        let (stop, opened, closes) = counters;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the attacker's runtime");
        runtime.block_on(async move {
            let tasks: Vec<_> = (0..sockets)
                .map(|_| {
                    let counters = (stop.clone(), opened.clone(), closes.clone());
                    tokio::spawn(silent_socket(addr, first, counters))
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        })
    })
}

type Counters = (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>);

/// One of [`attack`]'s sockets, counting its opens and closes.
async fn silent_socket(addr: SocketAddr, first: &[u8], (stop, opened, closes): Counters) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if s.write_all(first).await.is_err() {
            continue;
        }
        opened.fetch_add(1, Ordering::SeqCst);
        // Held until the server closes it (or the attack ends).
        while !stop.load(Ordering::SeqCst) {
            if closed_within(&mut s, Duration::from_millis(200))
                .await
                .is_some()
            {
                closes.fetch_add(1, Ordering::SeqCst);
                break;
            }
        }
    }
}

#[tokio::test]
async fn a_bystander_is_served_while_an_attacker_holds_ten_times_the_cap_in_silent_connections() {
    const CAP: usize = 40;
    const WATCHERS: usize = 10;
    // The default handshake timeout (10 s): slots are freed by shedding,
    // not by the clock.
    let mut server = Server::start(&["--max-connections", &CAP.to_string()]);
    let (session_id, mut watchers) = busy_connections(&server, WATCHERS).await;
    let baseline = server.open_fds();

    let stop = Arc::new(AtomicBool::new(false));
    let (opened, closes) = (Arc::default(), Arc::default());
    let attacker = attack(server.addr, 10 * CAP, PREFACE, &stop, &opened, &closes);
    // Until the attacker has opened all its sockets (admitted, or queued
    // while the server stops accepting), or for 5 s.
    let started = Instant::now();
    while opened.load(Ordering::SeqCst) < 10 * CAP && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut rounds = Vec::new();
    let mut most_fds = 0;
    for _ in 0..5 {
        rounds.push(bystander_round(&server.url).await);
        most_fds = most_fds.max(server.open_fds());
    }
    assert!(
        most_fds <= baseline + CAP + 8,
        "the server held {most_fds} descriptors with a cap of {CAP} connections (before the attack: {baseline})"
    );
    // The watchers' connections had a call running throughout: none was
    // shed.
    assert_watchers_still_served(&server, &session_id, &mut watchers, "during.txt").await;
    let reopened = closes.load(Ordering::SeqCst);
    assert!(
        reopened >= CAP,
        "only {reopened} silent connections were closed: the bystander got in some other way"
    );

    stop.store(true, Ordering::SeqCst);
    attacker.join().expect("the attacker's thread");
    eprintln!(
        "cap {CAP}, {} silent sockets reopened {reopened} times: bystander rounds {rounds:?}, most fds {most_fds} (before {baseline})",
        10 * CAP
    );
    server.assert_serves_bystander().await;
}

#[tokio::test]
async fn a_newcomer_is_closed_at_once_when_every_connection_has_a_call_running() {
    const CAP: usize = 4;
    let mut server = Server::start(&[
        "--max-connections",
        &CAP.to_string(),
        "--max-connections-per-peer",
        "0",
        "--handshake-timeout",
        "60s",
    ]);
    let (session_id, mut watchers) = busy_connections(&server, CAP).await;
    for _ in 0..3 {
        assert!(
            refused_at_once("127.0.0.1", server.addr).await,
            "a newcomer at a cap of busy connections was left waiting"
        );
    }
    // One watcher goes; its slot serves a writer, and the others, never
    // shed, see the write.
    drop(watchers.pop());
    assert_watchers_still_served(&server, &session_id, &mut watchers, "after.txt").await;
    assert!(server.is_running());
}

#[tokio::test]
async fn one_peer_address_holds_at_most_its_share_and_sheds_its_least_active_first() {
    const PER_PEER: usize = 4;
    let mut server = Server::start(&[
        "--max-connections",
        "100",
        "--max-connections-per-peer",
        &PER_PEER.to_string(),
        "--handshake-timeout",
        "60s",
        "--idle-timeout",
        "60s",
    ]);
    // Peer 127.0.0.1: its whole share busy with Watch calls.
    let (session_id, mut watchers) = busy_connections(&server, PER_PEER).await;
    // Peer 127.0.0.2: two idle, one still handshaking (the newest), one idle.
    let mut a = idle_from("127.0.0.2", server.addr).await;
    let mut b = idle_from("127.0.0.2", server.addr).await;
    let mut handshaking = raw_from("127.0.0.2", server.addr, &[PREFACE]).await;
    let mut d = idle_from("127.0.0.2", server.addr).await;

    // 127.0.0.1 is at its share with every call running: refused at once,
    // and nothing of 127.0.0.2's is touched for it.
    assert!(
        refused_at_once("127.0.0.1", server.addr).await,
        "a newcomer past its address's share of busy connections was left waiting"
    );
    for s in [&mut a, &mut b, &mut handshaking, &mut d] {
        assert!(
            closed_within(s, STAYS_OPEN).await.is_none(),
            "another address's connection was shed for a refused one"
        );
    }

    // 127.0.0.2 at its share: the handshaking one goes first, though the
    // newest; then the one idle longest.
    let mut e = idle_from("127.0.0.2", server.addr).await;
    assert!(
        closed_within(&mut handshaking, CLOSED_AT_ONCE)
            .await
            .is_some(),
        "the connection still handshaking was not shed first"
    );
    let mut f = idle_from("127.0.0.2", server.addr).await;
    assert!(
        closed_within(&mut a, CLOSED_AT_ONCE).await.is_some(),
        "the connection idle longest was not shed next"
    );
    for s in [&mut b, &mut d, &mut e, &mut f] {
        assert!(
            closed_within(s, STAYS_OPEN).await.is_none(),
            "a more recent connection was shed"
        );
    }
    // The busy ones were never shed: one goes, and the others see a write
    // made in its slot.
    drop(watchers.pop());
    assert_watchers_still_served(&server, &session_id, &mut watchers, "after.txt").await;
    server.assert_serves_bystander().await;
}

/// One HTTP/1.1 exchange on a new connection to the HTTP face: the answer,
/// read until the server closes it.
async fn http_exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the HTTP face");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .expect("read the answer");
    answer
}

/// One round of a DeepFabric client with a deadline: `GET /vfs/health`,
/// then a `write_file` through `POST /vfs/execute`, each on a connection
/// of its own, within [`BYSTANDER_ROUND`]; how long it took.
async fn http_bystander_round(addr: SocketAddr, round: usize) -> Duration {
    let started = Instant::now();
    let served = tokio::time::timeout(BYSTANDER_ROUND, async move {
        let health = http_exchange(addr, "GET", "/vfs/health", "").await;
        let body = format!(
            r#"{{"session_id": "bystander-{round}", "tool": "write_file", "args": {{"file_path": "/served.txt", "content": "served"}}}}"#
        );
        let written = http_exchange(addr, "POST", "/vfs/execute", &body).await;
        (health, written)
    })
    .await;
    let Ok((health, written)) = served else {
        panic!("the HTTP bystander was not served within {BYSTANDER_ROUND:?}");
    };
    assert!(
        health.starts_with("HTTP/1.1 200") && health.contains("healthy"),
        "GET /vfs/health: {health}"
    );
    assert!(
        written.starts_with("HTTP/1.1 200") && written.contains(r#""success":true"#),
        "POST /vfs/execute: {written}"
    );
    started.elapsed()
}

#[tokio::test]
async fn the_http_face_serves_a_bystander_while_an_attacker_holds_ten_times_the_cap_in_silent_connections(
) {
    const CAP: usize = 40;
    // Far longer than a bystander's round: slots are freed by shedding,
    // not by the clock.
    let mut server = Server::start(&[
        "--max-connections",
        &CAP.to_string(),
        "--handshake-timeout",
        "60s",
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let http = server.http_addr();
    let baseline = server.open_fds();

    // Half the sockets send nothing, half the start of a request line.
    let stop = Arc::new(AtomicBool::new(false));
    let (opened, closes) = (Arc::default(), Arc::default());
    let attackers = [
        attack(http, 5 * CAP, b"", &stop, &opened, &closes),
        attack(http, 5 * CAP, b"GET /vfs/hea", &stop, &opened, &closes),
    ];
    let started = Instant::now();
    while opened.load(Ordering::SeqCst) < 10 * CAP && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut rounds = Vec::new();
    let mut most_fds = 0;
    for round in 0..5 {
        rounds.push(http_bystander_round(http, round).await);
        most_fds = most_fds.max(server.open_fds());
    }
    assert!(
        most_fds <= baseline + CAP + 8,
        "the server held {most_fds} descriptors with a cap of {CAP} HTTP connections (before the attack: {baseline})"
    );
    let reopened = closes.load(Ordering::SeqCst);
    assert!(
        reopened >= CAP,
        "only {reopened} silent connections were closed: the bystander got in some other way"
    );

    stop.store(true, Ordering::SeqCst);
    for attacker in attackers {
        attacker.join().expect("the attacker's thread");
    }
    eprintln!(
        "HTTP face, cap {CAP}, {} silent sockets reopened {reopened} times: bystander rounds {rounds:?}, most fds {most_fds} (before {baseline})",
        10 * CAP
    );
    http_bystander_round(http, 5).await;
    server.assert_serves_bystander().await;
}
