//! How a client is configured: `ClientConfig`, and the check of plugin create options that
//! runs before the plugin sees them (a wrongly typed value aborts the CPU plugin).

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::pjrt::NamedValue;

/// How to open a client.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// An explicit plugin file; `None` runs discovery.
    pub plugin_path: Option<PathBuf>,
    /// Plugin create options, validated before the plugin sees them.
    pub options: Vec<(String, NamedValue)>,
    /// Compiler actors in the pool; default: the number of cores.
    pub compile_threads: Option<usize>,
    /// How long shutting the client down (or dropping its last handle) waits for the compile
    /// workers' current jobs; default `runtime::DEFAULT_SHUTDOWN_TIMEOUT` (120 s).
    pub shutdown_timeout: Option<std::time::Duration>,
    /// Async executes one device's actor takes in flight before refusing more with
    /// `Error::Busy` (`None`: no limit).
    pub device_queue_limit: Option<usize>,
    /// Persistent compile cache directory; default: env `PJRT_ACTORS_CACHE_DIR`, else none.
    pub cache_dir: Option<PathBuf>,
    /// Bound of the persistent cache in bytes; default 1 GiB.
    pub cache_max_bytes: Option<u64>,
    /// Executables kept by the memory cache (least recently used evicted); default 512, 0 = off.
    pub memory_cache_entries: Option<usize>,
    /// Compile requests queued or running at once; past it `compile` waits. Default 256.
    pub compile_queue_bound: Option<usize>,
    /// How allocation sites are recorded for heap profiles.
    pub site_capture: crate::arrays::site::SiteCapture,
    /// Compile in worker processes started from this binary (`pjrt-actors-compile-worker`),
    /// so a program that crashes the compiler kills a worker, not the client; `None`: compile
    /// in this process.
    pub compile_worker: Option<PathBuf>,
    /// Each compile in a worker is killed past this; default env `PJRT_ACTORS_COMPILE_TIMEOUT`
    /// (seconds), else `compile_worker::DEFAULT_COMPILE_TIMEOUT` (10 minutes).
    pub compile_timeout: Option<std::time::Duration>,
    /// A worker's address-space limit in bytes, 0 for none; default env
    /// `PJRT_ACTORS_COMPILE_WORKER_MEMORY`, else half the machine's memory (at least 4 GiB).
    pub compile_worker_memory: Option<u64>,
    /// The compile cache's Redis tier; default: env `PJRT_ACTORS_CACHE_REDIS`, else none.
    pub cache_redis: Option<crate::compile::redis_cache::RedisCacheConfig>,
    /// Fleet keys signing cache entries; default: the file `PJRT_ACTORS_CACHE_KEY_FILE` names.
    pub cache_keys: Option<crate::compile::signing::CacheKeys>,
    /// The key-value store of a multi-process client (`ClientBuilder::distributed`).
    pub kv_store: Option<KvStoreHandle>,
    /// Compile as written what `compile::known_defects` fixes or refuses (or env var set).
    pub allow_known_defects: bool,
}

/// A shared key-value store, printable for `ClientConfig`'s `Debug`.
#[derive(Clone)]
pub struct KvStoreHandle(pub std::sync::Arc<dyn crate::pjrt::kv::KvStore>);

impl std::fmt::Debug for KvStoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvStore")
    }
}

/// The environment variable naming a persistent compile cache directory.
pub const CACHE_DIR_ENV: &str = "PJRT_ACTORS_CACHE_DIR";

/// The machine's memory in bytes (`MemTotal`), where /proc says.
pub fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// The most devices the CPU plugin can compile for in one process.
pub const MAX_CPU_DEVICES: i64 = 2048;

/// Create options we know the type of. A value of the wrong type makes a plugin throw a C++
/// exception through the C API, which aborts the process, so these are checked first.
const KNOWN_OPTIONS: &[(&str, &str)] = &[
    ("cpu_device_count", "int64"),
    // The 0.115 CPU plugin's: false runs each execute on the calling thread (JAX's synchronous
    // CPU dispatch); the 0.81 plugin ignores it.
    ("asynchronous", "bool"),
    ("max_inflight_computations", "int64"),
    ("platform_name", "string"),
    ("allocator", "string"),
    ("memory_fraction", "float"),
    ("preallocate", "bool"),
    ("collective_memory_size", "int64"),
    ("visible_devices", "int64 list"),
    ("node_id", "int64"),
    ("num_nodes", "int64"),
    ("enable_mock_nccl", "bool"),
    ("mock_gpu_topology", "string"),
    ("should_stage_host_to_device_transfers", "bool"),
    ("abort_collectives_on_failure", "bool"),
];

/// The values XLA's GPU plugin takes for `allocator` (JAX's `XLA_PYTHON_CLIENT_ALLOCATOR`).
const ALLOCATORS: &[&str] = &["default", "platform", "bfc", "cuda_async"];

/// What is wrong with a known option's value: plugins take these and misbehave later, or throw.
fn value_problem(name: &str, value: &NamedValue) -> Option<String> {
    match (name, value) {
        // XLA's CPU backend gives each process a block of 2,048 device ids: a device past
        // 2,047 opens, then fails every compile as "multiprocess".
        ("cpu_device_count", NamedValue::Int64(n)) if !(1..=MAX_CPU_DEVICES).contains(n) => {
            Some(format!("must be between 1 and {MAX_CPU_DEVICES}, got {n}"))
        }
        ("memory_fraction", NamedValue::Float(f)) if !(*f > 0.0 && *f <= 1.0) => {
            Some(format!("must be in (0, 1], got {f}"))
        }
        ("allocator", NamedValue::String(a)) if !ALLOCATORS.contains(&a.as_str()) => Some(format!(
            "`{a}` is not an allocator; one of: {}",
            ALLOCATORS.join(", ")
        )),
        ("num_nodes", NamedValue::Int64(n)) if *n < 1 => {
            Some(format!("a client has at least 1 node, got {n}"))
        }
        ("node_id" | "collective_memory_size", NamedValue::Int64(n)) if *n < 0 => {
            Some(format!("must be 0 or more, got {n}"))
        }
        ("visible_devices", NamedValue::Int64List(ids)) => {
            if ids.is_empty() {
                Some("names no device; give ids like 0,1".into())
            } else if let Some(id) = ids.iter().find(|id| **id < 0) {
                Some(format!("{id} is not a device id (0 or more)"))
            } else {
                (ids.iter().enumerate())
                    .find(|(i, id)| ids[..*i].contains(id))
                    .map(|(_, id)| format!("device {id} is named twice"))
            }
        }
        _ => None,
    }
}

/// Checks `visible_devices` against the devices the plugin made: an unknown id is refused.
pub fn check_visible_devices(options: &[(String, NamedValue)], local_ids: &[i32]) -> Result<()> {
    let Some((_, NamedValue::Int64List(ids))) =
        options.iter().find(|(n, _)| n == "visible_devices")
    else {
        return Ok(());
    };
    match ids
        .iter()
        .find(|id| !local_ids.iter().any(|l| i64::from(*l) == **id))
    {
        None => Ok(()),
        Some(id) => Err(Error::InvalidOption {
            name: "visible_devices".into(),
            reason: format!(
                "the plugin has no device {id}; its devices are {}",
                (local_ids.iter().map(i32::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// Checks option names are unique and known options have the type the plugin expects.
pub fn validate_options(options: &[(String, NamedValue)]) -> Result<()> {
    for (i, (name, value)) in options.iter().enumerate() {
        if options[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::InvalidOption {
                name: name.clone(),
                reason: "given more than once".into(),
            });
        }
        match KNOWN_OPTIONS.iter().find(|(n, _)| *n == name) {
            Some((_, expected)) if *expected != value.type_name() => {
                return Err(Error::InvalidOption {
                    name: name.clone(),
                    reason: format!("expected a {expected} value, got a {}", value.type_name()),
                });
            }
            Some(_) => {}
            None => {
                tracing::warn!(option = %name, "create option unknown to pjrt-actors; passed through")
            }
        }
        if let Some(reason) = value_problem(name, value) {
            return Err(Error::InvalidOption {
                name: name.clone(),
                reason,
            });
        }
        if name == "node_id"
            && let (NamedValue::Int64(id), Some((_, NamedValue::Int64(nodes)))) =
                (value, options.iter().find(|(n, _)| n == "num_nodes"))
            && id >= nodes
        {
            return Err(Error::InvalidOption {
                name: name.clone(),
                reason: format!("node {id} of {nodes}: must be between 0 and {}", nodes - 1),
            });
        }
    }
    Ok(())
}

/// A create option from text (`--option preallocate=false`, an environment variable), typed by
/// the known-options table: `int64` (`4`), `bool` (`true`/`false`/`1`/`0`), `float`
/// (`0.5`), `string`, `int64 list` (`0,1`). An unknown name or a value of the wrong form is an
/// `InvalidOption` error, before any plugin sees it.
pub fn parse_option(name: &str, value: &str) -> Result<(String, NamedValue)> {
    let bad = |reason: String| Error::InvalidOption {
        name: name.to_string(),
        reason,
    };
    let Some((_, kind)) = KNOWN_OPTIONS.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = KNOWN_OPTIONS.iter().map(|(n, _)| *n).collect();
        return Err(bad(format!("unknown option; known: {}", known.join(", "))));
    };
    let v = value.trim();
    let parsed = match *kind {
        "int64" => NamedValue::Int64(
            v.parse()
                .map_err(|_| bad(format!("`{v}` is not an integer")))?,
        ),
        "float" => NamedValue::Float(
            v.parse()
                .map_err(|_| bad(format!("`{v}` is not a number")))?,
        ),
        "bool" => NamedValue::Bool(match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => true,
            "false" | "0" | "no" => false,
            _ => return Err(bad(format!("`{v}` is not true or false"))),
        }),
        "int64 list" => NamedValue::Int64List(
            (v.split(',').map(str::trim).filter(|x| !x.is_empty()))
                .map(|x| {
                    x.parse()
                        .map_err(|_| bad(format!("`{x}` in `{v}` is not an integer")))
                })
                .collect::<Result<Vec<i64>>>()?,
        ),
        _ => NamedValue::String(v.to_string()),
    };
    let option = (name.to_string(), parsed);
    validate_options(std::slice::from_ref(&option))?;
    Ok(option)
}

/// `NAME=VALUE`, parsed by `parse_option`.
pub fn parse_option_assignment(text: &str) -> Result<(String, NamedValue)> {
    let (name, value) = text.split_once('=').ok_or_else(|| Error::InvalidOption {
        name: text.to_string(),
        reason: "expected NAME=VALUE".into(),
    })?;
    parse_option(name.trim(), value)
}

/// Environment variables that set create options, ours first, then JAX's names (so a JAX
/// user's settings carry over): (variables, option).
pub const OPTION_ENV: &[(&[&str], &str)] = &[
    (
        &["PJRT_ACTORS_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE"],
        "preallocate",
    ),
    (
        &["PJRT_ACTORS_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"],
        "memory_fraction",
    ),
    (
        &["PJRT_ACTORS_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR"],
        "allocator",
    ),
    (&["PJRT_ACTORS_VISIBLE_DEVICES"], "visible_devices"),
    // The CPU plugin's only option. Not JAX's `JAX_NUM_CPU_DEVICES`: JAX applies that to its
    // CPU backend only, and a GPU plugin refuses option names it does not know.
    (&["PJRT_ACTORS_CPU_DEVICE_COUNT"], "cpu_device_count"),
    // JAX's `jax_cpu_enable_async_dispatch`; a plugin without the option opens without it.
    (
        &[
            "PJRT_ACTORS_CPU_ASYNCHRONOUS",
            "JAX_CPU_ENABLE_ASYNC_DISPATCH",
        ],
        "asynchronous",
    ),
];

/// The create options the environment sets, for options `given` does not set already; `env`
/// reads a variable (the process environment, or a table in tests).
pub fn options_from_env(
    given: &[(String, NamedValue)],
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, NamedValue)>> {
    let mut out = Vec::new();
    for (vars, option) in OPTION_ENV {
        if given.iter().any(|(n, _)| n == option) {
            continue;
        }
        let found = vars
            .iter()
            .find_map(|v| env(v).filter(|x| !x.is_empty()).map(|x| (v, x)));
        if let Some((var, value)) = found {
            out.push(
                parse_option(option, &value).map_err(|e| Error::InvalidOption {
                    name: format!("{option} (from {var})"),
                    reason: match e {
                        Error::InvalidOption { reason, .. } => reason,
                        other => other.to_string(),
                    },
                })?,
            );
        }
    }
    Ok(out)
}

/// The option a plugin's `PJRT_Client_Create` error says it does not know, if that is what it
/// says (the 0.115 CPU plugin: "Unexpected option name passed to PJRT_Client_Create: NAME").
pub fn refused_option(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("Unexpected option name passed to PJRT_Client_Create: ")?;
    let name = rest.split(|c: char| c.is_whitespace() || c == ',').next()?;
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_from_text_by_their_known_type() {
        use NamedValue::*;
        let cases: &[(&str, std::result::Result<NamedValue, &str>)] = &[
            ("preallocate=false", Ok(Bool(false))),
            ("preallocate=1", Ok(Bool(true))),
            ("memory_fraction=0.5", Ok(Float(0.5))),
            ("cpu_device_count=8", Ok(Int64(8))),
            ("visible_devices=0, 2", Ok(Int64List(vec![0, 2]))),
            ("allocator=platform", Ok(String("platform".into()))),
            ("preallocate=maybe", Err("not true or false")),
            ("memory_fraction=1.5", Err("must be in (0, 1]")),
            ("cpu_device_count=four", Err("not an integer")),
            ("visible_devices=0,x", Err("`x` in `0,x` is not an integer")),
            ("no_such_option=1", Err("unknown option")),
            ("preallocate", Err("expected NAME=VALUE")),
            // Values the plugins took without a word (issue 22, D14).
            (
                "allocator=bogus",
                Err("`bogus` is not an allocator; one of: default"),
            ),
            ("allocator=cuda_async", Ok(String("cuda_async".into()))),
            ("num_nodes=0", Err("at least 1 node")),
            ("node_id=-1", Err("must be 0 or more")),
            ("visible_devices=", Err("names no device")),
            ("visible_devices=0,-3", Err("-3 is not a device id")),
            ("visible_devices=1,1", Err("device 1 is named twice")),
            ("visible_devices=99", Ok(Int64List(vec![99]))),
        ];
        for (text, want) in cases {
            match (parse_option_assignment(text), want) {
                (Ok((_, v)), Ok(w)) => assert_eq!(&v, w, "{text}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_node_id_past_the_node_count_and_a_device_the_plugin_lacks_are_refused() {
        use NamedValue::*;
        let nodes = |id, n| {
            vec![
                ("num_nodes".to_string(), Int64(n)),
                ("node_id".to_string(), Int64(id)),
            ]
        };
        assert!(validate_options(&nodes(1, 2)).is_ok());
        let err = validate_options(&nodes(2, 2)).unwrap_err();
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
        let visible = vec![("visible_devices".to_string(), Int64List(vec![0, 99]))];
        assert!(check_visible_devices(&visible, &[0, 1, 99]).is_ok());
        let err = check_visible_devices(&visible, &[0, 1, 2, 3]).unwrap_err();
        assert!(
            err.to_string()
                .contains("no device 99; its devices are 0, 1, 2, 3"),
            "{err}"
        );
        assert!(check_visible_devices(&[], &[0]).is_ok());
    }

    #[test]
    fn the_environment_sets_options_not_given_ours_before_jax_names() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let got = options_from_env(
            &[],
            env(&[
                ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
                ("PJRT_ACTORS_MEM_FRACTION", "0.25"),
                ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9"),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("preallocate".into(), NamedValue::Bool(false)),
                ("memory_fraction".into(), NamedValue::Float(0.25))
            ]
        );
        let given = vec![("preallocate".to_string(), NamedValue::Bool(true))];
        assert!(
            options_from_env(&given, env(&[("PJRT_ACTORS_PREALLOCATE", "false")]))
                .unwrap()
                .is_empty(),
            "an explicit option wins"
        );
        let err = options_from_env(&[], env(&[("PJRT_ACTORS_MEM_FRACTION", "lots")])).unwrap_err();
        assert!(
            err.to_string().contains("PJRT_ACTORS_MEM_FRACTION"),
            "{err}"
        );
    }

    fn check(options: &[(&str, NamedValue)]) -> std::result::Result<(), String> {
        let options: Vec<_> = options
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        validate_options(&options).map_err(|e| e.to_string())
    }

    /// Options, and the words of the refusal they get (`None`: accepted).
    type Case<'a> = (&'a [(&'a str, NamedValue)], Option<&'a str>);

    #[test]
    fn create_options_the_plugin_would_abort_on_are_refused() {
        use NamedValue::*;
        let cases: &[Case] = &[
            (&[("cpu_device_count", Int64(4))], None),
            (
                &[("cpu_device_count", String("4".into()))],
                Some("expected a int64 value"),
            ),
            (
                &[("cpu_device_count", Int64(0))],
                Some("between 1 and 2048"),
            ),
            (
                &[("cpu_device_count", Int64(2049))],
                Some("between 1 and 2048"),
            ),
            (&[("cpu_device_count", Int64(2048))], None),
            (
                &[("memory_fraction", Float(0.0))],
                Some("must be in (0, 1]"),
            ),
            (&[("memory_fraction", Float(0.5))], None),
            (&[("preallocate", Int64(1))], Some("expected a bool value")),
            (
                &[("preallocate", Bool(false)), ("preallocate", Bool(true))],
                Some("given more than once"),
            ),
            (&[("some_future_option", Int64(1))], None),
        ];
        for (options, refused) in cases {
            match (check(options), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(expected)) => assert!(e.contains(expected), "{options:?}: {e}"),
                (got, _) => panic!("{options:?}: {got:?}, expected {refused:?}"),
            }
        }
    }

    #[test]
    fn an_option_the_plugin_refuses_is_named_from_its_message() {
        let cases = [
            (
                "Unexpected option name passed to PJRT_Client_Create: preallocate",
                Some("preallocate"),
            ),
            (
                "INVALID_ARGUMENT: Unexpected option name passed to PJRT_Client_Create: visible_devices, and more",
                Some("visible_devices"),
            ),
            (
                "Unexpected option name passed to PJRT_Client_Create: ",
                None,
            ),
            ("preallocate must be a bool", None),
        ];
        for (message, want) in cases {
            assert_eq!(refused_option(message), want, "{message}");
        }
    }
}
