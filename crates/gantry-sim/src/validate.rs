//! `gantry validate`: a fleet file and a workload file as the controller would take them, and
//! the workload against the empty fleet as a submission is checked — which jobs can never
//! run there and why, which fit once GPUs are laid out for their MIG profiles. Said in words
//! or as JSON (`--json`).

use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, EngineError};
use gantry_types::{Fleet, Job};
use serde::Serialize;
use std::fmt::Write;

/// What validation found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Validation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadSummary>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FleetSummary {
    pub file: String,
    pub nodes: usize,
    pub gpus: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkloadSummary {
    pub file: String,
    pub jobs: usize,
    pub tasks: u32,
    /// Checked against the fleet (there is one): jobs that fit once GPUs are laid out for
    /// their MIG profile, and jobs that never fit, each with why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against_fleet: Option<Verdict>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub fit_once_laid_out: Vec<String>,
    pub never: Vec<Never>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Never {
    pub job: String,
    pub why: String,
}

/// Check what was given: a fleet (file name, fleet) and a workload (file name, jobs).
pub fn check(
    fleet: Option<(&str, &Fleet)>,
    workload: Option<(&str, &[Job])>,
    catalog: &'static Catalog,
) -> Result<Validation, EngineError> {
    let mut validation = Validation::default();
    if let Some((file, f)) = fleet {
        let gpus = f.nodes.iter().map(|n| n.gpus.len()).sum();
        validation.fleet = Some(FleetSummary { file: file.into(), nodes: f.nodes.len(), gpus });
    }
    if let Some((file, jobs)) = workload {
        let against_fleet = match fleet {
            Some((_, f)) => {
                let mut empty = Engine::new(f, catalog, EngineConfig::default())?;
                let verdict = gantry_engine::ever::workload_verdict(&mut empty, jobs, catalog);
                let never = verdict.never.into_iter().map(|(job, why)| Never { job, why }).collect();
                Some(Verdict { fit_once_laid_out: verdict.once_laid_out, never })
            }
            None => None,
        };
        let tasks = jobs.iter().map(Job::task_count).sum();
        validation.workload = Some(WorkloadSummary { file: file.into(), jobs: jobs.len(), tasks, against_fleet });
    }
    Ok(validation)
}

impl Validation {
    /// Every job can run on the fleet (or no fleet was given to check against).
    pub fn ok(&self) -> bool {
        self.workload.as_ref().and_then(|w| w.against_fleet.as_ref()).is_none_or(|v| v.never.is_empty())
    }

    /// In words, as `gantry validate` prints it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(f) = &self.fleet {
            let _ = writeln!(out, "{}: ok, {} nodes, {} GPUs", f.file, f.nodes, f.gpus);
        }
        let Some(w) = &self.workload else { return out };
        let _ = writeln!(out, "{}: ok, {} jobs, {} tasks", w.file, w.jobs, w.tasks);
        let Some(v) = &w.against_fleet else { return out };
        for job in &v.fit_once_laid_out {
            let _ = writeln!(out, "  job {job:?} fits once GPUs are laid out for its MIG profile (see gantry plan)");
        }
        for n in &v.never {
            let _ = writeln!(out, "  job {:?} can never run on this fleet: {}", n.job, n.why);
        }
        if v.never.is_empty() {
            out.push_str("every job fits the empty fleet\n");
        } else {
            let _ = writeln!(out, "{} of {} jobs can never run on this fleet", v.never.len(), w.jobs);
        }
        out
    }
}
