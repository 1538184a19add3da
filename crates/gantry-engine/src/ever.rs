//! Could a job ever run on a fleet? The one check the live controller makes on a submission
//! and `gantry validate` makes on a workload file: placed alone on the fleet with nothing
//! running, or — for a job asking for GPUs laid out otherwise than now (MIG instances no GPU
//! is carved into, whole GPUs where MIG layouts stand, a share mode no GPU has) — placed once
//! the offline planner has laid the fleet out for that job alone (it then waits for that
//! layout: a controller with `reconfigure = "auto"` makes it).

use crate::{CompiledJob, Engine};
use gantry_catalog::Catalog;
use gantry_types::{Job, ReasonCount};
use std::collections::BTreeMap;

/// How a job that can run fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fits {
    /// On the fleet as it is laid out now.
    Now,
    /// Once GPUs are laid out for it (MIG layouts, modes).
    OnceLaidOut,
}

/// The layout check per distinct request (it plans the whole fleet, so a workload of many
/// copies of one job plans once).
#[derive(Debug, Default)]
pub struct LayoutChecks(BTreeMap<String, bool>);

/// Could `job` (`compiled` against `empty`, a fleet with nothing running) ever run there?
/// `Err`: the engine's reasons for the fleet as it is. `empty` is left as it was.
pub fn could_run(
    empty: &mut Engine,
    job: &Job,
    compiled: &CompiledJob,
    catalog: &'static Catalog,
    checks: &mut LayoutChecks,
) -> Result<Fits, Vec<ReasonCount>> {
    let reasons = match empty.place(compiled) {
        Ok(alloc) => {
            empty.release(alloc).expect("the allocation just placed");
            return Ok(Fits::Now);
        }
        Err(reasons) => reasons,
    };
    // Any GPU request: a MIG profile no GPU is carved into, whole GPUs where MIG layouts
    // stand now, a share of a mode no GPU has — a layout the planner can make holds it.
    let wants_gpu = job.groups.iter().any(|g| g.resources.gpu.is_some());
    let laid_out = wants_gpu
        && *checks.0.entry(format!("{:?}", job.groups)).or_insert_with(|| {
            crate::plan::plan(&empty.fleet_now(), std::slice::from_ref(job), catalog)
                .is_ok_and(|plan| plan.unplaced.is_empty())
        });
    if laid_out { Ok(Fits::OnceLaidOut) } else { Err(reasons) }
}

/// What [`could_run`] says of a whole workload on `empty`.
#[derive(Debug, Default)]
pub struct WorkloadVerdict {
    /// Jobs that fit once GPUs are laid out for them.
    pub once_laid_out: Vec<String>,
    /// Jobs that can never run, each with why (its first three reasons).
    pub never: Vec<(String, String)>,
}

/// Every job of a workload checked as the live controller checks a submission (what
/// `gantry validate` says of a workload against a fleet).
pub fn workload_verdict(empty: &mut Engine, jobs: &[Job], catalog: &'static Catalog) -> WorkloadVerdict {
    let mut checks = LayoutChecks::default();
    let mut verdict = WorkloadVerdict::default();
    for job in jobs {
        let compiled = match empty.compile(job) {
            Ok(c) => c,
            Err(e) => {
                verdict.never.push((job.name.clone(), e.to_string()));
                continue;
            }
        };
        match could_run(empty, job, &compiled, catalog, &mut checks) {
            Ok(Fits::Now) => {}
            Ok(Fits::OnceLaidOut) => verdict.once_laid_out.push(job.name.clone()),
            Err(reasons) => {
                let why: Vec<String> = reasons.iter().take(3).map(|r| r.reason.to_string()).collect();
                verdict.never.push((job.name.clone(), why.join("; ")));
            }
        }
    }
    verdict
}
