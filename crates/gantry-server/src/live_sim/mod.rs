//! The live controller in simulated time: the same state machine `gantry serve` runs, driven
//! by a simulated clock ([`clock`]) instead of the wall clock, with simulated tasks instead of
//! processes. Two drivers feed it: a native trace ([`trace`], `gantry sim --trace T --live`)
//! and the MIG evaluation's week with the controller's own reconfiguration ([`mig_week`],
//! `gantry plan --evaluate --live`, told by [`mig_week_report`]). Nothing here decides: a driver only feeds commands at
//! their instants, ticks the controller, and reads what it did.

mod clock;
pub mod mig_week;
pub mod mig_week_report;
pub mod trace;

pub use trace::{LiveEvent, LiveResult, run};
