//! A three-agent swarm over one SWARM session, coordinated only through the
//! workspace: the planner posts tasks to `shared/tasks/`, two workers claim
//! each task with a CREATE-mode claim file `shared/claims/<task>` (exactly
//! one claim succeeds; the other gets ALREADY_EXISTS), write the result to
//! their own `home/<worker>/`, and the planner collects results by watching
//! `home/`. Run by `tests/tests/watch.rs` and by `examples/swarm.rs`.

use crate::kit::p;
use futures::StreamExt;
use std::collections::BTreeMap;
use wsfs_client::{
    ChangeKind, Client, Error, Filesystem, Layout, Result, Session, SessionOptions, WriteMode,
    WriteOptions,
};

/// Runs the swarm with `tasks` tasks against the server at `url` (tokens on,
/// `admin` its admin token). Returns each task's result and who did it.
pub async fn run(url: &str, admin: &str, tasks: usize) -> Result<BTreeMap<String, String>> {
    let admin = Client::connect(url).await?.with_token(admin)?;
    let (system, info) = admin
        .create(SessionOptions::memory().layout(Layout::Swarm))
        .await?;
    let member = |name: &'static str| {
        let admin = admin.clone();
        let id = info.id.clone();
        async move {
            let token = admin.issue_token(&id, name).await?.token;
            admin.session(&id).with_token(&token)
        }
    };
    let planner = member("planner").await?;
    // The planner watches before posting, so no result can slip by.
    let mut results = planner.watch("home").recursive().stream().await?;
    results.next().await.transpose()?; // READY
    let mut workers = Vec::new();
    for name in ["worker-a", "worker-b"] {
        let session = member(name).await?;
        workers.push(tokio::spawn(work(session, name)));
    }
    for i in 0..tasks {
        let task = format!("task-{i:03}");
        planner
            .write(
                &p(&format!("shared/tasks/{task}")),
                &format!("square {i}\n"),
                WriteOptions::default(),
            )
            .await?;
    }
    let mut collected = BTreeMap::new();
    while collected.len() < tasks {
        let Some(event) = results.next().await.transpose()? else {
            break;
        };
        if event.kind() != ChangeKind::Created {
            continue;
        }
        let result = planner.read(&p(&event.path), Default::default()).await?;
        let task = event
            .path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        collected.insert(
            task,
            format!("{} by {}", result.content.trim(), event.caller),
        );
    }
    // Tell the workers to stop, then wait for them.
    system
        .write(&p("shared/done"), "", WriteOptions::default())
        .await?;
    for w in workers {
        w.await.map_err(|e| Error::internal(e.to_string()))??;
    }
    Ok(collected)
}

/// A worker: watches `shared/`, claims each new task, does it, and stops
/// when `shared/done` appears.
async fn work(session: Session, name: &'static str) -> Result<()> {
    let mut events = session.watch("shared").recursive().stream().await?;
    events.next().await.transpose()?; // READY
                                      // Tasks posted before the watch started are picked up from a listing.
    let mut pending: Vec<String> = match session.list(&p("shared/tasks"), 1).await {
        Ok(listing) => listing
            .entries
            .into_iter()
            .map(|e| e.path.as_str().to_string())
            .collect(),
        Err(_) => Vec::new(),
    };
    loop {
        for path in pending.drain(..) {
            let task = path.rsplit('/').next().unwrap_or_default().to_string();
            let claim = WriteOptions {
                mode: WriteMode::Create,
                ..WriteOptions::default()
            };
            match session
                .write(&p(&format!("shared/claims/{task}")), name, claim)
                .await
            {
                Ok(_) => {}
                Err(Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e),
            }
            let input = session.read(&p(&path), Default::default()).await?;
            let n: u64 = input
                .content
                .trim()
                .trim_start_matches("square ")
                .parse()
                .unwrap_or(0);
            session
                .write(
                    &p(&format!("home/{name}/{task}")),
                    &(n * n).to_string(),
                    WriteOptions::default(),
                )
                .await?;
        }
        let Some(event) = events.next().await.transpose()? else {
            return Ok(());
        };
        if event.path == "shared/done" {
            return Ok(());
        }
        if event.kind() == ChangeKind::Created && event.path.starts_with("shared/tasks/") {
            pending.push(event.path);
        }
    }
}
