//! The known-defect guard's readers of a program's ops, which run on every compile miss: any
//! bytes, as text or after the bytecode magic, read as (op, element type) pairs without a panic
//! or an endless loop; every pair names an op.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pjrt_actors_formats::program_ops::ops_used;

fuzz_target!(|bytes: &[u8]| {
    let mut code = b"ML\xefR".to_vec();
    code.extend_from_slice(bytes);
    for program in [bytes, &code[..]] {
        for (op, _element) in ops_used(program).unwrap_or_default() {
            assert!(!op.is_empty());
        }
    }
});
