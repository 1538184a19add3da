//! The native trace (JSON lines, `gantry_spec::read_trace`) on a fleet file: the checks a
//! trace needs against the fleet before a replay. A job that could not run on the empty
//! fleet would wait forever and skew every delay figure, so it is refused up front (strict)
//! or skipped and counted (lenient), like an Alibaba pod larger than any node.

use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, EngineError};
use gantry_spec::TraceJob;
use gantry_types::{Fleet, JobOutcome};
use std::collections::BTreeMap;

/// Lenient mode's count of jobs that could never run on the empty fleet.
pub const SKIPPED_NEVER_FITS: &str = "job can never run on this fleet";
/// Lenient mode's count of jobs that ask only for GPU models the fleet lacks (counted apart:
/// the fleet file may be what is wrong).
pub const SKIPPED_NO_MODEL: &str = "job asks for a GPU model the fleet lacks";

/// Jobs that fit the empty fleet, and (lenient) the ones skipped by reason.
pub fn check_fits(
    fleet: &Fleet,
    catalog: &'static Catalog,
    jobs: Vec<TraceJob>,
    lenient: bool,
) -> Result<(Vec<TraceJob>, BTreeMap<String, u64>), crate::SimError> {
    let mut engine = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| e.to_string())?;
    let mut kept = Vec::with_capacity(jobs.len());
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for t in jobs {
        let outcome =
            engine.compile(&t.job).map_err(|e: EngineError| (SKIPPED_NEVER_FITS, e.to_string())).and_then(|compiled| {
                match engine.place_outcome(&compiled) {
                    (Some(id), _) => {
                        engine.release(id).map_err(|e| (SKIPPED_NEVER_FITS, e.to_string()))?;
                        Ok(())
                    }
                    (None, JobOutcome::Unplaced { reasons }) => {
                        let why: Vec<String> = reasons.iter().map(|r| r.reason.to_string()).collect();
                        let no_model =
                            reasons.iter().all(|r| matches!(r.reason, gantry_types::Reason::GpuModelMismatch { .. }));
                        Err((
                            if no_model { SKIPPED_NO_MODEL } else { SKIPPED_NEVER_FITS },
                            format!("can never run on this fleet, even empty: {}", why.join("; ")),
                        ))
                    }
                    (None, JobOutcome::Placed { .. }) => unreachable!("place_outcome pairs no id with Unplaced"),
                }
            });
        match outcome {
            Ok(()) => kept.push(t),
            Err((kind, _)) if lenient => *skipped.entry(kind.into()).or_default() += 1,
            Err((_, why)) => return Err(format!("line {} / job {:?}: {why}", t.line, t.job.name).into()),
        }
    }
    if kept.is_empty() {
        return Err("no job of the trace can run on this fleet".into());
    }
    Ok((kept, skipped))
}

/// How a trace becomes a planning demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemandOf {
    /// Per job shape, its mean concurrency over the trace (total run time ÷ the trace's span).
    Mean,
    /// Per job shape, the most of it ever running at once (if each started on arrival).
    Peak,
    /// As `Mean`, but every shape at least once: a plan for it leaves no shape of the trace
    /// without a unit to run on (a rare MIG profile rounded to zero would never start again).
    MeanEveryShape,
}

/// A trace as a demand for the planner: jobs with the same resource requests are one shape,
/// and each shape appears as many times as it is concurrent (mean or peak, rounded), named
/// `<first job of the shape>~<k>`. A job without a duration runs to the trace's end.
pub fn concurrent_demand(jobs: &[TraceJob], how: DemandOf) -> Vec<gantry_types::Job> {
    let Some(start) = jobs.iter().map(|t| t.arrival_s).min() else { return Vec::new() };
    let end = jobs.iter().map(|t| t.arrival_s + t.duration_s.unwrap_or(0)).max().unwrap_or(start).max(start + 1);
    // Shapes in first-seen order: (key, representative, spans).
    type Shape<'t> = (String, &'t gantry_types::Job, Vec<(u64, u64)>);
    let mut shapes: Vec<Shape<'_>> = Vec::new();
    for t in jobs {
        let key = format!("{:?}", t.job.groups.iter().map(|g| (g.replicas, &g.resources)).collect::<Vec<_>>());
        let until = t.duration_s.map_or(end, |d| t.arrival_s + d);
        match shapes.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.2.push((t.arrival_s, until)),
            None => shapes.push((key, &t.job, vec![(t.arrival_s, until)])),
        }
    }
    let mut out = Vec::new();
    for (_, job, spans) in shapes {
        let copies = match how {
            DemandOf::Mean | DemandOf::MeanEveryShape => {
                let mean =
                    (spans.iter().map(|(a, b)| (b - a) as f64).sum::<f64>() / (end - start) as f64).round() as usize;
                if how == DemandOf::MeanEveryShape { mean.max(1) } else { mean }
            }
            DemandOf::Peak => {
                let mut edges: Vec<(u64, i64)> = spans.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
                edges.sort_unstable_by_key(|&(t, d)| (t, d)); // ends before starts at the same second
                let mut now = 0i64;
                edges
                    .iter()
                    .map(|&(_, d)| {
                        now += d;
                        now
                    })
                    .max()
                    .unwrap_or(0)
                    .max(0) as usize
            }
        };
        for k in 0..copies {
            let mut copy = job.clone();
            copy.name = format!("{}~{k}", job.name);
            out.push(copy);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(text: &str) -> Vec<TraceJob> {
        gantry_spec::read_trace(text.as_bytes(), Catalog::embedded(), false).expect("trace").jobs
    }

    #[test]
    fn a_trace_becomes_its_mean_or_peak_concurrency_per_shape() {
        // Over 0..1000 s: two MIG jobs of 500 s each, overlapping (mean 1, peak 2); a whole
        // GPU job all along (mean 1, peak 1); a short one of another shape (mean 0, peak 1).
        let jobs = trace(
            r#"{"arrival_s": 0, "duration_s": 500, "job": {"name": "a", "gpu": {"mig": "1g.10gb"}}}
{"arrival_s": 100, "duration_s": 500, "job": {"name": "b", "gpu": {"mig": "1g.10gb"}}}
{"arrival_s": 0, "duration_s": 1000, "job": {"name": "w", "gpu": {"count": 1}}}
{"arrival_s": 900, "duration_s": 10, "job": {"name": "s", "gpu": {"mig": "3g.40gb"}}}
"#,
        );
        let names = |how| concurrent_demand(&jobs, how).into_iter().map(|j| j.name).collect::<Vec<_>>();
        assert_eq!(names(DemandOf::Mean), ["a~0", "w~0"]);
        assert_eq!(names(DemandOf::Peak), ["a~0", "a~1", "w~0", "s~0"]);
        assert_eq!(names(DemandOf::MeanEveryShape), ["a~0", "w~0", "s~0"]);
        assert!(concurrent_demand(&[], DemandOf::Peak).is_empty());
    }
}
