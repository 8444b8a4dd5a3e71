//! Typed views of host memory: which Rust types are an array element, and their bytes.

use crate::dtype::ElementType;

/// Plain Rust element types that can be viewed as an array's bytes.
///
/// # Safety
/// Implementors must be plain data with no padding and every bit pattern of `Self` valid for
/// reading back from the plugin (for `bool`, the plugin only writes 0 or 1).
pub unsafe trait NativeType: Copy + Send + Sync + 'static {
    const TYPE: ElementType;
}

macro_rules! native {
    ($($t:ty => $e:ident),*) => {$(
        // SAFETY: a primitive with no padding; XLA's layout of this type is the same.
        unsafe impl NativeType for $t { const TYPE: ElementType = ElementType::$e; }
    )*};
}
native!(bool => Pred, i8 => S8, i16 => S16, i32 => S32, i64 => S64, u8 => U8, u16 => U16,
        u32 => U32, u64 => U64, f32 => F32, f64 => F64);

/// Views a slice of native values as bytes.
pub fn as_bytes<T: NativeType>(values: &[T]) -> &[u8] {
    // SAFETY: `NativeType` types are plain data without padding; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

/// Views a mutable slice of native values as bytes (for reading back into it).
pub(crate) fn as_bytes_mut<T: NativeType>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: as above; the plugin writes only valid values of the array's type into it.
    unsafe {
        std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), std::mem::size_of_val(values))
    }
}

/// Reads a buffer holding `dtype` × `rank` dims into a typed slice of exactly its size.
pub fn read_typed<T: NativeType>(
    buffer: &super::PjrtBuffer,
    dtype: ElementType,
    rank: usize,
    dst: &mut [T],
) -> crate::Result<()> {
    if T::TYPE != dtype {
        return Err(crate::Error::InvalidArgument(format!(
            "cannot read a {dtype} array into a slice of {}",
            T::TYPE
        )));
    }
    buffer.read_into(as_bytes_mut(dst), rank)
}

/// Copies host bytes holding values of `T` (a host copy of an array) into a typed slice of
/// exactly their size. Booleans are checked to be 0 or 1, the only patterns `bool` allows.
pub fn copy_typed<T: NativeType>(bytes: &[u8], dst: &mut [T]) -> crate::Result<()> {
    if bytes.len() != std::mem::size_of_val(dst) {
        return Err(crate::Error::InvalidArgument(format!(
            "{} bytes cannot fill {} values of {}",
            bytes.len(),
            dst.len(),
            T::TYPE
        )));
    }
    if T::TYPE == ElementType::Pred && bytes.iter().any(|&b| b > 1) {
        return Err(crate::Error::InvalidArgument(
            "a boolean array holds a byte other than 0 or 1".into(),
        ));
    }
    as_bytes_mut(dst).copy_from_slice(bytes);
    Ok(())
}

/// A vector of `n` zero values (`false`, `0`, `0.0`), allocated zeroed in one step.
pub fn zeroed_vec<T: NativeType>(n: usize) -> Vec<T> {
    // SAFETY: every NativeType has a valid all-zero bit pattern.
    (0..n).map(|_| unsafe { std::mem::zeroed() }).collect()
}

/// Host bytes aligned for any `NativeType` (8 bytes), for callback data copied off the
/// plugin's buffers.
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the words hold at least `len` initialised bytes; u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
}

/// One cache line, the alignment the CPU plugin needs to alias host memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The memory `SharedBytes` share, and what must happen before it is freed.
struct LineStore {
    lines: Box<[Line]>,
    /// Runs once, when the last holder goes, before the lines are freed (a DMA mapping's
    /// unmap). `false` means the memory must not be freed, and it is leaked instead.
    release: Option<Release>,
}

type Release = Box<dyn FnOnce(&[u8]) -> bool + Send + Sync>;

impl LineStore {
    fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: the lines are `len.div_ceil(64)` contiguous 64-byte arrays of initialised
        // bytes, so their first `len` bytes are a valid `[u8]`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), len) }
    }
}

impl Drop for LineStore {
    fn drop(&mut self) {
        let len = self.lines.len() * 64;
        if let Some(release) = self.release.take()
            && !release(self.bytes(len))
        {
            std::mem::forget(std::mem::take(&mut self.lines));
        }
    }
}

/// Shared bytes aligned to 64, for zero-copy uploads: the CPU plugin aliases host memory only
/// at that alignment (an `Arc<[u8]>`'s bytes start 16 bytes into its allocation and are copied
/// instead). Cheap to clone; the upload keeps a clone as long as the array. Immutable while
/// shared; the one holder may write (`get_mut`), e.g. to read an array back into DMA-mapped
/// staging memory.
#[derive(Clone)]
pub struct SharedBytes {
    store: std::sync::Arc<LineStore>,
    len: usize,
}

impl SharedBytes {
    /// A 64-byte-aligned copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.get_mut()
            .expect("new, so unshared")
            .copy_from_slice(bytes);
        b
    }

    /// `len` zero bytes, 64-byte-aligned.
    pub fn zeroed(len: usize) -> Self {
        SharedBytes {
            store: std::sync::Arc::new(LineStore {
                lines: vec![Line([0; 64]); len.div_ceil(64)].into(),
                release: None,
            }),
            len,
        }
    }

    /// How many handles share these bytes (arrays that alias them hold one each).
    pub fn holders(&self) -> usize {
        std::sync::Arc::strong_count(&self.store)
    }

    /// The bytes to write, where this is their only holder (`None` while shared).
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        let len = self.len;
        let store = std::sync::Arc::get_mut(&mut self.store)?;
        // SAFETY: as in `LineStore::bytes`, and we hold the only reference to the store.
        Some(unsafe { std::slice::from_raw_parts_mut(store.lines.as_mut_ptr().cast::<u8>(), len) })
    }

    /// Sets what runs when the last holder goes, before the memory is freed (see `LineStore`);
    /// `None` where shared or already set.
    pub(crate) fn on_release(mut self, release: Release) -> Result<Self, Self> {
        match std::sync::Arc::get_mut(&mut self.store) {
            Some(store) if store.release.is_none() => {
                store.release = Some(release);
                Ok(self)
            }
            _ => Err(self),
        }
    }

    /// Runs the release now, where this is the only holder; `None` where shared or unset.
    pub(crate) fn release_now(&mut self) -> Option<bool> {
        let len = self.store.lines.len() * 64;
        let store = std::sync::Arc::get_mut(&mut self.store)?;
        let release = store.release.take()?;
        Some(release(store.bytes(len)))
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.store.bytes(self.len)
    }
}

impl From<&[u8]> for SharedBytes {
    fn from(bytes: &[u8]) -> Self {
        Self::copy_from(bytes)
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

#[cfg(test)]
mod shared_bytes_tests {
    use super::SharedBytes;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The release hook (a DMA mapping's unmap) runs once, when the last holder goes, and
    /// `release_now` runs it early only for the sole holder.
    #[test]
    fn the_release_hook_runs_once_when_the_last_holder_goes() {
        let runs = Arc::new(AtomicUsize::new(0));
        let hook = |runs: &Arc<AtomicUsize>| {
            let runs = runs.clone();
            Box::new(move |bytes: &[u8]| {
                assert_eq!(bytes.as_ptr() as usize % 64, 0);
                runs.fetch_add(1, Ordering::SeqCst);
                true
            })
        };
        let mut bytes = SharedBytes::zeroed(100);
        bytes.get_mut().unwrap()[99] = 7;
        let bytes = bytes.on_release(hook(&runs)).ok().unwrap();
        let mut alias = bytes.clone();
        assert!(alias.get_mut().is_none(), "shared bytes are immutable");
        assert!(alias.release_now().is_none(), "not while shared");
        assert!(bytes.clone().on_release(hook(&runs)).is_err());
        drop(bytes);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        assert_eq!(alias[99], 7);
        drop(alias);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Released early: not again at drop.
        let mut early = SharedBytes::zeroed(8).on_release(hook(&runs)).ok().unwrap();
        assert_eq!(early.release_now(), Some(true));
        drop(early);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
