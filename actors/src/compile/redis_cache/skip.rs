//! When the tier stops asking Redis after a failure, and for which keys. One server: for a
//! second, every key (an unreachable server costs one timeout a second, not one a compile).
//! A cluster: for a second, the keys of the master that failed (found by the slot map the tier
//! last read), so a master failing over does not send every other master's compiles local.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::fleet::target::Master;

/// How long a failure keeps the tier (or one master's keys) away.
pub const SKIP: Duration = Duration::from_secs(1);

/// The cluster's slots: 16384, each key's from CRC16 of its hash tag.
const SLOTS: u16 = 16384;

/// The slot of a key whose hash tag is `tag` (CRC16-XMODEM, as Redis Cluster computes it).
pub fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag.as_bytes() {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// What is skipped until when. Owned by the tier behind its Mutex; a plain value so the policy
/// is tested as a table.
#[derive(Default)]
pub struct Skips {
    /// Every key (one server; or a cluster failure that names no slot).
    all_until: Option<Instant>,
    /// A cluster's masters (by address, or `slot N` for a slot no known master serves).
    masters_until: HashMap<String, Instant>,
    /// The slot map last read (empty: not read, or one server).
    map: Vec<Master>,
}

impl Skips {
    /// Whether a round trip for a key in `slot` (`None`: no key, or one server) may go now.
    pub fn allows(&self, slot: Option<u16>, now: Instant) -> bool {
        if self.all_until.is_some_and(|t| now < t) {
            return false;
        }
        match slot {
            Some(slot) => (self.masters_until.get(&self.owner(slot))).is_none_or(|&t| now >= t),
            None => true,
        }
    }

    /// A failure of a round trip for a key in `slot`: with a slot map, that slot's master is
    /// skipped; otherwise every key.
    pub fn failed(&mut self, slot: Option<u16>, now: Instant) {
        match slot {
            Some(slot) if !self.map.is_empty() => {
                let owner = self.owner(slot);
                self.masters_until.insert(owner, now + SKIP);
                self.masters_until.retain(|_, t| *t > now);
            }
            _ => self.all_until = Some(now + SKIP),
        }
    }

    /// A slot map just read.
    pub fn set_map(&mut self, map: Vec<Master>) {
        self.map = map;
    }

    fn owner(&self, slot: u16) -> String {
        (self.map.iter()).find(|m| m.serves(slot)).map_or_else(
            || format!("slot {slot}"),
            |m| format!("{}:{}", m.host, m.port),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_clusters() {
        // CRC16-XMODEM's check value, and what CLUSTER KEYSLOT answers for these keys.
        let cases = [
            ("123456789", 0x31C3),
            ("", 0),
            ("foo", 12182),
            ("bar", 5061),
        ];
        for (tag, want) in cases {
            assert_eq!(slot(tag), want, "{tag}");
        }
    }

    #[test]
    fn a_failure_skips_its_master_for_a_second_or_everything_without_a_map() {
        let t0 = Instant::now();
        let later = |ms| t0 + Duration::from_millis(ms);
        let map = vec![
            Master {
                host: "a".into(),
                port: 1,
                slots: vec![(0, 5460)],
            },
            Master {
                host: "b".into(),
                port: 2,
                slots: vec![(5461, 10922), (10923, 16383)],
            },
        ];
        // (map?, failures as (slot, at ms), asks as (slot, at ms, allowed))
        type Failure = (Option<u16>, u64);
        type Ask = (Option<u16>, u64, bool);
        type Case = (bool, Vec<Failure>, Vec<Ask>);
        let cases: [Case; 5] = [
            // One server: any failure skips every key for a second.
            (
                false,
                vec![(None, 0)],
                vec![
                    (None, 500, false),
                    (Some(7), 500, false),
                    (None, 1000, true),
                ],
            ),
            // A cluster without a map yet: the same.
            (false, vec![(Some(7), 0)], vec![(Some(9000), 999, false)]),
            // A cluster: only the failed slot's master, for a second.
            (
                true,
                vec![(Some(7), 0)],
                vec![
                    (Some(100), 10, false),
                    (Some(6000), 10, true),
                    (Some(16000), 10, true),
                    (None, 10, true),
                    (Some(100), 1000, true),
                ],
            ),
            // Both masters failing: each skipped on its own clock.
            (
                true,
                vec![(Some(7), 0), (Some(12000), 600)],
                vec![(Some(5461), 1200, false), (Some(0), 1200, true)],
            ),
            // A failure with no slot (connecting) skips every key even with a map.
            (true, vec![(None, 0)], vec![(Some(6000), 10, false)]),
        ];
        for (i, (with_map, failures, asks)) in cases.into_iter().enumerate() {
            let mut skips = Skips::default();
            if with_map {
                skips.set_map(map.clone());
            }
            for (slot, at) in failures {
                skips.failed(slot, later(at));
            }
            for (slot, at, allowed) in asks {
                assert_eq!(
                    skips.allows(slot, later(at)),
                    allowed,
                    "case {i}: {slot:?} at {at} ms"
                );
            }
        }
    }
}
