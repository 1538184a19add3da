//! A small fleet and whole-GPU jobs for the engine's unit tests that plan on copies
//! (reservations, preemption): one place, so their fleets stay alike.

use crate::{CompiledJob, Engine};
use gantry_catalog::Catalog;

/// `nodes` nodes of 4 A100s, 64 CPUs and 512 GiB each.
pub(crate) fn a100_engine(nodes: u32) -> Engine {
    let fleet = format!(
        "[[node]]\nname = \"n\"\ncount = {nodes}\ncpu = 64\nmemory = \"512GiB\"\n\
         [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n"
    );
    let fleet = gantry_spec::parse_fleet(&fleet, Catalog::embedded()).expect("fleet");
    Engine::new(&fleet, Catalog::embedded(), Default::default()).expect("engine")
}

/// A job of `replicas` tasks of `gpus` whole GPUs each, compiled for `engine`.
pub(crate) fn whole_gpu_job(engine: &Engine, gpus: u32, replicas: u32) -> CompiledJob {
    let text = format!("[[job]]\nname = \"j\"\nreplicas = {replicas}\ngpu = {{ count = {gpus} }}\n");
    let spec = gantry_spec::parse_workload(&text, Catalog::embedded()).expect("job").remove(0);
    engine.compile(&spec).expect("compiles")
}
