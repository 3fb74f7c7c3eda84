//! # wsfs-tests — black-box tests of wsfs
//!
//! - [`conformance`]: the one suite of `Filesystem` behaviours, written
//!   against the trait, and [`conformance_suite!`], which expands it into
//!   tests for a given workspace factory;
//! - [`fixture::Fixture`]: what a factory returns — a workspace plus the
//!   temporary directories or server it needs;
//! - [`harness`]: the factories (memory and directory backends in-process,
//!   both again through the gRPC client against a live server) and the
//!   in-process server the gRPC-level tests talk to;
//! - [`cluster`]: several real `wsfs-server` processes behind a real nginx
//!   configured from the shipped `deploy/nginx/wsfs.conf`;
//! - [`moto`]: a real S3 API (`moto_server`), and [`forwarder`]: a
//!   fault-injecting forwarder to put between a server and it;
//! - [`posix`]: the POSIX behaviour suite, plain system calls on a
//!   directory, with [`posix_suite!`] to expand it into tests, and
//!   [`mounted`]: sessions mounted with `wsfs mount` for it to run on;
//! - [`kit`]: what the test binaries share besides a server (a refusal's
//!   reason, literal paths, a seeded generator, latency percentiles).
//!
//! The test binaries live in `tests/`: `conformance.rs` runs the suite once
//! per factory, `grpc_edges.rs` checks what only the wire can express (raw
//! paths, unknown sessions, negative offsets, streams dropped early).

pub mod cluster;
pub mod conformance;
pub mod fixture;
pub mod forwarder;
pub mod harness;
pub mod kit;
pub mod moto;
pub mod mounted;
pub mod posix;
pub mod swarm;
