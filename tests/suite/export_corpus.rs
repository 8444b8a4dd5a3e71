//! The export corpus (tests/data/exported/corpus, made by scripts/jax-exported-data from
//! corpus.py): 35 model-like functions from jax 0.10.2's `jax.export`, each run from its
//! `.exported` bytes with every input loaded as a weight by its pytree path, checked against
//! what JAX's own call of the deserialized artifact returned.

use crate::jax_outputs::{check_outputs, corpus, read, tolerance, wanted};

mod cpu_plugin {
    use super::*;

    #[test]
    fn every_corpus_export_runs_from_its_bytes_with_jaxs_results() {
        let client = pjrt_actors::Client::open().unwrap();
        let cases = corpus();
        assert!(cases.len() >= 30, "{} cases", cases.len());
        for c in &cases {
            let name = c["name"].as_str().unwrap();
            let mut model = client
                .load_exported(&read(&format!("{name}.exported")))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Every input by its path, as weights are: the loader's matching on all of them.
            let loaded = model
                .load_params(&read(&format!("{name}.args.npz")))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(loaded as u64, c["inputs"].as_u64().unwrap(), "{name}");
            assert!(model.free_inputs().is_empty(), "{name}");
            let got = model.call(&[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_outputs(name, &got, &wanted(name), tolerance(name));
        }
    }
}
