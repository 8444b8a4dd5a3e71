//! One node of a client spanning several processes, its key-value store on Redis: run it once
//! per node (`--node 0 --nodes 2 --redis redis://host:6379`, then `--node 1`). Prints every
//! device the client sees and which are this process's own. A GPU plugin forms one client of
//! all nodes' devices through the store; the CPU plugin ignores the store and sees its own.
//!
//! `cargo run --release --example distributed_node -- --node 0 --nodes 1 --redis redis://127.0.0.1:6379`

use std::sync::Arc;

use pjrt_actors::{Client, NamedValue, RedisKvStore};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

/// Opens node `node` of `nodes` with its store on `url`.
pub fn open_node(
    node: i64,
    nodes: i64,
    url: &str,
    namespace: &str,
    preallocate: bool,
) -> pjrt_actors::Result<Client> {
    let store = Arc::new(RedisKvStore::new(url, namespace)?);
    let mut builder = Client::builder().distributed(node, nodes, store);
    if !preallocate {
        // GPU plugins take 75% of device memory per process unless told not to.
        builder = builder.option("preallocate", NamedValue::Bool(false));
    }
    builder.open()
}

fn main() -> pjrt_actors::Result<()> {
    let node: i64 = arg("--node").and_then(|v| v.parse().ok()).unwrap_or(0);
    let nodes: i64 = arg("--nodes").and_then(|v| v.parse().ok()).unwrap_or(1);
    let url = arg("--redis").unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let namespace = arg("--namespace").unwrap_or_else(|| "distributed-example".into());
    let preallocate = !std::env::args().any(|a| a == "--no-preallocate");
    let client = open_node(node, nodes, &url, &namespace, preallocate)?;
    println!(
        "node {node} of {nodes}: platform {}, process index {}, {} devices, {} addressable",
        client.platform(),
        client.process_index(),
        client.device_count(),
        client.local_device_count()
    );
    for d in client.all_devices() {
        let own = client.local_devices().iter().any(|l| l.id() == d.id());
        println!(
            "  device {} {}{}",
            d.id(),
            d,
            if own { " (this process)" } else { "" }
        );
    }
    Ok(())
}
