//! The controller's clock: Unix seconds read from the wall clock once, at start, and moved on
//! by the monotonic clock from then on. Liveness (how long an agent has been silent), grace
//! periods, time limits, leases of decisions and usage all follow it, so a step of the wall
//! clock (an NTP step, a VM resumed, an operator's `date -s`) neither declares every node
//! lost nor makes a record end before it starts nor charges an hour that did not pass. It
//! never goes back: at open it is moved to at least the last time the store recorded
//! ([`not_before`]), in case the wall clock was set back while the controller was down. The
//! cost: a controller started with its wall clock wrong keeps that error until it restarts
//! (NTP's slewing still reaches it through the monotonic clock's rate).

use std::sync::Mutex;
use std::time::Instant;

/// The wall clock's seconds at `at` (`None` until first read).
struct Clock {
    anchor: Option<(u64, Instant)>,
}

impl Clock {
    fn now_s(&mut self, wall_s: impl FnOnce() -> u64) -> u64 {
        let (wall, at) = *self.anchor.get_or_insert_with(|| (wall_s(), Instant::now()));
        wall + at.elapsed().as_secs()
    }

    /// Moved on by the seconds it is behind `t`, if it is.
    fn not_before(&mut self, t: u64) -> u64 {
        let now = self.now_s(wall_s);
        let behind = t.saturating_sub(now);
        if let Some((wall, _)) = self.anchor.as_mut() {
            *wall += behind;
        }
        behind
    }
}

static CLOCK: Mutex<Clock> = Mutex::new(Clock { anchor: None });

fn wall_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Now, in Unix seconds, as the controller counts time.
pub fn now_s() -> u64 {
    CLOCK.lock().unwrap_or_else(|p| p.into_inner()).now_s(wall_s)
}

/// From now on, never earlier than `t` (the last time the store recorded).
pub fn not_before(t: u64) {
    let behind = CLOCK.lock().unwrap_or_else(|p| p.into_inner()).not_before(t);
    if behind > 0 {
        tracing::warn!(
            behind_s = behind,
            "the wall clock is behind the last time the store recorded: counting on from that time"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_the_wall_once_moves_on_and_never_back() {
        let mut clock = Clock { anchor: None };
        let a = clock.now_s(|| 1_000);
        assert_eq!(a, 1_000);
        assert_eq!(clock.now_s(|| 99_999), 1_000, "a step of the wall clock is not seen");
        assert_eq!(clock.not_before(1_100), 100);
        assert!(clock.now_s(wall_s) >= 1_100, "moved to at least the floor");
        assert_eq!(clock.not_before(500), 0, "a floor in the past changes nothing");
        assert!(now_s() > 1_700_000_000, "the process clock is in Unix seconds");
    }
}
