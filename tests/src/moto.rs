//! A real S3 API for the object-store tests: `moto_server` on a free
//! loopback port with one bucket, and plain HTTP requests to look into it
//! (moto checks no signatures).

use std::collections::BTreeSet;
use std::time::Duration;

/// A real S3 API: `moto_server` on a free port, with one bucket.
pub struct Moto {
    _child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self._child.kill();
        let _ = self._child.wait();
    }
}

pub const BUCKET: &str = "wsfs-replicas";
/// Where in the bucket the replicas keep everything.
pub const PREFIX: &str = "wsfs";
/// What moto needs to read an object: a request that names credentials
/// (it checks no signature; without one, reading an object is refused).
const SIGNED: &str = "Authorization: AWS4-HMAC-SHA256 Credential=wsfs/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00";

impl Moto {
    pub fn start() -> Option<Moto> {
        let program = crate::kit::system_tool("moto_server")?;
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut command = std::process::Command::new(program);
        command
            .args(["-H", "127.0.0.1", "-p", &addr.port().to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = crate::cluster::spawn_tied(command);
        let moto = Moto {
            _child: child,
            addr,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(addr).is_ok() {
                let (status, _) = moto.http("PUT", &format!("/{BUCKET}"));
                assert!(status.starts_with("HTTP/1.1 200"), "{status}");
                return Some(moto);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("moto_server did not listen on {addr}");
    }

    /// One plain HTTP request; the status line and the body.
    pub fn http(&self, method: &str, target: &str) -> (String, String) {
        let (status, body) = self.request(method, target);
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// [`Moto::http`] with the body as bytes.
    pub fn request(&self, method: &str, target: &str) -> (String, Vec<u8>) {
        self.send(method, target, b"")
    }

    /// Writes `body` at `<PREFIX>/<key>`, as a replica (or anyone with
    /// the bucket's credentials) could.
    pub fn put(&self, key: &str, body: &[u8]) {
        let (status, _) = self.send("PUT", &format!("/{BUCKET}/{PREFIX}/{key}"), body);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }

    fn send(&self, method: &str, target: &str, body: &[u8]) -> (String, Vec<u8>) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr).unwrap();
        write!(
            stream,
            "{method} {target} HTTP/1.1\r\nHost: {}\r\n{SIGNED}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        )
        .unwrap();
        stream.write_all(body).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(response.len(), |e| e + 4);
        let head = String::from_utf8_lossy(&response[..end]);
        let status = head.lines().next().unwrap_or_default().to_string();
        (status, response[end..].to_vec())
    }

    /// The names under `<PREFIX>/objects/` in the bucket.
    pub fn objects(&self) -> BTreeSet<String> {
        self.keys("objects/")
    }

    /// The names under `<PREFIX>/<under>` in the bucket (the rest of each
    /// key), in one page of at most 1,000.
    pub fn keys(&self, under: &str) -> BTreeSet<String> {
        let (status, body) = self.http(
            "GET",
            &format!("/{BUCKET}?list-type=2&prefix={PREFIX}/{under}&max-keys=1000"),
        );
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(!body.contains("<IsTruncated>true"), "one page holds them");
        body.split("<Key>")
            .skip(1)
            .filter_map(|k| k.split("</Key>").next())
            .filter_map(|k| k.strip_prefix(&format!("{PREFIX}/{under}")))
            .map(str::to_string)
            .collect()
    }

    /// The bytes of `<PREFIX>/<key>`, if it is there.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let (status, body) = self.request("GET", &format!("/{BUCKET}/{PREFIX}/{key}"));
        status.starts_with("HTTP/1.1 200").then_some(body)
    }

    /// Replica `index` of several sharing this bucket (as
    /// [`crate::cluster::ReplicaSetup::mirrored`]), directly.
    pub fn replica(&self, index: usize, lease_ttl: Duration) -> crate::cluster::ReplicaSetup {
        self.replica_via(index, lease_ttl, &format!("http://{}", self.addr))
    }

    /// [`Moto::replica`] through `endpoint` (a forwarder in between).
    pub fn replica_via(
        &self,
        index: usize,
        lease_ttl: Duration,
        endpoint: &str,
    ) -> crate::cluster::ReplicaSetup {
        let url = format!("s3://{BUCKET}/{PREFIX}");
        crate::cluster::ReplicaSetup::mirrored(&url, index, lease_ttl, self.envs_via(endpoint))
    }

    /// What a replica needs to use this bucket directly.
    pub fn envs(&self) -> Vec<(String, String)> {
        self.envs_via(&format!("http://{}", self.addr))
    }

    /// What a replica needs to use this bucket through `endpoint` (a
    /// forwarder in between).
    pub fn envs_via(&self, endpoint: &str) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", endpoint.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_ACCESS_KEY_ID", "wsfs".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "wsfs-secret".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}
