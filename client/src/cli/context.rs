//! `wsfs use`: the server, session and token the CLI uses when neither a
//! flag nor a variable names them, saved in a small JSON file
//! (`$WSFS_CONFIG`, else `wsfs/context.json` under the user's
//! configuration directory), written atomically and readable by its owner
//! only, since it may hold a token. Flags and variables always win.

use super::{local, Failure, Outcome};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What `wsfs use` saved.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Where the context lives.
pub fn file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("WSFS_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    dirs::config_dir().map(|d| d.join("wsfs").join("context.json"))
}

/// The saved context; none when there is no file. A file that cannot be
/// read or parsed is an error that names it, not a silent default.
pub fn load() -> Outcome<Saved> {
    let Some(path) = file() else {
        return Ok(Saved::default());
    };
    match std::fs::read(&path) {
        Ok(raw) => serde_json::from_slice(&raw).map_err(|e| {
            Failure::Local(format!(
                "'{}' is not a wsfs context ({e}); fix it or remove it with `wsfs use --clear`",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Saved::default()),
        Err(e) => Err(Failure::Local(format!(
            "cannot read '{}': {e}",
            path.display()
        ))),
    }
}

/// Saves `saved`, replacing the file whole.
pub fn save(saved: &Saved) -> Outcome<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = file().ok_or_else(|| {
        Failure::Local("no configuration directory: set WSFS_CONFIG to a file path".into())
    })?;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).map_err(local(format!("cannot create '{}'", dir.display())))?;
    let staged = dir.join(format!(".context.{}.tmp", std::process::id()));
    let text = serde_json::to_vec_pretty(saved)
        .map_err(|e| Failure::Local(format!("cannot encode the context: {e}")))?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staged)
        .map_err(local(format!("cannot write '{}'", staged.display())))?;
    out.write_all(&text)
        .and_then(|()| out.sync_all())
        .map_err(local(format!("cannot write '{}'", staged.display())))?;
    std::fs::rename(&staged, &path).map_err(local(format!("cannot write '{}'", path.display())))?;
    Ok(path)
}

/// Forgets the context; true when there was one.
pub fn clear() -> Outcome<bool> {
    let Some(path) = file() else {
        return Ok(false);
    };
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Failure::Local(format!(
            "cannot remove '{}': {e}",
            path.display()
        ))),
    }
}
