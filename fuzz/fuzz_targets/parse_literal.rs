//! The CLI's input literals (cli/src/literal, included by path): any text either parses into
//! data whose length matches its shape, or is a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../cli/src/literal/mod.rs"]
mod literal;

fuzz_target!(|text: &str| {
    if let Ok(data) = literal::parse_literal(text) {
        let count: i64 = data.dims.iter().product();
        assert_eq!(data.bytes.len(), count as usize * data.dtype.byte_size());
        let _ = literal::json_values(&data);
    }
});
