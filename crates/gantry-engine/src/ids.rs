//! The dense indices the engine's state is laid out by, in a file of their own so that the
//! free-capacity index and the state both use them without using each other.

/// Dense node index.
pub type NodeIdx = u32;
/// Dense GPU index (fleet-wide).
pub type GpuIdx = u32;
