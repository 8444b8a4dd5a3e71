//! `pjrt-actors run`: compile a module, run it once, print or save its outputs; and the
//! input handling `bench` shares (literals, `.npy` files, zeros, upload).

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{HostData, json_values, parse_literal, read_npy, write_npy};
use pjrt_actors::{Array, Client, CompileOptions, HostBuffer, LoadedExecutable, Result};

use crate::{Cli, open, usage};

/// `run`: compile a module, run it once on `device`, print or save its outputs.
pub fn run(
    cli: &Cli,
    module: &Path,
    inputs: &[String],
    device: i32,
    json: bool,
    outputs: &[String],
) -> Result<()> {
    // Check every --output before doing any work.
    let output_paths = outputs
        .iter()
        .map(|o| {
            o.strip_prefix('@')
                .map(PathBuf::from)
                .ok_or_else(|| usage(format!("--output `{o}`: expected @path.npy")))
        })
        .collect::<Result<Vec<_>>>()?;
    // Inputs parse before anything is compiled.
    for text in inputs {
        read_input(text)?;
    }
    let client = open(cli)?;
    let exe = load_module(&client, module, device)?;
    let inputs = inputs_for(&exe, inputs, false)?;
    let args = upload(&exe, &inputs)?;
    let refs: Vec<&Array> = args.iter().collect();
    let results = exe.execute(&refs)?;
    if output_paths.len() > results.len() {
        return Err(usage(format!(
            "{} --output given; the module has {} outputs",
            output_paths.len(),
            results.len()
        )));
    }
    let host: Vec<HostData> = results
        .iter()
        .map(|r| {
            Ok(HostData {
                dtype: r.dtype(),
                dims: r.dims().to_vec(),
                bytes: r.to_bytes()?,
            })
        })
        .collect::<Result<_>>()?;
    for (path, data) in output_paths.iter().zip(&host) {
        std::fs::write(path, write_npy(data)?)
            .map_err(|e| usage(format!("writing {}: {e}", path.display())))?;
    }
    if json {
        let items: Vec<String> = host
            .iter()
            .map(|h| {
                format!(
                    "{{\"dtype\":\"{}\",\"shape\":{},\"data\":{}}}",
                    h.dtype,
                    serde_json::to_string(&h.dims).unwrap_or_default(),
                    json_values(h)
                )
            })
            .collect();
        println!("{{\"outputs\":[{}]}}", items.join(","));
    } else {
        for (i, h) in host.iter().enumerate() {
            let dims: Vec<String> = h.dims.iter().map(|d| d.to_string()).collect();
            let ty = if dims.is_empty() {
                h.dtype.to_string()
            } else {
                format!("{}x{}", dims.join("x"), h.dtype)
            };
            println!("result[{i}]: {ty}={}", json_values(h));
        }
    }
    Ok(())
}

/// An `--input`: a literal, or `@path` to a `.npy` file.
fn read_input(text: &str) -> Result<HostData> {
    match text.strip_prefix('@') {
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| usage(format!("input `{text}`: cannot read {path}: {e}")))?;
            read_npy(&bytes).map_err(|e| usage(format!("input `{text}`: {e}")))
        }
        None => parse_literal(text),
    }
}

pub fn load_module(client: &Client, path: &Path, device: i32) -> Result<LoadedExecutable> {
    let program =
        std::fs::read(path).map_err(|e| usage(format!("module {}: {e}", path.display())))?;
    if device < 0 || device as usize >= client.device_count() {
        return Err(usage(format!(
            "--device {device}: the client has devices 0..{}",
            client.device_count()
        )));
    }
    let options = CompileOptions {
        devices: Some(vec![device]),
        ..Default::default()
    };
    client.compile_and_load(program, &options)
}

/// The inputs, checked against the program's parameters; zeros when `texts` is empty and
/// `zeros_if_none`.
pub fn inputs_for(
    exe: &LoadedExecutable,
    texts: &[String],
    zeros_if_none: bool,
) -> Result<Vec<HostData>> {
    let params = exe.parameter_types();
    if texts.is_empty() && zeros_if_none {
        return params
            .iter()
            .map(|p| {
                Ok(HostData {
                    dtype: p.dtype,
                    dims: p.dims.clone(),
                    bytes: vec![0; p.byte_size()?],
                })
            })
            .collect();
    }
    // Each input parses (and names itself in its error) before the count is checked.
    let inputs = texts
        .iter()
        .map(|t| read_input(t))
        .collect::<Result<Vec<_>>>()?;
    if texts.len() != params.len() {
        return Err(usage(format!(
            "the module takes {} inputs, {} --input given",
            params.len(),
            texts.len()
        )));
    }
    for (i, (input, p)) in inputs.iter().zip(params).enumerate() {
        if input.dtype != p.dtype || input.dims != p.dims {
            return Err(usage(format!(
                "input {i} (`{}`) is {}{:?}; the module expects {}{:?}",
                texts[i], input.dtype, input.dims, p.dtype, p.dims
            )));
        }
    }
    Ok(inputs)
}

pub fn upload(exe: &LoadedExecutable, inputs: &[HostData]) -> Result<Vec<Array>> {
    let client = exe.client();
    let device = &exe.addressable_devices()[0];
    inputs
        .iter()
        .map(|h| {
            client.buffer_from_host(HostBuffer::Copy(&h.bytes), h.dtype, &h.dims, device, None)
        })
        .collect()
}
