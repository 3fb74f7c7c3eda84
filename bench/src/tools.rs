//! The programs the baselines run. A figure without its baseline in the
//! same run is not a figure, so before any work the benchmark checks that
//! every program the chosen figures need is installed; when one is
//! missing it names the package that provides it and stops.

use std::process::{Command, Stdio};

/// A program a baseline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub program: &'static str,
    /// An argument that makes it print its version and exit 0.
    probe: &'static str,
    /// The Debian (and Ubuntu) package that provides it.
    pub package: &'static str,
    /// Which figures need it, for the message.
    pub used_for: &'static str,
}

pub const RG: Tool = Tool {
    program: "rg",
    probe: "--version",
    package: "ripgrep",
    used_for: "the grep figures",
};

pub const GIT: Tool = Tool {
    program: "git",
    probe: "--version",
    package: "git",
    used_for: "the snapshot, restore and mount figures",
};

pub const ZIP: Tool = Tool {
    program: "zip",
    probe: "-v",
    package: "zip",
    used_for: "the ExportArchive figure",
};

pub const UNZIP: Tool = Tool {
    program: "unzip",
    probe: "-v",
    package: "unzip",
    used_for: "the ImportArchive figure",
};

pub const CP: Tool = Tool {
    program: "cp",
    probe: "--version",
    package: "coreutils",
    used_for: "the fork figure",
};

pub const RSYNC: Tool = Tool {
    program: "rsync",
    probe: "--version",
    package: "rsync",
    used_for: "the object-storage figures",
};

pub const TAR: Tool = Tool {
    program: "tar",
    probe: "--version",
    package: "tar",
    used_for: "the mount figures",
};

pub const NGINX: Tool = Tool {
    program: "nginx",
    probe: "-v",
    package: "nginx",
    used_for: "the failover figure (the proxy in front of the replicas)",
};

pub const MOTO: Tool = Tool {
    program: "moto_server",
    probe: "-h",
    package: "python3-moto (or `pip install 'moto[server]'`)",
    used_for: "the failover figure (the replicas' S3 bucket)",
};

fn installed(tool: &Tool) -> bool {
    Command::new(tool.program)
        .arg(tool.probe)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `Ok` when every tool runs; otherwise one message naming each missing
/// one, what needs it, and the command that installs them all.
pub fn require(tools: &[Tool]) -> Result<(), String> {
    let missing: Vec<&Tool> = tools.iter().filter(|t| !installed(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
    packages.dedup();
    let what: Vec<String> = missing
        .iter()
        .map(|t| format!("`{}` (the baseline of {})", t.program, t.used_for))
        .collect();
    Err(format!(
        "missing baseline program(s): {}. A figure without its baseline is not measured. \
         Install them (Debian/Ubuntu: `apt-get install {}`) or choose other figures.",
        what.join(", "),
        packages.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named_with_its_package() {
        let absent = Tool {
            program: "wsfs-bench-no-such-program",
            probe: "--version",
            package: "no-such-package",
            used_for: "a test",
        };
        let err = require(&[absent]).unwrap_err();
        assert!(err.contains("wsfs-bench-no-such-program"), "{err}");
        assert!(err.contains("apt-get install no-such-package"), "{err}");
        assert!(require(&[]).is_ok());
    }
}
