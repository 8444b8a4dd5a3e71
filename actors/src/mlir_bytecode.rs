//! Just enough of the MLIR bytecode format to read a module's integer attributes by name (JAX
//! writes `mhlo.num_partitions` and `mhlo.num_replicas` there): the string, dialect and
//! attribute sections, and the builtin dialect's string, dictionary and integer encodings.
//! Anything else, or anything malformed, reads as absent; it never panics on hostile bytes.

const MAGIC: &[u8] = b"ML\xefR";
const STRINGS: u8 = 0;
const DIALECTS: u8 = 1;
const ATTRS: u8 = 2;
const ATTR_OFFSETS: u8 = 3;
// The builtin dialect's attribute and type codes (MLIR's BuiltinDialectBytecode.td).
const DICTIONARY: u64 = 1;
const STRING: u64 = 2;
const INTEGER: u64 = 8;
const INTEGER_TYPE: u64 = 0;

/// A cursor over bytes; every read is checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    /// MLIR's prefix varint: the first byte's trailing zeros count the bytes that follow.
    fn varint(&mut self) -> Option<u64> {
        let first = self.byte()?;
        if first == 0 {
            return Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?));
        }
        let extra = first.trailing_zeros() as usize;
        let mut buf = [0u8; 8];
        buf[0] = first;
        buf[1..=extra].copy_from_slice(self.take(extra)?);
        Some(u64::from_le_bytes(buf) >> (extra + 1))
    }

    fn signed_varint(&mut self) -> Option<i64> {
        let v = self.varint()?;
        Some(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn index(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }
}

/// The module's sections by id.
fn sections(code: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut r = Reader::new(code.strip_prefix(MAGIC)?);
    r.varint()?; // version
    while r.byte()? != 0 {} // producer, NUL-terminated
    let mut out = Vec::new();
    while r.at < r.bytes.len() {
        let id = r.byte()?;
        let len = r.index()?;
        if id & 0x80 != 0 {
            let align = r.index()?.max(1);
            // Padding is counted from the start of the file; the magic is 4 bytes.
            while !(r.at + MAGIC.len()).is_multiple_of(align) {
                r.byte()?;
            }
        }
        out.push((id & 0x7f, r.take(len)?));
    }
    Some(out)
}

fn strings(section: &[u8]) -> Option<Vec<&[u8]>> {
    let mut r = Reader::new(section);
    let n = r.index()?;
    if n > section.len() {
        return None;
    }
    let mut lengths: Vec<usize> = (0..n).map(|_| r.index()).collect::<Option<_>>()?;
    lengths.reverse();
    lengths
        .into_iter()
        .map(|len| Some(r.take(len)?.strip_suffix(b"\0").unwrap_or_default()))
        .collect()
}

/// An attribute's or type's dialect index, and its encoding when custom-encoded.
type Entry<'a> = (usize, Option<&'a [u8]>);

/// The attributes and types of the module, in index order.
struct Attributes<'a> {
    entries: Vec<Entry<'a>>,
    types: Vec<Entry<'a>>,
}

fn attributes<'a>(offsets: &[u8], data: &'a [u8]) -> Option<Attributes<'a>> {
    let mut r = Reader::new(offsets);
    let (num_attrs, num_types) = (r.index()?, r.index()?);
    if num_attrs.saturating_add(num_types) > offsets.len() {
        return None;
    }
    let mut at = 0usize;
    let mut read = |count: usize| -> Option<Vec<Entry<'a>>> {
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let dialect = r.index()?;
            let n = r.index()?;
            for _ in 0..n {
                let v = r.index()?;
                let (len, custom) = (v >> 1, v & 1 == 1);
                let bytes = data.get(at..at.checked_add(len)?)?;
                at += len;
                out.push((dialect, custom.then_some(bytes)));
            }
        }
        Some(out)
    };
    let entries = read(num_attrs)?;
    let types = read(num_types)?;
    Some(Attributes { entries, types })
}

/// The integer attributes named `names` in the module's dictionaries (the first found each).
pub fn integer_attributes(code: &[u8], names: &[&str]) -> Vec<Option<i64>> {
    read_integers(code, names).unwrap_or_else(|| vec![None; names.len()])
}

fn read_integers(code: &[u8], names: &[&str]) -> Option<Vec<Option<i64>>> {
    let sections = sections(code)?;
    let section = |id| sections.iter().find(|(i, _)| *i == id).map(|(_, s)| *s);
    let strings = strings(section(STRINGS)?)?;
    let mut dialects = Reader::new(section(DIALECTS)?);
    // A count past what the section holds ends at its first failed read.
    let mut builtin = None;
    for d in 0..dialects.index()? {
        let name = strings.get(dialects.index()? >> 1).copied();
        if name == Some(b"builtin".as_slice()) {
            builtin = Some(d);
            break;
        }
    }
    let builtin = builtin?;
    let attrs = attributes(section(ATTR_OFFSETS)?, section(ATTRS)?)?;
    // A builtin attribute's code and its reader.
    let builtin_attr = |i: usize| -> Option<(u64, Reader<'_>)> {
        match attrs.entries.get(i)? {
            (d, Some(bytes)) if *d == builtin => {
                let mut r = Reader::new(bytes);
                Some((r.varint()?, r))
            }
            _ => None,
        }
    };
    let string_attr = |i: usize| -> Option<&[u8]> {
        match builtin_attr(i)? {
            (STRING, mut r) => strings.get(r.index()?).copied(),
            _ => None,
        }
    };
    let integer_attr = |i: usize| -> Option<i64> {
        let (INTEGER, mut r) = builtin_attr(i)? else {
            return None;
        };
        let width = match attrs.types.get(r.index()?)? {
            (d, Some(bytes)) if *d == builtin => {
                let mut t = Reader::new(bytes);
                match t.varint()? {
                    INTEGER_TYPE => t.varint()? >> 2,
                    _ => return None,
                }
            }
            _ => return None,
        };
        match width {
            0..=8 => r.byte().map(|b| b as i8 as i64),
            9..=64 => r.signed_varint(),
            _ => None,
        }
    };
    let mut found = vec![None; names.len()];
    for i in 0..attrs.entries.len() {
        let Some((DICTIONARY, mut r)) = builtin_attr(i) else {
            continue;
        };
        let Some(n) = r.index() else { continue };
        for _ in 0..n.min(attrs.entries.len()) {
            let (Some(name), Some(value)) = (r.index(), r.index()) else {
                break;
            };
            let Some(name) = string_attr(name) else {
                continue;
            };
            if let Some(k) = names.iter().position(|n| n.as_bytes() == name)
                && found[k].is_none()
            {
                found[k] = integer_attr(value);
            }
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_varints_decode_at_every_length() {
        // (bytes, value): one byte holds 7 bits, two 14, ..., a zero byte then eight bytes.
        let cases: [(&[u8], u64); 5] = [
            (&[0x01], 0),
            (&[0x11], 8),
            (&[0x02, 0x01], 64),
            (&[0xfe, 0xff], (1 << 14) - 1),
            (&[0, 1, 0, 0, 0, 0, 0, 0, 0], 1),
        ];
        for (bytes, want) in cases {
            assert_eq!(Reader::new(bytes).varint(), Some(want), "{bytes:?}");
        }
        assert_eq!(Reader::new(&[0x02]).varint(), None, "cut short");
        assert_eq!(Reader::new(&[0x03]).signed_varint(), Some(-1));
        assert_eq!(Reader::new(&[0x05]).signed_varint(), Some(1));
        assert_eq!(Reader::new(&[0x11]).signed_varint(), Some(4));
    }

    #[test]
    fn a_dialect_count_past_the_section_ends_at_once() {
        // Found by the fuzz target `read_bytecode`: a huge dialect count in a short section
        // read on, one failed read after another, for ever.
        let mut code = b"ML\xefR\x0dx\0".to_vec();
        let strings = [0x03u8, 0x11, b'b', b'u', b'i', b'l', b't', b'i', b'n', 0];
        code.extend([STRINGS, 0x15]);
        code.extend(strings);
        // One dialect section claiming 2^55 dialects, holding none.
        code.extend([
            DIALECTS, 0x11, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ]);
        let start = std::time::Instant::now();
        assert_eq!(integer_attributes(&code, &["x"]), vec![None]);
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn garbage_and_cut_bytecode_read_as_absent() {
        let names = ["mhlo.num_partitions"];
        for code in [
            &b""[..],
            b"ML\xefR",
            b"ML\xefR\x0d",
            b"ML\xefR\x0dx\0\x00\xff",
            b"module {}",
        ] {
            assert_eq!(integer_attributes(code, &names), vec![None], "{code:?}");
        }
    }
}
