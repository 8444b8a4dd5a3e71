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

#[test]
fn serve_answers_every_request_correctly() {
    let report = serve::run(2_000, serve::WORKERS, 13, serve::Mode::Batched).unwrap();
    assert_eq!(report.requests, 2_000);
    assert!(report.checked >= 150, "{} checked", report.checked);
    assert_eq!(report.mismatches, 0);
    assert!(report.p50_us > 0.0 && report.p50_us <= report.p99_us);
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
    assert!(done >= 36, "only the every-tenth ones may be cancelled");
    assert!(
        compiles as usize > done,
        "the single-flight probe compiled once more"
    );
}
