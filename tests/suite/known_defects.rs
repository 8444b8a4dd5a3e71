//! The known-defect table (actors/src/compile/known_defects.tsv) on the plugin under test: on the
//! build an entry names, a program using its op gets the entry's fix and computes right, however
//! its types are spelled, in text, in MLIR bytecode and in JAX's portable artifacts; compiled as
//! written (known defects allowed) it computes wrong (the entry is real). On every other plugin
//! the same programs compute right with nothing added (its `right_on` holds).

mod cpu_plugin {
    use std::path::Path;

    use pjrt_actors::known_defects::{KnownDefect, known_defects, plugin_sha256};
    use pjrt_actors::{Client, CompileOptions, ElementType, HostArray, HostBuffer, XlaOption};

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
        wrong_from(client, &exe, dtype)
    }

    fn wrong_from(
        client: &Client,
        exe: &pjrt_actors::LoadedExecutable,
        dtype: &str,
    ) -> pjrt_actors::Result<usize> {
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
        assert_eq!(got.len(), x.len());
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

    /// `xla_cpu_prefer_vector_width=128`, the default plugin's fix for its atan.
    fn with_fix() -> CompileOptions {
        CompileOptions {
            xla_options: vec![(
                "xla_cpu_prefer_vector_width".to_string(),
                XlaOption::Int(128),
            )],
            ..Default::default()
        }
    }

    #[test]
    fn every_entry_is_fixed_on_its_build_and_computed_right_everywhere() {
        let client = Client::open().unwrap();
        let here = entries_here(&client);
        // The seed: the default plugin's atan on f64 (StableHLO's own case, every value wrong).
        if plugin_sha256(client.plugin_path()).as_deref() == Some(DEFAULT_PLUGIN_SHA256) {
            assert!(
                here.iter()
                    .any(|d| d.op == "chlo.atan" && d.dtype == "f64" && !d.fix.is_empty()),
                "{here:?}"
            );
        }
        for d in known_defects() {
            let code = program_for(d);
            let default = CompileOptions::default();
            let wrong = wrong_answers(&client, code.as_bytes(), &d.dtype, &default).unwrap();
            assert_eq!(wrong, 0, "{d:?}: compiled as users compile it");
            // As written (allowed), it is wrong where the entry says: no false alarm.
            let as_written = wrong_answers(&client, code.as_bytes(), &d.dtype, &allowed()).unwrap();
            match here.contains(&d) {
                true => assert!(as_written > 0, "{d:?}: as written, every answer was right"),
                false => assert_eq!(as_written, 0, "{d:?} on this plugin"),
            }
        }
    }

    /// The fix is exactly the entry's options, and only a program that runs the op gets them:
    /// compiled with the option given by hand, the fixed program is a memory-cache hit (the
    /// same key), while a program without the op compiles anew (its default compile had none).
    #[test]
    fn only_a_program_that_runs_the_op_gets_the_fix() {
        let client = Client::open().unwrap();
        let fixed_here = entries_here(&client).iter().any(|d| !d.fix.is_empty());
        let t = format!("tensor<{N}xf64>");
        let atan = format!(
            "func.func public @main(%arg0: {t}) -> {t} {{\n  %0 = chlo.atan %arg0 : {t} -> {t}\n  return %0 : {t}\n}}\n"
        );
        let tanh = atan.replace(
            &format!("chlo.atan %arg0 : {t} -> {t}"),
            &format!("stablehlo.tanh %arg0 : {t}"),
        );
        for (code, uses_atan) in [(&atan, true), (&tanh, false)] {
            client
                .compile_and_load(code.as_bytes(), &CompileOptions::default())
                .unwrap();
            let before = client.compile_cache_stats().compiles;
            client
                .compile_and_load(code.as_bytes(), &with_fix())
                .unwrap();
            let compiled_again = client.compile_cache_stats().compiles > before;
            assert_eq!(
                compiled_again,
                !(uses_atan && fixed_here),
                "uses atan {uses_atan}, fixed here {fixed_here}"
            );
        }
    }

    /// However the program spells its types (aliases, spaces, a type over two lines, generic
    /// form), the op is found and fixed. Before, each of these ran unrefused and wrong.
    #[test]
    fn any_spelling_of_the_types_is_fixed() {
        let client = Client::open().unwrap();
        let defective = entries_here(&client).iter().any(|d| d.op == "chlo.atan");
        for dtype in ["f64", "f32"] {
            let body = |sig: &str, op: &str| {
                format!(
                    "func.func public @main(%arg0: {sig}) -> {sig} {{\n{op}\n  return %0 : {sig}\n}}\n"
                )
            };
            let programs = [
                format!(
                    "!t = tensor<{N}x{dtype}>\n{}",
                    body("!t", "  %0 = chlo.atan %arg0 : !t -> !t")
                ),
                format!(
                    "!e = {dtype}\n!t = tensor<{N}x!e>\n{}",
                    body("!t", "  %0 = chlo.atan %arg0 : !t -> !t")
                ),
                body(
                    &format!("tensor<{N} x {dtype}>"),
                    &format!(
                        "  %0 = chlo.atan %arg0 : tensor<{N} x {dtype}> -> tensor<{N} x {dtype}>"
                    ),
                ),
                body(
                    &format!("tensor<{N}x{dtype}>"),
                    &format!(
                        "  %0 = chlo.atan %arg0 : tensor<{N}x{dtype}>\n      -> tensor<{N}x\n      {dtype}>"
                    ),
                ),
                body(
                    &format!("tensor<{N}x{dtype}>"),
                    &format!(
                        "  %0 = \"chlo.atan\"(%arg0) : (tensor<{N}x{dtype}>) -> tensor<{N}x{dtype}>"
                    ),
                ),
            ];
            for code in &programs {
                let wrong =
                    wrong_answers(&client, code.as_bytes(), dtype, &CompileOptions::default());
                assert_eq!(wrong.unwrap(), 0, "{code}");
                if defective {
                    let as_written = wrong_answers(&client, code.as_bytes(), dtype, &allowed());
                    assert!(as_written.unwrap() > 0, "as written: {code}");
                }
            }
        }
    }

    /// `conformance`'s own atan2 cases (scripts/conformance-own-cases): a divisor cycling
    /// through 1.5..-1.5, and JAX's constant 1 (which XLA rewrites to the defective atan), both
    /// dtypes, compiled as users compile them; as written, the constant 1 is wrong where an
    /// entry says.
    #[test]
    fn the_own_cases_atan2_compute_right() {
        let client = Client::open().unwrap();
        let defective = |dtype: &str| {
            (entries_here(&client).iter()).any(|d| d.op == "stablehlo.atan2" && d.dtype == dtype)
        };
        let x = ramp();
        let cycling: Vec<f64> = (0..N).map(|i| 1.5 - (i % 7) as f64 / 2.0).collect();
        let device = &client.devices()[0];
        let upload = |v: &[f64], dtype: &str| {
            let (bytes, ty): (Vec<u8>, _) = match dtype {
                "f32" => (
                    v.iter().flat_map(|e| (*e as f32).to_le_bytes()).collect(),
                    ElementType::F32,
                ),
                _ => (
                    v.iter().flat_map(|e| e.to_le_bytes()).collect(),
                    ElementType::F64,
                ),
            };
            let data = HostBuffer::Copy(&bytes);
            (client.buffer_from_host(data, ty, &[N as i64], device, None)).unwrap()
        };
        for dtype in ["f32", "f64"] {
            let t = format!("tensor<{N}x{dtype}>");
            let by_divisor = format!(
                "func.func public @main(%a: {t}, %b: {t}) -> {t} {{\n  %0 = stablehlo.atan2 %a, %b : {t}\n  return %0 : {t}\n}}\n"
            );
            let by_one = format!(
                "func.func public @main(%a: {t}) -> {t} {{\n  %b = stablehlo.constant dense<1.0> : {t}\n  %0 = stablehlo.atan2 %a, %b : {t}\n  return %0 : {t}\n}}\n"
            );
            let ones = vec![1.0; N];
            for (code, divisor, passed) in [(&by_divisor, &cycling, 2), (&by_one, &ones, 1)] {
                for options in [CompileOptions::default(), allowed()] {
                    let exe = client.compile_and_load(code.as_bytes(), &options).unwrap();
                    let args = [upload(&x, dtype), upload(divisor, dtype)];
                    let out = exe.execute(&args.iter().take(passed).collect::<Vec<_>>());
                    let got: Vec<f64> = match dtype {
                        "f32" => (out.unwrap()[0].to_vec::<f32>().unwrap().into_iter())
                            .map(f64::from)
                            .collect(),
                        _ => out.unwrap()[0].to_vec::<f64>().unwrap(),
                    };
                    assert_eq!(got.len(), N);
                    let tol = if dtype == "f32" { 2e-6 } else { 2e-14 };
                    let wrong = (got.iter().zip(x.iter().zip(divisor.iter())))
                        .filter(|(g, (x, d))| (**g - x.atan2(**d)).abs() > tol)
                        .count();
                    let expect_wrong =
                        options.allow_known_defects && passed == 1 && defective(dtype);
                    assert_eq!(wrong > 0, expect_wrong, "{dtype} {code}");
                }
            }
        }
    }

    #[test]
    fn bytecode_and_jaxs_portable_artifacts_are_fixed() {
        let client = Client::open().unwrap();
        let defective = |op: &str, dtype: &str| {
            entries_here(&client)
                .iter()
                .any(|d| d.op == op && d.dtype == dtype)
        };
        // Plain MLIR bytecode (jaxlib's writer) and the same programs' text.
        for dtype in ["f64", "f32"] {
            for file in [format!("atan_{dtype}.mlirbc"), format!("atan_{dtype}.mlir")] {
                let fixed = wrong_answers(&client, &data(&file), dtype, &CompileOptions::default());
                assert_eq!(fixed.unwrap(), 0, "{file}");
                let as_written = wrong_answers(&client, &data(&file), dtype, &allowed()).unwrap();
                assert_eq!(as_written > 0, defective("chlo.atan", dtype), "{file}");
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
            let model = client.load_exported(&data(&file)).unwrap();
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
            assert_eq!(got.len(), x.len(), "{file}");
            let tol = if dtype == "f32" { 2e-6 } else { 2e-14 };
            let wrong = got
                .iter()
                .zip(&x)
                .filter(|(g, x)| (**g - x.atan()).abs() > tol)
                .count();
            assert_eq!(wrong, 0, "{file}");
        }
    }

    /// Ahead-of-time compiles (for the client's own topology) get the same fix.
    #[test]
    fn an_ahead_of_time_compile_is_fixed_too() {
        let client = Client::open().unwrap();
        let topology = client.topology().unwrap();
        for d in known_defects() {
            let code = program_for(d);
            let compiled = client
                .compile_for_topology(code.as_bytes(), &CompileOptions::default(), &topology)
                .unwrap();
            let exe = compiled.load(&client).unwrap();
            assert_eq!(wrong_from(&client, &exe, &d.dtype).unwrap(), 0, "{d:?}");
        }
    }

    #[test]
    fn a_client_that_allows_known_defects_compiles_them_as_written() {
        let client = Client::builder().allow_known_defects(true).open().unwrap();
        let here = entries_here(&client);
        for d in known_defects() {
            let code = program_for(d);
            let wrong = wrong_answers(
                &client,
                code.as_bytes(),
                &d.dtype,
                &CompileOptions::default(),
            )
            .unwrap();
            assert_eq!(wrong > 0, here.contains(&d), "{d:?}");
        }
    }

    /// One compile's allowance is its own: the executable it made (as written) is not what a
    /// later compile of the same program that is not allowed gets (a memory hit skips every
    /// check a miss runs): that one is fixed.
    #[test]
    fn an_allowed_compile_lets_no_later_compile_past_the_fix() {
        let client = Client::open().unwrap();
        for d in known_defects() {
            let code = program_for(d);
            client
                .compile_and_load(code.as_bytes(), &allowed())
                .unwrap();
            let again = wrong_answers(
                &client,
                code.as_bytes(),
                &d.dtype,
                &CompileOptions::default(),
            );
            assert_eq!(again.unwrap(), 0, "{d:?}");
            // Allowed again, it is the same executable: found, not compiled a second time.
            let compiles = client.compile_cache_stats().compiles;
            client
                .compile_and_load(code.as_bytes(), &allowed())
                .unwrap();
            assert_eq!(client.compile_cache_stats().compiles, compiles, "{d:?}");
        }
    }
}
