//! The server's request decoding (cli/src/serve/wire, included by path): any bytes as an HTTP
//! request's JSON part and binary tail, as each input's JSON data read as every datatype, and
//! as a gRPC ModelInferRequest whose typed contents are read as every datatype. Nothing panics
//! or loops; a read that succeeds gives exactly the bytes its shape holds, and every span lies
//! in the body, the binary ones claiming its tail exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pjrt_actors::ElementType;
use prost::Message;

#[allow(dead_code)]
#[path = "../../cli/src/serve/wire/mod.rs"]
mod wire;

// The values' text reader the wire formats use (`crate::literal::parse_value`).
#[allow(dead_code)]
#[path = "../../cli/src/literal/mod.rs"]
mod literal;

use wire::json_request::{DataSpan, parse};
use wire::messages::ModelInferRequest;

/// The most elements a fuzzed shape may ask to be read (a shape is checked against its model
/// before data is read, in the server; here only its own count bounds it).
const MOST: usize = 1 << 16;

fn elements(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| {
        n.checked_mul(usize::try_from(d).ok()?).filter(|&n| n <= MOST)
    })
}

const TYPES: [ElementType; 13] = [
    ElementType::Pred,
    ElementType::U8,
    ElementType::U16,
    ElementType::U32,
    ElementType::U64,
    ElementType::S8,
    ElementType::S16,
    ElementType::S32,
    ElementType::S64,
    ElementType::F16,
    ElementType::BF16,
    ElementType::F32,
    ElementType::F64,
];

fuzz_target!(|bytes: &[u8]| {
    // HTTP: the first byte says where the JSON part ends (all of it, or a share of it).
    if let Some((&cut, body)) = bytes.split_first() {
        let json_len = match cut {
            255 => body.len(),
            c => body.len() * c as usize / 255,
        };
        if let Ok(request) = parse(body, json_len) {
            let mut tail = json_len;
            for (head, span) in &request.inputs {
                match span {
                    DataSpan::Binary(at) => {
                        assert_eq!(at.start, tail, "binary data is claimed in order");
                        assert!(at.end <= body.len());
                        tail = at.end;
                    }
                    DataSpan::Json(at) => {
                        assert!(at.end <= json_len);
                        let text = std::str::from_utf8(&body[at.clone()]).expect("JSON is UTF-8");
                        let Some(count) = elements(&head.shape) else {
                            continue;
                        };
                        for dtype in TYPES {
                            let mut out = Vec::new();
                            if wire::tensor_data::read_json_data(text, dtype, &head.shape, &mut out)
                                .is_ok()
                            {
                                assert_eq!(out.len(), count * dtype.byte_size(), "{dtype}");
                            }
                        }
                    }
                }
            }
            assert_eq!(tail, body.len(), "the binary tail is claimed whole");
        }
    }
    // gRPC: a ModelInferRequest, its typed contents read as every datatype.
    if let Ok(request) = ModelInferRequest::decode(bytes) {
        for input in &request.inputs {
            let (Some(contents), Some(count)) = (&input.contents, elements(&input.shape)) else {
                continue;
            };
            for dtype in TYPES {
                if let Ok(out) = wire::grpc_contents::read_contents(contents, dtype, count) {
                    assert_eq!(out.len(), count * dtype.byte_size(), "{dtype}");
                }
            }
        }
    }
});
