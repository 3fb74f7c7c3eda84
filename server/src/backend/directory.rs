//! The directory backend.
pub struct DirectoryBackend;
