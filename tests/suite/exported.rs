//! JAX's serialized `Exported` artifacts (tests/data/exported, made by scripts/jax-exported-data
//! with jax 0.10.2) read as JAX itself reads them back: names, pytree paths, avals (symbolic
//! dims included), platforms, devices, the calling convention, kept arguments, shardings. And
//! every cut or garbled artifact is a typed error, never a panic.

use std::path::{Path, PathBuf};

use pjrt_actors::ElementType;
use pjrt_actors::export::{Dim, Exported, ExportedDtype, ExportedSharding};
use serde_json::Value;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exported")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(data_dir().join("manifest.json")).unwrap()).unwrap()
}

fn artifact(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join(format!("{name}.exported"))).unwrap()
}

/// An aval as the manifest writes it: its dims as text, then JAX's dtype name.
fn aval_text(a: &pjrt_actors::export::Aval) -> Vec<String> {
    let mut out: Vec<String> = a.dims.iter().map(Dim::to_string).collect();
    out.push(match a.dtype {
        ExportedDtype::Array(ElementType::F32) => "float32".into(),
        other => format!("{other:?}"),
    });
    out
}

#[test]
fn every_artifact_reads_as_jax_reads_it() {
    let cases = manifest()["cases"].as_array().unwrap().clone();
    assert_eq!(cases.len(), 5);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let e = Exported::parse(&artifact(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            e.function_name,
            c["function_name"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(e.in_paths(), strings(&c["in_paths"]), "{name}");
        assert_eq!(e.out_paths(), strings(&c["out_paths"]), "{name}");
        let avals =
            |v: &Value| -> Vec<Vec<String>> { v.as_array().unwrap().iter().map(strings).collect() };
        assert_eq!(
            e.in_avals.iter().map(aval_text).collect::<Vec<_>>(),
            avals(&c["in_avals"]),
            "{name}"
        );
        assert_eq!(
            e.out_avals.iter().map(aval_text).collect::<Vec<_>>(),
            avals(&c["out_avals"]),
            "{name}"
        );
        assert_eq!(e.platforms, strings(&c["platforms"]), "{name}");
        assert_eq!(
            e.nr_devices as u64,
            c["nr_devices"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            e.calling_convention_version as u64,
            c["calling_convention_version"].as_u64().unwrap(),
            "{name}"
        );
        let kept: Vec<u64> = e.module_kept_var_idx.iter().map(|&i| i as u64).collect();
        let want: Vec<u64> = (c["module_kept_var_idx"].as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(kept, want, "{name}");
        assert_eq!(
            e.uses_global_constants,
            c["uses_global_constants"].as_bool().unwrap(),
            "{name}"
        );
        assert_eq!(
            e.module.len() as u64,
            c["module_bytes"].as_u64().unwrap(),
            "{name}"
        );
        for (k, (got, want)) in e
            .in_shardings
            .iter()
            .zip(c["in_shardings"].as_array().unwrap())
            .enumerate()
        {
            match (got, want) {
                (None, Value::Null) => {}
                (Some(ExportedSharding::Named { mesh, spec }), want) => {
                    let mesh_want: Vec<(String, usize)> = (want["mesh"].as_array().unwrap().iter())
                        .map(|a| {
                            (
                                a[0].as_str().unwrap().into(),
                                a[1].as_u64().unwrap() as usize,
                            )
                        })
                        .collect();
                    let spec_want: Vec<Vec<String>> = want["spec"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(strings)
                        .collect();
                    assert_eq!((mesh, spec), (&mesh_want, &spec_want), "{name} input {k}");
                }
                other => panic!("{name} input {k}: {other:?}"),
            }
        }
    }
    // What the cases are there to show.
    let poly = Exported::parse(&artifact("poly")).unwrap();
    assert_eq!(poly.in_avals[0].dims[0], Dim::Symbolic("b".into()));
    let unused = Exported::parse(&artifact("unused_arg")).unwrap();
    assert_eq!(
        unused.module_kept_var_idx,
        [0, 2],
        "JAX dropped the unused argument"
    );
}

#[test]
fn cut_garbled_and_foreign_bytes_are_typed_errors() {
    let bytes = artifact("mlp");
    // Every cut: an error (or, where only trailing padding went, the same artifact).
    for n in 0..bytes.len() {
        if let Ok(e) = Exported::parse(&bytes[..n]) {
            assert_eq!(e.function_name, "mlp");
        }
    }
    // Every byte flipped in turn: no panic, and an `InvalidArgument` where it fails.
    for i in 0..bytes.len() {
        let mut garbled = bytes.clone();
        garbled[i] ^= 0xff;
        if let Err(e) = Exported::parse(&garbled) {
            assert!(
                matches!(e, pjrt_actors::export::ReadError::InvalidArgument(_)),
                "{e}"
            );
        }
    }
    for foreign in [
        &b""[..],
        b"module {}",
        b"ML\xefR\x06StableHLO\0",
        &[0xffu8; 64][..],
    ] {
        let e = Exported::parse(foreign).unwrap_err();
        assert!(e.to_string().contains("exported artifact"), "{e}");
    }
}

/// Running artifacts exported for the CPU only: the CPU plugin's.
mod cpu_plugin {
    use super::*;

    fn npy(name: &str) -> pjrt_actors::host_data::HostArray {
        pjrt_actors::host_data::read_npy(&std::fs::read(data_dir().join(name)).unwrap()).unwrap()
    }

    #[test]
    fn every_runnable_artifact_runs_from_its_bytes_and_gives_jaxs_outputs() {
        // An unused argument dropped, the platform index of a two-platform export, a pytree of
        // parameters, and a 4-device export as the SPMD program it is.
        let client = pjrt_actors::Client::open().unwrap();
        let mut ran = 0;
        for c in manifest()["cases"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let files = |k: &str| -> Vec<String> {
                (c[k].as_array().unwrap().iter())
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect()
            };
            if files("inputs").is_empty() {
                continue;
            }
            let model = client
                .load_exported(&artifact(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let args: Vec<_> = files("inputs").iter().map(|f| npy(f)).collect();
            let outputs = model.call(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
            let want: Vec<_> = files("outputs").iter().map(|f| npy(f)).collect();
            assert_eq!(outputs.len(), want.len(), "{name}");
            for (k, (got, want)) in outputs.iter().zip(&want).enumerate() {
                assert_eq!(got.dims, want.dims, "{name} output {k}");
                let (g, w) = (
                    crate::jax_lapack::values(got),
                    crate::jax_lapack::values(want),
                );
                let scale = w.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
                assert!(
                    g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 1e-5 * scale),
                    "{name} output {k}: {g:?} against JAX's {w:?}"
                );
            }
            ran += 1;
        }
        assert_eq!(ran, 4);
    }

    #[test]
    fn exports_that_cannot_run_here_and_wrong_arguments_are_typed_errors() {
        let client = pjrt_actors::Client::open().unwrap();
        let err = client
            .load_exported(&artifact("poly"))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("shape-polymorphic"), "{err}");
        let model = client.load_exported(&artifact("mlp")).unwrap();
        let mut args: Vec<_> = (0..4).map(|k| npy(&format!("mlp.input{k}.npy"))).collect();
        args[1].dims = vec![16, 8];
        let err = model.call(&args).unwrap_err();
        assert!(err.to_string().contains("[0][0]['layer0']['w']"), "{err}");
        let err = model.call(&args[..3]).unwrap_err();
        assert!(err.to_string().contains("takes 4 arguments"), "{err}");
    }

    /// A `.safetensors` file of f32 tensors, written by hand.
    fn safetensors(tensors: &[(&str, &[i64], &[f32])]) -> Vec<u8> {
        let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
        for (name, shape, values) in tensors {
            let start = data.len();
            data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
        }
        let text = serde_json::to_vec(&header).unwrap();
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend(text);
        out.extend(data);
        out
    }

    #[test]
    fn weights_from_safetensors_stay_resident_and_the_rest_is_given_per_call() {
        let client = pjrt_actors::Client::open().unwrap();
        let want = |name: &str| crate::jax_lapack::values(&npy(name));
        let close = |g: &[f64], w: &[f64]| {
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| (a - b).abs() < 1e-5)
        };
        // The MLP's parameters by their dotted paths (`layer0.w` for [0][0]['layer0']['w']).
        let mut model = client.load_exported(&artifact("mlp")).unwrap();
        let weights = std::fs::read(data_dir().join("mlp.safetensors")).unwrap();
        assert_eq!(model.load_params(&weights).unwrap(), 3);
        assert_eq!(model.free_inputs(), ["[0][1]"]);
        let live = client.live_arrays().unwrap().len();
        for _ in 0..3 {
            let out = model.call(&[npy("mlp.input3.npy")]).unwrap();
            assert!(close(
                &crate::jax_lapack::values(&out[0]),
                &want("mlp.output0.npy")
            ));
            assert!(close(
                &crate::jax_lapack::values(&out[1]),
                &want("mlp.output1.npy")
            ));
        }
        assert_eq!(
            client.live_arrays().unwrap().len(),
            live,
            "the weights were not uploaded again"
        );
        // A 4-device export: its weight held sharded as the module expects.
        let mut sharded = client.load_exported(&artifact("sharded")).unwrap();
        let weight = std::fs::read(data_dir().join("sharded.safetensors")).unwrap();
        assert_eq!(sharded.load_params(&weight).unwrap(), 1);
        let out = sharded.call(&[npy("sharded.input0.npy")]).unwrap();
        assert!(close(
            &crate::jax_lapack::values(&out[0]),
            &want("sharded.output0.npy")
        ));
        // A name that fits two arguments, a wrong shape, garbage: typed errors naming what.
        let mut fresh = client.load_exported(&artifact("mlp")).unwrap();
        let two = safetensors(&[("w", &[16, 4], &[0.0; 64])]);
        let err = fresh.load_params(&two).unwrap_err();
        assert!(err.to_string().contains("`w` matches 2 arguments"), "{err}");
        let wrong = safetensors(&[("layer1.w", &[4, 16], &[0.0; 64])]);
        let err = fresh.load_params(&wrong).unwrap_err();
        assert!(err.to_string().contains("['layer1']['w']"), "{err}");
        let err = fresh.load_params(b"not a safetensors file").unwrap_err();
        assert!(err.to_string().contains("cannot be read"), "{err}");
        // Two tensors naming one argument (its dotted path and a suffix of it), with different
        // values: refused naming both, every time (one of them was held, which one changing
        // with the hash order the file's tensors were listed in), and nothing is held.
        let twice = safetensors(&[
            ("0.0.layer1.w", &[16, 4], &[1.0; 64]),
            ("layer1.w", &[16, 4], &[-1.0; 64]),
            ("layer0.b", &[16], &[0.0; 16]),
        ]);
        for _ in 0..8 {
            let err = fresh.load_params(&twice).unwrap_err().to_string();
            assert!(
                err.contains("the weights `0.0.layer1.w` and `layer1.w` both name argument"),
                "{err}"
            );
            assert_eq!(fresh.free_inputs().len(), 4, "a refused file holds nothing");
        }
    }

    #[test]
    fn weights_from_an_npz_file_work_as_from_safetensors_and_compressed_or_cut_ones_are_refused() {
        let client = pjrt_actors::Client::open().unwrap();
        let mut model = client.load_exported(&artifact("mlp")).unwrap();
        let npz = std::fs::read(data_dir().join("mlp.npz")).unwrap();
        assert_eq!(model.load_params(&npz).unwrap(), 3);
        let out = model.call(&[npy("mlp.input3.npy")]).unwrap();
        let want = crate::jax_lapack::values(&npy("mlp.output1.npy"));
        let got = crate::jax_lapack::values(&out[1]);
        assert!(
            got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5),
            "{got:?} against JAX's {want:?}"
        );
        let compressed = std::fs::read(data_dir().join("mlp_compressed.npz")).unwrap();
        let err = model.load_params(&compressed).unwrap_err();
        assert!(err.to_string().contains("np.savez_compressed"), "{err}");
        for n in (0..npz.len()).step_by(7) {
            let mut fresh = client.load_exported(&artifact("mlp")).unwrap();
            assert!(fresh.load_params(&npz[..n]).is_err(), "cut at {n}");
        }
    }

    /// Each artifact of tests/data/exported/wrong (wrong.py: one field of a good export replaced,
    /// written by JAX's serializer) and the error it must give; `None` for the two JAX runs.
    const WRONG_FIELDS: &[(&str, Option<&str>)] = &[
        ("in_tree", Some("its trees have 2 inputs")),
        ("in_avals_shape", Some("the module's parameters are")),
        ("in_avals_dtype", Some("the module's parameters are")),
        ("out_tree", Some("and 2 outputs, its avals 3 and 1")),
        ("out_avals", Some("the module's results are")),
        (
            "in_shardings_mesh",
            Some("input 0's mesh has 2 devices; the export is for 4"),
        ),
        ("in_shardings_axis", Some("is split over 3 dimensions")),
        (
            "out_shardings_count",
            Some("2 output shardings for 1 outputs"),
        ),
        (
            "nr_devices_more",
            Some("exported for 8 devices; this client has 4"),
        ),
        (
            "nr_devices_less",
            Some("the program says mhlo.num_partitions = 4"),
        ),
        ("platforms_other", Some("exported for [\"tpu\"]")),
        ("platforms_none", Some("exported for []")),
        (
            "platforms_extra",
            Some("the module's parameters are (s32[]"),
        ),
        ("ordered_effects", Some("has ordered effects")),
        ("module_garbage", Some("its module is not MLIR bytecode")),
        ("module_cut", Some("parse")),
        (
            "calling_convention_old",
            Some("calling convention version 8"),
        ),
        (
            "calling_convention_new",
            Some("calling convention version 11"),
        ),
        ("kept_out_of_range", Some("it keeps argument 5 of 3")),
        ("kept_wrong", Some("the module's parameters are")),
        ("kept_out_of_order", Some("not in increasing order")),
        ("uses_global_constants", Some("needs shape refinement")),
        ("ok_unordered_effects", None),
        ("ok_platform_check_disabled", None),
        ("version_12", None),
        (
            "version_13",
            Some("serialization version 13; this reader knows 2..=12"),
        ),
    ];

    #[test]
    fn every_field_of_an_artifact_wrong_in_turn_is_a_typed_error_naming_it() {
        let dir = data_dir().join("wrong");
        let listed: Value =
            serde_json::from_slice(&std::fs::read(dir.join("wrong.json")).unwrap()).unwrap();
        let names: Vec<&str> = (listed["cases"].as_array().unwrap().iter())
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            WRONG_FIELDS.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "the table covers wrong.json"
        );
        let client = pjrt_actors::Client::open().unwrap();
        let x: Vec<f32> = (0..16).map(|i| i as f32 / 8.0).collect();
        let mut wrong = Vec::new();
        for &(name, want) in WRONG_FIELDS {
            let bytes = std::fs::read(dir.join(format!("{name}.exported"))).unwrap();
            let loaded = client.load_exported(&bytes);
            match (want, loaded) {
                (Some(text), Err(e)) => {
                    let typed = matches!(
                        e,
                        pjrt_actors::Error::InvalidArgument(_)
                            | pjrt_actors::Error::Pjrt { .. }
                            | pjrt_actors::Error::StableHloTooNew { .. }
                    );
                    if !typed || !e.to_string().contains(text) {
                        wrong.push(format!("{name}: {e:?}"));
                    }
                }
                (Some(_), Ok(_)) => wrong.push(format!("{name}: loaded")),
                (None, Err(e)) => wrong.push(format!("{name}: {e}")),
                (None, Ok(mut model)) => {
                    // The MLP (relu(x @ w + b)) with w = 0 and b = 1: every output is 1.
                    let weights =
                        safetensors(&[("w", &[8, 4], &[0.0; 32]), ("b", &[4], &[1.0; 4])]);
                    assert_eq!(model.load_params(&weights).unwrap(), 2, "{name}");
                    let arg = pjrt_actors::host_data::HostArray {
                        dtype: ElementType::F32,
                        dims: vec![2, 8],
                        bytes: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    };
                    let out = model.call(&[arg]).unwrap();
                    assert_eq!(crate::jax_lapack::values(&out[0]), [1.0; 8], "{name}");
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        // The client still works after every refusal.
        assert!(client.load_exported(&artifact("mlp")).is_ok());
    }
}
