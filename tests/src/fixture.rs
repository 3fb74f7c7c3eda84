//! What a factory hands to a conformance case.

use std::any::Any;
use std::ops::Deref;
use wsfs::Filesystem;

/// A workspace under test plus whatever must outlive it (temporary
/// directories, a running server). Derefs to the workspace; dropping it
/// releases the guards after the workspace.
pub struct Fixture {
    // Declared first so it drops before the guards it may depend on.
    fs: Box<dyn Filesystem>,
    _guards: Box<dyn Any + Send>,
}

impl Fixture {
    /// `guards` is kept alive for as long as the fixture; pass `()` when
    /// there is nothing to keep.
    pub fn new(fs: impl Filesystem + 'static, guards: impl Any + Send) -> Self {
        Fixture {
            fs: Box::new(fs),
            _guards: Box::new(guards),
        }
    }
}

impl Deref for Fixture {
    type Target = dyn Filesystem;

    fn deref(&self) -> &Self::Target {
        &*self.fs
    }
}
