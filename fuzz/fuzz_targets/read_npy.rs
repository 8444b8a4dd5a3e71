//! The `.npy` reader: any bytes either read into data of the right length, which writes and
//! reads back the same, or are a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pjrt_actors::host_data::{read_npy, write_npy};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(data) = read_npy(bytes) {
        let count: i64 = data.dims.iter().product();
        assert_eq!(data.bytes.len(), count as usize * data.dtype.byte_size());
        if let Ok(again) = write_npy(&data) {
            assert_eq!(read_npy(&again).unwrap(), data);
        }
    }
});
