//! Compiles `proto/` with protox (a pure-Rust protobuf compiler), so building
//! needs no system `protoc`. The full descriptor set, including the
//! `google.rpc` error details, is written to OUT_DIR for gRPC reflection.

use prost::Message;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "wsfs/v1/filesystem.proto",
    "wsfs/v1/sessions.proto",
    "google/rpc/error_details.proto",
    "google/rpc/status.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let fds = protox::compile(PROTOS, ["proto"])?;
    std::fs::write(out_dir.join("wsfs_descriptor.bin"), fds.encode_to_vec())?;

    // The crate includes only the `wsfs.v1` module; google.rpc types come
    // from tonic-types and google.protobuf from prost-types.
    tonic_prost_build::configure()
        .bytes(".wsfs.v1")
        .codec_path("crate::codec::WsfsCodec")
        .extern_path(".google.rpc", "::tonic_types")
        .compile_fds(fds)?;
    Ok(())
}
