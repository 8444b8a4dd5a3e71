//! Host callbacks, the safe side: Rust closures a compiled program calls through the XLA FFI
//! handler (see `pjrt::ffi`). A callback has a stable id (from its name) that programs refer
//! to, declared operand and result types that are checked on every call, and a kind: pure,
//! ordered (side effects, one call at a time in program order), or observer (no results).

pub mod send_recv;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::arrays::host_array::HostArray;
use crate::error::{Error, Result};
use crate::lock_rank::{CALLBACK_FAILURE, CALLBACK_ORDER, RankedMutex};
use crate::pjrt::{
    ArrayType, CALLBACK_ID_ATTR, CallbackDispatch, HOST_CALLBACK_TARGET, HostView, HostViewMut,
};

/// Frontend attributes that tie a send/recv to its callback, call site and position.
pub(crate) const ATTR_CALLBACK: &str = "pjrt_actors_callback";
pub(crate) const ATTR_CALL: &str = "pjrt_actors_call";
pub(crate) const ATTR_OPERAND: &str = "pjrt_actors_operand";
pub(crate) const ATTR_RESULT: &str = "pjrt_actors_result";

/// What a callback may do, as JAX's `pure_callback`, `io_callback` and py_client's output
/// (observer) callbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackKind {
    /// No side effects: operands in, results out. XLA may deduplicate or drop such calls.
    Pure,
    /// Side effects: calls are kept, and run one at a time in program order.
    Ordered,
    /// Receives values and returns nothing (side effects kept).
    Observer,
}

type CallbackFn = dyn Fn(&[HostView<'_>], &mut [HostViewMut<'_>]) -> std::result::Result<(), String>
    + Send
    + Sync;

/// A Rust closure that compiled programs can call.
#[derive(Clone)]
pub struct HostCallback {
    inner: Arc<CallbackInner>,
}

struct CallbackInner {
    name: String,
    id: i64,
    kind: CallbackKind,
    operands: Vec<ArrayType>,
    results: Vec<ArrayType>,
    func: Arc<CallbackFn>,
    /// Serializes ordered callbacks.
    order: RankedMutex<()>,
    /// If set, the callback runs on its own thread and an execution waits at most this long.
    timeout: Option<std::time::Duration>,
}

impl HostCallback {
    /// A callback that writes its results straight into the program's result buffers.
    pub fn new(
        name: impl Into<String>,
        kind: CallbackKind,
        operands: Vec<ArrayType>,
        results: Vec<ArrayType>,
        func: impl Fn(&[HostView<'_>], &mut [HostViewMut<'_>]) -> std::result::Result<(), String>
        + Send
        + Sync
        + 'static,
    ) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "a host callback needs a name".into(),
            ));
        }
        if kind == CallbackKind::Observer && !results.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "observer callback `{name}` cannot have results"
            )));
        }
        Ok(HostCallback {
            inner: Arc::new(CallbackInner {
                id: callback_id(&name),
                name,
                kind,
                operands,
                results,
                func: Arc::new(func),
                order: RankedMutex::new(CALLBACK_ORDER, ()),
                timeout: None,
            }),
        })
    }

    /// A pure callback applying `f` to each element of one `A` operand of shape `dims`,
    /// giving one `B` result of the same shape: `HostCallback::map::<f32, f32>("double",
    /// &[4], |x| 2.0 * x)`. The element types are checked when the program runs it.
    pub fn map<A: crate::pjrt::NativeType, B: crate::pjrt::NativeType>(
        name: impl Into<String>,
        dims: &[i64],
        f: impl Fn(A) -> B + Send + Sync + 'static,
    ) -> Result<Self> {
        let ty = |dtype| ArrayType {
            dtype,
            dims: dims.to_vec(),
        };
        let (operand, result) = (ty(A::TYPE), ty(B::TYPE));
        Self::new(
            name,
            CallbackKind::Pure,
            vec![operand],
            vec![result],
            move |ins, outs| {
                let x = ins[0]
                    .as_slice::<A>()
                    .ok_or("its operand is not of the element type it maps")?;
                let y = (outs[0].as_mut_slice::<B>())
                    .ok_or("its result is not of the element type it makes")?;
                for (o, i) in y.iter_mut().zip(x) {
                    *o = f(*i);
                }
                Ok(())
            },
        )
    }

    /// A callback that returns its results as owned arrays, copied into the program's result
    /// buffers; results of another dtype or shape than the program's fail the execution with
    /// an error naming the callback.
    pub fn returning(
        name: impl Into<String>,
        kind: CallbackKind,
        operands: Vec<ArrayType>,
        results: Vec<ArrayType>,
        func: impl Fn(&[HostView<'_>]) -> std::result::Result<Vec<HostArray>, String>
        + Send
        + Sync
        + 'static,
    ) -> Result<Self> {
        Self::new(name, kind, operands, results, move |ins, outs| {
            let values = func(ins)?;
            if values.len() != outs.len() {
                return Err(format!(
                    "returned {} results; the program expects {}",
                    values.len(),
                    outs.len()
                ));
            }
            for (i, (value, out)) in values.iter().zip(outs.iter_mut()).enumerate() {
                if value.dtype != out.dtype || value.dims != out.dims {
                    return Err(format!(
                        "result {i} is {}{:?}; the program expects {}{:?}",
                        value.dtype, value.dims, out.dtype, out.dims
                    ));
                }
                if value.bytes.len() != out.data.len() {
                    return Err(format!(
                        "result {i} holds {} bytes, not {}",
                        value.bytes.len(),
                        out.data.len()
                    ));
                }
                out.data.copy_from_slice(&value.bytes);
            }
            Ok(())
        })
    }

    /// The callback's name.
    /// The same callback, but an execution waits at most `timeout` for it: it then runs on a
    /// thread of its own over copies of its operands and results, and a call that takes longer
    /// fails the execution with `Error::Callback` (the late call finishes on its thread and its
    /// results are dropped). Costs a thread and two copies per call.
    pub fn with_timeout(self, timeout: std::time::Duration) -> Self {
        let i = &self.inner;
        HostCallback {
            inner: Arc::new(CallbackInner {
                name: i.name.clone(),
                id: i.id,
                kind: i.kind,
                operands: i.operands.clone(),
                results: i.results.clone(),
                func: i.func.clone(),
                order: RankedMutex::new(CALLBACK_ORDER, ()),
                timeout: Some(timeout),
            }),
        }
    }

    /// The callback's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The id programs use to name this callback (stable: derived from the name).
    pub fn id(&self) -> i64 {
        self.inner.id
    }

    /// What the callback may do.
    pub fn kind(&self) -> CallbackKind {
        self.inner.kind
    }

    /// The declared operand types.
    pub fn operand_types(&self) -> &[ArrayType] {
        &self.inner.operands
    }

    /// The declared result types.
    pub fn result_types(&self) -> &[ArrayType] {
        &self.inner.results
    }

    /// The StableHLO text of a call to this callback: `results` is the SSA name to bind (e.g.
    /// `%r`; ignored for observers), `operands` the SSA values passed.
    pub fn call_text(&self, results: &str, operands: &[&str]) -> String {
        let ins: Vec<String> = self.inner.operands.iter().map(tensor_type).collect();
        let outs: Vec<String> = self.inner.results.iter().map(tensor_type).collect();
        let side_effect = if self.inner.kind == CallbackKind::Pure {
            ""
        } else {
            ", has_side_effect = true"
        };
        let (binding, out_types) = match outs.len() {
            0 => (String::new(), "()".to_string()),
            1 => (format!("{results} = "), outs[0].clone()),
            n => (
                format!("{results}:{n} = "),
                format!("({})", outs.join(", ")),
            ),
        };
        format!(
            "{binding}stablehlo.custom_call @{HOST_CALLBACK_TARGET}({}) {{api_version = 4 : i32, backend_config = {{{CALLBACK_ID_ATTR} = {} : i64}}{side_effect}}} : ({}) -> {out_types}",
            operands.join(", "),
            self.inner.id,
            ins.join(", "),
        )
    }
}

impl HostCallback {
    /// How many host send/recv channels one call of this callback uses (operands + results).
    pub fn send_recv_channels(&self) -> i64 {
        (self.inner.operands.len() + self.inner.results.len()) as i64
    }

    /// The StableHLO text of a call to this callback over host send/recv, the transport of GPU
    /// plugins (XLA:CPU cannot compile it; there use [`HostCallback::call_text`]). Each
    /// operand is a send, each result a recv, on channels `first_channel ..
    /// first_channel + send_recv_channels()`, which no other call in the program may use.
    /// One result binds `results`; several bind `{results}_0`, `{results}_1`, ...; tokens are
    /// named `{results}_tok{i}`.
    pub fn send_recv_text(&self, results: &str, operands: &[&str], first_channel: i64) -> String {
        let attrs = |channel: i64, kind: u8, role: &str, index: usize| {
            format!(
                "{{channel_handle = #stablehlo.channel_handle<handle = {channel}, type = {kind}>, \
                 is_host_transfer = true, mhlo.frontend_attributes = {{\
                 _xla_host_transfer_handler_name = \"pjrt_actors\", \
                 _xla_host_transfer_rendezvous = \"pjrt_actors_{channel}\", \
                 {ATTR_CALLBACK} = \"{}\", {ATTR_CALL} = \"{first_channel}\", \
                 {role} = \"{index}\"}}}}",
                self.inner.id
            )
        };
        let mut lines = vec![format!(
            "{results}_tok0 = stablehlo.after_all : !stablehlo.token"
        )];
        let mut token = 0;
        let mut channel = first_channel;
        for (i, (value, t)) in operands.iter().zip(&self.inner.operands).enumerate() {
            lines.push(format!(
                "{results}_tok{} = \"stablehlo.send\"({value}, {results}_tok{token}) {} : ({}, !stablehlo.token) -> !stablehlo.token",
                token + 1,
                attrs(channel, 2, ATTR_OPERAND, i),
                tensor_type(t)
            ));
            token += 1;
            channel += 1;
        }
        let n = self.inner.results.len();
        for (i, t) in self.inner.results.iter().enumerate() {
            let name = if n == 1 {
                results.to_string()
            } else {
                format!("{results}_{i}")
            };
            lines.push(format!(
                "{name}, {results}_tok{} = \"stablehlo.recv\"({results}_tok{token}) {} : (!stablehlo.token) -> ({}, !stablehlo.token)",
                token + 1,
                attrs(channel, 3, ATTR_RESULT, i),
                tensor_type(t)
            ));
            token += 1;
            channel += 1;
        }
        lines.join("\n")
    }
}

impl std::fmt::Debug for HostCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HostCallback({}, {:?}, id {})",
            self.inner.name, self.inner.kind, self.inner.id
        )
    }
}

/// The MLIR tensor type of `t`, e.g. `tensor<4xf32>`.
fn tensor_type(t: &ArrayType) -> String {
    let mut dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
    dims.push(t.dtype.mlir_name().to_string());
    format!("tensor<{}>", dims.join("x"))
}

/// A stable, positive id for a callback name.
pub fn callback_id(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    i64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) & i64::MAX
}

/// The callbacks an executable was given, by id.
#[derive(Default)]
pub struct CallbackSet {
    by_id: HashMap<i64, HostCallback>,
}

impl CallbackSet {
    /// The callbacks for a program that names `needed`: every one must be given.
    pub fn for_program(needed: &[i64], given: &[HostCallback]) -> Result<Self> {
        let mut by_id = HashMap::new();
        for cb in given {
            if let Some(other) = by_id.insert(cb.id(), cb.clone())
                && other.name() != cb.name()
            {
                return Err(Error::InvalidArgument(format!(
                    "callbacks `{}` and `{}` have the same id",
                    other.name(),
                    cb.name()
                )));
            }
        }
        for id in needed {
            if !by_id.contains_key(id) {
                return Err(Error::UnknownCallback { id: *id });
            }
        }
        Ok(CallbackSet { by_id })
    }
}

/// One execution's view of its callbacks: runs them and remembers the first failure so the
/// execute can return a typed error naming the callback.
pub struct ExecutionCallbacks<'a> {
    set: &'a CallbackSet,
    failure: RankedMutex<Option<(String, String)>>,
}

impl<'a> ExecutionCallbacks<'a> {
    pub fn new(set: &'a CallbackSet) -> Self {
        ExecutionCallbacks {
            set,
            failure: RankedMutex::new(CALLBACK_FAILURE, None),
        }
    }

    /// The typed error for a failed execution, if a callback caused it.
    pub fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .clone()
            .map(|(name, reason)| Error::Callback { name, reason })
    }

    /// The callback given for `id`, if any.
    pub fn callback(&self, id: i64) -> Option<HostCallback> {
        self.set.by_id.get(&id).cloned()
    }

    /// Records a failure of callback `name` (the first one is what the execute returns).
    pub fn record_failure(&self, name: &str, reason: String) {
        self.fail(name, reason);
    }

    fn fail(&self, name: &str, reason: String) -> String {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            *failure = Some((name.to_string(), reason.clone()));
        }
        format!("host callback `{name}`: {reason}")
    }
}

fn check_types(
    what: &str,
    declared: &[ArrayType],
    got: impl Iterator<Item = (crate::dtype::ElementType, Vec<i64>)>,
) -> std::result::Result<(), String> {
    let got: Vec<_> = got.collect();
    if got.len() != declared.len() {
        return Err(format!(
            "the program passes {} {what}, the callback declares {}",
            got.len(),
            declared.len()
        ));
    }
    for (i, ((dtype, dims), want)) in got.iter().zip(declared).enumerate() {
        if *dtype != want.dtype || *dims != want.dims {
            return Err(format!(
                "{what} {i} is {dtype}{dims:?} in the program, {}{:?} in the callback's declaration",
                want.dtype, want.dims
            ));
        }
    }
    Ok(())
}

impl CallbackDispatch for ExecutionCallbacks<'_> {
    fn call(
        &self,
        id: i64,
        operands: &[HostView<'_>],
        results: &mut [HostViewMut<'_>],
    ) -> std::result::Result<(), String> {
        let Some(cb) = self.set.by_id.get(&id) else {
            return Err(self.fail(
                &format!("#{id}"),
                "no callback with this id was given".into(),
            ));
        };
        let inner = &cb.inner;
        check_types(
            "operands",
            &inner.operands,
            operands.iter().map(|v| (v.dtype, v.dims.to_vec())),
        )
        .and_then(|()| {
            check_types(
                "results",
                &inner.results,
                results.iter().map(|v| (v.dtype, v.dims.to_vec())),
            )
        })
        .map_err(|reason| self.fail(&inner.name, reason))?;
        let _ordered = (inner.kind != CallbackKind::Pure).then(|| inner.order.lock());
        let outcome = match inner.timeout {
            None => catch_unwind(AssertUnwindSafe(|| (inner.func)(operands, results))),
            Some(timeout) => match run_with_timeout(inner, operands, results, timeout) {
                Some(outcome) => outcome,
                None => {
                    return Err(self.fail(
                        &inner.name,
                        format!("did not return within {timeout:?}; it is left to finish on its thread, its results dropped"),
                    ));
                }
            },
        };
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(self.fail(&inner.name, reason)),
            Err(payload) => {
                let message = crate::protocol::supervision::panic_message(payload.as_ref());
                Err(self.fail(&inner.name, format!("panicked: {message}")))
            }
        }
    }
}

type Outcome = std::thread::Result<std::result::Result<(), String>>;

/// Runs a callback on its own thread over copies, waiting at most `timeout`; `None` when it
/// did not finish in time. Copies the results back only when it did.
fn run_with_timeout(
    inner: &CallbackInner,
    operands: &[HostView<'_>],
    results: &mut [HostViewMut<'_>],
    timeout: std::time::Duration,
) -> Option<Outcome> {
    use crate::pjrt::AlignedBytes;
    let ins: Vec<(crate::dtype::ElementType, Vec<i64>, AlignedBytes)> = operands
        .iter()
        .map(|v| (v.dtype, v.dims.to_vec(), AlignedBytes::copy_of(v.data)))
        .collect();
    let outs: Vec<(crate::dtype::ElementType, Vec<i64>, usize)> = results
        .iter()
        .map(|v| (v.dtype, v.dims.to_vec(), v.data.len()))
        .collect();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let func = inner.func.clone();
    let spawned = std::thread::Builder::new()
        .name("pjrt-actors-callback".into())
        .spawn(move || {
            let mut buffers: Vec<AlignedBytes> =
                outs.iter().map(|o| AlignedBytes::zeroed(o.2)).collect();
            let outcome = {
                let views: Vec<HostView<'_>> = ins
                    .iter()
                    .map(|(dtype, dims, data)| HostView {
                        dtype: *dtype,
                        dims,
                        data: data.as_slice(),
                    })
                    .collect();
                let mut out_views: Vec<HostViewMut<'_>> = buffers
                    .iter_mut()
                    .zip(&outs)
                    .map(|(b, (dtype, dims, _))| HostViewMut {
                        dtype: *dtype,
                        dims,
                        data: b.as_mut_slice(),
                    })
                    .collect();
                catch_unwind(AssertUnwindSafe(|| func(&views, &mut out_views)))
            };
            let _ = tx.send((outcome, buffers));
        });
    if let Err(e) = spawned {
        return Some(Ok(Err(format!("cannot start its thread: {e}"))));
    }
    let (outcome, buffers) = rx.recv_timeout(timeout).ok()?;
    if matches!(outcome, Ok(Ok(()))) {
        for (out, b) in results.iter_mut().zip(&buffers) {
            out.data.copy_from_slice(b.as_slice());
        }
    }
    Some(outcome)
}

/// The callback ids a compiled program calls, read from its optimized HLO module.
pub fn callback_ids(module: &pjrt_actors_formats::protos::xla::HloModuleProto) -> Vec<i64> {
    let mut ids = Vec::new();
    for c in &module.computations {
        for i in &c.instructions {
            if i.custom_call_target != HOST_CALLBACK_TARGET {
                continue;
            }
            let config = String::from_utf8_lossy(&i.backend_config);
            if let Some(id) = parse_callback_id(&config)
                && !ids.contains(&id)
            {
                ids.push(id);
            }
        }
    }
    ids
}

/// Finds `callback_id = N` in an FFI attribute dictionary's text.
fn parse_callback_id(config: &str) -> Option<i64> {
    let at = config.find(CALLBACK_ID_ATTR)? + CALLBACK_ID_ATTR.len();
    let rest = config[at..].trim_start().strip_prefix('=')?.trim_start();
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}
