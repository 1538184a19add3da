//! The controller's side of the agent protocol, whatever carries it: an agent registers, and
//! heartbeats — its report in, its orders out, held (a long poll) while there is nothing to
//! order. The HTTP handlers (`api/agents.rs`, for remote agents) and the in-process link of
//! `serve --local`'s agents (`local_agents.rs`) both call these two functions with the body
//! the agent sent; neither goes through the other.

use crate::Shared;
use crate::auth::Principal;
use crate::control::{Command, Reply};
use crate::error::ControlError;
use crate::wire::{Heartbeat, Orders, Register, Registered, TaskKey, TaskState};

/// A reply of the wrong kind for its command: a bug.
fn unexpected(reply: Reply) -> ControlError {
    ControlError::Internal(format!("unexpected reply {reply:?}"))
}

/// An agent registers.
pub async fn register(shared: &Shared, who: Principal, body: &str) -> Result<Registered, ControlError> {
    who.agent_only("registering an agent")?;
    let registration: Register =
        serde_json::from_str(body).map_err(|e| ControlError::request("body", format!("agent registration: {e}")))?;
    match shared.execute(Command::Register { who, registration }).await? {
        Reply::Registered(registered) => Ok(registered),
        other => Err(unexpected(other)),
    }
}

/// An agent's heartbeat: its report in, its orders out, held up to `wait_ms` when there is
/// nothing to order.
pub async fn heartbeat(shared: &Shared, who: Principal, node: String, body: &str) -> Result<Orders, ControlError> {
    who.agent_only("heartbeats")?;
    let beat: Heartbeat =
        serde_json::from_str(body).map_err(|e| ControlError::request("body", format!("heartbeat: {e}")))?;
    let wait = shared.read(|c| c.hold_limit(beat.wait_ms));
    let stopping: Vec<TaskKey> = beat.tasks.iter().filter(|t| t.stopping).map(|t| t.key.clone()).collect();
    let reported_exits = beat.tasks.iter().any(|t| t.state != TaskState::Running);
    // Listen for new orders before looking, so none slips between the look and the wait.
    // Only a fleet node gets a wake-up (a hostile path must not grow the table).
    if !shared.read(|c| c.knows_node(&node)) {
        return Err(ControlError::Conflict(format!(
            "no agent is registered for node {node:?} (since the controller started): register first"
        )));
    }
    if !shared.heartbeat_rates.allow(&node, std::time::Instant::now()) {
        return Err(ControlError::TooMany {
            limit: "heartbeats_per_second",
            value: u64::from(crate::rate::HEARTBEATS_PER_S),
            message: format!(
                "node {node:?} heartbeats faster than the controller takes them; try again in {} ms",
                crate::rate::retry_after().as_millis()
            ),
        });
    }
    let wake = shared.agents_wake.of(&node);
    let notified = wake.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let mut orders = match shared.execute(Command::Heartbeat { who, node: node.clone(), beat }).await? {
        Reply::Orders(orders) => orders,
        other => return Err(unexpected(other)),
    };
    orders.log_reads = shared.output.for_node(&node);
    orders.signals = shared.signals.take(&node);
    if reported_exits {
        // Capacity came back: schedule now rather than at the next tick.
        shared.wake.notify_one();
    }
    if !orders.is_empty() || wait.is_zero() {
        return Ok(orders);
    }
    let _ = tokio::time::timeout(wait, notified).await;
    let mut orders = shared.read_durable(|c| c.agent_orders(&node, &stopping)).await?;
    orders.log_reads = shared.output.for_node(&node);
    orders.signals = shared.signals.take(&node);
    Ok(orders)
}
