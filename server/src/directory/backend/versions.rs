//! Versions: what was last seen at each path, and its fingerprint.

use super::links::link_target;
use super::sys::{cname, io, stat_at, Fingerprint, Stat, RACE_RETRIES};
use super::DirectoryBackend;
use rustix::fd::AsFd;
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use wsfs::{CanonicalPath, Metadata, Result};

#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    pub(super) version: u64,
    pub(super) fingerprint: Fingerprint,
}

/// Where a freshly opened backend starts its version counter: microseconds
/// since the Unix epoch. Every version an earlier process gave out is
/// below it, unless that process gave out more than one per microsecond
/// of its life or the clock has gone back; versions stay below 2^53, so
/// JSON clients read them exactly.
pub(super) fn version_floor() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
        .max(1)
}

impl DirectoryBackend {
    pub(super) fn versions(&self) -> MutexGuard<'_, BTreeMap<String, Known>> {
        self.versions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `probe` (which stats, and perhaps opens, `path`) and returns its
    /// result with the path's version: the remembered one when the
    /// fingerprint is unchanged, the next counter value otherwise. When a
    /// version was handed out for the path while the probe ran, the probe
    /// may have seen the state before that change, so it runs again.
    pub(super) fn observe<T>(
        &self,
        path: &CanonicalPath,
        mut probe: impl FnMut() -> Result<Option<(T, Stat)>>,
    ) -> Result<Option<(T, Stat, u64)>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = self.next_version.load(Ordering::SeqCst);
            let Some((value, st)) = probe()? else {
                return Ok(None);
            };
            let fingerprint = st.fingerprint();
            let mut versions = self.versions();
            match versions.get(path.as_str()) {
                Some(known) if known.fingerprint == fingerprint => {
                    return Ok(Some((value, st, known.version)))
                }
                Some(known) if known.version >= started && attempt < RACE_RETRIES => continue,
                _ => {
                    let version = self.fresh(&mut versions, path, fingerprint);
                    return Ok(Some((value, st, version)));
                }
            }
        }
    }

    /// Gives `path`, now seen with `fingerprint`, the next version.
    fn fresh(
        &self,
        versions: &mut BTreeMap<String, Known>,
        path: &CanonicalPath,
        fingerprint: Fingerprint,
    ) -> u64 {
        let version = self.next_version.fetch_add(1, Ordering::SeqCst);
        versions.insert(
            path.as_str().to_string(),
            Known {
                version,
                fingerprint,
            },
        );
        version
    }

    /// Metadata of `name` in `dir`; `None` when it is not there.
    pub(super) fn observe_at(
        &self,
        dir: impl AsFd,
        name: &str,
        path: &CanonicalPath,
    ) -> Result<Option<Metadata>> {
        let name = cname(name, path)?;
        let found = self.observe(path, || match stat_at(dir.as_fd(), &name) {
            Ok(st) => Ok(Some(((), st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io(e, path)),
        })?;
        found
            .map(|((), st, version)| link_target(dir.as_fd(), &name, st.metadata(path, version)))
            .transpose()
    }

    /// [`Self::observe_at`] of many entries of `dir` (name, path): each is
    /// stated first, then all are given their versions under one lock of
    /// the version map rather than one lock each. An entry whose version
    /// changed while it was stated is observed again on its own.
    pub(super) fn observe_entries(
        &self,
        dir: impl AsFd,
        entries: &[(&str, CanonicalPath)],
    ) -> Result<Vec<Option<Metadata>>> {
        let started = self.next_version.load(Ordering::SeqCst);
        let mut stats = Vec::with_capacity(entries.len());
        for (name, path) in entries {
            stats.push(match stat_at(dir.as_fd(), &cname(name, path)?) {
                Ok(st) => Some(st),
                Err(Errno::NOENT) => None,
                Err(e) => return Err(io(e, path)),
            });
        }
        let mut out = Vec::with_capacity(entries.len());
        let mut raced = Vec::new();
        {
            let mut versions = self.versions();
            for (i, ((_, path), st)) in entries.iter().zip(&stats).enumerate() {
                let Some(st) = st else {
                    out.push(None);
                    continue;
                };
                let fingerprint = st.fingerprint();
                let version = match versions.get(path.as_str()) {
                    Some(known) if known.fingerprint == fingerprint => known.version,
                    Some(known) if known.version >= started => {
                        raced.push(i);
                        out.push(None);
                        continue;
                    }
                    _ => self.fresh(&mut versions, path, fingerprint),
                };
                out.push(Some(st.metadata(path, version)));
            }
        }
        for i in raced {
            let (name, path) = &entries[i];
            out[i] = self.observe_at(dir.as_fd(), name, path)?;
        }
        Ok(out)
    }

    /// Remembers a change we made: a fresh version for what is at `path`.
    pub(super) fn record(
        &self,
        dir: impl AsFd,
        name: &CStr,
        path: &CanonicalPath,
    ) -> Result<Metadata> {
        let st = stat_at(dir, name).map_err(|e| io(e, path))?;
        Ok(self.record_stat(&st, path))
    }

    /// [`Self::record`] of an entry already stated.
    ///
    /// The version is drawn under the map's lock, so the map's version of a
    /// path only grows: two writers that each drew one before taking the
    /// lock could store them out of order, and a reader that saw the later
    /// one would then see the earlier one for the same bytes.
    pub(super) fn record_stat(&self, st: &Stat, path: &CanonicalPath) -> Metadata {
        let version = self.fresh(&mut self.versions(), path, st.fingerprint());
        st.metadata(path, version)
    }

    /// Forgets `path` and everything beneath it (the root itself is kept).
    pub(super) fn forget(&self, path: &CanonicalPath) {
        let prefix = if path.is_root() {
            String::new()
        } else {
            format!("{}/", path.as_str())
        };
        let mut versions = self.versions();
        if !path.is_root() {
            versions.remove(path.as_str());
        }
        let below: Vec<String> = versions
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        for key in below {
            versions.remove(&key);
        }
    }
}
