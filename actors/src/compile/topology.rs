//! A topology description: the devices a compile can target, read from the plugin or known only
//! by its serialized bytes, and when two describe the same thing (`matches`).

use crate::error::Result;
use crate::pjrt::{DeviceDescription, NamedValue, PjrtClient, PjrtTopology};

/// A topology description: the devices a compile can target, and its serialized bytes.
#[derive(Debug, Clone)]
pub struct TopologyDescription {
    /// The platform, as the plugin names it.
    pub platform_name: String,
    /// The platform version.
    pub platform_version: String,
    /// One description per device of the topology.
    pub device_descriptions: Vec<DeviceDescription>,
    /// Plugin-defined attributes of the topology.
    pub attributes: Vec<(String, NamedValue)>,
    /// The plugin's serialization of the topology.
    pub serialized: Vec<u8>,
}

impl TopologyDescription {
    /// A topology known only by its serialized bytes (e.g. read back from a file); the other
    /// fields are left empty. The plugin rebuilds it from the bytes to compile for it
    /// (`PJRT_Compile`); a plugin without that compiler (CPU) compiles for it only where a
    /// client here has exactly this topology.
    pub fn from_serialized(bytes: Vec<u8>) -> Self {
        TopologyDescription {
            platform_name: String::new(),
            platform_version: String::new(),
            device_descriptions: Vec::new(),
            attributes: Vec::new(),
            serialized: bytes,
        }
    }

    /// Whether a compile for `other` can run on a client of this topology: the same platform,
    /// platform version, device kinds (as a multiset) and topology attributes. The serialized
    /// bytes are not compared where both sides are described (GPU plugins do not serialize
    /// them byte for byte alike); a topology known only by its bytes matches equal bytes.
    pub fn matches(&self, other: &TopologyDescription) -> bool {
        let described = |t: &TopologyDescription| !t.platform_name.is_empty();
        if !(described(self) && described(other)) {
            return self.serialized == other.serialized;
        }
        fn kinds(t: &TopologyDescription) -> Vec<&str> {
            let mut k: Vec<&str> = t
                .device_descriptions
                .iter()
                .map(|d| d.kind.as_str())
                .collect();
            k.sort_unstable();
            k
        }
        let attributes = |t: &TopologyDescription| {
            let mut a: Vec<String> = t
                .attributes
                .iter()
                .map(|(n, v)| format!("{n}={v:?}"))
                .collect();
            a.sort_unstable();
            a
        };
        self.platform_name == other.platform_name
            && self.platform_version == other.platform_version
            && kinds(self) == kinds(other)
            && attributes(self) == attributes(other)
    }

    /// Reads a client's topology from the plugin.
    pub(crate) fn read(client: &PjrtClient) -> Result<Self> {
        Self::describe(&client.topology()?)
    }

    /// Reads what a plugin topology describes, and its bytes.
    pub(crate) fn describe(topology: &PjrtTopology) -> Result<Self> {
        Ok(TopologyDescription {
            platform_name: topology.platform_name()?,
            platform_version: topology.platform_version()?,
            device_descriptions: topology.device_descriptions()?,
            attributes: topology.attributes()?,
            serialized: topology.serialize()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(platform: &str, kinds: &[&str], bytes: &[u8]) -> TopologyDescription {
        TopologyDescription {
            platform_name: platform.into(),
            platform_version: "1".into(),
            device_descriptions: (kinds.iter().enumerate())
                .map(|(i, k)| DeviceDescription {
                    id: i as i32,
                    process_index: 0,
                    kind: k.to_string(),
                    debug_string: String::new(),
                    display_string: String::new(),
                    attributes: Vec::new(),
                })
                .collect(),
            attributes: vec![("cores".into(), NamedValue::Int64(kinds.len() as i64))],
            serialized: bytes.to_vec(),
        }
    }

    #[test]
    fn topologies_match_by_what_they_describe_not_by_their_bytes() {
        let h200 = topology("cuda", &["H200", "H200"], b"a");
        let cases: &[(TopologyDescription, bool, &str)] = &[
            (
                topology("cuda", &["H200", "H200"], b"b"),
                true,
                "same description, other bytes",
            ),
            (topology("cuda", &["H200"], b"a"), false, "fewer devices"),
            (
                topology("cuda", &["H200", "A100"], b"a"),
                false,
                "another device kind",
            ),
            (
                topology("rocm", &["H200", "H200"], b"a"),
                false,
                "another platform",
            ),
            (
                TopologyDescription::from_serialized(b"a".to_vec()),
                true,
                "bytes only, equal",
            ),
            (
                TopologyDescription::from_serialized(b"b".to_vec()),
                false,
                "bytes only, different",
            ),
        ];
        for (other, want, what) in cases {
            assert_eq!(h200.matches(other), *want, "{what}");
            assert_eq!(other.matches(&h200), *want, "{what}, the other way");
        }
        let mut version = topology("cuda", &["H200", "H200"], b"a");
        version.platform_version = "2".into();
        assert!(!h200.matches(&version), "another platform version");
    }
}
