//! Just enough of the MLIR bytecode format to read what a program says of itself: the dialects
//! and operation names it uses, and the integer attributes of its module op's own attribute
//! dictionary (JAX writes `mhlo.num_partitions` and `mhlo.num_replicas` there). The string,
//! dialect, attribute and IR sections' headers, and the builtin dialect's string, dictionary
//! and integer encodings. Anything else, or anything malformed, reads as absent; it never
//! panics on hostile bytes.

const MAGIC: &[u8] = b"ML\xefR";
const STRINGS: u8 = 0;
const DIALECTS: u8 = 1;
pub(crate) const ATTRS: u8 = 2;
pub(crate) const ATTR_OFFSETS: u8 = 3;
pub(crate) const IR: u8 = 4;
// Bytecode versions where the encoding changed (MLIR's Encoding.h).
const DIALECT_VERSIONING: u64 = 1;
pub(crate) const ELIDE_UNKNOWN_BLOCK_ARG_LOCATION: u64 = 4;
pub(crate) const NATIVE_PROPERTIES_ENCODING: u64 = 5;
/// An op's encoding mask: it has an attribute dictionary.
pub(crate) const HAS_ATTRS: u8 = 0x01;
// The builtin dialect's attribute and type codes (MLIR's BuiltinDialectBytecode.td).
const DICTIONARY: u64 = 1;
const STRING: u64 = 2;
const INTEGER: u64 = 8;
const INTEGER_TYPE: u64 = 0;

/// A cursor over bytes; every read is checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pub(crate) at: usize,
    /// Where `bytes` start in the file, after the magic (alignment counts from there).
    offset: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            at: 0,
            offset: 0,
        }
    }

    /// A reader of `inner`, a part of `outer`'s bytes, knowing where it lies.
    pub(crate) fn within(outer: &[u8], inner: &'a [u8], offset: usize) -> Self {
        Reader {
            bytes: inner,
            at: 0,
            offset: offset + (inner.as_ptr() as usize - outer.as_ptr() as usize),
        }
    }

    pub(crate) fn bytes_left(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    /// MLIR's prefix varint: the first byte's trailing zeros count the bytes that follow.
    pub(crate) fn varint(&mut self) -> Option<u64> {
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

    pub(crate) fn signed_varint(&mut self) -> Option<i64> {
        let v = self.varint()?;
        Some(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    pub(crate) fn index(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }
}

/// A section: its id and its bytes.
pub(crate) type Section<'a> = (u8, &'a [u8]);

/// The bytecode version and the sections by id.
fn sections(code: &[u8]) -> Option<(u64, Vec<Section<'_>>)> {
    let mut r = Reader::new(code.strip_prefix(MAGIC)?);
    let version = r.varint()?;
    while r.byte()? != 0 {} // producer, NUL-terminated
    let mut out = Vec::new();
    while r.at < r.bytes.len() {
        out.push(r.section()?);
    }
    Some((version, out))
}

impl<'a> Reader<'a> {
    /// A section: its id, then its length, alignment padding where its id's high bit says.
    pub(crate) fn section(&mut self) -> Option<Section<'a>> {
        let id = self.byte()?;
        let len = self.index()?;
        if id & 0x80 != 0 {
            let align = self.index()?.max(1);
            // Padding is counted from the start of the file; the magic is 4 bytes.
            while !(self.offset + self.at + MAGIC.len()).is_multiple_of(align) {
                self.byte()?;
            }
        }
        Some((id & 0x7f, self.take(len)?))
    }
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
pub(crate) type Entry<'a> = (usize, Option<&'a [u8]>);

/// The attributes and types of the module, in index order.
pub(crate) struct Attributes<'a> {
    pub entries: Vec<Entry<'a>>,
    pub types: Vec<Entry<'a>>,
    /// Each type's bytes however it is encoded: its text where it has no custom encoding.
    pub type_bytes: Vec<&'a [u8]>,
}

pub(crate) fn attributes<'a>(offsets: &[u8], data: &'a [u8]) -> Option<Attributes<'a>> {
    let mut r = Reader::new(offsets);
    let (num_attrs, num_types) = (r.index()?, r.index()?);
    if num_attrs.saturating_add(num_types) > offsets.len() {
        return None;
    }
    let mut at = 0usize;
    let mut raw = Vec::new();
    let mut read = |count: usize| -> Option<Vec<Entry<'a>>> {
        let mut out = Vec::with_capacity(count);
        raw.clear();
        while out.len() < count {
            let dialect = r.index()?;
            let n = r.index()?;
            for _ in 0..n {
                let v = r.index()?;
                let (len, custom) = (v >> 1, v & 1 == 1);
                let bytes = data.get(at..at.checked_add(len)?)?;
                at += len;
                raw.push(bytes);
                out.push((dialect, custom.then_some(bytes)));
            }
        }
        Some(out)
    };
    let entries = read(num_attrs)?;
    let types = read(num_types)?;
    Some(Attributes {
        entries,
        types,
        type_bytes: raw,
    })
}

/// What a bytecode program says of itself.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The dialects it names.
    pub dialects: Vec<String>,
    /// The operations it names, each as `dialect.op`.
    pub ops: Vec<String>,
    /// The integer attributes asked for, from the module op's own attribute dictionary only
    /// (never a function's, nor a string that happens to hold the name).
    pub module_integers: Vec<Option<i64>>,
}

/// Reads `code`'s dialects, operation names and its module op's integer attributes `names`;
/// `None` where the bytecode cannot be read that far.
pub fn summary(code: &[u8], names: &[&str]) -> Option<Summary> {
    let read = read_names(code)?;
    let module_integers = module_integers(
        &read.sections,
        &read.strings,
        &read.ops,
        &read.dialects,
        names,
    )
    .unwrap_or_else(|| vec![None; names.len()]);
    Some(Summary {
        dialects: read.dialects,
        ops: read.ops,
        module_integers,
    })
}

/// A program's sections, strings, dialects and operation names, read once for whoever needs
/// more (the module's integers here, the IR walk in `mlir_bytecode_ops`).
pub(crate) struct Names<'a> {
    pub version: u64,
    pub sections: Vec<Section<'a>>,
    pub strings: Vec<&'a [u8]>,
    pub dialects: Vec<String>,
    /// Every operation name, as `dialect.op`, in the order the IR section's indices count.
    pub ops: Vec<String>,
}

impl<'a> Names<'a> {
    pub fn section(&self, id: u8) -> Option<&'a [u8]> {
        self.sections
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| *s)
    }
}

pub(crate) fn read_names(code: &[u8]) -> Option<Names<'_>> {
    let (version, sections) = sections(code)?;
    let section = |id| sections.iter().find(|(i, _)| *i == id).map(|(_, s)| *s);
    let strings = strings(section(STRINGS)?)?;
    let string = |i: usize| {
        strings
            .get(i)
            .map(|s| String::from_utf8_lossy(s).into_owned())
    };
    let body = code.strip_prefix(MAGIC)?;
    let dialect_section = section(DIALECTS)?;
    let mut r = Reader::within(body, dialect_section, 0);
    let n = r.index()?;
    if n > dialect_section.len() {
        return None;
    }
    let mut dialects = Vec::with_capacity(n);
    for _ in 0..n {
        if version < DIALECT_VERSIONING {
            dialects.push(string(r.index()?)?);
            continue;
        }
        let v = r.index()?;
        dialects.push(string(v >> 1)?);
        if v & 1 == 1 {
            r.section()?; // the dialect's version, a nested section
        }
    }
    if version >= ELIDE_UNKNOWN_BLOCK_ARG_LOCATION {
        r.index()?; // how many op names follow
    }
    let mut ops = Vec::new();
    while r.at < r.bytes.len() {
        let dialect = dialects.get(r.index()?)?.clone();
        let count = r.index()?;
        if count > r.bytes.len() {
            return None;
        }
        for _ in 0..count {
            let v = r.index()?;
            // From version 5 the low bit says whether the op was registered.
            let name = match version >= NATIVE_PROPERTIES_ENCODING {
                true => v >> 1,
                false => v,
            };
            ops.push(format!("{dialect}.{}", string(name)?));
        }
    }
    Some(Names {
        version,
        sections,
        strings,
        dialects,
        ops,
    })
}

/// The integer attributes `names` of the module op's own attribute dictionary, where the
/// program's first top-level op is `builtin.module` and has one.
fn module_integers(
    sections: &[Section<'_>],
    strings: &[&[u8]],
    ops: &[String],
    dialects: &[String],
    names: &[&str],
) -> Option<Vec<Option<i64>>> {
    let section = |id| sections.iter().find(|(i, _)| *i == id).map(|(_, s)| *s);
    let mut ir = Reader::new(section(IR)?);
    // The top-level block: its op count, shifted, and whether it has arguments.
    let header = ir.varint()?;
    if header & 1 == 1 || header >> 1 == 0 {
        return None;
    }
    let op = ops.get(ir.index()?)?;
    let mask = ir.byte()?;
    ir.index()?; // its location
    if op != "builtin.module" || mask & HAS_ATTRS == 0 {
        return None;
    }
    let dictionary = ir.index()?;
    let attrs = attributes(section(ATTR_OFFSETS)?, section(ATTRS)?)?;
    let reader = BuiltinAttrs {
        attrs: &attrs,
        strings,
        builtin: dialects.iter().position(|d| d == "builtin")?,
    };
    let (DICTIONARY, mut r) = reader.attr(dictionary)? else {
        return None;
    };
    let mut found = vec![None; names.len()];
    let n = r.index()?;
    for _ in 0..n.min(attrs.entries.len()) {
        let (key, value) = (r.index()?, r.index()?);
        let Some(key) = reader.string(key) else {
            continue;
        };
        if let Some(k) = names.iter().position(|n| n.as_bytes() == key) {
            found[k] = reader.integer(value);
        }
    }
    Some(found)
}

/// The builtin dialect's attributes, read by index.
struct BuiltinAttrs<'r, 'a> {
    attrs: &'r Attributes<'a>,
    strings: &'r [&'a [u8]],
    builtin: usize,
}

impl<'a> BuiltinAttrs<'_, 'a> {
    /// A builtin attribute's code and its reader.
    fn attr(&self, i: usize) -> Option<(u64, Reader<'a>)> {
        match self.attrs.entries.get(i)? {
            (d, Some(bytes)) if *d == self.builtin => {
                let mut r = Reader::new(bytes);
                Some((r.varint()?, r))
            }
            _ => None,
        }
    }

    fn string(&self, i: usize) -> Option<&'a [u8]> {
        match self.attr(i)? {
            (STRING, mut r) => self.strings.get(r.index()?).copied(),
            _ => None,
        }
    }

    fn integer(&self, i: usize) -> Option<i64> {
        let (INTEGER, mut r) = self.attr(i)? else {
            return None;
        };
        let width = match self.attrs.types.get(r.index()?)? {
            (d, Some(bytes)) if *d == self.builtin => {
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
    }
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
        assert!(summary(&code, &["x"]).is_none_or(|s| s.module_integers == [None]));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn jaxs_bytecode_names_its_dialects_and_ops_and_its_module_its_counts() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/spmd");
        for name in ["all_reduce", "all_gather", "dp_mlp"] {
            let code = std::fs::read(dir.join(format!("{name}.mlirbc"))).unwrap();
            let s = summary(&code, &["mhlo.num_partitions", "mhlo.num_replicas", "nope"]).unwrap();
            assert_eq!(s.module_integers, [Some(4), Some(1), None], "{name}");
            assert!(
                s.dialects.iter().any(|d| d == "sdy"),
                "{name}: {:?}",
                s.dialects
            );
            assert!(
                s.ops.iter().any(|o| o == "builtin.module"),
                "{name}: {:?}",
                s.ops
            );
            assert!(s.ops.iter().any(|o| o == "sdy.mesh"), "{name}: {:?}", s.ops);
        }
        // Cut anywhere, it reads as absent or as less, never panics.
        let code = std::fs::read(dir.join("all_reduce.mlirbc")).unwrap();
        for n in 0..code.len() {
            let _ = summary(&code[..n], &["mhlo.num_partitions"]);
        }
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
            let read = summary(code, &names).map(|s| s.module_integers);
            assert!(read.is_none_or(|r| r == [None]), "{code:?}");
        }
    }
}
