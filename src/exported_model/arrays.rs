//! Calling an export on arrays already on its device, donating the ones JAX exported with
//! `donate_argnums` (a cache updated in place, step after step), and the outputs kept there.

use pjrt_actors_core::{Error, Result};

use super::{ExportedModel, Held, Placement, array_type, host_type, refused};
use crate::ArrayType;
use crate::{Array, Device};

impl ExportedModel {
    /// The device a one-device export runs on (`None` for an SPMD export).
    pub fn device(&self) -> Option<&Device> {
        match &self.placement {
            Placement::OnDevice(d) => Some(d),
            Placement::Sharded(_) => None,
        }
    }

    /// The types of the flattened results; `None` for one of a dtype this runtime does not
    /// know.
    pub fn output_types(&self) -> Vec<Option<ArrayType>> {
        self.exported.out_avals.iter().map(array_type).collect()
    }

    /// The [`free_inputs`](Self::free_inputs) (by their index there) that the module may
    /// donate: those JAX exported with `donate_argnums` (or `jax.buffer_donor`).
    pub fn donatable_inputs(&self) -> Vec<usize> {
        let donors = self.exe.donatable_parameters();
        (0..self.paths.len())
            .filter(|&i| !self.from_weights[i])
            .enumerate()
            .filter(|(_, i)| (self.module_param(*i)).is_some_and(|j| donors.contains(&j)))
            .map(|(k, _)| k)
            .collect()
    }

    /// Calls the function on arrays on its [`device`](Self::device), one per
    /// [free input](Self::free_inputs) (flattened, in path order; an unused one is checked for
    /// its type only), donating the free inputs at the indices `donate` (see
    /// [`donatable_inputs`](Self::donatable_inputs) and
    /// [`LoadedExecutable::execute_donating`](crate::LoadedExecutable::execute_donating): each
    /// donated array is deleted by the call and its buffer may back an output). Returns the
    /// flattened results on the device. Resident weights are passed as they are, never donated.
    pub fn call_arrays(&self, args: &[&Array], donate: &[usize]) -> Result<Vec<Array>> {
        let Placement::OnDevice(device) = &self.placement else {
            return Err(refused(
                "call_arrays runs one-device exports; call an SPMD export with call()".into(),
            ));
        };
        let free: Vec<usize> = (0..self.paths.len())
            .filter(|&i| !self.from_weights[i])
            .collect();
        if args.len() != free.len() {
            return Err(refused(format!(
                "{} takes {} arguments ({}); {} given",
                self.exported.function_name,
                free.len(),
                self.free_inputs().join(", "),
                args.len()
            )));
        }
        let width =
            self.exported.module_kept_var_idx.len() + self.platform_index.is_some() as usize;
        let mut module_args: Vec<Option<&Array>> = vec![None; width];
        if let Some(Held::OnDevice(index)) = &self.platform_arg {
            module_args[0] = Some(index);
        }
        for (i, held) in self.resident.iter().enumerate() {
            if let (true, Some(Held::OnDevice(a)), Some(j)) =
                (self.from_weights[i], held, self.module_param(i))
            {
                module_args[j] = Some(a);
            }
        }
        for (k, (&i, &arg)) in free.iter().zip(args).enumerate() {
            let aval = &self.exported.in_avals[i];
            if host_type(aval) != Some((arg.dtype(), arg.dims().to_vec())) {
                return Err(refused(format!(
                    "argument {k} ({}) is {}{:?}; the export takes {aval}",
                    self.paths[i],
                    arg.dtype(),
                    arg.dims()
                )));
            }
            if arg.device() != *device {
                return Err(refused(format!(
                    "argument {k} ({}) is on {}; the export runs on {device}",
                    self.paths[i],
                    arg.device()
                )));
            }
            if let Some(j) = self.module_param(i) {
                module_args[j] = Some(arg);
            }
        }
        let mut donated = Vec::with_capacity(donate.len());
        for &k in donate {
            let j = free.get(k).and_then(|&i| self.module_param(i));
            donated.push(j.ok_or_else(|| Error::Donation {
                executable: self.exported.function_name.clone(),
                index: k,
                reason: match free.get(k) {
                    Some(_) => "the module does not use this argument".into(),
                    None => format!("there are {} arguments", free.len()),
                },
            })?);
        }
        let arrays: Vec<&Array> = (module_args.into_iter())
            .map(|a| a.expect("every parameter filled"))
            .collect();
        // The executable names module parameters; the caller named free inputs.
        (self.exe.execute_donating(&arrays, &donated)).map_err(|e| match e {
            Error::Donation {
                executable,
                index,
                reason,
            } => Error::Donation {
                executable,
                index: (donated.iter().position(|&j| j == index)).map_or(index, |at| donate[at]),
                reason,
            },
            other => other,
        })
    }
}
