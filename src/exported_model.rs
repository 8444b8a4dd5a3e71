//! Running a serialized jax.export artifact as JAX calls it: the platform index argument of a
//! multi-platform export, the arguments the module does not keep dropped, every argument checked
//! against its aval, and a multi-device export run as the SPMD program it is.

use pjrt_actors_core::exported::{Dim, Exported, ExportedDtype};
use pjrt_actors_core::{Error, Result};

use crate::host_data::HostData;
use crate::{Array, Client, CompileOptions, ElementType, HostBuffer, LoadedExecutable};

/// A loaded export: its signature and its compiled module.
pub struct ExportedModel {
    exported: Exported,
    exe: LoadedExecutable,
    /// The platform index argument, where the export lists several platforms.
    platform_index: Option<i32>,
}

fn refused(what: String) -> Error {
    Error::InvalidArgument(format!("exported artifact: {what}"))
}

/// The names JAX's exports use for this client's platform.
fn platform_names(platform: &str) -> &'static [&'static str] {
    match platform {
        "cpu" => &["cpu"],
        "cuda" | "gpu" => &["cuda"],
        "rocm" => &["rocm"],
        "tpu" => &["tpu"],
        _ => &[],
    }
}

impl Client {
    /// Loads a serialized `Exported` (`Exported.serialize()`'s bytes) to run on this client.
    /// Refused with a typed error: a platform the export does not list (unless it disabled
    /// that check), a shape-polymorphic export (the plugin does not refine shapes: export
    /// with concrete shapes), ordered effects (their tokens), or more devices than this
    /// client has. A multi-device export compiles as the SPMD program it is.
    pub fn load_exported(&self, bytes: &[u8]) -> Result<ExportedModel> {
        let exported = Exported::parse(bytes)?;
        let platform = self.raw_platform_name().to_string();
        let names = platform_names(&platform);
        let position = (exported.platforms.iter()).position(|p| names.contains(&p.as_str()));
        let platform_index = match (position, exported.platforms.len()) {
            (Some(i), n) => (n > 1).then_some(i as i32),
            (None, _) if exported.disabled_checks.iter().any(|c| c == "platform") => {
                (exported.platforms.len() > 1).then_some(0)
            }
            (None, _) => {
                return Err(refused(format!(
                    "exported for {:?}; this client is {platform} (export with platforms including it, or disable the platform check)",
                    exported.platforms
                )));
            }
        };
        let symbolic = (exported.in_avals.iter())
            .any(|a| a.dims.iter().any(|d| matches!(d, Dim::Symbolic(_))));
        // `uses_global_constants` alone is no reason: a multi-platform export sets it for its
        // platform index, which is passed as an argument.
        if symbolic {
            return Err(refused(
                "shape-polymorphic (symbolic dimensions): the plugin does not refine shapes; export with concrete shapes".into(),
            ));
        }
        if !exported.ordered_effects.is_empty() {
            return Err(refused(format!(
                "has ordered effects {:?}, whose tokens are not threaded yet",
                exported.ordered_effects
            )));
        }
        let devices = exported.nr_devices as usize;
        if devices > self.device_count() {
            return Err(refused(format!(
                "exported for {devices} devices; this client has {}",
                self.device_count()
            )));
        }
        let options = CompileOptions {
            num_partitions: Some(devices.max(1)),
            ..Default::default()
        };
        let exe = self.compile_and_load(&exported.module, &options)?;
        Ok(ExportedModel {
            exported,
            exe,
            platform_index,
        })
    }
}

impl ExportedModel {
    /// The artifact's signature.
    pub fn signature(&self) -> &Exported {
        &self.exported
    }

    /// The compiled module.
    pub fn executable(&self) -> &LoadedExecutable {
        &self.exe
    }

    /// Calls the function on its flattened arguments (in `signature().in_paths()` order; an
    /// unused one is checked and dropped), returning its flattened results.
    pub fn call(&self, args: &[HostData]) -> Result<Vec<HostData>> {
        let e = &self.exported;
        let paths = e.in_paths();
        if args.len() != e.in_avals.len() {
            return Err(refused(format!(
                "{} takes {} arguments ({}); {} given",
                e.function_name,
                e.in_avals.len(),
                paths.join(", "),
                args.len()
            )));
        }
        for (i, (arg, aval)) in args.iter().zip(&e.in_avals).enumerate() {
            let dims: Vec<i64> = (aval.dims.iter())
                .map(|d| match d {
                    Dim::Known(n) => *n,
                    Dim::Symbolic(_) => -1,
                })
                .collect();
            if aval.dtype != ExportedDtype::Array(arg.dtype) || arg.dims != dims {
                return Err(refused(format!(
                    "argument {i} ({}) is {}{:?}; the export takes {aval}",
                    paths[i], arg.dtype, arg.dims
                )));
            }
        }
        let mut kept: Vec<HostData> = Vec::with_capacity(args.len() + 1);
        if let Some(index) = self.platform_index {
            kept.push(HostData {
                dtype: ElementType::S32,
                dims: Vec::new(),
                bytes: index.to_le_bytes().to_vec(),
            });
        }
        kept.extend(
            e.module_kept_var_idx
                .iter()
                .map(|&i| args[i as usize].clone()),
        );
        if self.exe.parameter_shardings().is_some() {
            return (self.exe.execute_sharded_host(&kept)?.iter())
                .map(|s| s.to_host())
                .collect();
        }
        let client = self.exe.client();
        let device = &self.exe.addressable_devices()[0];
        let arrays = (kept.iter())
            .map(|h| {
                client.buffer_from_host(HostBuffer::Copy(&h.bytes), h.dtype, &h.dims, device, None)
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Array> = arrays.iter().collect();
        (self.exe.execute(&refs)?.iter())
            .map(HostData::from_array)
            .collect()
    }
}
