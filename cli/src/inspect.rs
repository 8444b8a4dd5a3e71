//! `pjrt-actors inspect`: a serialized `jax.export` artifact's signature, as a caller needs it
//! (argument paths, types, shardings, what the module keeps), without opening a client.

use std::path::Path;

use pjrt_actors::Result;
use pjrt_actors::export::Exported;

use crate::common::usage;

pub fn inspect(path: &Path, json: bool) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let e = Exported::parse(&bytes)?;
    let sharding = |s: &Option<pjrt_actors::export::ExportedSharding>| {
        s.as_ref()
            .map_or("unspecified".to_string(), |s| s.to_string())
    };
    if json {
        let side = |paths: Vec<String>, avals: &[pjrt_actors::export::Aval], shardings: &[_]| {
            (paths.iter().enumerate())
                .map(|(i, p)| {
                    serde_json::json!({
                        "path": p,
                        "type": avals.get(i).map(|a| a.to_string()),
                        "sharding": shardings.get(i).map(sharding),
                    })
                })
                .collect::<Vec<_>>()
        };
        let v = serde_json::json!({
            "function": e.function_name,
            "inputs": side(e.in_paths(), &e.in_avals, &e.in_shardings),
            "outputs": side(e.out_paths(), &e.out_avals, &e.out_shardings),
            "platforms": e.platforms,
            "nr_devices": e.nr_devices,
            "calling_convention_version": e.calling_convention_version,
            "module_kept_var_idx": e.module_kept_var_idx,
            "uses_global_constants": e.uses_global_constants,
            "ordered_effects": e.ordered_effects,
            "unordered_effects": e.unordered_effects,
            "disabled_checks": e.disabled_checks,
            "module_bytes": e.module.len(),
            "serialization_version": e.serialization_version,
            "jax_version": e.jax_version,
        });
        out!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    out!(
        "{} (calling convention {}, {} device(s), platforms {})",
        e.function_name,
        e.calling_convention_version,
        e.nr_devices,
        e.platforms.join(", ")
    );
    out!("inputs:");
    for (i, path) in e.in_paths().iter().enumerate() {
        let kept = if e.module_kept_var_idx.contains(&(i as u16)) {
            ""
        } else {
            "  (unused: dropped)"
        };
        out!(
            "  {path:<32} {:<24} {}{kept}",
            e.in_avals[i].to_string(),
            sharding(&e.in_shardings.get(i).cloned().flatten())
        );
    }
    out!("outputs:");
    for (i, path) in e.out_paths().iter().enumerate() {
        out!(
            "  {path:<32} {:<24} {}",
            e.out_avals[i].to_string(),
            sharding(&e.out_shardings.get(i).cloned().flatten())
        );
    }
    if !e.ordered_effects.is_empty() || !e.unordered_effects.is_empty() {
        out!(
            "effects: ordered {:?}, unordered {:?}",
            e.ordered_effects,
            e.unordered_effects
        );
    }
    if !e.disabled_checks.is_empty() {
        out!("disabled checks: {}", e.disabled_checks.join(", "));
    }
    if e.uses_global_constants {
        out!("shape-polymorphic: uses global constants (symbolic dimensions)");
    }
    out!("module: {} bytes of StableHLO bytecode", e.module.len());
    out!(
        "serialized: version {}{}",
        e.serialization_version,
        e.jax_version
            .as_ref()
            .map_or(String::new(), |v| format!(", by jax {v}"))
    );
    Ok(())
}
