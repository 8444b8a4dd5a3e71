//! `pjrt-actors devices`: what the plugin offers, as a table or as JSON.

use pjrt_actors::{Client, NamedValue, Result};
use serde_json::{Value, json};

use crate::common::{GlobalArgs, open};

/// `devices`: the client's devices and their memory spaces, as a table or JSON.
pub fn devices(cli: &GlobalArgs, json: bool) -> Result<()> {
    let client = open(cli)?;
    if json {
        out!(
            "{}",
            serde_json::to_string_pretty(&devices_json(&client)).unwrap_or_default()
        );
    } else {
        print_devices_table(&client);
    }
    Ok(())
}

fn named_value_json(v: &NamedValue) -> Value {
    match v {
        NamedValue::String(s) => json!(s),
        NamedValue::Int64(i) => json!(i),
        NamedValue::Int64List(l) => json!(l),
        NamedValue::Float(f) => json!(f),
        NamedValue::Bool(b) => json!(b),
    }
}

fn devices_json(client: &Client) -> Value {
    let devices: Vec<Value> = client
        .devices()
        .iter()
        .map(|d| {
            let default = d.default_memory_space().ok().map(|m| m.id());
            json!({
                "id": d.id(),
                "kind": d.kind(),
                "process_index": d.process_index(),
                "local_hardware_id": d.local_hardware_id(),
                "addressable": d.is_addressable(),
                "debug_string": d.debug_string(),
                "display_string": d.display_string(),
                "attributes": d.attributes().iter().map(|(k, v)| (k.clone(), named_value_json(v))).collect::<serde_json::Map<_, _>>(),
                "memory_spaces": d.memory_spaces().iter().map(|m| json!({
                    "id": m.id(),
                    "kind": m.kind(),
                    "kind_id": m.kind_id(),
                    "default": Some(m.id()) == default,
                    "debug_string": m.debug_string(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "platform": client.platform(),
        "platform_version": client.platform_version(),
        "plugin": client.plugin_path().display().to_string(),
        "api_version": [client.plugin_api_version().0, client.plugin_api_version().1],
        // Kept for readers of the first name.
        "pjrt_c_api_version": [client.plugin_api_version().0, client.plugin_api_version().1],
        // The newest StableHLO the plugin parses (a portable artifact newer than this is not).
        "stablehlo_version": client
            .plugin_attribute("stablehlo_current_version")
            .map(named_value_json),
        "stablehlo_minimum_version": client
            .plugin_attribute("stablehlo_minimum_version")
            .map(named_value_json),
        "plugin_attributes": client.plugin_attributes().iter().map(|(k, v)| (k.clone(), named_value_json(v))).collect::<serde_json::Map<_, _>>(),
        "devices": devices,
    })
}

fn print_devices_table(client: &Client) {
    let (major, minor) = client.plugin_api_version();
    out!(
        "platform {} (version {}), PJRT C API {major}.{minor}, plugin {}",
        client.platform(),
        client.platform_version(),
        client.plugin_path().display()
    );
    out!(
        "{:>3}  {:<6} {:>5}  {:<28} {:>4}  {:<14} {:<8}",
        "id",
        "kind",
        "hw id",
        "device",
        "mem",
        "memory kind",
        "default"
    );
    for d in client.devices() {
        let default = d.default_memory_space().ok();
        for (i, m) in d.memory_spaces().iter().enumerate() {
            let (id, kind, hw, name) = if i == 0 {
                (
                    d.id().to_string(),
                    d.kind().to_string(),
                    d.local_hardware_id().map_or("-".into(), |h| h.to_string()),
                    d.display_string().to_string(),
                )
            } else {
                Default::default()
            };
            let is_default = if default.as_ref() == Some(m) {
                "yes"
            } else {
                ""
            };
            out!(
                "{id:>3}  {kind:<6} {hw:>5}  {name:<28} {:>4}  {:<14} {is_default:<8}",
                m.id(),
                m.kind()
            );
        }
    }
}
