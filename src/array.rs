//! `Array`: a handle to one device buffer in the client's buffer registry. Cheap to clone;
//! dropping the last clone frees the buffer. Creating arrays from host data lives here too.

use std::fmt;
use std::sync::Arc;

use std::future::Future;

use pjrt_actors_core::arrays::buffers::{ArrayCore, BufferSlot};
use pjrt_actors_core::arrays::site::Site;
use pjrt_actors_core::client::state::Upload;
use pjrt_actors_core::device::memory_space::AsyncUpload;
use pjrt_actors_core::dtype::{ElementType, byte_size};
use pjrt_actors_core::ids::ArrayId;
use pjrt_actors_core::pjrt::{HostBuffer, NativeType, zeroed_vec};
use pjrt_actors_core::{Error, Result};

use crate::handles::{Array, Client, ClientGuard, Device, MemorySpace, guard_of};

/// Checks host data against `dtype` × `dims`: its length (without overflowing on huge
/// shapes), and for `pred` that every byte is 0 or 1 (XLA reads any other byte inconsistently:
/// `convert` keeps it, `not` treats it as true).
fn check_host_data(dtype: ElementType, dims: &[i64], bytes: &[u8]) -> Result<()> {
    let expected = byte_size(dtype, dims)?;
    if expected != bytes.len() {
        return Err(Error::InvalidArgument(format!(
            "a {dtype}{dims:?} array is {expected} bytes; got {} bytes of host data",
            bytes.len()
        )));
    }
    if dtype == ElementType::Pred
        && let Some(at) = bytes.iter().position(|&b| b > 1)
    {
        return Err(Error::InvalidArgument(format!(
            "a pred array holds 0 or 1 in each byte; byte {at} is {}",
            bytes[at]
        )));
    }
    Ok(())
}

/// Resolves where an upload lands: the memory space (default: the device's default) must be
/// one of the device's, and both must belong to `shared`'s client.
fn placement(
    shared: &Arc<ClientGuard>,
    device: &Device,
    memory: Option<&MemorySpace>,
) -> Result<(usize, usize)> {
    if !device.belongs_to(shared) {
        return Err(Error::InvalidArgument(format!(
            "{device} belongs to another client"
        )));
    }
    if !device.is_addressable() {
        return Err(Error::InvalidArgument(format!(
            "{device} is not addressable from this process"
        )));
    }
    let memory = match memory {
        Some(m) => {
            if !m.belongs_to(shared) {
                return Err(Error::InvalidArgument(format!(
                    "{m} belongs to another client"
                )));
            }
            if !m.device_indices().contains(&device.index()) {
                return Err(Error::InvalidArgument(format!(
                    "{m} is not a memory space of {device}"
                )));
            }
            m.index()
        }
        None => device.default_memory_index()?,
    };
    Ok((device.index(), memory))
}

/// Uploads host data to `device` (in `memory` or its default): the one blocking upload, shared
/// by `Client::buffer_from_host` and `Device::put`.
pub(crate) fn upload(
    shared: &Arc<ClientGuard>,
    data: HostBuffer<'_>,
    dtype: ElementType,
    dims: &[i64],
    (device, memory): (&Device, Option<&MemorySpace>),
    site: Site,
) -> Result<Array> {
    check_host_data(dtype, dims, data.bytes())?;
    let placement = placement(shared, device, memory)?;
    let core = shared.state().upload(Upload {
        owner: shared.clone(),
        data,
        dtype,
        dims,
        placement,
        explicit_memory: memory.is_some(),
        site,
    })?;
    Ok(Array::new(core))
}

impl Client {
    /// Creates an array from host bytes of `dtype` × `dims` (dense, major-to-minor) on `device`,
    /// in `memory` or the device's default memory space. The length is checked before the
    /// plugin sees anything. py_client's `buffer_from_pyval`.
    #[track_caller]
    pub fn buffer_from_host(
        &self,
        data: HostBuffer<'_>,
        dtype: ElementType,
        dims: &[i64],
        device: &Device,
        memory: Option<&MemorySpace>,
    ) -> Result<Array> {
        upload(
            &self.shared,
            data,
            dtype,
            dims,
            (device, memory),
            self.site(),
        )
    }

    /// The async form of [`buffer_from_host`](Self::buffer_from_host), with the same
    /// arguments: the upload is served by the memory space's actor. `HostBuffer::Copy` is
    /// copied before this returns (the future does not borrow it); the other two hand their
    /// owner to the runtime as in the blocking form. The allocation site is the caller of this
    /// function, taken before the future is built.
    #[track_caller]
    pub fn buffer_from_host_async(
        &self,
        data: HostBuffer<'_>,
        dtype: ElementType,
        dims: &[i64],
        device: &Device,
        memory: Option<&MemorySpace>,
    ) -> impl Future<Output = Result<Array>> + use<> {
        let site = self.site();
        let checked = check_host_data(dtype, dims, data.bytes())
            .and_then(|()| placement(&self.shared, device, memory));
        let data = data.into_owned();
        let (client, dims, explicit_memory) = (self.clone(), dims.to_vec(), memory.is_some());
        async move {
            let (device, memory) = checked?;
            let upload = AsyncUpload {
                owner: client.shared.clone(),
                site,
                data,
                dtype,
                dims,
                device,
                explicit_memory,
            };
            // A caller that drops this future is seen as gone by an upload still waiting for
            // room, which is then never made.
            Ok(Array::new(
                client.shared.memory(memory).upload(upload).await?,
            ))
        }
    }

    /// The allocation site of something this call makes, as the client records them.
    #[track_caller]
    pub(crate) fn site(&self) -> Site {
        self.state().site()
    }
}

impl Array {
    pub(crate) fn new(core: Arc<ArrayCore>) -> Self {
        Array { core }
    }

    fn slot(&self) -> &BufferSlot {
        &self.core.slot
    }

    /// The slot, once the client is known not to be shut down.
    fn open_slot(&self) -> Result<&BufferSlot> {
        self.core.owner().check_open()?;
        Ok(&self.core.slot)
    }

    /// The guard of the client this array belongs to.
    pub(crate) fn shared(&self) -> Arc<ClientGuard> {
        guard_of(&self.core)
    }

    /// The array's registry id.
    pub fn id(&self) -> ArrayId {
        self.core.id
    }

    /// The client the array belongs to.
    pub fn client(&self) -> Client {
        Client {
            shared: self.shared(),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        self.slot().dtype
    }

    /// The dimensions (empty for a scalar).
    pub fn dims(&self) -> &[i64] {
        &self.slot().dims
    }

    /// Number of elements.
    pub fn element_count(&self) -> usize {
        self.slot().dims.iter().product::<i64>() as usize
    }

    /// Bytes of the dense host representation.
    pub fn byte_size(&self) -> usize {
        self.element_count() * self.dtype().byte_size()
    }

    /// The device the array lives on.
    pub fn device(&self) -> Device {
        Device::new(self.shared(), self.slot().device)
    }

    /// The memory space the array lives in.
    pub fn memory_space(&self) -> MemorySpace {
        MemorySpace::new(self.shared(), self.slot().memory)
    }

    /// The buffer's size on its device, as the plugin reports it.
    pub fn on_device_size(&self) -> Result<usize> {
        self.core.on_device_size()
    }

    /// Whether the array was deleted (explicitly, on any of its handles).
    pub fn is_deleted(&self) -> bool {
        self.slot().is_deleted()
    }

    /// The array's layout on its device.
    pub fn layout(&self) -> Result<pjrt_actors_core::pjrt::Layout> {
        self.open_slot()?.with_buffer(|b| Ok(b.layout()?))
    }

    /// The address of the array's device memory, as a number (py_client's
    /// `unsafe_buffer_pointer`): to check zero-copy sharing or hand to other libraries. It is
    /// valid while the array lives and is not moved by a defragment.
    pub fn unsafe_buffer_pointer(&self) -> Result<usize> {
        self.open_slot()?.with_buffer(|b| Ok(b.device_address()?))
    }

    /// Whether a failed defragment left this array's bytes in host memory (readable; the next
    /// defragment puts it back on its device).
    pub fn is_on_host(&self) -> bool {
        self.slot().is_on_host()
    }

    /// Frees the device buffer now. Every clone of this handle then sees `Error::Deleted`;
    /// operations already running on it finish first.
    pub fn delete(&self) {
        self.core.delete();
    }

    /// Blocks until the array's contents are computed; a failed computation's error comes back.
    pub fn block_until_ready(&self) -> Result<()> {
        self.open_slot()?.with_buffer(|b| Ok(b.wait_ready()?))
    }

    /// Reads the array into a caller's slice of exactly `element_count()` values of its type.
    pub fn read_into<T: NativeType>(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.element_count() {
            return Err(Error::InvalidArgument(format!(
                "a {}{:?} array has {} elements; the slice has {}",
                self.dtype(),
                self.dims(),
                self.element_count(),
                dst.len()
            )));
        }
        self.open_slot()?.read_typed(dst)
    }

    /// Reads the array into a new `Vec` of its element type.
    pub fn to_vec<T: NativeType>(&self) -> Result<Vec<T>> {
        if T::TYPE != self.dtype() {
            return Err(Error::InvalidArgument(format!(
                "cannot read a {} array as {}",
                self.dtype(),
                T::TYPE
            )));
        }
        let mut out = zeroed_vec::<T>(self.element_count());
        self.read_into(&mut out)?;
        Ok(out)
    }

    /// Reads the array's dense bytes into a caller's buffer of exactly `byte_size()` bytes.
    pub fn read_bytes_into(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.byte_size() {
            return Err(Error::InvalidArgument(format!(
                "a {}{:?} array is {} bytes; the buffer has {}",
                self.dtype(),
                self.dims(),
                self.byte_size(),
                dst.len()
            )));
        }
        self.open_slot()?.read_bytes(dst)
    }

    /// Reads the array's dense bytes (any dtype, e.g. f16, bf16, complex).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.core.read()
    }

    /// The array's contents read back as a [`HostArray`](crate::HostArray) (element type,
    /// dims, bytes): what [`Device::put_array`] uploads.
    pub fn to_host_array(&self) -> Result<crate::HostArray> {
        Ok(crate::HostArray {
            dtype: self.dtype(),
            dims: self.dims().to_vec(),
            bytes: self.to_bytes()?,
        })
    }

    /// The async form of [`to_bytes`](Self::to_bytes): the read is served by the array's
    /// device actor, in order with the other work sent to that device.
    pub fn to_bytes_async(&self) -> impl Future<Output = Result<Vec<u8>>> + use<> {
        let shared = self.shared();
        let read = (shared.device(self.slot().device)).map(|actor| actor.read(self.core.clone()));
        async move { read?.await }
    }

    /// Copies the array to another device (its default memory space).
    #[track_caller]
    pub fn copy_to_device(&self, device: &Device) -> Result<Array> {
        let shared = self.shared();
        let placement = placement(&shared, device, None)?;
        let state = shared.state();
        let core = state.copy(&self.core, placement, false, state.site())?;
        Ok(Array::new(core))
    }

    /// The async form of [`copy_to_device`](Self::copy_to_device): the copy is served by the
    /// array's device actor, in order with the other work sent to that device.
    #[track_caller]
    pub fn copy_to_device_async(
        &self,
        device: &Device,
    ) -> impl Future<Output = Result<Array>> + use<> {
        let placement = placement(&self.shared(), device, None);
        self.copy_async(placement, false)
    }

    /// Copies the array to another memory space (of its own or another device).
    #[track_caller]
    pub fn copy_to_memory(&self, memory: &MemorySpace) -> Result<Array> {
        let placement = self.memory_placement(memory)?;
        let state = self.shared().state().clone();
        let core = state.copy(&self.core, placement, true, state.site())?;
        Ok(Array::new(core))
    }

    /// The async form of [`copy_to_memory`](Self::copy_to_memory), served by the array's
    /// device actor.
    #[track_caller]
    pub fn copy_to_memory_async(
        &self,
        memory: &MemorySpace,
    ) -> impl Future<Output = Result<Array>> + use<> {
        let placement = self.memory_placement(memory);
        self.copy_async(placement, true)
    }

    /// Where a copy into `memory` lands: that memory space on its (first) device.
    fn memory_placement(&self, memory: &MemorySpace) -> Result<(usize, usize)> {
        let device = (memory.devices().into_iter().next())
            .ok_or_else(|| Error::InvalidArgument(format!("{memory} has no device")))?;
        placement(&self.shared(), &device, Some(memory))
    }

    /// Sends a copy to the array's device actor; the caller's site is taken now.
    #[track_caller]
    fn copy_async(
        &self,
        to: Result<(usize, usize)>,
        to_memory: bool,
    ) -> impl Future<Output = Result<Array>> + use<> {
        let shared = self.shared();
        let copy = to.and_then(|to| {
            let actor = shared.device(self.slot().device)?;
            Ok(actor.copy(self.core.clone(), to, to_memory, shared.state().site()))
        });
        async move { Ok(Array::new(copy?.await?)) }
    }
}

impl PartialEq for Array {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }
}
impl Eq for Array {}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Array({}{:?} on {}, id {})",
            self.dtype(),
            self.dims(),
            self.device(),
            self.id()
        )
    }
}
