//! Loading a model for serving: compiling every allowed size on every device, checking the
//! programs' signature against the fixed inputs, warming, starting the threads; and checking
//! requests against the signature before they are queued.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::admission::Admission;
use super::device::{DeviceModel, Target};
use super::metrics::Metrics;
use super::request::{Msg, Pending};
use super::scheduler::BatchScheduler;
use super::{BatchModel, BatcherConfig, Signature};
use crate::host_data::HostArray;
use crate::{ArrayType, Client, CompileOptions, Device, Error, LoadedExecutable, Result, Sharding};

/// A model compiled and ready on its devices, before its threads start.
pub(crate) struct Plan {
    pub(crate) name: String,
    pub(crate) signature: Signature,
    pub(crate) config: BatcherConfig,
    devices: Vec<DeviceModel>,
}

/// The most rows a padded batch may have, whatever its row size.
pub const MAX_BATCH_ROWS: usize = 1 << 31;

/// Refuses a largest batch whose inputs and outputs on the host would take more than half the
/// machine's memory: its allocation would fail, which aborts the process (warm-up or serve).
fn check_batch_bytes(name: &str, signature: &Signature, rows: usize) -> Result<()> {
    let row_bytes: u128 = (signature.inputs.iter().chain(&signature.outputs))
        .map(|t| {
            let elements: u128 = t.dims.iter().map(|d| (*d).max(0) as u128).product();
            elements * t.dtype.byte_size() as u128
        })
        .sum();
    let limit = pjrt_actors_core::client::config::machine_memory().unwrap_or(u64::MAX) / 2;
    let bytes = row_bytes.saturating_mul(rows as u128);
    if bytes > limit as u128 {
        return Err(bad_model(
            name,
            format!(
                "a batch of {rows} rows takes {bytes} bytes of inputs and outputs ({row_bytes} a row), past the {limit} (half this machine's memory) a batch may take; lower max_batch_size or allowed_batch_sizes"
            ),
        ));
    }
    Ok(())
}

fn bad_model(name: &str, why: String) -> Error {
    Error::InvalidArgument(format!("model `{name}`: {why}"))
}

impl Plan {
    pub(crate) fn new(
        client: &Client,
        model: BatchModel,
        mut config: BatcherConfig,
    ) -> Result<Plan> {
        let name = model.name.clone();
        for (key, value) in [
            ("max_batch_size", config.max_batch_size),
            ("max_queued", config.max_queued),
        ] {
            if value == 0 {
                return Err(bad_model(
                    &name,
                    format!("{key} is 0; it must be at least 1"),
                ));
            }
        }
        if let Some(size) = model.only_size {
            // One program, fixed at export: every batch is padded to its size.
            let given = &config.allowed_batch_sizes;
            if config.max_batch_size > size || !(given.is_empty() || given == &[size]) {
                return Err(bad_model(
                    &name,
                    format!(
                        "its program runs batches of exactly {size} rows (its shapes were fixed when it was exported): set max_batch_size to at most {size} and allowed_batch_sizes to [{size}] or none"
                    ),
                ));
            }
            config.allowed_batch_sizes = vec![size];
        }
        if config.allowed_batch_sizes.is_empty() {
            // Every power of two below the largest (a shift past the width would wrap).
            let mut s: Vec<usize> = (0..usize::BITS)
                .map(|p| 1usize << p)
                .take_while(|&s| s < config.max_batch_size)
                .collect();
            s.push(config.max_batch_size);
            config.allowed_batch_sizes = s;
        }
        config.allowed_batch_sizes.sort_unstable();
        config.allowed_batch_sizes.dedup();
        let allowed = &config.allowed_batch_sizes;
        // Allowed sizes reach max_batch_size (the defaults hold it), so this bounds it too.
        if let Some(too_many) = allowed.iter().find(|s| **s > MAX_BATCH_ROWS) {
            return Err(bad_model(
                &name,
                format!(
                    "batch size {too_many} is past the {MAX_BATCH_ROWS} rows a padded batch may have"
                ),
            ));
        }
        if allowed[0] == 0 || *allowed.last().expect("not empty") < config.max_batch_size {
            return Err(bad_model(
                &name,
                format!(
                    "allowed batch sizes {allowed:?} must be at least 1 and reach max_batch_size {}",
                    config.max_batch_size
                ),
            ));
        }
        let targets = targets(client, &name, &config)?;
        // Every (target, size) compiles at once through the compile service.
        let requests: Vec<_> = targets
            .iter()
            .flat_map(|t| allowed.iter().map(move |&size| (t, size)))
            .map(|(target, size)| {
                let options = CompileOptions {
                    devices: Some(target.iter().map(Device::id).collect()),
                    ..Default::default()
                };
                client
                    .compile_request((model.program)(size))
                    .options(&options)
                    .callbacks(&model.callbacks)
                    .load_async()
            })
            .collect();
        let mut compiled = Vec::with_capacity(requests.len());
        for request in requests {
            compiled.push(crate::handles::wait(request)?);
        }
        let signature = signature_of(&name, &model, allowed[0], &compiled[0])?;
        check_batch_bytes(&name, &signature, *allowed.last().expect("not empty"))?;
        let mut compiled = compiled.into_iter();
        let mut ready = Vec::with_capacity(targets.len());
        for devices in targets {
            let sizes: Vec<(usize, LoadedExecutable)> = allowed
                .iter()
                .map(|&s| (s, compiled.next().expect("one per size")))
                .collect();
            for (size, exe) in &sizes {
                let got = signature_of(&name, &model, *size, exe)?;
                if got.inputs != signature.inputs || got.outputs != signature.outputs {
                    return Err(bad_model(
                        &name,
                        format!("its program at batch size {size} has another signature"),
                    ));
                }
            }
            let target = match config.device_groups {
                None => {
                    let device = devices.into_iter().next().expect("one device a target");
                    let fixed = (model.fixed.iter())
                        .map(|h| device.put_array(h))
                        .collect::<Result<Vec<_>>>()?;
                    Target::Device { device, fixed }
                }
                Some(_) => {
                    let fixed = fixed_shardings(&name, &sizes, &model)?;
                    let fixed = (model.fixed.iter().zip(&fixed))
                        .map(|(h, s)| client.put_sharded(h, s))
                        .collect::<Result<Vec<_>>>()?;
                    let batched = (sizes.iter())
                        .map(|(_, exe)| batched_shardings(exe, &model))
                        .collect();
                    Target::Group {
                        devices,
                        fixed,
                        batched,
                    }
                }
            };
            let order = (0..model.batched_inputs + model.fixed.len())
                .map(|k| model.parameter_of(k))
                .collect();
            let model = DeviceModel {
                target,
                sizes,
                order,
            };
            if config.warm {
                for (size, _) in &model.sizes {
                    let zeros = signature
                        .inputs
                        .iter()
                        .map(|t| zeros(t, *size))
                        .collect::<Result<Vec<_>>>()?;
                    model.run(*size, &zeros, &mut Default::default())?;
                }
            }
            ready.push(model);
        }
        Ok(Plan {
            name,
            signature,
            config,
            devices: ready,
        })
    }

    /// The device ids each worker runs on.
    pub(crate) fn device_groups(&self) -> Vec<Vec<i32>> {
        self.devices.iter().map(DeviceModel::device_ids).collect()
    }

    /// Starts the device workers and the batcher actor; returns its mailbox and thread.
    pub(crate) fn spawn(
        self,
        metrics: Arc<Metrics>,
        admission: Arc<Admission>,
    ) -> Result<(Sender<Msg>, std::thread::JoinHandle<()>)> {
        let (tx, rx) = crossbeam_channel::unbounded::<Msg>();
        let mut workers = Vec::new();
        for (index, model) in self.devices.into_iter().enumerate() {
            let (batch_tx, batch_rx) = crossbeam_channel::bounded::<Vec<Pending>>(1);
            let (done, metrics, allowed) = (
                tx.clone(),
                metrics.clone(),
                self.config.allowed_batch_sizes.clone(),
            );
            let name = self.name.clone();
            let thread = std::thread::Builder::new()
                .name(format!("batcher-{}-{index}", self.name))
                .spawn(move || {
                    for batch in batch_rx.iter() {
                        // A panic here drops the batch's replies (their callers get an error)
                        // but never the device: it is always handed back.
                        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            model.serve(&name, batch, &allowed, &metrics)
                        }));
                        if served.is_err() {
                            tracing::error!(model = %name, "a batch panicked outside its execute");
                        }
                        if done.send(Msg::DeviceFree(index)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| Error::ThreadSpawn {
                    what: "batcher device worker",
                    reason: e.to_string(),
                })?;
            workers.push((batch_tx, thread));
        }
        let config = self.config;
        let thread = std::thread::Builder::new()
            .name(format!("batcher-{}", self.name))
            .spawn(move || BatchScheduler::new(config, metrics, admission, workers).run(rx))
            .map_err(|e| Error::ThreadSpawn {
                what: "batcher",
                reason: e.to_string(),
            })?;
        Ok((tx, thread))
    }
}

/// Where the batches run: each device alone, or each group of `device_groups` (every id a
/// device of the client's, none in two groups).
fn targets(client: &Client, name: &str, config: &BatcherConfig) -> Result<Vec<Vec<Device>>> {
    let targets: Vec<Vec<Device>> = match (&config.devices, &config.device_groups) {
        (Some(_), Some(_)) => {
            return Err(bad_model(
                name,
                "give devices or device_groups, not both".into(),
            ));
        }
        (None, None) => client.devices().into_iter().map(|d| vec![d]).collect(),
        (Some(ids), None) => (ids.iter())
            .map(|&id| Ok(vec![client.device_by_id(id)?]))
            .collect::<Result<_>>()?,
        (None, Some(groups)) => {
            let mut seen = std::collections::HashSet::new();
            (groups.iter())
                .map(|group| {
                    if group.is_empty() {
                        return Err(bad_model(name, "an empty device group".into()));
                    }
                    (group.iter())
                        .map(|&id| match seen.insert(id) {
                            true => client.device_by_id(id),
                            false => Err(bad_model(name, format!("device {id} is in two groups"))),
                        })
                        .collect()
                })
                .collect::<Result<_>>()?
        }
    };
    if targets.is_empty() {
        return Err(bad_model(name, "no device to serve on".into()));
    }
    Ok(targets)
}

/// The shardings of a group program's fixed parameters, the same at every compiled size.
fn fixed_shardings(
    name: &str,
    sizes: &[(usize, LoadedExecutable)],
    model: &BatchModel,
) -> Result<Vec<Sharding>> {
    let fixed = model.batched_inputs..model.batched_inputs + model.fixed.len();
    let of = |exe: &LoadedExecutable| {
        let pick = |s: Vec<Sharding>| -> Vec<Sharding> {
            fixed
                .clone()
                .map(|k| s[model.parameter_of(k)].clone())
                .collect()
        };
        (exe.parameter_shardings()).map(pick).ok_or_else(|| {
            bad_model(name, "served on device groups, its program must be an SPMD program over a group (mhlo.num_partitions)".into())
        })
    };
    let first = of(&sizes[0].1)?;
    for (size, exe) in &sizes[1..] {
        if of(exe)? != first {
            return Err(bad_model(
                name,
                format!("its program at batch size {size} shards its fixed inputs otherwise"),
            ));
        }
    }
    Ok(first)
}

/// The batched inputs' shardings in a group program (checked an SPMD program by
/// `fixed_shardings`), in input order.
fn batched_shardings(exe: &LoadedExecutable, model: &BatchModel) -> Vec<Sharding> {
    let all = exe.parameter_shardings().unwrap_or_default();
    (0..model.batched_inputs)
        .map(|k| all[model.parameter_of(k)].clone())
        .collect()
}

/// The model's batched parameter and result types without the batch dimension, checked
/// against the fixed inputs.
fn signature_of(
    name: &str,
    model: &BatchModel,
    size: usize,
    exe: &LoadedExecutable,
) -> Result<Signature> {
    // Global types: an SPMD program's parameters are shards of them.
    let params = exe.global_parameter_types();
    if params.len() != model.batched_inputs + model.fixed.len() {
        return Err(bad_model(
            name,
            format!(
                "its program takes {} parameters: {} batched and {} fixed were given",
                params.len(),
                model.batched_inputs,
                model.fixed.len()
            ),
        ));
    }
    let unbatch = |t: &ArrayType, what: String| -> Result<ArrayType> {
        match t.dims.split_first() {
            Some((&lead, rest)) if lead == size as i64 => Ok(ArrayType {
                dtype: t.dtype,
                dims: rest.to_vec(),
            }),
            _ => Err(bad_model(
                name,
                format!(
                    "{what} is {}{:?}; at batch size {size} its leading dimension must be {size}",
                    t.dtype, t.dims
                ),
            )),
        }
    };
    let param = |k: usize| &params[model.parameter_of(k)];
    let inputs = (0..model.batched_inputs)
        .map(|i| unbatch(param(i), format!("parameter {}", model.parameter_of(i))))
        .collect::<Result<Vec<_>>>()?;
    for (i, h) in model.fixed.iter().enumerate() {
        let t = param(model.batched_inputs + i);
        if t.dtype != h.dtype || t.dims != h.dims {
            return Err(bad_model(
                name,
                format!(
                    "fixed input {i} is {}{:?}; the program takes {}{:?}",
                    h.dtype, h.dims, t.dtype, t.dims
                ),
            ));
        }
    }
    let outputs = (exe.global_output_types().iter().enumerate())
        .map(|(i, t)| unbatch(t, format!("result {i}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(Signature { inputs, outputs })
}

fn zeros(t: &ArrayType, rows: usize) -> Result<HostArray> {
    let dims: Vec<i64> = std::iter::once(rows as i64)
        .chain(t.dims.iter().copied())
        .collect();
    let bytes = vec![0; pjrt_actors_core::dtype::byte_size(t.dtype, &dims)?];
    Ok(HostArray {
        dtype: t.dtype,
        dims,
        bytes,
    })
}
