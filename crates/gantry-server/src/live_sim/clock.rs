//! The simulated clock the live controller runs on in simulated time: things due at instants
//! (a task's exit, an arrival, a layout applied — each driver has its own kinds), and the
//! controller's own wake-ups. At each instant everything due is taken together, in the kinds'
//! order, and the driver then ticks the controller once; a wake-up only brings that tick.

use crate::control::Controller;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// Something due at an instant: one of the driver's kinds, or a wake-up (after all of them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Slot<D> {
    Due(D),
    Wake,
}

/// What is due when, earliest first.
#[derive(Debug)]
pub(super) struct VirtualClock<D: Ord> {
    due: BinaryHeap<Reverse<(u64, Slot<D>)>>,
    /// Instants a wake-up is already due at (so one is not queued twice).
    wakes: BTreeSet<u64>,
}

impl<D: Ord> VirtualClock<D> {
    pub(super) fn new(due: impl IntoIterator<Item = (u64, D)>) -> Self {
        let due = due.into_iter().map(|(t, d)| Reverse((t, Slot::Due(d)))).collect();
        VirtualClock { due, wakes: BTreeSet::new() }
    }

    /// `item` is due at `t`.
    pub(super) fn at(&mut self, t: u64, item: D) {
        self.due.push(Reverse((t, Slot::Due(item))));
    }

    /// Tick the controller at `t` even if nothing else is due then.
    pub(super) fn wake(&mut self, t: u64) {
        if self.wakes.insert(t) {
            self.due.push(Reverse((t, Slot::Wake)));
        }
    }

    /// After the tick at `now`: wake at the controller's next wake-up, if it has a later one.
    pub(super) fn wake_for(&mut self, controller: &Controller, now: u64) {
        if let Some(at) = controller.next_wake(now).filter(|&at| at > now) {
            self.wake(at);
        }
    }

    /// The next instant no later than `until`, with everything due then in the kinds' order
    /// (wake-ups left out: the tick that follows is what they are for); `None` when nothing is.
    pub(super) fn next_instant(&mut self, until: u64) -> Option<(u64, Vec<D>)> {
        let Reverse((t, _)) = self.due.peek()?;
        let t = *t;
        if t > until {
            return None;
        }
        let mut now = Vec::new();
        while self.due.peek().is_some_and(|Reverse((next, _))| *next == t) {
            now.push(self.due.pop().expect("peeked").0.1);
        }
        now.sort();
        Some((t, now.into_iter().filter_map(|slot| if let Slot::Due(d) = slot { Some(d) } else { None }).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_brings_everything_due_then_in_order_and_wakes_only_once() {
        let mut clock = VirtualClock::new([(5, 'b'), (5, 'a'), (9, 'c')]);
        clock.wake(5);
        clock.wake(7);
        clock.wake(7);
        assert_eq!(clock.next_instant(u64::MAX), Some((5, vec!['a', 'b'])));
        assert_eq!(clock.next_instant(u64::MAX), Some((7, vec![])));
        assert_eq!(clock.next_instant(8), None, "nothing due by 8");
        assert_eq!(clock.next_instant(9), Some((9, vec!['c'])));
        assert_eq!(clock.next_instant(u64::MAX), None);
    }
}
