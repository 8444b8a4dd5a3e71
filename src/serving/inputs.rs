//! A request's inputs checked against the batcher's signature: the one rule (count, types,
//! shapes, rows), on types and shapes alone so a server can check before it reads any data,
//! with a typed answer each caller phrases in its own terms.

use std::fmt;

use super::Signature;
use crate::host_data::HostArray;
use crate::{ElementType, Error, Result};

/// How a request's inputs fail the batcher's signature. `input` counts the model's batched
/// inputs in order, from 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputMismatch {
    /// The request has another number of inputs than the model takes.
    Count {
        /// The model's batched inputs.
        takes: usize,
        /// The request's.
        given: usize,
    },
    /// An input has no leading (rows) dimension.
    Scalar {
        /// Which input.
        input: usize,
    },
    /// An input's element type is not the model's.
    Dtype {
        /// Which input.
        input: usize,
    },
    /// An input's dimensions past the rows are not the model's.
    Dims {
        /// Which input.
        input: usize,
    },
    /// An input's rows are outside 1 to the batcher's `max_rows`.
    Rows {
        /// Which input.
        input: usize,
        /// Its rows.
        rows: i64,
        /// The batcher's `max_rows`.
        max: usize,
    },
    /// An input's rows differ from the first input's.
    UnequalRows {
        /// Which input.
        input: usize,
        /// Its rows.
        rows: i64,
        /// The first input's.
        first: i64,
    },
}

impl fmt::Display for InputMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InputMismatch::Count { takes, given } => {
                write!(
                    f,
                    "the model takes {takes} batched inputs; the request has {given}"
                )
            }
            InputMismatch::Scalar { input } => write!(
                f,
                "input {input} is a scalar; it needs the rows as its leading dimension"
            ),
            InputMismatch::Dtype { input } => write!(f, "input {input} has another element type"),
            InputMismatch::Dims { input } => write!(f, "input {input} has another shape"),
            InputMismatch::Rows { rows, max, .. } => write!(
                f,
                "{rows} rows; a request has 1 to {max} (the batcher's max_batch_size)"
            ),
            InputMismatch::UnequalRows { input, rows, first } => {
                write!(f, "input {input} has {rows} rows; input 0 has {first}")
            }
        }
    }
}

/// Checks inputs given as (element type, dims), in the model's order; answers their rows.
pub(crate) fn check_shapes<'a>(
    signature: &Signature,
    max_rows: usize,
    inputs: impl ExactSizeIterator<Item = (ElementType, &'a [i64])>,
) -> std::result::Result<usize, InputMismatch> {
    let (takes, given) = (signature.inputs.len(), inputs.len());
    if takes != given || takes == 0 {
        return Err(InputMismatch::Count { takes, given });
    }
    let mut first = None;
    for (input, ((dtype, dims), want)) in inputs.zip(&signature.inputs).enumerate() {
        let Some((&rows, tail)) = dims.split_first() else {
            return Err(InputMismatch::Scalar { input });
        };
        if dtype != want.dtype {
            return Err(InputMismatch::Dtype { input });
        }
        if tail != want.dims.as_slice() {
            return Err(InputMismatch::Dims { input });
        }
        if rows < 1 || rows as u64 > max_rows as u64 {
            return Err(InputMismatch::Rows {
                input,
                rows,
                max: max_rows,
            });
        }
        match first {
            Some(first) if first != rows => {
                return Err(InputMismatch::UnequalRows { input, rows, first });
            }
            _ => first = Some(rows),
        }
    }
    Ok(first.unwrap_or_default() as usize)
}

/// Checks a request's host inputs before it is queued: the shapes' rule, then each input's
/// bytes against its shape. Answers its rows.
pub(crate) fn check_request(
    signature: &Signature,
    max_rows: usize,
    inputs: &[HostArray],
) -> Result<usize> {
    let bad = |why: String| Error::InvalidArgument(format!("inference request: {why}"));
    let shapes = inputs.iter().map(|h| (h.dtype, h.dims.as_slice()));
    let rows = check_shapes(signature, max_rows, shapes).map_err(|m| {
        bad(match m {
            InputMismatch::Dtype { input } | InputMismatch::Dims { input } => {
                let (h, want) = (&inputs[input], &signature.inputs[input]);
                let dims: Vec<String> = want.dims.iter().map(|d| d.to_string()).collect();
                format!(
                    "input {input} is {}{:?}; the model takes {}[rows, {}]",
                    h.dtype,
                    h.dims,
                    want.dtype,
                    dims.join(", ")
                )
            }
            other => other.to_string(),
        })
    })?;
    for (i, input) in inputs.iter().enumerate() {
        let expected = pjrt_actors_core::dtype::byte_size(input.dtype, &input.dims)?;
        if input.bytes.len() != expected {
            return Err(bad(format!(
                "input {i} has {} bytes; {}{:?} is {expected}",
                input.bytes.len(),
                input.dtype,
                input.dims
            )));
        }
    }
    Ok(rows)
}

/// A request's inputs checked by element type and dims against the batcher's rule, before
/// their data is read ([`Batcher::check_inputs`](super::Batcher::check_inputs)): the request
/// its data makes ([`into_request`](Self::into_request)) is not checked by that rule again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedInputs {
    rows: usize,
    shapes: Vec<(ElementType, Vec<i64>)>,
}

impl CheckedInputs {
    pub(crate) fn new(rows: usize, shapes: Vec<(ElementType, Vec<i64>)>) -> Self {
        CheckedInputs { rows, shapes }
    }

    /// The request's rows (every input's leading dimension).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The request of `inputs`: the checked inputs, in the same order, with their bytes. An
    /// input of another type or shape than was checked, or whose bytes are not its size, is
    /// `Error::InvalidArgument`.
    pub fn into_request(self, inputs: Vec<HostArray>) -> Result<super::InferRequest> {
        let bad = |why: String| Error::InvalidArgument(format!("inference request: {why}"));
        if inputs.len() != self.shapes.len() {
            return Err(bad(format!(
                "{} inputs given; {} were checked",
                inputs.len(),
                self.shapes.len()
            )));
        }
        for (i, (input, (dtype, dims))) in inputs.iter().zip(&self.shapes).enumerate() {
            if input.dtype != *dtype || input.dims != *dims {
                return Err(bad(format!(
                    "input {i} is {}{:?}; {dtype}{dims:?} was checked",
                    input.dtype, input.dims
                )));
            }
            let expected = pjrt_actors_core::dtype::byte_size(*dtype, dims)?;
            if input.bytes.len() != expected {
                return Err(bad(format!(
                    "input {i} has {} bytes; {dtype}{dims:?} is {expected}",
                    input.bytes.len()
                )));
            }
        }
        Ok(super::InferRequest::checked(inputs, self.rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ArrayType;

    #[test]
    fn checked_inputs_make_their_request_only_with_the_checked_shapes_and_sizes() {
        let checked = || CheckedInputs::new(2, vec![(ElementType::F32, vec![2, 3])]);
        let right = HostArray::from_slice(&[0f32; 6], &[2, 3]);
        let request = checked().into_request(vec![right.clone()]).unwrap();
        assert_eq!(request.checked_rows, Some(2));
        let other_shape = HostArray::from_slice(&[0f32; 6], &[3, 2]);
        let other_type = HostArray::from_slice(&[0i32; 6], &[2, 3]);
        let mut short = right.clone();
        short.bytes.pop();
        for (inputs, says) in [
            (vec![other_shape], "was checked"),
            (vec![other_type], "was checked"),
            (vec![short], "23 bytes"),
            (vec![right.clone(), right], "2 inputs given; 1 were checked"),
        ] {
            match checked().into_request(inputs) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("{:?}", other.map(|r| r.checked_rows)),
            }
        }
    }

    #[test]
    fn each_way_a_request_can_miss_the_signature_is_named() {
        let t = |dtype, dims: &[i64]| ArrayType {
            dtype,
            dims: dims.to_vec(),
        };
        let signature = Signature {
            inputs: vec![t(ElementType::F32, &[3]), t(ElementType::S32, &[])],
            outputs: vec![],
        };
        use ElementType::{F32, S32};
        type Case<'a> = (
            &'a [(ElementType, &'a [i64])],
            std::result::Result<usize, InputMismatch>,
        );
        let cases: &[Case<'_>] = &[
            (&[(F32, &[2, 3]), (S32, &[2])], Ok(2)),
            (
                &[(F32, &[2, 3])],
                Err(InputMismatch::Count { takes: 2, given: 1 }),
            ),
            (
                &[(F32, &[]), (S32, &[2])],
                Err(InputMismatch::Scalar { input: 0 }),
            ),
            (
                &[(F32, &[2, 3]), (F32, &[2])],
                Err(InputMismatch::Dtype { input: 1 }),
            ),
            (
                &[(F32, &[2, 4]), (S32, &[2])],
                Err(InputMismatch::Dims { input: 0 }),
            ),
            (
                &[(F32, &[0, 3]), (S32, &[0])],
                Err(InputMismatch::Rows {
                    input: 0,
                    rows: 0,
                    max: 8,
                }),
            ),
            (
                &[(F32, &[9, 3]), (S32, &[9])],
                Err(InputMismatch::Rows {
                    input: 0,
                    rows: 9,
                    max: 8,
                }),
            ),
            (
                &[(F32, &[-1, 3]), (S32, &[2])],
                Err(InputMismatch::Rows {
                    input: 0,
                    rows: -1,
                    max: 8,
                }),
            ),
            (
                &[(F32, &[2, 3]), (S32, &[3])],
                Err(InputMismatch::UnequalRows {
                    input: 1,
                    rows: 3,
                    first: 2,
                }),
            ),
        ];
        for (inputs, want) in cases {
            let got = check_shapes(&signature, 8, inputs.iter().map(|&(t, d)| (t, d)));
            assert_eq!(&got, want, "{inputs:?}");
        }
        let short = HostArray::from_slice(&[1.0f32; 5], &[2, 3]);
        let e = check_request(
            &signature,
            8,
            &[short, HostArray::from_slice(&[1i32; 2], &[2])],
        );
        assert!(e.unwrap_err().to_string().contains("input 0 has 20 bytes"));
    }
}
