//! Spec files read from disk, bounded, each named for the messages about it; and the bundled
//! demo fleet and workload every command falls back on when given no file.

use crate::{SPEC_BYTES_MAX, SpecError, parse_fleet, parse_workload};
use gantry_catalog::Catalog;
use gantry_types::{Fleet, Job};
use std::path::Path;

/// The bundled demo fleet (`examples/demo-fleet.toml`): H100s carved into MIG slices, shared
/// GPUs, an A100 node, L4s.
pub const DEMO_FLEET: &str = include_str!("../../../examples/demo-fleet.toml");
/// The bundled demo workload (`examples/demo-workload.toml`), sized for the demo fleet.
pub const DEMO_WORKLOAD: &str = include_str!("../../../examples/demo-workload.toml");

/// A spec file that cannot be used: unreadable, too large, or not valid.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {what} file {path}: {error}")]
    Read { what: &'static str, path: String, error: std::io::Error },
    #[error("{what} file {path} is {size} bytes, the limit is {SPEC_BYTES_MAX}")]
    TooLarge { what: &'static str, path: String, size: u64 },
    #[error("cannot read {what} file {path} as UTF-8 text: {error}")]
    NotText { what: &'static str, path: String, error: std::io::Error },
    #[error("{name}: {error}")]
    Invalid { name: String, error: SpecError },
}

/// The text of a `what` file (fleet, workload), refused past [`SPEC_BYTES_MAX`] before it is read.
pub fn read_spec(path: &Path, what: &'static str) -> Result<String, FileError> {
    let at = || path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|error| FileError::Read { what, path: at(), error })?;
    if meta.len() > SPEC_BYTES_MAX as u64 {
        return Err(FileError::TooLarge { what, path: at(), size: meta.len() });
    }
    std::fs::read_to_string(path).map_err(|error| FileError::NotText { what, path: at(), error })
}

/// The fleet file at `path` (else the demo fleet), with the name messages call it by.
pub fn load_fleet(path: Option<&Path>, catalog: &Catalog) -> Result<(String, Fleet), FileError> {
    let (name, text) = match path {
        Some(p) => (p.display().to_string(), read_spec(p, "fleet")?),
        None => ("demo fleet".to_string(), DEMO_FLEET.to_string()),
    };
    let fleet = parse_fleet(&text, catalog).map_err(|error| FileError::Invalid { name: name.clone(), error })?;
    Ok((name, fleet))
}

/// The workload file at `path` (else the demo workload), with the name messages call it by.
pub fn load_workload(path: Option<&Path>, catalog: &Catalog) -> Result<(String, Vec<Job>), FileError> {
    let (name, text) = match path {
        Some(p) => (p.display().to_string(), read_spec(p, "workload")?),
        None => ("demo workload".to_string(), DEMO_WORKLOAD.to_string()),
    };
    let jobs = parse_workload(&text, catalog).map_err(|error| FileError::Invalid { name: name.clone(), error })?;
    Ok((name, jobs))
}
