//! The node agent's machine-facing pieces: GPU discovery ([`discover`]) with how the GPUs
//! connect ([`topology`]), and utilization samples ([`sample`]), through NVML, loaded at run time. The agent's loop itself (register,
//! heartbeat, run tasks) lives in `gantry-server` beside the runner it shares with the
//! in-process agent.

pub mod discover;
pub mod mig;
pub mod mig_nvml;
pub mod sample;
pub mod topology;
