//! Compile options: `CompileOptions` turned into a `CompileOptionsProto` the plugin cannot
//! abort on, checked against the client's devices.

use pjrt_actors_formats::protos::xla::{
    CompileOptionsProto, DeviceAssignmentProto, ExecutableBuildOptionsProto,
    device_assignment_proto,
};

use crate::compile::xla_options::set_overrides;
pub use crate::compile::xla_options::{JAX_DEBUG_OPTIONS, XlaOption, encode_options};
use crate::error::{Error, Result};
use crate::formats::spmd::ProgramPartitioning;

/// How to compile a program.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Replicas (default 1). With `devices`, replica `i` runs on `devices[i]`.
    pub num_replicas: Option<usize>,
    /// Partitions (default 1).
    pub num_partitions: Option<usize>,
    /// Device ids to run on, replica-major (`num_replicas × num_partitions` of them).
    pub devices: Option<Vec<i32>>,
    /// Compile once, run on any device chosen at execute time.
    pub portable: bool,
    /// XLA's SPMD partitioner (default: on when there is more than one partition; JAX always
    /// sets it).
    pub use_spmd_partitioning: Option<bool>,
    /// The Shardy partitioner (default: whether the program carries Shardy's `sdy.*`
    /// attributes, as JAX's programs do; XLA fails an internal check on such a program
    /// without it).
    pub use_shardy_partitioner: Option<bool>,
    /// Whether the partitioner may choose the parameters' shardings where the program leaves
    /// them open (XLA's `allow_spmd_sharding_propagation_to_parameters`; default: no).
    pub propagate_to_parameters: Option<bool>,
    /// The same for the outputs (`allow_spmd_sharding_propagation_to_output`).
    pub propagate_to_outputs: Option<bool>,
    /// A caller-built proto to start from; the fields above, when set, override it, and the
    /// result is still checked for what would abort the plugin.
    pub proto: Option<CompileOptionsProto>,
    /// XLA debug options by name (`xla_cpu_enable_fast_math`, ...), as JAX's
    /// `compile(compiler_options=...)` passes them: the plugin applies each over its own
    /// defaults. They override [`JAX_DEBUG_OPTIONS`].
    pub xla_options: Vec<(String, XlaOption)>,
    /// Compile as written where the program uses an op this plugin build is known to compute
    /// wrong (`compile::known_defects`); by default such a program gets the options that avoid
    /// the defect or, with none known, is refused with `Error::KnownDefect` before the plugin
    /// sees it.
    pub allow_known_defects: bool,
}

/// The device ids and memory limits the options are checked against.
pub struct DeviceFacts {
    /// (id, addressable) of every device.
    pub devices: Vec<(i32, bool)>,
    /// (id, the allocator's `bytes_limit`) of every addressable device whose allocator reports
    /// one, read when the compile is asked for (py_client reads them on every compile).
    pub memory_limits: Vec<(i32, i64)>,
}

impl CompileOptions {
    /// Builds the proto, filling in and checking what the plugin would otherwise abort on
    /// (replica and partition counts of at least 1, a consistent device assignment).
    pub fn to_proto(&self, facts: &DeviceFacts) -> Result<CompileOptionsProto> {
        let bad = |m: String| Error::InvalidArgument(format!("compile options: {m}"));
        let mut proto = self.proto.clone().unwrap_or_default();
        let mut build = proto.executable_build_options.take().unwrap_or_default();
        let count = |name: &str, n: usize| {
            i64::try_from(n).map_err(|_| bad(format!("{name} = {n} is more than any client has")))
        };
        if let Some(n) = self.num_replicas {
            build.num_replicas = count("num_replicas", n)?;
        }
        if let Some(n) = self.num_partitions {
            build.num_partitions = count("num_partitions", n)?;
        }
        // The plugin CHECK-fails (aborts the process) on 0; an unset field is 0.
        if build.num_replicas == 0 {
            build.num_replicas = 1;
        }
        if build.num_partitions == 0 {
            build.num_partitions = 1;
        }
        if build.num_replicas < 0 || build.num_partitions < 0 {
            return Err(bad(format!(
                "num_replicas ({}) and num_partitions ({}) must be at least 1",
                build.num_replicas, build.num_partitions
            )));
        }
        let total = (build.num_replicas as u128) * (build.num_partitions as u128);
        if total > facts.devices.len() as u128 && !self.portable {
            return Err(bad(format!(
                "{} replicas × {} partitions need {total} devices; the client has {}",
                build.num_replicas,
                build.num_partitions,
                facts.devices.len()
            )));
        }
        if self.portable {
            proto.compile_portable_executable = true;
        }
        if proto.compile_portable_executable {
            if build.num_replicas != 1 || build.num_partitions != 1 {
                return Err(bad(
                    "a portable executable has one replica and one partition".into(),
                ));
            }
            if self.devices.is_some() || build.device_assignment.is_some() {
                return Err(bad("a portable executable takes its device at execute time, not a device assignment".into()));
            }
        }
        if let Some(ids) = &self.devices {
            if ids.len() as u128 != total {
                return Err(bad(format!(
                    "{} devices given for {} replicas × {} partitions",
                    ids.len(),
                    build.num_replicas,
                    build.num_partitions
                )));
            }
            let partitions = build.num_partitions as usize;
            build.device_assignment = Some(DeviceAssignmentProto {
                replica_count: build.num_replicas as i32,
                computation_count: build.num_partitions as i32,
                computation_devices: (0..partitions)
                    .map(|p| device_assignment_proto::ComputationDevice {
                        replica_device_ids: ids
                            .iter()
                            .skip(p)
                            .step_by(partitions)
                            .map(|&d| d as i64)
                            .collect(),
                    })
                    .collect(),
            });
        }
        if let Some(assignment) = &build.device_assignment {
            check_assignment(assignment, &build, facts).map_err(bad)?;
        }
        // -1: no fixed ordinal; the assignment (or the default one) decides. Proto3 cannot tell
        // an unset 0 from an explicit 0, so 0 means unset here.
        if build.device_ordinal == 0 {
            build.device_ordinal = -1;
        }
        // XLA plans memory for `device_memory_size`: the smallest limit among the devices the
        // executable targets (all addressable ones when the options name none).
        let targets = self.devices.as_deref();
        let limit = (facts.memory_limits.iter())
            .filter(|(id, _)| targets.is_none_or(|t| t.contains(id)))
            .map(|(_, limit)| *limit)
            .min();
        if build.device_memory_size == 0
            && let Some(limit) = limit
        {
            build.device_memory_size = limit;
        }
        let spmd = build.num_partitions > 1;
        build.use_spmd_partitioning |= self.use_spmd_partitioning.unwrap_or(spmd);
        if let Some(shardy) = self.use_shardy_partitioner {
            build.use_shardy_partitioner = shardy;
        }
        // One value stands for every parameter (or output), as XLA reads a single entry.
        if let Some(p) = self.propagate_to_parameters {
            build.allow_spmd_sharding_propagation_to_parameters = vec![p];
        }
        if let Some(p) = self.propagate_to_outputs {
            build.allow_spmd_sharding_propagation_to_output = vec![p];
        }
        proto.executable_build_options = Some(build);
        let from_flags = std::env::var("XLA_FLAGS").unwrap_or_default();
        set_overrides(
            &mut proto.env_option_overrides,
            &self.xla_options,
            &from_flags,
        );
        Ok(proto)
    }

    /// [`to_proto`](Self::to_proto), encoded with [`encode_options`].
    pub fn to_bytes(&self, facts: &DeviceFacts) -> Result<Vec<u8>> {
        Ok(encode_options(&self.to_proto(facts)?))
    }
}

impl CompileOptions {
    /// These options for a program that says how it is partitioned (`mhlo.num_partitions`,
    /// Shardy attributes, as JAX writes them): what the program says fills what the options
    /// leave unset, and a count that disagrees with the options is an error.
    pub fn for_program(&self, program: &ProgramPartitioning) -> Result<CompileOptions> {
        let mut options = self.clone();
        let counts = [
            (
                "num_partitions",
                &mut options.num_partitions,
                program.num_partitions,
            ),
            (
                "num_replicas",
                &mut options.num_replicas,
                program.num_replicas,
            ),
        ];
        for (name, option, says) in counts {
            match (*option, says) {
                (Some(given), Some(says)) if given != says && !self.portable => {
                    return Err(Error::InvalidArgument(format!(
                        "compile options: {name} = {given}, but the program says mhlo.{name} = {says}"
                    )));
                }
                (None, Some(says)) if !self.portable => *option = Some(says),
                _ => {}
            }
        }
        if program.sharded_bytecode && options.num_partitions.is_none() {
            return Err(Error::InvalidArgument(
                "compile options: this MLIR bytecode program is sharded (it carries sharding attributes), and its partition count could not be read from it: set CompileOptions::num_partitions (JAX's Exported.nr_devices), or pass the program as text (Exported.mlir_module())".into(),
            ));
        }
        if program.shardy && options.use_shardy_partitioner.is_none() {
            options.use_shardy_partitioner = Some(true);
        }
        Ok(options)
    }
}

fn check_assignment(
    a: &DeviceAssignmentProto,
    build: &ExecutableBuildOptionsProto,
    facts: &DeviceFacts,
) -> std::result::Result<(), String> {
    if a.replica_count as i64 != build.num_replicas
        || a.computation_count as i64 != build.num_partitions
    {
        return Err(format!(
            "device assignment is {}×{} but the build asks for {}×{}",
            a.replica_count, a.computation_count, build.num_replicas, build.num_partitions
        ));
    }
    if a.computation_devices.len() != a.computation_count as usize {
        return Err("device assignment has the wrong number of computations".into());
    }
    let mut seen = std::collections::HashSet::new();
    for c in &a.computation_devices {
        if c.replica_device_ids.len() != a.replica_count as usize {
            return Err("device assignment has the wrong number of replicas".into());
        }
        for &id in &c.replica_device_ids {
            match facts.devices.iter().find(|(d, _)| *d as i64 == id) {
                None => {
                    return Err(format!(
                        "device assignment names device {id}, which does not exist"
                    ));
                }
                Some((_, false)) => {
                    return Err(format!("device {id} is not addressable from this process"));
                }
                Some(_) => {}
            }
            if !seen.insert(id) {
                return Err(format!("device assignment uses device {id} twice"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four devices; the last is not addressable from this process.
    fn facts() -> DeviceFacts {
        DeviceFacts {
            devices: vec![(0, true), (1, true), (2, true), (7, false)],
            memory_limits: vec![(0, 1 << 30), (1, 1 << 30), (2, 1 << 30)],
        }
    }

    fn options(replicas: usize, partitions: usize, devices: Option<Vec<i32>>) -> CompileOptions {
        CompileOptions {
            num_replicas: Some(replicas),
            num_partitions: Some(partitions),
            devices,
            ..Default::default()
        }
    }

    #[test]
    fn options_the_plugin_would_abort_on_are_filled_in_or_refused() {
        let portable_on = |ids| CompileOptions {
            portable: true,
            devices: Some(ids),
            ..Default::default()
        };
        let cases: Vec<(&str, CompileOptions, Option<&str>)> = vec![
            ("defaults", CompileOptions::default(), None),
            ("zero replicas become one", options(0, 0, None), None),
            ("two replicas", options(2, 1, Some(vec![1, 0])), None),
            (
                "more than the devices",
                options(5, 1, None),
                Some("need 5 devices"),
            ),
            (
                "wrong count of ids",
                options(2, 1, Some(vec![0])),
                Some("1 devices given"),
            ),
            (
                "unknown id",
                options(1, 1, Some(vec![9])),
                Some("device 9, which does not exist"),
            ),
            (
                "not addressable",
                options(1, 1, Some(vec![7])),
                Some("not addressable"),
            ),
            (
                "used twice",
                options(2, 1, Some(vec![1, 1])),
                Some("uses device 1 twice"),
            ),
            (
                "portable with ids",
                portable_on(vec![0]),
                Some("takes its device at execute time"),
            ),
            (
                "usize::MAX replicas",
                options(usize::MAX, 1, None),
                Some("= 18446744073709551615 is more"),
            ),
        ];
        for (name, opts, refused) in cases {
            match (opts.to_proto(&facts()), refused) {
                (Ok(proto), None) => {
                    let build = proto.executable_build_options.unwrap();
                    assert!(
                        build.num_replicas >= 1 && build.num_partitions >= 1,
                        "{name}"
                    );
                    assert_eq!(build.device_ordinal, -1, "{name}");
                    assert_eq!(build.device_memory_size, 1 << 30, "{name}");
                }
                (Err(e), Some(expected)) => {
                    assert!(e.to_string().contains(expected), "{name}: {e}")
                }
                (got, _) => panic!("{name}: got {got:?}, expected refusal {refused:?}"),
            }
        }
    }

    #[test]
    fn the_device_memory_size_is_the_smallest_limit_of_the_devices_targeted() {
        let facts = DeviceFacts {
            devices: vec![(0, true), (1, true), (2, true)],
            memory_limits: vec![(0, 8 << 30), (1, 2 << 30), (2, 4 << 30)],
        };
        let size = |devices: Option<Vec<i32>>| {
            let o = CompileOptions {
                devices,
                ..Default::default()
            };
            o.to_proto(&facts)
                .unwrap()
                .executable_build_options
                .unwrap()
                .device_memory_size
        };
        assert_eq!(size(Some(vec![0])), 8 << 30);
        assert_eq!(size(Some(vec![2])), 4 << 30);
        assert_eq!(
            size(None),
            2 << 30,
            "no devices named: every addressable one"
        );
        let none = DeviceFacts {
            devices: facts.devices.clone(),
            memory_limits: Vec::new(),
        };
        let o = CompileOptions::default();
        assert_eq!(
            o.to_proto(&none)
                .unwrap()
                .executable_build_options
                .unwrap()
                .device_memory_size,
            0,
            "no statistics (CPU): left to XLA"
        );
    }

    #[test]
    fn device_ids_are_laid_out_replica_major_per_partition() {
        let proto = options(2, 2, Some(vec![0, 1, 2, 3]))
            .to_proto(&DeviceFacts {
                devices: (0..4).map(|i| (i, true)).collect(),
                memory_limits: Vec::new(),
            })
            .unwrap();
        let assignment = proto
            .executable_build_options
            .unwrap()
            .device_assignment
            .unwrap();
        let per_partition: Vec<Vec<i64>> = (assignment.computation_devices.iter())
            .map(|c| c.replica_device_ids.clone())
            .collect();
        assert_eq!(per_partition, vec![vec![0, 2], vec![1, 3]]);
    }
}
