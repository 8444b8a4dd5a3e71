//! Loading the served models: from `--model NAME=PATH` (with `--params` and `--config`) or a
//! model repository (one folder per model), each with a config in Triton's terms; anything
//! refused says why. An `.exported` artifact serves its free inputs batched and its weights
//! resident; an MLIR program serves every parameter batched.

use crate::files::read;
use std::path::{Path, PathBuf};

use pjrt_actors::export::dotted_path;
use pjrt_actors::serving::{BatchModel, Batcher};
use pjrt_actors::{Client, Result};
use serde_json::Value;

use super::config::{KEYS, batcher_config, refused};
use super::kserve::{ServedModel, TensorSpec};
use super::wire::shown;
use crate::common::usage;

/// One model to load: its name, program, weights and config file.
pub struct ModelSource {
    pub name: String,
    pub program: PathBuf,
    pub params: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

/// Whether `dir` holds a generation model (its decode export; whatever kind of file it is,
/// so that one that is not a regular file is refused as such when it is read).
pub fn is_generation_dir(dir: &Path) -> bool {
    dir.join("decode.exported").symlink_metadata().is_ok()
}

/// The generation models of a model repository: each folder holding `decode.exported`, by
/// name, its files checked to stay inside the repository.
pub fn generation_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let root = (dir.canonicalize())
        .map_err(|e| usage(format!("model repository {}: {e}", dir.display())))?;
    let mut found = Vec::new();
    for e in (std::fs::read_dir(&root))
        .map_err(|e| usage(format!("model repository {}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
    {
        let folder = e.path();
        if !folder.is_dir() || !is_generation_dir(&folder) {
            continue;
        }
        for f in std::fs::read_dir(&folder)
            .map_err(|e| usage(e.to_string()))?
            .flatten()
        {
            let real = (f.path().canonicalize()).map_err(|e| usage(e.to_string()))?;
            if !real.starts_with(&root) {
                return Err(usage(format!(
                    "{} leads out of the model repository {}",
                    f.path().display(),
                    root.display()
                )));
            }
        }
        found.push((e.file_name().to_string_lossy().to_string(), folder));
    }
    found.sort();
    Ok(found)
}

/// The models of a repository: each folder `NAME` holding `model.exported` (or
/// `.jax_exported`, `.mlir`), optionally `weights.safetensors` (or `.npz`) and `config.json`.
/// Every file must lie inside the repository (a link out of it is refused).
pub fn repository(dir: &Path) -> Result<Vec<ModelSource>> {
    let root = (dir.canonicalize())
        .map_err(|e| usage(format!("model repository {}: {e}", dir.display())))?;
    let mut entries: Vec<_> = (std::fs::read_dir(&root))
        .map_err(|e| usage(format!("model repository {}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let inside = |p: PathBuf| -> Result<Option<PathBuf>> {
        if !p.exists() {
            return Ok(None);
        }
        let real = p
            .canonicalize()
            .map_err(|e| usage(format!("{}: {e}", p.display())))?;
        match real.starts_with(&root) {
            true => Ok(Some(real)),
            false => Err(usage(format!(
                "{} leads out of the model repository {}",
                p.display(),
                root.display()
            ))),
        }
    };
    let mut models = Vec::new();
    for e in entries {
        let name = e.file_name().to_string_lossy().to_string();
        let folder = e.path();
        // A generation model's folder is read by `generation_folders`.
        if is_generation_dir(&folder) {
            continue;
        }
        let pick = |names: &[&str]| -> Result<Option<PathBuf>> {
            for n in names {
                if let Some(p) = inside(folder.join(n))? {
                    return Ok(Some(p));
                }
            }
            Ok(None)
        };
        let program =
            pick(&["model.exported", "model.jax_exported", "model.mlir"])?.ok_or_else(|| {
                refused(
                    &name,
                    "its folder has no model.exported, model.jax_exported or model.mlir",
                )
            })?;
        models.push(ModelSource {
            params: pick(&["weights.safetensors", "weights.npz"])?,
            config: pick(&["config.json"])?,
            name,
            program,
        });
    }
    if models.is_empty() && generation_folders(dir)?.is_empty() {
        return Err(usage(format!(
            "model repository {} has no model folders",
            dir.display()
        )));
    }
    Ok(models)
}

/// `NAME=VALUE` as a pair.
pub fn named(flag: &str, text: &str) -> Result<(String, PathBuf)> {
    match text.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n.to_string(), PathBuf::from(v))),
        _ => Err(usage(format!("{flag} takes NAME=PATH, got `{text}`"))),
    }
}

/// A short name for an input path: its last dict key or index where no other input has it,
/// else the whole dotted path (`[0][1]['tokens']` is `tokens`).
fn short_names(paths: &[String]) -> Vec<String> {
    let dotted: Vec<String> = paths.iter().map(|p| dotted_path(p)).collect();
    let last = |d: &str| d.rsplit('.').next().unwrap_or(d).to_string();
    (dotted.iter())
        .map(|d| {
            let l = last(d);
            let unique = dotted.iter().filter(|o| last(o) == l).count() == 1;
            if unique && !l.is_empty() && l.parse::<usize>().is_err() {
                l
            } else {
                d.clone()
            }
        })
        .collect()
}

/// Loads one model: its program and weights, its config, and its batcher.
pub fn load(client: &Client, source: &ModelSource) -> Result<ServedModel> {
    let name = &source.name;
    let config = match &source.config {
        Some(p) => serde_json::from_slice::<Value>(&read(p, "config")?)
            .map_err(|e| refused(name, format!("config {}: {e}", p.display())))?,
        None => Value::Object(Default::default()),
    };
    let config_map = config
        .as_object()
        .ok_or_else(|| refused(name, "its config is not a JSON object"))?;
    if let Some(k) = config_map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(refused(
            name,
            format!(
                "its config has `{k}`, which is not one of {}",
                KEYS.join(", ")
            ),
        ));
    }
    let is_export = matches!(
        source.program.extension().and_then(|e| e.to_str()),
        Some("exported" | "jax_exported")
    );
    let bytes = read(&source.program, "model")?;
    let (model, inputs_names, outputs_names, platform, export_rows) = if is_export {
        let mut m = client.load_exported(&bytes)?;
        if let Some(p) = &source.params {
            m.load_params(&read(p, "weights")?)?;
        }
        let free = m.free_inputs();
        let batched: Vec<String> = match config.get("batched_inputs") {
            Some(v) => (v.as_array().into_iter().flatten())
                .map(|s| s.as_str().map(String::from))
                .collect::<Option<_>>()
                .ok_or_else(|| refused(name, "batched_inputs is a list of input paths"))?,
            None => free.clone(),
        };
        let refs: Vec<&str> = batched.iter().map(String::as_str).collect();
        let served = m.batch_model(name.clone(), &refs)?;
        let out_paths = m.signature().out_paths();
        let outs = (out_paths.iter().enumerate())
            .map(|(k, p)| {
                if p.is_empty() {
                    format!("output{k}")
                } else {
                    short_names(&out_paths)[k].clone()
                }
            })
            .collect();
        let rows = served.fixed_batch_size();
        let names = match config.get("batched_inputs") {
            Some(_) => batched.clone(),
            None => short_names(&free),
        };
        (served, names, outs, "jax_exported", rows)
    } else {
        if source.params.is_some() {
            return Err(refused(
                name,
                "--params gives a jax.export artifact's weights; this is an MLIR program",
            ));
        }
        if let Some(v) = config.get("batched_inputs") {
            return Err(refused(
                name,
                format!(
                    "its config has batched_inputs {}, which name a jax.export artifact's inputs; an MLIR program batches every parameter",
                    shown(&v.to_string())
                ),
            ));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            refused(name, "an MLIR program is served from its text (MLIR bytecode: export it with jax.export)")
        })?;
        let exe = client.compile_and_load(&text, &pjrt_actors::CompileOptions::default())?;
        let params = exe.parameter_types();
        let Some(rows) = params
            .first()
            .and_then(|p| p.dims.first())
            .map(|&r| r as usize)
        else {
            return Err(refused(name, "its first parameter has no rows to batch"));
        };
        let ins = (0..params.len()).map(|k| format!("input{k}")).collect();
        let outs = (0..exe.num_outputs())
            .map(|k| format!("output{k}"))
            .collect();
        (
            BatchModel::from_program(name.clone(), params.len(), text, rows),
            ins,
            outs,
            "mlir",
            None,
        )
    };
    let (batcher_config, policy) = batcher_config(name, &config, export_rows)?;
    let batcher = Batcher::start(client, model, batcher_config)?;
    let spec = |names: Vec<String>, types: &[pjrt_actors::ArrayType]| -> Vec<TensorSpec> {
        (names.into_iter().zip(types))
            .map(|(name, t)| TensorSpec {
                name,
                dtype: t.dtype,
                dims: t.dims.clone(),
            })
            .collect()
    };
    let (mut inputs, mut outputs) = (
        spec(inputs_names, batcher.input_types()),
        spec(outputs_names, batcher.output_types()),
    );
    if let Some(given) = config.get("input") {
        super::triton::rename(name, "input", &mut inputs, given)?;
    }
    if let Some(given) = config.get("output") {
        super::triton::rename(name, "output", &mut outputs, given)?;
    }
    Ok(ServedModel {
        name: name.clone(),
        platform,
        inputs,
        outputs,
        batcher,
        policy,
    })
}
