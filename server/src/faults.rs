//! Fault injection for reliability tests. Nothing here is armed unless a
//! test arms it in its own process; a production server never does.

use std::sync::OnceLock;

static PANIC_ON_PATH: OnceLock<String> = OnceLock::new();

/// Makes every RPC whose request names exactly `path` panic inside its
/// handler, to prove that one panicking request fails alone with INTERNAL.
/// Once armed for a process, the path cannot change.
pub fn panic_on_path(path: &str) {
    let _ = PANIC_ON_PATH.set(path.to_string());
}

/// Panics when `path` is the armed path.
pub(crate) fn check(path: &str) {
    if PANIC_ON_PATH.get().is_some_and(|p| p == path) {
        panic!("fault injection: a request named the panic path '{path}'");
    }
}
