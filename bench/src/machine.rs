//! The machine line printed above the results: CPUs, memory, kernel.

use std::fs;

/// `2 CPUs (model), 23.5 GiB memory, Linux 6.1.0` from /proc, or what of it
/// can be read on this system.
pub fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .map_or(String::new(), |m| format!(" ({m})"));
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map_or("unknown memory".to_string(), |kib| {
            format!("{:.1} GiB memory", kib / (1024.0 * 1024.0))
        });
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("unknown kernel".to_string(), |k| {
            format!("{} {}", std::env::consts::OS, k.trim())
        });
    format!("{cpus} CPUs{model}, {memory}, kernel {kernel}")
}

/// The filesystem `path` lives on, as `/proc/self/mounts` says (`ext4
/// (/dev/sda1) mounted on /`): fsync costs depend on it.
pub fn filesystem_of(path: &std::path::Path) -> String {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?, f.next()?))
        })
        .filter(|(_, on, _)| path.starts_with(on))
        .max_by_key(|(_, on, _)| on.len())
        .map_or("an unknown filesystem".to_string(), |(dev, on, kind)| {
            format!("{kind} ({dev}) mounted on {on}")
        })
}
