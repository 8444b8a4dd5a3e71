//! The export corpus through the command line: `run NAME.exported --params NAME.args.npz`
//! (every input by its pytree path; jax 0.10.2's and 0.11.2's serialized forms) writes each output with `--output`, and each is checked
//! against JAX's recorded one, as the suite checks the library's.

mod common;
#[path = "../../tests/suite/jax_outputs.rs"]
mod jax_outputs;

use std::process::Command;

use jax_outputs::{check_outputs, corpus, corpus_dir, tolerance, wanted};
use pjrt_actors::host_data::read_npy;

#[test]
fn every_corpus_export_runs_through_the_cli_with_jaxs_results() {
    let dir = corpus_dir();
    let scratch = std::env::temp_dir().join(format!("pjrt-actors-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let new_abi = common::new_abi();
    let mut too_new = 0;
    for c in corpus() {
        let name = c["name"].as_str().unwrap();
        let outputs = c["outputs"].as_u64().unwrap() as usize;
        let at = |suffix: &str| dir.join(format!("{name}{suffix}")).display().to_string();
        let mut forms = vec![".exported"];
        if c["serializers"].as_array().unwrap().len() > 1 {
            forms.push(".jax0112.exported"); // the same export in jax 0.11.2's form
        }
        for form in forms {
            let mut args = vec![
                "run".to_string(),
                at(form),
                "--params".into(),
                at(".args.npz"),
            ];
            let out = |k: usize| scratch.join(format!("{name}.{k}.npy"));
            for k in 0..outputs {
                args.extend(["--output".into(), format!("@{}", out(k).display())]);
            }
            let o = Command::new(env!("CARGO_BIN_EXE_pjrt-actors"))
                .args(&args)
                .output()
                .unwrap();
            // The 0.81 plugin's StableHLO (1.13.3) cannot parse the composites a few use.
            let stderr = String::from_utf8_lossy(&o.stderr);
            if !o.status.success() && stderr.contains("needs a newer StableHLO") && !new_abi {
                too_new += 1;
                continue;
            }
            assert!(o.status.success(), "{name}{form}: {stderr}");
            let got: Vec<_> = (0..outputs)
                .map(|k| read_npy(&std::fs::read(out(k)).unwrap()).unwrap())
                .collect();
            check_outputs(
                &format!("{name}{form}"),
                &got,
                &wanted(name),
                tolerance(name),
            );
        }
    }
    assert!(too_new <= 8, "{too_new} too new for this plugin");
    std::fs::remove_dir_all(&scratch).unwrap();
}
