//! A model's config in Triton's terms (`config.json`, `--config`), read into the batcher's
//! config and the queue policy: every key and value checked, anything that does not fit
//! refused naming key and value.

use std::time::Duration;

use pjrt_actors::Result;
use pjrt_actors::serving::BatcherConfig;
use serde_json::Value;

use super::kserve::QueuePolicy;
use super::wire::shown;
use crate::common::usage;

/// The config keys a model's config file may have (Triton's names).
pub const KEYS: &[&str] = &[
    "max_batch_size",
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "priority_levels",
    "default_priority_level",
    "default_queue_policy",
    "instance_group",
    "batched_inputs",
    "input",
    "output",
];

pub fn refused(name: &str, why: impl std::fmt::Display) -> pjrt_actors::Error {
    usage(format!("model `{name}`: {why}"))
}

/// The batcher's config and the queue policy from a model's config, in Triton's terms.
pub fn batcher_config(
    name: &str,
    c: &Value,
    export_rows: Option<usize>,
) -> Result<(BatcherConfig, QueuePolicy)> {
    let uint = |key: &str| -> Result<Option<u64>> {
        match c.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| refused(name, format!("{key} is a whole number"))),
        }
    };
    let mut config = BatcherConfig {
        max_batch_size: uint("max_batch_size")?
            .map(|n| n as usize)
            .or(export_rows)
            .unwrap_or(64),
        ..Default::default()
    };
    if let Some(us) = uint("max_queue_delay_microseconds")? {
        // As Triton's dynamic batcher does: a request waits this long for company even when
        // no batch is running.
        config.max_delay = Duration::from_micros(us);
        config.wait_when_idle = true;
    }
    if let Some(sizes) = c.get("preferred_batch_size") {
        config.allowed_batch_sizes = (sizes.as_array())
            .and_then(|l| l.iter().map(|s| s.as_u64().map(|n| n as usize)).collect())
            .ok_or_else(|| {
                refused(
                    name,
                    format!(
                        "preferred_batch_size is {}; it is a list of sizes",
                        shown(&sizes.to_string())
                    ),
                )
            })?;
    }
    let levels = uint("priority_levels")?.unwrap_or(0);
    if levels > 2 {
        return Err(refused(
            name,
            format!("{levels} priority levels; the batcher has two (1 runs before 2)"),
        ));
    }
    let given_default = uint("default_priority_level")?;
    if levels == 0 && given_default.is_some_and(|l| l > 0) {
        return Err(refused(
            name,
            format!(
                "default_priority_level {} without priority_levels: a model has levels only when priority_levels says how many",
                given_default.unwrap_or_default()
            ),
        ));
    }
    let default_priority = given_default.filter(|&l| l > 0).unwrap_or(levels.max(1));
    if levels > 0 && !(1..=levels).contains(&default_priority) {
        return Err(refused(
            name,
            format!("default_priority_level {default_priority} is not one of its {levels} levels"),
        ));
    }
    let mut policy = QueuePolicy {
        priority_levels: levels,
        default_priority,
        ..Default::default()
    };
    if let Some(q) = c.get("default_queue_policy") {
        let q = q
            .as_object()
            .ok_or_else(|| refused(name, "default_queue_policy is an object"))?;
        for (k, v) in q {
            match (k.as_str(), v) {
                ("timeout_action", Value::String(a)) if a == "REJECT" => {}
                ("timeout_action", other) => {
                    return Err(refused(
                        name,
                        format!(
                            "timeout_action {other}: a request past its deadline is answered expired (REJECT); DELAY is not served"
                        ),
                    ));
                }
                ("default_timeout_microseconds", v) => {
                    let us = v.as_u64().ok_or_else(|| {
                        refused(name, "default_timeout_microseconds is a whole number")
                    })?;
                    policy.default_timeout = (us > 0).then(|| Duration::from_micros(us));
                }
                ("allow_timeout_override", Value::Bool(b)) => policy.allow_timeout_override = *b,
                ("allow_timeout_override", other) => {
                    return Err(refused(
                        name,
                        format!("allow_timeout_override is true or false, not {other}"),
                    ));
                }
                ("max_queue_size", v) => {
                    let n = v
                        .as_u64()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| refused(name, "max_queue_size is a whole number above 0"))?;
                    config.max_queued = n as usize;
                }
                (other, _) => {
                    return Err(refused(
                        name,
                        format!("default_queue_policy has `{other}`, which is not served"),
                    ));
                }
            }
        }
    }
    if let Some(g) = c.get("instance_group") {
        let g = g
            .as_object()
            .ok_or_else(|| refused(name, "instance_group is an object"))?;
        if let Some(k) = g
            .keys()
            .find(|k| !["devices", "device_groups"].contains(&k.as_str()))
        {
            return Err(refused(
                name,
                format!(
                    "instance_group has `{}`, which is not one of devices, device_groups",
                    shown(k)
                ),
            ));
        }
        // A device id is a whole number a device can have (an i32 from 0): 4294967296 must
        // not wrap to device 0.
        let ids = |v: &Value, what: &str| -> Result<Vec<i32>> {
            let bad = || {
                refused(
                    name,
                    format!(
                        "{what} is {}; it is a list of device ids (whole numbers from 0)",
                        shown(&v.to_string())
                    ),
                )
            };
            (v.as_array().ok_or_else(bad)?.iter())
                .map(|d| (d.as_u64().and_then(|d| i32::try_from(d).ok())).ok_or_else(bad))
                .collect()
        };
        match (g.get("devices"), g.get("device_groups")) {
            (Some(d), None) => config.devices = Some(ids(d, "instance_group.devices")?),
            (None, Some(groups)) => {
                let what = "instance_group.device_groups";
                let groups = groups.as_array().ok_or_else(|| {
                    refused(name, format!("{what} is a list of lists of device ids"))
                })?;
                config.device_groups =
                    Some(groups.iter().map(|g| ids(g, what)).collect::<Result<_>>()?)
            }
            _ => {
                return Err(refused(
                    name,
                    "instance_group has `devices` or `device_groups`",
                ));
            }
        }
    }
    Ok((config, policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_that_lie_are_refused_naming_key_and_value() {
        // (config, what the refusal says)
        let cases = [
            (
                r#"{"instance_group": {"devices": [4294967296]}}"#,
                "instance_group.devices is [4294967296]",
            ),
            (
                r#"{"instance_group": {"devices": [-1]}}"#,
                "instance_group.devices is [-1]",
            ),
            (
                r#"{"instance_group": {"devices": [0], "count": 2}}"#,
                "instance_group has `count`",
            ),
            (
                r#"{"instance_group": {"device_groups": [[0, 1], [2.5]]}}"#,
                "instance_group.device_groups is [2.5]",
            ),
            (r#"{"instance_group": [0]}"#, "instance_group is an object"),
            (
                r#"{"preferred_batch_size": 4}"#,
                "preferred_batch_size is 4; it is a list",
            ),
            (
                r#"{"default_priority_level": 7}"#,
                "default_priority_level 7 without priority_levels",
            ),
            (
                r#"{"priority_levels": 2, "default_priority_level": 3}"#,
                "default_priority_level 3 is not one of",
            ),
            (
                r#"{"max_batch_size": -1}"#,
                "max_batch_size is a whole number",
            ),
            (
                r#"{"default_queue_policy": {"max_queue_size": 0}}"#,
                "max_queue_size is a whole number above 0",
            ),
        ];
        for (text, says) in cases {
            let config: Value = serde_json::from_str(text).unwrap();
            let Err(err) = batcher_config("m", &config, None) else {
                panic!("accepted: {text}");
            };
            let err = err.to_string();
            assert!(err.contains(says), "{text}: `{err}` lacks `{says}`");
        }
        let fine: Value = serde_json::from_str(
            r#"{"instance_group": {"devices": [0, 2147483647]}, "preferred_batch_size": [4, 8], "default_priority_level": 0}"#,
        )
        .unwrap();
        let (config, policy) = batcher_config("m", &fine, None).unwrap();
        assert_eq!(config.devices, Some(vec![0, i32::MAX]));
        assert_eq!(
            (config.allowed_batch_sizes, policy.default_priority),
            (vec![4, 8], 1)
        );
    }
}
