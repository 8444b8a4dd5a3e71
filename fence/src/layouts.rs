//! Memory layouts: the array's own, and the plugin's default for a type through the Layouts
//! extension.

#![allow(non_camel_case_types)]

use std::ffi::c_void;
use std::os::raw::c_char;
use std::ptr::null_mut;

use pjrt_sys as sys;
use prost::Message;

use super::buffer::{PjrtBuffer, to_raw_type};
use super::call::{args, call};
use super::client::PjrtClient;
use super::plugin_bytes::take_serialized;
use crate::dtype::ElementType;
use crate::error::{Error, Result};

const PJRT_EXTENSION_LAYOUTS: u32 = 4;

/// A dense layout: dimension order from minor to major, and tiles (empty when untiled).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// Dimension numbers, most minor (fastest varying) first.
    pub minor_to_major: Vec<i64>,
    /// Tile shapes, outermost first; empty for an untiled layout.
    pub tiles: Vec<Vec<i64>>,
}

type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error>;

#[repr(C)]
struct LayoutsExtension {
    struct_size: usize,
    ty: u32,
    next: *const c_void,
    destroy: Fn<DestroyArgs>,
    serialize: Fn<SerializeArgs>,
    client_default: Fn<ClientDefaultArgs>,
}

#[repr(C)]
struct DestroyArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    layout: *mut c_void,
}

#[repr(C)]
struct SerializeArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    layout: *mut c_void,
    serialized_bytes: *const c_char,
    serialized_bytes_size: usize,
    serialized_layout: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
}

#[repr(C)]
struct ClientDefaultArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    client: *mut sys::PJRT_Client,
    ty: sys::PJRT_Buffer_Type,
    dims: *const i64,
    num_dims: usize,
    layout: *mut c_void,
}
const _: () = assert!(size_of::<ClientDefaultArgs>() == 56);

fn unsupported(what: &'static str) -> Error {
    Error::Unsupported {
        what,
        hint: String::new(),
    }
}

impl PjrtClient {
    fn layouts_extension(&self) -> Option<&'static LayoutsExtension> {
        let mut ext = self.plugin().api().base.extension_start as *const sys::PJRT_Extension_Base;
        // SAFETY: the extension list is plugin-owned and static; a Layouts entry is checked for
        // a table long enough to hold the slots we read.
        unsafe {
            while !ext.is_null() {
                if (*ext).type_ == PJRT_EXTENSION_LAYOUTS
                    && (*ext).struct_size
                        >= std::mem::offset_of!(LayoutsExtension, client_default) + 8
                {
                    return Some(&*(ext as *const LayoutsExtension));
                }
                ext = (*ext).next;
            }
        }
        None
    }

    /// The plugin's default layout for `dtype` × `dims` (the Layouts extension).
    pub fn default_layout(&self, dtype: ElementType, dims: &[i64]) -> Result<Layout> {
        let ext = self
            .layouts_extension()
            .ok_or_else(|| unsupported("default layouts (the Layouts extension)"))?;
        let plugin = self.plugin();
        let mut a = ClientDefaultArgs {
            struct_size: size_of::<ClientDefaultArgs>(),
            extension_start: null_mut(),
            client: self.raw(),
            ty: to_raw_type(dtype),
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            layout: null_mut(),
        };
        // SAFETY: `PJRT_Layouts_PJRT_Client_GetDefaultLayout` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe {
            plugin.call(
                "PJRT_Layouts_PJRT_Client_GetDefaultLayout",
                ext.client_default,
                &mut a,
            )
        }?;
        let mut s = SerializeArgs {
            struct_size: size_of::<SerializeArgs>(),
            extension_start: null_mut(),
            layout: a.layout,
            serialized_bytes: std::ptr::null(),
            serialized_bytes_size: 0,
            serialized_layout: null_mut(),
            deleter: None,
        };
        // SAFETY: `PJRT_Layouts_MemoryLayout_Serialize` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        let serialized =
            unsafe { plugin.call("PJRT_Layouts_MemoryLayout_Serialize", ext.serialize, &mut s) };
        // SAFETY: the serialized bytes live until their deleter runs (once, after copying); the
        // layout is destroyed once, after use.
        let bytes = unsafe {
            let bytes = take_serialized(
                s.serialized_bytes,
                s.serialized_bytes_size,
                s.serialized_layout,
                s.deleter,
            );
            let mut destroy = DestroyArgs {
                struct_size: size_of::<DestroyArgs>(),
                extension_start: null_mut(),
                layout: a.layout,
            };
            let _ = plugin.call(
                "PJRT_Layouts_MemoryLayout_Destroy",
                ext.destroy,
                &mut destroy,
            );
            bytes
        };
        serialized?;
        parse_layout(&bytes)
    }
}

/// Reads a serialized layout: XLA's text form (`{1,0}`, `{1,0:T(8,128)(2,1)}`), which the CPU
/// plugin writes, or a `LayoutProto`.
fn parse_layout(bytes: &[u8]) -> Result<Layout> {
    let bad = |why: String| Error::Unsupported {
        what: "reading the plugin's serialized layout",
        hint: format!(": {why}"),
    };
    let numbers = |s: &str| -> Result<Vec<i64>> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| {
                x.parse::<i64>()
                    .map_err(|_| bad(format!("`{x}` is not a dimension")))
            })
            .collect()
    };
    if let Some(text) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|t| t.trim().strip_prefix('{'))
    {
        let text = text
            .strip_suffix('}')
            .ok_or_else(|| bad(format!("unterminated layout `{text}`")))?;
        let (order, rest) = text.split_once(':').unwrap_or((text, ""));
        let mut tiles = Vec::new();
        if let Some(t) = rest.find("T(").map(|i| &rest[i + 1..]) {
            // Tiles are consecutive `(...)` groups after `T`.
            let mut t = t;
            while let Some(body) = t.strip_prefix('(') {
                let end = body
                    .find(')')
                    .ok_or_else(|| bad("unterminated tile".into()))?;
                tiles.push(numbers(&body[..end])?);
                t = &body[end + 1..];
            }
        }
        return Ok(Layout {
            minor_to_major: numbers(order)?,
            tiles,
        });
    }
    let proto = pjrt_actors_formats::protos::xla::LayoutProto::decode(bytes)
        .map_err(|e| bad(e.to_string()))?;
    Ok(Layout {
        minor_to_major: proto.minor_to_major,
        tiles: proto.tiles.into_iter().map(|t| t.dimensions).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_layouts() {
        assert_eq!(parse_layout(b"{1,0}").unwrap().minor_to_major, vec![1, 0]);
        assert_eq!(parse_layout(b"{}").unwrap(), Layout::default());
        let tiled = parse_layout(b"{1,0:T(8,128)(2,1)S(1)}").unwrap();
        assert_eq!(tiled.tiles, vec![vec![8, 128], vec![2, 1]]);
        assert!(parse_layout(b"{1,x}").is_err());
    }
}

impl PjrtBuffer {
    /// The buffer's layout on its device (`PJRT_Buffer_GetMemoryLayout`).
    pub fn layout(&self) -> Result<Layout> {
        let mut a = args!(PJRT_Buffer_GetMemoryLayout_Args { buffer: self.raw() });
        call!(self.client().plugin(), PJRT_Buffer_GetMemoryLayout, &mut a)?;
        if a.layout.type_ != sys::PJRT_Buffer_MemoryLayout_Type_PJRT_Buffer_MemoryLayout_Type_Tiled
        {
            return Err(unsupported("strided buffer layouts"));
        }
        // SAFETY: a tiled layout (checked above): the `tiled` member is active and its arrays
        // are buffer-owned, valid for the sizes given.
        unsafe {
            let t = a.layout.__bindgen_anon_1.tiled;
            let list = |p: *const i64, n: usize| {
                if p.is_null() || n == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(p, n).to_vec()
                }
            };
            let minor_to_major = list(t.minor_to_major, t.minor_to_major_size);
            let sizes = if t.num_tiles == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(t.tile_dim_sizes, t.num_tiles).to_vec()
            };
            let all = list(t.tile_dims, sizes.iter().sum());
            let mut tiles = Vec::with_capacity(sizes.len());
            let mut at = 0;
            for n in sizes {
                tiles.push(all[at..at + n].to_vec());
                at += n;
            }
            Ok(Layout {
                minor_to_major,
                tiles,
            })
        }
    }
}

// --- the memory descriptions extension ------------------------------------------------------

const PJRT_EXTENSION_MEMORY_DESCRIPTIONS: u32 = 6;

#[repr(C)]
struct MemoryDescriptionsExtension {
    struct_size: usize,
    ty: u32,
    next: *const c_void,
    descriptions: Fn<DescriptionsArgs>,
    kind: Fn<KindArgs>,
}

#[repr(C)]
struct DescriptionsArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    device_description: *mut sys::PJRT_DeviceDescription,
    memory_descriptions: *const *const c_void,
    num_memory_descriptions: usize,
    default_memory_index: isize,
}

#[repr(C)]
struct KindArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    memory_description: *const c_void,
    kind: *const c_char,
    kind_size: usize,
    kind_id: i32,
}

/// A kind of memory a device has, from the memory descriptions extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryKind {
    /// The kind's name (`device`, `pinned_host`, ...).
    pub kind: String,
    /// The plugin's numeric id for the kind.
    pub kind_id: i32,
}

impl super::client::PjrtDevice {
    /// The memory kinds the device supports and the index of its default, from the memory
    /// descriptions extension.
    pub fn memory_kinds(&self) -> Result<(Vec<MemoryKind>, Option<usize>)> {
        let plugin = self.client().plugin();
        let mut d = args!(PJRT_Device_GetDescription_Args { device: self.raw() });
        call!(plugin, PJRT_Device_GetDescription, &mut d)?;
        memory_kinds_of(plugin, d.device_description)
    }
}

impl super::client::PjrtTopology {
    /// The memory kinds of each device description of the topology (for ahead-of-time work).
    pub fn memory_kinds(&self) -> Result<Vec<(Vec<MemoryKind>, Option<usize>)>> {
        self.raw_descriptions()?
            .into_iter()
            .map(|d| memory_kinds_of(self.plugin(), d))
            .collect()
    }
}

fn memory_kinds_of(
    plugin: &super::plugin::Plugin,
    device_description: *mut sys::PJRT_DeviceDescription,
) -> Result<(Vec<MemoryKind>, Option<usize>)> {
    {
        let mut ext = plugin.api().base.extension_start as *const sys::PJRT_Extension_Base;
        // SAFETY: a plugin-owned static list; the entry's size is checked before use.
        let table = unsafe {
            loop {
                if ext.is_null() {
                    return Err(unsupported(
                        "memory descriptions (the MemoryDescriptions extension)",
                    ));
                }
                if (*ext).type_ == PJRT_EXTENSION_MEMORY_DESCRIPTIONS
                    && (*ext).struct_size >= size_of::<MemoryDescriptionsExtension>()
                {
                    break &*(ext as *const MemoryDescriptionsExtension);
                }
                ext = (*ext).next;
            }
        };
        let mut a = DescriptionsArgs {
            struct_size: size_of::<DescriptionsArgs>(),
            extension_start: null_mut(),
            device_description,
            memory_descriptions: std::ptr::null(),
            num_memory_descriptions: 0,
            default_memory_index: -1,
        };
        // SAFETY: `PJRT_DeviceDescription_MemoryDescriptions` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe {
            plugin.call(
                "PJRT_DeviceDescription_MemoryDescriptions",
                table.descriptions,
                &mut a,
            )
        }?;
        let mut kinds = Vec::with_capacity(a.num_memory_descriptions);
        for i in 0..a.num_memory_descriptions {
            // SAFETY: `num_memory_descriptions` description pointers owned by the device
            // description; each kind string is valid for its size; `PJRT_MemoryDescription_Kind`
            // gets an args struct of its own layout, filled in here.
            unsafe {
                let mut k = KindArgs {
                    struct_size: size_of::<KindArgs>(),
                    extension_start: null_mut(),
                    memory_description: *a.memory_descriptions.add(i),
                    kind: std::ptr::null(),
                    kind_size: 0,
                    kind_id: 0,
                };
                plugin.call("PJRT_MemoryDescription_Kind", table.kind, &mut k)?;
                kinds.push(MemoryKind {
                    kind: super::plugin_bytes::plugin_str(k.kind, k.kind_size),
                    kind_id: k.kind_id,
                });
            }
        }
        let default = usize::try_from(a.default_memory_index)
            .ok()
            .filter(|&i| i < kinds.len());
        Ok((kinds, default))
    }
}
