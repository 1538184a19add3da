//! Building engines and jobs from small TOML snippets, so each test reads like the scenario.

use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy, SearchLimits};
use gantry_types::{GpuGrant, Job, JobOutcome, TaskPlacement};

pub fn engine(fleet_toml: &str, policy: Policy) -> Engine {
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(fleet_toml, catalog).expect("test fleet is valid");
    let config = EngineConfig { policy, seed: 42, limits: SearchLimits::exhaustive(), shapes: None };
    Engine::new(&fleet, catalog, config).expect("engine builds")
}

pub fn jobs(workload_toml: &str) -> Vec<Job> {
    gantry_spec::parse_workload(workload_toml, Catalog::embedded()).expect("test workload is valid")
}

/// Place every job in order; return each outcome.
pub fn place_all(engine: &mut Engine, jobs: &[Job]) -> Vec<JobOutcome> {
    jobs.iter()
        .map(|job| {
            let compiled = engine.compile(job).expect("job compiles");
            engine.place_outcome(&compiled).1
        })
        .collect()
}

pub fn placed(outcome: &JobOutcome) -> &[TaskPlacement] {
    match outcome {
        JobOutcome::Placed { tasks } => tasks,
        JobOutcome::Unplaced { reasons } => panic!("expected a placement, got {reasons:?}"),
    }
}

pub fn whole_gpus(task: &TaskPlacement) -> Vec<u32> {
    task.gpus.iter().map(GpuGrant::gpu).collect()
}
