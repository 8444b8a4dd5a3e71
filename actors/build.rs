//! Generates the pprof `Profile` messages (proto/profile.proto) with prost-build; protoc is
//! installed by scripts/bootstrap, which pjrt-sys needs anyway.

fn main() {
    println!("cargo:rerun-if-changed=proto/profile.proto");
    prost_build::Config::new()
        .compile_protos(&["proto/profile.proto"], &["proto"])
        .expect("compiling proto/profile.proto (is protoc installed? run scripts/bootstrap)");
}
