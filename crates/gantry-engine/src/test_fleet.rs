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

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks of a group with `distinct_nodes` each take a node of their own, even where one
    /// node could hold them all (where packing would put them); a group that cannot spread
    /// that wide does not start.
    #[test]
    fn distinct_nodes_spread_a_groups_tasks_one_per_node() {
        let nodes_of = |engine: &mut Engine, distinct: bool, replicas: u32| {
            let text = format!(
                "[[job]]\nname = \"j\"\n[[job.task]]\nname = \"slot\"\nreplicas = {replicas}\ndistinct_nodes = {distinct}\ngpu = {{ count = 1 }}\n"
            );
            let spec = gantry_spec::parse_workload(&text, Catalog::embedded()).expect("job").remove(0);
            let job = engine.compile(&spec).expect("compiles");
            let id = engine.place(&job).ok()?;
            let mut nodes: Vec<String> =
                engine.placement(id, &job).expect("placed").iter().map(|t| t.node.clone()).collect();
            engine.release(id).expect("released");
            nodes.sort();
            nodes.dedup();
            Some(nodes.len())
        };
        let mut engine = a100_engine(3);
        assert_eq!(nodes_of(&mut engine, false, 2), Some(1), "packed");
        assert_eq!(nodes_of(&mut engine, true, 2), Some(2), "spread");
        assert_eq!(nodes_of(&mut engine, true, 3), Some(3));
        assert_eq!(nodes_of(&mut engine, true, 4), None, "three nodes hold at most three");
    }

    /// A group with a node selector lands only on nodes with those labels, and a selector no
    /// node matches never starts.
    #[test]
    fn a_node_selector_keeps_tasks_on_labelled_nodes() {
        let fleet = "[[node]]\nname = \"plain\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n\
                     [[node]]\nname = \"ib\"\ncpu = 64\nmemory = \"512GiB\"\nlabels = { \"slurm.feature/ib\" = \"true\" }\n\
                     [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
        let fleet = gantry_spec::parse_fleet(fleet, Catalog::embedded()).expect("fleet");
        let mut engine = Engine::new(&fleet, Catalog::embedded(), Default::default()).expect("engine");
        let mut place = |selector: &str| {
            let text = format!(
                "[[job]]\nname = \"j\"\n[[job.task]]\nname = \"t\"\nnode_selector = {{ {selector} }}\ngpu = {{ count = 1 }}\n"
            );
            let spec = gantry_spec::parse_workload(&text, Catalog::embedded()).expect("job").remove(0);
            let job = engine.compile(&spec).expect("compiles");
            let id = engine.place(&job).ok()?;
            let node = engine.placement(id, &job).expect("placed")[0].node.clone();
            engine.release(id).expect("released");
            Some(node)
        };
        assert_eq!(place("").as_deref(), Some("plain"), "packing starts at the first node");
        assert_eq!(place("\"slurm.feature/ib\" = \"true\"").as_deref(), Some("ib"));
        assert_eq!(place("\"slurm.feature/nvl\" = \"true\""), None);
    }

    /// A group that takes whole nodes gets every CPU, all memory and every GPU of an idle
    /// node (what Slurm's `--exclusive` allocates), never a node holding other work, and
    /// nothing else is placed beside it; releasing it gives the node back whole.
    #[test]
    fn an_exclusive_task_takes_a_whole_idle_node_and_shares_it_with_nothing() {
        let mut engine = a100_engine(2);
        let compile = |engine: &Engine, exclusive: bool| {
            let text = format!(
                "[[job]]\nname = \"j\"\n[[job.task]]\nname = \"t\"\nexclusive_node = {exclusive}\ncpu = 2\ngpu = {{ count = 1 }}\n"
            );
            let spec = gantry_spec::parse_workload(&text, Catalog::embedded()).expect("job").remove(0);
            engine.compile(&spec).expect("compiles")
        };
        let (small, whole) = (compile(&engine, false), compile(&engine, true));
        let one = engine.place(&small).expect("a small job");
        let small_node = engine.placement(one, &small).expect("placed")[0].node.clone();
        let ex = engine.place(&whole).expect("the idle node");
        let placed = engine.placement(ex, &whole).expect("placed");
        assert_ne!(placed[0].node, small_node, "not beside the small job");
        assert_eq!((placed[0].cpu.0, placed[0].gpus.len()), (64_000, 4), "every CPU and GPU: {placed:?}");
        assert_eq!(placed[0].memory.0, 512 << 30);
        assert!(engine.place(&whole).is_err(), "no idle node is left");
        let two = engine.place(&small).expect("beside the first small job");
        let second = engine.placement(two, &small).expect("placed")[0].node.clone();
        assert_eq!(second, small_node, "never beside the exclusive one");
        engine.release(ex).expect("released");
        engine.release(two).expect("released");
        engine.release(one).expect("released");
        let again = engine.place(&whole).expect("a whole node again");
        assert_eq!(engine.placement(again, &whole).expect("placed")[0].gpus.len(), 4);
    }
}
