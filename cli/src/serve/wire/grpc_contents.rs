//! gRPC's typed tensor contents read as the protocol types them: each datatype from its own
//! field (INT8, INT16 and INT32 from `int_contents`, one int32 per value; UINT8 to UINT32 from
//! `uint_contents`; ...), every value range-checked, a field of another type refused.

use pjrt_actors::ElementType;

use super::datatype_name;
use super::messages::InferTensorContents;

/// The contents' fields by name, each with how many values it holds.
fn fields(c: &InferTensorContents) -> [(&'static str, usize); 7] {
    [
        ("bool_contents", c.bool_contents.len()),
        ("int_contents", c.int_contents.len()),
        ("int64_contents", c.int64_contents.len()),
        ("uint_contents", c.uint_contents.len()),
        ("uint64_contents", c.uint64_contents.len()),
        ("fp32_contents", c.fp32_contents.len()),
        ("fp64_contents", c.fp64_contents.len()),
    ]
}

/// The field a datatype's values are sent in; FP16 and BF16 have none (raw contents only).
fn field_of(dtype: ElementType) -> Option<&'static str> {
    use ElementType::*;
    Some(match dtype {
        Pred => "bool_contents",
        S8 | S16 | S32 => "int_contents",
        S64 => "int64_contents",
        U8 | U16 | U32 => "uint_contents",
        U64 => "uint64_contents",
        F32 => "fp32_contents",
        F64 => "fp64_contents",
        _ => return None,
    })
}

/// `count` values of `dtype` from `c`, as little-endian bytes.
pub fn read_contents(
    c: &InferTensorContents,
    dtype: ElementType,
    count: usize,
) -> Result<Vec<u8>, String> {
    let name = datatype_name(dtype).unwrap_or("?");
    let Some(field) = field_of(dtype) else {
        return Err(format!(
            "{name} has no typed contents field; send it in raw_input_contents"
        ));
    };
    for (other, n) in fields(c) {
        if other != field && n > 0 {
            return Err(format!(
                "{name} values are sent in {field}; {other} holds {n} values"
            ));
        }
    }
    let given = fields(c)
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(0, |f| f.1);
    if given != count {
        return Err(format!(
            "{field} holds {given} values; its shape holds {count}"
        ));
    }
    // Narrow integers arrive one int32 (or uint32) per value: each must fit.
    fn narrow<W: TryFrom<V>, V: Copy + std::fmt::Display>(
        values: &[V],
        name: &str,
        le: impl Fn(W) -> Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(values.len() * std::mem::size_of::<W>());
        for (k, &v) in values.iter().enumerate() {
            let w =
                W::try_from(v).map_err(|_| format!("value {k}, {v}, does not fit in {name}"))?;
            out.extend(le(w));
        }
        Ok(out)
    }
    use ElementType::*;
    Ok(match dtype {
        Pred => c.bool_contents.iter().map(|&b| b as u8).collect(),
        S8 => narrow::<i8, i32>(&c.int_contents, name, |w| w.to_le_bytes().to_vec())?,
        S16 => narrow::<i16, i32>(&c.int_contents, name, |w| w.to_le_bytes().to_vec())?,
        S32 => c
            .int_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        S64 => c
            .int64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        U8 => narrow::<u8, u32>(&c.uint_contents, name, |w| w.to_le_bytes().to_vec())?,
        U16 => narrow::<u16, u32>(&c.uint_contents, name, |w| w.to_le_bytes().to_vec())?,
        U32 => c
            .uint_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        U64 => c
            .uint64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        F32 => c
            .fp32_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        F64 => c
            .fp64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        _ => unreachable!("field_of has no field for {dtype}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_datatype_is_read_from_its_own_field_one_value_each() {
        let ints = InferTensorContents {
            int_contents: vec![1, -2, 3, 127],
            ..Default::default()
        };
        assert_eq!(
            read_contents(&ints, ElementType::S8, 4).unwrap(),
            [1, 0xfe, 3, 127]
        );
        assert_eq!(
            read_contents(&ints, ElementType::S16, 4).unwrap(),
            [1, 0, 0xfe, 0xff, 3, 0, 127, 0]
        );
        let floats = InferTensorContents {
            fp32_contents: vec![1.5, f32::MAX],
            ..Default::default()
        };
        let got = read_contents(&floats, ElementType::F32, 2).unwrap();
        assert_eq!(got[4..], f32::MAX.to_le_bytes());
        let bools = InferTensorContents {
            bool_contents: vec![true, false],
            ..Default::default()
        };
        assert_eq!(read_contents(&bools, ElementType::Pred, 2).unwrap(), [1, 0]);
    }

    #[test]
    fn a_wrong_field_count_or_range_is_refused() {
        let ints = InferTensorContents {
            int_contents: vec![1, 2, 3, 4, 5, 6],
            ..Default::default()
        };
        // (contents, dtype, count, what the message says)
        let both = InferTensorContents {
            int_contents: vec![1],
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        let big = InferTensorContents {
            int_contents: vec![1, 300],
            ..Default::default()
        };
        let negative = InferTensorContents {
            uint_contents: vec![70000],
            ..Default::default()
        };
        let cases: [(&InferTensorContents, ElementType, usize, &str); 6] = [
            (
                &ints,
                ElementType::F32,
                6,
                "FP32 values are sent in fp32_contents; int_contents holds 6",
            ),
            (
                &ints,
                ElementType::S8,
                16,
                "int_contents holds 6 values; its shape holds 16",
            ),
            (&both, ElementType::S32, 1, "fp32_contents holds 1 values"),
            (
                &big,
                ElementType::S8,
                2,
                "value 1, 300, does not fit in INT8",
            ),
            (&negative, ElementType::U16, 1, "does not fit in UINT16"),
            (
                &ints,
                ElementType::F16,
                6,
                "FP16 has no typed contents field",
            ),
        ];
        for (c, dtype, count, says) in cases {
            let err = read_contents(c, dtype, count).unwrap_err();
            assert!(err.contains(says), "{dtype}: `{err}` lacks `{says}`");
        }
    }
}
