//! Every collective as a user exports it (tests/data/spmd/shard_map, made by shard_map.py with
//! jax 0.10.2 and 0.11.2: `jit` of a `shard_map`, no shardings given to `jit`), run from its
//! bytecode and from its `.exported` artifact, and checked against JAX's outputs. Such bytecode
//! names Shardy only by its dialect and ops (no `sdy.sharding` string): it failed to compile
//! with `Unexpected custom call named 'xla.sdy.*' in the XLA partitioner`.

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{HostArray, read_npy};
use pjrt_actors::{Client, CompileOptions, Error};
use serde_json::Value;

use crate::jax_lapack::values;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spmd/shard_map")
}

fn npy(name: &str) -> HostArray {
    read_npy(&std::fs::read(data_dir().join(name)).unwrap()).unwrap()
}

/// `Err` saying how `got` differs from JAX's output (its length included).
fn differs(got: &HostArray, want: &HostArray) -> Option<String> {
    if got.dims != want.dims {
        return Some(format!("dims {:?}, JAX's {:?}", got.dims, want.dims));
    }
    let (g, w) = (values(got), values(want));
    assert_eq!(g.len(), w.len());
    (0..w.len())
        .find(|&i| (g[i] - w[i]).abs() > 1e-6 * w[i].abs().max(1.0))
        .map(|i| format!("value {i}: {} against JAX's {}", g[i], w[i]))
}

/// Whether an error is the typed refusal of a program newer than the plugin parses (the 0.81
/// plugin's StableHLO 1.13.3 for jax 0.11.2's 1.18).
fn too_new(e: &Error) -> bool {
    matches!(e, Error::StableHloTooNew { .. }) && !crate::common::new_abi()
}

#[test]
fn every_collective_runs_from_bytecode_and_from_its_export_as_jax_ran_it() {
    let client = Client::open().unwrap();
    let mut failures = Vec::new();
    let mut ran = std::collections::BTreeMap::new();
    for version in ["0.10.2", "0.11.2"] {
        let ran = ran.entry(version).or_insert(0);
        let manifest: Value = serde_json::from_slice(
            &std::fs::read(data_dir().join(format!("shard_map.{version}.json"))).unwrap(),
        )
        .unwrap();
        let cases = manifest["cases"].as_array().unwrap();
        assert_eq!(
            cases.len(),
            8,
            "psum, pmax, pmean, all_gather, psum_scatter, ppermute, all_to_all, axis_index"
        );
        for c in cases {
            let at = |k: &str| c[k].as_str().unwrap().to_string();
            let (input, want) = (npy(&at("input")), npy(&at("output")));
            // Its module's bytecode, compiled with default options: the program says the rest.
            let bytecode = std::fs::read(data_dir().join(at("bytecode"))).unwrap();
            match client.compile_and_load(&bytecode, &CompileOptions::default()) {
                Err(e) if too_new(&e) => {}
                Err(e) => failures.push(format!("{}: compile: {e}", at("bytecode"))),
                Ok(exe) => {
                    assert_eq!(exe.addressable_devices().len(), 4, "{}", at("bytecode"));
                    let out = exe
                        .execute_sharded_host(std::slice::from_ref(&input))
                        .unwrap();
                    assert_eq!(out.len(), 1);
                    if let Some(d) = differs(&out[0].to_host().unwrap(), &want) {
                        failures.push(format!("{}: {d}", at("bytecode")));
                    }
                    *ran += 1;
                }
            }
            // The artifact, called as JAX calls it.
            match client.load_exported(&std::fs::read(data_dir().join(at("exported"))).unwrap()) {
                Err(e) if too_new(&e) => {}
                Err(e) => failures.push(format!("{}: load: {e}", at("exported"))),
                Ok(model) => {
                    let out = model.call(std::slice::from_ref(&input)).unwrap();
                    assert_eq!(out.len(), 1);
                    if let Some(d) = differs(&out[0], &want) {
                        failures.push(format!("{}: {d}", at("exported")));
                    }
                    *ran += 1;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Every case ran where the plugin parses it: all of both versions' on the 0.115 plugin;
    // on the 0.81 one, jax 0.10.2's, and of 0.11.2's those its StableHLO parses (the rest were
    // refused as too new above).
    assert_eq!(ran["0.10.2"], 16, "{ran:?}");
    if crate::common::new_abi() {
        assert_eq!(ran["0.11.2"], 16, "{ran:?}");
    }
}
