//! The workspace RecoverSession writes: each file streamed from the bucket
//! straight into place, several at once, checked against its hash, with
//! its bits and time, holes kept. Real `wsfs-server` replicas on one
//! `file://` bucket (a shared directory), so no S3 server is needed.

use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;
use wsfs_client::{Client, SessionOptions};
use wsfs_tests::cluster::{fresh_dir, Replica, ReplicaSetup};
use wsfs_tests::kit::workspace_state;

/// Short: the forced recovery answers once the old holder's lease is out.
const LEASE_TTL: Duration = Duration::from_secs(3);
/// Files of this many zeros, then a few bytes: mostly hole. The first
/// streams from the bucket in chunks, the second (at most 1 MiB) is read
/// in one piece.
const SPARSE: [(&str, u64); 2] = [
    ("sparse.bin", 4 * 1024 * 1024),
    ("small-sparse.bin", 512 * 1024),
];

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn root_of(replica: &Replica, id: &str) -> PathBuf {
    replica.data_dir.join("sessions").join(id).join("root")
}

/// Every file and directory under `root` with its bits and, for a file,
/// its modification time.
fn attributes(root: &Path) -> Vec<(String, u32, Option<i64>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            let name = entry
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            if meta.is_dir() {
                dirs.push(entry.path());
                out.push((name, meta.mode() & 0o7777, None));
            } else {
                let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
                out.push((name, meta.mode() & 0o7777, Some(mtime)));
            }
        }
    }
    out.sort();
    out
}

/// A recovery whose bucket holds a damaged content (same length, other
/// bytes) is INTERNAL naming the object, and leaves no session and no
/// session directory; once the content is whole again the recovered
/// workspace is the snapshot exactly: bytes, bits, modification times,
/// and a mostly-zero file still mostly hole.
#[tokio::test]
async fn a_recovered_workspace_is_its_snapshot_exactly_and_a_damaged_content_leaves_nothing() {
    let dir = fresh_dir();
    let bucket = dir.join("bucket");
    let url = format!("file://{}", bucket.display());
    let setup = |index| ReplicaSetup::mirrored(&url, index, LEASE_TTL, Vec::new());
    let r0 = Replica::start(&dir, 0, &setup(0));
    let r1 = Replica::start(&dir, 1, &setup(1));
    let c0 = Client::connect(&r0.url()).await.unwrap();
    let c1 = Client::connect(&r1.url()).await.unwrap();

    let (session, info) = c0.create(SessionOptions::directory()).await.unwrap();
    let id = info.id;
    session.write_str("a.txt", "alpha\n").await.unwrap();
    session.write_str("empty.txt", "").await.unwrap();
    for i in 0..40 {
        let text = format!("file {i}\n");
        session
            .write_str(&format!("dir/deep/{i}.txt"), &text)
            .await
            .unwrap();
    }
    for (name, len) in SPARSE {
        session.write_str(name, "").await.unwrap();
        session.write_at(name, len, &b"end"[..]).await.unwrap();
    }
    std::fs::set_permissions(
        root_of(&r0, &id).join("a.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    c0.snapshot(&id, "recovered").await.unwrap();
    let state = workspace_state(&session).await;
    let origin = attributes(&root_of(&r0, &id));

    let object = bucket.join("objects").join(sha256_hex(b"alpha\n"));
    let good = std::fs::read(&object).unwrap();
    std::fs::write(&object, b"alphA\n").unwrap();
    let err = c1.recover_session(&id, None, true).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    assert!(err.to_string().contains("does not match its hash"), "{err}");
    let here = wsfs_client::SessionQuery {
        local_only: true,
        ..Default::default()
    };
    assert!(c1.query_sessions(&here).await.unwrap().is_empty());
    assert!(
        !r1.data_dir.join("sessions").join(&id).exists(),
        "a failed recovery left its session directory"
    );

    std::fs::write(&object, good).unwrap();
    c1.recover_session(&id, None, true).await.unwrap();
    assert_eq!(workspace_state(&c1.session(&id)).await, state);
    let recovered = root_of(&r1, &id);
    assert_eq!(attributes(&recovered), origin, "bits and times");
    for (name, len) in SPARSE {
        let sparse = std::fs::metadata(recovered.join(name)).unwrap();
        assert_eq!(sparse.len(), len + 3);
        assert!(
            sparse.blocks() * 512 < len / 2,
            "the zeros of {name} were written: {} blocks",
            sparse.blocks()
        );
    }
}
