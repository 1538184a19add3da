//! The what-if analysis end to end: the history as it happened, gantry's replay of the same
//! arrivals on today's fleet, the best MIG layout planned for the history's demand, and the
//! fewest GPUs that would have sufficed — each replay run here, reduced by the arithmetic in
//! the parent module.

use super::{Column, Run, columns, history, replayed, sufficed};
use crate::SimError;
use crate::native::{DemandOf, concurrent_demand};
use crate::protocol_b::{ReplayOptions, run_trace};
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_spec::TraceJob;
use gantry_types::Fleet;

/// The report's columns (history if recorded, gantry, gantry with a MIG plan) and the
/// smallest fleet that sufficed, if any.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub columns: Vec<Column>,
    pub sufficed: Option<Column>,
}

/// Run every replay the report needs under `options` (the order, the backfill).
pub fn analyse(
    fleet: &Fleet,
    catalog: &'static Catalog,
    jobs: &[TraceJob],
    options: &ReplayOptions,
) -> Result<Analysis, SimError> {
    let mut runs: Vec<Run> = history(fleet, catalog, jobs).into_iter().collect();
    let replay = |name: &str, fleet: &Fleet| -> Result<Run, SimError> {
        let r = run_trace(fleet, catalog, jobs, Policy::Default, 0, options)?;
        Ok(replayed(name, fleet, jobs, &r))
    };
    let gantry = replay("gantry", fleet)?;
    runs.push(gantry.clone());
    runs.push(best_plan(fleet, catalog, jobs, &replay, &gantry)?);
    let columns = columns(&runs);
    let sufficed = sufficed(fleet, catalog, jobs, options, &columns[0], &gantry)?;
    Ok(Analysis { columns, sufficed })
}

/// The MIG layout to show: the planner's plans for the history's demand counted three ways
/// (mean concurrency per shape; the same with every shape at least once; peak), each replayed,
/// and the one that starts the most jobs with the shortest p90 wait kept — a static plan
/// cannot serve at once what ran at different times, and the replay is what tells which
/// compromise serves the history best. Today's layout (`today`, its replay already run) is a
/// candidate too: when no plan does better, the column says so.
fn best_plan(
    fleet: &Fleet,
    catalog: &'static Catalog,
    jobs: &[TraceJob],
    replay: &dyn Fn(&str, &Fleet) -> Result<Run, SimError>,
    today: &Run,
) -> Result<Run, SimError> {
    let today = Run { name: "gantry + MIG plan (today's layout is best)".into(), ..today.clone() };
    let score = |run: &Run| {
        let column = columns(std::slice::from_ref(run)).remove(0);
        (column.started, std::cmp::Reverse(column.waits.p90_s))
    };
    let today_score = score(&today);
    let mut best = (today, today_score);
    let mut tried: Vec<Fleet> = vec![fleet.clone()];
    let ways = [(DemandOf::Mean, "mean"), (DemandOf::MeanEveryShape, "mean, every shape"), (DemandOf::Peak, "peak")];
    for (how, label) in ways {
        let demand = concurrent_demand(jobs, how);
        if demand.is_empty() {
            continue;
        }
        let plan = gantry_engine::plan::plan(fleet, &demand, catalog)?;
        if tried.contains(&plan.fleet) {
            continue;
        }
        tried.push(plan.fleet.clone());
        let name = format!("gantry + MIG plan ({} GPUs change, {label} demand)", plan.reconfigured);
        let run = replay(&name, &plan.fleet)?;
        let run_score = score(&run);
        if run_score > best.1 {
            best = (run, run_score);
        }
    }
    Ok(best.0)
}
