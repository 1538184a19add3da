//! A preemptor starts on what its victims free, once they are gone: starting elsewhere first
//! would waste every stop it caused (the victims are already signalled). Bounded by the
//! victims' grace periods (`until_s`).

use super::{Ask, Refusal};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check(s: &mut Scheduler, ask: &Ask) -> Result<(), Refusal> {
    let Some(a) = s.awaiting.get(&ask.job) else { return Ok(()) };
    let victims = a.victims.iter().filter(|v| s.terminating.contains_key(v)).count() as u32;
    if victims == 0 {
        return Ok(());
    }
    Err(Refusal::alone(PendingReason::Preempting { victims, until_s: a.until }))
}
