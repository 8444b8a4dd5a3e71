//! SPMD programs jax 0.10.2 exported over a 4-device mesh (tests/data/spmd, made by
//! scripts/jax-spmd-data): each compiles as the program says (4 partitions, Shardy), reports the
//! shardings JAX gave its arguments and results, runs on sharded arrays split from JAX's global
//! inputs, and gives JAX's global outputs; then the bad inputs, each a typed error.

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{HostArray, read_npy};
use pjrt_actors::{Client, CompileOptions, Error, Mesh, PartitionSpec, Sharding};
use serde_json::Value;

use crate::jax_lapack::values;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spmd")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(data_dir().join("manifest.json")).unwrap()).unwrap()
}

fn case(name: &str) -> Value {
    (manifest()["cases"].as_array().unwrap().iter())
        .find(|c| c["name"] == name)
        .unwrap()
        .clone()
}

fn npy(file: &Value) -> HostArray {
    read_npy(&std::fs::read(data_dir().join(file.as_str().unwrap())).unwrap()).unwrap()
}

/// The sharding JAX's manifest entry describes, built as `NamedSharding` builds it.
fn named(entry: &Value, rank: usize) -> Sharding {
    let axes: Vec<(String, usize)> = (entry["mesh"].as_array().unwrap().iter())
        .map(|a| {
            (
                a[0].as_str().unwrap().to_string(),
                a[1].as_u64().unwrap() as usize,
            )
        })
        .collect();
    let axes: Vec<(&str, usize)> = axes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let devices: Vec<i32> = (entry["mesh_devices"].as_array().unwrap().iter())
        .map(|d| d.as_i64().unwrap() as i32)
        .collect();
    let spec = PartitionSpec(
        (entry["spec"].as_array().unwrap().iter())
            .map(|d| {
                (d.as_array().unwrap().iter())
                    .map(|a| a.as_str().unwrap().into())
                    .collect()
            })
            .collect(),
    );
    Sharding::named(&Mesh::new(&axes, &devices).unwrap(), &spec, rank).unwrap()
}

/// JAX's global inputs of a case.
fn inputs_of(c: &Value) -> Vec<HostArray> {
    (c["inputs"].as_array().unwrap().iter())
        .map(|i| npy(&i["file"]))
        .collect()
}

/// A case's first output, read back, is JAX's to 1e-5.
fn assert_first_output_is_jaxs(out: &[pjrt_actors::ShardedArray], c: &Value) {
    let jax = npy(&c["outputs"][0]["file"]);
    let (g, w) = (values(&out[0].to_host().unwrap()), values(&jax));
    assert_eq!(g.len(), w.len(), "{g:?} {w:?}");
    assert!(
        g.iter().zip(&w).all(|(a, b)| (a - b).abs() < 1e-5),
        "{g:?} {w:?}"
    );
}

fn program(c: &Value) -> Vec<u8> {
    std::fs::read(data_dir().join(c["program"].as_str().unwrap())).unwrap()
}

/// Runs one case from its text through sharded arrays; `Err` says what differs from JAX.
fn check_case(client: &Client, c: &Value) -> Result<(), String> {
    check_program(client, c, &program(c), "text")
}

/// Runs one case from `code` (its text, or its bytecode) through sharded arrays.
fn check_program(client: &Client, c: &Value, code: &[u8], form: &str) -> Result<(), String> {
    let name = &format!("{} ({form})", c["name"].as_str().unwrap());
    let exe = (client.compile_and_load(code, &CompileOptions::default()))
        .map_err(|e| format!("{name}: compile: {e}"))?;
    assert_eq!(
        exe.addressable_devices().len(),
        4,
        "{name}: one device per partition"
    );
    let inputs = inputs_of(c);
    let want: Vec<Sharding> = (c["inputs"].as_array().unwrap().iter().zip(&inputs))
        .map(|(e, h)| named(e, h.dims.len()))
        .collect();
    let got = exe
        .parameter_shardings()
        .ok_or(format!("{name}: no parameter shardings"))?;
    if got != want {
        return Err(format!(
            "{name}: parameter shardings {got:?}, JAX's {want:?}"
        ));
    }
    let args = (inputs.iter().zip(&want))
        .map(|(h, s)| client.put_sharded(h, s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{name}: put_sharded: {e}"))?;
    let outputs = (exe.execute_sharded(&args.iter().collect::<Vec<_>>()))
        .map_err(|e| format!("{name}: execute: {e}"))?;
    let expected = c["outputs"].as_array().unwrap();
    if outputs.len() != expected.len() {
        return Err(format!(
            "{name}: {} outputs, JAX has {}",
            outputs.len(),
            expected.len()
        ));
    }
    for (k, (out, e)) in outputs.iter().zip(expected).enumerate() {
        let jax = npy(&e["file"]);
        if out.sharding() != &named(e, jax.dims.len()) {
            return Err(format!("{name}: output {k} sharding {}", out.sharding()));
        }
        let host = out
            .to_host()
            .map_err(|e| format!("{name}: read back: {e}"))?;
        if host.dims != jax.dims {
            return Err(format!(
                "{name}: output {k} is {:?}, JAX's {:?}",
                host.dims, jax.dims
            ));
        }
        let (g, w) = (values(&host), values(&jax));
        let scale = w.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        if let Some(i) = (0..w.len()).find(|&i| (g[i] - w[i]).abs() > 1e-5 * scale) {
            return Err(format!(
                "{name}: output {k} value {i}: {} against JAX's {}",
                g[i], w[i]
            ));
        }
    }
    Ok(())
}

#[test]
fn every_spmd_program_runs_sharded_on_four_devices_and_matches_jax() {
    let client = Client::open().unwrap();
    assert!(client.device_count() >= 4);
    let cases = manifest()["cases"].as_array().unwrap().clone();
    assert!(cases.len() >= 10, "the corpus has every collective");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| check_case(&client, c).err())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn bytecode_says_its_partition_count_and_runs_as_its_text_does() {
    // Every program's serialized form (what `jax.export` writes) reads as JAX's nr_devices
    // partitions, and single-device exports as one.
    for c in manifest()["cases"].as_array().unwrap() {
        let bytecode = std::fs::read(data_dir().join(c["bytecode"].as_str().unwrap())).unwrap();
        let says = pjrt_actors::spmd::read(&bytecode);
        let want = c["nr_devices"].as_u64().unwrap() as usize;
        assert_eq!(says.num_partitions, Some(want), "{}", c["name"]);
        assert_eq!(says.num_replicas, Some(1), "{}", c["name"]);
        assert!(says.shardy && !says.sharded_bytecode, "{}", c["name"]);
    }
    let single = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/gpt_block.mlirbc");
    let says = pjrt_actors::spmd::read(&std::fs::read(single).unwrap());
    assert_eq!(
        (says.num_partitions, says.sharded_bytecode),
        (Some(1), false)
    );
    // The bytecode compiles with default options and gives JAX's answer.
    let client = Client::open().unwrap();
    let c = case("tp_mlp");
    let bytecode = std::fs::read(data_dir().join(c["bytecode"].as_str().unwrap())).unwrap();
    let exe = client
        .compile_and_load(&bytecode, &CompileOptions::default())
        .unwrap();
    let out = exe.execute_sharded_host(&inputs_of(&c)).unwrap();
    assert_first_output_is_jaxs(&out, &c);
}

#[test]
fn every_spmd_program_runs_from_its_bytecode_as_from_its_text() {
    // shard_map's collectives from bytecode failed in XLA's partitioner (`Unexpected custom
    // call named 'xla.sdy.*'`) where Shardy was looked for as one string.
    let client = Client::open().unwrap();
    let cases = manifest()["cases"].as_array().unwrap().clone();
    let failures: Vec<String> = (cases.iter())
        .filter_map(|c| {
            let bytecode = std::fs::read(data_dir().join(c["bytecode"].as_str().unwrap())).unwrap();
            check_program(&client, c, &bytecode, "bytecode").err()
        })
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn bad_shardings_splits_and_device_counts_are_typed_errors() {
    let client = Client::open().unwrap();
    let c = case("dp_mlp");
    let exe = client
        .compile_and_load(program(&c), &CompileOptions::default())
        .unwrap();
    let inputs = inputs_of(&c);
    let shardings = exe.parameter_shardings().unwrap();
    // Argument 0 is split by rows; a replicated copy is refused, naming it.
    let mut args: Vec<_> = (inputs.iter().zip(&shardings))
        .map(|(h, s)| client.put_sharded(h, s).unwrap())
        .collect();
    args[0] = client
        .put_sharded(&inputs[0], &Sharding::replicated(2, &[0, 1, 2, 3]))
        .unwrap();
    match exe.execute_sharded(&args.iter().collect::<Vec<_>>()) {
        Err(Error::BadArgument {
            index: 0, reason, ..
        }) => {
            assert!(reason.contains("expects"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // An uneven split, as in JAX.
    let uneven = HostArray {
        dims: vec![6, 8],
        bytes: vec![0; 6 * 8 * 4],
        ..inputs[0].clone()
    };
    let err = client.put_sharded(&uneven, &shardings[0]).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not split into 4 even shards"),
        "{err}"
    );
    // Options that disagree with the program's partition count.
    let two = CompileOptions {
        num_partitions: Some(2),
        ..Default::default()
    };
    let err = client.compile_and_load(program(&c), &two).unwrap_err();
    assert!(err.to_string().contains("mhlo.num_partitions = 4"), "{err}");
    // The client goes on: the same program still runs.
    assert!(check_case(&client, &c).is_ok());
}

#[test]
fn defragment_keeps_a_sharded_array_whole() {
    let client = Client::open().unwrap();
    let c = case("partial_2x2");
    let input = npy(&c["inputs"][0]["file"]);
    let sharding = named(&c["inputs"][0], 2);
    let array = client.put_sharded(&input, &sharding).unwrap();
    let live = client.live_arrays().unwrap().len();
    assert!(live >= 4, "its four shards are live arrays");
    client.defragment().unwrap();
    assert_eq!(array.to_host().unwrap(), input);
    assert_eq!(array.sharding(), &sharding);
}

mod cpu_plugin {
    use super::*;

    #[test]
    fn a_program_for_more_devices_than_the_client_has_says_how_many_it_needs() {
        let small = Client::builder().cpu_device_count(2).open().unwrap();
        let c = case("dp_mlp");
        let err = small
            .compile_and_load(program(&c), &CompileOptions::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("4 partitions need 4 devices"),
            "{err}"
        );
    }
}

#[test]
fn the_caller_chooses_the_devices_and_partition_p_runs_on_the_p_th() {
    let client = Client::open().unwrap();
    let c = case("dp_mlp");
    let options = CompileOptions {
        devices: Some(vec![3, 2, 1, 0]),
        ..Default::default()
    };
    let exe = client.compile_and_load(program(&c), &options).unwrap();
    let ids: Vec<i32> = exe.addressable_devices().iter().map(|d| d.id()).collect();
    assert_eq!(ids, [3, 2, 1, 0]);
    // Rows split four ways: the first quarter on device 3.
    let rows = &exe.parameter_shardings().unwrap()[0];
    assert_eq!(rows.devices(), [3, 2, 1, 0]);
    let inputs = inputs_of(&c);
    let out = exe.execute_sharded_host(&inputs).unwrap();
    let first = out[0].shard_on(&client.devices()[3]).unwrap();
    assert_eq!(first.dims(), [4, 4]);
    assert_first_output_is_jaxs(&out, &c);
}

#[test]
fn propagation_to_outputs_lets_the_partitioner_choose_an_open_outputs_sharding() {
    let client = Client::open().unwrap();
    // `x + x` over two devices, rows split on the way in; the result's sharding is left open.
    let program = r#"module @open attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%x: tensor<4x2xf32> {mhlo.sharding = "{devices=[2,1]0,1}"}) -> tensor<4x2xf32> {
    %0 = stablehlo.add %x, %x : tensor<4x2xf32>
    return %0 : tensor<4x2xf32>
  }
}"#;
    let compile = |propagate: bool| {
        let options = CompileOptions {
            propagate_to_outputs: Some(propagate),
            ..Default::default()
        };
        let exe = client.compile_and_load(program, &options).unwrap();
        exe.output_shardings().unwrap().remove(0)
    };
    let rows = Sharding::named(
        &Mesh::new(&[("d", 2)], &[0, 1]).unwrap(),
        &PartitionSpec::new(&[&["d"]]),
        2,
    )
    .unwrap();
    assert_eq!(compile(true), rows, "propagated from the input");
    assert_eq!(
        compile(false),
        Sharding::replicated(2, &[0, 1]),
        "open means replicated"
    );
}

#[test]
fn the_async_execute_gives_what_the_blocking_one_gives() {
    let client = Client::open().unwrap();
    let c = case("heads_attention");
    let exe = client
        .compile_and_load(program(&c), &CompileOptions::default())
        .unwrap();
    let shardings = exe.parameter_shardings().unwrap();
    let args: Vec<_> = (inputs_of(&c).iter().zip(&shardings))
        .map(|(h, s)| client.put_sharded(h, s).unwrap())
        .collect();
    let refs: Vec<_> = args.iter().collect();
    let blocking = exe.execute_sharded(&refs).unwrap();
    let future = exe.execute_sharded_async(&refs);
    let async_out = pjrt_actors_core::client::runtime::block_on(future)
        .unwrap()
        .unwrap();
    assert_eq!(async_out[0].sharding(), blocking[0].sharding());
    assert_eq!(
        async_out[0].to_host().unwrap(),
        blocking[0].to_host().unwrap()
    );
}

#[test]
fn an_spmd_executable_compiled_in_a_worker_comes_back_from_the_disk_cache_whole() {
    // Compiled in a worker and stored; a second client finds it on disk: the same shardings,
    // and JAX's answer.
    let dir = crate::common::scratch_dir("spmd-disk-cache");
    let open = || {
        Client::builder()
            .compile_in_worker(crate::isolation::worker())
            .compile_cache_dir(&dir)
            .open()
            .unwrap()
    };
    let c = case("partial_2x2");
    let first = open();
    let compiled = first
        .compile_and_load(program(&c), &CompileOptions::default())
        .unwrap();
    let shardings = compiled.parameter_shardings().unwrap();
    drop((compiled, first));
    let second = open();
    let exe = second
        .compile_and_load(program(&c), &CompileOptions::default())
        .unwrap();
    assert_eq!(second.compile_cache_stats().disk_hits, 1);
    assert_eq!(exe.parameter_shardings().unwrap(), shardings);
    let out = exe.execute_sharded_host(&inputs_of(&c)).unwrap();
    assert_first_output_is_jaxs(&out, &c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program jax exported with `donate_argnums` over 4 devices (tests/data/spmd/donate.py):
/// donating its cache through `execute_sharded_donating` gives JAX's output, deletes every
/// shard of the cache (and nothing of `x`), the memory held stays as it was (the cache's bytes
/// gone, the output's come), and the deleted cache cannot be donated again. (No other test
/// donated a shard.)
#[test]
fn an_spmd_export_made_with_donate_argnums_donates_every_shard() {
    let client = Client::open().unwrap();
    let code = std::fs::read(data_dir().join("donated_step.mlir")).unwrap();
    let exe = client
        .compile_and_load(&code, &CompileOptions::default())
        .unwrap();
    let shardings = exe.parameter_shardings().expect("an SPMD program");
    let file = |name: &str| npy(&Value::from(name));
    let (cache, x) = (file("donated_step.in0.npy"), file("donated_step.in1.npy"));
    let cache = client.put_sharded(&cache, &shardings[0]).unwrap();
    let x = client.put_sharded(&x, &shardings[1]).unwrap();
    assert_eq!(cache.shards().len(), 4);
    let held = |c: &Client| -> u64 {
        (c.devices().iter())
            .map(|d| d.default_memory_space().unwrap().bytes_held())
            .sum()
    };
    let before = held(&client);
    let out = exe.execute_sharded_donating(&[&cache, &x], &[0]).unwrap();
    assert!(
        cache.shards().iter().all(|s| s.is_deleted()),
        "a shard kept"
    );
    assert!(x.shards().iter().all(|s| !s.is_deleted()), "x was donated");
    // The cache's bytes went as the output's came.
    assert_eq!(held(&client), before);
    let got = values(&out[0].to_host().unwrap());
    let want = values(&file("donated_step.out0.npy"));
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-6),
        "{got:?} against JAX's {want:?}"
    );
    let again = exe.execute_sharded_donating(&[&cache, &x], &[0]);
    assert!(again.is_err(), "a deleted cache was donated again");
}
