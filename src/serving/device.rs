//! A device worker: runs one device's (or one device group's) batches in order, one at a time.
//! It drops what expired or was cancelled since the batch formed, concatenates and pads the
//! rest, executes once, and answers each request with its own rows.

use std::time::Instant;

use super::Response;
use super::metrics::{Metrics, Outcome};
use super::queue::padded_size;
use super::request::{Pending, answer_expired, fail_all};
use super::statistics::Phases;
use crate::host_data::HostArray;
use crate::{Array, Device, Error, LoadedExecutable, Result, ShardedArray, Sharding};

/// Where a worker's batches run, with the fixed inputs resident there.
pub(crate) enum Target {
    /// One device: plain executes.
    Device { device: Device, fixed: Vec<Array> },
    /// A device group: each batch one SPMD execute over it, fixed inputs sharded.
    Group {
        devices: Vec<Device>,
        fixed: Vec<ShardedArray>,
        /// Per compiled size (as `DeviceModel::sizes`), the batched inputs' shardings, read
        /// from its executable once.
        batched: Vec<Vec<Sharding>>,
    },
}

/// One device's (or group's) compiled sizes and resident fixed inputs.
pub(crate) struct DeviceModel {
    pub(crate) target: Target,
    /// (batch size, executable), ascending.
    pub(crate) sizes: Vec<(usize, LoadedExecutable)>,
    /// The program parameter of each input: the batched ones, then the fixed ones.
    pub(crate) order: Vec<usize>,
}

/// `inputs` (batched, then fixed) as the program's parameters, in its order.
fn in_order<'a, T>(order: &[usize], inputs: impl Iterator<Item = &'a T>) -> Vec<&'a T> {
    let mut params: Vec<Option<&T>> = vec![None; order.len()];
    for (k, input) in inputs.enumerate() {
        params[order[k]] = Some(input);
    }
    params
        .into_iter()
        .map(|p| p.expect("a permutation"))
        .collect()
}

/// Bytes per row of a host array (its size over its leading dimension).
fn row_bytes(h: &HostArray) -> usize {
    match h.dims.first() {
        Some(&rows) if rows > 0 => h.bytes.len() / rows as usize,
        _ => 0,
    }
}

impl DeviceModel {
    /// Uploads `inputs` (batched, `size` rows), executes at `size`, reads every output back;
    /// `phases` learns how long the upload, the execute (until its first output is on the
    /// host) and the other reads took.
    pub(crate) fn run(
        &self,
        size: usize,
        inputs: &[HostArray],
        phases: &mut Phases,
    ) -> Result<Vec<HostArray>> {
        let at = (self.sizes.iter())
            .position(|(s, _)| *s == size)
            .expect("a compiled size");
        let exe = &self.sizes[at].1;
        let client = exe.client();
        let mut clock = Instant::now();
        let mut lap = |phase: &mut std::time::Duration| {
            let now = Instant::now();
            *phase += now - clock;
            clock = now;
        };
        let read_all = |outputs: &mut dyn Iterator<Item = Result<HostArray>>,
                        lap: &mut dyn FnMut(&mut std::time::Duration),
                        phases: &mut Phases| {
            let first = outputs.next().transpose()?;
            lap(&mut phases.infer);
            let rest = outputs.collect::<Result<Vec<_>>>()?;
            lap(&mut phases.output);
            Ok(first.into_iter().chain(rest).collect())
        };
        match &self.target {
            Target::Device { device, fixed } => {
                let batched = (inputs.iter())
                    .map(|h| device.put_array(h))
                    .collect::<Result<Vec<_>>>()?;
                lap(&mut phases.input);
                let args: Vec<&Array> = in_order(&self.order, batched.iter().chain(fixed));
                let outputs = exe.execute(&args)?;
                read_all(
                    &mut outputs.iter().map(Array::to_host_array),
                    &mut lap,
                    phases,
                )
            }
            Target::Group { fixed, batched, .. } => {
                let batched = (inputs.iter().zip(&batched[at]))
                    .map(|(h, s)| client.put_sharded(h, s))
                    .collect::<Result<Vec<_>>>()?;
                lap(&mut phases.input);
                let args: Vec<&ShardedArray> = in_order(&self.order, batched.iter().chain(fixed));
                let outputs = exe.execute_sharded(&args)?;
                read_all(
                    &mut outputs.iter().map(ShardedArray::to_host),
                    &mut lap,
                    phases,
                )
            }
        }
    }

    /// The ids of the devices it runs on.
    pub(crate) fn device_ids(&self) -> Vec<i32> {
        match &self.target {
            Target::Device { device, .. } => vec![device.id()],
            Target::Group { devices, .. } => devices.iter().map(Device::id).collect(),
        }
    }

    /// The device (a group's first) that names the worker in spans.
    fn first_device(&self) -> i32 {
        match &self.target {
            Target::Device { device, .. } => device.id(),
            Target::Group { devices, .. } => devices[0].id(),
        }
    }

    /// Runs one batch: drops what expired or was cancelled since it was formed, concatenates
    /// and pads the rest, executes once, and answers each request with its rows.
    pub(crate) fn serve(
        &self,
        model: &str,
        batch: Vec<Pending>,
        allowed: &[usize],
        metrics: &Metrics,
    ) {
        let started = Instant::now();
        let mut live = Vec::with_capacity(batch.len());
        for p in batch {
            if p.reply.is_closed() {
                metrics.count(Outcome::Cancelled, 1);
            } else if p.deadline.is_some_and(|d| started >= d) {
                answer_expired(p, started, metrics);
            } else {
                live.push(p);
            }
        }
        if live.is_empty() {
            return;
        }
        let rows: usize = live.iter().map(|p| p.rows).sum();
        let padded = padded_size(allowed, rows).expect("a batch never exceeds max_batch_size");
        let span = tracing::info_span!("batch", model, device = self.first_device(), rows, padded);
        let _entered = span.enter();
        for p in &live {
            metrics.observe_queue(started - p.arrived);
        }
        let mut phases = Phases::default();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let inputs: Vec<HostArray> = (0..live[0].inputs.len())
                .map(|i| {
                    let first = &live[0].inputs[i];
                    let width = row_bytes(first);
                    let mut bytes = Vec::with_capacity(padded * width);
                    for p in &live {
                        bytes.extend_from_slice(&p.inputs[i].bytes);
                    }
                    bytes.resize(padded * width, 0);
                    let mut dims = first.dims.clone();
                    dims[0] = padded as i64;
                    HostArray {
                        dtype: first.dtype,
                        dims,
                        bytes,
                    }
                })
                .collect();
            phases.input = started.elapsed();
            self.run(padded, &inputs, &mut phases)
        }));
        let elapsed = started.elapsed();
        metrics.execute_seconds.observe(elapsed.as_secs_f64());
        metrics.batch_rows.observe(rows as f64);
        metrics.padded_rows.observe(padded as f64);
        metrics
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let outputs = match outcome {
            Ok(Ok(outputs)) => outputs,
            Ok(Err(e)) => return fail_all(live, e, metrics),
            Err(panic) => {
                let reason = pjrt_actors_core::protocol::supervision::panic_message(panic.as_ref());
                return fail_all(
                    live,
                    Error::Panicked {
                        what: format!("a batch of `{model}`"),
                        reason,
                    },
                    metrics,
                );
            }
        };
        let cutting = Instant::now();
        let (requests, mut offset) = (live.len(), 0);
        let mut answers = Vec::with_capacity(requests);
        for p in live {
            // The batch's rows cover every request's (padded past them), so each cut is in range.
            let mine = match (outputs.iter()).map(|o| o.rows(offset, p.rows)).collect() {
                Ok(mine) => mine,
                Err(e) => {
                    let _ = p.reply.send(Err(e));
                    offset += p.rows;
                    continue;
                }
            };
            offset += p.rows;
            let response = Response {
                outputs: mine,
                batch_rows: rows,
                padded_rows: padded,
                queued: started - p.arrived,
                started,
            };
            answers.push((p.reply, response));
        }
        phases.output += cutting.elapsed();
        (metrics.statistics).executed(padded, requests, rows, phases);
        for (reply, response) in answers {
            metrics.count(Outcome::Done, 1);
            let _ = reply.send(Ok(response));
        }
    }
}
