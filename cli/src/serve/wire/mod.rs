//! The KServe v2 wire formats as plain data, apart from the server: the protocol's datatype
//! names, a request's declared inputs and parameters, an HTTP request's JSON part, JSON tensor
//! data, gRPC's messages and typed contents. Nothing here touches the runtime or the network,
//! so the fuzz target `serve_requests` builds this folder alone (by path).

pub mod generate_request;
pub mod grpc_contents;
pub mod json_request;
pub mod messages;
pub mod openai_request;
pub mod tensor_data;

use pjrt_actors::ElementType;

/// The protocol extensions the server speaks, as its metadata lists them.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "statistics",
    "generate",
];

/// The protocol's datatype names for our element types.
const DATATYPES: &[(&str, ElementType)] = &[
    ("BOOL", ElementType::Pred),
    ("UINT8", ElementType::U8),
    ("UINT16", ElementType::U16),
    ("UINT32", ElementType::U32),
    ("UINT64", ElementType::U64),
    ("INT8", ElementType::S8),
    ("INT16", ElementType::S16),
    ("INT32", ElementType::S32),
    ("INT64", ElementType::S64),
    ("FP16", ElementType::F16),
    ("BF16", ElementType::BF16),
    ("FP32", ElementType::F32),
    ("FP64", ElementType::F64),
];

pub fn datatype_name(t: ElementType) -> Option<&'static str> {
    DATATYPES.iter().find(|(_, e)| *e == t).map(|(n, _)| *n)
}

/// The most of a client's text (a name, a value) an error message repeats: a message goes
/// into a gRPC trailer, and a 100 KB name would make the whole answer too large to read.
const SHOWN_CHARS: usize = 64;

/// `text` as a message shows it: whole, or its start and how long it was.
pub fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// A shape as an error quotes it: its first dims, then how many there are in all.
pub fn shown_dims(dims: &[i64]) -> String {
    const SHOWN_DIMS: usize = 8;
    match dims.len() > SHOWN_DIMS {
        false => format!("{dims:?}"),
        true => {
            let first: Vec<String> = dims[..SHOWN_DIMS].iter().map(i64::to_string).collect();
            format!("[{}, … ({} dims)]", first.join(", "), dims.len())
        }
    }
}

/// One input as a request declares it, before its data is read.
pub struct InputHead {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// A request's queue parameters, as sent (`None` where absent).
#[derive(Default)]
pub struct RequestParams {
    pub priority: Option<u64>,
    pub timeout_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_client_text_is_cut_in_messages() {
        assert_eq!(shown("lm"), "lm");
        let long = "x".repeat(100_000);
        let s = shown(&long);
        assert!(s.len() < 100 && s.ends_with("(100000 bytes)"), "{s}");
        // Cut on a character boundary.
        let wide = "é".repeat(100);
        assert!(shown(&wide).starts_with(&"é".repeat(64)));
    }
}
