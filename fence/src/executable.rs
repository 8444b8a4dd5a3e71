//! Owned loaded executables: compile, the metadata jaxlib exposes, and execute. Parameter shapes
//! come from the optimized HLO module, so arguments can be checked before the plugin sees them.

use std::ptr::{null, null_mut};

use pjrt_sys as sys;
use smallvec::SmallVec;

use super::abi;
use super::buffer::{PjrtBuffer, PjrtEvent};
use super::call::{args, call};
use super::client::{PjrtClient, PjrtDevice};
use super::compiled::{ArrayType, PjrtExecutable, ProgramText, list};
use super::ffi::{CallbackContext, CallbackDispatch};
use super::host_transfer::{HostTransferDispatch, HostTransferOptions};
use crate::dtype::ElementType;
use crate::error::{Error, Result};

/// An owned, loaded executable; what was compiled (name, types, serialization) is read through
/// the unloaded `PJRT_Executable` behind it, which it derefs to.
pub struct PjrtLoadedExecutable {
    client: PjrtClient,
    loaded: *mut sys::PJRT_LoadedExecutable,
    executable: PjrtExecutable,
}

// SAFETY: loaded executables are thread-safe in PJRT (concurrent Execute is supported); the
// pointer is destroyed once, in Drop.
unsafe impl Send for PjrtLoadedExecutable {}
// SAFETY: as above.
unsafe impl Sync for PjrtLoadedExecutable {}

impl Drop for PjrtLoadedExecutable {
    fn drop(&mut self) {
        let mut l = args!(PJRT_LoadedExecutable_Destroy_Args {
            executable: self.loaded
        });
        let _ = call!(self.client.plugin(), PJRT_LoadedExecutable_Destroy, &mut l);
    }
}

impl std::ops::Deref for PjrtLoadedExecutable {
    type Target = PjrtExecutable;

    fn deref(&self) -> &PjrtExecutable {
        &self.executable
    }
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
        let mut text = ProgramText::new(code);
        let program = text.program(format);
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
            executable: PjrtExecutable::own(client.plugin().clone(), a.executable),
            client,
            loaded,
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
}

/// An execution's host send/recv callbacks: the dispatch, and the program's channels.
#[derive(Clone, Copy)]
pub struct HostTransfers<'a> {
    pub dispatch: &'a dyn HostTransferDispatch,
    pub send_channels: &'a [i64],
    pub recv_channels: &'a [i64],
}

/// The entry computation's parameter types, read from an optimized HLO module.
pub fn parameter_types(
    module: &pjrt_actors_formats::protos::xla::HloModuleProto,
) -> Result<Vec<ArrayType>> {
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
