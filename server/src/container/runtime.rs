//! The operator's container runtimes and what a client may name of them.
//!
//! A runtime is `NAME=TEMPLATE`: TEMPLATE is split on whitespace once, at
//! server start, and each word keeps its place in the argv; the client's
//! container name and workdir are checked against tight rules and then
//! put in place of `{name}` and `{workdir}` inside words. No shell ever
//! sees them, so they cannot add words, redirect or chain commands.

use std::path::PathBuf;
use std::str::FromStr;
use wsfs::{Error, Result};

/// The placeholders a template may use.
const PLACEHOLDERS: [&str; 3] = ["{name}", "{workdir}", "{wsfs}"];

/// Longest container workdir accepted, in bytes.
pub const MAX_WORKDIR_BYTES: usize = 4096;

/// Longest container name (and runtime name) accepted.
const MAX_NAME_CHARS: usize = 128;

/// One runtime from `--container-runtime NAME=TEMPLATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRuntime {
    pub name: String,
    argv: Vec<String>,
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`: what container and runtime names
/// may be, so that no name is an option, a path or empty.
fn is_plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= MAX_NAME_CHARS
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl FromStr for ContainerRuntime {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (name, template) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}' is not of the form NAME=TEMPLATE"))?;
        let name = name.trim();
        if !is_plain_name(name) {
            return Err(format!(
                "runtime name '{name}' must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}"
            ));
        }
        let argv: Vec<String> = template.split_whitespace().map(str::to_string).collect();
        if argv.is_empty() {
            return Err(format!("runtime '{name}' has an empty template"));
        }
        for word in &argv {
            let mut rest = word.as_str();
            while let Some(open) = rest.find('{') {
                let known = PLACEHOLDERS
                    .iter()
                    .find(|p| rest[open..].starts_with(*p))
                    .ok_or_else(|| {
                        format!(
                            "runtime '{name}': '{word}' holds an unknown placeholder; the known ones are {}",
                            PLACEHOLDERS.join(", ")
                        )
                    })?;
                rest = &rest[open + known.len()..];
            }
        }
        Ok(ContainerRuntime {
            name: name.to_string(),
            argv,
        })
    }
}

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

    pub fn to_proto(&self) -> wsfs::proto::ContainerSpec {
        wsfs::proto::ContainerSpec {
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

impl ContainerRuntime {
    /// The argv that runs a wsfs serving `target.workdir` inside
    /// `target.name`, with `wsfs` for `{wsfs}`.
    pub fn argv(&self, target: &ContainerTarget, wsfs: &std::path::Path) -> Vec<String> {
        let wsfs = wsfs.to_string_lossy();
        self.argv
            .iter()
            .map(|word| {
                word.replace("{name}", &target.name)
                    .replace("{workdir}", &target.workdir)
                    .replace("{wsfs}", &wsfs)
            })
            .collect()
    }
}

/// The server's own executable, for `{wsfs}`.
pub fn own_executable() -> Result<PathBuf> {
    std::env::current_exe()
        .map_err(|e| Error::internal(format!("cannot find the server's own executable: {e}")))
}

/// The configured runtime `name`: none configured is FAILED_PRECONDITION,
/// an unknown one INVALID_ARGUMENT naming those there are.
pub fn lookup<'a>(runtimes: &'a [ContainerRuntime], name: &str) -> Result<&'a ContainerRuntime> {
    if runtimes.is_empty() {
        return Err(Error::FailedPrecondition {
            message: "this server has no container runtime; its operator adds them with --container-runtime NAME=TEMPLATE".to_string(),
        });
    }
    runtimes.iter().find(|r| r.name == name).ok_or_else(|| {
        let known: Vec<&str> = runtimes.iter().map(|r| r.name.as_str()).collect();
        Error::invalid_argument(format!(
            "unknown container runtime '{}'; this server has: {}",
            wsfs::path::quote(name),
            known.join(", ")
        ))
    })
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
    fn templates_are_split_once_and_names_fill_words_in_place() {
        let r: ContainerRuntime = "podman=podman exec -i {name} {wsfs} --stdio {workdir}"
            .parse()
            .unwrap();
        assert_eq!(r.name, "podman");
        let t = target("web-1", "/srv/app").unwrap();
        assert_eq!(
            r.argv(&t, std::path::Path::new("/bin/wsfs-server")),
            [
                "podman",
                "exec",
                "-i",
                "web-1",
                "/bin/wsfs-server",
                "--stdio",
                "/srv/app"
            ]
        );
    }

    #[test]
    fn bad_templates_are_refused_at_start() {
        for bad in [
            "podman",
            "=podman exec",
            "-x=podman exec",
            "p=",
            "p=   ",
            "p=run {nam}",
            "p=run {workdir}{shell}",
        ] {
            assert!(bad.parse::<ContainerRuntime>().is_err(), "{bad}");
        }
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

    #[test]
    fn lookup_names_the_configured_runtimes() {
        let err = lookup(&[], "podman").unwrap_err();
        assert_eq!(err.reason(), "FAILED_PRECONDITION");
        let runtimes: Vec<ContainerRuntime> = vec![
            "bwrap=bwrap {wsfs}".parse().unwrap(),
            "podman=podman exec -i {name}".parse().unwrap(),
        ];
        let err = lookup(&runtimes, "docker").unwrap_err();
        assert_eq!(err.reason(), "INVALID_ARGUMENT");
        assert!(err.to_string().contains("bwrap, podman"), "{err}");
        assert_eq!(lookup(&runtimes, "podman").unwrap().name, "podman");
    }
}
