//! What a client may name of a container: its name and workdir, checked
//! against tight rules before a runtime ([`crate::config::runtime`], the
//! operator's templates) puts them in place of `{name}` and `{workdir}`.

use crate::config::runtime::is_plain_name;
pub use crate::config::runtime::{lookup, ContainerRuntime};
use std::path::PathBuf;
use wsfs::{Error, Result};

/// Longest container workdir accepted, in bytes.
pub const MAX_WORKDIR_BYTES: usize = 4096;

pub use crate::kind::ContainerTarget;

impl ContainerTarget {
    /// Parses the request's ContainerSpec; bad input is INVALID_ARGUMENT.
    pub fn parse(spec: &wsfs::proto::ContainerSpec) -> Result<ContainerTarget> {
        if !is_plain_name(&spec.name) {
            return Err(Error::invalid_argument(format!(
                "container name '{}' must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}",
                wsfs::path::quote(&spec.name)
            )));
        }
        check_workdir(&spec.workdir)?;
        Ok(ContainerTarget {
            runtime: spec.runtime.clone(),
            name: spec.name.clone(),
            workdir: spec.workdir.clone(),
        })
    }

    pub fn to_spec(&self) -> wsfs::ContainerSpec {
        wsfs::ContainerSpec {
            runtime: self.runtime.clone(),
            name: self.name.clone(),
            workdir: self.workdir.clone(),
        }
    }
}

/// An absolute path in canonical form: starts with `/`, no empty, `.` or
/// `..` segments, no trailing `/` (but `/` itself), no NUL or control
/// characters, at most [`MAX_WORKDIR_BYTES`].
fn check_workdir(workdir: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::invalid_argument(format!(
            "container workdir '{}' {why}",
            wsfs::path::quote(workdir)
        ))
    };
    if workdir.len() > MAX_WORKDIR_BYTES {
        return Err(bad(&format!("is longer than {MAX_WORKDIR_BYTES} bytes")));
    }
    let Some(rest) = workdir.strip_prefix('/') else {
        return Err(bad("must be an absolute path"));
    };
    if workdir.chars().any(char::is_control) {
        return Err(bad("holds control characters"));
    }
    if rest.is_empty() {
        return Ok(());
    }
    for seg in rest.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(bad(
                "must be canonical: no empty, '.' or '..' segments and no trailing '/'",
            ));
        }
    }
    Ok(())
}

/// The server's own executable, for `{wsfs}`.
pub fn own_executable() -> Result<PathBuf> {
    std::env::current_exe()
        .map_err(|e| Error::internal(format!("cannot find the server's own executable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, workdir: &str) -> Result<ContainerTarget> {
        ContainerTarget::parse(&wsfs::proto::ContainerSpec {
            runtime: "r".into(),
            name: name.into(),
            workdir: workdir.into(),
        })
    }

    #[test]
    fn container_names_and_workdirs_are_checked() {
        for name in ["", "-rm", ".hidden", "a b", "a/b", "a;b", &"x".repeat(129)] {
            let err = target(name, "/w").unwrap_err();
            assert_eq!(err.reason(), "INVALID_ARGUMENT", "{name}");
        }
        for workdir in ["", "w", "/w/", "/w/../x", "/./w", "//w", "/w\n", "/a//b"] {
            let err = target("c", workdir).unwrap_err();
            assert_eq!(err.reason(), "INVALID_ARGUMENT", "{workdir:?}");
        }
        target("c.1_x-y", "/").unwrap();
        target("C", "/work space/a.b").unwrap();
    }
}
