//! Tests of the module above, kept apart to hold it under the file-size limit.
use super::*;

fn entry(sha: &str) -> KnownDefect {
    KnownDefect::from_line(&format!(
        "cpu\t0.115\t1.20.0\t{sha}\tchlo.atan\tf64\tatan_float64_20_20_chlo\tanother"
    ))
    .unwrap()
}

#[test]
fn a_program_is_refused_only_on_the_build_and_the_pair_an_entry_names() {
    let f64_program = b"%1 = chlo.atan %0 : tensor<4xf64> -> tensor<4xf64>";
    let f32_program = b"%1 = chlo.atan %0 : tensor<4xf32> -> tensor<4xf32>";
    let path = Path::new("/plugin.so");
    let plugin = |api, stablehlo| PluginIdentity {
        platform: "cpu",
        api,
        stablehlo,
        path,
    };
    let sha = |_: &Path| Some("abc".to_string());
    let table = [entry("abc")];
    let refused = check_against(f64_program, &plugin((0, 115), "1.20.0"), &table, sha);
    match refused {
        Err(Error::KnownDefect {
            op,
            dtype,
            case,
            right_on,
            ..
        }) => {
            assert_eq!((op.as_str(), dtype.as_str()), ("chlo.atan", "f64"));
            assert_eq!(
                (case.as_str(), right_on.as_str()),
                ("atan_float64_20_20_chlo", "another")
            );
        }
        other => panic!("{other:?}"),
    }
    // Another dtype, another version, another build of the same versions: compiled.
    assert!(check_against(f32_program, &plugin((0, 115), "1.20.0"), &table, sha).is_ok());
    assert!(check_against(f64_program, &plugin((0, 106), "1.20.0"), &table, sha).is_ok());
    assert!(check_against(f64_program, &plugin((0, 115), "1.16.1"), &table, sha).is_ok());
    let other_build = |_: &Path| Some("def".to_string());
    assert!(
        check_against(
            f64_program,
            &plugin((0, 115), "1.20.0"),
            &table,
            other_build
        )
        .is_ok()
    );
    // An entry without a sha256 holds for every build of its versions.
    let any_build = [entry("")];
    assert!(
        check_against(
            f64_program,
            &plugin((0, 115), "1.20.0"),
            &any_build,
            other_build
        )
        .is_err()
    );
}

#[test]
fn a_fixable_entry_gives_its_options_for_the_op_by_name_and_refuses_nothing() {
    let fixable = KnownDefect::from_line(
        "cpu\t0.115\t1.20.0\tabc\tchlo.atan\tf64\tcase\tanother\txla_cpu_prefer_vector_width=128 xla_flag=true",
    )
    .unwrap();
    let path = Path::new("/plugin.so");
    let plugin = PluginIdentity {
        platform: "cpu",
        api: (0, 115),
        stablehlo: "1.20.0",
        path,
    };
    let sha = |_: &Path| Some("abc".to_string());
    let want = vec![
        (
            "xla_cpu_prefer_vector_width".to_string(),
            XlaOption::Int(128),
        ),
        ("xla_flag".to_string(), XlaOption::Bool(true)),
    ];
    let table = [fixable.clone()];
    // Any spelling of the types, and any dtype: the op by name.
    for program in [
        "%1 = chlo.atan %0 : tensor<4xf64> -> tensor<4xf64>",
        "!t = tensor<128 x f64>\n%1 = chlo.atan %0 : !t",
        "%1 = chlo.atan %0 : tensor<4xf32>",
        "%1 = chlo.atan %0 : tensor<4x\n f64>",
    ] {
        assert!(check_against(program.as_bytes(), &plugin, &table, sha).is_ok());
        assert_eq!(
            fixes_against(program.as_bytes(), &plugin, &table, sha),
            want,
            "{program}"
        );
    }
    // No op, another build, another version: nothing added.
    let none = "%1 = stablehlo.atan2 %0, %0 : tensor<4xf64>";
    assert!(fixes_against(none.as_bytes(), &plugin, &table, sha).is_empty());
    let program = b"%1 = chlo.atan %0 : tensor<4xf64>";
    let other_build = |_: &Path| Some("def".to_string());
    assert!(fixes_against(program, &plugin, &table, other_build).is_empty());
    let older = PluginIdentity {
        api: (0, 106),
        ..plugin
    };
    assert!(fixes_against(program, &older, &table, sha).is_empty());
    // The same entry without a fix refuses whatever the spelling of the type.
    let unfixable = [KnownDefect {
        fix: String::new(),
        ..fixable
    }];
    for program in [
        "!t = tensor<128 x f64>\n%1 = chlo.atan %0 : !t",
        "!e = f64\n!t = tensor<128x!e>\n%1 = chlo.atan %0 : !t",
        "%1 = chlo.atan %0 : tensor<4x\n f64>",
        "%1 = chlo.atan %0 : !unknown",
    ] {
        let plugin = PluginIdentity {
            api: (0, 115),
            ..older
        };
        assert!(
            check_against(program.as_bytes(), &plugin, &unfixable, sha).is_err(),
            "{program}"
        );
    }
}

#[test]
fn the_shipped_table_reads_whole_and_lines_round_trip() {
    let table = known_defects();
    assert!(table.len() >= 4, "{table:?}");
    for d in table {
        assert_eq!(KnownDefect::from_line(&d.to_line()).as_ref(), Some(d));
        assert_eq!(d.plugin_sha256.len(), 64, "{d:?}");
    }
    assert_eq!(COLUMNS.len(), table[0].to_line().split('\t').count());
}
