//! Compiles proto/onsale/v1/*.proto with the vendored protoc, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through PROTOC.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure().compile_protos(&["onsale/v1/read.proto"], &["."])?;
    println!("cargo:rerun-if-changed=onsale/v1/read.proto");
    Ok(())
}
