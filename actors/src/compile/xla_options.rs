//! XLA debug options by name, as the plugin takes them (`env_option_overrides`, applied over
//! its own defaults): JAX's defaults, the caller's, and the one byte encoding of compile options
//! that cache keys are made from.

use std::collections::HashMap;

use pjrt_actors_formats::protos::xla::{
    CompileOptionsProto, OptionOverrideProto, option_override_proto::Value as OverrideValue,
};
use prost::Message as _;

/// A value for one XLA debug option.
#[derive(Debug, Clone, PartialEq)]
pub enum XlaOption {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

/// The debug options JAX's `CompileOptions` sets over XLA's defaults on every compile, set here
/// too so that results match JAX's: XLA's "fast" min and max (its default) drop NaN, so
/// `max([1, nan])` would be 1 (and a `jnp.max` over NaN and inf gives inf), where JAX gives
/// NaN. A caller's `xla_options`, its proto's overrides or the flag named in `XLA_FLAGS` win.
pub const JAX_DEBUG_OPTIONS: [(&str, bool); 2] = [
    ("xla_cpu_enable_fast_min_max", false),
    ("xla_gpu_enable_fast_min_max", false),
];

/// Adds JAX's debug options where neither the caller (its proto or `xla_options`) nor
/// `XLA_FLAGS` (`flags`) names them, then the caller's `xla_options` over everything.
pub(crate) fn set_overrides(
    overrides: &mut HashMap<String, OptionOverrideProto>,
    options: &[(String, XlaOption)],
    flags: &str,
) {
    for (name, value) in JAX_DEBUG_OPTIONS {
        let in_flags = (flags.match_indices(name)).any(|(at, _)| flags[..at].ends_with("--"));
        if !in_flags {
            (overrides.entry(name.into())).or_insert(OptionOverrideProto {
                value: Some(OverrideValue::BoolField(value)),
            });
        }
    }
    for (name, value) in options {
        let value = match value.clone() {
            XlaOption::Bool(b) => OverrideValue::BoolField(b),
            XlaOption::Int(i) => OverrideValue::IntField(i),
            XlaOption::Float(f) => OverrideValue::DoubleField(f),
            XlaOption::Text(t) => OverrideValue::StringField(t),
        };
        overrides.insert(name.clone(), OptionOverrideProto { value: Some(value) });
    }
}

/// The bytes of compile options, the same for the same options in every process: prost writes
/// a map in its hash order, which differs between processes, and these bytes are compile cache
/// keys. The overrides go last, one message each in name order (protobuf merges concatenated
/// messages, and a map's entries are repeated fields).
pub fn encode_options(proto: &CompileOptionsProto) -> Vec<u8> {
    let mut rest = proto.clone();
    let overrides = std::mem::take(&mut rest.env_option_overrides);
    let mut bytes = Vec::with_capacity(proto.encoded_len());
    rest.encode(&mut bytes).expect("a Vec grows as needed");
    let mut names: Vec<_> = overrides.into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, value) in names {
        let one = CompileOptionsProto {
            env_option_overrides: HashMap::from([(name, value)]),
            ..Default::default()
        };
        one.encode(&mut bytes).expect("a Vec grows as needed");
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jax_debug_options_yield_to_the_caller_and_to_xla_flags() {
        let value = |o: &HashMap<String, OptionOverrideProto>, name: &str| {
            o.get(name).and_then(|v| v.value.clone())
        };
        let off = Some(OverrideValue::BoolField(false));
        let on = Some(OverrideValue::BoolField(true));
        let mine = [(
            "xla_gpu_enable_fast_min_max".to_string(),
            XlaOption::Bool(true),
        )];
        // (caller's options, XLA_FLAGS, cpu value, gpu value)
        let cases: [(&[(String, XlaOption)], &str, _, _); 4] = [
            (&[], "", off.clone(), off.clone()),
            (&mine, "", off.clone(), on.clone()),
            (&[], "--xla_cpu_enable_fast_min_max=true", None, off.clone()),
            (
                &mine,
                "--xla_gpu_enable_fast_min_max=false",
                off.clone(),
                on.clone(),
            ),
        ];
        for (options, flags, cpu, gpu) in cases {
            let mut overrides = HashMap::new();
            set_overrides(&mut overrides, options, flags);
            assert_eq!(
                value(&overrides, "xla_cpu_enable_fast_min_max"),
                cpu,
                "{flags}"
            );
            assert_eq!(
                value(&overrides, "xla_gpu_enable_fast_min_max"),
                gpu,
                "{flags}"
            );
        }
    }

    #[test]
    fn options_encode_the_same_whatever_the_map_order_and_decode_back() {
        let mut proto = CompileOptionsProto::default();
        for i in 0..16 {
            proto.env_option_overrides.insert(
                format!("xla_option_{i}"),
                OptionOverrideProto {
                    value: Some(OverrideValue::IntField(i)),
                },
            );
        }
        let bytes = encode_options(&proto);
        // A map rebuilt in another order (another hasher's) encodes to the same bytes.
        let mut reversed = proto.clone();
        let mut entries: Vec<_> = proto.env_option_overrides.clone().into_iter().collect();
        entries.reverse();
        reversed.env_option_overrides = entries.into_iter().collect();
        assert_eq!(encode_options(&reversed), bytes);
        assert_eq!(CompileOptionsProto::decode(&bytes[..]).unwrap(), proto);
    }
}
