//! The red-team pass's inputs (issue 13), as cases of the reliability table: each must be a
//! typed error (or work) and leave the client working with nothing leaked. Runs in
//! `reliability::every_bad_input_is_a_typed_error_and_leaves_nothing_behind`.

use pjrt_actors::Error;

use crate::reliability::{Case, Expect, compile};

fn nested_modules(depth: usize) -> String {
    format!("{}{}", "module {".repeat(depth), "}".repeat(depth))
}

fn refused(e: &Error, words: &str) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains(words))
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
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
