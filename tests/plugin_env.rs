//! Discovery honours `PJRT_PLUGIN_PATH` first and does not fall back when it names nothing;
//! `PJRT_ACTORS_LAPACK` names the LAPACK library, and a bad one is reported when a program
//! needs it; GPU settings from the environment do not stop a CPU plugin that lacks them from
//! opening. Alone in its binary: it changes the process environment.

use pjrt_actors::lapack::LAPACK_LIBRARY_ENV;
use pjrt_actors::{Client, CompileOptions, Error, NamedValue, PLUGIN_PATH_ENV, PluginError};

#[test]
fn the_env_vars_are_used_and_bad_ones_are_reported() {
    // SAFETY of set_var: this binary runs this one test, on one thread. The LAPACK library is
    // looked up once per process, so this comes before the first client.
    unsafe { std::env::set_var(LAPACK_LIBRARY_ENV, "/nonexistent/liblapack.so.3") };
    let good = Client::open().unwrap().plugin_path().to_owned();
    unsafe { std::env::set_var(PLUGIN_PATH_ENV, "/nonexistent/from-env.so") };
    let err = Client::open().unwrap_err();
    assert!(
        matches!(err, Error::Plugin(PluginError::NotFound { ref path }) if path.ends_with("from-env.so")),
        "{err}"
    );
    unsafe { std::env::set_var(PLUGIN_PATH_ENV, &good) };
    let client = Client::open().unwrap();
    assert_eq!(client.plugin_path(), good);
    unsafe { std::env::remove_var(PLUGIN_PATH_ENV) };

    // Without a LAPACK, a program that needs one fails to compile, saying why; others compile.
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jax_lapack");
    let program = std::fs::read(data.join("solve.f64.mlirbc")).unwrap();
    let err = client
        .compile_and_load(&program, &CompileOptions::default())
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("lapack_dgetrf_ffi") && text.contains("/nonexistent/liblapack.so.3"),
        "{text}"
    );
    let add = "module @add { func.func public @main(%a: tensor<f32>) -> tensor<f32> { %0 = stablehlo.add %a, %a : tensor<f32>\n return %0 : tensor<f32> } }";
    client
        .compile_and_load(add, &CompileOptions::default())
        .unwrap();

    // JAX's GPU settings in the environment: a plugin without those options (the 0.115 CPU
    // plugin refuses names it does not know) opens without them, as JAX applies them only to
    // backends that have them; the same option given by the caller is still the plugin's error.
    unsafe { std::env::set_var(PLUGIN_PATH_ENV, &good) };
    unsafe { std::env::set_var("XLA_PYTHON_CLIENT_PREALLOCATE", "false") };
    unsafe { std::env::set_var("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5") };
    let opened = Client::open().unwrap();
    // The 0.115 CPU client refuses options it does not know; the 0.106 and 0.81 ones ignore them.
    let new_abi = opened.plugin_api_version() >= (0, 115);
    drop(opened);
    let explicit = Client::builder()
        .option("preallocate", NamedValue::Bool(false))
        .open();
    match (new_abi, explicit) {
        (true, Err(e)) => assert!(e.to_string().contains("preallocate"), "{e}"),
        (true, Ok(_)) => panic!("the 0.115 CPU plugin took an option it does not have"),
        (false, opened) => drop(opened.unwrap()),
    }
}
