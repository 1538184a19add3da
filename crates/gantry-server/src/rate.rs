//! Per-node rate limits at the edge: what one agent may send before the controller works on
//! it. A token bucket per fleet node (a name outside the fleet is refused before it gets
//! one, so a hostile path cannot grow the table).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Heartbeats a node's agent may send per second, on average. A live agent sends one per
/// answer: at most a few a second while orders or exits come quickly, one per held poll
/// otherwise. Over it the heartbeat is answered 429 and the agent tries again a moment later.
pub const HEARTBEATS_PER_S: u32 = 5;

/// Heartbeats a node may send at once above that pace (a burst of exits, a reconnect).
pub const HEARTBEAT_BURST: u32 = 25;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by node.
#[derive(Debug, Default)]
pub struct NodeRates {
    buckets: Mutex<BTreeMap<String, Bucket>>,
}

impl NodeRates {
    /// May `node` send one more now? Takes a token if so.
    pub fn allow(&self, node: &str, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().expect("not poisoned");
        let full = f64::from(HEARTBEAT_BURST);
        let bucket = buckets.entry(node.to_string()).or_insert(Bucket { tokens: full, at: now });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * f64::from(HEARTBEATS_PER_S);
        bucket.tokens = (bucket.tokens + refill).min(full);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

/// How long until a refused node may send again (for the answer's words).
pub fn retry_after() -> Duration {
    Duration::from_secs_f64(1.0 / f64::from(HEARTBEATS_PER_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_gets_its_burst_then_its_pace_and_others_are_not_held_back() {
        let rates = NodeRates::default();
        let t0 = Instant::now();
        let burst = (0..100).take_while(|_| rates.allow("n1", t0)).count();
        assert_eq!(burst, HEARTBEAT_BURST as usize);
        assert!(rates.allow("n2", t0), "another node has its own bucket");
        // A second later: the pace's worth again, no more.
        let later = t0 + Duration::from_secs(1);
        let paced = (0..100).take_while(|_| rates.allow("n1", later)).count();
        assert_eq!(paced, HEARTBEATS_PER_S as usize);
        // Idle for a long time: a full burst, not more.
        let much_later = later + Duration::from_secs(3600);
        assert_eq!((0..100).take_while(|_| rates.allow("n1", much_later)).count(), HEARTBEAT_BURST as usize);
    }
}
