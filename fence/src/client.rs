//! Safe owners of a `PJRT_Client` and the devices, memories and topology it hands out. Devices
//! and memories are borrowed from the client, so each wrapper keeps the client alive.

use std::ptr::null_mut;
use std::sync::Arc;

use pjrt_sys as sys;

use super::abi;
use super::call::{args, call};
use super::plugin::Plugin;
use super::plugin_bytes::{plugin_str, take_serialized};
use super::values::{NamedValue, RawNamedValues, read_named_values};
use crate::error::{Error, Result};

struct ClientOwner {
    plugin: Arc<Plugin>,
    raw: *mut sys::PJRT_Client,
    /// The key-value store the plugin's callbacks reach through `user_arg`; dropped after the
    /// client is destroyed (fields drop after `Drop::drop`).
    _kv: Option<crate::kv::StoreHandle>,
}

// SAFETY: a PJRT client is thread-safe by the PJRT contract; we only destroy it in `Drop`, once.
unsafe impl Send for ClientOwner {}
// SAFETY: as above.
unsafe impl Sync for ClientOwner {}

impl Drop for ClientOwner {
    fn drop(&mut self) {
        let mut a = args!(PJRT_Client_Destroy_Args { client: self.raw });
        if let Err(e) = call!(self.plugin, PJRT_Client_Destroy, &mut a) {
            tracing::error!(error = %e, "destroying the PJRT client failed");
        }
    }
}

/// An owned PJRT client. Cloning shares it; the last clone destroys it.
#[derive(Clone)]
pub struct PjrtClient {
    owner: Arc<ClientOwner>,
}

/// What a device says about itself. Plain data, taken once.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDescription {
    /// The id, unique in the client.
    pub id: i32,
    /// The owning process.
    pub process_index: i32,
    /// The kind (`cpu`, a GPU model, a memory kind).
    pub kind: String,
    /// The plugin's debug string.
    pub debug_string: String,
    /// The plugin's display string.
    pub display_string: String,
    /// Plugin-defined attributes.
    pub attributes: Vec<(String, NamedValue)>,
}

/// A device allocator's statistics (`PJRT_Device_MemoryStats`); optional fields the plugin
/// did not set are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceMemoryStats {
    /// Bytes allocated now.
    pub bytes_in_use: i64,
    /// The most bytes ever allocated at once.
    pub peak_bytes_in_use: Option<i64>,
    /// Allocations made.
    pub num_allocs: Option<i64>,
    /// The largest single allocation.
    pub largest_alloc_size: Option<i64>,
    /// The allocator's limit.
    pub bytes_limit: Option<i64>,
    /// Bytes reserved.
    pub bytes_reserved: Option<i64>,
    /// The most bytes ever reserved.
    pub peak_bytes_reserved: Option<i64>,
    /// The largest free block.
    pub largest_free_block_bytes: Option<i64>,
    /// Bytes the allocator holds in its regions (in use or free), where it pools.
    pub pool_bytes: Option<i64>,
}

/// What a memory space says about itself. Plain data, taken once.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryDescription {
    /// The id, unique in the client.
    pub id: i32,
    /// The kind (`cpu`, a GPU model, a memory kind).
    pub kind: String,
    /// The plugin's numeric id for the kind.
    pub kind_id: i32,
    /// The plugin's debug string.
    pub debug_string: String,
    /// The plugin's display string.
    pub display_string: String,
}

/// A device of a client. Compared by identity.
#[derive(Clone)]
pub struct PjrtDevice {
    client: PjrtClient,
    raw: *mut sys::PJRT_Device,
}

/// A memory space of a client. Compared by identity.
#[derive(Clone)]
pub struct PjrtMemory {
    client: PjrtClient,
    raw: *mut sys::PJRT_Memory,
}

// SAFETY: devices and memories are immutable, client-owned PJRT objects whose query functions are
// thread-safe; the wrapper keeps the owning client alive.
unsafe impl Send for PjrtDevice {}
// SAFETY: as above.
unsafe impl Sync for PjrtDevice {}
// SAFETY: as above.
unsafe impl Send for PjrtMemory {}
// SAFETY: as above.
unsafe impl Sync for PjrtMemory {}

impl PartialEq for PjrtDevice {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl Eq for PjrtDevice {}
impl PartialEq for PjrtMemory {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl Eq for PjrtMemory {}

/// Reads a `(ptr, len)` array of plugin-owned pointers.
///
/// # Safety
/// `ptr` must point at `n` pointers (or `n` must be 0).
unsafe fn ptr_list<T>(ptr: *const *mut T, n: usize) -> Vec<*mut T> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

impl PjrtClient {
    /// Creates a client with the given create options. Option types must already be validated:
    /// a wrong type aborts the CPU plugin.
    pub fn create(plugin: Arc<Plugin>, options: &[(String, NamedValue)]) -> Result<Self> {
        Self::create_with_store(plugin, options, None)
    }

    /// `create`, with a key-value store the plugin shares with the other processes of a
    /// distributed client (passed as `kv_get`, `kv_try_get` and `kv_put` callbacks).
    pub fn create_with_store(
        plugin: Arc<Plugin>,
        options: &[(String, NamedValue)],
        store: Option<Arc<dyn crate::kv::KvStore>>,
    ) -> Result<Self> {
        let raw_options = RawNamedValues::new(options);
        let kv: Option<crate::kv::StoreHandle> = store.map(Box::new);
        let user_arg = kv.as_ref().map_or(null_mut(), |b| {
            (&**b as *const Arc<dyn crate::kv::KvStore>) as *mut std::ffi::c_void
        });
        let callbacks = kv.as_ref().map(|_| crate::kv::callbacks());
        let mut a = abi::Client_Create_Args {
            struct_size: size_of::<abi::Client_Create_Args>(),
            extension_start: null_mut(),
            create_options: raw_options.as_ptr(),
            num_options: raw_options.len(),
            kv_get_callback: callbacks.as_ref().and_then(|c| c.get),
            kv_get_user_arg: user_arg,
            kv_put_callback: callbacks.as_ref().and_then(|c| c.put),
            kv_put_user_arg: user_arg,
            client: null_mut(),
            kv_try_get_callback: callbacks.as_ref().map_or(std::ptr::null(), |c| c.try_get),
            kv_try_get_user_arg: user_arg,
        };
        let f = abi::widen(plugin.api().base.PJRT_Client_Create);
        // SAFETY: `PJRT_Client_Create` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_Client_Create", f, &mut a) }?;
        Ok(PjrtClient {
            owner: Arc::new(ClientOwner {
                plugin,
                raw: a.client,
                _kv: kv,
            }),
        })
    }

    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.owner.plugin
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Client {
        self.owner.raw
    }

    /// Whether two wrappers own the same PJRT client.
    pub fn same_as(&self, other: &PjrtClient) -> bool {
        Arc::ptr_eq(&self.owner, &other.owner)
    }

    pub fn platform_name(&self) -> Result<String> {
        let mut a = args!(PJRT_Client_PlatformName_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_PlatformName, &mut a)?;
        // SAFETY: the plugin returned a string of this size owned by the client.
        Ok(unsafe { plugin_str(a.platform_name, a.platform_name_size) })
    }

    pub fn platform_version(&self) -> Result<String> {
        let mut a = args!(PJRT_Client_PlatformVersion_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_PlatformVersion, &mut a)?;
        // SAFETY: the plugin returned a string of this size owned by the client.
        Ok(unsafe { plugin_str(a.platform_version, a.platform_version_size) })
    }

    pub fn process_index(&self) -> Result<i32> {
        let mut a = args!(PJRT_Client_ProcessIndex_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_ProcessIndex, &mut a)?;
        Ok(a.process_index)
    }

    fn wrap_devices(&self, raw: Vec<*mut sys::PJRT_Device>) -> Vec<PjrtDevice> {
        raw.into_iter()
            .map(|raw| PjrtDevice {
                client: self.clone(),
                raw,
            })
            .collect()
    }

    /// All devices, addressable or not.
    pub fn devices(&self) -> Result<Vec<PjrtDevice>> {
        let mut a = args!(PJRT_Client_Devices_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_Devices, &mut a)?;
        // SAFETY: the plugin returned `num_devices` client-owned device pointers.
        Ok(self.wrap_devices(unsafe { ptr_list(a.devices, a.num_devices) }))
    }

    /// The devices this process can address.
    pub fn addressable_devices(&self) -> Result<Vec<PjrtDevice>> {
        let mut a = args!(PJRT_Client_AddressableDevices_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_AddressableDevices, &mut a)?;
        // SAFETY: the plugin returned `num_addressable_devices` client-owned device pointers.
        Ok(
            self.wrap_devices(unsafe {
                ptr_list(a.addressable_devices, a.num_addressable_devices)
            }),
        )
    }

    pub fn lookup_addressable_device(&self, local_hardware_id: i32) -> Result<PjrtDevice> {
        let mut a = args!(PJRT_Client_LookupAddressableDevice_Args {
            client: self.raw(),
            local_hardware_id: local_hardware_id,
        });
        call!(self.plugin(), PJRT_Client_LookupAddressableDevice, &mut a)?;
        Ok(PjrtDevice {
            client: self.clone(),
            raw: a.addressable_device,
        })
    }

    /// Every memory space this process can address.
    pub fn addressable_memories(&self) -> Result<Vec<PjrtMemory>> {
        let mut a = args!(PJRT_Client_AddressableMemories_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_AddressableMemories, &mut a)?;
        // SAFETY: the plugin returned `num_addressable_memories` client-owned memory pointers.
        let raw = unsafe { ptr_list(a.addressable_memories, a.num_addressable_memories) };
        Ok(raw
            .into_iter()
            .map(|raw| PjrtMemory {
                client: self.clone(),
                raw,
            })
            .collect())
    }

    /// The client's topology; borrowed from the client, so it keeps the client alive.
    pub fn topology(&self) -> Result<PjrtTopology> {
        let mut a = args!(PJRT_Client_TopologyDescription_Args { client: self.raw() });
        call!(self.plugin(), PJRT_Client_TopologyDescription, &mut a)?;
        Ok(PjrtTopology {
            plugin: self.plugin().clone(),
            raw: a.topology,
            owner: TopologyOwner::Client(self.clone()),
        })
    }
}

/// Reads a device description's plain data.
fn describe(plugin: &Plugin, d: *mut sys::PJRT_DeviceDescription) -> Result<DeviceDescription> {
    let mut id = args!(PJRT_DeviceDescription_Id_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_Id, &mut id)?;
    let mut pi = args!(PJRT_DeviceDescription_ProcessIndex_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_ProcessIndex, &mut pi)?;
    let mut kind = args!(PJRT_DeviceDescription_Kind_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_Kind, &mut kind)?;
    let mut dbg = args!(PJRT_DeviceDescription_DebugString_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_DebugString, &mut dbg)?;
    let mut disp = args!(PJRT_DeviceDescription_ToString_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_ToString, &mut disp)?;
    let mut attrs = args!(PJRT_DeviceDescription_Attributes_Args {
        device_description: d
    });
    call!(plugin, PJRT_DeviceDescription_Attributes, &mut attrs)?;
    // SAFETY: every string and list above is owned by the description, valid for its size.
    unsafe {
        Ok(DeviceDescription {
            id: id.id,
            process_index: pi.process_index,
            kind: plugin_str(kind.device_kind, kind.device_kind_size),
            debug_string: plugin_str(dbg.debug_string, dbg.debug_string_size),
            display_string: plugin_str(disp.to_string, disp.to_string_size),
            attributes: read_named_values(attrs.attributes, attrs.num_attributes),
        })
    }
}

impl PjrtDevice {
    pub fn client(&self) -> &PjrtClient {
        &self.client
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Device {
        self.raw
    }

    pub fn description(&self) -> Result<DeviceDescription> {
        let plugin = self.client.plugin();
        let mut a = args!(PJRT_Device_GetDescription_Args { device: self.raw });
        call!(plugin, PJRT_Device_GetDescription, &mut a)?;
        describe(plugin, a.device_description)
    }

    pub fn is_addressable(&self) -> Result<bool> {
        let mut a = args!(PJRT_Device_IsAddressable_Args { device: self.raw });
        call!(self.client.plugin(), PJRT_Device_IsAddressable, &mut a)?;
        Ok(a.is_addressable)
    }

    pub fn local_hardware_id(&self) -> Result<i32> {
        let mut a = args!(PJRT_Device_LocalHardwareId_Args { device: self.raw });
        call!(self.client.plugin(), PJRT_Device_LocalHardwareId, &mut a)?;
        Ok(a.local_hardware_id)
    }

    pub fn memories(&self) -> Result<Vec<PjrtMemory>> {
        let mut a = args!(PJRT_Device_AddressableMemories_Args { device: self.raw });
        call!(
            self.client.plugin(),
            PJRT_Device_AddressableMemories,
            &mut a
        )?;
        // SAFETY: the plugin returned `num_memories` client-owned memory pointers.
        let raw = unsafe { ptr_list(a.memories, a.num_memories) };
        Ok(raw
            .into_iter()
            .map(|raw| PjrtMemory {
                client: self.client.clone(),
                raw,
            })
            .collect())
    }

    /// Allocator statistics, or `None` where the plugin does not keep them (the CPU plugin).
    pub fn memory_stats(&self) -> Result<Option<DeviceMemoryStats>> {
        let mut a = args!(PJRT_Device_MemoryStats_Args { device: self.raw });
        match call!(self.client.plugin(), PJRT_Device_MemoryStats, &mut a) {
            Ok(()) => {}
            Err(e) if e.pjrt_code() == Some(crate::PjrtCode::Unimplemented) => return Ok(None),
            Err(Error::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        let opt = |v: i64, set: bool| set.then_some(v);
        Ok(Some(DeviceMemoryStats {
            bytes_in_use: a.bytes_in_use,
            peak_bytes_in_use: opt(a.peak_bytes_in_use, a.peak_bytes_in_use_is_set),
            num_allocs: opt(a.num_allocs, a.num_allocs_is_set),
            largest_alloc_size: opt(a.largest_alloc_size, a.largest_alloc_size_is_set),
            bytes_limit: opt(a.bytes_limit, a.bytes_limit_is_set),
            bytes_reserved: opt(a.bytes_reserved, a.bytes_reserved_is_set),
            peak_bytes_reserved: opt(a.peak_bytes_reserved, a.peak_bytes_reserved_is_set),
            largest_free_block_bytes: opt(
                a.largest_free_block_bytes,
                a.largest_free_block_bytes_is_set,
            ),
            pool_bytes: opt(a.pool_bytes, a.pool_bytes_is_set),
        }))
    }

    pub fn default_memory(&self) -> Result<PjrtMemory> {
        let mut a = args!(PJRT_Device_DefaultMemory_Args { device: self.raw });
        call!(self.client.plugin(), PJRT_Device_DefaultMemory, &mut a)?;
        Ok(PjrtMemory {
            client: self.client.clone(),
            raw: a.memory,
        })
    }
}

impl PjrtMemory {
    pub(crate) fn raw(&self) -> *mut sys::PJRT_Memory {
        self.raw
    }

    pub fn description(&self) -> Result<MemoryDescription> {
        let plugin = self.client.plugin();
        let m = self.raw;
        let mut id = args!(PJRT_Memory_Id_Args { memory: m });
        call!(plugin, PJRT_Memory_Id, &mut id)?;
        let mut kind = args!(PJRT_Memory_Kind_Args { memory: m });
        call!(plugin, PJRT_Memory_Kind, &mut kind)?;
        let mut kind_id = args!(PJRT_Memory_Kind_Id_Args { memory: m });
        call!(plugin, PJRT_Memory_Kind_Id, &mut kind_id)?;
        let mut dbg = args!(PJRT_Memory_DebugString_Args { memory: m });
        call!(plugin, PJRT_Memory_DebugString, &mut dbg)?;
        let mut disp = args!(PJRT_Memory_ToString_Args { memory: m });
        call!(plugin, PJRT_Memory_ToString, &mut disp)?;
        // SAFETY: the strings are owned by the memory, valid for the sizes returned.
        unsafe {
            Ok(MemoryDescription {
                id: id.id,
                kind: plugin_str(kind.kind, kind.kind_size),
                kind_id: kind_id.kind_id,
                debug_string: plugin_str(dbg.debug_string, dbg.debug_string_size),
                display_string: plugin_str(disp.to_string, disp.to_string_size),
            })
        }
    }

    /// The devices that can address this memory.
    pub fn devices(&self) -> Result<Vec<PjrtDevice>> {
        let mut a = args!(PJRT_Memory_AddressableByDevices_Args { memory: self.raw });
        call!(
            self.client.plugin(),
            PJRT_Memory_AddressableByDevices,
            &mut a
        )?;
        // SAFETY: the plugin returned `num_devices` client-owned device pointers.
        Ok(self
            .client
            .wrap_devices(unsafe { ptr_list(a.devices, a.num_devices) }))
    }
}

enum TopologyOwner {
    /// Borrowed from a client, which must outlive it.
    Client(#[allow(dead_code)] PjrtClient),
    /// Created by deserialization; destroyed with the wrapper.
    Owned,
}

/// A topology description: the devices a compile could target, serializable to bytes.
pub struct PjrtTopology {
    plugin: Arc<Plugin>,
    raw: *mut sys::PJRT_TopologyDescription,
    owner: TopologyOwner,
}

// SAFETY: a topology description is immutable and its query functions are thread-safe; a
// borrowed one keeps its client alive, an owned one is destroyed once in `Drop`.
unsafe impl Send for PjrtTopology {}
// SAFETY: as above.
unsafe impl Sync for PjrtTopology {}

impl Drop for PjrtTopology {
    fn drop(&mut self) {
        if let TopologyOwner::Owned = self.owner {
            let mut a = args!(PJRT_TopologyDescription_Destroy_Args { topology: self.raw });
            let _ = call!(self.plugin, PJRT_TopologyDescription_Destroy, &mut a);
        }
    }
}

impl PjrtTopology {
    /// Rebuilds a topology from `serialize`'s bytes (a PJRT 0.81 function).
    pub fn deserialize(plugin: Arc<Plugin>, bytes: &[u8]) -> Result<Self> {
        let mut a = abi::TopologyDescription_Deserialize_Args {
            struct_size: size_of::<abi::TopologyDescription_Deserialize_Args>(),
            extension_start: null_mut(),
            serialized_topology: bytes.as_ptr().cast(),
            serialized_topology_size: bytes.len(),
            topology: null_mut(),
        };
        let f = if plugin.has_slot(std::mem::offset_of!(
            abi::Api,
            PJRT_TopologyDescription_Deserialize
        )) {
            plugin.api().PJRT_TopologyDescription_Deserialize
        } else {
            None
        };
        // SAFETY: `PJRT_TopologyDescription_Deserialize` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_TopologyDescription_Deserialize", f, &mut a) }?;
        Ok(PjrtTopology {
            plugin,
            raw: a.topology,
            owner: TopologyOwner::Owned,
        })
    }

    pub fn platform_name(&self) -> Result<String> {
        let mut a = args!(PJRT_TopologyDescription_PlatformName_Args { topology: self.raw });
        call!(self.plugin, PJRT_TopologyDescription_PlatformName, &mut a)?;
        // SAFETY: a string of this size owned by the topology.
        Ok(unsafe { plugin_str(a.platform_name, a.platform_name_size) })
    }

    pub fn platform_version(&self) -> Result<String> {
        let mut a = args!(PJRT_TopologyDescription_PlatformVersion_Args { topology: self.raw });
        call!(
            self.plugin,
            PJRT_TopologyDescription_PlatformVersion,
            &mut a
        )?;
        // SAFETY: a string of this size owned by the topology.
        Ok(unsafe { plugin_str(a.platform_version, a.platform_version_size) })
    }

    pub(crate) fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_TopologyDescription {
        self.raw
    }

    /// Wraps a topology the plugin created for us; destroyed with the wrapper.
    pub(crate) fn owned(plugin: Arc<Plugin>, raw: *mut sys::PJRT_TopologyDescription) -> Self {
        PjrtTopology {
            plugin,
            raw,
            owner: TopologyOwner::Owned,
        }
    }

    pub(crate) fn raw_descriptions(&self) -> Result<Vec<*mut sys::PJRT_DeviceDescription>> {
        let mut a =
            args!(PJRT_TopologyDescription_GetDeviceDescriptions_Args { topology: self.raw });
        call!(
            self.plugin,
            PJRT_TopologyDescription_GetDeviceDescriptions,
            &mut a
        )?;
        // SAFETY: `num_descriptions` topology-owned description pointers.
        Ok(unsafe { ptr_list(a.descriptions, a.num_descriptions) })
    }

    pub fn device_descriptions(&self) -> Result<Vec<DeviceDescription>> {
        self.raw_descriptions()?
            .into_iter()
            .map(|d| describe(&self.plugin, d))
            .collect()
    }

    pub fn attributes(&self) -> Result<Vec<(String, NamedValue)>> {
        let mut a = args!(PJRT_TopologyDescription_Attributes_Args { topology: self.raw });
        call!(self.plugin, PJRT_TopologyDescription_Attributes, &mut a)?;
        // SAFETY: `num_attributes` topology-owned values.
        Ok(unsafe { read_named_values(a.attributes, a.num_attributes) })
    }

    pub fn serialize(&self) -> Result<Vec<u8>> {
        let mut a = args!(PJRT_TopologyDescription_Serialize_Args { topology: self.raw });
        call!(self.plugin, PJRT_TopologyDescription_Serialize, &mut a)?;
        // SAFETY: the plugin's bytes live until its deleter runs.
        Ok(unsafe {
            take_serialized(
                a.serialized_bytes,
                a.serialized_bytes_size,
                a.serialized_topology,
                a.serialized_topology_deleter,
            )
        })
    }
}
