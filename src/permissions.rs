//! Permission bits: the nine `rwxrwxrwx` bits of a file or directory.
//!
//! Parsed once, at the edge, into [`Permissions`]: anything above `0o777`
//! (setuid, setgid, sticky, or garbage) is refused there, so no layer below
//! ever applies those bits.

use crate::{Error, Result};

/// Permission bits, always within `0o777`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permissions(u32);

impl Permissions {
    /// What a file gets when its first write names no bits.
    pub const FILE_DEFAULT: Permissions = Permissions(0o644);
    /// What a directory gets when its Mkdir names no bits, and every parent
    /// a call makes on the way.
    pub const DIRECTORY_DEFAULT: Permissions = Permissions(0o755);
    /// The bits wsfs keeps; the rest of a mode is never applied.
    pub const MASK: u32 = 0o777;

    /// Bits a caller asked for: above `0o777` is `INVALID_ARGUMENT`.
    pub fn new(bits: u32) -> Result<Permissions> {
        if bits & !Self::MASK != 0 {
            return Err(Error::invalid_argument(format!(
                "permissions {bits:#o} are out of range: only the bits 0o777 (rwxrwxrwx) may be \
                 set; setuid, setgid and sticky are never applied"
            )));
        }
        Ok(Permissions(bits))
    }

    /// Octal bits as people write them: `755`, `0644`, `0o700`; above
    /// `0o777`, or not octal, is `INVALID_ARGUMENT`.
    pub fn parse_octal(text: &str) -> Result<Permissions> {
        let digits = text.strip_prefix("0o").unwrap_or(text);
        let bits = u32::from_str_radix(digits, 8).map_err(|_| {
            Error::invalid_argument(format!(
                "'{text}' is not a mode: give octal permission bits such as 755"
            ))
        })?;
        Permissions::new(bits)
    }

    /// The permission bits of a full mode from storage or an archive,
    /// keeping `0o777` and dropping the rest (setuid, setgid, sticky, type).
    pub fn masked(mode: u32) -> Permissions {
        Permissions(mode & Self::MASK)
    }

    pub fn bits(self) -> u32 {
        self.0
    }

    /// Any of the execute bits is set.
    pub fn is_executable(self) -> bool {
        self.0 & 0o111 != 0
    }
}

/// `rwxr-xr-x`, as `ls -l` shows them.
impl std::fmt::Display for Permissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = [b'-'; 9];
        for (i, c) in text.iter_mut().enumerate() {
            if self.0 & (0o400 >> i) != 0 {
                *c = b"rwx"[i % 3];
            }
        }
        f.write_str(std::str::from_utf8(&text).unwrap_or("?????????"))
    }
}

impl std::fmt::Octal for Permissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Octal::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_above_0o777_are_refused() {
        for bits in [0o4755, 0o2755, 0o1777, 0o1000, 0o10000, u32::MAX] {
            let err = Permissions::new(bits).unwrap_err();
            assert_eq!(err.reason(), "INVALID_ARGUMENT", "{bits:o}");
        }
        assert_eq!(Permissions::new(0o777).unwrap().bits(), 0o777);
        assert_eq!(Permissions::new(0).unwrap().bits(), 0);
    }

    #[test]
    fn octal_text_parses_as_people_write_it() {
        for text in ["755", "0755", "0o755"] {
            assert_eq!(Permissions::parse_octal(text).unwrap().bits(), 0o755);
        }
        for text in ["", "9", "rwx", "4755", "+x"] {
            let err = Permissions::parse_octal(text).unwrap_err();
            assert_eq!(err.reason(), "INVALID_ARGUMENT", "{text}");
        }
    }

    #[test]
    fn display_is_ls_style() {
        assert_eq!(Permissions::new(0o755).unwrap().to_string(), "rwxr-xr-x");
        assert_eq!(Permissions::new(0o640).unwrap().to_string(), "rw-r-----");
        assert_eq!(Permissions::masked(0o104_751).to_string(), "rwxr-x--x");
    }
}
