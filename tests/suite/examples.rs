//! Every example runs here in a fast mode, so none of them rots.

#[allow(dead_code)]
#[path = "../../examples/serve.rs"]
mod serve;

#[allow(dead_code)]
#[path = "../../examples/host_callback_pipeline.rs"]
mod host_callback_pipeline;

#[allow(dead_code)]
#[path = "../../examples/concurrent_compile.rs"]
mod concurrent_compile;

#[allow(dead_code)]
#[path = "../../examples/distributed_node.rs"]
mod distributed_node;

#[test]
fn serve_answers_every_request_correctly() {
    let report = serve::run(2_000, serve::WORKERS, 13, serve::Mode::Batched).unwrap();
    assert_eq!(report.requests, 2_000);
    assert!(report.checked >= 150, "{} checked", report.checked);
    assert_eq!(report.mismatches, 0);
    assert!(report.p50_us > 0.0 && report.p50_us <= report.p99_us);
}

mod cpu_plugin {
    /// The main job's default: the transformer exported from JAX for the CPU.
    #[test]
    fn serve_answers_every_transformer_request_as_jax_does() {
        let report = super::serve::transformer::run_transformer(1_000, 8, 1).unwrap();
        assert_eq!((report.requests, report.checked), (1_000, 1_000));
        assert_eq!(report.mismatches, 0);
        assert!(report.metrics.unwrap().contains("transformer"));
    }
}

#[test]
fn serve_without_batching_answers_every_request_correctly() {
    let report = serve::run(1_000, serve::WORKERS, 13, serve::Mode::Unbatched).unwrap();
    assert_eq!((report.requests, report.mismatches), (1_000, 0));
    assert!(report.metrics.is_none());
}

#[test]
fn a_distributed_node_opens_with_its_store_on_redis() {
    let server = crate::common::redis_server::RedisServer::start(&[]);
    let opened = distributed_node::open_node(0, 1, &server.url(), "example", true);
    // Multi-process CPU clients need the 0.81 plugin.
    let Some(client) = crate::common::node_or_refusal(opened) else {
        return;
    };
    assert_eq!(client.process_index(), 0);
    assert!(client.local_device_count() >= 1);
    assert_eq!(client.device_count(), client.local_device_count());
}

#[test]
fn the_host_callback_pipeline_computes_correctly() {
    let (calls, mismatches) = host_callback_pipeline::run(4, 100).unwrap();
    assert_eq!(calls, 4 * 100 * 3);
    assert_eq!(mismatches, 0);
}

#[test]
fn concurrent_compiles_complete_or_cancel() {
    let (done, cancelled, compiles) = concurrent_compile::run(40, 8).unwrap();
    assert_eq!(done + cancelled, 40);
    assert!(done >= 32, "only two in ten may be cancelled");
    assert!(
        cancelled >= 4,
        "the four cancelled before they were sent must be ({cancelled})"
    );
    assert!(
        compiles as usize > done,
        "the single-flight probe compiled once more"
    );
}
