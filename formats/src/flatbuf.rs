//! A bounds-checked reader of the FlatBuffers wire format, for artifacts from outside (JAX's
//! serialized `Exported`): tables through their vtables, scalars, strings, byte and scalar
//! vectors, vectors of tables. Every offset is checked before it is followed, so truncated or
//! garbled bytes read as `None`, never as a panic or an out-of-bounds read. Written here,
//! without `unsafe`, rather than through the `flatbuffers` crate, whose accessors are unsafe
//! and need generated code; the core forbids neither but needs neither.

/// A table: its position in the buffer and its vtable's.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    buf: &'a [u8],
    pos: usize,
    vtable: usize,
    vtable_len: usize,
}

/// A vector: where its elements start and how many there are.
#[derive(Clone, Copy)]
pub struct Vector<'a> {
    buf: &'a [u8],
    start: usize,
    len: usize,
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        buf.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// Follows the unsigned offset stored at `at` (offsets are relative to where they are stored).
fn follow(buf: &[u8], at: usize) -> Option<usize> {
    at.checked_add(u32_at(buf, at)? as usize)
        .filter(|&p| p < buf.len())
}

impl<'a> Table<'a> {
    /// The root table of a finished buffer.
    pub fn root(buf: &'a [u8]) -> Option<Table<'a>> {
        Table::at(buf, follow(buf, 0)?)
    }

    fn at(buf: &'a [u8], pos: usize) -> Option<Table<'a>> {
        // The table starts with a signed offset back (or forward) to its vtable.
        let back = i32::from_le_bytes(buf.get(pos..pos.checked_add(4)?)?.try_into().ok()?);
        let vtable = (pos as i64).checked_sub(back as i64)?;
        let vtable = usize::try_from(vtable).ok()?;
        let vtable_len = u16_at(buf, vtable)? as usize;
        if vtable_len < 4 || vtable.checked_add(vtable_len)? > buf.len() {
            return None;
        }
        Some(Table {
            buf,
            pos,
            vtable,
            vtable_len,
        })
    }

    /// Where field `slot` (its vtable offset: 4, 6, 8, ...) lies, if present.
    fn field(&self, slot: usize) -> Option<usize> {
        if slot + 2 > self.vtable_len {
            return None;
        }
        match u16_at(self.buf, self.vtable + slot)? {
            0 => None,
            off => self.pos.checked_add(off as usize),
        }
    }

    fn bytes(&self, slot: usize, n: usize) -> Option<&'a [u8]> {
        let at = self.field(slot)?;
        self.buf.get(at..at.checked_add(n)?)
    }

    pub fn u8(&self, slot: usize) -> Option<u8> {
        Some(self.bytes(slot, 1)?[0])
    }

    pub fn u16(&self, slot: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(slot, 2)?.try_into().ok()?))
    }

    pub fn i16(&self, slot: usize) -> Option<i16> {
        self.u16(slot).map(|v| v as i16)
    }

    pub fn u32(&self, slot: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(slot, 4)?.try_into().ok()?))
    }

    pub fn bool(&self, slot: usize) -> Option<bool> {
        self.u8(slot).map(|v| v != 0)
    }

    /// The table field `slot` refers to.
    pub fn table(&self, slot: usize) -> Option<Table<'a>> {
        Table::at(self.buf, follow(self.buf, self.field(slot)?)?)
    }

    /// The vector field `slot` refers to, whose elements are `width` bytes each.
    pub fn vector(&self, slot: usize, width: usize) -> Option<Vector<'a>> {
        let at = follow(self.buf, self.field(slot)?)?;
        let len = u32_at(self.buf, at)? as usize;
        let start = at + 4;
        start
            .checked_add(len.checked_mul(width)?)
            .filter(|&end| end <= self.buf.len())?;
        Some(Vector {
            buf: self.buf,
            start,
            len,
        })
    }

    /// The string field `slot` refers to (UTF-8 checked).
    pub fn string(&self, slot: usize) -> Option<&'a str> {
        string_at(self.buf, follow(self.buf, self.field(slot)?)?)
    }
}

fn string_at(buf: &[u8], at: usize) -> Option<&str> {
    let len = u32_at(buf, at)? as usize;
    let bytes = buf.get(at.checked_add(4)?..at.checked_add(4)?.checked_add(len)?)?;
    std::str::from_utf8(bytes).ok()
}

impl<'a> Vector<'a> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements as bytes (a `[ubyte]` vector).
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.buf[self.start..self.start + self.len]
    }

    pub fn u16(&self, i: usize) -> Option<u16> {
        (i < self.len).then(|| u16_at(self.buf, self.start + 2 * i))?
    }

    pub fn u32(&self, i: usize) -> Option<u32> {
        (i < self.len).then(|| u32_at(self.buf, self.start + 4 * i))?
    }

    /// Element `i` of a vector of tables.
    pub fn table(&self, i: usize) -> Option<Table<'a>> {
        (i < self.len).then(|| Table::at(self.buf, follow(self.buf, self.start + 4 * i)?))?
    }

    /// Element `i` of a vector of strings.
    pub fn string(&self, i: usize) -> Option<&'a str> {
        (i < self.len).then(|| string_at(self.buf, follow(self.buf, self.start + 4 * i)?))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built buffer: root table with a u16 (slot 4), a string (slot 6) and a vector of
    /// two u32s (slot 8), laid out as flatc would.
    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(16u32.to_le_bytes()); // 0: root offset -> the table at 16
        b.extend(10u16.to_le_bytes()); // 4: the vtable: its length
        b.extend(16u16.to_le_bytes()); // table length
        b.extend(4u16.to_le_bytes()); // slot 4 at +4
        b.extend(8u16.to_le_bytes()); // slot 6 at +8
        b.extend(12u16.to_le_bytes()); // slot 8 at +12
        b.extend([0, 0]); // 14: pad to 16
        // 16: the table: soffset to the vtable (16 - 4 = 12).
        let table = b.len();
        b.extend(12i32.to_le_bytes());
        b.extend(7u16.to_le_bytes()); // +4: the u16
        b.extend([0, 0]);
        b.extend(8u32.to_le_bytes()); // +8: string offset -> table+8+8 = table+16
        b.extend(16u32.to_le_bytes()); // +12: vector offset -> table+12+16 = table+28
        b.extend(2u32.to_le_bytes()); // +16: "hi"
        b.extend(*b"hi\0\0");
        b.extend([0, 0, 0, 0]); // +24 pad
        b.extend(2u32.to_le_bytes()); // +28: vector of 2
        b.extend(5u32.to_le_bytes());
        b.extend(6u32.to_le_bytes());
        assert_eq!(table, 16);
        b
    }

    #[test]
    fn a_table_reads_its_fields_and_absent_ones_are_none() {
        let b = sample();
        let t = Table::root(&b).unwrap();
        assert_eq!(t.u16(4), Some(7));
        assert_eq!(t.string(6), Some("hi"));
        let v = t.vector(8, 4).unwrap();
        assert_eq!(
            (v.len(), v.u32(0), v.u32(1), v.u32(2)),
            (2, Some(5), Some(6), None)
        );
        assert_eq!(t.u16(10), None, "past the vtable");
    }

    #[test]
    fn every_cut_of_a_buffer_reads_without_a_panic() {
        let b = sample();
        for n in 0..b.len() {
            let cut = &b[..n];
            if let Some(t) = Table::root(cut) {
                let _ = (t.u16(4), t.string(6), t.vector(8, 4).map(|v| v.u32(1)));
            }
        }
        let mut garbled = b.clone();
        garbled[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let t = Table::root(&garbled).unwrap();
        assert_eq!(t.string(6), None, "an offset past the end");
    }
}
