//! The batcher serving a jax.export artifact: the transformer the main job serves
//! (tests/data/exported/serve) with its weights resident from a .safetensors file and the
//! batched argument named by its pytree path, every answer checked against JAX's; a 4-device
//! export served on a device group; and the models and configs refused, each saying why.

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{HostArray, read_npz};
use pjrt_actors::serving::{Batcher, BatcherConfig, InferRequest};
use pjrt_actors::{Client, ElementType};

fn serve_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported/serve")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(serve_dir().join(name)).unwrap()
}

fn close(got: &[f64], want: &[f64], rtol: f64) -> bool {
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= rtol * scale)
}

/// The artifacts here are exported for the CPU only.
mod cpu_plugin {
    use super::*;

    #[test]
    fn a_batcher_serves_an_exported_transformer_with_resident_weights_and_jaxs_answers() {
        let client = Client::open().unwrap();
        let mut model = client.load_exported(&read("transformer.exported")).unwrap();
        assert_eq!(
            model.load_params(&read("transformer.safetensors")).unwrap(),
            24
        );
        assert_eq!(model.free_inputs(), ["[0][1]['tokens']"]);
        let lm = model.batch_model("lm", &["tokens"]).unwrap();
        let config = BatcherConfig {
            max_batch_size: 16,
            max_delay: std::time::Duration::from_millis(2),
            ..Default::default()
        };
        let batcher = Batcher::start(&client, lm, config).unwrap();
        let requests = read_npz(&read("requests.npz")).unwrap();
        let tokens = &requests.iter().find(|(k, _)| k == "tokens").unwrap().1;
        let logits = &requests.iter().find(|(k, _)| k == "logits").unwrap().1;
        assert_eq!(
            (tokens.dtype, logits.dims.as_slice()),
            (ElementType::S32, &[256, 64][..])
        );
        // Four threads of one-sequence requests, batched together up to 16 rows.
        std::thread::scope(|s| {
            for t in 0..4 {
                let batcher = batcher.clone();
                s.spawn(move || {
                    for r in (t..256).step_by(4) {
                        let answer = batcher
                            .infer(InferRequest::new(vec![tokens.rows(r, 1).unwrap()]))
                            .unwrap();
                        let got = crate::jax_outputs::values(&answer.outputs[0]);
                        let want = crate::jax_outputs::values(&logits.rows(r, 1).unwrap());
                        assert!(
                            close(&got, &want, 1e-4),
                            "request {r}: {got:?} against JAX's {want:?}"
                        );
                    }
                });
            }
        });
        assert_eq!(batcher.counts().done, 256);
        assert!(batcher.counts().batches < 256, "requests shared batches");
    }

    #[test]
    fn exports_a_batcher_cannot_serve_are_refused_saying_why() {
        let client = Client::open().unwrap();
        let mut model = client.load_exported(&read("transformer.exported")).unwrap();
        // The weights not loaded: the fixed inputs are missing.
        let err = model.batch_model("lm", &["tokens"]).err().unwrap();
        assert!(
            err.to_string().contains("neither batched nor loaded"),
            "{err}"
        );
        model.load_params(&read("transformer.safetensors")).unwrap();
        let err = model.batch_model("lm", &["no_such_input"]).err().unwrap();
        assert!(err.to_string().contains("matches 0 arguments"), "{err}");
        let err = model.batch_model("lm", &[]).err().unwrap();
        assert!(err.to_string().contains("no batched input"), "{err}");
        // Its shapes were fixed at export: batches of exactly 16 rows.
        let lm = model.batch_model("lm", &["tokens"]).unwrap();
        let config = BatcherConfig {
            max_batch_size: 64,
            ..Default::default()
        };
        let err = Batcher::start(&client, lm, config).err().unwrap();
        assert!(err.to_string().contains("exactly 16 rows"), "{err}");
    }

    /// dp_mlp from the export corpus on one group of 4 devices (x's rows split over them,
    /// weights replicated), with its inputs and JAX's outputs.
    struct DpMlp {
        client: Client,
        batcher: Batcher,
        x: HostArray,
        want: HostArray,
    }

    impl DpMlp {
        fn start() -> DpMlp {
            let corpus = crate::jax_outputs::corpus_dir();
            let file = |f: &str| std::fs::read(corpus.join(f)).unwrap();
            let client = Client::open().unwrap();
            let mut model = client.load_exported(&file("dp_mlp.exported")).unwrap();
            model.load_params(&file("dp_mlp.args.npz")).unwrap();
            let mlp = model.batch_model("dp_mlp", &["[0][1]"]).unwrap();
            let config = BatcherConfig {
                max_batch_size: 8,
                device_groups: Some(vec![client.devices()[..4].iter().map(|d| d.id()).collect()]),
                ..Default::default()
            };
            let batcher = Batcher::start(&client, mlp, config).unwrap();
            let args = read_npz(&file("dp_mlp.args.npz")).unwrap();
            let x = args.into_iter().find(|(k, _)| k == "0.1").unwrap().1;
            let want = crate::jax_outputs::wanted("dp_mlp").swap_remove(0);
            DpMlp {
                client,
                batcher,
                x,
                want,
            }
        }

        /// Row `r` as one request, its answer checked against JAX's.
        fn check_row(&self, r: usize) {
            let answer = (self.batcher)
                .infer(InferRequest::new(vec![self.x.rows(r, 1).unwrap()]))
                .unwrap();
            let got = crate::jax_outputs::values(&answer.outputs[0]);
            let want = crate::jax_outputs::values(&self.want.rows(r, 1).unwrap());
            assert!(
                close(&got, &want, 2e-5),
                "row {r}: {got:?} against JAX's {want:?}"
            );
        }
    }

    #[test]
    fn a_four_device_export_is_served_on_a_device_group_with_its_rows_split() {
        let dp = DpMlp::start();
        for r in 0..8 {
            dp.check_row(r);
        }
    }

    #[test]
    fn a_sharded_export_serves_correctly_while_defragments_move_its_weights() {
        // The batcher's resident sharded weights and each batch's sharded rows, moved by
        // defragments running at the same time on the registry's own thread.
        let dp = DpMlp::start();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let moved = std::thread::scope(|s| {
            let mover = s.spawn(|| {
                let mut moved = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    moved += dp.client.defragment().map(|r| r.moved).unwrap_or(0);
                }
                moved
            });
            for round in 0..40 {
                dp.check_row(round % 8);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            mover.join().unwrap()
        });
        assert!(moved > 0, "the defragments moved the resident shards");
    }
}
