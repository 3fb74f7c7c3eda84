//! The operator's container runtimes (`--container-runtime NAME=TEMPLATE`).
//!
//! TEMPLATE is split on whitespace once, at server start, and each word
//! keeps its place in the argv; a client's container name and workdir
//! (checked by [`crate::container`]) are put in place of `{name}` and
//! `{workdir}` inside words. No shell ever sees them, so they cannot add
//! words, redirect or chain commands.

use std::str::FromStr;
use wsfs::{Error, Result};

/// The placeholders a template may use.
const PLACEHOLDERS: [&str; 3] = ["{name}", "{workdir}", "{wsfs}"];

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
pub(crate) fn is_plain_name(name: &str) -> bool {
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

impl ContainerRuntime {
    /// The argv that runs a wsfs serving `workdir` inside container
    /// `name` (both checked by the caller), with `wsfs` for `{wsfs}`.
    pub fn argv(&self, name: &str, workdir: &str, wsfs: &std::path::Path) -> Vec<String> {
        let wsfs = wsfs.to_string_lossy();
        self.argv
            .iter()
            .map(|word| {
                word.replace("{name}", name)
                    .replace("{workdir}", workdir)
                    .replace("{wsfs}", &wsfs)
            })
            .collect()
    }
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

    #[test]
    fn templates_are_split_once_and_names_fill_words_in_place() {
        let r: ContainerRuntime = "podman=podman exec -i {name} {wsfs} --stdio {workdir}"
            .parse()
            .unwrap();
        assert_eq!(r.name, "podman");
        assert_eq!(
            r.argv(
                "web-1",
                "/srv/app",
                std::path::Path::new("/bin/wsfs-server")
            ),
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
