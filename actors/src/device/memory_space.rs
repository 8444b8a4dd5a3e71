//! A memory-space actor: owns the order of the async uploads into one memory space and serves
//! them in arrival order, owns the space's budget and the uploads waiting for room under it,
//! and answers with its live view of the memory space.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use actix::{Actor, Context, Handler, Message};
use tokio::sync::oneshot;
use tracing::Span;

use crate::arrays::buffers::{ArrayCore, ArrayOwner};
use crate::arrays::memory_account::{MemoryAccount, OverBudget};
use crate::arrays::site::Site;
use crate::client::state::{ClientState, Upload};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::pjrt::{HostBuffer, MemoryDescription};
use crate::protocol::LookAgain;
use crate::protocol::supervision::{Mailbox, answer, ask, guarded, tell};

pub struct MemorySpaceActor {
    state: Arc<ClientState>,
    index: usize,
    /// Async uploads that did not fit the budget when they came, oldest first, with their
    /// callers' reply channels: served in order as room frees (its own, no one else's).
    waiting: VecDeque<UploadRequest>,
    /// Waiting uploads look for room every millisecond: arrays free bytes on any thread,
    /// without a message.
    look_again: LookAgain,
}

impl MemorySpaceActor {
    pub(crate) fn new(state: Arc<ClientState>, index: usize) -> Self {
        MemorySpaceActor {
            state,
            index,
            waiting: VecDeque::new(),
            look_again: LookAgain::default(),
        }
    }

    fn account(&self) -> &MemoryAccount {
        &self.state.memory_accounts[self.index]
    }

    /// Serves the waiting uploads that fit now, oldest first (a later one never passes an
    /// earlier one); answers those whose callers went away with nothing; schedules the next
    /// look while any wait.
    fn admit_waiting(&mut self, ctx: &mut Context<Self>) {
        while let Some(request) = self.waiting.front() {
            let bytes = upload_bytes(request);
            if request.reply.is_closed() {
                self.waiting.pop_front();
            } else if !self.account().could_fit(bytes) {
                let request = self.waiting.pop_front().expect("looked at");
                let refused = self.over_budget(&request);
                let _ = request.reply.send(Err(refused));
            } else if self.account().try_charge(bytes).is_ok() {
                let request = self.waiting.pop_front().expect("looked at");
                self.upload_charged(request, bytes);
            } else {
                break;
            }
        }
        if !self.waiting.is_empty() {
            LookAgain::schedule(self, ctx, |a| &mut a.look_again, Self::admit_waiting);
        }
    }

    /// Uploads a request whose `bytes` are charged, and answers its caller.
    fn upload_charged(&self, msg: UploadRequest, bytes: u64) {
        let (upload, span) = (msg.upload, msg.span);
        let _span = tracing::debug_span!(
            parent: &span,
            "memory_space.upload",
            memory = self.index,
            bytes = upload.data.bytes().len()
        )
        .entered();
        let uploaded = guarded("upload", || {
            self.state.upload_charged(
                Upload {
                    owner: upload.owner,
                    data: upload.data,
                    dtype: upload.dtype,
                    dims: &upload.dims,
                    placement: (upload.device, self.index),
                    explicit_memory: upload.explicit_memory,
                    site: upload.site,
                },
                bytes,
            )
        });
        // A caller that went away drops the array here, which credits the account back.
        let _ = msg.reply.send(uploaded);
    }

    fn over_budget(&self, msg: &UploadRequest) -> Error {
        let account = self.account();
        let over = OverBudget {
            asked: upload_bytes(msg),
            held: account.held(),
            budget: account.budget().unwrap_or(u64::MAX),
        };
        self.state.over_budget(self.index, over)
    }
}

/// The bytes an upload charges: its dense size.
fn upload_bytes(msg: &UploadRequest) -> u64 {
    let upload = &msg.upload;
    crate::dtype::byte_size(upload.dtype, &upload.dims).map_or(u64::MAX, |n| n as u64)
}

/// Sets or clears the memory space's budget (bytes our arrays may hold there). Uploads past it
/// fail at once when blocking (`Error::MemoryBudget`) and wait for room when async; arrays an
/// execute or a copy makes are counted but never refused (the plugin made them already).
#[derive(Message)]
#[rtype(result = "Result<()>")]
pub(crate) struct SetBudget(Option<u64>);

impl Handler<SetBudget> for MemorySpaceActor {
    type Result = Result<()>;

    fn handle(&mut self, msg: SetBudget, ctx: &mut Context<Self>) -> Self::Result {
        guarded("set budget", || {
            self.account().set_budget(msg.0);
            // A larger budget (or none) may let waiting uploads in now.
            self.admit_waiting(ctx);
            Ok(())
        })
    }
}

impl Actor for MemorySpaceActor {
    type Context = Context<Self>;
}

crate::protocol::supervision::answers_asked!(MemorySpaceActor);

/// How many async uploads wait for room now (their callers still waiting): the budget's queue.
#[derive(Message)]
#[rtype(result = "Result<usize>")]
pub(crate) struct WaitingUploads;

impl Handler<WaitingUploads> for MemorySpaceActor {
    type Result = Result<usize>;

    fn handle(&mut self, _: WaitingUploads, _: &mut Context<Self>) -> Self::Result {
        guarded("count waiting uploads", || {
            Ok((self.waiting.iter())
                .filter(|r| !r.reply.is_closed())
                .count())
        })
    }
}

/// Asks the plugin again for the memory space's description and the ids of its devices.
#[derive(Message)]
#[rtype(result = "Result<(MemoryDescription, Vec<i32>)>")]
pub(crate) struct DescribeMemory {
    span: Span,
}

impl Handler<DescribeMemory> for MemorySpaceActor {
    type Result = Result<(MemoryDescription, Vec<i32>)>;

    fn handle(&mut self, msg: DescribeMemory, _: &mut Context<Self>) -> Self::Result {
        let _span =
            tracing::debug_span!(parent: &msg.span, "memory_space.describe", memory = self.index)
                .entered();
        guarded("describe memory space", || {
            let memory = &self.state.memories[self.index];
            let description = memory.description()?;
            let devices = memory
                .devices()?
                .iter()
                .map(|d| d.description().map(|d| d.id))
                .collect::<crate::pjrt::Result<Vec<_>>>()?;
            Ok((description, devices))
        })
    }
}

/// An async upload, as its caller asks for it: host data (already checked against dtype and
/// dims) for this memory space, on `device`. The data is owned (no borrowed form), so the
/// plugin may read it for as long as its semantics allow.
pub struct AsyncUpload {
    /// Who owns the new array: the caller's client guard.
    pub owner: Arc<dyn ArrayOwner>,
    pub site: Site,
    pub data: HostBuffer<'static>,
    pub dtype: ElementType,
    pub dims: Vec<i64>,
    pub device: usize,
    /// Whether the caller named this memory space (else it is the device's default).
    pub explicit_memory: bool,
}

/// An upload request: built only by [`MemoryHandle::upload`].
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct UploadRequest {
    upload: AsyncUpload,
    span: Span,
    /// The caller's answer: its own channel, so a caller that went away is seen while the
    /// upload waits for room.
    reply: oneshot::Sender<Result<Arc<ArrayCore>>>,
}

impl Handler<UploadRequest> for MemorySpaceActor {
    type Result = ();

    /// Served at once when it fits the budget and nothing waits before it; else it waits, in
    /// order, for room (or fails at once if it could never fit).
    fn handle(&mut self, msg: UploadRequest, ctx: &mut Context<Self>) {
        let bytes = upload_bytes(&msg);
        if self.waiting.is_empty() && self.account().try_charge(bytes).is_ok() {
            // Under `guarded` there, with the answer sent whatever happens.
            return self.upload_charged(msg, bytes);
        }
        // A panic below drops the request, which its caller reads as the client gone.
        let _ = guarded("queue upload", || {
            if !self.account().could_fit(bytes) {
                let refused = self.over_budget(&msg);
                let _ = msg.reply.send(Err(refused));
                return Ok(());
            }
            self.waiting.push_back(msg);
            self.admit_waiting(ctx);
            Ok(())
        });
    }
}

/// The one way to reach a memory-space actor: only this builds its messages, taking the
/// caller's span as it sends.
#[derive(Clone, Copy)]
pub struct MemoryHandle<'a> {
    pub(crate) addr: &'a Mailbox<MemorySpaceActor>,
}

impl MemoryHandle<'_> {
    /// Uploads `upload` in arrival order, waiting for room under the space's budget; a caller
    /// that drops the future is seen as gone by an upload still waiting, which is never made.
    pub fn upload(
        self,
        upload: AsyncUpload,
    ) -> impl Future<Output = Result<Arc<ArrayCore>>> + use<> {
        let (reply, answer_on) = oneshot::channel();
        let span = Span::current();
        tell(
            self.addr,
            UploadRequest {
                upload,
                span,
                reply,
            },
        );
        answer(answer_on)
    }

    /// The space's description and its devices' ids, asked of the plugin again.
    pub fn describe(self) -> impl Future<Output = Result<(MemoryDescription, Vec<i32>)>> + use<> {
        ask(
            self.addr,
            DescribeMemory {
                span: Span::current(),
            },
        )
    }

    /// Sets or clears the space's budget.
    pub fn set_budget(self, budget: Option<u64>) -> impl Future<Output = Result<()>> + use<> {
        ask(self.addr, SetBudget(budget))
    }

    /// How many async uploads wait for room under the budget now.
    pub fn waiting_uploads(self) -> impl Future<Output = Result<usize>> + use<> {
        ask(self.addr, WaitingUploads)
    }
}
