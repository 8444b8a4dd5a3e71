//! What a compile produced, unloaded (`PJRT_Executable`): its name, types, cost and
//! serialization, readable with no device; a loaded executable derefs to one. And the compile
//! that makes one without loading it: `PJRT_Compile` against a topology, ahead of time.

use std::ptr::null_mut;
use std::sync::Arc;

use pjrt_sys as sys;
use prost::Message;

use super::abi;
use super::buffer::from_raw_type;
use super::call::{args, call};
use super::client::{PjrtClient, PjrtTopology};
use super::plugin_bytes::{plugin_str, take_serialized};
use super::values::{NamedValue, RawNamedValues, read_named_values};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::plugin::Plugin;

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

/// Reads `(ptr, n)` plugin-owned values.
///
/// # Safety
/// `ptr` must point at `n` values (or `n` must be 0).
pub(crate) unsafe fn list<T: Copy>(ptr: *const T, n: usize) -> Vec<T> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

/// An owned, unloaded executable: what was compiled, for a topology rather than for devices.
pub struct PjrtExecutable {
    plugin: Arc<Plugin>,
    raw: *mut sys::PJRT_Executable,
}

// SAFETY: an unloaded executable is immutable and its query functions are thread-safe; the
// pointer is destroyed once, in Drop.
unsafe impl Send for PjrtExecutable {}
// SAFETY: as above.
unsafe impl Sync for PjrtExecutable {}

impl Drop for PjrtExecutable {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let mut e = args!(PJRT_Executable_Destroy_Args {
            executable: self.raw
        });
        let _ = call!(self.plugin, PJRT_Executable_Destroy, &mut e);
    }
}

/// A program's code as the plugin takes it: with a NUL after it, because the plugin's MLIR
/// lexer reads until a NUL past the end of the text, whatever `code_size` says (a heap overflow
/// found by fuzzing). Both compile entry points build their `PJRT_Program` from one.
pub(crate) struct ProgramText {
    terminated: Vec<u8>,
}

impl ProgramText {
    pub(crate) fn new(code: &[u8]) -> Self {
        let mut terminated = Vec::with_capacity(code.len() + 1);
        terminated.extend_from_slice(code);
        terminated.push(0);
        ProgramText { terminated }
    }

    /// The `PJRT_Program` over this code in `format`; it points into both, so they must
    /// outlive the call it is handed to.
    pub(crate) fn program(&mut self, format: &str) -> sys::PJRT_Program {
        sys::PJRT_Program {
            struct_size: size_of::<sys::PJRT_Program>(),
            extension_start: null_mut(),
            // The plugin takes `char*` but does not write through it.
            code: self.terminated.as_mut_ptr().cast(),
            code_size: self.terminated.len() - 1,
            format: format.as_ptr().cast(),
            format_size: format.len(),
        }
    }
}

impl PjrtTopology {
    /// Compiles `code` for this topology without loading it (`PJRT_Compile`): the result can be
    /// serialized and loaded later by a client of this topology, in this process or another.
    /// `client`, when given, is only a hint the plugin may use. A plugin with no compiler for
    /// ahead-of-time use (the CPU plugin) answers `NotFound` or `Unimplemented`.
    pub fn compile(
        &self,
        code: &[u8],
        format: &str,
        options: &[u8],
        client: Option<&PjrtClient>,
    ) -> Result<PjrtExecutable> {
        let mut text = ProgramText::new(code);
        let program = text.program(format);
        let mut a = args!(PJRT_Compile_Args {
            topology: self.raw(),
            program: &program,
            compile_options: options.as_ptr().cast(),
            compile_options_size: options.len(),
            client: client.map_or(null_mut(), |c| c.raw()),
        });
        call!(self.plugin(), PJRT_Compile, &mut a)
            .map_err(crate::lapack::explain_missing_handler)?;
        Ok(PjrtExecutable::own(self.plugin().clone(), a.executable))
    }

    /// A topology the plugin builds from a name and options (`PJRT_TopologyDescription_Create`),
    /// for devices this process need not have. Plugins differ in what they accept; the CPU
    /// plugin accepts nothing.
    pub fn create(
        plugin: Arc<Plugin>,
        name: &str,
        options: &[(String, NamedValue)],
    ) -> Result<Self> {
        let values = RawNamedValues::new(options);
        let mut a = args!(PJRT_TopologyDescription_Create_Args {
            topology_name: name.as_ptr().cast(),
            topology_name_size: name.len(),
            create_options: values.as_ptr(),
            num_options: values.len(),
        });
        call!(plugin, PJRT_TopologyDescription_Create, &mut a)?;
        Ok(PjrtTopology::owned(plugin, a.topology))
    }
}

impl PjrtExecutable {
    pub(crate) fn own(plugin: Arc<Plugin>, raw: *mut sys::PJRT_Executable) -> Self {
        PjrtExecutable { plugin, raw }
    }

    pub fn name(&self) -> Result<String> {
        let mut a = args!(PJRT_Executable_Name_Args {
            executable: self.raw
        });
        call!(&self.plugin, PJRT_Executable_Name, &mut a)?;
        // SAFETY: an executable-owned string of this size.
        Ok(unsafe { plugin_str(a.executable_name, a.executable_name_size) })
    }

    /// The executable's fingerprint (stable across recompiles and serialization).
    pub fn fingerprint(&self) -> Result<String> {
        let mut a = args!(PJRT_Executable_Fingerprint_Args {
            executable: self.raw
        });
        call!(&self.plugin, PJRT_Executable_Fingerprint, &mut a)?;
        // SAFETY: an executable-owned string of this size.
        Ok(unsafe { plugin_str(a.executable_fingerprint, a.executable_fingerprint_size) })
    }

    pub fn num_outputs(&self) -> Result<usize> {
        let mut a = args!(PJRT_Executable_NumOutputs_Args {
            executable: self.raw
        });
        call!(&self.plugin, PJRT_Executable_NumOutputs, &mut a)?;
        Ok(a.num_outputs)
    }

    /// Output element types and dimensions, in output order.
    pub fn output_types(&self) -> Result<Vec<ArrayType>> {
        let plugin = &self.plugin;
        let mut t = args!(PJRT_Executable_OutputElementTypes_Args {
            executable: self.raw
        });
        call!(plugin, PJRT_Executable_OutputElementTypes, &mut t)?;
        let mut d = args!(PJRT_Executable_OutputDimensions_Args {
            executable: self.raw
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
        let plugin = &self.plugin;
        let mut program = sys::PJRT_Program {
            struct_size: size_of::<sys::PJRT_Program>(),
            ..Default::default()
        };
        let mut a = args!(PJRT_Executable_OptimizedProgram_Args {
            executable: self.raw,
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
    pub fn optimized_module(&self) -> Result<pjrt_actors_formats::protos::xla::HloModuleProto> {
        let (format, code) = self.optimized_program()?;
        match format.as_str() {
            "hlo" => pjrt_actors_formats::protos::xla::HloModuleProto::decode(code.as_slice())
                .map_err(|e| e.to_string()),
            "hlo_with_config" => {
                pjrt_actors_formats::protos::xla::HloModuleProtoWithConfig::decode(code.as_slice())
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

    /// XLA's cost analysis (`flops`, `bytes accessed`, ...).
    pub fn cost_analysis(&self) -> Result<Vec<(String, NamedValue)>> {
        let mut a = args!(PJRT_Executable_GetCostAnalysis_Args {
            executable: self.raw
        });
        call!(&self.plugin, PJRT_Executable_GetCostAnalysis, &mut a)?;
        // SAFETY: executable-owned values.
        Ok(unsafe { read_named_values(a.properties, a.num_properties) })
    }

    pub fn compiled_memory_stats(&self) -> Result<CompiledMemoryStats> {
        let plugin = &self.plugin;
        // The 0.81 layout: the 0.54 one is 8 bytes short and the plugin writes past its end.
        let mut a = abi::Executable_GetCompiledMemoryStats_Args {
            struct_size: size_of::<abi::Executable_GetCompiledMemoryStats_Args>(),
            extension_start: null_mut(),
            executable: self.raw,
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

    /// The plugin's serialization of the compiled program (`PJRT_Executable_Serialize`).
    /// The serialized `CompileOptionsProto` the plugin compiled this with, asked of the plugin
    /// (`PJRT_Executable_GetCompileOptions`, past 0.81's table); `Error::Unsupported` where the
    /// plugin has no such call.
    pub fn compile_options(&self) -> Result<Vec<u8>> {
        let offset = std::mem::offset_of!(abi::ApiTail, PJRT_Executable_GetCompileOptions);
        let f = (self.plugin.api_tail(offset)).and_then(|t| t.PJRT_Executable_GetCompileOptions);
        let mut a = abi::Executable_GetCompileOptions_Args {
            struct_size: std::mem::size_of::<abi::Executable_GetCompileOptions_Args>(),
            extension_start: std::ptr::null_mut(),
            executable: self.raw,
            serialized_bytes: std::ptr::null(),
            serialized_bytes_size: 0,
            serialized_compile_options: std::ptr::null_mut(),
            serialized_compile_options_deleter: None,
        };
        // SAFETY: the slot takes this args struct, of the header's layout (size asserted in
        // `abi.rs`), and the executable outlives the call.
        unsafe {
            self.plugin
                .call("PJRT_Executable_GetCompileOptions", f, &mut a)
        }?;
        // SAFETY: the plugin's bytes live until its deleter runs.
        Ok(unsafe {
            take_serialized(
                a.serialized_bytes,
                a.serialized_bytes_size,
                a.serialized_compile_options,
                a.serialized_compile_options_deleter,
            )
        })
    }

    pub fn serialize(&self) -> Result<Vec<u8>> {
        let mut a = args!(PJRT_Executable_Serialize_Args {
            executable: self.raw
        });
        call!(&self.plugin, PJRT_Executable_Serialize, &mut a)?;
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
