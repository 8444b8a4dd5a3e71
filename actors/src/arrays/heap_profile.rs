//! Heap profiles in pprof format, as py_client's `heap_profile`: sample types
//! `allocations/count` and `space/bytes`; one sample per (site, size, device) for device
//! buffers and per (site, code size) for executables; labels `kind` and `device`.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;

use crate::arrays::buffers::{ArrayCore, BufferEntry, BufferRegistry};
use crate::arrays::site::{Frame, Site};
use crate::execute::executable::ExecutableCore;
use crate::ids::ArrayId;

/// The generated pprof messages.
#[allow(missing_docs, clippy::all)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// Builds profiles: interns strings, functions and locations.
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<pprof::Function>,
    function_ids: HashMap<Frame, u64>,
    locations: Vec<pprof::Location>,
    site_locations: HashMap<usize, Vec<u64>>,
}

impl Builder {
    fn new() -> Self {
        let mut b = Builder::default();
        b.string(""); // pprof: string 0 is the empty string
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// The location ids of a site's frames, innermost first.
    fn site(&mut self, site: &Site) -> Vec<u64> {
        if let Some(ids) = self.site_locations.get(&site.key()) {
            return ids.clone();
        }
        let ids: Vec<u64> = site
            .frames()
            .into_iter()
            .map(|frame| {
                let function_id = match self.function_ids.get(&frame) {
                    Some(&id) => id,
                    None => {
                        let id = self.functions.len() as u64 + 1;
                        let f = pprof::Function {
                            id,
                            name: self.string(&frame.function),
                            system_name: self.string(&frame.function),
                            filename: self.string(&frame.file),
                            start_line: frame.line,
                        };
                        self.functions.push(f);
                        self.function_ids.insert(frame.clone(), id);
                        id
                    }
                };
                let id = self.locations.len() as u64 + 1;
                self.locations.push(pprof::Location {
                    id,
                    line: vec![pprof::Line {
                        function_id,
                        line: frame.line,
                        column: 0,
                    }],
                    ..Default::default()
                });
                id
            })
            .collect();
        self.site_locations.insert(site.key(), ids.clone());
        ids
    }
}

/// One executable's contribution: its site and generated code size.
pub struct ExecutableSample {
    pub core: Arc<ExecutableCore>,
    pub code_size: i64,
}

/// A multiply-xor hasher for the profile's small integer keys: tens of thousands of lookups
/// per profile, where SipHash's flooding resistance buys nothing.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type Fast = std::hash::BuildHasherDefault<KeyHasher>;

/// Counts of live buffers per (site, on-device size, device), with each group's site.
#[derive(Default)]
pub struct BufferTally {
    groups: HashMap<(usize, usize, usize), (i64, Site), Fast>,
    /// The group of the previous array and the count not yet added to it: arrays from one
    /// site tend to come together, and then no hashing is needed.
    run: Option<((usize, usize, usize), i64)>,
    /// Arrays whose size no profile has asked the plugin for yet (newly made ones).
    size_unknown: Vec<(ArrayId, std::sync::Weak<ArrayCore>)>,
}

impl BufferTally {
    /// Counts one registry entry (each underlying buffer once: clones share one entry).
    /// Deleted arrays hold no memory and are left out. Runs under the shard lock, so it only
    /// notes the arrays whose size is not known yet.
    pub fn add(&mut self, id: ArrayId, e: &BufferEntry) {
        if e.deleted {
            return;
        }
        match e.size() {
            Some(size) => self.count(&e.site, size, e.device as usize),
            None => self.size_unknown.push((id, e.array.clone())),
        }
    }

    /// Asks the plugin for the sizes `add` did not know, keeps them in the registry for the
    /// next profile, and counts those arrays. Runs after the shard locks are released: an
    /// upgraded array dropped here may be the last handle, which unregisters it.
    pub fn size_the_rest(&mut self, registry: &BufferRegistry) {
        for (id, weak) in std::mem::take(&mut self.size_unknown) {
            let Some(array) = weak.upgrade() else {
                continue;
            };
            if array.slot.is_deleted() {
                continue;
            }
            let size = registry.on_device_size(&array).ok();
            let site = registry.get_with(id, |e| e.site.clone()).ok();
            if let Some(site) = site {
                self.count(&site, size.unwrap_or(0), array.slot.device);
            }
        }
    }

    fn count(&mut self, site: &Site, size: usize, device: usize) {
        let key = (site.key(), size, device);
        match &mut self.run {
            Some((k, n)) if *k == key => *n += 1,
            _ => {
                self.flush();
                self.groups.entry(key).or_insert_with(|| (0, site.clone()));
                self.run = Some((key, 1));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((key, n)) = self.run.take()
            && let Some(group) = self.groups.get_mut(&key)
        {
            group.0 += n;
        }
    }
}

/// Encodes a profile of the tallied buffers and `executables`. `device_names[i]` is device
/// `i`'s debug string.
pub fn build(
    mut tally: BufferTally,
    executables: &[ExecutableSample],
    device_names: &[&str],
) -> Vec<u8> {
    let mut b = Builder::new();
    tally.flush();
    let buffers = tally.groups;
    let mut programs: HashMap<(usize, i64), (i64, &Site)> = HashMap::new();
    for e in executables {
        programs
            .entry((e.core.site.key(), e.code_size))
            .or_insert((0, &e.core.site))
            .0 += 1;
    }
    let kind = b.string("kind");
    let device = b.string("device");
    let buffer = b.string("buffer");
    let executable = b.string("executable");
    let mut samples = Vec::with_capacity(buffers.len() + programs.len());
    let mut buffer_keys: Vec<_> = buffers.into_iter().collect();
    buffer_keys.sort_by_key(|((_, size, dev), _)| (*dev, *size));
    for ((_, size, dev), (count, site)) in buffer_keys {
        let location_id = b.site(&site);
        let device_name = device_names.get(dev).copied().unwrap_or("");
        let device_str = b.string(device_name);
        samples.push(pprof::Sample {
            location_id,
            value: vec![count, count * size as i64],
            label: vec![
                pprof::Label {
                    key: kind,
                    str: buffer,
                    ..Default::default()
                },
                pprof::Label {
                    key: device,
                    str: device_str,
                    ..Default::default()
                },
            ],
        });
    }
    for ((_, code_size), (count, site)) in programs {
        let location_id = b.site(site);
        samples.push(pprof::Sample {
            location_id,
            value: vec![count, count * code_size],
            label: vec![pprof::Label {
                key: kind,
                str: executable,
                ..Default::default()
            }],
        });
    }
    let sample_type = vec![
        pprof::ValueType {
            r#type: b.string("allocations"),
            unit: b.string("count"),
        },
        pprof::ValueType {
            r#type: b.string("space"),
            unit: b.string("bytes"),
        },
    ];
    pprof::Profile {
        sample_type,
        sample: samples,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        ..Default::default()
    }
    .encode_to_vec()
}
