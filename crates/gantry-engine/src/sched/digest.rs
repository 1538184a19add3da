//! A map that keeps a fingerprint of its whole contents up to date as it changes: the XOR of
//! one 64-bit hash per entry (FNV-1a of the entry's `Debug` text, then mixed), so it costs
//! what the changes cost, not what the map holds. The scheduler keeps its pending reasons and
//! estimates in these, and a replay of the live log compares the fingerprint after every cycle
//! — reading it each cycle is free however long the queue.

use std::collections::BTreeMap;
use std::fmt::{Debug, Write};

#[derive(Clone, Debug)]
pub(crate) struct DigestMap<K, V> {
    map: BTreeMap<K, V>,
    digest: u64,
}

impl<K, V> Default for DigestMap<K, V> {
    fn default() -> Self {
        DigestMap { map: BTreeMap::new(), digest: 0 }
    }
}

/// FNV-1a fed by `Debug` formatting, without building the string.
struct Fnv(u64);

impl Write for Fnv {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for byte in s.bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        Ok(())
    }
}

pub(crate) fn entry_hash<K: Debug, V: Debug>(key: &K, value: &V) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let _ = write!(h, "{key:?}={value:?}");
    // A finalizer (splitmix64's): XOR of raw FNV values of similar texts cancels too easily.
    let mut z = h.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<K: Ord + Debug, V: Debug + PartialEq> DigestMap<K, V> {
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(old) = self.map.get(&key) {
            if *old == value {
                // The common case in a long queue: a cycle says again what the last one said.
                return;
            }
            self.digest ^= entry_hash(&key, old);
        }
        let hash = entry_hash(&key, &value);
        self.digest ^= hash;
        self.map.insert(key, value);
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let old = self.map.remove(key)?;
        self.digest ^= entry_hash(key, &old);
        Some(old)
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.digest = 0;
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The fingerprint of the contents: equal maps have equal fingerprints, whatever the order
    /// of the changes that made them.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_the_contents_not_the_history() {
        let mut a = DigestMap::default();
        let mut b = DigestMap::default();
        a.insert(1u64, "x");
        a.insert(2, "y");
        a.insert(1, "z");
        b.insert(2, "y");
        b.insert(3, "w");
        b.insert(1, "z");
        assert_ne!(a.digest(), b.digest());
        assert_eq!(b.remove(&3), Some("w"));
        assert_eq!(a.digest(), b.digest(), "same contents, different histories");
        assert_eq!(b.remove(&3), None);
        a.clear();
        assert_eq!((a.digest(), a.iter().count()), (0, 0));
        a.insert(7, "q");
        assert_ne!(a.digest(), 0);
        assert_eq!((a.get(&7), a.get(&8), a.values().count()), (Some(&"q"), None, 1));
    }
}
