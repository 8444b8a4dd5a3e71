//! Host callbacks over host send/recv, the transport GPU plugins offer (py_client's
//! `make_python_callback_from_host_send_and_recv`): each operand is a send to the host, each
//! result a recv from it, and the closure runs once all of a call's operands have arrived.

use std::collections::{HashMap, VecDeque};

use crate::callbacks::{
    ATTR_CALL, ATTR_CALLBACK, ATTR_OPERAND, ATTR_RESULT, ExecutionCallbacks, HostCallback,
};
use crate::error::{Error, Result};
use crate::lock_rank::{RankedMutex, SEND_RECV};
use crate::pjrt::{
    AlignedBytes, ArrayType, HostTransferDispatch, HostView, HostViewMut, RecvStream,
};

/// Whether a program's text asks for host send/recv (the check made before compiling on a
/// plugin that cannot).
pub fn uses_host_transfers(program: &[u8]) -> bool {
    program
        .windows(b"is_host_transfer = true".len())
        .any(|w| w == b"is_host_transfer = true")
}

/// The refusal for host send/recv on a plugin without it (XLA:CPU).
pub fn unsupported_here(platform: &str) -> Error {
    Error::Unsupported {
        what: "host send/recv",
        hint: format!(
            " ({platform} cannot compile it): use FFI callbacks (`HostCallback::call_text`)"
        ),
    }
}

/// One call site of a callback in a program: its operand and result channels, in order.
#[derive(Debug, Clone, PartialEq)]
struct CallSite {
    callback: i64,
    operands: Vec<i64>,
    results: Vec<i64>,
}

/// What a program's host send/recv channels mean, read from its optimized HLO.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransferPlan {
    /// Every send channel, as `ExecuteOptions` lists them.
    pub send_channels: Vec<i64>,
    /// Every recv channel.
    pub recv_channels: Vec<i64>,
    /// Call sites by their first channel.
    calls: HashMap<i64, CallSite>,
    /// For each channel: its call site and, for a send, the operand index.
    channels: HashMap<i64, (i64, Option<usize>)>,
}

impl TransferPlan {
    /// Reads the plan; a host send/recv without our attributes is refused (no closure could
    /// answer it).
    pub fn read(module: &pjrt_actors_formats::protos::xla::HloModuleProto) -> Result<Self> {
        let mut plan = TransferPlan::default();
        for c in &module.computations {
            for i in &c.instructions {
                let is_send = i.opcode == "send";
                if !(is_send || i.opcode == "recv") || !i.is_host_transfer {
                    continue;
                }
                let attrs = i.frontend_attributes.as_ref().map(|a| &a.map);
                let get = |key: &str| -> Option<i64> { attrs?.get(key)?.parse().ok() };
                let (Some(callback), Some(call)) = (get(ATTR_CALLBACK), get(ATTR_CALL)) else {
                    return Err(Error::Unsupported {
                        what: "a host send/recv that names no callback",
                        hint: format!(
                            " (channel {}): build callback calls with `HostCallback::send_recv_text`",
                            i.channel_id
                        ),
                    });
                };
                let site = plan.calls.entry(call).or_insert_with(|| CallSite {
                    callback,
                    operands: Vec::new(),
                    results: Vec::new(),
                });
                let (list, index) = if is_send {
                    (&mut site.operands, get(ATTR_OPERAND))
                } else {
                    (&mut site.results, get(ATTR_RESULT))
                };
                let index = index.unwrap_or(0).max(0) as usize;
                if list.len() <= index {
                    list.resize(index + 1, -1);
                }
                list[index] = i.channel_id;
                if is_send {
                    plan.send_channels.push(i.channel_id);
                } else {
                    plan.recv_channels.push(i.channel_id);
                }
                plan.channels
                    .insert(i.channel_id, (call, is_send.then_some(index)));
            }
        }
        Ok(plan)
    }

    /// The callbacks the program calls through send/recv.
    pub fn callback_ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.calls.values().map(|c| c.callback)
    }

    /// Whether the program has any host send/recv.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// One call site's state on one device, across the rounds a loop may run it.
#[derive(Default)]
struct CallState {
    /// Operand bytes being assembled, by operand index (chunks may be split).
    operands: Vec<Vec<u8>>,
    arrived: usize,
    /// Results ready and recvs waiting, by result channel.
    ready: HashMap<i64, VecDeque<Vec<u8>>>,
    waiting: HashMap<i64, VecDeque<RecvStream>>,
}

/// One execution's send/recv state: runs callbacks through `ExecutionCallbacks` (so checks,
/// ordering, panics and failures are the FFI path's).
pub struct TransferExecution<'a> {
    plan: &'a TransferPlan,
    callbacks: &'a ExecutionCallbacks<'a>,
    state: RankedMutex<HashMap<(usize, i64), CallState>>,
}

impl<'a> TransferExecution<'a> {
    pub fn new(plan: &'a TransferPlan, callbacks: &'a ExecutionCallbacks<'a>) -> Self {
        TransferExecution {
            plan,
            callbacks,
            state: RankedMutex::new(SEND_RECV, HashMap::new()),
        }
    }

    fn declared(&self, site: &CallSite) -> Option<HostCallback> {
        self.callbacks.callback(site.callback)
    }

    /// Runs a call whose operands are all here; returns its results' bytes, in order (zeros
    /// of the declared sizes when it fails: the failure is recorded and the program finishes).
    fn run(&self, site: &CallSite, operands: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let Some(cb) = self.declared(site) else {
            return Vec::new();
        };
        let size = |t: &ArrayType| crate::dtype::byte_size(t.dtype, &t.dims).unwrap_or(0);
        let ins: Vec<AlignedBytes> = operands.iter().map(|b| AlignedBytes::copy_of(b)).collect();
        let mut outs: Vec<AlignedBytes> = cb
            .result_types()
            .iter()
            .map(|t| AlignedBytes::zeroed(size(t)))
            .collect();
        for (i, (t, b)) in cb.operand_types().iter().zip(&ins).enumerate() {
            if b.as_slice().len() != size(t) {
                self.callbacks.record_failure(
                    cb.name(),
                    format!(
                        "operand {i} arrived with {} bytes; {}{:?} is {} bytes",
                        b.as_slice().len(),
                        t.dtype,
                        t.dims,
                        size(t)
                    ),
                );
                return outs.iter().map(|o| o.as_slice().to_vec()).collect();
            }
        }
        {
            let views: Vec<HostView<'_>> = cb
                .operand_types()
                .iter()
                .zip(&ins)
                .map(|(t, b)| HostView {
                    dtype: t.dtype,
                    dims: &t.dims,
                    data: b.as_slice(),
                })
                .collect();
            let mut out_views: Vec<HostViewMut<'_>> = cb
                .result_types()
                .iter()
                .zip(outs.iter_mut())
                .map(|(t, b)| HostViewMut {
                    dtype: t.dtype,
                    dims: &t.dims,
                    data: b.as_mut_slice(),
                })
                .collect();
            use crate::pjrt::CallbackDispatch;
            if self
                .callbacks
                .call(site.callback, &views, &mut out_views)
                .is_err()
            {
                drop(out_views);
                for o in &mut outs {
                    o.as_mut_slice().fill(0);
                }
            }
        }
        outs.iter().map(|o| o.as_slice().to_vec()).collect()
    }
}

impl HostTransferDispatch for TransferExecution<'_> {
    fn sent(
        &self,
        device: usize,
        channel: i64,
        chunk: &[u8],
        done: bool,
    ) -> std::result::Result<(), String> {
        let Some(&(call, Some(index))) = self.plan.channels.get(&channel) else {
            return Err(format!("a host send on unknown channel {channel}"));
        };
        let site = &self.plan.calls[&call];
        let operands = {
            let mut state = self.state.lock();
            let s = state.entry((device, call)).or_default();
            if s.operands.len() < site.operands.len() {
                s.operands.resize(site.operands.len(), Vec::new());
            }
            s.operands[index].extend_from_slice(chunk);
            if !done {
                return Ok(());
            }
            s.arrived += 1;
            if s.arrived < site.operands.len() {
                return Ok(());
            }
            s.arrived = 0;
            std::mem::take(&mut s.operands)
        };
        // The closure runs outside the lock: it may call back into the runtime.
        let results = self.run(site, operands);
        let mut fill = Vec::new();
        {
            let mut state = self.state.lock();
            let s = state.entry((device, call)).or_default();
            for (&result_channel, bytes) in site.results.iter().zip(results) {
                match s
                    .waiting
                    .get_mut(&result_channel)
                    .and_then(|q| q.pop_front())
                {
                    Some(stream) => fill.push((stream, bytes)),
                    None => s.ready.entry(result_channel).or_default().push_back(bytes),
                }
            }
        }
        for (stream, bytes) in fill {
            stream.fill(bytes);
        }
        Ok(())
    }

    fn receive(&self, device: usize, channel: i64, stream: RecvStream) {
        let Some(&(call, None)) = self.plan.channels.get(&channel) else {
            return; // Unknown channel: the stream is dropped; the plugin reports the error.
        };
        let ready = {
            let mut state = self.state.lock();
            let s = state.entry((device, call)).or_default();
            match s.ready.get_mut(&channel).and_then(|q| q.pop_front()) {
                Some(bytes) => Some((stream, bytes)),
                None => {
                    s.waiting.entry(channel).or_default().push_back(stream);
                    None
                }
            }
        };
        if let Some((stream, bytes)) = ready {
            stream.fill(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callbacks::{CallbackKind, CallbackSet};
    use crate::dtype::ElementType;
    use pjrt_actors_formats::protos::xla::{
        FrontendAttributes, HloComputationProto, HloInstructionProto, HloModuleProto,
    };

    fn f32s(n: i64) -> ArrayType {
        ArrayType {
            dtype: ElementType::F32,
            dims: vec![n],
        }
    }

    fn op(
        opcode: &str,
        channel: i64,
        cb: i64,
        call: i64,
        role: &str,
        index: usize,
    ) -> HloInstructionProto {
        let mut attrs = FrontendAttributes::default();
        attrs.map.insert(ATTR_CALLBACK.into(), cb.to_string());
        attrs.map.insert(ATTR_CALL.into(), call.to_string());
        attrs.map.insert(role.into(), index.to_string());
        HloInstructionProto {
            opcode: opcode.into(),
            channel_id: channel,
            is_host_transfer: true,
            frontend_attributes: Some(attrs),
            ..Default::default()
        }
    }

    /// `add(a, b)` over two f32[2] operands, one f32[2] result, on channels 7, 8 -> 9.
    fn add_callback() -> (HostCallback, HloModuleProto) {
        let cb = HostCallback::new(
            "add",
            CallbackKind::Pure,
            vec![f32s(2), f32s(2)],
            vec![f32s(2)],
            |ins, outs| {
                let a = ins[0].as_slice::<f32>().unwrap();
                let b = ins[1].as_slice::<f32>().unwrap();
                let y = outs[0].as_mut_slice::<f32>().unwrap();
                for i in 0..2 {
                    y[i] = a[i] + b[i];
                }
                Ok(())
            },
        )
        .unwrap();
        let id = cb.id();
        let module = HloModuleProto {
            computations: vec![HloComputationProto {
                instructions: vec![
                    op("send", 7, id, 7, ATTR_OPERAND, 0),
                    op("send", 8, id, 7, ATTR_OPERAND, 1),
                    op("recv", 9, id, 7, ATTR_RESULT, 0),
                    HloInstructionProto {
                        opcode: "add".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        (cb, module)
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        crate::pjrt::as_bytes(v).to_vec()
    }

    #[test]
    fn the_plan_maps_channels_to_call_sites() {
        let (cb, module) = add_callback();
        let plan = TransferPlan::read(&module).unwrap();
        assert_eq!(plan.send_channels, vec![7, 8]);
        assert_eq!(plan.recv_channels, vec![9]);
        assert_eq!(plan.callback_ids().collect::<Vec<_>>(), vec![cb.id()]);
        assert_eq!(plan.channels[&8], (7, Some(1)));
        assert_eq!(plan.channels[&9], (7, None));
    }

    #[test]
    fn a_host_transfer_without_our_attributes_is_refused() {
        let module = HloModuleProto {
            computations: vec![HloComputationProto {
                instructions: vec![HloInstructionProto {
                    opcode: "send".into(),
                    channel_id: 3,
                    is_host_transfer: true,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let err = TransferPlan::read(&module).unwrap_err().to_string();
        assert!(err.contains("channel 3"), "{err}");
    }

    #[test]
    fn split_chunks_assemble_and_the_callback_runs_once_all_operands_are_in() {
        let (cb, module) = add_callback();
        let plan = TransferPlan::read(&module).unwrap();
        let set = CallbackSet::for_program(&[cb.id()], &[cb]).unwrap();
        let calls = ExecutionCallbacks::new(&set);
        let exec = TransferExecution::new(&plan, &calls);
        let a = bytes(&[1.0, 2.0]);
        // Two rounds on two devices, operands split and out of order.
        for (device, scale) in [(0usize, 1.0f32), (1, 10.0)] {
            for round in 0..2 {
                let b = bytes(&[scale * 3.0, scale * 4.0]);
                exec.sent(device, 8, &b[..3], false).unwrap();
                exec.sent(device, 8, &b[3..], true).unwrap();
                // Not yet: one operand is still missing for this round.
                let done = exec.state.lock()[&(device, 7)]
                    .ready
                    .get(&9)
                    .map_or(0, |q| q.len());
                assert_eq!(done, round);
                exec.sent(device, 7, &a, true).unwrap();
            }
        }
        let state = exec.state.lock();
        for (device, scale) in [(0usize, 1.0f32), (1, 10.0)] {
            let ready = &state[&(device, 7)].ready[&9];
            assert_eq!(ready.len(), 2);
            for r in ready {
                assert_eq!(r, &bytes(&[1.0 + scale * 3.0, 2.0 + scale * 4.0]));
            }
        }
        assert!(calls.failure().is_none());
    }

    #[test]
    fn a_short_operand_or_a_panic_fails_the_execution_naming_the_callback_with_zeroed_results() {
        let (cb, module) = add_callback();
        let plan = TransferPlan::read(&module).unwrap();
        let set = CallbackSet::for_program(&[cb.id()], &[cb]).unwrap();
        let calls = ExecutionCallbacks::new(&set);
        let exec = TransferExecution::new(&plan, &calls);
        exec.sent(0, 7, &bytes(&[1.0]), true).unwrap();
        exec.sent(0, 8, &bytes(&[1.0, 2.0]), true).unwrap();
        assert_eq!(exec.state.lock()[&(0, 7)].ready[&9][0], vec![0u8; 8]);
        let err = calls.failure().unwrap().to_string();
        assert!(err.contains("add") && err.contains("operand 0"), "{err}");

        let boom = HostCallback::new(
            "boom",
            CallbackKind::Pure,
            vec![f32s(2), f32s(2)],
            vec![f32s(2)],
            |_, _| panic!("kaboom"),
        )
        .unwrap();
        let mut module = module;
        for i in &mut module.computations[0].instructions {
            if let Some(a) = i.frontend_attributes.as_mut() {
                a.map.insert(ATTR_CALLBACK.into(), boom.id().to_string());
            }
        }
        let plan = TransferPlan::read(&module).unwrap();
        let set = CallbackSet::for_program(&[boom.id()], &[boom]).unwrap();
        let calls = ExecutionCallbacks::new(&set);
        let exec = TransferExecution::new(&plan, &calls);
        exec.sent(0, 7, &bytes(&[1.0, 2.0]), true).unwrap();
        exec.sent(0, 8, &bytes(&[1.0, 2.0]), true).unwrap();
        let err = calls.failure().unwrap().to_string();
        assert!(err.contains("boom") && err.contains("kaboom"), "{err}");
        assert!(exec.sent(0, 42, &[], true).is_err());
    }

    #[test]
    fn only_programs_with_host_transfers_are_flagged() {
        let (cb, _) = add_callback();
        let text = cb.send_recv_text("%r", &["%a", "%b"], 7);
        assert!(uses_host_transfers(text.as_bytes()));
        assert!(!uses_host_transfers(
            cb.call_text("%r", &["%a", "%b"]).as_bytes()
        ));
        assert_eq!(cb.send_recv_channels(), 3);
    }
}
