//! The server's gRPC messages, for the targets that build cli/src/serve/wire by path: generated
//! by the CLI's own build script, taken in as a module.

#[path = "../cli/build.rs"]
mod cli_build;

fn main() {
    cli_build::main();
}
