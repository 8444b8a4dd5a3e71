//! `pjrt-actors run`: compile a module, run it once, print or save its outputs; and the
//! input handling `bench` shares (literals, `.npy` files, zeros, upload).

use std::path::{Path, PathBuf};

use pjrt_actors::host_data::{
    HostArray, npy_supports, read_npy, retyped_void, void_reads_as, write_npy,
};
use pjrt_actors::{Array, Client, CompileOptions, LoadedExecutable, Result};

use crate::common::{GlobalArgs, open, usage};
use crate::literal::{LITERAL_LIMIT, json_values, parse_literal};

/// What `run` was asked: its flags.
pub struct RunSpec<'a> {
    pub module: &'a Path,
    pub inputs: &'a [String],
    pub device: i32,
    pub json: bool,
    pub outputs: &'a [String],
    pub timeout: Option<f64>,
    pub partitions: Option<usize>,
    pub params: Option<&'a Path>,
}

/// `run`: compile a module, run it once on `device` (an SPMD program on its devices), print or
/// save its outputs.
pub fn run(cli: &GlobalArgs, spec: &RunSpec<'_>) -> Result<()> {
    let RunSpec {
        module,
        inputs,
        json,
        outputs,
        timeout,
        ..
    } = *spec;
    let timeout = timeout.map(timeout_of).transpose()?;
    // 0 while opening and compiling, 1 once running: for the deadline's message.
    let stage = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    if let Some(limit) = timeout {
        arm_deadline(limit, stage.clone());
    }
    // Check every --output before doing any work: its form, and that it can be written.
    let output_paths = outputs
        .iter()
        .map(|o| check_output(o))
        .collect::<Result<Vec<_>>>()?;
    // Inputs are read (each once: `@/dev/stdin` works) and parsed before anything compiles.
    let parsed = read_inputs(inputs)?;
    if spec.params.is_some() && !is_export(module) {
        return Err(usage(format!(
            "--params gives a jax.export artifact's weights; {} is not one (.exported, .jax_exported)",
            module.display()
        )));
    }
    let client = open(cli)?;
    // With --timeout, the deadline armed above bounds the execute too: it ends the process
    // with its error line while the program runs on (PJRT cannot stop one).
    let (host, placements) = if is_export(module) {
        // A serialized jax.export artifact: called as JAX calls it, on its flattened arguments.
        let bytes = std::fs::read(module)
            .map_err(|e| usage(format!("artifact {}: {e}", module.display())))?;
        let mut model = client.load_exported(&bytes)?;
        if let Some(path) = spec.params {
            let weights = std::fs::read(path)
                .map_err(|e| usage(format!("--params {}: {e}", path.display())))?;
            model.load_params(&weights)?;
        }
        stage.store(1, std::sync::atomic::Ordering::Release);
        let host = model.call(&parsed)?;
        let n = host.len();
        (host, vec![None; n])
    } else {
        run_module(&client, spec, parsed, &stage)?
    };
    if output_paths.len() > host.len() {
        return Err(usage(format!(
            "{} --output given; the module has {} outputs",
            output_paths.len(),
            host.len()
        )));
    }
    for (path, data) in output_paths.iter().zip(&host) {
        std::fs::write(path, write_npy(data)?)
            .map_err(|e| usage(format!("writing {}: {e}", path.display())))?;
    }
    if json {
        let items: Vec<String> = (host.iter().zip(&placements))
            .map(|(h, placed)| {
                // An SPMD output also says how it was sharded and which devices held it.
                let sharded = placed.as_ref().map_or(String::new(), |(text, devices)| {
                    format!(
                        ",\"sharding\":{},\"devices\":{}",
                        serde_json::to_string(text).unwrap_or_default(),
                        serde_json::to_string(devices).unwrap_or_default()
                    )
                });
                format!(
                    "{{\"dtype\":\"{}\",\"shape\":{},\"data\":{}{sharded}}}",
                    h.dtype,
                    serde_json::to_string(&h.dims).unwrap_or_default(),
                    json_values(h)
                )
            })
            .collect();
        out!("{{\"outputs\":[{}]}}", items.join(","));
    } else {
        for (i, h) in host.iter().enumerate() {
            let dims: Vec<String> = h.dims.iter().map(|d| d.to_string()).collect();
            let ty = if dims.is_empty() {
                h.dtype.to_string()
            } else {
                format!("{}x{}", dims.join("x"), h.dtype)
            };
            out!("result[{i}]: {ty}={}", json_values(h));
        }
    }
    Ok(())
}

/// Whether `path` names a serialized jax.export artifact (by its extension).
pub fn is_export(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("exported" | "jax_exported")
    )
}

/// Host outputs and, for an SPMD program, each one's (sharding, devices).
type Placed = (Vec<HostArray>, Vec<Option<(String, Vec<i32>)>>);

/// Compiles a module and runs it once: on one device, or as an SPMD program on global inputs.
fn run_module(
    client: &Client,
    spec: &RunSpec<'_>,
    parsed: Vec<HostArray>,
    stage: &std::sync::atomic::AtomicU8,
) -> Result<Placed> {
    let RunSpec {
        module,
        inputs,
        device,
        outputs,
        partitions,
        ..
    } = *spec;
    let exe = load_module(client, module, device, partitions)?;
    let spmd = exe.parameter_shardings().is_some();
    // An SPMD program's inputs are global arrays, split later by its parameter shardings.
    let inputs = check_inputs(&exe, inputs, parsed)?;
    // And the outputs' types, known once compiled, before anything runs.
    for (i, (o, t)) in outputs.iter().zip(exe.output_types()).enumerate() {
        if !npy_supports(t.dtype) {
            return Err(usage(format!(
                "--output `{o}`: output {i} is {}, which .npy files cannot hold",
                t.dtype
            )));
        }
    }
    // With --timeout, the deadline armed above bounds the execute too: it ends the process
    // with its error line while the program runs on (PJRT cannot stop one).
    let (host, placements) = if spmd {
        stage.store(1, std::sync::atomic::Ordering::Release);
        let results = exe.execute_sharded_host(&inputs)?;
        let placements = (results.iter())
            .map(|r| Some((r.sharding().to_string(), r.sharding().devices().to_vec())))
            .collect();
        let host = results
            .iter()
            .map(|r| r.to_host())
            .collect::<Result<Vec<_>>>()?;
        (host, placements)
    } else {
        let args = upload(&exe, &inputs)?;
        let refs: Vec<&Array> = args.iter().collect();
        stage.store(1, std::sync::atomic::Ordering::Release);
        let results = exe.execute(&refs)?;
        let host = results
            .iter()
            .map(Array::to_host_array)
            .collect::<Result<Vec<_>>>()?;
        (host, vec![None; results.len()])
    };
    Ok((host, placements))
}

/// An `--input`: a literal, or `@path` to a `.npy` file.
fn read_input(text: &str) -> Result<HostArray> {
    match text.strip_prefix('@') {
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| usage(format!("input `{text}`: cannot read {path}: {e}")))?;
            read_npy(&bytes).map_err(|e| usage(format!("input `{text}`: {}", e.detail())))
        }
        None => parse_literal(text),
    }
}

/// Compiles a module: on `device`, or, for a program partitioned over several devices (as its
/// text says, or `--partitions` for bytecode), on the first that many.
pub fn load_module(
    client: &Client,
    path: &Path,
    device: i32,
    partitions: Option<usize>,
) -> Result<LoadedExecutable> {
    let program =
        std::fs::read(path).map_err(|e| usage(format!("module {}: {e}", path.display())))?;
    if device < 0 || device as usize >= client.device_count() {
        return Err(usage(format!(
            "--device {device}: the client has devices 0..{}",
            client.device_count()
        )));
    }
    let says = pjrt_actors::spmd::read(&program);
    if says.sharded_bytecode && partitions.is_none() {
        return Err(usage(format!(
            "module {}: sharded MLIR bytecode whose partition count could not be read: give --partitions N (JAX's Exported.nr_devices)",
            path.display()
        )));
    }
    let spmd = partitions.or(says.num_partitions).is_some_and(|n| n > 1);
    let options = CompileOptions {
        devices: (!spmd).then(|| vec![device]),
        num_partitions: partitions,
        ..Default::default()
    };
    client.compile_and_load(program, &options)
}

/// As many `--input`s as the program has parameters.
fn check_input_count(params: usize, texts: &[String]) -> Result<()> {
    match texts.len() == params {
        true => Ok(()),
        false => Err(usage(format!(
            "the module takes {params} inputs, {} --input given",
            texts.len()
        ))),
    }
}

/// A `--timeout` in seconds: finite, from 1 ms to a year.
fn timeout_of(secs: f64) -> Result<std::time::Duration> {
    pjrt_actors::time_limit(secs).map_err(|reason| {
        usage(format!(
            "--timeout must be a number of seconds from 1 ms to a year: {reason}"
        ))
    })
}

/// Ends the process with an error line when `limit` passes before `run` finishes: the compile
/// (in this process or a worker, which dies with it) and the execute share the one deadline.
fn arm_deadline(limit: std::time::Duration, stage: std::sync::Arc<std::sync::atomic::AtomicU8>) {
    let _ = std::thread::Builder::new()
        .name("pjrt-actors-run-deadline".into())
        .spawn(move || {
            std::thread::sleep(limit);
            let doing = match stage.load(std::sync::atomic::Ordering::Acquire) {
                0 => "opening the client and compiling",
                _ => "running",
            };
            eprintln!(
                "pjrt-actors: error: run did not finish within {limit:?} (--timeout), {doing}"
            );
            std::process::exit(1);
        });
}

/// An `--output` flag: `@path.npy`, where a file can be created (its folder exists, and the
/// path is not a folder).
fn check_output(flag: &str) -> Result<PathBuf> {
    let path = flag
        .strip_prefix('@')
        .map(PathBuf::from)
        .ok_or_else(|| usage(format!("--output `{flag}`: expected @path.npy")))?;
    if path.is_dir() {
        return Err(usage(format!(
            "--output `{flag}`: {} is a folder",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(usage(format!(
            "--output `{flag}`: the folder {} does not exist",
            parent.display()
        )));
    }
    Ok(path)
}

/// Reads and parses every `--input`, each exactly once.
pub fn read_inputs(texts: &[String]) -> Result<Vec<HostArray>> {
    texts.iter().map(|t| read_input(t)).collect()
}

/// Zeros of every parameter's type (what `bench` runs on without inputs), each at most
/// `LITERAL_LIMIT` bytes, as a literal may describe: a larger parameter needs a `.npy` input.
pub fn zeros_for(exe: &LoadedExecutable) -> Result<Vec<HostArray>> {
    (exe.parameter_types().iter().enumerate())
        .map(|(i, p)| zeros(&format!("parameter {i}"), p))
        .collect()
}

/// Zeros of type `t` for `what` (a parameter, an export's input), refused past
/// `LITERAL_LIMIT` bytes as a literal is: a larger one needs a `.npy` input.
pub fn zeros(what: &str, t: &pjrt_actors::ArrayType) -> Result<HostArray> {
    let bytes = t.byte_size()?;
    if bytes > LITERAL_LIMIT {
        return Err(usage(format!(
            "{what} ({}{:?}) is {bytes} bytes; zeros are made for at most {} MiB: give --input @file.npy",
            t.dtype,
            t.dims,
            LITERAL_LIMIT >> 20
        )));
    }
    Ok(HostArray {
        dtype: t.dtype,
        dims: t.dims.clone(),
        bytes: vec![0; bytes],
    })
}

/// Parsed inputs checked against the program's parameters (count, then each one's type; an
/// SPMD program's global types).
pub fn check_inputs(
    exe: &LoadedExecutable,
    texts: &[String],
    inputs: Vec<HostArray>,
) -> Result<Vec<HostArray>> {
    let params = &exe.global_parameter_types();
    check_input_count(params.len(), texts)?;
    let mut checked = Vec::with_capacity(inputs.len());
    for (i, (input, p)) in inputs.into_iter().zip(params).enumerate() {
        // A void .npy (ml_dtypes' `<V2` bfloat16, `|V1` float8) is whichever type of its width
        // the parameter is; a void of another width is refused, saying why.
        let void = void_reads_as(input.dtype.byte_size()) == Some(input.dtype)
            && texts[i].starts_with('@');
        let (dtype, dims) = (input.dtype, input.dims.clone());
        let input = if void && dtype != p.dtype {
            retyped_void(input, p.dtype).map_err(|e| {
                usage(format!(
                    "input {i} (`{}`): {}; the module expects {}{:?}",
                    texts[i],
                    e.detail(),
                    p.dtype,
                    p.dims
                ))
            })?
        } else {
            input
        };
        if input.dtype != p.dtype || input.dims != p.dims {
            return Err(usage(format!(
                "input {i} (`{}`) is {dtype}{dims:?}; the module expects {}{:?}",
                texts[i], p.dtype, p.dims
            )));
        }
        checked.push(input);
    }
    Ok(checked)
}

pub fn upload(exe: &LoadedExecutable, inputs: &[HostArray]) -> Result<Vec<Array>> {
    let device = &exe.addressable_devices()[0];
    inputs.iter().map(|h| device.put_array(h)).collect()
}
