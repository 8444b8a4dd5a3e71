//! Generates XLA's protobuf messages (`protos::xla`: the compile options and everything they
//! reach, HLO modules, shardings, shapes) from the vendored proto/ tree with prost-build.

fn main() {
    println!("cargo:rerun-if-changed=proto");
    prost_build::Config::new()
        .include_file("protos.rs")
        .compile_protos(&["proto/xla/pjrt/compile_options.proto"], &["proto"])
        .expect("compiling proto/xla/pjrt/compile_options.proto (is protoc installed? run scripts/bootstrap)");
}
