//! A job array's running cap (`max_running`, Slurm's `%N`): at most that many of its tasks
//! run at once; the rest wait without blocking their queue.

use super::{Ask, Refusal};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check(s: &mut Scheduler, ask: &Ask) -> Result<(), Refusal> {
    let Some(a) = &s.jobs[&ask.job].job.control.array else { return Ok(()) };
    let Some(max) = a.max_running else { return Ok(()) };
    if s.array_running.get(&a.array).copied().unwrap_or(0) < max {
        return Ok(());
    }
    Err(Refusal::alone(PendingReason::ArrayThrottle { array: a.array.clone(), max_running: max }))
}
