//! `wsfs mcp` driven by a real MCP client (the official Rust SDK's), over
//! the child process's stdio, against the test server: the tool list and
//! every tool, refusals included.

use super::{server_url, Workspace};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::{json, Value};

type McpClient = RunningService<RoleClient, ()>;

async fn connect(session: &str) -> McpClient {
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_wsfs")).configure(|c| {
        c.arg("mcp")
            .env_remove("WSFS_TOKEN")
            .env("WSFS_SERVER", server_url())
            .env("WSFS_SESSION", session);
    });
    ().serve(TokioChildProcess::new(command).expect("start wsfs mcp"))
        .await
        .expect("MCP handshake")
}

/// Calls a tool; (is_error, its text).
async fn call(client: &McpClient, tool: &str, args: Value) -> (bool, String) {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"));
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    (result.is_error == Some(true), text)
}

async fn ok(client: &McpClient, tool: &str, args: Value) -> String {
    let (failed, text) = call(client, tool, args).await;
    assert!(!failed, "{tool} failed: {text}");
    text
}

async fn refused(client: &McpClient, tool: &str, args: Value, reason: &str) -> String {
    let (failed, text) = call(client, tool, args).await;
    assert!(failed, "{tool} should fail with {reason}: {text}");
    assert!(
        text.starts_with(&format!("{reason}: ")),
        "{tool}: expected {reason}, got {text}"
    );
    text
}

#[tokio::test]
async fn mcp_lists_every_tool_with_a_description_and_schema() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "copy",
            "delete",
            "diff_snapshot",
            "edit",
            "glob",
            "grep",
            "list",
            "list_snapshots",
            "mkdir",
            "move",
            "multi_edit",
            "read",
            "restore",
            "snapshot",
            "stat",
            "write"
        ]
    );
    for tool in &tools {
        assert!(
            tool.description.as_deref().is_some_and(|d| d.len() > 20),
            "{} needs a description",
            tool.name
        );
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
    }
    let read = tools.iter().find(|t| t.name == "read").unwrap();
    let required = read.input_schema.get("required").unwrap();
    assert_eq!(required, &json!(["path"]));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_write_takes_octal_permissions_and_refuses_setuid() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    ok(
        &client,
        "write",
        json!({"path": "run.sh", "content": "#!/bin/sh\n", "permissions": "755"}),
    )
    .await;
    let stat = ws.run(&["stat", "run.sh", "--json"]).ok().json();
    assert_eq!(stat["permissions"], 0o755);
    refused(
        &client,
        "write",
        json!({"path": "run.sh", "content": "x", "permissions": "4755"}),
        "INVALID_ARGUMENT",
    )
    .await;
    assert_eq!(ws.cat("run.sh"), "#!/bin/sh\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_files_read_write_edit_and_versions() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    let written = ok(
        &client,
        "write",
        json!({"path": "src/lib.rs", "content": "fn a() {}\nfn b() {}\n"}),
    )
    .await;
    assert!(written.starts_with("created src/lib.rs"), "{written}");
    assert_eq!(ws.cat("src/lib.rs"), "fn a() {}\nfn b() {}\n");

    let page = ok(
        &client,
        "read",
        json!({"path": "src/lib.rs", "offset": 1, "limit": 1}),
    )
    .await;
    assert!(
        page.starts_with("fn b() {}\n[src/lib.rs: lines 2-2 of 2, version "),
        "{page}"
    );
    let version: u64 = page
        .rsplit("version ")
        .next()
        .unwrap()
        .trim_end_matches(']')
        .parse()
        .unwrap();

    let dry = ok(
        &client,
        "edit",
        json!({"path": "src/lib.rs", "old_text": "fn a", "new_text": "pub fn a", "dry_run": true}),
    )
    .await;
    assert!(dry.contains("-fn a() {}\n+pub fn a() {}"), "{dry}");
    assert_eq!(ws.cat("src/lib.rs"), "fn a() {}\nfn b() {}\n");
    ok(
        &client,
        "edit",
        json!({"path": "src/lib.rs", "old_text": "fn a", "new_text": "pub fn a", "if_version": version}),
    )
    .await;
    assert_eq!(ws.cat("src/lib.rs"), "pub fn a() {}\nfn b() {}\n");

    // The version read before the edit is stale now.
    let stale = refused(
        &client,
        "write",
        json!({"path": "src/lib.rs", "content": "x", "if_version": version}),
        "VERSION_MISMATCH",
    )
    .await;
    assert!(stale.contains("`read` it again"), "{stale}");
    refused(
        &client,
        "edit",
        json!({"path": "src/lib.rs", "old_text": "fn", "new_text": "f"}),
        "AMBIGUOUS_MATCH",
    )
    .await;
    refused(
        &client,
        "edit",
        json!({"path": "src/lib.rs", "old_text": "absent", "new_text": "f"}),
        "NO_MATCH",
    )
    .await;
    refused(
        &client,
        "write",
        json!({"path": "src/lib.rs", "content": "x", "mode": "create"}),
        "ALREADY_EXISTS",
    )
    .await;
    refused(
        &client,
        "read",
        json!({"path": "../etc/passwd"}),
        "PATH_ESCAPES_ROOT",
    )
    .await;
    refused(
        &client,
        "read",
        json!({"path": "nope.txt"}),
        "FILE_NOT_FOUND",
    )
    .await;
    refused(
        &client,
        "write",
        json!({"path": "a", "content": "x", "mode": "sideways"}),
        "INVALID_ARGUMENT",
    )
    .await;
    assert_eq!(ws.cat("src/lib.rs"), "pub fn a() {}\nfn b() {}\n");

    ok(
        &client,
        "write",
        json!({"path": "log.txt", "content": "one\n"}),
    )
    .await;
    ok(
        &client,
        "write",
        json!({"path": "log.txt", "content": "two\n", "mode": "append"}),
    )
    .await;
    assert_eq!(ws.cat("log.txt"), "one\ntwo\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_multi_edit_applies_all_or_nothing() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    ok(
        &client,
        "write",
        json!({"path": "m.txt", "content": "alpha\nbeta\ngamma\n"}),
    )
    .await;
    let failed = refused(
        &client,
        "multi_edit",
        json!({"path": "m.txt", "edits": [
            {"old_text": "alpha", "new_text": "ALPHA"},
            {"old_text": "missing", "new_text": "x"}
        ]}),
        "NO_MATCH",
    )
    .await;
    // The edit's index apart from the path, which is quoted alone.
    assert!(failed.contains("'m.txt' (edit 2 of 2)"), "{failed}");
    assert!(!failed.contains("m.txt (edit"), "{failed}");
    assert_eq!(ws.cat("m.txt"), "alpha\nbeta\ngamma\n");

    let dry = ok(
        &client,
        "multi_edit",
        json!({"path": "m.txt", "dry_run": true, "edits": [
            {"old_text": "alpha", "new_text": "ALPHA"},
            {"old_text": "ALPHA\nbeta", "new_text": "ALPHA\nBETA"}
        ]}),
    )
    .await;
    assert!(
        dry.contains("+ALPHA\n+BETA") && dry.contains("dry run"),
        "{dry}"
    );
    assert_eq!(ws.cat("m.txt"), "alpha\nbeta\ngamma\n");
    ok(
        &client,
        "multi_edit",
        json!({"path": "m.txt", "edits": [
            {"old_text": "alpha", "new_text": "ALPHA"},
            {"old_text": "a", "new_text": "A", "replace_all": true}
        ]}),
    )
    .await;
    assert_eq!(ws.cat("m.txt"), "ALPHA\nbetA\ngAmmA\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_tree_search_and_transfers() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    ok(&client, "mkdir", json!({"path": "src/deep"})).await;
    ok(
        &client,
        "write",
        json!({"path": "src/deep/x.rs", "content": "// TODO one\nlet x = 1;\n"}),
    )
    .await;
    ok(
        &client,
        "write",
        json!({"path": "notes.md", "content": "todo: two\n"}),
    )
    .await;

    let listing = ok(&client, "list", json!({"path": "src", "depth": 2})).await;
    assert!(
        listing.contains("dir") && listing.contains("src/deep/x.rs"),
        "{listing}"
    );
    let globbed = ok(&client, "glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(globbed.trim(), "src/deep/x.rs");
    let found = ok(
        &client,
        "grep",
        json!({"pattern": "todo", "case_insensitive": true, "context_lines": 1}),
    )
    .await;
    assert!(found.contains("notes.md:1:todo: two"), "{found}");
    assert!(found.contains("src/deep/x.rs:1:// TODO one"), "{found}");
    assert!(found.contains("src/deep/x.rs-2-let x = 1;"), "{found}");
    assert!(
        found.ends_with("[2 match(es) in 2 file(s) searched]"),
        "{found}"
    );
    refused(&client, "grep", json!({"pattern": "("}), "INVALID_PATTERN").await;

    let stat = ok(&client, "stat", json!({"path": "notes.md"})).await;
    assert!(
        stat.starts_with("file") && stat.contains("notes.md"),
        "{stat}"
    );
    ok(&client, "copy", json!({"from": "src", "to": "backup/src"})).await;
    assert_eq!(ws.cat("backup/src/deep/x.rs"), "// TODO one\nlet x = 1;\n");
    refused(
        &client,
        "move",
        json!({"from": "notes.md", "to": "backup/src/deep/x.rs"}),
        "ALREADY_EXISTS",
    )
    .await;
    ok(
        &client,
        "move",
        json!({"from": "notes.md", "to": "docs/notes.md"}),
    )
    .await;
    assert_eq!(ws.cat("docs/notes.md"), "todo: two\n");
    refused(
        &client,
        "delete",
        json!({"path": "backup"}),
        "DIRECTORY_NOT_EMPTY",
    )
    .await;
    ok(
        &client,
        "delete",
        json!({"path": "backup", "recursive": true}),
    )
    .await;
    refused(&client, "stat", json!({"path": "backup"}), "FILE_NOT_FOUND").await;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_snapshot_and_restore_undo_changes() {
    let ws = Workspace::new();
    let client = connect(&ws.id).await;
    ok(
        &client,
        "write",
        json!({"path": "keep.txt", "content": "v1\n"}),
    )
    .await;
    let taken = ok(&client, "snapshot", json!({"tag": "before"})).await;
    let id = taken
        .strip_prefix("snapshot ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_string();
    ok(
        &client,
        "write",
        json!({"path": "keep.txt", "content": "v2\n"}),
    )
    .await;
    ok(
        &client,
        "write",
        json!({"path": "new.txt", "content": "x\n"}),
    )
    .await;
    let listed = ok(&client, "list_snapshots", json!({})).await;
    assert!(
        listed.contains(&id) && listed.contains("before"),
        "{listed}"
    );
    let diff = ok(&client, "diff_snapshot", json!({"snapshot_id": id})).await;
    assert_eq!(diff, "M  keep.txt\nA  new.txt\n");
    // Named as the CLI names snapshots: by tag, by the start of the id.
    let by_tag = ok(&client, "diff_snapshot", json!({"snapshot_id": "before"})).await;
    assert_eq!(by_tag, diff);
    let by_prefix = ok(&client, "diff_snapshot", json!({"snapshot_id": &id[..8]})).await;
    assert_eq!(by_prefix, diff);
    // One path first: keep.txt comes back, new.txt stays.
    let one = ok(
        &client,
        "restore",
        json!({"snapshot_id": id, "path": "keep.txt"}),
    )
    .await;
    assert!(one.contains("at keep.txt (1 files"), "{one}");
    assert_eq!(ws.cat("keep.txt"), "v1\n");
    assert_eq!(ws.cat("new.txt"), "x\n");
    let restored = ok(&client, "restore", json!({"snapshot_id": "before"})).await;
    assert!(restored.contains(&id), "the full id is said: {restored}");
    assert_eq!(ws.cat("keep.txt"), "v1\n");
    refused(
        &client,
        "stat",
        json!({"path": "new.txt"}),
        "FILE_NOT_FOUND",
    )
    .await;
    let missing = refused(
        &client,
        "restore",
        json!({"snapshot_id": "00000000-0000-0000-0000-000000000000"}),
        "SNAPSHOT_NOT_FOUND",
    )
    .await;
    assert!(missing.contains("list_snapshots"), "what to do: {missing}");
    let clean = ok(&client, "diff_snapshot", json!({"snapshot_id": id})).await;
    assert!(clean.contains("nothing changed"), "{clean}");
    client.cancel().await.unwrap();
}

#[test]
fn mcp_without_a_live_session_exits_before_the_handshake() {
    let run = super::wsfs_with(
        Some("00000000-0000-0000-0000-000000000000"),
        &["mcp"],
        b"",
        server_url(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("wsfs: SESSION_NOT_FOUND: "),
        "{}",
        run.stderr
    );
}
