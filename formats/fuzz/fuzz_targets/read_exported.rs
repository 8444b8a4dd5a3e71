//! The reader of serialized jax.export artifacts: any bytes read as an `Exported` whose trees
//! and avals agree (what `parse` checks) or are a typed error; never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pjrt_actors_formats::exported::Exported;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(e) = Exported::parse(bytes) {
        assert_eq!(e.in_paths().len(), e.in_avals.len());
        assert_eq!(e.out_paths().len(), e.out_avals.len());
    }
});
