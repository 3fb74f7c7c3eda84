//! The zones of a SWARM session over real gRPC: `shared/` for everyone,
//! `home/<caller>/` for its owner, `sys/` and the rest for the system
//! caller. Every refusal is PERMISSION_DENIED and changes nothing.

use tonic::Code;
use wsfs_client::{
    Client, DeleteOptions, EditSpec, Error, FileKind, Filesystem, Layout, MkdirOptions, Session,
    SessionOptions, TransferOptions,
};
use wsfs_tests::harness::TestServer;
use wsfs_tests::kit::p;

const ADMIN: &str = "admin-token-for-tests-0123456789";

struct Swarm {
    _server: TestServer,
    system: Session,
    alice: Session,
    bob: Session,
}

async fn swarm(options: SessionOptions) -> Swarm {
    let server = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let admin = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let options = options
        .layout(Layout::Swarm)
        .seed_file("home/bob/plan.md", "bob's plan\n")
        .seed_file("sys/rules.md", "rules\n")
        .seed_file("shared/board.md", "board\n")
        .seed_file("top.md", "top\n");
    let (system, info) = admin.create(options).await.unwrap();
    assert_eq!(info.layout, Layout::Swarm);
    let alice = admin.issue_token(&info.id, "alice").await.unwrap().token;
    let bob = admin.issue_token(&info.id, "bob").await.unwrap().token;
    Swarm {
        alice: admin.session(&info.id).with_token(&alice).unwrap(),
        bob: admin.session(&info.id).with_token(&bob).unwrap(),
        system,
        _server: server,
    }
}

fn assert_denied(err: Error, rule: &str) {
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert_eq!(err.reason(), "PERMISSION_DENIED", "{err}");
    assert!(err.to_string().contains(rule), "{err} should name '{rule}'");
}

/// Every file in the workspace with its content: "nothing changed" is this
/// staying the same.
async fn snapshot(s: &Session) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for path in s
        .glob_query("**")
        .max_results(100_000)
        .run()
        .await
        .unwrap()
        .paths
    {
        let text = s.read_to_string(path.as_str()).await.unwrap();
        out.push((path.as_str().to_string(), text));
    }
    out
}

#[tokio::test]
async fn swarm_sessions_start_with_their_zones() {
    let s = swarm(SessionOptions::memory()).await;
    for zone in ["shared", "home", "sys"] {
        assert_eq!(
            s.system.exists(&p(zone)).await.unwrap(),
            Some(FileKind::Directory)
        );
    }
}

#[tokio::test]
async fn callers_write_shared_and_their_own_home() {
    let s = swarm(SessionOptions::memory()).await;
    s.alice.write_str("shared/notes.md", "a\n").await.unwrap();
    s.bob.write_str("shared/notes.md", "b\n").await.unwrap();
    s.alice
        .write_str("home/alice/todo.md", "t\n")
        .await
        .unwrap();
    s.alice
        .mkdir(&p("home/alice/drafts"), MkdirOptions::default())
        .await
        .unwrap();
    // Everyone reads everything.
    assert_eq!(
        s.alice.read_to_string("home/bob/plan.md").await.unwrap(),
        "bob's plan\n"
    );
    assert_eq!(
        s.bob.read_to_string("sys/rules.md").await.unwrap(),
        "rules\n"
    );
}

#[tokio::test]
async fn writes_outside_ones_zones_are_refused_and_change_nothing() {
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let s = swarm(options).await;
        let before = snapshot(&s.system).await;
        let a = &s.alice;
        assert_denied(
            a.write_str("home/bob/plan.md", "x").await.unwrap_err(),
            "belongs to 'bob'",
        );
        assert_denied(a.write_str("sys/rules.md", "x").await.unwrap_err(), "sys/");
        assert_denied(
            a.write_str("top.md", "x").await.unwrap_err(),
            "only the session's system caller writes",
        );
        let edit = EditSpec {
            old_text: "bob".into(),
            new_text: "alice".into(),
            ..EditSpec::default()
        };
        assert_denied(
            a.edit(&p("home/bob/plan.md"), edit.clone())
                .await
                .unwrap_err(),
            "belongs to 'bob'",
        );
        // A dry run previews the edit at the edit's cost, so it is allowed
        // only where the edit is.
        assert_denied(
            a.edit(
                &p("home/bob/plan.md"),
                EditSpec {
                    dry_run: true,
                    ..edit
                },
            )
            .await
            .unwrap_err(),
            "belongs to 'bob'",
        );
        assert_denied(
            a.mkdir(&p("home/bob/x"), MkdirOptions::default())
                .await
                .unwrap_err(),
            "belongs to 'bob'",
        );
        assert_denied(
            a.delete(&p("sys/rules.md"), DeleteOptions::default())
                .await
                .unwrap_err(),
            "sys/",
        );
        assert_denied(
            a.copy(
                &p("shared/board.md"),
                &p("sys/board.md"),
                TransferOptions::default(),
            )
            .await
            .unwrap_err(),
            "sys/",
        );
        let bytes = wsfs_client::WriteOptions::default();
        let chunks = futures::stream::iter([Ok(bytes::Bytes::from_static(b"x"))]);
        assert_denied(
            a.write_bytes(&p("home/bob/blob"), bytes, Box::pin(chunks))
                .await
                .unwrap_err(),
            "belongs to 'bob'",
        );
        assert_eq!(snapshot(&s.system).await, before);
    }
}

#[tokio::test]
async fn set_attributes_is_a_write_and_keeps_to_the_callers_zones() {
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let s = swarm(options).await;
        let bits = |value| wsfs_client::Attributes {
            permissions: Some(wsfs::Permissions::new(value).unwrap()),
            ..wsfs_client::Attributes::default()
        };
        let before = s.system.stat(&p("home/bob/plan.md")).await.unwrap();
        for path in ["home/bob/plan.md", "sys/rules.md", "top.md"] {
            let err = s.alice.set_attributes(&p(path), bits(0o777)).await;
            assert_eq!(err.unwrap_err().code(), Code::PermissionDenied, "{path}");
        }
        assert_eq!(s.system.stat(&p("home/bob/plan.md")).await.unwrap(), before);

        s.bob
            .set_attributes(&p("home/bob/plan.md"), bits(0o600))
            .await
            .unwrap();
        s.alice
            .set_attributes(&p("shared/board.md"), bits(0o664))
            .await
            .unwrap();
        let plan = s.system.stat(&p("home/bob/plan.md")).await.unwrap();
        assert_eq!(plan.permissions.bits(), 0o600);
    }
}

#[tokio::test]
async fn patches_and_links_are_writes_and_keep_to_the_callers_zones() {
    for options in [SessionOptions::memory(), SessionOptions::directory()] {
        let s = swarm(options).await;
        let before = snapshot(&s.system).await;
        for path in ["home/bob/plan.md", "sys/rules.md", "top.md"] {
            let patched = s.alice.write_at(path, 0, "X").await.unwrap_err();
            assert_denied(patched, "may not write");
            let link = format!("{path}.link");
            let linked = s.alice.create_symlink(&link, "x").await.unwrap_err();
            assert_denied(linked, "may not write");
        }
        assert_eq!(snapshot(&s.system).await, before);

        s.bob.write_at("home/bob/plan.md", 0, "B").await.unwrap();
        s.alice.truncate("shared/board.md", 2).await.unwrap();
        s.alice
            .create_symlink("home/alice/board", "../../shared/board.md")
            .await
            .unwrap();
        assert_eq!(
            s.system.read_to_string("home/bob/plan.md").await.unwrap(),
            "Bob's plan\n"
        );
        assert_eq!(
            s.system.read_to_string("shared/board.md").await.unwrap(),
            "bo"
        );
        let link = s.system.stat(&p("home/alice/board")).await.unwrap();
        assert_eq!(link.kind, FileKind::Symlink);
    }
}

/// DeleteMany keeps to the caller's zones entry by entry: what is hers
/// goes, what is not is refused alone and stays.
#[tokio::test]
async fn delete_many_keeps_to_the_callers_zones_entry_by_entry() {
    let s = swarm(SessionOptions::directory()).await;
    s.alice.write_str("home/alice/a.md", "a\n").await.unwrap();
    s.alice.write_str("shared/note.md", "n\n").await.unwrap();

    let results = s
        .alice
        .delete_many(vec![
            (p("home/alice/a.md"), DeleteOptions::default()),
            (p("home/bob/plan.md"), DeleteOptions::default()),
            (p("sys/rules.md"), DeleteOptions::default()),
            (p("shared/note.md"), DeleteOptions::default()),
        ])
        .await
        .unwrap();

    assert_eq!(results[0].as_ref().ok(), Some(&1));
    assert_denied(results[1].clone().unwrap_err(), "belongs to 'bob'");
    assert_denied(results[2].clone().unwrap_err(), "sys/");
    assert_eq!(results[3].as_ref().ok(), Some(&1));
    assert_eq!(
        snapshot(&s.system).await,
        [
            ("home/bob/plan.md".to_string(), "bob's plan\n".to_string()),
            ("shared/board.md".to_string(), "board\n".to_string()),
            ("sys/rules.md".to_string(), "rules\n".to_string()),
            ("top.md".to_string(), "top\n".to_string()),
        ]
    );
}

#[tokio::test]
async fn recursive_delete_touching_others_files_is_refused_whole() {
    let s = swarm(SessionOptions::directory()).await;
    s.alice
        .write_str("home/alice/mine.md", "m\n")
        .await
        .unwrap();
    let before = snapshot(&s.system).await;
    let recursive = DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    };
    for path in ["home", "", "shared", "home/bob"] {
        let err = s.alice.delete(&p(path), recursive).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{path}: {err}");
    }
    assert_eq!(snapshot(&s.system).await, before);
    // Her own home is hers to empty.
    s.alice.delete(&p("home/alice"), recursive).await.unwrap();
    assert_eq!(
        s.alice.exists(&p("home/alice/mine.md")).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn moving_out_of_another_home_is_refused() {
    let s = swarm(SessionOptions::memory()).await;
    let before = snapshot(&s.system).await;
    assert_denied(
        s.alice
            .rename(
                &p("home/bob/plan.md"),
                &p("shared/plan.md"),
                TransferOptions::default(),
            )
            .await
            .unwrap_err(),
        "belongs to 'bob'",
    );
    assert_denied(
        s.alice
            .rename(
                &p("shared/board.md"),
                &p("home/bob/board.md"),
                TransferOptions::default(),
            )
            .await
            .unwrap_err(),
        "belongs to 'bob'",
    );
    assert_eq!(snapshot(&s.system).await, before);
    // Copying out of it is a read of the source.
    s.alice
        .copy(
            &p("home/bob/plan.md"),
            &p("home/alice/plan.md"),
            TransferOptions::default(),
        )
        .await
        .unwrap();
    s.bob
        .rename(
            &p("home/bob/plan.md"),
            &p("shared/plan.md"),
            TransferOptions::default(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_system_caller_writes_everywhere() {
    let s = swarm(SessionOptions::memory()).await;
    s.system.write_str("sys/rules.md", "new\n").await.unwrap();
    s.system
        .write_str("home/bob/plan.md", "new\n")
        .await
        .unwrap();
    s.system.write_str("top.md", "new\n").await.unwrap();
    let recursive = DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    };
    s.system.delete(&p("home"), recursive).await.unwrap();
}

#[tokio::test]
async fn flat_sessions_have_no_zones_but_still_need_tokens() {
    let server = TestServer::start_with(|c| c.admin_token = Some(ADMIN.into())).await;
    let admin = Client::connect(&server.url())
        .await
        .unwrap()
        .with_token(ADMIN)
        .unwrap();
    let info = admin
        .create_session(SessionOptions::memory())
        .await
        .unwrap();
    let alice = admin.issue_token(&info.id, "alice").await.unwrap().token;
    let alice = admin.session(&info.id).with_token(&alice).unwrap();
    alice.write_str("sys/anything.md", "ok\n").await.unwrap();
    alice.write_str("home/bob/x.md", "ok\n").await.unwrap();
}

#[tokio::test]
async fn zones_apply_with_tokens_off_by_caller_name() {
    let server = TestServer::start().await;
    let client = Client::connect(&server.url()).await.unwrap();
    let info = client
        .create_session(SessionOptions::memory().layout(Layout::Swarm))
        .await
        .unwrap();
    let alice = client.session(&info.id).with_caller("alice").unwrap();
    alice.write_str("home/alice/a.md", "a\n").await.unwrap();
    assert_denied(
        alice.write_str("sys/a.md", "a\n").await.unwrap_err(),
        "sys/",
    );
    // No caller header: the system caller.
    client
        .session(&info.id)
        .write_str("sys/a.md", "a\n")
        .await
        .unwrap();
}
