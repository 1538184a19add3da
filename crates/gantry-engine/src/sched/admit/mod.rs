//! May a waiting job start now? A sequence of small checks, each in its own file with its
//! bound, in the order the Kubernetes scheduler framework's extension points or Nomad's
//! iterator stack would run them: feasibility first (nothing taken), then placement, then
//! the checks that need the candidate allocation (a refusal there releases it).
//!
//! - before placement, with [`BeforePlacement`]'s signature: victims still stopping
//!   ([`preempting`]), an array's running cap ([`array`]), the user's running jobs
//!   ([`user_limit`]);
//! - placement ([`placement`]): where the job would run, on the GPUs its plan holds for it
//!   when it is a preemptor or a reserved job whose start has come;
//! - after placement, with [`AfterPlacement`]'s signature: the user's GPUs ([`user_limit`]),
//!   quota and reclaim ([`quota`]), a spent preemption budget ([`budget`]), capacity freed for a preemptor ([`preemptor_room`]), and
//!   the reserved starts it must not delay ([`reservation`]).
//!
//! A check refuses with a [`Refusal`] (the typed reason, whether the queue is blocked behind
//! the job, the placement work spent), or lets the candidate go on, recording in [`Go`] the
//! promises it pushes back by a higher right.

mod array;
mod budget;
mod placement;
mod preempting;
mod preemptor_room;
mod quota;
mod reservation;
mod user_limit;

pub(super) use reservation::running_list;

use super::{JobId, Scheduler};
use crate::AllocId;
use crate::backfill::{Reservation, Shadow};
use gantry_types::{Flavor, PendingReason, UserLimit};

/// The cycle's reservations: none, one on a shadow, or several planned in order.
#[derive(Default)]
pub(super) struct Reservations {
    pub one: Option<((JobId, u64), Shadow)>,
    pub plans: Vec<(JobId, Reservation)>,
    /// Candidates checked this cycle against plans on nodes they share (at most
    /// [`super::RESERVATION_CHECKS_MAX`]).
    pub checks: usize,
}

/// What a refused job's refusal means for the cycle.
pub(super) struct Refusal {
    pub reason: PendingReason,
    /// Its queue is blocked behind it (resources, quota, reservations); a user limit or an
    /// array throttle concerns this job alone.
    pub blocks_queue: bool,
    /// Placement work done (0: none tried), counted against the backfill bound.
    pub work: u64,
    /// Refused for delaying the one reservation (`Reservations::one`), with no right over it:
    /// every later job of its queue and request not known to end by the reserved start gets
    /// the same answer until something starts (`pass.rs` jumps over them).
    pub delays_one: bool,
}

impl Refusal {
    /// A refusal that concerns this job alone, before any placement.
    fn alone(reason: PendingReason) -> Refusal {
        Refusal { reason, blocks_queue: false, work: 0, delays_one: false }
    }
}

/// A job that may start: its allocation, milli-GPU, quota demand, and the promises its start
/// pushes back by a higher right (reserved job, the right).
pub(super) struct Go {
    pub alloc: AllocId,
    pub milli: u64,
    pub demand: Vec<(Flavor, u64)>,
    pub displaced: Vec<(JobId, &'static str)>,
    pub work: u64,
}

/// The job asked about, and what the checks read of it once.
pub(super) struct Ask {
    pub job: JobId,
    pub now: u64,
    /// Its user's limits under fair share, with what the user runs now (jobs, milli-GPU).
    pub user: Option<(String, UserLimit, (u32, u64))>,
    /// Preemptors (other than this job) whose planned GPUs are free once their victims are
    /// gone, as of before the placement.
    pub protected: Vec<JobId>,
}

/// A check before placement: nothing is taken yet.
type BeforePlacement = fn(&mut Scheduler, &Ask) -> Result<(), Refusal>;

/// A check on the placed candidate: a refusal releases it.
type AfterPlacement = fn(&mut Scheduler, &Ask, &mut Go, &mut Reservations) -> Result<(), Refusal>;

const BEFORE_PLACEMENT: [BeforePlacement; 3] = [preempting::check, array::check, user_limit::check_jobs];

const AFTER_PLACEMENT: [AfterPlacement; 5] =
    [user_limit::check_gpus, quota::check, budget::check, preemptor_room::check, reservation::check];

impl Scheduler {
    /// Try to start `job` now. On success: what it holds and the promises it pushes back by
    /// a higher right (not yet recorded). On refusal: why, and whether that blocks its queue.
    pub(super) fn try_start(&mut self, job: JobId, now: u64, reservations: &mut Reservations) -> Result<Go, Refusal> {
        let mut ask = self.ask(job, now);
        for check in BEFORE_PLACEMENT {
            check(self, &ask)?;
        }
        ask.protected = self.protected_preemptors(job, now);
        let mut go = placement::place(self, &ask, reservations)?;
        for check in AFTER_PLACEMENT {
            if let Err(refusal) = check(self, &ask, &mut go, reservations) {
                self.engine.release(go.alloc).expect("just placed");
                return Err(Refusal { work: go.work, ..refusal });
            }
        }
        Ok(go)
    }

    fn ask(&self, job: JobId, now: u64) -> Ask {
        let user = match (&self.jobs[&job].job.control.user, &self.config.order) {
            (Some(user), super::Order::FairShare(tree)) => {
                let running = self.user_running.get(user).copied().unwrap_or_default();
                Some((user.clone(), tree.user_limit(user), running))
            }
            _ => None,
        };
        Ask { job, now, user, protected: Vec::new() }
    }
}
