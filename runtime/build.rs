//! Generates the gRPC messages and service from `proto/flowlab.proto` with
//! the protoc that `protoc-bin-vendored` ships (no protoc on the machine needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts run single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/flowlab.proto");
    // `bytes` fields as `Bytes`: a received tensor's data is a view of the
    // message buffer instead of a copy, and a fed tensor is shared by the
    // requests of every task that takes it instead of cloned per task
    tonic_prost_build::configure().bytes(".").compile_protos(&["proto/flowlab.proto"], &["proto"])?;
    Ok(())
}
