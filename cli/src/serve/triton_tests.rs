//! Triton's type names for every protocol datatype, and a config's renames checked against the model.

use super::*;

#[test]
fn every_protocol_datatype_has_its_triton_type() {
    let cases = [
        (ElementType::Pred, "TYPE_BOOL", 1),
        (ElementType::S32, "TYPE_INT32", 8),
        (ElementType::U64, "TYPE_UINT64", 5),
        (ElementType::F16, "TYPE_FP16", 10),
        (ElementType::BF16, "TYPE_BF16", 14),
        (ElementType::F64, "TYPE_FP64", 12),
    ];
    for (t, name, number) in cases {
        assert_eq!(triton_type(t), (name, number), "{t}");
    }
}

#[test]
fn renames_are_checked_against_the_model() {
    let specs = || {
        vec![
            TensorSpec {
                name: "x".into(),
                dtype: ElementType::F32,
                dims: vec![4],
            },
            TensorSpec {
                name: "y".into(),
                dtype: ElementType::S32,
                dims: vec![],
            },
        ]
    };
    let mut s = specs();
    let ok = json!([{"name": "image", "data_type": "TYPE_FP32", "dims": [4]}]);
    rename("m", "input", &mut s, &ok).unwrap();
    assert_eq!((s[0].name.as_str(), s[1].name.as_str()), ("image", "y"));
    // (rename, what the refusal says)
    let cases = [
        (
            json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            "names 3 tensors; the model has 2",
        ),
        (
            json!([{"name": "a", "data_type": "TYPE_INT32"}]),
            "data_type is \"TYPE_INT32\"; the model's is TYPE_FP32",
        ),
        (json!([{"name": "a", "dims": [5]}]), "dims is [5]"),
        (json!([{"name": "y"}]), "two inputs are named `y`"),
        (json!([{"label": "a"}]), "has `label`"),
        (json!({"name": "a"}), "is a list"),
        (json!([{"name": ""}]), "non-empty string"),
    ];
    for (given, says) in cases {
        let err = rename("m", "input", &mut specs(), &given)
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{given}: `{err}` lacks `{says}`");
    }
}
