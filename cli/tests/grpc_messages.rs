//! The server's gRPC messages are Triton's own: cli/proto/triton.fds, from which build.rs
//! generates them, holds exactly the descriptors of the pinned tritonclient wheel (the client
//! every gRPC test speaks through), so the wire cannot drift from Triton's protocol.

mod common;

use std::path::Path;
use std::process::Command;

use common::server::triton_python;

#[test]
fn the_vendored_descriptors_are_tritonclients() {
    let vendored = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/triton.fds");
    // What scripts/triton-protos writes, made again from the installed wheel.
    let script = r#"
import sys
from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2
fds = descriptor_pb2.FileDescriptorSet()
for module in (model_config_pb2, service_pb2):
    fds.file.add().ParseFromString(module.DESCRIPTOR.serialized_pb)
sys.stdout.buffer.write(fds.SerializeToString(deterministic=True))
"#;
    let o = Command::new(triton_python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ours = std::fs::read(&vendored).unwrap();
    assert!(
        o.stdout.len() > 10_000,
        "tritonclient gave {} bytes",
        o.stdout.len()
    );
    assert!(
        ours == o.stdout,
        "cli/proto/triton.fds ({} bytes) differs from tritonclient's descriptors ({} bytes): run scripts/triton-protos",
        ours.len(),
        o.stdout.len()
    );
}
