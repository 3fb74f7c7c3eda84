//! `--durability fsync` over real gRPC: every operation that changes a
//! DIRECTORY session answers and lands, the same as in the default mode
//! (whether the bytes reached stable storage cannot be observed short of
//! cutting the power; RELIABILITY.md says what each mode promises, and
//! BENCHMARKS.md what it costs).

use wsfs_client::{
    parse_path, Client, DeleteOptions, EditSpec, Filesystem, MkdirOptions, SessionOptions,
    TransferOptions,
};
use wsfs_server::durability::Durability;
use wsfs_tests::harness::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_answers_and_lands_with_durability_fsync() {
    let server = TestServer::start_with(|c| c.durability = Durability::Fsync).await;
    let client = Client::connect(&server.url()).await.unwrap();
    let (s, info) = client
        .create(SessionOptions::directory().seed_file("seed.txt", "seed\n"))
        .await
        .unwrap();
    let path = |p: &str| parse_path(p).unwrap();
    s.write_str("a.txt", "one\n").await.unwrap();
    s.upload(
        "b.bin",
        std::io::Cursor::new(vec![7u8; 100_000]),
        Default::default(),
    )
    .await
    .unwrap();
    let edit = EditSpec {
        old_text: "one".into(),
        new_text: "two".into(),
        replace_all: false,
        if_version: None,
        dry_run: false,
    };
    s.edit(&path("a.txt"), edit).await.unwrap();
    s.mkdir(
        &path("d/e"),
        MkdirOptions {
            parents: true,
            exist_ok: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    s.copy(
        &path("a.txt"),
        &path("d/e/copy.txt"),
        TransferOptions::default(),
    )
    .await
    .unwrap();
    s.rename(
        &path("b.bin"),
        &path("d/moved.bin"),
        TransferOptions::default(),
    )
    .await
    .unwrap();
    let snapshot = client.snapshot(&info.id, "fsync").await.unwrap();
    s.delete(&path("seed.txt"), DeleteOptions::default())
        .await
        .unwrap();
    let root = info.root_path.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("d/e/copy.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(
        std::fs::read(root.join("d/moved.bin")).unwrap().len(),
        100_000
    );
    assert!(!root.join("seed.txt").exists() && !root.join("b.bin").exists());

    client.restore(&info.id, &snapshot.id).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("seed.txt")).unwrap(),
        "seed\n"
    );
    let mut archive = Vec::new();
    s.export_to_writer(&mut archive, None).await.unwrap();
    s.write_str("extra.txt", "gone after the import\n")
        .await
        .unwrap();
    s.import_from_reader(std::io::Cursor::new(archive))
        .await
        .unwrap();
    assert!(!root.join("extra.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("seed.txt")).unwrap(),
        "seed\n"
    );
    assert!(!server
        .data_dir()
        .join("sessions")
        .join(&info.id)
        .join("staging")
        .join("intent.json")
        .exists());

    client.delete_session(&info.id).await.unwrap();
    assert!(!root.exists());
}
