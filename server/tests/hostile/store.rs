//! Sparse files, archives, snapshots and the disk.
