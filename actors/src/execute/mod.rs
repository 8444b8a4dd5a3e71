//! Executing: argument checks that run before the plugin sees anything, the PJRT call, and
//! registration of the outputs. Shared by the direct path (the caller's thread) and the device
//! actor (the async path).

pub mod executable;

use std::sync::Arc;

use smallvec::SmallVec;

use crate::arrays::buffers::{ArrayCore, ArrayOwner, BufferSlot, SlotState};
use crate::callbacks::send_recv::TransferExecution;
use crate::callbacks::{CallbackSet, ExecutionCallbacks};
use crate::error::{Error, Result};
use crate::execute::executable::ExecutableCore;
use crate::pjrt::{CallbackDispatch, HostTransfers, PjrtBuffer, PjrtDevice, PjrtMemory};

/// What an execute needs of the client besides the executable and arguments.
pub struct ExecuteContext<'a> {
    pub devices: &'a [PjrtDevice],
    pub memories: &'a [PjrtMemory],
    /// Who owns the outputs (the client's shared state).
    pub owner: &'a Arc<dyn ArrayOwner>,
    /// Where the execute was called from: the outputs' allocation site.
    pub site: crate::arrays::site::Site,
}

/// Outputs of one execute, flat and device-major; inline for the common few.
pub type Outputs = SmallVec<[Arc<ArrayCore>; 4]>;

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
        if slot.dtype != param.dtype || *slot.dims != *param.dims {
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

/// How one execute runs, besides its executable and arguments.
#[derive(Clone, Copy, Default)]
pub struct ExecuteOptions<'a> {
    /// The device a portable executable runs on.
    pub portable_device: Option<usize>,
    /// The host callbacks the program was given.
    pub callbacks: Option<&'a CallbackSet>,
    pub donate: Donate<'a>,
}

/// Which parameters an execute donates, and how it holds its arguments.
#[derive(Clone, Copy, Default)]
pub struct Donate<'a> {
    /// Parameter indices, each of which the program may donate; on every device of the run.
    pub params: &'a [usize],
    /// Whether the arguments come from a queued run that holds each with a
    /// [`PendingUse`](crate::arrays::donation::PendingUse) (the device actor's path).
    pub queued: bool,
}

/// Checks a donation request against the program and the argument lists: each index names a
/// parameter the program may donate, once, and a donated array is not also passed anywhere else.
fn check_donation(
    exe: &ExecutableCore,
    arg_lists: &[&[&ArrayCore]],
    donate: &[usize],
) -> Result<()> {
    let meta = &exe.meta;
    let refused = |index: usize, reason: String| Error::Donation {
        executable: meta.name.clone(),
        index,
        reason,
    };
    for (k, &p) in donate.iter().enumerate() {
        if meta.donor_params.binary_search(&p).is_err() {
            return Err(refused(
                p,
                match meta.donor_params.is_empty() {
                    true => "the program donates none of its parameters (export it with \
                             donate_argnums, or alias the parameter to an output)"
                        .into(),
                    false => format!(
                        "the program may donate only parameters {:?}",
                        meta.donor_params
                    ),
                },
            ));
        }
        if donate[..k].contains(&p) {
            return Err(refused(p, "it is named twice".into()));
        }
    }
    for args in arg_lists {
        for &p in donate {
            let donated = args[p];
            for (i, a) in args.iter().enumerate() {
                if i != p && std::ptr::eq(*a, donated) {
                    return Err(refused(
                        p,
                        format!(
                            "the same array is argument {i} too; a donated array is passed once"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An argument held for the call: read, or taken to be donated.
enum Held<'a> {
    Read(crate::arrays::buffers::SlotRead<'a>),
    Donated(crate::arrays::donation::DonatedBuffer<'a>),
}

/// Runs `exe` on `arg_lists` (one list per device of the executable, or one list and
/// a portable executable's device in `options`), donating the parameters it names.
/// Returns the outputs flat, device-major (`num_outputs` per device).
pub fn execute(
    ctx: &ExecuteContext<'_>,
    exe: &ExecutableCore,
    arg_lists: &[&[&ArrayCore]],
    options: ExecuteOptions<'_>,
) -> Result<Outputs> {
    let ExecuteOptions {
        portable_device,
        callbacks,
        donate,
    } = options;
    let meta = &exe.meta;
    // A program with host callbacks runs only with its callbacks: the plugin crashes when its
    // handler looks for an execute context that is not there.
    let callbacks = match (callbacks, meta.callback_ids.first()) {
        (None, Some(&id)) => return Err(Error::UnknownCallback { id }),
        (Some(set), Some(_)) => Some(ExecutionCallbacks::new(set)),
        (_, None) => None,
    };
    let run_devices: SmallVec<[usize; 4]> = match portable_device {
        Some(d) if meta.portable => smallvec::smallvec![d],
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
        None => meta.devices.iter().copied().collect(),
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
    if !donate.params.is_empty() {
        check_donation(exe, arg_lists, donate.params)?;
    }
    // Hold every argument's read lock across the call (a donated one's write lock): a
    // defragment or delete waits for us. (Plain loops, not iterator collects: the hot path.)
    let mut guards: SmallVec<[Held<'_>; 8]> = SmallVec::new();
    for args in arg_lists {
        for (i, a) in args.iter().enumerate() {
            guards.push(match donate.params.contains(&i) {
                false => Held::Read(a.slot.read()?),
                true => Held::Donated(a.slot.take_for_donation(
                    donate.queued as u32,
                    &meta.name,
                    i,
                )?),
            });
        }
    }
    let mut buffers: SmallVec<[&PjrtBuffer; 8]> = SmallVec::new();
    for g in &guards {
        match g {
            Held::Read(g) => match &**g {
                SlotState::Live(b) => buffers.push(b),
                _ => unreachable!("read() checks liveness"),
            },
            Held::Donated(d) => buffers.push(d.buffer()),
        }
    }
    // Every parameter the program could donate and is not asked to is marked non-donatable:
    // the plugin never consumes a buffer the caller did not give up.
    let kept: SmallVec<[i64; 8]>;
    let non_donatable: &[i64] = match donate.params {
        [] => &meta.non_donatable,
        params => {
            kept = (0..meta.parameter_types.len())
                .filter(|p| !params.contains(p))
                .map(|p| p as i64)
                .collect();
            &kept
        }
    };
    let per_device = meta.parameter_types.len();
    let mut lists: SmallVec<[&[&PjrtBuffer]; 4]> = SmallVec::new();
    for d in 0..run_devices.len() {
        lists.push(&buffers[d * per_device..(d + 1) * per_device]);
    }
    let execute_device = portable_device.map(|d| &ctx.devices[d]);
    let transfers = match &callbacks {
        Some(c) if !meta.transfers.is_empty() => Some(TransferExecution::new(&meta.transfers, c)),
        _ => None,
    };
    let outputs = exe.exe.execute(
        &lists,
        meta.num_outputs,
        non_donatable,
        execute_device,
        callbacks.as_ref().map(|c| c as &dyn CallbackDispatch),
        transfers.as_ref().map(|t| HostTransfers {
            dispatch: t,
            send_channels: &meta.transfers.send_channels,
            recv_channels: &meta.transfers.recv_channels,
        }),
    );
    drop(lists);
    drop(buffers);
    // A donated buffer the plugin consumed is gone, whatever the outcome (a run that failed
    // after it started has consumed it too); one it kept stays the caller's array.
    let mut donated: SmallVec<[&ArrayCore; 2]> = SmallVec::new();
    for (g, a) in guards
        .into_iter()
        .zip(arg_lists.iter().flat_map(|l| l.iter()))
    {
        if let Held::Donated(d) = g
            && d.finish(outputs.is_ok())
        {
            donated.push(a);
        }
    }
    for a in donated {
        a.donated();
    }
    // A callback's own failure (its name and reason) says more than the plugin's wrapper.
    let outputs = match (outputs, callbacks.as_ref().and_then(|c| c.failure())) {
        (Err(_), Some(failure)) => return Err(failure),
        (outputs, _) => outputs?,
    };
    let num_outputs = meta.num_outputs.max(1);
    let mut memories: SmallVec<[&[usize]; 4]> = SmallVec::new();
    for (d, &device) in run_devices.iter().enumerate() {
        let first = &outputs[d * meta.num_outputs..(d + 1) * meta.num_outputs];
        let known = match exe.output_memories[device].get() {
            Some(known) => known,
            None => {
                let found = first
                    .iter()
                    .map(|b| {
                        b.memory_index(ctx.memories)?.ok_or_else(|| {
                            Error::Internal("an output landed in an unknown memory space".into())
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                exe.output_memories[device].get_or_init(|| found)
            }
        };
        memories.push(known);
    }
    let mut arrays = Outputs::new();
    for (i, buffer) in outputs.into_iter().enumerate() {
        let (d, output) = (i / num_outputs, i % num_outputs);
        let (device, memory) = (run_devices[d], memories[d][output]);
        let dims = meta.output_dims[output].clone();
        let slot = BufferSlot::new(
            buffer,
            meta.output_types[output].dtype,
            dims,
            device,
            memory,
        );
        arrays.push(ArrayCore::register(
            ctx.owner.clone(),
            slot,
            ctx.site.clone(),
        ));
    }
    Ok(arrays)
}
