//! The key-value store a multi-process client shares through `PJRT_Client_Create`: the
//! `KvStore` trait, and the `kv_get` / `kv_try_get` / `kv_put` C callbacks that serve it to the
//! plugin (values handed back with a deleter, errors through the plugin's error callback).

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::Duration;

use pjrt_sys as sys;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// `try_get` found no value.
    NotFound,
    /// `get` waited its whole timeout.
    DeadlineExceeded,
    /// The store could not be reached or refused the operation.
    Unavailable(String),
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvError::NotFound => f.write_str("no such key"),
            KvError::DeadlineExceeded => f.write_str("the key did not appear in time"),
            KvError::Unavailable(why) => write!(f, "the key-value store is unavailable: {why}"),
        }
    }
}

/// A key-value store the processes of one distributed client share (XLA's coordination data:
/// topology, ids). Must be thread-safe; the plugin calls it from its own threads.
pub trait KvStore: Send + Sync {
    /// The value of `key`, waiting up to `timeout` for another process to put it.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError>;
    /// The value of `key` now, or `KvError::NotFound`.
    fn try_get(&self, key: &str) -> Result<Vec<u8>, KvError>;
    /// Sets `key` to `value`.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError>;
}

/// What the plugin's `user_arg` points at: kept in a `Box` by the client, so it outlives every
/// callback (the client is destroyed before it).
pub(crate) type StoreHandle = Box<Arc<dyn KvStore>>;

#[repr(C)]
struct KvGetArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    key: *const c_char,
    key_size: usize,
    timeout_in_ms: i32,
    callback_error: *const CallbackError,
    user_arg: *mut c_void,
    value: *mut c_char,
    value_size: usize,
    value_deleter_callback: Option<unsafe extern "C" fn(*mut c_char)>,
}
const _: () = assert!(size_of::<KvGetArgs>() == 80);

#[repr(C)]
struct KvTryGetArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    key: *const c_char,
    key_size: usize,
    callback_error: *const CallbackError,
    user_arg: *mut c_void,
    value: *mut c_char,
    value_size: usize,
    value_deleter_callback: Option<unsafe extern "C" fn(*mut c_char)>,
}
const _: () = assert!(size_of::<KvTryGetArgs>() == 72);

#[repr(C)]
struct KvPutArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    key: *const c_char,
    key_size: usize,
    value: *const c_char,
    value_size: usize,
    callback_error: *const CallbackError,
    user_arg: *mut c_void,
}
const _: () = assert!(size_of::<KvPutArgs>() == 64);

/// `PJRT_CallbackError`: the plugin's function that makes a `PJRT_Error` for us to return.
type CallbackError = Option<
    unsafe extern "C" fn(code: i32, message: *const c_char, size: usize) -> *mut sys::PJRT_Error,
>;

const CODE_NOT_FOUND: i32 = 5;
const CODE_DEADLINE_EXCEEDED: i32 = 4;
const CODE_UNAVAILABLE: i32 = 14;

/// The three callbacks and the user argument for `PJRT_Client_Create_Args`.
pub(crate) struct Callbacks {
    pub(crate) get: sys::PJRT_KeyValueGetCallback,
    pub(crate) try_get: *const c_void,
    pub(crate) put: sys::PJRT_KeyValuePutCallback,
}

pub(crate) fn callbacks() -> Callbacks {
    // SAFETY: the plugin calls these with its own args structs, whose layouts `KvGetArgs`,
    // `KvTryGetArgs` and `KvPutArgs` are (sizes asserted above); only the pointer types differ.
    unsafe {
        Callbacks {
            get: Some(std::mem::transmute::<
                unsafe extern "C" fn(*mut KvGetArgs) -> *mut sys::PJRT_Error,
                unsafe extern "C" fn(
                    *mut sys::PJRT_KeyValueGetCallback_Args,
                ) -> *mut sys::PJRT_Error,
            >(kv_get)),
            try_get: kv_try_get as *const c_void,
            put: Some(std::mem::transmute::<
                unsafe extern "C" fn(*mut KvPutArgs) -> *mut sys::PJRT_Error,
                unsafe extern "C" fn(
                    *mut sys::PJRT_KeyValuePutCallback_Args,
                ) -> *mut sys::PJRT_Error,
            >(kv_put)),
        }
    }
}

/// Reports `error` through the plugin's error callback.
///
/// # Safety
/// `callback_error` must be the args' callback, valid during the call.
unsafe fn report(callback_error: *const CallbackError, error: KvError) -> *mut sys::PJRT_Error {
    let code = match &error {
        KvError::NotFound => CODE_NOT_FOUND,
        KvError::DeadlineExceeded => CODE_DEADLINE_EXCEEDED,
        KvError::Unavailable(_) => CODE_UNAVAILABLE,
    };
    let message = error.to_string();
    // SAFETY: guaranteed by the caller; the plugin copies the message.
    unsafe {
        match callback_error.as_ref().and_then(|f| *f) {
            Some(f) => f(code, message.as_ptr().cast(), message.len()),
            None => null_mut(),
        }
    }
}

/// The store and the key of a call.
///
/// # Safety
/// `user_arg` must be a `StoreHandle`'s pointee and `key` point at `size` bytes.
unsafe fn store_and_key<'a>(
    user_arg: *mut c_void,
    key: *const c_char,
    size: usize,
) -> (&'a Arc<dyn KvStore>, String) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let store = &*(user_arg as *const Arc<dyn KvStore>);
        let key = String::from_utf8_lossy(std::slice::from_raw_parts(key.cast::<u8>(), size))
            .into_owned();
        (store, key)
    }
}

/// Hands `value` to the plugin: a copy behind a length header, freed by `free_value`.
fn give(value: Vec<u8>) -> (*mut c_char, usize) {
    let len = value.len();
    let mut block = Vec::with_capacity(8 + len);
    block.extend_from_slice(&(len as u64).to_le_bytes());
    block.extend_from_slice(&value);
    let block = Box::into_raw(block.into_boxed_slice()) as *mut u8;
    // SAFETY: the block is 8 + len bytes; the value starts after the header.
    (unsafe { block.add(8) }.cast(), len)
}

/// The deleter the plugin calls on a value `give` made.
unsafe extern "C" fn free_value(value: *mut c_char) {
    if value.is_null() {
        return;
    }
    // SAFETY: `value` came from `give`: its length is in the 8 bytes before it, and the block
    // is a boxed slice of 8 + length bytes.
    unsafe {
        let block = (value as *mut u8).sub(8);
        let len = u64::from_le_bytes(*(block as *const [u8; 8])) as usize;
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            block,
            8 + len,
        )));
    }
}

/// Runs a get-like call: the store's answer becomes the args' value and deleter, or an error.
///
/// # Safety
/// `value`, `size` and `deleter` must be the args' out fields and `callback_error` its
/// callback, all valid during the call.
unsafe fn answer(
    got: std::thread::Result<Result<Vec<u8>, KvError>>,
    value: &mut *mut c_char,
    size: &mut usize,
    deleter: &mut Option<unsafe extern "C" fn(*mut c_char)>,
    callback_error: *const CallbackError,
) -> *mut sys::PJRT_Error {
    match got.unwrap_or_else(|_| Err(KvError::Unavailable("the store panicked".into()))) {
        Ok(v) => {
            (*value, *size) = give(v);
            *deleter = Some(free_value);
            null_mut()
        }
        // SAFETY: guaranteed by the caller.
        Err(e) => unsafe { report(callback_error, e) },
    }
}

unsafe extern "C" fn kv_get(args: *mut KvGetArgs) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes its args, valid during the call; `user_arg` is our handle.
    let args = unsafe { &mut *args };
    let (store, key) = unsafe { store_and_key(args.user_arg, args.key, args.key_size) };
    let timeout = Duration::from_millis(args.timeout_in_ms.max(0) as u64);
    let got = catch_unwind(AssertUnwindSafe(|| store.get(&key, timeout)));
    // SAFETY: the args' own out fields and callback.
    unsafe {
        answer(
            got,
            &mut args.value,
            &mut args.value_size,
            &mut args.value_deleter_callback,
            args.callback_error,
        )
    }
}

unsafe extern "C" fn kv_try_get(args: *mut KvTryGetArgs) -> *mut sys::PJRT_Error {
    // SAFETY: as in `kv_get`.
    let args = unsafe { &mut *args };
    let (store, key) = unsafe { store_and_key(args.user_arg, args.key, args.key_size) };
    let got = catch_unwind(AssertUnwindSafe(|| store.try_get(&key)));
    // SAFETY: the args' own out fields and callback.
    unsafe {
        answer(
            got,
            &mut args.value,
            &mut args.value_size,
            &mut args.value_deleter_callback,
            args.callback_error,
        )
    }
}

unsafe extern "C" fn kv_put(args: *mut KvPutArgs) -> *mut sys::PJRT_Error {
    // SAFETY: as in `kv_get`; `value` points at `value_size` bytes during the call.
    let args = unsafe { &mut *args };
    let (store, key) = unsafe { store_and_key(args.user_arg, args.key, args.key_size) };
    let value = unsafe { std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size) };
    let put = catch_unwind(AssertUnwindSafe(|| store.put(&key, value)))
        .unwrap_or_else(|_| Err(KvError::Unavailable("the store panicked".into())));
    match put {
        Ok(()) => null_mut(),
        // SAFETY: the args' own callback.
        Err(e) => unsafe { report(args.callback_error, e) },
    }
}
