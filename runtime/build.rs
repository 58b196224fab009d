//! Generates the gRPC messages and service from `proto/flowlab.proto` with
//! the protoc that `protoc-bin-vendored` ships (no protoc on the machine needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts run single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/flowlab.proto");
    tonic_prost_build::compile_protos("proto/flowlab.proto")?;
    Ok(())
}
