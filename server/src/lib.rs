//! # wsfs-server
pub mod backend;
