//! Executing: argument checks that run before the plugin sees anything, the PJRT call, and
//! registration of the outputs. Shared by the direct path (the caller's thread) and the device
//! actor (the async path).

use std::sync::Arc;

use crate::compile::ExecutableCore;
use crate::error::{Error, Result};
use crate::pjrt::{PjrtBuffer, PjrtDevice, PjrtMemory};
use crate::registry::{ArrayCore, BufferRegistry, BufferSlot, SlotState};

/// What an execute needs of the client besides the executable and arguments.
pub struct ExecuteContext<'a> {
    pub devices: &'a [PjrtDevice],
    pub memories: &'a [PjrtMemory],
    pub registry: &'a Arc<BufferRegistry>,
}

/// The tracing span the caller is in, named for error messages.
pub fn caller_context() -> Option<String> {
    let span = tracing::Span::current();
    span.metadata().map(|m| m.name().to_string())
}

/// Checks one argument list against the executable's parameters and the device it runs on.
fn check_arguments(exe: &ExecutableCore, args: &[&ArrayCore], device: usize) -> Result<()> {
    let meta = &exe.meta;
    let bad = |index: usize, reason: String| Error::BadArgument {
        executable: meta.name.clone(),
        index,
        reason,
        context: caller_context(),
    };
    if args.len() != meta.parameter_types.len() {
        return Err(bad(
            args.len(),
            format!(
                "expected {} arguments, got {}",
                meta.parameter_types.len(),
                args.len()
            ),
        ));
    }
    for (i, (arg, param)) in args.iter().zip(&meta.parameter_types).enumerate() {
        let slot = &arg.slot;
        if slot.dtype != param.dtype || slot.dims != param.dims {
            return Err(bad(
                i,
                format!(
                    "expected {}{:?}, got {}{:?}",
                    param.dtype, param.dims, slot.dtype, slot.dims
                ),
            ));
        }
        if slot.device != device {
            return Err(bad(
                i,
                format!(
                    "lives on device index {}, but this execution runs on device index {device}",
                    slot.device
                ),
            ));
        }
    }
    Ok(())
}

/// Runs `exe` on `arg_lists` (one list per device of the executable, or one list and
/// `portable_device` for a portable executable). Returns one output list per device.
pub fn execute(
    ctx: &ExecuteContext<'_>,
    exe: &ExecutableCore,
    arg_lists: &[&[&ArrayCore]],
    portable_device: Option<usize>,
) -> Result<Vec<Vec<Arc<ArrayCore>>>> {
    let meta = &exe.meta;
    let run_devices: Vec<usize> = match portable_device {
        Some(d) if meta.portable => vec![d],
        Some(_) => {
            return Err(Error::InvalidArgument(format!(
                "`{}` is not portable: it runs on the devices it was compiled for",
                meta.name
            )));
        }
        None if meta.portable => {
            return Err(Error::InvalidArgument(format!(
                "`{}` is portable: name the device to run it on",
                meta.name
            )));
        }
        None => meta.devices.clone(),
    };
    if arg_lists.len() != run_devices.len() {
        return Err(Error::InvalidArgument(format!(
            "`{}` runs on {} device(s); got {} argument list(s)",
            meta.name,
            run_devices.len(),
            arg_lists.len()
        )));
    }
    for (args, &device) in arg_lists.iter().zip(&run_devices) {
        check_arguments(exe, args, device)?;
    }
    // Hold every argument's read lock across the call: a defragment or delete waits for us.
    let guards = arg_lists
        .iter()
        .map(|args| {
            args.iter()
                .map(|a| a.slot.read())
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let buffers: Vec<Vec<&PjrtBuffer>> = guards
        .iter()
        .map(|list| {
            list.iter()
                .map(|g| match &**g {
                    SlotState::Live(b) => b,
                    SlotState::Deleted => unreachable!("read() checks liveness"),
                })
                .collect()
        })
        .collect();
    let lists: Vec<&[&PjrtBuffer]> = buffers.iter().map(|l| l.as_slice()).collect();
    let execute_device = portable_device.map(|d| &ctx.devices[d]);
    let outputs = exe.exe.execute(
        &lists,
        meta.num_outputs,
        &meta.non_donatable,
        execute_device,
    )?;
    drop(guards);
    outputs
        .into_iter()
        .zip(&run_devices)
        .map(|(list, &device)| {
            list.into_iter()
                .zip(&meta.output_types)
                .map(|(buffer, ty)| {
                    let memory = buffer.memory_index(ctx.memories)?.ok_or_else(|| {
                        Error::Cancelled("an output landed in an unknown memory space".into())
                    })?;
                    let slot = BufferSlot::new(buffer, ty.dtype, ty.dims.clone(), device, memory);
                    Ok(ArrayCore::register(ctx.registry, slot))
                })
                .collect()
        })
        .collect()
}
