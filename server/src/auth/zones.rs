//! The zones of a SWARM session, and the one permission function.
//!
//! "Thin trait, fat router": backends know nothing of callers. [`check`]
//! decides every write from (caller, layout, operation, paths) alone, and
//! the zones layer ([`crate::layers::Guarded`], a per-request view over a
//! session's workspace) calls it before every operation that changes
//! anything.
//!
//! | zone | who writes |
//! | --- | --- |
//! | `shared/...` | every caller |
//! | `home/<caller>` and below | that caller |
//! | `sys/...` | the system caller |
//! | everything else, and the zone directories `shared`, `home`, `sys` | the system caller |
//!
//! Reads are always allowed. Because the writable places are whole
//! subtrees, a path check decides a recursive delete whole: a caller may
//! delete a directory only when everything under it is theirs to write, so
//! deleting `home/` or the root is refused before anything goes. A FLAT
//! session has no zones: every caller writes everywhere.

use super::Caller;
use wsfs::{CanonicalPath, Error, Result};

pub use wsfs::Layout;

/// The directories a SWARM session is created with.
pub const ZONE_DIRS: [&str; 3] = ["shared", "home", "sys"];

/// What a call does to the paths it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Write,
    Edit,
    Delete,
    Mkdir,
    /// Paths: `[source, destination]`; both change.
    Move,
    /// Paths: `[source, destination]`; only the destination changes.
    Copy,
    /// Restore and ImportArchive: the whole workspace; no paths.
    ReplaceWorkspace,
}

impl Operation {
    fn verb(self) -> &'static str {
        match self {
            Operation::Write => "write",
            Operation::Edit => "edit",
            Operation::Delete => "delete",
            Operation::Mkdir => "create a directory at",
            Operation::Move => "move",
            Operation::Copy => "copy to",
            Operation::ReplaceWorkspace => "replace",
        }
    }
}

/// Whether `caller` may do `op` on `paths` in a session of `layout`.
/// Denied: PERMISSION_DENIED naming the path and the zone rule.
pub fn check(
    caller: &Caller,
    layout: Layout,
    op: Operation,
    paths: &[&CanonicalPath],
) -> Result<()> {
    let name = match (layout, caller) {
        (Layout::Flat, _) | (_, Caller::System) => return Ok(()),
        (Layout::Swarm, Caller::Named(name)) => name,
    };
    if op == Operation::ReplaceWorkspace {
        return Err(Error::PermissionDenied {
            path: String::new(),
            message: format!(
                "caller '{name}' may not replace the whole workspace: only the session's system caller restores or imports"
            ),
        });
    }
    let changed = if op == Operation::Copy {
        paths.get(1..).unwrap_or_default()
    } else {
        paths
    };
    for path in changed {
        if let Err(rule) = writable_by(name, path) {
            return Err(Error::PermissionDenied {
                path: path.as_str().to_string(),
                message: format!(
                    "caller '{name}' may not {} '{}': {rule}",
                    op.verb(),
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

/// The zone rule that lets `name` write `path`, or the one that forbids it.
fn writable_by(name: &str, path: &CanonicalPath) -> std::result::Result<(), String> {
    let mut segments = path.segments();
    match (segments.next(), segments.next()) {
        (Some("shared"), Some(_)) => Ok(()),
        (Some("home"), Some(owner)) if owner == name => Ok(()),
        (Some("home"), Some(owner)) => Err(format!(
            "home/{owner}/ belongs to '{owner}': only its owner writes there, everyone reads"
        )),
        (Some("shared" | "home"), None) => Err(
            "the zone directories shared/ and home/ themselves are written by the system caller only; write inside shared/ or home/<caller>/".to_string(),
        ),
        (Some("sys"), _) => Err("sys/ is written by the session's system caller only".to_string()),
        _ => Err(
            "outside shared/ and home/<caller>/ only the session's system caller writes".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::parse(s, &wsfs::PathLimits::default()).unwrap()
    }

    fn alice() -> Caller {
        Caller::Named("alice".into())
    }

    fn allowed(op: Operation, paths: &[&str]) -> bool {
        let owned: Vec<_> = paths.iter().map(|s| p(s)).collect();
        let refs: Vec<_> = owned.iter().collect();
        check(&alice(), Layout::Swarm, op, &refs).is_ok()
    }

    #[test]
    fn callers_write_shared_and_their_own_home() {
        assert!(allowed(Operation::Write, &["shared/a.md"]));
        assert!(allowed(Operation::Write, &["home/alice/notes.md"]));
        assert!(allowed(Operation::Delete, &["home/alice"]));
    }

    #[test]
    fn everything_else_is_refused() {
        for path in [
            "home/bob/x",
            "sys/x",
            "top.md",
            "",
            "home",
            "shared",
            "homely/x",
        ] {
            assert!(!allowed(Operation::Write, &[path]), "{path}");
        }
    }

    #[test]
    fn move_checks_both_ends_copy_only_the_destination() {
        assert!(!allowed(Operation::Move, &["home/bob/x", "shared/x"]));
        assert!(allowed(Operation::Copy, &["home/bob/x", "shared/x"]));
        assert!(!allowed(Operation::Copy, &["shared/x", "sys/x"]));
    }

    #[test]
    fn system_writes_everywhere_and_flat_has_no_zones() {
        let root = p("");
        assert!(check(&Caller::System, Layout::Swarm, Operation::Delete, &[&root]).is_ok());
        assert!(check(&alice(), Layout::Flat, Operation::Delete, &[&root]).is_ok());
    }

    #[test]
    fn denial_names_the_rule() {
        let path = p("home/bob/x");
        let err = check(&alice(), Layout::Swarm, Operation::Write, &[&path]).unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied);
        assert_eq!(err.reason(), "PERMISSION_DENIED");
        assert!(err.to_string().contains("belongs to 'bob'"), "{err}");
    }

    #[test]
    fn only_the_system_caller_replaces_the_workspace() {
        let err = check(&alice(), Layout::Swarm, Operation::ReplaceWorkspace, &[]).unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied);
    }
}
