//! Archives and host mounts beside `zip -qr`, `unzip -q` and `cp -r`, on
//! a tree of source-like text files (10,000 files, 200 MB by default).
//!
//! The tree is mounted into a DIRECTORY session (timed, beside `cp -r` of
//! the same tree). Each round then exports that session to a file (beside
//! `zip -qr` of the session's root) and imports the archive into a fresh,
//! empty DIRECTORY session (beside `unzip -q` of the same archive into an
//! empty directory), alternating wsfs and the baseline on the same input
//! with `sync` before every timed step. Archive sizes and the MEMORY
//! session's import and export go to the notes.

use crate::report::{Row, Samples, Target};
use crate::{failed, trees};
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use wsfs_client::{Client, HostMount, SessionOptions};

/// Runs a baseline command; its wall time in seconds.
pub fn timed(command: &mut Command) -> Result<f64, String> {
    trees::settle();
    let started = Instant::now();
    let status = command
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{command:?} failed: {status}"));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The archive figures. `work` must lie inside one of the server's
/// allowed roots (the tree is mounted from there).
pub async fn run(
    client: &Client,
    work: &Path,
    files: usize,
    total_bytes: u64,
    runs: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let tree = work.join("tree");
    eprintln!("archive: writing {files} source-like files...");
    trees::source_like(&tree, files, total_bytes)?;
    let stored = (total_bytes / files as u64) * files as u64;
    let shape = format!("{files} files, {:.0} MB", stored as f64 / 1e6);

    trees::settle();
    let t = Instant::now();
    let (source, info) = client
        .create(SessionOptions::directory().mount(HostMount::new(&tree, "")))
        .await
        .map_err(failed("CreateSession with a host mount"))?;
    let mount = t.elapsed().as_secs_f64();
    let copied = work.join("copied");
    let cp = timed(Command::new("cp").arg("-r").arg(&tree).arg(&copied))?;
    let _ = std::fs::remove_dir_all(&copied);
    let root = info.root_path.clone().ok_or("no root path")?;

    let archive = work.join("wsfs.zip");
    let zip_out = work.join("zip.zip");
    let unzip_dir = work.join("unzipped");
    let (mut export, mut zip) = (Samples::default(), Samples::default());
    let (mut import, mut unzip) = (Samples::default(), Samples::default());
    let (mut size, mut zip_size) = (0, 0);
    for run in 0..runs {
        eprintln!("archive: run {}/{runs}", run + 1);
        let _ = std::fs::remove_file(&archive);
        trees::settle();
        let t = Instant::now();
        size = source
            .export_to(&archive)
            .await
            .map_err(failed("ExportArchive"))?;
        export.push(t.elapsed().as_secs_f64());

        // zip updates an existing archive: start from none.
        let _ = std::fs::remove_file(&zip_out);
        zip.push(timed(
            Command::new("zip")
                .arg("-qr")
                .arg(&zip_out)
                .arg(".")
                .current_dir(&root),
        )?);
        zip_size = std::fs::metadata(&zip_out).map_or(0, |m| m.len());

        let (target, target_info) = client
            .create(SessionOptions::directory())
            .await
            .map_err(failed("CreateSession"))?;
        trees::settle();
        let t = Instant::now();
        let (count, bytes) = target
            .import_from(&archive)
            .await
            .map_err(failed("ImportArchive"))?;
        import.push(t.elapsed().as_secs_f64());
        if (count, bytes) != (files as u64, stored) {
            return Err(format!(
                "ImportArchive brought {count} files / {bytes} bytes, not {files} / {stored}"
            ));
        }
        let _ = client.delete_session(&target_info.id).await;

        let _ = std::fs::remove_dir_all(&unzip_dir);
        unzip.push(timed(
            Command::new("unzip")
                .arg("-q")
                .arg(&archive)
                .arg("-d")
                .arg(&unzip_dir),
        )?);
    }
    let _ = std::fs::remove_dir_all(&unzip_dir);
    notes.push(format!(
        "Archive sizes: wsfs {:.1} MB, zip -qr {:.1} MB.",
        size as f64 / 1e6,
        zip_size as f64 / 1e6
    ));
    notes.push(memory_note(client, &archive, work).await?);
    let _ = client.delete_session(&info.id).await;
    Ok(vec![
        Row::new(
            format!("Host mount at CreateSession ({shape}), wall time"),
            "s",
            Samples::single(mount),
        )
        .baseline("cp -r", Samples::single(cp)),
        Row::new(format!("ExportArchive ({shape}), wall time"), "s", export)
            .baseline("zip -qr", zip)
            .target(Target::AtMostTimes(1.0)),
        Row::new(format!("ImportArchive ({shape}), wall time"), "s", import)
            .baseline("unzip -q", unzip)
            .target(Target::AtMostTimes(1.0)),
    ])
}

/// One import into, and one export from, a MEMORY session.
async fn memory_note(client: &Client, archive: &Path, work: &Path) -> Result<String, String> {
    let (memory, info) = client
        .create(SessionOptions::memory())
        .await
        .map_err(failed("CreateSession"))?;
    let t = Instant::now();
    memory
        .import_from(archive)
        .await
        .map_err(failed("ImportArchive into MEMORY"))?;
    let import = t.elapsed().as_secs_f64();
    let out = work.join("memory.zip");
    let t = Instant::now();
    memory
        .export_to(&out)
        .await
        .map_err(failed("ExportArchive from MEMORY"))?;
    let export = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&out);
    let _ = client.delete_session(&info.id).await;
    Ok(format!(
        "MEMORY session, one run: ImportArchive {import:.2} s, ExportArchive to a file {export:.2} s."
    ))
}
