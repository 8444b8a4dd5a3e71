//! The main job's default model: a GPT-style transformer exported from JAX
//! (tests/data/exported/serve, made by scripts/jax-exported-data), its weights resident from a
//! .safetensors file, served through a batcher; answers checked against JAX's recorded ones.

use std::path::PathBuf;
use std::time::Duration;

use pjrt_actors::host_data::{HostArray, read_npz};
use pjrt_actors::serving::{Batcher, BatcherConfig};

use super::{Load, Report, drive, f32s};

/// The recorded requests JAX answered, cycled through.
const RECORDED: u64 = 256;

/// Where the export, its weights and the recorded requests are: `PJRT_ACTORS_SERVE_DATA`, else
/// the repository's folder (found from the working directory, then from where this was built).
fn data_dir() -> PathBuf {
    let from_env = std::env::var_os("PJRT_ACTORS_SERVE_DATA").map(PathBuf::from);
    let candidates = [
        PathBuf::from("tests/data/exported/serve"),
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/exported/serve"
        )),
    ];
    (from_env.into_iter().chain(candidates))
        .find(|d| d.join("transformer.exported").is_file())
        .unwrap_or_else(|| PathBuf::from("tests/data/exported/serve"))
}

fn read(name: &str) -> pjrt_actors::Result<Vec<u8>> {
    let path = data_dir().join(name);
    std::fs::read(&path).map_err(|e| {
        pjrt_actors::Error::InvalidArgument(format!(
            "{}: {e} (run scripts/jax-exported-data)",
            path.display()
        ))
    })
}

/// The batcher serving the exported transformer: one-sequence requests batched up to the 16
/// rows it was exported for, gathered for at most 200 µs.
pub fn transformer_batcher(client: &pjrt_actors::Client) -> pjrt_actors::Result<Batcher> {
    let mut model = client.load_exported(&read("transformer.exported")?)?;
    model.load_params(&read("transformer.safetensors")?)?;
    let lm = model.batch_model("transformer", &["tokens"])?;
    let config = BatcherConfig {
        max_batch_size: 16,
        max_delay: Duration::from_micros(200),
        ..Default::default()
    };
    Batcher::start(client, lm, config)
}

/// Serves `requests` one-sequence requests with `workers` threads; every `check_every`-th
/// answer is compared with JAX's next-token logits for that sequence.
pub fn run_transformer(
    requests: u64,
    workers: usize,
    check_every: u64,
) -> pjrt_actors::Result<Report> {
    let client = pjrt_actors::Client::open()?;
    let batcher = transformer_batcher(&client)?;
    let recorded = read_npz(&read("requests.npz")?)?;
    let find = |name: &str| {
        (recorded
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, h)| h.clone()))
        .ok_or_else(|| pjrt_actors::Error::InvalidArgument(format!("requests.npz has no `{name}`")))
    };
    let (tokens, logits) = (find("tokens")?, find("logits")?);
    let input = |id: u64| {
        tokens
            .rows((id % RECORDED) as usize, 1)
            .expect("a recorded row")
    };
    let check = |id: u64, _: &HostArray, y: &HostArray| {
        let (got, want) = (
            f32s(y),
            f32s(
                &logits
                    .rows((id % RECORDED) as usize, 1)
                    .expect("a recorded row"),
            ),
        );
        let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
        let close = got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-4 * scale);
        (!close).then(|| format!("got {got:?}, JAX has {want:?}"))
    };
    let load = Load {
        requests,
        workers,
        check_every,
    };
    drive(Some(&batcher), &[], load, &input, &check)
}
