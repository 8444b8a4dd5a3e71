//! `PJRT_NamedValue` in both directions: typed Rust values for create options and attributes.

use std::ffi::CString;

use pjrt_sys as sys;

use super::plugin_bytes::plugin_str;

/// A named value as PJRT passes them (create options, plugin, device and topology attributes).
#[derive(Debug, Clone, PartialEq)]
pub enum NamedValue {
    /// A UTF-8 string.
    String(String),
    /// A 64-bit integer.
    Int64(i64),
    /// A list of 64-bit integers.
    Int64List(Vec<i64>),
    /// A 32-bit float.
    Float(f32),
    /// A boolean.
    Bool(bool),
}

impl NamedValue {
    /// The name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            NamedValue::String(_) => "string",
            NamedValue::Int64(_) => "int64",
            NamedValue::Int64List(_) => "int64 list",
            NamedValue::Float(_) => "float",
            NamedValue::Bool(_) => "bool",
        }
    }
}

impl std::fmt::Display for NamedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamedValue::String(s) => write!(f, "{s}"),
            NamedValue::Int64(v) => write!(f, "{v}"),
            NamedValue::Int64List(v) => write!(f, "{v:?}"),
            NamedValue::Float(v) => write!(f, "{v}"),
            NamedValue::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// Reads `n` plugin-owned named values.
///
/// # Safety
/// `ptr` must point at `n` valid `PJRT_NamedValue`s (or `n` must be 0).
pub(crate) unsafe fn read_named_values(
    ptr: *const sys::PJRT_NamedValue,
    n: usize,
) -> Vec<(String, NamedValue)> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    let values = unsafe { std::slice::from_raw_parts(ptr, n) };
    values
        .iter()
        .map(|v| {
            // SAFETY: each field is read according to the value's declared type; strings and
            // lists are plugin-owned and valid for the stated sizes.
            unsafe {
                let name = plugin_str(v.name, v.name_size);
                let value = match v.type_ {
                    sys::PJRT_NamedValue_Type_PJRT_NamedValue_kString => NamedValue::String(
                        plugin_str(v.__bindgen_anon_1.string_value, v.value_size),
                    ),
                    sys::PJRT_NamedValue_Type_PJRT_NamedValue_kInt64 => {
                        NamedValue::Int64(v.__bindgen_anon_1.int64_value)
                    }
                    sys::PJRT_NamedValue_Type_PJRT_NamedValue_kInt64List => {
                        let p = v.__bindgen_anon_1.int64_array_value;
                        NamedValue::Int64List(if p.is_null() {
                            Vec::new()
                        } else {
                            std::slice::from_raw_parts(p, v.value_size).to_vec()
                        })
                    }
                    sys::PJRT_NamedValue_Type_PJRT_NamedValue_kFloat => {
                        NamedValue::Float(v.__bindgen_anon_1.float_value)
                    }
                    _ => NamedValue::Bool(v.__bindgen_anon_1.bool_value),
                };
                (name, value)
            }
        })
        .collect()
}

/// Named values laid out for one PJRT call; keeps the strings they point at alive.
pub(crate) struct RawNamedValues {
    _names: Vec<CString>,
    _strings: Vec<CString>,
    values: Vec<sys::PJRT_NamedValue>,
}

impl RawNamedValues {
    pub(crate) fn new(options: &[(String, NamedValue)]) -> Self {
        let mut names = Vec::with_capacity(options.len());
        let mut strings = Vec::new();
        let mut values = Vec::with_capacity(options.len());
        for (name, value) in options {
            let cname = CString::new(name.as_str()).unwrap_or_default();
            let mut raw = sys::PJRT_NamedValue {
                struct_size: size_of::<sys::PJRT_NamedValue>(),
                name: cname.as_ptr(),
                name_size: name.len(),
                ..Default::default()
            };
            match value {
                NamedValue::String(s) => {
                    let cs = CString::new(s.as_str()).unwrap_or_default();
                    raw.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kString;
                    raw.__bindgen_anon_1.string_value = cs.as_ptr();
                    raw.value_size = s.len();
                    strings.push(cs);
                }
                NamedValue::Int64(v) => {
                    raw.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kInt64;
                    raw.__bindgen_anon_1.int64_value = *v;
                    raw.value_size = 1;
                }
                NamedValue::Int64List(v) => {
                    raw.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kInt64List;
                    raw.__bindgen_anon_1.int64_array_value = v.as_ptr();
                    raw.value_size = v.len();
                }
                NamedValue::Float(v) => {
                    raw.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kFloat;
                    raw.__bindgen_anon_1.float_value = *v;
                    raw.value_size = 1;
                }
                NamedValue::Bool(v) => {
                    raw.type_ = sys::PJRT_NamedValue_Type_PJRT_NamedValue_kBool;
                    raw.__bindgen_anon_1.bool_value = *v;
                    raw.value_size = 1;
                }
            }
            names.push(cname);
            values.push(raw);
        }
        RawNamedValues {
            _names: names,
            _strings: strings,
            values,
        }
    }

    pub(crate) fn as_ptr(&self) -> *const sys::PJRT_NamedValue {
        self.values.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}
