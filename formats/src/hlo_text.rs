//! A compact text form of an optimized HLO module, printed from its proto: the PJRT C API hands
//! back `HloModuleProto` bytes, not XLA's text. The layout follows XLA's printer (computations,
//! `%name = shape opcode(operands)`, `ROOT`), without its attribute details.

use std::collections::HashMap;
use std::fmt::Write;

use crate::protos::xla::{HloModuleProto, ShapeProto};

use crate::dtype::ElementType;

fn shape_text(shape: Option<&ShapeProto>) -> String {
    let Some(shape) = shape else {
        return "?".into();
    };
    if !shape.tuple_shapes.is_empty() {
        let parts: Vec<String> = shape
            .tuple_shapes
            .iter()
            .map(|s| shape_text(Some(s)))
            .collect();
        return format!("({})", parts.join(", "));
    }
    let dtype = ElementType::from_xla(shape.element_type).map_or_else(
        || match shape.element_type {
            17 => "token".to_string(),
            other => format!("type{other}"),
        },
        |t| t.name().to_string(),
    );
    let dims: Vec<String> = shape.dimensions.iter().map(|d| d.to_string()).collect();
    format!("{dtype}[{}]", dims.join(","))
}

/// Prints `module` as HLO-like text, entry computation last as XLA does.
pub fn module_text(module: &HloModuleProto) -> String {
    let names: HashMap<i64, &str> = module
        .computations
        .iter()
        .flat_map(|c| c.instructions.iter().map(|i| (i.id, i.name.as_str())))
        .collect();
    let computation_names: HashMap<i64, &str> = module
        .computations
        .iter()
        .map(|c| (c.id, c.name.as_str()))
        .collect();
    let mut out = format!("HloModule {}\n", module.name);
    let mut computations: Vec<_> = module.computations.iter().collect();
    computations.sort_by_key(|c| c.name == module.entry_computation_name);
    for c in computations {
        let entry = if c.name == module.entry_computation_name {
            "ENTRY "
        } else {
            ""
        };
        let _ = writeln!(out, "\n{entry}%{} {{", c.name);
        for i in &c.instructions {
            let root = if i.id == c.root_id { "ROOT " } else { "" };
            let mut operands: Vec<String> = i
                .operand_ids
                .iter()
                .map(|id| format!("%{}", names.get(id).copied().unwrap_or("?")))
                .collect();
            if i.opcode == "parameter" {
                operands.push(i.parameter_number.to_string());
            }
            let _ = write!(
                out,
                "  {root}%{} = {} {}({})",
                i.name,
                shape_text(i.shape.as_ref()),
                i.opcode,
                operands.join(", ")
            );
            if !i.dimensions.is_empty() {
                let _ = write!(
                    out,
                    ", dimensions={{{}}}",
                    i.dimensions
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
            for called in &i.called_computation_ids {
                let _ = write!(
                    out,
                    ", calls=%{}",
                    computation_names.get(called).copied().unwrap_or("?")
                );
            }
            out.push('\n');
        }
        out.push_str("}\n");
    }
    out
}
