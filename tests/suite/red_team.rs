//! The red-team pass's inputs (issue 13), as cases of the reliability table: each must be a
//! typed error (or work) and leave the client working with nothing leaked. Runs in
//! `reliability::every_bad_input_is_a_typed_error_and_leaves_nothing_behind`.

use pjrt_actors::{CallbackKind, CompileOptions, ElementType, Error, HostCallback};

use crate::common::cache_entries;
use crate::reliability::{Case, Expect, Fixture, compile, f32x4};

/// Runs `main(x) = cb(x)` on the fixture's good array, with `extra` spliced into the custom
/// call's attributes, and returns the result.
fn through_callback(f: &Fixture, cb: HostCallback, extra: &str) -> Result<Vec<f32>, Error> {
    let call = cb.call_text("%r", &["%x"]).replacen(
        "api_version = 4 : i32, ",
        &format!("api_version = 4 : i32, {extra}"),
        1,
    );
    let program = format!(
        "module @cb {{ func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{ {call} \n return %r : tensor<4xf32> }} }}"
    );
    let exe = f
        .client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[cb])
        .load()?;
    exe.execute(&[&f.good])?[0].to_vec::<f32>()
}

fn nested_modules(depth: usize) -> String {
    format!("{}{}", "module {".repeat(depth), "}".repeat(depth))
}

fn refused(e: &Error, words: &str) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains(words))
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        (
            // Results held whatever the allocator left there, pointer-like values included.
            "a callback that writes no result returns zeros",
            |f| {
                let lazy = HostCallback::new(
                    "lazy",
                    CallbackKind::Pure,
                    vec![f32x4()],
                    vec![f32x4()],
                    |_, _| Ok(()),
                );
                match through_callback(f, lazy.unwrap(), "")? {
                    zeros if zeros == [0.0; 4] => Ok(()),
                    other => Err(Error::InvalidArgument(format!("results were {other:?}"))),
                }
            },
            Expect::Valid,
        ),
        (
            // The closure got `&[u8]` and `&mut [u8]` over the same bytes: undefined behaviour.
            "a callback call whose result aliases its operand is refused",
            |f| {
                let writes = HostCallback::new(
                    "writes",
                    CallbackKind::Pure,
                    vec![f32x4()],
                    vec![f32x4()],
                    |_, outs| {
                        outs[0].data.fill(0xAB);
                        Ok(())
                    },
                );
                let alias = "output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>], ";
                through_callback(f, writes.unwrap(), alias).map(|_| ())
            },
            Expect::Fails(|e| e.to_string().contains("shares memory with operand 0")),
        ),
        (
            // `convert` to i32 gave [2, -1, 7, 1] and `not` gave all false.
            "pred bytes other than 0 and 1",
            |f| {
                let d = &f.client.devices()[0];
                let data = pjrt_actors::HostBuffer::Copy(&[2, 255, 7, 1]);
                f.client
                    .buffer_from_host(data, ElementType::Pred, &[4], d, None)
                    .map(|_| ())
            },
            Expect::Fails(|e| refused(e, "byte 0 is 2")),
        ),
        (
            "canonical pred bytes",
            |f| {
                let d = &f.client.devices()[0];
                let data = pjrt_actors::HostBuffer::Copy(&[0, 1, 1, 0]);
                let a = f
                    .client
                    .buffer_from_host(data, ElementType::Pred, &[4], d, None)?;
                match a.to_vec::<bool>()? == [false, true, true, false] {
                    true => Ok(()),
                    false => Err(Error::InvalidArgument("read back differently".into())),
                }
            },
            Expect::Valid,
        ),
        (
            // It compiled, then its execute waited forever for data nobody sends.
            "a program that reads infeed",
            |f| {
                compile(f, br#"module @feeds { func.func public @main() -> tensor<4xf32> {
  %t = stablehlo.create_token : !stablehlo.token
  %0:2 = "stablehlo.infeed"(%t) {infeed_config = "", layout = [[0]]} : (!stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
  return %0#0 : tensor<4xf32> } }"#)
            },
            Expect::Fails(|e| {
                matches!(
                    e,
                    Error::Unsupported {
                        what: "infeed and outfeed",
                        ..
                    }
                )
            }),
        ),
        (
            "a program that writes outfeed",
            |f| {
                compile(f, br#"module @feeds { func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %t = stablehlo.create_token : !stablehlo.token
  %0 = "stablehlo.outfeed"(%x, %t) {outfeed_config = ""} : (tensor<4xf32>, !stablehlo.token) -> !stablehlo.token
  return %x : tensor<4xf32> } }"#)
            },
            Expect::Fails(|e| {
                matches!(
                    e,
                    Error::Unsupported {
                        what: "infeed and outfeed",
                        ..
                    }
                )
            }),
        ),
        (
            // A 700-deep module's diagnostic echoed the whole module: a 1 MB error.
            "a plugin diagnostic is cut to a few kilobytes",
            |f| {
                compile(
                    f,
                    format!("{}{}", "module {".repeat(700), "}".repeat(700)).as_bytes(),
                )
            },
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. }) && e.to_string().len() < 5000),
        ),
        (
            "a compile error names whose program failed",
            |f| {
                compile(
                    f,
                    b"module { func.func public @main() { %0 = stablehlo.frobnicate } }",
                )
            },
            Expect::Fails(|e| e.to_string().contains("reliability.rs:")),
        ),
        (
            // It opened, then every compile for device 2,048 failed as "multiprocess".
            "more CPU devices than one process can compile for",
            |_| {
                pjrt_actors::Client::builder()
                    .cpu_device_count(2049)
                    .open()
                    .map(|_| ())
            },
            Expect::Fails(
                |e| matches!(e, Error::InvalidOption { reason, .. } if reason.contains("between 1 and 2048")),
            ),
        ),
        (
            // It was called a tuple.
            "a token parameter is named a token",
            |f| {
                compile(f, b"module @tok { func.func public @main(%t: !stablehlo.token) -> !stablehlo.token { return %t : !stablehlo.token } }")
            },
            Expect::Fails(|e| e.to_string().contains("parameter 0 is a token")),
        ),
        (
            // 1,000 levels overflowed the compile thread's default stack and killed the process.
            "modules nested 1,000 deep reach the plugin and fail there, typed",
            |f| compile(f, nested_modules(1000).as_bytes()),
            Expect::Fails(|e| matches!(e, Error::Pjrt { .. })),
        ),
        (
            "modules nested past the limit are refused before the plugin",
            |f| compile(f, nested_modules(5000).as_bytes()),
            Expect::Fails(|e| refused(e, "levels deep")),
        ),
        (
            "an attribute array nested 3,000 deep",
            |f| {
                let attr = format!("{}{}", "[".repeat(3000), "]".repeat(3000));
                compile(
                    f,
                    format!("module attributes {{x = {attr}}} {{}}").as_bytes(),
                )
            },
            Expect::Fails(|e| refused(e, "levels deep")),
        ),
        (
            // XLA's MakeShape threw a C++ exception through the C API: Rust aborted.
            "a parameter whose byte size overflows 63 bits",
            |f| {
                compile(f, b"module { func.func public @main(%a: tensor<4611686018427387904x4xf32>) -> tensor<4611686018427387904x4xf32> { return %a : tensor<4611686018427387904x4xf32> } }")
            },
            Expect::Fails(|e| refused(e, "too large")),
        ),
    ]
}

fn cache_client(dir: &std::path::Path) -> pjrt_actors::Client {
    pjrt_actors::Client::builder()
        .compile_cache_dir(dir)
        .memory_cache_entries(0)
        .open()
        .unwrap()
}

#[test]
fn a_cache_entry_holding_another_programs_executable_is_refused() {
    use crate::common::{check_distinct, distinct_module};
    let dir = crate::common::scratch_dir("swapped-entry");
    let _ = std::fs::remove_dir_all(&dir);
    let options = pjrt_actors::CompileOptions::default();
    let ((m1, dims1), (m2, _)) = (distinct_module(1, 1), distinct_module(2, 1));
    let writer = cache_client(&dir);
    writer.compile_and_load(&m1, &options).unwrap();
    let [m1_file] = cache_entries(&dir).try_into().unwrap();
    writer.compile_and_load(&m2, &options).unwrap();
    let m2_file = cache_entries(&dir)
        .into_iter()
        .find(|p| *p != m1_file)
        .unwrap();
    drop(writer);
    // m2's entry copied over m1's: asking for m1 must not run m2.
    std::fs::copy(&m2_file, &m1_file).unwrap();
    let reader = cache_client(&dir);
    let exe = reader.compile_and_load(&m1, &options).unwrap();
    check_distinct(&exe, &reader.devices()[0], &dims1, 1);
    let stats = reader.compile_cache_stats();
    assert_eq!(
        (stats.corrupt_entries, stats.compiles, stats.disk_hits),
        (1, 1, 0)
    );
}

/// The child side of `xla_flags_are_part_of_the_cache_key`, run with XLA_FLAGS set.
#[test]
#[ignore = "a child process of xla_flags_are_part_of_the_cache_key, which runs it"]
fn flagged_cache_writer_child() {
    let dir = std::env::var("PJRT_ACTORS_TEST_FLAGGED_CHILD")
        .expect("run by xla_flags_are_part_of_the_cache_key, which names the directory");
    let client = cache_client(std::path::Path::new(&dir));
    let (program, _) = crate::common::distinct_module(7, 1);
    client
        .compile_and_load(&program, &pjrt_actors::CompileOptions::default())
        .unwrap();
}

#[test]
fn xla_flags_are_part_of_the_cache_key() {
    let dir = crate::common::scratch_dir("flagged-cache");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A process with fast math on writes the entry...
    crate::common::run_child_test(
        "red_team::flagged_cache_writer_child",
        &[
            ("PJRT_ACTORS_TEST_FLAGGED_CHILD", dir.display().to_string()),
            ("XLA_FLAGS", "--xla_cpu_enable_fast_math=true".into()),
        ],
        std::time::Duration::from_secs(120),
    );
    assert_eq!(cache_entries(&dir).len(), 1);
    // ...and this one, without the flags, must not load it.
    let client = cache_client(&dir);
    let (program, dims) = crate::common::distinct_module(7, 1);
    let exe = client
        .compile_and_load(&program, &pjrt_actors::CompileOptions::default())
        .unwrap();
    crate::common::check_distinct(&exe, &client.devices()[0], &dims, 1);
    let stats = client.compile_cache_stats();
    assert_eq!((stats.disk_hits, stats.compiles), (0, 1));
    assert_eq!(cache_entries(&dir).len(), 2, "one entry per flag setting");
}
