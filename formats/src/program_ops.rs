//! The ops a program uses, with their result element types: from its MLIR text or its MLIR
//! bytecode, portable (vhlo) names read as their StableHLO names. What the known-defect table
//! is matched against.

use crate::mlir_bytecode_ops::ops_with_result_types;
use crate::mlir_text_ops;

/// The (op, result element type) pairs a program uses: from its text (types as parsed:
/// aliases resolved, spaces and line breaks ignored; `?` where unreadable), or its MLIR
/// bytecode's IR. `None` for bytecode that cannot be read to its end.
pub fn ops_used(code: &[u8]) -> Option<Vec<(String, String)>> {
    if code.starts_with(b"ML\xefR") {
        return Some(
            (ops_with_result_types(code)?.into_iter())
                .flat_map(|op| {
                    let name = stablehlo_name(&op.name);
                    op.results.into_iter().map(move |t| (name.clone(), t))
                })
                .collect(),
        );
    }
    Some(mlir_text_ops::ops_used(&String::from_utf8_lossy(code)))
}

/// The ops a program runs, by name only, each with the unknown type: from its text in one pass,
/// or its MLIR bytecode's IR. `None` for bytecode that cannot be read to its end.
pub fn op_names(code: &[u8]) -> Option<Vec<(String, String)>> {
    let unknown = || mlir_text_ops::UNKNOWN.to_string();
    if code.starts_with(b"ML\xefR") {
        return Some(
            (ops_with_result_types(code)?.into_iter())
                .map(|op| (stablehlo_name(&op.name), unknown()))
                .collect(),
        );
    }
    let text = String::from_utf8_lossy(code);
    Some(
        mlir_text_ops::op_names(&text)
            .map(|n| (n.to_string(), unknown()))
            .collect(),
    )
}

/// A portable artifact's op under its StableHLO name: `vhlo.atan2_v1` is `stablehlo.atan2`.
fn stablehlo_name(name: &str) -> String {
    match name.strip_prefix("vhlo.") {
        Some(rest) => {
            let base = match rest.rsplit_once("_v") {
                Some((base, v)) if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => base,
                _ => rest,
            };
            format!("stablehlo.{base}")
        }
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_names_are_read_as_stablehlo_names() {
        assert_eq!(stablehlo_name("vhlo.atan2_v1"), "stablehlo.atan2");
        assert_eq!(stablehlo_name("vhlo.composite_v2"), "stablehlo.composite");
        assert_eq!(stablehlo_name("chlo.atan"), "chlo.atan");
    }
}
