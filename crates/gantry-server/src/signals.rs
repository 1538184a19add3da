//! Users' signals to running jobs (`POST /v1/jobs/{id}/signal`, what `scancel --signal`
//! sends): a request, authorized in the API, becomes a [`SignalOrder`] waiting for each node
//! that runs the job; the node's agent takes it with its next heartbeat's orders (its held
//! heartbeat is woken), once. Nothing of this is a command: a signal changes none of the
//! controller's state and never enters its log, so one not yet taken when the controller
//! stops is lost, as a signal to a process that is exiting is.
//!
//! Bounded: at most [`SIGNALS_WAITING_MAX`] wait per node (more: 429).

use crate::error::ControlError;
use gantry_wire::SignalOrder;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Signals one node may have waiting at once: its agent takes them all with its next
/// heartbeat, so more than this means the agent is not heartbeating, or a caller loops.
pub const SIGNALS_WAITING_MAX: usize = 64;

/// The signals waiting for agents, by node.
#[derive(Debug, Default)]
pub struct SignalQueue {
    waiting: Mutex<BTreeMap<String, Vec<SignalOrder>>>,
}

impl SignalQueue {
    /// Queue `order` for `node`.
    pub fn push(&self, node: &str, order: SignalOrder) -> Result<(), ControlError> {
        let mut waiting = self.waiting.lock().expect("not poisoned");
        let queued = waiting.entry(node.to_string()).or_default();
        if queued.len() >= SIGNALS_WAITING_MAX {
            return Err(ControlError::TooMany {
                limit: "signals_waiting",
                value: SIGNALS_WAITING_MAX as u64,
                message: format!("node {node:?} has {} signals waiting for its agent already", queued.len()),
            });
        }
        queued.push(order);
        Ok(())
    }

    /// What `node`'s agent is to deliver, taken: each signal is sent once.
    pub fn take(&self, node: &str) -> Vec<SignalOrder> {
        self.waiting.lock().expect("not poisoned").remove(node).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_taken_once_by_their_own_node_and_bounded() {
        let q = SignalQueue::default();
        let order = |job| SignalOrder { job, attempt: 0, signal: 10, all: false };
        q.push("a", order(1)).expect("queued");
        q.push("b", order(2)).expect("queued");
        assert_eq!(q.take("a"), [order(1)]);
        assert!(q.take("a").is_empty(), "sent once");
        for _ in 1..SIGNALS_WAITING_MAX {
            q.push("b", order(2)).expect("within the bound");
        }
        assert!(matches!(q.push("b", order(2)), Err(ControlError::TooMany { .. })));
        assert_eq!(q.take("b").len(), SIGNALS_WAITING_MAX);
    }
}
