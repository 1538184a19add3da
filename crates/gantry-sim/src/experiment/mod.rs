//! Experiments as the command line runs them, so the binary only parses arguments and prints:
//! Protocol A sweeps over pod lists, policies and seeds ([`sweep`]); the reference
//! simulator's files to compare with ([`reference`]); the queue tree a replay's fair share
//! orders by ([`queue_tree`]); the text summary of a replay ([`summary`]); and the report
//! folders, CSVs and JSON a run leaves ([`output`]). Independent runs spread over the cores
//! ([`parallel`]); each is deterministic on its own.

pub mod output;
pub mod parallel;
pub mod reference;
pub mod summary;
pub mod sweep;

use gantry_types::QueueTree;
use std::path::Path;

/// A queue file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum QueueFileError {
    #[error("cannot read queue file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: {error}")]
    Invalid { path: String, error: gantry_spec::SpecError },
}

/// The queue tree a replay's fair share orders by: the queue file, or one queue per tenant
/// (equal weights, default half-life and starvation bound).
pub fn queue_tree<'a>(
    queues: Option<&Path>,
    tenants: impl Iterator<Item = &'a str>,
) -> Result<QueueTree, QueueFileError> {
    let Some(path) = queues else {
        let mut names: Vec<&str> = tenants.collect();
        names.sort_unstable();
        names.dedup();
        return Ok(QueueTree::flat(names, gantry_spec::HALF_LIFE_DEFAULT_S, gantry_spec::STARVATION_DEFAULT_S));
    };
    let at = || path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| QueueFileError::Read { path: at(), error })?;
    gantry_spec::parse_queues(&text, gantry_catalog::Catalog::embedded())
        .map_err(|error| QueueFileError::Invalid { path: at(), error })
}
