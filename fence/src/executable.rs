//! Owned loaded executables: compile, the metadata jaxlib exposes, and execute. Parameter shapes
//! come from the optimized HLO module, so arguments can be checked before the plugin sees them.

use std::ptr::{null, null_mut};

use pjrt_sys as sys;
use prost::Message;
use smallvec::SmallVec;

use super::abi;
use super::buffer::{PjrtBuffer, PjrtEvent, from_raw_type};
use super::call::{args, call};
use super::client::{PjrtClient, PjrtDevice};
use super::ffi::{CallbackContext, CallbackDispatch};
use super::host_transfer::{HostTransferDispatch, HostTransferOptions};
use super::plugin_bytes::{plugin_str, take_serialized};
use super::values::{NamedValue, read_named_values};
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// An array type: element type and dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrayType {
    /// The element type.
    pub dtype: ElementType,
    /// The dimensions (empty for a scalar).
    pub dims: Vec<i64>,
}

impl ArrayType {
    /// Bytes of its dense host representation; an error where that overflows.
    pub fn byte_size(&self) -> Result<usize> {
        crate::dtype::byte_size(self.dtype, &self.dims)
    }
}

/// What `PJRT_Executable_GetCompiledMemoryStats` reports, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompiledMemoryStats {
    /// Generated code.
    pub generated_code_size: i64,
    /// Arguments on the device.
    pub argument_size: i64,
    /// Outputs on the device.
    pub output_size: i64,
    /// Outputs aliasing arguments.
    pub alias_size: i64,
    /// Temporaries on the device.
    pub temp_size: i64,
    /// Generated code, host side.
    pub host_generated_code_size: i64,
    /// Arguments in host memory.
    pub host_argument_size: i64,
    /// Outputs in host memory.
    pub host_output_size: i64,
    /// Host outputs aliasing arguments.
    pub host_alias_size: i64,
    /// Temporaries in host memory.
    pub host_temp_size: i64,
    /// Peak device memory of a run.
    pub peak_memory: i64,
}

/// An owned, loaded executable (and the unloaded `PJRT_Executable` behind it).
pub struct PjrtLoadedExecutable {
    client: PjrtClient,
    loaded: *mut sys::PJRT_LoadedExecutable,
    executable: *mut sys::PJRT_Executable,
}

// SAFETY: loaded executables are thread-safe in PJRT (concurrent Execute is supported); both
// pointers are destroyed once, in Drop.
unsafe impl Send for PjrtLoadedExecutable {}
// SAFETY: as above.
unsafe impl Sync for PjrtLoadedExecutable {}

impl Drop for PjrtLoadedExecutable {
    fn drop(&mut self) {
        let plugin = self.client.plugin();
        let mut e = args!(PJRT_Executable_Destroy_Args {
            executable: self.executable
        });
        let _ = call!(plugin, PJRT_Executable_Destroy, &mut e);
        let mut l = args!(PJRT_LoadedExecutable_Destroy_Args {
            executable: self.loaded
        });
        let _ = call!(plugin, PJRT_LoadedExecutable_Destroy, &mut l);
    }
}

/// Reads `(ptr, n)` plugin-owned values.
///
/// # Safety
/// `ptr` must point at `n` values (or `n` must be 0).
unsafe fn list<T: Copy>(ptr: *const T, n: usize) -> Vec<T> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

impl PjrtClient {
    /// Compiles and loads `code` (StableHLO/MLIR text or bytecode when `format` is `"mlir"`)
    /// with a serialized `CompileOptionsProto` the caller has made safe for the plugin.
    pub fn compile(
        &self,
        code: &[u8],
        format: &str,
        options: &[u8],
    ) -> Result<PjrtLoadedExecutable> {
        // The plugin's MLIR lexer reads until a NUL past the end of the text, whatever
        // `code_size` says (a heap overflow found by fuzzing), so it always gets one.
        let mut terminated = Vec::with_capacity(code.len() + 1);
        terminated.extend_from_slice(code);
        terminated.push(0);
        let program = sys::PJRT_Program {
            struct_size: size_of::<sys::PJRT_Program>(),
            extension_start: null_mut(),
            // The plugin takes `char*` but does not write through it.
            code: terminated.as_mut_ptr().cast(),
            code_size: code.len(),
            format: format.as_ptr().cast(),
            format_size: format.len(),
        };
        let mut a = args!(PJRT_Client_Compile_Args {
            client: self.raw(),
            program: &program,
            compile_options: options.as_ptr().cast(),
            compile_options_size: options.len(),
        });
        call!(self.plugin(), PJRT_Client_Compile, &mut a)
            .map_err(crate::lapack::explain_missing_handler)?;
        PjrtLoadedExecutable::wrap(self.clone(), a.executable)
    }
}

impl PjrtClient {
    /// Loads a serialized executable (`PJRT_Executable_DeserializeAndLoad`, 0.81 layout), with
    /// optional serialized `CompileOptionsProto` overriding the ones it was compiled with. Only
    /// bytes the caller has verified came from `serialize` should reach this: the plugin trusts
    /// them.
    pub fn deserialize_and_load(
        &self,
        bytes: &[u8],
        options: Option<&[u8]>,
    ) -> Result<PjrtLoadedExecutable> {
        if bytes.is_empty() {
            return Err(Error::InvalidArgument("empty serialized executable".into()));
        }
        let plugin = self.plugin();
        let mut a = abi::Executable_DeserializeAndLoad_Args {
            struct_size: size_of::<abi::Executable_DeserializeAndLoad_Args>(),
            extension_start: null_mut(),
            client: self.raw(),
            serialized_executable: bytes.as_ptr().cast(),
            serialized_executable_size: bytes.len(),
            loaded_executable: null_mut(),
            overridden_serialized_compile_options: options.map_or(null(), |o| o.as_ptr().cast()),
            overridden_serialized_compile_options_size: options.map_or(0, |o| o.len()),
        };
        let f = abi::widen(plugin.api().base.PJRT_Executable_DeserializeAndLoad);
        // SAFETY: `PJRT_Executable_DeserializeAndLoad` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_Executable_DeserializeAndLoad", f, &mut a) }?;
        PjrtLoadedExecutable::wrap(self.clone(), a.loaded_executable)
    }
}

impl PjrtLoadedExecutable {
    fn wrap(client: PjrtClient, loaded: *mut sys::PJRT_LoadedExecutable) -> Result<Self> {
        let mut a = args!(PJRT_LoadedExecutable_GetExecutable_Args {
            loaded_executable: loaded
        });
        let got = call!(client.plugin(), PJRT_LoadedExecutable_GetExecutable, &mut a);
        let exe = PjrtLoadedExecutable {
            client,
            loaded,
            executable: a.executable,
        };
        got.map(|()| exe)
    }

    pub fn client(&self) -> &PjrtClient {
        &self.client
    }

    #[cfg(feature = "baseline")]
    pub(crate) fn loaded_raw(&self) -> *mut sys::PJRT_LoadedExecutable {
        self.loaded
    }

    pub fn name(&self) -> Result<String> {
        let mut a = args!(PJRT_Executable_Name_Args {
            executable: self.executable
        });
        call!(self.client.plugin(), PJRT_Executable_Name, &mut a)?;
        // SAFETY: an executable-owned string of this size.
        Ok(unsafe { plugin_str(a.executable_name, a.executable_name_size) })
    }

    /// The executable's fingerprint (stable across recompiles and serialization).
    pub fn fingerprint(&self) -> Result<String> {
        let mut a = args!(PJRT_Executable_Fingerprint_Args {
            executable: self.executable
        });
        call!(self.client.plugin(), PJRT_Executable_Fingerprint, &mut a)?;
        // SAFETY: an executable-owned string of this size.
        Ok(unsafe { plugin_str(a.executable_fingerprint, a.executable_fingerprint_size) })
    }

    pub fn num_outputs(&self) -> Result<usize> {
        let mut a = args!(PJRT_Executable_NumOutputs_Args {
            executable: self.executable
        });
        call!(self.client.plugin(), PJRT_Executable_NumOutputs, &mut a)?;
        Ok(a.num_outputs)
    }

    /// Output element types and dimensions, in output order.
    pub fn output_types(&self) -> Result<Vec<ArrayType>> {
        let plugin = self.client.plugin();
        let mut t = args!(PJRT_Executable_OutputElementTypes_Args {
            executable: self.executable
        });
        call!(plugin, PJRT_Executable_OutputElementTypes, &mut t)?;
        let mut d = args!(PJRT_Executable_OutputDimensions_Args {
            executable: self.executable
        });
        call!(plugin, PJRT_Executable_OutputDimensions, &mut d)?;
        // SAFETY: executable-owned arrays of the sizes returned; `dims` is the concatenation of
        // every output's dims, `dim_sizes[i]` of them for output i.
        let (types, sizes, all_dims) = unsafe {
            let sizes = list(d.dim_sizes, d.num_outputs);
            let total = sizes.iter().sum();
            (
                list(t.output_types, t.num_output_types),
                sizes,
                list(d.dims, total),
            )
        };
        let mut offset = 0;
        types
            .into_iter()
            .zip(sizes)
            .map(|(t, n)| {
                let dims = all_dims[offset..offset + n].to_vec();
                offset += n;
                Ok(ArrayType {
                    dtype: from_raw_type(t)?,
                    dims,
                })
            })
            .collect()
    }

    /// The optimized program: `(format, bytes)`, e.g. `("hlo", HloModuleProto bytes)`.
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>)> {
        let plugin = self.client.plugin();
        let mut program = sys::PJRT_Program {
            struct_size: size_of::<sys::PJRT_Program>(),
            ..Default::default()
        };
        let mut a = args!(PJRT_Executable_OptimizedProgram_Args {
            executable: self.executable,
            program: &mut program,
        });
        // First call: the plugin reports the size; second: it fills our buffer.
        call!(plugin, PJRT_Executable_OptimizedProgram, &mut a)?;
        let mut code = vec![0u8; program.code_size];
        program.code = code.as_mut_ptr().cast();
        a.program = &mut program;
        call!(plugin, PJRT_Executable_OptimizedProgram, &mut a)?;
        code.truncate(program.code_size);
        // SAFETY: a program-owned string of this size.
        let format = unsafe { plugin_str(program.format, program.format_size) };
        Ok((format, code))
    }

    /// The optimized HLO module.
    pub fn optimized_module(&self) -> Result<pjrt_sys::protos::xla::HloModuleProto> {
        let (format, code) = self.optimized_program()?;
        match format.as_str() {
            "hlo" => pjrt_sys::protos::xla::HloModuleProto::decode(code.as_slice())
                .map_err(|e| e.to_string()),
            "hlo_with_config" => {
                pjrt_sys::protos::xla::HloModuleProtoWithConfig::decode(code.as_slice())
                    .map_err(|e| e.to_string())
                    .and_then(|m| m.hlo_module.ok_or_else(|| "no module".to_string()))
            }
            other => Err(format!("unknown optimized program format {other:?}")),
        }
        .map_err(|e| Error::Unsupported {
            what: "reading the optimized program",
            hint: format!(": {e}"),
        })
    }

    /// The devices the executable runs on, as indices into `devices`.
    pub fn addressable_device_indices(&self, devices: &[PjrtDevice]) -> Result<Vec<usize>> {
        let mut a = args!(PJRT_LoadedExecutable_AddressableDevices_Args {
            executable: self.loaded
        });
        call!(
            self.client.plugin(),
            PJRT_LoadedExecutable_AddressableDevices,
            &mut a
        )?;
        // SAFETY: executable-owned device pointers.
        let raw = unsafe { list(a.addressable_devices, a.num_addressable_devices) };
        Ok(raw
            .into_iter()
            .filter_map(|r| devices.iter().position(|d| d.raw() == r))
            .collect())
    }

    /// XLA's cost analysis (`flops`, `bytes accessed`, ...).
    pub fn cost_analysis(&self) -> Result<Vec<(String, NamedValue)>> {
        let mut a = args!(PJRT_Executable_GetCostAnalysis_Args {
            executable: self.executable
        });
        call!(
            self.client.plugin(),
            PJRT_Executable_GetCostAnalysis,
            &mut a
        )?;
        // SAFETY: executable-owned values.
        Ok(unsafe { read_named_values(a.properties, a.num_properties) })
    }

    pub fn compiled_memory_stats(&self) -> Result<CompiledMemoryStats> {
        let plugin = self.client.plugin();
        // The 0.81 layout: the 0.54 one is 8 bytes short and the plugin writes past its end.
        let mut a = abi::Executable_GetCompiledMemoryStats_Args {
            struct_size: size_of::<abi::Executable_GetCompiledMemoryStats_Args>(),
            extension_start: null_mut(),
            executable: self.executable,
            generated_code_size_in_bytes: 0,
            argument_size_in_bytes: 0,
            output_size_in_bytes: 0,
            alias_size_in_bytes: 0,
            temp_size_in_bytes: 0,
            host_generated_code_size_in_bytes: 0,
            host_argument_size_in_bytes: 0,
            host_output_size_in_bytes: 0,
            host_alias_size_in_bytes: 0,
            host_temp_size_in_bytes: 0,
            peak_memory_in_bytes: 0,
        };
        let f = abi::widen(plugin.api().base.PJRT_Executable_GetCompiledMemoryStats);
        // SAFETY: `PJRT_Executable_GetCompiledMemoryStats` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_Executable_GetCompiledMemoryStats", f, &mut a) }?;
        Ok(CompiledMemoryStats {
            generated_code_size: a.generated_code_size_in_bytes,
            argument_size: a.argument_size_in_bytes,
            output_size: a.output_size_in_bytes,
            alias_size: a.alias_size_in_bytes,
            temp_size: a.temp_size_in_bytes,
            host_generated_code_size: a.host_generated_code_size_in_bytes,
            host_argument_size: a.host_argument_size_in_bytes,
            host_output_size: a.host_output_size_in_bytes,
            host_alias_size: a.host_alias_size_in_bytes,
            host_temp_size: a.host_temp_size_in_bytes,
            peak_memory: a.peak_memory_in_bytes,
        })
    }

    /// Runs the executable: one argument list per device (`execute_device` names the device of
    /// a portable executable, with one list). Returns the outputs flat, device-major. The caller
    /// has checked counts, types and devices; `non_donatable` lists every parameter index of a
    /// program that could donate, so the plugin never consumes a buffer our registry owns.
    pub fn execute(
        &self,
        argument_lists: &[&[&PjrtBuffer]],
        num_outputs: usize,
        non_donatable: &[i64],
        execute_device: Option<&PjrtDevice>,
        callbacks: Option<&dyn CallbackDispatch>,
        transfers: Option<HostTransfers<'_>>,
    ) -> Result<SmallVec<[PjrtBuffer; 4]>> {
        // Host callbacks read this execution's dispatch from an execute context; it lives until
        // the execution has completed (awaited below), and is destroyed after.
        let context = match callbacks {
            Some(dispatch) => {
                let ffi = self.client.plugin().host_callbacks()?;
                Some(CallbackContext::new(&self.client, ffi, dispatch)?)
            }
            None => None,
        };
        // Plain loops, not iterator collects: this is the hot path, and it shows in profiles.
        let num_devices = argument_lists.len();
        let num_args = argument_lists.first().map_or(0, |l| l.len());
        let mut raw_args: SmallVec<[*mut sys::PJRT_Buffer; 16]> = SmallVec::new();
        for list in argument_lists {
            for b in list.iter() {
                raw_args.push(b.raw());
            }
        }
        let mut outputs: SmallVec<[*mut sys::PJRT_Buffer; 16]> =
            SmallVec::from_elem(null_mut(), num_devices * num_outputs);
        let mut events: SmallVec<[*mut sys::PJRT_Event; 4]> =
            SmallVec::from_elem(null_mut(), num_devices);
        let mut arg_ptrs: SmallVec<[*const *mut sys::PJRT_Buffer; 4]> = SmallVec::new();
        let mut out_ptrs: SmallVec<[*mut *mut sys::PJRT_Buffer; 4]> = SmallVec::new();
        for d in 0..num_devices {
            // SAFETY: both offsets stay inside their vectors, which are not touched again until
            // after the call.
            unsafe {
                arg_ptrs.push(raw_args.as_ptr().add(d * num_args));
                out_ptrs.push(outputs.as_mut_ptr().add(d * num_outputs));
            }
        }
        let mut options = abi::ExecuteOptions::new(
            non_donatable,
            context.as_ref().map_or(null_mut(), |c| c.raw()),
        );
        let mut transfer_options = transfers.map(|t| {
            HostTransferOptions::new(
                self.client.plugin(),
                t.dispatch,
                num_devices,
                t.send_channels,
                t.recv_channels,
            )
        });
        if let Some(t) = transfer_options.as_mut() {
            t.install(&mut options);
        }
        let wait_for_devices = context.is_some() || transfer_options.is_some();
        let mut a = args!(PJRT_LoadedExecutable_Execute_Args {
            executable: self.loaded,
            options: (&mut options as *mut abi::ExecuteOptions).cast(),
            argument_lists: arg_ptrs.as_ptr(),
            num_devices: num_devices,
            num_args: num_args,
            output_lists: out_ptrs.as_ptr(),
            device_complete_events: if wait_for_devices {
                events.as_mut_ptr()
            } else {
                null_mut()
            },
            execute_device: execute_device.map_or(null_mut(), |d| d.raw()),
        });
        let executed = call!(self.client.plugin(), PJRT_LoadedExecutable_Execute, &mut a);
        // Wait for every device to finish before the context (and the callbacks' state) goes.
        let mut completion = Ok(());
        for event in events.into_iter().filter(|e| !e.is_null()) {
            let waited = PjrtEvent::from_raw(self.client.clone(), event).wait();
            completion = completion.and(waited);
        }
        drop(context);
        drop(transfer_options);
        executed?;
        completion?;
        let mut result = SmallVec::new();
        for raw in outputs {
            result.push(PjrtBuffer::from_raw(self.client.clone(), raw));
        }
        Ok(result)
    }

    /// The plugin's serialization of the compiled program (`PJRT_Executable_Serialize`).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let mut a = args!(PJRT_Executable_Serialize_Args {
            executable: self.executable
        });
        call!(self.client.plugin(), PJRT_Executable_Serialize, &mut a)?;
        // SAFETY: the plugin's bytes live until its deleter runs.
        Ok(unsafe {
            take_serialized(
                a.serialized_bytes,
                a.serialized_bytes_size,
                a.serialized_executable,
                a.serialized_executable_deleter,
            )
        })
    }
}

/// An execution's host send/recv callbacks: the dispatch, and the program's channels.
#[derive(Clone, Copy)]
pub struct HostTransfers<'a> {
    pub dispatch: &'a dyn HostTransferDispatch,
    pub send_channels: &'a [i64],
    pub recv_channels: &'a [i64],
}

/// The entry computation's parameter types, read from an optimized HLO module.
pub fn parameter_types(module: &pjrt_sys::protos::xla::HloModuleProto) -> Result<Vec<ArrayType>> {
    let shape = module
        .host_program_shape
        .as_ref()
        .ok_or_else(|| Error::Unsupported {
            what: "reading parameter types from the optimized program",
            hint: ": it has no program shape".into(),
        })?;
    shape
        .parameters
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let dtype =
                ElementType::from_xla(p.element_type).ok_or_else(|| Error::Unsupported {
                    what: "a parameter that is not an array",
                    hint: format!(
                        " (parameter {i} is {}: programs take arrays of the element types this runtime knows)",
                        match p.element_type {
                            13 => "a tuple".to_string(),
                            14 => "an opaque value".to_string(),
                            17 => "a token".to_string(),
                            other => format!("of XLA primitive type {other}"),
                        }
                    ),
                })?;
            Ok(ArrayType {
                dtype,
                dims: p.dimensions.clone(),
            })
        })
        .collect()
}
