//! The CLI's input literals: any text either parses into data whose length matches its shape,
//! or is a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(data) = pjrt_actors::host_data::parse_literal(text) {
        let count: i64 = data.dims.iter().product();
        assert_eq!(data.bytes.len(), count as usize * data.dtype.byte_size());
        let _ = pjrt_actors::host_data::json_values(&data);
    }
});
