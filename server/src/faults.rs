//! Fault injection for reliability tests. Nothing here is armed unless a
//! test arms it in its own process; a production server never does.
//!
//! Only the `faults` feature (which the test crate turns on) compiles the
//! switches in; without it the checks are empty and vanish when inlined.

#[cfg(feature = "faults")]
use std::sync::OnceLock;

#[cfg(feature = "faults")]
static PANIC_ON_PATH: OnceLock<String> = OnceLock::new();
#[cfg(feature = "faults")]
static PANIC_IN_STREAM_ON_PATH: OnceLock<String> = OnceLock::new();

/// Makes every RPC whose request names exactly `path` panic inside its
/// handler, to prove that one panicking request fails alone with INTERNAL.
/// Once armed for a process, the path cannot change.
#[cfg(feature = "faults")]
pub fn panic_on_path(path: &str) {
    let _ = PANIC_ON_PATH.set(path.to_string());
}

/// Panics when `path` is the armed path.
#[inline(always)]
pub(crate) fn check(path: &str) {
    #[cfg(not(feature = "faults"))]
    let _ = path;
    #[cfg(feature = "faults")]
    if PANIC_ON_PATH.get().is_some_and(|p| p == path) {
        panic!("fault injection: a request named the panic path '{path}'");
    }
}

/// Makes every stream producer panic once it is running and reaches
/// `path`: a ReadBytes of it after its first chunk, a grep or export walk
/// when it comes to it, a Watch when an event names it. Proves that a
/// panic inside a running stream ends that stream with INTERNAL rather
/// than a clean (and so misleading) end. Once armed, fixed for the process.
#[cfg(feature = "faults")]
pub fn panic_in_stream_on_path(path: &str) {
    let _ = PANIC_IN_STREAM_ON_PATH.set(path.to_string());
}

/// Panics inside a running stream when `path` is the armed path.
#[inline(always)]
pub(crate) fn check_stream(path: &str) {
    #[cfg(not(feature = "faults"))]
    let _ = path;
    #[cfg(feature = "faults")]
    if PANIC_IN_STREAM_ON_PATH.get().is_some_and(|p| p == path) {
        panic!("fault injection: a running stream reached the panic path '{path}'");
    }
}
