//! gantry's simulator: replays traces through the unchanged engine on a virtual clock.
//!
//! The key decision: the simulator owns no scheduling logic. It turns a trace into engine
//! inputs (a fleet, jobs, a task-type distribution), calls the same `Engine::place` and
//! `Engine::release` the live controller will call, and measures. A policy that wins here is
//! the code that runs in production. No async runtime, no store, no clock but the virtual one;
//! same trace, policy and seed ⇒ same result.

pub mod alibaba;
pub mod error;
pub mod experiment;
pub mod mig_day;
pub mod native;
pub mod place;
pub mod protocol_a;
pub mod protocol_b;
pub mod report;
pub mod synth;
pub mod trace;
pub mod validate;
pub mod whatif;

pub use alibaba::{Mode, Skipped, TraceError, TraceNode, TracePod};
pub use error::SimError;
pub use protocol_a::{Arrival, ProtocolA, RunResult};
pub use trace::{SimFleet, typical_shapes};
