//! Generates the ONNX message types from ONNX's own `proto/onnx.proto`
//! with the protoc that `protoc-bin-vendored` ships (no protoc on the
//! machine needed), as the runtime does for its gRPC messages.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts run single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    prost_build::Config::new().compile_protos(&["proto/onnx.proto"], &["proto"])?;
    Ok(())
}
