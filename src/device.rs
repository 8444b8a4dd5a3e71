//! `Device` and `MemorySpace` handles: immutable facts come from the client's snapshot, live
//! state is asked of the device or memory-space actor.

use std::fmt;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use pjrt_actors_core::device::actor::{DeviceHandle, DeviceWorkStats};
use pjrt_actors_core::pjrt::{DeviceMemoryStats, NamedValue};
use pjrt_actors_core::{DeviceSnapshot, MemorySnapshot};
use pjrt_actors_core::{Error, Result};

use crate::handles::{Client, ClientGuard, Device, MemorySpace, wait};

impl Device {
    pub(crate) fn new(shared: Arc<ClientGuard>, index: usize) -> Self {
        Device { shared, index }
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn belongs_to(&self, shared: &Arc<ClientGuard>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }

    fn snap(&self) -> &DeviceSnapshot {
        &self.shared.state().snapshot().devices[self.index]
    }

    /// The client this device belongs to.
    pub fn client(&self) -> Client {
        Client {
            shared: self.shared.clone(),
        }
    }

    /// The device id, unique in the client.
    pub fn id(&self) -> i32 {
        self.snap().description.id
    }

    /// The index of the process that owns the device.
    pub fn process_index(&self) -> i32 {
        self.snap().description.process_index
    }

    /// The device kind, e.g. `"cpu"`.
    pub fn kind(&self) -> &str {
        &self.snap().description.kind
    }

    /// The plugin's debug string (what `repr` shows in JAX).
    pub fn debug_string(&self) -> &str {
        &self.snap().description.debug_string
    }

    /// The plugin's display string (what `str` shows in JAX).
    pub fn display_string(&self) -> &str {
        &self.snap().description.display_string
    }

    /// The local hardware id; `None` for a device this process cannot address.
    pub fn local_hardware_id(&self) -> Option<i32> {
        self.snap().local_hardware_id
    }

    /// Whether this process can address the device.
    pub fn is_addressable(&self) -> bool {
        self.snap().is_addressable
    }

    /// Plugin-defined attributes of the device.
    pub fn attributes(&self) -> &[(String, NamedValue)] {
        &self.snap().description.attributes
    }

    /// The memory spaces this device can address.
    pub fn memory_spaces(&self) -> Vec<MemorySpace> {
        self.snap()
            .memories
            .iter()
            .map(|&i| MemorySpace::new(self.shared.clone(), i))
            .collect()
    }

    /// The memory space arrays land in when none is named.
    pub fn default_memory_space(&self) -> Result<MemorySpace> {
        Ok(MemorySpace::new(
            self.shared.clone(),
            self.default_memory_index()?,
        ))
    }

    /// The index of the device's default memory space in the client's list.
    pub(crate) fn default_memory_index(&self) -> Result<usize> {
        self.snap().default_memory.ok_or_else(|| Error::NotFound {
            what: "default memory space",
            key: format!("device {}", self.id()),
        })
    }

    /// The memory space of this device with the given kind (`"device"`, `"pinned_host"`, ...).
    pub fn memory_space_by_kind(&self, kind: &str) -> Result<MemorySpace> {
        self.memory_spaces()
            .into_iter()
            .find(|m| m.kind() == kind)
            .ok_or_else(|| Error::NotFound {
                what: "memory space",
                key: format!("kind {kind:?} on device {}", self.id()),
            })
    }

    pub(crate) fn actor(&self) -> Result<DeviceHandle<'_>> {
        self.shared.device(self.index)
    }

    /// The memory kinds the device supports and which is its default: the plugin's memory
    /// descriptions extension where it lists them, else the kinds of the device's memory
    /// spaces (the CPU plugin's extension lists none).
    pub fn memory_kinds(&self) -> Result<(Vec<pjrt_actors_core::pjrt::MemoryKind>, Option<usize>)> {
        let (kinds, default) = self.shared.state().device_memory_kinds(self.index)?;
        if !kinds.is_empty() {
            return Ok((kinds, default));
        }
        let spaces = self.memory_spaces();
        let default = self.default_memory_space().ok();
        let kinds = spaces
            .iter()
            .map(|m| pjrt_actors_core::pjrt::MemoryKind {
                kind: m.kind().to_string(),
                kind_id: m.kind_id(),
            })
            .collect();
        Ok((
            kinds,
            spaces.iter().position(|m| Some(m) == default.as_ref()),
        ))
    }

    /// Test support: makes the device actor's handler panic (the request fails, the actor is
    /// restarted by its supervisor).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn poison_actor(&self) -> Result<()> {
        self.shared.refuse_blocking_on_device(self.index)?;
        wait(self.actor()?.poison())
    }

    /// Test support: keeps the device actor busy until the returned hold is dropped (at most
    /// 30 s), so that work sent to the device meanwhile waits in its actor's mailbox.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn hold_actor(&self) -> Result<ActorHold> {
        let (release, held) = crossbeam_channel::bounded(1);
        Ok(ActorHold {
            _release: release,
            // Kept: a request whose answer nobody waits for is skipped by the actor.
            _request: Box::pin(self.actor()?.hold(held)),
        })
    }

    /// The device allocator's statistics, asked of the device actor; `None` where the plugin
    /// keeps none (the CPU plugin).
    pub fn memory_stats(&self) -> Result<Option<DeviceMemoryStats>> {
        self.shared.refuse_blocking_on_device(self.index)?;
        wait(self.memory_stats_async())
    }

    /// The async form of [`memory_stats`](Self::memory_stats).
    pub fn memory_stats_async(
        &self,
    ) -> impl Future<Output = Result<Option<DeviceMemoryStats>>> + use<> {
        let asked = self.actor().map(DeviceHandle::memory_stats);
        async move { asked?.await }
    }

    /// What this device's actor has served: async executes (and how many failed), async
    /// reads, the time it spent on them, and how long executes waited in its mailbox. The
    /// actor keeps these itself; blocking executes run on their callers' threads and are not
    /// in them.
    pub fn work_stats(&self) -> Result<DeviceWorkStats> {
        self.shared.refuse_blocking_on_device(self.index)?;
        wait(self.work_stats_async())
    }

    /// The async form of [`work_stats`](Self::work_stats).
    pub fn work_stats_async(&self) -> impl Future<Output = Result<DeviceWorkStats>> + use<> {
        let asked = self.actor().map(DeviceHandle::work_stats);
        async move { asked?.await }
    }
}

impl Device {
    /// Async executes sent to this device and not yet computed (waiting in its actor's queue,
    /// running, or computing): what least-loaded routing compares. Read without a message.
    pub fn queue_depth(&self) -> usize {
        self.shared.device_queue_depth(self.index)
    }

    /// Creates an array on this device from a typed slice (copied during the call).
    #[track_caller]
    pub fn put<T: pjrt_actors_core::pjrt::NativeType>(
        &self,
        data: &[T],
        dims: &[i64],
    ) -> Result<crate::Array> {
        let data = crate::HostBuffer::Copy(pjrt_actors_core::pjrt::as_bytes(data));
        let site = self.shared.state().site();
        crate::array::upload(&self.shared, data, T::TYPE, dims, (self, None), site)
    }

    /// Creates an array on this device from a host array (copied during the call): the upload
    /// of the one owned host type, which serving, weights and the command line use.
    /// [`Array::to_host_array`] reads one back.
    #[track_caller]
    pub fn put_array(&self, array: &crate::HostArray) -> Result<crate::Array> {
        let data = crate::HostBuffer::Copy(&array.bytes);
        let site = self.shared.state().site();
        crate::array::upload(
            &self.shared,
            data,
            array.dtype,
            &array.dims,
            (self, None),
            site,
        )
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared) && self.index == other.index
    }
}
impl Eq for Device {}
impl Hash for Device {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.shared) as usize, self.index).hash(state);
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.debug_string())
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.display_string())
    }
}

impl MemorySpace {
    pub(crate) fn new(shared: Arc<ClientGuard>, index: usize) -> Self {
        MemorySpace { shared, index }
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn belongs_to(&self, shared: &Arc<ClientGuard>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }

    fn snap(&self) -> &MemorySnapshot {
        &self.shared.state().snapshot().memories[self.index]
    }

    /// The client the memory space belongs to.
    pub fn client(&self) -> Client {
        Client {
            shared: self.shared.clone(),
        }
    }

    /// The memory space id, unique in the client.
    pub fn id(&self) -> i32 {
        self.snap().description.id
    }

    /// The memory kind, e.g. `"device"`, `"pinned_host"`, `"unpinned_host"`.
    pub fn kind(&self) -> &str {
        &self.snap().description.kind
    }

    /// The plugin's numeric id for the kind.
    pub fn kind_id(&self) -> i32 {
        self.snap().description.kind_id
    }

    /// The plugin's debug string for the memory space.
    pub fn debug_string(&self) -> &str {
        &self.snap().description.debug_string
    }

    /// The plugin's display string for the memory space.
    pub fn display_string(&self) -> &str {
        &self.snap().description.display_string
    }

    /// The indices of the devices that can address this memory space.
    pub(crate) fn device_indices(&self) -> &[usize] {
        &self.snap().devices
    }

    /// The devices that can address this memory space.
    pub fn devices(&self) -> Vec<Device> {
        self.snap()
            .devices
            .iter()
            .map(|&i| Device::new(self.shared.clone(), i))
            .collect()
    }

    /// Asks the memory-space actor to read the space's kind and device ids from the plugin
    /// again (the snapshot getters never touch the plugin).
    pub fn describe(&self) -> Result<(String, Vec<i32>)> {
        wait(self.describe_async())
    }

    /// The async form of [`describe`](Self::describe).
    pub fn describe_async(&self) -> impl Future<Output = Result<(String, Vec<i32>)>> + use<> {
        let request = self.shared.memory(self.index).describe();
        async move {
            let (desc, devices) = request.await?;
            Ok((desc.kind, devices))
        }
    }
    /// Bytes this client's arrays hold in this memory space now (their dense sizes: dtype ×
    /// dims), counted as arrays are made and as their buffers are freed: an array deleted
    /// while a run still holds it counts until its device actor frees it, as the device
    /// still holds its memory. Read without a message.
    pub fn bytes_held(&self) -> u64 {
        self.shared.state().memory_held(self.index)
    }

    /// How many async uploads wait for room under this memory space's budget now, in arrival
    /// order, their callers still waiting (the memory-space actor, which owns them, answers).
    pub fn waiting_uploads(&self) -> Result<usize> {
        wait(self.shared.memory(self.index).waiting_uploads())
    }

    /// The budget set on this memory space, if any.
    pub fn budget(&self) -> Option<u64> {
        self.shared.state().memory_budget(self.index)
    }

    /// Sets (or, with `None`, clears) a budget on the bytes this client's arrays may hold in
    /// this memory space, to stop before the plugin runs out of memory. Past it a blocking
    /// upload fails at once with `Error::MemoryBudget` and allocates nothing; an async upload
    /// waits, in arrival order, until arrays are freed or the budget is raised (one larger than
    /// the budget itself fails at once). Arrays an execute or a copy makes are counted, never
    /// refused. The memory-space actor owns the budget and the waiting uploads.
    pub fn set_budget(&self, budget: Option<u64>) -> Result<()> {
        wait(self.set_budget_async(budget))
    }

    /// The async form of [`set_budget`](Self::set_budget).
    pub fn set_budget_async(
        &self,
        budget: Option<u64>,
    ) -> impl Future<Output = Result<()>> + use<> {
        let check = self.shared.state().check_open();
        let request = self.shared.memory(self.index).set_budget(budget);
        async move {
            check?;
            request.await
        }
    }
}

impl PartialEq for MemorySpace {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared) && self.index == other.index
    }
}
impl Eq for MemorySpace {}
impl Hash for MemorySpace {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.shared) as usize, self.index).hash(state);
    }
}

impl fmt::Debug for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.debug_string())
    }
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.display_string())
    }
}

/// Test support: a device actor held busy ([`Device::hold_actor`]) until this is dropped.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub struct ActorHold {
    // Dropped first: the actor is released before its answer is let go.
    _release: crossbeam_channel::Sender<()>,
    _request: std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>,
}
