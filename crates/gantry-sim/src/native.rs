//! The native trace (JSON lines, `gantry_spec::read_trace`) on a fleet file: the checks a
//! trace needs against the fleet before a replay. A job that could not run on the empty
//! fleet would wait forever and skew every delay figure, so it is refused up front (strict)
//! or skipped and counted (lenient), like an Alibaba pod larger than any node.

use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, EngineError};
use gantry_spec::TraceJob;
use gantry_types::{Fleet, JobOutcome};
use std::collections::BTreeMap;

/// Jobs that fit the empty fleet, and (lenient) the ones skipped by reason.
pub fn check_fits(
    fleet: &Fleet,
    catalog: &'static Catalog,
    jobs: Vec<TraceJob>,
    lenient: bool,
) -> Result<(Vec<TraceJob>, BTreeMap<String, u64>), String> {
    let mut engine = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| e.to_string())?;
    let mut kept = Vec::with_capacity(jobs.len());
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for t in jobs {
        let outcome = engine.compile(&t.job).map_err(|e: EngineError| e.to_string()).and_then(|compiled| match engine
            .place_outcome(&compiled)
        {
            (Some(id), _) => {
                engine.release(id).map_err(|e| e.to_string())?;
                Ok(())
            }
            (None, JobOutcome::Unplaced { reasons }) => {
                let why: Vec<String> = reasons.iter().map(|r| r.reason.to_string()).collect();
                Err(format!("can never run on this fleet, even empty: {}", why.join("; ")))
            }
            (None, JobOutcome::Placed { .. }) => unreachable!("place_outcome pairs no id with Unplaced"),
        });
        match outcome {
            Ok(()) => kept.push(t),
            Err(_) if lenient => *skipped.entry("job can never run on this fleet".into()).or_default() += 1,
            Err(why) => return Err(format!("line {} / job {:?}: {why}", t.line, t.job.name)),
        }
    }
    if kept.is_empty() {
        return Err("no job of the trace can run on this fleet".into());
    }
    Ok((kept, skipped))
}
