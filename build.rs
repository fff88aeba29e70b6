//! Compiles `proto/` with protox (no system protoc needed) into tonic/prost code,
//! and writes the encoded descriptor set that gRPC reflection serves.

use prost::Message;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/redq/v1/queue.proto",
    "proto/redq/v1/admin.proto",
    "proto/google/rpc/status.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("redq_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Payloads are passed through without copying.
        .bytes(".redq.v1")
        // A request that does not decode is INVALID_ARGUMENT (see src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::Codec")
        .compile_fds(descriptors)?;
    Ok(())
}
