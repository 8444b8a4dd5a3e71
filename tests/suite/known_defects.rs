//! The known-defect guard (core/src/compile/known_defects.tsv) on the plugin under test: on the
//! build an entry names, a program using its op and dtype is refused, in text, in MLIR bytecode
//! and in JAX's portable artifacts, and allowed it computes wrong (the entry is real); on every
//! other plugin the same programs compile and compute right (its `right_on` holds).

mod cpu_plugin {
    use std::path::Path;

    use pjrt_actors::known_defects::{KnownDefect, known_defects, plugin_sha256};
    use pjrt_actors::{Client, CompileOptions, ElementType, Error, HostArray, HostBuffer};

    const N: usize = 400;
    /// scripts/bootstrap's default plugin (lammps-jax-pjrt-cpu 0.11.2).
    const DEFAULT_PLUGIN_SHA256: &str =
        "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2";

    /// The ramp over [-4, 4) every program here gets: 1-D and 400 long, so XLA:CPU's vector
    /// loops run it (a 20x20 array of f32 reaches other code).
    fn ramp() -> Vec<f64> {
        (0..N).map(|i| i as f64 / 50.0 - 4.0).collect()
    }

    fn data(name: &str) -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/known_defects")
                .join(name),
        )
        .unwrap()
    }

    /// The entries for the plugin under test: its versions and its file's sha256.
    fn entries_here(client: &Client) -> Vec<&'static KnownDefect> {
        let (major, minor) = client.plugin_api_version();
        let sha = plugin_sha256(client.plugin_path()).unwrap();
        let stablehlo = client.plugin_stablehlo_version();
        (known_defects().iter())
            .filter(|d| {
                d.platform == client.platform()
                    && d.pjrt_api == format!("{major}.{minor}")
                    && d.stablehlo == stablehlo
                    && (d.plugin_sha256.is_empty() || d.plugin_sha256 == sha)
            })
            .collect()
    }

    /// A program running an entry's op on its dtype over one 400-long input, as the entry's
    /// case does; an entry this test cannot write a program for fails it (each entry needs one).
    fn program_for(d: &KnownDefect) -> String {
        let t = format!("tensor<{N}x{}>", d.dtype);
        let body = match d.op.as_str() {
            "chlo.atan" => format!("%0 = chlo.atan %arg0 : {t} -> {t}"),
            // JAX's jnp.arctan: atan2 by a constant 1.
            "stablehlo.atan2" => format!(
                "%one = stablehlo.constant dense<1.0> : {t}\n    %0 = stablehlo.atan2 %arg0, %one : {t}"
            ),
            other => panic!("no program for the entry's op {other}: add one here"),
        };
        format!(
            "module @m {{\n  func.func public @main(%arg0: {t}) -> {t} {{\n    {body}\n    return %0 : {t}\n  }}\n}}\n"
        )
    }

    /// Runs a one-input program on the ramp; how many of its answers differ from f64's atan by
    /// more than the dtype's tolerance.
    fn wrong_answers(
        client: &Client,
        code: &[u8],
        dtype: &str,
        options: &CompileOptions,
    ) -> pjrt_actors::Result<usize> {
        let exe = client.compile_and_load(code, options)?;
        let x = ramp();
        let (bytes, ty, tol): (Vec<u8>, _, f64) = match dtype {
            "f32" => (
                x.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect(),
                ElementType::F32,
                1e-6,
            ),
            _ => (
                x.iter().flat_map(|v| v.to_le_bytes()).collect(),
                ElementType::F64,
                1e-14,
            ),
        };
        let device = &client.devices()[0];
        let a = client.buffer_from_host(HostBuffer::Copy(&bytes), ty, &[N as i64], device, None)?;
        let out = exe.execute(&[&a])?;
        let got: Vec<f64> = match ty {
            ElementType::F32 => out[0].to_vec::<f32>()?.into_iter().map(f64::from).collect(),
            _ => out[0].to_vec::<f64>()?,
        };
        Ok(got
            .iter()
            .zip(&x)
            .filter(|(g, x)| (**g - x.atan()).abs() > tol * 2.0)
            .count())
    }

    fn allowed() -> CompileOptions {
        CompileOptions {
            allow_known_defects: true,
            ..Default::default()
        }
    }

    #[test]
    fn every_entry_is_refused_on_its_build_and_computed_right_elsewhere() {
        let client = Client::open().unwrap();
        let here = entries_here(&client);
        // The seed: the default plugin's atan on f64 (StableHLO's own case, every value wrong).
        if plugin_sha256(client.plugin_path()).as_deref() == Some(DEFAULT_PLUGIN_SHA256) {
            assert!(
                here.iter().any(|d| d.op == "chlo.atan" && d.dtype == "f64"),
                "{here:?}"
            );
        }
        for d in known_defects() {
            let code = program_for(d);
            let defective = here.contains(&d);
            match wrong_answers(
                &client,
                code.as_bytes(),
                &d.dtype,
                &CompileOptions::default(),
            ) {
                Err(Error::KnownDefect {
                    op, dtype, case, ..
                }) if defective => {
                    assert_eq!(
                        (op.as_str(), dtype.as_str(), case.as_str()),
                        (d.op.as_str(), d.dtype.as_str(), d.case.as_str())
                    );
                    // Allowed, it runs, and its answers are wrong: the entry is no false alarm.
                    let wrong =
                        wrong_answers(&client, code.as_bytes(), &d.dtype, &allowed()).unwrap();
                    assert!(wrong > 0, "{d:?}: allowed, every answer was right");
                }
                Ok(wrong) if !defective => assert_eq!(wrong, 0, "{d:?} on this plugin"),
                other => panic!("{d:?}, defective here {defective}: {other:?}"),
            }
        }
    }

    #[test]
    fn bytecode_and_jaxs_portable_artifacts_are_read_for_the_guard() {
        let client = Client::open().unwrap();
        let defective = |op: &str, dtype: &str| {
            entries_here(&client)
                .iter()
                .any(|d| d.op == op && d.dtype == dtype)
        };
        // Plain MLIR bytecode (jaxlib's writer) and the same programs' text.
        for dtype in ["f64", "f32"] {
            for file in [format!("atan_{dtype}.mlirbc"), format!("atan_{dtype}.mlir")] {
                let result =
                    wrong_answers(&client, &data(&file), dtype, &CompileOptions::default());
                match result {
                    Err(Error::KnownDefect { op, .. }) if defective("chlo.atan", dtype) => {
                        assert_eq!(op, "chlo.atan")
                    }
                    Ok(0) if !defective("chlo.atan", dtype) => {}
                    other => panic!("{file}: {other:?}"),
                }
            }
        }
        // jnp.arctan as jax 0.10.2 exports it: vhlo.atan2_v1 by a constant 1.
        for dtype in ["f32", "f64"] {
            let file = format!("arctan_{dtype}.exported");
            let x = ramp();
            let input = match dtype {
                "f32" => HostArray::from_slice(
                    &x.iter().map(|v| *v as f32).collect::<Vec<_>>(),
                    &[N as i64],
                ),
                _ => HostArray::from_slice(&x, &[N as i64]),
            };
            match client.load_exported(&data(&file)) {
                Err(Error::KnownDefect { op, dtype: t, .. }) => {
                    assert!(
                        defective("stablehlo.atan2", dtype),
                        "{file}: refused on a plugin without the entry"
                    );
                    assert_eq!((op.as_str(), t.as_str()), ("stablehlo.atan2", dtype));
                }
                Ok(model) => {
                    assert!(
                        !defective("stablehlo.atan2", dtype),
                        "{file}: compiled on the defective build"
                    );
                    let out = model.call(&[input]).unwrap();
                    let got: Vec<f64> = match dtype {
                        "f32" => out[0]
                            .bytes
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                            .collect(),
                        _ => out[0]
                            .bytes
                            .chunks_exact(8)
                            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                            .collect(),
                    };
                    let tol = if dtype == "f32" { 2e-6 } else { 2e-14 };
                    let wrong = got
                        .iter()
                        .zip(&x)
                        .filter(|(g, x)| (**g - x.atan()).abs() > tol)
                        .count();
                    assert_eq!(wrong, 0, "{file}");
                }
                Err(e) => panic!("{file}: {e}"),
            }
        }
    }

    /// Ahead-of-time compiles (for the client's own topology) run the same check.
    #[test]
    fn an_ahead_of_time_compile_is_checked_too() {
        let client = Client::open().unwrap();
        let here = entries_here(&client);
        let topology = client.topology().unwrap();
        for d in known_defects() {
            let code = program_for(d);
            let compiled =
                client.compile_for_topology(code.as_bytes(), &CompileOptions::default(), &topology);
            match compiled {
                Err(Error::KnownDefect { op, dtype, .. }) if here.contains(&d) => {
                    assert_eq!(
                        (op.as_str(), dtype.as_str()),
                        (d.op.as_str(), d.dtype.as_str())
                    )
                }
                Ok(_) if !here.contains(&d) => {}
                other => panic!("{d:?}: {:?}", other.map(|_| ())),
            }
            assert!(
                (client.compile_for_topology(code.as_bytes(), &allowed(), &topology)).is_ok(),
                "{d:?}: allowed"
            );
        }
    }

    #[test]
    fn a_client_that_allows_known_defects_compiles_them() {
        let client = Client::builder().allow_known_defects(true).open().unwrap();
        for d in known_defects() {
            let code = program_for(d);
            assert!(
                wrong_answers(
                    &client,
                    code.as_bytes(),
                    &d.dtype,
                    &CompileOptions::default()
                )
                .is_ok(),
                "{d:?}"
            );
        }
    }

    /// One compile's allowance is its own: the executable it made is not found in the memory
    /// cache by a later compile of the same program that is not allowed (a memory hit skips
    /// the checks a miss runs).
    #[test]
    fn an_allowed_compile_lets_no_later_compile_past_the_guard() {
        let client = Client::open().unwrap();
        let here = entries_here(&client);
        for d in known_defects() {
            let code = program_for(d);
            client
                .compile_and_load(code.as_bytes(), &allowed())
                .unwrap();
            let compiles = client.compile_cache_stats().compiles;
            let again = client.compile_and_load(code.as_bytes(), &CompileOptions::default());
            match again {
                Err(Error::KnownDefect { op, .. }) if here.contains(&d) => assert_eq!(op, d.op),
                Ok(_) if !here.contains(&d) => {}
                other => panic!("{d:?}: {:?}", other.map(|_| ())),
            }
            // Allowed again, it is the same executable: found, not compiled a second time.
            client
                .compile_and_load(code.as_bytes(), &allowed())
                .unwrap();
            assert_eq!(client.compile_cache_stats().compiles, compiles, "{d:?}");
        }
    }
}
