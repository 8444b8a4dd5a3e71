//! Running a serialized jax.export artifact as JAX calls it: the platform index argument of a
//! multi-platform export, the arguments the module does not keep dropped, every argument checked
//! against its aval, and a multi-device export run as the SPMD program it is.

mod arrays;
mod serve;
mod weights;

pub use weights::dotted_path;

use weights::read_safetensors;

use pjrt_actors_core::formats::exported::{Aval, Dim, Exported, ExportedDtype};
use pjrt_actors_core::{Error, Result};

use crate::host_data::HostArray;
use crate::{
    Array, ArrayType, Client, CompileOptions, ElementType, LoadedExecutable, ShardedArray,
};

/// The host form of an aval: its element type and dims. A PRNG key travels as its key data,
/// `uint32` with the implementation's words as a last dimension (what `jax.random.key_data`
/// gives and what the module takes); a symbolic dim, refused at load, reads as -1. None for a
/// dtype this reader does not know, which no host data matches.
fn host_type(aval: &Aval) -> Option<(ElementType, Vec<i64>)> {
    let mut dims: Vec<i64> = (aval.dims.iter())
        .map(|d| match d {
            Dim::Known(n) => *n,
            Dim::Symbolic(_) => -1,
        })
        .collect();
    match aval.dtype {
        ExportedDtype::Array(t) => Some((t, dims)),
        ExportedDtype::Key(implementation) => {
            dims.push(if implementation == "fry" { 2 } else { 4 });
            Some((ElementType::U32, dims))
        }
        ExportedDtype::Unknown(_) => None,
    }
}

/// The calling convention versions JAX 0.10 and 0.11 write and call (jax's
/// `minimum_supported_calling_convention_version` through its maximum).
pub const CALLING_CONVENTIONS: std::ops::RangeInclusive<u16> = 9..=10;

/// The platform index argument, as the module takes it: an s32 scalar.
fn platform_index_data(index: i32) -> HostArray {
    HostArray {
        dtype: ElementType::S32,
        dims: Vec::new(),
        bytes: index.to_le_bytes().to_vec(),
    }
}

fn types_text(types: &[ArrayType]) -> String {
    let each: Vec<String> = types
        .iter()
        .map(|t| format!("{}{:?}", t.dtype, t.dims))
        .collect();
    format!("({})", each.join(", "))
}

fn array_type(aval: &Aval) -> Option<ArrayType> {
    host_type(aval).map(|(dtype, dims)| ArrayType { dtype, dims })
}

/// A loaded export: its signature, its compiled module, and the arguments held resident on
/// its devices (weights), by input position.
pub struct ExportedModel {
    exported: Exported,
    exe: LoadedExecutable,
    /// The input leaves' paths, read from the tree once.
    paths: Vec<String>,
    /// Where arguments go, read from the executable once: its parameter shardings (an SPMD
    /// module), else its device.
    placement: Placement,
    /// The platform index argument, where the export lists several platforms, and its value
    /// held on the devices (it is the same at every call).
    platform_index: Option<i32>,
    platform_arg: Option<Held>,
    /// Per input leaf, whether a weight file gave it, and its value held on the devices (none
    /// for an argument the module does not keep).
    from_weights: Vec<bool>,
    resident: Vec<Option<Held>>,
}

/// Where an export's arguments are uploaded.
enum Placement {
    Sharded(Vec<crate::Sharding>),
    OnDevice(crate::Device),
}

/// An argument uploaded: one array, or one sharded over an SPMD module's devices.
#[derive(Clone)]
enum Held {
    OnDevice(Array),
    Sharded(ShardedArray),
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
        if !CALLING_CONVENTIONS.contains(&exported.calling_convention_version) {
            return Err(refused(format!(
                "calling convention version {}; JAX and this runtime call {}..={}",
                exported.calling_convention_version,
                CALLING_CONVENTIONS.start(),
                CALLING_CONVENTIONS.end()
            )));
        }
        // A multi-platform export sets `uses_global_constants` for its platform index, which
        // is passed as an argument; without one, the constants are shapes to refine.
        if exported.uses_global_constants && exported.platforms.len() < 2 {
            return Err(refused(
                "uses global constants without a platform index, so its module needs shape refinement, which the plugin does not do; export with concrete shapes".into(),
            ));
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
        let n = exported.in_avals.len();
        let placement = match exe.parameter_shardings() {
            Some(shardings) => Placement::Sharded(shardings),
            None => Placement::OnDevice(exe.addressable_devices()[0].clone()),
        };
        let mut model = ExportedModel {
            paths: exported.in_paths(),
            exported,
            exe,
            placement,
            platform_index,
            platform_arg: None,
            from_weights: vec![false; n],
            resident: vec![None; n],
        };
        model.check_module()?;
        if let Some(index) = platform_index {
            model.platform_arg = Some(model.upload(0, &platform_index_data(index))?);
        }
        Ok(model)
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

    /// Holds the tensors of a weights file (`.safetensors`, or NumPy's `.npz` as `np.savez`
    /// writes it, told apart by their first bytes) as the arguments they name, matched to the
    /// input paths (`[0]['layer0']['w']`, written `0.layer0.w`, or any unique dotted suffix
    /// of it such as `layer0.w`), each checked against its aval; returns how many were
    /// matched. A tensor that matches no argument, or several, is an error naming it.
    pub fn load_params(&mut self, bytes: &[u8]) -> Result<usize> {
        let tensors = if bytes.starts_with(b"PK\x03\x04") {
            crate::host_data::read_npz(bytes)?
        } else {
            read_safetensors(bytes)?
        };
        self.load_tensors(tensors)
    }

    /// Holds named tensors already in memory as the arguments they name, as
    /// [`load_params`](Self::load_params) does a file's. Every tensor is matched and checked
    /// before any is held, so a refused file changes nothing; two tensors that name one
    /// argument are refused, naming both (whatever order the file lists them in).
    pub fn load_tensors(
        &mut self,
        tensors: impl IntoIterator<Item = (String, HostArray)>,
    ) -> Result<usize> {
        let mut tensors: Vec<(String, HostArray)> = tensors.into_iter().collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let mut named_by: Vec<Option<&str>> = vec![None; self.paths.len()];
        let mut matched = Vec::with_capacity(tensors.len());
        for (name, data) in &tensors {
            let i = self.input_named(name, "weight")?;
            if let Some(other) = named_by[i] {
                return Err(refused(format!(
                    "the weights `{other}` and `{name}` both name argument {i} ({}); a weights file names each argument once",
                    self.paths[i]
                )));
            }
            named_by[i] = Some(name);
            self.check_arg(i, data)?;
            matched.push(i);
        }
        for (i, (_, data)) in matched.iter().zip(&tensors) {
            // An argument the module does not keep is checked, and needs no upload.
            if let Some(j) = self.module_param(*i) {
                self.resident[*i] = Some(self.upload(j, data)?);
            }
            self.from_weights[*i] = true;
        }
        Ok(matched.len())
    }

    /// The input leaf `name` names: its path (`[0]['layer0']['w']`) or that path dotted
    /// (`0.layer0.w`), else the one path it is a dotted suffix of (`layer0.w`).
    fn input_named(&self, name: &str, what: &str) -> Result<usize> {
        match_path(&self.paths, name).map_err(|hits| {
            refused(format!(
                "the {what} `{name}` matches {hits} arguments; the arguments are {}",
                self.paths.join(", ")
            ))
        })
    }

    /// The input paths still to be given at each call (the ones not held resident).
    pub fn free_inputs(&self) -> Vec<String> {
        (self.paths.iter().zip(&self.from_weights))
            .filter(|(_, weight)| !**weight)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// That the compiled module takes and returns what the avals say: the platform index, then
    /// the kept arguments; then the results. An artifact whose parts disagree is refused here,
    /// not at its first call.
    fn check_module(&self) -> Result<()> {
        let e = &self.exported;
        let index = ArrayType {
            dtype: ElementType::S32,
            dims: Vec::new(),
        };
        let expected_params = (self.platform_index.map(|_| Some(index)).into_iter())
            .chain((e.module_kept_var_idx.iter()).map(|&k| array_type(&e.in_avals[k as usize])));
        let sides = [
            (
                "parameters",
                expected_params.collect::<Vec<_>>(),
                self.exe.global_parameter_types(),
            ),
            (
                "results",
                e.out_avals.iter().map(array_type).collect(),
                self.exe.global_output_types(),
            ),
        ];
        for (side, want, module) in sides {
            let want: Option<Vec<ArrayType>> = want.into_iter().collect();
            if want.as_ref() != Some(&module) {
                return Err(refused(format!(
                    "its avals and kept arguments say the module's {side} are {}; the module's are {}",
                    want.map_or("of a dtype we do not know".into(), |w| types_text(&w)),
                    types_text(&module)
                )));
            }
        }
        Ok(())
    }

    /// Whether the module reads each of the [`free_inputs`](Self::free_inputs), in order: JAX
    /// drops an argument its function never uses (`module_kept_var_idx`). A dropped one is
    /// still passed to [`call`](Self::call), checked for its type only, its bytes never read.
    pub fn free_inputs_used(&self) -> Vec<bool> {
        (0..self.paths.len())
            .filter(|&i| !self.from_weights[i])
            .map(|i| self.module_param(i).is_some())
            .collect()
    }

    /// The host types of the [`free_inputs`](Self::free_inputs), in order (a PRNG key as its
    /// key data); `None` for one of a dtype this runtime does not know.
    pub fn free_input_types(&self) -> Vec<Option<ArrayType>> {
        (self.exported.in_avals.iter().enumerate())
            .filter(|(i, _)| !self.from_weights[*i])
            .map(|(_, aval)| array_type(aval))
            .collect()
    }

    fn check_arg(&self, i: usize, arg: &HostArray) -> Result<()> {
        let aval = &self.exported.in_avals[i];
        if host_type(aval) != Some((arg.dtype, arg.dims.clone())) {
            return Err(refused(format!(
                "argument {i} ({}) is {}{:?}; the export takes {aval}{}",
                self.paths[i],
                arg.dtype,
                arg.dims,
                match aval.dtype {
                    ExportedDtype::Key(_) => " (its key data: jax.random.key_data)",
                    ExportedDtype::Array(_) | ExportedDtype::Unknown(_) => "",
                }
            )));
        }
        Ok(())
    }

    /// The module parameter input leaf `i` is passed as, if the module keeps it (after the
    /// platform index, where there is one).
    fn module_param(&self, i: usize) -> Option<usize> {
        let at = (self.exported.module_kept_var_idx.iter()).position(|&k| k as usize == i)?;
        Some(at + self.platform_index.is_some() as usize)
    }

    /// Uploads `data` as module parameter `j`: sharded as the SPMD module expects, else to
    /// its device.
    fn upload(&self, j: usize, data: &HostArray) -> Result<Held> {
        let client = self.exe.client();
        Ok(match &self.placement {
            Placement::Sharded(shardings) => {
                Held::Sharded(client.put_sharded(data, &shardings[j])?)
            }
            Placement::OnDevice(device) => Held::OnDevice(device.put_array(data)?),
        })
    }

    /// Calls the function on the arguments not held resident ([`free_inputs`](Self::free_inputs),
    /// flattened, in path order; an unused one is checked for its type and dropped, its bytes
    /// never read), returning its flattened results. Resident weights are not uploaded again.
    pub fn call(&self, args: &[HostArray]) -> Result<Vec<HostArray>> {
        let e = &self.exported;
        let free = self.from_weights.iter().filter(|weight| !**weight).count();
        if args.len() != free {
            return Err(refused(format!(
                "{} takes {free} arguments ({}); {} given",
                e.function_name,
                self.free_inputs().join(", "),
                args.len()
            )));
        }
        let mut module_args: Vec<Option<Held>> =
            vec![None; e.module_kept_var_idx.len() + self.platform_index.is_some() as usize];
        if let Some(index) = &self.platform_arg {
            module_args[0] = Some(index.clone());
        }
        let mut given = args.iter();
        // The arguments uploaded for this call are its own: where the module may donate one
        // (exported with donate_argnums), it is donated, saving the copy XLA makes otherwise.
        let mut uploaded = Vec::new();
        for (i, held) in self.resident.iter().enumerate() {
            let j = self.module_param(i);
            match (self.from_weights[i], held, j) {
                (true, Some(h), Some(j)) => module_args[j] = Some(h.clone()),
                (true, _, _) => {}
                (false, _, _) => {
                    let arg = given.next().expect("counted above");
                    self.check_arg(i, arg)?;
                    if let Some(j) = j {
                        module_args[j] = Some(self.upload(j, arg)?);
                        uploaded.push(j);
                    }
                }
            }
        }
        let module_args: Vec<Held> = module_args
            .into_iter()
            .map(|a| a.expect("every parameter filled"))
            .collect();
        let donors = self.exe.donatable_parameters();
        uploaded.retain(|j| donors.contains(j));
        if let Placement::Sharded(_) = self.placement {
            let sharded: Vec<&ShardedArray> = (module_args.iter())
                .map(|h| match h {
                    Held::Sharded(s) => s,
                    Held::OnDevice(_) => unreachable!("an SPMD module's arguments are sharded"),
                })
                .collect();
            return (self
                .exe
                .execute_sharded_donating(&sharded, &uploaded)?
                .iter())
            .map(|s| s.to_host())
            .collect();
        }
        let arrays: Vec<&Array> = (module_args.iter())
            .map(|h| match h {
                Held::OnDevice(a) => a,
                Held::Sharded(_) => unreachable!("a one-device module's arguments are arrays"),
            })
            .collect();
        (self.exe.execute_donating(&arrays, &uploaded)?.iter())
            .map(Array::to_host_array)
            .collect()
    }
}

/// The path among `paths` that `name` names: one equal to it, as written or dotted, wins
/// (`0.0.w` is that path even where it is also a suffix of `0.0.0.w`); else the one whose
/// dotted form ends with `.name`. `Err`: how many paths it fits otherwise (0, or several).
fn match_path(paths: &[String], name: &str) -> std::result::Result<usize, usize> {
    let dotted: Vec<String> = paths.iter().map(|p| dotted_path(p)).collect();
    let exact: Vec<usize> = (0..paths.len())
        .filter(|&i| paths[i] == name || dotted[i] == name)
        .collect();
    let hits = match exact.is_empty() {
        false => exact,
        true => (0..paths.len())
            .filter(|&i| dotted[i].ends_with(&format!(".{name}")))
            .collect(),
    };
    match hits.as_slice() {
        &[i] => Ok(i),
        _ => Err(hits.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_matches_its_exact_path_first_then_a_unique_suffix() {
        let paths: Vec<String> = [
            "[0][0]['w']",
            "[0][0][0]['w']",
            "[0][1]['layer0']['w']",
            "[0][1]['layer1']['w']",
        ]
        .map(String::from)
        .to_vec();
        // (name, the path it names, or how many it fits)
        let cases: [(&str, std::result::Result<usize, usize>); 7] = [
            ("0.0.w", Ok(0)),
            ("[0][0]['w']", Ok(0)),
            ("0.0.0.w", Ok(1)),
            ("layer0.w", Ok(2)),
            ("1.layer1.w", Ok(3)),
            ("w", Err(4)),
            ("layer2.w", Err(0)),
        ];
        for (name, want) in cases {
            assert_eq!(match_path(&paths, name), want, "{name}");
        }
    }
}
