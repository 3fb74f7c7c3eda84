//! DIRECTORY sessions never follow symlinks: links planted in the shared
//! directory by another process (a container, say) lead nowhere, whether
//! they point at a directory outside, at the parent, at a sibling session or
//! at a single file, and whatever RPC tries to use them. Every case checks
//! the code, the reason, and that nothing outside changed.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};
use wsfs_tests::harness::TestServer;

struct Planted {
    _server: TestServer,
    fs: FilesystemClient<Channel>,
    id: String,
    root: PathBuf,
    outside: tempfile::TempDir,
    sibling_root: PathBuf,
}

/// A directory session whose root holds: `out -> <outside dir>`,
/// `up -> ..`, `sib -> <sibling session root>`, `secret -> <outside file>`,
/// and a real `real/ok.txt`.
async fn planted() -> Planted {
    let server = TestServer::start().await;
    let mut sessions = SessionsClient::new(server.channel().await);
    let create = || proto::CreateSessionRequest {
        backend: Backend::Directory as i32,
        ..Default::default()
    };
    let s = sessions
        .create_session(create())
        .await
        .unwrap()
        .into_inner();
    let sib = sessions
        .create_session(create())
        .await
        .unwrap()
        .into_inner();
    let root = PathBuf::from(&s.root_path);
    let sibling_root = PathBuf::from(&sib.root_path);
    std::fs::write(sibling_root.join("theirs.txt"), "sibling secret\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), "outside secret\n").unwrap();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/ok.txt"), "inside\n").unwrap();
    symlink(outside.path(), root.join("out")).unwrap();
    symlink("..", root.join("up")).unwrap();
    symlink(&sibling_root, root.join("sib")).unwrap();
    symlink(outside.path().join("passwd"), root.join("secret")).unwrap();
    let fs = FilesystemClient::new(server.channel().await);
    Planted {
        _server: server,
        fs,
        id: s.session_id,
        root,
        outside,
        sibling_root,
    }
}

/// Every file beneath a directory with its bytes (a link: its target).
type Tree = Vec<(PathBuf, Vec<u8>)>;

/// Every file beneath `dir` with its bytes (links not followed).
fn tree(dir: &Path) -> Tree {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            } else {
                out.push((
                    e.path(),
                    std::fs::read_link(e.path())
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn denied(result: Result<impl std::fmt::Debug, tonic::Status>, what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.code(), Code::PermissionDenied, "{what}: {err:?}");
    assert_eq!(
        err.get_details_error_info().unwrap().reason,
        "PERMISSION_DENIED",
        "{what}"
    );
}

impl Planted {
    fn outside_state(&self) -> (Tree, Tree) {
        (tree(self.outside.path()), tree(&self.sibling_root))
    }

    fn read(&self, path: &str) -> proto::ReadRequest {
        proto::ReadRequest {
            session_id: self.id.clone(),
            path: path.into(),
            ..Default::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_links_are_denied() {
    let mut p = planted().await;
    let before = p.outside_state();
    for path in ["out/passwd", "up/sessions", "sib/theirs.txt", "secret"] {
        denied(p.fs.read(p.read(path)).await, &format!("Read {path}"));
        let rb =
            p.fs.read_bytes(proto::ReadBytesRequest {
                session_id: p.id.clone(),
                path: path.into(),
                ..Default::default()
            })
            .await;
        denied(rb.map(|_| ()), &format!("ReadBytes {path}"));
    }
    for path in ["out/passwd", "sib/theirs.txt"] {
        denied(
            p.fs.stat(proto::StatRequest {
                session_id: p.id.clone(),
                path: path.into(),
            })
            .await,
            &format!("Stat {path}"),
        );
    }
    for dir in ["out", "up", "sib"] {
        denied(
            p.fs.list(proto::ListRequest {
                session_id: p.id.clone(),
                path: dir.into(),
                depth: 1,
                ..Default::default()
            })
            .await,
            &format!("List {dir}"),
        );
    }
    assert_eq!(p.outside_state(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_listed_as_symlinks_and_never_descended() {
    let mut p = planted().await;
    let list =
        p.fs.list(proto::ListRequest {
            session_id: p.id.clone(),
            path: "".into(),
            depth: 8,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got: Vec<(String, i32)> = list
        .entries
        .iter()
        .map(|e| (e.path.clone(), e.kind))
        .collect();
    let link = proto::FileKind::Symlink as i32;
    assert_eq!(
        got,
        vec![
            ("out".to_string(), link),
            ("real".to_string(), proto::FileKind::Directory as i32),
            ("real/ok.txt".to_string(), proto::FileKind::File as i32),
            ("secret".to_string(), link),
            ("sib".to_string(), link),
            ("up".to_string(), link),
        ]
    );
    let stat =
        p.fs.stat(proto::StatRequest {
            session_id: p.id.clone(),
            path: "secret".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stat.kind, link);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_and_glob_see_nothing_behind_links() {
    let mut p = planted().await;
    let mut stream =
        p.fs.grep(proto::GrepRequest {
            session_id: p.id.clone(),
            pattern: "secret|inside".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut paths = Vec::new();
    while let Some(msg) = stream.message().await.unwrap() {
        if let Some(proto::grep_response::Payload::Match(m)) = msg.payload {
            paths.push(m.path);
        }
    }
    assert_eq!(paths, vec!["real/ok.txt".to_string()]);
    let glob =
        p.fs.glob(proto::GlobRequest {
            session_id: p.id.clone(),
            pattern: "**".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(glob.paths, vec!["real/ok.txt".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_links_are_denied_and_change_nothing_outside() {
    let mut p = planted().await;
    let before = p.outside_state();
    let id = p.id.clone();
    for path in [
        "out/new.txt",
        "out/passwd",
        "sib/theirs.txt",
        "up/escaped.txt",
        "secret",
        "out/deep/new.txt",
    ] {
        let w =
            p.fs.write(proto::WriteRequest {
                session_id: id.clone(),
                path: path.into(),
                content: "pwned\n".into(),
                ..Default::default()
            })
            .await;
        denied(w, &format!("Write {path}"));
        let a =
            p.fs.write(proto::WriteRequest {
                session_id: id.clone(),
                path: path.into(),
                content: "pwned\n".into(),
                mode: proto::WriteMode::Append as i32,
                ..Default::default()
            })
            .await;
        denied(a, &format!("Append {path}"));
    }
    denied(
        p.fs.edit(proto::EditRequest {
            session_id: id.clone(),
            path: "secret".into(),
            old_text: "outside".into(),
            new_text: "pwned".into(),
            ..Default::default()
        })
        .await,
        "Edit secret",
    );
    denied(
        p.fs.mkdir(proto::MkdirRequest {
            session_id: id.clone(),
            path: "out/made".into(),
            ..Default::default()
        })
        .await,
        "Mkdir out/made",
    );
    for (src, dst) in [
        ("out/passwd", "stolen"),
        ("real/ok.txt", "out/planted"),
        ("sib/theirs.txt", "stolen"),
    ] {
        let req = proto::TransferRequest {
            session_id: id.clone(),
            source: src.into(),
            destination: dst.into(),
            ..Default::default()
        };
        denied(p.fs.r#move(req.clone()).await, &format!("Move {src} {dst}"));
        denied(p.fs.copy(req).await, &format!("Copy {src} {dst}"));
    }
    denied(
        p.fs.delete(proto::DeleteRequest {
            session_id: id.clone(),
            path: "out/passwd".into(),
            ..Default::default()
        })
        .await,
        "Delete out/passwd",
    );
    assert_eq!(p.outside_state(), before);
    assert!(!p.root.parent().unwrap().join("escaped.txt").exists());
    assert_eq!(
        std::fs::read_to_string(p.root.join("real/ok.txt")).unwrap(),
        "inside\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_link_removes_the_link_only() {
    let mut p = planted().await;
    let before = p.outside_state();
    for link in ["out", "sib", "up", "secret"] {
        let d =
            p.fs.delete(proto::DeleteRequest {
                session_id: p.id.clone(),
                path: link.into(),
                recursive: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(d.deleted, 1, "{link}");
        assert!(
            std::fs::symlink_metadata(p.root.join(link)).is_err(),
            "{link} still there"
        );
    }
    // Emptying the root removes what is inside, links as links.
    let d =
        p.fs.delete(proto::DeleteRequest {
            session_id: p.id.clone(),
            path: "".into(),
            recursive: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.deleted, 2);
    assert_eq!(p.outside_state(), before);
    assert!(p.root.is_dir());
}

/// Another process keeps swapping a real directory for a link to the
/// outside while the service works beneath it: nothing outside is ever
/// read, written or removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_directory_for_a_link_mid_call_leaks_nothing() {
    let mut p = planted().await;
    let before = p.outside_state();
    let root = p.root.clone();
    let outside = p.outside.path().to_path_buf();
    std::fs::create_dir(root.join("swap")).unwrap();
    std::fs::write(root.join("swap/passwd"), "inside copy\n").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (dir, aside, link) = (
                root.join("swap"),
                root.join("swap.real"),
                root.join("swap.link"),
            );
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(&dir, &aside);
                let _ = symlink(&outside, &link);
                let _ = std::fs::rename(&link, &dir);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&dir);
                let _ = std::fs::rename(&aside, &dir);
            }
        })
    };
    let id = p.id.clone();
    for i in 0..300 {
        let _ = p.fs.read(p.read("swap/passwd")).await.map(|r| {
            assert_ne!(
                r.into_inner().content,
                "outside secret\n",
                "read leaked the outside file"
            );
        });
        let _ =
            p.fs.write(proto::WriteRequest {
                session_id: id.clone(),
                path: "swap/passwd".into(),
                content: format!("write {i}\n"),
                ..Default::default()
            })
            .await;
        if i % 50 == 0 {
            let _ =
                p.fs.delete(proto::DeleteRequest {
                    session_id: id.clone(),
                    path: "swap".into(),
                    recursive: true,
                    ..Default::default()
                })
                .await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(p.outside_state(), before);
}
