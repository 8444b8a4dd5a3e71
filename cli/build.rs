//! Generates the KServe v2 / Triton gRPC messages (package `inference`: grpc_service.proto and
//! model_config.proto) from the descriptors in proto/triton.fds with tonic-build. The server's
//! routing is ours (serve/grpc.rs), so only the messages are generated. fuzz/build.rs includes
//! this file as a module, for the targets that build the server's wire formats by path.

use prost::Message;

pub fn main() {
    println!("cargo:rerun-if-changed=proto/triton.fds");
    // Relative to this file, so the fuzz crate's build script can include this one.
    let bytes: &[u8] = include_bytes!("proto/triton.fds");
    let fds = prost_types::FileDescriptorSet::decode(bytes)
        .expect("proto/triton.fds is a FileDescriptorSet");
    tonic_build::configure()
        .build_server(false)
        .build_client(false)
        .compile_fds(fds)
        .expect("generating the KServe v2 messages");
}
