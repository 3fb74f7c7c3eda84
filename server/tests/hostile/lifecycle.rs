//! Connections, Watch streams, idle expiry, shutdown and filesystem watchers.
