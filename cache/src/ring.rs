//! The per-zone ring: which agent of a zone owns each block, so that the
//! zone GETs a block once however many of its agents serve readers of it.
//!
//! Rendezvous (highest random weight) hashing: every member scores each
//! block and the highest score owns it. Agents that see the same members
//! agree on every owner with no coordination, and a member that joins or
//! leaves moves only the blocks it owns (about 1/n of them).

use crate::key::BlockKey;

/// A member of this agent's zone, named by the address it serves blocks on
/// (unique, and the same whether agents are advertised one by one or behind
/// a load balancer that gives them all one broker id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub address: String,
    /// This agent itself: its blocks are loaded here, not asked for.
    pub local: bool,
}

/// The members of one zone, in address order, each with its hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ring {
    members: Vec<Member>,
    hashes: Vec<u64>,
}

impl Ring {
    pub fn new(mut members: Vec<Member>) -> Self {
        members.sort_by(|a, b| a.address.cmp(&b.address));
        members.dedup_by(|a, b| a.address == b.address);
        let hashes = members
            .iter()
            .map(|m| mix(crc32c::crc32c(m.address.as_bytes()) as u64))
            .collect();
        Ring { members, hashes }
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member that owns `key`; `None` for an empty ring.
    pub fn owner(&self, key: &BlockKey) -> Option<&Member> {
        let block = block_hash(key);
        self.members
            .iter()
            .zip(&self.hashes)
            .max_by_key(|(m, hash)| (mix(block ^ **hash), &m.address))
            .map(|(m, _)| m)
    }
}

/// A block's hash. Specified (CRC32C and SplitMix64's finalizer), so agents
/// built by different toolchains agree during a rolling upgrade. CRC alone
/// is linear, which skews highest-score choices; the finalizer is not.
fn block_hash(key: &BlockKey) -> u64 {
    let object = crc32c::crc32c(key.object.as_bytes()) as u64;
    mix(object ^ mix(key.object_size) ^ mix(key.block ^ 0x9E37_79B9_7F4A_7C15))
}

/// SplitMix64's finalizer: a bijection that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ring(ids: &[i32]) -> Ring {
        Ring::new(ids.iter().map(|&id| member(id)).collect())
    }

    fn member(id: i32) -> Member {
        Member {
            address: format!("10.0.0.{id}:9644"),
            local: false,
        }
    }

    fn owner(ring: &Ring, key: &BlockKey) -> i32 {
        let address = &ring.owner(key).unwrap().address;
        (0..10).find(|&id| member(id).address == *address).unwrap()
    }

    fn keys() -> impl Iterator<Item = BlockKey> {
        (0..3000u64).flat_map(|o| {
            let object: Arc<str> = Arc::from(format!("ingest/{:02x}/object-{o}", o % 256));
            (0..10).map(move |block| BlockKey {
                object: object.clone(),
                object_size: 40 << 20,
                block_bytes: 4 << 20,
                block,
            })
        })
    }

    #[test]
    fn blocks_spread_evenly_over_members() {
        let ring = ring(&[0, 1, 2]);
        let mut owned = [0usize; 3];
        for key in keys() {
            owned[owner(&ring, &key) as usize] += 1;
        }
        for n in owned {
            // 10,000 each when even; within 5%.
            assert!((9_500..=10_500).contains(&n), "{owned:?}");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_its_blocks() {
        let (three, two) = (ring(&[0, 1, 2]), ring(&[0, 2]));
        for key in keys() {
            let before = owner(&three, &key);
            let after = owner(&two, &key);
            if before != 1 {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn owners_are_pinned() {
        // A different answer means agents of two builds disagree on owners.
        let key = BlockKey {
            object: Arc::from("ingest/00/a"),
            object_size: 100,
            block_bytes: 4 << 20,
            block: 0,
        };
        let owners: Vec<i32> = (0..8)
            .map(|block| {
                let key = BlockKey {
                    block,
                    ..key.clone()
                };
                owner(&ring(&[0, 1, 2, 3]), &key)
            })
            .collect();
        assert_eq!(owners, PINNED_OWNERS);
        assert_eq!(Ring::default().owner(&key), None);
    }

    const PINNED_OWNERS: [i32; 8] = [1, 3, 0, 0, 3, 1, 2, 3];
}
