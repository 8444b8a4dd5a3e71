//! Triton's two views of a served model that its tools read: its model configuration (name,
//! platform, batch size, typed inputs and outputs, dynamic batching, instance groups) and its
//! statistics (request outcomes, queue and compute phases, per batch size), as gRPC messages and
//! as the JSON Triton's HTTP endpoints answer (field names as the protos spell them).

use std::time::{Duration, UNIX_EPOCH};

use pjrt_actors::ElementType;
use pjrt_actors::serving::Timed;
use serde_json::{Value, json};

use super::kserve::{ServedModel, ServerState, TensorSpec, VERSION};
use super::served::Served;
use super::wire::datatype_name;
use super::wire::messages::model_config::SchedulingChoice;
use super::wire::messages::model_instance_group::Kind;
use super::wire::messages::*;

/// Triton's `TYPE_*` name and number for an element type.
pub fn triton_type(t: ElementType) -> (&'static str, i32) {
    // Triton's config names each of the protocol's datatypes `TYPE_` and the same word.
    let protocol = datatype_name(t).unwrap_or("");
    let kind =
        DataType::from_str_name(&format!("TYPE_{protocol}")).unwrap_or(DataType::TypeInvalid);
    (kind.as_str_name(), kind as i32)
}

/// The model's configuration as Triton's `ModelConfig`.
pub fn model_config(state: &ServerState, m: Served) -> ModelConfig {
    match m {
        Served::Batched(m) => batched_config(state, m),
        Served::Generation { .. } => generation_config(state, m),
    }
}

/// A tensor of a model's config, as Triton's `ModelInput` and `ModelOutput` both describe it.
fn config_tensor(s: &TensorSpec, batched: bool) -> (String, i32, Vec<i64>) {
    // Without batching (max_batch_size 0) the dims are the whole shape: the metadata's.
    let dims = match batched {
        true => s.dims.clone(),
        false => s.metadata_shape(),
    };
    (s.name.clone(), triton_type(s.dtype).1, dims)
}

fn instance_kind(state: &ServerState) -> i32 {
    match state.client.platform().eq_ignore_ascii_case("cpu") {
        true => Kind::Cpu as i32,
        false => Kind::Gpu as i32,
    }
}

/// A generation model's configuration: Triton's decoupled model (any number of responses a
/// request, one a token), unbatched at the protocol (its engine batches the sequences).
fn generation_config(state: &ServerState, m: Served) -> ModelConfig {
    let (inputs, outputs) = m.specs();
    ModelConfig {
        name: m.name().into(),
        platform: m.platform().into(),
        backend: "pjrt".into(),
        max_batch_size: 0,
        input: (inputs.iter())
            .map(|s| config_tensor(s, false))
            .map(|(name, data_type, dims)| ModelInput {
                name,
                data_type,
                dims,
                ..Default::default()
            })
            .collect(),
        output: (outputs.iter())
            .map(|s| config_tensor(s, false))
            .map(|(name, data_type, dims)| ModelOutput {
                name,
                data_type,
                dims,
                ..Default::default()
            })
            .collect(),
        instance_group: vec![ModelInstanceGroup {
            name: m.name().into(),
            count: 1,
            gpus: Vec::new(),
            kind: instance_kind(state),
            ..Default::default()
        }],
        model_transaction_policy: Some(ModelTransactionPolicy { decoupled: true }),
        ..Default::default()
    }
}

fn batched_config(state: &ServerState, m: &ServedModel) -> ModelConfig {
    let config = m.batcher.config();
    let p = &m.policy;
    let gpu = instance_kind(state) == Kind::Gpu as i32;
    let groups = m.batcher.device_groups();
    let instance_group = match gpu {
        false => vec![ModelInstanceGroup {
            name: m.name.clone(),
            count: groups.len() as i32,
            gpus: Vec::new(),
            kind: Kind::Cpu as i32,
            ..Default::default()
        }],
        true => (groups.iter().enumerate())
            .map(|(k, ids)| ModelInstanceGroup {
                name: format!("{}_{k}", m.name),
                count: 1,
                gpus: ids.clone(),
                kind: Kind::Gpu as i32,
                ..Default::default()
            })
            .collect(),
    };
    let input = (m.inputs.iter())
        .map(|s| config_tensor(s, true))
        .map(|(name, data_type, dims)| ModelInput {
            name,
            data_type,
            dims,
            ..Default::default()
        })
        .collect();
    let output = (m.outputs.iter())
        .map(|s| config_tensor(s, true))
        .map(|(name, data_type, dims)| ModelOutput {
            name,
            data_type,
            dims,
            ..Default::default()
        })
        .collect();
    let micros = |d: Option<Duration>| d.map_or(0, |d| d.as_micros() as u64);
    ModelConfig {
        name: m.name.clone(),
        platform: m.platform.into(),
        backend: "pjrt".into(),
        max_batch_size: m.batcher.max_rows().min(i32::MAX as usize) as i32,
        input,
        output,
        instance_group,
        scheduling_choice: Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching {
            preferred_batch_size: (config.allowed_batch_sizes.iter())
                .map(|&s| s.min(i32::MAX as usize) as i32)
                .collect(),
            max_queue_delay_microseconds: config.max_delay.as_micros() as u64,
            preserve_ordering: false,
            priority_levels: p.priority_levels,
            default_priority_level: if p.priority_levels > 0 {
                p.default_priority
            } else {
                0
            },
            default_queue_policy: Some(ModelQueuePolicy {
                timeout_action: 0,
                default_timeout_microseconds: micros(p.default_timeout),
                allow_timeout_override: p.allow_timeout_override,
                max_queue_size: config.max_queued.min(u32::MAX as usize) as u32,
            }),
            ..Default::default()
        })),
        model_transaction_policy: Some(ModelTransactionPolicy { decoupled: false }),
        ..Default::default()
    }
}

/// The configuration as Triton's HTTP endpoint writes it.
pub fn config_json(c: &ModelConfig) -> Value {
    let type_name = |k: i32| {
        DataType::try_from(k)
            .unwrap_or(DataType::TypeInvalid)
            .as_str_name()
    };
    let decoupled = c.model_transaction_policy.is_some_and(|p| p.decoupled);
    let mut config = json!({
        "name": c.name,
        "platform": c.platform,
        "backend": c.backend,
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": c.max_batch_size,
        "input": c.input.iter().map(|i| json!({
            "name": i.name,
            "data_type": type_name(i.data_type),
            "format": "FORMAT_NONE",
            "dims": i.dims,
            "is_shape_tensor": false,
            "allow_ragged_batch": false,
            "optional": false,
        })).collect::<Vec<_>>(),
        "output": c.output.iter().map(|o| json!({
            "name": o.name,
            "data_type": type_name(o.data_type),
            "dims": o.dims,
            "label_filename": "",
            "is_shape_tensor": false,
        })).collect::<Vec<_>>(),
        "model_transaction_policy": {"decoupled": decoupled},
        "instance_group": c.instance_group.iter().map(|g| json!({
            "name": g.name,
            "kind": Kind::try_from(g.kind).unwrap_or(Kind::Cpu).as_str_name(),
            "count": g.count,
            "gpus": g.gpus,
        })).collect::<Vec<_>>(),
    });
    if let Some(SchedulingChoice::DynamicBatching(batching)) = &c.scheduling_choice {
        let queue = batching.default_queue_policy.unwrap_or_default();
        config["dynamic_batching"] = json!({
            "preferred_batch_size": batching.preferred_batch_size,
            "max_queue_delay_microseconds": batching.max_queue_delay_microseconds,
            "preserve_ordering": batching.preserve_ordering,
            "priority_levels": batching.priority_levels,
            "default_priority_level": batching.default_priority_level,
            "default_queue_policy": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": queue.default_timeout_microseconds,
                "allow_timeout_override": queue.allow_timeout_override,
                "max_queue_size": queue.max_queue_size,
            },
        });
    }
    config
}

fn duration(t: Timed) -> StatisticDuration {
    StatisticDuration {
        count: t.count,
        ns: u64::try_from(t.total.as_nanos()).unwrap_or(u64::MAX),
    }
}

/// The model's statistics as Triton's `ModelStatistics`: the request outcomes as the server
/// counted them (arrival to answer, either protocol), the rest as its batcher or its
/// generation engine did.
pub fn model_statistics(state: &ServerState, m: Served) -> ModelStatistics {
    match m {
        Served::Batched(m) => batched_statistics(state, m),
        Served::Generation { name, model } => {
            // Triton's queue is the wait for a decode slot (perf_analyzer finds the version
            // whose queue count grew); its compute phases are a batcher's, left empty here
            // (the engine's own are time to first token and between tokens: /metrics).
            let s = model.generator.stats();
            let queue = StatisticDuration {
                count: s.queue.count(),
                ns: u64::try_from(s.queue.sum.as_nanos()).unwrap_or(u64::MAX),
            };
            let (ok, failed) = state.metrics.outcomes(name);
            ModelStatistics {
                name: name.into(),
                version: VERSION.into(),
                last_inference: unix_millis(s.last_token),
                inference_count: s.requests,
                execution_count: s.prefills + s.decode_steps,
                inference_stats: Some(InferStatistics {
                    success: Some(duration(ok)),
                    fail: Some(duration(failed)),
                    queue: Some(queue),
                    ..empty_phases()
                }),
                batch_stats: Vec::new(),
                ..Default::default()
            }
        }
    }
}

fn empty_phases() -> InferStatistics {
    let none = Some(StatisticDuration::default());
    InferStatistics {
        success: none,
        fail: none,
        queue: none,
        compute_input: none,
        compute_infer: none,
        compute_output: none,
        cache_hit: none,
        cache_miss: none,
    }
}

fn unix_millis(t: Option<std::time::SystemTime>) -> u64 {
    (t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())).map_or(0, |d| d.as_millis() as u64)
}

fn batched_statistics(state: &ServerState, m: &ServedModel) -> ModelStatistics {
    let s = m.batcher.statistics();
    let (ok, failed) = state.metrics.outcomes(&m.name);
    let last = unix_millis(s.last_inference);
    ModelStatistics {
        name: m.name.clone(),
        version: VERSION.into(),
        last_inference: last,
        inference_count: s.inferences,
        execution_count: s.executions,
        inference_stats: Some(InferStatistics {
            success: Some(duration(ok)),
            fail: Some(duration(failed)),
            queue: Some(duration(s.queue)),
            compute_input: Some(duration(s.compute_input)),
            compute_infer: Some(duration(s.compute_infer)),
            compute_output: Some(duration(s.compute_output)),
            cache_hit: Some(StatisticDuration::default()),
            cache_miss: Some(StatisticDuration::default()),
        }),
        batch_stats: (s.batch_sizes.into_iter())
            .filter(|b| b.compute_infer.count > 0)
            .map(|b| InferBatchStatistics {
                batch_size: b.batch_size as u64,
                compute_input: Some(duration(b.compute_input)),
                compute_infer: Some(duration(b.compute_infer)),
                compute_output: Some(duration(b.compute_output)),
            })
            .collect(),
        ..Default::default()
    }
}

/// The statistics of the models named (all when `name` is empty), as one response.
pub fn statistics(
    state: &ServerState,
    name: &str,
    version: &str,
) -> Result<ModelStatisticsResponse, super::error::ServeError> {
    let models: Vec<Served> = match name.is_empty() {
        true => state.every_model().collect(),
        false => vec![state.served(name, version)?],
    };
    Ok(ModelStatisticsResponse {
        model_stats: models
            .into_iter()
            .map(|m| model_statistics(state, m))
            .collect(),
    })
}

/// The statistics as Triton's HTTP endpoint writes them.
pub fn statistics_json(r: &ModelStatisticsResponse) -> Value {
    let d = |d: &Option<StatisticDuration>| {
        let d = d.unwrap_or_default();
        json!({"count": d.count, "ns": d.ns})
    };
    let stats = (r.model_stats.iter())
        .map(|m| {
            let i = m.inference_stats.unwrap_or_default();
            json!({
                "name": m.name,
                "version": m.version,
                "last_inference": m.last_inference,
                "inference_count": m.inference_count,
                "execution_count": m.execution_count,
                "inference_stats": {
                    "success": d(&i.success),
                    "fail": d(&i.fail),
                    "queue": d(&i.queue),
                    "compute_input": d(&i.compute_input),
                    "compute_infer": d(&i.compute_infer),
                    "compute_output": d(&i.compute_output),
                    "cache_hit": d(&i.cache_hit),
                    "cache_miss": d(&i.cache_miss),
                },
                "batch_stats": m.batch_stats.iter().map(|b| json!({
                    "batch_size": b.batch_size,
                    "compute_input": d(&b.compute_input),
                    "compute_infer": d(&b.compute_infer),
                    "compute_output": d(&b.compute_output),
                })).collect::<Vec<_>>(),
                "memory_usage": [],
            })
        })
        .collect::<Vec<_>>();
    json!({ "model_stats": stats })
}

/// A rename from a model's config (`input` or `output`: a list, in the model's order, of
/// `{"name": ..}` with, optionally, the `data_type` and `dims` it must have), applied to `specs`.
pub fn rename(
    model: &str,
    what: &str,
    specs: &mut [TensorSpec],
    given: &Value,
) -> pjrt_actors::Result<()> {
    use super::config::refused;
    let list = given.as_array().ok_or_else(|| {
        refused(
            model,
            format!("{what} is a list of {{\"name\": ..}} objects"),
        )
    })?;
    if list.len() > specs.len() {
        return Err(refused(
            model,
            format!(
                "{what} names {} tensors; the model has {}",
                list.len(),
                specs.len()
            ),
        ));
    }
    for (k, (entry, spec)) in list.iter().zip(specs.iter_mut()).enumerate() {
        let entry = entry
            .as_object()
            .ok_or_else(|| refused(model, format!("{what}[{k}] is an object")))?;
        for (key, v) in entry {
            match key.as_str() {
                "name" => {
                    let name = v.as_str().filter(|n| !n.is_empty()).ok_or_else(|| {
                        refused(model, format!("{what}[{k}].name is a non-empty string"))
                    })?;
                    spec.name = name.to_string();
                }
                "data_type" => {
                    let want = triton_type(spec.dtype).0;
                    if v.as_str() != Some(want) {
                        return Err(refused(
                            model,
                            format!("{what}[{k}].data_type is {v}; the model's is {want}"),
                        ));
                    }
                }
                "dims" => {
                    let dims: Option<Vec<i64>> = v
                        .as_array()
                        .and_then(|l| l.iter().map(Value::as_i64).collect());
                    if dims.as_deref() != Some(spec.dims.as_slice()) {
                        return Err(refused(
                            model,
                            format!(
                                "{what}[{k}].dims is {}; the model's are {:?} (without the rows)",
                                super::wire::shown(&v.to_string()),
                                spec.dims
                            ),
                        ));
                    }
                }
                other => {
                    return Err(refused(
                        model,
                        format!(
                            "{what}[{k}] has `{}`, which is not one of name, data_type, dims",
                            super::wire::shown(other)
                        ),
                    ));
                }
            }
        }
    }
    let mut names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(refused(model, format!("two {what}s are named `{}`", w[0])));
    }
    Ok(())
}

#[cfg(test)]
#[path = "triton_tests.rs"]
mod tests;
