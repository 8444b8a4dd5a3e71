//! The built-in conformance cases of pjrt-actors' own (see
//! cli/conformance/pjrt-actors/README.md). Written by scripts/conformance-own-cases.

/// (name, text) of each case, one a line.
#[rustfmt::skip]
pub const CASES: &[(&str, &str)] = &[
    ("atan2_by_one_float32_400", include_str!("../../conformance/pjrt-actors/atan2_by_one_float32_400.mlir")),
    ("atan2_by_one_float64_400", include_str!("../../conformance/pjrt-actors/atan2_by_one_float64_400.mlir")),
    ("atan2_float32_400_float32_400", include_str!("../../conformance/pjrt-actors/atan2_float32_400_float32_400.mlir")),
    ("atan2_float64_400_float64_400", include_str!("../../conformance/pjrt-actors/atan2_float64_400_float64_400.mlir")),
    ("atan_float32_400_chlo", include_str!("../../conformance/pjrt-actors/atan_float32_400_chlo.mlir")),
    ("atan_float64_400_chlo", include_str!("../../conformance/pjrt-actors/atan_float64_400_chlo.mlir")),
];
