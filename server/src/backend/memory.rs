//! The in-memory backend.
pub struct MemoryBackend;
