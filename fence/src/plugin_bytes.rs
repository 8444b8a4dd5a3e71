//! Copying what the plugin owns out before it is freed: strings of known length, and
//! serialized bytes released through the plugin's deleter.

/// Reads a plugin-owned string of known length.
///
/// # Safety
/// `ptr` must point at `len` readable bytes (or be null).
pub(crate) unsafe fn plugin_str(ptr: *const std::os::raw::c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Copies bytes the plugin serialized, then frees them with the plugin's deleter (once).
///
/// # Safety
/// `bytes` must point at `len` bytes that stay valid until `deleter(handle)` runs.
pub(crate) unsafe fn take_serialized<T>(
    bytes: *const std::os::raw::c_char,
    len: usize,
    handle: *mut T,
    deleter: Option<unsafe extern "C" fn(*mut T)>,
) -> Vec<u8> {
    // SAFETY: guaranteed by the caller; the deleter runs after the copy, once.
    unsafe {
        let copy = if bytes.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(bytes as *const u8, len).to_vec()
        };
        if let Some(deleter) = deleter {
            deleter(handle);
        }
        copy
    }
}
