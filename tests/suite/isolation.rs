//! Compile crash isolation against the real plugin: programs that crash the compiler (a failed
//! CHECK) kill a compile worker process, come back as `Error::CompilerCrashed`, and leave the
//! client compiling and running everything else (issue 13, A3).

use pjrt_actors::{Client, CompileOptions, Error};

use crate::callbacks::pure_map;
use crate::common::{add_f32x4, check_distinct, distinct_module, nth_device};

/// The worker cargo built for this test binary, or, where this binary was carried to another
/// machine (the GPU check), one found the library's way: `PJRT_ACTORS_COMPILE_WORKER`, or
/// beside this executable.
pub fn worker() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_BIN_EXE_pjrt-actors-compile-worker"));
    if built.is_file() {
        return built;
    }
    pjrt_actors_core::compile::worker::find_worker().expect("a compile worker binary")
}

/// Fails a CHECK in XLA's compiler ("Expected a tuple shape"): SIGABRT in-process.
const TOP_K: &str = "module @crashes { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.custom_call @TopK(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32> } }";

fn isolated() -> Client {
    Client::builder()
        .compile_in_worker(worker())
        .compile_threads(2)
        .memory_cache_entries(0)
        .open()
        .unwrap()
}

#[test]
fn a_program_that_crashes_the_compiler_kills_a_worker_not_the_client() {
    let client = isolated();
    let options = CompileOptions::default();
    for round in 0..2 {
        match client.compile_and_load(TOP_K, &options) {
            Err(Error::CompilerCrashed { signal, how, .. }) => {
                assert_eq!(signal, Some(6), "round {round}: {how}");
            }
            other => panic!("round {round}: {other:?}"),
        }
        // The client, and a fresh worker, go on.
        let (program, dims) = distinct_module(40 + round, 1);
        let exe = client.compile_and_load(&program, &options).unwrap();
        check_distinct(&exe, &client.devices()[0], &dims, 1);
    }
}

#[test]
fn isolated_compiles_give_the_same_results_errors_and_callbacks() {
    let client = isolated();
    let options = CompileOptions::default();
    let exe = client.compile_and_load(add_f32x4(), &options).unwrap();
    let x = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    assert_eq!(
        exe.execute(&[&x, &x]).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![2., 4., 6., 8.]
    );
    // A program the compiler refuses is the plugin's typed error, not a crash.
    let bad = client.compile_and_load(
        "module { func.func public @main() { %0 = stablehlo.frobnicate } }",
        &options,
    );
    match bad {
        Err(e @ Error::Pjrt { .. }) => {
            // The plugin's code and words, once: not the worker's whole error inside ours.
            let here = Client::open().unwrap().compile_and_load(
                "module { func.func public @main() { %0 = stablehlo.frobnicate } }",
                &options,
            );
            assert_eq!(e.pjrt_code(), here.unwrap_err().pjrt_code(), "{e}");
            assert_eq!(e.to_string().matches("failed with").count(), 1, "{e}");
        }
        other => panic!("{other:?}"),
    }
    // Host callbacks compile in the worker and run here.
    let square = pure_map("square", 4, |v| v * v);
    let program = format!(
        "module @sq {{ func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{ {} \n return %r : tensor<4xf32> }} }}",
        square.call_text("%r", &["%x"])
    );
    let exe = client
        .compile_request(&program)
        .callbacks(&[square])
        .load()
        .unwrap();
    assert_eq!(
        exe.execute(&[&x]).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![1., 4., 9., 16.]
    );
    // Replicated programs keep their device assignment through the worker.
    let replicated = client
        .compile_and_load(
            add_f32x4(),
            &CompileOptions {
                devices: Some(vec![nth_device(&client, 2).id()]),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(replicated.addressable_devices()[0], nth_device(&client, 2));
}

#[test]
fn a_missing_worker_binary_is_refused_at_open() {
    let err = Client::builder()
        .compile_in_worker("/nonexistent/worker")
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidOption { ref name, .. } if name == "compile_worker"),
        "{err}"
    );
}
