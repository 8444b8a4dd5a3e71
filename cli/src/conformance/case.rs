//! One StableHLO interpreter test case (`stablehlo/testdata/*.mlir`): its op and dtype from its
//! name, and the two programs that run it on a plugin: one that returns its inputs' values, and
//! its `main` with those inputs as parameters and every `check.expect_*` call's operands returned.

/// How a check compares (the interpreter's tolerances for its `custom_call @check.*` form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    /// Every element equal (NaN matches NaN).
    Eq,
    /// Within 3 ULP (`check.expect_close`; NaN matches NaN, infinities must be equal).
    Close,
    /// Within 0.001 absolute (`check.expect_almost_eq`).
    AlmostEq,
}

/// A case made ready to run.
#[derive(Debug)]
pub struct Prepared {
    /// A program returning the values of `call @inputs()`, when the case has inputs: run first,
    /// so the inputs reach the case as parameters, not constants XLA would fold at compile time
    /// (its folding is the HLO evaluator's arithmetic, not the plugin's kernels).
    pub inputs: Option<String>,
    /// The case's `main` taking those inputs and returning each check's (actual, expected).
    pub program: String,
    pub checks: Vec<CheckKind>,
    /// The ops `main` computes with, other than calls, constants and returns (`chlo.atan`).
    pub ops: Vec<String>,
}

/// Dtype names the test data's file names use.
const DTYPES: [&str; 20] = [
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
];

/// A case's op and dtype from its file name (`atan_float64_20_20_chlo` → `atan (chlo)`,
/// `float64`); `other` for a name without a dtype.
pub fn op_and_dtype(name: &str) -> (String, String) {
    let tokens: Vec<&str> = name.split('_').collect();
    // The longest dtype name that starts at a token (float8_e4m3fn spans two tokens).
    for i in 0..tokens.len() {
        let mut best = None;
        for dtype in DTYPES {
            let n = dtype.split('_').count();
            if i + n <= tokens.len() && tokens[i..i + n].join("_") == dtype {
                best = Some(dtype);
            }
        }
        if let Some(dtype) = best {
            let mut op = tokens[..i].join("_");
            if tokens.last() == Some(&"chlo") {
                op.push_str(" (chlo)");
            }
            return (op, dtype.to_string());
        }
    }
    (name.trim_end_matches('_').to_string(), "other".into())
}

/// Splits a type list (`tensor<2xf32>, tensor<3xcomplex<f64>>`) at its top-level commas.
pub fn split_types(list: &str) -> Vec<String> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = list[start..].trim();
    if !last.is_empty() {
        out.push(last.to_string());
    }
    out
}

/// Strips one pair of enclosing parentheses: `(a, b)` → `a, b`.
fn unparen(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(s)
}

/// The lines of `main`'s body, and where `main` starts and ends in `lines`.
fn main_span(lines: &[&str]) -> Option<(usize, usize)> {
    let start = lines
        .iter()
        .position(|l| l.contains("func.func public @main("))?;
    let indent = lines[start].len() - lines[start].trim_start().len();
    let end = (start + 1..lines.len()).find(|&i| {
        let l = lines[i];
        l.trim() == "}" && l.len() - l.trim_start().len() == indent
    })?;
    Some((start, end))
}

/// Makes a case ready to run; `Err` says why its form is not supported.
pub fn prepare(text: &str) -> Result<Prepared, String> {
    if text.contains("-split-input-file") {
        return Err("several modules in one file (-split-input-file)".into());
    }
    let lines: Vec<&str> = text.lines().collect();
    let (start, end) = main_span(&lines).ok_or("no `func.func public @main(`")?;
    if !lines[start].contains("@main()") {
        return Err("main takes arguments".into());
    }
    let mut body = Vec::new();
    let mut checked: Vec<(String, String)> = Vec::new();
    let mut checks = Vec::new();
    let mut inputs: Option<(String, Vec<String>)> = None;
    let mut ops = Vec::new();
    for line in &lines[start + 1..end] {
        let t = line.trim();
        if let Some(call) = t.strip_prefix("stablehlo.custom_call @check.") {
            let (kind, rest) = call.split_once('(').ok_or("a check without operands")?;
            let kind = match kind {
                "expect_eq" => CheckKind::Eq,
                "expect_close" => CheckKind::Close,
                "expect_almost_eq" => CheckKind::AlmostEq,
                other => return Err(format!("check.{other} is not supported")),
            };
            let (operands, _) = rest.split_once(')').ok_or("a check without `)`")?;
            let operands = split_types(operands);
            let types = t
                .rsplit_once(" : ")
                .map(|(_, ty)| ty)
                .ok_or("an untyped check")?;
            let types = split_types(unparen(types.split(" -> ").next().unwrap_or("")));
            if operands.len() != 2 || types.len() != 2 {
                return Err("a check without two operands".into());
            }
            for (o, ty) in operands.into_iter().zip(types) {
                checked.push((o, ty));
            }
            checks.push(kind);
            continue;
        }
        if t.contains("@check.") {
            return Err("a check whose result is used (check.eq)".into());
        }
        if let Some((lhs, call)) = t.split_once(" = call @inputs() : () -> ") {
            inputs = Some((lhs.to_string(), split_types(unparen(call))));
            continue;
        }
        if t.starts_with("return ") || t.starts_with("func.return ") {
            continue;
        }
        if let Some(op) = op_name(t)
            && !matches!(
                op.as_str(),
                "call" | "func.call" | "stablehlo.constant" | "stablehlo.custom_call"
            )
            && !ops.contains(&op)
        {
            ops.push(op);
        }
        body.push(line.to_string());
    }
    if checks.is_empty() {
        return Err("no check.expect_* call".into());
    }
    let result_types: Vec<&str> = checked.iter().map(|(_, t)| t.as_str()).collect();
    let returned: Vec<&str> = checked.iter().map(|(v, _)| v.as_str()).collect();
    let indent = "    ";
    let mut program: Vec<String> = lines[..start].iter().map(|l| l.to_string()).collect();
    let mut params = String::new();
    let mut call_line = None;
    if let Some((lhs, types)) = &inputs {
        params = (types.iter().enumerate())
            .map(|(i, t)| format!("%conformance_in{i}: {t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let args: Vec<String> = (0..types.len())
            .map(|i| format!("%conformance_in{i}"))
            .collect();
        call_line = Some(format!(
            "{indent}{lhs} = call @conformance_inputs({}) : ({}) -> ({})",
            args.join(", "),
            types.join(", "),
            types.join(", ")
        ));
    }
    program.push(format!(
        "  func.func public @main({params}) -> ({}) {{",
        result_types.join(", ")
    ));
    program.extend(call_line);
    program.extend(body);
    program.push(format!(
        "{indent}return {} : {}",
        returned.join(", "),
        result_types.join(", ")
    ));
    program.push("  }".into());
    let inputs_program = inputs.as_ref().map(|(_, types)| {
        let mut p: Vec<String> = lines[..start].iter().map(|l| l.to_string()).collect();
        let values: Vec<String> = (0..types.len()).map(|i| format!("%v#{i}")).collect();
        p.push(format!(
            "  func.func public @main() -> ({}) {{",
            types.join(", ")
        ));
        p.push(format!(
            "{indent}%v:{} = call @inputs() : () -> ({})",
            types.len(),
            types.join(", ")
        ));
        p.push(format!(
            "{indent}return {} : {}",
            values.join(", "),
            types.join(", ")
        ));
        p.push("  }".into());
        p.extend(lines[end + 1..].iter().map(|l| l.to_string()));
        p.join("\n")
    });
    if let Some((_, types)) = &inputs {
        // The inputs, passed through a function of their own so `main`'s uses stay as written.
        let args: Vec<String> = (types.iter().enumerate())
            .map(|(i, t)| format!("%a{i}: {t}"))
            .collect();
        let names: Vec<String> = (0..types.len()).map(|i| format!("%a{i}")).collect();
        program.push(format!(
            "  func.func private @conformance_inputs({}) -> ({}) {{",
            args.join(", "),
            types.join(", ")
        ));
        program.push(format!(
            "{indent}return {} : {}",
            names.join(", "),
            types.join(", ")
        ));
        program.push("  }".into());
    }
    program.extend(lines[end + 1..].iter().map(|l| l.to_string()));
    Ok(Prepared {
        inputs: inputs_program,
        program: program.join("\n"),
        checks,
        ops,
    })
}

/// The op a line of `main` runs: `chlo.atan` of `%2 = chlo.atan %0 : …`, `stablehlo.add` of
/// `%1 = "stablehlo.add"(…)`.
fn op_name(line: &str) -> Option<String> {
    let rest = match line.split_once(" = ") {
        Some((lhs, rhs)) if lhs.starts_with('%') => rhs,
        _ => line,
    };
    let rest = rest.trim_start_matches('"');
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_op_and_dtype() {
        let cases = [
            ("atan_float64_20_20_chlo", ("atan (chlo)", "float64")),
            ("abs_int8_20_20", ("abs", "int8")),
            ("add_any_complex64_2_complex64_2", ("add_any", "complex64")),
            (
                "convert_float8_e4m3fn_3_float32",
                ("convert", "float8_e4m3fn"),
            ),
            ("iota_", ("iota", "other")),
        ];
        for (name, (op, dtype)) in cases {
            assert_eq!(
                op_and_dtype(name),
                (op.to_string(), dtype.to_string()),
                "{name}"
            );
        }
    }

    #[test]
    fn type_lists_split_at_top_level_commas() {
        assert_eq!(
            split_types("tensor<2xf32>, tensor<3xcomplex<f64>>"),
            ["tensor<2xf32>", "tensor<3xcomplex<f64>>"]
        );
        assert_eq!(split_types("%0#1, %1"), ["%0#1", "%1"]);
    }

    const CASE: &str = r#"// RUN: stablehlo-translate --interpret
module @jit_main attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main() -> (tensor<2xf64> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2xf64>, tensor<2xf64>)
    %1 = call @expected() : () -> tensor<2xf64>
    %2 = stablehlo.atan2 %0#0, %0#1 : tensor<2xf64>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true} : (tensor<2xf64>, tensor<2xf64>) -> ()
    return %2 : tensor<2xf64>
  }
  func.func private @inputs() -> (tensor<2xf64> {mhlo.layout_mode = "default"}, tensor<2xf64>) {
    %cst = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf64>
    %cst_0 = stablehlo.constant dense<1.0> : tensor<2xf64>
    return %cst, %cst_0 : tensor<2xf64>, tensor<2xf64>
  }
  func.func private @expected() -> (tensor<2xf64> {mhlo.layout_mode = "default"}) {
    %cst = stablehlo.constant dense<[0.78539816339744828, 1.1071487177940904]> : tensor<2xf64>
    return %cst : tensor<2xf64>
  }
}"#;

    #[test]
    fn a_case_becomes_an_inputs_program_and_a_main_with_parameters() {
        let p = prepare(CASE).unwrap();
        assert_eq!(p.checks, [CheckKind::Close]);
        assert_eq!(p.ops, ["stablehlo.atan2"]);
        let inputs = p.inputs.unwrap();
        assert!(inputs.contains("%v:2 = call @inputs()"), "{inputs}");
        assert!(
            inputs.contains("return %v#0, %v#1 : tensor<2xf64>, tensor<2xf64>"),
            "{inputs}"
        );
        let main = &p.program;
        assert!(
            main.contains("@main(%conformance_in0: tensor<2xf64>, %conformance_in1: tensor<2xf64>) -> (tensor<2xf64>, tensor<2xf64>)"),
            "{main}"
        );
        assert!(
            main.contains("return %2, %1 : tensor<2xf64>, tensor<2xf64>"),
            "{main}"
        );
        assert!(!main.contains("@check."), "{main}");
        assert!(
            main.contains("func.func private @conformance_inputs("),
            "{main}"
        );
    }

    #[test]
    fn forms_it_cannot_run_say_why() {
        let table = [
            (
                CASE.replace("expect_close", "expect_serialized_eq"),
                "not supported",
            ),
            (
                CASE.replace("@main()", "@main(%x: tensor<f32>)"),
                "arguments",
            ),
            (
                "// RUN: -split-input-file\n".to_string() + CASE,
                "split-input-file",
            ),
            ("module {}".to_string(), "@main("),
        ];
        for (text, says) in table {
            let err = prepare(&text).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
