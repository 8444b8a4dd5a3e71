//! The batcher on device groups: each batch one SPMD execute over a group of two devices, the
//! rows split over them (data parallel) or the weights split across them (tensor parallel),
//! the weights resident as sharded arrays; every answer checked against the same product in
//! Rust. And the groups a batcher refuses.

use pjrt_actors::host_data::HostArray;
use pjrt_actors::serving::{BatchModel, Batcher, BatcherConfig, InferRequest};
use pjrt_actors::{Client, ElementType};

/// `x @ w` for `x: [rows, 4]`, `w: [4, 4]`, partitioned over 2 devices by the given
/// HloShardings of x, w and the result.
fn template(x: &str, w: &str, out: &str) -> String {
    format!(
        r#"module @group attributes {{mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main(%x: tensor<{{batch}}x4xf32> {{mhlo.sharding = "{x}"}}, %w: tensor<4x4xf32> {{mhlo.sharding = "{w}"}}) -> (tensor<{{batch}}x4xf32> {{mhlo.sharding = "{out}"}}) {{
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<{{batch}}x4xf32>, tensor<4x4xf32>) -> tensor<{{batch}}x4xf32>
    return %0 : tensor<{{batch}}x4xf32>
  }}
}}"#
    )
}

fn f32s(values: &[f32], dims: &[i64]) -> HostArray {
    HostArray {
        dtype: ElementType::F32,
        dims: dims.to_vec(),
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn weights() -> Vec<f32> {
    (0..16).map(|i| (i as f32 - 7.5) / 4.0).collect()
}

fn start(client: &Client, name: &str, program: String, groups: Vec<Vec<i32>>) -> Batcher {
    let model = BatchModel::from_template(name, 1, program).fixed_input(f32s(&weights(), &[4, 4]));
    let config = BatcherConfig {
        max_batch_size: 8,
        allowed_batch_sizes: vec![2, 4, 8],
        device_groups: Some(groups),
        ..Default::default()
    };
    Batcher::start(client, model, config).unwrap()
}

/// Requests of 1 to 3 rows from 4 threads; each answer must be its rows times the weights.
fn serve_and_check(batcher: &Batcher) {
    let w = &weights();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for r in 0..40usize {
                    let rows = 1 + (t + r) % 3;
                    let x: Vec<f32> = (0..rows * 4)
                        .map(|i| ((i + 7 * r + t) % 11) as f32)
                        .collect();
                    let answer = batcher
                        .infer(InferRequest::new(vec![f32s(&x, &[rows as i64, 4])]))
                        .unwrap();
                    let got: Vec<f32> = (answer.outputs[0].bytes.chunks_exact(4))
                        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                        .collect();
                    let want: Vec<f32> = (0..rows * 4)
                        .map(|k| (0..4).map(|j| x[k / 4 * 4 + j] * w[j * 4 + k % 4]).sum())
                        .collect();
                    assert_eq!(answer.outputs[0].dims, [rows as i64, 4]);
                    assert!(
                        got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-4),
                        "{got:?} {want:?}"
                    );
                }
            });
        }
    });
}

#[test]
fn a_data_parallel_model_serves_each_batch_over_a_group() {
    let client = Client::open().unwrap();
    let rows = template("{devices=[2,1]0,1}", "{replicated}", "{devices=[2,1]0,1}");
    let batcher = start(&client, "rows", rows, vec![vec![0, 1], vec![2, 3]]);
    serve_and_check(&batcher);
    assert!(batcher.counts().batches > 0);
}

#[test]
fn a_tensor_parallel_model_serves_with_its_weights_split_across_the_group() {
    let client = Client::open().unwrap();
    // The weights' columns split over the pair: each device holds half of them, once.
    let columns = template("{replicated}", "{devices=[1,2]0,1}", "{devices=[1,2]0,1}");
    let batcher = start(&client, "columns", columns, vec![vec![1, 0]]);
    // Resident now: on device 1 (the group's first) the weights' first two columns, on device
    // 0 the last two, each a 4x2 array; the whole 4x4 is held nowhere.
    let w = weights();
    let half = |first: usize| -> Vec<f32> {
        (0..4)
            .flat_map(|r| (first..first + 2).map(move |c| (r, c)))
            .map(|(r, c)| w[r * 4 + c])
            .collect()
    };
    let resident: Vec<(i32, Vec<i64>, Vec<f32>)> = (client.live_arrays().unwrap().iter())
        .filter(|a| a.dtype() == ElementType::F32)
        .map(|a| {
            (
                a.device().id(),
                a.dims().to_vec(),
                a.to_vec::<f32>().unwrap(),
            )
        })
        .collect();
    for (device, first) in [(1, 0), (0, 2)] {
        let on: Vec<_> = (resident.iter())
            .filter(|(d, dims, _)| *d == device && dims == &[4, 2])
            .collect();
        assert_eq!(on.len(), 1, "device {device}: {resident:?}");
        assert_eq!(on[0].2, half(first), "device {device}");
    }
    assert!(
        !resident.iter().any(|(_, dims, _)| dims == &[4, 4]),
        "{resident:?}"
    );
    serve_and_check(&batcher);
}

#[test]
fn groups_that_cannot_serve_are_refused_when_the_batcher_starts() {
    let client = Client::open().unwrap();
    let rows = template("{devices=[2,1]0,1}", "{replicated}", "{devices=[2,1]0,1}");
    let model =
        || BatchModel::from_template("bad", 1, rows.clone()).fixed_input(f32s(&weights(), &[4, 4]));
    let refused = |groups: Vec<Vec<i32>>, devices: Option<Vec<i32>>, what: &str| {
        let config = BatcherConfig {
            max_batch_size: 8,
            allowed_batch_sizes: vec![2, 4, 8],
            device_groups: Some(groups),
            devices,
            ..Default::default()
        };
        let err = Batcher::start(&client, model(), config)
            .err()
            .expect("refused");
        assert!(err.to_string().contains(what), "{what}: {err}");
    };
    refused(
        vec![vec![0, 1], vec![1, 2]],
        None,
        "device 1 is in two groups",
    );
    refused(vec![vec![]], None, "an empty device group");
    refused(vec![vec![0, 1]], Some(vec![0]), "not both");
    // A group of three for a program of two partitions.
    refused(
        vec![vec![0, 1, 2]],
        None,
        "3 devices given for 1 replicas × 2 partitions",
    );
}
