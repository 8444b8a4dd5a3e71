//! The export corpus (tests/data/exported/corpus, made by scripts/jax-exported-data from
//! corpus.py): 35 model-like functions from jax 0.10.2's `jax.export`, each run from its
//! `.exported` bytes (and from the same export in jax 0.11.2's serialized form) with every
//! input loaded as a weight by its pytree path, checked against JAX's own call's results.

use pjrt_actors::export::Exported;

use crate::jax_outputs::{check_outputs, corpus, corpus_dir, read, tolerance, wanted};

/// Loads one artifact of a case, every input as a weight by its path, and checks its call;
/// false where the plugin's StableHLO is too old to parse it (the 0.81 plugin, 1.13.3, lacks
/// `stablehlo.composite`, which jax 0.10.2 writes for `top_k`, `erf`, ...).
fn run_case(client: &pjrt_actors::Client, name: &str, file: &str, inputs: usize) -> bool {
    run_case_against(client, name, file, inputs, &wanted(name))
}

/// As `run_case`, against `want` (another jax's own outputs).
fn run_case_against(
    client: &pjrt_actors::Client,
    name: &str,
    file: &str,
    inputs: usize,
    want: &[pjrt_actors::HostArray],
) -> bool {
    let mut model = match client.load_exported(&read(file)) {
        Ok(model) => model,
        Err(pjrt_actors::Error::StableHloTooNew { .. }) if !crate::common::strict_cpu_client() => {
            return false;
        }
        Err(e) => panic!("{file}: {e}"),
    };
    // Every input by its path, as weights are: the loader's matching on all of them.
    let loaded = model
        .load_params(&read(&format!("{name}.args.npz")))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(loaded, inputs, "{file}");
    assert!(model.free_inputs().is_empty(), "{file}");
    let got = model.call(&[]).unwrap_or_else(|e| panic!("{file}: {e}"));
    check_outputs(file, &got, want, tolerance(name));
    true
}

mod cpu_plugin {
    use super::*;

    #[test]
    fn every_corpus_export_runs_from_its_bytes_with_jaxs_results() {
        let client = pjrt_actors::Client::open().unwrap();
        let cases = corpus();
        assert!(cases.len() >= 30, "{} cases", cases.len());
        let mut newer = 0;
        let mut too_new = Vec::new();
        for c in &cases {
            let name = c["name"].as_str().unwrap();
            let mut files = vec![format!("{name}.exported")];
            if c["serializers"].as_array().unwrap().len() > 1 {
                files.push(format!("{name}.jax0112.exported"));
                newer += 1;
            }
            let read_back: Vec<_> = (files.iter())
                .map(|f| Exported::parse(&read(f)).unwrap_or_else(|e| panic!("{f}: {e}")))
                .collect();
            for f in &files {
                if !run_case(&client, name, f, c["inputs"].as_u64().unwrap() as usize) {
                    too_new.push(f.clone());
                }
            }
            if let [old, new] = read_back.as_slice() {
                // jax 0.10 writes version 3 whatever its schema; 0.11 its own, and the writer.
                assert_eq!(
                    (old.serialization_version, new.serialization_version),
                    (3, 12)
                );
                assert_eq!(
                    (old.jax_version.as_deref(), new.jax_version.as_deref()),
                    (None, Some("0.10.2"))
                );
                assert_eq!(old.in_paths(), new.in_paths(), "{name}");
                assert_eq!(old.in_avals, new.in_avals, "{name}");
                assert_eq!(old.out_avals, new.out_avals, "{name}");
                assert_eq!(old.in_shardings, new.in_shardings, "{name}");
                assert_eq!(old.module_kept_var_idx, new.module_kept_var_idx, "{name}");
                assert_eq!(old.module, new.module, "{name}");
            }
        }
        assert!(newer >= 30, "{newer} cases in 0.11.2's form");
        // On the 0.115 plugin every case runs; on the 0.81 one, the few that need composites.
        assert!(too_new.len() <= 8, "too new for this plugin: {too_new:?}");
    }

    /// jax 0.12's own exports of the same functions (corpus_jax012.py: its lowering, its
    /// StableHLO, 1.16.3 by its 12-week compatibility target, its serializer), against jax
    /// 0.12's own outputs: run on every plugin whose StableHLO parses them, a typed
    /// `StableHloTooNew` elsewhere (zml's 1.16.1), counted.
    #[test]
    fn jax_0_12s_own_exports_run_where_the_plugin_parses_them() {
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(corpus_dir().join("corpus_jax012.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["jax"], "0.12.0.1");
        let client = pjrt_actors::Client::open().unwrap();
        let (mut ran, mut too_new) = (0, Vec::new());
        for c in manifest["cases"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let file = format!("{name}.jax012.exported");
            let exported = Exported::parse(&read(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(exported.jax_version.as_deref(), Some("0.12.0.1"), "{file}");
            let want = {
                let mut outs =
                    pjrt_actors::host_data::read_npz(&read(&format!("{name}.jax012.want.npz")))
                        .unwrap();
                outs.sort_by_key(|(k, _)| k[3..].parse::<usize>().unwrap());
                outs.into_iter().map(|(_, h)| h).collect::<Vec<_>>()
            };
            let inputs = c["inputs"].as_u64().unwrap() as usize;
            match run_case_against(&client, name, &file, inputs, &want) {
                true => ran += 1,
                false => too_new.push(name.to_string()),
            }
        }
        let (_, minor) = client.plugin_api_version();
        eprintln!(
            "jax 0.12 exports: {ran} ran, {} too new: {too_new:?}",
            too_new.len()
        );
        // StableHLO 1.20.0 parses all of them; 1.16.1 and 1.13.3 not the linear algebra (jax
        // 0.12 lowers it to newer forms), 1.13.3 not top_k's composite either.
        let linalg = ["cholesky_solve", "lu_solve", "qr", "eigh", "svd"];
        let expected: Vec<&str> = match minor {
            115.. => vec![],
            106 => linalg.to_vec(),
            _ => linalg.iter().copied().chain(["top_k"]).collect(),
        };
        assert_eq!(too_new, expected);
        assert_eq!(ran + too_new.len(), 35);
    }
}
