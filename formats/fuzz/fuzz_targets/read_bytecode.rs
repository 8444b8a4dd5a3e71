//! The MLIR bytecode reader behind a program's partition count: any bytes, after the bytecode
//! magic or not, read as a partitioning (absent counts where they cannot be read) without a
//! panic or an endless loop; a count it reads is at least 1.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let mut code = b"ML\xefR".to_vec();
    code.extend_from_slice(bytes);
    for program in [bytes, &code[..]] {
        let p = pjrt_actors_formats::spmd::read(program);
        assert!(p.num_partitions.is_none_or(|n| n >= 1));
        assert!(p.num_replicas.is_none_or(|n| n >= 1));
    }
});
